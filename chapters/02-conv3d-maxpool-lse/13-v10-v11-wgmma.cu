/*
 * v10: v9's full fusion at v7's precision (TF32) on Hopper's warpgroup MMA (wgmma; sm_90a
 * code: H100, H200; read common/wgmma.cuh first)
 * Defect of v7's conv (v9's too): mma.sync feeds the tensor cores through each warp's registers:
 * a tap's 16 products of 2048 FLOP wait on 24 shared loads and conversions (mma.cuh; tensor pipe
 * 27% busy). Change: wgmma reads both operands from shared memory through descriptors, 64
 * positions x 64 channels x 8 k an instruction, asynchronously. The patch of a 2 x 4 x 64 tile
 * (4 x 6 x 66 positions) is stored [input channel / 4][position][4 channels], 16 bytes a
 * position, so a tap is only a start address: output row (p, r) at tap (kd, kh, kw) begins
 * ((p + kd) * 6 + r + kh) * 66 + kw positions in. 4 warpgroups a block, one block an SM,
 * persistent over the tiles, with two chunks of 8 input channels (patch 50.7 KB, weights 55.3 KB,
 * TF32-rounded): while the tensor cores run one chunk (54 wgmmas a warpgroup), the same threads
 * load the next. Pool and logsumexp as v9's.
 * Prediction: 232 GFLOP at the datasheet's dense TF32 495 TFLOP/s (2048 FLOP a cycle an SM) is
 * 0.47 ms. Each 65536-FLOP m64n64k8 takes 32 cycles and reads 4 KB of shared memory, all that
 * 128 bytes a cycle deliver, so the chunks' stores push it below the peak. Each chunk ends in a
 * barrier and a wait, and L2 delivers 1.7 GB (each tile's patches and weights); guessing half
 * the peak: 0.94 ms, under torch.compile's 2.28 ms [compile model_fwd default] in TF32.
 * Measured (H100, KernelBench shape): the whole model 1.012 ms [1.006 - 1.016] [v10 model_fwd
 * median_ms min_ms max_ms], 229 TFLOP/s [v10 model_fwd tflops], under half the datasheet's TF32
 * peak; 2.95x v7 [v7/v10 model_fwd] at v7's precision, and 2.25x torch.compile in PyTorch's
 * default precision [compile model_fwd default / v10 model_fwd]. Nsight Compute (LABBOOK.md):
 * the tensor pipe busy half the time, 16 warps an SM, their main stalls the barrier and the wgmma
 * wait that end each chunk: the stop the prediction named binds it.
 */
/*
 * v11: v10 in 3xTF32, fp32's accuracy on wgmma (sm_90a; read common/tf32.cuh's split first)
 * Defect of v10: TF32 alone; its conv is 570x cuDNN's fp32 error, and v9, which is not, takes
 * 4.9 ms [v9 model_fwd] on mma.sync.
 * Change: x and w are split (hi, lo); a chunk is 4 input channels, stored hi, then lo (the bytes
 * of v10's 8). A's k8 operand is [hi | lo]: k 0-3 the 4 channels' hi, k 4-7 their lo (LBO: the
 * patch's size). B is [lo; lo], then [hi; hi]: with LBO 0, k 4-7 read k 0-3's core matrix again.
 * Two wgmmas give all four products, lo lo's too (a quarter of the work, wasted). The tensor
 * cores truncate each wgmma's sum (a first form summing all 432 in one accumulator: rel_l2
 * 7.3e-6, 15x cuDNN's), so a chunk sums from zero, its even and odd taps apart (about 27 wgmmas
 * each; one accumulator a chunk sat at --test's 2x bound), and is added to fp32 totals. Even,
 * odd, totals, 64 each: 192 accumulators a thread, 250 registers; the register file holds 2
 * warpgroups of that, not 4, so the tile is 2 x 2 x 64.
 * Prediction: four products a product at v10's 229 TFLOP/s [v10 model_fwd tflops]: 4.0 ms; the
 * first form (4 warpgroups; LABBOOK.md) ran 2.66 ms, its tensor pipe 74% busy (v10's: half);
 * with half the warps to cover the waits, guess 15% slower: 3.0 ms.
 * Measured: 3.081 ms [3.079 - 3.083] [v11 model_fwd median_ms min_ms max_ms], 75.3 TFLOP/s
 * [v11 model_fwd tflops], 1.60x v9 [v9/v11 model_fwd], 1.99x torch.compile in fp32
 * [compile model_fwd / v11 model_fwd], 3% over the 3.0 ms target. Its conv: rel_l2 5.1e-7 against
 * cuDNN's 4.9e-7 (at most 1.04x on the test shapes). Nsight Compute: tensor pipe 63% busy, 8
 * warps an SM, stalled on their wgmma waits and the barrier that ends each chunk.
 */
#include <cuda_pipeline.h>

#include "hopper.cuh"
#include "igemm.cuh"
#include "lse.cuh"
#include "tf32.cuh"
#include "wgmma.cuh"
#include "wgmma-patch.cuh"

#define V10_CHUNKS (C_IN / V10_CI)
#define V10_W_BYTES (KVOL * 2 * C_OUT * 16)  /* a chunk's weights, [tap][group][co][4]: 55296 */
#define V10_STAGE (V10_PATCH_BYTES + V10_W_BYTES)
#define V10_SMEM (2 * V10_STAGE)             /* 211968 bytes: one block an SM */
#define V11_TH 2                             /* v11's tile: 2 x 2 x 64, 2 warpgroups */
#define V11_STAGE (v10_geom<V11_TH>::PATCH_BYTES + V10_W_BYTES) /* 89088 */
#define V10_POOL_STRIDE 72 /* v9's: a window's 64 channels, 8 (mod 32) banks apart */
#define V11_LO (KVOL * 1024 / 16) /* v11: a chunk's lo weights after its hi, in 16-byte units */

/* The weights as the chunks hold them, rounded to TF32: w_t[chunk][tap][group][co][j] =
 * weight[co][8 chunk + 4 group + j][tap]. A chunk is 55296 contiguous bytes; within it tap t's
 * B operand (K-major: 64 rows co of 8 k) starts at 2048 t, its core matrices (8 co x 4 j, 128
 * bytes) 128 bytes apart along co (SBO) and 1024 along k (group: LBO). */
__global__ static void v10_weights(const float *__restrict__ w, float *__restrict__ w_t)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N_WEIGHT) {
        int j = i & 3, co = (i >> 2) & 63, grp = (i >> 8) & 1, tap = (i >> 9) % KVOL;
        int ci = (i / (KVOL * 512)) * V10_CI + grp * 4 + j;
        w_t[i] = __uint_as_float(to_tf32(w[(co * C_IN + ci) * KVOL + tap]));
    }
}

/* v11's weights, split for 3xTF32: w3[chunk][part][tap][co][j] = hi (part 0) or lo (part 1) of
 * weight[co][4 chunk + j][tap] (split_tf32). A chunk (4 input channels) is 55296 contiguous
 * bytes, as v10's; within it tap t's hi starts at 1024 t and its lo 27648 bytes later, each a
 * B operand of 64 rows co by 4 k, core matrices 128 bytes apart along co (SBO). */
__global__ static void v11_weights(const float *__restrict__ w, float *__restrict__ w3)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < 2 * N_WEIGHT) {
        int j = i & 3, co = (i >> 2) & 63, tap = (i >> 8) % KVOL, part = (i >> 8) / KVOL & 1;
        int ci = (i >> 8) / (2 * KVOL) * 4 + j;
        uint32_t hi, lo;
        split_tf32(w[(co * C_IN + ci) * KVOL + tap], &hi, &lo);
        w3[i] = __uint_as_float(part ? lo : hi);
    }
}


#if defined(__CUDA_ARCH_FEAT_SM90_ALL)


/* v9's epilogue for the tile's 64 windows (1 x 2 x 32; v11's 32, 1 x 1 x 32): warpgroup q holds
 * rows (plane q % 2, rows 2 (q / 2) and 2 (q / 2) + 1): 1. their max in registers; 2. the
 * columns' by a shuffle; 3. the planes' through s_pool (both planes written, the logsumexp
 * threads take the max); 4. the logsumexp over 64 channels, 8 threads a window; relu; y. */
__device__ static inline void v10_pool_lse(const float acc[2][32], float *s_pool,
                                           const float *__restrict__ bias, float *__restrict__ y,
                                           v10_tile t, int d, int h, int w)
{
    int lane = threadIdx.x & 31, wq = (threadIdx.x >> 5) & 3, q = threadIdx.x >> 7;
    int g = lane >> 2, tt = lane & 3, plane = q & 1, hp = q >> 1;
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float v = fmaxf(acc[0][4 * j + e], acc[1][4 * j + e]);   /* 1. the window's rows */
            v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 4));        /* 2. its columns */
            if ((g & 1) == 0) {
                int px = 8 * wq + (g >> 1) + 4 * (e >> 1), co = 8 * j + 2 * tt + (e & 1);
                s_pool[(plane * 64 + hp * 32 + px) * V10_POOL_STRIDE + co] = v;
            }
        }
    __syncthreads();
    int win = threadIdx.x >> 3, k = threadIdx.x & 7; /* 4. */
    float m = -INFINITY, s = 0.0f;
#pragma unroll
    for (int j = 0; j < C_OUT / 8; j++) {
        int co = 8 * j + k;
        float v = fmaxf(s_pool[win * V10_POOL_STRIDE + co],
                        s_pool[(64 + win) * V10_POOL_STRIDE + co]); /* 3. the planes */
        lse_online(v + __ldg(bias + co), &m, &s);
    }
#pragma unroll
    for (int off = 1; off < 8; off <<= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off), s2 = __shfl_xor_sync(0xffffffffu, s, off);
        lse_merge(&m, &s, m2, s2);
    }
    int pd = d / 2, ph = h / 2, pw = w / 2;
    int gpd = t.d0 / 2, gph = t.h0 / 2 + (win >> 5), gpw = t.w0 / 2 + (win & 31);
    if (k == 0 && gpd < pd && gph < ph && gpw < pw) {
        float z = m + __logf(s);
        y[(((size_t)t.n * pd + gpd) * ph + gph) * pw + gpw] = z > 0.0f ? z : 0.0f;
    }
}

/* the conv alone (--test's precision check and the notes' conv table): c = acc + bias at the
 * warpgroup's two rows, positions inside the volume */
__device__ static inline void v10_store_c(const float acc[2][32], const float *__restrict__ bias,
                                          float *__restrict__ c, v10_tile t, int d, int h, int w)
{
    int lane = threadIdx.x & 31, wq = (threadIdx.x >> 5) & 3, q = threadIdx.x >> 7;
    int g = lane >> 2, tt = lane & 3;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int gd = t.d0 + (q & 1), gh = t.h0 + 2 * (q >> 1) + r;
        if (gd >= d || gh >= h)
            continue;
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int gw = t.w0 + 16 * wq + g + 8 * (e >> 1), co = 8 * j + 2 * tt + (e & 1);
                if (gw < w)
                    c[((((size_t)t.n * C_OUT + co) * d + gd) * h + gh) * w + gw] =
                        acc[r][4 * j + e] + __ldg(bias + co);
            }
    }
}
#endif

/* Persistent: block b takes tiles b, b + grid, ...; its steps are (tile, chunk) pairs, step s
 * in stage s % 2. FUSED: y (v10); else c (the conv alone). SPLIT (v11): 3xTF32, a chunk of 4
 * input channels, hi and lo. */
template <bool FUSED, bool SPLIT>
__global__ void __launch_bounds__(v10_geom<SPLIT ? V11_TH : V10_TH>::THREADS, 1)
    v10_wgmma_conv(const float *__restrict__ x, const float *__restrict__ w_t,
                   const float *__restrict__ bias, float *__restrict__ out, int n, int d, int h,
                   int w)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 smem4[];
    unsigned char *smem = reinterpret_cast<unsigned char *>(smem4);
    constexpr int ROWS = SPLIT ? V11_TH : V10_TH;
    typedef v10_geom<ROWS> G;
    constexpr int STAGE = SPLIT ? V11_STAGE : V10_STAGE;
    int tiles = v10_tiles<ROWS>(n, d, h, w);
    int mine = (int)blockIdx.x < tiles ? (tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    constexpr int CHUNKS = SPLIT ? C_IN / 4 : V10_CHUNKS;
    int steps = mine * CHUNKS;
    /* warpgroup q's A: row (plane q % 2, row 2 (q / 2)) of the tile at tap (0, 0, 0), 64
     * positions (core matrices of 8, SBO 128 bytes), the chunk's two groups of 4 channels (v11:
     * its hi and lo) a patch apart (LBO); B: the chunk's weights at tap 0 (SBO 128; LBO 1024,
     * the next group; v11: 0, the same core matrix) */
    int q = threadIdx.x >> 7;
    uint64_t da = wgmma_desc(smem + ((q & 1) * G::PROWS + 2 * (q >> 1)) * V10_PW * 16,
                             G::POSITIONS * 16, 128);
    uint64_t db = wgmma_desc(smem + G::PATCH_BYTES, SPLIT ? 0 : 1024, 128);
    float acc[2][32], acc2[2][32], tot[2][32]; /* v11: acc2 the odd taps', tot their sums */
#pragma unroll
    for (int i = 0; i < 64; i++)
        acc[i >> 5][i & 31] = acc2[i >> 5][i & 31] = tot[i >> 5][i & 31] = 0.0f;
    if (steps) {
        v10_tile t0 = v10_tile_of<ROWS>(blockIdx.x, d, h, w);
        v10_load<C_IN, V10_W_BYTES, SPLIT, ROWS>(smem, x, w_t, t0, 0, d, h, w);
        fence_proxy_async();
    }
    __syncthreads();
#pragma unroll 1
    for (int s = 0; s < steps; s++) {
        unsigned stage = (s & 1) * (STAGE / 16); /* in the descriptors' 16-byte units */
#pragma unroll
        for (int i = 0; i < 64; i++) {
            wgmma_pin(acc[i >> 5][i & 31]);
            if (SPLIT)
                wgmma_pin(acc2[i >> 5][i & 31]);
        }
        wgmma_fence();
#pragma unroll
        for (int tap = 0; tap < KVOL; tap++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                int kd = tap / 9, kh = tap / 3 % 3, kw = tap % 3;
                uint64_t a = da + stage + ((kd * G::PROWS + kh + r) * V10_PW + kw);
                if (SPLIT) { /* [hi | lo] x [lo; lo], then [hi | lo] x [hi; hi] */
                    float *t = tap & 1 ? acc2[r] : acc[r];
                    wgmma_m64n64k8_tf32_ss(t, a, db + stage + V11_LO + tap * 64);
                    wgmma_m64n64k8_tf32_ss(t, a, db + stage + tap * 64);
                } else {
                    wgmma_m64n64k8_tf32_ss(acc[r], a, db + stage + tap * 128);
                }
            }
        wgmma_commit();
        if (s + 1 < steps) { /* the next step's chunk into the other stage, meanwhile */
            int next = s + 1;
            v10_tile nt = v10_tile_of<ROWS>(blockIdx.x + (next / CHUNKS) * gridDim.x, d, h, w);
            v10_load<C_IN, V10_W_BYTES, SPLIT, ROWS>(smem + ((s + 1) & 1) * STAGE, x, w_t, nt,
                                                   next % CHUNKS, d, h, w);
            fence_proxy_async();
        }
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < 64; i++) {
            wgmma_pin(acc[i >> 5][i & 31]);
            if (SPLIT)
                wgmma_pin(acc2[i >> 5][i & 31]);
        }
        if (SPLIT) { /* v11: the chunk's sums into tot, rounded to nearest */
#pragma unroll
            for (int i = 0; i < 64; i++) {
                tot[i >> 5][i & 31] += acc[i >> 5][i & 31];
                tot[i >> 5][i & 31] += acc2[i >> 5][i & 31];
                acc[i >> 5][i & 31] = acc2[i >> 5][i & 31] = 0.0f;
            }
        }
        if (s % CHUNKS == CHUNKS - 1) { /* the tile's last chunk: its epilogue */
            v10_tile t = v10_tile_of<ROWS>(blockIdx.x + (s / CHUNKS) * gridDim.x, d, h, w);
            if (FUSED) {
                __syncthreads(); /* every warpgroup's wgmmas are done with this stage */
                v10_pool_lse(SPLIT ? tot : acc,
                             reinterpret_cast<float *>(smem + (s & 1) * STAGE), bias, out, t, d,
                             h, w);
            } else {
                v10_store_c(SPLIT ? tot : acc, bias, out, t, d, h, w);
            }
#pragma unroll
            for (int i = 0; i < 64; i++)
                acc[i >> 5][i & 31] = tot[i >> 5][i & 31] = 0.0f;
        }
        __syncthreads(); /* the next step's stage is complete; this one may be overwritten */
    }
#else
    (void)x, (void)w_t, (void)bias, (void)out, (void)n, (void)d, (void)h, (void)w;
#endif
}

template <bool FUSED, bool SPLIT>
static void v10_run(const run_ctx *r, float *out)
{
    const shape *s = &r->sh;
    if (SPLIT)
        v11_weights<<<(2 * N_WEIGHT + 255) / 256, 256, 0, r->stream>>>(r->weight, r->w_k);
    else
        v10_weights<<<(N_WEIGHT + 255) / 256, 256, 0, r->stream>>>(r->weight, r->w_k);
    /* v11: 1 KB of slack past the second stage, never read: compute-sanitizer's memcheck takes
     * an m64n64k8's B as a dense 2 KB block, where [lo; lo] (LBO 0) spans 1 KB */
    constexpr int ROWS = SPLIT ? V11_TH : V10_TH;
    constexpr int SMEM = SPLIT ? 2 * V11_STAGE + 1024 : V10_SMEM;
    int tiles = v10_tiles<ROWS>(s->n, s->d, s->h, s->w);
    SMEM_OPT_IN((v10_wgmma_conv<FUSED, SPLIT>), SMEM);
    v10_wgmma_conv<FUSED, SPLIT><<<tiles < r->sm_count ? tiles : r->sm_count,
                                   v10_geom<ROWS>::THREADS, SMEM, r->stream>>>(
        r->x, r->w_k, r->bias, out, s->n, s->d, s->h, s->w);
}

/* v10's conv alone, c = conv(x) + bias in TF32 (--test and the notes' conv table) */
void conv_wgmma(const run_ctx *r, float *c) { v10_run<false, false>(r, c); }

void v10_launch(const run_ctx *r, int scope)
{
    (void)scope;
    v10_run<true, false>(r, r->y);
}

/* v11's conv alone, in 3xTF32 */
void conv_wgmma_3xtf32(const run_ctx *r, float *c) { v10_run<false, true>(r, c); }

void v11_launch(const run_ctx *r, int scope)
{
    (void)scope;
    v10_run<true, true>(r, r->y);
}
