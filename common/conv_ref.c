/* conv_ref.c: Conv3d (and Conv2d as its depth-1 case) in double, forward and backward, and
 * ConvTranspose3d, forward and backward, as direct gathers (no zero-upsampled input). See
 * conv_ref.h for the definitions. */
#include "conv_ref.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

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

/* dbias[c] = the sum of dy[n][c][..] over n and the plane; dbias_abs (may be NULL), of |dy|.
 * accumulate: the sums go on from dbias's and dbias_abs's values (the samples before). */
static void bias_grad(int n, int c_out, size_t plane, const double *dy, double *dbias,
                      double *dbias_abs, int accumulate)
{
#pragma omp parallel for schedule(static)
    for (int co = 0; co < c_out; co++) {
        double acc = accumulate ? dbias[co] : 0.0;
        double mag = accumulate && dbias_abs ? dbias_abs[co] : 0.0;
        for (int nn = 0; nn < n; nn++)
            for (size_t i = 0; i < plane; i++) {
                double v = dy[((size_t)nn * c_out + co) * plane + i];
                acc += v;
                mag += fabs(v);
            }
        dbias[co] = acc;
        if (dbias_abs)
            dbias_abs[co] = mag;
    }
}

/* conv3d_backward_ref; accumulate: dw, dbias and their magnitudes summed on from their values
 * (a group of samples after the groups before it), each sum in the order of one call over the
 * whole batch */
static void conv3d_backward(const conv3d_geom *g, const double *x, const double *w,
                            const double *dy, double *dx, double *dw, double *dbias,
                            double *dw_abs, double *dbias_abs, int accumulate)
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
        double acc = accumulate ? dw[j] : 0.0, mag = accumulate && dw_abs ? dw_abs[j] : 0.0;
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
    bias_grad(g->n, g->c_out, out_plane, dy, dbias, dbias_abs, accumulate);
}

void conv3d_backward_ref(const conv3d_geom *g, const double *x, const double *w, const double *dy,
                         double *dx, double *dw, double *dbias, double *dw_abs, double *dbias_abs)
{
    conv3d_backward(g, x, w, dy, dx, dw, dbias, dw_abs, dbias_abs, 0);
}

/* ------------------------------------------------------------------ ConvTranspose3d */

convT3d_geom convT3d_geom_make(int n, int c_in, int c_out, int d, int h, int w, int k, int stride,
                               int pad, int out_pad)
{
    if (k < 1 || stride < 1 || pad < 0 || k - 1 - pad < 0 || out_pad < 0 || out_pad >= stride)
        die(1, "conv_transpose3d_ref: needs k >= 1, stride >= 1, 0 <= pad <= k - 1 and "
               "0 <= output_padding < stride (k %d, stride %d, pad %d, output_padding %d)",
            k, stride, pad, out_pad);
    convT3d_geom g = {n, c_in, c_out, d, h, w, k, stride, pad, out_pad, 0, 0, 0};
    g.od = (d - 1) * stride - 2 * pad + k + out_pad;
    g.oh = (h - 1) * stride - 2 * pad + k + out_pad;
    g.ow = (w - 1) * stride - 2 * pad + k + out_pad;
    if (n < 1 || c_in < 1 || c_out < 1 || d < 1 || h < 1 || w < 1 || g.od < 1 || g.oh < 1 ||
        g.ow < 1)
        die(1, "conv_transpose3d_ref: empty tensor (%d x %d x %d x %d x %d -> %d x %d x %d x %d)",
            n, c_in, d, h, w, c_out, g.od, g.oh, g.ow);
    return g;
}

/* One axis of the transposed conv, o = i stride - pad + t with 0 <= i < in, 0 <= t < k and
 * 0 <= o < out, read from one side: for each position p of that side (every output, or every
 * input), its cnt[p] pairs of a tap, tap[p m + j], and the position on the other side that the
 * tap joins p to, at[p m + j]. By output, m = ceil(k / stride) (the taps t = o + pad mod stride);
 * by input, m = k. */
typedef struct {
    int len, other; /* this side's extent, and the other side's */
    int m;          /* room per position */
    int *cnt, *tap, *at;
} axis_pairs;

static axis_pairs axis_pairs_make(const convT3d_geom *g, int in, int out, int by_output)
{
    axis_pairs a = {by_output ? out : in, by_output ? in : out,
                    by_output ? (g->k + g->stride - 1) / g->stride : g->k, NULL, NULL, NULL};
    a.cnt = (int *)host_alloc(sizeof(int) * (size_t)a.len * (1 + 2 * (size_t)a.m));
    a.tap = a.cnt + a.len, a.at = a.tap + (size_t)a.len * a.m;
    memset(a.cnt, 0, sizeof(int) * (size_t)a.len);
    for (int i = 0; i < in; i++)
        for (int t = 0; t < g->k; t++) {
            int o = i * g->stride - g->pad + t;
            if (o < 0 || o >= out)
                continue;
            int p = by_output ? o : i, j = p * a.m + a.cnt[p]++;
            a.tap[j] = t, a.at[j] = by_output ? i : o;
        }
    return a;
}

/* A transposed conv's loops: depth and height through their pairs (by output for y, by input
 * for dx and dw), width as runs: tap t joins the inputs run[2 t] <= i < run[2 t + 1] to the
 * outputs i stride - pad + t, contiguous on the input's side, every stride-th on the output's. */
typedef struct {
    axis_pairs d, h;
    int *run;
} convT_plan;

static convT_plan plan_make(const convT3d_geom *g, int by_output)
{
    convT_plan p = {axis_pairs_make(g, g->d, g->od, by_output),
                    axis_pairs_make(g, g->h, g->oh, by_output),
                    (int *)host_alloc(sizeof(int) * 2 * (size_t)g->k)};
    for (int t = 0; t < g->k; t++) { /* i stride in [pad - t, ow + pad - t) */
        int s = g->stride, lo = g->pad - t, hi = g->ow + g->pad - t;
        int i0 = lo > 0 ? (lo + s - 1) / s : 0, i1 = hi > 0 ? (hi + s - 1) / s : 0;
        p.run[2 * t] = i0, p.run[2 * t + 1] = i1 < g->w ? i1 : g->w;
    }
    return p;
}

static void plan_free(convT_plan *p) { free(p->d.cnt), free(p->h.cnt), free(p->run); }

/* y from x (plan by output, fwd 1) and dx from dy (plan by input, fwd 0) are the same gather:
 *   dst[nn][c][q] = bias[c] (0 without) + sum over the source channels cs and the (t, r) that q
 *                   meets (pairs on depth and height, runs on width) of src[nn][cs][r] w_t
 * with w_t = w[cs][c][t] for y and w[c][cs][t] for dx (w is c_in x c_out x k^3). One (nn, c)
 * plane a task, which owns its writes: for each source channel and each row of the plane, the
 * source rows its depth and height pairs name, along the width runs. Exactly the scatter's
 * multiplications, no zeros. */
static void convT_gather(const convT3d_geom *g, const convT_plan *p, int fwd, int magnitudes,
                         const double *src, const double *w, const double *bias, double *dst)
{
    int k = g->k, kvol = k * k * k, c_dst = fwd ? g->c_out : g->c_in;
    int c_src = fwd ? g->c_in : g->c_out, dlen = fwd ? g->ow : g->w, slen = fwd ? g->w : g->ow;
    size_t dplane = (size_t)p->d.len * p->h.len * dlen;
    size_t splane = (size_t)p->d.other * p->h.other * slen;
    size_t w_ci = (size_t)g->c_out * kvol; /* w[ci][co][t]: ci's step; co's is kvol */
    size_t w_dst = fwd ? (size_t)kvol : w_ci, w_src = fwd ? w_ci : (size_t)kvol;
    int dstep = fwd ? g->stride : 1, sstep = fwd ? 1 : g->stride;
#pragma omp parallel for schedule(dynamic)
    for (int task = 0; task < g->n * c_dst; task++) {
        int nn = task / c_dst, c = task % c_dst;
        double *plane = dst + (size_t)task * dplane;
        for (size_t e = 0; e < dplane; e++)
            plane[e] = bias ? bias[c] : 0.0;
        for (int cs = 0; cs < c_src; cs++) {
            const double *sp = src + ((size_t)nn * c_src + cs) * splane;
            const double *wp = w + c * w_dst + cs * w_src;
            for (int q0 = 0; q0 < p->d.len; q0++)
                for (int q1 = 0; q1 < p->h.len; q1++) {
                    double *row = plane + ((size_t)q0 * p->h.len + q1) * dlen;
                    for (int a = q0 * p->d.m; a < q0 * p->d.m + p->d.cnt[q0]; a++)
                        for (int b = q1 * p->h.m; b < q1 * p->h.m + p->h.cnt[q1]; b++) {
                            const double *srow =
                                sp + ((size_t)p->d.at[a] * p->h.other + p->h.at[b]) * slen;
                            const double *wr = wp + (p->d.tap[a] * k + p->h.tap[b]) * k;
                            for (int t = 0; t < k; t++) {
                                int doff = fwd ? t - g->pad : 0, soff = fwd ? 0 : t - g->pad;
                                double wv = magnitudes ? fabs(wr[t]) : wr[t];
                                if (magnitudes)
                                    for (int i = p->run[2 * t]; i < p->run[2 * t + 1]; i++)
                                        row[i * dstep + doff] += wv * fabs(srow[i * sstep + soff]);
                                else
                                    for (int i = p->run[2 * t]; i < p->run[2 * t + 1]; i++)
                                        row[i * dstep + doff] += wv * srow[i * sstep + soff];
                            }
                        }
                }
        }
    }
}

void conv_transpose3d_ref(const convT3d_geom *g, const double *x, const double *w,
                          const double *bias, double *y)
{
    convT_plan p = plan_make(g, 1);
    convT_gather(g, &p, 1, 0, x, w, bias, y);
    plan_free(&p);
}

/* dx: the gather from dy (convT_gather), and dx_abs the same gather of the magnitudes; dw and
 * dw_abs: one (ci, co) pair's k^3 weights a task, over n and the inputs, by input pairs and
 * width runs; dbias: bias_grad. accumulate: as conv3d_backward's. */
static void convT_backward(const convT3d_geom *g, const double *x, const double *w,
                           const double *dy, double *dx, double *dw, double *dbias,
                           double *dw_abs, double *dbias_abs, double *dx_abs, int accumulate)
{
    convT_plan p = plan_make(g, 0);
    convT_gather(g, &p, 0, 0, dy, w, NULL, dx);
    if (dx_abs)
        convT_gather(g, &p, 0, 1, dy, w, NULL, dx_abs);
    int k = g->k, kvol = k * k * k, s = g->stride;
    size_t in_plane = (size_t)g->d * g->h * g->w, out_plane = (size_t)g->od * g->oh * g->ow;
#pragma omp parallel for schedule(dynamic)
    for (int task = 0; task < g->c_out * g->c_in; task++) { /* ci fastest: threads share dy */
        int co = task / g->c_in, ci = task % g->c_in;
        size_t off = ((size_t)ci * g->c_out + co) * kvol;
        double *acc = dw + off, *mag = dw_abs ? dw_abs + off : NULL;
        if (!accumulate)
            memset(acc, 0, sizeof(double) * kvol);
        if (mag && !accumulate)
            memset(mag, 0, sizeof(double) * kvol);
        for (int n = 0; n < g->n; n++) {
            const double *xp = x + ((size_t)n * g->c_in + ci) * in_plane;
            const double *gp = dy + ((size_t)n * g->c_out + co) * out_plane;
            for (int id = 0; id < g->d; id++)
                for (int ih = 0; ih < g->h; ih++) {
                    const double *xr = xp + ((size_t)id * g->h + ih) * g->w;
                    for (int a = id * p.d.m; a < id * p.d.m + p.d.cnt[id]; a++)
                        for (int b = ih * p.h.m; b < ih * p.h.m + p.h.cnt[ih]; b++) {
                            const double *gr = gp + ((size_t)p.d.at[a] * g->oh + p.h.at[b]) * g->ow;
                            int tt = (p.d.tap[a] * k + p.h.tap[b]) * k;
                            for (int t = 0; t < k; t++) {
                                double sum = 0.0, sabs = 0.0;
                                for (int i = p.run[2 * t]; i < p.run[2 * t + 1]; i++) {
                                    double v = xr[i] * gr[i * s - g->pad + t];
                                    sum += v;
                                    sabs += fabs(v);
                                }
                                acc[tt + t] += sum;
                                if (mag)
                                    mag[tt + t] += sabs;
                            }
                        }
                }
        }
    }
    bias_grad(g->n, g->c_out, out_plane, dy, dbias, dbias_abs, accumulate);
    plan_free(&p);
}

void conv_transpose3d_backward_ref(const convT3d_geom *g, const double *x, const double *w,
                                   const double *dy, double *dx, double *dw, double *dbias,
                                   double *dw_abs, double *dbias_abs, double *dx_abs)
{
    convT_backward(g, x, w, dy, dx, dw, dbias, dw_abs, dbias_abs, dx_abs, 0);
}

/* ---------------------------------------------------- a run's own conv gradient references */

static double *alloc_doubles(size_t n) { return (double *)host_alloc(sizeof(double) * n); }

/* allocates r's buffers at the first call, a group of samples of dy at most group_elems of it
 * (at least one sample); dies if the geometry differs from that call's */
static void grads_prepare(conv_grads *r, int samples, size_t n_x, size_t n_w, size_t n_bias,
                          size_t n_y, int with_dx_abs)
{
    if (r->dx) {
        if (r->samples != samples || r->n_x != n_x || r->n_w != n_w || r->n_bias != n_bias ||
            r->n_y != n_y || (with_dx_abs && !r->dx_abs))
            die(1, "conv_grads: another geometry than its first call's, or dx_abs asked for "
                   "after a call without it (conv_grads_free first)");
        return;
    }
    size_t per = n_y / (size_t)samples, most = r->group_elems ? r->group_elems : CONV_GRADS_GROUP;
    r->samples = samples;
    r->group = most / per < 1 ? 1 : (most / per < (size_t)samples ? (int)(most / per) : samples);
    r->group_elems = most;
    r->n_x = n_x, r->n_w = n_w, r->n_bias = n_bias, r->n_y = n_y;
    r->dy = alloc_doubles(per * r->group), r->dx = alloc_doubles(n_x), r->dw = alloc_doubles(n_w);
    /* touched only by a fetch that copies (untouched, malloc's pages are not resident) */
    r->room = (float *)host_alloc(sizeof(float) * per * r->group);
    r->dbias = alloc_doubles(n_bias), r->dw_abs = alloc_doubles(n_w);
    r->dbias_abs = alloc_doubles(n_bias);
    r->dx_abs = with_dx_abs ? alloc_doubles(n_x) : NULL;
    r->dy_hash = 0;
}

/* dy on the host whole: a group is a pointer into it */
typedef struct {
    const float *dy;
    size_t per; /* dy's elements a sample */
} host_dy;

static const float *host_fetch(void *ctx, int n0, int count, float *room)
{
    const host_dy *h = (const host_dy *)ctx;
    (void)count, (void)room;
    return h->dy + (size_t)n0 * h->per;
}

/* One conv's backward of a group of samples: conv3d_backward or convT_backward */
typedef struct {
    const conv3d_geom *g3;   /* a Conv3d's, or NULL */
    const convT3d_geom *gt;  /* a ConvTranspose3d's, or NULL */
} grads_kind;

/* the backward of samples n0 .. n0 + count - 1, dy (widened) in r->dy: dx (and dx_abs) of
 * those samples, dw, dbias and their magnitudes summed on after the first group */
static void group_backward(const grads_kind *k, const double *x, const double *w, int n0,
                           int count, conv_grads *r)
{
    size_t x_per = r->n_x / (size_t)r->samples, at = (size_t)n0 * x_per;
    int more = n0 > 0;
    if (k->g3) {
        conv3d_geom sub = *k->g3;
        sub.n = count;
        conv3d_backward(&sub, x + at, w, r->dy, r->dx + at, r->dw, r->dbias, r->dw_abs,
                        r->dbias_abs, more);
    } else {
        convT3d_geom sub = *k->gt;
        sub.n = count;
        convT_backward(&sub, x + at, w, r->dy, r->dx + at, r->dw, r->dbias, r->dw_abs,
                       r->dbias_abs, r->dx_abs ? r->dx_abs + at : NULL, more);
    }
}

/* 0 when r's references are already those of dy's bits; else computes them, a group at a time,
 * and returns 1 */
static int grads_run(const grads_kind *k, const double *x, const double *w, conv_dy_fetch fetch,
                     void *ctx, conv_grads *r)
{
    size_t per = r->n_y / (size_t)r->samples;
    uint64_t h = HASH_INIT;
    for (int n0 = 0; n0 < r->samples; n0 += r->group) {
        int count = r->samples - n0 < r->group ? r->samples - n0 : r->group;
        h = hash_f32(h, fetch(ctx, n0, count, r->room), (size_t)count * per);
    }
    if (h == r->dy_hash)
        return 0;
    r->dy_hash = h;
    for (int n0 = 0; n0 < r->samples; n0 += r->group) {
        int count = r->samples - n0 < r->group ? r->samples - n0 : r->group;
        const float *dy = fetch(ctx, n0, count, r->room);
        for (size_t i = 0; i < (size_t)count * per; i++)
            r->dy[i] = dy[i];
        group_backward(k, x, w, n0, count, r);
    }
    sum_bounds_add_max(r->dw_abs, r->n_w);
    sum_bounds_add_max(r->dbias_abs, r->n_bias);
    return 1;
}

int conv3d_grads_of(const conv3d_geom *g, const double *x, const double *w, const float *dy,
                    conv_grads *r)
{
    size_t kvol = (size_t)g->kd * g->kh * g->kw;
    grads_prepare(r, g->n, (size_t)g->n * g->c_in * g->d * g->h * g->w,
                  (size_t)g->c_out * g->c_in * kvol, (size_t)g->c_out,
                  (size_t)g->n * g->c_out * g->od * g->oh * g->ow, 0);
    host_dy src = {dy, r->n_y / (size_t)g->n};
    grads_kind k = {g, NULL};
    return grads_run(&k, x, w, host_fetch, &src, r);
}

int conv_transpose3d_grads_fetch(const convT3d_geom *g, const double *x, const double *w,
                                 conv_dy_fetch fetch, void *ctx, int with_dx_abs, conv_grads *r)
{
    size_t kvol = (size_t)g->k * g->k * g->k;
    grads_prepare(r, g->n, (size_t)g->n * g->c_in * g->d * g->h * g->w,
                  (size_t)g->c_in * g->c_out * kvol, (size_t)g->c_out,
                  (size_t)g->n * g->c_out * g->od * g->oh * g->ow, with_dx_abs);
    grads_kind k = {NULL, g};
    return grads_run(&k, x, w, fetch, ctx, r);
}

int conv_transpose3d_grads_of(const convT3d_geom *g, const double *x, const double *w,
                              const float *dy, int with_dx_abs, conv_grads *r)
{
    host_dy src = {dy, (size_t)g->c_out * g->od * g->oh * g->ow};
    return conv_transpose3d_grads_fetch(g, x, w, host_fetch, &src, with_dx_abs, r);
}

void conv_grads_reset(conv_grads *r) { r->dy_hash = 0; }

void conv_grads_free(conv_grads *r)
{
    double *bufs[] = {r->dy, r->dx, r->dw, r->dbias, r->dx_abs, r->dw_abs, r->dbias_abs};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(r->room);
    memset(r, 0, sizeof *r);
}
