/*
 * v5: rows split across blocks
 *
 * Defect of v4: a block a row. At batch 1 there are 64 rows for 132 SMs: half the GPU idles,
 * and each of the 64 blocks walks 512 KB twice with the latency of one SM; any batch below 5
 * leaves some of the 264 block slots (two blocks of 1024 threads an SM) empty (64 N < 264).
 * Change: split each row over `split` blocks (run_ctx.split, problem.cu: enough for two waves
 * of resident blocks, at least a float4 a thread; a wave: as many blocks as fit on the GPU at
 * once). Kernel 1: each block sums exp(z) over its chunk into rpart; kernel 2: each block adds
 * its row's `split` partials in the same order in every block (so every chunk of a row divides
 * by the same bits) and writes its chunk. v4's max-free sum makes the merge a plain sum (a max
 * would need lse_merge's rescaling). The kernel boundary is the grid-wide barrier the
 * statistics need: no chunk is written before every chunk of its row is summed.
 * Prediction: at the KernelBench shape the same time as v4 (2048 rows already fill the GPU);
 * at batch 1 close to the full batch's bandwidth instead of about half.
 * Measured: the prediction failed. At the KernelBench shape the split is 1, so v5 is v4 in
 * 512-thread blocks plus a second launch: 1.095 ms [v5 epilogue_fwd], 0.8% slower
 * [v5 vs v4 epilogue_fwd] than v4. At batch 1 (data/h100/ch05-sweep.csv) v5 takes 0.0406 ms
 * [v5 epilogue_fwd @1] against v4's 0.0327 [v4 epilogue_fwd @1]: slower, not faster. There c is
 * 33.5 MB, less than the 52 MB L2, so v4's second read already comes from L2, and 64 blocks of
 * 1024 threads with 16-byte loads kept enough bytes in flight (not profiled: what the numbers
 * allow, not a measurement). What v5 keeps is the merge of max-free partial sums across blocks,
 * which b2 and v7 (partial sums from its conv's tiles) use; v6 removes the second read.
 */
#include "rows.cuh"

__global__ void __launch_bounds__(V5_BLOCK)
v5_chunk_sums(const float *__restrict__ c, float *__restrict__ rpart, int S, int split)
{
    int row = blockIdx.x / split, part = blockIdx.x - row * split, n4 = S / 4;
    const float4 *c4 = (const float4 *)(c + (size_t)row * S);
    int lo = (int)((long long)n4 * part / split), hi = (int)((long long)n4 * (part + 1) / split);
    float sum = 0.0f;
    for (int j = lo + threadIdx.x; j < hi; j += V5_BLOCK)
        sum += hsum4(exp4(clamp4(c4[j]), 0.0f));
    sum = block_sum(sum);
    if (threadIdx.x == 0)
        rpart[blockIdx.x] = sum;
}

__global__ void __launch_bounds__(V5_BLOCK)
v5_chunk_write(const float *__restrict__ c, const float *__restrict__ rpart,
               const float *__restrict__ scale, float *__restrict__ y, float *__restrict__ lse,
               int S, int split)
{
    int row = blockIdx.x / split, part = blockIdx.x - row * split, n4 = S / 4;
    float sum = 0.0f;
    for (int k = 0; k < split; k++) /* the same order in every block of the row */
        sum += rpart[row * split + k];
    if (part == 0 && threadIdx.x == 0)
        lse[row] = logf(sum);
    int lo = (int)((long long)n4 * part / split), hi = (int)((long long)n4 * (part + 1) / split);
    row_write((const float4 *)(c + (size_t)row * S), (float4 *)(y + (size_t)row * S),
              lo + threadIdx.x, hi, V5_BLOCK, 0.0f, scale[row % C_OUT] / sum);
}

/* blocks a row is split over: two waves of resident V5_BLOCK blocks over all rows, at least
 * one row a block, and at least a float4 a thread in every chunk */
int v5_split(const shape *s, int sm_count)
{
    int per_sm = 2048 / V5_BLOCK, want = ceil_div(2 * per_sm * sm_count, rows(s));
    int most = s->s / 4 / V5_BLOCK;
    return want < 1 ? 1 : (want > most ? (most < 1 ? 1 : most) : want);
}

void v5_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_MODEL_FWD)
        model_front(r);
    int blocks = rows(&r->sh) * r->split;
    v5_chunk_sums<<<blocks, V5_BLOCK>>>(r->c, r->rpart, r->sh.s, r->split);
    v5_chunk_write<<<blocks, V5_BLOCK>>>(r->c, r->rpart, r->scale, r->y, r->lse, r->sh.s, r->split);
}
