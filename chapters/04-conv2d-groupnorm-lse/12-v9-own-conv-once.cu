/*
 * v9: the whole model with c written once, in the conv's epilogue with its statistics
 *
 * Defect of v8: the conv's FLOPs twice, where the second pass only recomputes what the first
 * already had in registers: 1.144 ms [v8 model_fwd], at 32.7 TFLOP/s over two convs.
 * Change: pass 1 (conv-stats.cuh's k_conv_stats with STORE) also stores the tile's c, through
 * shared memory so the stores are coalesced, and v4's apply (v4_apply, a thread a position)
 * reads it back: the conv once, c written once and read once.
 * Prediction: 18.7 GFLOP of conv, plus 1040 MB of DRAM traffic (c written and read) and y. The
 * write is issued while pass 1 computes (520 MB in pass 1's time is under half the copy
 * ceiling), the read is v4's apply alone, about 0.19 ms: so pass 1 plus 0.19 ms, about 0.75 ms
 * if pass 1 keeps v8's speed. The lesson of the pair: 18.7 GFLOP take 0.28 ms at the FMA peak,
 * 1040 MB take 0.35 ms at the copy ceiling; at the speed our conv reaches (v8), recomputing
 * costs more than storing. A conv at the FMA peak would reverse it.
 * Measured (H100 80GB HBM3, KernelBench shape, data/h100/ch04.csv): 0.8211 ms [0.8189 - 0.8257]
 * [v9 model_fwd median_ms min_ms max_ms], 1.39x faster than v8 [v8/v9 model_fwd], 1.85x faster
 * [v4/v9 model_fwd] than v4's whole model and 2.92x faster [compile/v9 model_fwd] than
 * torch.compile's in fp32 (1.94x [compile model_fwd default / v9 model_fwd] its default
 * precision's): the 1.0 ms target is met. The store is not free (Nsight Compute: pass 1 takes
 * 13% longer with it), and c crosses DRAM twice, once each way, as designed: this version gives
 * up the aim that only y leaves the chip, and is faster for it. Left: an L2-resident ring (c of a
 * few samples written into L2 and read back before eviction, v6's teams with the conv as
 * producer) would keep the single conv without the 1040 MB.
 */
#include "conv-stats.cuh"
#include "model.h"

#define CT_STAGE (CT_THREADS / 32 * CT_SLICE_CH * CT_SEG * 4) /* 32 KB: a warp's tile of c */

void v9_launch(const run_ctx *r, int scope)
{
    (void)scope; /* whole model only */
    static int per_sm;
    const shape *s = &r->sh;
    int segs = tile_segs(s), tiles = tile_count(s), segs_total = s->n * GROUPS;
    if (!per_sm) /* static shared memory and CT_STAGE together exceed the default 48 KB */
        CUDA_CHECK(cudaFuncSetAttribute((const void *)k_conv_stats<true>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, CT_STAGE));
    k_shifts<<<ceil_div(segs_total, 128), 128, 0, r->queue>>>(r->x, r->weight, r->bias, r->shift, *s);
    k_conv_stats<true><<<resident_grid((const void *)k_conv_stats<true>, &per_sm, r, tiles, CT_STAGE),
                         CT_THREADS, CT_STAGE, r->queue>>>(r->x, r->weight, r->bias, r->shift, r->rowpart, r->c, *s,
                                                segs, tiles);
    k_finalize<<<ceil_div(segs_total * 32, 256), 256, 0, r->queue>>>(r->rowpart, r->shift, r->mean, r->rstd, segs_total,
                                                       s->oh * segs, s->s);
    apply_v4(r);
}
