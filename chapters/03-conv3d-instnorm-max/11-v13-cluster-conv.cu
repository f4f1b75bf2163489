/*
 * v13: the whole model in one pass: v10's cluster with the conv computed into shared memory
 * (Hopper)
 *
 * Defect of v12: the conv runs twice, because no block holds a whole sample between the
 * statistics and the output.
 * Change: v10's cluster of 8 blocks a sample (cluster.cuh's k_cluster_model), its load replaced
 * by the conv: each block copies the weights (conv.cuh), computes its slice's 16 channels into
 * shared memory, then reduces, exchanges and writes y as v10 does. The conv runs once; c never
 * exists in DRAM. The conv's loop (conv_slice_quads, below): a thread computes four neighbouring
 * positions of one output row for eight channels, so a kernel row (ci, kd, kh) meets them in six
 * neighbouring x values, loaded once for its three taps, and each weight load (a 16-byte
 * broadcast) feeds four positions: per (ci, kd), 6 vector loads of x and 18 LDS.128 for 288
 * FFMA. The price: a row of 30 positions is computed as 32, and rows a slice boundary cuts are
 * computed whole.
 * Prediction: compute-bound: the conv's 0.062 ms at the FMA peak plus the on-chip epilogue.
 * Measured: 0.194 ms [v13 model_fwd], 32% of the floor [v13 model_fwd pct_floor], 2.07x v12
 * [v12/v13 model_fwd]: the conv once pays, but not to the peak. The loop issues about 13% more
 * FFMA lane slots than the conv has multiply-adds, and issue slots are now the limit (ncu: a ready
 * warp waiting while another issues is the first stall).
 * Also, each a step measured on its own (LABBOOK.md): the row quads, where a thread first took
 * two far-apart positions (7%); three kd iterations unrolled into one (`#pragma unroll 3`, 5.5%).
 * Tried: one position a thread; two at 128 registers; all nine iterations unrolled (the
 * instruction cache).
 */
#include "cluster.cuh"
#include "conv.cuh"
#include "model.h"

/* The conv of the block's slice into vals, in row quads: a thread computes four neighbouring
 * positions of one output row (ow0 .. ow0 + 3, ow0 a multiple of 4) for eight channels (half
 * h, warp-uniform, so each weight load stays a broadcast). A kernel row (ci, kd, kh) meets
 * the four positions in six x values, the sliding window ow0 .. ow0 + 5, loaded once for its
 * three taps: per kernel row 6 loads of x (or one LDG.128 and one LDG.64 when VEC: W a
 * multiple of 4, so the window's start is 16-byte aligned), 6 LDS.128 and 96 FFMA. Positions
 * past the row's end (ow0 + p >= OW) or outside the slice are computed and not stored; x
 * values past the input row's end are not loaded (zero). */
template <bool VEC>
__device__ static inline void conv_slice_quads(const float *__restrict__ x, const shape sh,
                                               int n, int lo, int len, const conv_smem_w *sw,
                                               float *vals, int cap)
{
    int hw = sh.h * sh.w, dhw = sh.d * hw, nq = (sh.ow + 3) / 4;
    int r0 = lo / sh.ow, units = len > 0 ? ((lo + len - 1) / sh.ow - r0 + 1) * nq : 0;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, h = warp & 1;
    const float *xn = x + (size_t)n * C_IN * dhw;
    /* units: (row, quad) pairs; warps 2k and 2k + 1 take the same 32, channels 0-7 and 8-15 */
    for (int u = (warp >> 1) * 32 + lane; u < units; u += CL_THREADS / 2) {
        int row = r0 + u / nq, ow0 = 4 * (u % nq), od = row / sh.oh, oh = row - od * sh.oh;
        const float *xq = xn + od * hw + oh * sh.w + ow0;
        bool in3 = ow0 + 3 < sh.w, in4 = ow0 + 4 < sh.w, in5 = ow0 + 5 < sh.w;
        float acc[4][8];
#pragma unroll
        for (int c = 0; c < 8; c++)
            acc[0][c] = acc[1][c] = acc[2][c] = acc[3][c] = sw->b[8 * h + c];
#pragma unroll 3 /* the third step: one ci (three kd) an iteration */
        for (int ck = 0; ck < C_IN * KS; ck++) {
            int ci = ck / KS, kd = ck - KS * ci;
            const float *xp = xq + ci * dhw + kd * hw;
            const float4 *wp = (const float4 *)(sw->w + ck * 9 * C_OUT) + 2 * h;
#pragma unroll
            for (int kh = 0; kh < KS; kh++) {
                float v[6];
                const float *xr = xp + kh * sh.w;
                if (VEC) {
                    float4 a = __ldg((const float4 *)xr);
                    float2 b = in4 ? __ldg((const float2 *)(xr + 4)) : make_float2(0.f, 0.f);
                    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y;
                } else {
                    v[0] = __ldg(xr), v[1] = __ldg(xr + 1), v[2] = __ldg(xr + 2);
                    v[3] = in3 ? __ldg(xr + 3) : 0.f;
                    v[4] = in4 ? __ldg(xr + 4) : 0.f;
                    v[5] = in5 ? __ldg(xr + 5) : 0.f;
                }
#pragma unroll
                for (int kw = 0; kw < KS; kw++) {
                    float4 w0 = wp[4 * (KS * kh + kw)], w1 = wp[4 * (KS * kh + kw) + 1];
#pragma unroll
                    for (int p = 0; p < 4; p++) {
                        FMA4(acc[p], 0, v[p + kw], w0);
                        FMA4(acc[p], 4, v[p + kw], w1);
                    }
                }
            }
        }
        int s0 = row * sh.ow + ow0 - lo;
#pragma unroll
        for (int p = 0; p < 4; p++) {
            int j = s0 + p;
            if (ow0 + p < sh.ow && j >= 0 && j < len)
#pragma unroll
                for (int c = 0; c < 8; c++)
                    vals[(8 * h + c) * cap + j] = acc[p][c];
        }
    }
}

/* v13's conv for k_cluster_model (cluster.cuh) */
struct conv_ffma {
    typedef conv_smem_w smem;
    __device__ static void load(smem *sw, const float *__restrict__ weight,
                                const float *__restrict__ bias, const shape sh)
    {
        (void)sh;
        load_weights(sw, weight, bias);
    }
    __device__ static void run(const float *__restrict__ x, const shape sh, int n, int lo,
                               int len, const smem *sw, float *vals, int cap)
    {
        if ((sh.w & 3) == 0)
            conv_slice_quads<true>(x, sh, n, lo, len, sw, vals, cap);
        else
            conv_slice_quads<false>(x, sh, n, lo, len, sw, vals, cap);
    }
};

static int opted; /* k_cluster_model<conv_ffma>'s shared-memory opt-in is set (cluster_config) */

void v13_launch(const run_ctx *r, int scope)
{
    (void)scope; /* model_fwd only */
    cluster_model_launch<conv_ffma>(r, &opted);
}
