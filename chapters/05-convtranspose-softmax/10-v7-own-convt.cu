/*
 * v7: the whole model with our own transposed conv, the pool in its loads, row sums in its epilogue
 *
 * Defect of v1..v6's whole model: the epilogue is 7% [v6 epilogue_fwd/model_fwd] of v6's 11.88
 * ms [v6 model_fwd]; the rest is the pool, which writes xp for the conv to read back, and the
 * library's fp32 transposed conv (PyTorch's alone: 10.73 ms [eager conv_fwd]).
 * Change: the transposed conv by its parity decomposition (chapter 1's v5): along an axis
 * (stride 2, padding 1, kernel 3) output 2m takes one tap (input m, k = 1) and 2m + 1 two
 * (m + 1, k = 0; m, k = 2), so pooled cell m owns the 2 x 2 x 2 cube of outputs 2m .. 2m + 1
 * and needs the inputs m and m + 1 on each axis and all 27 taps.
 *   - A block: 2 x 2 x 8 pooled cells (d, h, w) of one sample, all 64 output channels; a thread:
 *     two cells adjacent along w and 4 channels, 2 x 8 outputs x 4 = 64 accumulators.
 *   - Input channels in chunks of V7_CI: the chunk's weights ([ci][tap][co], transposed once by
 *     v7_weights_tap_major: a thread's 4 channels are one float4) and its input tile with the halo
 *     (3 x 3 x 9 pooled values a channel, each the mean of 8 x values, so xp never exists) go to
 *     shared memory. A thread: 216 FMAs an input channel.
 *   - Epilogue: bias, c stored (float2), and each channel's sum of exp(clamp(c)) over the block's
 *     outputs into tpart (v4: no max). Then v7_rows_from_partials reads c once, adds each row's
 *     partials in a fixed order (v5's merge) and writes y and lse.
 * Prediction: the conv's 58 GFLOP at 30 TFLOP/s (chapter 4's) 1.9 ms, c read + y written 0.72: 2.7 ms.
 * Measured: 3.746 ms [3.647 - 3.859] [v7 model_fwd median_ms min_ms max_ms], 3.2x v6's whole model
 * [v6/v7 model_fwd], 3.0x torch.compile in fp32 [compile/v7 model_fwd], 0.74x its default (TF32)
 * [compile model_fwd default / v7 model_fwd]; 39% over the prediction: 2 blocks of 256 threads an SM
 * leave the conv latency-bound (Nsight Compute: LABBOOK.md).
 */
#include "model.h"
#include "reduce.cuh"
#include "rows.cuh"

/* the tile: TD x TH x TW pooled cells a block; a thread 2 cells along width and 4 channels */
#define TD 2
#define TH 2
#define TW 8
#define V7_THREADS 256 /* (TD TH TW / 2) cell pairs x 16 channel groups */
#define V7_CI 8        /* input channels a chunk */
#define HALO_D (TD + 1)
#define HALO_H (TH + 1)
#define HALO_W (TW + 1)
#define TILE_IN (HALO_D * HALO_H * HALO_W) /* pooled values an input channel: 81 */
#define V7_SMEM (4 * (V7_CI * KVOL * C_OUT + V7_CI * TILE_IN)) /* 55296 + 2592 bytes */

/* tiles a sample: ceil(PD / TD) x ceil(PH / TH) x ceil(PW / TW) */
int v7_tiles(const shape *s)
{
    return ceil_div(s->pd, TD) * ceil_div(s->ph, TH) * ceil_div(s->pw, TW);
}

/* The pooled value xp[n][ci][pd][ph][pw] from x, 0 outside the pooled extents (the halo past
 * the last cell) */
__device__ static inline float pooled(const float *__restrict__ x, const shape &s, int n, int ci,
                                      int pd, int ph, int pw)
{
    if (pd >= s.pd || ph >= s.ph || pw >= s.pw)
        return 0.0f;
    const float *p = x + ((((size_t)n * C_IN + ci) * s.d + 2 * pd) * s.h + 2 * ph) * s.w + 2 * pw;
    size_t hw = (size_t)s.h * s.w;
    float sum = (p[0] + p[1]) + (p[s.w] + p[s.w + 1]);
    sum += (p[hw] + p[hw + 1]) + (p[hw + s.w] + p[hw + s.w + 1]);
    return sum * 0.125f;
}

/* per axis, output parity q (0: output 2m, 1: output 2m + 1) and its tap j (one for q = 0, two
 * for q = 1): the input offset (m or m + 1) and the kernel index */
__device__ static inline int tap_in(int q, int j) { return q == 0 ? 0 : (j == 0 ? 1 : 0); }
__device__ static inline int tap_k(int q, int j) { return q == 0 ? 1 : (j == 0 ? 0 : 2); }

/* the weights from PyTorch's [ci][co][tap] to [ci][tap][co] (a thread's 4 channels one float4),
 * once a forward: 55296 floats. Staging them transposed inside the conv kernel instead put a
 * warp's 32 shared-memory stores 64 floats apart, one bank, 22 cycles a store (counted on a host
 * emulation of the kernel): more than the chunk's FMAs take. */
__global__ void v7_weights_tap_major(const float *__restrict__ w, float *__restrict__ wt)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N_WEIGHT; i += gridDim.x * blockDim.x) {
        int ci = i / (KVOL * C_OUT), rest = i - ci * KVOL * C_OUT, t = rest / C_OUT, co = rest - t * C_OUT;
        wt[i] = w[((size_t)ci * C_OUT + co) * KVOL + t];
    }
}

__global__ void __launch_bounds__(V7_THREADS, 2)
v7_convt_sums(const float *__restrict__ x, const float *__restrict__ wt,
              const float *__restrict__ bias, float *__restrict__ c, float *__restrict__ tpart,
              shape s)
{
    extern __shared__ float sm[];
    float *ws = sm;                           /* [ci][tap][co]: V7_CI x 27 x 64 */
    float *xs = sm + V7_CI * KVOL * C_OUT;    /* [ci][HALO_D][HALO_H][HALO_W] */
    int tiles_w = ceil_div(s.pw, TW), tiles_h = ceil_div(s.ph, TH), tiles_d = ceil_div(s.pd, TD);
    int tile = blockIdx.x % (tiles_w * tiles_h * tiles_d), n = blockIdx.x / (tiles_w * tiles_h * tiles_d);
    int t_w = tile % tiles_w, t_h = tile / tiles_w % tiles_h, t_d = tile / tiles_w / tiles_h;
    int d0 = t_d * TD, h0 = t_h * TH, w0 = t_w * TW; /* the tile's first cell */
    int pair = threadIdx.x & 15, g = threadIdx.x >> 4; /* cell pair, channel group */
    int cd = pair >> 3, ch = (pair >> 2) & 1, cw = 2 * (pair & 3); /* TD = TH = 2, TW / 2 = 4 */
    float acc[2][2][2][2][4]; /* [cell][parity d][parity h][parity w][channel] */
#pragma unroll
    for (int q = 0; q < 2; q++)
#pragma unroll
        for (int a = 0; a < 2; a++)
#pragma unroll
            for (int b = 0; b < 2; b++)
#pragma unroll
                for (int e = 0; e < 2; e++)
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        acc[q][a][b][e][j] = bias[4 * g + j];
    for (int c0 = 0; c0 < C_IN; c0 += V7_CI) {
        __syncthreads(); /* the previous chunk's readers are done */
        /* the chunk's weights, already [ci][tap][co]: a contiguous float4 copy */
        const float4 *src = (const float4 *)(wt + (size_t)c0 * KVOL * C_OUT);
        for (int i = threadIdx.x; i < V7_CI * KVOL * C_OUT / 4; i += V7_THREADS)
            ((float4 *)ws)[i] = src[i];
        /* the input tile, pooled on the way in */
        for (int i = threadIdx.x; i < V7_CI * TILE_IN; i += V7_THREADS) {
            int ci = i / TILE_IN, r = i - ci * TILE_IN;
            int hd = r / (HALO_H * HALO_W), hh = r / HALO_W % HALO_H, hw = r % HALO_W;
            xs[i] = pooled(x, s, n, c0 + ci, d0 + hd, h0 + hh, w0 + hw);
        }
        __syncthreads();
        for (int ci = 0; ci < V7_CI; ci++) {
            float xv[2][2][3]; /* offsets 0, 1 along depth and height; 0, 1, 2 along width */
#pragma unroll
            for (int dd = 0; dd < 2; dd++)
#pragma unroll
                for (int dh = 0; dh < 2; dh++)
#pragma unroll
                    for (int dw = 0; dw < 3; dw++)
                        xv[dd][dh][dw] = xs[ci * TILE_IN + ((cd + dd) * HALO_H + ch + dh) * HALO_W + cw + dw];
            const float4 *wt = (const float4 *)(ws + ci * KVOL * C_OUT) + g; /* + tap * 16 */
#pragma unroll
            for (int a = 0; a < 2; a++)
#pragma unroll
                for (int ja = 0; ja < 1 + a; ja++)
#pragma unroll
                    for (int b = 0; b < 2; b++)
#pragma unroll
                        for (int jb = 0; jb < 1 + b; jb++)
#pragma unroll
                            for (int e = 0; e < 2; e++)
#pragma unroll
                                for (int je = 0; je < 1 + e; je++) {
                                    int t = (tap_k(a, ja) * KS + tap_k(b, jb)) * KS + tap_k(e, je);
                                    float4 wv = wt[t * (C_OUT / 4)];
#pragma unroll
                                    for (int q = 0; q < 2; q++) {
                                        float xin = xv[tap_in(a, ja)][tap_in(b, jb)][q + tap_in(e, je)];
                                        acc[q][a][b][e][0] = fmaf(xin, wv.x, acc[q][a][b][e][0]);
                                        acc[q][a][b][e][1] = fmaf(xin, wv.y, acc[q][a][b][e][1]);
                                        acc[q][a][b][e][2] = fmaf(xin, wv.z, acc[q][a][b][e][2]);
                                        acc[q][a][b][e][3] = fmaf(xin, wv.w, acc[q][a][b][e][3]);
                                    }
                                }
        }
    }
    /* epilogue: store c, and each channel's sum of exp(clamp(c)) over the block's outputs */
    float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int md = d0 + cd, mh = h0 + ch;
#pragma unroll
    for (int q = 0; q < 2; q++) {
        int mw = w0 + cw + q;
        if (md >= s.pd || mh >= s.ph || mw >= s.pw)
            continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float *row = c + ((size_t)n * C_OUT + 4 * g + j) * s.s;
#pragma unroll
            for (int a = 0; a < 2; a++)
#pragma unroll
                for (int b = 0; b < 2; b++) {
                    float v0 = acc[q][a][b][0][j], v1 = acc[q][a][b][1][j];
                    size_t o = ((size_t)(2 * md + a) * s.oh + 2 * mh + b) * s.ow + 2 * mw;
                    *(float2 *)(row + o) = make_float2(v0, v1); /* OW and 2 mw even: aligned */
                    part[j] += __expf(clamp01(v0)) + __expf(clamp01(v1));
                }
        }
    }
    /* the 16 cell pairs of a channel group are the 16 lanes of a half-warp: a fixed tree */
#pragma unroll
    for (int j = 0; j < 4; j++)
        for (int off = 8; off > 0; off >>= 1)
            part[j] += __shfl_xor_sync(0xffffffffu, part[j], off);
    if (pair == 0) {
        int tiles = tiles_w * tiles_h * tiles_d;
#pragma unroll
        for (int j = 0; j < 4; j++)
            tpart[((size_t)n * C_OUT + 4 * g + j) * tiles + tile] = part[j];
    }
}

/* y from c and each row's `tiles` partial sums: a block a chunk of a row (v5's split), the
 * partials added by warp 0 in a fixed order, every block of the row the same bits */
__global__ void __launch_bounds__(V5_BLOCK)
v7_rows_from_partials(const float *__restrict__ c, const float *__restrict__ tpart,
                      const float *__restrict__ scale, float *__restrict__ y,
                      float *__restrict__ lse, int S, int tiles, int split)
{
    __shared__ float total;
    int row = blockIdx.x / split, k = blockIdx.x - row * split, n4 = S / 4;
    if (threadIdx.x < 32) {
        float v = 0.0f;
        for (int i = threadIdx.x; i < tiles; i += 32)
            v += tpart[(size_t)row * tiles + i];
        v = warp_sum(v);
        if (threadIdx.x == 0) {
            total = v;
            if (k == 0)
                lse[row] = logf(v);
        }
    }
    __syncthreads();
    int lo = (int)((long long)n4 * k / split), hi = (int)((long long)n4 * (k + 1) / split);
    row_write((const float4 *)(c + (size_t)row * S), (float4 *)(y + (size_t)row * S),
              lo + threadIdx.x, hi, V5_BLOCK, 0.0f, scale[row % C_OUT] / total);
}

static int opted; /* v7_convt_sums' shared-memory opt-in is set */

void v7_launch(const run_ctx *r, int scope)
{
    (void)scope; /* the whole model only */
    if (!opted) {
        CUDA_CHECK(cudaFuncSetAttribute((const void *)v7_convt_sums,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, V7_SMEM));
        opted = 1;
    }
    int tiles = v7_tiles(&r->sh);
    v7_weights_tap_major<<<ceil_div(N_WEIGHT, 256), 256, 0, r->stream>>>(r->weight, r->wt);
    v7_convt_sums<<<r->sh.n * tiles, V7_THREADS, V7_SMEM, r->stream>>>(r->x, r->wt, r->bias,
                                                                    r->c, r->tpart, r->sh);
    v7_rows_from_partials<<<rows(&r->sh) * r->split, V5_BLOCK, 0, r->stream>>>(
        r->c, r->tpart, r->scale, r->y, r->lse, r->sh.s, tiles, r->split);
}
