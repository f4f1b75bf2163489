/*
 * conv-stats.cuh: pass 1 of v8 and v9, the conv on conv-tile.cuh's tiles with each group's
 * shifted sums, then the statistics from them (v8 and v9 launch all three kernels).
 *
 *   k_shifts       a thread per (n, group): the group's first conv value, the shift K of its
 *                  sums (v6's shifted sums: with one K a group, every partial simply adds);
 *   k_conv_stats   a persistent block per resident slot walks the tiles; each warp computes its
 *                  (row, slice) of the tile and reduces its 4 groups' shifted sums
 *                  s1 = sum (c - K), s2 = sum (c - K)^2 by warp shuffles into one float2 a
 *                  (group, output row, column segment): no atomics. With STORE (v9) the tile's
 *                  c also goes to DRAM, through shared memory so that the stores are coalesced;
 *   k_finalize     a warp per (n, group) adds its partials in a fixed order and writes mean and
 *                  rstd.
 */
#ifndef CH04_CONV_STATS_CUH
#define CH04_CONV_STATS_CUH

#include "conv-tile.cuh"
#include "model.h"
#include "reduce.cuh"

/* the shift of group G of sample n: its first value, conv channel 4 G at output (0, 0) */
static __global__ void k_shifts(const float *__restrict__ x, const float *__restrict__ weight,
                                const float *__restrict__ bias, float *__restrict__ shift, const shape sh)
{
    int seg = blockIdx.x * blockDim.x + threadIdx.x;
    if (seg >= sh.n * GROUPS)
        return;
    int n = seg / GROUPS, co = seg % GROUPS * CPG;
    float v = __ldg(bias + co);
    for (int ci = 0; ci < C_IN; ci++)
        for (int kh = 0; kh < KS; kh++)
            for (int kw = 0; kw < KS; kw++)
                v = fmaf(__ldg(weight + ((co * C_IN + ci) * KS + kh) * KS + kw),
                         __ldg(x + (((size_t)n * C_IN + ci) * sh.h + kh) * sh.w + kw), v);
    shift[seg] = v;
}

/* v9: a warp's 8 channels x 128 columns of c, through shared memory so that the stores are
 * coalesced: a lane's registers hold 4 consecutive columns, and a store of those from every lane
 * would touch 512 bytes in 4-byte pieces; from shared memory, 32 lanes store 32 consecutive
 * floats. (Columns are not 16-byte aligned in DRAM unless OW is a multiple of 4, so float4
 * stores are not an option at 126.) */
__device__ static inline void store_c(float *st, float acc[CT_SLICE_CH][CT_QUAD], float *__restrict__ c,
                                      const shape sh, tile_at a, int oh, int slice, int lane)
{
#pragma unroll
    for (int j = 0; j < CT_SLICE_CH; j++)
        *(float4 *)(st + j * CT_SEG + CT_QUAD * lane) = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
    __syncwarp();
    if (oh < sh.oh)
#pragma unroll
        for (int j = 0; j < CT_SLICE_CH; j++) {
            float *row = c + (((size_t)a.n * C_OUT + slice * CT_SLICE_CH + j) * sh.oh + oh) * sh.ow;
#pragma unroll
            for (int k = 0; k < CT_QUAD; k++) {
                int col = lane + 32 * k;
                if (a.ow0 + col < sh.ow)
                    row[a.ow0 + col] = st[j * CT_SEG + col];
            }
        }
    __syncwarp(); /* the next tile's writes to st come after these reads */
}

/* pass 1: block b takes tiles b, b + gridDim.x, ...; partial (s1, s2) of group G of sample n,
 * output row oh, column segment sg at part[(n 16 + G) P + oh segs + sg], P = OH segs. With
 * STORE (v9, below), the tile's c also goes to DRAM, through `stage`, CT_STAGE bytes of dynamic
 * shared memory. */
template <bool STORE>
__global__ void __launch_bounds__(CT_THREADS, CT_MINB)
k_conv_stats(const float *__restrict__ x, const float *__restrict__ weight, const float *__restrict__ bias,
             const float *__restrict__ shift, float2 *__restrict__ part, float *__restrict__ c,
             const shape sh, int segs, int tiles)
{
    __shared__ conv_tile_smem sm;
    extern __shared__ __align__(16) float stage[];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, slice = warp % CT_SLICES, row = warp / CT_SLICES;
    int P = sh.oh * segs;
    tile_load_weights(&sm, weight, bias);
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        tile_at a = tile_of(t, sh, segs);
        tile_load_x(&sm.x[0][0][0], x, sh, a);
        float k[CT_SLICE_CH / CPG]; /* the shifts of this thread's groups */
#pragma unroll
        for (int g = 0; g < CT_SLICE_CH / CPG; g++)
            k[g] = __ldg(shift + a.n * GROUPS + slice * (CT_SLICE_CH / CPG) + g);
        __syncthreads();
        float acc[CT_SLICE_CH][CT_QUAD];
        tile_conv(&sm, row, slice, lane, acc);
        int oh = a.oh0 + row;
        if (STORE)
            store_c(stage + warp * CT_SLICE_CH * CT_SEG, acc, c, sh, a, oh, slice, lane);
        float s1[CT_SLICE_CH / CPG], s2[CT_SLICE_CH / CPG];
#pragma unroll
        for (int g = 0; g < CT_SLICE_CH / CPG; g++) {
            s1[g] = 0.0f, s2[g] = 0.0f;
#pragma unroll
            for (int q = 0; q < CT_QUAD; q++)
                if (a.ow0 + CT_QUAD * lane + q < sh.ow)
#pragma unroll
                    for (int j = 0; j < CPG; j++) {
                        float d = acc[g * CPG + j][q] - k[g];
                        s1[g] += d, s2[g] = fmaf(d, d, s2[g]);
                    }
            s1[g] = warp_sum(s1[g]), s2[g] = warp_sum(s2[g]);
        }
        if (lane == 0 && oh < sh.oh)
#pragma unroll
            for (int g = 0; g < CT_SLICE_CH / CPG; g++)
                part[(size_t)(a.n * GROUPS + slice * (CT_SLICE_CH / CPG) + g) * P + oh * segs + a.sg] =
                    make_float2(s1[g], s2[g]);
        __syncthreads(); /* the next tile's input overwrites this one's */
    }
}

/* a warp per (n, group): its P partials in a fixed order (common/reduce.cuh), then
 * mean = K + s1 / m and M2 = s2 - s1^2 / m with m = 4 S values (v6's publish_stats) */
static __global__ void k_finalize(const float2 *__restrict__ part, const float *__restrict__ shift,
                                  float *__restrict__ mean, float *__restrict__ rstd, int segs_total, int P, int S)
{
    int seg = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (seg >= segs_total)
        return;
    float2 t = warp_sum_partials(part + (size_t)seg * P, P);
    if ((threadIdx.x & 31) == 0) {
        float m = (float)(CPG * S), d = t.x / m;
        mean[seg] = shift[seg] + d;
        rstd[seg] = rsqrtf(fmaxf(t.y - t.x * d, 0.0f) / m + (float)GN_EPS);
    }
}

#endif
