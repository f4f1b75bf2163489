/*
 * tail.cuh: the epilogue's pointwise tail in float, y = clamp(z sigmoid(z + 3) / 6 - b, -1, 1),
 * shared by every GPU version (and by the CPU checks, which run v5's host path through it).
 *
 * The clamp is written with comparisons, not fminf/fmaxf, so a NaN propagates as it does in
 * PyTorch instead of being clamped to a bound. The FAST forms use the intrinsics (__expf: 2 +
 * 1.16|x| ulp, CUDA C Programming Guide, "Intrinsic Functions"); on the host they spell expf,
 * logf and /, so host code that includes this header runs the same formulas.
 */
#ifndef CH01_TAIL_CUH
#define CH01_TAIL_CUH

#ifdef __CUDA_ARCH__
#define EXP_FAST(v) __expf(v)
#define LOG_FAST(v) __logf(v)
#define DIV_FAST(a, b) __fdividef(a, b)
#else
#define EXP_FAST(v) expf(v)
#define LOG_FAST(v) logf(v)
#define DIV_FAST(a, b) ((a) / (b))
#endif

__host__ __device__ static inline float clamp_pm1(float s)
{
    return s < -1.0f ? -1.0f : (s > 1.0f ? 1.0f : s);
}

__host__ __device__ static inline float tail_accurate(float z, float b)
{
    return clamp_pm1(z * (1.0f / (1.0f + expf(-(z + 3.0f)))) / 6.0f - b);
}

__host__ __device__ static inline float tail_fast(float z, float b)
{
    return clamp_pm1(DIV_FAST(z, 6.0f * (1.0f + EXP_FAST(-(z + 3.0f)))) - b);
}

#endif
