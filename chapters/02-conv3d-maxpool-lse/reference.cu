/*
 * reference.cu: chapter 2's CPU reference, in double, written the way the math is written.
 * The conv itself is common/conv_ref.c (PyTorch's Conv3d, forward and backward); this file is
 * the epilogue: max pool, logsumexp over channels, relu, and its backward, derived term by term.
 */
#include <math.h>
#include <stdlib.h>

#include "model.h"

conv3d_geom conv_geom(const shape *s) /* 32 -> 64 channels, kernel 3, padding 1 */
{
    return conv3d_geom_make(s->n, C_IN, C_OUT, s->d, s->h, s->w, KS, 1);
}

/* the max of one 2x2x2 window and the index (dd * 4 + dh * 2 + dw) of its first maximum, the
 * element PyTorch's max pool routes the gradient to */
double window_max_ref(const double *plane, const shape *s, int pd, int ph, int pw, int *arg)
{
    double m = -INFINITY;
    *arg = 0;
    for (int q = 0; q < 8; q++) {
        double v = plane[((size_t)(2 * pd + (q >> 2)) * s->h + 2 * ph + ((q >> 1) & 1)) * s->w +
                         2 * pw + (q & 1)];
        if (v > m || q == 0) {
            m = v;
            *arg = q;
        }
    }
    return m;
}

/* y = relu(logsumexp_c(maxpool(c))), c as float (cf: the GPU's conv output, for the epilogue
 * scope) or double (cd: the reference conv, for the whole model) */
void epilogue_ref(const shape *s, const float *cf, const double *cd, double *y)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < s->n; n++) {
        double *plane = (double *)malloc(sizeof(double) * s->sc);
        double *p = (double *)malloc(sizeof(double) * C_OUT * s->s);
        for (int co = 0; co < C_OUT; co++) {
            size_t off = ((size_t)n * C_OUT + co) * s->sc;
            for (int i = 0; i < s->sc; i++)
                plane[i] = cf ? (double)cf[off + i] : cd[off + i];
            for (int i = 0; i < s->s; i++) {
                int arg, pw = i % s->pw, ph = (i / s->pw) % s->ph, pd = i / (s->pw * s->ph);
                p[(size_t)co * s->s + i] = window_max_ref(plane, s, pd, ph, pw, &arg);
            }
        }
        for (int i = 0; i < s->s; i++) {
            double z = logsumexp_ref(p + i, C_OUT, s->s);
            y[(size_t)n * s->s + i] = z > 0.0 ? z : 0.0;
        }
        free(plane);
        free(p);
    }
}

/* ---------------------------------------------------------------------------- the backward
 * Per output position, p_c the 64 pooled values (c = channel), a_c the argmax of channel c's
 * window, g = dL/dy:
 *   dz   = g [z > 0]                       relu; PyTorch's relu backward is g * (y > 0)
 *   dp_c = dz exp(p_c - z) = dz softmax_c(p)
 *   dc   = dp_c at the window element a_c (the first maximum: PyTorch's max pool keeps the first
 *          index on ties), 0 at the window's other 7 elements, 0 at rows and columns no window
 *          covers (an odd extent's last row)
 * and the conv's own, with dc the gradient of its output (common/conv_ref.h):
 *   dbias[co]        = sum over n, d, h, w of dc[n][co][d][h][w]
 *   dw[co][ci][k]    = sum over n and positions of dc[n][co][pos] x[n][ci][pos + k - 1]
 *   dx[n][ci][pos]   = sum over co, k of w[co][ci][k] dc[n][co][pos - k + 1]
 *                      (the transposed conv: cuDNN's backward data)
 * What the backward needs: c (537 MB) and g. Autograd (b1) saves the pool's indices (PyTorch:
 * int64, 134 MB here; b1 uses int32, 67 MB), p (67 MB), z and y, then writes a zeroed 537 MB dc
 * and scatters into it. Recomputing the argmax and z from c (b2) reads c once, which the softmax
 * needs anyway (p), and writes dc once with its zeros: 1.07 GB instead of about 1.9 GB. */
void epilogue_backward_ref(const shape *s, const float *cf, const double *cd, const float *g,
                           double *dc)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < s->n; n++) {
        double *planes = (double *)malloc(sizeof(double) * C_OUT * s->sc);
        for (size_t i = 0; i < (size_t)C_OUT * s->sc; i++) {
            size_t off = (size_t)n * C_OUT * s->sc + i;
            planes[i] = cf ? (double)cf[off] : cd[off];
            dc[off] = 0.0;
        }
        for (int i = 0; i < s->s; i++) {
            int pw = i % s->pw, ph = (i / s->pw) % s->ph, pd = i / (s->pw * s->ph);
            double p[C_OUT];
            int arg[C_OUT];
            for (int co = 0; co < C_OUT; co++)
                p[co] = window_max_ref(planes + (size_t)co * s->sc, s, pd, ph, pw, &arg[co]);
            double z = logsumexp_ref(p, C_OUT, 1);
            double dz = z > 0.0 ? g[(size_t)n * s->s + i] : 0.0;
            for (int co = 0; co < C_OUT; co++) {
                int q = arg[co];
                size_t at = (((size_t)n * C_OUT + co) * s->d + 2 * pd + (q >> 2)) * s->h * s->w +
                            (size_t)(2 * ph + ((q >> 1) & 1)) * s->w + 2 * pw + (q & 1);
                dc[at] = dz * exp(p[co] - z);
            }
        }
        free(planes);
    }
}
