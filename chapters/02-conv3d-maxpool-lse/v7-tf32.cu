/*
 * v7: the conv on tensor cores in TF32 (read common/tf32.cuh and mma.cuh first)
 *
 * Defect of v6: FMA units. An H100 SM does 128 fp32 FMAs a cycle (67 TFLOP/s), its tensor
 * cores many times that on TF32 inputs; v6 leaves them idle.
 *
 * Change: the same tile, the same shared memory (igemm.cuh), each warp's 64 x 32 piece of it
 * as 16 mma.sync.m16n8k8 TF32 products per tap (mma.cuh). Nothing else changes; the inputs
 * are rounded to TF32 as they leave shared memory.
 *
 * Prediction: tensor work per tap per warp, 16 mma of 2048 FLOP, against 24 shared loads and
 * 24 conversions: the loads and the chunk loads, not the tensor cores, set the pace; 2x v6 or
 * more. And the error: each product rounded at 2^-11, so the conv's relative L2 error against
 * the double reference near 3e-4, as PyTorch's TF32 default measured (GPU-NOTES) - 30x the
 * chapter's fp32 tolerance of 1e-5. The table's y passes only at TF32's looser tolerance
 * (harness.h: HX_TF32_TOL), and --test checks that the conv alone fails fp32's.
 * Measured (H100, KernelBench shape, the record of 2026-11-27): the conv alone 2.790 ms, 83.1
 * TFLOP/s, 2.2x v6; the whole model 2.987 ms [v7 model_fwd]. Error: rel_l2 2.8e-4, max_abs 5.4e-4,
 * 570x and 210x cuDNN's fp32 conv. Nsight Compute: tensor pipe 27% busy, 49% of issue slots used:
 * the loads and conversions, as predicted, not the tensor cores, set the pace. At the same
 * precision PyTorch's default is faster: cuDNN's TF32 conv alone 2.11 ms [eager conv_fwd default],
 * torch.compile's whole model 2.28 ms [compile model_fwd default].
 */
#include "mma.cuh"

/* CIN, COUT: 32, 64 here; b3's dx runs it as 64, 32 */
template <int PASSES, int CIN, int COUT>
__global__ void __launch_bounds__(IGEMM_THREADS, 2)
    k_conv_mma(const float *__restrict__ x, const float *__restrict__ w_k,
               const float *__restrict__ bias, float *__restrict__ c, int d, int h, int w)
{
    extern __shared__ float4 smem4[];
    float *s_in = reinterpret_cast<float *>(smem4), *s_w = s_in + CI_CHUNK * CS_OF(COUT);
    tile_pos tp = tile_of<COUT>(h, w);
    float acc[MT][NT][4];
    mma_tile<PASSES, CIN, COUT>(acc, s_in, s_w, x, w_k, tp, d, h, w);
    store_tile<COUT>(acc, bias, c, tp, d, h, w);
}

/* out = conv(in) (+ bias): in N x CIN x D x H x W, w_k[cin][tap][cout] (igemm.cuh) */
template <int PASSES, int CIN, int COUT>
void conv_mma(const shape *s, const float *in, const float *w_k, const float *bias, float *out)
{
    SMEM_OPT_IN((k_conv_mma<PASSES, CIN, COUT>), IGEMM_SMEM_BYTES(COUT));
    k_conv_mma<PASSES, CIN, COUT><<<tile_grid<COUT>(s), IGEMM_THREADS, IGEMM_SMEM_BYTES(COUT)>>>(
        in, w_k, bias, out, s->d, s->h, s->w);
}
/* the forward's instances come with conv_tf32 and conv_3xtf32 below; b3's dx, compiled in
 * another file, needs its own */
template void conv_mma<3, C_OUT, C_IN>(const shape *, const float *, const float *, const float *,
                                       float *);

void conv_tf32(const run_ctx *r, float *c)
{
    weights_kmajor(r);
    conv_mma<1, C_IN, C_OUT>(&r->sh, r->x, r->w_k, r->bias, c);
}

/* v8's conv (v8-3xtf32.cu says why): the same kernel, three products a term */
void conv_3xtf32(const run_ctx *r, float *c)
{
    weights_kmajor(r);
    conv_mma<3, C_IN, C_OUT>(&r->sh, r->x, r->w_k, r->bias, c);
}

void v7_launch(const run_ctx *r, int scope)
{
    (void)scope;
    conv_tf32(r, r->c_own);
    v5_epilogue_on(r, r->c_own);
}
