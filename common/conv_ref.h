/*
 * conv_ref.h: PyTorch's Conv3d in double on the CPU, forward and backward, the reference the
 * chapters with a convolution verify against (host C, OpenMP across planes). A Conv2d is the
 * Conv3d of depth 1 with a 1 x k x k kernel and no padding along depth (conv2d_geom_make).
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

#ifdef __cplusplus
}
#endif
#endif
