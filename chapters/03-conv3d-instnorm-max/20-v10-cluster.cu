/*
 * v10: one pass, a thread-block cluster per sample (Hopper)
 *
 * Defect of v9: c is read twice, once for the statistics and once for the output (0.083 ms
 * [v9 epilogue_fwd] against the one-read floor of 0.037). A sample's 16 x S values (806 KB at
 * S = 12600) do not fit one SM's shared memory (228 KB), but Hopper's thread-block clusters let
 * up to 8 blocks on 8 SMs read each other's shared memory (distributed shared memory, CUDA C++
 * Programming Guide, "Thread Block Clusters"). Change: a cluster of CL = 8 blocks per sample
 * (cluster.cuh), block r holding positions [lo_r, hi_r) of all 16 channels (100.9 KB at
 * S = 12600: two blocks an SM):
 *   1. thread 0 initialises 16 mbarriers, one a channel row, and asks for each row of the
 *      block's slice as one TMA bulk copy completing on that row's barrier (cluster.cuh
 *      introduces the PTX); when S is not a multiple of 4, rows are not whole 16-byte units,
 *      and every thread issues cp.async copies instead, the block waiting for all of them;
 *   2. warp w waits for row w only and reduces it as soon as it lands: its mean, then its
 *      centred squares, from shared memory; the blocks exchange (count, mean, M2) once through
 *      distributed shared memory, one cluster barrier, and each merges the 8 by Chan's formula
 *      in rank order (cluster_stats), so all 8 hold the same mean and rstd;
 *   3. each block writes y for its positions from shared memory; rank 0 writes the sample's
 *      mean and rstd (the backward's).
 * c is read once, y written once: the epilogue's floor in bytes.
 * Prediction: toward the one-read floor, 0.037 ms, if the reductions hide behind other blocks'
 * loads.
 * Measured, steps 1 to 3 (the table of 2026-11-23, the old flush): 0.0744 ms, 49% of the copy
 * ceiling, 1.23x v9, but twice the 0.037 ms floor it was built to approach. ncu (commit 508c56c,
 * on an earlier form of this kernel, two cluster barriers a sample and the slice copied whole,
 * 0.080 ms): 45% of DRAM peak; per issued instruction 3.6 cycles waiting at barriers, 3.5 on loads,
 * 2.7 on memory fences (a cluster barrier releases and acquires shared memory); 30 clusters fit at
 * once (two 101 KB blocks an SM), so the 128 run in 4.3 waves, and while a block reduces, its SM's
 * share of DRAM bandwidth goes unused. A timeline of one launch (commit 0ab0e1a, %globaltimer at
 * each block's phase boundaries): 74.8 us end to end; per block (median) 9.9 us to load, reduce and
 * exchange, 2.1 us to write y, 1.7 us at the closing cluster barrier; the first 240 blocks, loading
 * 24 MB at once, take 15.4 us for the first phase (1.6 TB/s), later ones 8.6.
 *
 * Step 0 (it runs first; added after steps 1 to 3 were measured). Defect: that
 * timeline's first wave, the clusters that fit on the GPU at once (30 here, the first 240
 * blocks): they start together, load together at 1.6 TB/s, then reduce together with DRAM idle;
 * the later blocks, which start as earlier ones leave and so are already spread, load in 8.6 us.
 * Change: cluster n of the first wave (n < wave, the clusters resident at once, from
 * cudaOccupancyMaxActiveClusters: r->v10_wave) waits n x 10 us / wave before its first copy
 * (stagger_start in cluster.cuh), so the wave's starts spread over about one block's 9.9 us of
 * load, reduce and exchange: while the last clusters load, the first reduce. No wait when the
 * whole grid fits in one wave (batch 30 or less here): there is no later wave to make room for.
 * Prediction (the arithmetic done after a first trial of the idea, in groups: Tried): if the
 * first wave then loads at the later blocks' pace, 15.4 - 8.6 = 6.8 us of the 74.8 go, about
 * 0.068 ms; this ignores the wait itself, up to 10 us for the wave's last cluster.
 * Measured (H100, medians of 50, three interleaved rounds of one call; V10SPAN sets the span in
 * ns): no wait 0.0738 - 0.0744 ms; spans of 7 us 0.0716 - 0.0717, 10 us 0.0677 - 0.0680, 13 us
 * 0.0698 - 0.0701: the prediction, within its rounding. Two earlier calls waited in 2 to 30
 * groups instead (Tried) and found the same optimum; in one of them 8 groups 1.5 us apart took
 * 0.0669 - 0.0672 and a step a cluster over 10.5 us 0.0671 - 0.0672. At batch 32 (two waves, the
 * second of 2 clusters) the wait took v10 from 0.0314 to 0.0261 ms (one call); at batch 8, before
 * the wait was limited to grids of more than one wave, it cost 0.0141 against 0.0133. All of that
 * with the old flush. With the clean-L2 timer (data commit 29662c6's code, three interleaved rounds
 * of 30 repetitions): 0.0655, 0.0649, 0.0648 ms against 0.0685, 0.0694, 0.0689 with no wait, about
 * 4 us where the old flush measured about 6; the sweep has batch 32 at 0.0241 ms
 * [v10 epilogue_fwd @32].
 * Recorded (the README's table): 0.0645 ms [0.0624 - 0.0668]
 * [v10 epilogue_fwd median_ms min_ms max_ms], 57% of the copy ceiling
 * [v10 epilogue_fwd pct_ceiling], 2.33x [compile/v10 epilogue_fwd] torch.compile's 0.1503
 * [compile epilogue_fwd]; the 0.045 ms target is missed by 43%. ncu, the kernel alone at the GPU's
 * own clocks, without and with the wait: 66.5 against 63.8 us, DRAM 49.0% against 51.2% busy, per
 * issued instruction 5.0 against 3.1 cycles waiting on loads, 3.6 against 2.8 on memory fences, 1.4
 * asleep in the wait. The 10 us suits this GPU's bandwidth and 30 resident clusters; another GPU's
 * best span differs (V10SPAN=0 switches it off).
 * The steps that led here, each measured, and the pipelined forms that lost to it, are in the
 * README's "tried" list.
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
k_cluster_epilogue(const float *__restrict__ c, const float *__restrict__ m, float *__restrict__ y,
                   float *__restrict__ mean, float *__restrict__ rstd, int S, int wave, int span_ns,
                   unsigned char *__restrict__ win, unsigned *done)
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

static int opted[4]; /* k_cluster_epilogue<SAVE, TRACK, SIGNAL>'s shared-memory opt-in is set
                      * (cluster_config), [SAVE + TRACK + SIGNAL] */

template <bool SAVE, bool TRACK = false, bool SIGNAL = false>
static void v10_launch_kernel(const run_ctx *r)
{
    static int span = -1; /* V10SPAN read once, at the first launch */
    if (span < 0)
        span = span_env("V10SPAN", V10_SPAN_NS);
    auto kernel = k_cluster_epilogue<SAVE, TRACK, SIGNAL>;
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
    return cluster_wave((const void *)k_cluster_epilogue<false>, &opted[0], r,
                        cluster_smem(r->sh.s, 0));
}
