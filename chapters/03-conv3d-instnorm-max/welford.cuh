/*
 * welford.cuh: Welford's update and Chan's merge, the statistics that do not cancel (v7, v8, and
 * the cluster versions' exchange; v12's tile merge).
 *
 * Welford (1962): a running count n, mean and M2 = sum of squared deviations, updated one value
 * at a time, mean += (x - mean) / n, M2 += (x - mean_old)(x - mean_new): every term is a
 * deviation from the current mean, never the raw square that sum-of-squares cancels. Chan,
 * Golub and LeVeque ("Updating formulae and a pairwise algorithm for computing sample
 * variances", 1979) merge two such partial results:
 *   n = na + nb, d = mean_b - mean_a, mean = mean_a + d nb / n, M2 = M2a + M2b + d^2 na nb / n.
 * n is an int: a float count stops being exact at 2^24.
 */
#ifndef CH03_WELFORD_CUH
#define CH03_WELFORD_CUH

#include "model.h"
#include "sums.cuh"

struct welford {
    int n;
    float mean, m2;
};

__device__ static inline void welford_add(welford &w, float x)
{
    w.n += 1;
    float d = x - w.mean;
    w.mean += d / (float)w.n;
    w.m2 += d * (x - w.mean);
}

__device__ static inline welford chan_merge(welford a, welford b)
{
    int n = a.n + b.n;
    if (b.n == 0)
        return a;
    if (a.n == 0)
        return b;
    float d = b.mean - a.mean, f = (float)b.n / (float)n;
    welford r = {n, a.mean + d * f, a.m2 + b.m2 + d * d * (float)a.n * f};
    return r;
}

/* the (count, mean, M2) of the lane `off` above: a warp's merge tree, as warp_sum's */
__device__ static inline welford shfl_welford(welford w, int off)
{
    welford o = {__shfl_down_sync(FULL, w.n, off), __shfl_down_sync(FULL, w.mean, off),
                 __shfl_down_sync(FULL, w.m2, off)};
    return o;
}

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
