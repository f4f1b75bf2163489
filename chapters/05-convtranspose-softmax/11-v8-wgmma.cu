/*
 * v8: the transposed conv on wgmma in TF32, computed twice (sm_90a; after chapter 2's v10)
 * Defect of v7: its conv runs on the FMA pipe (66.9 TFLOP/s fp32 peak), and it stores c (1.07 GB)
 * for a second kernel to read back: 0.72 ms of DRAM at the copy ceiling for c alone.
 * Change: each of v7's 8 parity classes (a, b, e: the outputs' parities in depth, height, width)
 * is an implicit GEMM (M = 64 pooled cells, N = 32 output channels, K = 32 input channels times
 * the class's taps: 1 along an even axis, 2 along an odd one) on m64n32k8. The patch is stored
 * so that each tap is a start address (the layout comment below). A block keeps one half of the
 * channels' weights (110.6 KB, TF32), persistent over tiles; its 4 warpgroups take (a, b) and
 * both e; the patch (36.9 KB a tile, from the xp the pool kernel writes) in two stages. At the
 * datasheet's 495 TFLOP/s the conv is 0.12 ms, so it runs twice instead of storing c: first
 * each tile's sums of exp(clamp(c)) a channel, then, from each row's total, y.
 * Prediction: the pool reads x and writes xp: 0.20 ms at 2991 GB/s. A pass is 108 wgmmas a
 * (tile, half) pair, 332 KB of shared-memory reads, 2592 cycles at 128 bytes a cycle; 125 pairs
 * a block at 1.98 GHz: 0.16 ms. The second pass writes y, 0.36 ms, its conv hidden under the
 * writes: 0.20 + 0.16 + 0.36 = 0.72 ms (storing c would add 0.72 ms to save 0.16). v10 ran at
 * half its bound: guess 1.0 ms.
 * Measured (H100): 1.445 ms [v8 model_fwd], 2.59x v7 [v7 model_fwd / v8 model_fwd], 1.91x
 * torch.compile in TF32 [compile model_fwd default / v8 model_fwd], 60% of the floor; over the
 * guess. Nsight Compute (at its locked clocks): the sums pass 0.70 ms, tensor pipe 22% busy; the
 * y pass 0.85 ms, 18%, writing 1.05 GB at 1.2 TB/s. Their warps wait mostly on their own
 * wgmmas (2.5 stalled warps per issued instruction) and barriers, little on memory: a tile's
 * wgmmas, the next patch's loads and the epilogue run in turn in the same warps, one block an
 * SM. Errors: y and lse within 2x a TF32 conv's on every test shape (problem.cu), x1000 too.
 */
#include <cuda_pipeline.h>

#include "hopper.cuh"
#include "model.h"
#include "reduce.cuh"
#include "rows.cuh"
#include "tf32.cuh"
#include "wgmma.cuh"

/* The patch of a tile, as the wgmmas read it (A, K-major, no swizzle; common/wgmma.cuh). Its 64
 * rows of M are 8 segments of 8 pooled cells along width; a core matrix is a segment's 8 cells x
 * 4 input channels, 16 bytes a cell. Along each axis an odd output reads input m + 1 as well as
 * m (v7), so each segment is stored with the cell after it, 9 slots: the tap that reads m + 1
 * along width starts the same 8 rows one slot (16 bytes) later, and the segments are 144 bytes
 * apart (the SBO). The 4 offsets (dd, dh) in {0, 1}^2 along depth and height each hold their own
 * 8 segments, and a k-step's two groups of 4 channels are 4608 bytes apart (the LBO):
 *     patch[channel / 4][2 dd + dh][segment][slot 0 .. 8][channel % 4]
 * A class's tap at offset (dd, dh, dw) then only adds ((2 dd + dh) 72 + dw) 16 bytes to A's start
 * address (v8_mma's off, in 16-byte units). */
#define V8_SEG 8                                /* cells a segment: one core matrix's rows */
#define V8_SLOTS (V8_SEG + 1)                   /* a segment and the next cell */
#define V8_SEGS 8                               /* segments a tile: 64 cells, one wgmma's M */
#define V8_POS (4 * V8_SEGS * V8_SLOTS)         /* positions of a patch: 288 */
#define V8_GRP_BYTES (V8_POS * 16)              /* a group of 4 input channels: 4608 */
#define V8_STAGE (C_IN / 4 * V8_GRP_BYTES)      /* a tile's patch: 36864 bytes */
#define V8_CO 32                                /* output channels a block */
#define V8_W_BYTES (KVOL * C_IN * V8_CO * 4)    /* their weights: 110592 bytes */
#define V8_THREADS 512
#define V8_RED_BYTES (V8_THREADS / 32 * V8_CO * 4) /* a warp's sums a channel: 2048 */
#define V8_SMEM (V8_W_BYTES + 2 * V8_STAGE + V8_RED_BYTES) /* 186368: one block an SM */
#define V8_ITEMS (C_IN / 4 * V8_POS)            /* (group, position) items a patch: 2304 */
#define V8_LOADS ((V8_ITEMS + V8_THREADS - 1) / V8_THREADS) /* a thread's: 5 */

/* tiles a sample: its PD PH ceil(PW / 8) segments, 8 a tile */
int v8_tiles(const shape *s) { return ceil_div(s->pd * s->ph * ceil_div(s->pw, V8_SEG), V8_SEGS); }

/* The weights as a block holds them, rounded to TF32: w8[half][tap][kk][group][co][j] =
 * weight[ci = 8 kk + 4 group + j][co = 32 half + co][tap]. Within a half, the B operand of
 * (tap, kk) (K-major, 32 rows co of 8 k) starts at 1024 (4 tap + kk) bytes, its core matrices
 * (8 co x 4 j, 128 bytes) 128 bytes apart along co (SBO) and 512 along k (group: LBO). */
__global__ static void v8_weights(const float *__restrict__ w, float *__restrict__ w8)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N_WEIGHT) {
        int j = i & 3, co = (i >> 2) & 31, grp = (i >> 7) & 1, kk = (i >> 8) & 3;
        int tap = (i >> 10) % KVOL, half = (i >> 10) / KVOL;
        int ci = 8 * kk + 4 * grp + j;
        w8[i] = __uint_as_float(to_tf32(w[(ci * C_OUT + V8_CO * half + co) * KVOL + tap]));
    }
}

/* each row's total (the tiles' partial sums added by one warp in a fixed order): lse, and the
 * factor scale_c / total the second pass multiplies by */
__global__ static void v8_row_totals(const float *__restrict__ tpart,
                                     const float *__restrict__ scale, float *__restrict__ rowk,
                                     float *__restrict__ lse, int n_rows, int tiles)
{
    int row = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= n_rows)
        return;
    float v = 0.0f;
    for (int i = lane; i < tiles; i += 32)
        v += tpart[(size_t)row * tiles + i];
    v = warp_sum(v);
    if (lane == 0) {
        lse[row] = logf(v);
        rowk[row] = scale[row % C_OUT] / v;
    }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

/* per axis, output parity p (0: output 2m, 1: 2m + 1) and its tap j (v7's): the input offset
 * (m or m + 1) and the kernel index */
__host__ __device__ constexpr int v8_off(int p, int j) { return p == 1 && j == 0 ? 1 : 0; }
__host__ __device__ constexpr int v8_k(int p, int j) { return p == 0 ? 1 : (j == 0 ? 0 : 2); }

/* Warpgroup (A, B)'s wgmmas for one tile, one group: classes (A, B, 0) into acc[0] and (A, B, 1) into
 * acc[1], every tap of each, over the 4 k-steps of 8 input channels. da: the stage's patch
 * (LBO: a group of 4 channels, SBO: a segment), db: the block's weights; + 16-byte units.
 * The 8 classes have 27 taps among them, so the 4 warpgroups issue 27 x 4 = 108 a tile. */
template <int A, int B>
__device__ static inline void v8_mma(float acc[2][16], uint64_t da, uint64_t db)
{
    wgmma_fence(); /* fence and commit in each warpgroup's branch: ptxas adds its own where it
                    * cannot see them */
#pragma unroll
    for (int kk = 0; kk < C_IN / 8; kk++)
#pragma unroll
        for (int e = 0; e < 2; e++)
#pragma unroll
            for (int ja = 0; ja < 1 + A; ja++)
#pragma unroll
                for (int jb = 0; jb < 1 + B; jb++)
#pragma unroll
                    for (int je = 0; je < 1 + e; je++) {
                        int off = (v8_off(A, ja) * 2 + v8_off(B, jb)) * (V8_SEGS * V8_SLOTS) +
                                  v8_off(e, je);
                        int tap = (v8_k(A, ja) * KS + v8_k(B, jb)) * KS + v8_k(e, je);
                        wgmma_m64n32k8_tf32_ss(acc[e], da + kk * (2 * V8_GRP_BYTES / 16) + off,
                                               db + (tap * 4 + kk) * 64);
                    }
    wgmma_commit();
}

/* Loads tile tt of sample n's patch into stage: item (group, position) a thread, position =
 * ((dd 2 + dh) 8 + segment) 9 + slot, the pooled cell (pd + dd, ph + dh, 8 sw + slot) of the
 * segment's (pd, ph, sw); 4 loads of xp (channels 4 group .. + 3), rounded to TF32, 16 bytes
 * stored; zeros outside the pooled volume (the conv's taps past its edge) and past the sample's
 * last segment. */
__device__ static inline void v8_load(unsigned char *stage, const float *__restrict__ xp, int n,
                                      int tt, const shape &s)
{
    int sw_n = ceil_div(s.pw, V8_SEG), segs = s.pd * s.ph * sw_n;
    float v[V8_LOADS][4];
#pragma unroll
    for (int i = 0; i < V8_LOADS; i++) {
        int it = threadIdx.x + i * V8_THREADS;
        v[i][0] = v[i][1] = v[i][2] = v[i][3] = 0.0f;
        int grp = it / V8_POS, pos = it - grp * V8_POS;
        int q = pos / (V8_SEGS * V8_SLOTS), r = pos - q * (V8_SEGS * V8_SLOTS);
        int seg = r / V8_SLOTS, slot = r - seg * V8_SLOTS;
        int sg = tt * V8_SEGS + seg;
        if (it < V8_ITEMS && sg < segs) {
            int sw = sg % sw_n, row = sg / sw_n;
            int id = row / s.ph + (q >> 1), ih = row % s.ph + (q & 1), iw = V8_SEG * sw + slot;
            if (id < s.pd && ih < s.ph && iw < s.pw) {
                const float *p = xp + ((((size_t)n * C_IN + 4 * grp) * s.pd + id) * s.ph + ih) *
                                          s.pw + iw;
#pragma unroll
                for (int j = 0; j < 4; j++)
                    v[i][j] = __ldg(p + (size_t)j * s.ps);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < V8_LOADS; i++) {
        int it = threadIdx.x + i * V8_THREADS;
        if (it < V8_ITEMS)
            reinterpret_cast<uint4 *>(stage)[it] = make_uint4(
                to_tf32(v[i][0]), to_tf32(v[i][1]), to_tf32(v[i][2]), to_tf32(v[i][3]));
    }
}
#endif

/* what a pass of v8_convt writes: each tile's sums; y; and b4's (12-b4-wgmma-gradients.cu) c
 * with the sums, for its backward to read */
enum { V8_SUMS, V8_Y, V8_C_SUMS };

/* Persistent: block b keeps channels 32 (b % 2) .. + 31 and takes tiles b / 2, b / 2 + grid / 2,
 * ... (tile id = n tiles + tt); step s in stage s % 2. V8_SUMS: each tile's sum of exp(clamp(c))
 * a channel into tpart[(n 64 + co) tiles + tt]; V8_Y: y = exp(clamp(c)) rowk[n 64 + co] into out;
 * V8_C_SUMS: the sums, and c into out. */
template <int MODE>
__global__ void __launch_bounds__(V8_THREADS, 1)
    v8_convt(const float *__restrict__ xp, const float *__restrict__ w8,
             const float *__restrict__ bias, const float *__restrict__ rowk,
             float *__restrict__ tpart, float *__restrict__ out, shape s, int tiles)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 smem4[];
    unsigned char *smem = reinterpret_cast<unsigned char *>(smem4);
    unsigned char *patch = smem + V8_W_BYTES;
    float *s_red = reinterpret_cast<float *>(smem + V8_W_BYTES + 2 * V8_STAGE);
    int half = blockIdx.x & 1, slot0 = blockIdx.x >> 1, slots = gridDim.x >> 1;
    int total = s.n * tiles;
    int mine = slot0 < total ? (total - 1 - slot0) / slots + 1 : 0;
    /* the warpgroup, broadcast from lane 0 so that the compiler sees it uniform over the warp */
    int q = __shfl_sync(0xffffffffu, (int)threadIdx.x >> 7, 0);
    int wq = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    int g = lane >> 2, t = lane & 3, a = q >> 1, b = q & 1;
    int sw_n = ceil_div(s.pw, V8_SEG), segs = s.pd * s.ph * sw_n;
    float bv[8]; /* this thread's channels 32 half + 8 j + 2 t + u, at 2 j + u */
#pragma unroll
    for (int j = 0; j < 8; j++)
        bv[j] = __ldg(bias + V8_CO * half + 8 * (j >> 1) + 2 * t + (j & 1));
    uint64_t da = wgmma_desc(patch, V8_GRP_BYTES, V8_SLOTS * 16);
    uint64_t db = wgmma_desc(smem, 512, 128);
    if (mine) { /* the block's weights, once; the first tile's patch */
        const float4 *src = reinterpret_cast<const float4 *>(w8) + half * (V8_W_BYTES / 16);
        for (int e = threadIdx.x; e < V8_W_BYTES / 16; e += V8_THREADS)
            __pipeline_memcpy_async(smem4 + e, src + e, 16);
        __pipeline_commit();
        v8_load(patch, xp, slot0 / tiles, slot0 % tiles, s);
        __pipeline_wait_prior(0);
        fence_proxy_async();
    }
    __syncthreads();
    float acc[2][16];
#pragma unroll 1
    for (int st = 0; st < mine; st++) {
        int id = slot0 + st * slots, n = id / tiles, tt = id - n * tiles;
        unsigned stage = (st & 1) * (V8_STAGE / 16);
#pragma unroll
        for (int i = 0; i < 32; i++) {
            acc[i >> 4][i & 15] = 0.0f;
            wgmma_pin(acc[i >> 4][i & 15]);
        }
        if (q == 0)
            v8_mma<0, 0>(acc, da + stage, db);
        else if (q == 1)
            v8_mma<0, 1>(acc, da + stage, db);
        else if (q == 2)
            v8_mma<1, 0>(acc, da + stage, db);
        else
            v8_mma<1, 1>(acc, da + stage, db);
        if (st + 1 < mine) { /* the next tile's patch into the other stage, meanwhile */
            int nid = id + slots;
            v8_load(patch + ((st + 1) & 1) * V8_STAGE, xp, nid / tiles, nid % tiles, s);
            fence_proxy_async();
        }
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < 32; i++)
            wgmma_pin(acc[i >> 4][i & 15]);
        /* this thread's rows: cell g of segments 2 wq and 2 wq + 1 (r = 0, 1) of the tile;
         * outputs (2 pd + a, 2 ph + b, 2 pw + e), e = 0, 1 side by side */
        float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        float k[8];
        if (MODE == V8_Y)
#pragma unroll
            for (int j = 0; j < 8; j++)
                k[j] = __ldg(rowk + n * C_OUT + V8_CO * half + 8 * (j >> 1) + 2 * t + (j & 1));
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int sg = tt * V8_SEGS + 2 * wq + r, sw = sg % sw_n, row = sg / sw_n;
            int pw = V8_SEG * sw + g;
            if (sg >= segs || pw >= s.pw)
                continue;
            int od = 2 * (row / s.ph) + a, oh = 2 * (row % s.ph) + b;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                int e0 = 4 * (j >> 1) + 2 * r + (j & 1); /* the accumulator of (row r, channel j) */
                float z0 = __expf(clamp01(acc[0][e0] + bv[j]));
                float z1 = __expf(clamp01(acc[1][e0] + bv[j]));
                int co = V8_CO * half + 8 * (j >> 1) + 2 * t + (j & 1);
                float *dst = out + ((((size_t)n * C_OUT + co) * s.od + od) * s.oh + oh) * s.ow +
                             2 * pw;
                if (MODE != V8_Y)
                    part[j] += z0 + z1;
                if (MODE == V8_Y)
                    *reinterpret_cast<float2 *>(dst) = make_float2(z0 * k[j], z1 * k[j]);
                if (MODE == V8_C_SUMS)
                    *reinterpret_cast<float2 *>(dst) =
                        make_float2(acc[0][e0] + bv[j], acc[1][e0] + bv[j]);
            }
        }
        if (MODE != V8_Y) { /* the tile's sums: over g by shuffles, then the 16 warps in order */
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int off = 4; off < 32; off <<= 1)
                    part[j] += __shfl_xor_sync(0xffffffffu, part[j], off);
            if (g == 0)
#pragma unroll
                for (int j = 0; j < 8; j++)
                    s_red[(threadIdx.x >> 5) * V8_CO + 8 * (j >> 1) + 2 * t + (j & 1)] = part[j];
            __syncthreads();
            if (threadIdx.x < V8_CO) {
                float v = 0.0f;
                for (int w = 0; w < V8_THREADS / 32; w++)
                    v += s_red[w * V8_CO + threadIdx.x];
                tpart[((size_t)n * C_OUT + V8_CO * half + threadIdx.x) * tiles + tt] = v;
            }
        }
        __syncthreads(); /* the next step's stage is complete; this one and s_red may be reused */
    }
#else
    (void)xp, (void)w8, (void)bias, (void)rowk, (void)tpart, (void)out, (void)s, (void)tiles;
#endif
}

/* a pass of v8_convt writing into out (MODE's) */
template <int MODE> static void v8_pass(const run_ctx *r, int tiles, float *out)
{
    SMEM_OPT_IN((const void *)v8_convt<MODE>, V8_SMEM);
    int work = r->sh.n * tiles, slots = r->sm_count / 2;
    slots = slots < 1 ? 1 : (work < slots ? work : slots);
    v8_convt<MODE><<<2 * slots, V8_THREADS, V8_SMEM, r->stream>>>(
        r->xp, r->wt, r->bias, r->rowk, r->tpart, out, r->sh, tiles);
}

void v8_launch(const run_ctx *r, int scope)
{
    (void)scope; /* the whole model only */
    int tiles = v8_tiles(&r->sh);
    pool_forward(r);
    v8_weights<<<ceil_div(N_WEIGHT, 256), 256, 0, r->stream>>>(r->weight, r->wt);
    v8_pass<V8_SUMS>(r, tiles, NULL);
    v8_row_totals<<<ceil_div(rows(&r->sh), 8), 256, 0, r->stream>>>(r->tpart, r->scale, r->rowk,
                                                                    r->lse, rows(&r->sh), tiles);
    v8_pass<V8_Y>(r, tiles, r->y);
}

/* b4's forward: the pool, the conv writing c and each tile's sums (one pass), then y and lse from
 * c and the sums (v7's last kernel) */
void v8_forward_c(const run_ctx *r)
{
    int tiles = v8_tiles(&r->sh);
    pool_forward(r);
    v8_weights<<<ceil_div(N_WEIGHT, 256), 256, 0, r->stream>>>(r->weight, r->wt);
    v8_pass<V8_C_SUMS>(r, tiles, r->c);
    v7_rows_from_partials<<<rows(&r->sh) * r->split, V5_BLOCK, 0, r->stream>>>(
        r->c, r->tpart, r->scale, r->y, r->lse, r->sh.s, tiles, r->split);
}
