/*
 * Chapter 1: KernelBench level 2, model #58, in CUDA C
 *
 *     y = clamp( z sigmoid(z + 3) / 6 - b, -1, 1 ),  z = logsumexp_c( ConvTranspose3d(x) )
 *
 * What this chapter teaches: coalescing (a thread per output position, not per channel), what
 * an instruction per byte costs at the copy ceiling, a transposed conv fused into its epilogue so
 * its 1 GB output is never written, and a backward that recomputes instead of saving.
 *
 * Read in this order (the chapter README lists the same). The core:
 *   model.h                      the model, its shapes, its bytes and FLOPs, the floors they imply
 *   tail.cuh                     the pointwise tail in float, every version's last step
 *   01-v1-eager.cu           v1  eager-like: cuDNN's transposed conv, then 7 naive kernels, every
 *                                intermediate in DRAM; and the unstable log(sum(exp)) --test shows
 *   02-v2-fused-epilogue.cu  v2  one fused kernel, a thread per output position: coalesced
 *   03-v3-block-per-position.cu
 *                            v3  the anti-pattern a first instinct picks: a block per position,
 *                                a thread per channel, a shared-memory tree
 *   04-v7-thread-per-position.cu
 *                            v7  v2 without its per-position overhead (division, accurate exp,
 *                                grid-stride loop): the epilogue at the copy ceiling
 *   common/lse.cuh               the online logsumexp: a running max and sum, one exp per value
 *   parity.cuh                   the transposed conv by output parity: a thread's 2x2x2 cube
 *   05-v5-fused-conv.cu      v5  full fusion: the transposed conv computed in the kernel, each
 *                                channel folded into an online logsumexp; c is never written
 *   06-b1-autograd.cu        b1  autograd-like backward: v1 saving z, t, s, a kernel per op back;
 *                                the training step's cuDNN gradients
 *   common/reduce.cuh            warp and block sums; the deterministic two-stage reduction (db)
 *   shifted-load.cuh             8- and 16-byte loads on planes that are not aligned to them
 *   07-b2-fused-backward.cu  b2  fused backward: v7, then one kernel recomputing z from c and
 *                                writing dc; db by a deterministic two-stage reduction
 * The advanced part:
 *   08-v4-float4-online-lse.cu
 *                            v4  v7's fixes with four positions a thread and 16-byte shifted
 *                                loads: slower than v7, and why
 *   09-v6-smem-weights.cu    v6  v5 tuned by its profile: weights as shared-memory float4
 *                                broadcasts, the logsumexp in base 2, the channel loop unrolled by 2
 *   10-v8-reference-lse.cu   v8  v6 with the logsumexp as a sum of ex2, no running max (v6's
 *                                online form the fallback on overflow)
 *   11-b3-own-conv-grads.cu  b3  b2 in a training step whose conv kernels are ours: the
 *                                transposed conv by parity, deterministic dw and dbias; cuDNN's dx
 *   12-b4-staged-backward.cu b4  b3 with b2's backward reading its tile into shared memory by
 *                                cp.async: no registers hold the loads in flight
 * The exercise:
 *   x1-fused-epilogue.cu     x1  write the fused epilogue yourself (v2 solves it)
 * Beside them: reference.cu, the CPU reference in double (the transposed conv as a Conv3d of
 * the zero-upsampled input, the epilogue, the backward derived term by term), and problem.cu,
 * the host machinery (inputs, buffers, verification, tests): skip it.
 *
 * Scopes: v1 to v4 and v7 run on the conv output (epilogue_fwd) and as the whole model, cuDNN's
 * conv plus the epilogue (model_fwd); v5, v6 and v8 compute the conv themselves (model_fwd
 * only); each backward version runs as epilogue forward + backward and as a training step
 * (conv, epilogue, its backward, dx, dw, dbias).
 *
 *   make chapter-1                 verify and time every version at the KernelBench shape
 *   build/ch01 --version b2        one version
 *   build/ch01 --test              CPU checks + every version on awkward shapes and extreme values
 *   build/ch01 --shape 3x3x5x6x7 --dump out/   tensors for data/pytorch_peer.py check --chapter 1
 */
#include "model.h"

static const hx_version versions[] = {
    {"v1", SC(SCOPE_EPI_FWD) | SC(SCOPE_MODEL_FWD), "eager-like: cuDNN conv, 7 naive kernels",
     v1_launch, 0, HX_FP32, "01-v1-eager.cu"},
    {"v2", SC(SCOPE_EPI_FWD) | SC(SCOPE_MODEL_FWD), "one fused epilogue kernel, thread per position",
     v2_launch, 0, HX_FP32, "02-v2-fused-epilogue.cu"},
    {"v3", SC(SCOPE_EPI_FWD) | SC(SCOPE_MODEL_FWD), "anti-pattern: block per position, smem tree",
     v3_launch, 0, HX_FP32, "03-v3-block-per-position.cu"},
    {"v4", SC(SCOPE_EPI_FWD) | SC(SCOPE_MODEL_FWD), "16-byte loads, online logsumexp, intrinsics",
     v4_launch, 0, HX_FP32, "08-v4-float4-online-lse.cu"},
    {"v5", SC(SCOPE_MODEL_FWD), "full fusion: transposed conv inside the kernel",
     v5_launch, 0, HX_FP32, "05-v5-fused-conv.cu"},
    {"v6", SC(SCOPE_MODEL_FWD), "full fusion: smem float4 weights, base-2 LSE",
     v6_launch, 0, HX_FP32, "09-v6-smem-weights.cu"},
    {"v7", SC(SCOPE_EPI_FWD) | SC(SCOPE_MODEL_FWD), "v4 without float4: thread per position, 2 passes",
     v7_launch, 0, HX_FP32, "04-v7-thread-per-position.cu"},
    {"v8", SC(SCOPE_MODEL_FWD), "v6, LSE as a sum of ex2: no running max",
     v8_launch, 0, HX_FP32, "10-v8-reference-lse.cu"},
    {"b1", SC(SCOPE_EPI_FWDBWD) | SC(SCOPE_TRAIN), "autograd-like: v1 saving z t s; a kernel per op",
     b1_launch, 0, HX_FP32, "06-b1-autograd.cu"},
    {"b2", SC(SCOPE_EPI_FWDBWD) | SC(SCOPE_TRAIN), "fused: v7, then one pass recomputing z; det. db",
     b2_launch, 0, HX_FP32, "07-b2-fused-backward.cu"},
    {"b3", SC(SCOPE_EPI_FWDBWD) | SC(SCOPE_TRAIN), "b2 + own conv fwd, dw, dbias (cuDNN dx only)",
     b3_launch, 0, HX_FP32, "11-b3-own-conv-grads.cu"},
    {"b4", SC(SCOPE_EPI_FWDBWD) | SC(SCOPE_TRAIN), "b3, backward tile staged by cp.async",
     b4_launch, 0, HX_FP32, "12-b4-staged-backward.cu"},
    {"x1", SC(SCOPE_EPI_FWD) | SC(SCOPE_MODEL_FWD), "exercise: the fused epilogue (v2)",
     x1_launch, 0, HX_FP32, "x1-fused-epilogue.cu"},
};

int main(int argc, char **argv)
{
    hx_chapter ch = chapter_machinery;
    ch.versions = versions;
    ch.n_versions = (int)(sizeof versions / sizeof versions[0]);
    return hx_main(argc, argv, &ch);
}
