/*
 * cluster.cuh: what the cluster versions share (v10, v11, v13 .. v16, b3, b4's forward): a
 * sample's slice cut among the CL blocks of its cluster, the shared memory that holds it, the
 * copies that fill it, the statistics exchanged through distributed shared memory (pulled, or
 * pushed: v16), the launch, and the first wave's staggered start (v10's step 0). v11 holds
 * whole channel rows instead of slices, and takes the copies, the launch and the start.
 *
 * Hopper only: the PTX it uses (mbarriers, bulk copies) and the launch of a cluster kernel are
 * common/hopper.cuh's, with why and how.
 */
#ifndef CH03_CLUSTER_CUH
#define CH03_CLUSTER_CUH

#include <cooperative_groups.h>
#include <cuda_pipeline.h>
#include <stdio.h>
#include <stdlib.h>

#include "hopper.cuh"
#include "model.h"
#include "sums.cuh"
#include "welford.cuh"

#define SMEM_STATIC_MAX 19456 /* the cluster kernels' static shared memory, at most (v16: 18.4 KB) */

namespace cg = cooperative_groups;

/* block r of a cluster holds positions [slice_lo(S, r), slice_lo(S, r + 1)) of all 16 channels:
 * cut at multiples of 4 positions so 16-byte copies stay aligned */
__host__ __device__ static inline int slice_lo(int S, int r)
{
    int q = (S + 3) / 4, v = 4 * (int)((long long)q * r / CL);
    return v < S ? v : S;
}

/* floats per channel row in shared memory: the longest slice */
__host__ __device__ static inline int slice_cap(int S) { return 4 * (((S + 3) / 4 + CL - 1) / CL); }

/* shared memory of the cluster kernels, bytes: the 16 rows (+ g and the argmax for b3) */
static inline size_t cluster_smem(int S, int backward)
{
    size_t cap = slice_cap(S);
    return 4 * C_OUT * cap + (backward ? 4 * cap + cap : 0);
}

/* whether a sample's slices fit the blocks of a cluster; if not, the version runs its fallback
 * (v10 -> v9, v13 and v14 -> v12, b3 and b4 -> b2; v11 tests its own rows and runs v10, v15
 * and v16 their own windows and run v14) */
static inline int cluster_fits(const run_ctx *r, int backward)
{
    return cluster_smem(r->sh.s, backward) <= r->smem_optin;
}

/* the cluster's per-block partials and the statistics every block ends with */
struct cluster_shared {
    welford wf[2][C_OUT]; /* the slice's (count, mean, M2) per channel, by sample parity (v15) */
    float mean[C_OUT], rstd[C_OUT], m[C_OUT];
    float part[2][C_OUT];     /* b3: the sample's mean(dxh) and mean(dxh xh) */
    float part_bwd[3][C_OUT]; /* b3: sums of dxh, dxh xh over the slice; dm of the block */
};

/* Where bulk copies cannot serve (S not a multiple of 4: rows of whole 16-byte units are
 * needed), cp.async (LDGSTS: global to shared memory without passing through registers, CUDA
 * C++ Programming Guide, "Asynchronous Data Copies"): `rows` rows of len floats, S apart in
 * src, cap apart in dst; each of the block's THREADS threads issues its share, all in flight at
 * once, committed as one group. 16 bytes a copy when S is a multiple of 4 (len then is too:
 * slice_lo), else 4. */
template <int THREADS = CL_THREADS>
__device__ static inline void issue_rows(float *dst, int cap, const float *__restrict__ src,
                                         int rows, int len, int S)
{
    if ((S & 3) == 0) {
        int len4 = len >> 2, total = rows * len4;
        for (int i = threadIdx.x; i < total; i += THREADS) {
            int co = i / len4, j = i - co * len4;
            __pipeline_memcpy_async(dst + co * cap + 4 * j, src + (size_t)co * S + 4 * j, 16);
        }
    } else {
        int total = rows * len;
        for (int i = threadIdx.x; i < total; i += THREADS) {
            int co = i / len, j = i - co * len;
            __pipeline_memcpy_async(dst + co * cap + j, src + (size_t)co * S + j, 4);
        }
    }
    __pipeline_commit();
}

/* a block's slice: the 16 channel rows of its positions */
__device__ static inline void issue_slice(float *vals, int cap, const float *__restrict__ src,
                                          int len, int S)
{
    issue_rows(vals, cap, src, C_OUT, len, S);
}

/* When a cluster of the first wave starts (v10, b3). The first wave: the `wave` clusters that
 * fit on the GPU at once (cudaOccupancyMaxActiveClusters), clusters 0 to wave - 1 (observed on
 * the H100: clusters are dispatched in blockIdx.y order; CUDA does not promise it). They all
 * start together, copy their slices together and then all reduce together, DRAM idle. Cluster
 * n < wave waits n * span_ns / wave nanoseconds first, so that the first wave's starts spread
 * evenly over span_ns; later clusters start as earlier ones finish, already spread. No wait
 * when the grid's `clusters` all fit at once (no later wave to make room for: at batch 8 the
 * wait cost v10 1 us), nor when wave or span_ns is 0. %globaltimer is the GPU's nanosecond clock
 * (PTX ISA, "Special Registers: %globaltimer"; it advances in 32 ns steps on the H100);
 * __nanosleep keeps the waiting warps off the issue slots of the SM's other block. */
__device__ static inline void stagger_start(int n, int clusters, int wave, int span_ns)
{
    if (wave <= 0 || span_ns <= 0 || n >= wave || clusters <= wave)
        return;
    unsigned long long t0, t, d = (unsigned long long)n * (unsigned)span_ns / (unsigned)wave;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (t = t0; t - t0 < d;) {
        __nanosleep(200);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    }
}

/* stagger_start's span: the environment variable `name` (V10SPAN, B3SPAN), an integer in ns,
 * when set, so that a reader can time the wait's effect (0: no wait) or tune it for another
 * GPU; else dflt. -1 when it is set to anything else than an integer from 0 to 1e8. */
static inline int span_parse(const char *name, int dflt)
{
    const char *e = getenv(name);
    if (!e)
        return dflt;
    char *end;
    long v = strtol(e, &end, 10);
    return end == e || *end || v < 0 || v > 100000000 ? -1 : (int)v;
}

/* span_parse's value; not a number, or negative: an error, exit 2 (the library checks it first:
 * api.cu) */
static inline int span_env(const char *name, int dflt)
{
    int v = span_parse(name, dflt);
    if (v < 0) {
        fprintf(stderr, "error: %s=%s: the span must be an integer number of ns, 0 to 1e8\n",
                name, getenv(name));
        exit(2);
    }
    return v;
}

/* thread 0 (v10, b3; S a multiple of 4, so that each row is whole 16-byte units at 16-byte
 * aligned addresses, as bulk copies need): the 16 rows of the slice, row co completing on
 * bars[co], so that the work on row co (v10: warp co's sums; b3: every thread's argmax) can
 * start while later rows are still arriving. Each barrier's single arrival is this
 * arrive.expect_tx, which also sets the bytes its phase waits for. */
__device__ static inline void bulk_rows(float *vals, int cap, const float *__restrict__ src,
                                        int len, int S, unsigned long long *bars)
{
    unsigned bytes = 4u * len;
    for (int co = 0; co < C_OUT; co++) {
        mbar_expect_tx(&bars[co], bytes);
        if (bytes)
            bulk_copy(vals + co * cap, src + (size_t)co * S, bytes, &bars[co]);
    }
}

/* issue_slice, then wait for this thread's copies (the caller's __syncthreads waits for all) */
__device__ static inline void fill_slice(float *vals, int cap, const float *__restrict__ src,
                                         int len, int S)
{
    issue_slice(vals, cap, src, len, S);
    __pipeline_wait_prior(0);
}

/* The exchange: each block has published its slice's (count, mean, M2) of channel w in
 * cs->wf[parity][w]; one cluster barrier, then warp w reads the ncl blocks' triples of channel w
 * through distributed shared memory and merges them with Chan's formula (common/welford.cuh) in
 * rank order, so every block ends with the same bits in cs->mean and cs->rstd. 16 warps (one a
 * channel), ncl <= CL blocks a cluster. */
__device__ static inline void cluster_merge(cluster_shared *cs, int S, int parity, int ncl)
{
#if __CUDA_ARCH__ >= 900
    cg::cluster_group cluster = cg::this_cluster();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    cluster.sync();
    welford z = {0, 0.0f, 0.0f};
    welford w = lane < ncl ? cluster.map_shared_rank(cs->wf[parity], lane)[warp] : z;
    for (int off = CL / 2; off > 0; off >>= 1)
        w = chan_merge(w, shfl_welford(w, off));
    if (lane == 0)
        cs->mean[warp] = w.mean, cs->rstd[warp] = rsqrtf(w.m2 / S + (float)IN_EPS);
    __syncthreads();
#endif
}

/* The exchange pushed (v16), where cluster_merge pulls. Pulling puts the remote loads' round trip
 * after the cluster barrier, on every block's critical path; the barrier itself begins with a
 * release that waits for all the thread's memory operations (MEMBAR.ALL.GPU in SASS); and Chan's
 * tree then merges the ncl triples in three dependent rounds of shuffles and a division each.
 * Pushing: warp w of each block sends its triple of channel w (count, mean, M2 and a zero, four
 * floats) into every peer's `in` (rank r's at in[r][w]) by st.async (PTX ISA, "st.async"): a store
 * into a peer's shared memory that, as it lands, counts its 16 bytes down on the peer's mbarrier,
 * as a bulk copy does (hopper.cuh); its own triple it stores into its own `in` with a plain store,
 * read back by the same thread. Each block expects (ncl - 1) x 16 triples from its peers a sample
 * on its own mbarrier (none in a cluster of one block: the phase completes on the arrival alone),
 * waits for them, and merges from its own shared memory: no cluster barrier a sample. The merge is
 * two sums: with N = sum n_r, mean = sum (n_r mean_r) / N and M2 = sum (M2_r + n_r (mean_r -
 * mean)^2), Chan's pairwise formula (common/welford.cuh) summed at once: every term of M2 is
 * nonnegative, so nothing cancels. The lanes of a warp add in a fixed order, so every block ends
 * with the same bits. Why `in` and the mbarriers can be reused, by the parity of the block's
 * iteration count it (its it-th sample, not the sample's index n): a block pushes iteration it +
 * 2's triples only after its wait for it + 1 completed, which needed every peer's it + 1 push,
 * which each peer sent after it had read iteration it's. A peer's bytes may land before this
 * block's expect_tx for the iteration: the mbarrier's pending byte count goes negative until then,
 * and the phase cannot complete without the one arrival that expect_tx makes. (The two sums, then
 * st.async in place of the barrier, each took about 4% off v16: LABBOOK.md.) cluster_push: the
 * lanes < ncl of warp w, lane r sending to rank r; before the first push a cluster barrier must
 * show that every peer has started and initialised its mbarriers (racecheck flags a store into a
 * block not yet running). cluster_merge_pushed: all threads of the block, on iteration it's parity
 * half of `in` and its mbarrier, phase (it / 2) mod 2. */
__device__ static inline void cluster_push(float4 *in, int slot, float4 v, unsigned long long *bar,
                                           int dst, int rank)
{
    if (dst == rank) /* the block's own triple: a plain store, read back by this same thread */
        in[slot] = v;
    else
        st_async16(cluster_addr(in + slot, dst),
                   make_uint4(__float_as_uint(v.x), __float_as_uint(v.y), __float_as_uint(v.z),
                              __float_as_uint(v.w)),
                   cluster_addr(bar, dst));
}

/* the merge as two sums (v16 to v18): lane r of warp w holds block r's triple of channel w
 * (count, mean, M2; zeros in lanes past the sample's blocks); the sample's mean, then M2 as the
 * sum of each block's M2 and count (mean_r - mean)^2 (merge_sums: over each R aligned lanes, into
 * every lane of them); merge_triples: R = CL, into cs->mean / cs->rstd of channel w, then a block
 * barrier */
template <int R>
__device__ static inline void merge_sums(float4 w, float *mean_out, float *m2_out)
{
    float n = w.x, sum = n * w.y;
#pragma unroll
    for (int o = R / 2; o > 0; o >>= 1) /* each R aligned lanes: the sample's blocks */
        n += __shfl_xor_sync(FULL, n, o), sum += __shfl_xor_sync(FULL, sum, o);
    float mean = n > 0.0f ? sum / n : 0.0f, d = w.y - mean, m2 = w.z + w.x * d * d;
#pragma unroll
    for (int o = R / 2; o > 0; o >>= 1)
        m2 += __shfl_xor_sync(FULL, m2, o);
    *mean_out = mean, *m2_out = m2;
}

__device__ static inline void merge_triples(cluster_shared *cs, float4 w, int S)
{
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float mean, m2;
    merge_sums<CL>(w, &mean, &m2); /* lanes 0 .. CL - 1: the sample's blocks */
    if (lane == 0)
        cs->mean[warp] = mean, cs->rstd[warp] = rsqrtf(m2 / S + (float)IN_EPS);
    __syncthreads();
}

__device__ static inline void cluster_merge_pushed(cluster_shared *cs, const float4 *in,
                                                   unsigned long long *bar, unsigned phase, int S,
                                                   int ncl)
{
#if __CUDA_ARCH__ >= 900
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0)
        mbar_expect_tx(bar, (ncl - 1) * C_OUT * (unsigned)sizeof(float4)); /* the peers' */
    mbar_wait_cluster(bar, phase);
    float4 w = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (lane < ncl)
        w = in[lane * C_OUT + warp];
    merge_triples(cs, w, S);
#endif
}

/* The statistics of the sample, into cs->mean / cs->rstd of every block. Warp w reduces
 * channel w of this block's slice exactly on its own (its mean, then its centred squares, both
 * from shared memory, so the second pass costs no DRAM) and publishes (count, mean, M2); one
 * cluster barrier; then every block reads the CL blocks' triples for each channel through
 * distributed shared memory and merges them with Chan's formula (common/welford.cuh) in rank order, so
 * all blocks end with the same bits. row_bars (v10): warp w first waits for row w to land.
 * parity alternates the published triples between samples (v15, through cluster_merge), so a
 * persistent block may write the next sample's while a slower peer still reads this one's. */
__device__ static inline void cluster_stats(cluster_shared *cs, const float *vals, int cap, int len,
                                            int S, int parity, unsigned long long *row_bars)
{
#if __CUDA_ARCH__ >= 900
    cg::cluster_group cluster = cg::this_cluster();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (row_bars)
        mbar_wait(&row_bars[warp], 0);
    const float *row = vals + warp * cap;
    float mult = cs->m[warp], acc = 0.0f;
    for (int j = lane; j < len; j += 32)
        acc += a_rounded(row[j], mult);
    acc = warp_sum(acc);
    float lm = len > 0 ? __shfl_sync(FULL, acc, 0) / len : 0.0f, q = 0.0f;
    for (int j = lane; j < len; j += 32) {
        float d = a_rounded(row[j], mult) - lm;
        q += d * d;
    }
    q = warp_sum(q);
    if (lane == 0) {
        welford w = {len, lm, q};
        cs->wf[parity][warp] = w;
    }
    cluster_merge(cs, S, parity, CL);
#endif
}

/* y for the slice, from shared memory; the statistics also to global memory (the backward's)
 * from rank 0. SAVE (b4's to b6's forward): also each position's winner byte into win (the
 * slice's first position at win[0]): the argmax channel, plus WIN_INSIDE where the winner's xh
 * is inside the clamp, [-1, 1], so its gradient passes (the comparisons b3 makes; a NaN is
 * outside). b4 (TRACK false) computes the winner's xh again after the channel loop; b5 and b6
 * (TRACK) keep the bit with the channel as the loop goes: xh is inside exactly where clamp(xh) == xh
 * (false for a NaN), a comparison of two values the loop has in registers anyway. */
template <bool SAVE = false, bool TRACK = false>
__device__ static inline void cluster_apply(const cluster_shared *cs, const float *vals, int cap,
                                            int len, float *__restrict__ y, float *__restrict__ mean,
                                            float *__restrict__ rstd, int n, int rank,
                                            unsigned char *__restrict__ win = NULL)
{
    for (int j = threadIdx.x; j < len; j += CL_THREADS) {
        float best = 0.0f;
        int k = 0;
#pragma unroll
        for (int co = 0; co < C_OUT; co++) {
            float xh = (a_rounded(vals[co * cap + j], cs->m[co]) - cs->mean[co]) * cs->rstd[co];
            float t = clampf1(xh);
            float u = t * cs->m[co];
            if (co == 0 || u > best) {
                best = u;
                if (SAVE)
                    k = TRACK ? (co | (t == xh ? WIN_INSIDE : 0)) : co;
            }
        }
        y[j] = best;
        if (SAVE && TRACK) {
            win[j] = (unsigned char)k;
        } else if (SAVE) { /* the winner's xh again (four more shared loads) */
            float xh = (a_rounded(vals[k * cap + j], cs->m[k]) - cs->mean[k]) * cs->rstd[k];
            win[j] = (unsigned char)(k | (xh >= -1.0f && xh <= 1.0f ? WIN_INSIDE : 0));
        }
    }
    if (rank == 0 && threadIdx.x < C_OUT)
        mean[n * C_OUT + threadIdx.x] = cs->mean[threadIdx.x],
        rstd[n * C_OUT + threadIdx.x] = cs->rstd[threadIdx.x];
}

/* The whole model in one pass (v13, v14): v10's cluster, each block computing its slice's conv
 * into shared memory instead of loading c. CONV says how: CONV::smem, the weights as its loop
 * reads them; CONV::load (every thread, before a barrier) stages them; CONV::run computes
 * vals. Then v10's statistics, exchange and y. __launch_bounds__(.., 2): two blocks an SM,
 * which caps registers at 64. */
template <class CONV>
__global__ void __launch_bounds__(CL_THREADS, 2)
k_cluster_model(const float *__restrict__ x, const float *__restrict__ weight,
                const float *__restrict__ bias, const float *__restrict__ m,
                float *__restrict__ y, float *__restrict__ mean, float *__restrict__ rstd,
                const shape sh)
{
#if __CUDA_ARCH__ >= 900
    extern __shared__ float4 smem4[];
    float *vals = (float *)smem4;
    __shared__ cluster_shared cs;
    __shared__ __align__(16) typename CONV::smem sw;
    cg::cluster_group cluster = cg::this_cluster();
    int S = sh.s, rank = (int)cluster.block_rank(), n = blockIdx.y, cap = slice_cap(S);
    int lo = slice_lo(S, rank), len = slice_lo(S, rank + 1) - lo;
    if (threadIdx.x < C_OUT)
        cs.m[threadIdx.x] = __ldg(m + threadIdx.x);
    CONV::load(&sw, weight, bias, sh);
    __syncthreads();
    CONV::run(x, sh, n, lo, len, &sw, vals, cap);
    __syncthreads();
    cluster_stats(&cs, vals, cap, len, S, 0, NULL);
    cluster_apply(&cs, vals, cap, len, y + (size_t)n * S + lo, mean, rstd, n, rank);
    cluster.sync(); /* no block may exit while another still reads its partials */
#endif
}

/* The launch of a cluster kernel (common/hopper.cuh): grid (CL, `clusters`), CL_THREADS threads
 * a block, `smem` bytes of dynamic shared memory, clusters of CL blocks along x; the opt-in is
 * r->smem_optin. Only the cluster versions' launchers call this. */
static inline void cluster_config(cluster_launch *L, const void *kernel, int *opted,
                                  const run_ctx *r, int clusters, size_t smem)
{
    cluster_launch_make(L, kernel, opted, r->smem_optin, CL, dim3(CL, clusters), CL_THREADS, smem);
    L->cfg.stream = r->stream;
}

/* k_cluster_model<CONV>'s launch (v13, v14): one cluster a sample; CONV's fallback, v12, where
 * a sample does not fit a cluster */
template <class CONV>
static inline void cluster_model_launch(const run_ctx *r, int *opted)
{
    if (!cluster_fits(r, 0)) {
        v12_model(r);
        return;
    }
    auto kernel = k_cluster_model<CONV>;
    cluster_launch L;
    cluster_config(&L, (const void *)kernel, opted, r, r->sh.n, cluster_smem(r->sh.s, 0));
    CUDA_CHECK(cudaLaunchKernelEx(&L.cfg, kernel, r->x, r->weight, r->bias, r->m, r->y, r->mean,
                                  r->rstd, r->sh));
}

/* how many clusters of `kernel` (one a sample, `smem` bytes a block) fit on the GPU at once:
 * its first wave (v10, b3); 0 when none fits */
static inline int cluster_wave(const void *kernel, int *opted, const run_ctx *r, size_t smem)
{
    cluster_launch L;
    cluster_config(&L, kernel, opted, r, r->sh.n, smem);
    return resident_clusters(&L, kernel);
}

#endif
