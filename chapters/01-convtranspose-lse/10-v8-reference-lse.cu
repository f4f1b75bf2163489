/*
 * v8: back to the whole model: v6's logsumexp without its running max
 *
 * Defect of v6 (0.268 ms [v6 model_fwd], 7% over the 0.25 ms target): it is issue-bound (ncu: 80.7%
 * of issue slots busy), and of the ~2616 instructions a thread issues for its 8 outputs, about 6
 * per (output, channel) are the online logsumexp's update (lse2_online in parity.cuh): the
 * difference to the running max, ex2 of minus its magnitude, a compare, then either a fused
 * rescale or an add, the max and the sum moved by selects. The max is there so that no ex2
 * overflows.
 * Change: no max. s = the sum of ex2(v) over the 16 channels (v in base-2 units: the weights
 * are pre-scaled by log2 e, as in v6), z = log2(s): an ex2 and an add per (output, channel).
 * That is exact as long as s is a normal float: an ex2 overflows only for v >= 128 (a conv
 * output of 89 in natural units), and s underflows only when every channel is below -126. The
 * end of the loop checks each s; if one is infinite, zero, subnormal or NaN (a NaN input), the
 * thread computes its cube again with v6's online update (cube_lse2_online), which overflows
 * nowhere. `--test` takes that path (the input x 1000), where the tail's clamp pins every
 * output; at the KernelBench shape the conv's outputs are of order 1, far from either end.
 * Prediction: about 4 instructions fewer per (output, channel), 8 x 16 x 4 = 512 of ~2616 a
 * thread (20%); an issue-bound kernel scales with them: 0.269 x 0.80 = 0.22 ms. (The 2616 was
 * v6's own prediction; ncu's count, below, is about 3390 a thread, 222.1 M warp instructions
 * over 65,536 warps, against which 512 is 15%.)
 * Measured, first with v6's launch bounds (78 registers, 6 blocks of 128 an SM): 0.2559, 0.2560,
 * 0.2558 ms against v6's 0.2705, 0.2698, 0.2699 (three rounds interleaved in one call), 5.5%
 * faster, not 20%: ncu on both kernels alone counts 14.9% fewer instructions (189.0 M against
 * 222.1 M), but issue slots busy 73.5% of the time against 81.3%, because the short-scoreboard
 * stall (a warp waiting for its ex2, on the XU pipe, before the add) went from 0.96 to 1.63
 * cycles an issue. The kernel now waits on latency, with 36% of its warps active. More warps,
 * then: without the running max a thread holds 8 fewer values, and capped at 64 registers (8
 * blocks an SM; ptxas spills 76 bytes) it measured 0.2485, 0.2486, 0.2484, 0.2485 against v6's
 * 0.2698, 0.2700, 0.2696, 0.2701 (four rounds, one call). The same cap lost on v6, which spilled
 * more (0.327 ms, the README's Tried list); 72 registers (7 blocks) gave 0.2532-0.2537. ncu: 48%
 * of warps active (36% before), issue slots 77.5% busy, 194.3 M instructions (the spills' share
 * included). Recorded: 0.2484 ms, under the 0.25 ms target by 0.6% (its slowest of 20 runs
 * 0.2513), 8% faster than v6; in the README's table (a later run) 0.2466 [0.2461 - 0.2476]
 * [v8 model_fwd median_ms min_ms max_ms].
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
    v8_model_fused<<<cube_grid(s), dim3(TILE_W, TILE_H)>>>(
      r->x, r->weight, r->conv_bias, r->b, r->y, s->d, s->h, s->w);
}
