/*
 * reference.cu: chapter 3's CPU reference, in double, written the way the math is written.
 * The conv itself is common/conv_ref.c (PyTorch's Conv3d, forward and backward); this file is
 * the epilogue: x m, instance norm, clamp, x m, the channel max, and its backward, derived term
 * by term.
 */
#include <math.h>
#include <stdlib.h>

#include "model.h"

conv3d_geom conv_geom(const shape *s) /* 3 -> 16 channels, kernel 3, no padding */
{
    return conv3d_geom_make(s->n, C_IN, C_OUT, s->d, s->h, s->w, KS, 0);
}

/* the conv value at index i, from the float c (the GPU's, for the epilogue scopes) or the
 * double one (the reference conv, for the whole model) */
static double cval(const float *cf, const double *cd, size_t i) { return cf ? cf[i] : cd[i]; }

static double clamp1(double v) { return v < -1.0 ? -1.0 : (v > 1.0 ? 1.0 : v); }

/* The (n, c) statistics the way InstanceNorm3d defines them: mean and biased variance of
 * a = c m over the S positions, two passes (exact in double for any offset). */
void slice_stats_ref(const float *cf, const double *cd, size_t base, int S, double m, double eps,
                     double *mean, double *rstd)
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
void epilogue_ref(const shape *s, const float *cf, const double *cd, const double *m, double eps,
                  double *y, double *mean_out, double *rstd_out)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < s->n; n++) {
        double mean[C_OUT], rstd[C_OUT];
        for (int co = 0; co < C_OUT; co++) {
            slice_stats_ref(cf, cd, ((size_t)n * C_OUT + co) * s->s, s->s, m[co], eps, &mean[co],
                            &rstd[co]);
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

/* ------------------------------------------------------------ the forward checks' bounds
 * How far a float kernel's mean, rstd and y may land from the reference above, derived here for
 * the checks (problem.cu). The statistics' conditioning decides it, and at few positions a slice
 * it is poor: two values a slice are the least instance norm allows.
 *
 * Over one slice (n, c) of S positions: a_i = c_i m, mu = mean(a), var = mean((a - mu)^2),
 * r = rstd = (var + eps)^(-1/2), xh_i = (a_i - mu) r. A float kernel sees each a_i with an error:
 * a = c m rounded to float once (PyTorch's order, and the versions' through a_rounded, model.h),
 * or c's statistics scaled by m (v12, v15 .. v18); in the whole model also the conv's own float
 * sum, a small multiple of u = 2^-24 times its terms' magnitudes, sum |w| |x| + |b| <= T (T:
 * channel c's sum of |w| times the sample's largest |x|, plus |b_c|). So |d a_i| <= k u A_i, with
 * A_i = |a_i| + |m| T (T = 0 for the epilogue, whose c is given) and k a small count of roundings.
 *
 *   mean   d mu = mean(d a) plus the float sum's own rounding, within k u mean(A), and
 *          mean(|a|) <= |mu| + mean(|a - mu|) <= |mu| + std, so
 *              |d mu| <= k u (M + |m| T),  M = |mu| + std.
 *          Well conditioned: the check allows TOL_STATS M + TOL_SUM |m| T.
 *   var    to first order d var = (2 / S) sum (a_i - mu) d a_i: the mean's own error drops out,
 *          since sum (a_i - mu) = 0. A stable algorithm (two passes, Welford's update, Chan's
 *          merge) rounds deviations a_i - mu, whose subtraction (and a Welford update's running
 *          mean) errs by u (|a_i| + |mu|) at most, so
 *              |d var| <= k u 2 V,   V = mean(|a_i - mu| (A_i + |mu|))  (>= var).
 *          Sum and sum of squares (v2..v6: var = mean(a^2) - mu^2) round the squares
 *          themselves: their sum within k u mean(A^2), mu^2 within 2 k u |mu| mean(A), so V
 *          becomes V_sq = mean((A_i + |mu|)^2), about 2 |mu| / std times V where the mean
 *          dominates: the variance's condition number squared, where the stable algorithms pay
 *          it once (Chan, Golub and LeVeque, "Algorithms for computing the sample variance",
 *          1983).
 *   rstd   d r = -(1/2) r^3 d var, so |d r| / r <= k u V r^2, plus the last steps' own rounding
 *          (eps added in float, rsqrtf's 2 ulp: CUDA C++ Programming Guide, "Mathematical
 *          Functions"; PyTorch's rstd is rsqrtf(var + eps) too). V r^2 = V / (var + eps) is
 *          rstd's condition number: about 2 where a slice's mean lies a standard deviation or
 *          so from 0. Two values mu +- h give var = h^2, V = 2 h |mu| (|mu| >= h), and
 *              V r^2 = 2 h |mu| / (h^2 + eps) = 4 |mu| / |a_0 - a_1|  (h >> sqrt(eps)),
 *          which grows as the two values close in on each other against their size, at most
 *          |mu| / sqrt(eps) (at h = sqrt(eps); below it eps takes over); V_sq r^2 grows as its
 *          square, 4 mu^2 / h^2. The check allows |d r| <= r (TOL_STATS + TOL_SUM V r^2).
 *   xh     d xh_i = r (d a_i - d mu) + xh_i d r / r + the product's rounding; with std r <= 1,
 *              |d xh_i| <= k u X_i,  X_i = (|a_i| + |mu| + 2 |m| T) r + 1 + |xh_i| (1 + V r^2).
 *          (|a_i| + |mu|) r are xh's terms, the sizes a - mu subtracts (the backward's bound
 *          below measures xh the same way). At S = 2, xh = +-h / sqrt(h^2 + eps) barely depends
 *          on h, but a float mean misses mu by up to half an ulp of |mu|, and (a - mu) r by that
 *          times r ~ 1 / h: PyTorch's own order (a rounded, a Welford mean) errs so too.
 *   y      u_c = m_c clamp(xh_c) moves by at most |m_c| k u X_c (a clamped value moves no more
 *          than its argument), and y = max_c u_c by at most the largest over c of
 *          |m_c| k u X_c - (y - u_c): each channel's reach past its gap to the maximum (the
 *          winner's gap is 0). The check allows TOL_SUM times that, element by element.
 * TOL_SUM (1e-5) is 168 u: room for k and for the roundings a bound of this kind leaves
 * uncounted, as in the backward's checks. Where V r^2 is small (a slice's mean within a few
 * standard deviations of 0) rstd's bound is TOL_STATS, as it was before these bounds; y's,
 * element by element, replaces a normwise one (rel_l2 within 1e-5) that had no term for the
 * conditioning. In the whole model T, the conv's terms bounded by the sample's largest |x|,
 * widens both: r |m| T is about |m| T / (|m| std(c)), the conv's terms against the slice's
 * spread.
 */
void forward_bounds(const shape *s, const float *cf, const double *cd, const double *m,
                    const double *conv_terms, int squares, double *mean_scale, double *rstd_cond,
                    double *y_terms)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < s->n; n++) {
        double mean[C_OUT], rstd[C_OUT], cond[C_OUT], mt[C_OUT];
        size_t base = (size_t)n * C_OUT * s->s;
        for (int co = 0; co < C_OUT; co++) {
            size_t b = base + (size_t)co * s->s;
            slice_stats_ref(cf, cd, b, s->s, m[co], IN_EPS, &mean[co], &rstd[co]);
            mt[co] = fabs(m[co]) * (conv_terms ? conv_terms[n * C_OUT + co] : 0.0);
            double v = 0.0, var = 0.0, mu = fabs(mean[co]);
            for (int i = 0; i < s->s; i++) {
                double a = cval(cf, cd, b + i) * m[co], big = fabs(a) + mt[co] + mu;
                v += squares ? big * big : fabs(a - mean[co]) * big;
                var += (a - mean[co]) * (a - mean[co]);
            }
            cond[co] = v / s->s * rstd[co] * rstd[co];
            mean_scale[n * C_OUT + co] = mu + sqrt(var / s->s);
            rstd_cond[n * C_OUT + co] = cond[co];
        }
        for (int i = 0; i < s->s; i++) {
            double u[C_OUT], reach[C_OUT], best = 0.0;
            for (int co = 0; co < C_OUT; co++) {
                double a = cval(cf, cd, base + (size_t)co * s->s + i) * m[co];
                double xh = (a - mean[co]) * rstd[co];
                double x_terms = (fabs(a) + fabs(mean[co]) + 2.0 * mt[co]) * rstd[co] + 1.0 +
                                 fabs(xh) * (1.0 + cond[co]);
                u[co] = clamp1(xh) * m[co], reach[co] = fabs(m[co]) * x_terms;
                if (co == 0 || u[co] > best)
                    best = u[co];
            }
            double t = 0.0;
            for (int co = 0; co < C_OUT; co++)
                t = fmax(t, reach[co] - (best - u[co]) / TOL_SUM);
            y_terms[(size_t)n * s->s + i] = t;
        }
    }
}

/* ---------------------------------------------------------------------------- the backward
 * L = sum over (n, s) of g y, g = dL/dy given. Walking the forward backwards, per sample n,
 * with sums over the S positions j of one (n, c) slice:
 *
 *   max over channels  y_s = u_{k(s), s}, k(s) the first channel with the largest u. Only that
 *                      channel moves y: du_{c,s} = g_s if c = k(s), else 0 (torch.max(dim)
 *                      routes to the index it returns; on ties, the first).
 *   u = t m            product rule: dt_{c,s} = du_{c,s} m_c, and m's second use (the forward
 *                      uses m first in a = c m, below) gives
 *                      dm_c += sum over (n, s) of du_{c,s} t_{c,s}.
 *   t = clamp(xh)      dxh = dt where -1 <= xh <= 1, else 0. PyTorch passes the gradient at the
 *                      bounds (xh = -1 or 1 exactly): the mask is closed.
 *   xh = (a - mu) r    mu = mean(a), var = mean((a - mu)^2), r = rstd = (var + eps)^(-1/2), over
 *                      the S positions of (n, c). Differentiating,
 *                        d mu / d a_j = 1 / S,   d var / d a_j = 2 (a_j - mu) / S,
 *                        d xh_i / d a_j = r (delta_ij - 1/S) - (a_i - mu) r^3 (a_j - mu) / S
 *                                       = r (delta_ij - 1/S - xh_i xh_j / S),
 *                      so da_j = sum_i dxh_i d xh_i / d a_j
 *                              = r (dxh_j - mean(dxh) - xh_j mean(dxh xh)).
 *                      Two more reductions per (n, c): mean(dxh) and mean(dxh xh).
 *   a = c m            dc = da m_c, and m's first use:
 *                      dm_c += sum over (n, s) of da_{c,s} c_{c,s}.
 *   conv               dx, dw and dbias from dc as for any Conv3d (common/conv_ref.h): cuDNN's
 *                      backward data for dx, cuDNN's or our own backward filter for dw, our own
 *                      reduction for dbias = sum of dc over n and the positions.
 *
 * dbias is zero. The bias adds b_c to every c of channel c, so b_c m_c to every a of each slice
 * (n, c), and instance norm subtracts the slice's mean: xh, and with it y, does not depend on
 * the bias. The backward shows it slice by slice. xh sums to zero over a slice,
 *     sum_j xh_j = r sum_j (a_j - mu) = r (S mu - S mu) = 0,
 * so the gradient through the normalisation sums to zero too,
 *     sum_j da_j = r (sum_j dxh_j - S mean(dxh) - mean(dxh xh) sum_j xh_j)
 *                = r (S mean(dxh) - S mean(dxh) - mean(dxh xh) 0) = 0,
 * and since dc_j = m_c da_j, sum_j dc_j = m_c sum_j da_j = 0 for every (n, c). Hence
 *     dbias[c] = sum over n of sum_j dc_{n,c,j} = 0.
 * In float it is rounding noise (about 1e-5 at the check-pytorch shape); the CPU checks confirm
 * it in double, per slice and through central differences of the bias.
 *
 * Only the argmax channel has a non-zero dxh at a position, so mean(dxh) and mean(dxh xh) sum
 * about S/16 terms each; but da is non-zero everywhere: every channel's dc is dense.
 *
 * Decisions near a tie. The argmax and the clamp mask are discontinuous: where the two largest
 * u differ by less than float rounding, or the winner's xh is within rounding of +-1, a float
 * kernel and this double reference may decide differently, and both are right. At such an
 * "ambiguous" position p (margin AMB, about 10x the float error of an xh whose terms,
 * (|a| + |mean|) rstd, add up to 3; where they add up to more, the margin grows in proportion,
 * as xh's float error does: with an offset c = 50 +- 1 they reach about 170, and a fixed 2e-6
 * let one decision at 17x3x16x32x32 put a dc element 18 away from the reference, where the
 * element's bound was 0.27), for each of
 * the two channels ch that could win, the other decision moves dxh_p by at most |g_p m_ch|, so
 * it moves dc of that slice by at most |m_ch| rstd |g_p m_ch| (1 + |xh_s| |xh_p|) / S at s != p
 * and 2 |m_ch| rstd |g_p m_ch| at p, and dm by the bound in amb_dm. Those go into the tolerance
 * of exactly those elements (abs_dc, in units of TOL_SUM); everything else is compared as
 * tightly as ever. */
void epilogue_backward_ref(const shape *s, const float *cf, const double *cd, const double *m,
                           const float *g, bwd_ref *out)
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
        /* this sample's dm terms (u = t m's, a = c m's), ambiguity bound, |g t| and |da c| */
        double *dm1 = dm_n + (size_t)n * 5 * C_OUT, *dm2 = dm1 + C_OUT, *amb_b = dm2 + C_OUT;
        double *abs1 = amb_b + C_OUT, *abs2 = abs1 + C_OUT;
        double *dxh = (double *)host_alloc(sizeof(double) * S);
        int *arg = (int *)host_alloc(sizeof(int) * S), *amb_pos = (int *)host_alloc(sizeof(int) * 2 * S);
        int n_amb_pos = 0;
        size_t base = (size_t)n * C_OUT * S;
        for (int co = 0; co < C_OUT; co++) {
            slice_stats_ref(cf, cd, base + (size_t)co * S, S, m[co], IN_EPS, &mean[co], &rstd[co]);
            for (int i = 0; i < S; i++) { /* for the ambiguity bound below */
                double c = cval(cf, cd, base + (size_t)co * S + i);
                A1[co] += fabs(c), A2[co] += fabs(c) * fabs((c * m[co] - mean[co]) * rstd[co]);
            }
        }
        for (int i = 0; i < S; i++) { /* the max, u = t m and the clamp backward: dxh */
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
            /* the margins grow with the terms' magnitudes beyond 3 (both channels' for the
             * argmax), as xh's float error does */
            double k2_mag = (fabs(cval(cf, cd, base + (size_t)k2 * S + i) * m[k2]) +
                             fabs(mean[k2])) * rstd[k2];
            double grow_k = fmax(1.0, xk_mag / 3.0), grow = fmax(grow_k, k2_mag / 3.0);
            int amb = u[k] - u[k2] <= AMB * grow * (1.0 + fabs(u[k])) ||
                      fabs(fabs(xh[k]) - 1.0) <= AMB * grow_k;
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
        for (int co = 0; co < C_OUT; co++) { /* the instance norm's backward: da, dc, dm */
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
