/*
 * v13: the whole model in one pass: v10's cluster with the conv computed into shared memory
 * (Hopper)
 *
 * Defect of v12: the conv runs twice, because no block holds a whole sample between the
 * statistics and the output. Change: v10's cluster of 8 blocks a sample (cluster.cuh), its step
 * 1 computing the conv into shared memory instead of loading c: each block copies the weights
 * (conv.cuh), computes its slice's 16 channels, then reduces, exchanges and writes y as v10
 * does. The conv runs once; c never exists in DRAM. Register blocking: each thread computes two
 * positions, j and j + half, so each weight broadcast feeds both: a tap is 2 loads of x, 4
 * LDS.128 and 32 FFMA instead of 1, 4 and 16. One position a thread was measured first (0.242
 * ms in the run of commit 508c56c; ncu: the SMs 49% busy, per issued instruction 3.3 cycles
 * waiting on shared memory, four LDS.128 per 16 FFMA, and 2.7 at barriers).
 * Prediction: compute-bound: the conv's 0.062 ms at the FMA peak plus the on-chip epilogue,
 * against v12's 0.403.
 * Measured: 0.220 ms (19 TFLOP/s), 2.2x torch.compile's whole model (0.491 ms), and faster than
 * cuDNN's conv alone (0.49 to 0.56 ms across runs, 0.492 in this one). Two positions a thread
 * measured 6% better than one in commit 08a0fbe (0.228 against 0.242 ms), less than the halved
 * shared-memory traffic promised: at 64 registers (two blocks an SM) ptxas spills (112 bytes in
 * the build 08a0fbe measured; 96 for this file with nvcc 13.0), and with 128 registers and one
 * block an SM it measured slower (the README's "tried" list). The 0.10 ms target needs about 45
 * TFLOP/s from the conv phase and its waves (30 clusters at once, 128 samples) overlapped with
 * the reductions. Its timeline (commit 2d4018b, %globaltimer at each block's phase
 * boundaries): a block lives a median 48.1 us, 35.4 of them in the conv (30.5 TFLOP/s, 46% of
 * peak, while it runs), 7.3 in the statistics and exchange, 4.0 writing y; the fifth wave is 8
 * samples and takes a whole block lifetime.
 */
#include "cluster.cuh"
#include "conv.cuh"
#include "model.h"

#if __CUDA_ARCH__ >= 900 /* used only by the sm_90 body below */
/* conv_at_s for two positions (input corners xa and xb) at once */
__device__ static inline void conv_at_s2(const float *__restrict__ xa, const float *__restrict__ xb,
                                         const shape sh, const conv_smem_w *sw, float acc[C_OUT],
                                         float acc2[C_OUT])
{
    int hw = sh.h * sh.w, dhw = sh.d * hw;
#pragma unroll
    for (int co = 0; co < C_OUT; co++)
        acc[co] = acc2[co] = sw->b[co];
#pragma unroll 1
    for (int ck = 0; ck < C_IN * KS; ck++) {
        int ci = ck / KS, kd = ck - KS * ci, off = ci * dhw + kd * hw;
        const float4 *wp = (const float4 *)(sw->w + ck * 9 * C_OUT);
#pragma unroll
        for (int q = 0; q < 9; q++) {
            int o = off + (q / 3) * sh.w + q % 3;
            float va = __ldg(xa + o), vb = __ldg(xb + o);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float4 wv = wp[4 * q + i];
                FMA4(acc, 4 * i, va, wv);
                FMA4(acc2, 4 * i, vb, wv);
            }
        }
    }
}
#endif

/* __launch_bounds__(.., 2): two blocks an SM, which caps registers at 64 */
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
    __shared__ __align__(16) conv_smem_w sw;
    cg::cluster_group cluster = cg::this_cluster();
    int S = sh.s, rank = (int)cluster.block_rank(), n = blockIdx.y, cap = slice_cap(S);
    int lo = slice_lo(S, rank), len = slice_lo(S, rank + 1) - lo;
    if (threadIdx.x < C_OUT)
        cs.m[threadIdx.x] = __ldg(m + threadIdx.x);
    load_weights(&sw, weight, bias);
    __syncthreads();
    int half = (len + 1) / 2; /* positions j and j + half */
    for (int j = threadIdx.x; j < half; j += CL_THREADS) {
        float acc[C_OUT], acc2[C_OUT];
        int j2 = j + half < len ? j + half : j;
        conv_at_s2(conv_corner(x, sh, n, lo + j), conv_corner(x, sh, n, lo + j2), sh, &sw, acc, acc2);
#pragma unroll
        for (int co = 0; co < C_OUT; co++)
            vals[co * cap + j] = acc[co], vals[co * cap + j2] = acc2[co];
    }
    __syncthreads();
    cluster_stats(&cs, vals, cap, len, S, 0, NULL);
    cluster_apply(&cs, vals, cap, len, y + (size_t)n * S + lo, mean, rstd, n, rank);
    cluster.sync();
#endif
}

static int opted; /* k_cluster_model's shared-memory opt-in is set (cluster_config) */

void v13_launch(const run_ctx *r, int scope)
{
    (void)scope; /* model_fwd only */
    if (!cluster_fits(r, 0)) {
        v12_model(r);
        return;
    }
    cluster_launch L;
    cluster_config(&L, (const void *)k_cluster_model, &opted, r, r->sh.n, cluster_smem(r->sh.s, 0));
    CUDA_CHECK(cudaLaunchKernelEx(&L.cfg, k_cluster_model, r->x, r->weight, r->bias, r->m, r->y,
                                  r->mean, r->rstd, r->sh));
}
