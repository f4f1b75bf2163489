/*
 * sums.cuh: the warp and block sums the statistics kernels share (v2..v6, b1, b2, v10 on).
 *
 * A warp adds 32 values without shared memory or a barrier: __shfl_down_sync(mask, v, off)
 * hands each lane the v of the lane `off` above it, so five steps (off = 16, 8, 4, 2, 1) leave
 * the warp's sum in lane 0 (CUDA C++ Programming Guide, "Warp Shuffle Functions"): that is
 * warp_sum in common/reduce.cuh, shared with the other chapters. A block adds its warps' results
 * the same way, through one shared-memory slot a warp: block_sum2 below, for a pair of sums.
 * On the tutorial's learning path (chapter 1's core, then this chapter's) this is where warp
 * shuffles are first met: v2..v5's finishing kernel and v5's last warp use them, and chapter 4's
 * group statistics build on them.
 */
#ifndef CH03_SUMS_CUH
#define CH03_SUMS_CUH

#include "reduce.cuh"

#define FULL 0xffffffffu /* every lane of the warp takes part */

/* a sum and a sum of squares (or any pair) over the block: warp shuffles, then one warp over
 * the warps' results; the result is in thread 0. blockDim.x a multiple of 32. */
__device__ static inline float2 block_sum2(float2 v)
{
    __shared__ float2 warp_part[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    __syncthreads(); /* a previous call's warp 0 is done reading warp_part */
    v.x = warp_sum(v.x), v.y = warp_sum(v.y);
    if (lane == 0)
        warp_part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < n_warps ? warp_part[lane] : make_float2(0.0f, 0.0f);
        v.x = warp_sum(v.x), v.y = warp_sum(v.y);
    }
    return v;
}

#endif
