/*
 * v9: full fusion: pooling and logsumexp in the 3xTF32 conv's epilogue
 *
 * Defect of v8: c, 537 MB, goes to DRAM and comes back: written by the conv, read by v5's
 * epilogue, about 0.36 ms of bytes at the copy ceiling, and one more launch, for values that
 * were in registers when they were computed.
 *
 * Change: the tile already covers whole pooling windows (2 planes x 4 rows x 32 columns, at
 * even offsets: 1 x 2 x 16 windows, no window split between blocks) and all 64 channels. So:
 *   1. the two rows of a window are pieces mt and mt + 2 of the same lane: max in registers;
 *   2. its two columns are rows g and g + 1 of a piece, lanes 4 apart: one __shfl_xor_sync;
 *   3. its two planes are warps q and q + 2: both write their maxima to shared memory (the
 *      patch's space, no longer needed), and the logsumexp threads take the max of the two;
 *   4. the logsumexp over 64 channels: 8 threads a window, 8 channels each (channel j of
 *      thread k is 8j + k: the 32 threads of a warp then read 32 different banks), merged
 *      with shuffles (lse.cuh's online logsumexp and lse_merge), relu, one float written.
 * Only y (1 MB) leaves the SM.
 *
 * Prediction: v8's conv time minus c's write (0.18 ms at the ceiling) and the epilogue's
 * launch and read (v5, 0.18 ms [v5 epilogue_fwd]); the epilogue's few hundred instructions a
 * block are small against the conv's 27 x 4 taps.
 * Measured (H100, KernelBench shape, the record of 2026-11-27): the whole model 4.9363 ms
 * [4.9233 - 4.9475] [v9 model_fwd median_ms min_ms max_ms], 47.0 TFLOP/s [v9 model_fwd] effective,
 * in fp32 1.24x torch.compile [compile/v9 model_fwd] (6.14 ms [compile model_fwd]) and 1.31x eager
 * [eager/v9 model_fwd] (6.48 [eager model_fwd]), at fp32 accuracy (y rel_l2 against the double
 * model in the table's verification). 0.536 ms [v8-v9 model_fwd] less than v8, 0.18 ms more than
 * the predicted 0.36; the profile does not say where the extra came from. Nsight Compute
 * (1x32x16x128x128): 2.75 MB written to DRAM against v8's 57.6 MB. PyTorch's default precision,
 * whose conv runs in TF32, is ahead: v9 takes 2.16x [v9 model_fwd / compile model_fwd default]
 * torch.compile's 2.28 ms [compile model_fwd default] there. The README's target, 3.0 ms at fp32
 * accuracy, needs a faster 3xTF32 conv (v8).
 */
#include "lse.cuh"
#include "mma.cuh"

/* a window's 64 channels in s_pool, padded to 72 = 8 (mod 32): in step 4 a warp reads 4
 * windows' channels 8j + k, banks 8 win + k (mod 32), all 32 different */
#define POOL_STRIDE 72

__global__ void __launch_bounds__(IGEMM_THREADS, 2)
    k_fused(const float *__restrict__ x, const float *__restrict__ w_k,
            const float *__restrict__ bias, float *__restrict__ y, int d, int h, int w)
{
    extern __shared__ float4 smem4[];
    float *s_in = reinterpret_cast<float *>(smem4), *s_w = s_in + CI_CHUNK * CS;
    tile_pos tp = tile_of<C_OUT>(h, w);
    float acc[MT][NT][4];
    mma_tile<3, C_IN, C_OUT>(acc, s_in, s_w, x, w_k, tp, d, h, w);

    int lane = threadIdx.x & 31, q = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    /* s_pool[plane][window][channel], window = 16 py + px: warp q's rows 2 (q % 4) and
     * 2 (q % 4) + 1 are plane (q % 4) / 2, window row py = q % 2 */
    float *s_pool = s_in;
    int plane = (q & 3) >> 1, py = q & 1;
    __syncthreads(); /* every warp is done reading the patch */
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = fmaxf(acc[mt][nt][e], acc[mt + 2][nt][e]); /* 1. the window's rows */
                v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 4));    /* 2. its columns */
                if ((g & 1) == 0) {
                    int px = ((mt & 1) * 16 + g + (e >> 1) * 8) >> 1;
                    int co = (q >> 2) * 32 + nt * 8 + 2 * t + (e & 1);
                    s_pool[(plane * 32 + py * 16 + px) * POOL_STRIDE + co] = v;
                }
            }
    __syncthreads();
    /* 4. thread k of window win: channels k, k + 8, .. k + 56 */
    int win = threadIdx.x >> 3, k = threadIdx.x & 7;
    float m = -INFINITY, s = 0.0f;
#pragma unroll
    for (int j = 0; j < C_OUT / 8; j++) {
        int co = 8 * j + k;
        float v = fmaxf(s_pool[win * POOL_STRIDE + co], s_pool[(32 + win) * POOL_STRIDE + co]);
        lse_online(v + __ldg(bias + co), &m, &s); /* 3. the planes; the bias after the max */
    }
#pragma unroll
    for (int off = 1; off < 8; off <<= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off), s2 = __shfl_xor_sync(0xffffffffu, s, off);
        lse_merge(&m, &s, m2, s2);
    }
    int pd = d / 2, ph = h / 2, pw = w / 2;
    int gpd = tp.d0 / 2, gph = tp.h0 / 2 + (win >> 4), gpw = tp.w0 / 2 + (win & 15);
    if (k == 0 && gpd < pd && gph < ph && gpw < pw) {
        float z = m + __logf(s);
        y[(((size_t)tp.n * pd + gpd) * ph + gph) * pw + gpw] = z > 0.0f ? z : 0.0f;
    }
}

void v9_launch(const run_ctx *r, int scope)
{
    (void)scope;
    SMEM_OPT_IN(k_fused, SMEM_BYTES);
    const shape *s = &r->sh;
    weights_kmajor(r);
    k_fused<<<tile_grid<C_OUT>(s), IGEMM_THREADS, SMEM_BYTES>>>(r->x, r->w_k, r->bias, r->y, s->d, s->h,
                                                         s->w);
}
