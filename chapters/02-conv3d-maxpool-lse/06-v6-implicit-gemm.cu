/*
 * v6: our own conv, an implicit GEMM on the FMA units (read igemm.cuh first)
 *
 * Defect of v5: the epilogue is done (0.177 ms [v5 epilogue_fwd], at the copy ceiling) and the
 * model still takes 6.11 ms [v5 model_fwd]: cuDNN's fp32 conv is almost all of it, 232 GFLOP at
 * 39 TFLOP/s, 59% of the H100's 67 TFLOP/s FMA peak. The conv has to become ours.
 *
 * Change: the conv as a tiled matrix product (igemm.cuh), before any tensor core, so that the
 * tiling is the lesson and the arithmetic stays plain FMA. A block of 256 threads (8 warps)
 * computes 256 positions x 64 channels: lane l of warp q takes column l of the tile's 8 rows
 * (2 planes x 4 rows) and channels 8q .. 8q + 7, 64 accumulators a thread. Per (channel, tap):
 * 8 reads of the patch (adjacent lanes, adjacent addresses: no bank conflict), two 16-byte
 * reads of the weights (the same address in every lane: a broadcast), 64 FMAs. That is the
 * register blocking that makes a GEMM fast: each value read from shared memory feeds 8 FMAs.
 *
 * Prediction: 64 FMAs for 10 shared loads and about 4 other instructions, so at best ~80% of
 * issue slots are FMAs, ~54 TFLOP/s; with occupancy (4 warps a scheduler) and the chunk loads,
 * 40-45 TFLOP/s: about cuDNN's speed. The FMA path has no 2x left in it; the tensor cores do.
 * Measured (H100, KernelBench shape): the whole model 6.33 ms [v6 model_fwd], 54.7% of the
 * floor [v6 model_fwd pct_floor], 0.97x v5 [v5/v6 model_fwd]; the conv alone at 37.7 TFLOP/s
 * against cuDNN's 39.2 (the conv table of the README), with cuDNN's error. Below the
 * prediction: Nsight Compute shows 81% of issue slots used and the FMA pipe 65% busy; the
 * loads, the address arithmetic and the chunk loads take the rest.
 */
#include "igemm.cuh"

__global__ void __launch_bounds__(IGEMM_THREADS, 2)
    v6_conv_ffma(const float *__restrict__ x, const float *__restrict__ w_k,
                 const float *__restrict__ bias, float *__restrict__ c, int d, int h, int w)
{
    extern __shared__ float4 smem4[];
    float *s_in = reinterpret_cast<float *>(smem4), *s_w = s_in + CI_CHUNK * CS;
    tile_pos t = tile_of<C_OUT>(h, w);
    int lane = threadIdx.x & 31, co0 = (threadIdx.x >> 5) * 8;
    float acc[TD * TH][8];
#pragma unroll
    for (int i = 0; i < TD * TH; i++)
#pragma unroll
        for (int j = 0; j < 8; j++)
            acc[i][j] = 0.0f;
    for (int chunk = 0; chunk < N_CHUNKS; chunk++) {
        __syncthreads(); /* the previous chunk's reads are done */
        load_chunk<C_IN, C_OUT>(s_in, s_w, x, w_k, t, chunk, d, h, w);
        __syncthreads();
        for (int ci = 0; ci < CI_CHUNK; ci++) {
            const float *a_base = s_in + ci * CS + lane;
            const float *b_base = s_w + ci * KVOL * WS + co0;
            for (int kdh = 0; kdh < KS * KS; kdh++) /* the taps: (kd, kh), then kw unrolled */
#pragma unroll
            for (int kw = 0; kw < KS; kw++) {
                int tap = kdh * KS + kw, a_tap = (kdh / KS) * PH * PW + (kdh % KS) * PW + kw;
                float a[TD * TH], b[8];
#pragma unroll
                for (int i = 0; i < TD * TH; i++) /* row i = (plane i / 4, row i % 4) */
                    a[i] = a_base[(i / TH) * PH * PW + (i % TH) * PW + a_tap];
                float4 b0 = *reinterpret_cast<const float4 *>(b_base + tap * WS);
                float4 b1 = *reinterpret_cast<const float4 *>(b_base + tap * WS + 4);
                b[0] = b0.x, b[1] = b0.y, b[2] = b0.z, b[3] = b0.w;
                b[4] = b1.x, b[5] = b1.y, b[6] = b1.z, b[7] = b1.w;
#pragma unroll
                for (int i = 0; i < TD * TH; i++)
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
            }
        }
    }
    int gw = t.w0 + lane;
#pragma unroll
    for (int i = 0; i < TD * TH; i++) {
        int gd = t.d0 + i / TH, gh = t.h0 + i % TH;
        if (gd >= d || gh >= h || gw >= w)
            continue;
#pragma unroll
        for (int j = 0; j < 8; j++) /* a warp stores 32 adjacent floats of a row: coalesced */
            c[((((size_t)t.n * C_OUT + co0 + j) * d + gd) * h + gh) * w + gw] =
                acc[i][j] + __ldg(bias + co0 + j);
    }
}

void conv_ffma(const run_ctx *r, float *c)
{
    SMEM_OPT_IN(v6_conv_ffma, SMEM_BYTES);
    const shape *s = &r->sh;
    weights_kmajor(r);
    v6_conv_ffma<<<tile_grid<C_OUT>(s), IGEMM_THREADS, SMEM_BYTES>>>(r->x, r->w_k, r->bias, c,
                                                                      s->d, s->h, s->w);
}

/* the whole model: our conv, then v5's epilogue reading c */
void v6_launch(const run_ctx *r, int scope)
{
    (void)scope;
    conv_ffma(r, r->c_own);
    v5_epilogue_on(r, r->c_own);
}
