/*
 * v13: the whole model in one pass: v10's cluster with the conv computed into shared memory
 * (Hopper)
 *
 * Defect of v12: the conv runs twice, because no block holds a whole sample between the statistics
 * and the output. Change: v10's cluster of 8 blocks a sample (cluster.cuh), its step 1 computing
 * the conv into shared memory instead of loading c: each block copies the weights (conv.cuh),
 * computes its slice's 16 channels, then reduces, exchanges and writes y as v10 does. The conv runs
 * once; c never exists in DRAM. Register blocking (the first form; the second step below replaced
 * it): each thread computes two positions, j and j + half, so each weight broadcast feeds both: a
 * tap is 2 loads of x, 4 LDS.128 and 32 FFMA instead of 1, 4 and 16. One position a thread was
 * measured first (0.242 ms in the run of commit 508c56c; ncu: the SMs 49% busy, per issued
 * instruction 3.3 cycles waiting on shared memory, four LDS.128 per 16 FFMA, and 2.7 at barriers).
 * Prediction: compute-bound: the conv's 0.062 ms at the FMA peak plus the on-chip epilogue,
 * against v12's 0.402 [v12 model_fwd].
 * Measured: 0.220 ms (19 TFLOP/s; the table recorded at commit cdcbcdb, before the second step,
 * with the old flush), faster than cuDNN's conv alone (0.49 to 0.56 ms across runs). Two positions
 * a thread measured 6% better than one in commit 08a0fbe (0.228 against 0.242 ms), less than the
 * halved shared-memory traffic promised: at 64 registers (two blocks an SM) ptxas spills, and with
 * 128 registers and one block an SM it measured slower (the README's "tried" list). Its timeline
 * (commit 2d4018b, %globaltimer at each block's phase boundaries): a block lives a median 48.1 us,
 * 35.4 of them in the conv (30.5 TFLOP/s, 46% of peak, while it runs), 7.3 in the statistics and
 * exchange, 4.0 writing y; the fifth wave is 8 samples and takes a whole block lifetime.
 *
 * Second step (the code below). Defect: the conv's loop loads more than it computes with.
 * A thread's two positions, j and j + half, are far apart, so every tap of each needs its own load
 * of x: per (ci, kd), 18 loads of x and 36 LDS.128 of weights for 288 FFMA. ncu (commit cdcbcdb,
 * the kernel alone): the FMA pipe 40% busy, L1 hit rate 60.5%, per issued instruction 1.4 cycles
 * waiting on shared memory and 1.7 on x. Change: conv_slice_quads below. A thread computes four
 * neighbouring positions of one output row for eight channels; a kernel row (ci, kd, kh) meets them
 * in six neighbouring x values, loaded once for its three taps (when W is a multiple of 4, as one
 * LDG.128 and one LDG.64), and each weight load feeds four positions. Per (ci, kd): 6 vector
 * loads of x (18 scalar ones when W is not a multiple of 4) and 18 LDS.128 for 288 FFMA, 24 memory
 * instructions against 54. The price: a row of 30 positions
 * is computed as 32 (6.7% more FFMA), and rows that a slice boundary cuts are computed whole (1 to
 * 3% at S = 12600).
 * Prediction: if the conv phase was bound by its loads, 2.25x fewer of them take its 35.4 us toward
 * 16 (plus the 10% extra FFMA), a block's life from 48.1 to about 30 us, and the model toward 0.13
 * ms.
 * Measured (H100, medians of 50, three interleaved rounds of one call): 0.2205, 0.2209, 0.2205 ms
 * before, 0.2049, 0.2049, 0.2049 after: 7%, far short of the prediction. ncu, the kernel alone at
 * its locked clocks, before and after: 274.5 against 245.8 us; FMA pipe 40.3% against 46.1% busy;
 * L1 hit rate 60.5% against 82.5%; per issued instruction 1.41 against 0.98 cycles on shared
 * memory, 1.73 against 1.67 on x, 2.56 against 2.10 at barriers, and 2.21 against 2.94 "not
 * selected", a ready warp waiting while another issues. That last, now the largest, says the warps
 * wait less for their loads and more for issue slots: the loop issues 348 instructions per 288
 * FFMA, and the kernel 119.8 million warp instructions (129.6 before), 74.0 million of them FFMA:
 * 2.37 billion lane slots against the conv's 2.09 billion multiply-adds (13% more: the 6.7% and
 * 1 to 3% above, and the idle lanes of each block's last, partial group of 32 units, which its
 * warps issue whole: 14 groups for 13.25 or 13.5, which predicts 74.3 million warp FFMA).
 * Also seen: a block's 424 or 432 (row, quad) units make 13.25 or 13.5 groups of 32 for its 8
 * warp pairs, so 2 or 3 pairs sit at the barrier for the conv's second half.
 *
 * Third step (the `#pragma unroll 3` below). Defect: with issue slots now the limit,
 * the loop's own instructions count. It ran one (ci, kd) an iteration (`#pragma unroll 1`, to
 * stay within 64 registers): each iteration recomputed its addresses of x and the weights, and
 * its FFMA waited for its own loads. Change: three iterations (one ci) unrolled into one.
 * Prediction, from the SASS (cuobjdump, nvcc 13.0): 979 instructions per 864 FFMA in the loop
 * against 3 x 348 = 1044, 6% fewer; if the conv phase is issue-bound, the model gains at most that.
 * Measured (medians of 50, three interleaved rounds of one call): 0.2054, 0.2053, 0.2055 ms before,
 * 0.1943, 0.1941, 0.1940 after: 5.5%. ncu, the kernel alone (a call after the second step's),
 * before and after: 244.5 against 234.2 us; 119.8 against 114.7 million warp instructions (4.3%
 * fewer); FMA pipe 46.0% against 48.2% busy; per issued instruction 1.68 against 1.17 cycles
 * waiting on x (the next kd's loads now issue before this one's FFMA) and 2.96 against 3.24 "not
 * selected". Unrolling all nine measured 0.2013, 0.2009, 0.2012 ms in the same rounds: 125.6
 * million instructions, and 0.35 cycles an instruction waiting for the instruction cache (0.05
 * at three).
 * Next, v14 puts the conv on tensor cores: 42% fewer instructions, and then the loads of x bind.
 * Recorded (the README's table): 0.1940 ms [0.1925 - 0.1990]
 * [v13 model_fwd median_ms min_ms max_ms], 21.6 TFLOP/s [v13 model_fwd], 3.04x torch.compile
 * [compile/v13 model_fwd]. The 0.10 ms target is missed by 1.94x: the 2.37 billion FFMA lane slots
 * alone take 0.071 ms at the FMA peak.
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
