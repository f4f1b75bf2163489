/*
 * lse.cuh: the online logsumexp, device side (header only; chapters 1, 2 and 4 fold channels
 * into it one value at a time).
 *
 * Milakov & Gimelshein, "Online normalizer calculation for softmax" (2018): a running max m and
 * a running sum s of exp(v - m), updated with one exp per value:
 *     v > m:  s = s exp(m - v) + 1, m = v        otherwise:  s = s + exp(v - m)
 * Start from m = -INFINITY, s = 0; the logsumexp is m + log(s). __expf: about 2 ulp on the
 * arguments here (CUDA C Programming Guide, "Intrinsic Functions"), within the chapters' 1e-5.
 */
#ifndef LSE_CUH
#define LSE_CUH

__device__ static inline void lse_online(float v, float *m, float *s)
{
    float d = v - *m;
    float e = __expf(-fabsf(d)); /* exp(m - v) if v > m, else exp(v - m): one exp either way */
    if (d > 0.0f) {
        *s = fmaf(*s, e, 1.0f);
        *m = v;
    } else {
        *s += e; /* also where d is NaN: the NaN propagates into s */
    }
}

#endif
