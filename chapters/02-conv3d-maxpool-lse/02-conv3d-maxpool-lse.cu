/*
 * Chapter 2: KernelBench level 2, model #43
 *
 *     y = relu( logsumexp_c( MaxPool3d_2( Conv3d(x) ) ) )
 *
 *   x      N x 32 x D x H x W                 (KernelBench: 4 x 32 x 32 x 128 x 128, rand)
 *   c      Conv3d(32 -> 64, kernel 3, stride 1, padding 1, bias)   -> N x 64 x D x H x W
 *          (4 x 64 x 32 x 128 x 128: 537 MB of float32)
 *   p      MaxPool3d(kernel 2, stride 2), floor: an odd extent drops its last row
 *          -> N x 64 x D/2 x H/2 x W/2
 *   z, y   logsumexp over the 64 channels, keepdim -> N x 1 x D/2 x H/2 x W/2; y = relu(z)
 *
 * What this chapter teaches: a windowed load fused with a reduction (8 inputs per pooled value,
 * 64 pooled values per output), coalescing when the window has stride 2, two-pass against
 * online logsumexp when the values do not fit in registers, thread coarsening with 16-byte loads,
 * and a backward that scatters through max pooling: 7 of every 8 gradients are zero.
 *
 * Versions (make chapter-2 runs them all; --version K runs one):
 *   v1  eager-like: cuDNN conv, then a naive kernel per op (max pool, logsumexp, relu), the
 *       64-channel pooled tensor (67 MB) in DRAM between them
 *   v2  v1 with cuDNN's own pooling (cudnnPoolingForward): the library baseline for the pool
 *   v3  one fused kernel, a thread per output position, windows read as float2 (a warp reads
 *       64 adjacent floats of a row), two-pass logsumexp: the 64 pooled values do not fit in
 *       registers, so the second pass reads the window again
 *   v4  v3 with the online logsumexp: one pass, the conv output read once
 *   v5  v4 coarsened: four outputs a thread along W, each row of the window read by two 16-byte
 *       loads (8 columns)
 * The whole model is cuDNN's conv plus each epilogue. The conv is not fused here: it is
 * 2 * 4 * 64 * 32 * 27 * 32 * 128 * 128 = 232 GFLOP, 3.5 ms at the H100 SXM's 67 TFLOP/s fp32
 * (datasheet) even if every FMA issued at peak, while the epilogue's floor is 0.18 ms. A fused
 * conv would have to match cuDNN's implicit GEMM first; that is not this chapter's lesson.
 * Backward (section 2b derives it):
 *   b1  autograd-like: v1's pool saves its argmax indices, logsumexp saves z, relu saves y;
 *       relu, logsumexp and pool backward one kernel each, the pool's after a 537 MB memset
 *   b2  fused: v5, then one kernel that recomputes the argmax and the logsumexp from the conv
 *       output and writes the whole conv-output gradient, zeros included, in one pass
 * Each runs as epilogue forward + backward and as a training step: cuDNN's conv, the pair,
 * cuDNN's dx (backward data) and dw (backward filter), and the bias gradient (b1: cuDNN's
 * backward bias; b2: a deterministic two-stage reduction).
 *
 *   build/ch02                     verify and time every version at the KernelBench shape
 *   build/ch02 --test              CPU checks + every version on awkward shapes and extreme values
 *   build/ch02 --shape 1x32x5x6x7 --dump out/   tensors for data/pytorch_peer.py check --chapter 2
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../common/gpu.h"
#include "../../common/reduce.cuh"

/* ============================================================================================
 * 1. The model, and what it must cost
 *
 * Bytes (float32), KernelBench shape, S = (D/2)(H/2)(W/2) = 16 * 64 * 64 = 65536 per sample:
 *   epilogue  read c once (N 64 D H W * 4 = 536.9 MB), write y (N S * 4 = 1.05 MB): 537.9 MB,
 *             0.18 ms at the measured ~3000 GB/s copy ceiling.
 *   fwd + bwd read c in the forward and again in the backward, read g, write y and dc:
 *             2 * 536.9 + 536.9 + 2 * 1.05 = 1612.9 MB, 0.54 ms.
 *   model     read x (268 MB) and the weights, write y: about 0.09 ms of bytes, but 232 GFLOP.
 * ========================================================================================== */

#define C_IN 32
#define C_OUT 64
#define KS 3
#define KVOL (KS * KS * KS)
#define N_WEIGHT (C_OUT * C_IN * KVOL) /* PyTorch layout: out x in x kD x kH x kW */

typedef struct {
    int n, d, h, w;    /* input and conv output */
    int pd, ph, pw;    /* pooled: floor(L / 2) */
    int sc;            /* d h w: conv-output positions per sample and channel */
    int s;             /* pd ph pw: output positions per sample */
} shape;

static shape make_shape(int n, int d, int h, int w)
{
    shape s = {n, d, h, w, d / 2, h / 2, w / 2, d * h * w, 0};
    s.s = s.pd * s.ph * s.pw;
    return s;
}

static size_t x_elems(const shape *s) { return (size_t)s->n * C_IN * s->sc; }
static size_t conv_elems(const shape *s) { return (size_t)s->n * C_OUT * s->sc; }
static size_t pool_elems(const shape *s) { return (size_t)s->n * C_OUT * s->s; }
static size_t out_elems(const shape *s) { return (size_t)s->n * s->s; }

static double epilogue_bytes(const shape *s) { return 4.0 * (conv_elems(s) + out_elems(s)); }
static double model_bytes(const shape *s)
{
    return 4.0 * (x_elems(s) + N_WEIGHT + C_OUT + out_elems(s));
}
static double epilogue_fwdbwd_bytes(const shape *s)
{
    return 4.0 * (3.0 * conv_elems(s) + 2.0 * out_elems(s));
}
/* the training step if c were never stored: read x twice (conv, dw), write y, read g, write dx
 * and the parameters' gradients; a floor for bytes, the step being compute-bound */
static double train_step_bytes(const shape *s)
{
    return 4.0 * (3.0 * x_elems(s) + 2.0 * out_elems(s) + 2.0 * (N_WEIGHT + C_OUT));
}
static double conv_flops(const shape *s) { return 2.0 * s->n * C_OUT * C_IN * KVOL * (double)s->sc; }

static const char *shape_problem(const int64_t *dims)
{
    static char why[256];
    if (dims[1] != C_IN) {
        snprintf(why, sizeof why, "this model has %d input channels, --shape says %lld", C_IN,
                 (long long)dims[1]);
        return why;
    }
    if (dims[2] < 2 || dims[3] < 2 || dims[4] < 2) {
        snprintf(why, sizeof why, "max pooling with kernel 2 needs D, H and W of at least 2");
        return why;
    }
    if (dims[0] > 65535 || dims[2] > 65535) {
        snprintf(why, sizeof why, "batch and depth must be at most 65535 (grid limits)");
        return why;
    }
    double conv = (double)dims[0] * C_OUT * dims[2] * dims[3] * dims[4];
    if (conv >= 2147483647.0) {
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

/* out[n][co][d][h][w] = bias[co] + sum over ci, kd, kh, kw of
 *                       x[n][ci][d + kd - 1][h + kh - 1][w + kw - 1] w[co][ci][kd][kh][kw]
 * (cross-correlation with zero padding 1, as PyTorch's Conv3d). The innermost loop runs along w
 * so the compiler vectorises it; one (n, co) plane per OpenMP task. */
static void conv3d_ref(const shape *s, const double *x, const double *w, const double *bias,
                       double *out)
{
    int D = s->d, H = s->h, W = s->w;
#pragma omp parallel for schedule(dynamic)
    for (int t = 0; t < s->n * C_OUT; t++) {
        int n = t / C_OUT, co = t % C_OUT;
        double *o = out + (size_t)t * s->sc;
        for (int i = 0; i < s->sc; i++)
            o[i] = bias[co];
        for (int ci = 0; ci < C_IN; ci++) {
            const double *xi = x + ((size_t)n * C_IN + ci) * s->sc;
            for (int kd = 0; kd < KS; kd++)
                for (int kh = 0; kh < KS; kh++)
                    for (int kw = 0; kw < KS; kw++) {
                        double wv = w[((co * C_IN + ci) * KS + kd) * KS * KS + kh * KS + kw];
                        for (int d = 0; d < D; d++) {
                            int sd = d + kd - 1;
                            if (sd < 0 || sd >= D)
                                continue;
                            for (int h = 0; h < H; h++) {
                                int sh = h + kh - 1;
                                if (sh < 0 || sh >= H)
                                    continue;
                                const double *xr = xi + ((size_t)sd * H + sh) * W;
                                double *orow = o + ((size_t)d * H + h) * W;
                                int w0 = kw == 0 ? 1 : 0, w1 = kw == 2 ? W - 1 : W;
                                for (int ww = w0; ww < w1; ww++)
                                    orow[ww] += wv * xr[ww + kw - 1];
                            }
                        }
                    }
        }
    }
}

/* the max of one 2x2x2 window and the index (dd * 4 + dh * 2 + dw) of its first maximum, the
 * element PyTorch's max pool routes the gradient to */
static double window_max_ref(const double *plane, const shape *s, int pd, int ph, int pw, int *arg)
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

static double lse_ref(const double *v, int c)
{
    double m = v[0], sum = 0.0;
    for (int i = 1; i < c; i++)
        m = fmax(m, v[i]);
    for (int i = 0; i < c; i++)
        sum += exp(v[i] - m);
    return m + log(sum);
}

/* y = relu(logsumexp_c(maxpool(c))), c as float (cf) or double (cd) */
static void epilogue_ref(const shape *s, const float *cf, const double *cd, double *y)
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
            double v[C_OUT];
            for (int co = 0; co < C_OUT; co++)
                v[co] = p[(size_t)co * s->s + i];
            double z = lse_ref(v, C_OUT);
            y[(size_t)n * s->s + i] = z > 0.0 ? z : 0.0;
        }
        free(plane);
        free(p);
    }
}

/* ============================================================================================
 * 2b. The backward, derived term by term
 *
 * Per output position, p_c the 64 pooled values (c = channel), a_c the argmax of channel c's
 * window, g = dL/dy:
 *   dz   = g [z > 0]                       relu; PyTorch's relu backward is g * (y > 0)
 *   dp_c = dz exp(p_c - z) = dz softmax_c(p)
 *   dc   = dp_c at the window element a_c (the first maximum: PyTorch's max pool keeps the first
 *          index on ties), 0 at the window's other 7 elements, 0 at rows and columns no window
 *          covers (an odd extent's last row)
 * and the conv's own, with dc the gradient of its output:
 *   dbias[co]        = sum over n, d, h, w of dc[n][co][d][h][w]
 *   dw[co][ci][k]    = sum over n and positions of dc[n][co][pos] x[n][ci][pos + k - 1]
 *   dx[n][ci][pos]   = sum over co, k of w[co][ci][k] dc[n][co][pos - k + 1]
 *                      (the transposed conv: cuDNN's backward data)
 * What the backward needs: c (537 MB) and g. Autograd (b1) saves the pool's indices (PyTorch:
 * int64, 134 MB here; b1 uses int32, 67 MB), p (67 MB), z and y, then writes a zeroed 537 MB dc
 * and scatters into it. Recomputing the argmax and z from c (b2) reads c once, which the softmax
 * needs anyway (p), and writes dc once with its zeros: 1.07 GB instead of about 1.9 GB.
 * ========================================================================================== */

static void epilogue_backward_ref(const shape *s, const float *cf, const double *cd,
                                  const float *g, double *dc)
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
            double z = lse_ref(p, C_OUT);
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

/* dx, dw, dbias of the conv from dc (definitions above); *_abs receive the sums of the
 * magnitudes of each reduced gradient's terms (verify_sum_f32), may be NULL */
static void conv3d_backward_ref(const shape *s, const double *x, const double *w, const double *dc,
                                double *dx, double *dw, double *dbias, double *dw_abs,
                                double *dbias_abs)
{
    int D = s->d, H = s->h, W = s->w;
#pragma omp parallel for schedule(dynamic)
    for (int t = 0; t < C_OUT * C_IN; t++) { /* dw: one (co, ci) pair per task */
        int co = t / C_IN, ci = t % C_IN;
        for (int k = 0; k < KVOL; k++) {
            int kd = k / 9, kh = (k / 3) % 3, kw = k % 3;
            double acc = 0.0, acca = 0.0;
            for (int n = 0; n < s->n; n++) {
                const double *o = dc + ((size_t)n * C_OUT + co) * s->sc;
                const double *xi = x + ((size_t)n * C_IN + ci) * s->sc;
                for (int d = 0; d < D; d++) {
                    int sd = d + kd - 1;
                    if (sd < 0 || sd >= D)
                        continue;
                    for (int h = 0; h < H; h++) {
                        int sh = h + kh - 1;
                        if (sh < 0 || sh >= H)
                            continue;
                        for (int ww = 0; ww < W; ww++) {
                            int sw = ww + kw - 1;
                            if (sw < 0 || sw >= W)
                                continue;
                            double v = o[((size_t)d * H + h) * W + ww] * xi[((size_t)sd * H + sh) * W + sw];
                            acc += v;
                            acca += fabs(v);
                        }
                    }
                }
            }
            dw[(co * C_IN + ci) * KVOL + k] = acc;
            if (dw_abs)
                dw_abs[(co * C_IN + ci) * KVOL + k] = acca;
        }
    }
    for (int co = 0; co < C_OUT; co++) {
        double sb = 0.0, sba = 0.0;
        for (int n = 0; n < s->n; n++)
            for (int i = 0; i < s->sc; i++) {
                double v = dc[((size_t)n * C_OUT + co) * s->sc + i];
                sb += v;
                sba += fabs(v);
            }
        dbias[co] = sb;
        if (dbias_abs)
            dbias_abs[co] = sba;
    }
#pragma omp parallel for schedule(dynamic)
    for (int t = 0; t < s->n * C_IN; t++) { /* dx: one (n, ci) plane per task */
        int n = t / C_IN, ci = t % C_IN;
        double *o = dx + (size_t)t * s->sc;
        for (int i = 0; i < s->sc; i++)
            o[i] = 0.0;
        for (int co = 0; co < C_OUT; co++) {
            const double *g = dc + ((size_t)n * C_OUT + co) * s->sc;
            for (int k = 0; k < KVOL; k++) {
                int kd = k / 9, kh = (k / 3) % 3, kw = k % 3;
                double wv = w[(co * C_IN + ci) * KVOL + k];
                /* x at sd receives dc at d = sd - kd + 1 */
                for (int sd = 0; sd < D; sd++) {
                    int d = sd - kd + 1;
                    if (d < 0 || d >= D)
                        continue;
                    for (int sh = 0; sh < H; sh++) {
                        int h = sh - kh + 1;
                        if (h < 0 || h >= H)
                            continue;
                        double *orow = o + ((size_t)sd * H + sh) * W;
                        const double *grow = g + ((size_t)d * H + h) * W;
                        int s0 = kw == 2 ? 1 : 0, s1 = kw == 0 ? W - 1 : W;
                        for (int sw = s0; sw < s1; sw++)
                            orow[sw] += wv * grow[sw - kw + 1];
                    }
                }
            }
        }
    }
}

/* ============================================================================================
 * 3. GPU versions
 * ========================================================================================== */

#ifdef __CUDA_ARCH__
#define EXP_FAST(v) __expf(v)
#define LOG_FAST(v) __logf(v)
#else
#define EXP_FAST(v) expf(v)
#define LOG_FAST(v) logf(v)
#endif

/* ---------------------------------------------------------------- v1 and v2: what eager does
 * PyTorch eager: max_pool3d (one kernel, writes the 64-channel pooled tensor, 67 MB), then
 * logsumexp (inside torch: amax, sub, exp, sum, log, add), then relu. Here: a naive pooling
 * kernel (v1) or cuDNN's (v2), one naive logsumexp kernel, one relu kernel.
 * Bytes: 537 MB in, 67 MB out for the pool; 67 MB in twice (two passes over the channels in
 * the logsumexp, the second often from L2) and 1 MB out; 1 MB in and out for relu. About 0.68 GB
 * against the 0.54 GB floor. Prediction: 1.3x the floor, plus the launches.
 * Measured (H100 80GB HBM3, KernelBench shape, data/h100/ch02.csv): v1 0.264 ms, 1.47x the
 * 0.180 ms floor; v2 with cuDNN's pooling 0.277 ms, 5% slower than the naive pool (one H100
 * run, each median repeats within about 1%). PyTorch eager: 0.491 ms. */

/* one thread per pooled value: its 8-element window's max (the first maximum); idx, if not
 * NULL, receives the argmax (0..7), as autograd saves it for the backward */
__global__ void k_maxpool_naive(const float *__restrict__ c, float *__restrict__ p,
                                int *__restrict__ idx, int total, int d, int h, int w)
{
    int pd = d / 2, ph = h / 2, pw = w / 2;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int x0 = i % pw, r = i / pw, y0 = r % ph;
        r /= ph;
        int z0 = r % pd, plane = r / pd; /* plane = n * 64 + channel */
        const float *src = c + (size_t)plane * d * h * w;
        float m = 0.0f;
        int arg = 0;
        for (int q = 0; q < 8; q++) {
            float v = src[((2 * z0 + (q >> 2)) * h + 2 * y0 + ((q >> 1) & 1)) * w + 2 * x0 + (q & 1)];
            if (q == 0 || v > m)
                m = v, arg = q;
        }
        p[i] = m;
        if (idx)
            idx[i] = arg;
    }
}

/* one thread per output position, two passes over the 64 channels of p */
__global__ void k_logsumexp_naive(const float *__restrict__ p, float *__restrict__ z, int n_pos,
                                  int s)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_pos; i += gridDim.x * blockDim.x) {
        int n = i / s, q = i - n * s;
        const float *v = p + (size_t)n * C_OUT * s + q;
        float m = v[0];
        for (int ch = 1; ch < C_OUT; ch++)
            m = fmaxf(m, v[(size_t)ch * s]);
        float sum = 0.0f;
        for (int ch = 0; ch < C_OUT; ch++)
            sum += expf(v[(size_t)ch * s] - m);
        z[i] = m + logf(sum);
    }
}

__global__ void k_relu(const float *__restrict__ a, float *__restrict__ o, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        o[i] = a[i] > 0.0f ? a[i] : (a[i] == a[i] ? 0.0f : a[i]); /* NaN stays NaN, as in torch */
}

/* ---------------------------------------------------------------- v3: one fused kernel
 * Defect of v1/v2: the pooled tensor's round trip and three launches. One kernel, one thread
 * per output position (n, pd, ph, pw), looping over the 64 channels; for each, the 2x2x2
 * window: 4 rows of 2 adjacent floats. Coalescing with a stride-2 window: thread pw reads
 * columns 2pw and 2pw + 1, so the warp's 32 threads read 64 adjacent floats of each row, one
 * float2 (8-byte) load each: every byte of every sector fetched is used. (A thread per pooled
 * value reading its 8 elements with scalar loads would ask for half of each sector twice.)
 * The 64 pooled values would need 64 registers per thread to be held for a two-pass
 * logsumexp; this version does it the other way, computing the max over the channels in a
 * first pass and the sum of exps in a second, which reads the window again.
 * Prediction: the second read comes partly from L1/L2; 1x to 2x the floor.
 * Measured: 0.364 ms, 2.0x the floor and slower than v1. Most likely the second pass reads
 * DRAM again: between a thread's two reads of a window every resident thread reads 64 windows,
 * 2 MB apart (one channel plane each), far more than L1 holds (not profiled). */

/* the window's 8 values in registers, index dd * 4 + dh * 2 + dw; base = the element at
 * (plane, 2pd, 2ph, 2pw). 8-byte loads when W is even (then every 2pw is 8-byte aligned: the
 * row starts at a multiple of W floats), scalar loads otherwise. */
__device__ static inline void load_window(const float *__restrict__ c, int base, int h, int w,
                                          float v[8])
{
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const float *row = c + base + ((r >> 1) * h + (r & 1)) * w;
        if ((w & 1) == 0) {
            float2 t = __ldg(reinterpret_cast<const float2 *>(row));
            v[2 * r] = t.x, v[2 * r + 1] = t.y;
        } else {
            v[2 * r] = __ldg(row), v[2 * r + 1] = __ldg(row + 1);
        }
    }
}

/* max of the 8, and the index of the first maximum */
__device__ static inline float max8(const float v[8], int *arg)
{
    float m = v[0];
    int a = 0;
#pragma unroll
    for (int q = 1; q < 8; q++)
        if (v[q] > m)
            m = v[q], a = q;
    *arg = a;
    return m;
}

__global__ void k_epilogue_two_pass(const float *__restrict__ c, float *__restrict__ y, int n_pos,
                                    int d, int h, int w)
{
    int pd = d / 2, ph = h / 2, pw = w / 2, sc = d * h * w;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_pos; i += gridDim.x * blockDim.x) {
        int x0 = i % pw, r = i / pw, y0 = r % ph;
        r /= ph;
        int z0 = r % pd, n = r / pd;
        int base = n * C_OUT * sc + (2 * z0 * h + 2 * y0) * w + 2 * x0, arg;
        float m = -INFINITY, sum = 0.0f, v[8];
        for (int ch = 0; ch < C_OUT; ch++) {
            load_window(c, base + ch * sc, h, w, v);
            m = fmaxf(m, max8(v, &arg));
        }
        for (int ch = 0; ch < C_OUT; ch++) {
            load_window(c, base + ch * sc, h, w, v);
            sum += expf(max8(v, &arg) - m);
        }
        float z = m + logf(sum);
        y[i] = z > 0.0f ? z : 0.0f;
    }
}

/* ---------------------------------------------------------------- v4: online logsumexp
 * Defect of v3: the conv output is read twice. The online logsumexp (Milakov & Gimelshein,
 * 2018) folds each channel's pooled value in as it arrives, one exp per value:
 *     p > m:  s = s exp(m - p) + 1, m = p        otherwise:  s = s + exp(p - m)
 * One pass, every byte of c read once. __expf/__logf: the accuracy check below still passes.
 * Measured: 0.203 ms, 89% of the copy ceiling, 1.30x v1. */
__device__ static inline void lse_online(float v, float *m, float *s)
{
    float d = v - *m;
    float e = EXP_FAST(-fabsf(d));
    if (d > 0.0f) {
        *s = fmaf(*s, e, 1.0f);
        *m = v;
    } else {
        *s += e;
    }
}

__global__ void k_epilogue_online(const float *__restrict__ c, float *__restrict__ y, int n_pos,
                                  int d, int h, int w)
{
    int pd = d / 2, ph = h / 2, pw = w / 2, sc = d * h * w;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_pos; i += gridDim.x * blockDim.x) {
        int x0 = i % pw, r = i / pw, y0 = r % ph;
        r /= ph;
        int z0 = r % pd, n = r / pd;
        int base = n * C_OUT * sc + (2 * z0 * h + 2 * y0) * w + 2 * x0, arg;
        float m = -INFINITY, sum = 0.0f, v[8];
#pragma unroll 4
        for (int ch = 0; ch < C_OUT; ch++) {
            load_window(c, base + ch * sc, h, w, v);
            lse_online(max8(v, &arg), &m, &sum);
        }
        float z = m + LOG_FAST(sum);
        y[i] = z > 0.0f ? z : 0.0f;
    }
}

/* ---------------------------------------------------------------- v5: coarsened, 16-byte loads
 * What v4 leaves: a float2 per row per window, 4 loads of 8 bytes for 32 bytes, and its index
 * arithmetic once per output. Each thread now takes 4 adjacent outputs along W: per channel and
 * row, columns 8t .. 8t+7, two 16-byte loads. Aligned when W is a multiple of 4 (rows then start
 * on 16 bytes and 8t is a multiple of 4); other W, and a last group of fewer than 4 outputs,
 * take v4's per-window path. Bytes in flight: 8 loads of 16 bytes per channel per thread; with
 * the channel loop unrolled twice, 256 bytes a thread, 512 KB per SM at 2048 threads, far above
 * the ~16 KB per SM that 3 TB/s needs at about 700 ns of DRAM latency (Little's law:
 * 3e12 B/s x 7e-7 s / 132 SMs). The limit is elsewhere: instructions per byte, and the tail.
 * Measured: 0.190 ms, 94.6% of the copy ceiling, 1.39x v1, 1.05x torch.compile's 0.199 ms. The
 * 0.19 ms target is met to within run-to-run noise (the median is 0.2% above it, the minimum
 * 0.186). */
#define V5_OUT 4

__global__ void k_epilogue_coarse(const float *__restrict__ c, float *__restrict__ y, int d, int h,
                                  int w)
{
    int pd = d / 2, ph = h / 2, pw = w / 2, sc = d * h * w, s = pd * ph * pw;
    int groups = (pw + V5_OUT - 1) / V5_OUT;
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int row_id = blockIdx.y; /* (n, pd, ph) flattened */
    if (t >= groups)
        return;
    int y0 = row_id % ph, r = row_id / ph, z0 = r % pd, n = r / pd;
    int x0 = t * V5_OUT;
    int base = n * C_OUT * sc + (2 * z0 * h + 2 * y0) * w + 2 * x0;
    float m[V5_OUT], sum[V5_OUT];
#pragma unroll
    for (int k = 0; k < V5_OUT; k++)
        m[k] = -INFINITY, sum[k] = 0.0f;
    if ((w & 3) == 0 && x0 + V5_OUT <= pw) {
#pragma unroll 2
        for (int ch = 0; ch < C_OUT; ch++) {
            float v[V5_OUT][8];
#pragma unroll
            for (int rr = 0; rr < 4; rr++) {
                const float4 *row =
                    reinterpret_cast<const float4 *>(c + base + ch * sc + ((rr >> 1) * h + (rr & 1)) * w);
                float4 a = __ldg(row), b = __ldg(row + 1);
                v[0][2 * rr] = a.x, v[0][2 * rr + 1] = a.y, v[1][2 * rr] = a.z, v[1][2 * rr + 1] = a.w;
                v[2][2 * rr] = b.x, v[2][2 * rr + 1] = b.y, v[3][2 * rr] = b.z, v[3][2 * rr + 1] = b.w;
            }
#pragma unroll
            for (int k = 0; k < V5_OUT; k++) {
                int arg;
                lse_online(max8(v[k], &arg), &m[k], &sum[k]);
            }
        }
    } else {
        for (int ch = 0; ch < C_OUT; ch++)
            for (int k = 0; k < V5_OUT && x0 + k < pw; k++) {
                float v[8];
                int arg;
                load_window(c, base + ch * sc + 2 * k, h, w, v);
                lse_online(max8(v, &arg), &m[k], &sum[k]);
            }
    }
    float *yr = y + n * s + (z0 * ph + y0) * pw;
#pragma unroll
    for (int k = 0; k < V5_OUT; k++)
        if (x0 + k < pw) {
            float z = m[k] + LOG_FAST(sum[k]);
            yr[x0 + k] = z > 0.0f ? z : 0.0f;
        }
}

/* ---------------------------------------------------------------- backward
 * b1, autograd-like: relu backward, logsumexp backward (reads p, writes the 64-channel dp),
 * then max-pool backward: a 537 MB memset of dc and a scatter of dp to the saved indices. */

__global__ void k_relu_backward(const float *__restrict__ g, const float *__restrict__ y,
                                float *__restrict__ dz, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        dz[i] = y[i] > 0.0f ? g[i] : 0.0f;
}

__global__ void k_logsumexp_backward(const float *__restrict__ p, const float *__restrict__ z,
                                     const float *__restrict__ dz, float *__restrict__ dp,
                                     int n_pos, int s)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_pos; i += gridDim.x * blockDim.x) {
        int n = i / s, q = i - n * s;
        for (int ch = 0; ch < C_OUT; ch++) {
            size_t j = ((size_t)n * C_OUT + ch) * s + q;
            dp[j] = dz[i] * expf(p[j] - z[i]);
        }
    }
}

/* windows do not overlap (stride = kernel = 2), so each pooled value owns its 8 elements and
 * the scatter needs no atomics. Measured: v1's forward with indices plus these, 0.830 ms for
 * forward + backward, 1.54x the 0.54 ms floor (PyTorch eager: 1.24 ms, torch.compile 1.02). */
__global__ void k_maxpool_backward(const float *__restrict__ dp, const int *__restrict__ idx,
                                   float *__restrict__ dc, int total, int d, int h, int w)
{
    int pd = d / 2, ph = h / 2, pw = w / 2;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int x0 = i % pw, r = i / pw, y0 = r % ph;
        r /= ph;
        int z0 = r % pd, plane = r / pd, q = idx[i];
        dc[(size_t)plane * d * h * w + ((2 * z0 + (q >> 2)) * h + 2 * y0 + ((q >> 1) & 1)) * w +
           2 * x0 + (q & 1)] = dp[i];
    }
}

/* b2, fused: defect of b1, the saved tensors (p, indices: 134 MB written and read), dp's round
 * trip, and a separate memset of the 537 MB dc before a scattered write into it. One kernel: a
 * thread per output position recomputes, channel by channel, the window max, its argmax and the
 * online logsumexp; the 64 pooled values and argmaxes wait in shared memory, one column per
 * thread (thread t reads and writes word t of each row: no bank conflicts), until z is known.
 * Then it writes each channel's whole window, dp at the argmax and 0 elsewhere, as float2 stores
 * (a warp: 64 adjacent floats per row), and the zeros of the rows and columns no window covers.
 * No memset, no scatter: dc is written once.
 * A first version kept the 64 values and argmaxes in registers (the channel loop unrolled so
 * their indices were constants): 161 registers, 12 warps per SM, and 1.095 ms for v5 + it at
 * the KernelBench shape, slower than b1's 0.828 ms (H100). Shared memory costs 320 bytes a
 * thread and gives the registers back for warps that hide the loads.
 * Prediction: read c, write dc: 1.07 GB, 0.36 ms; with v5's forward 0.54 ms, the floor.
 * Measured: 0.577 ms for v5 + this, 93.5% of the copy ceiling, 1.44x b1, 1.77x torch.compile
 * (1.02 ms): within the 0.6 ms target. */
#define B2_BLOCK 128

__global__ void __launch_bounds__(B2_BLOCK)
    k_epilogue_backward_fused(const float *__restrict__ c, const float *__restrict__ g,
                              float *__restrict__ dc, int n_pos, int d, int h, int w)
{
    __shared__ float s_p[C_OUT][B2_BLOCK];
    __shared__ unsigned char s_a[C_OUT][B2_BLOCK];
    int i = blockIdx.x * blockDim.x + threadIdx.x, t = threadIdx.x;
    if (i >= n_pos)
        return; /* no barrier follows: the shared memory is each thread's own column */
    int pd = d / 2, ph = h / 2, pw = w / 2, sc = d * h * w;
    int x0 = i % pw, r = i / pw, y0 = r % ph;
    r /= ph;
    int z0 = r % pd, n = r / pd;
    int base = n * C_OUT * sc + (2 * z0 * h + 2 * y0) * w + 2 * x0;
    float m = -INFINITY, sum = 0.0f;
#pragma unroll 4
    for (int ch = 0; ch < C_OUT; ch++) {
        float v[8];
        int a;
        load_window(c, base + ch * sc, h, w, v);
        float pv = max8(v, &a);
        s_p[ch][t] = pv;
        s_a[ch][t] = (unsigned char)a;
        lse_online(pv, &m, &sum);
    }
    float z = m + LOG_FAST(sum);
    float dz = z > 0.0f ? g[i] : 0.0f;
    /* this thread's share of dc: its window, plus the rows and columns after it that no window
     * covers when it is the last along an odd extent */
    int ed = z0 == pd - 1 ? d - 2 * z0 : 2, eh = y0 == ph - 1 ? h - 2 * y0 : 2;
    int extra_col = x0 == pw - 1 && (w & 1);
#pragma unroll 2
    for (int ch = 0; ch < C_OUT; ch++) {
        float dp = dz * EXP_FAST(s_p[ch][t] - z);
        int a = s_a[ch][t];
        for (int dd = 0; dd < ed; dd++)
            for (int dh = 0; dh < eh; dh++) {
                float *row = dc + base + ch * sc + (dd * h + dh) * w;
                int q = dd * 4 + dh * 2, inside = dd < 2 && dh < 2;
                float v0 = inside && a == q ? dp : 0.0f, v1 = inside && a == q + 1 ? dp : 0.0f;
                if ((w & 1) == 0)
                    *reinterpret_cast<float2 *>(row) = make_float2(v0, v1);
                else
                    row[0] = v0, row[1] = v1;
                if (extra_col)
                    row[2] = 0.0f;
            }
    }
}

/* The bias gradient is a deterministic two-stage reduction, k_channel_sums and k_segment_sums
 * (common/reduce.cuh): per channel, blocks sum slices of every sample's plane into one partial
 * each; one block per channel then adds its partials in a fixed order. No atomics. */

/* ============================================================================================
 * 4. cuDNN (the conv, its gradients, the pooling baseline), the versions, the launchers
 *
 * CUDNN_FMA_MATH keeps cuDNN off TF32: strict fp32, as PyTorch with allow_tf32 = False.
 * Algorithms: the fastest fp32 one cudnnFind...Ex measures on the problem's own buffers (as
 * torch.backends.cudnn.benchmark = True would pick), with a zeroed workspace.
 * ========================================================================================== */

typedef struct {
    cudnn_conv3d conv;                    /* the conv and its gradients (common/gpu.h) */
    cudnnTensorDescriptor_t p_desc;     /* the pooled tensor, for the v2 baseline */
    cudnnPoolingDescriptor_t pool_desc;
} cudnn_ctx;

static void cudnn_setup(cudnn_ctx *cc, const shape *s, const float *x, const float *w, float *c,
                        float *dc, float *dx, float *dw)
{
    int xd[5] = {s->n, C_IN, s->d, s->h, s->w};
    int pdim[5] = {s->n, C_OUT, s->pd, s->ph, s->pw};
    int pstr[5] = {C_OUT * s->s, s->s, s->ph * s->pw, s->pw, 1};
    int win[3] = {2, 2, 2}, zero3[3] = {0, 0, 0};
    cudnn_conv3d_setup(&cc->conv, xd, C_OUT, KS, 1, x, w, c, dc, dx, dw);
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&cc->p_desc));
    CUDNN_CHECK(cudnnCreatePoolingDescriptor(&cc->pool_desc));
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(cc->p_desc, CUDNN_DATA_FLOAT, 5, pdim, pstr));
    /* floor mode like PyTorch: cuDNN's output extent is 1 + (L - 2) / 2 = floor(L / 2) */
    CUDNN_CHECK(cudnnSetPoolingNdDescriptor(cc->pool_desc, CUDNN_POOLING_MAX,
                                            CUDNN_NOT_PROPAGATE_NAN, 3, win, zero3, win));
}

static void cudnn_destroy(cudnn_ctx *cc)
{
    cudnnDestroyTensorDescriptor(cc->p_desc);
    cudnnDestroyPoolingDescriptor(cc->pool_desc);
    cudnn_conv3d_destroy(&cc->conv);
}

/* Everything a launch needs, on the device */
typedef struct {
    shape sh;
    int sm_count;
    const float *x, *weight, *bias; /* model input and parameters */
    float *c;                       /* conv output, the epilogue's input */
    float *y;                       /* output */
    float *p, *z, *t0, *t1;         /* v1's and b1's intermediates: p, dp (64 channels), z, dz */
    float *dp;
    int *idx;                       /* b1's saved argmax */
    const float *g;                 /* dL/dy */
    float *dc, *dx, *dw, *dbias;
    float *partials;
    cudnn_ctx *cudnn;
} run_ctx;

static int grid_for(long long n, int block, int sm_count)
{
    long long g = (n + block - 1) / block, cap = (long long)sm_count * 32;
    return (int)(g < cap ? (g > 0 ? g : 1) : cap);
}

static void launch_conv(const run_ctx *r)
{
    cudnn_conv3d_forward(&r->cudnn->conv, r->x, r->weight, r->bias, r->c);
}

static void time_conv(const void *r) { launch_conv((const run_ctx *)r); }

/* v1's and v2's logsumexp and relu after the pool; v1 keeps z in t0 for b1 */
static void lse_relu_naive(const run_ctx *r)
{
    int n = (int)out_elems(&r->sh), g = grid_for(n, 256, r->sm_count);
    k_logsumexp_naive<<<g, 256>>>(r->p, r->z, n, r->sh.s);
    k_relu<<<g, 256>>>(r->z, r->y, n);
}

static void launch_v1(const run_ctx *r)
{
    const shape *s = &r->sh;
    int total = (int)pool_elems(s);
    k_maxpool_naive<<<grid_for(total, 256, r->sm_count), 256>>>(r->c, r->p, NULL, total, s->d,
                                                                 s->h, s->w);
    lse_relu_naive(r);
}

static void launch_v2(const run_ctx *r)
{
    const float one = 1.0f, zero = 0.0f;
    const cudnn_ctx *cc = r->cudnn;
    CUDNN_CHECK(cudnnPoolingForward(cc->conv.handle, cc->pool_desc, &one, cc->conv.y_desc, r->c,
                                    &zero, cc->p_desc, r->p));
    lse_relu_naive(r);
}

static void launch_v3(const run_ctx *r)
{
    const shape *s = &r->sh;
    int n = (int)out_elems(s);
    k_epilogue_two_pass<<<grid_for(n, 256, r->sm_count), 256>>>(r->c, r->y, n, s->d, s->h, s->w);
}

static void launch_v4(const run_ctx *r)
{
    const shape *s = &r->sh;
    int n = (int)out_elems(s);
    k_epilogue_online<<<grid_for(n, 256, r->sm_count), 256>>>(r->c, r->y, n, s->d, s->h, s->w);
}

static void launch_v5(const run_ctx *r)
{
    const shape *s = &r->sh;
    int groups = (s->pw + V5_OUT - 1) / V5_OUT;
    int block = groups >= 128 ? 128 : ((groups + 31) / 32) * 32;
    dim3 grid((groups + block - 1) / block, s->n * s->pd * s->ph);
    k_epilogue_coarse<<<grid, block>>>(r->c, r->y, s->d, s->h, s->w);
}

/* b1's forward: v1 with the pool's argmax, z and y kept */
static void launch_v1_saving(const run_ctx *r)
{
    const shape *s = &r->sh;
    int total = (int)pool_elems(s);
    k_maxpool_naive<<<grid_for(total, 256, r->sm_count), 256>>>(r->c, r->p, r->idx, total, s->d,
                                                                 s->h, s->w);
    lse_relu_naive(r);
}

static void launch_b1(const run_ctx *r)
{
    const shape *s = &r->sh;
    int n = (int)out_elems(s), total = (int)pool_elems(s);
    k_relu_backward<<<grid_for(n, 256, r->sm_count), 256>>>(r->g, r->y, r->t0, n);
    k_logsumexp_backward<<<grid_for(n, 256, r->sm_count), 256>>>(r->p, r->z, r->t0, r->dp, n, s->s);
    CUDA_CHECK(cudaMemsetAsync(r->dc, 0, sizeof(float) * conv_elems(s), 0));
    k_maxpool_backward<<<grid_for(total, 256, r->sm_count), 256>>>(r->dp, r->idx, r->dc, total,
                                                                    s->d, s->h, s->w);
}

static void launch_b2(const run_ctx *r)
{
    const shape *s = &r->sh;
    int n = (int)out_elems(s);
    k_epilogue_backward_fused<<<(n + B2_BLOCK - 1) / B2_BLOCK, B2_BLOCK>>>(r->c, r->g, r->dc, n,
                                                                          s->d, s->h, s->w);
}

static void cudnn_dx(const run_ctx *r)
{
    cudnn_conv3d_backward_data(&r->cudnn->conv, r->weight, r->dc, r->dx);
}

static void cudnn_dw(const run_ctx *r)
{
    cudnn_conv3d_backward_filter(&r->cudnn->conv, r->x, r->dc, r->dw);
}

static void cudnn_dbias(const run_ctx *r)
{
    const float one = 1.0f, zero = 0.0f;
    const cudnn_ctx *cc = r->cudnn;
    CUDNN_CHECK(cudnnConvolutionBackwardBias(cc->conv.handle, &one, cc->conv.y_desc, r->dc, &zero,
                                             cc->conv.b_desc, r->dbias));
}

#define DBIAS_BLOCKS 64

static void own_dbias(const run_ctx *r)
{
    k_channel_sums<<<dim3(DBIAS_BLOCKS, C_OUT), 256>>>(r->dc, NULL, r->partials, r->sh.n, r->sh.sc);
    k_segment_sums<<<C_OUT, 64>>>(r->partials, NULL, DBIAS_BLOCKS, r->dbias);
}

static void grads_b1(const run_ctx *r) { cudnn_dx(r), cudnn_dw(r), cudnn_dbias(r); }
static void grads_b2(const run_ctx *r) { cudnn_dx(r), cudnn_dw(r), own_dbias(r); }

/* one timing each, to see where a training step goes */
static void time_dx(const void *r) { cudnn_dx((const run_ctx *)r); }
static void time_dw(const void *r) { cudnn_dw((const run_ctx *)r); }
static void time_dbias_cudnn(const void *r) { cudnn_dbias((const run_ctx *)r); }
static void time_dbias_own(const void *r) { own_dbias((const run_ctx *)r); }

typedef struct {
    int id;
    const char *name;
    void (*epilogue)(const run_ctx *);
} version;

static const version versions[] = {
    {1, "eager-like: cuDNN conv, naive pool, LSE, relu", launch_v1},
    {2, "v1 with cuDNN's pooling (library baseline)", launch_v2},
    {3, "one fused kernel, float2 windows, two-pass LSE", launch_v3},
    {4, "fused, online LSE: c read once", launch_v4},
    {5, "fused, 4 outputs a thread, 16-byte loads", launch_v5},
};
#define N_VERSIONS ((int)(sizeof versions / sizeof versions[0]))

typedef struct {
    const char *id;
    const char *name;
    void (*forward)(const run_ctx *);
    void (*backward)(const run_ctx *);
    void (*grads)(const run_ctx *);
} bwd_version;

static const bwd_version bwd_versions[] = {
    {"b1", "autograd-like: saved indices, memset + scatter", launch_v1_saving, launch_b1, grads_b1},
    {"b2", "fused: v5, then recompute + write all of dc", launch_v5, launch_b2, grads_b2},
};
#define N_BWD ((int)(sizeof bwd_versions / sizeof bwd_versions[0]))

typedef struct {
    const run_ctx *r;
    const version *v;       /* forward: the epilogue */
    const bwd_version *b;   /* or a backward version */
    int whole;              /* forward: whole model; backward: training step */
} job;

static void run_job(const void *p)
{
    const job *j = (const job *)p;
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
#define TOL_SUM 1e-6 /* reduced gradients: against the sum of their terms' magnitudes */

/* y = relu(logsumexp) grows with its input (about 500 at x*1000), and float rounding is
 * relative: the absolute bound scales with the largest reference value */
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
    float *x, *weight, *bias, *g; /* host */
    double *xd, *wd, *bd;
    run_ctx r;
    cudnn_ctx cudnn;
    float *host_out, *host_c, *host_dc, *host_dx, host_dw[N_WEIGHT], host_dbias[C_OUT];
    double *ref_c, *ref_model, *ref_epilogue;
    int have_bwd_refs;
    double *ref_dc, *ref_dx, *ref_dw, ref_dbias[C_OUT];
    double *abs_dw, abs_dbias[C_OUT];
} problem;

static void problem_init(problem *pb, const shape *s, int sm_count, uint64_t seed)
{
    memset(pb, 0, sizeof *pb);
    pb->sh = *s;
    size_t nx = x_elems(s), nc = conv_elems(s), ny = out_elems(s);
    pb->x = (float *)host_alloc(4 * nx), pb->xd = (double *)host_alloc(8 * nx);
    pb->weight = (float *)host_alloc(4 * N_WEIGHT), pb->wd = (double *)host_alloc(8 * N_WEIGHT);
    pb->bias = (float *)host_alloc(4 * C_OUT), pb->bd = (double *)host_alloc(8 * C_OUT);
    pb->g = (float *)host_alloc(4 * ny);
    pb->host_out = (float *)host_alloc(4 * ny), pb->host_c = (float *)host_alloc(4 * nc);
    pb->host_dc = (float *)host_alloc(4 * nc), pb->host_dx = (float *)host_alloc(4 * nx);
    pb->ref_c = (double *)host_alloc(8 * nc);
    pb->ref_model = (double *)host_alloc(8 * ny), pb->ref_epilogue = (double *)host_alloc(8 * ny);
    pb->ref_dc = (double *)host_alloc(8 * nc);
    pb->ref_dx = (double *)host_alloc(8 * nx), pb->ref_dw = (double *)host_alloc(8 * N_WEIGHT);
    pb->abs_dw = (double *)host_alloc(8 * N_WEIGHT);
    rng_state rng, rng_g;
    rng_seed(&rng, seed);
    fill_uniform(pb->x, nx, 0.0, 1.0, &rng);                                     /* torch.rand */
    init_conv_params(pb->weight, N_WEIGHT, pb->bias, C_OUT, C_IN * KVOL, &rng); /* fan_in 864 */
    rng_seed(&rng_g, seed ^ 0x5DEECE66Dull);
    fill_normal(pb->g, ny, &rng_g);

    run_ctx *r = &pb->r;
    r->sh = *s;
    r->sm_count = sm_count;
    float *x = (float *)gpu_alloc(4 * nx, "input x"), *w = (float *)gpu_alloc(4 * N_WEIGHT, "weight");
    float *b = (float *)gpu_alloc(4 * C_OUT, "bias"), *g = (float *)gpu_alloc(4 * ny, "g");
    r->x = x, r->weight = w, r->bias = b, r->g = g;
    r->c = (float *)gpu_alloc(4 * nc, "conv output");
    r->y = (float *)gpu_alloc(4 * ny, "output y");
    r->p = (float *)gpu_alloc(4 * pool_elems(s), "pooled p");
    r->dp = (float *)gpu_alloc(4 * pool_elems(s), "dL/dp");
    r->idx = (int *)gpu_alloc(4 * pool_elems(s), "pool argmax");
    r->z = (float *)gpu_alloc(4 * ny, "z");
    r->t0 = (float *)gpu_alloc(4 * ny, "dz");
    r->dc = (float *)gpu_alloc(4 * nc, "dL/dc");
    r->dx = (float *)gpu_alloc(4 * nx, "dL/dx");
    r->dw = (float *)gpu_alloc(4 * N_WEIGHT, "dL/dw");
    r->dbias = (float *)gpu_alloc(4 * C_OUT, "dL/dbias");
    r->partials = (float *)gpu_alloc(4 * DBIAS_BLOCKS * C_OUT, "partial sums");
    CUDA_CHECK(cudaMemcpy(x, pb->x, 4 * nx, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(w, pb->weight, 4 * N_WEIGHT, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(b, pb->bias, 4 * C_OUT, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(g, pb->g, 4 * ny, cudaMemcpyHostToDevice));
    gpu_poison(r->c, nc);
    cudnn_setup(&pb->cudnn, s, x, w, r->c, r->dc, r->dx, r->dw);
    r->cudnn = &pb->cudnn;
}

/* uploads x, runs the cuDNN conv, computes the forward references. y's reference comes from the
 * double conv; the backward's from the GPU's conv output (verified against the double conv):
 * the argmax is discontinuous, and where two window values are within float rounding of each
 * other the float and double convs may pick different elements. Measured at the KernelBench
 * shape: dc off by up to 2e-2 at such windows against a reference on the double conv. */
static void problem_refresh(problem *pb)
{
    const shape *s = &pb->sh;
    CUDA_CHECK(cudaMemcpy((void *)pb->r.x, pb->x, 4 * x_elems(s), cudaMemcpyHostToDevice));
    launch_conv(&pb->r);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(pb->host_c, pb->r.c, 4 * conv_elems(s), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < x_elems(s); i++)
        pb->xd[i] = pb->x[i];
    for (int i = 0; i < N_WEIGHT; i++)
        pb->wd[i] = pb->weight[i];
    for (int i = 0; i < C_OUT; i++)
        pb->bd[i] = pb->bias[i];
    conv3d_ref(s, pb->xd, pb->wd, pb->bd, pb->ref_c);
    epilogue_ref(s, NULL, pb->ref_c, pb->ref_model);
    epilogue_ref(s, pb->host_c, NULL, pb->ref_epilogue);
    pb->have_bwd_refs = 0;
}

static void problem_set_conv(problem *pb, const float *c)
{
    const shape *s = &pb->sh;
    memcpy(pb->host_c, c, 4 * conv_elems(s));
    CUDA_CHECK(cudaMemcpy(pb->r.c, c, 4 * conv_elems(s), cudaMemcpyHostToDevice));
    epilogue_ref(s, pb->host_c, NULL, pb->ref_epilogue);
    pb->have_bwd_refs = 0;
}

static void problem_bwd_refs(problem *pb)
{
    const shape *s = &pb->sh;
    if (pb->have_bwd_refs)
        return;
    epilogue_backward_ref(s, pb->host_c, NULL, pb->g, pb->ref_dc);
    conv3d_backward_ref(s, pb->xd, pb->wd, pb->ref_dc, pb->ref_dx, pb->ref_dw, pb->ref_dbias,
                        pb->abs_dw, pb->abs_dbias);
    /* Each element's bound (TOL_SUM times the sum of its terms' magnitudes) also gets the
     * largest such sum of its tensor: a componentwise plus a normwise bound. With x * 1000 the
     * softmax of a channel that is never the largest is subnormal everywhere; its dw, about
     * 1e-36, is then at the mercy of the float dc's flush to zero (the fused backward's __expf)
     * and of cuDNN's algorithm, some of which bound their error by the tensor's norm. That
     * algorithm is chosen by timing, which compute-sanitizer changes: only there did the
     * componentwise bound alone fail. Every other element keeps a bound of 2e-6 of its own sum
     * or tighter than the tensor's largest, so a wrong index or a lost term still fails. */
    double big = 0.0;
    for (int i = 0; i < N_WEIGHT; i++)
        big = fmax(big, pb->abs_dw[i]);
    for (int i = 0; i < N_WEIGHT; i++)
        pb->abs_dw[i] += big;
    big = 0.0;
    for (int i = 0; i < C_OUT; i++)
        big = fmax(big, pb->abs_dbias[i]);
    for (int i = 0; i < C_OUT; i++)
        pb->abs_dbias[i] += big;
    pb->have_bwd_refs = 1;
}

static void problem_free(problem *pb)
{
    run_ctx *r = &pb->r;
    cudnn_destroy(&pb->cudnn);
    const void *dev[] = {r->x, r->weight, r->bias, r->g, r->c, r->y, r->p, r->dp, r->idx, r->z,
                         r->t0, r->dc, r->dx, r->dw, r->dbias, r->partials};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        CUDA_CHECK(cudaFree((void *)dev[i]));
    void *host[] = {pb->x, pb->xd, pb->weight, pb->wd, pb->bias, pb->bd, pb->g, pb->host_out,
                    pb->host_c, pb->host_dc, pb->host_dx, pb->ref_c, pb->ref_model,
                    pb->ref_epilogue, pb->ref_dc, pb->ref_dx,
                    pb->ref_dw, pb->abs_dw};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
}

/* forward: poison y, run, compare */
static verify_result verify_fwd(problem *pb, const version *v, int whole)
{
    job j = {&pb->r, v, NULL, whole};
    gpu_poison(pb->r.y, out_elems(&pb->sh));
    run_job(&j);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(pb->host_out, pb->r.y, 4 * out_elems(&pb->sh), cudaMemcpyDeviceToHost));
    return verify_scaled(pb->host_out, whole ? pb->ref_model : pb->ref_epilogue, out_elems(&pb->sh));
}

/* backward: poison every output, run, compare each; returns how many passed of *n */
#define N_GRADS 5
static int verify_bwd(problem *pb, const bwd_version *b, int train, verify_result res[N_GRADS],
                      const char *names[N_GRADS], int *n_out)
{
    run_ctx *r = &pb->r;
    const shape *s = &pb->sh;
    problem_bwd_refs(pb);
    gpu_poison(r->y, out_elems(s));
    gpu_poison(r->dc, conv_elems(s));
    gpu_poison(r->dx, x_elems(s));
    gpu_poison(r->dw, N_WEIGHT);
    gpu_poison(r->dbias, C_OUT);
    job j = {r, NULL, b, train};
    run_job(&j);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(pb->host_out, r->y, 4 * out_elems(s), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(pb->host_dc, r->dc, 4 * conv_elems(s), cudaMemcpyDeviceToHost));
    int n = 0;
    names[n] = "y";
    res[n++] = verify_scaled(pb->host_out, train ? pb->ref_model : pb->ref_epilogue, out_elems(s));
    names[n] = "dc";
    res[n++] = verify_scaled(pb->host_dc, pb->ref_dc, conv_elems(s));
    if (train) {
        CUDA_CHECK(cudaMemcpy(pb->host_dx, r->dx, 4 * x_elems(s), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(pb->host_dw, r->dw, 4 * N_WEIGHT, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(pb->host_dbias, r->dbias, 4 * C_OUT, cudaMemcpyDeviceToHost));
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

static void check_all(problem *pb, const char *label, int only, int epilogue_only)
{
    char shape_s[64];
    snprintf(shape_s, sizeof shape_s, "%dx32x%dx%dx%d", pb->sh.n, pb->sh.d, pb->sh.h, pb->sh.w);
    for (int i = 0; i < N_VERSIONS; i++) {
        const version *v = &versions[i];
        if (only && only != v->id)
            continue;
        for (int whole = 0; whole < 2; whole++) {
            if (whole && epilogue_only)
                continue;
            verify_result a = verify_fwd(pb, v, whole), b = verify_fwd(pb, v, whole);
            /* the cuDNN conv may be nondeterministic: whole-model runs are not compared */
            int same = (whole && !pb->cudnn.conv.fwd_det) || (a.rel_l2 == b.rel_l2 && a.max_abs == b.max_abs);
            check(a.pass && b.pass && same, "v%d %-8s %-16s %-12s rel_l2 %.1e max_abs %.1e%s",
                  v->id, whole ? "model" : "epilogue", shape_s, label, a.rel_l2, a.max_abs,
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
            /* epilogue scope: dc must be the same bits twice (no atomics anywhere) */
            int same = train || res[1].max_abs == res2[1].max_abs;
            char line[512];
            int len = 0;
            for (int k = 0; k < n; k++)
                len += snprintf(line + len, sizeof line - len, " %s %.1e%s", names[k], res[k].rel_l2,
                                res[k].pass && res2[k].pass ? "" : " (FAILED)");
            check(pa == n && pb2 == n && same, "%s %-8s %-16s %-12s rel_l2:%s%s",
                  bwd_versions[i].id, train ? "train" : "fwd+bwd", shape_s, label, line,
                  same ? "" : " (dc differs between runs)");
        }
}

/* --- CPU checks: everywhere, CI included --- */

typedef struct {
    shape sh;
    double *x, *w, *b, *c, *y;
    const float *g;
    int epilogue_only;
} loss_ctx;

static double model_loss(const double *unused, void *p)
{
    loss_ctx *L = (loss_ctx *)p;
    (void)unused;
    if (!L->epilogue_only)
        conv3d_ref(&L->sh, L->x, L->w, L->b, L->c);
    epilogue_ref(&L->sh, NULL, L->c, L->y);
    double sum = 0.0;
    for (size_t i = 0; i < out_elems(&L->sh); i++)
        sum += L->g[i] * L->y[i];
    return sum;
}

/* Section 2b's gradients against central differences of L = sum g y on a tiny shape with 4
 * output positions. dw is checked for output channel 0 (864 of 55296 weights: each costs two
 * model evaluations). The second case shifts the conv bias down until relu cuts some, not all,
 * of the 4 outputs, so both branches of its gradient are exercised. */
static void gradient_checks(uint64_t seed)
{
    shape s = make_shape(1, 2, 4, 4);
    size_t nx = x_elems(&s), nc = conv_elems(&s), ny = out_elems(&s);
    double *x = (double *)host_alloc(8 * nx), *w = (double *)host_alloc(8 * N_WEIGHT), b[C_OUT];
    double *c = (double *)host_alloc(8 * nc), *y = (double *)host_alloc(8 * ny);
    double *dc = (double *)host_alloc(8 * nc), *dx = (double *)host_alloc(8 * nx);
    double *dw = (double *)host_alloc(8 * N_WEIGHT), db[C_OUT];
    float *g = (float *)host_alloc(4 * ny), *tmp = (float *)host_alloc(4 * N_WEIGHT);
    rng_state rng;
    rng_seed(&rng, seed + 11);
    for (size_t i = 0; i < nx; i++)
        x[i] = rng_uniform(&rng);
    init_conv_params(tmp, N_WEIGHT, NULL, 0, C_IN * KVOL, &rng);
    for (int i = 0; i < N_WEIGHT; i++)
        w[i] = tmp[i];
    init_conv_params(tmp, C_OUT, NULL, 0, C_IN * KVOL, &rng);
    fill_normal(g, ny, &rng);
    loss_ctx L = {s, x, w, b, c, y, g, 0};
    double shift = 0.0;
    for (int k = 0; k < 2; k++) {
        /* lowering every conv bias by shift lowers every pooled value, and so every z, by exactly
         * shift (LSE(p - s) = LSE(p) - s): halfway between the 2nd and 3rd smallest z of the first
         * case cuts exactly two of the four outputs */
        for (int i = 0; i < C_OUT; i++)
            b[i] = tmp[i] - shift;
        conv3d_ref(&s, x, w, b, c);
        epilogue_ref(&s, NULL, c, y);
        size_t zeros = 0;
        for (size_t i = 0; i < ny; i++)
            zeros += y[i] == 0.0;
        float *gf = g;
        epilogue_backward_ref(&s, NULL, c, gf, dc);
        conv3d_backward_ref(&s, x, w, dc, dx, dw, db, NULL, NULL);
        L.epilogue_only = 1;
        double e_c = gradcheck(model_loss, &L, c, nc, dc, 1e-6, NULL);
        L.epilogue_only = 0;
        double e_w = gradcheck(model_loss, &L, w, C_IN * KVOL, dw, 1e-6, NULL);
        double e_b = gradcheck(model_loss, &L, b, C_OUT, db, 1e-6, NULL);
        double e_x = gradcheck(model_loss, &L, x, nx, dx, 1e-6, NULL);
        char when[64];
        snprintf(when, sizeof when, k ? "conv bias - %.3f" : "default init", shift);
        check(e_c < 1e-6 && (k == 0 ? zeros == 0 : zeros == 2),
              "cpu: gradcheck dL/dc (%zu values), %s, %zu of %zu outputs relu-cut: rel %.1e", nc,
              when, zeros, ny, e_c);
        check(e_w < 1e-6, "cpu: gradcheck dL/dw (output channel 0, 864 weights), %s: rel %.1e", when, e_w);
        check(e_b < 1e-6, "cpu: gradcheck dL/dbias (64), %s: rel %.1e", when, e_b);
        check(e_x < 1e-6, "cpu: gradcheck dL/dx (%zu inputs), %s: rel %.1e", nx, when, e_x);
        if (k == 0) { /* every z > 0 here, so y = z: sort the four */
            double zs[4] = {y[0], y[1], y[2], y[3]};
            for (int i = 0; i < 4; i++)
                for (int j = i + 1; j < 4; j++)
                    if (zs[j] < zs[i]) {
                        double tz = zs[i];
                        zs[i] = zs[j], zs[j] = tz;
                    }
            shift = 0.5 * (zs[1] + zs[2]);
        }
    }
    free(x), free(w), free(c), free(y), free(dc), free(dx), free(dw), free(g), free(tmp);
}

#define GOLDEN_DIR "data/golden/ch02"


/* PyTorch's model in float64 on small shapes (`make golden`) against this reference: catches a
 * reference that agrees with itself but means something else, e.g. a max pool that routes the
 * gradient to the last maximum, or a ceil-mode pool */
static void golden_case(const char *dir, const char *name)
{
    int64_t dims[5];
    char err[256];
    if (parse_shape(name, 5, dims, err, sizeof err) || shape_problem(dims)) {
        check(0, "golden: %s is not a shape of this model", dir);
        return;
    }
    shape s = make_shape((int)dims[0], (int)dims[2], (int)dims[3], (int)dims[4]);
    size_t nx = x_elems(&s), nc = conv_elems(&s), ny = out_elems(&s);
    const char *names[] = {"x", "conv_weight", "conv_bias", "grad_output", "out", "grad_conv_out",
                           "grad_conv_weight", "grad_conv_bias", "grad_x"};
    size_t sizes[] = {nx, N_WEIGHT, C_OUT, ny, ny, nc, N_WEIGHT, C_OUT, nx};
    float *t[9];
    int ok = 1;
    for (int i = 0; i < 9; i++)
        ok &= (t[i] = npy_load(dir, names[i], sizes[i])) != NULL;
    if (ok) {
        double *xd = (double *)host_alloc(8 * nx), *wd = (double *)host_alloc(8 * N_WEIGHT);
        double bd[C_OUT], dbias[C_OUT], abs_dbias[C_OUT];
        double *c = (double *)host_alloc(8 * nc), *y = (double *)host_alloc(8 * ny);
        double *dc = (double *)host_alloc(8 * nc), *dx = (double *)host_alloc(8 * nx);
        double *dw = (double *)host_alloc(8 * N_WEIGHT), *abs_dw = (double *)host_alloc(8 * N_WEIGHT);
        for (size_t i = 0; i < nx; i++)
            xd[i] = t[0][i];
        for (int i = 0; i < N_WEIGHT; i++)
            wd[i] = t[1][i];
        for (int i = 0; i < C_OUT; i++)
            bd[i] = t[2][i];
        conv3d_ref(&s, xd, wd, bd, c);
        epilogue_ref(&s, NULL, c, y);
        epilogue_backward_ref(&s, NULL, c, t[3], dc);
        conv3d_backward_ref(&s, xd, wd, dc, dx, dw, dbias, abs_dw, abs_dbias);
        verify_result v[5] = {
            verify_f32(t[4], y, ny, 1e-6, 1e-6),
            verify_f32(t[5], dc, nc, 1e-6, 1e-6),
            verify_sum_f32(t[6], dw, abs_dw, N_WEIGHT, 1e-6),
            verify_sum_f32(t[7], dbias, abs_dbias, C_OUT, 1e-6),
            verify_f32(t[8], dx, nx, 1e-6, 1e-6),
        };
        check(v[0].pass && v[1].pass && v[2].pass && v[3].pass && v[4].pass,
              "golden %s (PyTorch float64): rel_l2 y %.1e dc %.1e dw %.1e dbias %.1e dx %.1e", name,
              v[0].rel_l2, v[1].rel_l2, v[2].rel_l2, v[3].rel_l2, v[4].rel_l2);
        free(xd), free(wd), free(c), free(y), free(dc), free(dx), free(dw), free(abs_dw);
    } else {
        check(0, "golden %s: missing or malformed tensors", name);
    }
    for (int i = 0; i < 9; i++)
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
        for (int d = 0; d < s.d; d++)
            for (int h = 0; h < s.h; h++)
                for (int ww = 0; ww < s.w; ww++) {
                    double acc = b[co];
                    for (int ci = 0; ci < C_IN; ci++)
                        for (int k = 0; k < KVOL; k++) {
                            int sd = d + k / 9 - 1, sh = h + (k / 3) % 3 - 1, sw = ww + k % 3 - 1;
                            if (sd >= 0 && sd < s.d && sh >= 0 && sh < s.h && sw >= 0 && sw < s.w)
                                acc += x[((size_t)ci * s.d + sd) * s.h * s.w + sh * s.w + sw] *
                                       w[(co * C_IN + ci) * KVOL + k];
                        }
                    worst = fmax(worst, fabs(acc - c[((size_t)co * s.d + d) * s.h * s.w + h * s.w + ww]));
                }
    check(worst < 1e-12, "cpu: reference conv = direct sum on 1x32x3x4x5, max diff %.1e", worst);
    free(x), free(w), free(c);

    /* max pool ties: the first maximum takes the gradient */
    shape t = make_shape(1, 2, 2, 2);
    double plane[8] = {0.5, 2.0, 1.0, 2.0, -1.0, 2.0, 0.0, 2.0};
    int arg;
    double m = window_max_ref(plane, &t, 0, 0, 0, &arg);
    check(m == 2.0 && arg == 1, "cpu: a window with four equal maxima routes to the first (index 1)");
    gradient_checks(seed);
    golden_checks();
}

/* --- GPU checks --- */

static const int test_shapes[][4] = {
    /* N, D, H, W (input 32 channels), pooled extents floor(L / 2) */
    {1, 2, 2, 2},   /* one output position */
    {1, 3, 5, 7},   /* every extent odd: the last row, column and plane are dropped */
    {2, 4, 6, 9},   /* W odd: scalar window loads */
    {1, 2, 3, 66},  /* 33 outputs a row: a warp and one */
    {3, 3, 2, 130}, /* 65 a row, W not a multiple of 4 */
    {1, 2, 2, 264}, /* 132 a row: v5's 16-byte path, a partial last group */
    {2, 5, 4, 16},  /* odd depth, W a multiple of 4 */
};

static void gpu_checks(int sm_count, uint64_t seed, int only, const int64_t *one)
{
    int n_shapes = one ? 1 : (int)(sizeof test_shapes / sizeof test_shapes[0]);
    for (int t = 0; t < n_shapes; t++) {
        shape s = one ? make_shape((int)one[0], (int)one[2], (int)one[3], (int)one[4])
                      : make_shape(test_shapes[t][0], test_shapes[t][1], test_shapes[t][2],
                                   test_shapes[t][3]);
        problem pb;
        problem_init(&pb, &s, sm_count, seed + t);
        problem_refresh(&pb);
        verify_result vc = verify_f32(pb.host_c, pb.ref_c, conv_elems(&s), TOL_REL_L2, TOL_ABS);
        check(vc.pass, "cuDNN conv = reference on %dx32x%dx%dx%d, rel_l2 %.1e", s.n, s.d, s.h, s.w,
              vc.rel_l2);
        check_all(&pb, "rand", only, 0);
        if (t == 1 || one) {
            for (size_t i = 0; i < x_elems(&s); i++)
                pb.x[i] *= 1000.0f;
            problem_refresh(&pb);
            check_all(&pb, "x*1000", only, 0);
            /* conv outputs near +100, near -100 (relu cuts every z), and mixed */
            float *c = (float *)host_alloc(4 * conv_elems(&s));
            rng_state rng;
            rng_seed(&rng, seed);
            const char *labels[3] = {"c ~ +100", "c ~ -100", "c ~ +-100"};
            for (int kind = 0; kind < 3; kind++) {
                for (size_t i = 0; i < conv_elems(&s); i++) {
                    double sign = kind == 0 ? 1 : kind == 1 ? -1 : ((i / s.sc) % 2 ? 1 : -1);
                    c[i] = (float)(sign * 100.0 + 8.0 * (rng_uniform(&rng) - 0.5));
                }
                problem_set_conv(&pb, c);
                check_all(&pb, labels[kind], only, 1);
            }
            free(c);
        }
        problem_free(&pb);
    }
}

/* ============================================================================================
 * 6. main
 * ========================================================================================== */

static const char *help_text =
    "\nChapter 2, KernelBench level 2 model #43:\n"
    "  Conv3d(32->64, k3, s1, p1) -> MaxPool3d(2) -> logsumexp over channels -> relu\n"
    "  --shape is N x 32 x D x H x W (default 4x32x32x128x128), D, H, W >= 2; the output is\n"
    "  N x 1 x D/2 x H/2 x W/2 (floor). Limits: batch and depth <= 65535, conv output < 2^31.\n"
    "  --dump DIR writes x.npy, conv_weight.npy (64,32,3,3,3), conv_bias.npy (64), conv_out.npy\n"
    "  (the cuDNN conv output the epilogue versions read), out_v1.npy .. out_v5.npy; without\n"
    "  --version also grad_output.npy and, from each backward version's training step (b1, b2),\n"
    "  grad_conv_out_bK.npy, grad_conv_weight_bK.npy, grad_conv_bias_bK.npy, grad_x_bK.npy.\n"
    "  --version K selects forward version K; the backward versions run when it is absent.\n"
    "  Check a dump: python3 data/pytorch_peer.py check DIR --chapter 2\n";

static void dump_all(problem *pb, const char *dir, int only)
{
    const shape *s = &pb->sh;
    mkdir(dir, 0777);
    int64_t xs[5] = {s->n, C_IN, s->d, s->h, s->w}, ws[5] = {C_OUT, C_IN, KS, KS, KS};
    int64_t bs[1] = {C_OUT}, cs[5] = {s->n, C_OUT, s->d, s->h, s->w};
    int64_t ys[5] = {s->n, 1, s->pd, s->ph, s->pw};
    npy_save_or_exit(dir, "x", pb->x, 5, xs);
    npy_save_or_exit(dir, "conv_weight", pb->weight, 5, ws);
    npy_save_or_exit(dir, "conv_bias", pb->bias, 1, bs);
    npy_save_or_exit(dir, "conv_out", pb->host_c, 5, cs);
    for (int i = 0; i < N_VERSIONS; i++) {
        if (only && only != versions[i].id)
            continue;
        verify_fwd(pb, &versions[i], 0);
        char name[32];
        snprintf(name, sizeof name, "out_v%d", versions[i].id);
        npy_save_or_exit(dir, name, pb->host_out, 5, ys);
    }
    if (!only) {
        npy_save_or_exit(dir, "grad_output", pb->g, 5, ys);
        for (int i = 0; i < N_BWD; i++) {
            verify_result res[N_GRADS];
            const char *names[N_GRADS];
            int n = 0;
            verify_bwd(pb, &bwd_versions[i], 1, res, names, &n);
            char name[64];
            snprintf(name, sizeof name, "grad_conv_out_%s", bwd_versions[i].id);
            npy_save_or_exit(dir, name, pb->host_dc, 5, cs);
            snprintf(name, sizeof name, "grad_conv_weight_%s", bwd_versions[i].id);
            npy_save_or_exit(dir, name, pb->host_dw, 5, ws);
            snprintf(name, sizeof name, "grad_conv_bias_%s", bwd_versions[i].id);
            npy_save_or_exit(dir, name, pb->host_dbias, 1, bs);
            snprintf(name, sizeof name, "grad_x_%s", bwd_versions[i].id);
            npy_save_or_exit(dir, name, pb->host_dx, 5, xs);
        }
    }
    printf("wrote the inputs, parameters, outputs and gradients as .npy to %s/\n", dir);
}

int main(int argc, char **argv)
{
    cli_args a;
    cli_parse_or_exit(argc, argv, 5, &a, help_text);
    if (a.list) {
        for (int i = 0; i < N_VERSIONS; i++)
            printf("v%d  %s\n", versions[i].id, versions[i].name);
        for (int i = 0; i < N_BWD; i++)
            printf("%s  %s\n", bwd_versions[i].id, bwd_versions[i].name);
        return 0;
    }
    int64_t dims[5] = {4, 32, 32, 128, 128};
    cli_version_shape_or_exit(&a, N_VERSIONS, 5, dims, shape_problem);
    setenv("NVIDIA_TF32_OVERRIDE", "0", 1);

    if (a.test) {
        cpu_checks(a.seed);
        if (gpu_count() == 0) {
            skip("GPU checks (every version on awkward shapes and extreme values): no CUDA device");
        } else {
            cudaDeviceProp p;
            CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
            gpu_checks(p.multiProcessorCount, a.seed, a.version, a.ndim ? dims : NULL);
        }
        return checks_failed() ? 1 : 0;
    }
    gpu_require_or_exit();
    device_info dev;
    device_info_get(&dev);
    shape s = make_shape((int)dims[0], (int)dims[2], (int)dims[3], (int)dims[4]);
    char shape_s[64];
    snprintf(shape_s, sizeof shape_s, "%dx32x%dx%dx%d", s.n, s.d, s.h, s.w);
    problem pb;
    problem_init(&pb, &s, dev.sm_count, a.seed);
    problem_refresh(&pb);
    verify_result vc = verify_f32(pb.host_c, pb.ref_c, conv_elems(&s), TOL_REL_L2, TOL_ABS);
    if (!vc.pass) {
        fprintf(stderr, "error: cuDNN's conv output does not match the reference: ");
        verify_print(stderr, &vc);
        fputc('\n', stderr);
        return 1;
    }
    report_ctx ctx = {dev.tag, dev.name, "02", shape_s, dev.copy_gbps, dev.sm_count,
                      dev.l2_bytes / 1e6};
    report_row rows[2 * N_VERSIONS + 2 * N_BWD];
    char names[2 * N_VERSIONS][8];
    int n_rows = 0, failed = 0;
    double first[4] = {0, 0, 0, 0}; /* v1 / b1 per scope */
    report_header(stdout, &ctx);
    for (int i = 0; i < N_VERSIONS; i++) {
        const version *v = &versions[i];
        if (a.version && a.version != v->id)
            continue;
        for (int whole = 0; whole < 2; whole++) {
            job j = {&pb.r, v, NULL, whole};
            verify_result before = verify_fwd(&pb, v, whole);
            timing t = gpu_time(run_job, &j, a.reps);
            verify_result after = verify_fwd(&pb, v, whole);
            snprintf(names[n_rows], sizeof names[0], "v%d", v->id);
            report_row *row = &rows[n_rows];
            *row = (report_row){names[n_rows++], v->name, whole ? "model_fwd" : "epilogue_fwd", t,
                                whole ? model_bytes(&s) : epilogue_bytes(&s), 0};
            if (v->id == 1)
                first[whole] = t.median_ms;
            if (first[whole] > 0)
                row->speedup_v1 = first[whole] / t.median_ms;
            report_print(stdout, &ctx, row);
            if (!before.pass || !after.pass) {
                failed = 1;
                printf("         ^ FAILED verification: ");
                verify_print(stdout, before.pass ? &after : &before);
                putchar('\n');
            }
        }
    }
    for (int i = 0; i < N_BWD && a.version == 0; i++) {
        const bwd_version *b = &bwd_versions[i];
        for (int train = 0; train < 2; train++) {
            job j = {&pb.r, NULL, b, train};
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
    timing tc = gpu_time(time_conv, &pb.r, a.reps);
    printf("cuDNN Conv3d alone (algo %d, %s, + bias): median %.4f ms [%.4f - %.4f], %.1f TFLOP/s\n",
           (int)pb.cudnn.conv.fwd_algo, pb.cudnn.conv.fwd_det ? "deterministic" : "nondeterministic",
           tc.median_ms, tc.min_ms, tc.max_ms, conv_flops(&s) / (tc.median_ms * 1e9));
    if (a.version == 0) {
        timing tx = gpu_time(time_dx, &pb.r, a.reps), tw = gpu_time(time_dw, &pb.r, a.reps);
        timing tb = gpu_time(time_dbias_cudnn, &pb.r, a.reps), to = gpu_time(time_dbias_own, &pb.r, a.reps);
        printf("in the training step, median ms: cuDNN dx (backward data, algo %d) %.4f, dw "
               "(backward filter, algo %d, %s) %.4f; dbias: cuDNN %.4f, ours %.4f\n",
               (int)pb.cudnn.conv.dx_algo, tx.median_ms, (int)pb.cudnn.conv.dw_algo,
               pb.cudnn.conv.dw_det ? "deterministic" : "nondeterministic", tw.median_ms, tb.median_ms,
               to.median_ms);
    }
    printf("floors at %.0f GB/s: epilogue %.1f MB -> %.4f ms; epilogue fwd+bwd %.1f MB -> %.4f ms; "
           "the conv: %.1f GFLOP\n",
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
