/*
 * v7: v2 without its per-position overhead: the epilogue at the copy ceiling
 *
 * Defect of v2 (0.416 ms [v2 epilogue_fwd], 86% of the copy ceiling [v2 epilogue_fwd pct_ceiling]):
 * not latency (64 bytes in flight a thread are 128 KB an SM at 2048 threads, eight times the
 * 16 KB Little's law asks for: 3e12 B/s x 7e-7 s of DRAM latency / 132 SMs), but instructions per
 * byte: an integer division per position (n = i / s), accurate expf/logf (__expf and __logf are a
 * multiply and one special-function instruction each), and a grid-stride loop over a grid sized
 * to the SMs.
 * Change: the same layout, one position a thread, each channel one 4-byte load (__ldg; a warp
 * reads 128 contiguous bytes of a plane: coalesced whatever the plane's alignment), without the
 * overhead: a sample per blockIdx.y (no division), the fast intrinsics (tail.cuh; the accuracy
 * checks still pass), a grid that covers the tensor once. The 16 loads are independent, so the
 * two-pass logsumexp (max, then 16 exps) waits for nothing extra. Blocks of 1024 threads
 * (__launch_bounds__ lets the compiler plan for them: 32 registers, two blocks an SM).
 * Prediction: v2's bytes, so v2's 0.359 ms [v7 epilogue_fwd floor_ms] floor; only the distance to
 * the ceiling can move, and if v2's 14% gap is instructions, most of it goes. (This form was
 * found by measuring v4's changes apart, not foreseen: LABBOOK.md.)
 * Measured: 0.3594 ms [0.3577 - 0.3600] [v7 epilogue_fwd median_ms min_ms max_ms], 99.9% of the
 * copy ceiling [v7 epilogue_fwd pct_ceiling], 1.16x v2 [v2/v7 epilogue_fwd]; torch.compile's
 * kernel takes 14.4% longer [compile vs v7 epilogue_fwd]. ncu: DRAM 88.7% busy.
 * Tried: four positions a thread with 16-byte shifted loads (v4, the advanced part), 2.3% slower
 * [v7 vs v4 epilogue_fwd]; cache hints and other block sizes, slower (LABBOOK.md).
 */
#include "model.h"
#include "tail.cuh"

#define V7_BLOCK 1024

__global__ void __launch_bounds__(V7_BLOCK)
    v7_epilogue_per_position(const float *__restrict__ c, const float *__restrict__ b,
                             float *__restrict__ y, int s)
{
    int n = blockIdx.y;
    int p = blockIdx.x * V7_BLOCK + threadIdx.x;
    if (p >= s)
        return;
    const float *src = c + n * C_OUT * s + p;
    float v[C_OUT];
#pragma unroll
    for (int ch = 0; ch < C_OUT; ch++)
        v[ch] = __ldg(src + ch * s);
    float m = v[0];
#pragma unroll
    for (int ch = 1; ch < C_OUT; ch++)
        m = fmaxf(m, v[ch]);
    float sum = 0.0f;
#pragma unroll
    for (int ch = 0; ch < C_OUT; ch++)
        sum += EXP_FAST(v[ch] - m);
    y[n * s + p] = tail_fast(m + LOG_FAST(sum), *b);
}

void v7_epilogue(const run_ctx *r)
{
    dim3 grid((r->sh.s + V7_BLOCK - 1) / V7_BLOCK, r->sh.n);
    v7_epilogue_per_position<<<grid, V7_BLOCK, 0, r->stream>>>(r->c, r->b, r->y, r->sh.s);
}

void v7_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    v7_epilogue(r);
}
