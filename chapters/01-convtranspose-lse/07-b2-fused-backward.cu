/*
 * b2: the fused backward, c read once more and dc written once
 *
 * Defect of b1: a kernel per op and three saved tensors, 1.9 GB of traffic beyond the floor
 * (2.41 ms [b1 epilogue_fwdbwd]).
 * Change: recompute instead of saving. One kernel after v7's forward: each thread takes two
 * adjacent positions (8-byte loads on the misaligned planes: load_shifted<2>, shifted-load.cuh,
 * shifted-load.svg), recomputes z from the 32 values it holds (two passes are cheap once the
 * values are in registers, and keep e_c = exp(v_c - m) for the softmax), applies the chain rule
 * of reference.cu and writes dc for its two positions in every channel. -ds is summed per block
 * (common/reduce.cuh's block_sum: warp shuffles, then shared memory) into one partial a block,
 * and one block adds the partials in a fixed order: db is deterministic, no atomics.
 * Two positions, not four or one: the 32 values fit 64 registers without spilling, 4 blocks of
 * 256 an SM; four positions took 80 registers (3 blocks) and lost, one position lost too
 * (LABBOOK.md has each form tried).
 * Prediction: read c and g, write dc: 2.1 GB, about 0.7 ms at the ceiling; with v7's 0.359 ms
 * [v7 epilogue_fwd], about 1.06 ms, at the 1.056 ms [b2 epilogue_fwdbwd floor_ms] floor.
 * Measured: 1.180 ms [b2 epilogue_fwdbwd], 89.5% of the floor [b2 epilogue_fwdbwd pct_floor],
 * 2.04x b1 [b1/b2 epilogue_fwdbwd], and 11.9% less time [b2 vs compile epilogue_fwdbwd] than
 * torch.compile (which saves z instead: LABBOOK.md). Not the floor: under ncu the kernel waits on
 * loads (48% of warps active, DRAM 73% busy), each value held in a register from its load to its
 * use; b4 (the advanced part) takes the loads out of the registers.
 */
#include "shifted-load.cuh"
#include "model.h"
#include "reduce.cuh"
#include "tail.cuh"

#define B2_BLOCK 256
#define B2_POS 2 /* positions a thread */

__global__ void __launch_bounds__(B2_BLOCK, 4)
    b2_epilogue_backward(const float *__restrict__ c, const float *__restrict__ g,
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
            load_shifted<2>(c, (n * C_OUT + ch) * s, p0, s, total, e[ch]);
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

/* b2's grid: blocks of B2_BLOCK threads, B2_POS positions a thread, x along a sample's S
 * positions, y the sample (problem.cu sizes the partials by it) */
dim3 b2_grid(const shape *sh)
{
    int pairs = (sh->s + B2_POS - 1) / B2_POS;
    return dim3((pairs + B2_BLOCK - 1) / B2_BLOCK, sh->n);
}

/* the two stages of common/reduce.cuh as one call each, for b1's db and b3's dw and dbias */
void sum_channels(const float *a, int n, int channels, int s, int blocks, float *partials,
                  float *out, cudaStream_t stream)
{
    k_channel_sums<<<dim3(blocks, channels), 256, 0, stream>>>(a, NULL, partials, n, s);
    k_segment_sums<<<channels, 64, 0, stream>>>(partials, NULL, blocks, out);
}

void sum_segments(const float *partials, int segments, int count, int threads, float *out,
                  cudaStream_t stream)
{
    k_segment_sums<<<segments, threads, 0, stream>>>(partials, NULL, count, out);
}

void b2_backward(const run_ctx *r)
{
    dim3 grid = b2_grid(&r->sh);
    b2_epilogue_backward<<<grid, B2_BLOCK>>>(r->c, r->g, r->b, r->dc, r->partials, r->sh.s,
                                             (int)conv_elems(&r->sh));
    sum_segments(r->partials, 1, grid.x * grid.y, 1024, r->db, r->stream); /* db */
}

void b2_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_TRAIN)
        conv_forward(r);
    v7_epilogue(r);
    b2_backward(r);
    if (scope == SCOPE_TRAIN)
        lib_dx(r), lib_dw(r), lib_dbias(r);
}
