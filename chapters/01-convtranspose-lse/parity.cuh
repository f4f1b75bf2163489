/*
 * parity.cuh: the transposed conv by output parity, the pieces v5, v6, v8 and b3's conv forward
 * share. v5 (the core) uses the geometry: TAP_OUT and TAP_IN, the tile and cube_grid,
 * cube_position, load_input_tile, cube_inputs and cube_store. The rest, from stage_weights on
 * (shared-memory weights, the base-2 logsumexp), is v6's, v8's and b3's: the advanced part.
 *
 * Along one axis an output o receives input i through tap k when o = 2i - 1 + k. A thread that
 * owns input index j and the two outputs 2j and 2j+1 along an axis needs
 *     output 2j   (even):  k = 1 from input j
 *     output 2j+1 (odd):   k = 2 from input j,  k = 0 from input j + 1
 * so over three axes its 2x2x2 output cube at (2jd, 2jh, 2jw) takes each of the 27 taps exactly
 * once per (ci, co), from the 2x2x2 inputs at (jd .. jd+1, jh .. jh+1, jw .. jw+1).
 */
#ifndef CH01_PARITY_CUH
#define CH01_PARITY_CUH

#include <math.h>

#include "sfu.cuh"
#include "tail.cuh"

/* tap k -> which output of the pair (0: 2j, 1: 2j+1) and which input (0: j, 1: j+1) */
#define TAP_OUT(k) ((k) == 1 ? 0 : 1)
#define TAP_IN(k) ((k) == 0 ? 1 : 0)

/* a block: 32 (w) x 4 (h) threads, one input column each, at one depth jd of one sample */
#define TILE_W 32
#define TILE_H 4
#define TAPS_PAD 28 /* 27 taps + 1: a (co, ci)'s weights as 7 float4 */

/* The grid of v5, v6 and b3's conv: blockIdx.x = a tile of TILE_H x TILE_W input columns
 * (tile row, tile column), blockIdx.y = the input depth jd, blockIdx.z = the sample n */
static inline dim3 cube_grid(const shape *s)
{
    return dim3(((s->w + TILE_W - 1) / TILE_W) * ((s->h + TILE_H - 1) / TILE_H), s->d, s->n);
}

typedef struct {
    int n, jd, jh, jw; /* a thread's input position; its output cube is at (2jd, 2jh, 2jw) */
} cube_at;

/* this thread's input position, and in (jh0, jw0) its block's first input column */
__device__ static inline cube_at cube_position(int w, int *jh0, int *jw0)
{
    int tiles_w = (w + TILE_W - 1) / TILE_W;
    *jw0 = (blockIdx.x % tiles_w) * TILE_W, *jh0 = (blockIdx.x / tiles_w) * TILE_H;
    cube_at at = {(int)blockIdx.z, (int)blockIdx.y, *jh0 + (int)threadIdx.y,
                  *jw0 + (int)threadIdx.x};
    return at;
}

/* Stages the block's inputs x[n][ci][jd .. jd+1][jh0 .. jh0+TILE_H][jw0 .. jw0+TILE_W] in
 * shared memory; inputs past an edge are 0 (they feed only outputs past the edge). Every thread
 * of the block copies a share; the caller synchronises before reading the tile. */
__device__ static inline void load_input_tile(const float *__restrict__ x,
                                              float (*tile)[2][TILE_H + 1][TILE_W + 1],
                                              cube_at at, int jh0, int jw0, int d, int h, int w)
{
    const int rows = TILE_H + 1, cols = TILE_W + 1;
    float *flat = &tile[0][0][0][0];
    for (int t = threadIdx.y * TILE_W + threadIdx.x; t < C_IN * 2 * rows * cols;
         t += TILE_W * TILE_H) {
        int tw = t % cols, r = t / cols;
        int th = r % rows;
        r /= rows;
        int dd = r % 2, ci = r / 2;
        int gd = at.jd + dd, gh = jh0 + th, gw = jw0 + tw;
        flat[t] = (gd < d && gh < h && gw < w)
                      ? x[(((at.n * C_IN + ci) * d + gd) * h + gh) * w + gw]
                      : 0.0f;
    }
}

/* Stages weight * scale in shared memory as [co][ci][28] (27 taps, 1 pad) for float4 reads, and
 * bias * scale (v6 scales by log2 e, b3 by 1), every thread of the block copying a share. The
 * caller synchronises. */
__device__ static inline void stage_weights(float4 (*s_w4)[C_IN][TAPS_PAD / 4], float *s_bias,
                                            const float *__restrict__ weight,
                                            const float *__restrict__ conv_bias, float scale)
{
    float *s_w = reinterpret_cast<float *>(s_w4);
    int tid = threadIdx.y * TILE_W + threadIdx.x;
    for (int t = tid; t < C_OUT * C_IN * TAPS_PAD; t += TILE_W * TILE_H) {
        int co = t / (C_IN * TAPS_PAD), r = t % (C_IN * TAPS_PAD);
        int ci = r / TAPS_PAD, k = r % TAPS_PAD;
        s_w[t] = k < KVOL ? weight[(ci * C_OUT + co) * KVOL + k] * scale : 0.0f;
    }
    if (tid < C_OUT)
        s_bias[tid] = conv_bias[tid] * scale;
}

/* this thread's 2x2x2 inputs of each channel, xin[ci][dd][dh][dw] = x at (jd + dd, jh + dh,
 * jw + dw), from the block's tile (load_input_tile with TILE_H + 1 rows, TILE_W + 1 columns) */
__device__ static inline void cube_inputs(const float (*tile)[2][TILE_H + 1][TILE_W + 1],
                                          float xin[C_IN][2][2][2])
{
#pragma unroll
    for (int ci = 0; ci < C_IN; ci++)
#pragma unroll
        for (int dd = 0; dd < 2; dd++)
#pragma unroll
            for (int dh = 0; dh < 2; dh++)
#pragma unroll
                for (int dw = 0; dw < 2; dw++)
                    xin[ci][dd][dh][dw] = tile[ci][dd][threadIdx.y + dh][threadIdx.x + dw];
}

/* acc[o] = output channel co at the cube's 8 outputs (o = ad * 4 + ah * 2 + aw), from the
 * weights stage_weights left in shared memory: 7 float4 broadcasts and 27 FFMA per input
 * channel */
__device__ static inline void cube_channel(const float4 (*s_w4)[C_IN][TAPS_PAD / 4],
                                           const float *s_bias, const float xin[C_IN][2][2][2],
                                           int co, float acc[8])
{
#pragma unroll
    for (int o = 0; o < 8; o++)
        acc[o] = s_bias[co];
#pragma unroll
    for (int ci = 0; ci < C_IN; ci++) {
        float wk[TAPS_PAD];
#pragma unroll
        for (int q = 0; q < TAPS_PAD / 4; q++) {
            float4 t = s_w4[co][ci][q];
            wk[4 * q] = t.x, wk[4 * q + 1] = t.y, wk[4 * q + 2] = t.z, wk[4 * q + 3] = t.w;
        }
#pragma unroll
        for (int kd = 0; kd < KS; kd++)
#pragma unroll
            for (int kh = 0; kh < KS; kh++)
#pragma unroll
                for (int kw = 0; kw < KS; kw++) {
                    int o = TAP_OUT(kd) * 4 + TAP_OUT(kh) * 2 + TAP_OUT(kw);
                    acc[o] = fmaf(wk[(kd * KS + kh) * KS + kw],
                                  xin[ci][TAP_IN(kd)][TAP_IN(kh)][TAP_IN(kw)], acc[o]);
                }
    }
}

/* the online update of common/lse.cuh, in base 2 (v6, and v8's fallback) */
__device__ static inline void lse2_online(float v, float *m, float *s)
{
    float d = v - *m;
    float e = ex2_approx(-fabsf(d));
    if (d > 0.0f) {
        *s = fmaf(*s, e, 1.0f);
        *m = v;
    } else {
        *s += e;
    }
}

/* the cube's 8 logsumexps in base 2 over the 16 channels, online: (m[o], s[o]) with the output
 * z = m + log2 s; the channel loop unrolled by 2 (v6's comment says why) */
__device__ static inline void cube_lse2_online(const float4 (*s_w4)[C_IN][TAPS_PAD / 4],
                                               const float *s_bias, const float xin[C_IN][2][2][2],
                                               float m[8], float s[8])
{
#pragma unroll
    for (int o = 0; o < 8; o++)
        m[o] = -INFINITY, s[o] = 0.0f;
#pragma unroll 2
    for (int co = 0; co < C_OUT; co++) {
        float acc[8];
        cube_channel(s_w4, s_bias, xin, co, acc);
#pragma unroll
        for (int o = 0; o < 8; o++)
            lse2_online(acc[o], &m[o], &s[o]);
    }
}

/* v6 and v8's start: the weights (pre-scaled by log2 e) and the block's input tile staged in
 * shared memory, then this thread's cube position and its 2x2x2 inputs of every input
 * channel; 0 for a thread past the input's edge (it has no cube) */
__device__ static inline int cube_begin_smem(const float *__restrict__ x,
                                             const float *__restrict__ weight,
                                             const float *__restrict__ conv_bias,
                                             float4 (*s_w4)[C_IN][TAPS_PAD / 4], float *s_bias,
                                             float (*tile)[2][TILE_H + 1][TILE_W + 1], int d, int h,
                                             int w, cube_at *at, float xin[C_IN][2][2][2])
{
    int jh0, jw0;
    *at = cube_position(w, &jh0, &jw0);
    stage_weights(s_w4, s_bias, weight, conv_bias, LOG2E_F);
    load_input_tile(x, tile, *at, jh0, jw0, d, h, w);
    __syncthreads();
    if (at->jw >= w || at->jh >= h)
        return 0;
    cube_inputs(tile, xin);
    return 1;
}

/* y at the cube's 8 outputs from their logsumexps z[o] (natural base), those inside the output */
__device__ static inline void cube_store(float *__restrict__ y, cube_at at, int d, int h, int w,
                                         const float z[8], float bv)
{
    int od = 2 * d - 1, oh = 2 * h - 1, ow = 2 * w - 1;
    float *yn = y + at.n * od * oh * ow;
#pragma unroll
    for (int o = 0; o < 8; o++) {
        int zd = 2 * at.jd + (o >> 2), zh = 2 * at.jh + ((o >> 1) & 1), zw = 2 * at.jw + (o & 1);
        if (zd < od && zh < oh && zw < ow)
            yn[(zd * oh + zh) * ow + zw] = tail_fast(z[o], bv);
    }
}

#endif
