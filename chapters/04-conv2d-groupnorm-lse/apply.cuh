/*
 * apply.cuh: the epilogue at one position, from c and its sample's statistics (v4, v5, b2; v6,
 * b3 and v8 use its base-2 form, below).
 *
 * GroupNorm's normalise and affine fold into one FMA a value: with a = rstd_G gamma_c and
 * b = beta_c - mean_G a (per channel, computed once a block into shared memory),
 * gn = (c - mean) rstd gamma + beta = c a + b. Then tanh, HardSwish on tanh's range
 * (model.h), the residual, and the online logsumexp (common/lse.cuh) over the 64 channels: one
 * thread a position reads its 64 values once, each load coalesced across the warp (consecutive
 * positions of one channel plane).
 */
#ifndef CH04_APPLY_CUH
#define CH04_APPLY_CUH

#include "lse.cuh"
#include "sfu.cuh"
#include "model.h"

/* ---- the instruction diet of v6 and b3 (08-v6-persistent.cu says why): the epilogue in base 2,
 * on the special-function unit's own approximations (common/sfu.cuh) */

/* tanh(gn) = 1 - 2 / (e^(2 gn) + 1) from u = 2 log2(e) gn = c a2 + b2 (affine_of2): an FMA, two
 * special-function operations and two FLOPs, against tanhf's twenty-odd instructions. Its
 * error is absolute: about 1e-7 (an ulp of the 1 it is subtracted from) where gn is small,
 * less elsewhere; at gn = +-inf, exactly +-1. Every use adds t to c or multiplies it by an
 * O(1) factor, so an absolute 1e-7 is what counts. */
__device__ static inline float tanh_of_u(float u)
{
    return fmaf(-2.0f, rcp_approx(ex2_approx(u) + 1.0f), 1.0f);
}

/* log2(e) r, r = c + HardSwish(t) = c + t^2 / 6 + t / 2 on tanh's range: two FMAs and a multiply */
__device__ static inline float r2_of(float v, float t)
{
    return fmaf(t, fmaf(t, LOG2E_F / 6.0f, LOG2E_F / 2.0f), v * LOG2E_F);
}

/* affine_of's a and b scaled by 2 log2(e), for tanh_of_u: threads 0..63 */
__device__ static inline void affine_of2(float *sa2, float *sb2, const float *mean16, const float *rstd16,
                                         const float *__restrict__ gamma, const float *__restrict__ beta)
{
    if (threadIdx.x < C_OUT) {
        int ch = threadIdx.x, G = ch / CPG;
        float a = rstd16[G] * gamma[ch];
        sa2[ch] = 2.0f * LOG2E_F * a, sb2[ch] = 2.0f * LOG2E_F * (beta[ch] - mean16[G] * a);
    }
}

/* a[c], b[c] for the 64 channels of one sample, from its 16 (mean, rstd): threads 0..63 */
__device__ static inline void affine_of(float *sa, float *sb, const float *mean16, const float *rstd16,
                                        const float *__restrict__ gamma, const float *__restrict__ beta)
{
    if (threadIdx.x < C_OUT) {
        int ch = threadIdx.x, G = ch / CPG;
        float a = rstd16[G] * gamma[ch];
        sa[ch] = a, sb[ch] = beta[ch] - mean16[G] * a;
    }
}

/* r_c = c + hardswish(tanh(c a_c + b_c)) at one position; cs points at channel 0 there */
__device__ static inline float residual_at(const float *__restrict__ cs, int S, int ch,
                                           const float *sa, const float *sb, float *t_out)
{
    float v = cs[(size_t)ch * S];
    float t = tanhf(fmaf(v, sa[ch], sb[ch]));
    if (t_out)
        *t_out = t;
    return v + hardswish_on_tanh(t);
}

/* y = logsumexp over the channels of r at one position */
__device__ static inline float epilogue_at(const float *__restrict__ cs, int S, const float *sa,
                                           const float *sb)
{
    float m = -INFINITY, sum = 0.0f;
#pragma unroll 8
    for (int ch = 0; ch < C_OUT; ch++)
        lse_online(residual_at(cs, S, ch, sa, sb, NULL), &m, &sum);
    return m + logf(sum);
}

#endif
