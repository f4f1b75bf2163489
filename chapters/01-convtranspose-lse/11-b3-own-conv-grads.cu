/*
 * b3: the training step with the conv's own kernels: forward by parity, dw and dbias reduced
 *
 * Defect of b2's training step: 14.2 ms [b2 train_step], most of it cuDNN's conv pieces (the
 * README's per-op table: the transposed conv about 6 ms, dw about 4, dx about 2). A per-channel
 * sum over 1 GB has a 0.34 ms floor; the conv's 5 GFLOP about 0.08 ms.
 * Change: b2's epilogue kept, three of the four conv pieces ours:
 *   - the transposed conv writing c, by v6's parity scheme (parity.cuh; v6 with the logsumexp
 *     replaced by 128 stores a thread);
 *   - dbias: per channel, blocks sum slices of every sample's plane, one partial each, then a
 *     fixed-order final sum (common/reduce.cuh): deterministic;
 *   - dw: dw[ci][co][k] = sum over n, j of x[n][ci][j] dc[n][co][2j - 1 + k]. A block takes one
 *     output channel co and strides over input positions j; each thread keeps the 81 sums (3 ci
 *     x 27 taps) in registers over all its positions, then the block reduces them (warp
 *     shuffles, common/reduce.cuh's, then shared memory) into one partial per weight; a final
 *     kernel adds the blocks' partials in a fixed order: deterministic, no atomics.
 * dx stays cuDNN's Conv3d forward.
 * Prediction, each piece at the copy ceiling: the conv writes 1.008 GB (0.34 ms), dw reads dc and
 * x (1.03 GB, 0.35 ms), dbias reads dc (0.34 ms); with b2's epilogue forward + backward, 1.18 ms
 * [b2 epilogue_fwdbwd], and cuDNN's dx, about 2 ms: 0.34 + 0.35 + 0.34 + 1.18 + 2 = 4.2 ms.
 * Measured: 4.87 ms [b3 train_step], 2.92x b2's step [b2/b3 train_step] and 2.89x torch.compile's
 * in fp32 [compile/b3 train_step]. The pieces timed alone (the notes `make chapter-1` prints) put
 * most of the miss in dw and dbias, each about twice its time at the ceiling (LABBOOK.md).
 */
#include "model.h"
#include "parity.cuh"

__global__ void __launch_bounds__(TILE_W *TILE_H)
    b3_conv_transpose_parity(const float *__restrict__ x, const float *__restrict__ weight,
                             const float *__restrict__ conv_bias, float *__restrict__ c, int d,
                             int h, int w)
{
    __shared__ float4 s_w4[C_OUT][C_IN][TAPS_PAD / 4];
    __shared__ float s_bias[C_OUT];
    __shared__ float tile[C_IN][2][TILE_H + 1][TILE_W + 1];
    int jh0, jw0;
    cube_at at = cube_position(w, &jh0, &jw0);
    stage_weights(s_w4, s_bias, weight, conv_bias, 1.0f);
    load_input_tile(x, tile, at, jh0, jw0, d, h, w);
    __syncthreads();
    if (at.jw >= w || at.jh >= h)
        return;
    int od = 2 * d - 1, oh = 2 * h - 1, ow = 2 * w - 1, s = od * oh * ow;
    float xin[C_IN][2][2][2];
    cube_inputs(tile, xin);
#pragma unroll 2
    for (int co = 0; co < C_OUT; co++) {
        float acc[8];
        cube_channel(s_w4, s_bias, xin, co, acc);
        float *cn = c + (at.n * C_OUT + co) * s;
#pragma unroll
        for (int o = 0; o < 8; o++) {
            int zd = 2 * at.jd + (o >> 2), zh = 2 * at.jh + ((o >> 1) & 1);
            int zw = 2 * at.jw + (o & 1);
            if (zd < od && zh < oh && zw < ow)
                cn[(zd * oh + zh) * ow + zw] = acc[o];
        }
    }
}

/* dw stage 1: block (bx, co) strides over input positions; writes 81 partials at
 * partials[(co * 81 + q) * gridDim.x + bx], q = ci * 27 + k, so stage 2 adds contiguous runs */
__global__ void __launch_bounds__(256)
    b3_dw_partials(const float *__restrict__ x, const float *__restrict__ dc,
                   float *__restrict__ partials, int n, int d, int h, int w)
{
    __shared__ float red[8][DW_TAPS];
    int co = blockIdx.y, od = 2 * d - 1, oh = 2 * h - 1, ow = 2 * w - 1, s = od * oh * ow;
    int positions = n * d * h * w;
    float acc[DW_TAPS];
#pragma unroll
    for (int q = 0; q < DW_TAPS; q++)
        acc[q] = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < positions;
         i += gridDim.x * blockDim.x) {
        int jw = i % w, r = i / w, jh = r % h;
        r /= h;
        int jd = r % d, nn = r / d;
        float xv[C_IN];
#pragma unroll
        for (int ci = 0; ci < C_IN; ci++)
            xv[ci] = x[(((nn * C_IN + ci) * d + jd) * h + jh) * w + jw];
        const float *o = dc + (nn * C_OUT + co) * s;
#pragma unroll
        for (int k = 0; k < KVOL; k++) {
            int zd = 2 * jd - 1 + k / 9, zh = 2 * jh - 1 + (k / 3) % 3, zw = 2 * jw - 1 + k % 3;
            float v = (zd >= 0 && zd < od && zh >= 0 && zh < oh && zw >= 0 && zw < ow)
                          ? o[(zd * oh + zh) * ow + zw]
                          : 0.0f;
#pragma unroll
            for (int ci = 0; ci < C_IN; ci++)
                acc[ci * KVOL + k] = fmaf(xv[ci], v, acc[ci * KVOL + k]);
        }
    }
    /* reduce the 81 sums over the block: shuffles within each warp, then across warps */
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int q = 0; q < DW_TAPS; q++) {
        float v = acc[q];
        for (int off = 16; off > 0; off >>= 1)
            v += __shfl_down_sync(0xffffffffu, v, off);
        if (lane == 0)
            red[warp][q] = v;
    }
    __syncthreads();
    if (threadIdx.x < DW_TAPS) {
        float v = 0.0f;
        for (int wp = 0; wp < (int)(blockDim.x >> 5); wp++)
            v += red[wp][threadIdx.x];
        partials[(co * DW_TAPS + threadIdx.x) * gridDim.x + blockIdx.x] = v;
    }
}

/* [co][ci][k] -> PyTorch's [ci][co][k] */
__global__ void b3_dw_reorder(const float *__restrict__ by_co, float *__restrict__ dw)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N_WEIGHT)
        return;
    int k = i % KVOL, co = (i / KVOL) % C_OUT, ci = i / (KVOL * C_OUT);
    dw[i] = by_co[(co * C_IN + ci) * KVOL + k];
}

void b3_conv_forward(const run_ctx *r)
{
    const shape *s = &r->sh;
    b3_conv_transpose_parity<<<cube_grid(s), dim3(TILE_W, TILE_H), 0, r->stream>>>(
         r->x, r->weight, r->conv_bias, r->c, s->d, s->h, s->w);
}

void own_dw(const run_ctx *r)
{
    const shape *s = &r->sh;
    b3_dw_partials<<<dim3(DW_BLOCKS, C_OUT), 256, 0, r->stream>>>(r->x, r->dc, r->partials,
                                                                   s->n, s->d, s->h, s->w);
    /* the partials of weight (co, ci, k) are contiguous: one sum a weight, then PyTorch's order */
    sum_segments(r->partials, C_OUT * DW_TAPS, DW_BLOCKS, 64, r->dw_by_co, r->stream);
    b3_dw_reorder<<<(N_WEIGHT + 255) / 256, 256, 0, r->stream>>>(r->dw_by_co, r->dw);
}

void own_dbias(const run_ctx *r)
{
    sum_channels(r->dc, r->sh.n, C_OUT, r->sh.s, DBIAS_BLOCKS, r->partials2, r->dbias,
                 r->stream);
}

void b3_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_TRAIN)
        b3_conv_forward(r);
    v7_epilogue(r);
    b2_backward(r);
    if (scope == SCOPE_TRAIN)
        lib_dx(r), own_dw(r), own_dbias(r);
}
