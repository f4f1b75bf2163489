/*
 * v5: full fusion, the transposed conv computed inside the kernel
 *
 * Defect of v7: at best it reads the conv output in 0.359 ms [v7 epilogue_fwd floor_ms], and the
 * conv takes longer still and writes that 1 GB first (v7's whole model: 6.59 ms [v7 model_fwd]).
 * The only way past both is not to write it.
 * Change: the transposed conv by parity (parity.cuh, parity.svg): each thread owns one input
 * position j and the 2x2x2 output cube at 2j, and computes it from the 2x2x2 inputs at j .. j+1
 * with each of the 27 taps exactly once per (ci, co): 27 x 3 x 16 = 1296 FMAs for 8 outputs,
 * every thread walking the taps in the same order. That uniformity makes constant memory right
 * for the weights (a warp reading one address gets it broadcast) and keeps threads from diverging
 * on parity, as they would with a thread per output. A block covers 32 (w) x 4 (h) input columns
 * of one depth; its 990 input floats (3 channels x 2 x 5 x 33) are staged in shared memory. The
 * conv output arrives one channel at a time, so the logsumexp is the online one (common/lse.cuh:
 * a running max and sum, one exp per value): each of the 16 outputs is folded in as soon as it
 * is computed and lives in registers for one iteration, never in memory.
 * Prediction: bytes do not bind (88 MB, 0.03 ms) and the FMA floor is 0.075 ms; counting
 * instructions, 1296 FFMA, about 6 an online update (768), about 100 for the inputs, the tail and
 * the stores: 2200 a thread, 65,536 warps, 4 issue slots an SM a cycle:
 * 65536 x 2200 / (132 x 4 x 1.98e9 /s) = 0.14 ms, issue-bound.
 * Measured: 0.390 ms [v5 model_fwd], 16.9x v7's whole model [v7/v5 model_fwd] and 14.7x
 * [compile/v5 model_fwd] torch.compile in fp32, but 2.8x the prediction: the profile (v6, the
 * advanced part) shows the constant cache missing.
 */
#include <math.h>

#include "lse.cuh"
#include "model.h"
#include "parity.cuh"
#include "tail.cuh"

__constant__ float c_weight[N_WEIGHT];
__constant__ float c_conv_bias[C_OUT];

/*
 * One thread's work, on the device (the kernel passes c_weight and c_conv_bias) and on the host
 * (a CPU check passes PyTorch-layout arrays): xin holds the inputs [ci][dd][dh][dw] at
 * (j + dd, j + dh, j + dw); out receives the 8 logsumexps, output (ad, ah, aw) at
 * out[ad * 4 + ah * 2 + aw]. Inlined into the kernel, every weight index is a compile-time
 * constant, so each weight is a constant-bank load at a fixed address (ld.const in the PTX);
 * whether an FFMA then takes it as an operand or ptxas issues a separate LDC is ptxas's choice,
 * and v6's comment counts what it chose.
 */
__host__ __device__ static inline void fused_cube_lse(const float *__restrict__ w,
                                                      const float *__restrict__ bias,
                                                      const float xin[C_IN][2][2][2],
                                                      float out[8])
{
    float m[8], sum[8];
#pragma unroll
    for (int o = 0; o < 8; o++)
        m[o] = -INFINITY, sum[o] = 0.0f;
#pragma unroll
    for (int co = 0; co < C_OUT; co++) {
        float acc[8];
#pragma unroll
        for (int o = 0; o < 8; o++)
            acc[o] = bias[co];
#pragma unroll
        for (int ci = 0; ci < C_IN; ci++)
#pragma unroll
            for (int kd = 0; kd < KS; kd++)
#pragma unroll
                for (int kh = 0; kh < KS; kh++)
#pragma unroll
                    for (int kw = 0; kw < KS; kw++) {
                        int o = TAP_OUT(kd) * 4 + TAP_OUT(kh) * 2 + TAP_OUT(kw);
                        float wv = w[(((ci * C_OUT + co) * KS + kd) * KS + kh) * KS + kw];
                        acc[o] = fmaf(wv, xin[ci][TAP_IN(kd)][TAP_IN(kh)][TAP_IN(kw)], acc[o]);
                    }
#pragma unroll
        for (int o = 0; o < 8; o++) {
#ifdef __CUDA_ARCH__
            lse_online(acc[o], &m[o], &sum[o]);
#else /* lse_online's update on the host, with expf for __expf */
            float d = acc[o] - m[o], e = expf(-fabsf(d));
            if (d > 0.0f)
                sum[o] = sum[o] * e + 1.0f, m[o] = acc[o];
            else
                sum[o] += e;
#endif
        }
    }
#pragma unroll
    for (int o = 0; o < 8; o++)
        out[o] = m[o] + LOG_FAST(sum[o]);
}

__global__ void __launch_bounds__(TILE_W *TILE_H)
    v5_model_fused(const float *__restrict__ x, const float *__restrict__ b, float *__restrict__ y,
                   int d, int h, int w)
{
    __shared__ float tile[C_IN][2][TILE_H + 1][TILE_W + 1];
    int jh0, jw0;
    load_input_tile(x, tile, cube_position(w, &jh0, &jw0), jh0, jw0, d, h, w);
    __syncthreads();
    /* the position again after the barrier, not held across it: holding it measured slower
     * (LABBOOK.md) */
    cube_at at = cube_position(w, &jh0, &jw0);
    if (at.jw >= w || at.jh >= h)
        return;
    float xin[C_IN][2][2][2];
    cube_inputs(tile, xin);
    float z[8];
    fused_cube_lse(c_weight, c_conv_bias, xin, z);
    cube_store(y, at, d, h, w, z, *b);
}

void v5_launch(const run_ctx *r, int scope)
{
    const shape *s = &r->sh;
    (void)scope; /* model_fwd only */
    /* the parameters live in global memory (a training step updates them): copy them into
     * constant memory on the stream, 5.2 KB, inside the timed region */
    CUDA_CHECK(cudaMemcpyToSymbolAsync(c_weight, r->weight, sizeof(float) * N_WEIGHT, 0,
                                       cudaMemcpyDeviceToDevice, 0));
    CUDA_CHECK(cudaMemcpyToSymbolAsync(c_conv_bias, r->conv_bias, sizeof(float) * C_OUT, 0,
                                       cudaMemcpyDeviceToDevice, 0));
    v5_model_fused<<<cube_grid(s), dim3(TILE_W, TILE_H)>>>(r->x, r->b, r->y, s->d, s->h, s->w);
}

/* The kernel's per-thread computation on the host, over a whole tensor: the CPU checks compare
 * it with the reference, so the parity derivation is tested where there is no GPU. */
void v5_host(const shape *s, const float *x, const float *w, const float *bias, float b, float *y)
{
    for (int n = 0; n < s->n; n++)
        for (int jd = 0; jd < s->d; jd++)
            for (int jh = 0; jh < s->h; jh++)
                for (int jw = 0; jw < s->w; jw++) {
                    float xin[C_IN][2][2][2], z[8];
                    for (int ci = 0; ci < C_IN; ci++)
                        for (int q = 0; q < 8; q++) {
                            int gd = jd + (q >> 2), gh = jh + ((q >> 1) & 1), gw = jw + (q & 1);
                            xin[ci][q >> 2][(q >> 1) & 1][q & 1] =
                                (gd < s->d && gh < s->h && gw < s->w)
                                    ? x[(((n * C_IN + ci) * s->d + gd) * s->h + gh) * s->w + gw]
                                    : 0.0f;
                        }
                    fused_cube_lse(w, bias, xin, z);
                    for (int o = 0; o < 8; o++) {
                        int zd = 2 * jd + (o >> 2), zh = 2 * jh + ((o >> 1) & 1),
                            zw = 2 * jw + (o & 1);
                        if (zd < s->od && zh < s->oh && zw < s->ow)
                            y[(size_t)n * s->s + (zd * s->oh + zh) * s->ow + zw] =
                                tail_fast(z[o], b);
                    }
                }
}
