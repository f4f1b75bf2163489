/*
 * conv.cuh: the conv computed inside a kernel (v12, v13; fast_div: v14 to v16) and the FMA pattern
 * our dw shares.
 *
 * 3 -> 16 channels with a 3x3x3 kernel: 81 inputs and 1296 weights per output position, all 16
 * channels from the same 81 loads. Each block copies the weights into shared memory transposed
 * to [ci][kd][kh][kw][co], so the 16 weights of a tap are four 16-byte broadcasts (every thread
 * of the block reads the same address), and the loop over (ci, kd) stays rolled: the body is 9
 * taps, 9 loads of x, 36 LDS.128 and 144 FFMA. The x loads go through L1 (x is 25 MB; each value
 * is read by 27 neighbouring positions). A fully unrolled form with the weights in constant
 * memory measured slower (LABBOOK.md, the Tried table).
 */
#ifndef CH03_CONV_CUH
#define CH03_CONV_CUH

#include "model.h"

/* acc[o..o+3] += xv * the four weights of wv */
#define FMA4(acc, o, xv, wv)                                                                      \
    acc[o] = fmaf(xv, wv.x, acc[o]), acc[o + 1] = fmaf(xv, wv.y, acc[o + 1]),                      \
    acc[o + 2] = fmaf(xv, wv.z, acc[o + 2]), acc[o + 3] = fmaf(xv, wv.w, acc[o + 3])

/* the block's copy of the weights, transposed to [tap][co], and the bias */
struct conv_smem_w {
    float w[N_WEIGHT];
    float b[C_OUT];
};

/* every thread of the block takes part; the caller synchronises before the first use */
__device__ static inline void load_weights(conv_smem_w *sw, const float *__restrict__ weight,
                                           const float *__restrict__ bias)
{
    for (int i = threadIdx.x; i < N_WEIGHT; i += blockDim.x) {
        int co = i / (C_IN * KVOL), tap = i - co * (C_IN * KVOL);
        sw->w[tap * C_OUT + co] = __ldg(weight + i);
    }
    if (threadIdx.x < C_OUT)
        sw->b[threadIdx.x] = __ldg(bias + threadIdx.x);
}

/* q = s / d (v14 to v16) for 0 <= s < 2^32, d >= 1, with m = 0xffffffff / d computed once (a
 * division replaced by a multiply-high, as compilers do for constant divisors): e =
 * floor(s m / 2^32) is q or q - 1, since m d > 2^32 - 1 - d gives s m / 2^32 > s / d - 1, and
 * m <= 2^32 / d gives e <= s / d; one comparison corrects it */
__device__ static inline unsigned fast_div(unsigned s, unsigned d, unsigned m)
{
    unsigned q = __umulhi(s, m);
    return q + (s - q * d >= d);
}

/* the input corner of output position s of sample n */
__device__ static inline const float *conv_corner(const float *x, const shape sh, int n, int s)
{
    int ow = s % sh.ow, t = s / sh.ow, oh = t % sh.oh, od = t / sh.oh;
    return x + (size_t)n * C_IN * sh.d * sh.h * sh.w + ((size_t)od * sh.h + oh) * sh.w + ow;
}

/* acc[co] = the conv output of channel co at the position whose input corner is xs */
__device__ static inline void conv_at_s(const float *__restrict__ xs, const shape sh,
                                        const conv_smem_w *sw, float acc[C_OUT])
{
    int hw = sh.h * sh.w, dhw = sh.d * hw;
#pragma unroll
    for (int co = 0; co < C_OUT; co++)
        acc[co] = sw->b[co];
#pragma unroll 1
    for (int ck = 0; ck < C_IN * KS; ck++) {
        int ci = ck / KS, kd = ck - KS * ci;
        const float *xp = xs + ci * dhw + kd * hw;
        const float4 *wp = (const float4 *)(sw->w + ck * 9 * C_OUT);
#pragma unroll
        for (int q = 0; q < 9; q++) {
            float xv = __ldg(xp + (q / 3) * sh.w + q % 3);
            float4 w0 = wp[4 * q], w1 = wp[4 * q + 1], w2 = wp[4 * q + 2], w3 = wp[4 * q + 3];
            FMA4(acc, 0, xv, w0);
            FMA4(acc, 4, xv, w1);
            FMA4(acc, 8, xv, w2);
            FMA4(acc, 12, xv, w3);
        }
    }
}

#endif
