/*
 * b2: the fused backward, c read once more and dc written once
 *
 * Defect of b1: a kernel per op and three saved tensors, 1.9 GB of traffic beyond the floor
 * (2.42 ms). Change: one kernel after v4's forward: each thread takes four positions as v4 does
 * (16-byte loads on the misaligned planes, load4.cuh), recomputes z from the 16 values it holds
 * (a two-pass logsumexp is cheap once the values are in registers, and keeps e_c = exp(v_c - m)
 * for the softmax), applies the chain rule of reference.cu and writes dc for its four positions
 * in every channel. -ds is summed per block (common/reduce.cuh's block_sum) into one partial a
 * block, and one block adds the partials in a fixed order: db is deterministic, no atomics.
 * Prediction: read c and g, write dc: 2.1 GB, about 0.7 ms at the ceiling; with v4's 0.375 ms,
 * about 1.07 ms for forward + backward, near the 1.056 ms floor.
 * Measured: 1.286 ms for v4 + this, 1.88x b1, against the 1.056 ms floor and torch.compile's
 * 1.18 ms: the 1.1 ms target is missed by 17%. The backward kernel alone, under ncu (commit
 * 67d6ee5): 0.896 ms, DRAM at 73.7% of peak, 22.9 cycles per issued instruction stalled on long
 * scoreboard (waiting for loads) at 37% occupancy: 80 registers, most of them the 64 values kept
 * for the softmax.
 * Capped at 80 registers (3 blocks of 256 an SM, 48 bytes of spill): register caps and
 * evict-first stores were measured (the chapter README's "tried" list); this was the fastest.
 *
 * This file also wraps the two stages of common/reduce.cuh as one call each for b1's db and
 * b3's dw and dbias (sum_channels, sum_segments).
 */
#include "load4.cuh"
#include "model.h"
#include "reduce.cuh"
#include "tail.cuh"

#define B2_BLOCK 256

__global__ void __launch_bounds__(B2_BLOCK, 3)
    k_epilogue_backward_fused(const float *__restrict__ c, const float *__restrict__ g,
                              const float *__restrict__ b, float *__restrict__ dc,
                              float *__restrict__ partials, int s, int total)
{
    int n = blockIdx.y;
    int p0 = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    float db_sum = 0.0f; /* -ds summed: the minus of s = a - b */
    if (p0 < s) {
        float e[C_OUT][4], m[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++) {
            load4(c, (n * C_OUT + ch) * s, p0, s, total, e[ch]);
#pragma unroll
            for (int k = 0; k < 4; k++)
                m[k] = fmaxf(m[k], e[ch][k]);
        }
        float sum[4] = {0, 0, 0, 0};
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++)
#pragma unroll
            for (int k = 0; k < 4; k++) {
                e[ch][k] = EXP_FAST(e[ch][k] - m[k]);
                sum[k] += e[ch][k];
            }
        float bv = *b, dz_over_sum[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float z = m[k] + LOG_FAST(sum[k]);
            float t = 1.0f / (1.0f + EXP_FAST(-(z + 3.0f)));
            float sv = z * t / 6.0f - bv;
            float gk = p0 + k < s ? g[n * s + p0 + k] : 0.0f;
            float ds = (sv >= -1.0f && sv <= 1.0f) ? gk : 0.0f;
            db_sum -= ds;
            dz_over_sum[k] = ds * t * (1.0f + z * (1.0f - t)) / (6.0f * sum[k]);
        }
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++)
#pragma unroll
            for (int k = 0; k < 4; k++)
                if (p0 + k < s)
                    dc[(n * C_OUT + ch) * s + p0 + k] = dz_over_sum[k] * e[ch][k];
    }
    db_sum = block_sum(db_sum);
    if (threadIdx.x == 0)
        partials[blockIdx.y * gridDim.x + blockIdx.x] = db_sum;
}


/* ---- experiment (issue 15): aligned dc stores through warp shuffles, re-reading c ---- */
#include "lse.cuh"
#include <stdlib.h>

/* dc[row + p0 + k] = v[k] for the k < 4 with p0 + k < s, as aligned float4 stores: lane i writes
 * the aligned float4 that starts inside its group, its last r values and lane i+1's first 4 - r
 * (a shuffle); lane 0's head and lane 31's tail, and groups at a plane's end, go scalar. Every
 * lane of the warp must call it (the shuffles) with the same row. */
__device__ static inline void store4_shuffled(float *__restrict__ dc, int row, int p0, int s,
                                              const float v[4])
{
    int lane = threadIdx.x & 31, r = row & 3, a = row + p0;
    if (r == 0) {
        if (p0 + 4 <= s) {
            *reinterpret_cast<float4 *>(dc + a) = make_float4(v[0], v[1], v[2], v[3]);
            return;
        }
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (p0 + k < s)
                dc[a + k] = v[k];
        return;
    }
    float4 q;
    switch (r) {
    case 1:
        q = make_float4(v[3], __shfl_down_sync(~0u, v[0], 1), __shfl_down_sync(~0u, v[1], 1),
                        __shfl_down_sync(~0u, v[2], 1));
        break;
    case 2:
        q = make_float4(v[2], v[3], __shfl_down_sync(~0u, v[0], 1),
                        __shfl_down_sync(~0u, v[1], 1));
        break;
    default:
        q = make_float4(v[1], v[2], v[3], __shfl_down_sync(~0u, v[0], 1));
        break;
    }
    bool full = lane < 31 && p0 + 7 - r < s;
    bool head = lane == 0 || p0 + 3 - r >= s;
    if (full)
        *reinterpret_cast<float4 *>(dc + a - r + 4) = q;
#pragma unroll
    for (int k = 0; k < 4; k++)
        if (p0 + k < s && (k < 4 - r ? head : !full))
            dc[a + k] = v[k];
}

template <int SHUF, int REREAD, int MINB>
__global__ void __launch_bounds__(B2_BLOCK, MINB)
    k_b2x(const float *__restrict__ c, const float *__restrict__ g, const float *__restrict__ b,
          float *__restrict__ dc, float *__restrict__ partials, int s, int total)
{
    int n = blockIdx.y;
    int p0 = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    float db_sum = 0.0f;
    if (SHUF || p0 < s) {
        float bv = *b, dzs[4], zz[4];
        float e[REREAD ? 1 : C_OUT][4], m[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
        float sum[4] = {0, 0, 0, 0};
        if (REREAD) {
#pragma unroll
            for (int ch = 0; ch < C_OUT; ch++) {
                float v[4];
                load4(c, (n * C_OUT + ch) * s, p0, s, total, v);
#pragma unroll
                for (int k = 0; k < 4; k++)
                    lse_online(v[k], &m[k], &sum[k]);
            }
        } else {
#pragma unroll
            for (int ch = 0; ch < C_OUT; ch++) {
                load4(c, (n * C_OUT + ch) * s, p0, s, total, e[REREAD ? 0 : ch]);
#pragma unroll
                for (int k = 0; k < 4; k++)
                    m[k] = fmaxf(m[k], e[REREAD ? 0 : ch][k]);
            }
#pragma unroll
            for (int ch = 0; ch < C_OUT; ch++)
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    e[REREAD ? 0 : ch][k] = EXP_FAST(e[REREAD ? 0 : ch][k] - m[k]);
                    sum[k] += e[REREAD ? 0 : ch][k];
                }
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float z = m[k] + LOG_FAST(sum[k]);
            float t = 1.0f / (1.0f + EXP_FAST(-(z + 3.0f)));
            float sv = z * t / 6.0f - bv;
            float gk = p0 + k < s ? g[n * s + p0 + k] : 0.0f;
            float ds = (sv >= -1.0f && sv <= 1.0f) ? gk : 0.0f;
            db_sum -= ds;
            float dz = ds * t * (1.0f + z * (1.0f - t)) / 6.0f;
            zz[k] = z;
            dzs[k] = REREAD ? dz : dz / sum[k];
        }
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++) {
            float o[4];
            if (REREAD) {
                float v[4];
                load4(c, (n * C_OUT + ch) * s, p0, s, total, v);
#pragma unroll
                for (int k = 0; k < 4; k++)
                    o[k] = dzs[k] * EXP_FAST(v[k] - zz[k]);
            } else {
#pragma unroll
                for (int k = 0; k < 4; k++)
                    o[k] = dzs[k] * e[REREAD ? 0 : ch][k];
            }
            if (SHUF)
                store4_shuffled(dc, (n * C_OUT + ch) * s, p0, s, o);
            else
#pragma unroll
                for (int k = 0; k < 4; k++)
                    if (p0 + k < s)
                        dc[(n * C_OUT + ch) * s + p0 + k] = o[k];
        }
    }
    db_sum = block_sum(db_sum);
    if (threadIdx.x == 0)
        partials[blockIdx.y * gridDim.x + blockIdx.x] = db_sum;
}

/* v[k] = c[row + p0 + k], k < 2, 0 past the plane; p0 even */
__device__ static inline void load2(const float *__restrict__ c, int row, int p0, int s, int total,
                                    float v[2])
{
    int a = row + p0, r = row & 1;
    if (p0 + 2 <= s && a - r + 4 <= total) {
        const float2 *q = reinterpret_cast<const float2 *>(c + (a - r));
        float2 lo = __ldg(q);
        if (r == 0) {
            v[0] = lo.x, v[1] = lo.y;
            return;
        }
        float2 hi = __ldg(q + 1);
        v[0] = lo.y, v[1] = hi.x;
        return;
    }
    for (int k = 0; k < 2; k++)
        v[k] = (p0 + k < s) ? c[a + k] : 0.0f;
}

template <int P, int MINB>
__global__ void __launch_bounds__(B2_BLOCK, MINB)
    k_b2p(const float *__restrict__ c, const float *__restrict__ g, const float *__restrict__ b,
          float *__restrict__ dc, float *__restrict__ partials, int s, int total)
{
    int n = blockIdx.y;
    int p0 = P * (blockIdx.x * blockDim.x + threadIdx.x);
    float db_sum = 0.0f;
    if (p0 < s) {
        float e[C_OUT][P], m[P];
#pragma unroll
        for (int k = 0; k < P; k++)
            m[k] = -INFINITY;
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++) {
            if (P == 4)
                load4(c, (n * C_OUT + ch) * s, p0, s, total, e[ch]);
            else if (P == 2)
                load2(c, (n * C_OUT + ch) * s, p0, s, total, e[ch]);
            else
                e[ch][0] = __ldg(c + (n * C_OUT + ch) * s + p0);
#pragma unroll
            for (int k = 0; k < P; k++)
                m[k] = fmaxf(m[k], e[ch][k]);
        }
        float sum[P];
#pragma unroll
        for (int k = 0; k < P; k++)
            sum[k] = 0.0f;
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++)
#pragma unroll
            for (int k = 0; k < P; k++) {
                e[ch][k] = EXP_FAST(e[ch][k] - m[k]);
                sum[k] += e[ch][k];
            }
        float bv = *b, dzs[P];
#pragma unroll
        for (int k = 0; k < P; k++) {
            float z = m[k] + LOG_FAST(sum[k]);
            float t = 1.0f / (1.0f + EXP_FAST(-(z + 3.0f)));
            float sv = z * t / 6.0f - bv;
            float gk = p0 + k < s ? g[n * s + p0 + k] : 0.0f;
            float ds = (sv >= -1.0f && sv <= 1.0f) ? gk : 0.0f;
            db_sum -= ds;
            dzs[k] = ds * t * (1.0f + z * (1.0f - t)) / (6.0f * sum[k]);
        }
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++)
#pragma unroll
            for (int k = 0; k < P; k++)
                if (p0 + k < s)
                    dc[(n * C_OUT + ch) * s + p0 + k] = dzs[k] * e[ch][k];
    }
    db_sum = block_sum(db_sum);
    if (threadIdx.x == 0)
        partials[blockIdx.y * gridDim.x + blockIdx.x] = db_sum;
}

/* a thread per position, looping over positions gridDim.x * B2_BLOCK apart, the next position's
 * 16 values loaded while this one's are used */
template <int MINB>
__global__ void __launch_bounds__(B2_BLOCK, MINB)
    k_b2s(const float *__restrict__ c, const float *__restrict__ g, const float *__restrict__ b,
          float *__restrict__ dc, float *__restrict__ partials, int s, int ns)
{
    float db_sum = 0.0f, bv = *b;
    int q = blockIdx.x * B2_BLOCK + threadIdx.x, stride = gridDim.x * B2_BLOCK;
    float cur[C_OUT], nxt[C_OUT], gc = 0.0f, gn = 0.0f;
    int base = 0;
    if (q < ns) {
        int n = q / s;
        base = n * C_OUT * s + (q - n * s);
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++)
            cur[ch] = __ldg(c + base + ch * s);
        gc = __ldg(g + q);
    }
    for (; q < ns; q += stride) {
        int qn = q + stride, bn = 0;
        if (qn < ns) {
            int n = qn / s;
            bn = n * C_OUT * s + (qn - n * s);
#pragma unroll
            for (int ch = 0; ch < C_OUT; ch++)
                nxt[ch] = __ldg(c + bn + ch * s);
            gn = __ldg(g + qn);
        }
        float m = cur[0];
#pragma unroll
        for (int ch = 1; ch < C_OUT; ch++)
            m = fmaxf(m, cur[ch]);
        float sum = 0.0f;
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++) {
            cur[ch] = EXP_FAST(cur[ch] - m);
            sum += cur[ch];
        }
        float z = m + LOG_FAST(sum);
        float t = 1.0f / (1.0f + EXP_FAST(-(z + 3.0f)));
        float sv = z * t / 6.0f - bv;
        float ds = (sv >= -1.0f && sv <= 1.0f) ? gc : 0.0f;
        db_sum -= ds;
        float dzs = ds * t * (1.0f + z * (1.0f - t)) / (6.0f * sum);
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++)
            dc[base + ch * s] = dzs * cur[ch];
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++)
            cur[ch] = nxt[ch];
        gc = gn, base = bn;
    }
    db_sum = block_sum(db_sum);
    if (threadIdx.x == 0)
        partials[blockIdx.x] = db_sum;
}

void sum_channels(const float *a, int n, int channels, int s, int blocks, float *partials,
                  float *out)
{
    k_channel_sums<<<dim3(blocks, channels), 256>>>(a, NULL, partials, n, s);
    k_segment_sums<<<channels, 64>>>(partials, NULL, blocks, out);
}

void sum_segments(const float *partials, int segments, int count, int threads, float *out)
{
    k_segment_sums<<<segments, threads>>>(partials, NULL, count, out);
}

void b2_backward(const run_ctx *r)
{
    int quads = (r->sh.s + 3) / 4;
    dim3 grid((quads + B2_BLOCK - 1) / B2_BLOCK, r->sh.n);
    static int xv = -1;
    if (xv < 0)
        xv = getenv("B2X") ? atoi(getenv("B2X")) : 0;
    const float *c = r->c, *g = r->g, *b = r->b;
    float *dc = r->dc, *pa = r->partials;
    int s = r->sh.s, tot = (int)conv_elems(&r->sh);
    if (xv >= 100) { /* 1WM: W waves of M blocks an SM */
        int mb = xv % 10, waves = xv / 10 % 10;
        int ns = s * r->sh.n, blocks = r->sm_count * mb * waves;
        if (mb == 4) k_b2s<4><<<blocks, B2_BLOCK>>>(c, g, b, dc, pa, s, ns);
        if (mb == 5) k_b2s<5><<<blocks, B2_BLOCK>>>(c, g, b, dc, pa, s, ns);
        if (mb == 6) k_b2s<6><<<blocks, B2_BLOCK>>>(c, g, b, dc, pa, s, ns);
        sum_segments(r->partials, 1, blocks, 1024, r->db);
        return;
    }
    if (xv >= 10) {
        int P = xv / 10 % 10, mb = xv % 10;
        int units = (s + P - 1) / P;
        dim3 gp((units + B2_BLOCK - 1) / B2_BLOCK, r->sh.n);
        if (P == 1 && mb == 6) k_b2p<1, 6><<<gp, B2_BLOCK>>>(c, g, b, dc, pa, s, tot);
        if (P == 1 && mb == 8) k_b2p<1, 8><<<gp, B2_BLOCK>>>(c, g, b, dc, pa, s, tot);
        if (P == 2 && mb == 4) k_b2p<2, 4><<<gp, B2_BLOCK>>>(c, g, b, dc, pa, s, tot);
        if (P == 2 && mb == 5) k_b2p<2, 5><<<gp, B2_BLOCK>>>(c, g, b, dc, pa, s, tot);
        if (P == 2 && mb == 6) k_b2p<2, 6><<<gp, B2_BLOCK>>>(c, g, b, dc, pa, s, tot);
        sum_segments(r->partials, 1, gp.x * gp.y, 1024, r->db);
        return;
    }
    switch (xv) {
    case 1: k_b2x<1, 0, 3><<<grid, B2_BLOCK>>>(c, g, b, dc, pa, s, tot); break;
    case 2: k_b2x<1, 0, 4><<<grid, B2_BLOCK>>>(c, g, b, dc, pa, s, tot); break;
    case 3: k_b2x<1, 1, 1><<<grid, B2_BLOCK>>>(c, g, b, dc, pa, s, tot); break;
    case 4: k_b2x<0, 1, 1><<<grid, B2_BLOCK>>>(c, g, b, dc, pa, s, tot); break;
    case 5: k_b2x<0, 0, 3><<<grid, B2_BLOCK>>>(c, g, b, dc, pa, s, tot); break;
    case 6: k_b2x<1, 1, 4><<<grid, B2_BLOCK>>>(c, g, b, dc, pa, s, tot); break;
    case 7: k_b2x<1, 1, 6><<<grid, B2_BLOCK>>>(c, g, b, dc, pa, s, tot); break;
    case 8: k_b2x<1, 1, 8><<<grid, B2_BLOCK>>>(c, g, b, dc, pa, s, tot); break;
    default:
        k_epilogue_backward_fused<<<grid, B2_BLOCK>>>(r->c, r->g, r->b, r->dc, r->partials, r->sh.s,
                                                      (int)conv_elems(&r->sh));
    }
    sum_segments(r->partials, 1, grid.x * grid.y, 1024, r->db); /* db */
}

void b2_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_TRAIN)
        conv_forward(r);
    v4_epilogue(r);
    b2_backward(r);
    if (scope == SCOPE_TRAIN)
        lib_dx(r), lib_dw(r), lib_dbias(r);
}
