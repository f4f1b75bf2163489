/*
 * reference.cu: chapter 4's CPU reference, in double, written the way the math is written.
 * The conv itself is common/conv_ref.c (PyTorch's Conv2d as a Conv3d of depth 1, forward and
 * backward); this file is the epilogue: GroupNorm, tanh, HardSwish, the residual add, the
 * logsumexp over channels, and its backward, derived term by term; then the CPU checks that hold
 * the reference to the definition and to central differences.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

conv3d_geom conv_geom(const shape *s) /* 8 -> 64 channels, kernel 3 x 3, no padding */
{
    return conv2d_geom_make(s->n, C_IN, C_OUT, s->h, s->w, KS, 0);
}

/* the conv value at index i, from the float c (the GPU's, for the epilogue scopes) or the
 * double one (the reference conv, for the whole model) */
static double cval(const float *cf, const double *cd, size_t i) { return cf ? cf[i] : cd[i]; }

/* nn.Hardswish, the general form: v relu6(v + 3) / 6 (Howard et al., "Searching for
 * MobileNetV3", 2019). On this model's t in (-1, 1) it is t (t + 3) / 6 (model.h). */
double hardswish_ref(double v)
{
    double r6 = v + 3.0;
    r6 = r6 < 0.0 ? 0.0 : (r6 > 6.0 ? 6.0 : r6);
    return v * r6 / 6.0;
}

/* Its derivative: 0 below -3, (2v + 3) / 6 on [-3, 3], 1 above. At the kinks PyTorch's
 * hardswish_backward takes the middle branch on both ends (v < -3 -> 0, v <= 3 -> v / 3 + 1/2,
 * else 1: aten/src/ATen/native/cuda/ActivationHardswishKernel.cu and the scalar path of
 * aten/src/ATen/native/cpu/Activation.cpp), so -0.5 at v = -3 and 1.5 at v = 3. Unreachable
 * here (|t| < 1), kept so the reference means nn.Hardswish wherever it is called. */
double hardswish_grad_ref(double v)
{
    return v < -3.0 ? 0.0 : (v <= 3.0 ? (2.0 * v + 3.0) / 6.0 : 1.0);
}

/* The statistics the way GroupNorm defines them: mean and biased variance of the count values
 * from base (a group's CPG channels, contiguous in NCHW), two passes (exact in double for any
 * offset), rstd = 1 / sqrt(var + eps). */
void group_stats_ref(const float *cf, const double *cd, size_t base, int count, double eps,
                     double *mean, double *rstd)
{
    double sum = 0.0, sq = 0.0;
    for (int i = 0; i < count; i++)
        sum += cval(cf, cd, base + i);
    double mu = sum / count;
    for (int i = 0; i < count; i++) {
        double d = cval(cf, cd, base + i) - mu;
        sq += d * d;
    }
    *mean = mu, *rstd = 1.0 / sqrt(sq / count + eps);
}

/* The forward at position i of one sample (channel 0 of the sample at base), the chain of the
 * model one channel at a time: xh, t = tanh(gamma xh + beta), r = c + hardswish(t); returns
 * y = logsumexp_c r_c. logsumexp_ref (common/common.c) is the stable m + log sum exp(r - m),
 * m = max r: no term exceeds 1, the largest is exactly 1, nothing overflows or underflows. */
static double position_ref(const float *cf, const double *cd, size_t base, int S, int i,
                           const double *mean, const double *rstd, const double *gamma,
                           const double *beta, double *xh, double *t, double *r)
{
    for (int c = 0; c < C_OUT; c++) {
        int G = c / CPG;
        double v = cval(cf, cd, base + (size_t)c * S + i);
        xh[c] = (v - mean[G]) * rstd[G];
        t[c] = tanh(gamma[c] * xh[c] + beta[c]);
        r[c] = v + hardswish_ref(t[c]);
    }
    return logsumexp_ref(r, C_OUT, 1);
}

/* y = logsumexp_c(c + hardswish(tanh(GroupNorm(c)))); the (n, group) statistics go to mean_out
 * and rstd_out when not NULL. eps is a parameter so a check can show a wrong one is caught. */
void epilogue_ref(const shape *s, const float *cf, const double *cd, const double *gamma,
                  const double *beta, double eps, double *y, double *mean_out, double *rstd_out)
{
    int S = s->s;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < s->n; n++) {
        double mean[GROUPS], rstd[GROUPS], xh[C_OUT], t[C_OUT], r[C_OUT];
        size_t base = (size_t)n * C_OUT * S;
        for (int G = 0; G < GROUPS; G++) {
            group_stats_ref(cf, cd, base + (size_t)G * CPG * S, CPG * S, eps, &mean[G], &rstd[G]);
            if (mean_out)
                mean_out[n * GROUPS + G] = mean[G];
            if (rstd_out)
                rstd_out[n * GROUPS + G] = rstd[G];
        }
        for (int i = 0; i < S; i++)
            y[(size_t)n * S + i] =
                position_ref(cf, cd, base, S, i, mean, rstd, gamma, beta, xh, t, r);
    }
}

/* ---------------------------------------------------------------------------- the backward
 * L = sum over (n, position) of g y, g = dL/dy given. At one position of sample n, for each
 * channel c of group G = c / 4, walking the forward backwards:
 *
 *   y = logsumexp_c r_c    dr_c = g p_c,  p_c = exp(r_c - y) = softmax_c(r): the derivative of a
 *                          logsumexp is the softmax (chapters 1 and 2).
 *   r = c + h              the residual: dc_c receives dr_c directly (term 1), and dh_c = dr_c.
 *   h = hardswish(t)       dt = dh hardswish'(t), with PyTorch's hardswish_backward: 0 for t < -3,
 *                          (2t + 3) / 6 for -3 <= t <= 3, 1 above (hardswish_grad_ref). With t in
 *                          (-1, 1) only the middle branch is taken, (2t + 3) / 6 in (1/6, 5/6).
 *   t = tanh(gn)           dgn = dt (1 - t^2).
 *   gn = gamma xh + beta   dgamma_c = sum over n and positions of dgn xh,
 *                          dbeta_c  = sum over n and positions of dgn,
 *                          dxh = dgn gamma_c.
 *   xh = (c - mu) rstd     over the M = 4 S values j of the group (n, G): mu = mean(c),
 *                          var = mean((c - mu)^2), rstd = (var + eps)^(-1/2). Differentiating,
 *                            d mu / d c_j = 1 / M,   d var / d c_j = 2 (c_j - mu) / M,
 *                            d xh_i / d c_j
 *                              = rstd (delta_ij - 1/M) - (c_i - mu) rstd^3 (c_j - mu) / M
 *                              = rstd (delta_ij - 1/M - xh_i xh_j / M),
 *                          so the GroupNorm path adds to dc_j
 *                            sum_i dxh_i d xh_i / d c_j
 *                              = rstd (dxh_j - mean(dxh) - xh_j mean(dxh xh))
 *                          (terms 2, 3 and 4), both means over the group's M values: two
 *                          reductions per (n, group), over 4 channels whose dxh carry 4 gammas.
 *   conv                   dx, dw and dbias from dc as for any Conv2d (common/conv_ref.h).
 *
 * Together:  dc = dr + rstd (dxh - mean(dxh) - xh mean(dxh xh)).
 *            term 1      term 2   term 3      term 4
 * Like the forward, the backward cannot finish any dc of a sample before it has read all of it:
 * p needs y, y needs every group's statistics, and terms 3 and 4 need the group's two sums.
 *
 * The GroupNorm path (terms 2 to 4) sums to zero over each group. xh sums to zero there,
 * sum_j xh_j = rstd (sum_j c_j - M mu) = 0, so
 *     sum_j rstd (dxh_j - mean(dxh) - xh_j mean(dxh xh))
 *         = rstd (M mean(dxh) - M mean(dxh) - 0) = 0.
 * Unlike chapter 3's instance norm, this does not make the conv's dbias zero: the residual carries
 * c, bias included, straight to the output, and GroupNorm removes only the mean of a group's four
 * biases, not each one. What remains is that the four dbias of a group add up to the sum of the
 * residual's dr over those channels alone; the CPU checks confirm the zero sum per (n, group).
 *
 * The scale of a float result's error, for verify_sum_f32 (abs_dc, abs_dgamma, abs_dbeta): the
 * first-order bound of its rounding error in units of float's 2^-24, propagated term by term,
 * scale(a b) = |a| scale(b) + scale(a) |b|, scale(a + b) = scale(a) + scale(b), each input to a
 * step counted at the scale of its own error (as chapter 3 counts xh):
 *   X  = (|c| + |mean|) rstd           xh is computed from c and the mean: its error scales with
 *                                      them, not with |xh| (small where c is near the mean)
 *   Dr = |g| p (1 + |r| + |y|)         p = exp(r - y): r - y is rounded at the scale |r| + |y|,
 *                                      and exp turns that absolute error into a relative one
 *   T  = (1 - t^2) (|gamma| X + |beta|) + 1       t = tanh(gamma xh + beta), tanh's own error
 *                                                 included
 *   Dg = Dr |f(t)| + 2 |dr| T          dgn = dr f(t), f(t) = hardswish'(t) (1 - t^2), |f'| <= 5/3
 *                                      on [-1, 1]
 *   abs_dc     = Dr + rstd (|gamma| Dg + A1 / M + X |mean(dxh xh)| + |xh| A2 / M), with
 *                A1 = sum |gamma| Dg and A2 = sum (|gamma| Dg |xh| + |dxh| X) over the group's
 *                M values: the scales of mean(dxh) and mean(dxh xh)
 *   abs_dgamma = sum over n and positions of (Dg |xh| + |dgn| X),   abs_dbeta = the sum of Dg.
 * Each is at least the sum of its terms' magnitudes. A float kernel's error, divided by these,
 * is a small multiple of 2^-24 (the verifier chooses the bound); where c sits far from zero
 * (c ~ 50 +- 1) the scales grow with |c| / spread, as the float error does. */
void epilogue_backward_ref(const shape *s, const float *cf, const double *cd, const double *gamma,
                           const double *beta, const float *g, bwd_ref *out)
{
    int S = s->s, M = CPG * S;
    double *parts = (double *)calloc((size_t)s->n * 4 * C_OUT, sizeof(double));
    if (!parts)
        die(1, "out of host memory");
#pragma omp parallel for schedule(dynamic)
    for (int n = 0; n < s->n; n++) {
        double mean[GROUPS], rstd[GROUPS], xh[C_OUT], t[C_OUT], r[C_OUT];
        double s1[GROUPS] = {0}, s2[GROUPS] = {0}; /* sum of dxh, of dxh xh, per group */
        double a1[GROUPS] = {0}, a2[GROUPS] = {0}; /* their scales (above) */
        /* this sample's dgamma, dbeta and their scales; summed over n in order below */
        double *dgamma = parts + (size_t)n * 4 * C_OUT, *dbeta = dgamma + C_OUT;
        double *sg = dbeta + C_OUT, *sb = sg + C_OUT;
        size_t base = (size_t)n * C_OUT * S, cs = (size_t)C_OUT * S;
        double *dr = (double *)host_alloc(8 * cs), *dxh = (double *)host_alloc(8 * cs);
        double *dr_s = (double *)host_alloc(8 * cs), *dxh_s = (double *)host_alloc(8 * cs);
        for (int G = 0; G < GROUPS; G++)
            group_stats_ref(cf, cd, base + (size_t)G * M, M, GN_EPS, &mean[G], &rstd[G]);
        for (int i = 0; i < S; i++) { /* the pointwise chain back to dxh, and the group sums */
            double y = position_ref(cf, cd, base, S, i, mean, rstd, gamma, beta, xh, t, r);
            double gi = g[(size_t)n * S + i];
            for (int c = 0; c < C_OUT; c++) {
                int G = c / CPG;
                size_t e = (size_t)c * S + i;
                double p = exp(r[c] - y); /* softmax over the channels */
                double f = hardswish_grad_ref(t[c]) * (1.0 - t[c] * t[c]);
                dr[e] = gi * p;         /* dr = g p = dh */
                double dgn = dr[e] * f; /* dt = dh hardswish'(t), dgn = dt (1 - t^2) */
                dxh[e] = dgn * gamma[c]; /* dxh = dgn gamma */
                dgamma[c] += dgn * xh[c];
                dbeta[c] += dgn;
                s1[G] += dxh[e];
                s2[G] += dxh[e] * xh[c];
                /* the scales (above) */
                double X = (fabs(cval(cf, cd, base + e)) + fabs(mean[G])) * rstd[G];
                double Dr = fabs(dr[e]) * (1.0 + fabs(r[c]) + fabs(y));
                double T = (1.0 - t[c] * t[c]) * (fabs(gamma[c]) * X + fabs(beta[c])) + 1.0;
                double Dg = Dr * fabs(f) + 2.0 * fabs(dr[e]) * T;
                dr_s[e] = Dr;
                dxh_s[e] = fabs(gamma[c]) * Dg;
                sg[c] += Dg * fabs(xh[c]) + fabs(dgn) * X;
                sb[c] += Dg;
                a1[G] += dxh_s[e];
                a2[G] += dxh_s[e] * fabs(xh[c]) + fabs(dxh[e]) * X;
            }
        }
        for (int c = 0; c < C_OUT; c++) { /* dc = dr + rstd (dxh - mean(dxh) - xh mean(dxh xh)) */
            int G = c / CPG;
            double mean1 = s1[G] / M, mean2 = s2[G] / M;
            for (int i = 0; i < S; i++) {
                size_t e = (size_t)c * S + i;
                double v = cval(cf, cd, base + e), x_h = (v - mean[G]) * rstd[G];
                out->dc[base + e] = dr[e] + rstd[G] * (dxh[e] - mean1 - x_h * mean2);
                if (out->abs_dc) {
                    double X = (fabs(v) + fabs(mean[G])) * rstd[G];
                    out->abs_dc[base + e] =
                        dr_s[e] + rstd[G] * (dxh_s[e] + a1[G] / M + X * fabs(mean2) +
                                             fabs(x_h) * a2[G] / M);
                }
            }
        }
        for (int G = 0; G < GROUPS; G++) {
            if (out->mdxh)
                out->mdxh[n * GROUPS + G] = s1[G] / M;
            if (out->mdxh_xh)
                out->mdxh_xh[n * GROUPS + G] = s2[G] / M;
        }
        free(dr), free(dxh), free(dr_s), free(dxh_s);
    }
    for (int c = 0; c < C_OUT; c++) /* the sums over n in a fixed order */
        out->dgamma[c] = out->dbeta[c] = out->abs_dgamma[c] = out->abs_dbeta[c] = 0.0;
    for (int n = 0; n < s->n; n++) {
        const double *p = parts + (size_t)n * 4 * C_OUT;
        for (int c = 0; c < C_OUT; c++) {
            out->dgamma[c] += p[c];
            out->dbeta[c] += p[C_OUT + c];
            out->abs_dgamma[c] += p[2 * C_OUT + c];
            out->abs_dbeta[c] += p[3 * C_OUT + c];
        }
    }
    free(parts);
}

/* ------------------------------------------------------------------- CPU checks (CI too)
 * On small awkward shapes, in double:
 *   hardswish    the general form against its pieces, the reduction to t (t + 3) / 6 on
 *                (-1, 1), the derivative against central differences and PyTorch's kinks
 *   forward      against an independent computation (one-pass statistics, the closed form of
 *                HardSwish, logsumexp summed directly); the float input path; a shift of c
 *                by 1000, which moves y by exactly 1000 and overflows the direct sum
 *   backward     dc, dgamma, dbeta against central differences of L = sum g y, and the same
 *                check failing when term 1, 3 or 4 is dropped; the GroupNorm path summing to
 *                zero over each group
 *   whole model  dx, dw, dbias of the conv (conv3d_backward_ref of this dc) against central
 *                differences of L through the conv */

#define FD_STEP 1e-5 /* central-difference step: truncation ~ h^2, rounding ~ 1e-16 |L| / h */
#define FD_TOL 1e-6  /* the relative L2 error a correct gradient stays below (1e-9 to 2e-8 here) */

typedef struct {
    shape sh;
    double *x, *w, b[C_OUT], gamma[C_OUT], beta[C_OUT];
    double *c, *y;
    float *g;
    int epilogue_only; /* 1: c is the variable; 0: c = conv(x, w, b) recomputed every time */
} loss_ctx;

static double model_loss(const double *unused, void *p)
{
    loss_ctx *L = (loss_ctx *)p;
    (void)unused;
    if (!L->epilogue_only) {
        conv3d_geom g = conv_geom(&L->sh);
        conv3d_ref(&g, L->x, L->w, L->b, L->c);
    }
    epilogue_ref(&L->sh, NULL, L->c, L->gamma, L->beta, GN_EPS, L->y, NULL, NULL);
    double sum = 0.0;
    for (size_t i = 0; i < out_elems(&L->sh); i++)
        sum += L->g[i] * L->y[i];
    return sum;
}

/* x ~ rand, the conv's default initialisation, gamma in +-1.5 and beta in +-1 (learned values,
 * not the 1 and 0 PyTorch starts from), g ~ N(0, 1); c = conv(x) */
static void problem_make(loss_ctx *L, int n, int h, int w, uint64_t seed)
{
    memset(L, 0, sizeof *L);
    L->sh = make_shape(n, h, w);
    const shape *s = &L->sh;
    size_t nx = x_elems(s), nc = conv_elems(s), ny = out_elems(s);
    float *tmp = (float *)host_alloc(4 * (nx > N_WEIGHT ? nx : N_WEIGHT));
    L->x = (double *)host_alloc(8 * nx), L->w = (double *)host_alloc(8 * N_WEIGHT);
    L->c = (double *)host_alloc(8 * nc), L->y = (double *)host_alloc(8 * ny);
    L->g = (float *)host_alloc(4 * ny);
    rng_state rng;
    rng_seed(&rng, seed);
    fill_uniform(tmp, nx, 0.0, 1.0, &rng); /* torch.rand */
    for (size_t i = 0; i < nx; i++)
        L->x[i] = tmp[i];
    float bf[C_OUT];
    init_conv_params(tmp, N_WEIGHT, bf, C_OUT, C_IN * KVOL, &rng); /* fan_in 72 */
    for (int i = 0; i < N_WEIGHT; i++)
        L->w[i] = tmp[i];
    for (int c = 0; c < C_OUT; c++) {
        L->b[c] = bf[c];
        L->gamma[c] = 1.5 * (2.0 * rng_uniform(&rng) - 1.0);
        L->beta[c] = 2.0 * rng_uniform(&rng) - 1.0;
    }
    fill_normal(L->g, ny, &rng);
    conv3d_geom cg = conv_geom(s);
    conv3d_ref(&cg, L->x, L->w, L->b, L->c);
    L->epilogue_only = 1;
    free(tmp);
}

static void problem_free(loss_ctx *L)
{
    free(L->x), free(L->w), free(L->c), free(L->y), free(L->g);
}

static void hardswish_checks(void)
{
    /* the pieces: 0 at and below -3, v itself at and above 3, v (v + 3) / 6 between */
    static const double v[7] = {-4.0, -3.0, -1.0, 0.0, 1.0, 3.0, 4.0};
    static const double want[7] = {0.0, 0.0, -1.0 / 3.0, 0.0, 4.0 / 6.0, 3.0, 4.0};
    double worst = 0.0, red = 0.0, dworst = 0.0;
    for (int k = 0; k < 7; k++)
        worst = fmax(worst, fabs(hardswish_ref(v[k]) - want[k]));
    for (int k = -999; k <= 999; k++) { /* the reduction on t in (-1, 1) */
        double t = k / 1000.0;
        red = fmax(red, fabs(hardswish_ref(t) - t * (t + 3.0) / 6.0));
    }
    static const double at[8] = {-5.0, -2.5, -1.0, -0.3, 0.0, 0.7, 2.2, 4.5}; /* off the kinks */
    for (int k = 0; k < 8; k++) {
        double num = (hardswish_ref(at[k] + 1e-6) - hardswish_ref(at[k] - 1e-6)) / 2e-6;
        dworst = fmax(dworst, fabs(num - hardswish_grad_ref(at[k])));
    }
    int kinks = hardswish_grad_ref(-3.0) == -0.5 && hardswish_grad_ref(3.0) == 1.5 &&
                hardswish_grad_ref(nextafter(-3.0, -4.0)) == 0.0 &&
                hardswish_grad_ref(nextafter(3.0, 4.0)) == 1.0;
    check(worst < 1e-15 && red < 1e-15 && dworst < 1e-8 && kinks,
          "cpu: hardswish = its pieces (max diff %.1e), = t (t + 3) / 6 on (-1, 1) (%.1e); its "
          "derivative = central differences off the kinks (%.1e) and PyTorch's at them: -0.5 at "
          "-3, 1.5 at 3", worst, red, dworst);
}

/* The forward without the reference's helpers: one-pass statistics (sum and sum of squares,
 * safe in double at these sizes and offsets), HardSwish in its closed form t (t + 3) / 6,
 * logsumexp as the log of the sum of exps, no max subtracted. y, mean, rstd and r (N x 64 x S)
 * out. */
static void forward_direct(const loss_ctx *L, double *y, double *mean, double *rstd, double *r)
{
    const shape *s = &L->sh;
    int S = s->s, M = CPG * S;
    for (int n = 0; n < s->n; n++)
        for (int G = 0; G < GROUPS; G++) {
            double sum = 0.0, sq = 0.0;
            for (int c = G * CPG; c < (G + 1) * CPG; c++)
                for (int i = 0; i < S; i++) {
                    double v = L->c[((size_t)n * C_OUT + c) * S + i];
                    sum += v, sq += v * v;
                }
            double mu = sum / M, var = sq / M - mu * mu;
            mean[n * GROUPS + G] = mu, rstd[n * GROUPS + G] = 1.0 / sqrt(var + GN_EPS);
        }
    for (int n = 0; n < s->n; n++)
        for (int i = 0; i < S; i++) {
            double sum = 0.0;
            for (int c = 0; c < C_OUT; c++) {
                size_t e = ((size_t)n * C_OUT + c) * S + i;
                int q = n * GROUPS + c / CPG;
                double t = tanh(L->gamma[c] * (L->c[e] - mean[q]) * rstd[q] + L->beta[c]);
                r[e] = L->c[e] + t * (t + 3.0) / 6.0;
                sum += exp(r[e]);
            }
            y[(size_t)n * S + i] = log(sum);
        }
}

static void forward_checks(loss_ctx *L)
{
    const shape *s = &L->sh;
    size_t nc = conv_elems(s), ny = out_elems(s), ns = seg_count(s);
    double *y = (double *)host_alloc(8 * ny), *y2 = (double *)host_alloc(8 * ny);
    double *yd = (double *)host_alloc(8 * ny), *r = (double *)host_alloc(8 * nc);
    double *st = (double *)host_alloc(8 * 4 * ns), *c2 = (double *)host_alloc(8 * nc);
    float *cf = (float *)host_alloc(4 * nc);
    double *mean = st, *rstd = st + ns, *mean_d = st + 2 * ns, *rstd_d = st + 3 * ns;
    epilogue_ref(s, NULL, L->c, L->gamma, L->beta, GN_EPS, y, mean, rstd);
    forward_direct(L, yd, mean_d, rstd_d, r);
    double ey = 0.0, es = 0.0;
    for (size_t i = 0; i < ny; i++)
        ey = fmax(ey, fabs(y[i] - yd[i]) / fmax(1.0, fabs(yd[i])));
    for (size_t q = 0; q < ns; q++)
        es = fmax(es, fmax(fabs(mean[q] - mean_d[q]) * rstd_d[q], fabs(rstd[q] / rstd_d[q] - 1.0)));
    check(ey < 1e-12 && es < 1e-12,
          "cpu: forward on %dx8x%dx%d (S = %d) = a direct computation (one-pass statistics, "
          "t (t + 3) / 6, log of a sum of exps): y %.1e, mean and rstd %.1e", s->n, s->h, s->w,
          s->s, ey, es);

    /* the float input path (cf, what the GPU epilogue versions read) = the double one on the
     * same values, bit for bit */
    for (size_t i = 0; i < nc; i++)
        cf[i] = (float)L->c[i], c2[i] = cf[i];
    epilogue_ref(s, cf, NULL, L->gamma, L->beta, GN_EPS, y2, NULL, NULL);
    epilogue_ref(s, NULL, c2, L->gamma, L->beta, GN_EPS, yd, NULL, NULL);
    check(!memcmp(y2, yd, 8 * ny), "cpu: forward from float c = forward from the same values in "
                                   "double, bit for bit");

    /* c + 1000: GroupNorm removes the shift, so h is unchanged and r, hence y, moves by 1000
     * exactly; exp(1000) overflows a double, so the direct sum cannot follow */
    for (size_t i = 0; i < nc; i++)
        c2[i] = L->c[i] + 1000.0;
    epilogue_ref(s, NULL, c2, L->gamma, L->beta, GN_EPS, y2, mean_d, rstd_d);
    double shift = 0.0, stat = 0.0;
    for (size_t i = 0; i < ny; i++)
        shift = fmax(shift, fabs(y2[i] - y[i] - 1000.0));
    for (size_t q = 0; q < ns; q++)
        stat = fmax(stat, fmax(fabs(mean_d[q] - mean[q] - 1000.0) * rstd[q],
                               fabs(rstd_d[q] / rstd[q] - 1.0)));
    double direct = 0.0;
    for (int c = 0; c < C_OUT; c++)
        direct += exp(c2[(size_t)c * s->s]);
    check(shift < 1e-9 && stat < 1e-9 && isinf(direct),
          "cpu: c + 1000 moves y by 1000 (off by %.1e) and mean by 1000, rstd unchanged (%.1e); "
          "the direct sum of exps overflows (%g)", shift, stat, direct);
    free(y), free(y2), free(yd), free(r), free(st), free(c2), free(cf);
}

/* dc, dgamma, dbeta against central differences; three planted faults that must fail; the
 * GroupNorm path's zero sum per (n, group) */
static void backward_checks(loss_ctx *L)
{
    const shape *s = &L->sh;
    int S = s->s, M = CPG * S;
    size_t nc = conv_elems(s), ny = out_elems(s), ns = seg_count(s);
    bwd_ref br;
    memset(&br, 0, sizeof br);
    br.dc = (double *)host_alloc(8 * nc), br.abs_dc = (double *)host_alloc(8 * nc);
    br.mdxh = (double *)host_alloc(8 * ns), br.mdxh_xh = (double *)host_alloc(8 * ns);
    double *y = (double *)host_alloc(8 * ny), *r = (double *)host_alloc(8 * nc);
    double *mean = (double *)host_alloc(8 * ns), *rstd = (double *)host_alloc(8 * ns);
    double *bad = (double *)host_alloc(8 * 3 * nc);
    epilogue_backward_ref(s, NULL, L->c, L->gamma, L->beta, L->g, &br);
    L->epilogue_only = 1;
    double e_c = gradcheck(model_loss, L, L->c, nc, br.dc, FD_STEP, NULL);
    double e_g = gradcheck(model_loss, L, L->gamma, C_OUT, br.dgamma, FD_STEP, NULL);
    double e_b = gradcheck(model_loss, L, L->beta, C_OUT, br.dbeta, FD_STEP, NULL);
    check(e_c < FD_TOL && e_g < FD_TOL && e_b < FD_TOL,
          "cpu: backward on %dx8x%dx%d = central differences of L = sum g y: dc (%zu values) "
          "%.1e, dgamma %.1e, dbeta %.1e (relative L2, bound %.0e)", s->n, s->h, s->w, nc, e_c,
          e_g, e_b, FD_TOL);

    /* the same check must fail when a term is missing: dc with term 1 (the residual's dr), term
     * 3 (- rstd mean(dxh)) or term 4 (- rstd xh mean(dxh xh)) dropped, each rebuilt from the
     * direct forward's r and y and the reference's two means */
    forward_direct(L, y, mean, rstd, r);
    double worst_sum = 0.0, sum_mag = 0.0;
    for (int n = 0; n < s->n; n++)
        for (int G = 0; G < GROUPS; G++) {
            int q = n * GROUPS + G;
            double sum = 0.0, mag = 0.0;
            for (int j = 0; j < M; j++) {
                size_t e = ((size_t)n * C_OUT + G * CPG) * S + j;
                int i = j % S;
                double dr = L->g[(size_t)n * S + i] * exp(r[e] - y[(size_t)n * S + i]);
                double xh = (L->c[e] - mean[q]) * rstd[q];
                bad[e] = br.dc[e] - dr;
                bad[nc + e] = br.dc[e] + rstd[q] * br.mdxh[q];
                bad[2 * nc + e] = br.dc[e] + rstd[q] * xh * br.mdxh_xh[q];
                sum += br.dc[e] - dr, mag += fabs(br.dc[e] - dr);
            }
            worst_sum = fmax(worst_sum, fabs(sum) / fmax(mag, 1e-300));
            sum_mag = fmax(sum_mag, mag);
        }
    double e_bad[3];
    for (int k = 0; k < 3; k++)
        e_bad[k] = gradcheck(model_loss, L, L->c, nc, bad + k * nc, FD_STEP, NULL);
    check(e_bad[0] > 100 * FD_TOL && e_bad[1] > 100 * FD_TOL && e_bad[2] > 100 * FD_TOL,
          "cpu: the same check fails with a term of dc dropped: term 1 (dr) %.1e, term 3 "
          "(mean(dxh)) %.1e, term 4 (xh mean(dxh xh)) %.1e", e_bad[0], e_bad[1], e_bad[2]);
    check(worst_sum < 1e-12,
          "cpu: dc - dr (the GroupNorm path) sums to zero over every (n, group): worst |sum| / "
          "sum |terms| %.1e (sums of magnitudes up to %.1e)", worst_sum, sum_mag);
    free(br.dc), free(br.abs_dc), free(br.mdxh), free(br.mdxh_xh);
    free(y), free(r), free(mean), free(rstd), free(bad);
}

/* the whole model: dx, dw, dbias of the conv from the reference's dc, against central
 * differences of L through the conv */
static void model_checks(loss_ctx *L)
{
    const shape *s = &L->sh;
    size_t nx = x_elems(s), nc = conv_elems(s);
    conv3d_geom cg = conv_geom(s);
    bwd_ref br;
    memset(&br, 0, sizeof br);
    br.dc = (double *)host_alloc(8 * nc);
    double *dx = (double *)host_alloc(8 * nx), *dw = (double *)host_alloc(8 * N_WEIGHT), db[C_OUT];
    conv3d_ref(&cg, L->x, L->w, L->b, L->c);
    epilogue_backward_ref(s, NULL, L->c, L->gamma, L->beta, L->g, &br);
    conv3d_backward_ref(&cg, L->x, L->w, br.dc, dx, dw, db, NULL, NULL);
    L->epilogue_only = 0;
    double e_x = gradcheck(model_loss, L, L->x, nx, dx, FD_STEP, NULL);
    double e_b = gradcheck(model_loss, L, L->b, C_OUT, db, FD_STEP, NULL);
    /* dw: every weight of three output channels (the first and last channels, one of a middle
     * group); all 4608 would cost 9216 evaluations of the model */
    static const int co_checked[3] = {0, 29, C_OUT - 1};
    double e_w = 0.0;
    for (int k = 0; k < 3; k++) {
        size_t off = (size_t)co_checked[k] * C_IN * KVOL;
        e_w = fmax(e_w, gradcheck(model_loss, L, L->w + off, C_IN * KVOL, dw + off, FD_STEP, NULL));
    }
    L->epilogue_only = 1;
    double dbias_abs = 0.0;
    for (int c = 0; c < C_OUT; c++)
        dbias_abs = fmax(dbias_abs, fabs(db[c]));
    check(e_x < FD_TOL && e_w < FD_TOL && e_b < FD_TOL && dbias_abs > 1e-3,
          "cpu: whole model on %dx8x%dx%d = central differences through the conv: dx (%zu) "
          "%.1e, dw (output channels 0, 29, 63: %d weights) %.1e, dbias %.1e (not zero: max "
          "|dbias| %.2f)", s->n, s->h, s->w, nx, e_x, 3 * C_IN * KVOL, e_w, e_b, dbias_abs);
    free(br.dc), free(dx), free(dw);
}

void reference_checks(uint64_t seed)
{
    hardswish_checks();
    /* 2 x 8 x 5 x 7: S = 15, odd, a group of 60 values; 1 x 8 x 3 x 3: S = 1, a group of 4
     * values (one per channel), the least GroupNorm has here */
    static const int shapes[2][3] = {{2, 5, 7}, {1, 3, 3}};
    for (int k = 0; k < 2; k++) {
        loss_ctx L;
        problem_make(&L, shapes[k][0], shapes[k][1], shapes[k][2], seed + 31 * k);
        forward_checks(&L);
        backward_checks(&L);
        if (k == 0)
            model_checks(&L);
        problem_free(&L);
    }
}
