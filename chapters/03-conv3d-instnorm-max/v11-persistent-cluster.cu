/*
 * v11: v10 persistent and double-buffered (Hopper; measured slower)
 *
 * Defect of v10: it runs in waves. 128 clusters, of which only about 30 fit at once (two 101 KB
 * blocks an SM), so every SM loads, then reduces and writes while DRAM idles, then loads again;
 * and the fifth wave is a quarter full. Change: keep as many clusters as fit with TWO slices of
 * shared memory each (one block an SM) resident for the whole grid, each walking samples
 * g, g + G, ...; while it reduces and writes sample n from one buffer, thread 0 of each block
 * has asked for sample n + G's 16 rows as TMA bulk copies into the other, completing on that
 * buffer's mbarrier (cluster.cuh introduces the PTX; the barrier's phase parity alternates with
 * each reuse). When S is not a multiple of 4 the rows are copied by cp.async instead, one
 * commit group a sample. DRAM stays busy; the reductions hide under it.
 * Prediction: near the one-read floor, 0.037 ms.
 * Measured: 0.0836 ms, slower than v10 (0.0679). Only 15 clusters fit (one 202 KB block an SM:
 * 120 SMs, 16 warps each); ncu (commit 508c56c, on an earlier form with two cluster barriers a
 * sample): 40% of DRAM peak, memory-fence stalls first (3.2 cycles per issued instruction). The
 * overlap the double buffer allows is spent waiting at barriers. Not on the copies in flight:
 * issuing the next sample's copies after the cluster barrier instead of before it measured the
 * same (0.0837 against 0.0839 ms, commit 0ab0e1a). Clusters of 16, and two barriers a sample,
 * measured slower still (the README's "tried" list).
 */
#include "cluster.cuh"
#include "model.h"

#if __CUDA_ARCH__ >= 900 /* used only by the sm_90 body below */
/* thread 0: the 16 rows of one sample's slice into vals as bulk copies, all completing on bar */
__device__ static inline void bulk_slice(float *vals, int cap, const float *__restrict__ src, int len,
                                         int S, unsigned long long *bar)
{
    unsigned bytes = 4u * len;
    fence_proxy_async(); /* after the last generic reads */
    mbar_expect_tx(bar, C_OUT * bytes);
    for (int co = 0; co < C_OUT && bytes; co++)
        bulk_copy(vals + co * cap, src + (size_t)co * S, bytes, bar);
}
#endif

__global__ void __launch_bounds__(CL_THREADS, 1)
k_cluster_pipelined(const float *__restrict__ c, const float *__restrict__ m,
                    float *__restrict__ y, float *__restrict__ mean, float *__restrict__ rstd,
                    int S, int N)
{
#if __CUDA_ARCH__ >= 900
    extern __shared__ float4 smem4[];
    __shared__ cluster_shared cs;
    __shared__ unsigned long long bar[2];
    cg::cluster_group cluster = cg::this_cluster();
    int rank = (int)cluster.block_rank(), cap = slice_cap(S), G = gridDim.y;
    int lo = slice_lo(S, rank), len = slice_lo(S, rank + 1) - lo, bulk = (S & 3) == 0;
    float *buf[2] = {(float *)smem4, (float *)smem4 + C_OUT * cap};
    if (threadIdx.x < C_OUT)
        cs.m[threadIdx.x] = __ldg(m + threadIdx.x);
    if (threadIdx.x == 0) {
        mbar_init(&bar[0]), mbar_init(&bar[1]);
        mbar_init_fence();
    }
    __syncthreads();
    int n = blockIdx.y; /* the same in every block of the cluster: the loop is uniform */
    if (n < N) {
        if (!bulk)
            issue_slice(buf[0], cap, c + (size_t)n * C_OUT * S + lo, len, S);
        else if (threadIdx.x == 0)
            bulk_slice(buf[0], cap, c + (size_t)n * C_OUT * S + lo, len, S, &bar[0]);
    }
    for (int it = 0; n < N; it++, n += G) {
        float *vals = buf[it & 1], *next = buf[(it + 1) & 1];
        const float *src = c + (size_t)(n + G) * C_OUT * S + lo;
        if (!bulk) {
            if (n + G < N)
                issue_slice(next, cap, src, len, S);
            else
                __pipeline_commit(); /* an empty group keeps the count below right */
            __pipeline_wait_prior(1); /* this sample's copies are done (this thread's) */
        } else {
            if (n + G < N && threadIdx.x == 0)
                bulk_slice(next, cap, src, len, S, &bar[(it + 1) & 1]);
            mbar_wait(&bar[it & 1], (it >> 1) & 1);
        }
        __syncthreads(); /* every thread's copies */
        cluster_stats(&cs, vals, cap, len, S, it & 1, NULL);
        cluster_apply(&cs, vals, cap, len, y + (size_t)n * S + lo, mean, rstd, n, rank);
        __syncthreads(); /* vals is refilled next iteration */
    }
    cluster.sync();
#endif
}

static int opted; /* k_cluster_pipelined's shared-memory opt-in is set (cluster_config) */

/* how many of v11's clusters (two slices a block) fit at once; 0 if its shared memory does not
 * (problem.cu asks once, where the cluster versions can run) */
int v11_resident_clusters(const run_ctx *r)
{
    size_t bytes = 2 * cluster_smem(r->sh.s, 0);
    if (bytes > r->smem_optin)
        return 0;
    return cluster_wave((const void *)k_cluster_pipelined, &opted, r, bytes);
}

void v11_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    if (r->pipe_clusters <= 0) {
        v10_epilogue(r);
        return;
    }
    int g = r->pipe_clusters < r->sh.n ? r->pipe_clusters : r->sh.n;
    cluster_launch L;
    cluster_config(&L, (const void *)k_cluster_pipelined, &opted, r, g, 2 * cluster_smem(r->sh.s, 0));
    CUDA_CHECK(cudaLaunchKernelEx(&L.cfg, k_cluster_pipelined, r->c, r->m, r->y, r->mean, r->rstd,
                                  r->sh.s, r->sh.n));
}
