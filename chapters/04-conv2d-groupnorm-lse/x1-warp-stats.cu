/*
 * x1 (exercise): the group statistics by warp shuffles, written by you
 *
 * What to write: the kernel x1_stats_warp below, between the lines x1: begin and x1: end. One
 * block of STATS_BLOCK (512) threads a group seg = (n, G) of c (NCHW, N x 64 x S floats; group
 * seg is the 4 S contiguous floats from seg 4 S). Each thread folds its share into a Welford
 * state (count, mean, M2) with thread_welford(c, seg, S, threadIdx.x, STATS_BLOCK)
 * (group-welford.cuh); then merge the block's 512 states into the group's with chan_merge
 * (common/welford.cuh, Chan's formula) and your own __shfl_down_sync or __shfl_xor_sync on the
 * three fields, with at most one __syncthreads, and let one thread write mean[seg] = the mean
 * and rstd[seg] = group_rstd(w, S). Do not call block_welford: it is the answer.
 * What the harness checks: x1 runs as v2 does, in its three scopes (the statistics alone, the
 * epilogue on c, the whole model): every group's mean and rstd and every y against float64, at
 * the KernelBench shape (build/ch04 --version x1, which also times it) and on awkward shapes and
 * extreme values (build/ch04 --test --version x1). Until the kernel is written, the launcher's
 * first line makes the harness report x1 as not written yet; delete that line when it is.
 * Hint: v2 solves it (02-v2-warp-stats.cu and block_welford in group-welford.cuh); expect v2's
 * time, since the statistics are bound by DRAM, not by the merge.
 */
#include "model.h"
#include "group-welford.cuh"

/* x1: begin */
__global__ void __launch_bounds__(STATS_BLOCK)
x1_stats_warp(const float *__restrict__ c, float *__restrict__ mean, float *__restrict__ rstd, int S)
{
    /* your kernel: thread_welford, the merge by shuffles, mean[seg] and rstd[seg] */
}

static void stats_x1(const run_ctx *r)
{
    x1_stats_warp<<<(int)seg_count(&r->sh), STATS_BLOCK>>>(r->c, r->mean, r->rstd, r->sh.s);
}

void x1_launch(const run_ctx *r, int scope)
{
    if (hx_not_written("v2"))
        return;
    eager_launch(r, scope, stats_x1);
}
/* x1: end */
