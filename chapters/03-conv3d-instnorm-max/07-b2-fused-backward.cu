/*
 * b2: the fused backward, two passes
 *
 * Defect of b1: every intermediate gradient (du, dt, dxh, da) is a 103 MB tensor written and
 * read back, and its forward is v1's (1.65 ms [v1 epilogue_fwd]). Change: v9's forward, which
 * saves the statistics (mean, rstd) as PyTorch's instance norm does; then, since the backward
 * needs two reductions per (n, c) before any dc can be written, two kernels that recompute the
 * forward at each position from c instead of reading saved tensors:
 *   b2_bwd_sums: a thread per position recomputes xh and u for the 16 channels, finds the argmax
 *     k, and contributes dxh = g m_k (if xh_k is inside the clamp) and dxh xh_k to channel k's
 *     sums and g t_k to dm; a block's 256 positions are reduced per channel in shared memory
 *     (warp w adds channels w and w + 8), one partial per (n, c, tile); b2_bwd_means adds a
 *     slice's tiles in order;
 *   b2_bwd_dc: a thread per position recomputes again and writes all 16 dc, reducing da c for
 *     dm.
 * dm's partials are added in order (training-grads.cu): deterministic.
 * Bytes of the backward: c and g read twice, dc written: 3 x 103.2 + 2 x 6.45 = 322.5 MB,
 * against its floor of c and g read once and dc written (212.9 MB).
 * Prediction: v9's forward (0.083 ms [v9 epilogue_fwd]) plus 322.5 MB at the copy ceiling (0.108
 * ms): 0.19 ms.
 * Measured, forward + backward: 0.251 ms [b2 epilogue_fwdbwd] (v9's forward 0.083 [v9 epilogue_fwd]
 * of it), 43% of the floor [b2 epilogue_fwdbwd pct_floor] (c read in each direction, model.h),
 * 9.7x b1 [b1/b2 epilogue_fwdbwd] (2.426 ms [b1 epilogue_fwdbwd]), 5.0x torch.compile
 * [compile/b2 epilogue_fwdbwd] (1.261 ms [compile epilogue_fwdbwd]).
 */
#include "model.h"
#include "sums.cuh"

/* xh of the 16 channels at the position cp points to, and the argmax k of u = clamp(xh) m */
__device__ static inline void position_forward(const float *__restrict__ cp, int S, const float *mc,
                                               const float *mean, const float *rstd,
                                               float xh[C_OUT], int *k)
{
    float best = 0.0f;
    *k = 0;
#pragma unroll
    for (int co = 0; co < C_OUT; co++) {
        xh[co] = (a_rounded(cp[(size_t)co * S], mc[co]) - mean[co]) * rstd[co];
        float u = clampf1(xh[co]) * mc[co];
        if (co == 0 || u > best)
            best = u, *k = co;
    }
}

__global__ void __launch_bounds__(B2_BLOCK)
b2_bwd_sums(const float *__restrict__ c, const float *__restrict__ g, const float *__restrict__ m,
            const float *__restrict__ mean, const float *__restrict__ rstd,
            float *__restrict__ part, float *__restrict__ dm_part, int S, int tiles)
{
    __shared__ float sv[3][B2_BLOCK];
    __shared__ int sk[B2_BLOCK];
    __shared__ float mc[C_OUT], mu[C_OUT], rs[C_OUT];
    int n = blockIdx.y, s = blockIdx.x * B2_BLOCK + threadIdx.x;
    if (threadIdx.x < C_OUT) {
        mc[threadIdx.x] = __ldg(m + threadIdx.x);
        mu[threadIdx.x] = __ldg(mean + n * C_OUT + threadIdx.x);
        rs[threadIdx.x] = __ldg(rstd + n * C_OUT + threadIdx.x);
    }
    __syncthreads();
    int k = -1;
    float d = 0.0f, dx = 0.0f, gt = 0.0f;
    if (s < S) {
        float xh[C_OUT];
        position_forward(c + (size_t)n * C_OUT * S + s, S, mc, mu, rs, xh, &k);
        float gv = g[(size_t)n * S + s], xk = 0.0f;
#pragma unroll
        for (int co = 0; co < C_OUT; co++) /* xh[k] with a static index: no local memory */
            xk = co == k ? xh[co] : xk;
        d = xk >= -1.0f && xk <= 1.0f ? gv * mc[k] : 0.0f;
        dx = d * xk, gt = gv * clampf1(xk);
    }
    sk[threadIdx.x] = k, sv[0][threadIdx.x] = d, sv[1][threadIdx.x] = dx, sv[2][threadIdx.x] = gt;
    __syncthreads();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int co = warp; co < C_OUT; co += B2_BLOCK / 32) {
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f;
        for (int j = lane; j < B2_BLOCK; j += 32)
            if (sk[j] == co)
                a0 += sv[0][j], a1 += sv[1][j], a2 += sv[2][j];
        a0 = warp_sum(a0), a1 = warp_sum(a1), a2 = warp_sum(a2);
        if (lane == 0) {
            size_t e = ((size_t)n * C_OUT + co) * tiles + blockIdx.x;
            part[2 * e] = a0, part[2 * e + 1] = a1;
            dm_part[(size_t)co * gridDim.y * tiles + (size_t)n * tiles + blockIdx.x] = a2;
        }
    }
}

/* a thread per (n, c): the tiles' sums in order, divided by S */
__global__ void b2_bwd_means(const float *__restrict__ part, int tiles, int segs, int S,
                             float2 *__restrict__ means)
{
    int seg = blockIdx.x * blockDim.x + threadIdx.x;
    if (seg >= segs)
        return;
    float a = 0.0f, b = 0.0f;
    for (int t = 0; t < tiles; t++)
        a += part[2 * ((size_t)seg * tiles + t)], b += part[2 * ((size_t)seg * tiles + t) + 1];
    means[seg] = make_float2(a / S, b / S);
}

__global__ void __launch_bounds__(B2_BLOCK)
b2_bwd_dc(const float *__restrict__ c, const float *__restrict__ g, const float *__restrict__ m,
          const float *__restrict__ mean, const float *__restrict__ rstd,
          const float2 *__restrict__ means, float *__restrict__ dc, float *__restrict__ dm_part,
          int S, int tiles)
{
    __shared__ float red[C_OUT][B2_BLOCK + 1];
    __shared__ float mc[C_OUT], mu[C_OUT], rs[C_OUT];
    __shared__ float2 mm[C_OUT];
    int n = blockIdx.y, s = blockIdx.x * B2_BLOCK + threadIdx.x;
    if (threadIdx.x < C_OUT) {
        mc[threadIdx.x] = __ldg(m + threadIdx.x);
        mu[threadIdx.x] = __ldg(mean + n * C_OUT + threadIdx.x);
        rs[threadIdx.x] = __ldg(rstd + n * C_OUT + threadIdx.x);
        mm[threadIdx.x] = means[n * C_OUT + threadIdx.x];
    }
    __syncthreads();
    if (s < S) {
        const float *cp = c + (size_t)n * C_OUT * S + s;
        float xh[C_OUT];
        int k;
        position_forward(cp, S, mc, mu, rs, xh, &k);
        float gv = g[(size_t)n * S + s];
#pragma unroll
        for (int co = 0; co < C_OUT; co++) {
            float d = co == k && xh[co] >= -1.0f && xh[co] <= 1.0f ? gv * mc[co] : 0.0f;
            float da = rs[co] * (d - mm[co].x - xh[co] * mm[co].y);
            dc[((size_t)n * C_OUT + co) * S + s] = da * mc[co];
            red[co][threadIdx.x] = da * cp[(size_t)co * S];
        }
    } else {
#pragma unroll
        for (int co = 0; co < C_OUT; co++)
            red[co][threadIdx.x] = 0.0f;
    }
    __syncthreads();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int co = warp; co < C_OUT; co += B2_BLOCK / 32) {
        float a = 0.0f;
        for (int j = lane; j < B2_BLOCK; j += 32)
            a += red[co][j];
        a = warp_sum(a);
        if (lane == 0)
            dm_part[(size_t)co * gridDim.y * tiles + (size_t)n * tiles + blockIdx.x] = a;
    }
}

void b2_backward(const run_ctx *r)
{
    const shape *s = &r->sh;
    int tiles = ceil_div(s->s, B2_BLOCK), segs = (int)seg_count(s);
    dim3 grid(tiles, s->n);
    b2_bwd_sums<<<grid, B2_BLOCK, 0, r->stream>>>(r->c, r->g, r->m, r->mean, r->rstd, r->bpart, r->dm_part1,
                                    s->s, tiles);
    b2_bwd_means<<<ceil_div(segs, 128), 128, 0, r->stream>>>(r->bpart, tiles, segs, s->s, r->means);
    b2_bwd_dc<<<grid, B2_BLOCK, 0, r->stream>>>(r->c, r->g, r->m, r->mean, r->rstd, r->means, r->dc,
                                  r->dm_part2, s->s, tiles);
    channel_totals(r->dm_part1, r->dm_part2, s->n * tiles, r->dm, r->stream);
}

void b2_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_TRAIN)
        conv_forward(r);
    v9_epilogue(r);
    b2_backward(r);
    if (scope == SCOPE_TRAIN)
        lib_dx(r), own_dw(r), own_dbias(r);
}
