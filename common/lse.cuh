/*
 * lse.cuh: the online logsumexp, device side (header only; chapters 1, 2 and 4 fold channels
 * into it one value at a time).
 *
 * Milakov & Gimelshein, "Online normalizer calculation for softmax" (2018): a running max m and
 * a running sum s of exp(v - m), updated with one exp per value:
 *     v > m:  s = s exp(m - v) + 1, m = v        otherwise:  s = s + exp(v - m)
 * Start from m = -INFINITY, s = 0; the logsumexp is m + log(s). __expf: about 2 ulp on the
 * arguments here (CUDA C Programming Guide, "Intrinsic Functions"), within the chapters' 1e-5.
 *
 * lse_merge joins two such partial results over disjoint sets of values (chapter 4's threads that
 * each fold a slice of a position's channels): the larger max, the other sum rescaled to it.
 *
 * k_logsumexp_naive is the other way, the one the eager versions start from (PyTorch's logsumexp
 * is amax, then the sum of exp(v - max)): two passes over the channels, expf and logf.
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

/* (m, s) of the union of two partial logsumexps (m, s) and (m2, s2); at least one max finite */
__device__ static inline void lse_merge(float *m, float *s, float m2, float s2)
{
    float mm = fmaxf(*m, m2);
    *s = *s * __expf(*m - mm) + s2 * __expf(m2 - mm);
    *m = mm;
}

/* out[n][q] = logsumexp over the CHANNELS of in[n][.][q], in an N x CHANNELS x s tensor; one
 * thread a position (n_pos = N s), two passes: the max, then the sum of exp(v - max). CHANNELS
 * is a template parameter: with the trip count known the compiler unrolls the passes (a
 * runtime count measured 11% slower in chapter 1's v1, 5% in chapter 2's, on the H100). The
 * kernel is static: every file that includes this header gets its own copy. */
template <int CHANNELS>
static __global__ void k_logsumexp_naive(const float *__restrict__ in, float *__restrict__ out,
                                         int n_pos, int s)
{
    const int channels = CHANNELS;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_pos; i += gridDim.x * blockDim.x) {
        int n = i / s, q = i - n * s;
        const float *v = in + (size_t)n * channels * s + q;
        float m = v[0];
        for (int ch = 1; ch < channels; ch++)
            m = fmaxf(m, v[(size_t)ch * s]);
        float sum = 0.0f;
        for (int ch = 0; ch < channels; ch++)
            sum += expf(v[(size_t)ch * s] - m);
        out[i] = m + logf(sum);
    }
}

#endif
