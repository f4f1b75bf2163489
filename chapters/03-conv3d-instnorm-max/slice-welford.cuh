/*
 * slice-welford.cuh: one thread's Welford state over its share of an (n, c) slice (v7, v8), on
 * common/welford.cuh's update and merge (the cluster versions' exchange and v12's tile merge use
 * those too).
 */
#ifndef CH03_SLICE_WELFORD_CUH
#define CH03_SLICE_WELFORD_CUH

#include "model.h"
#include "sums.cuh"
#include "welford.cuh"

/* one thread's Welford state over its share of a slice (every MANY_BLOCK-th value, or float4),
 * of p[i] * mult */
__device__ static inline welford thread_welford(const float *__restrict__ p, int S, float mult)
{
    welford w = {0, 0.0f, 0.0f};
    if ((S & 3) == 0) {
        const float4 *p4 = (const float4 *)p;
        for (int j = threadIdx.x; j < S / 4; j += MANY_BLOCK) {
            float4 v = p4[j];
            welford_add(w, v.x * mult), welford_add(w, v.y * mult);
            welford_add(w, v.z * mult), welford_add(w, v.w * mult);
        }
    } else {
        for (int j = threadIdx.x; j < S; j += MANY_BLOCK)
            welford_add(w, p[j] * mult);
    }
    return w;
}

#endif
