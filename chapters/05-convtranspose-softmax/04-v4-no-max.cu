/*
 * v4: no max at all, because the clamp bounds every value
 *
 * Defect of v3: the running max costs a compare, a select and a rescale a value, and a max is
 * what makes partial sums awkward to combine: two blocks' sums of exp(z - m) with different m
 * must be rescaled to a common one before they add (lse_merge).
 * Change: drop the max. Softmax is shift-invariant, exp(z - m) / sum exp(z - m) = exp(z) /
 * sum exp(z) for any m; the max is subtracted only so that no exp overflows and the largest
 * terms do not underflow. Here z = clamp(c, 0, 1), so exp(z) lies in [1, e] and the sum of a
 * row in [S, e S]: no overflow for any S below 2^31 (float's limit is 3.4e38), no underflow,
 * and every term within a factor e of every other: a float sum of them rounds no worse than
 * one of exp(z - max), whose terms lie in [1/e, 1]. One
 * pass sums exp(z), the next writes y = scale_c exp(z) / sum. Partial sums from different
 * blocks (v5) or different kernels (a conv that writes c in tiles, the chapter's next part)
 * now simply add.
 * When the shortcut is valid, exactly: when every input of the row is known to lie in [lo, hi]
 * with hi + ln S below about 88.7 (exp(88.72) is float's largest) and lo above about -87.3
 * (below that the terms are subnormal and lose precision; the clamp gives [0, 1]); and the
 * bound must come from the math (a clamp, a sigmoid, a tanh before the softmax), not from
 * the data seen so far. Without the clamp, c in the hundreds (the test x*1000 makes such c)
 * overflows exp: the sum becomes inf, scale / inf = 0, so the outputs whose exp overflowed
 * become inf x 0 = NaN and all the others 0; the test "c ~ +-1000" plants such c
 * before the clamp, where the clamp makes it harmless.
 * Prediction: the same bytes as v3 (2 reads, a write: 1.07 ms): the saving is instructions,
 * and at 3000 GB/s an SM takes in about 2.9 floats a clock (750 G floats/s over 132 SMs at
 * 1.98 GHz), so v3's dozen instructions a float already fit in the 4 warp instructions (128
 * thread-instructions) an SM issues a clock, and its one exp a float in the 16 an SM's special
 * function units give a clock. Expect v3's time; the gain is the additive sum, which v5, v6 and
 * the chapter's next part use.
 * Measured: 1.087 ms [v4 epilogue_fwd], the same as v3 (1.086 [v3 epilogue_fwd]) to 0.07%
 * [v4 vs v3 epilogue_fwd], far inside the spread between runs: the
 * prediction held. The shortcut pays in the versions that combine partial sums.
 */
#include "rows.cuh"

__global__ void __launch_bounds__(ROW_BLOCK)
v4_softmax_no_max(const float *__restrict__ c, const float *__restrict__ scale,
                  float *__restrict__ y, float *__restrict__ lse, int S)
{
    const float4 *c4 = (const float4 *)(c + (size_t)blockIdx.x * S);
    float4 *y4 = (float4 *)(y + (size_t)blockIdx.x * S);
    int n4 = S / 4;
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n4; j += ROW_BLOCK) /* pass 1: the sum of exp(z) */
        sum += hsum4(exp4(clamp4(c4[j]), 0.0f));
    sum = block_bcast(block_sum(sum));
    if (threadIdx.x == 0)
        lse[blockIdx.x] = logf(sum);
    row_write(c4, y4, threadIdx.x, n4, ROW_BLOCK, 0.0f, scale[blockIdx.x % C_OUT] / sum); /* pass 2 */
}

/* b2's forward */
void v4_epilogue(const run_ctx *r)
{
    v4_softmax_no_max<<<rows(&r->sh), ROW_BLOCK>>>(r->c, r->scale, r->y, r->lse, r->sh.s);
}

void v4_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_MODEL_FWD)
        model_front(r);
    v4_epilogue(r);
}
