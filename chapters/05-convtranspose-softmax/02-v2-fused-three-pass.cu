/*
 * v2: clamp, softmax and scale in one kernel, still three passes
 *
 * Defect of v1: three kernels and two intermediates. The clamp writes z (1.07 GB) only for the
 * softmax to read it back, and the softmax writes p only for the scale kernel to read it back:
 * 4 of v1's 8 tensor passes carry nothing the model needs.
 * Change: one block a row does all of it: the clamp is applied where c is loaded, the scale
 * where y is stored. It keeps ATen's three passes (the max of z, the sum of exp(z - max), the
 * outputs), reading c three times; loads and stores are float4 (rows.cuh).
 * Prediction: 3 reads and a write of 1073.7 MB, 4.3 GB: 1.43 ms at the 2991 GB/s ceiling,
 * 2.0x the floor, half of v1's bytes.
 * Measured: 1.434 ms [v2 epilogue_fwd], 50.1% of the ceiling [v2 epilogue_fwd pct_ceiling], 2.25x
 * faster than v1 [v1/v2 epilogue_fwd]: the prediction held.
 */
#include "rows.cuh"

__global__ void __launch_bounds__(ROW_BLOCK)
v2_softmax_three_pass(const float *__restrict__ c, const float *__restrict__ scale,
                      float *__restrict__ y, float *__restrict__ lse, int S)
{
    const float4 *c4 = (const float4 *)(c + (size_t)blockIdx.x * S);
    float4 *y4 = (float4 *)(y + (size_t)blockIdx.x * S);
    int n4 = S / 4;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < n4; j += ROW_BLOCK) { /* pass 1: the max */
        float4 z = clamp4(c4[j]);
        m = fmaxf(m, fmaxf(fmaxf(z.x, z.y), fmaxf(z.z, z.w)));
    }
    m = block_bcast(block_max(m));
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n4; j += ROW_BLOCK) /* pass 2: the sum of exp(z - max) */
        sum += hsum4(exp4(clamp4(c4[j]), m));
    sum = block_bcast(block_sum(sum));
    if (threadIdx.x == 0)
        lse[blockIdx.x] = m + logf(sum);
    row_write(c4, y4, threadIdx.x, n4, ROW_BLOCK, m, scale[blockIdx.x % C_OUT] / sum); /* pass 3 */
}

void v2_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_MODEL_FWD)
        model_front(r);
    v2_softmax_three_pass<<<rows(&r->sh), ROW_BLOCK>>>(r->c, r->scale, r->y, r->lse, r->sh.s);
}
