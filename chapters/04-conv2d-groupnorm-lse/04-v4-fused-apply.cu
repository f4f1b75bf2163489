/*
 * v4: the fused apply (c read twice)
 *
 * Defect of v1..v3: after the statistics, five kernels each read and write a 520 MB tensor:
 * 10 x 520 MB of traffic where the epilogue needs 528 MB.
 * Change: v2's statistics, then one kernel (apply.cuh): a thread a position folds the 64
 * channels' normalise + affine (one FMA), tanh, HardSwish and residual into the online
 * logsumexp, and writes y. Nothing but y and the statistics leaves the chip.
 * Prediction: c read twice (statistics, apply) and y written: 1048 MB, 0.35 ms at the ~3000
 * GB/s ceiling; the apply does a tanhf and an __expf a value, about 20 instructions, against
 * 4 bytes: memory-bound.
 * Measured (H100 80GB HBM3, KernelBench shape, data/h100/ch04.csv): 0.3740 ms [v4 epilogue_fwd],
 * 6.6x faster than v1 [v1/v4 epilogue_fwd] and 94% of the 0.351 ms two-read bound (2.12x
 * [v4 epilogue_fwd median_ms/floor_ms] the one-read floor of 0.177 ms [v4 epilogue_fwd floor_ms]).
 * The whole model 1.52 ms [v4 model_fwd]. Nsight Compute at 32x8x128x128 (c 130 MB, beyond L2;
 * data/run-device.sh dram): the apply reads 124.9 to 125.5 MB from DRAM, the statistics 124.4 to
 * 130.1 MB: c crosses DRAM twice.
 */
#include "apply.cuh"
#include "model.h"

/* block (tile, n): APPLY_BLOCK positions of sample n */
__global__ void __launch_bounds__(APPLY_BLOCK)
v4_apply(const float *__restrict__ c, const float *__restrict__ mean, const float *__restrict__ rstd,
         const float *__restrict__ gamma, const float *__restrict__ beta, float *__restrict__ y, int S)
{
    __shared__ float sa[C_OUT], sb[C_OUT];
    int n = blockIdx.y, q = blockIdx.x * APPLY_BLOCK + threadIdx.x;
    affine_of(sa, sb, mean + n * GROUPS, rstd + n * GROUPS, gamma, beta);
    __syncthreads();
    if (q < S)
        y[(size_t)n * S + q] = epilogue_at(c + (size_t)n * C_OUT * S + q, S, sa, sb);
}

void apply_v4(const run_ctx *r)
{
    const shape *s = &r->sh;
    v4_apply<<<dim3(ceil_div(s->s, APPLY_BLOCK), s->n), APPLY_BLOCK, 0, r->queue>>>(
      r->c, r->mean, r->rstd, r->gamma, r->beta, r->y, s->s);
}

void v4_epilogue(const run_ctx *r)
{
    stats_v2(r);
    apply_v4(r);
}

void v4_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    v4_epilogue(r);
}
