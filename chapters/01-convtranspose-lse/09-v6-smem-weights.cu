/*
 * v6: full fusion, tuned by its profile: shared-memory weights, a base-2 logsumexp
 *
 * Defect of v5 (0.390 ms [v5 model_fwd], 2.8x its issue estimate). Its SASS (cuobjdump -sass, nvcc
 * 13.0, sm_90, commit 7f6adb2), per thread: 1440 FFMA, 892 LDC, 440 FMUL, 280 FADD, 153 MUFU; about
 * 3300 instructions over 65.5 K warps is 0.21 ms of issue at 1.98 GHz. ncu (H100, commit
 * 7f6adb2): 10.3 cycles between a warp's instructions, 3.6 of them stalled on
 * immediate-constant-cache misses: 1296 weights are 5.2 KB, more than that cache holds, and
 * warps at different channels evict each other's weights.
 * Changes, each aimed at instructions per output:
 *  (1) weights staged once per block in shared memory, laid out [co][ci][28] (27 taps + 1 pad)
 *      and read as float4 (parity.cuh's stage_weights): all 32 lanes read the same address (a
 *      broadcast, no bank conflict), 7 LDS.128 for the 27 weights of one (co, ci) instead of 27
 *      constant loads, and no constant cache to miss;
 *  (2) weights and bias pre-scaled by log2(e) while staged, so the conv output arrives in base-2
 *      units and the online logsumexp needs ex2(-|d|) with no multiply before it (ex2.approx is
 *      the MUFU instruction __expf is built on); z = ln 2 * (m + log2 s) at the end;
 *  (3) the channel loop unrolled by 2, not 16: fully unrolled, the kernel's code outgrows the
 *      instruction cache (ncu, commit 7f6adb2: 0.54 cycles per issued instruction stalled on
 *      "no instruction"; 0.07 at unroll 2).
 * One output cube a thread, as in v5.
 * Prediction: 892 LDC become 16 x 3 x 7 = 336 LDS.128 and the 128 FMULs before the exps go:
 * 3300 - 892 + 336 - 128 = 2616 instructions a thread. If the 3.6 cycles of constant-cache
 * stall go too (10.3 -> 6.7 cycles an instruction), v5's time scales to 0.391 x (2616 / 3300)
 * x (6.7 / 10.3) = 0.20 ms.
 * Measured: 0.268 ms [v6 model_fwd], 1.45x v5 [v5/v6 model_fwd] and 21x torch.compile
 * [compile/v6 model_fwd] in fp32 (5.75 ms [compile model_fwd]); 34% above the prediction and 7%
 * above the 0.25 ms target. ncu counts about 3390 instructions a thread, not 2616 (222.1 M warp
 * instructions over 65,536 warps: v8's comment), 30% more, which is most of the miss. ncu on this
 * kernel (commit 7f6adb2): 80.7% of issue slots busy and 2.25 cycles per instruction "not selected"
 * (a ready warp waiting for the issue slot): the stalls went, and what is left is issue. Per 8
 * outputs a thread issues 1296 FFMAs for the conv, about 6 instructions per (output, channel) for
 * the online logsumexp (768), 360 shared-memory loads (336 of weights, 24 of inputs) and the tail;
 * only fewer instructions per output make it faster, not more warps (the chapter README's "tried"
 * list: more warps, more cubes a thread, other tile heights).
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
