/*
 * welford.cuh: Welford's update and Chan's merge, statistics that do not cancel (CUDA, header
 * only; chapters 3 and 4).
 *
 * Welford (1962): a running count n, mean and M2 = sum of squared deviations, updated one value
 * at a time, mean += (x - mean) / n, M2 += (x - mean_old)(x - mean_new): every term is a
 * deviation from the current mean, never the raw square that sum-of-squares cancels. Chan,
 * Golub and LeVeque ("Updating formulae and a pairwise algorithm for computing sample
 * variances", 1979) merge two such partial results:
 *   n = na + nb, d = mean_b - mean_a, mean = mean_a + d nb / n, M2 = M2a + M2b + d^2 na nb / n.
 * n is an int: a float count stops being exact at 2^24. The variance is M2 / n (biased, as the
 * normalisation layers use it).
 */
#ifndef WELFORD_CUH
#define WELFORD_CUH

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

/* the (count, mean, M2) of the lane `off` above (__shfl_down_sync): a warp's merge tree, as
 * warp_sum's, leaves the warp's merge in lane 0 */
__device__ static inline welford shfl_welford(welford w, int off)
{
    welford o = {__shfl_down_sync(0xffffffffu, w.n, off), __shfl_down_sync(0xffffffffu, w.mean, off),
                 __shfl_down_sync(0xffffffffu, w.m2, off)};
    return o;
}

#endif
