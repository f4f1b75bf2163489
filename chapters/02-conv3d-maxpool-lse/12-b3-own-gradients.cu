/*
 * b3: the training step's conv gradients on our tensor cores, dx and dw in 3xTF32
 *
 * Defect of b2: its training step is the library's. Of b2's 34.39 ms [b2 train_step], cuDNN's
 * dx and dw take 27.6 (the README's per-op table), at 25 and 12.6 TFLOP/s against its forward's
 * 39, though each is the same 232 GFLOP; PyTorch in fp32 picks the same engines.
 * Change: dx and dw on v8's machinery (igemm.cuh's tile, mma.cuh's fragments, 3xTF32), dbias
 * by b2's deterministic sum. dx is a conv of dc with the kernel flipped and the channels
 * swapped (derived above own_dx), so it runs v8's kernel as conv_mma<3, 64, 32>; dw is a GEMM
 * whose long dimension is the 2.1 million positions (derived above b3_dw_3xtf32), summed in
 * shares that a second kernel adds in a fixed order, so dw is deterministic.
 * Prediction: each about v8's conv time, 5.3 ms; dw's mma need more shared loads and splits
 * (0.61 and 1.22 a mma, v8's 0.5 and 1.0), so 10-20% slower, about 6 ms. The step: 34.4
 * [b2 train_step] - (9.2 - 5.3) - (18.4 - 6), about 18 ms. Errors: a 3xTF32 product is off by up
 * to 1.25 x 2^-20 (common/tf32.cuh), 20 times the 2^-24 of an FMA's additions, so --test holds
 * dx's and dw's errors within 20x cuDNN's (problem.cu, B3_PEER_RATIO).
 * Measured (H100, KernelBench shape): the step 18.49 ms [b3 train_step], 56.2% of the floor
 * [b3 train_step pct_floor], 1.86x b2 [b2/b3 train_step]; in fp32 1.91x torch.compile
 * [compile/b3 train_step]; PyTorch's default precision, whose dx and dw run in TF32, is ahead:
 * 0.52x its speed [compile train_step default / b3 train_step]. Alone: dx 5.87 ms and dw 6.20
 * (cuDNN's 9.22 and 18.42: the README's gradient table), their errors 0.88x and 0.96x cuDNN's
 * at this shape, up to 3.8x and 7.2x on the test shapes' short sums. Tried: dx on the forward's
 * tile, and dw in one wave of shares: both lost (LABBOOK.md).
 */
#include "mma.cuh"

#define DW_WARPS 9 /* warp q: taps (q / 3, q % 3, 0 .. 2) */
#define DW_THREADS (32 * DW_WARPS)
#define DS 260 /* dc's channel stride in shared memory: 256 positions, = 4 (mod 32) */
#define XS 836 /* x's channel stride: the 816 of a patch, = 4 (mod 32) */
#define DW_SMEM_BYTES (4 * (C_OUT * DS + CI_CHUNK * XS)) /* 93312: two blocks an SM */
#define DW_BLOCKS_PER_SM 2
/* position shares: 4 waves of blocks (a wave: as many as the GPU holds at once, 132 SMs x 2
 * here), so that each sums a quarter of what one wave's would (the rounding error of a running
 * sum grows with the square root of its length: one wave measured twice the error, LABBOOK.md) */
#define DW_WAVES 4

/* tile i of the volume (row-major over sample, plane pair, row quad, column run: tile_grid's
 * blocks in launch order, the tile tile_of gives block i) */
__device__ static inline tile_pos tile_at(int i, int d, int h, int w)
{
    int tw = (w + TW - 1) / TW, th = (h + TH - 1) / TH, td = (d + TD - 1) / TD;
    tile_pos t;
    t.w0 = (i % tw) * TW, i /= tw;
    t.h0 = (i % th) * TH, i /= th;
    t.d0 = (i % td) * TD;
    t.n = i / td;
    return t;
}

/* dc's 64 channels at tile t's 256 positions into s_dc[co][position], zeros outside the
 * volume: 16-byte loads when rows are whole float4s (w % 4 == 0; the tile's columns start at
 * multiples of 32, so a float4 is then wholly inside or wholly outside) */
__device__ static inline void load_dc_tile(float *s_dc, const float *__restrict__ dc, tile_pos t,
                                           int d, int h, int w)
{
    size_t plane = (size_t)d * h * w;
    const float *dn = dc + (size_t)t.n * C_OUT * plane;
    if ((w & 3) == 0) {
        for (int e = threadIdx.x; e < C_OUT * TILE_M / 4; e += DW_THREADS) {
            int co = e / (TILE_M / 4), p = (e % (TILE_M / 4)) * 4;
            int gd = t.d0 + p / (TH * TW), gh = t.h0 + (p / TW) % TH, gw = t.w0 + p % TW;
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (gd < d && gh < h && gw < w)
                v = __ldg(reinterpret_cast<const float4 *>(dn + co * plane +
                                                           ((size_t)gd * h + gh) * w + gw));
            *reinterpret_cast<float4 *>(s_dc + co * DS + p) = v;
        }
    } else {
        for (int e = threadIdx.x; e < C_OUT * TILE_M; e += DW_THREADS) {
            int co = e / TILE_M, p = e % TILE_M;
            int gd = t.d0 + p / (TH * TW), gh = t.h0 + (p / TW) % TH, gw = t.w0 + p % TW;
            float v = 0.0f;
            if (gd < d && gh < h && gw < w)
                v = __ldg(dn + co * plane + ((size_t)gd * h + gh) * w + gw);
            s_dc[co * DS + p] = v;
        }
    }
}

/*
 * dw. With respect to the weights,
 *
 *     dw[co][ci][k] = sum over samples n and positions p of dc[n][co][p] x[n][ci][p + k - 1]
 *
 * a GEMM with M = 64 output channels, GEMM-N = 32 x 27 = 864 (input channel, tap), and K =
 * every position of every sample (2.1 million). It multiplies the same two tiles as v8 (x's
 * patch, and dc where v8 had the weights), summed the other way: each block takes a share of
 * the positions and sums them into a partial dw; b3_dw_sum adds the partials in a fixed order.
 *
 * A block: one chunk of 8 input channels (216 of GEMM-N) by all 64 output channels, 13824
 * sums, 48 a thread in 9 warps; warp q takes the taps (kd, kh) = (q / 3, q % 3), kw = 0 .. 2.
 * It walks tiles of 256 positions (igemm.cuh's) with a stride of the number of shares: for
 * each, dc's 64 x 256 values and x's 8-channel patch in shared memory, then 32 steps of k = 8
 * adjacent positions, with mma.cuh's fragments in swapped roles:
 *
 *     a0 = dc[co g][position t]            b0 = x[ci g][position t + tap]
 *
 * so A's 32 reads are 8 channels x 4 adjacent positions; a channel stride of 260 = 4 (mod 32)
 * puts them in 32 different banks (v8's 8 (mod 32) would cost this pattern a 2-way conflict);
 * the same for x with 836. The four blocks of a share (its 4 chunks) are adjacent in the grid,
 * so they run at the same time on the same tiles: dc comes from DRAM about once, from L2 the
 * other three times.
 */
/* Block (chunk, share): the partial dw of input channels 8 chunk .. + 7 over tiles share,
 * share + shares, ..., into part[share][co][ci][tap] (PyTorch's order). */
__global__ void __launch_bounds__(DW_THREADS, DW_BLOCKS_PER_SM)
    b3_dw_3xtf32(const float *__restrict__ x, const float *__restrict__ dc, float *__restrict__ part,
                 int n_tiles, int d, int h, int w)
{
    extern __shared__ float4 smem4[];
    float *s_dc = reinterpret_cast<float *>(smem4), *s_x = s_dc + C_OUT * DS;
    int chunk = blockIdx.x, lane = threadIdx.x & 31, q = threadIdx.x >> 5, g = lane >> 2,
        t = lane & 3;
    float acc[4][KS][4]; /* [m16 piece: 16 output channels][kw][fragment] */
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int kw = 0; kw < KS; kw++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[mt][kw][e] = 0.0f;
    const float *xa = s_x + g * XS + (q / KS) * PH * PW + (q % KS) * PW + t;
    const float *da = s_dc + g * DS + t;
    size_t plane = (size_t)d * h * w;
    for (int i = blockIdx.y; i < n_tiles; i += gridDim.y) {
        tile_pos tp = tile_at(i, d, h, w);
        __syncthreads(); /* the previous tile is read */
        load_dc_tile(s_dc, dc, tp, d, h, w);
        load_patch<C_OUT>(s_x, XS, x + ((size_t)tp.n * C_IN + chunk * CI_CHUNK) * plane, tp, d,
                          h, w, DW_THREADS);
        __syncthreads();
        for (int step = 0; step < TILE_M / 8; step++) {
            int row = step >> 2, col = (step & 3) * 8; /* row = plane * TH + row in the plane */
            const float *xs = xa + (row / TH) * PH * PW + (row % TH) * PW + col;
            const float *ds = da + row * TW + col;
            uint32_t b_hi[KS][2], b_lo[KS][2];
#pragma unroll
            for (int kw = 0; kw < KS; kw++) {
                split_tf32(xs[kw], &b_hi[kw][0], &b_lo[kw][0]);
                split_tf32(xs[kw + 4], &b_hi[kw][1], &b_lo[kw][1]);
            }
#pragma unroll
            for (int mt = 0; mt < 4; mt++) {
                const float *p = ds + mt * 16 * DS;
                float v[4] = {p[0], p[8 * DS], p[4], p[8 * DS + 4]};
                uint32_t a_hi[4], a_lo[4];
#pragma unroll
                for (int e = 0; e < 4; e++)
                    split_tf32(v[e], &a_hi[e], &a_lo[e]);
#pragma unroll
                for (int kw = 0; kw < KS; kw++) /* a step's 8 positions at a time */
                    mma_3xtf32(acc[mt][kw], a_hi, a_lo, b_hi[kw], b_lo[kw]);
            }
        }
    }
    /* C's fragment: c0 .. c3 = output channels g, g, g + 8, g + 8 of the piece, input
     * channels 2t, 2t + 1, 2t, 2t + 1 of the chunk */
    float *dst = part + (size_t)blockIdx.y * N_WEIGHT;
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int kw = 0; kw < KS; kw++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int co = mt * 16 + g + (e >> 1) * 8, ci = chunk * CI_CHUNK + 2 * t + (e & 1);
                dst[(co * C_IN + ci) * KVOL + q * KS + kw] = acc[mt][kw][e];
            }
}

/* dw = the shares' partials, added in order: thread i, weight i */
__global__ void b3_dw_sum(const float *__restrict__ part, float *__restrict__ dw, int shares)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N_WEIGHT) {
        float s = 0.0f;
        for (int j = 0; j < shares; j++)
            s += part[(size_t)j * N_WEIGHT + i];
        dw[i] = s;
    }
}

/* How many position shares: 4 waves of two blocks an SM over the 4 chunks, no more than there
 * are tiles. problem.cu sizes r->dw_part with dw_shares_max. */
int dw_shares_max(int sm_count)
{
    int shares = DW_WAVES * sm_count * DW_BLOCKS_PER_SM / N_CHUNKS;
    return shares > 0 ? shares : 1;
}

void own_dw(const run_ctx *r)
{
    SMEM_OPT_IN(b3_dw_3xtf32, DW_SMEM_BYTES);
    const shape *s = &r->sh;
    dim3 tiles = tile_grid<C_OUT>(s); /* the forward's tiles, numbered as tile_at reads them */
    int n_tiles = tiles.x * tiles.y * tiles.z;
    int shares = dw_shares_max(r->sm_count);
    if (shares > n_tiles)
        shares = n_tiles;
    b3_dw_3xtf32<<<dim3(N_CHUNKS, shares), DW_THREADS, DW_SMEM_BYTES, r->stream>>>(
        r->x, r->dc, r->dw_part, n_tiles, s->d, s->h, s->w);
    b3_dw_sum<<<(N_WEIGHT + 255) / 256, 256, 0, r->stream>>>(r->dw_part, r->dw, shares);
}

/*
 * dx. The forward is c[co][p] = sum over ci, k of w[co][ci][k] x[ci][p + k - 1], with p a
 * position (d, h, w), k a tap (kd, kh, kw), each component 0 .. 2, and x zero outside the
 * volume (padding 1). x[ci][p] reaches c[co][p - k + 1], so its gradient is
 *
 *     dx[ci][p] = sum over co, k of w[co][ci][k] dc[co][p - k + 1]
 *               = sum over co, k' of w[co][ci][2 - k'] dc[co][p + k' - 1]      (k' = 2 - k)
 *
 * with dc zero outside the volume (those c do not exist): a conv of dc with padding 1, the
 * kernel flipped in every component (the flat tap index 9 kd + 3 kh + kw becomes 26 - tap) and
 * the channels swapped: 64 in, 32 out, same size. It is v8's conv (07-v7-tf32.cu's
 * conv_mma<3, 64, 32>) on weights rearranged once (b3_weights_dx). With 32 output channels the
 * tile doubles its rows (2 x 8 x 32 positions, igemm.cuh), so that the block is still 8 warps
 * of 64 positions x 32 channels.
 */
/* dx's weights in the order its tile reads them, w_dx[co][tap][ci] = w[co][ci][26 - tap]:
 * thread i, i = (co 27 + tap) 32 + ci */
__global__ void b3_weights_dx(const float *__restrict__ w, float *__restrict__ w_dx)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N_WEIGHT) {
        int ci = i % C_IN, row = i / C_IN, tap = row % KVOL, co = row / KVOL;
        w_dx[i] = w[(co * C_IN + ci) * KVOL + KVOL - 1 - tap];
    }
}

void own_dx(const run_ctx *r)
{
    b3_weights_dx<<<(N_WEIGHT + 255) / 256, 256, 0, r->stream>>>(r->weight, r->w_dx);
    conv_mma<3, C_OUT, C_IN>(&r->sh, r->dc, r->w_dx, NULL, r->dx, r->stream);
}

void b3_launch(const run_ctx *r, int scope)
{
    (void)scope;
    conv_forward(r);
    v5_epilogue(r);
    epilogue_backward(r);
    own_dx(r), own_dw(r), own_dbias(r);
}
