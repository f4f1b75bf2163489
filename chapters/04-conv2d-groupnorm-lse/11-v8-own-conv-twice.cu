/*
 * v8: the whole model with the conv inside, computed twice, c never stored
 *
 * Defect of v1..v7 as a whole model: the library conv writes c (520 MB) to DRAM and the
 * epilogue reads it back at least once, and cuDNN's conv is itself slow here: 8 input channels
 * give it little to tile (PyTorch's takes 1.113 ms [eager conv_fwd] against 0.280 at the FMA
 * peak). v6's whole model takes 1.462 ms [v6 model_fwd], four fifths of it the conv.
 * Change: our own conv (conv-tile.cuh: a thread 4 positions x 8 channels in registers), and
 * since no output can be written before a sample's statistics are complete, two passes over
 * it, neither of which stores c: pass 1 (conv-stats.cuh: k_shifts, k_conv_stats, k_finalize)
 * the conv and each group's shifted sums, then the statistics; pass 2 (v8_conv_apply) the same
 * tiles again, the epilogue in base 2 from registers (apply.cuh), each thread's part of the
 * logsumexp over its 8 channels, the 8 slices' (max, sum) joined in shared memory, y written.
 * What it costs instead of c's 1040 MB of DRAM traffic: the conv's 18.7 GFLOP a second time.
 * Prediction: two convs are 37.5 GFLOP, 0.56 ms at 66.9 TFLOP/s; the epilogue adds about 15
 * instructions a value to pass 2's 72 FMAs (20%): about 0.62 ms if the FMA pipes stayed busy.
 * Measured (H100 80GB HBM3, KernelBench shape, data/h100/ch04.csv): 1.1444 ms [v8 model_fwd],
 * 32.7 TFLOP/s over the two convs (49% of the peak): 1.28x faster [v6/v8 model_fwd] than v6's
 * whole model and 2.09x faster [compile/v8 model_fwd] than torch.compile's in fp32, but twice
 * the prediction. c never reaches DRAM (Nsight Compute at 32x8x128x128: pass 1 reads x, pass 2
 * almost nothing). The FMA pipe is 60% busy: a tile's input is loaded after the previous tile's
 * barrier, so the warps wait for L2 once a tile (cp.async for the next tile would hide it).
 */
#include "apply.cuh"
#include "conv-stats.cuh"
#include "model.h"

/* pass 2: the conv again, the epilogue from registers, y; the CT_SLICES slices' (max, sum) of a
 * position meet in lp[row][slice][column] */
__global__ void __launch_bounds__(CT_THREADS, CT_MINB)
v8_conv_apply(const float *__restrict__ x, const float *__restrict__ weight, const float *__restrict__ bias,
              const float *__restrict__ mean, const float *__restrict__ rstd, const float *__restrict__ gamma,
              const float *__restrict__ beta, float *__restrict__ y, const shape sh, int segs, int tiles)
{
    __shared__ conv_tile_smem sm;
    __shared__ __align__(16) float sa2[C_OUT], sb2[C_OUT];
    __shared__ float2 lp[CT_ROWS][CT_SLICES][CT_SEG];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, slice = warp % CT_SLICES, row = warp / CT_SLICES;
    tile_load_weights(&sm, weight, bias);
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        tile_at a = tile_of(t, sh, segs);
        tile_load_x(&sm.x[0][0][0], x, sh, a);
        affine_of2(sa2, sb2, mean + a.n * GROUPS, rstd + a.n * GROUPS, gamma, beta);
        __syncthreads();
        float acc[CT_SLICE_CH][CT_QUAD];
        tile_conv(&sm, row, slice, lane, acc);
        float m[CT_QUAD], s[CT_QUAD];
#pragma unroll
        for (int q = 0; q < CT_QUAD; q++)
            m[q] = -INFINITY, s[q] = 0.0f;
#pragma unroll
        for (int j = 0; j < CT_SLICE_CH; j++) {
            int ch = slice * CT_SLICE_CH + j;
            float a2 = sa2[ch], b2 = sb2[ch];
#pragma unroll
            for (int q = 0; q < CT_QUAD; q++) { /* log2(e) r, apply.cuh */
                acc[j][q] = r2_of(acc[j][q], tanh_of_u(fmaf(acc[j][q], a2, b2)));
                m[q] = fmaxf(m[q], acc[j][q]);
            }
        }
#pragma unroll
        for (int j = 0; j < CT_SLICE_CH; j++)
#pragma unroll
            for (int q = 0; q < CT_QUAD; q++)
                s[q] += ex2_approx(acc[j][q] - m[q]);
#pragma unroll
        for (int q = 0; q < CT_QUAD; q++)
            lp[row][slice][CT_QUAD * lane + q] = make_float2(m[q], s[q]);
        __syncthreads();
        /* a thread a position joins the slices' (max, sum) and writes y */
        for (int i = threadIdx.x; i < CT_ROWS * CT_SEG; i += CT_THREADS) {
            int rr = i / CT_SEG, col = i % CT_SEG, oh = a.oh0 + rr, ow = a.ow0 + col;
            if (oh < sh.oh && ow < sh.ow) {
                float mm = -INFINITY, ss = 0.0f;
#pragma unroll
                for (int k = 0; k < CT_SLICES; k++)
                    mm = fmaxf(mm, lp[rr][k][col].x);
#pragma unroll
                for (int k = 0; k < CT_SLICES; k++)
                    ss += lp[rr][k][col].y * ex2_approx(lp[rr][k][col].x - mm);
                y[(size_t)a.n * sh.s + (size_t)oh * sh.ow + ow] = (mm + lg2_approx(ss)) * LN2_F;
            }
        }
        /* the next tile's first __syncthreads orders these reads of lp before its writes */
    }
}

void v8_launch(const run_ctx *r, int scope)
{
    (void)scope; /* whole model only */
    static int stats_per_sm, apply_per_sm;
    const shape *s = &r->sh;
    int segs = tile_segs(s), tiles = tile_count(s), segs_total = s->n * GROUPS;
    k_shifts<<<ceil_div(segs_total, 128), 128>>>(r->x, r->weight, r->bias, r->shift, *s);
    k_conv_stats<false><<<resident_grid((const void *)k_conv_stats<false>, &stats_per_sm, r, tiles, 0),
                          CT_THREADS>>>(r->x, r->weight, r->bias, r->shift, r->rowpart, NULL, *s, segs, tiles);
    k_finalize<<<ceil_div(segs_total * 32, 256), 256>>>(r->rowpart, r->shift, r->mean, r->rstd, segs_total,
                                                       s->oh * segs, s->s);
    v8_conv_apply<<<resident_grid((const void *)v8_conv_apply, &apply_per_sm, r, tiles, 0), CT_THREADS>>>(
        r->x, r->weight, r->bias, r->mean, r->rstd, r->gamma, r->beta, r->y, *s, segs, tiles);
}
