/*
 * v10: one pass, a thread-block cluster a sample (Hopper)
 *
 * Defect of v9: c is read twice, once for the statistics and once for y: 0.0829 ms
 * [v9 epilogue_fwd] where one read and one write take 0.037 ms [v9 epilogue_fwd floor_ms].
 * Change: a sample's 16 x S values (806 KB at S = 12600) do not fit one SM's 228 KB of shared
 * memory, but a cluster's blocks, on different SMs, read one another's (distributed shared memory;
 * CUDA C++ Programming Guide, "Thread Block Clusters"; cluster-dsmem.svg). A cluster of CL = 8
 * blocks a sample, block r holding positions [lo_r, hi_r) of all 16 channels (101 KB: 2 an SM):
 *   1. thread 0 asks for each channel row of the slice as one TMA bulk copy on the row's own
 *      mbarrier (cluster.cuh's bulk_rows; the PTX and why: common/hopper.cuh); every thread
 *      copies by cp.async instead when S is not a multiple of 4 (rows not whole 16-byte units);
 *   2. warp w reduces row w as it lands (its mean, then its centred squares); the blocks exchange
 *      (count, mean, M2) once through distributed shared memory, at one cluster barrier, and
 *      each merges the 8 by Chan's formula in rank order (cluster_stats): the same bits in all 8;
 *   3. each block writes y for its positions from shared memory.
 * Prediction: c read once, y written once: toward the floor, if reductions hide behind loads.
 * Measured: 0.0645 ms [v10 epilogue_fwd], 57% of the copy ceiling [v10 epilogue_fwd pct_ceiling],
 * 1.28x v9 [v9/v10 epilogue_fwd]. Short of the floor: while a block reduces and exchanges,
 * its SM's share of DRAM goes unused unless the SM's other block loads (ncu: DRAM half busy).
 * Also, step 0: the first wave's staggered start (stagger_start, cluster.cuh). The clusters at
 * once (30 on an H100) would load together, then reduce together with DRAM idle; cluster n of
 * that wave waits n x 10 us / wave first: about 4 us faster (LABBOOK.md); V10SPAN=ns sets the span.
 */
#include "barrier.cuh" /* team_arrive */
#include "cluster.cuh"
#include "model.h"

/* SAVE: b4's to b6's forward, which also writes each position's winner byte; TRACK (b5, b6):
 * its inside-the-clamp bit kept as the channel loop goes (cluster_apply); SIGNAL (b6): each
 * block lets the next launch start (griddepcontrol.launch_dependents) as it starts, and, once
 * its y, bytes and statistics are written, a block barrier, then thread 0 fences and adds 1 to
 * done[n] (team_arrive, common/barrier.cuh: the fence after the barrier makes the pair a release
 * of the whole block's writes) */
template <bool SAVE, bool TRACK = false, bool SIGNAL = false>
__global__ void __launch_bounds__(CL_THREADS, 2)
v10_cluster_epilogue(const float *__restrict__ c, const float *__restrict__ m,
                     float *__restrict__ y, float *__restrict__ mean, float *__restrict__ rstd,
                     int S, int wave, int span_ns, unsigned char *__restrict__ win, unsigned *done)
{
#if __CUDA_ARCH__ >= 900
    extern __shared__ float4 smem4[];
    float *vals = (float *)smem4;
    __shared__ cluster_shared cs;
    __shared__ unsigned long long row_bars[C_OUT];
    cg::cluster_group cluster = cg::this_cluster();
    int rank = (int)cluster.block_rank(), n = blockIdx.y, cap = slice_cap(S);
    int lo = slice_lo(S, rank), len = slice_lo(S, rank + 1) - lo;
    const float *src = c + (size_t)n * C_OUT * S + lo;
    int bulk = (S & 3) == 0; /* bulk copies need rows of whole 16-byte units */
    if (SIGNAL)
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    stagger_start(n, gridDim.y, wave, span_ns); /* step 0 */
    if (threadIdx.x < C_OUT)
        cs.m[threadIdx.x] = __ldg(m + threadIdx.x);
    if (bulk) { /* step 1 */
        if (threadIdx.x == 0) {
            for (int co = 0; co < C_OUT; co++)
                mbar_init(&row_bars[co]);
            mbar_init_fence();
        }
        __syncthreads();
        if (threadIdx.x == 0)
            bulk_rows(vals, cap, src, len, S, row_bars);
    } else {
        fill_slice(vals, cap, src, len, S);
        __syncthreads();
    }
    /* step 2; with bulk copies warp w waits for row w only, and every row has landed once the
     * cluster barrier inside cluster_stats is passed (each was waited for by its warp before
     * arriving) */
    cluster_stats(&cs, vals, cap, len, S, 0, bulk ? row_bars : NULL);
    cluster_apply<SAVE, TRACK>(&cs, vals, cap, len, y + (size_t)n * S + lo, mean, rstd, n, rank,
                               SAVE ? win + (size_t)n * S + lo : NULL); /* step 3 */
    if (SIGNAL) /* every thread's y, bytes and (rank 0) statistics written, then counted */
        team_arrive(done + n);
    cluster.sync(); /* no block may exit while another still reads its partials */
#endif
}

#define V10_SPAN_NS 10000 /* the first wave's starts spread over 10 us (step 0) */

static int opted[4]; /* v10_cluster_epilogue<SAVE, TRACK, SIGNAL>'s shared-memory opt-in is set
                      * (cluster_config), [SAVE + TRACK + SIGNAL] */

template <bool SAVE, bool TRACK = false, bool SIGNAL = false>
static void v10_launch_kernel(const run_ctx *r)
{
    static int span = -1; /* V10SPAN read once, at the first launch */
    if (span < 0)
        span = span_env("V10SPAN", V10_SPAN_NS);
    auto kernel = v10_cluster_epilogue<SAVE, TRACK, SIGNAL>;
    cluster_launch L;
    cluster_config(&L, (const void *)kernel, &opted[SAVE + TRACK + SIGNAL], r, r->sh.n,
                   cluster_smem(r->sh.s, 0));
    CUDA_CHECK(cudaLaunchKernelEx(&L.cfg, kernel, r->c, r->m, r->y, r->mean, r->rstd, r->sh.s,
                                  r->v10_wave, span, SAVE ? r->win : (unsigned char *)NULL,
                                  SIGNAL ? r->fwd_done : (unsigned *)NULL));
}

void v10_epilogue(const run_ctx *r)
{
    if (!cluster_fits(r, 0)) {
        v9_epilogue(r);
        return;
    }
    v10_launch_kernel<false>(r);
}

/* b4's to b6's forward: v10, each position's winner byte also written to r->win (1 byte a
 * position: 1.6 MB at the KernelBench shape). form 0 (b4): the inside-the-clamp bit computed
 * again after the channel loop; 1 (b5): kept in the loop; 2 (b6): kept, and each block lets the
 * next launch start and publishes its sample's progress in r->fwd_done. The caller checks
 * cluster_fits (no v9 fallback saves the bytes). */
void v10_saving(const run_ctx *r, int form)
{
    if (form == 2)
        v10_launch_kernel<true, true, true>(r);
    else if (form == 1)
        v10_launch_kernel<true, true>(r);
    else
        v10_launch_kernel<true>(r);
}

void v10_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    v10_epilogue(r);
}

/* for the notes after the table: how many of v10's clusters are resident at once */
int v10_resident_clusters(const run_ctx *r)
{
    return cluster_wave((const void *)v10_cluster_epilogue<false>, &opted[0], r,
                        cluster_smem(r->sh.s, 0));
}
