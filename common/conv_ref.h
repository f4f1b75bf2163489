/*
 * conv_ref.h: PyTorch's Conv3d in double on the CPU, forward and backward, the reference the
 * chapters with a convolution verify against (host C, OpenMP across planes). A Conv2d is the
 * Conv3d of depth 1 with a 1 x k x k kernel and no padding along depth (conv2d_geom_make); a
 * ConvTranspose3d (convT3d_geom, below) is a Conv3d of the zero-upsampled input, computed here
 * directly, without the zeros.
 *
 *   y[n][co][od][oh][ow] = bias[co] + sum over ci, a < kd, b < kh, e < kw of
 *                          x[n][ci][od + a - pd][oh + b - ph][ow + e - pw] w[co][ci][a][b][e]
 *
 * Cross-correlation, stride 1, dilation 1, zero padding pd, ph, pw on both sides of depth,
 * height and width, a kernel kd x kh x kw, float64 NCDHW tensors, weights
 * C_out x C_in x kd x kh x kw (torch.nn.functional.conv3d; for conv2d, NCHW and
 * C_out x C_in x k x k are the same arrays with d = kd = 1). Output extents
 *   od = d + 2 pd - kd + 1,  oh = h + 2 ph - kh + 1,  ow = w + 2 pw - kw + 1.
 * Its gradients, given dy = dL/dy, with t = (a, b, e) a kernel tap and pad = (pd, ph, pw):
 *   dbias[co]         = sum over n, od, oh, ow of dy[n][co][od][oh][ow]
 *   dw[co][ci][t]     = sum over n and output positions o of dy[n][co][o] x[n][ci][o + t - pad]
 *   dx[n][ci][i]      = sum over co and t of w[co][ci][t] dy[n][co][i - t + pad]  (in range)
 */
#ifndef CONV_REF_H
#define CONV_REF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int n, c_in, c_out; /* batch, input and output channels */
    int d, h, w;        /* input extents */
    int kd, kh, kw;     /* kernel extents */
    int pd, ph, pw;     /* zero padding, each side, per dimension */
    int od, oh, ow;     /* output extents: d + 2 pd - kd + 1, ... (each at least 1) */
} conv3d_geom;

/* a cubic kernel k x k x k and the same padding `pad` on every dimension (Conv3d) */
conv3d_geom conv3d_geom_make(int n, int c_in, int c_out, int d, int h, int w, int k, int pad);
/* Conv2d(k, padding pad) on N x C_in x H x W: depth 1, kernel 1 x k x k, no padding on depth */
conv3d_geom conv2d_geom_make(int n, int c_in, int c_out, int h, int w, int k, int pad);

/* y (n x c_out x od x oh x ow) = conv3d(x, w) + bias */
void conv3d_ref(const conv3d_geom *g, const double *x, const double *w, const double *bias,
                double *y);

/* dx (like x), dw (like w), dbias (c_out) from dy (like y). dw_abs and dbias_abs, when not NULL,
 * receive the sum of the magnitudes of each reduced gradient's terms: the scale of any float
 * summation's rounding error (verify_sum_f32). */
void conv3d_backward_ref(const conv3d_geom *g, const double *x, const double *w, const double *dy,
                         double *dx, double *dw, double *dbias, double *dw_abs, double *dbias_abs);

/*
 * ConvTranspose3d (torch.nn.functional.conv_transpose3d), cubic kernel k, the same stride,
 * padding and output_padding on every axis. Its definition: every input element scatters x w into
 * the k^3 outputs its kernel covers, o = i stride - pad + t along each axis (t < k), for every
 * output channel:
 *     y[n][co][o] = bias[co] + sum over ci, and (i, t) with o = i stride - pad + t on every
 *                              axis, of x[n][ci][i] w[ci][co][t]
 * with weights in PyTorch's layout C_in x C_out x k x k x k (in and out the other way round from
 * Conv3d's). Output extents od = (d - 1) stride - 2 pad + k + out_pad, ...: padding crops pad
 * outputs from each end of the full scatter, and output_padding gives out_pad of them back at the
 * end of each axis (it picks one of the stride input lengths that a strided Conv3d maps to d).
 *
 * The same sum, read from the output's side: o = i stride - pad + t holds when the zero-upsampled
 * input u (u[i stride] = x[i], stride - 1 zeros between, out_pad more zeros at the end: extent
 * (d - 1) stride + 1 + out_pad) meets the flipped kernel, t' = k - 1 - t, in a stride-1 Conv3d
 * with padding k - 1 - pad on both sides: u[o + t' - (k - 1 - pad)] = x[i] exactly when
 * o = i stride - pad + t. So the transposed conv IS a Conv3d (conv3d_ref above), of u, with
 *     wf[co][ci][t'] = w[ci][co][t]   (in and out swapped, every axis flipped),
 * the "fractionally strided" view (Dumoulin & Visin, "A guide to convolution arithmetic for deep
 * learning", 2016, section 4; output_padding is their section 4.6's zeros added at the end of
 * the upsampled input). Computed that way it would cost stride^3 times the multiplications of
 * the scatter (all but one in stride^3 of u are 0) and an upsampled copy of x, so
 * conv_transpose3d_ref gathers directly instead: along depth and height it lists, for every
 * output o, the pairs (t, i) with o = i stride - pad + t in range (at most ceil(k / stride) of
 * them, the taps t = o + pad mod stride); along width, each tap t's run of inputs i, whose
 * outputs are every stride-th of the row. It sums x[i] w[t] over those only, one (n, co) output
 * plane an OpenMP task: exactly the scatter's multiplications, no zeros. convT3d_geom_make requires
 * k - 1 - pad >= 0 (the upsampled view's padding) and 0 <= out_pad < stride (as PyTorch does),
 * and dies otherwise.
 * Its gradients, given dy = dL/dy, sums over the (i, t) in range:
 *   dbias[co]         = sum over n and outputs o of dy[n][co][o]
 *   dw[ci][co][t]     = sum over n and inputs i of x[n][ci][i] dy[n][co][i stride - pad + t]
 *   dx[n][ci][i]      = sum over co and t of w[ci][co][t] dy[n][co][i stride - pad + t]
 *                       (a stride-`stride` Conv3d of dy with w: the conv this one transposes)
 * computed the same direct way, with the pairs listed from the input's side: dx one (n, ci)
 * plane a task, dw (and dw_abs) one (ci, co) pair's k^3 weights a task, dbias one co a task, so
 * every sum has one owner and a fixed order (the results do not depend on the thread count).
 */
typedef struct {
    int n, c_in, c_out;          /* batch; the transposed conv's input and output channels */
    int d, h, w;                 /* input extents */
    int k, stride, pad, out_pad; /* cubic kernel, stride, padding, output_padding (PyTorch's) */
    int od, oh, ow;              /* output extents: (d - 1) stride - 2 pad + k + out_pad, ... */
} convT3d_geom;

convT3d_geom convT3d_geom_make(int n, int c_in, int c_out, int d, int h, int w, int k, int stride,
                               int pad, int out_pad);
/* y (n x c_out x od x oh x ow) = conv_transpose3d(x, w) + bias; w in PyTorch's layout
 * c_in x c_out x k^3; bias may be NULL (no bias) */
void conv_transpose3d_ref(const convT3d_geom *g, const double *x, const double *w,
                          const double *bias, double *y);
/* dx (like x), dw (like w), dbias (c_out) from dy (like y); dw_abs, dbias_abs and dx_abs (may
 * be NULL) as conv3d_backward_ref's: the sums of the magnitudes of each sum's terms (dx_abs: of
 * dx's, like x; the scale of a float dx's rounding error where its terms cancel) */
void conv_transpose3d_backward_ref(const convT3d_geom *g, const double *x, const double *w,
                                   const double *dy, double *dx, double *dw, double *dbias,
                                   double *dw_abs, double *dbias_abs, double *dx_abs);

/*
 * The references a training step's conv gradients are judged by (the chapters' problem_verify):
 * the double backward of that run's own dy (the float dc it wrote), not of the exact dy, so that
 * dx, dw and dbias answer for their own arithmetic alone; dy has its own check. Against the exact
 * dy's backward, with x * 1000, dy's rounding (within its own tolerance) reached dw and dbias and
 * failed a 1e-6 bound on 2 of chapter 1's 8 test shapes and 5 of chapter 2's, cuDNN's baselines
 * as well (commit c4b5cf0). dw_abs and dbias_abs are made componentwise plus normwise
 * (sum_bounds_add_max, common.h).
 * dy is widened to double a group of samples at a time (at most group_elems of its elements, at
 * least one sample), and the backward runs a group at a time: dx for the group's samples, dw,
 * dbias and their magnitudes summed on from the groups before, each sum in the same order as
 * conv3d_backward_ref's and conv_transpose3d_backward_ref's over the whole batch. So the results
 * are theirs, bit for bit, whatever the group size or thread count, and the host memory is one
 * group's dy rather than the whole dy in double (2.15 GB at chapter 5's KernelBench shape).
 * The buffers are allocated at the first call (host_alloc: exit 1 when out of host memory) and
 * the backward is redone only when dy's bits change (hash_f32 over the groups in order): at
 * chapter 2's KernelBench shape it is 2 x 232 GFLOP in double, and a version's check after its
 * timing sees the same dy again. Whoever changes x or w calls conv_grads_reset; conv_grads_free
 * releases the buffers. Start from a zeroed struct; one struct serves one geometry (other
 * element counts die).
 */
#define CONV_GRADS_GROUP ((size_t)1 << 23) /* dy elements a group at most: 64 MiB of double */
typedef struct conv_grads {
    size_t n_x, n_w, n_bias, n_y; /* element counts: x, w, bias, dy (from the geometry) */
    size_t group_elems;           /* 0 before the first call: CONV_GRADS_GROUP (a test may set
                                   * fewer, to have several groups on a small shape) */
    int samples, group;           /* the batch; samples a group */
    double *dy;                   /* one group of the run's dy, widened to double */
    float *room;                  /* one group of dy as float, for a fetch that copies into it */
    double *dx, *dw, *dbias;      /* the references */
    double *dx_abs;               /* dx's terms' magnitudes (transposed, when asked) or NULL */
    double *dw_abs, *dbias_abs;   /* dw's and dbias's, componentwise plus normwise */
    uint64_t dy_hash;             /* the hash of the dy they are from; 0: none yet */
} conv_grads;

/* The references for dy (float, like the conv's output, on the host) of a Conv3d: returns 1
 * when computed, 0 when r already held those of the same dy bits. */
int conv3d_grads_of(const conv3d_geom *g, const double *x, const double *w, const float *dy,
                    conv_grads *r);
/* The same for a ConvTranspose3d; with_dx_abs: also dx's terms' magnitudes into r->dx_abs
 * (computed at every call once a call has asked for them) */
int conv_transpose3d_grads_of(const convT3d_geom *g, const double *x, const double *w,
                              const float *dy, int with_dx_abs, conv_grads *r);
/* Where dy comes from when it is not on the host whole (a GPU's output read back in pieces):
 * returns the dy of samples n0 .. n0 + count - 1 (count x c_out x od x oh x ow floats, in
 * order), its own memory or `room` (that many floats) filled. Called twice for each group when
 * dy's bits are new (a pass to hash them, a pass to compute), once when they are not. */
typedef const float *(*conv_dy_fetch)(void *ctx, int n0, int count, float *room);
/* conv_transpose3d_grads_of with dy fetched a group at a time (room: r->room) */
int conv_transpose3d_grads_fetch(const convT3d_geom *g, const double *x, const double *w,
                                 conv_dy_fetch fetch, void *ctx, int with_dx_abs, conv_grads *r);
/* Forget the dy the references are from (x or w changed): the next call recomputes. */
void conv_grads_reset(conv_grads *r);
/* Free the buffers and zero the struct. */
void conv_grads_free(conv_grads *r);

#ifdef __cplusplus
}
#endif
#endif
