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
 * Only y (1 MB) leaves the SM. (A shuffle, __shfl_xor_sync, hands a register to the lane whose
 * index differs in the given bits; chapter 4 teaches them.)
 * Prediction: v8's time minus c's write and v5's read, about 0.36 ms.
 * Measured (H100, KernelBench shape): 4.94 ms [v9 model_fwd], 70.2% of the floor
 * [v9 model_fwd pct_floor], 1.11x v8 [v8/v9 model_fwd]: 0.54 ms [v8-v9 model_fwd] saved, more
 * than predicted (the profile does not say where the rest came from). In fp32, 1.24x
 * torch.compile [compile/v9 model_fwd]; PyTorch's default precision, whose conv runs in TF32,
 * is ahead: 0.46x its speed [compile model_fwd default / v9 model_fwd].
 */
#include "lse.cuh"
#include "mma.cuh"

/* a window's 64 channels in s_pool, padded to 72 = 8 (mod 32): in step 4 a warp reads 4
 * windows' channels 8j + k, banks 8 win + k (mod 32), all 32 different */
#define POOL_STRIDE 72

__global__ void __launch_bounds__(IGEMM_THREADS, 2)
    v9_fused(const float *__restrict__ x, const float *__restrict__ w_k,
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
    SMEM_OPT_IN(v9_fused, SMEM_BYTES);
    const shape *s = &r->sh;
    weights_kmajor(r);
    v9_fused<<<tile_grid<C_OUT>(s), IGEMM_THREADS, SMEM_BYTES, r->stream>>>(
        r->x, r->w_k, r->bias, r->y, s->d, s->h, s->w);
}
