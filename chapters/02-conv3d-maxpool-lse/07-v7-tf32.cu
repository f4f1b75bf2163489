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
 * more. And the error: each operand rounded to TF32 by up to 2^-11 of itself, so each product
 * is off by up to about 2^-10, and the conv's relative L2 error near PyTorch's own TF32 conv's
 * (its default precision, 2.9e-4 in the README's error table), some 30x the chapter's fp32
 * tolerance of 1e-5. y passes only at TF32's looser tolerance (harness.h: HX_TF32_TOL), and
 * --test checks that the conv alone fails fp32's.
 * Measured (H100, KernelBench shape): the whole model 2.99 ms [v7 model_fwd], 2.12x v6
 * [v6/v7 model_fwd], 116% of the fp32 floor [v7 model_fwd pct_floor]: that floor is the fp32
 * FMA peak's, which TF32 tensor cores are not held to. The conv alone: rel_l2 2.8e-4, 570x
 * cuDNN's fp32 conv's error. Nsight Compute: tensor pipe 27% busy, 49% of issue slots used: the
 * loads and conversions, as predicted, set the pace. PyTorch's default precision is faster at
 * the same error: torch.compile's whole model 2.28 ms [compile model_fwd default].
 */
#include "mma.cuh"

/* CIN, COUT: 32, 64 here; b3's dx runs it as 64, 32 */
template <int PASSES, int CIN, int COUT>
__global__ void __launch_bounds__(IGEMM_THREADS, 2)
    v7_conv_mma(const float *__restrict__ x, const float *__restrict__ w_k,
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
void conv_mma(const shape *s, const float *in, const float *w_k, const float *bias, float *out,
              cudaStream_t stream)
{
    SMEM_OPT_IN((v7_conv_mma<PASSES, CIN, COUT>), IGEMM_SMEM_BYTES(COUT));
    v7_conv_mma<PASSES, CIN, COUT>
        <<<tile_grid<COUT>(s), IGEMM_THREADS, IGEMM_SMEM_BYTES(COUT), stream>>>(
            in, w_k, bias, out, s->d, s->h, s->w);
}
/* the forward's instances come with conv_tf32 and conv_3xtf32 below; b3's dx, compiled in
 * another file, needs its own */
template void conv_mma<3, C_OUT, C_IN>(const shape *, const float *, const float *, const float *,
                                       float *, cudaStream_t);

void conv_tf32(const run_ctx *r, float *c)
{
    weights_kmajor(r);
    conv_mma<1, C_IN, C_OUT>(&r->sh, r->x, r->w_k, r->bias, c, r->stream);
}

/* v8's conv (v8-3xtf32.cu says why): the same kernel, three products a term */
void conv_3xtf32(const run_ctx *r, float *c)
{
    weights_kmajor(r);
    conv_mma<3, C_IN, C_OUT>(&r->sh, r->x, r->w_k, r->bias, c, r->stream);
}

void v7_launch(const run_ctx *r, int scope)
{
    (void)scope;
    conv_tf32(r, r->c_own);
    v5_epilogue_on(r, r->c_own);
}
