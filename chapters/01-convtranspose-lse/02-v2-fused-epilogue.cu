/*
 * v2: one fused epilogue kernel, a thread per output position
 *
 * Defect of v1: six extra round trips through DRAM and seven launches (1.9 GB for a 1.07 GB
 * floor). Change: one kernel, one thread per output position, the 16 channel values held in
 * registers, the whole tail applied before the single store. A warp's 32 threads take 32
 * adjacent positions, so for each channel the warp reads 128 contiguous bytes: coalesced. The
 * 16 loads are independent, so each thread has 16 in flight (64 bytes) before the first is used.
 * The grid (common/gpu.h's grid_for, as v1's) is at most 32 blocks of 256 an SM, so a thread
 * takes one position, then the one a grid further on: a grid-stride loop.
 * Prediction: the 1.07 GB floor, 0.359 ms [v2 epilogue_fwd floor_ms], if 64 bytes a thread in
 * flight hide DRAM latency.
 * Measured: 0.416 ms [v2 epilogue_fwd], 86% of the copy ceiling [v2 epilogue_fwd pct_ceiling],
 * 1.82x v1 [v1/v2 epilogue_fwd]. Not the floor. Suspects: 16 load instructions per position for 64
 * bytes, an integer division per position, the accurate expf/logf; v7 (after v3) removes all but
 * the loads, and measures what that was worth.
 */
#include "model.h"
#include "tail.cuh"

__global__ void v2_epilogue_fused(const float *__restrict__ c, const float *__restrict__ b,
                                  float *__restrict__ y, int n_pos, int s)
{
    float bv = *b;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_pos; i += gridDim.x * blockDim.x) {
        int n = i / s, p = i - n * s;
        const float *src = c + n * C_OUT * s + p;
        float v[C_OUT];
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++)
            v[ch] = src[ch * s];
        float m = v[0];
#pragma unroll
        for (int ch = 1; ch < C_OUT; ch++)
            m = fmaxf(m, v[ch]);
        float sum = 0.0f;
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++)
            sum += expf(v[ch] - m);
        y[i] = tail_accurate(m + logf(sum), bv);
    }
}

void v2_launch(const run_ctx *r, int scope)
{
    int n = (int)out_elems(&r->sh);
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    v2_epilogue_fused<<<grid_for(n, 256, r->sm_count), 256>>>(r->c, r->b, r->y, n, r->sh.s);
}
