/*
 * Chapter 2: KernelBench level 2, model #43, in CUDA C
 *
 *     y = relu( logsumexp_c( MaxPool3d_2( Conv3d(x) ) ) )
 *
 * What this chapter teaches: a windowed load fused with a reduction (8 inputs per pooled value,
 * 64 pooled values per output), coalescing when the window has stride 2, two-pass against
 * online logsumexp when the values do not fit in registers, thread coarsening with 16-byte loads,
 * and a backward that scatters through max pooling: 7 of every 8 gradients are zero. Then the
 * conv itself: an implicit GEMM, tensor cores, what TF32 costs in accuracy and how 3xTF32 buys
 * it back, and the full fusion, where the conv's 537 MB output never reaches DRAM; last, the
 * conv's gradients by the same machinery, which makes the training step ours.
 *
 * Read in this order (the chapter README lists the same). The core path, the forward:
 *   model.h                  the model, its shapes, its bytes and FLOPs, and the floors they imply
 *   reference.cu             the CPU reference in double, forward, and the backward derived
 *   01-v1-eager.cu           v1  eager-like: cuDNN conv, then a naive kernel per op (max pool,
 *                                logsumexp, relu), the 64-channel pooled tensor (67 MB) in DRAM
 *   02-v2-cudnn-pool.cu      v2  v1 with cuDNN's own pooling: the library baseline for the pool
 *   window.cuh               the 2x2x2 window loads every fused version shares
 *   03-v3-fused-window.cu    v3  one fused kernel, a thread per output, float2 windows, two-pass
 *                                logsumexp: the second pass reads c again
 *   common/lse.cuh           the online logsumexp (and the naive two-pass one v1 runs)
 *   04-v4-online-lse.cu      v4  the online logsumexp: one pass, c read once
 *   05-v5-coarsened.cu       v5  four outputs a thread along W, 16-byte loads
 *   igemm.cuh                the conv as an implicit GEMM: the tile, its shared memory, its loads
 *   06-v6-implicit-gemm.cu   v6  our conv on the FMA units, 8 x 8 outputs a thread; v5's epilogue
 *   common/tf32.cuh          the tensor core's mma.sync.m16n8k8, its fragments, TF32, the
 *                            3xTF32 split
 *   mma.cuh                  the implicit GEMM's tile on tensor cores: which lane reads what
 *   07-v7-tf32.cu            v7  the conv on tensor cores in TF32: fast, 2^-10 a product
 *   08-v8-3xtf32.cu          v8  3xTF32: three TF32 products a term, fp32's accuracy back
 *   09-v9-full-fusion.cu     v9  pooling and logsumexp in v8's conv epilogue: c never leaves the SM
 * Then the advanced part, the backward and the training step:
 *   10-b1-autograd.cu        b1  autograd-like backward: saved argmax, memset + scatter; the
 *                                training step's cuDNN gradients
 *   11-b2-fused-backward.cu  b2  fused backward: recompute argmax and logsumexp, write all of dc
 *   12-b3-own-gradients.cu   b3  the training step's dx and dw on our tensor cores in 3xTF32:
 *                                dx as v8's conv with the channels swapped, dw as a GEMM over
 *                                positions
 * and the forward on Hopper's warpgroup MMA:
 *   common/wgmma.cuh         wgmma: operands in shared memory through descriptors, asynchronous
 *   13-v10-v11-wgmma.cu          v10 v9's full fusion on wgmma in TF32 (sm_90a: H100, H200): every
 *                                tap a descriptor into one patch, the next chunk loaded meanwhile
 *   14-b4-wgmma-gradients.cu b4  the training step on wgmma in TF32: v10's conv, dx on v10's
 *                                machinery, dw with four tiles' positions as K's 4 contiguous k
 * And the exercise (README, "Exercises"):
 *   x1-fused-epilogue.cu     x1  the fused epilogue, c read once, for you to write
 *   problem.cu               host machinery (inputs, buffers, verification, tests): skip it
 *
 * Scopes: v1 .. v5 run on the conv output (epilogue_fwd) and as the whole model, cuDNN's conv
 * plus their epilogue (model_fwd); v6 .. v10, whose subject is the conv, as the whole model only;
 * b1 and b2 as epilogue forward + backward and as a training step (conv, epilogue, its backward,
 * dx, dw, dbias), b3, whose subject is dx and dw, as the training step only. After the table,
 * the library conv's ops alone beside PyTorch's; each forward conv alone (cuDNN's, v6's, v7's,
 * v8's, v10's) and each gradient (cuDNN's and b3's dx and dw): time, TFLOP/s and the error against
 * the double reference.
 *
 *   make chapter-2                 verify and time every version at the KernelBench shape
 *   build/ch02 --version v4        one version
 *   build/ch02 --test              CPU checks + every version on awkward shapes and extreme values
 *   build/ch02 --shape 1x32x5x6x7 --dump out/   tensors for data/pytorch_peer.py check --chapter 2
 */
#include "model.h"

static const hx_version versions[] = {
    {"v1", SC(SCOPE_EPI_FWD) | SC(SCOPE_MODEL_FWD), "eager-like: cuDNN conv, naive pool, LSE, relu",
     v1_launch, 0, HX_FP32, "01-v1-eager.cu"},
    {"v2", SC(SCOPE_EPI_FWD) | SC(SCOPE_MODEL_FWD), "v1 with cuDNN's pooling (library baseline)",
     v2_launch, NEEDS_CUDNN, HX_FP32, "02-v2-cudnn-pool.cu"},
    {"v3", SC(SCOPE_EPI_FWD) | SC(SCOPE_MODEL_FWD), "one fused kernel, float2 windows, two-pass LSE",
     v3_launch, 0, HX_FP32, "03-v3-fused-window.cu"},
    {"v4", SC(SCOPE_EPI_FWD) | SC(SCOPE_MODEL_FWD), "fused, online LSE: c read once",
     v4_launch, 0, HX_FP32, "04-v4-online-lse.cu"},
    {"v5", SC(SCOPE_EPI_FWD) | SC(SCOPE_MODEL_FWD), "fused, 4 outputs a thread, 16-byte loads",
     v5_launch, 0, HX_FP32, "05-v5-coarsened.cu"},
    {"v6", SC(SCOPE_MODEL_FWD), "own conv: implicit GEMM on FMA, then v5",
     v6_launch, 0, HX_FP32, "06-v6-implicit-gemm.cu"},
    {"v7", SC(SCOPE_MODEL_FWD), "own conv on tensor cores in TF32, then v5",
     v7_launch, 0, HX_TF32, "07-v7-tf32.cu"},
    {"v8", SC(SCOPE_MODEL_FWD), "own conv in 3xTF32 (fp32 accuracy), then v5",
     v8_launch, 0, HX_3XTF32, "08-v8-3xtf32.cu"},
    {"v9", SC(SCOPE_MODEL_FWD), "full fusion: 3xTF32 conv, pool + LSE in its epilogue",
     v9_launch, 0, HX_3XTF32, "09-v9-full-fusion.cu"},
    {"b1", SC(SCOPE_EPI_FWDBWD) | SC(SCOPE_TRAIN), "autograd-like: saved indices, memset + scatter",
     b1_launch, 0, HX_FP32, "10-b1-autograd.cu"},
    {"b2", SC(SCOPE_EPI_FWDBWD) | SC(SCOPE_TRAIN), "fused: v5, then recompute + write all of dc",
     b2_launch, 0, HX_FP32, "11-b2-fused-backward.cu"},
    {"b3", SC(SCOPE_TRAIN), "b2, then our dx and dw: tensor cores, 3xTF32",
     b3_launch, 0, HX_3XTF32, "12-b3-own-gradients.cu"},
    {"v10", SC(SCOPE_MODEL_FWD), "full fusion on wgmma in TF32 (sm_90a)",
     v10_launch, NEEDS_SM90 | NEEDS_SM90A, HX_TF32, "13-v10-v11-wgmma.cu"},
    {"v11", SC(SCOPE_MODEL_FWD), "v10 in 3xTF32 on wgmma: fp32's accuracy (sm_90a)",
     v11_launch, NEEDS_SM90 | NEEDS_SM90A, HX_3XTF32, "13-v10-v11-wgmma.cu"},
    {"b4", SC(SCOPE_TRAIN), "v10's conv, then dx and dw on wgmma in TF32 (sm_90a)",
     b4_launch, NEEDS_SM90 | NEEDS_SM90A, HX_TF32, "14-b4-wgmma-gradients.cu"},
    {"x1", SC(SCOPE_EPI_FWD) | SC(SCOPE_MODEL_FWD), "exercise: the fused epilogue, c read once",
     x1_launch, 0, HX_FP32, "x1-fused-epilogue.cu"},
};

int main(int argc, char **argv)
{
    hx_chapter ch = chapter_machinery;
    ch.versions = versions;
    ch.n_versions = (int)(sizeof versions / sizeof versions[0]);
    return hx_main(argc, argv, &ch);
}
