/*
 * v8: v6's logsumexp without its running max
 *
 * Defect of v6 (0.268 ms [v6 model_fwd]): issue-bound (80.7% of issue slots busy), and about 6
 * instructions per (output, channel) are the online update (lse2_online in parity.cuh): the
 * difference to the running max, ex2 of minus its magnitude, a compare, a fused rescale or an
 * add, the max and the sum moved by selects. The max is there only so that no ex2 overflows.
 * Change: no max. s = the sum of ex2(v) over the 16 channels (v in base-2 units, as in v6),
 * z = log2(s): an ex2 and an add per (output, channel). An ex2 overflows only for v >= 128 (a
 * conv output of 89 in natural units). ex2.approx.ftz flushes a result below 2^-126 to zero, so
 * such terms are lost; together they cost less than one rounding (15 x 2^-126 < 2^-24 s) once
 * s >= 2^-98, that is once the largest v is -98 or more. The end of the loop checks each s: if it
 * is infinite, zero or subnormal, or NaN (a NaN input), the thread computes its cube again with
 * v6's online update (cube_lse2_online). That check is s >= 2^-126, not 2^-98: a cube whose
 * largest output lies between -126 and -98 (-87 and -68 in natural units) keeps the sum, and
 * flushed terms can move its z. At the KernelBench shape the conv's outputs are of order 1;
 * --test reaches the fallback with the input x 1000, and plants no output in that window.
 * Prediction: 8 x 16 x 4 = 512 instructions fewer a thread, 15% of the 3390 ncu counts on v6; an
 * issue-bound kernel scales with them: 0.268 x 0.85 = 0.23 ms.
 * Measured: 0.2466 ms [v8 model_fwd], 8% faster than v6 [v8 vs v6 model_fwd]. With v6's launch
 * bounds it gained less than predicted: ncu counted 14.9% fewer instructions, but each add now
 * waited on its ex2 and the kernel became latency-bound, 36% of warps active. Without the max a
 * thread holds 8 fewer values, so it is capped at 64 registers (8 blocks of 128 an SM, 76 bytes
 * spilled) for 48% of warps active (LABBOOK.md has each step's numbers).
 */
#include <float.h>
#include <math.h>

#include "model.h"
#include "parity.cuh"
#include "sfu.cuh"
#include "tail.cuh"

/* __launch_bounds__(.., 8): eight blocks of 128 an SM, which caps registers at 64 */
__global__ void __launch_bounds__(TILE_W *TILE_H, 8)
    v8_model_fused(const float *__restrict__ x, const float *__restrict__ weight,
                   const float *__restrict__ conv_bias, const float *__restrict__ b,
                   float *__restrict__ y, int d, int h, int w)
{
    __shared__ float4 s_w4[C_OUT][C_IN][TAPS_PAD / 4];
    __shared__ float s_bias[C_OUT];
    __shared__ float tile[C_IN][2][TILE_H + 1][TILE_W + 1];
    cube_at at;
    float xin[C_IN][2][2][2];
    if (!cube_begin_smem(x, weight, conv_bias, s_w4, s_bias, tile, d, h, w, &at, xin))
        return;
    float r[8], s[8]; /* z = r + log2(s): r = 0, s = the sum of ex2(v) */
#pragma unroll
    for (int o = 0; o < 8; o++)
        r[o] = 0.0f, s[o] = 0.0f;
#pragma unroll 2
    for (int co = 0; co < C_OUT; co++) {
        float acc[8];
        cube_channel(s_w4, s_bias, xin, co, acc);
#pragma unroll
        for (int o = 0; o < 8; o++)
            s[o] += ex2_approx(acc[o]);
    }
    int outside = 0;
#pragma unroll
    for (int o = 0; o < 8; o++)
        outside |= !(s[o] >= FLT_MIN && s[o] <= FLT_MAX); /* inf, 0 or subnormal, or NaN */
    if (outside)
        cube_lse2_online(s_w4, s_bias, xin, r, s);
    float z[8];
#pragma unroll
    for (int o = 0; o < 8; o++)
        z[o] = LN2_F * (r[o] + lg2_approx(s[o]));
    cube_store(y, at, d, h, w, z, *b);
}

void v8_launch(const run_ctx *r, int scope)
{
    const shape *s = &r->sh;
    (void)scope; /* model_fwd only */
    v8_model_fused<<<cube_grid(s), dim3(TILE_W, TILE_H), 0, r->stream>>>(
      r->x, r->weight, r->conv_bias, r->b, r->y, s->d, s->h, s->w);
}
