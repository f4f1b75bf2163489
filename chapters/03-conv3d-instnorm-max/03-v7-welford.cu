/*
 * v7: v6 with Welford's update and Chan's merge
 *
 * Defect of v2..v6: var = E[a^2] - mean^2 cancels. Where a slice's mean is large against its
 * spread, a^2's float sum carries rounding errors larger than the variance itself.
 * Change: each thread runs Welford's update over its values (slice-welford.cuh), then the block
 * merges the threads' (count, mean, M2) with Chan's formula (common/welford.cuh): by warp
 * shuffles, then one warp over the warps' results.
 * Prediction: as fast as v6 (memory-bound, the same bytes), and no cancellation where v6 has it.
 * Measured: 0.0423 ms [v7 stats], 81% of the copy ceiling [v7 stats pct_ceiling], 12% slower
 * [v7 vs v6 stats] than v6 (a division per element).
 * What it buys, the demonstration the program prints after its table (problem.cu, welford_demo:
 * a = c m + offset in float on the KernelBench conv output, the offset not scaled by m; rstd's
 * worst relative error over 2048 slices against double statistics of the same floats):
 *   offset 0:     sum/sum of squares (v6) 1.7e-6, Welford (v7) 1.6e-7, CUB (v8) 1.7e-7
 *   offset 1000:  sum/sum of squares 1.0e+2 (the variance is gone), Welford 1.7e-4, CUB 2.0e-4
 * Why, with the offset: a slice is 1000 + a spread sd (|m| times c's). Sum of squares adds
 * terms near 1e6, each rounded to 2^-24 of a running sum far above that, against a variance sd^2.
 * Welford adds deviations of size sd, but its running means and Chan's merged means are floats
 * near 1000, multiples of ulp(1000) = 2^-14: each update rounds the mean by up to 2^-15, and
 * the deviations after it are taken from that mean, so M2's relative error grows as 2^-14 / sd
 * (sum of squares': as 1 / sd^2), worst in the slices of smallest |m|. The inputs' rounding
 * plays no part (the reference is of the same floats); a float emulation with only the means
 * held in double falls to offset 0's error (LABBOOK.md).
 */
#include "model.h"
#include "slice-welford.cuh"

__global__ void __launch_bounds__(MANY_BLOCK)
v7_stats_welford(const float *__restrict__ a, const float *__restrict__ m, float *__restrict__ mean,
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
    v7_stats_welford<<<(int)seg_count(&r->sh), MANY_BLOCK, 0, r->stream>>>(a, m, r->mean, r->rstd, r->sh.s);
}

void v7_launch(const run_ctx *r, int scope) { eager_launch(r, scope, stats_v7); }
