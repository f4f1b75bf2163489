/*
 * Chapter 3: KernelBench level 2, model #79, in CUDA C
 *
 *     y = max_c( m * clamp( InstanceNorm3d( m * Conv3d(x) ), -1, 1 ) )
 *
 * What this chapter teaches: the shared-memory reduction. Each (n, c) needs a mean and a variance
 * over 12600 values before any output can be written, so the epilogue is a reduction followed by
 * an elementwise pass, and the question is how to run the reduction fast, accurately, and without
 * reading the 103 MB twice. The statistics kernels walk the classic progression of M. Harris,
 * "Optimizing Parallel Reduction in CUDA" (NVIDIA, 2007), measured here on an H100 rather than
 * quoted; then Welford's update with Chan's merge against sum and sum of squares; then CUB; then
 * thread-block clusters (Hopper): eight blocks share one sample's 16 x 12600 values through
 * distributed shared memory, so c is read once, and with the conv computed inside, not at all.
 *
 * Read in this order (the chapter README lists the same):
 *   model.h                     the model, its shapes, its bytes and FLOPs, the floors they imply
 *   reference.cu                the CPU reference in double, and the backward derived (dbias = 0)
 *   01-v1-eager.cu              v1  eager-like: cuDNN conv, the statistics with one thread per
 *                                   (n, c) looping serially, then a kernel per op (x m, normalise,
 *                                   clamp, x m, max); a, xh, t, u in DRAM
 *   sums.cuh                    warp shuffles (first met here; chapter 4 builds on them): the
 *                               warp's and the block's sums
 *   02-v2-v6-harris-reduction.cu
 *                               v2  statistics by Harris's kernel 1: interleaved, divergent
 *                               v3  sequential addressing (kernel 3)
 *                               v4  first add during the global load (kernel 4)
 *                               v5  the last warp by shuffles (kernel 5)
 *                               v6  many elements a thread, one block a slice (kernel 7)
 *   slice-welford.cuh           Welford's update and Chan's merge (common/welford.cuh), a
 *                               thread's share of a slice
 *   03-v7-welford.cu            v7  v6 with Welford + Chan instead of sum and sum of squares
 *   04-v8-cub.cu                v8  v7 with CUB's BlockReduce (the library baseline)
 *   05-v9-fused-apply.cu        v9  v7's statistics, then one kernel for the rest (c read twice)
 *   06-b1-autograd.cu           b1  autograd-like backward: v1 saving a, xh, t, the argmax
 *   07-b2-fused-backward.cu     b2  v9, then two recomputing kernels
 *   training-grads.cu               beside b1 and b2, off the reading path: the deterministic dm
 *                                   and dbias sums; cuDNN's dx and dw, our dw
 *   (the advanced part: Hopper clusters, the conv inside the kernel, the saved-argmax backward)
 *   cluster.cuh                 clusters: slices, copies (TMA bulk copies and mbarriers, whose PTX
 *                               is common/hopper.cuh's), the exchange, the first wave's start
 *   08-v10-cluster.cu           v10 one pass: 8 blocks a sample hold its values in shared memory,
 *                                   exchange statistics once through distributed shared memory;
 *                                   the first wave's starts spread over 10 us
 *   09-v11-row-cluster.cu       v11 v10 with whole channel rows a block: statistics without an
 *                                   exchange, the channel max exchanged instead
 *   conv.cuh                    the conv inside a kernel: weights broadcast from shared memory
 *   10-v12-conv-two-pass.cu     v12 whole model: conv + statistics, then conv again + output
 *   11-v13-cluster-conv.cu      v13 whole model: v10's cluster computing the conv once
 *   12-v14-tensor-core-conv.cu  v14 v13 with the conv on tensor cores (3xTF32)
 *   13-v15-v18-register-conv.cu v15 v14 with the conv's output in registers, x in shared memory,
 *                                   persistent clusters
 *                               v16 v15 with the conv on Hopper's wgmma (sm_90a)
 *                               v17 v16 without clusters: teams of blocks on every SM of a
 *                                   cooperative launch, the statistics exchanged through L2
 *                               v18 v17 in half blocks: two samples an SM, one's conv while
 *                                   the other's statistics, exchange and y run
 *   14-b3-cluster-backward.cu   b3  v10, then one cluster kernel: c and g read once
 *   15-b4-b6-saved-argmax.cu    b4  v10 saving each position's argmax, then the sums from it and
 *                                   one stream over c and dc
 *                               b5  b4 with dm derived from those sums: no dm in the stream, no
 *                                   kernel for it; the forward keeps the clamp bit in its loop
 *                               b6  b5 with the sums started during the forward's last wave, a
 *                                   counter a sample in place of the kernel boundary
 *   problem.cu                  host machinery (inputs, buffers, verification, tests): skip it
 *   x1-welford-stats.cu         x1  exercise: v7's statistics, written by the reader (README)
 *
 * Scopes: v1..v11 run on the conv output (epilogue_fwd) and as the whole model, cuDNN's conv
 * first (model_fwd); v1..v8 also time their statistics alone (stats); v12 to v18 are whole-
 * model only. Each backward version runs as epilogue forward + backward and as a training step
 * (cuDNN's conv, the pair, then dx, dw and dbias). v10, v11, v13 .. v18 and b3 .. b6 need Hopper
 * (sm_90: clusters, TMA), v16 to v18 also sm_90a code (wgmma: H100, H200, built with ARCH=sm_90
 * or native); elsewhere they are skipped with one line. On a sample too large for a cluster's
 * shared memory (S above about 27000) they run v9, v10, v12 and b2 instead (the notes say; b4 to
 * b6 run b2); v15 to v18 run v14 where a sample has more than 14336 corners (D-2) H W or its two
 * windows of x (v18: four) do not fit shared memory.
 *
 *   make chapter-3                 verify and time every version at the KernelBench shape
 *   build/ch03 --version v10       one version
 *   build/ch03 --test              CPU checks + every version on awkward shapes and extreme values
 *   build/ch03 --shape 3x3x5x6x7 --dump out/   tensors for data/pytorch_peer.py check --chapter 3
 */
#include "model.h"

#define FWD (SC(SCOPE_EPI_FWD) | SC(SCOPE_MODEL_FWD))
#define BWD (SC(SCOPE_EPI_FWDBWD) | SC(SCOPE_TRAIN))

static const hx_version versions[] = {
    {"v1", FWD | SC(SCOPE_STATS), "eager-like: serial stats, a kernel per op", v1_launch, 0,
     HX_FP32, "01-v1-eager.cu"},
    {"v2", FWD | SC(SCOPE_STATS), "stats: interleaved, divergent (Harris 1)", v2_launch, 0,
     HX_FP32, "02-v2-v6-harris-reduction.cu"},
    {"v3", FWD | SC(SCOPE_STATS), "stats: sequential addressing (Harris 3)", v3_launch, 0,
     HX_FP32, "02-v2-v6-harris-reduction.cu"},
    {"v4", FWD | SC(SCOPE_STATS), "stats: first add during load (Harris 4)", v4_launch, 0,
     HX_FP32, "02-v2-v6-harris-reduction.cu"},
    {"v5", FWD | SC(SCOPE_STATS), "stats: last warp by shuffles (Harris 5)", v5_launch, 0,
     HX_FP32, "02-v2-v6-harris-reduction.cu"},
    {"v6", FWD | SC(SCOPE_STATS), "stats: many elements a thread (Harris 7)", v6_launch, 0,
     HX_FP32, "02-v2-v6-harris-reduction.cu"},
    {"v7", FWD | SC(SCOPE_STATS), "stats: v6 with Welford + Chan merge", v7_launch, 0,
     HX_FP32, "03-v7-welford.cu"},
    {"v8", FWD | SC(SCOPE_STATS), "stats: CUB BlockReduce (library baseline)", v8_launch, 0,
     HX_FP32, "04-v8-cub.cu"},
    {"v9", FWD, "fused apply: Welford stats + one kernel", v9_launch, 0, HX_FP32,
     "05-v9-fused-apply.cu"},
    {"v10", FWD, "one pass: 8-block cluster, c read once", v10_launch, NEEDS_SM90,
     HX_FP32, "08-v10-cluster.cu"},
    {"v11", FWD, "v10 with rows a block; the max exchanged", v11_launch, NEEDS_SM90,
     HX_FP32, "09-v11-row-cluster.cu"},
    {"v12", SC(SCOPE_MODEL_FWD), "model: conv in stats pass + apply pass", v12_launch, 0,
     HX_FP32, "10-v12-conv-two-pass.cu"},
    {"v13", SC(SCOPE_MODEL_FWD), "model: cluster, conv once into smem", v13_launch, NEEDS_SM90,
     HX_FP32, "11-v13-cluster-conv.cu"},
    {"v14", SC(SCOPE_MODEL_FWD), "model: v13, conv on tensor cores 3xTF32", v14_launch, NEEDS_SM90,
     HX_3XTF32, "12-v14-tensor-core-conv.cu"},
    {"v15", SC(SCOPE_MODEL_FWD), "model: v14, conv output in registers", v15_launch, NEEDS_SM90,
     HX_3XTF32, "13-v15-v18-register-conv.cu"},
    {"v16", SC(SCOPE_MODEL_FWD), "model: v15, conv on wgmma", v16_launch,
     NEEDS_SM90 | NEEDS_SM90A, HX_3XTF32, "13-v15-v18-register-conv.cu"},
    {"v17", SC(SCOPE_MODEL_FWD), "model: v16 in teams: no cluster, all SMs", v17_launch,
     NEEDS_SM90 | NEEDS_SM90A, HX_3XTF32, "13-v15-v18-register-conv.cu"},
    {"v18", SC(SCOPE_MODEL_FWD), "model: v17 in half blocks, two samples an SM", v18_launch,
     NEEDS_SM90 | NEEDS_SM90A, HX_3XTF32, "13-v15-v18-register-conv.cu"},
    {"b1", BWD, "autograd-like: v1 saving, a kernel per op", b1_launch, 0, HX_FP32,
     "06-b1-autograd.cu"},
    {"b2", BWD, "fused: v9, then two recomputing kernels", b2_launch, 0, HX_FP32,
     "07-b2-fused-backward.cu"},
    {"b3", BWD, "cluster: v10, then one cluster kernel", b3_launch, NEEDS_SM90,
     HX_FP32, "14-b3-cluster-backward.cu"},
    {"b4", BWD, "v10 saving the argmax, then a stream", b4_launch, NEEDS_SM90,
     HX_FP32, "15-b4-b6-saved-argmax.cu"},
    {"b5", BWD, "b4 with dm from the sums: no dm pass", b5_launch, NEEDS_SM90,
     HX_FP32, "15-b4-b6-saved-argmax.cu"},
    {"b6", BWD, "b5, the sums during the forward's last wave", b6_launch, NEEDS_SM90,
     HX_FP32, "15-b4-b6-saved-argmax.cu"},
    {"x1", FWD | SC(SCOPE_STATS), "exercise: Welford + Chan statistics (as v7)", x1_launch, 0,
     HX_FP32, "x1-welford-stats.cu"},
};

int main(int argc, char **argv)
{
    hx_chapter ch = chapter_machinery;
    ch.versions = versions;
    ch.n_versions = (int)(sizeof versions / sizeof versions[0]);
    return hx_main(argc, argv, &ch);
}
