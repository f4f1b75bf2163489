/*
 * v11: v10 with whole channel rows a block: the statistics local, the channel max exchanged
 * (Hopper)
 *
 * Defect of v10: a block holds a slice of all 16 channels, so no block finishes a channel's
 * statistics alone: each waits at a cluster barrier for the other seven before it writes y.
 * Change: block r of a sample's cluster of CL = 8 holds whole rows 2r and 2r + 1 (one contiguous
 * range of c, about 101 KB; two blocks an SM, as v10's):
 *   1. each row comes as V11_CHUNKS bulk copies, one mbarrier each (cp.async when S is not a
 *      multiple of 4); warp w reduces chunk w as it lands;
 *   2. the block merges its chunks by Chan's formula into its two rows' mean and rstd: a row's
 *      statistics are the block's own, nothing to wait for;
 *   3. u_r, the block's max over its two channels of m clamp(xh), written in place over row 2r;
 *   4. one cluster barrier; block r reads its eighth of the positions from all 8 blocks' u
 *      through distributed shared memory and writes y = their max, in rank order (the first
 *      maximum wins a tie, as in v10's channel loop);
 *   5. a closing cluster barrier: no block exits while another still reads its u.
 * The first wave's starts are staggered as v10's (V11SPAN=ns sets the span).
 * Prediction (from a prototype's timeline, so not independent of the design): a block's life
 * from about 12.4 us to 10.4, over 4.3 waves about 8.6 us less than v10.
 * Measured: 0.0577 ms [v11 epilogue_fwd], 64% of the copy ceiling [v11 epilogue_fwd pct_ceiling],
 * 1.12x v10 [v10/v11 epilogue_fwd]. Left: for about 6 of its 10.4 us a block loads nothing.
 * Tried, slower or wrong (LABBOOK.md): u pushed by st.async or TMA shared-to-shared copies; 128 to
 * 512 threads; 2 to 16 chunks a row; 16 one-row blocks; persistent clusters; the sample in L2.
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
 * took it (a_rounded, model.h): the difference first, then the scale. (A form with the difference
 * as fma(v, m, -mean), an FMA where v10's form takes three multiplies and an add, timed about 1%
 * faster, but took the mean from the exact product, the statistics from rounded ones: LABBOOK.md.)
 * The one-FMA form, fma(v, m^2 rstd, -m rstd mean), scales before it cancels: on c = 50 +- 1 at
 * S = 2 its y missed the check's bound (rel_l2 1.2e-5, 1e-5 allowed), where this form and v10's
 * pass. A NaN: fmaxf and fminf turn it into -|m|, and max_u keeps the first channel where one is
 * NaN, where v10's clampf1 and `u > best` would keep or skip it; finite inputs have none, and the
 * checks plant none. */
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
v11_row_cluster(const float *__restrict__ c, const float *__restrict__ m, float *__restrict__ y,
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
        if (bulk) { /* y is not read again here: a streaming store (it timed as a plain one) */
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

static int opted; /* v11_row_cluster's shared-memory opt-in is set (cluster_launch_make) */

static void v11_config(cluster_launch *L, const run_ctx *r)
{
    cluster_launch_make(L, (const void *)v11_row_cluster, &opted, r->smem_optin, CL,
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
    return resident_clusters(&L, (const void *)v11_row_cluster);
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
    CUDA_CHECK(cudaLaunchKernelEx(&L.cfg, v11_row_cluster, r->c, r->m, r->y, r->mean, r->rstd,
                                  r->sh.s, r->v11_wave, span));
}
