/*
 * b3: the backward in a cluster (Hopper)
 *
 * Defect of b2: c and g are read twice, once for each of its two passes (322.5 MB against the
 * backward's 212.9 MB floor), because the two sums per (n, c) must be complete before any dc.
 * Change: v10's layout again (cluster.cuh). Forward: v10, which saves the statistics. Backward:
 * block r of sample n's cluster loads its slice of c (cp.async) and of g (plain loads) into shared
 * memory once, finds each position's argmax, and warp w sums channel w's dxh and dxh xh over the
 * slice; the cluster adds the 8 partials through distributed shared memory, in rank order; then
 * every dc of the slice is written from shared memory. c and g read once, dc written once: the
 * backward's floor. dm: one partial per (n, block, channel), added in order (training-grads.cu).
 * Prediction: the backward at its floor, 212.9 MB: 0.072 ms; with v10's forward (0.074 ms),
 * 0.146 ms, if the cluster phases hide.
 * Measured, first form (the table of 2026-11-23, the old flush): 0.226 ms, against a 0.108 ms
 * floor. ncu on this kernel (commit 508c56c): 146 us, 40% of DRAM peak, the
 * same pattern as v10 (3.7 cycles per issued instruction at barriers, 3.2 on loads). Its
 * timeline (commit 55e5e9c, %globaltimer at each block's phase boundaries): a block lives a
 * median 29.9 us, 7.5 loading c and g, 8.3 on the argmax and the sums, 2.6 at the cluster
 * barrier, 9.7 writing dc, 1.3 at the closing barrier; DRAM is in use for 17 of them.
 *
 * Then four defects of that form, each fixed and measured:
 *  (a) g's slice came by plain loads after c's copies had all landed: its latency was paid
 *      alone. Now it is copied by cp.async too (issue_rows), issued with c's, one wait for both.
 *  (b) dc was written a float a thread. Now, when S is a multiple of 4 (slice_lo then cuts
 *      every slice at a multiple of 4), a thread takes four positions: 16-byte loads from
 *      shared memory, one float4 store.
 *  (c) the first wave's clusters all loaded at once, then all reduced at once (v10's step 0):
 *      cluster n of the first wave (b3_wave, this kernel's clusters resident at once) waits
 *      n x 9 us / wave first (9: the best of 6, 9 and 12 us timed, 12 a tie); b3's forward is
 *      v10, staggered the same way.
 *  (d) the argmax waited for the whole slice. Now, when S is a multiple of 4 and a slice has
 *      at most B3_PT x CL_THREADS (4 x 512) positions, each row of c comes by a TMA bulk copy
 *      on its own mbarrier (bulk_rows, as v10's), g's on a 17th, and each thread folds row co
 *      into the running argmax of its B3_PT positions (in registers) as soon as row co lands,
 *      so the argmax runs while later rows arrive; otherwise the cp.async path of (a).
 * Prediction: none for (a), (b) and (d), which were found by timing forms side by side; they
 * move the same bytes, so they can only shorten the phases the timeline shows: the 7.5 us load
 * and the 9.7 us write for (a) and (b); for (d), at most the argmax's share of the 8.3 us of
 * argmax and sums (that share was never timed alone). For (c), v10's reasoning (its comment).
 * Measured (H100, medians of 50, interleaved rounds): the first form 0.2231 - 0.2238 ms; with (a)
 * 0.2139 - 0.2146; with (a) and (b) 0.2072 - 0.2079 (three rounds, commit cbcb2da). With (c), in
 * three rounds of one later call (B3SPAN and V10SPAN set the spans in ns, 0 for no wait): no wait
 * in either kernel 0.2054 - 0.2063, v10's wait alone 0.1996 - 0.2004, both 0.1929 - 0.1935; b3's
 * span 6 us 0.1964 - 0.1970, 12 us 0.1922 - 0.1931, the same as 9 within the rounds' spread
 * (commit bb128ae). With (d), three rounds of a third call: 0.1877 - 0.1880 against 0.1912 -
 * 0.1923 without it, 2% (64 registers, no spill, either way). All of that with the old flush;
 * with the clean-L2 timer, (c) again (data commit 29662c6's code, three interleaved rounds of 30
 * repetitions): no wait in either kernel 0.1945, 0.1945, 0.1946 ms, v10's wait alone 0.1903,
 * 0.1902, 0.1897, both 0.1859, 0.1868, 0.1873: v10's wait worth about 4.5 us, b3's about 3.5.
 * Recorded (the README's table): 0.1857 ms [0.1831 - 0.1878]
 * [b3 epilogue_fwdbwd median_ms min_ms max_ms], 58.0% [b3 epilogue_fwdbwd pct_floor] of the 0.108
 * ms [b3 epilogue_fwdbwd floor_ms] floor, 6.79x [compile/b3 epilogue_fwdbwd] torch.compile's 1.261
 * [compile epilogue_fwdbwd]; the 0.15 ms target is missed by 24%. ncu on this kernel alone at the
 * GPU's own clocks, before and after each step, each pair in one call: (a) and (b) 139.7 against
 * 127.9 us, DRAM 41.8% against 45.4% busy, 2.9 against 1.9 cycles an issue waiting on loads; (c)
 * 123.4 against 119.7 us, DRAM 46.1% against 47.6%; (d) 122.9 against 113.9 us, DRAM 46.4%
 * against 50.0%.
 * What is left is v10's pattern: DRAM half busy, because a block's sums and exchange (part of
 * the 8.3 + 2.6 us of its 29.9 in the timeline above) still wait for the last row and do not
 * overlap its own copies.
 */
#include "cluster.cuh"
#include "model.h"

#define B3_PT 4 /* positions a thread in the streamed argmax, held in registers */

#if __CUDA_ARCH__ >= 900 /* used only by the sm_90 body below */
/* warp `warp` adds the CL blocks' partial for channel ch in rank order: the same bits in every
 * block of the cluster (the result in every lane) */
__device__ static inline float cluster_total(float *part, int ch)
{
    cg::cluster_group cluster = cg::this_cluster();
    int lane = threadIdx.x & 31;
    float v = lane < CL ? cluster.map_shared_rank(part, lane)[ch] : 0.0f;
    v = warp_sum(v);
    return __shfl_sync(FULL, v, 0);
}
#endif

__global__ void __launch_bounds__(CL_THREADS, 2)
k_cluster_backward(const float *__restrict__ c, const float *__restrict__ g,
                   const float *__restrict__ m, const float *__restrict__ mean,
                   const float *__restrict__ rstd, float *__restrict__ dc,
                   float *__restrict__ dm_part, int S, int wave, int span_ns)
{
#if __CUDA_ARCH__ >= 900
    extern __shared__ float4 smem4[];
    __shared__ cluster_shared cs;
    __shared__ float red[CL_THREADS / 32][C_OUT];
    cg::cluster_group cluster = cg::this_cluster();
    int rank = (int)cluster.block_rank(), n = blockIdx.y, cap = slice_cap(S);
    int lo = slice_lo(S, rank), len = slice_lo(S, rank + 1) - lo;
    float *vals = (float *)smem4, *gs = vals + C_OUT * cap;
    unsigned char *ks = (unsigned char *)(gs + cap);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x < C_OUT) {
        cs.m[threadIdx.x] = __ldg(m + threadIdx.x);
        cs.mean[threadIdx.x] = __ldg(mean + n * C_OUT + threadIdx.x);
        cs.rstd[threadIdx.x] = __ldg(rstd + n * C_OUT + threadIdx.x);
    }
    stagger_start(n, gridDim.y, wave, span_ns);
    __shared__ unsigned long long bars[C_OUT + 1];
    const float *csrc = c + (size_t)n * C_OUT * S + lo, *gsrc = g + (size_t)n * S + lo;
    if ((S & 3) == 0 && len <= B3_PT * CL_THREADS) {
        /* (d): each row by a bulk copy on its own mbarrier, g's on a 17th; every thread folds
         * row co into its positions' running argmax as soon as the row lands */
        if (threadIdx.x == 0) {
            for (int i = 0; i <= C_OUT; i++)
                mbar_init(&bars[i]);
            mbar_init_fence();
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            bulk_rows(vals, cap, csrc, len, S, bars);
            mbar_expect_tx(&bars[C_OUT], 4u * len);
            if (len)
                bulk_copy(gs, gsrc, 4u * len, &bars[C_OUT]);
        }
        float best[B3_PT];
        int kk[B3_PT];
#pragma unroll
        for (int co = 0; co < C_OUT; co++) {
            mbar_wait(&bars[co], 0);
            float mc = cs.m[co], mu = cs.mean[co], rs = cs.rstd[co];
#pragma unroll
            for (int i = 0; i < B3_PT; i++) {
                int j = threadIdx.x + i * CL_THREADS;
                if (j < len) {
                    float u = clampf1((a_rounded(vals[co * cap + j], mc) - mu) * rs) * mc;
                    if (co == 0 || u > best[i])
                        best[i] = u, kk[i] = co;
                }
            }
        }
#pragma unroll
        for (int i = 0; i < B3_PT; i++) {
            int j = threadIdx.x + i * CL_THREADS;
            if (j < len)
                ks[j] = (unsigned char)kk[i];
        }
        mbar_wait(&bars[C_OUT], 0);
        __syncthreads();
    } else { /* rows not whole 16-byte units, or more than B3_PT positions a thread */
        /* every copy of c's slice and of g's issued, then one wait: g's no longer start only
         * after c's have landed */
        issue_slice(vals, cap, csrc, len, S);
        issue_rows(gs, cap, gsrc, 1, len, S);
        __pipeline_wait_prior(0);
        __syncthreads();
        for (int j = threadIdx.x; j < len; j += CL_THREADS) { /* the argmax of each position */
            float best = 0.0f;
            int k = 0;
#pragma unroll
            for (int co = 0; co < C_OUT; co++) {
                float u = clampf1((a_rounded(vals[co * cap + j], cs.m[co]) - cs.mean[co]) *
                                  cs.rstd[co]) * cs.m[co];
                if (co == 0 || u > best)
                    best = u, k = co;
            }
            ks[j] = (unsigned char)k;
        }
        __syncthreads();
    }
    { /* warp w: channel w's sums over the slice (only where w is the argmax) */
        float mc = cs.m[warp], mu = cs.mean[warp], rs = cs.rstd[warp];
        float s1 = 0.0f, s2 = 0.0f, gt = 0.0f;
        for (int j = lane; j < len; j += 32)
            if (ks[j] == warp) {
                float xh = (a_rounded(vals[warp * cap + j], mc) - mu) * rs;
                float d = xh >= -1.0f && xh <= 1.0f ? gs[j] * mc : 0.0f;
                s1 += d, s2 += d * xh, gt += gs[j] * clampf1(xh);
            }
        s1 = warp_sum(s1), s2 = warp_sum(s2), gt = warp_sum(gt);
        if (lane == 0)
            cs.part_bwd[0][warp] = s1, cs.part_bwd[1][warp] = s2, cs.part_bwd[2][warp] = gt;
    }
    cluster.sync();
    float mean1 = cluster_total(cs.part_bwd[0], warp) / S;
    float mean2 = cluster_total(cs.part_bwd[1], warp) / S;
    __syncthreads();
    if (lane == 0)
        cs.part[0][warp] = mean1, cs.part[1][warp] = mean2; /* this block's copy, for all warps */
    __syncthreads();
    float *dcb = dc + (size_t)n * C_OUT * S + lo;
    for (int co = 0; co < C_OUT; co++) {
        float mc = cs.m[co], mu = cs.mean[co], rs = cs.rstd[co];
        float m1 = cs.part[0][co], m2 = cs.part[1][co], acc = 0.0f;
        if ((S & 3) == 0) { /* four positions a thread: 16-byte loads from shared, float4 dc */
            for (int j4 = threadIdx.x; j4 < len / 4; j4 += CL_THREADS) {
                float4 c4 = *reinterpret_cast<const float4 *>(vals + co * cap + 4 * j4);
                float4 g4 = *reinterpret_cast<const float4 *>(gs + 4 * j4);
                uchar4 k4 = *reinterpret_cast<const uchar4 *>(ks + 4 * j4);
                float cv[4] = {c4.x, c4.y, c4.z, c4.w}, gv[4] = {g4.x, g4.y, g4.z, g4.w}, o[4];
                unsigned char kv[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    float xh = (a_rounded(cv[k], mc) - mu) * rs;
                    float d = kv[k] == co && xh >= -1.0f && xh <= 1.0f ? gv[k] * mc : 0.0f;
                    float da = rs * (d - m1 - xh * m2);
                    o[k] = da * mc;
                    acc += da * cv[k];
                }
                *reinterpret_cast<float4 *>(dcb + (size_t)co * S + 4 * j4) =
                    make_float4(o[0], o[1], o[2], o[3]);
            }
        } else { /* one position a thread: S not a multiple of 4 leaves rows unaligned */
            for (int j = threadIdx.x; j < len; j += CL_THREADS) {
                float cv = vals[co * cap + j], xh = (a_rounded(cv, mc) - mu) * rs;
                float d = ks[j] == co && xh >= -1.0f && xh <= 1.0f ? gs[j] * mc : 0.0f;
                float da = rs * (d - m1 - xh * m2);
                dcb[(size_t)co * S + j] = da * mc;
                acc += da * cv;
            }
        }
        acc = warp_sum(acc);
        if (lane == 0)
            red[warp][co] = acc;
    }
    __syncthreads();
    if (lane == 0) { /* warp w: channel w's dm of this block, the warps' partials in order */
        float a = cs.part_bwd[2][warp];
        for (int j = 0; j < CL_THREADS / 32; j++)
            a += red[j][warp];
        dm_part[(size_t)warp * gridDim.y * CL + (size_t)n * CL + rank] = a;
    }
    cluster.sync(); /* the partials may still be read by the other blocks */
#endif
}

#define B3_SPAN_NS 9000 /* the first wave's starts spread over 9 us (stagger_start) */

static int opted; /* k_cluster_backward's shared-memory opt-in is set (cluster_config) */

void b3_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_TRAIN)
        conv_forward(r);
    v10_epilogue(r);
    if (cluster_fits(r, 1)) {
        static int span = -1; /* B3SPAN read once, at the first launch */
        if (span < 0)
            span = span_env("B3SPAN", B3_SPAN_NS);
        cluster_launch L;
        cluster_config(&L, (const void *)k_cluster_backward, &opted, r, r->sh.n,
                       cluster_smem(r->sh.s, 1));
        CUDA_CHECK(cudaLaunchKernelEx(&L.cfg, k_cluster_backward, r->c, r->g, r->m, r->mean,
                                      r->rstd, r->dc, r->dm_part1, r->sh.s, r->b3_wave, span));
        channel_totals(r->dm_part1, NULL, r->sh.n * CL, r->dm);
    } else {
        b2_backward(r);
    }
    if (scope == SCOPE_TRAIN)
        lib_dx(r), own_dw(r), own_dbias(r);
}

/* how many of the backward kernel's clusters are resident at once: its first wave */
int b3_resident_clusters(const run_ctx *r)
{
    return cluster_wave((const void *)k_cluster_backward, &opted, r, cluster_smem(r->sh.s, 1));
}
