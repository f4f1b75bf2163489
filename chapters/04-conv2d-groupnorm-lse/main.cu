/*
 * Chapter 4: KernelBench level 2, model #92, in CUDA C
 *
 *     y = logsumexp_c( c + HardSwish( tanh( GroupNorm_16(c) ) ) ),  c = Conv2d(x)
 *
 * What this chapter teaches: the warp shuffle, and where the layout puts a reduction. GroupNorm
 * needs a mean and a variance over each group's 4 x 15876 values (254 KB, more than an SM's
 * shared memory) before any output, and the logsumexp then needs all 64 channels of a position.
 * The statistics are reduced in registers across a warp (__shfl_down_sync, __shfl_xor_sync)
 * instead of chapter 3's shared-memory tree; CUB is the library baseline; the elementwise tail
 * folds into one pass with the online logsumexp; and since the statistics must see all of c
 * before the first output, the second read of c is made to come from L2 instead of DRAM.
 *
 * Read in this order (the chapter README lists the same). Chapter 3's Harris steps came first
 * on the learning path: its reductions used warp shuffles; here they are the lesson.
 * The core path:
 *   model.h                   the model, its shapes, its bytes and FLOPs, the floors they imply
 *   group-welford.cuh         a thread's Welford share of a group; v2's merge by warp shuffles
 *   01-v1-eager.cu            v1  eager-like: library conv, statistics by a shared-memory tree,
 *                                 then a kernel per op (gn, tanh, HardSwish, add, logsumexp)
 *   02-v2-warp-stats.cu       v2  the statistics by warp shuffles: one barrier instead of nine
 *   03-v3-cub-stats.cu        v3  the statistics by CUB's BlockReduce (the library baseline)
 *   apply.cuh                 the epilogue at a position: one FMA for GroupNorm, online logsumexp
 *   04-v4-fused-apply.cu      v4  v2's statistics, then one kernel for the rest (c read twice)
 *   05-v5-l2-chunks.cu        v5  chunks of samples that fit L2: the second read of c from L2
 *   06-b1-autograd.cu         b1  autograd-like backward: v1 saving, a kernel per op
 *   07-b2-fused-backward.cu   b2  v4, then three recomputing kernels (group sums by shuffles)
 * The advanced part:
 *   team.cuh                  one launch for the batch: teams of blocks, a barrier a sample
 *   08-v6-persistent.cu       v6  v5's idea in one persistent launch: producer and consumer warps
 *   09-b3-l2-backward.cu      b3  v6, then the backward in v6's teams
 *   10-v7-nhwc.cu             v7  the layout lesson: v4 with c channels last (NHWC); the channel
 *                                 logsumexp a 16-lane butterfly, the statistics per-lane sums
 *   conv-tile.cuh             the conv inside our kernels: 4 positions x 8 channels a thread
 *   conv-stats.cuh            pass 1 of v8 and v9: the conv and each group's shifted sums
 *   11-v8-own-conv-twice.cu   v8  whole model: conv + statistics, then conv again + epilogue; c
 *                                 never stored
 *   12-v9-own-conv-once.cu    v9  whole model: conv + statistics + c stored once, then v4's apply
 *   13-b4-own-dw.cu           b4  the training step on v9, b3's backward and our own dw, dbias
 * The exercise:
 *   x1-warp-stats.cu          x1  the group statistics by warp shuffles, for you to write (v2
 *                                 solves it; until then the harness reports it not written)
 * Also: reference.cu, the CPU reference in double, the backward derived term by term, and its
 * checks; problem.cu, host machinery (inputs, buffers, verification, tests): skip it.
 *
 * Scopes: v1..v3 run as the statistics alone (stats), on the conv output (epilogue_fwd) and as
 * the whole model, the library conv first (model_fwd); v4..v7 in the last two (v7's epilogue
 * reads c channels last; its whole model transposes x and runs the conv channels last); v8 and
 * v9 compute the conv themselves and run only as the whole model. b1..b3 run as epilogue
 * forward + backward and as a training step (the library conv, the pair, then dx, dw and dbias);
 * b4 only as a training step (v9's conv, b3's pair, cuDNN's dx, our dw and dbias).
 *
 *   make chapter-4                 verify and time every version at the KernelBench shape
 *   build/ch04 --version v5        one version
 *   build/ch04 --test              CPU checks + every version on awkward shapes and extreme values
 *   build/ch04 --shape 3x8x9x11 --dump out/   tensors for a PyTorch check
 */
#include "model.h"

#define FWD (SC(SCOPE_EPI_FWD) | SC(SCOPE_MODEL_FWD))
#define BWD (SC(SCOPE_EPI_FWDBWD) | SC(SCOPE_TRAIN))

static const hx_version versions[] = {
    {"v1", FWD | SC(SCOPE_STATS), "eager-like: smem-tree stats, a kernel per op", v1_launch, 0, HX_FP32,
     "01-v1-eager.cu"},
    {"v2", FWD | SC(SCOPE_STATS), "stats: warp shuffles, one barrier", v2_launch, 0, HX_FP32,
     "02-v2-warp-stats.cu"},
    {"v3", FWD | SC(SCOPE_STATS), "stats: CUB BlockReduce (library baseline)", v3_launch, 0, HX_FP32,
     "03-v3-cub-stats.cu"},
    {"v4", FWD, "fused apply: v2 stats + one kernel (c read twice)", v4_launch, 0, HX_FP32,
     "04-v4-fused-apply.cu"},
    {"v5", FWD, "L2 chunks: split stats, apply from L2", v5_launch, 0, HX_FP32,
     "05-v5-l2-chunks.cu"},
    {"v6", FWD, "persistent teams: one launch, c's second read from L2", v6_launch, 0, HX_FP32,
     "08-v6-persistent.cu"},
    {"v7", FWD, "NHWC: v4 channels last, lse by 16-lane butterfly", v7_launch, 0, HX_FP32,
     "10-v7-nhwc.cu"},
    {"v8", SC(SCOPE_MODEL_FWD), "own conv twice: stats, then conv + epilogue (no c)", v8_launch, 0, HX_FP32,
     "11-v8-own-conv-twice.cu"},
    {"v9", SC(SCOPE_MODEL_FWD), "own conv once: stats + c stored, then v4's apply", v9_launch, 0, HX_FP32,
     "12-v9-own-conv-once.cu"},
    {"b1", BWD, "autograd-like: v1 saving, a kernel per op", b1_launch, 0, HX_FP32,
     "06-b1-autograd.cu"},
    {"b2", BWD, "fused: v4, then three recomputing kernels", b2_launch, 0, HX_FP32,
     "07-b2-fused-backward.cu"},
    {"b3", BWD, "persistent teams: v6, then the backward in teams", b3_launch, 0, HX_FP32,
     "09-b3-l2-backward.cu"},
    {"b4", SC(SCOPE_TRAIN), "own conv and dw: v9, b3's backward, cuDNN dx", b4_launch, 0, HX_FP32,
     "13-b4-own-dw.cu"},
    {"x1", FWD | SC(SCOPE_STATS), "exercise: the group statistics by warp shuffles", x1_launch, 0,
     HX_FP32, "x1-warp-stats.cu"},
};

int main(int argc, char **argv)
{
    hx_chapter ch = chapter_machinery;
    ch.versions = versions;
    ch.n_versions = (int)(sizeof versions / sizeof versions[0]);
    return hx_main(argc, argv, &ch);
}
