/*
 * v7: v6 with Welford's update and Chan's merge
 *
 * Defect of v2..v6: var = E[a^2] - mean^2 cancels. With a slice's mean large against its
 * spread, a^2's float sum carries rounding errors larger than the variance itself.
 * Change: each thread runs Welford's update over its values, then the block merges the
 * threads' (count, mean, M2) with Chan's formula (common/welford.cuh): by warp shuffles, then one warp
 * over the warps' results.
 * Prediction: as fast as v6 (memory-bound, 0.035 ms of bytes), exact where v6 cancels.
 * Measured: v7's statistics 0.0423 ms [v7 stats], 12% slower [v7 vs v6 stats] than v6's (a division
 * per element). What it buys, the Welford demonstration the program prints after its table
 * (problem.cu: a = c m + offset on the KernelBench conv output, worst relative error of rstd over
 * 2048 slices; from the run's output, not the CSV):
 *   offset 0:     sum/sum of squares (v6) 1.7e-6, Welford (v7) 1.6e-7, CUB (v8) 1.7e-7
 *   offset 1000:  sum/sum of squares 1.0e+2 (the variance is gone), Welford 1.7e-4, CUB 2.0e-4
 * With the offset, a^2 ~ 1e6 m^2 and its float sum carries errors larger than the variance
 * (~0.03 m^2); Welford's deviations are of the variance's size. 1.7e-4 is the input's own
 * rounding: 1000 m is stored to 2^-24 relative, 6e-5 m absolute, against a spread of 0.17 m.
 */
#include "model.h"
#include "slice-welford.cuh"

__global__ void __launch_bounds__(MANY_BLOCK)
k_stats_welford(const float *__restrict__ a, const float *__restrict__ m, float *__restrict__ mean,
                float *__restrict__ rstd, int S)
{
    __shared__ welford warp_part[MANY_BLOCK / 32];
    int seg = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float mult = m ? __ldg(m + seg % C_OUT) : 1.0f;
    welford w = thread_welford(a + (size_t)seg * S, S, mult);
    for (int off = 16; off > 0; off >>= 1)
        w = chan_merge(w, shfl_welford(w, off));
    if (lane == 0)
        warp_part[warp] = w;
    __syncthreads();
    if (warp == 0) {
        welford z = {0, 0.0f, 0.0f};
        w = lane < MANY_BLOCK / 32 ? warp_part[lane] : z;
        for (int off = 16; off > 0; off >>= 1)
            w = chan_merge(w, shfl_welford(w, off));
        if (lane == 0)
            mean[seg] = w.mean, rstd[seg] = rsqrtf(w.m2 / S + (float)IN_EPS);
    }
}

void stats_v7(const run_ctx *r, const float *a, const float *m)
{
    k_stats_welford<<<(int)seg_count(&r->sh), MANY_BLOCK>>>(a, m, r->mean, r->rstd, r->sh.s);
}

void v7_launch(const run_ctx *r, int scope) { eager_launch(r, scope, stats_v7); }
