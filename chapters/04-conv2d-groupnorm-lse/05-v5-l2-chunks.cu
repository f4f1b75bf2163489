/*
 * v5: chunks of samples small enough that the second read of c hits L2
 *
 * Defect of v4: c crosses DRAM twice, 1048 MB for 528 MB of work; the statistics must see a
 * whole group before its first output, so the second read cannot go, but it need not come from
 * DRAM: a sample's c is 4.06 MB, and the H100's L2 is 52 MB (model.h).
 * Change: walk the batch in chunks of K samples, two chunks' c within L2_SHARE of the L2
 * (K = 3 on the H100: 12 MB a chunk), each chunk two launches: the statistics, then the apply,
 * which finds the chunk's c still in L2. The statistics of chunk k + 1 run beside the apply of
 * chunk k, on a second stream, so DRAM is not idle while the apply reads L2. A chunk's
 * statistics have only K 16 groups (48 blocks for 132 SMs), so each group is split over
 * SPLIT = 8 blocks writing a partial (count, mean, M2) each; the apply merges a sample's
 * 16 x 8 partials in a fixed order (Chan's formula), so the result does not depend on timing.
 * A chunk has too few positions to hide L2's latency with a thread a position, so the apply
 * gives each position 4 threads (16 channels each) and merges their partial logsumexps.
 * Prediction: c from DRAM once and y written: 528 MB, 0.18 ms at the ceiling, if the apply of
 * each chunk hides under the next chunk's statistics; about 0.2 ms with 43 chunks' launches.
 * Measured (H100 80GB HBM3, KernelBench shape, data/h100/ch04.csv): c does cross DRAM once
 * (Nsight Compute at 32x8x128x128: a chunk's apply reads under 3 KB from DRAM), but the time is
 * 0.742 ms [v5 epilogue_fwd], 1.98x [v5/v4 epilogue_fwd] v4's 0.374 [v4 epilogue_fwd]: the
 * prediction failed. 43 chunks of two launches joined by events cost (0.742 - 0.177) / 43 =
 * 13 us a chunk over the floor, more than the 4 us a chunk's 12 MB take at the ceiling. The
 * per-chunk cost must fall under the DRAM time it hides: one persistent launch, v6.
 */
#include "apply.cuh"
#include "group-welford.cuh"
#include "model.h"

/* block (j, group seg of the chunk): float4 j STATS_BLOCK + i, stepping SPLIT STATS_BLOCK */
__global__ void __launch_bounds__(STATS_BLOCK)
v5_stats_split(const float *__restrict__ c, welford *__restrict__ part, int seg0, int S)
{
    int seg = seg0 + blockIdx.y, j = blockIdx.x;
    welford w = thread_welford(c, seg, S, j * STATS_BLOCK + threadIdx.x, SPLIT * STATS_BLOCK);
    w = block_welford(w);
    if (threadIdx.x == 0)
        part[(size_t)seg * SPLIT + j] = w;
}

/* block (tile, sample n0 + blockIdx.y): 64 positions, each by 4 threads (a quarter of the
 * channels each: a chunk has only K S positions, a quarter of what fills the GPU). Threads
 * 0..15 first merge their group's SPLIT partials in order; tile 0 stores the statistics; the
 * quarters' partial logsumexps meet in shared memory. */
__global__ void __launch_bounds__(APPLY_BLOCK)
v5_apply_merged(const float *__restrict__ c, const welford *__restrict__ part,
                const float *__restrict__ gamma, const float *__restrict__ beta,
                float *__restrict__ mean, float *__restrict__ rstd, float *__restrict__ y, int n0,
                int S)
{
    enum { POS = APPLY_BLOCK / 4, QCH = C_OUT / 4 };
    __shared__ float smean[GROUPS], srstd[GROUPS], sa[C_OUT], sb[C_OUT], pm[4][POS], ps[4][POS];
    int n = n0 + blockIdx.y, quarter = threadIdx.x / POS, lane = threadIdx.x % POS;
    int q = blockIdx.x * POS + lane;
    if (threadIdx.x < GROUPS) {
        int seg = n * GROUPS + threadIdx.x;
        welford w = part[(size_t)seg * SPLIT];
        for (int j = 1; j < SPLIT; j++)
            w = chan_merge(w, part[(size_t)seg * SPLIT + j]);
        smean[threadIdx.x] = w.mean, srstd[threadIdx.x] = group_rstd(w, S);
        if (blockIdx.x == 0)
            mean[seg] = smean[threadIdx.x], rstd[seg] = srstd[threadIdx.x];
    }
    __syncthreads();
    affine_of(sa, sb, smean, srstd, gamma, beta);
    __syncthreads();
    float m = -INFINITY, sum = 0.0f;
    if (q < S) {
        const float *cs = c + (size_t)n * C_OUT * S + q;
#pragma unroll 8
        for (int ch = quarter * QCH; ch < (quarter + 1) * QCH; ch++)
            lse_online(residual_at(cs, S, ch, sa, sb, NULL), &m, &sum);
    }
    pm[quarter][lane] = m, ps[quarter][lane] = sum;
    __syncthreads();
    if (quarter == 0 && q < S) {
        for (int k = 1; k < 4; k++)
            lse_merge(&m, &sum, pm[k][lane], ps[k][lane]);
        y[(size_t)n * S + q] = m + logf(sum);
    }
}

/* Chunk k's statistics on stream 0 of the pair, its apply on stream 1 once they are done, so
 * chunk k + 1's statistics (DRAM) overlap chunk k's apply (L2). Two chunks are in L2 at once:
 * chunk k + 2's statistics wait for chunk k's apply. The streams are blocking ones, so the
 * legacy default stream's work before and after (the conv, the timer's events) is ordered with
 * them (CUDA Runtime API, "Stream synchronization behavior"). */
void v5_launch(const run_ctx *r, int scope)
{
    const shape *s = &r->sh;
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    cudaStream_t sa = r->stream[0], sb = r->stream[1];
    for (int k = 0, n0 = 0; n0 < s->n; k++, n0 += r->chunk) {
        int cnt = s->n - n0 < r->chunk ? s->n - n0 : r->chunk;
        if (k >= 2)
            CUDA_CHECK(cudaStreamWaitEvent(sa, r->applied[k - 2], 0));
        v5_stats_split<<<dim3(SPLIT, cnt * GROUPS), STATS_BLOCK, 0, sa>>>(r->c, r->wpart,
                                                                          n0 * GROUPS, s->s);
        CUDA_CHECK(cudaEventRecord(r->stats_done[k], sa));
        CUDA_CHECK(cudaStreamWaitEvent(sb, r->stats_done[k], 0));
        v5_apply_merged<<<dim3(ceil_div(s->s, APPLY_BLOCK / 4), cnt), APPLY_BLOCK, 0, sb>>>(
            r->c, r->wpart, r->gamma, r->beta, r->mean, r->rstd, r->y, n0, s->s);
        CUDA_CHECK(cudaEventRecord(r->applied[k], sb));
    }
}
