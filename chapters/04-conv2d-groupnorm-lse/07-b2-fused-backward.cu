/*
 * b2: the fused backward (recompute, group sums by warp shuffles)
 *
 * Defect of b1: the forward writes four 520 MB intermediates for the backward, and the
 * backward writes three more and reads them back: 25 passes over 520 MB (b1's header).
 * Change: v4's forward (statistics, then y; nothing else saved), then three kernels that
 * recompute the forward from c and the saved statistics instead of reading it:
 *   sums    block (tile, G, n): each thread a position and the 4 channels of group G:
 *           r, then p = exp(r - y), dr = g p, dgn = dr hardswish'(t) (1 - t^2), dxh = dgn gamma;
 *           10 sums a block (dxh, dxh xh, and each channel's dgn xh and dgn) by warp shuffles
 *           (common/reduce.cuh's block_sum), one partial each a block
 *   merge   each (n, G)'s partials into mean(dxh), mean(dxh xh); each channel's into dgamma
 *           and dbeta, added in a fixed order (deterministic)
 *   apply   a thread a position, the 64 channels: dc = dr + rstd (dxh - m1 - xh m2)
 * Bytes: the forward 1048 MB (v4), the backward reads c twice and writes dc: 1560 MB + y and g.
 * Prediction: 2.6 GB, 0.87 ms at the ceiling.
 * Measured (H100 80GB HBM3, KernelBench shape, data/h100/ch04.csv): epilogue forward + backward
 * 1.507 ms [b2 epilogue_fwdbwd], 3.6x faster than b1 [b1/b2 epilogue_fwdbwd] and 1.7x the 0.87 ms
 * prediction, unprofiled (Nsight Compute on the sums and apply kernels, which recompute the
 * forward, is the next question); the training step 5.79 ms [b2 train_step].
 */
#include "apply.cuh"
#include "model.h"
#include "reduce.cuh"

/* block (tile, G, n): the 10 sums of group G over this tile's positions */
__global__ void __launch_bounds__(APPLY_BLOCK)
b2_backward_sums(const float *__restrict__ c, const float *__restrict__ y, const float *__restrict__ g,
                 const float *__restrict__ mean, const float *__restrict__ rstd,
                 const float *__restrict__ gamma, const float *__restrict__ beta,
                 float *__restrict__ part, int S)
{
    __shared__ float sa[C_OUT], sb[C_OUT];
    int tile = blockIdx.x, G = blockIdx.y, n = blockIdx.z, tiles = gridDim.x;
    int q = tile * APPLY_BLOCK + threadIdx.x, seg = n * GROUPS + G;
    affine_of(sa, sb, mean + n * GROUPS, rstd + n * GROUPS, gamma, beta);
    __syncthreads();
    float v[N_BSUMS];
    for (int k = 0; k < N_BSUMS; k++)
        v[k] = 0.0f;
    if (q < S) {
        const float *cs = c + (size_t)n * C_OUT * S + q;
        float yv = y[(size_t)n * S + q], gv = g[(size_t)n * S + q], mu = mean[seg], rs = rstd[seg];
        for (int k = 0; k < CPG; k++) {
            int ch = G * CPG + k;
            float t, rr = residual_at(cs, S, ch, sa, sb, &t);
            float dr = gv * __expf(rr - yv);
            float dgn = dr * hardswish_grad_on_tanh(t) * (1.0f - t * t);
            float xh = (cs[(size_t)ch * S] - mu) * rs, dxh = dgn * gamma[ch];
            v[0] += dxh, v[1] += dxh * xh;
            v[2 + k] = dgn * xh, v[6 + k] = dgn;
        }
    }
    for (int k = 0; k < N_BSUMS; k++) {
        float t = block_sum(v[k]);
        if (threadIdx.x == 0)
            part[((size_t)seg * tiles + tile) * N_BSUMS + k] = t;
    }
}

/* block (n, G): mean(dxh) and mean(dxh xh) from its tiles' partials, in order */
__global__ void b2_backward_group_means(const float *__restrict__ part, float *__restrict__ m1,
                                        float *__restrict__ m2, int tiles, int S)
{
    int seg = blockIdx.x;
    float a = 0.0f, b = 0.0f;
    for (int t = threadIdx.x; t < tiles; t += blockDim.x)
        a += part[((size_t)seg * tiles + t) * N_BSUMS], b += part[((size_t)seg * tiles + t) * N_BSUMS + 1];
    a = block_sum(a), b = block_sum(b);
    if (threadIdx.x == 0)
        m1[seg] = a / (float)(CPG * S), m2[seg] = b / (float)(CPG * S);
}

/* block c: dgamma and dbeta from every (n, tile) partial of its group, in order */
__global__ void b2_backward_params(const float *__restrict__ part, float *__restrict__ dgamma,
                                   float *__restrict__ dbeta, int N, int tiles)
{
    int ch = blockIdx.x, G = ch / CPG, k = ch % CPG;
    float a = 0.0f, b = 0.0f;
    for (int i = threadIdx.x; i < N * tiles; i += blockDim.x) {
        size_t e = (((size_t)(i / tiles) * GROUPS + G) * tiles + i % tiles) * N_BSUMS;
        a += part[e + 2 + k], b += part[e + 6 + k];
    }
    a = block_sum(a), b = block_sum(b);
    if (threadIdx.x == 0)
        dgamma[ch] = a, dbeta[ch] = b;
}

/* block (tile, n): dc at APPLY_BLOCK positions, all 64 channels */
__global__ void __launch_bounds__(APPLY_BLOCK)
b2_backward_apply(const float *__restrict__ c, const float *__restrict__ y, const float *__restrict__ g,
                  const float *__restrict__ mean, const float *__restrict__ rstd,
                  const float *__restrict__ gamma, const float *__restrict__ beta,
                  const float *__restrict__ m1, const float *__restrict__ m2, float *__restrict__ dc,
                  int S)
{
    __shared__ float sa[C_OUT], sb[C_OUT];
    int n = blockIdx.y, q = blockIdx.x * APPLY_BLOCK + threadIdx.x;
    affine_of(sa, sb, mean + n * GROUPS, rstd + n * GROUPS, gamma, beta);
    __syncthreads();
    if (q >= S)
        return;
    size_t base = (size_t)n * C_OUT * S + q;
    const float *cs = c + base;
    float yv = y[(size_t)n * S + q], gv = g[(size_t)n * S + q];
#pragma unroll 4
    for (int ch = 0; ch < C_OUT; ch++) {
        int seg = n * GROUPS + ch / CPG;
        float t, rr = residual_at(cs, S, ch, sa, sb, &t);
        float dr = gv * __expf(rr - yv);
        float dgn = dr * hardswish_grad_on_tanh(t) * (1.0f - t * t);
        float rs = rstd[seg], xh = (cs[(size_t)ch * S] - mean[seg]) * rs;
        dc[base + (size_t)ch * S] = dr + rs * (dgn * gamma[ch] - m1[seg] - xh * m2[seg]);
    }
}

void b2_launch(const run_ctx *r, int scope)
{
    const shape *s = &r->sh;
    int tiles = ceil_div(s->s, APPLY_BLOCK);
    if (scope == SCOPE_TRAIN)
        conv_forward(r);
    v4_epilogue(r);
    b2_backward_sums<<<dim3(tiles, GROUPS, s->n), APPLY_BLOCK>>>(r->c, r->y, r->g, r->mean, r->rstd,
                                                                 r->gamma, r->beta, r->bpart, s->s);
    b2_backward_group_means<<<(int)seg_count(s), 64>>>(r->bpart, r->m1, r->m2, tiles, s->s);
    b2_backward_params<<<C_OUT, 256>>>(r->bpart, r->dgamma, r->dbeta, s->n, tiles);
    b2_backward_apply<<<dim3(tiles, s->n), APPLY_BLOCK>>>(r->c, r->y, r->g, r->mean, r->rstd,
                                                          r->gamma, r->beta, r->m1, r->m2, r->dc,
                                                          s->s);
    if (scope == SCOPE_TRAIN)
        lib_dx(r), lib_dw(r), lib_dbias(r);
}
