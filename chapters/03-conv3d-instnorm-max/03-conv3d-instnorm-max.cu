/*
 * Chapter 3: KernelBench level 2, model #79
 *
 *     y = max_c( m * clamp( InstanceNorm3d( m * Conv3d(x) ), -1, 1 ) )
 *
 *   x      N x 3 x D x H x W                  (KernelBench: 128 x 3 x 16 x 32 x 32, rand)
 *   c      Conv3d(3 -> 16, kernel 3, stride 1, no padding, bias) -> N x 16 x (D-2) x (H-2) x (W-2)
 *          (128 x 16 x 14 x 30 x 30: 103 MB of float32; S = 14 * 30 * 30 = 12600 per channel)
 *   a      a = c * m, m a learnable 16 x 1 x 1 x 1 (one factor per channel, standard normal)
 *   xh     InstanceNorm3d(16) with PyTorch's defaults: per (n, c) mean and *biased* variance over
 *          the S positions, xh = (a - mean) * rstd, rstd = 1 / sqrt(var + 1e-5); no affine
 *   t, u   t = clamp(xh, -1, 1); u = t * m (the same m again)
 *   y      max over the 16 channels, no keepdim -> N x (D-2) x (H-2) x (W-2)
 *
 * What this chapter teaches: the shared-memory reduction. Each (n, c) needs a mean and a variance
 * over 12600 values before any output can be written, so the epilogue is a reduction followed by
 * an elementwise pass, and the question is how to run the reduction fast, accurately, and without
 * reading the 103 MB twice. The statistics kernels walk the classic progression of M. Harris,
 * "Optimizing Parallel Reduction in CUDA" (NVIDIA, 2007), measured here on an H100 rather than
 * quoted; then Welford's update with Chan's merge against sum and sum of squares; then CUB; then
 * thread-block clusters (Hopper): eight blocks share one sample's 16 x 12600 values through
 * distributed shared memory, so c is read once, and with the conv recomputed inside, not at all.
 *
 * Versions (make chapter-3 runs them all; --version K runs one):
 *   v1   eager-like: cuDNN conv, then a kernel per op: a = c * m, the statistics with one thread
 *        per (n, c) looping serially, normalise, clamp, * m, max over channels; a, xh, t, u in DRAM
 *   v2   v1, statistics by Harris's kernel 1: a thread per element, interleaved addressing, the
 *        divergent branch `tid % (2 s) == 0`; per-block partial sums, then a finishing kernel
 *   v3   v2 with sequential addressing (Harris's kernel 3): active threads contiguous
 *   v4   v3 with the first add during the global load (kernel 4): half the blocks
 *   v5   v4 with the last warp unrolled (kernel 5), by warp shuffles instead of volatile memory
 *   v6   many elements per thread (kernel 7): one block per (n, c), 16-byte loads, no partials
 *   v7   v6 with Welford's update and Chan's merge instead of sum and sum of squares
 *   v8   v7 with CUB's BlockReduce for the block-level merge (the library baseline)
 *   v9   fused apply: v7's statistics, then one kernel normalises, clamps, multiplies and takes
 *        the channel max (c read twice: once for the statistics, once for the output)
 *   v10  one pass: a cluster of 8 blocks per sample holds its 16 x S values in shared memory
 *        (a TMA bulk copy per channel row, each warp reducing its row as it lands); the blocks
 *        exchange partial statistics through distributed shared memory, once, merged by Chan's
 *        formula; c read once
 *   v11  v10 persistent and double-buffered: resident clusters walk the samples, the next
 *        sample's slice arriving by TMA bulk copies while this one's is reduced (measured slower)
 *   v12  whole model, two passes: a kernel computes the conv and reduces it without writing it,
 *        a second recomputes it and writes only y (the 103 MB never touch DRAM; the conv twice)
 *   v13  whole model, one pass: v10's cluster with the conv computed into shared memory (once)
 * v1..v11 run as the epilogue (reading cuDNN's c) and as the whole model (cuDNN's conv first);
 * v12 and v13 are whole-model only. v10 and v13 need 16 x S / 8 floats of shared memory a block
 * (v11 twice that); above about S = 28000 they run v9 and v12 instead (main says which ran).
 * Backward (section 2b derives it):
 *   b1   autograd-like: v1 saving a, xh, t and the argmax; max, mul, clamp, instance-norm (two
 *        kernels) and mul backward one kernel each; the m gradient by deterministic reductions
 *   b2   fused, two passes: v9 forward; a kernel recomputes the forward at each position and
 *        reduces the instance-norm backward's two sums; a second writes dc
 *   b3   cluster: v10 forward; one cluster kernel per sample reads c and g once, reduces through
 *        distributed shared memory and writes dc
 * Each runs as epilogue forward + backward and as a training step: cuDNN's conv, the pair, then
 * cuDNN's dx (backward data), the weight gradient (b1: cuDNN's backward filter; b2, b3: our own
 * deterministic kernel, 44x faster here) and our own deterministic dbias.
 *
 *   build/ch03                     verify and time every version at the KernelBench shape
 *   build/ch03 --test              CPU checks + every version on awkward shapes and extreme values
 *   build/ch03 --shape 2x3x5x6x7 --dump out/   tensors for data/pytorch_peer.py check --chapter 3
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cooperative_groups.h>
#include <cuda_pipeline.h>
#include <cub/block/block_reduce.cuh>

#include "../../common/gpu.h"
#include "../../common/reduce.cuh"

namespace cg = cooperative_groups;

/* ============================================================================================
 * 1. The model, and what it must cost
 *
 * Bytes (float32), KernelBench shape, S = 12600 positions per (n, c):
 *   epilogue  read c once (N 16 S * 4 = 103.2 MB), write y (N S * 4 = 6.45 MB): 109.7 MB,
 *             0.037 ms at the measured ~2990 GB/s copy ceiling. The statistics need all of an
 *             (n, c) slice before its first output, so a kernel that reads c for the statistics
 *             and again for the output moves 212.9 MB: 0.071 ms. Meeting the floor means holding
 *             the values on chip between the two uses: 16 x 12600 floats = 806 KB a sample,
 *             more than one SM's 228 KB of shared memory, less than eight SMs'.
 *   fwd + bwd read c in the forward and again in the backward, write y and dc, read g:
 *             3 * 103.2 + 2 * 6.45 = 322.5 MB, 0.108 ms.
 *   model     read x (25.2 MB) and the parameters, write y (6.45 MB): 0.011 ms of bytes, and
 *             2 * 128 * 16 * 3 * 27 * 12600 = 4.18 GFLOP, 0.062 ms at the H100 SXM's 67 TFLOP/s
 *             fp32 (datasheet: 132 SMs * 128 FMA/clk * 2 * 1.98 GHz). The conv is the model's
 *             floor, not the bytes: computing it twice (v11) costs at least 0.125 ms.
 * ========================================================================================== */

#define C_IN 3
#define C_OUT 16
#define KS 3
#define KVOL (KS * KS * KS)
#define N_WEIGHT (C_OUT * C_IN * KVOL) /* PyTorch layout: out x in x kD x kH x kW, 1296 */
#define IN_EPS 1e-5                    /* InstanceNorm3d's default eps */

typedef struct {
    int n, d, h, w;    /* input */
    int od, oh, ow;    /* conv output: L - 2 (kernel 3, no padding) */
    int s;             /* od oh ow: positions per (n, c), the instance norm's count */
} shape;

static shape make_shape(int n, int d, int h, int w)
{
    shape s = {n, d, h, w, d - 2, h - 2, w - 2, 0};
    s.s = s.od * s.oh * s.ow;
    return s;
}

static size_t x_elems(const shape *s) { return (size_t)s->n * C_IN * s->d * s->h * s->w; }
static size_t conv_elems(const shape *s) { return (size_t)s->n * C_OUT * s->s; }
static size_t out_elems(const shape *s) { return (size_t)s->n * s->s; }
static size_t seg_count(const shape *s) { return (size_t)s->n * C_OUT; } /* (n, c) slices */

static double epilogue_bytes(const shape *s) { return 4.0 * (conv_elems(s) + out_elems(s)); }
static double stats_bytes(const shape *s) { return 4.0 * (conv_elems(s) + 2.0 * seg_count(s)); }
static double model_bytes(const shape *s)
{
    return 4.0 * (x_elems(s) + N_WEIGHT + 2 * C_OUT + out_elems(s));
}
static double epilogue_fwdbwd_bytes(const shape *s)
{
    return 4.0 * (3.0 * conv_elems(s) + 2.0 * out_elems(s));
}
/* the training step if c were never stored: read x three times (conv, dw, and the epilogue's
 * recomputation), read g, write y and dx, the parameters and their gradients */
static double train_step_bytes(const shape *s)
{
    return 4.0 * (3.0 * x_elems(s) + 2.0 * out_elems(s) + 2.0 * (N_WEIGHT + 2 * C_OUT));
}
static double conv_flops(const shape *s) { return 2.0 * s->n * C_OUT * C_IN * KVOL * (double)s->s; }

static const char *shape_problem(const int64_t *dims)
{
    static char why[256];
    if (dims[1] != C_IN) {
        snprintf(why, sizeof why, "this model has %d input channels, --shape says %lld", C_IN,
                 (long long)dims[1]);
        return why;
    }
    if (dims[2] < 3 || dims[3] < 3 || dims[4] < 3) {
        snprintf(why, sizeof why, "a 3x3x3 convolution without padding needs D, H and W of at least 3");
        return why;
    }
    if ((dims[2] - 2) * (dims[3] - 2) * (dims[4] - 2) < 2) {
        snprintf(why, sizeof why,
                 "the conv output has one position per channel; instance norm needs more than one "
                 "(PyTorch raises \"Expected more than 1 spatial element when training\")");
        return why;
    }
    if (dims[0] > 65535) {
        snprintf(why, sizeof why, "batch must be at most 65535 (grid limits)");
        return why;
    }
    double conv = (double)dims[0] * C_OUT * (dims[2] - 2) * (dims[3] - 2) * (dims[4] - 2);
    double in = (double)dims[0] * C_IN * dims[2] * dims[3] * dims[4];
    if (conv >= 2147483647.0 || in >= 2147483647.0) {
        snprintf(why, sizeof why,
                 "the conv output would have %.0f elements; this chapter indexes with 32-bit ints "
                 "(at most 2^31 - 1): use a smaller batch",
                 conv);
        return why;
    }
    return NULL;
}

/* ============================================================================================
 * 2. CPU reference, in double
 * ========================================================================================== */

/* out[n][co][od][oh][ow] = bias[co] + sum over ci, kd, kh, kw of
 *                          x[n][ci][od + kd][oh + kh][ow + kw] w[co][ci][kd][kh][kw]
 * (cross-correlation without padding, as PyTorch's Conv3d). Innermost along ow, so the compiler
 * vectorises it; one (n, co) slice per OpenMP task. */
static void conv3d_ref(const shape *s, const double *x, const double *w, const double *bias,
                       double *out)
{
    int hw = s->h * s->w, dhw = s->d * hw;
#pragma omp parallel for collapse(2) schedule(static)
    for (int n = 0; n < s->n; n++)
        for (int co = 0; co < C_OUT; co++) {
            double *o = out + ((size_t)n * C_OUT + co) * s->s;
            for (int i = 0; i < s->s; i++)
                o[i] = bias[co];
            for (int ci = 0; ci < C_IN; ci++)
                for (int k = 0; k < KVOL; k++) {
                    double wv = w[(co * C_IN + ci) * KVOL + k];
                    const double *xp = x + ((size_t)n * C_IN + ci) * dhw + (k / 9) * hw +
                                       ((k / 3) % 3) * s->w + k % 3;
                    for (int od = 0; od < s->od; od++)
                        for (int oh = 0; oh < s->oh; oh++) {
                            const double *xr = xp + od * hw + oh * s->w;
                            double *orow = o + ((size_t)od * s->oh + oh) * s->ow;
                            for (int ow = 0; ow < s->ow; ow++)
                                orow[ow] += wv * xr[ow];
                        }
                }
        }
}

/* the conv value of slice (n, c) at position i, from the float c (the GPU's, for the epilogue
 * scope) or the double one */
static double cval(const float *cf, const double *cd, size_t i) { return cf ? cf[i] : cd[i]; }

static double clamp1(double v) { return v < -1.0 ? -1.0 : (v > 1.0 ? 1.0 : v); }

/* The (n, c) statistics the way InstanceNorm3d defines them: mean and biased variance of
 * a = c m over the S positions, two passes (exact in double for any offset). */
static void slice_stats_ref(const float *cf, const double *cd, size_t base, int S, double m,
                            double eps, double *mean, double *rstd)
{
    double sum = 0.0, sq = 0.0;
    for (int i = 0; i < S; i++)
        sum += cval(cf, cd, base + i) * m;
    double mu = sum / S;
    for (int i = 0; i < S; i++) {
        double d = cval(cf, cd, base + i) * m - mu;
        sq += d * d;
    }
    *mean = mu, *rstd = 1.0 / sqrt(sq / S + eps);
}

/* y = max over c of m_c clamp((c m_c - mean) rstd, -1, 1), the first maximum on ties; the
 * per-(n, c) statistics go to mean_out / rstd_out when not NULL. eps is a parameter so the CPU
 * checks can show that a wrong one is caught. */
static void epilogue_ref(const shape *s, const float *cf, const double *cd, const double *m,
                         double eps, double *y, double *mean_out, double *rstd_out)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < s->n; n++) {
        double mean[C_OUT], rstd[C_OUT];
        for (int co = 0; co < C_OUT; co++) {
            slice_stats_ref(cf, cd, ((size_t)n * C_OUT + co) * s->s, s->s, m[co], eps,
                            &mean[co], &rstd[co]);
            if (mean_out)
                mean_out[n * C_OUT + co] = mean[co], rstd_out[n * C_OUT + co] = rstd[co];
        }
        for (int i = 0; i < s->s; i++) {
            double best = 0.0;
            for (int co = 0; co < C_OUT; co++) {
                double a = cval(cf, cd, ((size_t)n * C_OUT + co) * s->s + i) * m[co];
                double u = clamp1((a - mean[co]) * rstd[co]) * m[co];
                if (co == 0 || u > best)
                    best = u;
            }
            y[(size_t)n * s->s + i] = best;
        }
    }
}

/* ============================================================================================
 * 2b. Backward, derived term by term
 *
 * L = sum over (n, s) of g y, g = dL/dy given. Walking the forward backwards, per sample n:
 *
 *   max over channels  y_s = u_{k(s), s}, k(s) the first channel with the largest u. Only that
 *                      channel moves y: du_{c,s} = g_s if c = k(s), else 0 (torch.max(dim)
 *                      routes to the index it returns; on ties, the first).
 *   u = t m            product rule: dt_{c,s} = du_{c,s} m_c, and m's first use gives
 *                      dm_c += sum over (n, s) of du_{c,s} t_{c,s}.
 *   t = clamp(xh)      dxh = dt where -1 <= xh <= 1, else 0. PyTorch passes the gradient at the
 *                      bounds (xh = -1 or 1 exactly): the mask is closed.
 *   xh = (a - mu) r    mu = mean(a), var = mean((a - mu)^2), r = (var + eps)^(-1/2), over the
 *                      S positions of (n, c). Differentiating,
 *                        d mu / d a_j = 1 / S,   d var / d a_j = 2 (a_j - mu) / S,
 *                        d xh_i / d a_j = r (delta_ij - 1/S) - (a_i - mu) r^3 (a_j - mu) / S
 *                                       = r (delta_ij - 1/S - xh_i xh_j / S),
 *                      so da_j = sum_i dxh_i d xh_i / d a_j
 *                              = r (dxh_j - mean(dxh) - xh_j mean(dxh xh)).
 *                      Two more reductions per (n, c): mean(dxh) and mean(dxh xh).
 *   a = c m            dc = da m_c, and m's second use: dm_c += sum over (n, s) of da_{c,s} c_{c,s}.
 *   conv               dx, dw and dbias from dc as for any Conv3d (section 4 uses cuDNN for dx
 *                      and dw, our own reduction for dbias = sum of dc over n and s).
 *
 * Only the argmax channel has a non-zero dxh at a position, so mean(dxh) and mean(dxh xh) sum
 * about S/16 terms each; but da is non-zero everywhere: every channel's dc is dense.
 * ========================================================================================== */

/* Decisions near a tie. The argmax and the clamp mask are discontinuous: where the two largest
 * u differ by less than float rounding, or the winner's xh is within rounding of +-1, a float
 * kernel and this double reference may decide differently, and both are right. At such an
 * "ambiguous" position p (margin AMB, about 10x the float error of xh at |xh| ~ 3), for each of
 * the two channels ch that could win, the other decision moves dxh_p by at most |g_p m_ch|, so
 * it moves dc of that slice by at most |m_ch| rstd |g_p m_ch| (1 + |xh_s| |xh_p|) / S at s != p
 * and 2 |m_ch| rstd |g_p m_ch| at p, and dm by the bound in amb_dm. Those go into the tolerance
 * of exactly those elements; everything else is compared as tightly as ever. */
#define AMB 2e-6
/* reduced and cancelling results, against the sum of their terms' magnitudes: dc (the instance
 * norm's backward subtracts two means from dxh: at S = 2 the result is a 1e-5 sliver of its
 * terms), dm and the conv's dw and dbias (float sums of up to 1.6M terms); section 5 checks with
 * it, and the ambiguity bound below is expressed in its units */
#define TOL_SUM 1e-5

typedef struct {
    double *dc;            /* N x 16 x S */
    double *abs_dc;        /* N x 16 x S: the magnitude of dc's terms (NULL: not wanted) */
    double dm[C_OUT];      /* sum over n, both uses of m */
    double abs_dm[C_OUT];  /* sum of the magnitudes of dm's terms (for verify_sum_f32) */
    double amb_dm[C_OUT];  /* what the ambiguous decisions could move dm by */
    int n_amb;             /* ambiguous positions */
} bwd_ref;

static void epilogue_backward_ref(const shape *s, const float *cf, const double *cd,
                                  const double *m, const float *g, bwd_ref *out)
{
    int S = s->s;
    double *dm_n = (double *)calloc((size_t)s->n * 5 * C_OUT, sizeof(double));
    int *amb_n = (int *)calloc(s->n, sizeof(int));
    if (!dm_n || !amb_n)
        die(1, "out of host memory");
#pragma omp parallel for schedule(dynamic)
    for (int n = 0; n < s->n; n++) {
        double mean[C_OUT], rstd[C_OUT], s1[C_OUT] = {0}, s2[C_OUT] = {0};
        double sa1[C_OUT] = {0}, sa2[C_OUT] = {0}; /* the same sums of magnitudes */
        double A1[C_OUT] = {0}, A2[C_OUT] = {0};
        /* this sample's dm terms (first and second use), ambiguity bound, |g t| and |da c| */
        double *dm1 = dm_n + (size_t)n * 5 * C_OUT, *dm2 = dm1 + C_OUT, *amb_b = dm2 + C_OUT;
        double *abs1 = amb_b + C_OUT, *abs2 = abs1 + C_OUT;
        double *dxh = (double *)malloc(sizeof(double) * S);
        int *arg = (int *)malloc(sizeof(int) * S), *amb_pos = (int *)malloc(sizeof(int) * 2 * S);
        int n_amb_pos = 0;
        if (!dxh || !arg || !amb_pos)
            die(1, "out of host memory");
        size_t base = (size_t)n * C_OUT * S;
        for (int co = 0; co < C_OUT; co++) {
            slice_stats_ref(cf, cd, base + (size_t)co * S, S, m[co], IN_EPS, &mean[co], &rstd[co]);
            for (int i = 0; i < S; i++) { /* for the ambiguity bound below */
                double c = cval(cf, cd, base + (size_t)co * S + i);
                A1[co] += fabs(c), A2[co] += fabs(c) * fabs((c * m[co] - mean[co]) * rstd[co]);
            }
        }
        for (int i = 0; i < S; i++) {
            double xh[C_OUT], u[C_OUT];
            int k = 0, k2 = -1;
            for (int co = 0; co < C_OUT; co++) {
                xh[co] = (cval(cf, cd, base + (size_t)co * S + i) * m[co] - mean[co]) * rstd[co];
                u[co] = clamp1(xh[co]) * m[co];
                if (u[co] > u[k])
                    k = co;
            }
            for (int co = 0; co < C_OUT; co++)
                if (co != k && (k2 < 0 || u[co] > u[k2]))
                    k2 = co;
            arg[i] = k;
            dxh[i] = xh[k] >= -1.0 && xh[k] <= 1.0 ? g[(size_t)n * S + i] * m[k] : 0.0;
            s1[k] += dxh[i], s2[k] += dxh[i] * xh[k];
            /* xh's own terms, (|a| + |mean|) rstd: its float error is 2^-24 times that, which
             * exceeds |xh| where the slice's mean is large against its spread */
            double xk_mag = (fabs(cval(cf, cd, base + (size_t)k * S + i) * m[k]) + fabs(mean[k])) * rstd[k];
            sa1[k] += fabs(dxh[i]), sa2[k] += fabs(dxh[i]) * xk_mag;
            dm1[k] += g[(size_t)n * S + i] * clamp1(xh[k]);
            abs1[k] += fabs(g[(size_t)n * S + i]) * (fabs(clamp1(xh[k])) + xk_mag);
            int amb = u[k] - u[k2] <= AMB * (1.0 + fabs(u[k])) || fabs(fabs(xh[k]) - 1.0) <= AMB;
            if (amb) {
                amb_n[n]++;
                int two[2] = {k, k2};
                for (int j = 0; j < 2; j++) {
                    int ch = two[j];
                    double c = cval(cf, cd, base + (size_t)ch * S + i);
                    amb_b[ch] += fabs(g[(size_t)n * S + i]) *
                                 (1.0 + rstd[ch] * fabs(m[ch]) *
                                            (fabs(c) + (A1[ch] + A2[ch] * fabs(xh[ch])) / S));
                    amb_pos[n_amb_pos++] = i * C_OUT + ch;
                }
            }
        }
        for (int co = 0; co < C_OUT; co++) {
            double mean1 = s1[co] / S, mean2 = s2[co] / S;
            for (int i = 0; i < S; i++) {
                size_t e = base + (size_t)co * S + i;
                double c = cval(cf, cd, e), x_h = (c * m[co] - mean[co]) * rstd[co];
                double d = arg[i] == co ? dxh[i] : 0.0;
                double da = rstd[co] * (d - mean1 - x_h * mean2);
                /* the terms' magnitudes, xh's counted as (|a| + |mean|) rstd (above) */
                double x_mag = (fabs(c * m[co]) + fabs(mean[co])) * rstd[co];
                double mag = rstd[co] * (fabs(d) + (sa1[co] + x_mag * sa2[co]) / S);
                out->dc[e] = da * m[co];
                if (out->abs_dc)
                    out->abs_dc[e] = mag * fabs(m[co]);
                dm2[co] += da * c;
                abs2[co] += mag * fabs(c);
            }
        }
        /* the ambiguous decisions' reach into dc, added to its terms' magnitudes (divided by
         * TOL_SUM, the tolerance they will be compared with) */
        for (int q = 0; q < n_amb_pos && out->abs_dc; q++) {
            int p = amb_pos[q] / C_OUT, ch = amb_pos[q] % C_OUT;
            size_t sb = base + (size_t)ch * S;
            double xp = (cval(cf, cd, sb + p) * m[ch] - mean[ch]) * rstd[ch];
            double r = fabs(m[ch]) * rstd[ch] * fabs(g[(size_t)n * S + p] * m[ch]);
            for (int i = 0; i < S; i++) {
                double xs = (cval(cf, cd, sb + i) * m[ch] - mean[ch]) * rstd[ch];
                out->abs_dc[sb + i] += r * ((1.0 + fabs(xs) * fabs(xp)) / S + (i == p ? 2.0 : 0.0)) /
                                       TOL_SUM;
            }
        }
        free(dxh), free(arg), free(amb_pos);
    }
    /* the sums over n in a fixed order */
    for (int co = 0; co < C_OUT; co++)
        out->dm[co] = out->abs_dm[co] = out->amb_dm[co] = 0.0;
    out->n_amb = 0;
    for (int n = 0; n < s->n; n++) {
        const double *d = dm_n + (size_t)n * 5 * C_OUT;
        for (int co = 0; co < C_OUT; co++) {
            out->dm[co] += d[co] + d[C_OUT + co];
            out->amb_dm[co] += d[2 * C_OUT + co];
            out->abs_dm[co] += d[3 * C_OUT + co] + d[4 * C_OUT + co];
        }
        out->n_amb += amb_n[n];
    }
    free(dm_n), free(amb_n);
}

/* The conv's gradients from dc (double): dx by scattering each dc through the 27 taps (one
 * (n, ci) plane per task, so no two tasks write the same dx), dw[co][ci][k] = sum over n and the
 * positions of dc x(shifted by k), dbias = sum of dc. abs_dw / abs_dbias (if not NULL) receive
 * the sums of the terms' magnitudes. */
static void conv3d_backward_ref(const shape *s, const double *x, const double *w, const double *dc,
                                double *dx, double *dw, double *dbias, double *abs_dw,
                                double *abs_dbias)
{
    int hw = s->h * s->w, dhw = s->d * hw;
#pragma omp parallel for collapse(2) schedule(static)
    for (int n = 0; n < s->n; n++)
        for (int ci = 0; ci < C_IN; ci++) {
            double *dxp = dx + ((size_t)n * C_IN + ci) * dhw;
            memset(dxp, 0, sizeof(double) * dhw);
            for (int co = 0; co < C_OUT; co++)
                for (int k = 0; k < KVOL; k++) {
                    double wv = w[(co * C_IN + ci) * KVOL + k];
                    const double *g = dc + ((size_t)n * C_OUT + co) * s->s;
                    double *xo = dxp + (k / 9) * hw + ((k / 3) % 3) * s->w + k % 3;
                    for (int od = 0; od < s->od; od++)
                        for (int oh = 0; oh < s->oh; oh++) {
                            const double *gr = g + ((size_t)od * s->oh + oh) * s->ow;
                            double *xr = xo + od * hw + oh * s->w;
                            for (int ow = 0; ow < s->ow; ow++)
                                xr[ow] += wv * gr[ow];
                        }
                }
        }
#pragma omp parallel for schedule(static)
    for (int j = 0; j < N_WEIGHT; j++) {
        int co = j / (C_IN * KVOL), ci = (j / KVOL) % C_IN, k = j % KVOL;
        double acc = 0.0, mag = 0.0;
        for (int n = 0; n < s->n; n++) {
            const double *g = dc + ((size_t)n * C_OUT + co) * s->s;
            const double *xp = x + ((size_t)n * C_IN + ci) * dhw + (k / 9) * hw +
                               ((k / 3) % 3) * s->w + k % 3;
            for (int od = 0; od < s->od; od++)
                for (int oh = 0; oh < s->oh; oh++)
                    for (int ow = 0; ow < s->ow; ow++) {
                        double t = g[((size_t)od * s->oh + oh) * s->ow + ow] *
                                   xp[od * hw + oh * s->w + ow];
                        acc += t, mag += fabs(t);
                    }
        }
        dw[j] = acc;
        if (abs_dw)
            abs_dw[j] = mag;
    }
    for (int co = 0; co < C_OUT; co++) {
        double acc = 0.0, mag = 0.0;
        for (int n = 0; n < s->n; n++)
            for (int i = 0; i < s->s; i++) {
                double t = dc[((size_t)n * C_OUT + co) * s->s + i];
                acc += t, mag += fabs(t);
            }
        dbias[co] = acc;
        if (abs_dbias)
            abs_dbias[co] = mag;
    }
}

/* ============================================================================================
 * 3. GPU versions
 * ========================================================================================== */

#define FULL 0xffffffffu

__device__ __forceinline__ float clampf1(float v) { return v < -1.0f ? -1.0f : (v > 1.0f ? 1.0f : v); }

__device__ __forceinline__ float warp_sum(float v)
{
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_down_sync(FULL, v, off);
    return v; /* in lane 0 */
}

/* ---------------------------------------------------------------- v1: what eager does
 * PyTorch eager runs a kernel per op and keeps every intermediate in DRAM: a = c m (103 MB out),
 * instance norm (its statistics, then its output), clamp, * m, max. Bytes: 103 MB in and out for
 * each of the four elementwise ops, 103 MB in for the statistics, 103 MB in and 6 MB out for the
 * max: about 0.93 GB against the epilogue's 0.11 GB floor. Prediction: 8.5x the floor, 0.31 ms,
 * plus the statistics kernel, which is the point of v1: one thread per (n, c) walking its 12600
 * values one after another. 2048 threads on 132 SMs (16 a SM, half a warp's worth of work each)
 * cannot hide DRAM latency; each thread's next load waits for the last.
 * Measured (H100 80GB HBM3, KernelBench shape, data/h100/ch03.csv; every number below is from
 * the same file unless it says otherwise): v1 1.673 ms, of which the serial statistics alone
 * take 1.274 ms (81 GB/s); the five other kernels about 0.40 ms. PyTorch eager: 0.474 ms. */

__global__ void k_scale(const float *__restrict__ in, const float *__restrict__ m,
                        float *__restrict__ out, int total, int S)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x)
        out[i] = in[i] * __ldg(m + (i / S) % C_OUT);
}

/* one thread per (n, c): two passes (mean, then the centred squares). Accumulated in double: a
 * serial float sum of S terms may be off by up to about S * 2^-24 of the sum of magnitudes
 * (Higham, ch. 4: 7.5e-4 at S = 12600), more than the tolerance of the checks; the tree-shaped
 * sums of v2..v8 bound it by log2(S) * 2^-24 instead. v1 is latency-bound either way. */
__global__ void k_stats_serial(const float *__restrict__ a, float *__restrict__ mean,
                               float *__restrict__ rstd, int segs, int S)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= segs)
        return;
    const float *p = a + (size_t)j * S;
    double sum = 0.0, sq = 0.0;
    for (int i = 0; i < S; i++)
        sum += p[i];
    double mu = sum / S;
    for (int i = 0; i < S; i++) {
        double d = p[i] - mu;
        sq += d * d;
    }
    mean[j] = (float)mu, rstd[j] = (float)(1.0 / sqrt(sq / S + IN_EPS));
}

__global__ void k_normalize(const float *__restrict__ a, const float *__restrict__ mean,
                            const float *__restrict__ rstd, float *__restrict__ xh, int total, int S)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int seg = i / S;
        xh[i] = (a[i] - __ldg(mean + seg)) * __ldg(rstd + seg);
    }
}

/* comparisons, not fminf/fmaxf: a NaN stays NaN, as in torch.clamp */
__global__ void k_clamp(const float *__restrict__ in, float *__restrict__ out, int total)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x)
        out[i] = clampf1(in[i]);
}

/* one thread per output position: the largest of 16 channel values S apart, the first on
 * ties (strict >); idx, if not NULL, keeps the argmax for the backward as autograd does */
__global__ void k_channel_max(const float *__restrict__ u, float *__restrict__ y,
                              int *__restrict__ idx, int n_pos, int S)
{
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < n_pos; p += gridDim.x * blockDim.x) {
        int n = p / S, s = p - n * S, k = 0;
        const float *up = u + (size_t)n * C_OUT * S + s;
        float best = up[0];
        for (int co = 1; co < C_OUT; co++) {
            float v = up[(size_t)co * S];
            if (v > best)
                best = v, k = co;
        }
        y[p] = best;
        if (idx)
            idx[p] = k;
    }
}

/* ---------------------------------------------------------------- v2..v5: Harris's progression
 * Each (n, c) slice of S values is cut into blocks; a block reduces its piece to one partial
 * (sum of a, sum of a^2) in shared memory, and k_stats_finish adds a slice's partials and turns
 * them into mean = sum / S and var = sum_sq / S - mean^2. The kernels differ only in how the
 * block reduces, which is what Harris's kernels 1, 3, 4 and 5 change:
 *   v2 (kernel 1) interleaved addressing: at step s, thread tid adds sh[tid + s] if
 *      tid % (2s) == 0. Half the threads of every warp idle at the first step, three quarters at
 *      the second, ...: the warps stay resident and diverge, and % is slow.
 *   v3 (kernel 3) sequential addressing: at step s the first s threads add sh[tid + s]. Whole
 *      warps retire together; no bank conflicts (consecutive threads, consecutive words).
 *   v4 (kernel 4) first add during load: each thread loads two elements a block apart and adds
 *      them before the tree; half the threads of v3 were idle after the load.
 *   v5 (kernel 5) the last 64 values by warp shuffles: no __syncthreads once one warp is left.
 *      Harris unrolled it with `volatile` shared memory and implicit warp synchrony; since Volta
 *      (independent thread scheduling) that needs __syncwarp, and __shfl_down_sync does it in
 *      registers.
 * The m multiplier is applied on load (m = NULL: the input is already a = c m).
 * Prediction: the statistics are one read of 103 MB (0.035 ms at the ceiling); v2 far above it,
 * each step closer, v4 about halving v3 (half the blocks do the same bytes).
 * Measured, the statistics alone (103 MB in): v2 0.205 ms, v3 0.196 (5% faster: on the H100 the
 * divergent modulo costs little next to 50 blocks a slice and their partials), v4 0.106 (1.85x:
 * half the blocks, half the partials), v5 0.069 (1.54x: five fewer barriers a block). Each
 * epilogue (v2..v5) is the statistics plus v1's other kernels, 0.40 ms of them. */
#define RED_BLOCK 256

__device__ __forceinline__ float load_scaled(const float *__restrict__ p, int i, int S, float mult)
{
    return i < S ? p[i] * mult : 0.0f;
}

__global__ void __launch_bounds__(RED_BLOCK)
k_stats_interleaved(const float *__restrict__ a, const float *__restrict__ m,
                    float2 *__restrict__ part, int S, int bps)
{
    __shared__ float sh_s[RED_BLOCK], sh_q[RED_BLOCK];
    int seg = blockIdx.x / bps, b = blockIdx.x - seg * bps, tid = threadIdx.x;
    float mult = m ? __ldg(m + seg % C_OUT) : 1.0f;
    float v = load_scaled(a + (size_t)seg * S, b * RED_BLOCK + tid, S, mult);
    sh_s[tid] = v, sh_q[tid] = v * v;
    __syncthreads();
    for (int s = 1; s < RED_BLOCK; s *= 2) {
        if (tid % (2 * s) == 0)
            sh_s[tid] += sh_s[tid + s], sh_q[tid] += sh_q[tid + s];
        __syncthreads();
    }
    if (tid == 0)
        part[blockIdx.x] = make_float2(sh_s[0], sh_q[0]);
}

__global__ void __launch_bounds__(RED_BLOCK)
k_stats_sequential(const float *__restrict__ a, const float *__restrict__ m,
                   float2 *__restrict__ part, int S, int bps)
{
    __shared__ float sh_s[RED_BLOCK], sh_q[RED_BLOCK];
    int seg = blockIdx.x / bps, b = blockIdx.x - seg * bps, tid = threadIdx.x;
    float mult = m ? __ldg(m + seg % C_OUT) : 1.0f;
    float v = load_scaled(a + (size_t)seg * S, b * RED_BLOCK + tid, S, mult);
    sh_s[tid] = v, sh_q[tid] = v * v;
    __syncthreads();
    for (int s = RED_BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s)
            sh_s[tid] += sh_s[tid + s], sh_q[tid] += sh_q[tid + s];
        __syncthreads();
    }
    if (tid == 0)
        part[blockIdx.x] = make_float2(sh_s[0], sh_q[0]);
}

/* v4 and v5: a block covers 2 * RED_BLOCK elements; unroll_last selects v5's warp finish */
template <bool UNROLL_LAST>
__global__ void __launch_bounds__(RED_BLOCK)
k_stats_first_add(const float *__restrict__ a, const float *__restrict__ m,
                  float2 *__restrict__ part, int S, int bps)
{
    __shared__ float sh_s[RED_BLOCK], sh_q[RED_BLOCK];
    int seg = blockIdx.x / bps, b = blockIdx.x - seg * bps, tid = threadIdx.x;
    float mult = m ? __ldg(m + seg % C_OUT) : 1.0f;
    const float *p = a + (size_t)seg * S;
    int i = b * 2 * RED_BLOCK + tid;
    float v0 = load_scaled(p, i, S, mult), v1 = load_scaled(p, i + RED_BLOCK, S, mult);
    sh_s[tid] = v0 + v1, sh_q[tid] = v0 * v0 + v1 * v1;
    __syncthreads();
    for (int s = RED_BLOCK / 2; s > (UNROLL_LAST ? 32 : 0); s >>= 1) {
        if (tid < s)
            sh_s[tid] += sh_s[tid + s], sh_q[tid] += sh_q[tid + s];
        __syncthreads();
    }
    if (UNROLL_LAST) {
        if (tid < 32) {
            float vs = sh_s[tid] + sh_s[tid + 32], vq = sh_q[tid] + sh_q[tid + 32];
            vs = warp_sum(vs), vq = warp_sum(vq);
            if (tid == 0)
                part[blockIdx.x] = make_float2(vs, vq);
        }
    } else if (tid == 0) {
        part[blockIdx.x] = make_float2(sh_s[0], sh_q[0]);
    }
}

/* a warp per slice adds its bps partials in a fixed order; var = E[a^2] - mean^2, clipped at 0
 * (cancellation can make it negative: see the Welford demonstration) */
__global__ void k_stats_finish(const float2 *__restrict__ part, int bps, int segs, int S,
                               float *__restrict__ mean, float *__restrict__ rstd)
{
    int seg = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (seg >= segs)
        return;
    float s = 0.0f, q = 0.0f;
    for (int j = lane; j < bps; j += 32) {
        float2 v = part[(size_t)seg * bps + j];
        s += v.x, q += v.y;
    }
    s = warp_sum(s), q = warp_sum(q);
    if (lane == 0) {
        float mu = s / S, var = fmaxf(q / S - mu * mu, 0.0f);
        mean[seg] = mu, rstd[seg] = rsqrtf(var + (float)IN_EPS);
    }
}

/* ---------------------------------------------------------------- v6..v8: one block a slice
 * Harris's kernel 7: each thread first reduces many elements in registers (here S / 256, about
 * 12 float4 loads at S = 12600), so the shared-memory tree runs once per 12600 values instead of
 * once per 512, and one block per (n, c) needs no partials and no second kernel.
 * Prediction: near the read's 0.035 ms: nothing left but the load and one tree per slice.
 * Measured: 0.0476 ms, 2170 GB/s, 73% of the copy ceiling: 27x v1's statistics. ncu: 79.6% of
 * DRAM peak, the warps waiting on their loads (91 cycles of long-scoreboard stall per issued
 * instruction): one 16-byte load in flight per thread, 12 a thread in all. */
#define MANY_BLOCK 256

/* sum and sum of squares of the block: warp shuffles, then one warp over the warps' results;
 * the result is in thread 0 */
__device__ float2 block_sum2(float2 v)
{
    __shared__ float2 warp_part[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    __syncthreads(); /* a previous call's warp 0 is done reading warp_part */
    v.x = warp_sum(v.x), v.y = warp_sum(v.y);
    if (lane == 0)
        warp_part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < n_warps ? warp_part[lane] : make_float2(0.0f, 0.0f);
        v.x = warp_sum(v.x), v.y = warp_sum(v.y);
    }
    return v;
}

__global__ void __launch_bounds__(MANY_BLOCK)
k_stats_many(const float *__restrict__ a, const float *__restrict__ m, float *__restrict__ mean,
             float *__restrict__ rstd, int S)
{
    int seg = blockIdx.x;
    float mult = m ? __ldg(m + seg % C_OUT) : 1.0f;
    const float *p = a + (size_t)seg * S;
    float2 acc = make_float2(0.0f, 0.0f);
    if ((S & 3) == 0) { /* every slice starts 16-byte aligned */
        const float4 *p4 = (const float4 *)p;
        for (int j = threadIdx.x; j < S / 4; j += MANY_BLOCK) {
            float4 v = p4[j];
            float x0 = v.x * mult, x1 = v.y * mult, x2 = v.z * mult, x3 = v.w * mult;
            acc.x += (x0 + x1) + (x2 + x3);
            acc.y += (x0 * x0 + x1 * x1) + (x2 * x2 + x3 * x3);
        }
    } else {
        for (int j = threadIdx.x; j < S; j += MANY_BLOCK) {
            float x = p[j] * mult;
            acc.x += x, acc.y += x * x;
        }
    }
    acc = block_sum2(acc);
    if (threadIdx.x == 0) {
        float mu = acc.x / S, var = fmaxf(acc.y / S - mu * mu, 0.0f);
        mean[seg] = mu, rstd[seg] = rsqrtf(var + (float)IN_EPS);
    }
}

/* Welford (1962): a running count n, mean and M2 = sum of squared deviations, updated one value
 * at a time, mean += (x - mean) / n, M2 += (x - mean_old)(x - mean_new): every term is a
 * deviation from the current mean, never the raw square that sum-of-squares cancels. Chan,
 * Golub and LeVeque ("Updating formulae and a pairwise algorithm for computing sample
 * variances", 1979) merge two such partial results:
 *   n = na + nb, d = mean_b - mean_a, mean = mean_a + d nb / n, M2 = M2a + M2b + d^2 na nb / n.
 * n is an int: a float count stops being exact at 2^24.
 * Prediction: as fast as v6 (memory-bound), exact where v6 cancels.
 * Measured: v7's statistics 0.0514 ms, 8% slower than v6's (a division per element), CUB's
 * (v8) 0.0522 ms, the same within 2%. What they buy, section 6's demonstration on the
 * KernelBench conv output, a = c m + offset, worst relative error of rstd over 2048 slices:
 *   offset 0:     sum/sum of squares (v6) 1.7e-6, Welford (v7) 1.6e-7, CUB (v8) 1.7e-7
 *   offset 1000:  sum/sum of squares 1.0e+2 (the variance is gone), Welford 1.7e-4, CUB 2.0e-4
 * With the offset, a^2 ~ 1e6 m^2 and its float sum carries errors larger than the variance
 * (~0.03 m^2); Welford's deviations are of the variance's size. 1.7e-4 is the input's own
 * rounding: 1000 m is stored to 2^-24 relative, 6e-5 m absolute, against a spread of 0.17 m. */
struct welford {
    int n;
    float mean, m2;
};

__device__ __forceinline__ void welford_add(welford &w, float x)
{
    w.n += 1;
    float d = x - w.mean;
    w.mean += d / (float)w.n;
    w.m2 += d * (x - w.mean);
}

__device__ __forceinline__ welford chan_merge(welford a, welford b)
{
    int n = a.n + b.n;
    if (b.n == 0)
        return a;
    if (a.n == 0)
        return b;
    float d = b.mean - a.mean, f = (float)b.n / (float)n;
    welford r = {n, a.mean + d * f, a.m2 + b.m2 + d * d * (float)a.n * f};
    return r;
}

struct chan_op {
    __device__ welford operator()(const welford &a, const welford &b) const { return chan_merge(a, b); }
};

__device__ welford thread_welford(const float *__restrict__ p, int S, float mult)
{
    welford w = {0, 0.0f, 0.0f};
    if ((S & 3) == 0) {
        const float4 *p4 = (const float4 *)p;
        for (int j = threadIdx.x; j < S / 4; j += MANY_BLOCK) {
            float4 v = p4[j];
            welford_add(w, v.x * mult), welford_add(w, v.y * mult);
            welford_add(w, v.z * mult), welford_add(w, v.w * mult);
        }
    } else {
        for (int j = threadIdx.x; j < S; j += MANY_BLOCK)
            welford_add(w, p[j] * mult);
    }
    return w;
}

__device__ __forceinline__ welford shfl_welford(welford w, int off)
{
    welford o = {__shfl_down_sync(FULL, w.n, off), __shfl_down_sync(FULL, w.mean, off),
                 __shfl_down_sync(FULL, w.m2, off)};
    return o;
}

__global__ void __launch_bounds__(MANY_BLOCK)
k_stats_welford(const float *__restrict__ a, const float *__restrict__ m, float *__restrict__ mean,
                float *__restrict__ rstd, int S)
{
    __shared__ welford warp_part[MANY_BLOCK / 32];
    int seg = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float mult = m ? __ldg(m + seg % C_OUT) : 1.0f;
    welford w = thread_welford(a + (size_t)seg * S, S, mult);
    for (int off = 16; off > 0; off >>= 1)
        w = chan_merge(w, shfl_welford(w, off));
    if (lane == 0)
        warp_part[warp] = w;
    __syncthreads();
    if (warp == 0) {
        welford z = {0, 0.0f, 0.0f};
        w = lane < MANY_BLOCK / 32 ? warp_part[lane] : z;
        for (int off = 16; off > 0; off >>= 1)
            w = chan_merge(w, shfl_welford(w, off));
        if (lane == 0)
            mean[seg] = w.mean, rstd[seg] = rsqrtf(w.m2 / S + (float)IN_EPS);
    }
}

/* v8: the same per-thread Welford, the block's merge by cub::BlockReduce with Chan's operator
 * (CUB picks its own algorithm: warp-shuffle reductions, then shared memory across warps) */
__global__ void __launch_bounds__(MANY_BLOCK)
k_stats_cub(const float *__restrict__ a, const float *__restrict__ m, float *__restrict__ mean,
            float *__restrict__ rstd, int S)
{
    typedef cub::BlockReduce<welford, MANY_BLOCK> block_reduce;
    __shared__ typename block_reduce::TempStorage tmp;
    int seg = blockIdx.x;
    float mult = m ? __ldg(m + seg % C_OUT) : 1.0f;
    welford w = thread_welford(a + (size_t)seg * S, S, mult);
    w = block_reduce(tmp).Reduce(w, chan_op());
    if (threadIdx.x == 0)
        mean[seg] = w.mean, rstd[seg] = rsqrtf(w.m2 / S + (float)IN_EPS);
}

/* ---------------------------------------------------------------- v9: fused apply
 * After the statistics, one kernel does the rest: a thread per output position reads its 16
 * channel values (16 loads in flight), normalises, clamps, multiplies, keeps the first maximum
 * and writes y. c is read twice in all (statistics, apply): 0.21 GB, the two-pass floor.
 * Prediction: near the two-pass floor, 0.071 ms, a 5x drop from v7's 0.45 ms.
 * Measured: 0.0919 ms (40% of the copy ceiling; the two-pass floor is 0.071 ms), 18x v1,
 * 1.08x torch.compile (0.0992 ms). */
__global__ void k_apply_fused(const float *__restrict__ c, const float *__restrict__ m,
                              const float *__restrict__ mean, const float *__restrict__ rstd,
                              float *__restrict__ y, int n_pos, int S)
{
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < n_pos; p += gridDim.x * blockDim.x) {
        int n = p / S, s = p - n * S;
        const float *cp = c + (size_t)n * C_OUT * S + s;
        float best = 0.0f;
#pragma unroll
        for (int co = 0; co < C_OUT; co++) {
            float mc = __ldg(m + co);
            float u = clampf1((cp[(size_t)co * S] * mc - __ldg(mean + n * C_OUT + co)) *
                              __ldg(rstd + n * C_OUT + co)) * mc;
            if (co == 0 || u > best)
                best = u;
        }
        y[p] = best;
    }
}

/* ---------------------------------------------------------------- v10: one pass, a cluster
 * The two reads of v9 are one too many: the floor reads c once. A sample's 16 x S values
 * (806 KB at S = 12600) do not fit one SM's shared memory (228 KB), but Hopper's thread-block
 * clusters let up to 8 blocks on 8 SMs read each other's shared memory (distributed shared
 * memory, CUDA C++ Programming Guide, "Thread Block Clusters"). A cluster of 8 blocks per sample:
 *   1. block r loads positions [lo_r, hi_r) of all 16 channels into its shared memory
 *      (100.9 KB at S = 12600: two blocks an SM);
 *   2. warp w of every block sums channel w of its slice; cluster.sync(); every block reads the
 *      8 partial sums of each channel from the 8 blocks, in the same order, so all get the same
 *      mean; then the centred squares the same way (an exact two-pass variance: the values are
 *      on chip, so the second pass costs no DRAM);
 *   3. each block writes y for its positions from shared memory.
 * Slices are cut at multiples of 4 positions so 16-byte loads stay aligned.
 * Prediction: toward the one-read floor, 0.037 ms, if the reductions hide behind other blocks'
 * loads. Measured: 0.0738 ms, 50% of the copy ceiling: 1.25x v9, 1.34x torch.compile, but twice the
 * 0.037 ms floor it was built to approach. Each step, in other runs: register loads (four in
 * flight a thread) 0.0867 ms; cp.async, every copy in flight (LOAD_ASYNC 1) 0.0779; one cluster
 * barrier (Chan's merge) instead of two (CLUSTER_CHAN 0) 0.0783 against 0.0801, within the
 * spread; each row its own bulk copy and mbarrier, warp w reducing row w as soon as it lands
 * (STREAM_ROWS 1) 0.0743 and 0.0747 against 0.0779 and 0.0785 in two runs. ncu (the two-barrier form):
 * 45% of DRAM peak; per issued instruction 3.6 cycles waiting at barriers, 3.5 on loads, 2.7 on
 * memory fences (a cluster barrier releases and acquires shared memory); 30 clusters fit at once
 * (two 101 KB blocks an SM), so the 128 run in 4.3 waves, and while a block reduces, its SM's
 * share of DRAM bandwidth goes unused. The README discusses the miss. */
#define CL 8           /* blocks a cluster, one cluster a sample (8: the portable maximum) */
#define CL_THREADS 512 /* 16 warps: warp w reduces channel w */

__host__ __device__ static inline int slice_lo(int S, int r, int cl = CL)
{
    int q = (S + 3) / 4, v = 4 * (int)((long long)q * r / cl);
    return v < S ? v : S;
}

/* floats per channel row in shared memory: the longest slice */
__host__ __device__ static inline int slice_cap(int S, int cl = CL)
{
    return 4 * (((S + 3) / 4 + cl - 1) / cl);
}

/* shared memory of the cluster kernels, bytes: the 16 rows (+ g and the argmax for b3) */
static size_t cluster_smem(int S, int backward, int cl = CL)
{
    size_t cap = slice_cap(S, cl);
    return 4 * C_OUT * cap + (backward ? 4 * cap + cap : 0);
}

/* the cluster's per-block partials and the statistics every block ends with */
struct cluster_shared {
    float part[2][C_OUT]; /* sums of this block's slice: [0] of a, [1] of the centred squares */
    welford wf[2][C_OUT]; /* CLUSTER_CHAN: the slice's (count, mean, M2), by sample parity */
    float mean[C_OUT], rstd[C_OUT], m[C_OUT];
    float part_bwd[3][C_OUT]; /* b3: sums of dxh, dxh xh over the slice; dm of the block */
};

/* warp `warp` adds the 8 blocks' partial for its channel in rank order: the same bits in every
 * block of the cluster */
__device__ __forceinline__ float cluster_total(cg::cluster_group &cluster, float *part, int ch)
{
    int lane = threadIdx.x & 31;
    float v = lane < (int)cluster.num_blocks() ? cluster.map_shared_rank(part, lane)[ch] : 0.0f;
    v = warp_sum(v);
    return __shfl_sync(FULL, v, 0);
}

/* The copy engine's way (Hopper's TMA, here its 1-D bulk form, PTX ISA "cp.async.bulk"): one
 * thread asks for each 16-channel row of the next sample as one bulk copy that completes on an
 * mbarrier in shared memory (arrive.expect_tx sets how many bytes the phase waits for); the
 * block waits on the barrier's phase parity. A bulk copy's source, destination and size must be
 * multiples of 16 bytes: S % 4 == 0. Otherwise v11 copies with cp.async per thread, which the
 * cluster barrier's release fence then waits for (ncu: "membar" stalls). */
__device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(unsigned long long *bar)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(unsigned long long *bar, unsigned parity)
{
    asm volatile("{\n\t.reg .pred p;\n"
                 "WAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
                 "@!p bra WAIT_%=;\n}" ::"r"(smem_u32(bar)),
                 "r"(parity)
                 : "memory");
}

/* thread 0: the 16 rows of one sample's slice into vals, completing on bar */
__device__ void bulk_slice(float *vals, int cap, const float *__restrict__ src, int len, int S,
                           unsigned long long *bar)
{
    unsigned bytes = 4u * len;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); /* after the last generic reads */
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
                 "r"(C_OUT * bytes)
                 : "memory");
    for (int co = 0; co < C_OUT && bytes; co++)
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                     "%2, [%3];" ::"r"(smem_u32(vals + co * cap)),
                     "l"(src + (size_t)co * S), "r"(bytes), "r"(smem_u32(bar))
                     : "memory");
}

/* thread 0: the 16 rows, row co completing on bars[co], so that warp co can start on its row
 * while the later ones are still arriving (v10 with STREAM_ROWS) */
__device__ void bulk_rows(float *vals, int cap, const float *__restrict__ src, int len, int S,
                          unsigned long long *bars)
{
    unsigned bytes = 4u * len;
    for (int co = 0; co < C_OUT; co++) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                         smem_u32(&bars[co])),
                     "r"(bytes)
                     : "memory");
        if (bytes)
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], "
                         "[%1], %2, [%3];" ::"r"(smem_u32(vals + co * cap)),
                         "l"(src + (size_t)co * S), "r"(bytes), "r"(smem_u32(&bars[co]))
                         : "memory");
    }
}

/* step 2: mean and rstd of channel `warp` over the whole sample, into cs->mean / cs->rstd.
 * CLUSTER_CHAN 1: each block reduces its slice exactly on its own (its mean, then its centred
 * squares, both from shared memory) and the cluster exchanges (count, mean, M2) once, merged by
 * Chan's formula (section v7) in rank order: one cluster barrier per sample. CLUSTER_CHAN 0: the
 * sample's sum first, then the centred squares about the sample's mean: two barriers. `parity`
 * alternates the exchanged partials between samples (v11), so a block may write the next
 * sample's while a slow peer still reads this one's. */
#ifndef CLUSTER_CHAN
#define CLUSTER_CHAN 1
#endif
__device__ void cluster_stats(cg::cluster_group &cluster, cluster_shared *cs, const float *vals,
                              int cap, int len, int S, int parity,
                              unsigned long long *row_bars = NULL)
{
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (row_bars) /* this warp's row may still be arriving (v10, STREAM_ROWS) */
        mbar_wait(&row_bars[warp], 0);
    const float *row = vals + warp * cap;
    float mult = cs->m[warp], acc = 0.0f;
    for (int j = lane; j < len; j += 32)
        acc += row[j] * mult;
    acc = warp_sum(acc);
    if (CLUSTER_CHAN) {
        float lm = len > 0 ? __shfl_sync(FULL, acc, 0) / len : 0.0f, q = 0.0f;
        for (int j = lane; j < len; j += 32) {
            float d = row[j] * mult - lm;
            q += d * d;
        }
        q = warp_sum(q);
        if (lane == 0) {
            welford w = {len, lm, q};
            cs->wf[parity][warp] = w;
        }
        cluster.sync();
        welford z = {0, 0.0f, 0.0f};
        int cl = (int)cluster.num_blocks(); /* 8, or v11's 16 */
        welford w = lane < cl ? cluster.map_shared_rank(cs->wf[parity], lane)[warp] : z;
        for (int off = cl / 2; off > 0; off >>= 1)
            w = chan_merge(w, shfl_welford(w, off));
        if (lane == 0)
            cs->mean[warp] = w.mean, cs->rstd[warp] = rsqrtf(w.m2 / S + (float)IN_EPS);
        __syncthreads();
        return;
    }
    if (lane == 0)
        cs->part[0][warp] = acc;
    cluster.sync();
    float mu = cluster_total(cluster, cs->part[0], warp) / S;
    float q = 0.0f;
    for (int j = lane; j < len; j += 32) {
        float d = row[j] * mult - mu;
        q += d * d;
    }
    q = warp_sum(q);
    if (lane == 0)
        cs->part[1][warp] = q;
    cluster.sync();
    float var = cluster_total(cluster, cs->part[1], warp) / S;
    if (lane == 0)
        cs->mean[warp] = mu, cs->rstd[warp] = rsqrtf(var + (float)IN_EPS);
    __syncthreads();
}

/* step 3: y for the slice; the statistics also to global memory (the backward's) from rank 0 */
__device__ void cluster_apply(const cluster_shared *cs, const float *vals, int cap, int len,
                              float *__restrict__ y, float *__restrict__ mean,
                              float *__restrict__ rstd, int n, int rank)
{
    for (int j = threadIdx.x; j < len; j += CL_THREADS) {
        float best = 0.0f;
#pragma unroll
        for (int co = 0; co < C_OUT; co++) {
            float u = clampf1((vals[co * cap + j] * cs->m[co] - cs->mean[co]) * cs->rstd[co]) * cs->m[co];
            if (co == 0 || u > best)
                best = u;
        }
        y[j] = best;
    }
    if (rank == 0 && threadIdx.x < C_OUT)
        mean[n * C_OUT + threadIdx.x] = cs->mean[threadIdx.x],
        rstd[n * C_OUT + threadIdx.x] = cs->rstd[threadIdx.x];
}

/* step 1 of v10 and b3: 16 rows of `len` values from global rows S apart into shared rows cap
 * apart; four 16-byte loads in flight per thread before they are stored */
__device__ void load_slice(float *vals, int cap, const float *__restrict__ src, int len, int S)
{
    if ((S & 3) == 0) { /* lo, len and every row start are multiples of 4 floats */
        int len4 = len >> 2, total = C_OUT * len4;
        for (int base = threadIdx.x; base < total; base += 4 * CL_THREADS) {
            float4 v[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int i = base + u * CL_THREADS, co = i / (len4 > 0 ? len4 : 1);
                if (i < total)
                    v[u] = __ldg((const float4 *)(src + (size_t)co * S) + (i - co * len4));
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int i = base + u * CL_THREADS, co = i / (len4 > 0 ? len4 : 1);
                if (i < total)
                    *((float4 *)(vals + co * cap) + (i - co * len4)) = v[u];
            }
        }
    } else {
        int total = C_OUT * len;
        for (int base = threadIdx.x; base < total; base += 4 * CL_THREADS) {
            float v[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int i = base + u * CL_THREADS, co = i / (len > 0 ? len : 1);
                if (i < total)
                    v[u] = __ldg(src + (size_t)co * S + (i - co * len));
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int i = base + u * CL_THREADS, co = i / (len > 0 ? len : 1);
                if (i < total)
                    vals[co * cap + (i - co * len)] = v[u];
            }
        }
    }
}

/* The same with cp.async (LDGSTS: global to shared memory without passing through registers,
 * CUDA C++ Programming Guide, "Asynchronous Data Copies"): every copy of the slice in flight at
 * once, where load_slice has four 16-byte loads a thread in flight, a DRAM latency per round.
 * LOAD_ASYNC selects it for v10 and b3 (1: cp.async). The caller waits with
 * __pipeline_wait_prior(0) and __syncthreads(). */
#ifndef LOAD_ASYNC
#define LOAD_ASYNC 1
#endif
/* STREAM_ROWS (v10): each channel row its own bulk copy and mbarrier, so warp w starts reducing
 * row w while later rows are still arriving */
#ifndef STREAM_ROWS
#define STREAM_ROWS 1
#endif
__device__ void issue_slice(float *vals, int cap, const float *__restrict__ src, int len, int S)
{
    if ((S & 3) == 0) {
        int len4 = len >> 2, total = C_OUT * len4;
        for (int i = threadIdx.x; i < total; i += CL_THREADS) {
            int co = i / len4, j = i - co * len4;
            __pipeline_memcpy_async(vals + co * cap + 4 * j, src + (size_t)co * S + 4 * j, 16);
        }
    } else {
        int total = C_OUT * len;
        for (int i = threadIdx.x; i < total; i += CL_THREADS) {
            int co = i / len, j = i - co * len;
            __pipeline_memcpy_async(vals + co * cap + j, src + (size_t)co * S + j, 4);
        }
    }
    __pipeline_commit();
}

__device__ void fill_slice(float *vals, int cap, const float *__restrict__ src, int len, int S)
{
    if (LOAD_ASYNC) {
        issue_slice(vals, cap, src, len, S);
        __pipeline_wait_prior(0);
    } else {
        load_slice(vals, cap, src, len, S);
    }
}

__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(CL_THREADS, 2)
k_cluster_epilogue(const float *__restrict__ c, const float *__restrict__ m, float *__restrict__ y,
                   float *__restrict__ mean, float *__restrict__ rstd, int S)
{
    extern __shared__ float4 smem4[];
    float *vals = (float *)smem4;
    __shared__ cluster_shared cs;
    cg::cluster_group cluster = cg::this_cluster();
    int rank = (int)cluster.block_rank(), n = blockIdx.y, cap = slice_cap(S);
    int lo = slice_lo(S, rank), len = slice_lo(S, rank + 1) - lo;
    __shared__ unsigned long long row_bars[C_OUT];
    const float *src = c + (size_t)n * C_OUT * S + lo;
    int stream = STREAM_ROWS && (S & 3) == 0; /* bulk copies need 16-byte rows */
    if (threadIdx.x < C_OUT)
        cs.m[threadIdx.x] = __ldg(m + threadIdx.x);
    if (stream) {
        if (threadIdx.x == 0) {
            for (int co = 0; co < C_OUT; co++)
                mbar_init(&row_bars[co]);
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        __syncthreads();
        if (threadIdx.x == 0)
            bulk_rows(vals, cap, src, len, S, row_bars);
    } else {
        fill_slice(vals, cap, src, len, S);
        __syncthreads();
    }
    /* with stream, warp w waits for row w only; every row has landed once the cluster barrier
     * inside cluster_stats is passed (each was waited for by its warp before arriving) */
    cluster_stats(cluster, &cs, vals, cap, len, S, 0, stream ? row_bars : NULL);
    cluster_apply(&cs, vals, cap, len, y + (size_t)n * S + lo, mean, rstd, n, rank);
    cluster.sync(); /* no block may exit while another still reads its partials */
}

/* ---------------------------------------------------------------- v11: v10, pipelined
 * v10 runs in waves: 128 clusters, of which only about 30 fit at once (two 101 KB blocks an
 * SM), so every SM loads, then reduces and writes while DRAM idles, then loads again; and the
 * fifth wave is a quarter full. v11 keeps as many clusters as fit with TWO slices of shared
 * memory each (one block an SM) resident for the whole grid, each walking samples g, g + G, ...;
 * while it reduces and writes sample n from one buffer, cp.async (LDGSTS: global to shared
 * memory without passing through registers, CUDA C++ Programming Guide, "Asynchronous Data
 * Copies") fills the other with sample n + G. DRAM stays busy; the reductions hide under it.
 * Predicted: near the floor. Measured: 0.0839 ms, slower than v10 (0.0738). Only 15 clusters fit
 * (one 202 KB block an SM: 120 SMs, 16 warps each), and with two barriers a sample (CLUSTER_CHAN
 * 0) 0.0902 ms; ncu on that form: 40% of DRAM peak, memory-fence stalls first (3.2 cycles per
 * issued instruction). The overlap the double buffer allows is spent waiting at barriers. */
/* CLP: v11's blocks a cluster. 16 (a non-portable size Hopper allows) halves each block's
 * slice, so two double-buffered blocks fit an SM; measured (another run): 0.115 ms against 0.084
 * with 8, only 14 such clusters being resident at once (224 blocks on 132 SMs). */
#ifndef CLP
#define CLP 8
#endif
__global__ void __cluster_dims__(CLP, 1, 1) __launch_bounds__(CL_THREADS, CLP == 16 ? 2 : 1)
k_cluster_pipelined(const float *__restrict__ c, const float *__restrict__ m,
                    float *__restrict__ y, float *__restrict__ mean, float *__restrict__ rstd,
                    int S, int N)
{
    extern __shared__ float4 smem4[];
    __shared__ cluster_shared cs;
    __shared__ unsigned long long bar[2];
    cg::cluster_group cluster = cg::this_cluster();
    int rank = (int)cluster.block_rank(), cap = slice_cap(S, CLP), G = gridDim.y;
    int lo = slice_lo(S, rank, CLP), len = slice_lo(S, rank + 1, CLP) - lo, bulk = (S & 3) == 0;
    float *buf[2] = {(float *)smem4, (float *)smem4 + C_OUT * cap};
    if (threadIdx.x < C_OUT)
        cs.m[threadIdx.x] = __ldg(m + threadIdx.x);
    if (threadIdx.x == 0) {
        mbar_init(&bar[0]), mbar_init(&bar[1]);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    int n = blockIdx.y; /* the same in every block of the cluster: the loop is uniform */
    if (n < N) {
        if (!bulk)
            issue_slice(buf[0], cap, c + (size_t)n * C_OUT * S + lo, len, S);
        else if (threadIdx.x == 0)
            bulk_slice(buf[0], cap, c + (size_t)n * C_OUT * S + lo, len, S, &bar[0]);
    }
    for (int it = 0; n < N; it++, n += G) {
        float *vals = buf[it & 1], *next = buf[(it + 1) & 1];
        const float *src = c + (size_t)(n + G) * C_OUT * S + lo;
        if (!bulk) {
            if (n + G < N)
                issue_slice(next, cap, src, len, S);
            else
                __pipeline_commit(); /* an empty group keeps the count below right */
            __pipeline_wait_prior(1); /* this sample's copies are done (this thread's) */
        } else {
            if (n + G < N && threadIdx.x == 0)
                bulk_slice(next, cap, src, len, S, &bar[(it + 1) & 1]);
            mbar_wait(&bar[it & 1], (it >> 1) & 1);
        }
        __syncthreads(); /* every thread's copies */
        cluster_stats(cluster, &cs, vals, cap, len, S, it & 1);
        cluster_apply(&cs, vals, cap, len, y + (size_t)n * S + lo, mean, rstd, n, rank);
        __syncthreads(); /* vals is refilled next iteration */
    }
    cluster.sync();
}

/* ---------------------------------------------------------------- v11, v12: the conv inside
 * 3 -> 16 channels with a 3x3x3 kernel: 81 inputs and 1296 weights per output position, all 16
 * channels from the same 81 loads. The weights sit in constant memory: every thread of a warp
 * reads the same weight at the same time (each computes all 16 channels), the one pattern the
 * constant cache serves at full speed, and an FFMA can take it straight from the constant bank,
 * so the inner loop is 1296 FFMA and 81 loads, nothing else. The x loads go through L1 (x is
 * 25 MB, each value is read by 27 neighbouring positions).
 * Measured (CONV_SMEM 0, another run): v12 0.807 ms, v13 0.443 ms, both slower than the shared-
 * memory form below (0.402 and 0.242 ms in that run): the straight-line body does not fit the
 * instruction cache. */
__constant__ float c_weight[N_WEIGHT];
__constant__ float c_bias[C_OUT];

/* acc[co] = conv output of channel co at the position whose input corner is xs */
__device__ __forceinline__ void conv_at(const float *__restrict__ xs, int hw, int w, int dhw,
                                        float acc[C_OUT])
{
#pragma unroll
    for (int co = 0; co < C_OUT; co++)
        acc[co] = c_bias[co];
#pragma unroll
    for (int ci = 0; ci < C_IN; ci++)
#pragma unroll
        for (int k = 0; k < KVOL; k++) {
            float xv = __ldg(xs + ci * dhw + (k / 9) * hw + ((k / 3) % 3) * w + k % 3);
#pragma unroll
            for (int co = 0; co < C_OUT; co++)
                acc[co] = fmaf(xv, c_weight[(co * C_IN + ci) * KVOL + k], acc[co]);
        }
}

/* The same with the weights in shared memory as [ci][kd][kh][kw][co]: the 16 weights of a tap
 * are four 16-byte broadcasts (every thread reads the same address), and the loop over (ci, kd)
 * stays rolled, so the body is 9 taps: 9 loads, 36 LDS.128, 144 FFMA. The fully unrolled
 * constant-memory form above is 1296 FFMA of straight-line code, about 22 KB of instructions.
 * CONV_SMEM selects (1: this one). Prediction for v13: compute-bound, the conv's 0.062 ms at
 * the FMA peak plus the epilogue's on-chip work; v12 at least twice the conv.
 * Measured: v12 (the conv twice) 0.404 ms, 21 TFLOP/s. v13 (once) with one position a thread
 * 0.242 ms, 17 TFLOP/s; ncu on it: the SMs 49% busy, per issued instruction 3.3 cycles waiting
 * on shared memory (four LDS.128 per 16 FFMA) and 2.7 at barriers. Hence conv_at_s2 below. */
#ifndef CONV_SMEM
#define CONV_SMEM 1
#endif
#define FMA4(acc, o, xv, wv)                                                                      \
    acc[o] = fmaf(xv, wv.x, acc[o]), acc[o + 1] = fmaf(xv, wv.y, acc[o + 1]),                      \
    acc[o + 2] = fmaf(xv, wv.z, acc[o + 2]), acc[o + 3] = fmaf(xv, wv.w, acc[o + 3])

__device__ __forceinline__ void conv_at_s(const float *__restrict__ xs, int hw, int w, int dhw,
                                          const float *ws, const float *bs, float acc[C_OUT])
{
#pragma unroll
    for (int co = 0; co < C_OUT; co++)
        acc[co] = bs[co];
#pragma unroll 1
    for (int ck = 0; ck < C_IN * KS; ck++) {
        int ci = ck / KS, kd = ck - KS * ci;
        const float *xp = xs + ci * dhw + kd * hw;
        const float4 *wp = (const float4 *)(ws + ck * 9 * C_OUT);
#pragma unroll
        for (int q = 0; q < 9; q++) {
            float xv = __ldg(xp + (q / 3) * w + q % 3);
            float4 w0 = wp[4 * q], w1 = wp[4 * q + 1], w2 = wp[4 * q + 2], w3 = wp[4 * q + 3];
            FMA4(acc, 0, xv, w0);
            FMA4(acc, 4, xv, w1);
            FMA4(acc, 8, xv, w2);
            FMA4(acc, 12, xv, w3);
        }
    }
}

/* Register blocking: two positions a thread, each weight broadcast feeding both, so a tap is
 * 2 loads, 4 LDS.128 and 32 FFMA instead of 1, 4 and 16. CONV_PAIR selects it for v13.
 * Measured: v13 0.229 ms (18 TFLOP/s), 2.1x torch.compile's whole model (0.491 ms) and 2.5x
 * cuDNN's conv alone (0.56 ms in this run, 0.49 to 0.56 across runs); 6% better than one position a thread (0.242 ms,
 * CONV_PAIR 0, another run), less than the halved shared-memory traffic promised: at 64
 * registers (two blocks an SM) ptxas spills 112 bytes, and with 128 (MODEL_MIN_BLOCKS 1, one
 * block an SM) it measured 0.234 ms. The 0.10 ms target needs about 45 TFLOP/s from the conv
 * phase and its waves (30 clusters at once, 128 samples) overlapped with the reductions. */
#ifndef CONV_PAIR
#define CONV_PAIR 1
#endif
__device__ __forceinline__ void conv_at_s2(const float *__restrict__ xa, const float *__restrict__ xb,
                                           int hw, int w, int dhw, const float *ws,
                                           const float *bs, float acc[C_OUT], float acc2[C_OUT])
{
#pragma unroll
    for (int co = 0; co < C_OUT; co++)
        acc[co] = acc2[co] = bs[co];
#pragma unroll 1
    for (int ck = 0; ck < C_IN * KS; ck++) {
        int ci = ck / KS, kd = ck - KS * ci, off = ci * dhw + kd * hw;
        const float4 *wp = (const float4 *)(ws + ck * 9 * C_OUT);
#pragma unroll
        for (int q = 0; q < 9; q++) {
            int o = off + (q / 3) * w + q % 3;
            float va = __ldg(xa + o), vb = __ldg(xb + o);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float4 wv = wp[4 * q + i];
                FMA4(acc, 4 * i, va, wv);
                FMA4(acc2, 4 * i, vb, wv);
            }
        }
    }
}

/* the block's copy of the weights, transposed to [tap][co] */
struct conv_smem_w {
    float w[N_WEIGHT];
    float b[C_OUT];
};

__device__ void load_weights(conv_smem_w *sw, const float *__restrict__ weight,
                             const float *__restrict__ bias)
{
    for (int i = threadIdx.x; i < N_WEIGHT; i += blockDim.x) {
        int co = i / (C_IN * KVOL), tap = i - co * (C_IN * KVOL);
        sw->w[tap * C_OUT + co] = __ldg(weight + i);
    }
    if (threadIdx.x < C_OUT)
        sw->b[threadIdx.x] = __ldg(bias + threadIdx.x);
}

#if CONV_SMEM
#define CONV_PROLOGUE                                                                              \
    __shared__ __align__(16) conv_smem_w sw;                                                      \
    load_weights(&sw, weight, bias);                                                              \
    __syncthreads()
#define CONV_AT(xs, acc) conv_at_s(xs, hw, sh.w, dhw, sw.w, sw.b, acc)
#else
#define CONV_PROLOGUE (void)weight, (void)bias
#define CONV_AT(xs, acc) conv_at(xs, hw, sh.w, dhw, acc)
#endif

/* the input corner of output position s of sample n */
__device__ __forceinline__ const float *conv_corner(const float *x, const shape sh, int n, int s)
{
    int ow = s % sh.ow, t = s / sh.ow, oh = t % sh.oh, od = t / sh.oh;
    return x + (size_t)n * C_IN * sh.d * sh.h * sh.w + ((size_t)od * sh.h + oh) * sh.w + ow;
}

/* v12: v10 with step 1 computing the conv into shared memory instead of loading it */
#ifndef MODEL_MIN_BLOCKS
#define MODEL_MIN_BLOCKS 2 /* blocks an SM v13 is compiled for: 2 caps registers at 64 */
#endif
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(CL_THREADS, MODEL_MIN_BLOCKS)
k_cluster_model(const float *__restrict__ x, const float *__restrict__ weight,
                const float *__restrict__ bias, const float *__restrict__ m,
                float *__restrict__ y, float *__restrict__ mean, float *__restrict__ rstd,
                const shape sh)
{
    extern __shared__ float4 smem4[];
    float *vals = (float *)smem4;
    __shared__ cluster_shared cs;
    cg::cluster_group cluster = cg::this_cluster();
    int S = sh.s, rank = (int)cluster.block_rank(), n = blockIdx.y, cap = slice_cap(S);
    int lo = slice_lo(S, rank), len = slice_lo(S, rank + 1) - lo;
    int hw = sh.h * sh.w, dhw = sh.d * hw;
    if (threadIdx.x < C_OUT)
        cs.m[threadIdx.x] = __ldg(m + threadIdx.x);
    CONV_PROLOGUE;
#if CONV_SMEM && CONV_PAIR
    int half = (len + 1) / 2; /* positions j and j + half */
    for (int j = threadIdx.x; j < half; j += CL_THREADS) {
        float acc[C_OUT], acc2[C_OUT];
        int j2 = j + half < len ? j + half : j;
        conv_at_s2(conv_corner(x, sh, n, lo + j), conv_corner(x, sh, n, lo + j2), hw, sh.w, dhw,
                   sw.w, sw.b, acc, acc2);
#pragma unroll
        for (int co = 0; co < C_OUT; co++)
            vals[co * cap + j] = acc[co], vals[co * cap + j2] = acc2[co];
    }
#else
    for (int j = threadIdx.x; j < len; j += CL_THREADS) {
        float acc[C_OUT];
        CONV_AT(conv_corner(x, sh, n, lo + j), acc);
#pragma unroll
        for (int co = 0; co < C_OUT; co++)
            vals[co * cap + j] = acc[co];
    }
#endif
    __syncthreads();
    cluster_stats(cluster, &cs, vals, cap, len, S, 0);
    cluster_apply(&cs, vals, cap, len, y + (size_t)n * S + lo, mean, rstd, n, rank);
    cluster.sync();
}

/* v11 pass 1: a block computes the conv at TILE positions of one sample into shared memory,
 * then warp w reduces channel w exactly (the tile's mean, then its centred squares) and writes
 * (count, mean, M2) for Chan's merge; nothing of the conv reaches DRAM */
#define TILE 512 /* one position a thread; 32 KB of static shared memory */

__global__ void __launch_bounds__(CL_THREADS)
k_conv_stats(const float *__restrict__ x, const float *__restrict__ weight,
             const float *__restrict__ bias, welford *__restrict__ part, const shape sh, int tiles)
{
    __shared__ float vals[C_OUT * TILE];
    int S = sh.s, n = blockIdx.y, lo = blockIdx.x * TILE, len = min(TILE, S - lo);
    int hw = sh.h * sh.w, dhw = sh.d * hw;
    CONV_PROLOGUE;
    for (int j = threadIdx.x; j < len; j += CL_THREADS) {
        float acc[C_OUT];
        CONV_AT(conv_corner(x, sh, n, lo + j), acc);
#pragma unroll
        for (int co = 0; co < C_OUT; co++)
            vals[co * TILE + j] = acc[co];
    }
    __syncthreads();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float *row = vals + warp * TILE;
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
__global__ void k_merge_tiles(const welford *__restrict__ part, int tiles, int segs,
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

/* v11 pass 2: a thread per position recomputes the 16 conv values and writes y */
__global__ void __launch_bounds__(256)
k_conv_apply(const float *__restrict__ x, const float *__restrict__ weight,
             const float *__restrict__ bias, const float *__restrict__ m,
             const float *__restrict__ mean, const float *__restrict__ rstd,
             float *__restrict__ y, const shape sh)
{
    int S = sh.s, hw = sh.h * sh.w, dhw = sh.d * hw;
    int n_pos = sh.n * S;
    CONV_PROLOGUE;
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < n_pos; p += gridDim.x * blockDim.x) {
        int n = p / S, s = p - n * S;
        float acc[C_OUT], best = 0.0f;
        CONV_AT(conv_corner(x, sh, n, s), acc);
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

/* ---------------------------------------------------------------- backward kernels
 * b1, autograd-like: v1's forward keeps a, xh, t and the argmax (int32 here; autograd keeps
 * int64), then one kernel per op of section 2b. Every intermediate gradient is a dense
 * 103 MB tensor. */

/* du = g at the argmax channel, 0 elsewhere (autograd: zeros, then a scatter) */
__global__ void k_max_backward(const float *__restrict__ g, const int *__restrict__ idx,
                               float *__restrict__ du, int total, int S)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int s = i % S, nc = i / S, n = nc / C_OUT, co = nc - n * C_OUT;
        du[i] = idx[n * S + s] == co ? g[n * S + s] : 0.0f;
    }
}

/* the clamp's mask is closed: the gradient passes at xh = -1 and xh = 1 */
__global__ void k_clamp_backward(const float *__restrict__ dt, const float *__restrict__ xh,
                                 float *__restrict__ dxh, int total)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        float v = xh[i];
        dxh[i] = v >= -1.0f && v <= 1.0f ? dt[i] : 0.0f;
    }
}

/* a block per (n, c): the means of dxh and dxh xh (v6's technique) */
__global__ void __launch_bounds__(MANY_BLOCK)
k_instnorm_bwd_reduce(const float *__restrict__ dxh, const float *__restrict__ xh,
                      float2 *__restrict__ means, int S)
{
    const float *d = dxh + (size_t)blockIdx.x * S, *x = xh + (size_t)blockIdx.x * S;
    float2 acc = make_float2(0.0f, 0.0f);
    for (int j = threadIdx.x; j < S; j += MANY_BLOCK) {
        float v = d[j];
        acc.x += v, acc.y += v * x[j];
    }
    acc = block_sum2(acc);
    if (threadIdx.x == 0)
        means[blockIdx.x] = make_float2(acc.x / S, acc.y / S);
}

/* da = rstd (dxh - mean(dxh) - xh mean(dxh xh)) */
__global__ void k_instnorm_bwd_apply(const float *__restrict__ dxh, const float *__restrict__ xh,
                                     const float *__restrict__ rstd,
                                     const float2 *__restrict__ means, float *__restrict__ da,
                                     int total, int S)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int seg = i / S;
        float2 mm = means[seg];
        da[i] = __ldg(rstd + seg) * (dxh[i] - mm.x - xh[i] * mm.y);
    }
}

/* Per-channel sums over (n, s) of a b (b = NULL: of a alone), deterministic: k_channel_sums and
 * k_segment_sums (common/reduce.cuh), block (j, co) summing a fixed set of channel co's elements
 * into partials[co][j], then each channel's partials added in order. No atomics: the same bits
 * every run. Used for dm (both uses of m) and for the conv's bias gradient. */
#define DOT_BLOCKS 64

/* ---------------------------------------------------------------- b2: fused, two passes
 * The forward's statistics (mean, rstd) are saved, as PyTorch's instance norm saves them. The
 * backward needs two reductions per (n, c) before any dc can be written, so two kernels:
 *   B1: a thread per position recomputes xh and u for the 16 channels, finds the argmax k, and
 *       contributes dxh = g m_k (if xh_k is inside the clamp) and dxh xh_k to channel k's sums
 *       and g t_k to dm; a block's 256 positions are reduced per channel in shared memory (warp
 *       w adds channels w and w + 8), one partial per (n, c, tile);
 *   B2: a thread per position recomputes again and writes all 16 dc, reducing da c for dm.
 * Bytes: c and g read twice, dc written: 4 x 103 MB + 13 MB, against the backward's floor of 2.
 * Prediction: v9's forward plus four 103 MB passes, about 0.09 + 0.14 ms.
 * Measured, forward + backward: 0.257 ms (v9's forward 0.092 of it), 3.4x torch.compile
 * (0.875 ms). b1, the autograd-like chain: 2.451 ms. */
#define B2_BLOCK 256

__device__ __forceinline__ void position_forward(const float *__restrict__ cp, int S,
                                                 const float *mc, const float *mean,
                                                 const float *rstd, float xh[C_OUT], int *k)
{
    float best = 0.0f;
    *k = 0;
#pragma unroll
    for (int co = 0; co < C_OUT; co++) {
        xh[co] = (cp[(size_t)co * S] * mc[co] - mean[co]) * rstd[co];
        float u = clampf1(xh[co]) * mc[co];
        if (co == 0 || u > best)
            best = u, *k = co;
    }
}

__global__ void __launch_bounds__(B2_BLOCK)
k_bwd_sums(const float *__restrict__ c, const float *__restrict__ g, const float *__restrict__ m,
           const float *__restrict__ mean, const float *__restrict__ rstd,
           float *__restrict__ part, float *__restrict__ dm_part, int S, int tiles)
{
    __shared__ float sv[3][B2_BLOCK];
    __shared__ int sk[B2_BLOCK];
    __shared__ float mc[C_OUT], mu[C_OUT], rs[C_OUT];
    int n = blockIdx.y, s = blockIdx.x * B2_BLOCK + threadIdx.x;
    if (threadIdx.x < C_OUT) {
        mc[threadIdx.x] = __ldg(m + threadIdx.x);
        mu[threadIdx.x] = __ldg(mean + n * C_OUT + threadIdx.x);
        rs[threadIdx.x] = __ldg(rstd + n * C_OUT + threadIdx.x);
    }
    __syncthreads();
    int k = -1;
    float d = 0.0f, dx = 0.0f, gt = 0.0f;
    if (s < S) {
        float xh[C_OUT];
        position_forward(c + (size_t)n * C_OUT * S + s, S, mc, mu, rs, xh, &k);
        float gv = g[(size_t)n * S + s], xk = 0.0f;
#pragma unroll
        for (int co = 0; co < C_OUT; co++) /* xh[k] with a static index: no local memory */
            xk = co == k ? xh[co] : xk;
        d = xk >= -1.0f && xk <= 1.0f ? gv * mc[k] : 0.0f;
        dx = d * xk, gt = gv * clampf1(xk);
    }
    sk[threadIdx.x] = k, sv[0][threadIdx.x] = d, sv[1][threadIdx.x] = dx, sv[2][threadIdx.x] = gt;
    __syncthreads();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int co = warp; co < C_OUT; co += B2_BLOCK / 32) {
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f;
        for (int j = lane; j < B2_BLOCK; j += 32)
            if (sk[j] == co)
                a0 += sv[0][j], a1 += sv[1][j], a2 += sv[2][j];
        a0 = warp_sum(a0), a1 = warp_sum(a1), a2 = warp_sum(a2);
        if (lane == 0) {
            size_t e = ((size_t)n * C_OUT + co) * tiles + blockIdx.x;
            part[2 * e] = a0, part[2 * e + 1] = a1;
            dm_part[(size_t)co * gridDim.y * tiles + (size_t)n * tiles + blockIdx.x] = a2;
        }
    }
}

/* a thread per (n, c): the tiles' sums in order, divided by S */
__global__ void k_bwd_means(const float *__restrict__ part, int tiles, int segs, int S,
                            float2 *__restrict__ means)
{
    int seg = blockIdx.x * blockDim.x + threadIdx.x;
    if (seg >= segs)
        return;
    float a = 0.0f, b = 0.0f;
    for (int t = 0; t < tiles; t++)
        a += part[2 * ((size_t)seg * tiles + t)], b += part[2 * ((size_t)seg * tiles + t) + 1];
    means[seg] = make_float2(a / S, b / S);
}

__global__ void __launch_bounds__(B2_BLOCK)
k_bwd_dc(const float *__restrict__ c, const float *__restrict__ g, const float *__restrict__ m,
         const float *__restrict__ mean, const float *__restrict__ rstd,
         const float2 *__restrict__ means, float *__restrict__ dc, float *__restrict__ dm_part,
         int S, int tiles)
{
    __shared__ float red[C_OUT][B2_BLOCK + 1];
    __shared__ float mc[C_OUT], mu[C_OUT], rs[C_OUT];
    __shared__ float2 mm[C_OUT];
    int n = blockIdx.y, s = blockIdx.x * B2_BLOCK + threadIdx.x;
    if (threadIdx.x < C_OUT) {
        mc[threadIdx.x] = __ldg(m + threadIdx.x);
        mu[threadIdx.x] = __ldg(mean + n * C_OUT + threadIdx.x);
        rs[threadIdx.x] = __ldg(rstd + n * C_OUT + threadIdx.x);
        mm[threadIdx.x] = means[n * C_OUT + threadIdx.x];
    }
    __syncthreads();
    if (s < S) {
        const float *cp = c + (size_t)n * C_OUT * S + s;
        float xh[C_OUT];
        int k;
        position_forward(cp, S, mc, mu, rs, xh, &k);
        float gv = g[(size_t)n * S + s];
#pragma unroll
        for (int co = 0; co < C_OUT; co++) {
            float d = co == k && xh[co] >= -1.0f && xh[co] <= 1.0f ? gv * mc[co] : 0.0f;
            float da = rs[co] * (d - mm[co].x - xh[co] * mm[co].y);
            dc[((size_t)n * C_OUT + co) * S + s] = da * mc[co];
            red[co][threadIdx.x] = da * cp[(size_t)co * S];
        }
    } else {
#pragma unroll
        for (int co = 0; co < C_OUT; co++)
            red[co][threadIdx.x] = 0.0f;
    }
    __syncthreads();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int co = warp; co < C_OUT; co += B2_BLOCK / 32) {
        float a = 0.0f;
        for (int j = lane; j < B2_BLOCK; j += 32)
            a += red[co][j];
        a = warp_sum(a);
        if (lane == 0)
            dm_part[(size_t)co * gridDim.y * tiles + (size_t)n * tiles + blockIdx.x] = a;
    }
}

/* ---------------------------------------------------------------- b3: the backward in a cluster
 * v10's layout again: block r of sample n's cluster loads its slice of c (and of g) into shared
 * memory once, finds each position's argmax, and warp w sums channel w's dxh and dxh xh over the
 * slice; the cluster adds the 8 partials through distributed shared memory; then every dc of
 * the slice is written from shared memory. c and g read once, dc written once: the backward's
 * floor. dm: one partial per (n, block, channel), added in order by k_segment_sums.
 * Prediction: the backward at its floor of two passes, 0.07 ms, if the cluster phases hide.
 * Measured, forward (v10) + backward: 0.226 ms, 3.9x torch.compile (0.875 ms), against a
 * 0.108 ms floor. ncu on this kernel: 146 us, 40% of DRAM peak, the same pattern as v10 (3.7
 * cycles per issued instruction at barriers, 3.2 on loads). */
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(CL_THREADS, 2)
k_cluster_backward(const float *__restrict__ c, const float *__restrict__ g,
                   const float *__restrict__ m, const float *__restrict__ mean,
                   const float *__restrict__ rstd, float *__restrict__ dc,
                   float *__restrict__ dm_part, int S)
{
    extern __shared__ float4 smem4[];
    __shared__ cluster_shared cs;
    __shared__ float red[CL_THREADS / 32][C_OUT];
    cg::cluster_group cluster = cg::this_cluster();
    int rank = (int)cluster.block_rank(), n = blockIdx.y, cap = slice_cap(S);
    int lo = slice_lo(S, rank), len = slice_lo(S, rank + 1) - lo;
    float *vals = (float *)smem4, *gs = vals + C_OUT * cap;
    unsigned char *ks = (unsigned char *)(gs + cap);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x < C_OUT) {
        cs.m[threadIdx.x] = __ldg(m + threadIdx.x);
        cs.mean[threadIdx.x] = __ldg(mean + n * C_OUT + threadIdx.x);
        cs.rstd[threadIdx.x] = __ldg(rstd + n * C_OUT + threadIdx.x);
    }
    fill_slice(vals, cap, c + (size_t)n * C_OUT * S + lo, len, S);
    for (int j = threadIdx.x; j < len; j += CL_THREADS)
        gs[j] = g[(size_t)n * S + lo + j];
    __syncthreads();
    for (int j = threadIdx.x; j < len; j += CL_THREADS) { /* the argmax of each position */
        float best = 0.0f;
        int k = 0;
#pragma unroll
        for (int co = 0; co < C_OUT; co++) {
            float u = clampf1((vals[co * cap + j] * cs.m[co] - cs.mean[co]) * cs.rstd[co]) * cs.m[co];
            if (co == 0 || u > best)
                best = u, k = co;
        }
        ks[j] = (unsigned char)k;
    }
    __syncthreads();
    { /* warp w: channel w's sums over the slice (only where w is the argmax) */
        float mc = cs.m[warp], mu = cs.mean[warp], rs = cs.rstd[warp];
        float s1 = 0.0f, s2 = 0.0f, gt = 0.0f;
        for (int j = lane; j < len; j += 32)
            if (ks[j] == warp) {
                float xh = (vals[warp * cap + j] * mc - mu) * rs;
                float d = xh >= -1.0f && xh <= 1.0f ? gs[j] * mc : 0.0f;
                s1 += d, s2 += d * xh, gt += gs[j] * clampf1(xh);
            }
        s1 = warp_sum(s1), s2 = warp_sum(s2), gt = warp_sum(gt);
        if (lane == 0)
            cs.part_bwd[0][warp] = s1, cs.part_bwd[1][warp] = s2, cs.part_bwd[2][warp] = gt;
    }
    cluster.sync();
    float mean1 = cluster_total(cluster, cs.part_bwd[0], warp) / S;
    float mean2 = cluster_total(cluster, cs.part_bwd[1], warp) / S;
    __syncthreads();
    if (lane == 0)
        cs.part[0][warp] = mean1, cs.part[1][warp] = mean2; /* this block's copy, for all warps */
    __syncthreads();
    float *dcb = dc + (size_t)n * C_OUT * S + lo;
    for (int co = 0; co < C_OUT; co++) {
        float mc = cs.m[co], mu = cs.mean[co], rs = cs.rstd[co];
        float m1 = cs.part[0][co], m2 = cs.part[1][co], acc = 0.0f;
        for (int j = threadIdx.x; j < len; j += CL_THREADS) {
            float cv = vals[co * cap + j], xh = (cv * mc - mu) * rs;
            float d = ks[j] == co && xh >= -1.0f && xh <= 1.0f ? gs[j] * mc : 0.0f;
            float da = rs * (d - m1 - xh * m2);
            dcb[(size_t)co * S + j] = da * mc;
            acc += da * cv;
        }
        acc = warp_sum(acc);
        if (lane == 0)
            red[warp][co] = acc;
    }
    __syncthreads();
    if (lane == 0) { /* warp w: channel w's dm of this block, the warps' partials in order */
        float a = cs.part_bwd[2][warp];
        for (int j = 0; j < CL_THREADS / 32; j++)
            a += red[j][warp];
        dm_part[(size_t)warp * gridDim.y * CL + (size_t)n * CL + rank] = a;
    }
    cluster.sync(); /* the partials may still be read by the other blocks */
}

/* ---------------------------------------------------------------- the conv's weight gradient
 * dw[co][ci][k] = sum over n and s of dc[n][co][s] x[n][ci][s shifted by tap k]: 1296 sums of
 * 1.6M terms each, 2.1 GFMA. cuDNN's legacy backward filter takes 25 ms here (section 6 times
 * it), so b2 and b3 use this deterministic two-stage form instead:
 *   DW1: a block per (n, chunk of DW_CHUNK positions) copies the chunk's dc into shared memory as
 *        [position][co] (the 16 channels of a position: four 16-byte broadcasts); thread
 *        (group g, tap) accumulates acc[co] += x(tap) dc[co] over every third position, so each
 *        x load feeds 16 FFMA; the three groups are added in shared memory and the block writes
 *        its 1296 partials, transposed so that
 *   DW2: a block per weight adds that weight's partials, contiguous, in a fixed order.
 * No atomics: the same bits every run.
 * Prediction: bounded by its 4.2 GFLOP, 0.06 ms at the FMA peak; a few times that in practice.
 * Measured: 0.578 ms against cuDNN's 25.4 ms (its fastest fp32 algorithm by cudnnFind); the
 * training step went from 27.7 to 2.7 ms with it. ncu: 562 us, the SMs 65% busy, 7.4 TFLOP/s. */
#define DW_CHUNK 512
#define DW_GROUPS 3
#define DW_THREADS (DW_GROUPS * C_IN * KVOL) /* 243 */

__global__ void __launch_bounds__(256)
k_dw_partials(const float *__restrict__ x, const float *__restrict__ dc,
              float *__restrict__ part, const shape sh, int chunks)
{
    __shared__ __align__(16) float sdc[DW_CHUNK][C_OUT];
    __shared__ float red[DW_GROUPS - 1][C_IN * KVOL][C_OUT + 1];
    int S = sh.s, n = blockIdx.y, s0 = blockIdx.x * DW_CHUNK, len = min(DW_CHUNK, S - s0);
    for (int i = threadIdx.x; i < C_OUT * len; i += blockDim.x) {
        int co = i / len, j = i - co * len;
        sdc[j][co] = dc[((size_t)n * C_OUT + co) * S + s0 + j];
    }
    __syncthreads();
    int tid = threadIdx.x, g = tid / (C_IN * KVOL), tap = tid - g * (C_IN * KVOL);
    float acc[C_OUT];
#pragma unroll
    for (int co = 0; co < C_OUT; co++)
        acc[co] = 0.0f;
    if (tid < DW_THREADS) {
        int ci = tap / KVOL, k = tap - ci * KVOL, hw = sh.h * sh.w;
        const float *xb = x + ((size_t)n * C_IN + ci) * sh.d * hw + (k / 9) * hw +
                          ((k / 3) % 3) * sh.w + k % 3;
        for (int j = g; j < len; j += DW_GROUPS) {
            int s = s0 + j, ow = s % sh.ow, q = s / sh.ow, oh = q % sh.oh, od = q / sh.oh;
            float xv = __ldg(xb + ((size_t)od * sh.h + oh) * sh.w + ow);
            const float4 *d4 = (const float4 *)sdc[j];
            float4 w0 = d4[0], w1 = d4[1], w2 = d4[2], w3 = d4[3];
            FMA4(acc, 0, xv, w0);
            FMA4(acc, 4, xv, w1);
            FMA4(acc, 8, xv, w2);
            FMA4(acc, 12, xv, w3);
        }
        if (g > 0)
#pragma unroll
            for (int co = 0; co < C_OUT; co++)
                red[g - 1][tap][co] = acc[co];
    }
    __syncthreads();
    if (g == 0 && tid < DW_THREADS) {
        int blocks = gridDim.x * gridDim.y, b = blockIdx.y * gridDim.x + blockIdx.x;
#pragma unroll
        for (int co = 0; co < C_OUT; co++) {
            float v = acc[co];
            for (int q = 0; q < DW_GROUPS - 1; q++)
                v += red[q][tap][co];
            part[(size_t)(co * C_IN * KVOL + tap) * blocks + b] = v; /* [weight][block] */
        }
    }
}

/* a block per weight: its partials in order */
__global__ void k_dw_sum(const float *__restrict__ part, int blocks, float *__restrict__ dw)
{
    float v = 0.0f;
    for (int j = threadIdx.x; j < blocks; j += blockDim.x)
        v += part[(size_t)blockIdx.x * blocks + j];
    v = block_sum(v);
    if (threadIdx.x == 0)
        dw[blockIdx.x] = v;
}

/* ============================================================================================
 * 4. cuDNN (the conv and its gradients), the versions, the launchers
 *
 * cuDNN's conv, backward data and backward filter come from common/gpu.h (cudnn_conv3d_*):
 * fp32, each the fastest algorithm cudnnFind...Ex measures on the problem's own buffers, as
 * torch.backends.cudnn.benchmark = True would pick.
 * ========================================================================================== */

/* Everything a launch needs, on the device */
typedef struct {
    shape sh;
    int sm_count;
    size_t smem_optin;              /* the most dynamic shared memory a block may ask for */
    int pipe_clusters;              /* v11's resident clusters (0: v11 does not fit, runs v10) */
    const float *x, *weight, *bias, *m; /* model input and parameters */
    float *c;                       /* conv output, the epilogue's input */
    float *y;                       /* output */
    float *t[5];                    /* v1's and b1's 103 MB intermediates */
    int *idx;                       /* b1's saved argmax */
    float *mean, *rstd;             /* per (n, c), saved for the backward */
    float2 *part2, *means;          /* v2..v5 partials; the instance-norm backward's two means */
    welford *wpart;                 /* v11's tile statistics */
    float *bpart, *dm_part1, *dm_part2, *db_part, *dw_part;
    const float *g;                 /* dL/dy */
    float *dc, *dx, *dw, *dbias, *dm;
    const cudnn_conv3d *cudnn;
} run_ctx;

static int grid_for(long long n, int block, int sm_count)
{
    long long g = (n + block - 1) / block, cap = (long long)sm_count * 32;
    return (int)(g < cap ? (g > 0 ? g : 1) : cap);
}

static int tiles_of(int S, int tile) { return (S + tile - 1) / tile; }

static void launch_conv(const run_ctx *r)
{
    cudnn_conv3d_forward(r->cudnn, r->x, r->weight, r->bias, r->c);
}

static void time_conv(const void *r) { launch_conv((const run_ctx *)r); }

/* --- the statistics of a (or of c m when m is given), into r->mean / r->rstd --- */
static void stats_serial(const run_ctx *r, const float *a, const float *m)
{
    int segs = (int)seg_count(&r->sh);
    (void)m;
    k_stats_serial<<<(segs + 127) / 128, 128>>>(a, r->mean, r->rstd, segs, r->sh.s);
}

static void stats_partials(const run_ctx *r, const float *a, const float *m, int kind)
{
    int S = r->sh.s, segs = (int)seg_count(&r->sh);
    int bps = tiles_of(S, kind >= 4 ? 2 * RED_BLOCK : RED_BLOCK);
    dim3 grid(segs * bps);
    if (kind == 2)
        k_stats_interleaved<<<grid, RED_BLOCK>>>(a, m, r->part2, S, bps);
    else if (kind == 3)
        k_stats_sequential<<<grid, RED_BLOCK>>>(a, m, r->part2, S, bps);
    else if (kind == 4)
        k_stats_first_add<false><<<grid, RED_BLOCK>>>(a, m, r->part2, S, bps);
    else
        k_stats_first_add<true><<<grid, RED_BLOCK>>>(a, m, r->part2, S, bps);
    k_stats_finish<<<(segs + 7) / 8, 256>>>(r->part2, bps, segs, S, r->mean, r->rstd);
}
static void stats_v2(const run_ctx *r, const float *a, const float *m) { stats_partials(r, a, m, 2); }
static void stats_v3(const run_ctx *r, const float *a, const float *m) { stats_partials(r, a, m, 3); }
static void stats_v4(const run_ctx *r, const float *a, const float *m) { stats_partials(r, a, m, 4); }
static void stats_v5(const run_ctx *r, const float *a, const float *m) { stats_partials(r, a, m, 5); }
static void stats_v6(const run_ctx *r, const float *a, const float *m)
{
    k_stats_many<<<(int)seg_count(&r->sh), MANY_BLOCK>>>(a, m, r->mean, r->rstd, r->sh.s);
}
static void stats_v7(const run_ctx *r, const float *a, const float *m)
{
    k_stats_welford<<<(int)seg_count(&r->sh), MANY_BLOCK>>>(a, m, r->mean, r->rstd, r->sh.s);
}
static void stats_v8(const run_ctx *r, const float *a, const float *m)
{
    k_stats_cub<<<(int)seg_count(&r->sh), MANY_BLOCK>>>(a, m, r->mean, r->rstd, r->sh.s);
}

typedef void (*stats_fn)(const run_ctx *, const float *, const float *);

/* v1..v8: a = c m, the statistics of a, then a kernel per op; idx (b1) keeps the argmax */
static void eager_epilogue(const run_ctx *r, stats_fn stats, int *idx)
{
    const shape *s = &r->sh;
    int total = (int)conv_elems(s), g = grid_for(total, 256, r->sm_count);
    int n_pos = (int)out_elems(s);
    k_scale<<<g, 256>>>(r->c, r->m, r->t[0], total, s->s);               /* a */
    stats(r, r->t[0], NULL);
    k_normalize<<<g, 256>>>(r->t[0], r->mean, r->rstd, r->t[1], total, s->s); /* xh */
    k_clamp<<<g, 256>>>(r->t[1], r->t[2], total);                          /* t */
    k_scale<<<g, 256>>>(r->t[2], r->m, r->t[3], total, s->s);              /* u */
    k_channel_max<<<grid_for(n_pos, 256, r->sm_count), 256>>>(r->t[3], r->y, idx, n_pos, s->s);
}

static void launch_v1(const run_ctx *r) { eager_epilogue(r, stats_serial, NULL); }
static void launch_v2(const run_ctx *r) { eager_epilogue(r, stats_v2, NULL); }
static void launch_v3(const run_ctx *r) { eager_epilogue(r, stats_v3, NULL); }
static void launch_v4(const run_ctx *r) { eager_epilogue(r, stats_v4, NULL); }
static void launch_v5(const run_ctx *r) { eager_epilogue(r, stats_v5, NULL); }
static void launch_v6(const run_ctx *r) { eager_epilogue(r, stats_v6, NULL); }
static void launch_v7(const run_ctx *r) { eager_epilogue(r, stats_v7, NULL); }
static void launch_v8(const run_ctx *r) { eager_epilogue(r, stats_v8, NULL); }

static void launch_v9(const run_ctx *r)
{
    int n_pos = (int)out_elems(&r->sh);
    stats_v7(r, r->c, r->m);
    k_apply_fused<<<grid_for(n_pos, 256, r->sm_count), 256>>>(r->c, r->m, r->mean, r->rstd, r->y,
                                                              n_pos, r->sh.s);
}

static int cluster_fits(const run_ctx *r, int backward)
{
    return cluster_smem(r->sh.s, backward) <= r->smem_optin;
}

static void launch_v10(const run_ctx *r)
{
    if (!cluster_fits(r, 0)) {
        launch_v9(r);
        return;
    }
    k_cluster_epilogue<<<dim3(CL, r->sh.n), CL_THREADS, cluster_smem(r->sh.s, 0)>>>(
        r->c, r->m, r->y, r->mean, r->rstd, r->sh.s);
}

/* how many of v11's clusters (two slices a block) fit at once; 0 if its shared memory does not */
static int pipelined_clusters(const shape *s, size_t smem_optin)
{
    size_t bytes = 2 * cluster_smem(s->s, 0, CLP);
    if (bytes > smem_optin)
        return 0;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(CLP, s->n);
    cfg.blockDim = dim3(CL_THREADS);
    cfg.dynamicSmemBytes = bytes;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, (void *)k_cluster_pipelined, &cfg) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

static void launch_v11(const run_ctx *r)
{
    if (r->pipe_clusters <= 0) {
        launch_v10(r);
        return;
    }
    int g = r->pipe_clusters < r->sh.n ? r->pipe_clusters : r->sh.n;
    k_cluster_pipelined<<<dim3(CLP, g), CL_THREADS, 2 * cluster_smem(r->sh.s, 0, CLP)>>>(
        r->c, r->m, r->y, r->mean, r->rstd, r->sh.s, r->sh.n);
}

/* the weights into constant memory: part of every fused-model run (they change every step);
 * the shared-memory form (CONV_SMEM) reads them from global memory in each block instead */
static void upload_weights(const run_ctx *r)
{
    if (CONV_SMEM)
        return;
    CUDA_CHECK(cudaMemcpyToSymbolAsync(c_weight, r->weight, sizeof(float) * N_WEIGHT, 0,
                                       cudaMemcpyDeviceToDevice, 0));
    CUDA_CHECK(cudaMemcpyToSymbolAsync(c_bias, r->bias, sizeof(float) * C_OUT, 0,
                                       cudaMemcpyDeviceToDevice, 0));
}

static void launch_v12(const run_ctx *r)
{
    const shape *s = &r->sh;
    int tiles = tiles_of(s->s, TILE), segs = (int)seg_count(s), n_pos = (int)out_elems(s);
    upload_weights(r);
    k_conv_stats<<<dim3(tiles, s->n), CL_THREADS>>>(r->x, r->weight, r->bias, r->wpart, *s, tiles);
    k_merge_tiles<<<(segs + 127) / 128, 128>>>(r->wpart, tiles, segs, r->m, r->mean, r->rstd, s->s);
    k_conv_apply<<<grid_for(n_pos, 256, r->sm_count), 256>>>(r->x, r->weight, r->bias, r->m,
                                                              r->mean, r->rstd, r->y, *s);
}

static void launch_v13(const run_ctx *r)
{
    if (!cluster_fits(r, 0)) {
        launch_v12(r);
        return;
    }
    upload_weights(r);
    k_cluster_model<<<dim3(CL, r->sh.n), CL_THREADS, cluster_smem(r->sh.s, 0)>>>(
        r->x, r->weight, r->bias, r->m, r->y, r->mean, r->rstd, r->sh);
}

/* --- backward --- */
static void launch_v1_saving(const run_ctx *r) { eager_epilogue(r, stats_serial, r->idx); }

static void launch_b1(const run_ctx *r)
{
    const shape *s = &r->sh;
    int total = (int)conv_elems(s), g = grid_for(total, 256, r->sm_count), S = s->s;
    float *xh = r->t[1], *t = r->t[2], *du = r->t[3], *dt = r->t[4];
    dim3 dot(DOT_BLOCKS, C_OUT);
    k_max_backward<<<g, 256>>>(r->g, r->idx, du, total, S);
    k_scale<<<g, 256>>>(du, r->m, dt, total, S);                           /* dt = du m */
    k_channel_sums<<<dot, 256>>>(du, t, r->dm_part1, s->n, S);    /* dm += du t */
    float *dxh = du;                                                      /* du is spent */
    k_clamp_backward<<<g, 256>>>(dt, xh, dxh, total);
    k_instnorm_bwd_reduce<<<(int)seg_count(s), MANY_BLOCK>>>(dxh, xh, r->means, S);
    float *da = dt;
    k_instnorm_bwd_apply<<<g, 256>>>(dxh, xh, r->rstd, r->means, da, total, S);
    k_scale<<<g, 256>>>(da, r->m, r->dc, total, S);                        /* dc = da m */
    k_channel_sums<<<dot, 256>>>(da, r->c, r->dm_part2, s->n, S); /* dm += da c */
    k_segment_sums<<<C_OUT, 64>>>(r->dm_part1, r->dm_part2, DOT_BLOCKS, r->dm);
}

static void launch_b2(const run_ctx *r)
{
    const shape *s = &r->sh;
    int tiles = tiles_of(s->s, B2_BLOCK), segs = (int)seg_count(s);
    dim3 grid(tiles, s->n);
    k_bwd_sums<<<grid, B2_BLOCK>>>(r->c, r->g, r->m, r->mean, r->rstd, r->bpart, r->dm_part1,
                                   s->s, tiles);
    k_bwd_means<<<(segs + 127) / 128, 128>>>(r->bpart, tiles, segs, s->s, r->means);
    k_bwd_dc<<<grid, B2_BLOCK>>>(r->c, r->g, r->m, r->mean, r->rstd, r->means, r->dc,
                                 r->dm_part2, s->s, tiles);
    k_segment_sums<<<C_OUT, 128>>>(r->dm_part1, r->dm_part2, s->n * tiles, r->dm);
}

static void launch_b3(const run_ctx *r)
{
    if (!cluster_fits(r, 1)) {
        launch_b2(r);
        return;
    }
    k_cluster_backward<<<dim3(CL, r->sh.n), CL_THREADS, cluster_smem(r->sh.s, 1)>>>(
        r->c, r->g, r->m, r->mean, r->rstd, r->dc, r->dm_part1, r->sh.s);
    k_segment_sums<<<C_OUT, 128>>>(r->dm_part1, NULL, r->sh.n * CL, r->dm);
}

static void cudnn_dx(const run_ctx *r)
{
    cudnn_conv3d_backward_data(r->cudnn, r->weight, r->dc, r->dx);
}

static void cudnn_dw(const run_ctx *r)
{
    cudnn_conv3d_backward_filter(r->cudnn, r->x, r->dc, r->dw);
}

/* dbias = sum of dc over n and the positions: zero up to rounding, since instance norm removes
 * each channel's mean and with it the bias (sum over s of da = 0 for every (n, c)); computed
 * anyway, as autograd does */
static void own_dbias(const run_ctx *r)
{
    k_channel_sums<<<dim3(DOT_BLOCKS, C_OUT), 256>>>(r->dc, NULL, r->db_part, r->sh.n, r->sh.s);
    k_segment_sums<<<C_OUT, 64>>>(r->db_part, NULL, DOT_BLOCKS, r->dbias);
}

static void own_dw(const run_ctx *r)
{
    int chunks = tiles_of(r->sh.s, DW_CHUNK);
    k_dw_partials<<<dim3(chunks, r->sh.n), 256>>>(r->x, r->dc, r->dw_part, r->sh, chunks);
    k_dw_sum<<<N_WEIGHT, 256>>>(r->dw_part, chunks * r->sh.n, r->dw);
}

/* b1 as autograd through cuDNN; b2 and b3 with our weight gradient */
static void grads_cudnn(const run_ctx *r) { cudnn_dx(r), cudnn_dw(r), own_dbias(r); }
static void grads_own(const run_ctx *r) { cudnn_dx(r), own_dw(r), own_dbias(r); }
static void time_dw_own(const void *r) { own_dw((const run_ctx *)r); }

static void time_dx(const void *r) { cudnn_dx((const run_ctx *)r); }
static void time_dw(const void *r) { cudnn_dw((const run_ctx *)r); }

typedef struct {
    int id;
    const char *name;
    void (*epilogue)(const run_ctx *); /* reads c; NULL for the whole-model-only versions */
    void (*model)(const run_ctx *);    /* reads x; NULL: cuDNN's conv, then the epilogue */
    stats_fn stats;                    /* the statistics alone, timed on their own (v1..v8) */
    int sumsq;                         /* sum and sum of squares: not offset-safe */
} version;

static const version versions[] = {
    {1, "eager-like: serial stats, a kernel per op", launch_v1, NULL, stats_serial, 0},
    {2, "stats: interleaved, divergent (Harris 1)", launch_v2, NULL, stats_v2, 1},
    {3, "stats: sequential addressing (Harris 3)", launch_v3, NULL, stats_v3, 1},
    {4, "stats: first add during load (Harris 4)", launch_v4, NULL, stats_v4, 1},
    {5, "stats: last warp by shuffles (Harris 5)", launch_v5, NULL, stats_v5, 1},
    {6, "stats: many elements a thread (Harris 7)", launch_v6, NULL, stats_v6, 1},
    {7, "stats: v6 with Welford + Chan merge", launch_v7, NULL, stats_v7, 0},
    {8, "stats: CUB BlockReduce (library baseline)", launch_v8, NULL, stats_v8, 0},
    {9, "fused apply: Welford stats + one kernel", launch_v9, NULL, NULL, 0},
    {10, "one pass: 8-block cluster, c read once", launch_v10, NULL, NULL, 0},
    {11, "v10 persistent, cp.async double buffer", launch_v11, NULL, NULL, 0},
    {12, "model: conv in stats pass + apply pass", NULL, launch_v12, NULL, 0},
    {13, "model: cluster, conv once into smem", NULL, launch_v13, NULL, 0},
};
#define N_VERSIONS ((int)(sizeof versions / sizeof versions[0]))

typedef struct {
    const char *id;
    const char *name;
    void (*forward)(const run_ctx *);
    void (*backward)(const run_ctx *);
    void (*grads)(const run_ctx *); /* the conv's: dx, dw, dbias */
} bwd_version;

static const bwd_version bwd_versions[] = {
    {"b1", "autograd-like: v1 saving, a kernel per op", launch_v1_saving, launch_b1, grads_cudnn},
    {"b2", "fused: v9, then two recomputing kernels", launch_v9, launch_b2, grads_own},
    {"b3", "cluster: v10, then one cluster kernel", launch_v10, launch_b3, grads_own},
};
#define N_BWD ((int)(sizeof bwd_versions / sizeof bwd_versions[0]))

typedef struct {
    const run_ctx *r;
    const version *v;       /* forward */
    const bwd_version *b;   /* or a backward version */
    int whole;              /* forward: whole model; backward: training step */
    int stats_only;         /* the statistics kernel(s) alone, on r->t[0] */
} job;

static void run_job(const void *p)
{
    const job *j = (const job *)p;
    if (j->stats_only) {
        j->v->stats(j->r, j->r->t[0], NULL);
        return;
    }
    if (j->v && j->v->model && j->whole) {
        j->v->model(j->r);
        return;
    }
    if (j->whole)
        launch_conv(j->r);
    if (j->v) {
        j->v->epilogue(j->r);
        return;
    }
    j->b->forward(j->r);
    j->b->backward(j->r);
    if (j->whole)
        j->b->grads(j->r);
}

/* ============================================================================================
 * 5. Verification and tests
 * ========================================================================================== */

#define TOL_REL_L2 1e-5
#define TOL_ABS 1e-4
/* TOL_SUM, for reduced and cancelling results, is defined with the backward reference (2b) */

/* y is bounded by max |m|; dc by a few rstd |m|: the absolute bound scales with the largest
 * reference value, float rounding being relative */
static verify_result verify_scaled(const float *out, const double *ref, size_t n)
{
    double big = 1.0;
    for (size_t i = 0; i < n; i++)
        big = fmax(big, fabs(ref[i]));
    return verify_f32(out, ref, n, TOL_REL_L2, TOL_ABS * big);
}

static void *host_alloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        die(1, "out of host memory: %zu bytes", bytes);
    return p;
}

typedef struct {
    shape sh;
    float *x, *weight, *bias, m[C_OUT], *g; /* host */
    double *xd, *wd, *bd, md[C_OUT];
    run_ctx r;
    cudnn_conv3d cudnn;
    float *host_out, *host_c, *host_dc, *host_dx, host_dw[N_WEIGHT], host_dbias[C_OUT];
    float host_dm[C_OUT], *host_mean, *host_rstd;
    double *ref_c, *ref_model, *ref_epilogue;
    double *mean_model, *rstd_model, *mean_epi, *rstd_epi;
    int have_bwd_refs;
    bwd_ref bref;
    double *dcd, *ref_dx, ref_dw[N_WEIGHT], abs_dw[N_WEIGHT], ref_dbias[C_OUT], abs_dbias[C_OUT];
} problem;

static void problem_init(problem *pb, const shape *s, int sm_count, size_t smem_optin, uint64_t seed)
{
    memset(pb, 0, sizeof *pb);
    pb->sh = *s;
    size_t nx = x_elems(s), nc = conv_elems(s), ny = out_elems(s), ns = seg_count(s);
    pb->x = (float *)host_alloc(4 * nx), pb->xd = (double *)host_alloc(8 * nx);
    pb->weight = (float *)host_alloc(4 * N_WEIGHT), pb->wd = (double *)host_alloc(8 * N_WEIGHT);
    pb->bias = (float *)host_alloc(4 * C_OUT), pb->bd = (double *)host_alloc(8 * C_OUT);
    pb->g = (float *)host_alloc(4 * ny);
    pb->host_out = (float *)host_alloc(4 * ny), pb->host_c = (float *)host_alloc(4 * nc);
    pb->host_dc = (float *)host_alloc(4 * nc), pb->host_dx = (float *)host_alloc(4 * nx);
    pb->host_mean = (float *)host_alloc(4 * ns), pb->host_rstd = (float *)host_alloc(4 * ns);
    pb->ref_c = (double *)host_alloc(8 * nc);
    pb->ref_model = (double *)host_alloc(8 * ny), pb->ref_epilogue = (double *)host_alloc(8 * ny);
    pb->mean_model = (double *)host_alloc(8 * ns), pb->rstd_model = (double *)host_alloc(8 * ns);
    pb->mean_epi = (double *)host_alloc(8 * ns), pb->rstd_epi = (double *)host_alloc(8 * ns);
    pb->bref.dc = (double *)host_alloc(8 * nc);
    pb->bref.abs_dc = (double *)host_alloc(8 * nc);
    pb->dcd = (double *)host_alloc(8 * nc), pb->ref_dx = (double *)host_alloc(8 * nx);
    rng_state rng, rng_g;
    rng_seed(&rng, seed);
    fill_uniform(pb->x, nx, 0.0, 1.0, &rng);                                     /* torch.rand */
    init_conv_params(pb->weight, N_WEIGHT, pb->bias, C_OUT, C_IN * KVOL, &rng);  /* fan_in 81 */
    fill_normal(pb->m, C_OUT, &rng);                                             /* torch.randn */
    rng_seed(&rng_g, seed ^ 0x5DEECE66Dull);
    fill_normal(pb->g, ny, &rng_g);

    run_ctx *r = &pb->r;
    r->sh = *s;
    r->sm_count = sm_count;
    r->smem_optin = smem_optin;
    r->pipe_clusters = pipelined_clusters(s, smem_optin);
    float *x = (float *)gpu_alloc(4 * nx, "input x"), *w = (float *)gpu_alloc(4 * N_WEIGHT, "weight");
    float *b = (float *)gpu_alloc(4 * C_OUT, "bias"), *m = (float *)gpu_alloc(4 * C_OUT, "m");
    float *g = (float *)gpu_alloc(4 * ny, "g");
    r->x = x, r->weight = w, r->bias = b, r->m = m, r->g = g;
    r->c = (float *)gpu_alloc(4 * nc, "conv output");
    r->y = (float *)gpu_alloc(4 * ny, "output y");
    const char *tn[5] = {"a (v1)", "xh (v1)", "t (v1)", "u (v1)", "b1 gradient"};
    for (int i = 0; i < 5; i++)
        r->t[i] = (float *)gpu_alloc(4 * nc, tn[i]);
    r->idx = (int *)gpu_alloc(4 * ny, "argmax");
    r->mean = (float *)gpu_alloc(4 * ns, "mean"), r->rstd = (float *)gpu_alloc(4 * ns, "rstd");
    r->part2 = (float2 *)gpu_alloc(8 * ns * tiles_of(s->s, RED_BLOCK), "reduction partials");
    r->means = (float2 *)gpu_alloc(8 * ns, "backward means");
    r->wpart = (welford *)gpu_alloc(sizeof(welford) * ns * tiles_of(s->s, TILE), "tile stats");
    int tiles_b2 = tiles_of(s->s, B2_BLOCK);
    r->bpart = (float *)gpu_alloc(8 * ns * tiles_b2, "b2 partials");
    size_t dmp = (size_t)C_OUT * (s->n * (tiles_b2 > CL ? tiles_b2 : CL));
    if (dmp < (size_t)C_OUT * DOT_BLOCKS)
        dmp = (size_t)C_OUT * DOT_BLOCKS;
    r->dm_part1 = (float *)gpu_alloc(4 * dmp, "dm partials");
    r->dm_part2 = (float *)gpu_alloc(4 * dmp, "dm partials");
    r->db_part = (float *)gpu_alloc(4 * C_OUT * DOT_BLOCKS, "dbias partials");
    r->dw_part = (float *)gpu_alloc(4 * (size_t)N_WEIGHT * s->n * tiles_of(s->s, DW_CHUNK), "dw partials");
    r->dc = (float *)gpu_alloc(4 * nc, "dL/dc");
    r->dx = (float *)gpu_alloc(4 * nx, "dL/dx");
    r->dw = (float *)gpu_alloc(4 * N_WEIGHT, "dL/dw");
    r->dbias = (float *)gpu_alloc(4 * C_OUT, "dL/dbias");
    r->dm = (float *)gpu_alloc(4 * C_OUT, "dL/dm");
    CUDA_CHECK(cudaMemcpy(x, pb->x, 4 * nx, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(w, pb->weight, 4 * N_WEIGHT, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(b, pb->bias, 4 * C_OUT, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(m, pb->m, 4 * C_OUT, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(g, pb->g, 4 * ny, cudaMemcpyHostToDevice));
    gpu_poison(r->c, nc);
    int xd[5] = {s->n, C_IN, s->d, s->h, s->w};
    cudnn_conv3d_setup(&pb->cudnn, xd, C_OUT, KS, 0, x, w, r->c, r->dc, r->dx, r->dw);
    r->cudnn = &pb->cudnn;
}

/* uploads x and m, runs the cuDNN conv, computes the forward references: the model's from the
 * double conv, the epilogue's (and the backward's) from the GPU's float conv output, which is
 * checked against the double conv separately */
static void problem_refresh(problem *pb)
{
    const shape *s = &pb->sh;
    CUDA_CHECK(cudaMemcpy((void *)pb->r.x, pb->x, 4 * x_elems(s), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy((void *)pb->r.m, pb->m, 4 * C_OUT, cudaMemcpyHostToDevice));
    launch_conv(&pb->r);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(pb->host_c, pb->r.c, 4 * conv_elems(s), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < x_elems(s); i++)
        pb->xd[i] = pb->x[i];
    for (int i = 0; i < N_WEIGHT; i++)
        pb->wd[i] = pb->weight[i];
    for (int i = 0; i < C_OUT; i++)
        pb->bd[i] = pb->bias[i], pb->md[i] = pb->m[i];
    conv3d_ref(s, pb->xd, pb->wd, pb->bd, pb->ref_c);
    epilogue_ref(s, NULL, pb->ref_c, pb->md, IN_EPS, pb->ref_model, pb->mean_model, pb->rstd_model);
    epilogue_ref(s, pb->host_c, NULL, pb->md, IN_EPS, pb->ref_epilogue, pb->mean_epi, pb->rstd_epi);
    pb->have_bwd_refs = 0;
}

/* an epilogue input chosen by the test (extreme values), and optionally another m */
static void problem_set_conv(problem *pb, const float *c)
{
    const shape *s = &pb->sh;
    memcpy(pb->host_c, c, 4 * conv_elems(s));
    CUDA_CHECK(cudaMemcpy(pb->r.c, c, 4 * conv_elems(s), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy((void *)pb->r.m, pb->m, 4 * C_OUT, cudaMemcpyHostToDevice));
    for (int i = 0; i < C_OUT; i++)
        pb->md[i] = pb->m[i];
    epilogue_ref(s, pb->host_c, NULL, pb->md, IN_EPS, pb->ref_epilogue, pb->mean_epi, pb->rstd_epi);
    pb->have_bwd_refs = 0;
}

static void problem_bwd_refs(problem *pb)
{
    if (pb->have_bwd_refs)
        return;
    epilogue_backward_ref(&pb->sh, pb->host_c, NULL, pb->md, pb->g, &pb->bref);
    pb->have_bwd_refs = 1;
}

static void problem_free(problem *pb)
{
    run_ctx *r = &pb->r;
    cudnn_conv3d_destroy(&pb->cudnn);
    const void *dev[] = {r->x, r->weight, r->bias, r->m, r->g, r->c, r->y, r->t[0], r->t[1],
                         r->t[2], r->t[3], r->t[4], r->idx, r->mean, r->rstd, r->part2, r->means,
                         r->wpart, r->bpart, r->dm_part1, r->dm_part2, r->db_part, r->dw_part,
                         r->dc, r->dx, r->dw, r->dbias, r->dm};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        CUDA_CHECK(cudaFree((void *)dev[i]));
    void *host[] = {pb->x, pb->xd, pb->weight, pb->wd, pb->bias, pb->bd, pb->g, pb->host_out,
                    pb->host_c, pb->host_dc, pb->host_dx, pb->host_mean, pb->host_rstd,
                    pb->ref_c, pb->ref_model, pb->ref_epilogue, pb->mean_model, pb->rstd_model,
                    pb->mean_epi, pb->rstd_epi, pb->bref.dc, pb->bref.abs_dc, pb->dcd, pb->ref_dx};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
}

/* the saved statistics against the reference's: mean within 1e-5 of |mean| + std (its scale),
 * rstd by relative L2 */
static int verify_stats(problem *pb, int whole, double *err_out)
{
    size_t ns = seg_count(&pb->sh);
    const double *mr = whole ? pb->mean_model : pb->mean_epi, *rr = whole ? pb->rstd_model : pb->rstd_epi;
    CUDA_CHECK(cudaMemcpy(pb->host_mean, pb->r.mean, 4 * ns, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(pb->host_rstd, pb->r.rstd, 4 * ns, cudaMemcpyDeviceToHost));
    double worst = 0.0;
    int ok = 1;
    for (size_t i = 0; i < ns; i++) {
        double scale = fabs(mr[i]) + 1.0 / rr[i];
        double em = fabs(pb->host_mean[i] - mr[i]) / scale, er = fabs(pb->host_rstd[i] - rr[i]) / rr[i];
        double e = fmax(em, er);
        if (!(e <= 1e-4)) /* NaN fails */
            ok = 0;
        worst = e > worst || e != e ? e : worst;
    }
    *err_out = worst;
    return ok;
}

/* forward: poison y and the statistics, run, compare y and (where the version keeps them) the
 * statistics */
static verify_result verify_fwd(problem *pb, const version *v, int whole, double *stats_err)
{
    job j = {&pb->r, v, NULL, whole, 0};
    gpu_poison(pb->r.y, out_elems(&pb->sh));
    gpu_poison(pb->r.mean, seg_count(&pb->sh));
    gpu_poison(pb->r.rstd, seg_count(&pb->sh));
    run_job(&j);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(pb->host_out, pb->r.y, 4 * out_elems(&pb->sh), cudaMemcpyDeviceToHost));
    verify_result res = verify_scaled(pb->host_out, whole ? pb->ref_model : pb->ref_epilogue,
                                      out_elems(&pb->sh));
    if (!verify_stats(pb, whole, stats_err))
        res.pass = 0;
    return res;
}

/* backward: poison every output, run, compare each; returns how many passed of *n_out */
#define N_GRADS 6
static int verify_bwd(problem *pb, const bwd_version *b, int train, verify_result res[N_GRADS],
                      const char *names[N_GRADS], int *n_out)
{
    run_ctx *r = &pb->r;
    const shape *s = &pb->sh;
    size_t nc = conv_elems(s);
    problem_bwd_refs(pb);
    gpu_poison(r->y, out_elems(s));
    gpu_poison(r->dc, nc);
    gpu_poison(r->dm, C_OUT);
    gpu_poison(r->dx, x_elems(s));
    gpu_poison(r->dw, N_WEIGHT);
    gpu_poison(r->dbias, C_OUT);
    job j = {r, NULL, b, train, 0};
    run_job(&j);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(pb->host_out, r->y, 4 * out_elems(s), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(pb->host_dc, r->dc, 4 * nc, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(pb->host_dm, r->dm, 4 * C_OUT, cudaMemcpyDeviceToHost));
    int n = 0;
    names[n] = "y";
    res[n++] = verify_scaled(pb->host_out, train ? pb->ref_model : pb->ref_epilogue, out_elems(s));
    /* dc: each element within TOL_SUM of its terms' magnitudes, plus what an ambiguous
     * decision (section 2b, AMB) could move it by */
    names[n] = "dc";
    res[n++] = verify_sum_f32(pb->host_dc, pb->bref.dc, pb->bref.abs_dc, nc, TOL_SUM);
    double abs_dm[C_OUT];
    for (int k = 0; k < C_OUT; k++)
        abs_dm[k] = pb->bref.abs_dm[k] + pb->bref.amb_dm[k] / TOL_SUM;
    names[n] = "dm";
    res[n++] = verify_sum_f32(pb->host_dm, pb->bref.dm, abs_dm, C_OUT, TOL_SUM);
    if (train) { /* the conv's gradients against the double conv backward of this run's dc */
        CUDA_CHECK(cudaMemcpy(pb->host_dx, r->dx, 4 * x_elems(s), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(pb->host_dw, r->dw, 4 * N_WEIGHT, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(pb->host_dbias, r->dbias, 4 * C_OUT, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < nc; i++)
            pb->dcd[i] = pb->host_dc[i];
        conv3d_backward_ref(s, pb->xd, pb->wd, pb->dcd, pb->ref_dx, pb->ref_dw, pb->ref_dbias,
                            pb->abs_dw, pb->abs_dbias);
        names[n] = "dx";
        res[n++] = verify_scaled(pb->host_dx, pb->ref_dx, x_elems(s));
        names[n] = "dw";
        res[n++] = verify_sum_f32(pb->host_dw, pb->ref_dw, pb->abs_dw, N_WEIGHT, TOL_SUM);
        names[n] = "dbias";
        res[n++] = verify_sum_f32(pb->host_dbias, pb->ref_dbias, pb->abs_dbias, C_OUT, TOL_SUM);
    }
    *n_out = n;
    int passed = 0;
    for (int i = 0; i < n; i++)
        passed += res[i].pass;
    return passed;
}

static void shape_str(const shape *s, char *buf, size_t len)
{
    snprintf(buf, len, "%dx3x%dx%dx%d", s->n, s->d, s->h, s->w);
}

/* every version twice (poisoned before each run); epilogue_only skips the whole-model runs;
 * offset: the input is far from zero mean, where sum-of-squares statistics are not expected
 * to hold (the Welford demonstration measures how far off they are) */
static void check_all(problem *pb, const char *label, int only, int epilogue_only, int offset)
{
    char shape_s[64];
    shape_str(&pb->sh, shape_s, sizeof shape_s);
    for (int i = 0; i < N_VERSIONS; i++) {
        const version *v = &versions[i];
        if (only && only != v->id)
            continue;
        if (offset && v->sumsq) {
            printf("      v%d %-16s %-12s not run: sum of squares cancels at this offset\n", v->id,
                   shape_s, label);
            continue;
        }
        for (int whole = 0; whole < 2; whole++) {
            if ((whole && epilogue_only) || (!whole && !v->epilogue))
                continue;
            double ea, eb;
            verify_result a = verify_fwd(pb, v, whole, &ea), b = verify_fwd(pb, v, whole, &eb);
            /* the cuDNN conv may be nondeterministic: whole-model runs through it not compared */
            int same = (whole && !v->model && !pb->cudnn.fwd_det) ||
                       (a.rel_l2 == b.rel_l2 && a.max_abs == b.max_abs);
            check(a.pass && b.pass && same,
                  "v%-2d %-8s %-16s %-12s rel_l2 %.1e max_abs %.1e stats %.1e%s", v->id,
                  whole ? "model" : "epilogue", shape_s, label, a.rel_l2, a.max_abs, ea,
                  same ? "" : " (differs between runs)");
        }
    }
    for (int i = 0; i < N_BWD && !only; i++)
        for (int train = 0; train < 2; train++) {
            if (train && epilogue_only)
                continue;
            verify_result res[N_GRADS], res2[N_GRADS];
            const char *names[N_GRADS];
            int n = 0, pa = verify_bwd(pb, &bwd_versions[i], train, res, names, &n);
            int pb2 = verify_bwd(pb, &bwd_versions[i], train, res2, names, &n);
            /* epilogue scope: dc and dm the same bits twice (no atomics anywhere) */
            int same = train || (res[1].max_abs == res2[1].max_abs && res[2].max_abs == res2[2].max_abs);
            char line[512];
            int len = 0;
            for (int k = 0; k < n; k++) {
                len += snprintf(line + len, sizeof line - len, " %s %.1e", names[k], res[k].rel_l2);
                if (!res[k].pass || !res2[k].pass)
                    len += snprintf(line + len, sizeof line - len,
                                    " (FAILED: max_abs %.1e, first failure at %zu)",
                                    res[k].max_abs, res[k].max_idx);
            }
            check(pa == n && pb2 == n && same, "%s %-8s %-16s %-12s rel_l2:%s; %d ambiguous%s",
                  bwd_versions[i].id, train ? "train" : "fwd+bwd", shape_s, label, line,
                  pb->bref.n_amb, same ? "" : " (differs between runs)");
        }
}

/* --- CPU checks: everywhere, CI included --- */

typedef struct {
    shape sh;
    double *x, *w, *b, *m, *c, *y;
    const float *g;
    int epilogue_only;
} loss_ctx;

static double model_loss(const double *unused, void *p)
{
    loss_ctx *L = (loss_ctx *)p;
    (void)unused;
    if (!L->epilogue_only)
        conv3d_ref(&L->sh, L->x, L->w, L->b, L->c);
    epilogue_ref(&L->sh, NULL, L->c, L->m, IN_EPS, L->y, NULL, NULL);
    double sum = 0.0;
    for (size_t i = 0; i < out_elems(&L->sh); i++)
        sum += L->g[i] * L->y[i];
    return sum;
}

/* how many positions route their gradient through the inside of the clamp */
static int inside_count(const shape *s, const double *c, const double *m)
{
    double mean[C_OUT], rstd[C_OUT];
    int inside = 0;
    for (int co = 0; co < C_OUT; co++)
        slice_stats_ref(NULL, c, (size_t)co * s->s, s->s, m[co], IN_EPS, &mean[co], &rstd[co]);
    for (int i = 0; i < s->s; i++) {
        double uk = 0.0, xk = 0.0;
        for (int co = 0; co < C_OUT; co++) {
            double xh = (c[(size_t)co * s->s + i] * m[co] - mean[co]) * rstd[co];
            double u = clamp1(xh) * m[co];
            if (co == 0 || u > uk)
                uk = u, xk = xh;
        }
        inside += xk > -1.0 && xk < 1.0;
    }
    return inside;
}

/* Section 2b's gradients against central differences of L = sum g y on a 1x3x4x4x5 input
 * (12 positions). The seed is advanced until some, not all, of the positions' winners are inside
 * the clamp, so both branches of its gradient are exercised. dbias is zero in exact arithmetic
 * (instance norm removes the bias): it is checked absolutely. */
static void gradient_checks(uint64_t seed)
{
    shape s = make_shape(1, 4, 4, 5);
    size_t nx = x_elems(&s), nc = conv_elems(&s), ny = out_elems(&s);
    double *x = (double *)host_alloc(8 * nx), *w = (double *)host_alloc(8 * N_WEIGHT), b[C_OUT], m[C_OUT];
    double *c = (double *)host_alloc(8 * nc), *y = (double *)host_alloc(8 * ny);
    double *dx = (double *)host_alloc(8 * nx), *dw = (double *)host_alloc(8 * N_WEIGHT), db[C_OUT];
    float *g = (float *)host_alloc(4 * ny), *tmp = (float *)host_alloc(4 * N_WEIGHT), mf[C_OUT];
    bwd_ref br;
    memset(&br, 0, sizeof br);
    br.dc = (double *)host_alloc(8 * nc);
    int inside = 0;
    uint64_t sd = seed + 11;
    for (int tries = 0; tries < 100; tries++, sd++) {
        rng_state rng;
        rng_seed(&rng, sd);
        for (size_t i = 0; i < nx; i++)
            x[i] = rng_uniform(&rng);
        init_conv_params(tmp, N_WEIGHT, NULL, 0, C_IN * KVOL, &rng);
        for (int i = 0; i < N_WEIGHT; i++)
            w[i] = tmp[i];
        init_conv_params(tmp, C_OUT, NULL, 0, C_IN * KVOL, &rng);
        for (int i = 0; i < C_OUT; i++)
            b[i] = tmp[i];
        fill_normal(mf, C_OUT, &rng);
        for (int i = 0; i < C_OUT; i++)
            m[i] = mf[i];
        fill_normal(g, ny, &rng);
        conv3d_ref(&s, x, w, b, c);
        inside = inside_count(&s, c, m);
        if (inside >= 3 && inside <= (int)ny - 3)
            break;
    }
    epilogue_backward_ref(&s, NULL, c, m, g, &br);
    conv3d_backward_ref(&s, x, w, br.dc, dx, dw, db, NULL, NULL);
    loss_ctx L = {s, x, w, b, m, c, y, g, 1};
    double e_c = gradcheck(model_loss, &L, c, nc, br.dc, 1e-6, NULL);
    double e_m = gradcheck(model_loss, &L, m, C_OUT, br.dm, 1e-6, NULL);
    L.epilogue_only = 0;
    double e_w = gradcheck(model_loss, &L, w, N_WEIGHT, dw, 1e-6, NULL);
    double e_x = gradcheck(model_loss, &L, x, nx, dx, 1e-6, NULL);
    double num_db[C_OUT], worst_db = 0.0;
    for (int i = 0; i < C_OUT; i++) { /* central differences of the bias, absolute */
        double keep = b[i];
        b[i] = keep + 1e-4;
        double lp = model_loss(NULL, &L);
        b[i] = keep - 1e-4;
        double lm = model_loss(NULL, &L);
        b[i] = keep;
        num_db[i] = (lp - lm) / 2e-4;
        worst_db = fmax(worst_db, fmax(fabs(num_db[i]), fabs(db[i])));
    }
    check(e_c < 1e-6 && inside >= 3 && inside <= (int)ny - 3,
          "cpu: gradcheck dL/dc (%zu values), %d of %zu winners inside the clamp: rel %.1e", nc,
          inside, ny, e_c);
    check(e_m < 1e-6, "cpu: gradcheck dL/dm (16, both uses of m): rel %.1e", e_m);
    check(e_w < 1e-6, "cpu: gradcheck dL/dw (1296 weights): rel %.1e", e_w);
    check(e_x < 1e-6, "cpu: gradcheck dL/dx (%zu inputs): rel %.1e", nx, e_x);
    check(worst_db < 1e-8, "cpu: dL/dbias = 0 (instance norm removes the bias): analytic and "
                           "numerical both below %.1e", worst_db);
    free(x), free(w), free(c), free(y), free(dx), free(dw), free(g), free(tmp), free(br.dc);
}

/* Welford against sum of squares, on the CPU in float: the same 12600 values with and without
 * an offset of 1000, each summed in order (the worst case of float summation). */
static void welford_cpu_check(uint64_t seed)
{
    enum { S = 12600 };
    static float v[S];
    rng_state rng;
    rng_seed(&rng, seed);
    double offs[2] = {0.0, 1000.0}, err_sq[2], err_w[2];
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < S; i++)
            v[i] = (float)(offs[k] + 0.2 * rng_normal(&rng));
        double mu = 0.0, var = 0.0;
        for (int i = 0; i < S; i++)
            mu += v[i];
        mu /= S;
        for (int i = 0; i < S; i++)
            var += (v[i] - mu) * (v[i] - mu);
        var /= S;
        float s = 0.0f, q = 0.0f, wm = 0.0f, wm2 = 0.0f;
        for (int i = 0; i < S; i++) {
            s += v[i], q += v[i] * v[i];
            float d = v[i] - wm;
            wm += d / (float)(i + 1);
            wm2 += d * (v[i] - wm);
        }
        float var_sq = fmaxf(q / S - (s / S) * (s / S), 0.0f);
        err_sq[k] = fabs(var_sq - var) / var, err_w[k] = fabs(wm2 / S - var) / var;
    }
    check(err_w[1] < 1e-3 && err_sq[1] > 100 * err_w[1],
          "cpu: variance of 12600 floats, relative error: offset 0: sum/sumsq %.1e, Welford %.1e; "
          "offset 1000: sum/sumsq %.1e, Welford %.1e",
          err_sq[0], err_w[0], err_sq[1], err_w[1]);
}

#define GOLDEN_DIR "data/golden/ch03"

/* a folder written by `make golden`: PyTorch's float64 model on a small input, stored float32 */
static void golden_case(const char *dir, const char *name)
{
    int64_t dims[5];
    char err[128];
    if (parse_shape(name, 5, dims, err, sizeof err) || shape_problem(dims)) {
        check(0, "golden %s: not a valid shape name", name);
        return;
    }
    shape s = make_shape((int)dims[0], (int)dims[2], (int)dims[3], (int)dims[4]);
    size_t nx = x_elems(&s), nc = conv_elems(&s), ny = out_elems(&s);
    const char *files[12] = {"x", "conv_weight", "conv_bias", "m", "conv_out", "out", "grad_output",
                             "grad_conv_out", "grad_conv_weight", "grad_conv_bias", "grad_x", "grad_m"};
    size_t sizes[12] = {nx, N_WEIGHT, C_OUT, C_OUT, nc, ny, ny, nc, N_WEIGHT, C_OUT, nx, C_OUT};
    float *t[12];
    int ok = 1;
    for (int i = 0; i < 12; i++)
        ok &= (t[i] = npy_load(dir, files[i], sizes[i])) != NULL;
    if (ok) {
        double *xd = (double *)host_alloc(8 * nx), *wd = (double *)host_alloc(8 * N_WEIGHT);
        double bd[C_OUT], md[C_OUT], db[C_OUT], abs_db[C_OUT], abs_dm[C_OUT];
        double *c = (double *)host_alloc(8 * nc), *y = (double *)host_alloc(8 * ny);
        double *dx = (double *)host_alloc(8 * nx), *dw = (double *)host_alloc(8 * N_WEIGHT);
        double *abs_dw = (double *)host_alloc(8 * N_WEIGHT);
        bwd_ref br;
        memset(&br, 0, sizeof br);
        br.dc = (double *)host_alloc(8 * nc);
        for (size_t i = 0; i < nx; i++)
            xd[i] = t[0][i];
        for (int i = 0; i < N_WEIGHT; i++)
            wd[i] = t[1][i];
        for (int i = 0; i < C_OUT; i++)
            bd[i] = t[2][i], md[i] = t[3][i];
        conv3d_ref(&s, xd, wd, bd, c);
        epilogue_ref(&s, NULL, c, md, IN_EPS, y, NULL, NULL);
        epilogue_backward_ref(&s, NULL, c, md, t[6], &br);
        conv3d_backward_ref(&s, xd, wd, br.dc, dx, dw, db, abs_dw, abs_db);
        for (int i = 0; i < C_OUT; i++)
            abs_dm[i] = br.abs_dm[i];
        verify_result v[7] = {
            verify_f32(t[4], c, nc, 1e-6, 1e-6),
            verify_f32(t[5], y, ny, 1e-6, 1e-6),
            verify_f32(t[7], br.dc, nc, 1e-6, 1e-6),
            verify_sum_f32(t[8], dw, abs_dw, N_WEIGHT, 1e-6),
            verify_sum_f32(t[9], db, abs_db, C_OUT, 1e-6),
            verify_f32(t[10], dx, nx, 1e-6, 1e-6),
            verify_sum_f32(t[11], br.dm, abs_dm, C_OUT, 1e-6),
        };
        int all = 1;
        for (int i = 0; i < 7; i++)
            all &= v[i].pass;
        check(all,
              "golden %s (PyTorch float64): rel_l2 c %.1e y %.1e dc %.1e dw %.1e dx %.1e dm %.1e; "
              "dbias max %.1e (zero in exact arithmetic)",
              name, v[0].rel_l2, v[1].rel_l2, v[2].rel_l2, v[3].rel_l2, v[5].rel_l2, v[6].rel_l2,
              v[4].max_abs);
        /* the check can fail: InstanceNorm3d with eps 1e-3 instead of 1e-5 */
        epilogue_ref(&s, NULL, c, md, 1e-3, y, NULL, NULL);
        verify_result planted = verify_f32(t[5], y, ny, 1e-6, 1e-6);
        check(!planted.pass, "golden %s: a reference with eps = 1e-3 is caught: rel_l2 %.1e", name,
              planted.rel_l2);
        free(xd), free(wd), free(c), free(y), free(dx), free(dw), free(abs_dw), free(br.dc);
    } else {
        check(0, "golden %s: missing or malformed tensors", name);
    }
    for (int i = 0; i < 12; i++)
        free(t[i]);
}

static void golden_checks(void) { for_each_golden_case(GOLDEN_DIR, golden_case); }

static void cpu_checks(uint64_t seed)
{
    /* the reference conv against a direct sum at every output of a small case */
    shape s = make_shape(1, 3, 4, 5);
    size_t nx = x_elems(&s), nc = conv_elems(&s);
    double *x = (double *)host_alloc(8 * nx), *w = (double *)host_alloc(8 * N_WEIGHT), b[C_OUT];
    double *c = (double *)host_alloc(8 * nc);
    rng_state rng;
    rng_seed(&rng, seed);
    for (size_t i = 0; i < nx; i++)
        x[i] = rng_uniform(&rng);
    for (int i = 0; i < N_WEIGHT; i++)
        w[i] = rng_uniform(&rng) - 0.5;
    for (int i = 0; i < C_OUT; i++)
        b[i] = rng_uniform(&rng) - 0.5;
    conv3d_ref(&s, x, w, b, c);
    double worst = 0.0;
    for (int co = 0; co < C_OUT; co++)
        for (int h = 0; h < s.oh; h++)
            for (int ww = 0; ww < s.ow; ww++) {
                double acc = b[co];
                for (int ci = 0; ci < C_IN; ci++)
                    for (int k = 0; k < KVOL; k++)
                        acc += x[((size_t)ci * s.d + k / 9) * s.h * s.w + (h + (k / 3) % 3) * s.w +
                                 ww + k % 3] * w[(co * C_IN + ci) * KVOL + k];
                worst = fmax(worst, fabs(acc - c[((size_t)co * s.oh + h) * s.ow + ww]));
            }
    check(worst < 1e-12, "cpu: reference conv = direct sum on 1x3x3x4x5, max diff %.1e", worst);
    free(x), free(w), free(c);

    /* ties in the channel max go to the first channel: two equal winners, channels 2 and 5 */
    shape t = make_shape(1, 3, 3, 4); /* S = 2 */
    double cv[C_OUT * 2], mv[C_OUT], yv[2];
    for (int co = 0; co < C_OUT; co++)
        cv[2 * co] = 0.0, cv[2 * co + 1] = 1.0, mv[co] = 0.5; /* xh = -1, +1; u = -0.5, 0.5 */
    mv[2] = mv[5] = 2.0;
    epilogue_ref(&t, NULL, cv, mv, IN_EPS, yv, NULL, NULL);
    float gt[2] = {1.0f, 1.0f};
    bwd_ref br;
    memset(&br, 0, sizeof br);
    br.dc = (double *)host_alloc(8 * C_OUT * 2);
    epilogue_backward_ref(&t, NULL, cv, mv, gt, &br);
    int first = br.dc[2 * 5] == 0.0 && br.dc[2 * 5 + 1] == 0.0;
    check(first && br.dc[2 * 2 + 1] != 0.0 && fabs(yv[1] - 2.0 * 0.999995) < 1e-5,
          "cpu: a tie in the channel max routes the gradient to the first channel (2, not 5)");
    free(br.dc);
    welford_cpu_check(seed);
    gradient_checks(seed);
    golden_checks();
}

/* --- GPU checks --- */

/* Welford against sum of squares on the GPU: a = c m + offset into t[0], the statistics of v6
 * (sum and sum of squares), v7 (Welford + Chan) and v8 (CUB), rstd's worst relative error
 * against the double two-pass statistics of the same float values */
static void welford_demo(problem *pb, double offset, double err[3])
{
    const shape *s = &pb->sh;
    size_t nc = conv_elems(s), ns = seg_count(s);
    float *a = (float *)host_alloc(4 * nc);
    double *ad = (double *)host_alloc(8 * s->s);
    for (size_t i = 0; i < nc; i++)
        a[i] = pb->host_c[i] * pb->m[(i / s->s) % C_OUT] + (float)offset;
    CUDA_CHECK(cudaMemcpy(pb->r.t[0], a, 4 * nc, cudaMemcpyHostToDevice));
    stats_fn fns[3] = {stats_v6, stats_v7, stats_v8};
    for (int k = 0; k < 3; k++) {
        gpu_poison(pb->r.rstd, ns);
        fns[k](&pb->r, pb->r.t[0], NULL);
        LAUNCH_CHECK();
        CUDA_CHECK(cudaMemcpy(pb->host_rstd, pb->r.rstd, 4 * ns, cudaMemcpyDeviceToHost));
        err[k] = 0.0;
        for (size_t q = 0; q < ns; q++) {
            double mean, rstd;
            for (int i = 0; i < s->s; i++)
                ad[i] = a[q * s->s + i];
            slice_stats_ref(NULL, ad, 0, s->s, 1.0, IN_EPS, &mean, &rstd);
            double e = fabs(pb->host_rstd[q] - rstd) / rstd;
            err[k] = e > err[k] || e != e ? e : err[k];
        }
    }
    free(a), free(ad);
}

static const int test_shapes[][4] = {
    /* N, D, H, W (input 3 channels); S = (D-2)(H-2)(W-2) */
    {1, 3, 3, 4},    /* S = 2, the least instance norm accepts */
    {2, 4, 5, 6},    /* S = 24: most cluster blocks get 0 or 4 positions */
    {1, 3, 9, 35},   /* S = 231: odd, scalar loads */
    {3, 5, 7, 10},   /* S = 120, a multiple of 4: 16-byte loads */
    {2, 3, 3, 259},  /* S = 257: a prime, one past the reduction block */
    {2, 4, 35, 37},  /* S = 2310, not a multiple of 4 */
    {1, 16, 32, 32}, /* S = 12600: the KernelBench sample */
    {1, 33, 33, 33}, /* S = 29791: too big for the cluster, v10 / v12 / b3 fall back */
};

static void gpu_checks(int sm_count, size_t smem_optin, uint64_t seed, int only, const int64_t *one)
{
    int n_shapes = one ? 1 : (int)(sizeof test_shapes / sizeof test_shapes[0]);
    for (int t = 0; t < n_shapes; t++) {
        shape s = one ? make_shape((int)one[0], (int)one[2], (int)one[3], (int)one[4])
                      : make_shape(test_shapes[t][0], test_shapes[t][1], test_shapes[t][2],
                                   test_shapes[t][3]);
        problem pb;
        problem_init(&pb, &s, sm_count, smem_optin, seed + t);
        problem_refresh(&pb);
        char shape_s[64];
        shape_str(&s, shape_s, sizeof shape_s);
        verify_result vc = verify_f32(pb.host_c, pb.ref_c, conv_elems(&s), TOL_REL_L2, TOL_ABS);
        check(vc.pass, "cuDNN conv = reference on %s, rel_l2 %.1e", shape_s, vc.rel_l2);
        if (!one && s.s > 12600)
            printf("      %s: cluster versions %s (needs %zu bytes of shared memory, %zu allowed)\n",
                   shape_s, cluster_fits(&pb.r, 0) ? "run" : "fall back", cluster_smem(s.s, 0),
                   smem_optin);
        check_all(&pb, "rand", only, 0, 0);
        if (t == 5 || one) {
            for (size_t i = 0; i < x_elems(&s); i++)
                pb.x[i] *= 1000.0f;
            problem_refresh(&pb);
            check_all(&pb, "x*1000", only, 0, 0);
            float *c = (float *)host_alloc(4 * conv_elems(&s));
            rng_state rng;
            rng_seed(&rng, seed);
            for (size_t i = 0; i < conv_elems(&s); i++)
                c[i] = (float)(200.0 * (rng_uniform(&rng) - 0.5));
            problem_set_conv(&pb, c);
            check_all(&pb, "c ~ +-100", only, 1, 0);
            for (size_t i = 0; i < conv_elems(&s); i++)
                c[i] = (float)(50.0 + 2.0 * (rng_uniform(&rng) - 0.5));
            problem_set_conv(&pb, c);
            check_all(&pb, "c ~ 50 +- 1", only, 1, 1);
            pb.m[3] = 0.0f, pb.m[5] = 1e-3f, pb.m[7] = -pb.m[8];
            problem_set_conv(&pb, c);
            check_all(&pb, "m 0, 1e-3", only, 1, 1);
            free(c);
        }
        if (s.s == 12600 && !one && !only) {
            double e0[3], e1[3];
            welford_demo(&pb, 0.0, e0);
            welford_demo(&pb, 1000.0, e1);
            check(e1[1] < 1e-3 && e1[2] < 1e-3 && e1[0] > 100 * e1[1] && e0[0] < 1e-4,
                  "GPU statistics of a = c m + offset, worst rstd error: offset 0: sum/sumsq (v6) "
                  "%.1e, Welford (v7) %.1e, CUB (v8) %.1e; offset 1000: %.1e, %.1e, %.1e",
                  e0[0], e0[1], e0[2], e1[0], e1[1], e1[2]);
        }
        problem_free(&pb);
    }
}

/* ============================================================================================
 * 6. main
 * ========================================================================================== */

static const char *help_text =
    "\nChapter 3, KernelBench level 2 model #79:\n"
    "  Conv3d(3->16, k3, no padding) -> * m -> InstanceNorm3d -> clamp(-1, 1) -> * m -> max over\n"
    "  channels. --shape is N x 3 x D x H x W (default 128x3x16x32x32), D, H, W >= 3 and\n"
    "  (D-2)(H-2)(W-2) >= 2; the output is N x (D-2) x (H-2) x (W-2). Limits: batch <= 65535,\n"
    "  conv output < 2^31 elements.\n"
    "  --dump DIR writes x.npy, conv_weight.npy (16,3,3,3,3), conv_bias.npy (16), m.npy\n"
    "  (16,1,1,1), conv_out.npy (the cuDNN conv output the epilogue versions read),\n"
    "  out_v1.npy .. out_v10.npy, out_v11_model.npy, out_v12_model.npy; without --version also\n"
    "  grad_output.npy and, from each backward version's training step (b1..b3),\n"
    "  grad_conv_out_bK.npy, grad_m_bK.npy, grad_conv_weight_bK.npy, grad_conv_bias_bK.npy,\n"
    "  grad_x_bK.npy. --version K selects forward version K; the backward versions run when it\n"
    "  is absent. Check a dump: python3 data/pytorch_peer.py check DIR --chapter 3\n";

static void dump_all(problem *pb, const char *dir, int only)
{
    const shape *s = &pb->sh;
    mkdir(dir, 0777);
    int64_t xs[5] = {s->n, C_IN, s->d, s->h, s->w}, ws[5] = {C_OUT, C_IN, KS, KS, KS};
    int64_t bs[1] = {C_OUT}, ms[4] = {C_OUT, 1, 1, 1}, cs[5] = {s->n, C_OUT, s->od, s->oh, s->ow};
    int64_t ys[4] = {s->n, s->od, s->oh, s->ow};
    npy_save_or_exit(dir, "x", pb->x, 5, xs);
    npy_save_or_exit(dir, "conv_weight", pb->weight, 5, ws);
    npy_save_or_exit(dir, "conv_bias", pb->bias, 1, bs);
    npy_save_or_exit(dir, "m", pb->m, 4, ms);
    npy_save_or_exit(dir, "conv_out", pb->host_c, 5, cs);
    for (int i = 0; i < N_VERSIONS; i++) {
        const version *v = &versions[i];
        if (only && only != v->id)
            continue;
        double e;
        verify_fwd(pb, v, v->epilogue ? 0 : 1, &e);
        char name[32];
        snprintf(name, sizeof name, v->epilogue ? "out_v%d" : "out_v%d_model", v->id);
        npy_save_or_exit(dir, name, pb->host_out, 4, ys);
    }
    if (!only) {
        npy_save_or_exit(dir, "grad_output", pb->g, 4, ys);
        for (int i = 0; i < N_BWD; i++) {
            verify_result res[N_GRADS];
            const char *names[N_GRADS];
            int n = 0;
            verify_bwd(pb, &bwd_versions[i], 1, res, names, &n);
            const char *id = bwd_versions[i].id;
            char name[64];
            snprintf(name, sizeof name, "grad_conv_out_%s", id);
            npy_save_or_exit(dir, name, pb->host_dc, 5, cs);
            snprintf(name, sizeof name, "grad_m_%s", id);
            npy_save_or_exit(dir, name, pb->host_dm, 4, ms);
            snprintf(name, sizeof name, "grad_conv_weight_%s", id);
            npy_save_or_exit(dir, name, pb->host_dw, 5, ws);
            snprintf(name, sizeof name, "grad_conv_bias_%s", id);
            npy_save_or_exit(dir, name, pb->host_dbias, 1, bs);
            snprintf(name, sizeof name, "grad_x_%s", id);
            npy_save_or_exit(dir, name, pb->host_dx, 5, xs);
        }
    }
    printf("wrote the inputs, parameters, outputs and gradients as .npy to %s/\n", dir);
}

/* the cluster kernels ask for more than the default 48 KB of dynamic shared memory */
static size_t cluster_setup(void)
{
    int optin = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    /* less the largest static shared memory of the four (cluster_shared, b3's red, the weights) */
    size_t avail = (size_t)optin - 8192;
    CUDA_CHECK(cudaFuncSetAttribute(k_cluster_epilogue, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)avail));
    CUDA_CHECK(cudaFuncSetAttribute(k_cluster_pipelined, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)avail));
    if (CLP > 8) /* clusters of more than 8 blocks are an opt-in (Hopper allows 16) */
        CUDA_CHECK(cudaFuncSetAttribute(k_cluster_pipelined,
                                        cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CUDA_CHECK(cudaFuncSetAttribute(k_cluster_model, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)avail));
    CUDA_CHECK(cudaFuncSetAttribute(k_cluster_backward, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)avail));
    return avail;
}

/* how many 8-block clusters of the epilogue kernel fit on the GPU at once */
static int active_clusters(const shape *s)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(CL, s->n);
    cfg.blockDim = dim3(CL_THREADS);
    cfg.dynamicSmemBytes = cluster_smem(s->s, 0);
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, (void *)k_cluster_epilogue, &cfg) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return n;
}

int main(int argc, char **argv)
{
    cli_args a;
    cli_parse_or_exit(argc, argv, 5, &a, help_text);
    if (a.list) {
        for (int i = 0; i < N_VERSIONS; i++)
            printf("v%-2d %s\n", versions[i].id, versions[i].name);
        for (int i = 0; i < N_BWD; i++)
            printf("%s  %s\n", bwd_versions[i].id, bwd_versions[i].name);
        return 0;
    }
    int64_t dims[5] = {128, 3, 16, 32, 32};
    cli_version_shape_or_exit(&a, N_VERSIONS, 5, dims, shape_problem);
    setenv("NVIDIA_TF32_OVERRIDE", "0", 1);

    if (a.test) {
        cpu_checks(a.seed);
        if (gpu_count() == 0) {
            skip("GPU checks (every version on awkward shapes and extreme values): no CUDA device");
        } else {
            cudaDeviceProp p;
            CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
            size_t optin = cluster_setup();
            gpu_checks(p.multiProcessorCount, optin, a.seed, a.version, a.ndim ? dims : NULL);
        }
        return checks_failed() ? 1 : 0;
    }
    gpu_require_or_exit();
    device_info dev;
    device_info_get(&dev);
    size_t optin = cluster_setup();
    shape s = make_shape((int)dims[0], (int)dims[2], (int)dims[3], (int)dims[4]);
    char shape_s[64];
    shape_str(&s, shape_s, sizeof shape_s);
    problem pb;
    problem_init(&pb, &s, dev.sm_count, optin, a.seed);
    problem_refresh(&pb);
    verify_result vc = verify_f32(pb.host_c, pb.ref_c, conv_elems(&s), TOL_REL_L2, TOL_ABS);
    if (!vc.pass) {
        fprintf(stderr, "error: cuDNN's conv output does not match the reference: ");
        verify_print(stderr, &vc);
        fputc('\n', stderr);
        return 1;
    }
    report_ctx ctx = {dev.tag, dev.name, "03", shape_s, dev.copy_gbps, dev.sm_count,
                      dev.l2_bytes / 1e6};
    report_row rows[3 * N_VERSIONS + 2 * N_BWD];
    char names[3 * N_VERSIONS][8];
    int n_rows = 0, failed = 0;
    double first[5] = {0, 0, 0, 0, 0}; /* v1 / b1 per scope; [4]: the statistics */
    report_header(stdout, &ctx);
    for (int i = 0; i < N_VERSIONS; i++) {
        const version *v = &versions[i];
        if (a.version && a.version != v->id)
            continue;
        for (int scope = 0; scope < 3; scope++) { /* epilogue, model, statistics alone */
            if ((scope == 0 && !v->epilogue) || (scope == 2 && !v->stats))
                continue;
            int whole = scope == 1;
            job j = {&pb.r, v, NULL, whole, scope == 2};
            double e1, e2;
            verify_result before = verify_fwd(&pb, v, scope == 2 ? 0 : whole, &e1);
            timing t = gpu_time(run_job, &j, a.reps);
            verify_result after = verify_fwd(&pb, v, scope == 2 ? 0 : whole, &e2);
            snprintf(names[n_rows], sizeof names[0], "v%d", v->id);
            report_row *row = &rows[n_rows];
            const char *sc = scope == 0 ? "epilogue_fwd" : scope == 1 ? "model_fwd" : "stats";
            double bytes = scope == 0 ? epilogue_bytes(&s) : scope == 1 ? model_bytes(&s) : stats_bytes(&s);
            *row = (report_row){names[n_rows++], v->name, sc, t, bytes, 0};
            int slot = scope == 2 ? 4 : whole;
            if (v->id == 1)
                first[slot] = t.median_ms;
            if (first[slot] > 0)
                row->speedup_v1 = first[slot] / t.median_ms;
            report_print(stdout, &ctx, row);
            if (!before.pass || !after.pass) {
                failed = 1;
                printf("         ^ FAILED verification: ");
                verify_print(stdout, before.pass ? &after : &before);
                printf(" (statistics %.1e, %.1e)\n", e1, e2);
            }
        }
    }
    for (int i = 0; i < N_BWD && a.version == 0; i++) {
        const bwd_version *b = &bwd_versions[i];
        for (int train = 0; train < 2; train++) {
            job j = {&pb.r, NULL, b, train, 0};
            verify_result res[N_GRADS];
            const char *gn[N_GRADS];
            int n = 0, before = verify_bwd(&pb, b, train, res, gn, &n);
            timing t = gpu_time(run_job, &j, a.reps);
            int after = verify_bwd(&pb, b, train, res, gn, &n);
            report_row *row = &rows[n_rows++];
            *row = (report_row){b->id, b->name, train ? "train_step" : "epilogue_fwdbwd", t,
                                train ? train_step_bytes(&s) : epilogue_fwdbwd_bytes(&s), 0};
            if (i == 0)
                first[2 + train] = t.median_ms;
            if (first[2 + train] > 0)
                row->speedup_v1 = first[2 + train] / t.median_ms;
            report_print(stdout, &ctx, row);
            if (before != n || after != n) {
                failed = 1;
                printf("         ^ FAILED verification:");
                for (int k = 0; k < n; k++)
                    if (!res[k].pass)
                        printf(" %s rel_l2 %.1e max_abs %.1e", gn[k], res[k].rel_l2, res[k].max_abs);
                putchar('\n');
            }
        }
    }
    if (a.version == 0)
        printf("backward checks: %d ambiguous positions (argmax or clamp within %.0e; their slices "
               "compared through the bound, section 2b)\n", pb.bref.n_amb, AMB);
    timing tc = gpu_time(time_conv, &pb.r, a.reps);
    printf("cuDNN Conv3d alone (algo %d, %s, + bias): median %.4f ms [%.4f - %.4f], %.1f TFLOP/s\n",
           (int)pb.cudnn.fwd_algo, pb.cudnn.fwd_det ? "deterministic" : "nondeterministic",
           tc.median_ms, tc.min_ms, tc.max_ms, conv_flops(&s) / (tc.median_ms * 1e9));
    if (a.version == 0) {
        timing tx = gpu_time(time_dx, &pb.r, a.reps), tw = gpu_time(time_dw, &pb.r, a.reps);
        timing to = gpu_time(time_dw_own, &pb.r, a.reps);
        printf("in the training step, median ms: cuDNN dx (backward data, algo %d) %.4f, dw "
               "(backward filter, algo %d, %s) %.4f; our dw (b2, b3) %.4f\n",
               (int)pb.cudnn.dx_algo, tx.median_ms, (int)pb.cudnn.dw_algo,
               pb.cudnn.dw_det ? "deterministic" : "nondeterministic", tw.median_ms, to.median_ms);
        double e0[3], e1[3];
        welford_demo(&pb, 0.0, e0);
        welford_demo(&pb, 1000.0, e1);
        printf("statistics of a = c m + offset, worst relative error of rstd over the %zu slices: "
               "offset 0: sum/sumsq (v6) %.1e, Welford (v7) %.1e, CUB (v8) %.1e; offset 1000: "
               "%.1e, %.1e, %.1e\n",
               seg_count(&s), e0[0], e0[1], e0[2], e1[0], e1[1], e1[2]);
    }
    printf("cluster kernels: %s (%zu of %zu bytes of shared memory a block); %d clusters of %d "
           "blocks resident at once, %d clusters in the grid; v11: %d resident clusters (%zu bytes "
           "a block), each walking about %d samples\n",
           cluster_fits(&pb.r, 0) ? "run" : "fall back to v9 / v12 / b2", cluster_smem(s.s, 0),
           optin, active_clusters(&s), CL, s.n, pb.r.pipe_clusters, 2 * cluster_smem(s.s, 0, CLP),
           pb.r.pipe_clusters > 0 ? (s.n + pb.r.pipe_clusters - 1) / pb.r.pipe_clusters : 0);
    printf("floors at %.0f GB/s: epilogue %.1f MB -> %.4f ms; epilogue fwd+bwd %.1f MB -> %.4f ms; "
           "the conv: %.2f GFLOP\n",
           dev.copy_gbps, epilogue_bytes(&s) / 1e6, epilogue_bytes(&s) / (dev.copy_gbps * 1e6),
           epilogue_fwdbwd_bytes(&s) / 1e6, epilogue_fwdbwd_bytes(&s) / (dev.copy_gbps * 1e6),
           conv_flops(&s) / 1e9);
    if (a.csv && report_csv(a.csv, &ctx, rows, n_rows))
        failed = 1;
    if (a.dump_dir)
        dump_all(&pb, a.dump_dir, a.version);
    problem_free(&pb);
    gpu_release();
    if (failed)
        fprintf(stderr, "error: a version failed verification\n");
    return failed ? 1 : 0;
}
