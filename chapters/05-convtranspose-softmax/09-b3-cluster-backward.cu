/*
 * b3: the backward in a cluster: c and g read once (Hopper)
 *
 * Defect of b2: its two kernels read c and g twice (5 x 1073.7 MB for the backward), because
 * dc needs the row's dot = sum g p before its first value, the same wall as v4's forward.
 * Change: v6's idea for the backward. Forward: v6 (c read once, lse saved). Backward: a cluster
 * a row, each block holding its slice of c and of g in shared memory (two bulk copies a chunk,
 * completing on one mbarrier): it turns c into p = exp(clamp(c) - lse) in place, sums g p,
 * exchanges the sums through distributed shared memory as v6 does, and writes
 * dc = [0 <= c <= 1] scale_ch p (g - dot) from shared memory. The mask needs c, which p has
 * replaced: it is kept in p's sign bit (p > 0 always, so the bit is free: -p marks a c outside
 * [0, 1]). Rows longer than the cluster holds (above 231,424 values on the H100, half of v6's)
 * keep what fits and read the rest twice. dscale follows from the rows' dot as in b2.
 * Two slices a block double v6's shared memory: 64 + 64 KB a block, one block an SM. Clusters
 * of 16 (non-portable; CH05_B3_CL=16 in the environment) would halve that, but
 * compute-sanitizer's synccheck reports a "missing wait" on their mbarriers that it does not
 * report at 8, so 8 is the default (LABBOOK.md has both timings).
 * Bytes: forward 2 x 1073.7 MB (v6), backward 3: 5.4 GB, the fwd + bwd floor. Prediction:
 * 1.8 ms [b3 epilogue_fwdbwd floor_ms] at the ceiling if the clusters overlap as v6's do.
 * Measured: 2.212 ms [b3 epilogue_fwdbwd], 81.2% of the ceiling [b3 epilogue_fwdbwd pct_ceiling],
 * 1.32x b2 [b2/b3 epilogue_fwdbwd], 1.90x torch.compile [compile/b3 epilogue_fwdbwd], 1.23x
 * [b3 epilogue_fwdbwd median_ms/floor_ms] the prediction: one block an SM loads nothing while it
 * sums and waits at the cluster barrier (Nsight Compute: LABBOOK.md). The training step, 21.05 ms
 * [b3 train_step], is 5% ahead [compile vs b3 train_step] of torch.compile's in fp32.
 */
#include <cooperative_groups.h>
#include <stdlib.h>

#include "hopper.cuh"
#include "rows.cuh"

namespace cg = cooperative_groups;

#if __CUDA_ARCH__ >= 900 /* used only by the sm_90 body below */
/* dc from a signed p (-p: c was outside [0, 1]) */
__device__ static inline float dc_signed(float ps, float g, float dot, float sc)
{
    return ps > 0.0f ? sc * ps * (g - dot) : 0.0f;
}

__device__ static inline float4 p_signed4(float4 c, float lse)
{
    float4 p = exp4(clamp4(c), lse);
    return make_float4(c.x >= CLAMP_LO && c.x <= CLAMP_HI ? p.x : -p.x,
                       c.y >= CLAMP_LO && c.y <= CLAMP_HI ? p.y : -p.y,
                       c.z >= CLAMP_LO && c.z <= CLAMP_HI ? p.z : -p.z,
                       c.w >= CLAMP_LO && c.w <= CLAMP_HI ? p.w : -p.w);
}

__device__ static inline float gp4(float4 ps, float4 g)
{
    return (g.x * fabsf(ps.x) + g.y * fabsf(ps.y)) + (g.z * fabsf(ps.z) + g.w * fabsf(ps.w));
}

#endif

/* DSUM (b4's): each block's sum of dc into dsum_part[row cl + rank] as well */
template <bool DSUM>
__global__ void __launch_bounds__(V6_THREADS)
b3_backward_cluster(const float *__restrict__ c, const float *__restrict__ g,
                    const float *__restrict__ lse, const float *__restrict__ scale,
                    float *__restrict__ dc, float *__restrict__ dot_out,
                    float *__restrict__ dsum_part, int S, int keep4)
{
#if __CUDA_ARCH__ >= 900
    extern __shared__ float4 held[]; /* keep4 float4 of signed p, then keep4 of g */
    float4 *held_g = held + keep4;
    __shared__ unsigned long long bars[V6_CHUNKS];
    __shared__ float part;
    cg::cluster_group cluster = cg::this_cluster();
    int cl = (int)cluster.num_blocks(), rank = (int)cluster.block_rank();
    int row = blockIdx.x / cl, n4 = S / 4;
    int lo = (int)((long long)n4 * rank / cl);
    int len = (int)((long long)n4 * (rank + 1) / cl) - lo, kept = len < keep4 ? len : keep4;
    const float4 *c4 = (const float4 *)(c + (size_t)row * S) + lo;
    const float4 *g4 = (const float4 *)(g + (size_t)row * S) + lo;
    float4 *d4 = (float4 *)(dc + (size_t)row * S) + lo;
    if (threadIdx.x == 0) {
        for (int k = 0; k < V6_CHUNKS; k++)
            mbar_init(&bars[k]);
        mbar_init_fence();
        for (int k = 0; k < V6_CHUNKS; k++) {
            int a = kept * k / V6_CHUNKS, b = kept * (k + 1) / V6_CHUNKS;
            mbar_expect_tx(&bars[k], 32u * (b - a)); /* c's and g's chunk */
            if (b > a) {
                bulk_copy(held + a, c4 + a, 16u * (b - a), &bars[k]);
                bulk_copy(held_g + a, g4 + a, 16u * (b - a), &bars[k]);
            }
        }
    }
    __syncthreads();
    float m = lse[row], dot = 0.0f;
    for (int k = 0; k < V6_CHUNKS; k++) {
        int a = kept * k / V6_CHUNKS, b = kept * (k + 1) / V6_CHUNKS;
        mbar_wait(&bars[k], 0);
        for (int j = a + threadIdx.x; j < b; j += V6_THREADS) {
            float4 ps = p_signed4(held[j], m);
            held[j] = ps; /* read below, after block_sum's and the cluster's barriers */
            dot += gp4(ps, held_g[j]);
        }
    }
    for (int j = kept + threadIdx.x; j < len; j += V6_THREADS) /* beyond shared memory */
        dot += gp4(p_signed4(c4[j], m), g4[j]);
    dot = block_sum(dot);
    if (threadIdx.x == 0)
        part = dot;
    cluster.sync();
    float total = 0.0f;
    if (threadIdx.x < 32) { /* at most 32 blocks a cluster; the same order in every block */
        float v = (int)threadIdx.x < cl ? *cluster.map_shared_rank(&part, (int)threadIdx.x) : 0.0f;
        total = warp_sum(v);
    }
    total = block_bcast(total);
    auto token = cluster.barrier_arrive();
    float sc = scale[row % C_OUT], dsum = 0.0f;
    for (int j = threadIdx.x; j < kept; j += V6_THREADS) {
        float4 ps = held[j], gv = held_g[j];
        float4 d = make_float4(dc_signed(ps.x, gv.x, total, sc), dc_signed(ps.y, gv.y, total, sc),
                               dc_signed(ps.z, gv.z, total, sc), dc_signed(ps.w, gv.w, total, sc));
        d4[j] = d;
        if (DSUM)
            dsum += hsum4(d);
    }
    for (int j = kept + threadIdx.x; j < len; j += V6_THREADS) {
        float4 ps = p_signed4(c4[j], m), gv = g4[j];
        float4 d = make_float4(dc_signed(ps.x, gv.x, total, sc), dc_signed(ps.y, gv.y, total, sc),
                               dc_signed(ps.z, gv.z, total, sc), dc_signed(ps.w, gv.w, total, sc));
        d4[j] = d;
        if (DSUM)
            dsum += hsum4(d);
    }
    if (DSUM) { /* b4: the block's sum of dc, for dbias (12-b4-wgmma-gradients.cu) */
        dsum = block_sum(dsum);
        if (threadIdx.x == 0)
            dsum_part[(size_t)row * cl + rank] = dsum;
    }
    if (rank == 0 && threadIdx.x == 0)
        dot_out[row] = total;
    cluster.barrier_wait(std::move(token));
#endif
}

static int opted[2]; /* b3_backward_cluster<false>'s, <true>'s */

typedef void (*b3_kernel)(const float *, const float *, const float *, const float *, float *,
                          float *, float *, int, int);

/* b3_backward_cluster<dsum> */
static b3_kernel b3_kernel_of(bool dsum)
{
    return dsum ? b3_backward_cluster<true> : b3_backward_cluster<false>;
}

/* the launch of b3_backward_cluster<dsum> with clusters of cl blocks, each keeping keep4 float4
 * of c and of g */
static void b3_config(cluster_launch *L, const run_ctx *r, int cl, int keep4, bool dsum)
{
    cluster_launch_make(L, (const void *)b3_kernel_of(dsum), &opted[dsum], r->smem_optin, cl,
                        dim3(cl * rows(&r->sh)), V6_THREADS, 32 * (size_t)keep4);
}

/* float4 of each of c and g a block keeps: its whole slice if the opt-in allows */
static int b3_keep4(const run_ctx *r, int cl)
{
    int slice = ceil_div(r->sh.s / 4, cl), most = (int)(r->smem_optin / 32);
    return slice < most ? slice : most;
}

/* B3_CL; CH05_B3_CL=16 in the environment asks for clusters of 16 (non-portable: run if this
 * GPU can, else 8) */
int b3_cluster_size(const run_ctx *r)
{
    static int chosen;
    if (!chosen) {
        const char *env = getenv("CH05_B3_CL");
        chosen = B3_CL;
        if (env && atoi(env) == 16) {
            for (int dsum = 0; dsum < 2; dsum++)
                CUDA_CHECK(cudaFuncSetAttribute((const void *)b3_kernel_of(dsum),
                                                cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
            cluster_launch L;
            b3_config(&L, r, 16, b3_keep4(r, 16), false);
            chosen = resident_clusters(&L, (const void *)b3_kernel_of(false)) > 0 ? 16 : B3_CL;
        }
    }
    return chosen;
}

/* the backward keeping keep4 float4 of c and of g a block; each block's sum of dc into
 * dsum_part[row cl + rank] unless NULL */
static void b3_run(const run_ctx *r, int keep4, float *dsum_part)
{
    int cl = b3_cluster_size(r);
    cluster_launch L;
    b3_config(&L, r, cl, keep4, dsum_part != NULL);
    L.cfg.stream = r->stream;
    CUDA_CHECK(cudaLaunchKernelEx(&L.cfg, b3_kernel_of(dsum_part != NULL), (const float *)r->c,
                                  r->g, (const float *)r->lse, r->scale, r->dc, r->dot, dsum_part,
                                  r->sh.s, keep4));
    b2_dscale<<<1, C_OUT, 0, r->stream>>>(r->dot, r->dscale, r->sh.n);
}

/* the backward keeping keep4 float4 of c and of g a block (at most b3_keep4's; fewer only in a
 * test: problem.cu) */
void b3_backward_keep(const run_ctx *r, int keep4) { b3_run(r, keep4, NULL); }

/* b4's: b3's backward, and each block's sum of dc into r->dbpart (rows x b3_cluster_size) */
void b3_backward_dsum(const run_ctx *r) { b3_run(r, b3_keep4_max(r), r->dbpart); }

int b3_keep4_max(const run_ctx *r) { return b3_keep4(r, b3_cluster_size(r)); }

void b3_backward(const run_ctx *r) { b3_backward_keep(r, b3_keep4_max(r)); }

void b3_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_TRAIN)
        model_front(r);
    v6_epilogue(r);
    b3_backward(r);
    if (scope == SCOPE_TRAIN)
        conv_pool_grads(r);
}
