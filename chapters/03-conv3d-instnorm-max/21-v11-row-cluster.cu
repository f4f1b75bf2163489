/*
 * v11: v10 with whole channel rows a block: the statistics local, the channel max exchanged
 * (Hopper)
 *
 * Defect of v10: its block holds a slice of positions of all 16 channels, so no block can finish
 * a channel's statistics alone: every block reduces its 16 pieces, waits at a cluster barrier for
 * the other seven, merges, and only then reads its 16 rows again, one float at a time, for y. Its
 * timeline (commit 0ab0e1a, taken before its staggered start): 8.6 us to load, reduce and
 * exchange (the later waves' median), 2.1 us for y and 1.7 us at the closing barrier (all
 * blocks' medians): about 12.4 us a block, of which only the load uses DRAM, and the 128 samples
 * pass through the 30 resident clusters in 4.3 waves.
 * Change: block r of a sample's cluster of CL = 8 holds whole channel rows 2r and 2r + 1 (2 x 50.4
 * KB: one contiguous 100.8 KB range of c; two blocks an SM, as v10's):
 *   1. thread 0 asks for each row as V11_CHUNKS bulk copies (common/hopper.cuh introduces the
 *      PTX), one mbarrier each; warp w waits for chunk w only and reduces it as it lands: its
 *      mean, then its centred squares, from shared memory (S not a multiple of 4: cp.async, every
 *      chunk waited for at once, as v10);
 *   2. the block merges its chunks by Chan's formula (common/welford.cuh) into its two rows'
 *      mean and rstd: a row's statistics are the block's own, nothing to wait for;
 *   3. u_r, the block's max over its two channels of m clamp(xh), written in place over row 2r,
 *      16 bytes a load and a store;
 *   4. one cluster barrier, then block r reads its eighth of the row, the 16-byte units
 *      [lo_r, hi_r) (4 positions each), from all 8 blocks' u through distributed shared memory and
 *      writes y = their max (in rank order, so the first maximum wins a tie, as v10's channel
 *      loop's; with no argmax written, a tie changes at most the sign of a zero);
 *   5. a closing cluster barrier: no block exits while another still reads its u.
 * Each block now pulls 8 x 6.3 KB of u (v10: 8 x 16 triples of count, mean and M2). The first
 * wave's starts are spread over 10 us, as v10's (stagger_start, cluster.cuh; V11SPAN=ns sets
 * another span).
 * Prediction (the arithmetic done from a prototype's timeline, commit 811d9cc, so not
 * independent of the design): a block's life falls from about 12.4 us to 10.4 (4.6 to load and
 * reduce, 1.1 for u, 2.1 at the barrier, 1.7 to read u and write y, 0.9 at the closing barrier);
 * over 4.3 waves that is roughly 4.3 x 2 = 8.6 us less, from v10's 0.0679 ms (its row then, with
 * the old flush) to about 0.059.
 * Measured (H100, KernelBench shape): the recording call's three interleaved rounds, medians of 50,
 * with the old flush: v11 0.0608, 0.0611, 0.0605 ms against v10's 0.0673, 0.0673, 0.0675 (10% less,
 * 6.5 us); the recorded row, the README's table: 0.0577 ms [v11 epilogue_fwd], 64% of the copy
 * ceiling [v11 epilogue_fwd pct_ceiling], 2.61x torch.compile [compile/v11 epilogue_fwd], 6.9 us
 * [v10-v11 epilogue_fwd] under v10's row. Short of the arithmetic, which used the later waves'
 * phases only: an instrumented build's timeline (%globaltimer at each block's phase boundaries,
 * medians) has the later waves at 4.6 us to load and reduce, 1.15 for u, 2.1 at the first barrier
 * (the cluster's slowest load), 1.7 to read u and write y and 0.9 at the closing barrier, and the
 * first wave 1 us longer at the first barrier (3.1). Without the staggered start (V11SPAN=0), with
 * the clean-L2 timer (data commit 29662c6's code, three interleaved rounds of 30 repetitions):
 * 0.0629, 0.0628, 0.0626 ms against 0.0573, 0.0581, 0.0573 with it, about 5 us (with the old flush
 * 0.0693, the first wave's load taking 11.2 us). ncu (the kernel alone, at ncu's locked base
 * clocks, SM 1.59 GHz): 62.1 us, DRAM 52% busy, 12.2 warp cycles per issued instruction. What is
 * left: for about 6 of its 10.4 us a block loads nothing, and only the SM's other block can use
 * that share of DRAM. The target, 0.045 ms, is above what a read of c costs with the clean timer:
 * v10's slices read alone, nothing else done, 0.041 ms, as one grid-stride read of c (with the old
 * flush 0.049, and v11's rows loaded and reduced alone 0.048 - 0.050; the README), so what keeps
 * v11 above it is that unused share. Tried, slower or wrong (the README's list): u pushed
 * into its owners by st.async with no closing barrier, or by the TMA's shared-to-shared copies;
 * 128, 384 and 512 threads; 2, 8 or 16 chunks a row; clusters of 16 one-row blocks; persistent
 * clusters copying the next sample's second row during the exchange; the sample held in L2
 * instead of shared memory; the one-FMA fold of u that v17 (later in this chapter) uses.
 */
#include "cluster.cuh"
#include "model.h"

#define V11_THREADS 256 /* 8 warps: one a chunk */
#define V11_ROWS (C_OUT / CL) /* channel rows a block: 2 */
#define V11_CHUNKS 4    /* bulk copies (and warps) a row */
#define V11_SPAN_NS 10000 /* the first wave's starts spread over 10 us, as v10's */
static_assert(V11_ROWS == 2, "step 3 is written for two rows a block (C_OUT = 2 CL)");

/* shared memory of v11's block, bytes: its rows, each rounded up to whole 16-byte units */
static inline size_t v11_smem(int S) { return (size_t)V11_ROWS * 16 * ((S + 3) / 4); }

#if __CUDA_ARCH__ >= 900 /* used only by the sm_90 body below */
/* the first of `parts` near-equal parts of n units: part k starts at unit part_lo(n, k, parts) */
__device__ static inline int part_lo(int n, int k, int parts)
{
    return (int)((long long)n * k / parts);
}

/* the (count, mean, M2) of units [a, b) of a row of x = v m in shared memory, S floats (the
 * unit at S / 4, when S is not a multiple of 4, holds S % 4 of them): a warp's, in every lane */
__device__ static inline welford chunk_stats(const float4 *row, int a, int b, int S, float mult)
{
    int lane = threadIdx.x & 31, full = S >> 2, end = b < full ? b : full;
    int tail = b > full ? S & 3 : 0; /* elements of the last, partial unit in this chunk */
    int count = 4 * (end > a ? end - a : 0) + tail;
    float s = 0.0f, q = 0.0f;
    for (int i = a + lane; i < end; i += 32) {
        float4 v = row[i];
        s += (a_rounded(v.x, mult) + a_rounded(v.y, mult)) +
             (a_rounded(v.z, mult) + a_rounded(v.w, mult));
    }
    if (lane == 0)
        for (int e = 0; e < tail; e++)
            s += a_rounded(((const float *)(row + full))[e], mult);
    s = __shfl_sync(FULL, warp_sum(s), 0);
    float mean = count > 0 ? s / count : 0.0f;
    for (int i = a + lane; i < end; i += 32) {
        float4 v = row[i];
        float d0 = a_rounded(v.x, mult) - mean, d1 = a_rounded(v.y, mult) - mean,
              d2 = a_rounded(v.z, mult) - mean, d3 = a_rounded(v.w, mult) - mean;
        q += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3);
    }
    if (lane == 0)
        for (int e = 0; e < tail; e++) {
            float d = a_rounded(((const float *)(row + full))[e], mult) - mean;
            q += d * d;
        }
    q = __shfl_sync(FULL, warp_sum(q), 0);
    welford w = {count, mean, q};
    return w;
}

/* u = m clamp(xh, -1, 1) of one value v of c, xh = (v m - mean) rstd (mean and rstd of x = c m),
 * with k = (m, mean, m rstd, |m|): m clamp(xh, -1, 1) = clamp(m xh, -|m|, |m|) (the fold v17 uses,
 * later in this chapter), and m xh = (a - mean) (m rstd), a = v m rounded once, as the statistics
 * took it (a_rounded, model.h): the difference first, then the scale. Timed with the difference
 * as fma(v, m, -mean), an FMA, a multiply and two FMNMX where v10's form takes three multiplies,
 * an add and two compares: that form with y's streaming store (below) took 0.0605 - 0.0608 ms
 * against 0.0611 - 0.0614 with v10's form and a plain store (three interleaved rounds), and the
 * store alone changed nothing; the FMA took the mean from the exact product, the statistics from
 * rounded ones, and a_rounded costs a multiply more (not timed since). The one-FMA form,
 * fma(v, m^2 rstd, -m rstd mean), scales
 * before it cancels: on c = 50 +- 1 at S = 2 its y missed the check's bound (rel_l2 1.2e-5, 1e-5
 * allowed), where this form and v10's pass. A NaN: fmaxf and fminf turn it into -|m|, and max_u
 * keeps the first channel where one is NaN, where v10's clampf1 and `u > best` would keep or skip
 * it; finite inputs have none, and the checks plant none. */
__device__ static inline float channel_u(float v, float4 k)
{
    return fminf(fmaxf((a_rounded(v, k.x) - k.y) * k.z, -k.w), k.w);
}

/* the larger of two channels' u, the first where they tie (v10's `u > best`) */
__device__ static inline float4 max_u(float4 a, float4 b)
{
    return make_float4(b.x > a.x ? b.x : a.x, b.y > a.y ? b.y : a.y, b.z > a.z ? b.z : a.z,
                       b.w > a.w ? b.w : a.w);
}
#endif

__global__ void __launch_bounds__(V11_THREADS, 2)
k_row_cluster(const float *__restrict__ c, const float *__restrict__ m, float *__restrict__ y,
              float *__restrict__ mean, float *__restrict__ rstd, int S, int wave, int span_ns)
{
#if __CUDA_ARCH__ >= 900
    extern __shared__ float4 smem4[];
    __shared__ unsigned long long chunk_bars[V11_ROWS * V11_CHUNKS];
    __shared__ welford part[V11_ROWS * V11_CHUNKS];
    __shared__ float4 row_k[V11_ROWS]; /* each row's (m, mean, m rstd, |m|): channel_u */
    cg::cluster_group cluster = cg::this_cluster();
    int rank = (int)cluster.block_rank(), n = blockIdx.y, units = (S + 3) / 4;
    int co0 = V11_ROWS * rank, warp = threadIdx.x >> 5, bulk = (S & 3) == 0;
    const float *src = c + ((size_t)n * C_OUT + co0) * S;
    float4 *rows = smem4; /* row j at rows + j * units */
    stagger_start(n, gridDim.y, wave, span_ns);
    if (bulk) { /* step 1 */
        if (threadIdx.x == 0) {
            for (int t = 0; t < V11_ROWS * V11_CHUNKS; t++)
                mbar_init(&chunk_bars[t]);
            mbar_init_fence();
            for (int t = 0; t < V11_ROWS * V11_CHUNKS; t++) {
                int j = t / V11_CHUNKS, a = part_lo(units, t % V11_CHUNKS, V11_CHUNKS),
                    b = part_lo(units, t % V11_CHUNKS + 1, V11_CHUNKS);
                mbar_expect_tx(&chunk_bars[t], 16u * (b - a));
                if (b > a)
                    bulk_copy(rows + j * units + a, src + (size_t)j * S + 4 * a, 16u * (b - a),
                              &chunk_bars[t]);
            }
        }
    } else {
        issue_rows<V11_THREADS>((float *)rows, 4 * units, src, V11_ROWS, S, S);
        __pipeline_wait_prior(0);
    }
    __syncthreads();
    for (int t = warp; t < V11_ROWS * V11_CHUNKS; t += V11_THREADS / 32) { /* step 1's reduction */
        int j = t / V11_CHUNKS, kk = t % V11_CHUNKS;
        if (bulk)
            mbar_wait(&chunk_bars[t], 0);
        welford w = chunk_stats(rows + j * units, part_lo(units, kk, V11_CHUNKS),
                                part_lo(units, kk + 1, V11_CHUNKS), S, __ldg(m + co0 + j));
        if ((threadIdx.x & 31) == 0)
            part[t] = w;
    }
    __syncthreads();
    if (threadIdx.x < V11_ROWS) { /* step 2: chunks merged in order, so the bits are fixed */
        int j = threadIdx.x, co = co0 + j;
        welford w = part[j * V11_CHUNKS];
        for (int kk = 1; kk < V11_CHUNKS; kk++)
            w = chan_merge(w, part[j * V11_CHUNKS + kk]);
        float rs = rsqrtf(w.m2 / S + (float)IN_EPS), mm = __ldg(m + co);
        row_k[j] = make_float4(mm, w.mean, mm * rs, fabsf(mm));
        mean[n * C_OUT + co] = w.mean, rstd[n * C_OUT + co] = rs;
    }
    __syncthreads();
    float4 k0 = row_k[0], k1 = row_k[1];
    /* step 3; the lanes past S of a partial last unit hold floats never loaded: their u reaches
     * shared memory and the peers' max, never y */
    for (int i = threadIdx.x; i < units; i += V11_THREADS) {
        float4 a = rows[i], b = rows[units + i];
        float4 ua = make_float4(channel_u(a.x, k0), channel_u(a.y, k0), channel_u(a.z, k0),
                                channel_u(a.w, k0));
        float4 ub = make_float4(channel_u(b.x, k1), channel_u(b.y, k1), channel_u(b.z, k1),
                                channel_u(b.w, k1));
        rows[i] = max_u(ua, ub);
    }
    cluster.sync(); /* step 4: every block's u is written */
    int lo = part_lo(units, rank, CL), hi = part_lo(units, rank + 1, CL);
    const float4 *peer[CL];
#pragma unroll
    for (int q = 0; q < CL; q++)
        peer[q] = cluster.map_shared_rank(rows, q);
    float *yn = y + (size_t)n * S;
    for (int i = lo + threadIdx.x; i < hi; i += V11_THREADS) {
        float4 best = peer[0][i];
#pragma unroll
        for (int q = 1; q < CL; q++)
            best = max_u(best, peer[q][i]);
        if (bulk) { /* y is not read again here: a streaming store (timed as a plain one: 0.0619 -
                     * 0.0621 ms against 0.0616 - 0.0622, three interleaved rounds) */
            __stcs((float4 *)yn + i, best);
        } else { /* y's rows are not 16-byte aligned; the last unit may be partial */
            float b4[4] = {best.x, best.y, best.z, best.w};
            for (int e = 0; e < 4 && 4 * i + e < S; e++)
                yn[4 * i + e] = b4[e];
        }
    }
    cluster.sync(); /* step 5 */
#endif
}

static int opted; /* k_row_cluster's shared-memory opt-in is set (cluster_launch_make) */

static void v11_config(cluster_launch *L, const run_ctx *r)
{
    cluster_launch_make(L, (const void *)k_row_cluster, &opted, r->smem_optin, CL,
                        dim3(CL, r->sh.n), V11_THREADS, v11_smem(r->sh.s));
}

/* how many of v11's clusters fit at once (its first wave); 0 where its rows do not fit a block
 * (problem.cu asks once, where the cluster versions can run) */
int v11_resident_clusters(const run_ctx *r)
{
    if (v11_smem(r->sh.s) > r->smem_optin)
        return 0;
    cluster_launch L;
    v11_config(&L, r);
    return resident_clusters(&L, (const void *)k_row_cluster);
}

void v11_launch(const run_ctx *r, int scope)
{
    static int span = -1; /* V11SPAN read once, at the first launch */
    if (span < 0)
        span = span_env("V11SPAN", V11_SPAN_NS);
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    if (r->v11_wave <= 0) { /* two rows do not fit a block: v10, which needs as many bytes (about
                             * 8 S), so in practice its own fallback, v9 */
        v10_epilogue(r);
        return;
    }
    cluster_launch L;
    v11_config(&L, r);
    CUDA_CHECK(cudaLaunchKernelEx(&L.cfg, k_row_cluster, r->c, r->m, r->y, r->mean, r->rstd,
                                  r->sh.s, r->v11_wave, span));
}
