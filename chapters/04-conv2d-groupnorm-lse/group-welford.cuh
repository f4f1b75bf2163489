/*
 * group-welford.cuh: one thread's Welford state over its share of a group (v1..v3, v5, x1), and
 * v2's merge of a block's states by warp shuffles (v2, v4, v5, b2; v7 uses its butterfly step
 * and group_rstd).
 *
 * Group (n, G) is channels 4G .. 4G+3 of sample n: 4 S values, contiguous in NCHW, starting at
 * float (n 64 + 4 G) S = seg 4 S, a multiple of 4, so always on a 16-byte boundary: the share is
 * read as float4, S of them a group. The update and the merge are common/welford.cuh's.
 */
#ifndef CH04_GROUP_WELFORD_CUH
#define CH04_GROUP_WELFORD_CUH

#include "model.h"
#include "welford.cuh"

/* the Welford state over float4 j = first, first + step, ... < S of group seg */
__device__ static inline welford thread_welford(const float *__restrict__ c, size_t seg, int S,
                                                int first, int step)
{
    const float4 *p = (const float4 *)(c + seg * CPG * S);
    welford w = {0, 0.0f, 0.0f};
    for (int j = first; j < S; j += step) {
        float4 v = p[j];
        welford_add(w, v.x), welford_add(w, v.y), welford_add(w, v.z), welford_add(w, v.w);
    }
    return w;
}

/* rstd from a group's merged state: 1 / sqrt(M2 / (4 S) + eps), the biased variance */
__device__ static inline float group_rstd(welford w, int S)
{
    return rsqrtf(w.m2 / (float)(CPG * S) + (float)GN_EPS);
}

/* lane ^ off's triple: the butterfly's exchange (every lane sends and receives) */
__device__ static inline welford xor_welford(welford w, int off)
{
    welford o = {__shfl_xor_sync(0xffffffffu, w.n, off), __shfl_xor_sync(0xffffffffu, w.mean, off),
                 __shfl_xor_sync(0xffffffffu, w.m2, off)};
    return o;
}

/* v2's merge of the block's STATS_BLOCK states (02-v2-warp-stats.cu says why): each warp's tree by
 * __shfl_down_sync into lane 0, one shared slot a warp, one __syncthreads, then warp 0's
 * butterfly by __shfl_xor_sync over the 16 slots. The result is in every lane of warp 0. */
__device__ static inline welford block_welford(welford w)
{
    __shared__ welford warp_part[STATS_BLOCK / 32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int off = 16; off > 0; off >>= 1) /* the warp's tree: lane 0 ends with its merge */
        w = chan_merge(w, shfl_welford(w, off));
    if (lane == 0)
        warp_part[warp] = w;
    __syncthreads();
    if (warp == 0) {
        welford z = {0, 0.0f, 0.0f};
        w = lane < STATS_BLOCK / 32 ? warp_part[lane] : z;
        for (int off = STATS_BLOCK / 64; off > 0; off >>= 1) /* the butterfly over 16 slots */
            w = chan_merge(w, xor_welford(w, off));
    }
    return w;
}

#endif
