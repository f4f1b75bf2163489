/*
 * b3: the backward in a cluster (Hopper)
 *
 * Defect of b2: c and g are read twice, once for each of its two passes, because the two sums per
 * (n, c) must be complete before any dc: 322.5 MB where the backward's floor moves 212.9 MB.
 * Change: v10's layout again (cluster.cuh). Forward: v10, which saves the statistics. Backward:
 * block r of sample n's cluster loads its slice of c and g into shared memory once, finds each
 * position's argmax, and warp w sums channel w's dxh and dxh xh over the slice; the cluster adds
 * the 8 partials through distributed shared memory, in rank order; then every dc of the slice is
 * written from shared memory. c and g read once, dc written once: the backward's floor. dm: one
 * partial per (n, block, channel), added in order (training-grads.cu).
 * Prediction: the backward at its floor, 0.072 ms; with v10's forward, about 0.146 ms if the
 * cluster's phases hide behind other blocks' loads.
 * Measured: 0.1857 ms [b3 epilogue_fwdbwd], 58% of the floor [b3 epilogue_fwdbwd pct_floor],
 * 1.35x b2 [b2/b3 epilogue_fwdbwd]. What is left is v10's pattern: DRAM half busy, because a
 * block's sums and exchange wait for its last row and do not overlap its own copies.
 * Also, four steps each timed alone (LABBOOK.md): g copied by cp.async with c, one wait for
 * both (4%); dc written as float4 when S is a multiple of 4 (3%); the first wave's staggered
 * start, as v10's (B3SPAN=ns; 2%); each row of c by its own bulk copy, folded into the running
 * argmax of a thread's B3_PT positions as soon as it lands (2%).
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
b3_cluster_backward(const float *__restrict__ c, const float *__restrict__ g,
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

static int opted; /* b3_cluster_backward's shared-memory opt-in is set (cluster_config) */

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
        cluster_config(&L, (const void *)b3_cluster_backward, &opted, r, r->sh.n,
                       cluster_smem(r->sh.s, 1));
        CUDA_CHECK(cudaLaunchKernelEx(&L.cfg, b3_cluster_backward, r->c, r->g, r->m, r->mean,
                                      r->rstd, r->dc, r->dm_part1, r->sh.s, r->b3_wave, span));
        channel_totals(r->dm_part1, NULL, r->sh.n * CL, r->dm, r->stream);
    } else {
        b2_backward(r);
    }
    if (scope == SCOPE_TRAIN)
        lib_dx(r), own_dw(r), own_dbias(r);
}

/* how many of the backward kernel's clusters are resident at once: its first wave */
int b3_resident_clusters(const run_ctx *r)
{
    return cluster_wave((const void *)b3_cluster_backward, &opted, r, cluster_smem(r->sh.s, 1));
}
