/*
 * reference.cu: chapter 5's CPU reference, in double, written the way the math is written.
 * The transposed conv itself is common/conv_ref.c (PyTorch's ConvTranspose3d, forward and
 * backward, as direct gathers; its header says why it is a Conv3d of the zero-upsampled input);
 * this file is the rest: the average pool before
 * it, the epilogue after it (clamp, softmax over each row, scale) and their backward, derived
 * term by term; then the CPU checks that hold the reference to the definition and to central
 * differences.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

convT3d_geom conv_geom(const shape *s) /* 32 -> 64 channels, kernel 3, stride 2, padding 1,
                                          output_padding 1: each pooled extent L gives 2 L */
{
    return convT3d_geom_make(s->n, C_IN, C_OUT, s->pd, s->ph, s->pw, KS, 2, 1, 1);
}

/* ------------------------------------------------------------------ the pool
 * AvgPool3d(kernel 2, stride 2, no padding, floor): xp[i][j][l] is the mean of the 2 x 2 x 2
 * window x[2i + a][2j + b][2l + e], a, b, e in {0, 1}. An odd extent's last slice belongs to no
 * window and is never read. */

/* the offset, in an input plane, of value q (q = 4a + 2b + e) of the window at (i, j, l) */
static size_t window_at(const shape *s, int i, int j, int l, int q)
{
    return ((size_t)(2 * i + (q >> 2)) * s->h + 2 * j + ((q >> 1) & 1)) * s->w + 2 * l + (q & 1);
}

void pool_ref(const shape *s, const float *xf, const double *xd, double *xp)
{
    size_t plane = (size_t)s->d * s->h * s->w;
#pragma omp parallel for schedule(static)
    for (int p = 0; p < s->n * C_IN; p++) /* one (n, channel) plane a task */
        for (int i = 0; i < s->pd; i++)
            for (int j = 0; j < s->ph; j++)
                for (int l = 0; l < s->pw; l++) {
                    double sum = 0.0;
                    for (int q = 0; q < 8; q++) {
                        size_t at = p * plane + window_at(s, i, j, l, q);
                        sum += xf ? (double)xf[at] : xd[at];
                    }
                    xp[(size_t)p * s->ps + ((size_t)i * s->ph + j) * s->pw + l] = sum / 8.0;
                }
}

/* Its backward: xp = (1/8) sum of its window, so each window value receives 1/8 of its window's
 * gradient (the windows do not overlap: stride = kernel), and a dropped value, read by nothing,
 * receives 0. */
void pool_backward_range_ref(const shape *s, const double *dxp, size_t first, size_t n,
                             double *dx)
{
#pragma omp parallel for schedule(static)
    for (long long k = 0; k < (long long)n; k++) { /* x's element first + k: plane p, (i, j, l) */
        size_t at = first + (size_t)k;
        int l = (int)(at % s->w), j = (int)(at / s->w % s->h), i = (int)(at / s->w / s->h % s->d);
        size_t p = at / ((size_t)s->d * s->h * s->w);
        int dropped = i >= 2 * s->pd || j >= 2 * s->ph || l >= 2 * s->pw;
        dx[k] = dropped ? 0.0
                        : dxp[p * s->ps + ((size_t)(i / 2) * s->ph + j / 2) * s->pw + l / 2] / 8.0;
    }
}

void pool_backward_ref(const shape *s, const double *dxp, double *dx)
{
    pool_backward_range_ref(s, dxp, 0, x_elems(s), dx);
}

/* ------------------------------------------------------------------ the epilogue
 * Per row (n, channel ch) of S values, row r = n 64 + ch at offset r S of c (the model views
 * N x 64 x OD x OH x OW as N x 64 x S):
 *     z_i = clamp(c_i, 0, 1)
 *     lse = log sum_i exp(z_i)          (logsumexp_ref, common/common.c: m + log sum exp(z - m),
 *                                        m = max z. Here z in [0, 1] cannot overflow anyway; the
 *                                        reference is the definition, whatever the input.)
 *     p_i = exp(z_i - lse)              the softmax over the row
 *     y_i = scale_ch p_i */

/* clamp(v, 0, 1) as torch.clamp: min(max(v, 0), 1); a NaN stays NaN */
static double clamp_ref(double v)
{
    return v < CLAMP_LO ? CLAMP_LO : (v > CLAMP_HI ? CLAMP_HI : v);
}

/* z = clamp(c) for the row at base, from the float c (the GPU's, for the epilogue scopes) or
 * the double one (the reference conv, for the whole model); returns the row's lse */
static double clamped_row(const float *cf, const double *cd, size_t base, int S, double *z)
{
    for (int i = 0; i < S; i++)
        z[i] = clamp_ref(cf ? (double)cf[base + i] : cd[base + i]);
    return logsumexp_ref(z, S, 1);
}

/* y of one row from its lse: y_i = scale exp(clamp(c_i) - lse) */
static void epilogue_row(int S, const float *cf, const double *cd, double scale, double lse,
                         double *y)
{
    for (int i = 0; i < S; i++)
        y[i] = scale * exp(clamp_ref(cf ? (double)cf[i] : cd[i]) - lse);
}

void epilogue_rows_ref(const shape *s, int r0, int n_rows, const float *cf, const double *cd,
                       const double *scale, const double *lse, double *y)
{
    int S = s->s;
#pragma omp parallel for schedule(static)
    for (int k = 0; k < n_rows; k++) {
        size_t at = (size_t)k * S;
        epilogue_row(S, cf ? cf + at : NULL, cd ? cd + at : NULL, scale[(r0 + k) % C_OUT],
                     lse[r0 + k], y + at);
    }
}

void epilogue_ref(const shape *s, const float *cf, const double *cd, const double *scale,
                  double *y, double *lse)
{
    int S = s->s;
    double *l = lse ? lse : (double *)host_alloc(sizeof(double) * rows(s));
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows(s); r++) {
        double *z = (double *)host_alloc(sizeof(double) * S);
        l[r] = clamped_row(cf, cd, (size_t)r * S, S, z);
        free(z);
    }
    if (y)
        epilogue_rows_ref(s, 0, rows(s), cf, cd, scale, l, y);
    if (!lse)
        free(l);
}

/* ---------------------------------------------------------------------------- the backward
 * L = sum over every row and position of g y, g = dL/dy given. In one row, scale_ch written sc
 * and g' = g sc, walking the forward backwards:
 *
 *   y_i = sc p_i            dscale_ch = sum over n and the row's positions of g_i p_i (every
 *                           row of channel ch uses the same scale), and dp_i = g_i sc = g'_i.
 *   p = softmax(z)          d p_i / d z_j = p_i (delta_ij - p_j), so
 *                             dz_j = sum_i g'_i p_i (delta_ij - p_j) = p_j (g'_j - dot),
 *                             dot = sum over the row of g'_i p_i:
 *                           one reduction per row; dz sums to zero over the row (sum_j p_j = 1),
 *                           the softmax being unchanged by adding a constant to z.
 *   z = clamp(c, 0, 1)      dc_j = dz_j [0 <= c_j <= 1]: PyTorch's clamp backward passes the
 *                           gradient where min <= c <= max, the bounds included
 *                           (clamp_backward in torch/csrc/autograd/FunctionsManual.cpp), and 0
 *                           where the clamp cut.
 *   conv, pool              dxp, dw, dbias from dc (conv_transpose3d_backward_ref), then dx from
 *                           dxp (pool_backward_ref).
 *
 * Together:  dc_j = [0 <= c_j <= 1] p_j (g'_j - dot),   dscale_ch = sum g p.
 * No dc of a row can be written before the whole row has been read for dot, and, without the
 * lse the forward saves, read once more before that for lse.
 *
 * The scale of a float result's error, for verify_sum_f32: the first-order bound of its rounding
 * error in units of float's 2^-24, propagated term by term as chapter 4 does,
 * scale(a b) = |a| scale(b) + scale(a) |b|, scale(a + b) = scale(a) + scale(b):
 *   E_j      = 1 + |z_j| + |lse|       p = exp(z - lse): z - lse is rounded at the scale
 *                                      |z| + |lse| (lse lies in [log S, 1 + log S], 11.8 to 12.8
 *                                      at the KernelBench shape, and the backward reads it saved
 *                                      as a float), exp turns that absolute error into a relative
 *                                      one, plus exp's own rounding (p_err)
 *   B        = sum over the row of |g'_i| p_i (E_i + 2)   the scale of dot: each term's p error,
 *                                      the rounding of g' = g sc and of the product
 *   abs_dc_j = p_j ((E_j + 2) (|g'_j| + |dot|) + B)   where the mask passes, 0 where it does not
 *                                      (dc is an exact 0 there, in any precision): p's error times
 *                                      |g'_j - dot| <= |g'_j| + |dot|, the subtraction's and the
 *                                      product's rounding, and dot's error
 *   abs_dscale_ch = sum over n and positions of |g p|: the sum of its terms' magnitudes. p's own
 *                                      relative error, at most E <= 2 + log(e S) (15 at the
 *                                      KernelBench shape), adds at most that multiple of it; a
 *                                      verifier's bound of tens of 2^-24 covers both. */
static double p_err(double z, double lse) { return 1.0 + fabs(z) + fabs(lse); } /* E */

/* one row's dc (and abs_dc, if not NULL) and its sums of g p and |g p| into part[0], part[1] */
static void epilogue_backward_row(int S, const float *cf, const double *cd, double sc,
                                  const float *g, double *dc, double *abs_dc, double part[2])
{
    double *z = (double *)host_alloc(sizeof(double) * 2 * S), *p = z + S;
    double l = clamped_row(cf, cd, 0, S, z);
    double gp = 0.0, gp_abs = 0.0, dot = 0.0, B = 0.0;
    for (int i = 0; i < S; i++) { /* p, and the row's three sums */
        double gi = g[i];
        p[i] = exp(z[i] - l);
        gp += gi * p[i];
        gp_abs += fabs(gi * p[i]);
        dot += gi * sc * p[i]; /* g' p */
        B += fabs(gi * sc) * p[i] * (p_err(z[i], l) + 2.0);
    }
    for (int j = 0; j < S; j++) { /* dc = [0 <= c <= 1] p (g' - dot) */
        double c = cf ? (double)cf[j] : cd[j];
        int pass = c >= CLAMP_LO && c <= CLAMP_HI;
        double gj = g[j] * sc;
        dc[j] = pass ? p[j] * (gj - dot) : 0.0;
        if (abs_dc)
            abs_dc[j] = pass ? p[j] * ((p_err(z[j], l) + 2.0) * (fabs(gj) + fabs(dot)) + B) : 0.0;
    }
    part[0] = gp, part[1] = gp_abs;
    free(z);
}

void epilogue_backward_rows_ref(const shape *s, int r0, int n_rows, const float *cf,
                                const double *cd, const double *scale, const float *g,
                                double *dc, double *abs_dc, double *parts)
{
    int S = s->s;
#pragma omp parallel for schedule(static)
    for (int k = 0; k < n_rows; k++) {
        size_t at = (size_t)k * S;
        epilogue_backward_row(S, cf ? cf + at : NULL, cd ? cd + at : NULL,
                              scale[(r0 + k) % C_OUT], g + at, dc + at,
                              abs_dc ? abs_dc + at : NULL, parts + 2 * (r0 + k));
    }
}

void epilogue_dscale_ref(const shape *s, const double *parts, double *dscale, double *abs_dscale)
{
    for (int ch = 0; ch < C_OUT; ch++) { /* over n in order: the same sums whatever the threads */
        dscale[ch] = abs_dscale[ch] = 0.0;
        for (int n = 0; n < s->n; n++) {
            dscale[ch] += parts[2 * (n * C_OUT + ch)];
            abs_dscale[ch] += parts[2 * (n * C_OUT + ch) + 1];
        }
    }
}

void epilogue_backward_ref(const shape *s, const float *cf, const double *cd, const double *scale,
                           const float *g, bwd_ref *out)
{
    /* each row's sum of g p and of |g p|, summed over n in a fixed order at the end */
    double *parts = (double *)host_alloc(sizeof(double) * 2 * rows(s));
    epilogue_backward_rows_ref(s, 0, rows(s), cf, cd, scale, g, out->dc, out->abs_dc, parts);
    epilogue_dscale_ref(s, parts, out->dscale, out->abs_dscale);
    free(parts);
}

/* ------------------------------------------------------------------- CPU checks (CI too)
 * On small awkward shapes, in double:
 *   pool         on a linear ramp (the mean of a window is the ramp at its centre), with the
 *                dropped slices planted with NaN; its backward as the pool's adjoint
 *   forward      against the definition per element (a sum of exps, no max), rows of p summing
 *                to 1, the float input path, rows clamped whole; a softmax without the clamp
 *                caught by the same comparison
 *   backward     dc and dscale against central differences of L = sum g y, on planted c away
 *                from the clamp's kinks, below 0, inside and above 1; the masked dc exactly 0;
 *                c exactly at the bounds passing the gradient; planted faults caught
 *   whole model  dx, dw, dbias, dscale through pool, transposed conv and epilogue against
 *                central differences */

#define FD_STEP 1e-5 /* central-difference step: truncation ~ h^2, rounding ~ 1e-16 |L| / h */
#define FD_TOL 1e-6  /* the relative L2 error a correct gradient stays below */

typedef struct {
    shape sh;
    double *x, *w, b[C_OUT], scale[C_OUT]; /* input and parameters */
    double *xp, *c, *y;
    float *g;
    int epilogue_only; /* 1: c is the variable; 0: c = convT(pool(x)) recomputed every time */
} loss_ctx;

/* the model before the epilogue: xp = pool(x), c = convT(xp) */
static void front_ref(loss_ctx *L)
{
    convT3d_geom cg = conv_geom(&L->sh);
    pool_ref(&L->sh, NULL, L->x, L->xp);
    conv_transpose3d_ref(&cg, L->xp, L->w, L->b, L->c);
}

static double model_loss(const double *unused, void *p)
{
    loss_ctx *L = (loss_ctx *)p;
    (void)unused; /* gradcheck perturbs one of L's own arrays */
    if (!L->epilogue_only)
        front_ref(L);
    epilogue_ref(&L->sh, NULL, L->c, L->scale, L->y, NULL);
    double sum = 0.0;
    for (size_t i = 0; i < out_elems(&L->sh); i++)
        sum += L->g[i] * L->y[i];
    return sum;
}

/* x ~ rand, the transposed conv's default initialisation (fan_in = weight.size(1) k^3 =
 * 64 27 = 1728: bound 0.024), scale 1.5 U(-1, 1) with channel 5's 0 (learned values, not
 * PyTorch's ones), g ~ N(0, 1); c = convT(pool(x)) */
static void problem_make(loss_ctx *L, int n, int d, int h, int w, uint64_t seed)
{
    memset(L, 0, sizeof *L);
    L->sh = make_shape(n, d, h, w);
    const shape *s = &L->sh;
    size_t nx = x_elems(s), nc = conv_elems(s);
    float *tmp = (float *)host_alloc(4 * (nx > N_WEIGHT ? nx : N_WEIGHT)), bf[C_OUT];
    L->x = (double *)host_alloc(8 * nx), L->w = (double *)host_alloc(8 * N_WEIGHT);
    L->xp = (double *)host_alloc(8 * pool_elems(s));
    L->c = (double *)host_alloc(8 * nc), L->y = (double *)host_alloc(8 * nc);
    L->g = (float *)host_alloc(4 * nc);
    rng_state rng;
    rng_seed(&rng, seed);
    fill_uniform(tmp, nx, 0.0, 1.0, &rng); /* torch.rand */
    for (size_t i = 0; i < nx; i++)
        L->x[i] = tmp[i];
    init_conv_params(tmp, N_WEIGHT, bf, C_OUT, C_OUT * KVOL, &rng);
    for (int i = 0; i < N_WEIGHT; i++)
        L->w[i] = tmp[i];
    for (int ch = 0; ch < C_OUT; ch++) {
        L->b[ch] = bf[ch];
        L->scale[ch] = ch == 5 ? 0.0 : 1.5 * (2.0 * rng_uniform(&rng) - 1.0);
    }
    fill_normal(L->g, nc, &rng);
    front_ref(L);
    L->epilogue_only = 1;
    free(tmp);
}

static void problem_free(loss_ctx *L)
{
    free(L->x), free(L->w), free(L->xp), free(L->c), free(L->y), free(L->g);
}

/* c planted away from the clamp's kinks: a quarter in (-0.5, -0.05) (clamped to 0), a half in
 * (0.05, 0.95), a quarter in (1.05, 1.5) (clamped to 1); counts of the three go to below,
 * above */
static void plant_c(loss_ctx *L, uint64_t seed, size_t *below, size_t *above)
{
    rng_state rng;
    rng_seed(&rng, seed);
    *below = *above = 0;
    for (size_t i = 0; i < conv_elems(&L->sh); i++) {
        double u = rng_uniform(&rng), v = rng_uniform(&rng);
        if (u < 0.25)
            L->c[i] = -0.5 + 0.45 * v, ++*below;
        else if (u < 0.75)
            L->c[i] = 0.05 + 0.9 * v;
        else
            L->c[i] = 1.05 + 0.45 * v, ++*above;
    }
}

static void pool_checks(const shape *s, uint64_t seed)
{
    size_t nx = x_elems(s), np = pool_elems(s);
    double *x = (double *)host_alloc(8 * nx), *xp = (double *)host_alloc(8 * np);
    double *dxp = (double *)host_alloc(8 * np), *dx = (double *)host_alloc(8 * nx);
    /* x = a ramp in (d, h, w) per plane, NaN on the dropped slices: xp must be the ramp at each
     * window's centre (2i + 1/2, 2j + 1/2, 2l + 1/2), exactly in double, and finite */
    const double a = 0.75, b = -0.5, e = 0.125;
    for (size_t k = 0; k < nx; k++) {
        int l = (int)(k % s->w), j = (int)(k / s->w % s->h), i = (int)(k / s->w / s->h % s->d);
        double base = (double)(k / ((size_t)s->d * s->h * s->w));
        int dropped = i >= 2 * s->pd || j >= 2 * s->ph || l >= 2 * s->pw;
        x[k] = dropped ? NAN : base + a * i + b * j + e * l;
    }
    pool_ref(s, NULL, x, xp);
    double worst = 0.0;
    size_t finite = 0;
    for (size_t k = 0; k < np; k++) {
        int l = (int)(k % s->pw), j = (int)(k / s->pw % s->ph);
        int i = (int)(k / s->pw / s->ph % s->pd);
        double want = (double)(k / s->ps) + a * (2 * i + 0.5) + b * (2 * j + 0.5) +
                      e * (2 * l + 0.5);
        finite += isfinite(xp[k]) != 0;
        worst = fmax(worst, fabs(xp[k] - want));
    }
    /* the backward as the pool's adjoint: <pool(x), dxp> = <x, pool_backward(dxp)> for any x,
     * dxp; and 0 on the dropped values, 1/8 of the window's gradient elsewhere */
    rng_state rng;
    rng_seed(&rng, seed);
    for (size_t k = 0; k < nx; k++)
        x[k] = rng_normal(&rng);
    for (size_t k = 0; k < np; k++)
        dxp[k] = rng_normal(&rng);
    pool_ref(s, NULL, x, xp);
    pool_backward_ref(s, dxp, dx);
    double lhs = 0.0, rhs = 0.0;
    for (size_t k = 0; k < np; k++)
        lhs += xp[k] * dxp[k];
    for (size_t k = 0; k < nx; k++)
        rhs += x[k] * dx[k];
    size_t zero_dropped = 0, n_dropped = 0;
    for (size_t k = 0; k < nx; k++) {
        int l = (int)(k % s->w), j = (int)(k / s->w % s->h), i = (int)(k / s->w / s->h % s->d);
        if (i >= 2 * s->pd || j >= 2 * s->ph || l >= 2 * s->pw)
            n_dropped++, zero_dropped += dx[k] == 0.0;
    }
    double adj = fabs(lhs - rhs) / fmax(fabs(lhs), 1e-300);
    check(finite == np && worst < 1e-12 && adj < 1e-12 && zero_dropped == n_dropped,
          "cpu: pool on %dx32x%dx%dx%d -> %dx%dx%d = the ramp at each window's centre (max diff "
          "%.1e, the %zu dropped values planted NaN); its backward = the pool's adjoint (%.1e), "
          "0 on the dropped values", s->n, s->d, s->h, s->w, s->pd, s->ph, s->pw, worst,
          n_dropped, adj);
    free(x), free(xp), free(dxp), free(dx);
}

/* y against the definition y_i = scale exp(z_i) / sum_j exp(z_j), z = clamp(c), computed
 * directly (no max): the largest difference relative to 1/S (the size of p); the lse (if not
 * NULL) against log sum exp(z) in *worst_lse */
static double forward_direct(const loss_ctx *L, const double *y, const double *lse,
                             double *worst_lse)
{
    const shape *s = &L->sh;
    int S = s->s;
    double worst = 0.0;
    *worst_lse = 0.0;
    for (int r = 0; r < rows(s); r++) {
        size_t base = (size_t)r * S;
        double sum = 0.0;
        for (int i = 0; i < S; i++)
            sum += exp(clamp_ref(L->c[base + i]));
        for (int i = 0; i < S; i++) {
            double want = L->scale[r % C_OUT] * exp(clamp_ref(L->c[base + i])) / sum;
            worst = fmax(worst, fabs(y[base + i] - want) * S);
        }
        if (lse)
            *worst_lse = fmax(*worst_lse, fabs(lse[r] - log(sum)));
    }
    return worst;
}

static void forward_checks(loss_ctx *L, const char *what)
{
    const shape *s = &L->sh;
    int S = s->s;
    size_t nc = conv_elems(s);
    double *y = (double *)host_alloc(8 * nc), *y2 = (double *)host_alloc(8 * nc);
    double *c2 = (double *)host_alloc(8 * nc);
    double *lse = (double *)host_alloc(8 * rows(s)), ones[C_OUT], e_lse, e_bad;
    float *cf = (float *)host_alloc(4 * nc);
    epilogue_ref(s, NULL, L->c, L->scale, y, lse);
    double e_y = forward_direct(L, y, lse, &e_lse);
    /* the rows of p sum to 1: the epilogue with every scale 1 */
    for (int ch = 0; ch < C_OUT; ch++)
        ones[ch] = 1.0;
    epilogue_ref(s, NULL, L->c, ones, y2, NULL);
    double e_sum = 0.0;
    for (int r = 0; r < rows(s); r++) {
        double sum = 0.0;
        for (int i = 0; i < S; i++)
            sum += y2[(size_t)r * S + i];
        e_sum = fmax(e_sum, fabs(sum - 1.0));
    }
    size_t lo = 0, hi = 0;
    for (size_t i = 0; i < nc; i++)
        lo += L->c[i] < 0.0, hi += L->c[i] > 1.0;
    check(e_y < 1e-12 && e_lse < 1e-12 && e_sum < 1e-12,
          "cpu: forward on %s %dx32x%dx%dx%d (S = %d; %zu of %zu c below 0, %zu above 1) = the "
          "definition, a sum of exps with no max: y %.1e (relative to 1/S), lse %.1e; rows of p "
          "sum to 1 (%.1e)", what, s->n, s->d, s->h, s->w, S, lo, nc, hi, e_y, e_lse, e_sum);

    /* the same comparison catches a softmax without the clamp */
    for (int r = 0; r < rows(s); r++) {
        size_t base = (size_t)r * S;
        double l = logsumexp_ref(L->c + base, S, 1);
        for (int i = 0; i < S; i++)
            y2[base + i] = L->scale[r % C_OUT] * exp(L->c[base + i] - l);
    }
    e_bad = forward_direct(L, y2, NULL, &e_lse);
    check(e_bad > 1e-3, "cpu: the same comparison catches a softmax without the clamp: %.1e",
          e_bad);

    /* the float input path (cf, what the GPU epilogue versions read) = the double one on the
     * same values, bit for bit */
    for (size_t i = 0; i < nc; i++)
        cf[i] = (float)L->c[i], c2[i] = cf[i];
    epilogue_ref(s, cf, NULL, L->scale, y, NULL);
    epilogue_ref(s, NULL, c2, L->scale, y2, NULL);
    int same = !memcmp(y, y2, 8 * nc);

    /* rows clamped whole: c + 1000 (all 1) and c - 1000 (all 0) make every p exactly 1/S */
    double e_flat = 0.0;
    for (int sign = -1; sign <= 1; sign += 2) {
        for (size_t i = 0; i < nc; i++)
            c2[i] = L->c[i] + sign * 1000.0;
        epilogue_ref(s, NULL, c2, ones, y, NULL);
        for (size_t i = 0; i < nc; i++)
            e_flat = fmax(e_flat, fabs(y[i] * S - 1.0));
    }
    check(same && e_flat < 1e-13,
          "cpu: forward from float c = from the same values in double, bit for bit; c +- 1000 "
          "(rows clamped whole) gives p = 1/S everywhere (%.1e)", e_flat);
    free(y), free(y2), free(c2), free(lse), free(cf);
}

/* dc and dscale against central differences, on planted c; the masked dc exactly 0; c at the
 * bounds passes the gradient; planted faults caught */
static void backward_checks(loss_ctx *L, uint64_t seed)
{
    const shape *s = &L->sh;
    int S = s->s;
    size_t nc = conv_elems(s), below, above;
    plant_c(L, seed, &below, &above);
    bwd_ref br;
    memset(&br, 0, sizeof br);
    br.dc = (double *)host_alloc(8 * nc), br.abs_dc = (double *)host_alloc(8 * nc);
    double *bad = (double *)host_alloc(8 * 3 * nc);
    epilogue_backward_ref(s, NULL, L->c, L->scale, L->g, &br);
    L->epilogue_only = 1;
    double e_c = gradcheck(model_loss, L, L->c, nc, br.dc, FD_STEP, NULL);
    double e_s = gradcheck(model_loss, L, L->scale, C_OUT, br.dscale, FD_STEP, NULL);
    size_t masked = 0, zero = 0, scale_ok = 0;
    for (size_t i = 0; i < nc; i++)
        if (L->c[i] < 0.0 || L->c[i] > 1.0)
            masked++, zero += br.dc[i] == 0.0 && br.abs_dc[i] == 0.0;
    for (size_t i = 0; i < nc; i++) /* the error scale bounds the terms' magnitude */
        scale_ok += br.abs_dc[i] >= fabs(br.dc[i]);
    check(e_c < FD_TOL && e_s < FD_TOL && masked == below + above && zero == masked &&
              scale_ok == nc,
          "cpu: backward on %dx32x%dx%dx%d = central differences of L = sum g y: dc (%zu values; "
          "%zu planted below 0, %zu above 1, their dc exactly 0) %.1e, dscale (channel 5's scale "
          "0) %.1e (relative L2, bound %.0e); abs_dc >= |dc| everywhere", s->n, s->d, s->h, s->w,
          nc, below, above, e_c, e_s, FD_TOL);

    /* planted faults the same check must catch: the mask dropped (dz everywhere), g' without the
     * scale (dz = p (g - sum g p)), dot dropped (dz = p g') */
    double *z = (double *)host_alloc(8 * S);
    for (int r = 0; r < rows(s); r++) {
        size_t base = (size_t)r * S;
        double sc = L->scale[r % C_OUT], dot = 0.0, gp = 0.0;
        double l = clamped_row(NULL, L->c, base, S, z);
        for (int i = 0; i < S; i++) {
            double p = exp(z[i] - l);
            dot += L->g[base + i] * sc * p, gp += L->g[base + i] * p;
        }
        for (int i = 0; i < S; i++) {
            double p = exp(z[i] - l), gi = L->g[base + i];
            int pass = L->c[base + i] >= 0.0 && L->c[base + i] <= 1.0;
            bad[base + i] = p * (gi * sc - dot);
            bad[nc + base + i] = pass ? p * (gi - gp) : 0.0;
            bad[2 * nc + base + i] = pass ? p * gi * sc : 0.0;
        }
    }
    double e_bad[3];
    for (int k = 0; k < 3; k++)
        e_bad[k] = gradcheck(model_loss, L, L->c, nc, bad + k * nc, FD_STEP, NULL);
    check(e_bad[0] > 100 * FD_TOL && e_bad[1] > 100 * FD_TOL && e_bad[2] > 100 * FD_TOL,
          "cpu: the same check catches a backward without the clamp's mask (%.1e), with g for "
          "g scale (%.1e), without the row's dot (%.1e)", e_bad[0], e_bad[1], e_bad[2]);

    /* the bounds: c exactly 0 or 1 passes the gradient (PyTorch's min <= c <= max), where
     * central differences, one-sided at a kink, cannot tell. Plant c = 0 and c = 1 in the first
     * row; their dc must equal the unmasked p (g' - dot), and a mask that excludes the bounds
     * (0 < c < 1), caught by the same comparison, gives 0 */
    int at[2] = {0, S / 2};
    L->c[at[0]] = 0.0, L->c[at[1]] = 1.0;
    epilogue_backward_ref(s, NULL, L->c, L->scale, L->g, &br);
    double sc = L->scale[0], dot = 0.0, e_bound = 0.0, e_strict = 0.0;
    double l = clamped_row(NULL, L->c, 0, S, z);
    for (int i = 0; i < S; i++)
        dot += L->g[i] * sc * exp(z[i] - l);
    for (int k = 0; k < 2; k++) {
        int i = at[k];
        double want = exp(z[i] - l) * (L->g[i] * sc - dot);
        double strict = L->c[i] > 0.0 && L->c[i] < 1.0 ? want : 0.0;
        e_bound = fmax(e_bound, fabs(br.dc[i] - want) / fabs(want));
        e_strict = fmax(e_strict, fabs(strict - want) / fabs(want));
    }
    check(e_bound < 1e-12 && e_strict == 1.0,
          "cpu: c exactly 0 and exactly 1 pass the gradient (dc = p (g' - dot) there, %.1e); a "
          "mask excluding the bounds is caught by the same comparison (relative error %.0f)",
          e_bound, e_strict);
    free(br.dc), free(br.abs_dc), free(bad), free(z);
}

/* The conv's bias of a channel moves up in steps of 2 margin until none of the channel's c lies
 * within margin of the clamp's kinks (0 and 1), where central differences would straddle the
 * kink; returns the smallest distance left */
static double clear_kinks(loss_ctx *L, double margin)
{
    const shape *s = &L->sh;
    double nearest = INFINITY;
    for (int k = 0; k < 100; k++) { /* a few rounds: each moves only the crowded channels */
        front_ref(L);
        int moved = 0;
        nearest = INFINITY;
        for (int ch = 0; ch < C_OUT; ch++) {
            double near_ch = INFINITY;
            for (int n = 0; n < s->n; n++)
                for (int i = 0; i < s->s; i++) {
                    double v = L->c[((size_t)n * C_OUT + ch) * s->s + i];
                    near_ch = fmin(near_ch, fmin(fabs(v), fabs(v - 1.0)));
                }
            if (near_ch < margin && k < 99) /* the last round only measures */
                L->b[ch] += 2.0 * margin, moved = 1;
            nearest = fmin(nearest, near_ch);
        }
        if (!moved)
            break;
    }
    return nearest;
}

/* the whole model: dx, dw, dbias of the transposed conv and the pool, and dscale, against
 * central differences of L through pool, conv and epilogue. The conv's biases are offset by
 * 0, +0.5 and +1.1 by channel so that the clamp cuts at both bounds. */
static void model_checks(loss_ctx *L)
{
    const shape *s = &L->sh;
    size_t nx = x_elems(s), nc = conv_elems(s), np = pool_elems(s);
    convT3d_geom cg = conv_geom(s);
    for (int ch = 0; ch < C_OUT; ch++)
        L->b[ch] += ch % 3 == 0 ? 0.0 : (ch % 3 == 1 ? 0.5 : 1.1);
    double nearest = clear_kinks(L, 10 * FD_STEP);
    size_t lo = 0, hi = 0;
    for (size_t i = 0; i < nc; i++)
        lo += L->c[i] < 0.0, hi += L->c[i] > 1.0;
    bwd_ref br;
    memset(&br, 0, sizeof br);
    br.dc = (double *)host_alloc(8 * nc);
    double *dxp = (double *)host_alloc(8 * np), *dx = (double *)host_alloc(8 * nx);
    double *dw = (double *)host_alloc(8 * N_WEIGHT), db[C_OUT];
    epilogue_backward_ref(s, NULL, L->c, L->scale, L->g, &br);
    conv_transpose3d_backward_ref(&cg, L->xp, L->w, br.dc, dxp, dw, db, NULL, NULL, NULL);
    pool_backward_ref(s, dxp, dx);
    L->epilogue_only = 0;
    /* dx: two whole input planes, (sample 0, channel 0) and (the last sample, channel 31), the
     * dropped slices included (their dx is 0); all of x would cost 2 nx evaluations. Its step
     * is 10x the others': dx is small (w / 8 ~ 0.003 times dc), and at 1e-5 the rounding of L
     * (|L| 1e-16 / h) comes close to the bound */
    size_t plane = (size_t)s->d * s->h * s->w, last = ((size_t)s->n * C_IN - 1) * plane;
    double e_x = fmax(gradcheck(model_loss, L, L->x, plane, dx, 10 * FD_STEP, NULL),
                      gradcheck(model_loss, L, L->x + last, plane, dx + last, 10 * FD_STEP, NULL));
    double e_b = gradcheck(model_loss, L, L->b, C_OUT, db, FD_STEP, NULL);
    double e_s = gradcheck(model_loss, L, L->scale, C_OUT, br.dscale, FD_STEP, NULL);
    /* dw: the weights of input channels 0 and 31 into output channels 0 to 2 (one of each bias
     * offset), 162 of the 55296: all would cost 110592 evaluations of the model */
    static const int ci_checked[2] = {0, C_IN - 1};
    double e_w = 0.0;
    for (int k = 0; k < 2; k++) {
        size_t off = (size_t)ci_checked[k] * C_OUT * KVOL;
        e_w = fmax(e_w, gradcheck(model_loss, L, L->w + off, 3 * KVOL, dw + off, FD_STEP, NULL));
    }
    L->epilogue_only = 1;
    int geom_ok = cg.od == s->od && cg.oh == s->oh && cg.ow == s->ow && cg.out_pad == 1;
    check(geom_ok && nearest >= 10 * FD_STEP && e_x < FD_TOL && e_w < FD_TOL && e_b < FD_TOL &&
              e_s < FD_TOL,
          "cpu: whole model on %dx32x%dx%dx%d (convT output %dx%dx%d; %zu of %zu c below 0, %zu "
          "above 1, none within %.1e of either) = central differences through pool, transposed "
          "conv and epilogue: dx (2 planes, %zu values) %.1e, dw (162 weights) %.1e, dbias %.1e, "
          "dscale %.1e", s->n, s->d, s->h, s->w, cg.od, cg.oh, cg.ow, lo, nc, hi, nearest,
          2 * plane, e_x, e_w, e_b, e_s);
    free(br.dc), free(dxp), free(dx), free(dw);
}

/* The references the GPU checks compute a piece at a time (the pool from the float x; dx of a
 * range of x; y and dc of a run of rows, dscale from the rows' sums) against the whole-tensor
 * functions above, bit for bit, in pieces of uneven sizes; a piece given the next row's lse is
 * caught by the same comparison */
static void piece_checks(const loss_ctx *L)
{
    const shape *s = &L->sh;
    int S = s->s, nr = rows(s);
    size_t nx = x_elems(s), np = pool_elems(s), nc = conv_elems(s);
    float *xf = (float *)host_alloc(4 * nx);
    double *xd = (double *)host_alloc(8 * nx), *xp = (double *)host_alloc(8 * np);
    double *xp2 = (double *)host_alloc(8 * np), *dx = (double *)host_alloc(8 * nx);
    double *dx2 = (double *)host_alloc(8 * nx), *lse = (double *)host_alloc(8 * nr);
    double *y = (double *)host_alloc(8 * nc), *y2 = (double *)host_alloc(8 * nc);
    double *parts = (double *)host_alloc(8 * 2 * nr), ds[C_OUT], ads[C_OUT];
    bwd_ref br, br2;
    br.dc = (double *)host_alloc(8 * nc), br.abs_dc = (double *)host_alloc(8 * nc);
    br2.dc = (double *)host_alloc(8 * nc), br2.abs_dc = (double *)host_alloc(8 * nc);
    for (size_t i = 0; i < nx; i++)
        xf[i] = (float)L->x[i], xd[i] = xf[i];
    pool_ref(s, xf, NULL, xp);
    pool_ref(s, NULL, xd, xp2);
    int pool_same = !memcmp(xp, xp2, 8 * np);
    pool_backward_ref(s, xp, dx);
    for (size_t at = 0, k = 0; at < nx; k++) { /* pieces of 1, 37, 1000, ... */
        size_t take = k % 3 == 0 ? 1 : (k % 3 == 1 ? 37 : 1000);
        take = take < nx - at ? take : nx - at;
        pool_backward_range_ref(s, xp, at, take, dx2 + at);
        at += take;
    }
    int dx_same = !memcmp(dx, dx2, 8 * nx);

    epilogue_ref(s, NULL, L->c, L->scale, y, NULL);
    epilogue_ref(s, NULL, L->c, L->scale, NULL, lse);
    epilogue_backward_ref(s, NULL, L->c, L->scale, L->g, &br);
    for (int r0 = 0, k = 0; r0 < nr; k++) { /* runs of 1, 5, 2, ... rows */
        int take = k % 3 == 0 ? 1 : (k % 3 == 1 ? 5 : 2);
        take = take < nr - r0 ? take : nr - r0;
        size_t at = (size_t)r0 * S;
        epilogue_rows_ref(s, r0, take, NULL, L->c + at, L->scale, lse, y2 + at);
        epilogue_backward_rows_ref(s, r0, take, NULL, L->c + at, L->scale, L->g + at,
                                   br2.dc + at, br2.abs_dc + at, parts);
        r0 += take;
    }
    epilogue_dscale_ref(s, parts, ds, ads);
    int fwd_same = !memcmp(y, y2, 8 * nc);
    int bwd_same = !memcmp(br.dc, br2.dc, 8 * nc) && !memcmp(br.abs_dc, br2.abs_dc, 8 * nc) &&
                   !memcmp(br.dscale, ds, sizeof ds) && !memcmp(br.abs_dscale, ads, sizeof ads);
    epilogue_rows_ref(s, 0, 1, NULL, L->c, L->scale, lse + 1, y2); /* planted: row 1's lse */
    int caught = memcmp(y, y2, 8 * (size_t)S) != 0;
    check(pool_same && dx_same && fwd_same && bwd_same && caught,
          "cpu: the references in pieces on %dx32x%dx%dx%d = the whole-tensor ones, bit for bit: "
          "the pool from float x, dx in pieces of 1 to 1000 values, y from each row's lse and dc "
          "in runs of 1 to 5 rows, dscale from the rows' sums; a row given the next row's lse "
          "is caught", s->n, s->d, s->h, s->w);
    free(xf), free(xd), free(xp), free(xp2), free(dx), free(dx2), free(lse), free(y), free(y2);
    free(parts), free(br.dc), free(br.abs_dc), free(br2.dc), free(br2.abs_dc);
}

void reference_checks(uint64_t seed)
{
    /* 2 x 32 x 3 x 4 x 5: odd depth and width, the pool drops a slice of each (pooled 1 x 2 x
     * 2, S = 32); 1 x 32 x 2 x 2 x 2: one pooled value a plane, S = 8, the least there is */
    static const int shapes[2][4] = {{2, 3, 4, 5}, {1, 2, 2, 2}};
    for (int k = 0; k < 2; k++) {
        loss_ctx L;
        problem_make(&L, shapes[k][0], shapes[k][1], shapes[k][2], shapes[k][3], seed + 31 * k);
        pool_checks(&L.sh, seed + 7);
        forward_checks(&L, "the model's c");
        piece_checks(&L);
        backward_checks(&L, seed + 13 * k + 1); /* plants c */
        forward_checks(&L, "planted c");
        if (k == 0)
            model_checks(&L);
        problem_free(&L);
    }
}
