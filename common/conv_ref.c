/* conv_ref.c: Conv3d (and Conv2d as its depth-1 case) in double, forward and backward. See
 * conv_ref.h for the definitions. */
#include "conv_ref.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

static conv3d_geom geom(int n, int c_in, int c_out, int d, int h, int w, int kd, int kh, int kw,
                        int pd, int ph, int pw)
{
    conv3d_geom g = {n,  c_in, c_out, d,  h,  w,  kd, kh, kw, pd, ph, pw,
                     d + 2 * pd - kd + 1, h + 2 * ph - kh + 1, w + 2 * pw - kw + 1};
    return g;
}

conv3d_geom conv3d_geom_make(int n, int c_in, int c_out, int d, int h, int w, int k, int pad)
{
    return geom(n, c_in, c_out, d, h, w, k, k, k, pad, pad, pad);
}

conv3d_geom conv2d_geom_make(int n, int c_in, int c_out, int h, int w, int k, int pad)
{
    return geom(n, c_in, c_out, 1, h, w, 1, k, k, 0, pad, pad);
}

/* the outputs o in [0, out) whose input o + t - pad lies in [0, in) */
static int lo_of(int t, int pad) { return t < pad ? pad - t : 0; }
static int hi_of(int t, int pad, int in, int out)
{
    int hi = in + pad - t;
    return hi < out ? hi : out;
}

/* tap kk of the kd x kh x kw kernel (row-major, as PyTorch stores it) as (a, b, e) */
static void tap_of(const conv3d_geom *g, int kk, int *a, int *b, int *e)
{
    *a = kk / (g->kh * g->kw), *b = (kk / g->kw) % g->kh, *e = kk % g->kw;
}

void conv3d_ref(const conv3d_geom *g, const double *x, const double *w, const double *bias,
                double *y)
{
    size_t in_plane = (size_t)g->d * g->h * g->w, out_plane = (size_t)g->od * g->oh * g->ow;
    int kvol = g->kd * g->kh * g->kw;
#pragma omp parallel for schedule(dynamic)
    for (int t = 0; t < g->n * g->c_out; t++) { /* one (n, co) output plane a task */
        int n = t / g->c_out, co = t % g->c_out;
        double *o = y + (size_t)t * out_plane;
        for (size_t i = 0; i < out_plane; i++)
            o[i] = bias[co];
        for (int ci = 0; ci < g->c_in; ci++)
            for (int kk = 0; kk < kvol; kk++) {
                int kd, kh, kw;
                tap_of(g, kk, &kd, &kh, &kw);
                double wv = w[((size_t)co * g->c_in + ci) * kvol + kk];
                const double *xi = x + ((size_t)n * g->c_in + ci) * in_plane;
                int w0 = lo_of(kw, g->pw), w1 = hi_of(kw, g->pw, g->w, g->ow);
                for (int od = lo_of(kd, g->pd); od < hi_of(kd, g->pd, g->d, g->od); od++)
                    for (int oh = lo_of(kh, g->ph); oh < hi_of(kh, g->ph, g->h, g->oh); oh++) {
                        /* innermost along w, contiguous in both: the compiler vectorises it */
                        const double *xr = xi + ((size_t)(od + kd - g->pd) * g->h +
                                                 (oh + kh - g->ph)) * g->w + kw - g->pw;
                        double *orow = o + ((size_t)od * g->oh + oh) * g->ow;
                        for (int ow = w0; ow < w1; ow++)
                            orow[ow] += wv * xr[ow];
                    }
            }
    }
}

void conv3d_backward_ref(const conv3d_geom *g, const double *x, const double *w, const double *dy,
                         double *dx, double *dw, double *dbias, double *dw_abs, double *dbias_abs)
{
    size_t in_plane = (size_t)g->d * g->h * g->w, out_plane = (size_t)g->od * g->oh * g->ow;
    int kvol = g->kd * g->kh * g->kw;
#pragma omp parallel for schedule(dynamic)
    for (int t = 0; t < g->n * g->c_in; t++) { /* dx: one (n, ci) plane a task, no shared writes */
        int n = t / g->c_in, ci = t % g->c_in;
        double *xo = dx + (size_t)t * in_plane;
        memset(xo, 0, sizeof(double) * in_plane);
        for (int co = 0; co < g->c_out; co++)
            for (int kk = 0; kk < kvol; kk++) {
                int kd, kh, kw;
                tap_of(g, kk, &kd, &kh, &kw);
                double wv = w[((size_t)co * g->c_in + ci) * kvol + kk];
                const double *gy = dy + ((size_t)n * g->c_out + co) * out_plane;
                int w0 = lo_of(kw, g->pw), w1 = hi_of(kw, g->pw, g->w, g->ow);
                for (int od = lo_of(kd, g->pd); od < hi_of(kd, g->pd, g->d, g->od); od++)
                    for (int oh = lo_of(kh, g->ph); oh < hi_of(kh, g->ph, g->h, g->oh); oh++) {
                        double *xr = xo + ((size_t)(od + kd - g->pd) * g->h + (oh + kh - g->ph)) *
                                              g->w + kw - g->pw;
                        const double *gr = gy + ((size_t)od * g->oh + oh) * g->ow;
                        for (int ow = w0; ow < w1; ow++)
                            xr[ow] += wv * gr[ow];
                    }
            }
    }
#pragma omp parallel for schedule(dynamic)
    for (int j = 0; j < g->c_out * g->c_in * kvol; j++) { /* dw: one weight a task */
        int co = j / (g->c_in * kvol), ci = (j / kvol) % g->c_in, kk = j % kvol;
        int kd, kh, kw;
        tap_of(g, kk, &kd, &kh, &kw);
        int w0 = lo_of(kw, g->pw), w1 = hi_of(kw, g->pw, g->w, g->ow);
        double acc = 0.0, mag = 0.0;
        for (int n = 0; n < g->n; n++) {
            const double *gy = dy + ((size_t)n * g->c_out + co) * out_plane;
            const double *xi = x + ((size_t)n * g->c_in + ci) * in_plane;
            for (int od = lo_of(kd, g->pd); od < hi_of(kd, g->pd, g->d, g->od); od++)
                for (int oh = lo_of(kh, g->ph); oh < hi_of(kh, g->ph, g->h, g->oh); oh++) {
                    const double *xr = xi + ((size_t)(od + kd - g->pd) * g->h + (oh + kh - g->ph)) *
                                                g->w + kw - g->pw;
                    const double *gr = gy + ((size_t)od * g->oh + oh) * g->ow;
                    for (int ow = w0; ow < w1; ow++) {
                        double v = gr[ow] * xr[ow];
                        acc += v;
                        mag += fabs(v);
                    }
                }
        }
        dw[j] = acc;
        if (dw_abs)
            dw_abs[j] = mag;
    }
    for (int co = 0; co < g->c_out; co++) {
        double acc = 0.0, mag = 0.0;
        for (int n = 0; n < g->n; n++)
            for (size_t i = 0; i < out_plane; i++) {
                double v = dy[((size_t)n * g->c_out + co) * out_plane + i];
                acc += v;
                mag += fabs(v);
            }
        dbias[co] = acc;
        if (dbias_abs)
            dbias_abs[co] = mag;
    }
}
