/*
 * sfu.cuh: the special-function unit's approximations, as PTX names them (CUDA, header only;
 * chapters 1 and 4).
 *
 * ex2.approx.ftz.f32, lg2.approx.ftz.f32 and rcp.approx.ftz.f32 are one MUFU instruction
 * each. Their errors (PTX ISA, "Floating Point Instructions"): ex2's relative error is about
 * 2^-22 over the whole range, lg2's absolute error about 2^-22 on [0.5, 2] and relative
 * beyond, rcp's 1 ulp. .ftz flushes subnormal inputs and results to 0. The library's exp2f,
 * log2f and 1.0f / x round correctly or nearly so, at several instructions each; these are
 * for kernels whose instruction count is their limit and whose tolerance (1e-5 relative)
 * leaves room for 2^-22. A logsumexp done in base 2 uses them with LOG2E_F and LN2_F:
 * logsumexp(v) = LN2_F (m + log2 sum 2^(LOG2E_F v - m)).
 */
#ifndef SFU_CUH
#define SFU_CUH

#define LOG2E_F 1.4426950408889634f
#define LN2_F 0.6931471805599453f

/* 2^v */
__device__ static inline float ex2_approx(float v)
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
}

/* log2(v) */
__device__ static inline float lg2_approx(float v)
{
    float r;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
}

/* 1 / v; 0 for v = +-inf */
__device__ static inline float rcp_approx(float v)
{
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
}

#endif
