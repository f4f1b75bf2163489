/*
 * Chapter 5: KernelBench level 2, model #38, in CUDA C
 *
 *     y = scale_c * softmax_row( clamp( ConvTranspose3d( AvgPool3d(x) ), 0, 1 ) )
 *
 * What this chapter teaches: a reduction whose row is longer than an SM. Each (n, channel) row
 * of the softmax is 131072 values, 512 KB, more than any SM's shared memory, and no output of a
 * row can be written before the whole row is summed. The versions go from PyTorch's three
 * passes over DRAM to the online softmax's two, drop the max where the clamp makes it
 * unnecessary, split rows over blocks, and finally hold each row in the shared memory of a
 * thread-block cluster so that c is read from DRAM once.
 *
 * Read in this order (the chapter README lists the same). The core:
 *   model.h                    the model, its shapes, its bytes and FLOPs, the floors they imply
 *   reference.cu               the CPU reference in double, the backward derived term by term,
 *                              and its checks (definition, central differences, checks that fail)
 *   reduce.cuh (common/)       block sums and maxes by warp shuffles (chapter 4's lesson)
 *   01-v1-eager.cu             v1  eager-like: the pool, the library's transposed conv, then
 *                                  clamp, a three-pass block-per-row softmax and scale, a kernel each
 *   rows.cuh                   a row as float4, the clamp, the output pass
 *   02-v2-fused-three-pass.cu  v2  one kernel, still three passes over c
 *   lse.cuh (common/)          the online logsumexp: its update and merge
 *   03-v3-online.cu            v3  the online softmax: max and sum in one pass, c read twice
 *   04-v4-no-max.cu            v4  no max: the clamp bounds exp, and partial sums simply add
 *   05-v5-split-rows.cu        v5  rows split over blocks (a prediction that failed)
 *   06-b1-autograd.cu          the backward's derivation; b1 autograd-like: v1 saving p, a
 *                                  kernel per op; the training step's conv and pool gradients
 *   07-b2-fused-backward.cu    b2  v4, then two kernels that recompute p from c and lse
 * The advanced part (v6 and b3 need Hopper's clusters):
 *   hopper.cuh (common/)       mbarriers, TMA bulk copies, the cluster launch, in raw PTX
 *   08-v6-cluster.cu           v6  a row in a cluster's shared memory: c read once
 *   09-b3-cluster-backward.cu  b3  v6, then a cluster a row holding c and g: each read once
 *   10-v7-own-convt.cu         v7  whole model: our transposed conv (parity decomposition), the
 *                                  pool in its loads, the clamp and row sums in its epilogue
 *   wgmma.cuh (common/)        Hopper's warpgroup MMA: descriptors, fences, the wgmmas
 *   11-v8-wgmma.cu             v8  whole model: the parity classes as implicit GEMMs on wgmma in
 *                                  TF32 (sm_90a: H100, H200), the conv computed twice (the row
 *                                  sums, then y) instead of storing c
 *   12-b4-wgmma-gradients.cu   b4  the training step in TF32 on wgmma: v8's conv writing c, b3's
 *                                  backward, the conv's dw and dxp as implicit GEMMs (sm_90a)
 * The exercise (the README's Exercises; the answer in LABBOOK.md):
 *   x1-online-softmax.cu       x1  the online softmax, written by the reader (v3 solves it)
 * Also:
 *   problem.cu                 host machinery (inputs, buffers, verification, tests): skip it
 *
 * Scopes: v1..v6 and x1 run on the conv output (epilogue_fwd) and as the whole model, the pool
 * and the library's transposed conv first (model_fwd); v7 and v8 compute the transposed conv
 * themselves and run only as the whole model. Each backward version runs as epilogue forward +
 * backward and as a training step (pool, transposed conv, the pair, then the conv's and the
 * pool's gradients); b4, which computes the conv itself, only as the training step.
 *
 *   make chapter-5                 verify and time every version at the KernelBench shape
 *   build/ch05 --version v6        one version
 *   build/ch05 --list              the versions and their files
 *   build/ch05 --test              CPU checks + every version on awkward shapes and extreme values
 *   build/ch05 --shape 2x32x3x5x7 --dump out/   tensors for a PyTorch check
 */
#include "model.h"

#define FWD (SC(SCOPE_EPI_FWD) | SC(SCOPE_MODEL_FWD))
#define BWD (SC(SCOPE_EPI_FWDBWD) | SC(SCOPE_TRAIN))

static const hx_version versions[] = {
    {"v1", FWD, "eager-like: clamp, 3-pass softmax, scale kernels", v1_launch, 0, HX_FP32, "01-v1-eager.cu"},
    {"v2", FWD, "fused: one kernel, three passes over c", v2_launch, 0, HX_FP32, "02-v2-fused-three-pass.cu"},
    {"v3", FWD, "online softmax: max and sum in one pass, 2 reads", v3_launch, 0, HX_FP32,
     "03-v3-online.cu"},
    {"v4", FWD, "no max: the clamp bounds exp, 2 reads", v4_launch, 0, HX_FP32, "04-v4-no-max.cu"},
    {"v5", FWD, "rows split over blocks, partial sums merged", v5_launch, 0, HX_FP32, "05-v5-split-rows.cu"},
    {"v6", FWD, "cluster holds a row in smem: c read once", v6_launch, NEEDS_SM90, HX_FP32,
     "08-v6-cluster.cu"},
    {"v7", SC(SCOPE_MODEL_FWD), "own convT: pool in its loads, row sums in epilogue", v7_launch, 0, HX_FP32,
     "10-v7-own-convt.cu"},
    {"v8", SC(SCOPE_MODEL_FWD), "convT on wgmma in TF32, run twice: sums, y (sm_90a)", v8_launch,
     NEEDS_SM90 | NEEDS_SM90A, HX_TF32, "11-v8-wgmma.cu"},
    {"b1", BWD, "autograd-like: v1 saving p, a kernel per op", b1_launch, 0, HX_FP32, "06-b1-autograd.cu"},
    {"b2", BWD, "fused: v4, then 2 kernels recomputing p", b2_launch, 0, HX_FP32, "07-b2-fused-backward.cu"},
    {"b3", BWD, "clusters: v6, then c and g held in smem, read once", b3_launch, NEEDS_SM90, HX_FP32,
     "09-b3-cluster-backward.cu"},
    {"b4", SC(SCOPE_TRAIN), "TF32 step on wgmma: v8 writes c; dw, dxp (sm_90a)", b4_launch,
     NEEDS_SM90 | NEEDS_SM90A, HX_TF32, "12-b4-wgmma-gradients.cu"},
    {"x1", FWD, "exercise: the online softmax (v3), by the reader", x1_launch, 0, HX_FP32,
     "x1-online-softmax.cu"},
};

int main(int argc, char **argv)
{
    hx_chapter ch = chapter_machinery;
    ch.versions = versions;
    ch.n_versions = (int)(sizeof versions / sizeof versions[0]);
    return hx_main(argc, argv, &ch);
}
