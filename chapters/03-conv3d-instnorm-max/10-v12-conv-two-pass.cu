/*
 * v12: the whole model in two passes, the conv computed twice and never stored
 *
 * Defect of v1..v11 as a whole model: cuDNN's conv writes c (103 MB) and the epilogue reads it
 * back; PyTorch's conv alone (cuDNN) takes 0.54 ms [eager conv_fwd] here, about 9x the conv's
 * 0.062 ms at the FMA peak (model.h): cuDNN is not built for 3 input channels.
 * Change: the conv inside our own kernels (conv.cuh), c never in DRAM. The statistics need every
 * position before any output, so without clusters it takes two passes:
 *   pass 1 (v12_conv_stats): a block computes the conv at CONV_TILE positions of one sample into
 *     shared memory, then warp w reduces channel w exactly (the tile's mean, then its centred
 *     squares) and writes (count, mean, M2); v12_merge_tiles merges a slice's tiles by Chan's
 *     formula (common/welford.cuh) in order, scaling by m (a = c m: mean by m, M2 by m^2);
 *   pass 2 (v12_conv_apply): a thread per position recomputes the 16 conv values and writes y.
 * Bytes: x read twice (50 MB) and y written, 0.02 ms; the FLOPs bound it.
 * Prediction: at least twice the conv, 2 x 0.062 = 0.125 ms at the FMA peak.
 * Measured: 0.402 ms [v12 model_fwd], 16% of the floor [v12 model_fwd pct_floor], 1.39x v11's
 * whole model [v11/v12 model_fwd]; 21 TFLOP/s over the two convs. Half of that arithmetic is the
 * second conv, which v13 removes.
 */
#include "conv.cuh"
#include "model.h"
#include "sums.cuh"
#include "welford.cuh"

/* pass 1: one position a thread (CONV_TILE = 512 = CL_THREADS), 32 KB of static shared memory
 * for the tile; nothing of the conv reaches DRAM */
__global__ void __launch_bounds__(CL_THREADS)
v12_conv_stats(const float *__restrict__ x, const float *__restrict__ weight,
               const float *__restrict__ bias, welford *__restrict__ part, const shape sh,
               int tiles)
{
    __shared__ float vals[C_OUT * CONV_TILE];
    __shared__ __align__(16) conv_smem_w sw;
    int S = sh.s, n = blockIdx.y, lo = blockIdx.x * CONV_TILE, len = min(CONV_TILE, S - lo);
    load_weights(&sw, weight, bias);
    __syncthreads();
    for (int j = threadIdx.x; j < len; j += CL_THREADS) {
        float acc[C_OUT];
        conv_at_s(conv_corner(x, sh, n, lo + j), sh, &sw, acc);
#pragma unroll
        for (int co = 0; co < C_OUT; co++)
            vals[co * CONV_TILE + j] = acc[co];
    }
    __syncthreads();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float *row = vals + warp * CONV_TILE;
    float acc = 0.0f;
    for (int j = lane; j < len; j += 32)
        acc += row[j];
    float mu = __shfl_sync(FULL, warp_sum(acc), 0) / len, q = 0.0f;
    for (int j = lane; j < len; j += 32) {
        float d = row[j] - mu;
        q += d * d;
    }
    q = warp_sum(q);
    if (lane == 0) { /* statistics of c; the merge scales them by m */
        welford w = {len, mu, q};
        part[((size_t)n * C_OUT + warp) * tiles + blockIdx.x] = w;
    }
}

/* a thread per (n, c): Chan's merge of the tiles in order; a = c m scales mean by m, M2 by m^2 */
__global__ void v12_merge_tiles(const welford *__restrict__ part, int tiles, int segs,
                                const float *__restrict__ m, float *__restrict__ mean,
                                float *__restrict__ rstd, int S)
{
    int seg = blockIdx.x * blockDim.x + threadIdx.x;
    if (seg >= segs)
        return;
    welford w = {0, 0.0f, 0.0f};
    for (int t = 0; t < tiles; t++)
        w = chan_merge(w, part[(size_t)seg * tiles + t]);
    float mc = __ldg(m + seg % C_OUT);
    mean[seg] = w.mean * mc, rstd[seg] = rsqrtf(w.m2 * mc * mc / S + (float)IN_EPS);
}

/* pass 2: a thread per position recomputes the 16 conv values and writes y */
__global__ void __launch_bounds__(256)
v12_conv_apply(const float *__restrict__ x, const float *__restrict__ weight,
               const float *__restrict__ bias, const float *__restrict__ m,
               const float *__restrict__ mean, const float *__restrict__ rstd,
               float *__restrict__ y, const shape sh)
{
    __shared__ __align__(16) conv_smem_w sw;
    int S = sh.s, n_pos = sh.n * S;
    load_weights(&sw, weight, bias);
    __syncthreads();
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < n_pos; p += gridDim.x * blockDim.x) {
        int n = p / S, s = p - n * S;
        float acc[C_OUT], best = 0.0f;
        conv_at_s(conv_corner(x, sh, n, s), sh, &sw, acc);
#pragma unroll
        for (int co = 0; co < C_OUT; co++) {
            float mc = __ldg(m + co);
            float u = clampf1((acc[co] * mc - __ldg(mean + n * C_OUT + co)) *
                              __ldg(rstd + n * C_OUT + co)) * mc;
            if (co == 0 || u > best)
                best = u;
        }
        y[p] = best;
    }
}

void v12_model(const run_ctx *r)
{
    const shape *s = &r->sh;
    int tiles = ceil_div(s->s, CONV_TILE), segs = (int)seg_count(s), n_pos = (int)out_elems(s);
    v12_conv_stats<<<dim3(tiles, s->n), CL_THREADS, 0, r->stream>>>(r->x, r->weight, r->bias, r->wpart, *s,
                                                      tiles);
    v12_merge_tiles<<<ceil_div(segs, 128), 128, 0, r->stream>>>(r->wpart, tiles, segs, r->m, r->mean, r->rstd,
                                                  s->s);
    v12_conv_apply<<<grid_for(n_pos, 256, r->sm_count), 256, 0, r->stream>>>(r->x, r->weight, r->bias, r->m,
                                                              r->mean, r->rstd, r->y, *s);
}

void v12_launch(const run_ctx *r, int scope)
{
    (void)scope; /* model_fwd only */
    v12_model(r);
}
