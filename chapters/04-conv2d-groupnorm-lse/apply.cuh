/*
 * apply.cuh: the epilogue at one position, from c and its sample's statistics (v4, v5, b2).
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
#include "model.h"

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
