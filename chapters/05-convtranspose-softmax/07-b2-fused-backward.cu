/*
 * b2: the fused backward: p recomputed from c and the saved lse
 *
 * Defect of b1: nine kernels and five 1 GB intermediates (z, p, g p, g', dz, in four buffers),
 * written only to be read back; p is stored in the forward (1 GB) when c and one number a row
 * (lse, 8 KB at the KernelBench shape) give it back: p = exp(clamp(c) - lse).
 * Change: forward v4 (two passes, writes lse). Backward in two kernels over the rows split like
 * v5's (run_ctx.split blocks a row): kernel 1 reads c and g and sums g p over its chunk; kernel 2
 * adds the row's partials (the same order in every block), so dot = sum over the row of g p,
 * reads c and g again and writes dc = [0 <= c <= 1] scale_ch p (g - dot) (06-b1-autograd.cu's
 * derivation); its first block of a row keeps dot, and a last small kernel adds dscale_ch =
 * sum over n of dot, in n order: deterministic.
 * Bytes: forward 3 x 1073.7 MB (v4); backward: c and g twice, dc once: 5 x 1073.7 MB; 8.6 GB
 * against the 5.4 GB floor. Prediction: 2.9 ms at the ceiling, 2.7x faster than b1.
 * Measured: 2.914 ms [b2 epilogue_fwdbwd], 61.6% of the ceiling [b2 epilogue_fwdbwd pct_ceiling]:
 * the predicted time. 3.07x faster than b1 [b1/b2 epilogue_fwdbwd] rather than the predicted 2.7x,
 * because b1 ran 1.13x over its own prediction. torch.compile's forward + backward takes 4.209 ms
 * [compile epilogue_fwdbwd].
 */
#include "rows.cuh"

__global__ void __launch_bounds__(V5_BLOCK)
b2_dot_chunks(const float *__restrict__ c, const float *__restrict__ g, const float *__restrict__ lse,
              float *__restrict__ part, int S, int split)
{
    int row = blockIdx.x / split, k = blockIdx.x - row * split, n4 = S / 4;
    const float4 *c4 = (const float4 *)(c + (size_t)row * S), *g4 = (const float4 *)(g + (size_t)row * S);
    int lo = (int)((long long)n4 * k / split), hi = (int)((long long)n4 * (k + 1) / split);
    float m = lse[row], dot = 0.0f;
    for (int j = lo + threadIdx.x; j < hi; j += V5_BLOCK) {
        float4 p = exp4(clamp4(c4[j]), m), gv = g4[j];
        dot += (gv.x * p.x + gv.y * p.y) + (gv.z * p.z + gv.w * p.w);
    }
    dot = block_sum(dot);
    if (threadIdx.x == 0)
        part[blockIdx.x] = dot;
}

__device__ static inline float dc_of(float c, float p, float g, float dot, float sc)
{
    return (c >= CLAMP_LO && c <= CLAMP_HI) ? sc * p * (g - dot) : 0.0f;
}

__global__ void __launch_bounds__(V5_BLOCK)
b2_dc_chunks(const float *__restrict__ c, const float *__restrict__ g, const float *__restrict__ lse,
             const float *__restrict__ part, const float *__restrict__ scale, float *__restrict__ dc,
             float *__restrict__ dot_out, int S, int split)
{
    int row = blockIdx.x / split, k = blockIdx.x - row * split, n4 = S / 4;
    float dot = 0.0f;
    for (int q = 0; q < split; q++) /* the same order in every block of the row */
        dot += part[row * split + q];
    if (k == 0 && threadIdx.x == 0)
        dot_out[row] = dot;
    const float4 *c4 = (const float4 *)(c + (size_t)row * S), *g4 = (const float4 *)(g + (size_t)row * S);
    float4 *d4 = (float4 *)(dc + (size_t)row * S);
    int lo = (int)((long long)n4 * k / split), hi = (int)((long long)n4 * (k + 1) / split);
    float m = lse[row], sc = scale[row % C_OUT];
    for (int j = lo + threadIdx.x; j < hi; j += V5_BLOCK) {
        float4 cv = c4[j], gv = g4[j], p = exp4(clamp4(cv), m);
        d4[j] = make_float4(dc_of(cv.x, p.x, gv.x, dot, sc), dc_of(cv.y, p.y, gv.y, dot, sc),
                            dc_of(cv.z, p.z, gv.z, dot, sc), dc_of(cv.w, p.w, gv.w, dot, sc));
    }
}

__global__ void b2_dscale(const float *__restrict__ dot, float *__restrict__ dscale, int n)
{
    int ch = threadIdx.x;
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s += dot[i * C_OUT + ch];
    dscale[ch] = s;
}

/* the backward after a forward that wrote lse (b3's fallback too) */
void b2_backward(const run_ctx *r)
{
    int blocks = rows(&r->sh) * r->split;
    b2_dot_chunks<<<blocks, V5_BLOCK, 0, r->stream>>>(r->c, r->g, r->lse, r->bpart, r->sh.s, r->split);
    b2_dc_chunks<<<blocks, V5_BLOCK, 0, r->stream>>>(r->c, r->g, r->lse, r->bpart, r->scale, r->dc, r->dot,
                                       r->sh.s, r->split);
    b2_dscale<<<1, C_OUT, 0, r->stream>>>(r->dot, r->dscale, r->sh.n);
}

void b2_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_TRAIN)
        model_front(r);
    v4_epilogue(r);
    b2_backward(r);
    if (scope == SCOPE_TRAIN)
        conv_pool_grads(r);
}
