/*
 * b2: the fused backward, c read once more and dc written once
 *
 * Defect of b1: a kernel per op and three saved tensors, 1.9 GB of traffic beyond the floor
 * (2.42 ms). Change: one kernel after v4's forward: each thread takes two adjacent positions
 * (8-byte loads on the misaligned planes, load2 in load4.cuh), recomputes z from the 32 values
 * it holds (a two-pass logsumexp is cheap once the values are in registers, and keeps
 * e_c = exp(v_c - m) for the softmax), applies the chain rule of reference.cu and writes dc for
 * its two positions in every channel. -ds is summed per block (common/reduce.cuh's block_sum)
 * into one partial a block, and one block adds the partials in a fixed order: db is
 * deterministic, no atomics.
 * Prediction: read c and g, write dc: 2.1 GB, about 0.7 ms at the ceiling; with v4's 0.375 ms,
 * about 1.07 ms for forward + backward, near the 1.056 ms floor.
 *
 * First written with four positions a thread, as v4 does: 1.286 ms (the README's "tried" list),
 * 17% over the 1.1 ms target and behind torch.compile's 1.18. Its kernel, under ncu, was
 * latency-bound: 22.9 cycles per issued instruction stalled on long scoreboard (waiting for
 * loads) at 37% occupancy, because the 64 values it keeps for the softmax take 80 registers
 * (3 blocks of 256 an SM). Two positions a thread keep 32 values in 64 registers with no spill:
 * 4 blocks an SM, a third more warps to hide the loads' latency. If the kernel is latency-bound,
 * a third more warps make it up to 24/32 of its time: 0.90 x 0.75 = 0.67 ms, under the 0.70 ms
 * its bytes need, so it would meet the floor.
 * Measured (same H100, same call, commit 0c77edb): 1.210 ms against 1.311 for four positions a
 * thread, 7.7% faster, not the floor: the backward is about 0.835 ms, 84% of the copy ceiling.
 * ncu on the kernel alone: 48% of warps active, still 16 cycles of long-scoreboard stall an
 * issue, DRAM at 71% of peak; and 0.99 GB written for the 1.008 GB dc, where four positions a
 * thread wrote 1.14 GB (its 4-byte stores 16 bytes apart left sectors partly written when L2
 * evicted them). One position a thread (40 registers, 71% of warps active) took 1.221 ms; fewer
 * registers than 64 spill and lose; aligned float4 stores through warp shuffles, re-reading c
 * instead of holding it, and a loop that loads the next position while storing this one all
 * lost (the README's "tried" list has each number).
 *
 * This file also wraps the two stages of common/reduce.cuh as one call each for b1's db and
 * b3's dw and dbias (sum_channels, sum_segments).
 */
#include "load4.cuh"
#include "model.h"
#include "reduce.cuh"
#include "tail.cuh"
#include <stdlib.h>

#define B2_BLOCK 256
#define B2_POS 2 /* positions a thread */

__global__ void __launch_bounds__(B2_BLOCK, 4)
    k_epilogue_backward_fused(const float *__restrict__ c, const float *__restrict__ g,
                              const float *__restrict__ b, float *__restrict__ dc,
                              float *__restrict__ partials, int s, int total)
{
    int n = blockIdx.y;
    int p0 = B2_POS * (blockIdx.x * blockDim.x + threadIdx.x);
    float db_sum = 0.0f; /* -ds summed: the minus of s = a - b */
    if (p0 < s) {
        float e[C_OUT][B2_POS], m[B2_POS] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++) {
            load2(c, (n * C_OUT + ch) * s, p0, s, total, e[ch]);
#pragma unroll
            for (int k = 0; k < B2_POS; k++)
                m[k] = fmaxf(m[k], e[ch][k]);
        }
        float sum[B2_POS] = {0, 0};
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++)
#pragma unroll
            for (int k = 0; k < B2_POS; k++) {
                e[ch][k] = EXP_FAST(e[ch][k] - m[k]);
                sum[k] += e[ch][k];
            }
        float bv = *b, dz_over_sum[B2_POS];
#pragma unroll
        for (int k = 0; k < B2_POS; k++) {
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
            for (int k = 0; k < B2_POS; k++)
                if (p0 + k < s)
                    dc[(n * C_OUT + ch) * s + p0 + k] = dz_over_sum[k] * e[ch][k];
    }
    db_sum = block_sum(db_sum);
    if (threadIdx.x == 0)
        partials[blockIdx.y * gridDim.x + blockIdx.x] = db_sum;
}

__device__ static inline void load2cs(const float *__restrict__ c, int row, int p0, int s,
                                      int total, float v[2])
{
    int a = row + p0, r = row & 1;
    if (p0 + 2 <= s && a - r + 4 <= total) {
        const float2 *q = reinterpret_cast<const float2 *>(c + (a - r));
        float2 lo = __ldcs(q);
        if (r == 0) {
            v[0] = lo.x, v[1] = lo.y;
            return;
        }
        float2 hi = __ldcs(q + 1);
        v[0] = lo.y, v[1] = hi.x;
        return;
    }
    for (int k = 0; k < 2; k++)
        v[k] = (p0 + k < s) ? c[a + k] : 0.0f;
}
template <int BLK, int MINB, int CS, int SH>
__global__ void __launch_bounds__(BLK, MINB)
    k_b2y(const float *__restrict__ c, const float *__restrict__ g,
                              const float *__restrict__ b, float *__restrict__ dc,
                              float *__restrict__ partials, int s, int total)
{
    int n = blockIdx.y;
    int p0 = B2_POS * (blockIdx.x * blockDim.x + threadIdx.x);
    float db_sum = 0.0f; /* -ds summed: the minus of s = a - b */
    float e_g[C_OUT][B2_POS], dz_over_sum_g[B2_POS];
    if (p0 < s) {
        float (&e)[C_OUT][B2_POS] = e_g, m[B2_POS] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++) {
            if (CS) load2cs(c, (n * C_OUT + ch) * s, p0, s, total, e[ch]); else load2(c, (n * C_OUT + ch) * s, p0, s, total, e[ch]);
#pragma unroll
            for (int k = 0; k < B2_POS; k++)
                m[k] = fmaxf(m[k], e[ch][k]);
        }
        float sum[B2_POS] = {0, 0};
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++)
#pragma unroll
            for (int k = 0; k < B2_POS; k++) {
                e[ch][k] = EXP_FAST(e[ch][k] - m[k]);
                sum[k] += e[ch][k];
            }
        float bv = *b, *dz_over_sum = dz_over_sum_g;
#pragma unroll
        for (int k = 0; k < B2_POS; k++) {
            float z = m[k] + LOG_FAST(sum[k]);
            float t = 1.0f / (1.0f + EXP_FAST(-(z + 3.0f)));
            float sv = z * t / 6.0f - bv;
            float gk = p0 + k < s ? g[n * s + p0 + k] : 0.0f;
            float ds = (sv >= -1.0f && sv <= 1.0f) ? gk : 0.0f;
            db_sum -= ds;
            dz_over_sum[k] = ds * t * (1.0f + z * (1.0f - t)) / (6.0f * sum[k]);
        }
        if (SH == 0) {
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++)
#pragma unroll
            for (int k = 0; k < B2_POS; k++)
                if (p0 + k < s)
                    dc[(n * C_OUT + ch) * s + p0 + k] = dz_over_sum[k] * e[ch][k];
        } else if (SH == 2) {
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++)
#pragma unroll
            for (int k = 0; k < B2_POS; k++)
                if (p0 + k < s)
                    __stcs(dc + (n * C_OUT + ch) * s + p0 + k, dz_over_sum[k] * e[ch][k]);
        }
    }
    if (SH == 1) { /* aligned float2 stores: every lane here (p0 >= s lanes hold zeros) */
        int lane = threadIdx.x & 31;
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++) {
            int row = (n * C_OUT + ch) * s, a = row + p0;
            float v0 = p0 < s ? dz_over_sum_g[0] * e_g[ch][0] : 0.0f;
            float v1 = p0 < s ? dz_over_sum_g[1] * e_g[ch][1] : 0.0f;
            if ((row & 1) == 0) {
                if (p0 + 2 <= s)
                    *reinterpret_cast<float2 *>(dc + a) = make_float2(v0, v1);
                else if (p0 < s)
                    dc[a] = v0;
                continue;
            }
            float nx = __shfl_down_sync(~0u, v0, 1);
            bool full = lane < 31 && p0 + 2 < s;
            if (full)
                *reinterpret_cast<float2 *>(dc + a + 1) = make_float2(v1, nx);
            if (p0 < s && (lane == 0 || p0 + 1 - 1 >= s))
                dc[a] = v0;
            if (p0 + 1 < s && !full)
                dc[a + 1] = v1;
        }
    }
    db_sum = block_sum(db_sum);
    if (threadIdx.x == 0)
        partials[blockIdx.y * gridDim.x + blockIdx.x] = db_sum;
}

/* b2's grid: blocks of B2_BLOCK threads, B2_POS positions a thread, x along a sample's S
 * positions, y the sample (problem.cu sizes the partials by it) */
dim3 b2_grid(const shape *sh)
{
    int pairs = (sh->s + B2_POS - 1) / B2_POS;
    return dim3((pairs + B2_BLOCK - 1) / B2_BLOCK, sh->n);
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
    dim3 grid = b2_grid(&r->sh);
    static int xv = -1;
    if (xv < 0)
        xv = getenv("B2X") ? atoi(getenv("B2X")) : 0;
    const float *c = r->c, *g = r->g, *b = r->b;
    float *dc = r->dc, *pa = r->partials;
    int s = r->sh.s, tot = (int)conv_elems(&r->sh);
    if (xv) {
        int pairs = (s + 1) / 2;
        dim3 g1((pairs + 127) / 128, r->sh.n), g5((pairs + 511) / 512, r->sh.n);
        dim3 gg = xv == 1 ? g1 : xv == 2 ? g5 : grid;
        switch (xv) {
        case 1: k_b2y<128, 8, 0, 0><<<g1, 128>>>(c, g, b, dc, pa, s, tot); break;
        case 2: k_b2y<512, 2, 0, 0><<<g5, 512>>>(c, g, b, dc, pa, s, tot); break;
        case 3: k_b2y<256, 4, 1, 0><<<grid, 256>>>(c, g, b, dc, pa, s, tot); break;
        case 4: k_b2y<256, 4, 0, 2><<<grid, 256>>>(c, g, b, dc, pa, s, tot); break;
        case 5: k_b2y<256, 4, 0, 1><<<grid, 256>>>(c, g, b, dc, pa, s, tot); break;
        case 6: k_b2y<256, 4, 1, 1><<<grid, 256>>>(c, g, b, dc, pa, s, tot); break;
        case 7: k_b2y<256, 4, 0, 0><<<grid, 256>>>(c, g, b, dc, pa, s, tot); break;
        }
        sum_segments(r->partials, 1, gg.x * gg.y, 1024, r->db);
        return;
    }
    k_epilogue_backward_fused<<<grid, B2_BLOCK>>>(r->c, r->g, r->b, r->dc, r->partials, r->sh.s,
                                                  (int)conv_elems(&r->sh));
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
