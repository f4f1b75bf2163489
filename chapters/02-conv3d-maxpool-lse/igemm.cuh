/*
 * igemm.cuh: the conv as an implicit GEMM, the tile every own-conv version shares (v6 .. v9
 * launch it, and b3's gradients; igemm-patch.svg draws the tile and its patch).
 *
 * The conv is a matrix product. Number the conv's outputs of one sample by position m =
 * (d, h, w) and channel co, and its reduction by k = (ci, kd, kh, kw):
 *
 *     c[m][co] = bias[co] + sum_k A[m][k] B[k][co],   A[m][k] = x[ci][d + kd - 1][h + kh - 1][w + kw - 1]
 *                                                      B[k][co] = weight[co][ci][kd][kh][kw]
 *
 * M = N D H W positions (2.1 million at the KernelBench shape), N = 64 channels, K = 32 x 27 =
 * 864. "Implicit": A (im2col, 27 times the size of x: 7.2 GB here) is never built. Each block
 * computes a tile of TILE_M = 256 positions (2 planes x 4 rows x 32 columns) by all 64 channels,
 * and keeps in shared memory only what that tile reads: for 8 input channels at a time, the
 * input patch around the tile (4 x 6 x 34 values a channel: the tile and its one-value halo,
 * zeros where the halo leaves the volume, which is the conv's padding) and those channels'
 * weights. Every A[m][k] is then a shared-memory read at s_in + pos_off(m) + tap_off(k), a
 * position part plus a reduction part: the patch is read 27 times, once per tap, from shared
 * memory, and x from DRAM once (plus the halo: 816 values a channel for 256 outputs, 3.2x; most
 * of it from L2, as the neighbouring tile read it just before).
 * Shared memory per block: 8 channels x 840 (the patch, padded: CS) + 8 x 27 weight rows x 72
 * (64 channels, padded: WS) = 22272 floats, 87 KB: two blocks an SM (227 KB). Each block loads
 * a chunk, computes it, loads the next: while one waits for its loads the other computes, so
 * no software pipelining is needed.
 */
#ifndef CH02_IGEMM_CUH
#define CH02_IGEMM_CUH

#include "model.h"

/* b3's dx runs this tile with the channels swapped (64 in, 32 out: 12-b3-own-gradients.cu). So
 * that a block is still 8 warps of 64 positions x 32 channels, its tile is 2 planes x 8 rows x
 * 32 columns (512 positions); the sizes below that depend on it are written for `cout` output
 * channels, and the plain names are the forward's (cout = 64). */
#define TD 2                     /* the tile: planes, rows, columns of conv outputs */
#define TH_OF(cout) (4 * C_OUT / (cout))
#define TH TH_OF(C_OUT)          /* 4 */
#define TW 32
#define TILE_M (TD * TH * TW)    /* 256 positions */
#define PD (TD + 2)              /* the input patch: the tile and a halo of 1 */
#define PH_OF(cout) (TH_OF(cout) + 2)
#define PH PH_OF(C_OUT)
#define PW (TW + 2)
#define PATCH_OF(cout) (PD * PH_OF(cout) * PW)
#define PATCH PATCH_OF(C_OUT)    /* 816 */
/* a channel's stride in s_in: 840 = 8 (mod 32) (dx: 1384). The tensor-core versions' A
 * fragments read 8 adjacent positions (banks p .. p + 7) of 4 channels t = 0 .. 3 at once:
 * channels 8 banks apart fill all 32 banks, no conflict. */
#define CS_OF(cout) ((PATCH_OF(cout) + 23) / 32 * 32 + 8) /* the first >= the patch, 8 mod 32 */
#define CS CS_OF(C_OUT)          /* 840 */
#define CI_CHUNK 8               /* input channels in shared memory at a time */
#define N_CHUNKS (C_IN / CI_CHUNK)
/* a weight row (one input channel, one tap, 64 output channels) in s_w: 72 floats, so that the
 * B fragments (8 output channels of 4 input channels, the channels 27 rows = 27 x 72 = 24 (mod
 * 32) banks apart) fall in 32 different banks; dx's rows of 32 channels: 40, 27 x 40 = 24 (mod
 * 32) too */
#define W_STRIDE(cout) ((cout) + 8)
#define WS W_STRIDE(C_OUT)       /* 72 */
#define IGEMM_THREADS 256
#define IGEMM_SMEM_BYTES(cout) (4 * (CI_CHUNK * CS_OF(cout) + CI_CHUNK * KVOL * W_STRIDE(cout)))
#define SMEM_BYTES IGEMM_SMEM_BYTES(C_OUT) /* 89088; dx's 78848 */

/* The weights in the order the tiles read them, w_k[ci][kd][kh][kw][co] (PyTorch's are
 * [co][ci][kd][kh][kw]): a chunk is then 8 x 27 rows of 64 contiguous floats. One small kernel
 * (55296 floats) before each forward; its time is in every version's. */
__global__ static void k_weights_kmajor(const float *__restrict__ w, float *__restrict__ w_k)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x; /* i = (ci * 27 + tap) * 64 + co */
    if (i < N_WEIGHT) {
        int co = i % C_OUT, row = i / C_OUT;
        w_k[i] = w[co * C_IN * KVOL + row];
    }
}

static inline void weights_kmajor(const run_ctx *r)
{
    k_weights_kmajor<<<(N_WEIGHT + 255) / 256, 256, 0, r->stream>>>(r->weight, r->w_k);
}

/* Where a block's tile lies: blockIdx.x = (tile row, tile column), y = tile plane, z = sample */
typedef struct {
    int n, d0, h0, w0;
} tile_pos;

template <int COUT>
__device__ static inline tile_pos tile_of(int h, int w)
{
    int tiles_w = (w + TW - 1) / TW;
    tile_pos t;
    t.n = blockIdx.z;
    t.d0 = blockIdx.y * TD;
    t.h0 = (blockIdx.x / tiles_w) * TH_OF(COUT);
    t.w0 = (blockIdx.x % tiles_w) * TW;
    return t;
}

template <int COUT>
static inline dim3 tile_grid(const shape *s)
{
    return dim3(((s->w + TW - 1) / TW) * ((s->h + TH_OF(COUT) - 1) / TH_OF(COUT)),
                (s->d + TD - 1) / TD, s->n);
}

/* Loads the input patch of tile t (the tile for COUT output channels) for 8 channels (xc: the
 * first of them, d h w floats apart) into s_in, a channel every `stride` floats, with zeros
 * outside the volume. All `threads` threads of the block take part (a constant once inlined);
 * the caller syncs before and after. */
template <int COUT>
__device__ static inline void load_patch(float *s_in, int stride, const float *__restrict__ xc,
                                         tile_pos t, int d, int h, int w, int threads)
{
    const int ph = PH_OF(COUT), patch = PATCH_OF(COUT);
    for (int e = threadIdx.x; e < CI_CHUNK * patch; e += threads) {
        int ci = e / patch, r = e - ci * patch;
        int pz = r / (ph * PW), r2 = r - pz * (ph * PW), py = r2 / PW, px = r2 - py * PW;
        int gd = t.d0 + pz - 1, gh = t.h0 + py - 1, gw = t.w0 + px - 1;
        float v = 0.0f;
        if (gd >= 0 && gd < d && gh >= 0 && gh < h && gw >= 0 && gw < w)
            v = __ldg(xc + (((size_t)ci * d + gd) * h + gh) * w + gw);
        s_in[ci * stride + r] = v;
    }
}

/* Loads chunk `chunk` (input channels 8 chunk .. 8 chunk + 7 of CIN) into shared memory: the
 * input patch with zeros outside the volume, and the chunk's weight rows (w_k[cin][tap][cout],
 * COUT to a row). Every thread of the block takes part; the caller syncs before and after. */
template <int CIN, int COUT>
__device__ static inline void load_chunk(float *s_in, float *s_w, const float *__restrict__ x,
                                         const float *__restrict__ w_k, tile_pos t, int chunk,
                                         int d, int h, int w)
{
    load_patch<COUT>(s_in, CS_OF(COUT), x + ((size_t)t.n * CIN + chunk * CI_CHUNK) * d * h * w,
                     t, d, h, w, IGEMM_THREADS);
    const float4 *src = reinterpret_cast<const float4 *>(w_k + chunk * CI_CHUNK * KVOL * COUT);
    for (int e = threadIdx.x; e < CI_CHUNK * KVOL * (COUT / 4); e += IGEMM_THREADS) {
        int row = e / (COUT / 4), q = e - row * (COUT / 4);
        reinterpret_cast<float4 *>(s_w + row * W_STRIDE(COUT))[q] = __ldg(src + e);
    }
}


#endif
