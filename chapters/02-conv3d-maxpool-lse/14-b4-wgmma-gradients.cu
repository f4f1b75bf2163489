/*
 * b4: the training step on Hopper's warpgroup MMA in TF32: v10's conv, dx and dw (sm_90a code)
 * Defect of b3: its dx and dw run mma.sync in 3xTF32 (5.87 and 6.20 ms, the README's gradient
 * table) after cuDNN's fp32 conv: 18.49 ms [b3 train_step], half PyTorch's default's speed.
 * Change: the step in TF32 on wgmma (common/wgmma.cuh): v10's conv writing c, then b2's epilogue
 * and backward on it. dx is the conv of dc with the kernel flipped and the channels swapped (b3)
 * on v10's machinery, m64n32k8 for the 32 output channels. dw is a GEMM over positions (b3): K
 * runs along a row of 32 positions of four tiles at once, stored [position][channel][4 tiles],
 * so a tap's shift along K moves a descriptor by whole core matrices, and x's patch stored the
 * same way makes N = 96 (32 channels at kw = 0, 1, 2) one m64n96k8; partials summed in order.
 * Prediction, at 1.755 GHz and shared memory's 128 bytes a cycle: dx's m64n32k8 reads 3 KB (24
 * cycles) for 16 cycles of tensor work, so shared memory binds: 0.73 ms. dw's m64n96k8 reads
 * 5 KB (40 cycles) for 48 of tensor work, the tensor peak: 0.49 ms, v10's bound at that clock.
 * v10 took 2.07x it (1.012 ms [v10 model_fwd]): dx about 1.5 ms, dw about 1.0. With v10's conv
 * writing c (1.17 ms), the epilogue, its backward and dbias (about 0.7): 4.4 ms.
 * Measured (H100): 7.654 ms [b4 train_step], 2.42x b3 [b3 train_step / b4 train_step], 1.26x
 * torch.compile in TF32 [compile train_step default / b4 train_step]; 1.5x the 5 ms target.
 * dx met its guess: 1.397 ms, 166 TFLOP/s, tensor pipe 36% busy (Nsight Compute). dw did not:
 * 4.280 ms, 54 TFLOP/s, tensor pipe 11% busy. Its gather (one value from each of four tiles an
 * item) went through registers first, 12 loads in flight a thread (dw 6.11 ms), and now by
 * 4-byte cp.async, all of a stage's in flight while the other stage's wgmmas run. What binds:
 * the warps wait on the wgmmas (2.55 stalled warps per issued instruction), and the copies'
 * stores conflict (392 M bank conflicts: a warp's 4 rows land on the same banks).
 * Errors: within 2x a TF32 backward's (problem.cu).
 */
#include <cuda_pipeline.h>

#include "hopper.cuh"
#include "igemm.cuh"
#include "tf32.cuh"
#include "wgmma.cuh"
#include "wgmma-patch.cuh"

/* ------------------------------------------------------------------------------------ dx */

#define B4X_CHUNKS (C_OUT / V10_CI)             /* dc's 64 channels, 8 a chunk */
#define B4X_W_BYTES (KVOL * 2 * C_IN * 16)        /* a chunk's weights [tap][group][ci][4]: 27648 */
#define B4X_STAGE (V10_PATCH_BYTES + B4X_W_BYTES) /* v10's patch (wgmma-patch.cuh), of dc */
#define B4X_SMEM (2 * B4X_STAGE)                  /* 156672 bytes: one block an SM */

/* dx's weights as its chunks hold them, rounded to TF32: w_t[chunk][tap][group][ci][j] =
 * w[8 chunk + 4 group + j][ci][26 - tap] (b3's flip, in and out swapped). Tap t's B operand
 * (K-major: 32 rows ci of 8 k, the dc channels) starts at 1024 t bytes into the chunk, its core
 * matrices 128 bytes apart along ci (SBO) and 512 along k (LBO). */
__global__ void b4_weights_dx(const float *__restrict__ w, float *__restrict__ w_t)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N_WEIGHT) {
        int j = i & 3, ci = (i >> 2) & 31, grp = (i >> 7) & 1, tap = (i >> 8) % KVOL;
        int co = (i / (KVOL * 256)) * 8 + grp * 4 + j;
        w_t[i] = __uint_as_float(to_tf32(w[(co * C_IN + ci) * KVOL + KVOL - 1 - tap]));
    }
}

/* Persistent, as v10: block b takes tiles b, b + grid, ...; its steps are (tile, chunk) pairs,
 * step s in stage s % 2. Warpgroup q computes rows (plane q % 2, rows 2 (q / 2) + r) of the
 * tile, 64 positions x 32 channels each; the tile's last chunk stores them into dx. */
__global__ void __launch_bounds__(V10_THREADS, 1)
    b4_dx_conv(const float *__restrict__ dc, const float *__restrict__ w_t,
               float *__restrict__ dx, int n, int d, int h, int w)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 smem4[];
    unsigned char *smem = reinterpret_cast<unsigned char *>(smem4);
    int tiles = v10_tiles(n, d, h, w);
    int mine = (int)blockIdx.x < tiles ? (tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    int steps = mine * B4X_CHUNKS;
    int lane = threadIdx.x & 31, wq = (threadIdx.x >> 5) & 3, q = threadIdx.x >> 7;
    uint64_t da = wgmma_desc(smem + ((q & 1) * V10_PH + 2 * (q >> 1)) * V10_PW * 16,
                             V10_PATCH * 16, 128);
    uint64_t db = wgmma_desc(smem + V10_PATCH_BYTES, 512, 128);
    float acc[2][16];
#pragma unroll
    for (int i = 0; i < 32; i++)
        acc[i >> 4][i & 15] = 0.0f;
    if (steps) {
        v10_load<C_OUT, B4X_W_BYTES>(smem, dc, w_t, v10_tile_of(blockIdx.x, d, h, w), 0, d, h,
                                     w);
        fence_proxy_async();
    }
    __syncthreads();
#pragma unroll 1
    for (int s = 0; s < steps; s++) {
        unsigned stage = (s & 1) * (B4X_STAGE / 16); /* in the descriptors' 16-byte units */
#pragma unroll
        for (int i = 0; i < 32; i++)
            wgmma_pin(acc[i >> 4][i & 15]);
        wgmma_fence();
#pragma unroll
        for (int tap = 0; tap < KVOL; tap++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                int kd = tap / 9, kh = tap / 3 % 3, kw = tap % 3;
                wgmma_m64n32k8_tf32_ss(acc[r],
                                       da + stage + ((kd * V10_PH + kh + r) * V10_PW + kw),
                                       db + stage + tap * 64);
            }
        wgmma_commit();
        if (s + 1 < steps) {
            v10_tile nt = v10_tile_of(blockIdx.x + ((s + 1) / B4X_CHUNKS) * gridDim.x, d, h, w);
            v10_load<C_OUT, B4X_W_BYTES>(smem + ((s + 1) & 1) * B4X_STAGE, dc, w_t, nt,
                                         (s + 1) % B4X_CHUNKS, d, h, w);
            fence_proxy_async();
        }
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < 32; i++)
            wgmma_pin(acc[i >> 4][i & 15]);
        if (s % B4X_CHUNKS == B4X_CHUNKS - 1) { /* the tile's dx, rows inside the volume */
            v10_tile t = v10_tile_of(blockIdx.x + (s / B4X_CHUNKS) * gridDim.x, d, h, w);
            int g = lane >> 2, tt = lane & 3;
#pragma unroll
            for (int r = 0; r < 2; r++) {
                int gd = t.d0 + (q & 1), gh = t.h0 + 2 * (q >> 1) + r;
#pragma unroll
                for (int i = 0; i < 16; i++) { /* d[4 j + e]: ci 8 j + 2 tt + e % 2 */
                    int gw = t.w0 + 16 * wq + g + 8 * ((i & 3) >> 1);
                    int ci = 8 * (i >> 2) + 2 * tt + (i & 1);
                    if (gd < d && gh < h && gw < w)
                        dx[((((size_t)t.n * C_IN + ci) * d + gd) * h + gh) * w + gw] = acc[r][i];
                    acc[r][i] = 0.0f;
                }
            }
        }
        __syncthreads(); /* the next step's stage is complete; this one may be overwritten */
    }
#else
    (void)dc, (void)w_t, (void)dx, (void)n, (void)d, (void)h, (void)w;
#endif
}

void tf32_dx(const run_ctx *r)
{
    const shape *s = &r->sh;
    b4_weights_dx<<<(N_WEIGHT + 255) / 256, 256, 0, r->stream>>>(r->weight, r->w_dx);
    int tiles = v10_tiles(s->n, s->d, s->h, s->w);
    SMEM_OPT_IN(b4_dx_conv, B4X_SMEM);
    b4_dx_conv<<<tiles < r->sm_count ? tiles : r->sm_count, V10_THREADS, B4X_SMEM, r->stream>>>(
        r->dc, r->w_dx, r->dx, s->n, s->d, s->h, s->w);
}

/* ------------------------------------------------------------------------------------ dw */

/*
 * dw[co][ci][tap] = sum over positions p of dc[co][p] x[ci][p + tap - 1] (b3): M = 64 output
 * channels, N = (ci, tap), K = positions. A tf32 wgmma needs A and B K-major, 4 k contiguous
 * (16 bytes) in each row of a core matrix: were those 4 positions along w, a tap's shift by
 * kw = 1 would start a row 4 bytes in. So a block takes four tiles at once (a quad), each a row
 * of 32 positions, and the 4 k of a core row are one position in the four tiles:
 *     dc_s[p][co][s] = dc[co] at position p of tile s        (1 KB a position)
 *     x_s[pp][ci][s] = x[ci] at patch position pp of tile s   (3 rows x 34 columns, 512 bytes)
 * A (dc) at k-step j: positions 2j, 2j + 1 (core matrices 1024 bytes apart along K, 128 along
 * co). B (x) for taps (kd, kh, kw = 0 .. 2): N = 96 rows n = 32 kw + ci at 16 n bytes from patch
 * position kh 34 + 2j, since 32 channels of 16 bytes are one position: core matrices 128 bytes
 * apart along N, 512 along K. One m64n96k8 is 3 taps' 64 x 32 sums.
 * Block (kd, share): 3 warpgroups, warpgroup kh; x's patch rows at plane d + kd - 1.
 */
#define B4W_TW 32                      /* positions a tile: a row of 32 along w */
#define B4W_PW (B4W_TW + 2)
#define B4W_PP (3 * B4W_PW)            /* the patch: rows kh = 0 .. 2, 34 columns: 102 */
#define B4W_DC_BYTES (B4W_TW * C_OUT * 16) /* 32768 */
#define B4W_X_BYTES (B4W_PP * C_IN * 16)   /* 52224 */
#define B4W_STAGE (B4W_DC_BYTES + B4W_X_BYTES)
/* two stages, 169984 bytes (one block an SM), and 1 KB more: compute-sanitizer's memcheck takes
 * an m64n96k8's B as its 3 KB from the descriptor's start, where this layout's spans 2 KB, and
 * the last positions of warpgroup 2's patch in the second stage start 2 KB before the end */
#define B4W_SMEM (2 * B4W_STAGE + 1024)
#define B4W_THREADS 384
#define B4W_DC_LOADS ((B4W_TW * C_OUT + B4W_THREADS - 1) / B4W_THREADS) /* 6 */
#define B4W_X_LOADS ((B4W_PP * C_IN + B4W_THREADS - 1) / B4W_THREADS)   /* 9 */

typedef struct {
    int n[4], d[4], h[4], w0[4]; /* tile s: sample, plane, row, first column; n = -1: none */
} b4_quad;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ static inline b4_quad b4_quad_of(int quad, int tiles, int d, int h, int w)
{
    int tw = (w + B4W_TW - 1) / B4W_TW;
    b4_quad u;
#pragma unroll
    for (int s = 0; s < 4; s++) {
        int id = 4 * quad + s;
        u.w0[s] = id % tw * B4W_TW, id /= tw;
        u.h[s] = id % h, id /= h;
        u.d[s] = id % d;
        u.n[s] = 4 * quad + s < tiles ? id / d : -1;
    }
    return u;
}

/* ROWS x CH items (row, channel), each a 16-byte dst[row][channel] holding that row and channel
 * of quad u's 4 tiles, copied value by value by 4-byte cp.async: rows of dc's tile (X 0) or of
 * x's patch (X 1, at plane offset kd - 1). __pipeline_memcpy_async(dst, src, 4, zfill) copies
 * 4 - zfill bytes and fills the rest of the 4 with zeros (cp.async's source size): zfill = 4
 * reads nothing and writes a zero, for the conv's padding outside the volume and for a tile
 * past the last (src must still be a global address: the tensor's start). No register
 * holds a copy in flight, so all of a thread's, 4 x LOADS here and 4 x (6 + 9) = 60 with dc's
 * and x's calls together, are in flight at once while the MMAs of the other stage run;
 * b4_dw_round rounds them to TF32 once they land. Items numbered 8 channels fastest, then rows,
 * then channel octets: a warp reads 8 channels x 4 rows. */
template <int X, int ROWS, int CH, int LOADS>
__device__ static inline void b4_dw_copy(float *dst, const float *__restrict__ src, b4_quad u,
                                         int kd, int d, int h, int w)
{
    size_t dhw = (size_t)d * h * w;
#pragma unroll
    for (int i = 0; i < LOADS; i++) {
        int it = threadIdx.x + i * B4W_THREADS, rest = it >> 3;
        int row = rest % ROWS, ch = rest / ROWS * 8 + (it & 7);
        int pr = X ? row / B4W_PW : 1, pc = X ? row % B4W_PW : row + 1; /* patch row, col */
        if (it < ROWS * CH)
#pragma unroll
            for (int s = 0; s < 4; s++) {
                int gd = u.d[s] + (X ? kd - 1 : 0), gh = u.h[s] + pr - 1, gw = u.w0[s] + pc - 1;
                int inside = u.n[s] >= 0 && gd >= 0 && gd < d && gh >= 0 && gh < h && gw >= 0 &&
                             gw < w;
                const float *p = inside ? src + ((size_t)u.n[s] * CH + ch) * dhw +
                                              ((size_t)gd * h + gh) * w + gw
                                        : src;
                __pipeline_memcpy_async(dst + (row * CH + ch) * 4 + s, p, 4, inside ? 0 : 4);
            }
    }
}

/* the items this thread copied (b4_dw_copy's numbering), rounded to TF32 in place (the tensor
 * cores would truncate them: common/wgmma.cuh): a thread's own cp.async writes are visible to
 * it after __pipeline_wait_prior, the other threads' only after the barrier that follows */
template <int ROWS, int CH, int LOADS> __device__ static inline void b4_dw_round(uint4 *dst)
{
#pragma unroll
    for (int i = 0; i < LOADS; i++) {
        int it = threadIdx.x + i * B4W_THREADS, rest = it >> 3;
        int row = rest % ROWS, ch = rest / ROWS * 8 + (it & 7);
        if (it < ROWS * CH) {
            uint4 v = dst[row * CH + ch];
            dst[row * CH + ch] = make_uint4(to_tf32(__uint_as_float(v.x)), to_tf32(__uint_as_float(v.y)),
                                            to_tf32(__uint_as_float(v.z)), to_tf32(__uint_as_float(v.w)));
        }
    }
}
#endif

/* Block (kd, share): quads share, share + shares, ... (step s in stage s % 2), its partial dw
 * of taps kd 9 .. kd 9 + 8 into part[share][co][ci][tap] */
__global__ void __launch_bounds__(B4W_THREADS, 1)
    b4_dw(const float *__restrict__ x, const float *__restrict__ dc, float *__restrict__ part,
          int n, int d, int h, int w)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 smem4[];
    unsigned char *smem = reinterpret_cast<unsigned char *>(smem4);
    int kd = blockIdx.x, share = blockIdx.y, shares = gridDim.y;
    int tiles = (w + B4W_TW - 1) / B4W_TW * h * d * n, quads = (tiles + 3) / 4;
    int steps = share < quads ? (quads - 1 - share) / shares + 1 : 0;
    int lane = threadIdx.x & 31, wq = (threadIdx.x >> 5) & 3, kh = threadIdx.x >> 7;
    uint64_t da = wgmma_desc(smem, 1024, 128);
    uint64_t db = wgmma_desc(smem + B4W_DC_BYTES + kh * B4W_PW * 512, 512, 128);
    float acc[48];
#pragma unroll
    for (int i = 0; i < 48; i++)
        acc[i] = 0.0f;
    /* step s: quad s's copies (issued a step before) land and are rounded, then quad s + 1's
     * copies go out into the other stage while quad s's wgmmas run on this one */
    if (steps > 0) {
        b4_quad u = b4_quad_of(share, tiles, d, h, w);
        b4_dw_copy<0, B4W_TW, C_OUT, B4W_DC_LOADS>(reinterpret_cast<float *>(smem), dc, u, kd, d,
                                                   h, w);
        b4_dw_copy<1, B4W_PP, C_IN, B4W_X_LOADS>(reinterpret_cast<float *>(smem + B4W_DC_BYTES),
                                                 x, u, kd, d, h, w);
        __pipeline_commit();
    }
    for (int s = 0; s < steps; s++) {
        unsigned char *cur = smem + (s & 1) * B4W_STAGE;
        __pipeline_wait_prior(0);
        b4_dw_round<B4W_TW, C_OUT, B4W_DC_LOADS>(reinterpret_cast<uint4 *>(cur));
        b4_dw_round<B4W_PP, C_IN, B4W_X_LOADS>(reinterpret_cast<uint4 *>(cur + B4W_DC_BYTES));
        fence_proxy_async();
        __syncthreads(); /* stage s & 1 complete; every wgmma of step s - 1 (the other) done */
        if (s + 1 < steps) {
            unsigned char *next = smem + ((s + 1) & 1) * B4W_STAGE;
            b4_quad u = b4_quad_of(share + (s + 1) * shares, tiles, d, h, w);
            b4_dw_copy<0, B4W_TW, C_OUT, B4W_DC_LOADS>(reinterpret_cast<float *>(next), dc, u, kd,
                                                       d, h, w);
            b4_dw_copy<1, B4W_PP, C_IN, B4W_X_LOADS>(
                reinterpret_cast<float *>(next + B4W_DC_BYTES), x, u, kd, d, h, w);
            __pipeline_commit();
        }
        unsigned stage = (s & 1) * (B4W_STAGE / 16);
#pragma unroll
        for (int i = 0; i < 48; i++)
            wgmma_pin(acc[i]);
        wgmma_fence();
        /* k-step j: positions 2j, 2j + 1 of the four tiles, + 128 j and + 64 j in the
         * descriptors' 16-byte units: 2 KB a step through dc's tile, 1 KB through x's patch */
#pragma unroll
        for (int j = 0; j < B4W_TW / 2; j++)
            wgmma_m64n96k8_tf32_ss(acc, da + stage + 128 * j, db + stage + 64 * j);
        wgmma_commit();
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < 48; i++)
            wgmma_pin(acc[i]);
    }
    /* d[4 j + e]: co 16 wq + g + 8 (e / 2), n = 8 j + 2 t + e % 2 = 32 kw + ci */
    int g = lane >> 2, t = lane & 3;
    float *dst = part + (size_t)share * N_WEIGHT;
#pragma unroll
    for (int i = 0; i < 48; i++) {
        int co = 16 * wq + g + 8 * ((i & 3) >> 1), nn = 8 * (i >> 2) + 2 * t + (i & 1);
        dst[(co * C_IN + (nn & 31)) * KVOL + kd * 9 + kh * 3 + (nn >> 5)] = acc[i];
    }
#else
    (void)x, (void)dc, (void)part, (void)n, (void)d, (void)h, (void)w;
#endif
}

void tf32_dw(const run_ctx *r)
{
    const shape *s = &r->sh;
    int tiles = (s->w + B4W_TW - 1) / B4W_TW * s->h * s->d * s->n, quads = (tiles + 3) / 4;
    int shares = dw_shares_max(r->sm_count);
    if (shares > quads)
        shares = quads;
    SMEM_OPT_IN(b4_dw, B4W_SMEM);
    b4_dw<<<dim3(3, shares), B4W_THREADS, B4W_SMEM, r->stream>>>(r->x, r->dc, r->dw_part, s->n,
                                                                  s->d, s->h, s->w);
    b3_dw_sum<<<(N_WEIGHT + 255) / 256, 256, 0, r->stream>>>(r->dw_part, r->dw, shares);
}

/* The training step in TF32: v10's conv into c_own (c stays cuDNN's, the epilogue scopes'
 * input), b2's epilogue and backward on it, then dx, dw and b2's dbias */
void b4_launch(const run_ctx *r, int scope)
{
    (void)scope;
    conv_wgmma(r, r->c_own);
    v5_epilogue_on(r, r->c_own);
    epilogue_backward_on(r, r->c_own);
    tf32_dx(r), tf32_dw(r), own_dbias(r);
}
