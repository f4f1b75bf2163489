/*
 * conv_ref.h: PyTorch's Conv3d in double on the CPU, forward and backward, the reference the
 * chapters with a Conv3d verify against (host C, OpenMP across planes).
 *
 *   y[n][co][od][oh][ow] = bias[co] + sum over ci, kd, kh, kw of
 *                          x[n][ci][od + kd - pad][oh + kh - pad][ow + kw - pad] w[co][ci][kd][kh][kw]
 *
 * Cross-correlation, stride 1, dilation 1, zero padding `pad` on every side, a cubic kernel k,
 * float64 NCDHW tensors, weights C_out x C_in x k x k x k (torch.nn.functional.conv3d). Its
 * gradients, given dy = dL/dy:
 *   dbias[co]         = sum over n, od, oh, ow of dy[n][co][od][oh][ow]
 *   dw[co][ci][k]     = sum over n and output positions of dy[n][co][o] x[n][ci][o + k - pad]
 *   dx[n][ci][i]      = sum over co and k of w[co][ci][k] dy[n][co][i - k + pad]  (in range)
 */
#ifndef CONV_REF_H
#define CONV_REF_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int n, c_in, c_out; /* batch, input and output channels */
    int d, h, w;        /* input extents */
    int k, pad;         /* kernel extent (cubic) and zero padding */
    int od, oh, ow;     /* output extents: d + 2 pad - k + 1, ... (each at least 1) */
} conv3d_geom;

conv3d_geom conv3d_geom_make(int n, int c_in, int c_out, int d, int h, int w, int k, int pad);

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
