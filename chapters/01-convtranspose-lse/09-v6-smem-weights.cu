/*
 * v6: full fusion, tuned by its profile: shared-memory weights, a base-2 logsumexp
 *
 * Defect of v5 (0.390 ms [v5 model_fwd], 2.8x its issue estimate): its SASS (cuobjdump -sass,
 * nvcc 13.0, sm_90) has, per thread, 1440 FFMA, 892 LDC, 440 FMUL, 280 FADD, 153 MUFU, about
 * 3300 instructions; ncu counts 10.3 cycles between a warp's instructions, 3.6 of them stalled
 * on immediate-constant-cache misses: the 1296 weights are 5.2 KB, more than that cache holds,
 * and warps at different channels evict each other's weights.
 * Change, aimed at instructions per output (the weights' path, in three parts):
 *  (1) weights staged once per block in shared memory, [co][ci][28] (27 taps + 1 pad), read as
 *      float4 (parity.cuh's stage_weights): all 32 lanes read one address (a broadcast, no bank
 *      conflict), 7 LDS.128 for a (co, ci)'s 27 weights instead of 27 constant loads;
 *  (2) weights and bias pre-scaled by log2(e) while staged, so the conv output arrives in base-2
 *      units and the online update needs ex2(-|d|) with no multiply before it (ex2.approx is the
 *      instruction __expf is built on); z = ln 2 (m + log2 s) at the end;
 *  (3) the channel loop unrolled by 2, not 16: fully unrolled, the code outgrows the
 *      instruction cache (ncu: stalls on "no instruction").
 * Prediction: 892 LDC become 16 x 3 x 7 = 336 LDS.128 and the 128 FMULs before the exps go:
 * 3300 - 892 + 336 - 128 = 2616 instructions a thread; if the constant-cache stall goes too
 * (10.3 -> 6.7 cycles an instruction), 0.39 x (2616 / 3300) x (6.7 / 10.3) = 0.20 ms.
 * Measured: 0.268 ms [v6 model_fwd], 1.45x v5 [v5/v6 model_fwd], 34% above the prediction: ncu
 * counts about 3390 instructions a thread, not 2616, and 80.7% of issue slots busy: the stalls
 * went, and what is left is issue. More warps, two cubes a thread and other tile heights all lost
 * (LABBOOK.md); only fewer instructions per output help (v8).
 */
#include <math.h>

#include "model.h"
#include "parity.cuh"
#include "sfu.cuh"
#include "tail.cuh"

__global__ void __launch_bounds__(TILE_W *TILE_H)
    v6_model_fused(const float *__restrict__ x, const float *__restrict__ weight,
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
    float m[8], s[8], z[8];
    cube_lse2_online(s_w4, s_bias, xin, m, s);
#pragma unroll
    for (int o = 0; o < 8; o++)
        z[o] = LN2_F * (m[o] + lg2_approx(s[o]));
    cube_store(y, at, d, h, w, z, *b);
}

void v6_launch(const run_ctx *r, int scope)
{
    const shape *s = &r->sh;
    (void)scope; /* model_fwd only */
    v6_model_fused<<<cube_grid(s), dim3(TILE_W, TILE_H)>>>(
      r->x, r->weight, r->conv_bias, r->b, r->y, s->d, s->h, s->w);
}
