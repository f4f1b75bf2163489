/*
 * x1 (exercise): the statistics of each (n, c) slice by Welford's update and Chan's merge
 *
 * Write, between the two marker lines below, a kernel x1_stats_welford that computes, for every
 * slice (n, c) of the conv output, the mean and rstd = 1 / sqrt(var + IN_EPS) of a m (var the
 * biased variance, M2 / S), and the launcher that runs it in v1's chain. The argument a is the
 * conv output c (eager_epilogue passes r->c), so a m is the model's a = c m.
 * Layout: a is N x 16 x S floats, slice seg = n 16 + c at a + seg S, contiguous (S = (D-2)(H-2)
 * (W-2), 12600 at the KernelBench shape); m holds the 16 multipliers, or is NULL (then 1), and
 * is applied as each value is loaded; mean and rstd have one float a slice. Launch one block of
 * MANY_BLOCK (256) threads a slice, as v6 does.
 * What the harness checks: x1 runs where v7 runs (its statistics open v1's chain in the stats,
 * epilogue_fwd and model_fwd scopes); y element by element and the saved statistics within the
 * bounds of a stable algorithm (reference.cu), on every test shape, with the extreme inputs,
 * among them c = 50 +- 1, where sum and sum of squares cancel and fail.
 * Hint: common/welford.cuh has Welford's update (welford_add), Chan's merge (chan_merge) and a
 * warp shuffle of the state (shfl_welford); slice-welford.cuh a thread's state over its share
 * (thread_welford). Merge the 32 lanes of each warp by shuffles, then the block's 8 warps through
 * shared memory. v7 (03-v7-welford.cu) solves it; the README's exercises say how to run it.
 */
#include "model.h"
#include "slice-welford.cuh"

/* x1: begin */
__global__ void __launch_bounds__(MANY_BLOCK)
x1_stats_welford(const float *__restrict__ a, const float *__restrict__ m, float *__restrict__ mean,
                 float *__restrict__ rstd, int S)
{
}

static void stats_x1(const run_ctx *r, const float *a, const float *m)
{
    x1_stats_welford<<<(int)seg_count(&r->sh), MANY_BLOCK>>>(a, m, r->mean, r->rstd, r->sh.s);
}

void x1_launch(const run_ctx *r, int scope)
{
    if (hx_not_written("v7")) return;
    eager_launch(r, scope, stats_x1);
}
/* x1: end */
