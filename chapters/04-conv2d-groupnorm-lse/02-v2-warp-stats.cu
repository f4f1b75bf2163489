/*
 * v2: the statistics by warp shuffles
 *
 * Defect of v1's statistics: after each thread's Welford pass, the tree over shared memory
 * takes 9 levels, each a round trip through shared memory and a __syncthreads that stops all
 * 16 warps until the slowest arrives; in the last 5 levels fewer than 32 threads work.
 * Change: the 32 lanes of a warp merge their (count, mean, M2) in registers, as chapter 3's
 * last Harris steps summed floats: __shfl_down_sync hands each lane the triple of the lane `off`
 * above (off = 16, 8, 4, 2, 1), five Chan merges leave the warp's result in lane 0
 * (common/welford.cuh's shfl_welford); lane 0 writes it to one shared slot a warp; one
 * __syncthreads; then warp 0 merges the 16 slots with a butterfly, __shfl_xor_sync(off = 8, 4,
 * 2, 1): lane i exchanges with lane i ^ off, both merge, and after four steps every lane holds
 * the group's result (a reduce and a broadcast at once, CUDA C++ Programming Guide, "Warp
 * Shuffle Functions"). One barrier instead of nine: block_welford in group-welford.cuh.
 * Prediction: the statistics read 520 MB: 0.174 ms [v2 stats floor_ms] at the ceiling for any
 * of v1..v3 if the merge is hidden behind the loads; the merge is a few hundred cycles against a
 * block's 254 KB, so v2 should gain only what v1's barriers cost, a few %.
 * Measured (H100 80GB HBM3, KernelBench shape, data/h100/ch04.csv): statistics 0.1842 ms
 * [0.1828 - 0.1852] [v2 stats median_ms min_ms max_ms] against v1's tree 0.1849 [0.1839 - 0.1858]
 * [v1 stats median_ms min_ms max_ms]: the ranges overlap, so the difference is noise. They read c
 * at 94% [v1 stats pct_ceiling] and 95% [v2 stats pct_ceiling] of the copy ceiling: a block waits
 * for 254 KB of loads, and nine barriers at the end of that are invisible. The shuffle pays in
 * code that reduces often (b2's sums, chapter 5's rows), not once a 254 KB group.
 */
#include "model.h"
#include "group-welford.cuh"

/* one block a group; the merge is block_welford (group-welford.cuh) */
__global__ void __launch_bounds__(STATS_BLOCK)
v2_stats_warp(const float *__restrict__ c, float *__restrict__ mean, float *__restrict__ rstd, int S)
{
    int seg = blockIdx.x;
    welford w = block_welford(thread_welford(c, seg, S, threadIdx.x, STATS_BLOCK));
    if (threadIdx.x == 0)
        mean[seg] = w.mean, rstd[seg] = group_rstd(w, S);
}

void stats_v2(const run_ctx *r)
{
    v2_stats_warp<<<(int)seg_count(&r->sh), STATS_BLOCK>>>(r->c, r->mean, r->rstd, r->sh.s);
}

void v2_launch(const run_ctx *r, int scope) { eager_launch(r, scope, stats_v2); }
