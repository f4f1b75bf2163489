/*
 * v4: no max at all, because the clamp bounds every value
 *
 * Defect of v3: the running max costs a compare, a select and a rescale a value, and a max is
 * what makes partial sums awkward to combine: two blocks' sums of exp(z - m) with different m
 * must be rescaled to a common one before they add (lse_merge).
 * Change: drop the max. Softmax is shift-invariant, exp(z - m) / sum exp(z - m) = exp(z) /
 * sum exp(z) for any m; the max is subtracted only so that no exp overflows and the largest
 * terms do not underflow. Here z = clamp(c, 0, 1), so exp(z) lies in [1, e] and a row's sum in
 * [S, e S]: no overflow for any S below 2^31, no underflow, and every term within a factor e of
 * every other, so a float sum of them rounds no worse than one of exp(z - max). Partial sums
 * from different blocks (v5, v6) or kernels (v7's conv epilogue) now simply add.
 * When the shortcut is valid, exactly: every input of the row lies in [lo, hi] with hi + ln S
 * below about 88.7 (exp(88.72) is float's largest) and lo above about -87.3 (below it the terms
 * are subnormal), and the bound comes from the math (a clamp, a sigmoid, a tanh), not from the
 * data seen so far. Without the clamp, c in the hundreds overflows exp: the sum becomes inf and
 * the outputs NaN or 0; the test "c ~ +-1000" plants such c before the clamp.
 * Prediction: the same bytes as v3 (1.07 ms): the saving is instructions, and at the ceiling an
 * SM takes in about 2.9 floats a clock (750 G floats/s over 132 SMs at 1.98 GHz), while it issues
 * 128 thread-instructions and 16 exps a clock: v3's dozen instructions and one exp a float fit.
 * Measured: 1.087 ms [v4 epilogue_fwd], the same as v3 (1.086 [v3 epilogue_fwd]) to 0.07%
 * [v4 vs v3 epilogue_fwd], far inside the spread between runs: the prediction held. The
 * shortcut pays in the versions that combine partial sums.
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
    v4_softmax_no_max<<<rows(&r->sh), ROW_BLOCK, 0, r->stream>>>(r->c, r->scale, r->y, r->lse, r->sh.s);
}

void v4_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_MODEL_FWD)
        model_front(r);
    v4_epilogue(r);
}
