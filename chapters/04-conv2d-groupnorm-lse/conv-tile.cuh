/*
 * conv-tile.cuh: the conv computed inside our own kernels (v8, v9, b4): Conv2d(8 -> 64, 3x3, no padding,
 * bias) on a tile of CT_ROWS output rows x CT_SEG output columns of one sample, in registers.
 *
 * An output value is 72 FMAs (8 input channels x 9 taps), and its 64 channels share the same 72
 * inputs. A thread that computes one position and one channel would load two operands an FMA; the
 * point of a register block is to load each operand once for many FMAs. Here a thread owns
 * CT_QUAD = 4 consecutive positions of a row x CT_SLICE_CH = 8 channels: 32 accumulators. For
 * each (input channel, kernel row) it loads the 6 inputs its 4 positions touch (one 16-byte and
 * one 8-byte shared-memory load: the 3 taps of a row slide over them) and, for each of the 3
 * taps, the 8 weights (two 16-byte loads), then does 3 x 4 x 8 = 96 FMAs: 8 loads for 96 FMAs,
 * where one position x one channel would need 2 loads an FMA.
 *
 * Who shares what. Warp w computes channel slice w % 8 (channels 8 (w % 8) ..) of the tile's
 * row; its lane l has columns 4 l .. 4 l + 3, so a warp covers CT_SEG = 128 columns, all of the
 * KernelBench width of 126 (the last lane's last 2 columns masked). Every lane of a warp reads
 * the same weights (a broadcast: one shared-memory wavefront a 16-byte load), and the lanes'
 * inputs are consecutive (a warp's 16-byte loads, 512 bytes, take 4 wavefronts, its 8-byte
 * loads 2). Per (input channel, kernel row) and warp: 6 + 6 = 12 wavefronts against 96 FMA
 * instructions, which take 24 cycles of the SM's four FMA pipes: shared memory is half busy
 * when the FMAs run at their peak.
 */
#ifndef CH04_CONV_TILE_CUH
#define CH04_CONV_TILE_CUH

#include "model.h"

/*
 * Why 8 channels and not 16. With 16 (64 accumulators, 3 of 4 loads fewer per FMA) the compiler
 * keeps a kernel row's weights in registers too: 241 registers a thread, one block of 8 warps
 * an SM, and each tile's barrier and input load then stall the whole SM: v8 was 5% slower that
 * way than with 8 channels, 127 registers and two blocks (16 warps) an SM (LABBOOK.md).
 * CT_ROWS, CT_SLICES and CT_MINB can be set with -D to try other shapes.
 *
 * Shared memory: the weights, transposed once a block to [ci][kh][kw][co] (18 KB: a tap's 8
 * channels of a slice are 32 contiguous bytes), the bias, and the tile's input: 8 channels x
 * (CT_ROWS + 2) rows x CT_XW columns (130 used, padded to 132 so that every row starts on 16
 * bytes and the 16-byte loads stay aligned). Inputs outside the image are stored as 0; they
 * only reach outputs outside the image, which are masked.
 */
#ifndef CT_ROWS
#define CT_ROWS 1                            /* output rows a tile */
#endif
#ifndef CT_SLICES
#define CT_SLICES 8                          /* channel slices: warp w has slice w % CT_SLICES */
#endif
#ifndef CT_MINB
#define CT_MINB 2                            /* blocks an SM, for __launch_bounds__ */
#endif
#define CT_THREADS (32 * CT_ROWS * CT_SLICES) /* 256: warp w is slice w % CT_SLICES of row w / CT_SLICES */
#define CT_QUAD 4                            /* consecutive positions a thread */
#define CT_SEG (32 * CT_QUAD)                /* output columns a tile: 128 */
#define CT_SLICE_CH (C_OUT / CT_SLICES)      /* channels a thread: 8 */
#define CT_XROWS (CT_ROWS + KS - 1)          /* input rows a tile: 3 */
#define CT_XW (CT_SEG + 4)                   /* input columns a tile: 130 used, 132 for alignment */
#define CT_XELEMS (C_IN * CT_XROWS * CT_XW)  /* 3168 floats, 12.4 KB */
#define CT_XITER ((CT_XELEMS + CT_THREADS - 1) / CT_THREADS)

struct __align__(16) conv_tile_smem {
    float w[C_IN * KVOL * C_OUT]; /* [ci][kh][kw][co] */
    float b[C_OUT];
    float x[C_IN][CT_XROWS][CT_XW];
};

/* where tile t starts: sample n, first output row oh0, first output column ow0; a sample has
 * ceil(OH / CT_ROWS) x segs tiles, segs = ceil(OW / CT_SEG) */
struct tile_at {
    int n, oh0, ow0, sg;
};

__device__ static inline tile_at tile_of(int t, const shape sh, int segs)
{
    int per_sample = (sh.oh + CT_ROWS - 1) / CT_ROWS * segs, rem = t % per_sample;
    tile_at a = {t / per_sample, rem / segs * CT_ROWS, rem % segs * CT_SEG, rem % segs};
    return a;
}

static inline int tile_segs(const shape *s) { return (s->ow + CT_SEG - 1) / CT_SEG; }
static inline int tile_count(const shape *s)
{
    return s->n * ((s->oh + CT_ROWS - 1) / CT_ROWS) * tile_segs(s);
}

/* the persistent grid: the blocks of a CT_THREADS kernel resident at once (asked once), at most
 * one a tile */
static inline int resident_grid(const void *kernel, int *per_sm, const run_ctx *r, int tiles, size_t dyn_smem)
{
    if (!*per_sm)
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, kernel, CT_THREADS, dyn_smem));
    int g = *per_sm * r->sm_count;
    return g < tiles ? g : tiles;
}

/* the weights transposed and the bias, once a block; the caller synchronises before use */
__device__ static inline void tile_load_weights(conv_tile_smem *sm, const float *__restrict__ weight,
                                                const float *__restrict__ bias)
{
    for (int i = threadIdx.x; i < N_WEIGHT; i += CT_THREADS) {
        int co = i / (C_IN * KVOL), tap = i - co * (C_IN * KVOL);
        sm->w[tap * C_OUT + co] = __ldg(weight + i);
    }
    if (threadIdx.x < C_OUT)
        sm->b[threadIdx.x] = __ldg(bias + threadIdx.x);
}

/* the tile's input rows into shared memory (flat: C_IN x CT_XROWS x CT_XW floats, as
 * conv_tile_smem's x): all CT_XITER loads a thread are issued before the
 * first store, so they are in flight together (one round trip to L2, not 13) */
__device__ static inline void tile_load_x(float *flat, const float *__restrict__ x, const shape sh, tile_at a)
{
    const float *xn = x + (size_t)a.n * C_IN * sh.h * sh.w;
    float v[CT_XITER];
#pragma unroll
    for (int k = 0; k < CT_XITER; k++) {
        int i = threadIdx.x + k * CT_THREADS, ci = i / (CT_XROWS * CT_XW);
        int row = i / CT_XW % CT_XROWS, ih = a.oh0 + row, iw = a.ow0 + i % CT_XW;
        v[k] = i < CT_XELEMS && ih < sh.h && iw < sh.w ? __ldg(xn + ((size_t)ci * sh.h + ih) * sh.w + iw)
                                                        : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < CT_XITER; k++)
        if (threadIdx.x + k * CT_THREADS < CT_XELEMS)
            flat[threadIdx.x + k * CT_THREADS] = v[k];
}

/* acc[j][q] = channel CT_SLICE_CH slice + j at column 4 lane + q of tile row `row` (bias included) */
__device__ static inline void tile_conv(const conv_tile_smem *sm, int row, int slice, int lane,
                                        float acc[CT_SLICE_CH][CT_QUAD])
{
    const float4 *b4 = (const float4 *)(sm->b + slice * CT_SLICE_CH);
#pragma unroll
    for (int j4 = 0; j4 < CT_SLICE_CH / 4; j4++) {
        float4 b = b4[j4];
#pragma unroll
        for (int q = 0; q < CT_QUAD; q++)
            acc[4 * j4][q] = b.x, acc[4 * j4 + 1][q] = b.y, acc[4 * j4 + 2][q] = b.z,
            acc[4 * j4 + 3][q] = b.w;
    }
#pragma unroll 1
    for (int ci = 0; ci < C_IN; ci++) {
#pragma unroll
        for (int kh = 0; kh < KS; kh++) {
            const float *xr = &sm->x[ci][row + kh][CT_QUAD * lane];
            float4 xa = *(const float4 *)xr;
            float2 xb = *(const float2 *)(xr + 4);
            float xv[CT_QUAD + KS - 1] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y};
#pragma unroll
            for (int kw = 0; kw < KS; kw++) {
                const float4 *wp =
                    (const float4 *)(sm->w + ((ci * KS + kh) * KS + kw) * C_OUT + slice * CT_SLICE_CH);
#pragma unroll
                for (int j4 = 0; j4 < CT_SLICE_CH / 4; j4++) {
                    float4 w = wp[j4];
#pragma unroll
                    for (int q = 0; q < CT_QUAD; q++) {
                        float xq = xv[q + kw];
                        acc[4 * j4][q] = fmaf(xq, w.x, acc[4 * j4][q]);
                        acc[4 * j4 + 1][q] = fmaf(xq, w.y, acc[4 * j4 + 1][q]);
                        acc[4 * j4 + 2][q] = fmaf(xq, w.z, acc[4 * j4 + 2][q]);
                        acc[4 * j4 + 3][q] = fmaf(xq, w.w, acc[4 * j4 + 3][q]);
                    }
                }
            }
        }
    }
}

#endif
