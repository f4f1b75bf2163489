/*
 * v14: v13 with its conv on tensor cores, in 3xTF32 (Hopper)
 *
 * Defect of v13: its conv is bound by issue slots, and 88% of the loop's instructions are FFMA,
 * 32 multiply-adds each: fewer instructions need a bigger instruction.
 * Change: the conv as an implicit GEMM on the tensor cores (common/tf32.cuh: mma.sync m16n8k8,
 * 1024 multiply-adds an instruction; the 3xTF32 split keeps most of fp32's accuracy). C
 * (positions x 16 channels) = A (positions x k) B (k x 16 channels), k the 81 taps of (ci, kd,
 * kh, kw) padded to 88: 11 steps of 8. A's row for a position is its im2col patch, the 81 x values
 * its taps read. A warp takes 16 positions and all 16 channels, two m16n8 pieces; each step it
 * gathers its 4 A values from x (through L1), splits them (split_fast), reads B's fragments
 * (split once by the block into shared memory: two LDS.128), and issues 6 mma: a_lo b_hi, a_hi
 * b_lo, a_hi b_hi of both pieces, added straight into the accumulator (8 FADD a step fewer than
 * mma_3xtf32's sums apart; the price, in make test: y's rel_l2 about 3e-7 against v13's 2e-7,
 * inside the fp32 tolerances). v13's cluster, statistics and y as they were.
 * Prediction: the SASS has 420 instructions for a tile's 11 steps against 734 in v13's loop for
 * the same products: if the conv stays bound by issue, its phase about halves: toward 0.12 ms.
 * Measured: 0.1835 ms [v14 model_fwd], 34% of the floor [v14 model_fwd pct_floor], 1.06x v13
 * [v13/v14 model_fwd], far short. ncu: the instructions fell as predicted (42% fewer), but now
 * the gathers wait on L1: the block's two 113 KB slices of conv output leave about 28 KB of L1
 * for x, and 77% of the gathers hit. v15 takes the conv's output out of shared memory.
 * Tried (LABBOOK.md): two tiles a warp (spills); contiguous tiles a warp (fewer L1 hits); each
 * step's three products summed apart first.
 */
#include "cluster.cuh"
#include "conv.cuh"
#include "model.h"
#include "tf32.cuh"

#define KSTEPS ((C_IN * KVOL + 7) / 8) /* the GEMM's k, 81 taps, in steps of 8: 88 */

/* B's fragments, split once by each block, and the offset of each GEMM column in x */
struct tc_smem {
    uint4 b_hi[KSTEPS][32]; /* lane (g, t): b0, b1 of channel g (.x, .y) and of 8 + g (.z, .w) */
    uint4 b_lo[KSTEPS][32]; /* their 3xTF32 remainders */
    uint2 off[KSTEPS][4];   /* step s, t: the x offsets of columns 8 s + t and 8 s + t + 4 */
    float b[C_OUT];
};

/* every thread of the block takes part; the caller synchronises before the first use. Column
 * k < 81 is PyTorch's (ci, kd, kh, kw); columns 81 .. 87 have zero weights and offset 0 (a
 * finite x value times 0) */
__device__ static inline void load_tc_weights(tc_smem *ms, const float *__restrict__ weight,
                                            const float *__restrict__ bias, const shape sh)
{
    const int K = C_IN * KVOL;
    int hw = sh.h * sh.w, dhw = sh.d * hw;
    for (int i = threadIdx.x; i < KSTEPS * 32 * 4; i += blockDim.x) {
        int e = i & 3, lane = (i >> 2) & 31, st = i >> 7, g = lane >> 2, t = lane & 3;
        int k = 8 * st + t + 4 * (e & 1), co = g + 8 * (e >> 1);
        float v = k < K ? __ldg(weight + co * K + k) : 0.0f;
        split_tf32(v, (uint32_t *)&ms->b_hi[st][lane] + e, (uint32_t *)&ms->b_lo[st][lane] + e);
    }
    for (int k = threadIdx.x; k < KSTEPS * 8; k += blockDim.x) {
        unsigned o = 0;
        if (k < K) {
            int ci = k / KVOL, r = k - ci * KVOL;
            o = ci * dhw + (r / 9) * hw + (r / 3 % 3) * sh.w + r % 3;
        }
        unsigned *row = (unsigned *)&ms->off[k / 8][k % 4];
        row[(k % 8) / 4] = o;
    }
    if (threadIdx.x < C_OUT)
        ms->b[threadIdx.x] = __ldg(bias + threadIdx.x);
}

/* p, hidden from the optimiser, so that p + offset stays one IMAD.WIDE.U32 instead of the
 * offset being folded into a 64-bit index (four instructions a load) */
__device__ static inline const float *opaque(const float *p)
{
    asm("mov.b64 %0, %0;" : "+l"(p));
    return p;
}

/* The conv of the block's slice into vals, as an implicit GEMM: C (positions x 16 channels) = A
 * (positions x 88: the im2col patches, gathered from x) B (88 x 16: the weights), as the header
 * says. Warp w takes
 * the 16-position tiles w, w + 16, ...: the block's warps work on neighbouring positions at
 * once and share x in L1. A lane's rows are positions g and g + 8 of the tile (their input
 * corners by fast_div), its columns t and t + 4 of each step (their offsets from the corner in
 * ms->off); positions past the slice are computed at its last position and not stored. */
__device__ static inline void conv_slice_tc(const float *__restrict__ x, const shape sh, int n,
                                            int lo, int len, const tc_smem *ms, float *vals,
                                            int cap)
{
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const float *xn = x + (size_t)n * C_IN * sh.d * sh.h * sh.w;
    float b0 = ms->b[2 * t], b1 = ms->b[2 * t + 1], b8 = ms->b[8 + 2 * t], b9 = ms->b[9 + 2 * t];
    unsigned mw = 0xffffffffu / (unsigned)sh.ow, mh = 0xffffffffu / (unsigned)sh.oh;
    for (int tile = warp; tile < (len + 15) / 16; tile += CL_THREADS / 32) {
        int j0 = 16 * tile + g, j1 = j0 + 8;
        int c[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            unsigned s = lo + min(j0 + 8 * r, len - 1);
            unsigned q = fast_div(s, sh.ow, mw), od = fast_div(q, sh.oh, mh);
            c[r] = (od * sh.h + (q - od * sh.oh)) * sh.w + (s - q * sh.ow);
        }
        const float *p0 = opaque(xn + c[0]), *p1 = opaque(xn + c[1]);
        float acc[2][4] = {{b0, b1, b0, b1}, {b8, b9, b8, b9}};
#pragma unroll
        for (int st = 0; st < KSTEPS; st++) {
            uint2 o = ms->off[st][t];
            float a[4] = {__ldg(p0 + o.x), __ldg(p1 + o.x), __ldg(p0 + o.y), __ldg(p1 + o.y)};
            uint32_t a_hi[4], a_lo[4];
#pragma unroll
            for (int e = 0; e < 4; e++)
                split_fast(a[e], &a_hi[e], &a_lo[e]);
            uint4 bh = ms->b_hi[st][lane], bl = ms->b_lo[st][lane];
            uint32_t b_hi[2][2] = {{bh.x, bh.y}, {bh.z, bh.w}};
            uint32_t b_lo[2][2] = {{bl.x, bl.y}, {bl.z, bl.w}};
#pragma unroll
            for (int h = 0; h < 2; h++) {
                mma_tf32(acc[h], a_lo, b_hi[h]);
                mma_tf32(acc[h], a_hi, b_lo[h]);
                mma_tf32(acc[h], a_hi, b_hi[h]);
            }
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float *v = vals + (8 * h + 2 * t) * cap;
            if (j0 < len)
                v[j0] = acc[h][0], v[cap + j0] = acc[h][1];
            if (j1 < len)
                v[j1] = acc[h][2], v[cap + j1] = acc[h][3];
        }
    }
}

/* v14's conv for k_cluster_model (cluster.cuh) */
struct conv_tc {
    typedef tc_smem smem;
    __device__ static void load(smem *sw, const float *__restrict__ weight,
                                const float *__restrict__ bias, const shape sh)
    {
        load_tc_weights(sw, weight, bias, sh);
    }
    __device__ static void run(const float *__restrict__ x, const shape sh, int n, int lo,
                               int len, const smem *sw, float *vals, int cap)
    {
        conv_slice_tc(x, sh, n, lo, len, sw, vals, cap);
    }
};

static int opted; /* k_cluster_model<conv_tc>'s shared-memory opt-in is set (cluster_config) */

void v14_launch(const run_ctx *r, int scope)
{
    (void)scope; /* model_fwd only */
    cluster_model_launch<conv_tc>(r, &opted);
}
