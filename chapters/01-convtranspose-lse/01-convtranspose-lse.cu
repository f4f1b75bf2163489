/*
 * Chapter 1: KernelBench level 2, model #58
 *
 *     y = clamp( LSE_c(ConvTranspose3d(x)) * sigmoid(LSE + 3) / 6 - b, -1, 1 )
 *
 *   x         N x 3 x D x H x W                  (KernelBench: 128 x 3 x 16 x 32 x 32, rand)
 *   conv      ConvTranspose3d(3 -> 16, kernel 3, stride 2, padding 1, bias)
 *             -> N x 16 x (2D-1) x (2H-1) x (2W-1) (128 x 16 x 31 x 63 x 63: 1.008 GB of float32)
 *   z         logsumexp over the 16 channels, keepdim -> N x 1 x OD x OH x OW
 *   a         z * sigmoid(z + 3) / 6               (not nn.Hardswish: a smooth cousin of it)
 *   s, y      s = a - b (b: one learnable scalar), y = clamp(s, -1, 1)
 *
 * The versions, each a fix of the one before (make chapter-1 runs them all; --version K one):
 *   v1  eager-like: cuDNN transposed conv, then one naive kernel per PyTorch op (7 kernels),
 *       every intermediate in DRAM. This is the time PyTorch eager pays.
 *   v2  one fused epilogue kernel: a thread per output position loops over the 16 channels;
 *       adjacent threads read adjacent positions, so every channel's load is coalesced.
 *   v3  the layout a first instinct picks: a block per position, a thread per channel, a
 *       shared-memory tree. Measured to show why it is an anti-pattern.
 *   v4  v2 with 16-byte loads (four positions a thread), a single-pass (online) logsumexp and
 *       the fast exp/log intrinsics.
 *   v5  full fusion: the transposed convolution computed inside the kernel, by output parity,
 *       weights in constant memory, input tile in shared memory. The 1 GB conv output is never
 *       written: the whole model reads 25 MB and writes 63 MB.
 *   v6  v5 tuned by its profile: weights as shared-memory float4 broadcasts instead of constant
 *       loads, the logsumexp in base 2, the channel loop unrolled by 2.
 * Backward (section 2b derives it; each runs as epilogue forward+backward and as a training step
 * with cuDNN's transposed conv before and its dx, dw, dbias after):
 *   b1  autograd-like: v1 keeps z, sigmoid(z + 3) and s; one kernel per op backward (8).
 *   b2  fused: v4, then one kernel that recomputes z from the conv output and writes dc;
 *       db by a deterministic two-stage block reduction (no atomics).
 *
 *   build/ch01                     verify and time every version at the KernelBench shape
 *   build/ch01 --test              CPU checks + every version on awkward shapes and extreme values
 *   build/ch01 --shape 2x3x5x7x9 --dump out/   tensors for data/pytorch_peer.py check
 *
 * Sections: 1 the model and its byte/FLOP counts; 2 the CPU reference; 3 the GPU versions;
 * 4 the version table and launchers; 5 verification and tests; 6 main.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../common/gpu.h"
#include "../../common/reduce.cuh"

/* ============================================================================================
 * 1. The model, and what it must cost
 *
 * Shape. With stride 2, padding 1, kernel 3 an input length L gives (L-1)*2 - 2 + 3 = 2L - 1
 * outputs. Write S = OD * OH * OW for the positions of one sample.
 *
 * Bytes (float32). The epilogue must read the conv output once and write y once:
 *     epilogue  = 16 N S * 4  +  N S * 4  (+ 4 bytes of b)
 *     KernelBench shape: 1,007,935,488 + 62,995,968 + 4 = 1.071 GB.
 *     At the H100's measured copy ceiling (about 3000 GB/s read + write) that is about 0.36 ms:
 *     no epilogue kernel can beat it, because the conv output has to come in from DRAM.
 * The whole model need only read x and the parameters and write y:
 *     model     = 3 N D H W * 4 + (1296 + 16 + 1) * 4 + N S * 4 = 25.2 MB + 63.0 MB = 88 MB,
 *     about 0.03 ms at the ceiling. Fusing the conv removes the 1 GB round trip entirely.
 * FLOPs. Each output position along one axis receives 1 tap (even index) or 2 taps (odd), so
 * one axis of length L contributes 3L - 2 (tap, output) pairs; the conv is
 *     2 * N * 16 * 3 * (3D-2)(3H-2)(3W-2) = 4.99 GFLOP at the KernelBench shape,
 * about 0.075 ms at the H100 SXM's 67 TFLOP/s fp32 (datasheet) if every FMA issued at peak.
 * The epilogue adds 16 exps, one log and one more exp per position: 268 M special-function
 * operations at the KernelBench shape. So the fused model is bound by arithmetic and issue,
 * not by DRAM: its floor is the conv's FLOPs, not the bytes.
 * ========================================================================================== */

#define C_IN 3
#define C_OUT 16
#define KS 3
#define N_WEIGHT (C_IN * C_OUT * KS * KS * KS) /* PyTorch layout: in x out x kD x kH x kW */

typedef struct {
    int n, d, h, w;   /* input */
    int od, oh, ow;   /* conv output: 2L - 1 each */
    int s;            /* od * oh * ow positions per sample */
} shape;

static shape make_shape(int n, int d, int h, int w)
{
    shape s = {n, d, h, w, 2 * d - 1, 2 * h - 1, 2 * w - 1, 0};
    s.s = s.od * s.oh * s.ow;
    return s;
}

static size_t x_elems(const shape *s) { return (size_t)s->n * C_IN * s->d * s->h * s->w; }
static size_t conv_elems(const shape *s) { return (size_t)s->n * C_OUT * s->s; }
static size_t out_elems(const shape *s) { return (size_t)s->n * s->s; }

static double epilogue_bytes(const shape *s)
{
    return 4.0 * (double)conv_elems(s) + 4.0 * (double)out_elems(s) + 4.0;
}

static double model_bytes(const shape *s)
{
    return 4.0 * (double)x_elems(s) + 4.0 * (N_WEIGHT + C_OUT + 1) + 4.0 * (double)out_elems(s);
}

/* forward + backward of the epilogue: read c twice (forward, backward), write y, read g, write dc */
static double epilogue_fwdbwd_bytes(const shape *s)
{
    return 4.0 * (2.0 * conv_elems(s) + 2.0 * out_elems(s) + conv_elems(s)) + 4.0;
}

/* the training step, if the conv output were never stored: read x twice (forward, dw), write y,
 * read g, write dx and the parameters' gradients. A floor for bytes; the step is compute-bound */
static double train_step_bytes(const shape *s)
{
    return 4.0 * (3.0 * x_elems(s) + 2.0 * out_elems(s) + 2.0 * (N_WEIGHT + C_OUT + 1));
}

static double model_flops(const shape *s)
{
    return 2.0 * s->n * C_OUT * C_IN * (3.0 * s->d - 2) * (3.0 * s->h - 2) * (3.0 * s->w - 2);
}

/*
 * The kernels index with 32-bit ints (cheaper address arithmetic than 64-bit), and put the
 * batch and depth on grid dimensions limited to 65535. Reject what does not fit, clearly.
 */
static const char *shape_problem(const int64_t *dims)
{
    static char why[256];
    if (dims[1] != C_IN) {
        snprintf(why, sizeof why, "this model has %d input channels, --shape says %lld", C_IN,
                 (long long)dims[1]);
        return why;
    }
    if (dims[0] > 65535 || dims[2] > 65535) {
        snprintf(why, sizeof why, "batch and depth must be at most 65535 (grid limits)");
        return why;
    }
    double conv = (double)dims[0] * C_OUT * (2.0 * dims[2] - 1) * (2.0 * dims[3] - 1) *
                  (2.0 * dims[4] - 1);
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
 * 2. CPU reference, in double, written the way the math is written
 * ========================================================================================== */

/*
 * Transposed convolution as its definition: every input element scatters x * w into the 27
 * outputs its kernel covers, o = i * stride - padding + k, for every output channel.
 *     out[n][co][od][oh][ow] = bias[co] + sum over ci, kd, kh, kw with od = 2 id - 1 + kd, ...
 *                                           of x[n][ci][id][ih][iw] * w[ci][co][kd][kh][kw]
 */
static void conv_transpose_ref(const shape *s, const double *x, const double *w,
                               const double *bias, double *out)
{
    size_t hw = (size_t)s->oh * s->ow;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < s->n; n++) {
        for (int co = 0; co < C_OUT; co++)
            for (int p = 0; p < s->s; p++)
                out[((size_t)n * C_OUT + co) * s->s + p] = bias[co];
        for (int ci = 0; ci < C_IN; ci++)
            for (int id = 0; id < s->d; id++)
                for (int ih = 0; ih < s->h; ih++)
                    for (int iw = 0; iw < s->w; iw++) {
                        double xv = x[((((size_t)n * C_IN + ci) * s->d + id) * s->h + ih) * s->w + iw];
                        for (int co = 0; co < C_OUT; co++) {
                            double *o = out + ((size_t)n * C_OUT + co) * s->s;
                            const double *wk = w + ((size_t)ci * C_OUT + co) * KS * KS * KS;
                            for (int kd = 0; kd < KS; kd++) {
                                int od = 2 * id - 1 + kd;
                                if (od < 0 || od >= s->od)
                                    continue;
                                for (int kh = 0; kh < KS; kh++) {
                                    int oh = 2 * ih - 1 + kh;
                                    if (oh < 0 || oh >= s->oh)
                                        continue;
                                    for (int kw = 0; kw < KS; kw++) {
                                        int ow = 2 * iw - 1 + kw;
                                        if (ow < 0 || ow >= s->ow)
                                            continue;
                                        o[od * hw + (size_t)oh * s->ow + ow] +=
                                            xv * wk[(kd * KS + kh) * KS + kw];
                                    }
                                }
                            }
                        }
                    }
    }
}

/* logsumexp, stable form: m + log sum exp(v - m), m = max v. Every term of the sum is <= 1, so
 * nothing overflows, and the largest term is exactly 1, so the sum cannot underflow to 0. */
static double lse_ref(const double *v, int c)
{
    double m = v[0], sum = 0.0;
    for (int i = 1; i < c; i++)
        m = fmax(m, v[i]);
    for (int i = 0; i < c; i++)
        sum += exp(v[i] - m);
    return m + log(sum);
}

/* the pointwise tail: a = z sigmoid(z + 3) / 6, s = a - b, y = clamp(s, -1, 1) */
static double tail_ref(double z, double b)
{
    double a = z * (1.0 / (1.0 + exp(-(z + 3.0)))) / 6.0;
    double s = a - b;
    return s < -1.0 ? -1.0 : (s > 1.0 ? 1.0 : s);
}

/* The epilogue over a conv output held as float (what the GPU epilogue versions read) or as
 * double (the reference conv); exactly one of cf, cd is non-NULL. y has N S elements. */
static void epilogue_ref(const shape *s, const float *cf, const double *cd, double b, double *y)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < s->n; n++)
        for (int p = 0; p < s->s; p++) {
            double v[C_OUT];
            for (int c = 0; c < C_OUT; c++) {
                size_t i = ((size_t)n * C_OUT + c) * s->s + p;
                v[c] = cf ? (double)cf[i] : cd[i];
            }
            y[(size_t)n * s->s + p] = tail_ref(lse_ref(v, C_OUT), b);
        }
}

/* ============================================================================================
 * 2b. The backward, derived term by term (the names are the code's)
 *
 * Per output position, with v_c the 16 conv outputs (c = channel) and g = dL/dy:
 *     z = m + log sum_c exp(v_c - m)            m = max_c v_c
 *     t = sigmoid(z + 3)
 *     a = z t / 6,   s = a - b,   y = clamp(s, -1, 1)
 * Chain rule, from the output back:
 *   ds   = g [-1 <= s <= 1]             clamp passes the gradient inside and at the bounds
 *                                        (PyTorch's clamp backward is g * (min <= s <= max))
 *   db   = - sum over every position of ds        (s = a - b)
 *   dz   = ds da/dz,  da/dz = t/6 + z t (1 - t)/6 = t (1 + z (1 - t)) / 6
 *                                        (product rule; sigmoid' = t (1 - t))
 *   dv_c = dz exp(v_c - z) = dz softmax_c(v)       (d/dv_c of logsumexp is the softmax)
 * The transposed conv's own gradients, with dv the gradient of its output (dc below):
 *   dbias[co]          = sum over n and positions of dc[n][co][...]
 *   dw[ci][co][k]      = sum over n, input positions i of x[n][ci][i] dc[n][co][2i - 1 + k]
 *   dx[n][ci][i]       = sum over co, k of w[ci][co][k] dc[n][co][2i - 1 + k]
 *                        (an ordinary strided Conv3d of dc with w: the transposed conv's
 *                        data gradient is the forward conv it transposes)
 * What the backward needs: v (the conv output, 1 GB at the KernelBench shape) and g, and b.
 *   Saving z, t and s in the forward (what autograd does, b1 below) costs 3 x 63 MB written
 *   in the forward and read in the backward, and the backward still reads v for the softmax.
 *   Recomputing z from v (b2) reads v once, which it must read anyway, and saves nothing:
 *   forward + backward then move 2 x 1.008 GB (v twice) + 63 MB (y) + 63 MB (g) + 1.008 GB
 *   (dv) = 3.15 GB, the floor of 1.05 ms at 3 TB/s. Saving z would add 126 MB to that.
 * ========================================================================================== */

/* dc = dL/dc for the epilogue alone, given c (float cf or double cd) and g; returns db, and the
 * sum of the magnitudes of its terms in *db_abs (the scale of a float sum's rounding) if asked */
static double epilogue_backward_ref(const shape *s, const float *cf, const double *cd, double b,
                                    const float *g, double *dc, double *db_abs)
{
    double db = 0.0, dba = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : db, dba)
    for (int n = 0; n < s->n; n++)
        for (int p = 0; p < s->s; p++) {
            double v[C_OUT];
            for (int c = 0; c < C_OUT; c++) {
                size_t i = ((size_t)n * C_OUT + c) * s->s + p;
                v[c] = cf ? (double)cf[i] : cd[i];
            }
            double z = lse_ref(v, C_OUT);
            double t = 1.0 / (1.0 + exp(-(z + 3.0)));
            double sv = z * t / 6.0 - b;
            double ds = (sv >= -1.0 && sv <= 1.0) ? g[(size_t)n * s->s + p] : 0.0;
            db -= ds;
            dba += fabs(ds);
            double dz = ds * t * (1.0 + z * (1.0 - t)) / 6.0;
            for (int c = 0; c < C_OUT; c++)
                dc[((size_t)n * C_OUT + c) * s->s + p] = dz * exp(v[c] - z);
        }
    if (db_abs)
        *db_abs = dba;
    return db;
}

/* dx, dw, dbias of the transposed conv from dc: the definitions above, as loops. dw_abs and
 * dbias_abs (may be NULL) receive the sums of the magnitudes of each sum's terms. */
static void conv_transpose_backward_ref(const shape *s, const double *x, const double *w,
                                        const double *dc, double *dx, double *dw, double *dbias,
                                        double *dw_abs, double *dbias_abs)
{
    size_t hw = (size_t)s->oh * s->ow;
#pragma omp parallel for schedule(static)
    for (int co = 0; co < C_OUT; co++) { /* dbias and dw: one output channel per thread */
        double sb = 0.0, sba = 0.0;
        for (int n = 0; n < s->n; n++)
            for (int p = 0; p < s->s; p++) {
                double t = dc[((size_t)n * C_OUT + co) * s->s + p];
                sb += t;
                sba += fabs(t);
            }
        dbias[co] = sb;
        if (dbias_abs)
            dbias_abs[co] = sba;
        for (int ci = 0; ci < C_IN; ci++)
            for (int k = 0; k < KS * KS * KS; k++) {
                int kd = k / 9, kh = (k / 3) % 3, kw = k % 3;
                double acc = 0.0, acca = 0.0;
                for (int n = 0; n < s->n; n++) {
                    const double *o = dc + ((size_t)n * C_OUT + co) * s->s;
                    for (int id = 0; id < s->d; id++) {
                        int od = 2 * id - 1 + kd;
                        if (od < 0 || od >= s->od)
                            continue;
                        for (int ih = 0; ih < s->h; ih++) {
                            int oh = 2 * ih - 1 + kh;
                            if (oh < 0 || oh >= s->oh)
                                continue;
                            for (int iw = 0; iw < s->w; iw++) {
                                int ow = 2 * iw - 1 + kw;
                                if (ow < 0 || ow >= s->ow)
                                    continue;
                                double t = x[((((size_t)n * C_IN + ci) * s->d + id) * s->h + ih) * s->w + iw] *
                                           o[od * hw + (size_t)oh * s->ow + ow];
                                acc += t;
                                acca += fabs(t);
                            }
                        }
                    }
                }
                dw[(ci * C_OUT + co) * KS * KS * KS + k] = acc;
                if (dw_abs)
                    dw_abs[(ci * C_OUT + co) * KS * KS * KS + k] = acca;
            }
    }
#pragma omp parallel for schedule(static)
    for (int n = 0; n < s->n; n++) /* dx: one sample per thread */
        for (int ci = 0; ci < C_IN; ci++)
            for (int id = 0; id < s->d; id++)
                for (int ih = 0; ih < s->h; ih++)
                    for (int iw = 0; iw < s->w; iw++) {
                        double acc = 0.0;
                        for (int co = 0; co < C_OUT; co++) {
                            const double *o = dc + ((size_t)n * C_OUT + co) * s->s;
                            const double *wk = w + (ci * C_OUT + co) * KS * KS * KS;
                            for (int k = 0; k < KS * KS * KS; k++) {
                                int od = 2 * id - 1 + k / 9, oh = 2 * ih - 1 + (k / 3) % 3,
                                    ow = 2 * iw - 1 + k % 3;
                                if (od < 0 || od >= s->od || oh < 0 || oh >= s->oh || ow < 0 ||
                                    ow >= s->ow)
                                    continue;
                                acc += wk[k] * o[od * hw + (size_t)oh * s->ow + ow];
                            }
                        }
                        dx[((((size_t)n * C_IN + ci) * s->d + id) * s->h + ih) * s->w + iw] = acc;
                    }
}

/* ============================================================================================
 * 3. GPU versions
 * ========================================================================================== */

/* The tail in float, shared by every GPU version. The clamp is written with comparisons, not
 * fminf/fmaxf, so a NaN propagates as it does in PyTorch instead of being clamped to a bound.
 * FAST selects the intrinsics (__expf: 2 + 1.16|x| ulp, CUDA Programming Guide, intrinsic
 * functions); on the host both spell expf, so the CPU checks below run this same code. */
#ifdef __CUDA_ARCH__
#define EXP_FAST(v) __expf(v)
#define LOG_FAST(v) __logf(v)
#define DIV_FAST(a, b) __fdividef(a, b)
#else
#define EXP_FAST(v) expf(v)
#define LOG_FAST(v) logf(v)
#define DIV_FAST(a, b) ((a) / (b))
#endif

__host__ __device__ static inline float clamp_pm1(float s)
{
    return s < -1.0f ? -1.0f : (s > 1.0f ? 1.0f : s);
}

__host__ __device__ static inline float tail_accurate(float z, float b)
{
    return clamp_pm1(z * (1.0f / (1.0f + expf(-(z + 3.0f)))) / 6.0f - b);
}

__host__ __device__ static inline float tail_fast(float z, float b)
{
    return clamp_pm1(DIV_FAST(z, 6.0f * (1.0f + EXP_FAST(-(z + 3.0f)))) - b);
}

/* ---------------------------------------------------------------- v1: what eager does
 * PyTorch eager runs the model op by op: logsumexp (itself amax, sub, exp, sum, log, add inside
 * torch), then x + 3, sigmoid, *, / 6, - b, clamp: each a kernel that reads its input from DRAM
 * and writes its result back. Here: one naive logsumexp kernel (a thread per position, a max
 * pass and a sum pass over the 16 channels) and one kernel per elementwise op.
 * Bytes: the LSE reads 1.008 GB and writes 63 MB; each of the 6 elementwise kernels then reads
 * one or two 63 MB tensors and writes one: about 1.07 + 6 * 0.13 + 0.063 = 1.9 GB moved for a
 * result whose floor is 1.07 GB, plus 7 launches. Prediction: about 1.8x the floor.
 * Measured (H100 80GB HBM3, KernelBench shape, data/h100/ch01.csv): 0.768 ms, 2.1x the 0.359 ms
 * floor, 47% of the copy ceiling. PyTorch eager's epilogue takes 2.79 ms on the same GPU
 * (data/h100/pytorch-ch01.csv): its logsumexp alone is five kernels and writes 1 GB twice. */

__global__ void k_logsumexp_naive(const float *__restrict__ c, float *__restrict__ z, int n_pos,
                                  int s)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_pos; i += gridDim.x * blockDim.x) {
        int n = i / s, p = i - n * s;
        const float *v = c + (size_t)n * C_OUT * s + p;
        float m = v[0];
        for (int ch = 1; ch < C_OUT; ch++)
            m = fmaxf(m, v[(size_t)ch * s]);
        float sum = 0.0f;
        for (int ch = 0; ch < C_OUT; ch++)
            sum += expf(v[(size_t)ch * s] - m);
        z[i] = m + logf(sum);
    }
}

__global__ void k_add_scalar(const float *__restrict__ a, float k, float *__restrict__ o, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        o[i] = a[i] + k;
}

__global__ void k_sigmoid(const float *__restrict__ a, float *__restrict__ o, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        o[i] = 1.0f / (1.0f + expf(-a[i]));
}

__global__ void k_mul(const float *__restrict__ a, const float *__restrict__ b,
                      float *__restrict__ o, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        o[i] = a[i] * b[i];
}

__global__ void k_div_scalar(const float *__restrict__ a, float k, float *__restrict__ o, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        o[i] = a[i] / k;
}

/* b is a parameter: it lives in device memory, as in a training loop where it changes */
__global__ void k_sub_param(const float *__restrict__ a, const float *__restrict__ b,
                            float *__restrict__ o, int n)
{
    float bv = *b;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        o[i] = a[i] - bv;
}

__global__ void k_clamp(const float *__restrict__ a, float *__restrict__ o, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        o[i] = clamp_pm1(a[i]);
}

/* ---------------------------------------------------------------- v2: one fused kernel
 * Defect of v1: six extra round trips through DRAM and seven launches. Fix: one kernel, one
 * thread per output position, the 16 channel values held in registers, the whole tail applied
 * before the single store. A warp's 32 threads take 32 adjacent positions, so for each channel
 * the warp reads 128 contiguous bytes: coalesced. The 16 loads are independent, so each thread
 * has 16 in flight (64 bytes) before the first is used.
 * Prediction: the 1.07 GB floor, if 64 bytes a thread in flight hide DRAM latency.
 * Measured: 0.425 ms, 84% of the copy ceiling, 1.81x v1. Not the floor. Suspects: 16 load
 * instructions per position for 64 bytes, and an integer division per position; v4 removes
 * three quarters of the loads and the divisions, and measures what that was worth. */
__global__ void k_epilogue_fused(const float *__restrict__ c, const float *__restrict__ b,
                                 float *__restrict__ y, int n_pos, int s)
{
    float bv = *b;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_pos; i += gridDim.x * blockDim.x) {
        int n = i / s, p = i - n * s;
        const float *src = c + n * C_OUT * s + p;
        float v[C_OUT];
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++)
            v[ch] = src[ch * s];
        float m = v[0];
#pragma unroll
        for (int ch = 1; ch < C_OUT; ch++)
            m = fmaxf(m, v[ch]);
        float sum = 0.0f;
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++)
            sum += expf(v[ch] - m);
        y[i] = tail_accurate(m + logf(sum), bv);
    }
}

/* ---------------------------------------------------------------- v3: the anti-pattern
 * The layout a first instinct picks: the reduction is over channels, so give each channel a
 * thread and reduce in shared memory, one block per output position. Defects: (1) a block of
 * 16 threads fills half a warp, and a multiprocessor holds at most 32 blocks, so at most 512 of
 * its 2048 thread slots are used; (2) the 16 threads of a block read addresses S floats apart:
 * 16 separate 32-byte sectors for 64 useful bytes, so DRAM moves 8x the bytes it needs unless
 * L2 keeps the neighbouring positions' sectors until their blocks come by; (3) four barriers
 * and a tree per 68 bytes of work. Prediction: several times slower than v2.
 * Measured: 9.48 ms, 22x slower than v2, 3.8% of the copy ceiling. At batch 1 the gap is only
 * 9x (data/h100/ch01-sweep.csv), plausibly because there the 7.9 MB conv output fits in the
 * 50 MB L2, so each 32-byte sector comes from DRAM once however scattered the reads. */
__global__ void k_epilogue_block_per_position(const float *__restrict__ c,
                                              const float *__restrict__ b, float *__restrict__ y,
                                              int s)
{
    __shared__ float sm[C_OUT];
    int i = blockIdx.x, ch = threadIdx.x;
    int n = i / s, p = i - n * s;
    float v = c[(n * C_OUT + ch) * s + p];
    sm[ch] = v;
    __syncthreads();
    for (int stride = C_OUT / 2; stride > 0; stride >>= 1) {
        if (ch < stride)
            sm[ch] = fmaxf(sm[ch], sm[ch + stride]);
        __syncthreads();
    }
    float m = sm[0];
    __syncthreads(); /* everyone has read sm[0] before it is overwritten */
    sm[ch] = expf(v - m);
    __syncthreads();
    for (int stride = C_OUT / 2; stride > 0; stride >>= 1) {
        if (ch < stride)
            sm[ch] += sm[ch + stride];
        __syncthreads();
    }
    if (ch == 0)
        y[i] = tail_accurate(m + logf(sm[0]), *b);
}

/* ---------------------------------------------------------------- v4: 16-byte loads, online LSE
 * What v2 leaves: one 4-byte load instruction per channel per position, and a max pass before
 * the exp pass (all 16 values must be held). Changes: (1) each thread takes 4 adjacent positions
 * and reads each channel with one 16-byte load, a quarter of the load instructions; (2) the
 * online logsumexp (Milakov & Gimelshein, "Online normalizer calculation for softmax", 2018)
 * folds each channel in as it arrives, with one exp per value:
 *       v > m:  s = s * exp(m - v) + 1,  m = v        otherwise:  s = s + exp(v - m)
 * so no value has to wait for the max; (3) __expf/__logf instead of expf/logf, kept because the
 * accuracy check below still passes with them.
 * The catch that makes this a lesson: a channel's plane is S = 123039 floats, an odd number, so
 * only one channel in four starts on a 16-byte boundary. A float4 load must be aligned, so each
 * thread loads the aligned float4 that holds its first value and the next one, and shifts by
 * r = (address / 4) mod 4. r depends only on (n, channel), the same for the whole block, so the
 * switch on it does not diverge. The second float4 is usually the neighbour thread's first
 * (an L1 hit, no extra DRAM bytes). Positions past S and the last vector of the tensor take a
 * scalar path: the aligned pair must not read past the allocation.
 * Measured: 0.375 ms, 96% of the measured copy ceiling (2855 of 2986 GB/s), 1.13x v2 and 5% above
 * the 0.359 ms floor. torch.compile's generated kernel takes 0.368 ms on the same kind of GPU,
 * 2% faster (both medians repeat within 0.1% from run to run). Tried and dropped, same H100, one
 * run: streaming loads (__ldcs, evict-first) 0.395 ms and __ldlu 0.409 ms: they give up the L1
 * hit on the second, misaligned float4 that the neighbouring thread also reads; blocks of 128 or
 * 512 threads with __ldcs: 0.399 and 0.394 ms. */

__device__ static inline void lse_online(float v, float *m, float *s)
{
    float d = v - *m;
    float e = EXP_FAST(-fabsf(d)); /* exp(m - v) if v > m, else exp(v - m): one exp either way */
    if (d > 0.0f) {
        *s = fmaf(*s, e, 1.0f);
        *m = v;
    } else {
        *s += e; /* also where d is NaN: the NaN propagates into s */
    }
}

/* experiments: -DV4_LOAD=__ldcs (streaming, evict-first) instead of __ldg; -DV4_BLOCK=n */
#ifndef V4_LOAD
#define V4_LOAD __ldg
#endif
#ifndef V4_BLOCK
#define V4_BLOCK 256
#endif

/* four consecutive floats c[a .. a+3], a = row + p0, p0 a multiple of 4 */
__device__ static inline void load4(const float *__restrict__ c, int row, int p0, int s,
                                    int total, float v[4])
{
    int a = row + p0, r = row & 3;
    if (p0 + 4 <= s && a - r + 8 <= total) {
        const float4 *q = reinterpret_cast<const float4 *>(c + (a - r));
        float4 lo = V4_LOAD(q);
        if (r == 0) {
            v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w;
            return;
        }
        float4 hi = V4_LOAD(q + 1);
        switch (r) {
        case 1: v[0] = lo.y, v[1] = lo.z, v[2] = lo.w, v[3] = hi.x; break;
        case 2: v[0] = lo.z, v[1] = lo.w, v[2] = hi.x, v[3] = hi.y; break;
        default: v[0] = lo.w, v[1] = hi.x, v[2] = hi.y, v[3] = hi.z; break;
        }
        return;
    }
    for (int k = 0; k < 4; k++)
        v[k] = (p0 + k < s) ? c[a + k] : 0.0f;
}

__global__ void k_epilogue_vec4_online(const float *__restrict__ c, const float *__restrict__ b,
                                       float *__restrict__ y, int s, int total)
{
    int n = blockIdx.y;
    int p0 = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (p0 >= s)
        return;
    float m[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, sum[4] = {0, 0, 0, 0};
#pragma unroll
    for (int ch = 0; ch < C_OUT; ch++) {
        float v[4];
        load4(c, (n * C_OUT + ch) * s, p0, s, total, v);
#pragma unroll
        for (int k = 0; k < 4; k++)
            lse_online(v[k], &m[k], &sum[k]);
    }
    float bv = *b;
#pragma unroll
    for (int k = 0; k < 4; k++)
        if (p0 + k < s)
            y[n * s + p0 + k] = tail_fast(m[k] + LOG_FAST(sum[k]), bv);
}

/* ---------------------------------------------------------------- v5: full fusion
 * v2 and v4 can at best reach the 0.36 ms it takes to read the conv output; the conv itself
 * takes longer still, and writes that 1 GB first. The only way past both is not to write it.
 *
 * The transposed conv by parity. Along one axis an output o receives input i through tap k
 * when o = 2i - 1 + k. Give each thread one input index j and the two outputs 2j and 2j+1:
 *     output 2j   (even):  k = 1 from input j
 *     output 2j+1 (odd):   k = 2 from input j,  k = 0 from input j + 1
 * So a thread that owns inputs j..j+1 along each of the three axes computes the 2x2x2 output
 * cube at (2jd, 2jh, 2jw) using each of the 27 taps exactly once per (ci, co): 27 * 3 * 16 =
 * 1296 FMAs for 8 outputs, and every thread of the grid walks the taps in the same order.
 * That uniformity is what makes constant memory right for the weights (a warp reading one
 * address gets it broadcast, and an FFMA can take it as an operand) and why no thread diverges
 * on parity, as it would with a thread per output.
 * The input: a block covers 32 (w) x 4 (h) input columns of one depth j; it needs inputs
 * j..j+1 in d, 5 rows in h and 33 in w for 3 channels: 990 floats staged in shared memory, read
 * by up to 8 threads each. Inputs past the edge are 0: they only feed outputs past the edge.
 * The channel loop folds each of the 16 conv outputs into an online logsumexp as soon as it is
 * computed, so the conv output lives in registers for one iteration and never in memory.
 * Measured: 0.394 ms for the whole model, 33x v1 (cuDNN's conv alone takes 12.5 ms) and 14x
 * torch.compile's 5.64 ms. Slower than the plan, and the profile says why: see v6. */

#define TILE_W 32
#define TILE_H 4

__constant__ float c_weight[N_WEIGHT];
__constant__ float c_conv_bias[C_OUT];

/* tap k -> which output of the pair (0: 2j, 1: 2j+1) and which input (0: j, 1: j+1) */
#define TAP_OUT(k) ((k) == 1 ? 0 : 1)
#define TAP_IN(k) ((k) == 0 ? 1 : 0)

/* On the device the weights are read from the __constant__ arrays by name, with indices the
 * unrolled loops make compile-time constants, so each FFMA can take its weight straight from the
 * constant bank as an operand; through a pointer argument nvcc 13 emitted a separate LDC load
 * for most of them (892 LDC beside 1440 FFMA in the SASS, measured with cuobjdump). */
#ifdef __CUDA_ARCH__
#define WEIGHT(i) c_weight[i]
#define BIAS(i) c_conv_bias[i]
#else
#define WEIGHT(i) w[i]
#define BIAS(i) bias[i]
#endif

/*
 * The per-thread computation of v5, for the host too: the CPU checks run it over a whole
 * tensor, so the parity derivation is tested in CI where there is no GPU. xin holds the inputs
 * [ci][dd][dh][dw] at (j + dd, j + dh, j + dw); w and bias are PyTorch-layout weights; out
 * receives the 8 logsumexps, output (ad, ah, aw) at out[ad * 4 + ah * 2 + aw]. (On the device,
 * w and bias are ignored for c_weight and c_conv_bias: see WEIGHT above.)
 */
__host__ __device__ static inline void fused_cube_lse(const float *__restrict__ w,
                                                      const float *__restrict__ bias,
                                                      const float xin[C_IN][2][2][2],
                                                      float out[8])
{
    float m[8], sum[8];
#pragma unroll
    for (int o = 0; o < 8; o++)
        m[o] = -INFINITY, sum[o] = 0.0f;
#pragma unroll
    for (int co = 0; co < C_OUT; co++) {
        float acc[8];
#pragma unroll
        for (int o = 0; o < 8; o++)
            acc[o] = BIAS(co);
#pragma unroll
        for (int ci = 0; ci < C_IN; ci++)
#pragma unroll
            for (int kd = 0; kd < KS; kd++)
#pragma unroll
                for (int kh = 0; kh < KS; kh++)
#pragma unroll
                    for (int kw = 0; kw < KS; kw++) {
                        int o = TAP_OUT(kd) * 4 + TAP_OUT(kh) * 2 + TAP_OUT(kw);
                        float wv = WEIGHT((((ci * C_OUT + co) * KS + kd) * KS + kh) * KS + kw);
                        acc[o] = fmaf(wv, xin[ci][TAP_IN(kd)][TAP_IN(kh)][TAP_IN(kw)], acc[o]);
                    }
#pragma unroll
        for (int o = 0; o < 8; o++) {
#ifdef __CUDA_ARCH__
            lse_online(acc[o], &m[o], &sum[o]);
#else
            float d = acc[o] - m[o], e = expf(-fabsf(d));
            if (d > 0.0f)
                sum[o] = sum[o] * e + 1.0f, m[o] = acc[o];
            else
                sum[o] += e;
#endif
        }
    }
#pragma unroll
    for (int o = 0; o < 8; o++)
        out[o] = m[o] + LOG_FAST(sum[o]);
}

/* Stages the block's inputs x[n][ci][jd .. jd+1][jh0 .. jh0+rows-1][jw0 .. jw0+cols-1] in shared
 * memory, laid out [ci][2][rows][cols]; inputs past an edge are 0 (they feed only outputs past
 * the edge). The block's nthreads threads share the copy; the caller synchronises. */
__device__ static inline void load_input_tile(const float *__restrict__ x, float *tile, int rows,
                                              int cols, int n, int jd, int jh0, int jw0, int d,
                                              int h, int w, int tid, int nthreads)
{
    for (int t = tid; t < C_IN * 2 * rows * cols; t += nthreads) {
        int tw = t % cols, r = t / cols;
        int th = r % rows;
        r /= rows;
        int dd = r % 2, ci = r / 2;
        int gd = jd + dd, gh = jh0 + th, gw = jw0 + tw;
        tile[t] = (gd < d && gh < h && gw < w) ? x[(((n * C_IN + ci) * d + gd) * h + gh) * w + gw]
                                               : 0.0f;
    }
}

__global__ void __launch_bounds__(TILE_W *TILE_H)
    k_model_fused(const float *__restrict__ x, const float *__restrict__ b, float *__restrict__ y,
                  int d, int h, int w)
{
    __shared__ float tile[C_IN][2][TILE_H + 1][TILE_W + 1];
    int tiles_w = (w + TILE_W - 1) / TILE_W;
    int jw0 = (blockIdx.x % tiles_w) * TILE_W, jh0 = (blockIdx.x / tiles_w) * TILE_H;
    int jd = blockIdx.y, n = blockIdx.z;
    int od = 2 * d - 1, oh = 2 * h - 1, ow = 2 * w - 1;
    load_input_tile(x, &tile[0][0][0][0], TILE_H + 1, TILE_W + 1, n, jd, jh0, jw0, d, h, w,
                    threadIdx.y * TILE_W + threadIdx.x, TILE_W * TILE_H);
    __syncthreads();

    int jw = jw0 + threadIdx.x, jh = jh0 + threadIdx.y;
    if (jw >= w || jh >= h)
        return;
    float xin[C_IN][2][2][2];
#pragma unroll
    for (int ci = 0; ci < C_IN; ci++)
#pragma unroll
        for (int dd = 0; dd < 2; dd++)
#pragma unroll
            for (int dh = 0; dh < 2; dh++)
#pragma unroll
                for (int dw = 0; dw < 2; dw++)
                    xin[ci][dd][dh][dw] = tile[ci][dd][threadIdx.y + dh][threadIdx.x + dw];
    float z[8];
    fused_cube_lse(c_weight, c_conv_bias, xin, z);
    float bv = *b;
    float *yn = y + n * od * oh * ow;
#pragma unroll
    for (int o = 0; o < 8; o++) {
        int zd = 2 * jd + (o >> 2), zh = 2 * jh + ((o >> 1) & 1), zw = 2 * jw + (o & 1);
        if (zd < od && zh < oh && zw < ow)
            yn[(zd * oh + zh) * ow + zw] = tail_fast(z[o], bv);
    }
}

/* ---------------------------------------------------------------- v6: full fusion, tuned
 * What v5's SASS shows (cuobjdump -sass, nvcc 13.0, sm_90): per thread 1440 FFMA, 892 LDC,
 * 440 FMUL, 280 FADD, 153 MUFU. About 3300 instructions a thread over 65.5 K warps is about
 * 0.21 ms of issue at 1.98 GHz, yet v5 measured 0.39 ms. ncu (H100): 10.3 cycles between a warp's
 * instructions, 3.6 of them stalled on immediate-constant-cache misses: 1296 weights are 5.2 KB,
 * more than that cache holds, and warps at different channels evict each other's weights.
 * Changes, each aimed at instructions per output:
 *  (1) weights staged once per block in shared memory, laid out [co][ci][28] (27 taps + 1 pad)
 *      and read as float4: all 32 lanes read the same address (a broadcast, no bank conflict),
 *      7 LDS.128 for the 27 weights of one (co, ci) instead of 27 constant loads;
 *  (2) two output cubes per thread, adjacent along w: each weight read feeds two FFMAs, and the
 *      two cubes share an input column (3 x 2 x 2 x 3 = 36 inputs instead of 48);
 *  (3) weights and bias pre-scaled by log2(e) while staged, so the conv output arrives in base-2
 *      units and the online logsumexp needs ex2(-|d|) with no multiply before it (ex2.approx is
 *      the MUFU instruction __expf is built on); z = ln 2 * (m + log2 s) at the end.
 * The thread's 4 outputs along w are then contiguous in y, so a warp stores 128 adjacent floats
 * per output row.
 * What was tried, each on one H100 in one run (so the differences are not machine spread, which
 * is under 1% for this kernel):
 *   - two cubes per thread: 0.646 ms. 139 registers leave 3 blocks per SM: too few warps to hide
 *     the shared-memory and MUFU latencies. One cube per thread, 83 registers: 0.293 ms.
 *   - the channel loop unrolled 16 / 4 / 2 / 1 times: 0.293 / 0.275 / 0.269 / 0.280 ms. Fully
 *     unrolled, the kernel's code outgrows the instruction cache (ncu: 0.54 cycles per issued
 *     instruction stalled on "no instruction"; 0.07 at unroll 2).
 *   - capping registers for more blocks per SM (80 or 64 registers): 0.317 and 0.327 ms, slower.
 *   - 1, 2, 4 or 8 rows of inputs per block: 0.337 / 0.289 / 0.269 / 0.270 ms.
 * Kept: one cube per thread, unroll 2, 4 rows: 0.269 ms, 1.46x v5 and 21x torch.compile (5.64 ms).
 * The 0.25 ms target is missed by 8%. ncu on this kernel: 80.7% of issue slots busy and 2.25
 * cycles per instruction "not selected" (a ready warp waiting for the issue slot): the kernel is
 * issue-bound. Per 8 outputs it must issue 1296 FFMAs for the conv, about 6 instructions per
 * (output, channel) for the online logsumexp (768), 360 shared-memory loads and the tail; only
 * fewer instructions per output make it faster, not more warps. */

#define V6_TW 32
#ifndef V6_TH
#define V6_TH 4
#endif
#define TAPS_PAD 28
#define LOG2E_F 1.4426950408889634f
#define LN2_F 0.6931471805599453f

__device__ static inline float ex2_approx(float v)
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
}

__device__ static inline float lg2_approx(float v)
{
    float r;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
}

/* the online update of v4, in base 2 */
__device__ static inline void lse2_online(float v, float *m, float *s)
{
    float d = v - *m;
    float e = ex2_approx(-fabsf(d));
    if (d > 0.0f) {
        *s = fmaf(*s, e, 1.0f);
        *m = v;
    } else {
        *s += e;
    }
}

/* Stages weight * scale in shared memory as [co][ci][28] (27 taps, 1 pad) for float4 reads, and
 * bias * scale. Shared by v6 and the conv forward below; the caller synchronises. */
__device__ static inline void stage_weights(float4 (*s_w4)[C_IN][TAPS_PAD / 4], float *s_bias,
                                            const float *__restrict__ weight,
                                            const float *__restrict__ conv_bias, float scale,
                                            int tid, int nthreads)
{
    float *s_w = reinterpret_cast<float *>(s_w4);
    for (int t = tid; t < C_OUT * C_IN * TAPS_PAD; t += nthreads) {
        int co = t / (C_IN * TAPS_PAD), r = t % (C_IN * TAPS_PAD);
        int ci = r / TAPS_PAD, k = r % TAPS_PAD;
        s_w[t] = k < KS * KS * KS ? weight[(ci * C_OUT + co) * KS * KS * KS + k] * scale : 0.0f;
    }
    if (tid < C_OUT)
        s_bias[tid] = conv_bias[tid] * scale;
}

/* experiments: -DV6_MIN_BLOCKS=k caps registers for k blocks per SM; -DV6_CO_UNROLL=u */
#ifdef V6_MIN_BLOCKS
#define V6_BOUNDS __launch_bounds__(V6_TW *V6_TH, V6_MIN_BLOCKS)
#else
#define V6_BOUNDS __launch_bounds__(V6_TW *V6_TH)
#endif
#ifndef V6_CO_UNROLL
#define V6_CO_UNROLL 2
#endif
#define PRAGMA_(x) _Pragma(#x)
#define UNROLL(n) PRAGMA_(unroll n) /* #pragma unroll does not expand a macro argument */

template <int V6_CUBES>
__global__ void V6_BOUNDS k_model_fused_v6(const float *__restrict__ x, const float *__restrict__ weight,
                     const float *__restrict__ conv_bias, const float *__restrict__ b,
                     float *__restrict__ y, int d, int h, int w)
{
    __shared__ float4 s_w4[C_OUT][C_IN][TAPS_PAD / 4];
    __shared__ float s_bias[C_OUT];
    const int V6_COLS = V6_TW * V6_CUBES;
    __shared__ float tile[C_IN][2][V6_TH + 1][V6_TW * V6_CUBES + 1];
    int tid = threadIdx.y * V6_TW + threadIdx.x;
    int tiles_w = (w + V6_COLS - 1) / V6_COLS;
    int jw0 = (blockIdx.x % tiles_w) * V6_COLS, jh0 = (blockIdx.x / tiles_w) * V6_TH;
    int jd = blockIdx.y, n = blockIdx.z;
    int od = 2 * d - 1, oh = 2 * h - 1, ow = 2 * w - 1;

    stage_weights(s_w4, s_bias, weight, conv_bias, LOG2E_F, tid, V6_TW * V6_TH);
    load_input_tile(x, &tile[0][0][0][0], V6_TH + 1, V6_COLS + 1, n, jd, jh0, jw0, d, h, w, tid,
                    V6_TW * V6_TH);
    __syncthreads();

    int jw = jw0 + V6_CUBES * threadIdx.x, jh = jh0 + threadIdx.y;
    if (jw >= w || jh >= h)
        return;
    float xin[C_IN][2][2][V6_CUBES + 1];
#pragma unroll
    for (int ci = 0; ci < C_IN; ci++)
#pragma unroll
        for (int dd = 0; dd < 2; dd++)
#pragma unroll
            for (int dh = 0; dh < 2; dh++)
#pragma unroll
                for (int dw = 0; dw <= V6_CUBES; dw++)
                    xin[ci][dd][dh][dw] =
                        tile[ci][dd][threadIdx.y + dh][V6_CUBES * threadIdx.x + dw];

    float m[V6_CUBES][8], s[V6_CUBES][8];
#pragma unroll
    for (int c = 0; c < V6_CUBES; c++)
#pragma unroll
        for (int o = 0; o < 8; o++)
            m[c][o] = -INFINITY, s[c][o] = 0.0f;
    UNROLL(V6_CO_UNROLL)
    for (int co = 0; co < C_OUT; co++) {
        float acc[V6_CUBES][8];
#pragma unroll
        for (int c = 0; c < V6_CUBES; c++)
#pragma unroll
            for (int o = 0; o < 8; o++)
                acc[c][o] = s_bias[co];
#pragma unroll
        for (int ci = 0; ci < C_IN; ci++) {
            float wk[TAPS_PAD];
#pragma unroll
            for (int q = 0; q < TAPS_PAD / 4; q++) {
                float4 t = s_w4[co][ci][q];
                wk[4 * q] = t.x, wk[4 * q + 1] = t.y, wk[4 * q + 2] = t.z, wk[4 * q + 3] = t.w;
            }
#pragma unroll
            for (int kd = 0; kd < KS; kd++)
#pragma unroll
                for (int kh = 0; kh < KS; kh++)
#pragma unroll
                    for (int kw = 0; kw < KS; kw++) {
                        int o = TAP_OUT(kd) * 4 + TAP_OUT(kh) * 2 + TAP_OUT(kw);
                        float wv = wk[(kd * KS + kh) * KS + kw];
#pragma unroll
                        for (int c = 0; c < V6_CUBES; c++)
                            acc[c][o] = fmaf(wv, xin[ci][TAP_IN(kd)][TAP_IN(kh)][c + TAP_IN(kw)],
                                             acc[c][o]);
                    }
        }
#pragma unroll
        for (int c = 0; c < V6_CUBES; c++)
#pragma unroll
            for (int o = 0; o < 8; o++)
                lse2_online(acc[c][o], &m[c][o], &s[c][o]);
    }
    float bv = *b;
    float *yn = y + n * od * oh * ow;
#pragma unroll
    for (int o = 0; o < 8; o++) {
        int zd = 2 * jd + (o >> 2), zh = 2 * jh + ((o >> 1) & 1);
        if (zd >= od || zh >= oh)
            continue;
#pragma unroll
        for (int c = 0; c < V6_CUBES; c++) {
            int zw = 2 * (jw + c) + (o & 1);
            if (zw < ow)
                yn[(zd * oh + zh) * ow + zw] =
                    tail_fast(LN2_F * (m[c][o] + lg2_approx(s[c][o])), bv);
        }
    }
}

/* ---------------------------------------------------------------- backward
 * b1, autograd-like: what PyTorch's autograd runs for this graph, one kernel per op backward,
 * reading what the forward saved (z, t = sigmoid(z + 3), s). The forward is v1 with those three
 * tensors kept. Then: clamp backward (ds), the sum for db, / 6 backward, the product rule
 * (two outputs), sigmoid backward, the sum of the two paths into z, logsumexp backward (reads
 * the 1 GB conv output again, writes the 1 GB dc).
 * Measured (H100, KernelBench shape): 2.40 ms for forward + backward, 2.3x the 1.055 ms floor;
 * PyTorch eager takes 5.70 ms for the same (its logsumexp and autograd launch more kernels). */

__global__ void k_clamp_backward(const float *__restrict__ g, const float *__restrict__ s,
                                 float *__restrict__ ds, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        ds[i] = (s[i] >= -1.0f && s[i] <= 1.0f) ? g[i] : 0.0f;
}

__global__ void k_mul_backward(const float *__restrict__ da, const float *__restrict__ z,
                               const float *__restrict__ t, float *__restrict__ dz,
                               float *__restrict__ dt, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        dz[i] = da[i] * t[i]; /* d(z t)/dz = t */
        dt[i] = da[i] * z[i]; /* d(z t)/dt = z */
    }
}

__global__ void k_sigmoid_backward(const float *__restrict__ dt, const float *__restrict__ t,
                                   float *__restrict__ du, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        du[i] = dt[i] * t[i] * (1.0f - t[i]);
}

__global__ void k_add(const float *__restrict__ a, const float *__restrict__ b,
                      float *__restrict__ o, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        o[i] = a[i] + b[i];
}

__global__ void k_logsumexp_backward(const float *__restrict__ c, const float *__restrict__ z,
                                     const float *__restrict__ dz, float *__restrict__ dc,
                                     int n_pos, int s)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_pos; i += gridDim.x * blockDim.x) {
        int n = i / s, p = i - n * s;
        for (int ch = 0; ch < C_OUT; ch++) {
            int j = (n * C_OUT + ch) * s + p;
            dc[j] = dz[i] * expf(c[j] - z[i]);
        }
    }
}

/* Stage 1 of a deterministic sum: each block adds a fixed, grid-strided set of elements and
 * writes one partial. With the grid fixed the order of every addition is fixed. */
__global__ void k_partial_sums(const float *__restrict__ a, float *__restrict__ partials, int n)
{
    float v = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        v += a[i];
    v = block_sum(v);
    if (threadIdx.x == 0)
        partials[blockIdx.x] = v;
}

/* Stage 2: one block adds the partials in a fixed order and writes scale * total. No float
 * atomics anywhere, so the result is the same bits on every run. */
__global__ void k_final_sum(const float *__restrict__ partials, int n, float scale,
                            float *__restrict__ out)
{
    float v = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        v += partials[i];
    v = block_sum(v);
    if (threadIdx.x == 0)
        *out = scale * v;
}

/* b2, fused: defect of b1, eight kernels and three saved tensors, 1.9 GB of traffic beyond the
 * floor. One kernel instead: each thread takes four positions as v4 does (16-byte loads on the
 * misaligned planes), recomputes z from the 16 values it holds (a two-pass logsumexp is cheap
 * once the values are in registers, and keeps e_c = exp(v_c - m) for the softmax), applies the
 * chain rule above and writes dc for its four positions in every channel. ds is summed per
 * block (shuffles, then shared memory) into one partial per block; k_final_sum adds the
 * partials in a fixed order, so db is deterministic. The forward it pairs with is v4.
 * Prediction: read v and g, write dc: 2.1 GB, about 0.7 ms at the ceiling.
 * Measured: 1.283 ms for v4 + this, 1.87x b1, against a 1.055 ms floor and torch.compile's
 * 1.18 ms: the 1.1 ms target is missed by 17%. The backward kernel alone, under ncu: 0.896 ms,
 * DRAM at 73.7% of peak, 22.9 cycles per issued instruction stalled on long scoreboard (waiting
 * for loads) at 37% occupancy: 80 registers, most of them the 64 values kept for the softmax.
 * Tried, one H100 run each: no register cap (96 registers) 1.352 ms, 2 blocks per SM 1.374,
 * 3 blocks (80 registers, 48 bytes of spill; kept) 1.304; evict-first stores (__stcs) 1.325
 * against 1.309 for plain stores in the same run. */
#if defined(B2_STREAMING) && B2_STREAMING /* experiment: -DB2_STREAMING=1, evict-first stores */
#define B2_STORE(p, v) __stcs(p, v)
#else
#define B2_STORE(p, v) (*(p) = (v))
#endif
#ifndef B2_MIN_BLOCKS
#define B2_MIN_BLOCKS 3 /* 80 registers, 3 blocks per SM: 1.304 ms against 1.352 at 96 registers
                           (epilogue fwd+bwd, one H100 run each) */
#endif
__global__ void __launch_bounds__(256, B2_MIN_BLOCKS)
    k_epilogue_backward_fused(const float *__restrict__ c, const float *__restrict__ g,
                                          const float *__restrict__ b, float *__restrict__ dc,
                                          float *__restrict__ partials, int s, int total)
{
    int n = blockIdx.y;
    int p0 = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    float ds_sum = 0.0f;
    if (p0 < s) {
        float e[C_OUT][4], m[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++) {
            load4(c, (n * C_OUT + ch) * s, p0, s, total, e[ch]);
#pragma unroll
            for (int k = 0; k < 4; k++)
                m[k] = fmaxf(m[k], e[ch][k]);
        }
        float sum[4] = {0, 0, 0, 0};
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++)
#pragma unroll
            for (int k = 0; k < 4; k++) {
                e[ch][k] = EXP_FAST(e[ch][k] - m[k]);
                sum[k] += e[ch][k];
            }
        float bv = *b, dz_over_sum[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float z = m[k] + LOG_FAST(sum[k]);
            float t = 1.0f / (1.0f + EXP_FAST(-(z + 3.0f)));
            float sv = z * t / 6.0f - bv;
            float gk = p0 + k < s ? g[n * s + p0 + k] : 0.0f;
            float ds = (sv >= -1.0f && sv <= 1.0f) ? gk : 0.0f;
            ds_sum += ds;
            dz_over_sum[k] = ds * t * (1.0f + z * (1.0f - t)) / (6.0f * sum[k]);
        }
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++)
#pragma unroll
            for (int k = 0; k < 4; k++)
                if (p0 + k < s)
                    B2_STORE(&dc[(n * C_OUT + ch) * s + p0 + k], dz_over_sum[k] * e[ch][k]);
    }
    ds_sum = block_sum(ds_sum);
    if (threadIdx.x == 0)
        partials[blockIdx.y * gridDim.x + blockIdx.x] = ds_sum;
}

/* ---------------------------------------------------------------- b3: the conv's own kernels
 * Measured with b1 and b2 (H100, KernelBench shape): the training step takes 112 ms, and cuDNN's
 * legacy API spends it on the conv: the transposed conv 12.3 ms, dbias (cudnnConvolutionBackward-
 * Bias) 63.6 ms, dw (cudnnConvolutionBackwardFilter, its fastest fp32 algorithm) 32.9 ms, dx
 * (cudnnConvolutionForward) 2.0 ms. A per-channel sum over 1 GB has a 0.36 ms floor; the conv's
 * 5 GFLOP about 0.08 ms. b3 keeps b2's epilogue and replaces three of the four:
 *   - the transposed conv writing c, by v6's parity scheme (it is v6 with the logsumexp replaced
 *     by 128 stores a thread): 1 GB written, so about 0.35 ms at the ceiling;
 *   - dbias: per channel, blocks sum slices of every sample's plane (no division in the loop),
 *     one partial each, then a fixed-order final sum: deterministic;
 *   - dw: dw[ci][co][k] = sum over n, j of x[n][ci][j] dc[n][co][2j - 1 + k]. A block takes one
 *     output channel co and strides over input positions j; each thread keeps the 81 products'
 *     sums (3 ci x 27 taps) in registers over all its positions, then the block reduces them
 *     (shuffles, then shared memory) into one partial per weight; a final kernel adds the blocks'
 *     partials in a fixed order: deterministic, no atomics.
 * dx stays cuDNN's forward conv.
 * Measured: the training step takes 4.96 ms, against 112 ms for b2 with cuDNN's gradients and,
 * on the same GPU, 18.6 ms for PyTorch eager and 13.6 ms for torch.compile (cudnn.benchmark on).
 * Of the 4.96 ms, cuDNN's dx is 2.0; fusing the conv's backward with the epilogue's (dc never
 * written) is the next step and is not done here. */

__global__ void __launch_bounds__(V6_TW *V6_TH)
    k_conv_transpose_parity(const float *__restrict__ x, const float *__restrict__ weight,
                            const float *__restrict__ conv_bias, float *__restrict__ c, int d,
                            int h, int w)
{
    __shared__ float4 s_w4[C_OUT][C_IN][TAPS_PAD / 4];
    __shared__ float s_bias[C_OUT];
    __shared__ float tile[C_IN][2][V6_TH + 1][V6_TW + 1];
    int tid = threadIdx.y * V6_TW + threadIdx.x;
    int tiles_w = (w + V6_TW - 1) / V6_TW;
    int jw0 = (blockIdx.x % tiles_w) * V6_TW, jh0 = (blockIdx.x / tiles_w) * V6_TH;
    int jd = blockIdx.y, n = blockIdx.z;
    int od = 2 * d - 1, oh = 2 * h - 1, ow = 2 * w - 1, s = od * oh * ow;
    stage_weights(s_w4, s_bias, weight, conv_bias, 1.0f, tid, V6_TW * V6_TH);
    load_input_tile(x, &tile[0][0][0][0], V6_TH + 1, V6_TW + 1, n, jd, jh0, jw0, d, h, w, tid,
                    V6_TW * V6_TH);
    __syncthreads();
    int jw = jw0 + threadIdx.x, jh = jh0 + threadIdx.y;
    if (jw >= w || jh >= h)
        return;
    float xin[C_IN][2][2][2];
#pragma unroll
    for (int q = 0; q < C_IN * 8; q++)
        xin[q / 8][(q >> 2) & 1][(q >> 1) & 1][q & 1] =
            tile[q / 8][(q >> 2) & 1][threadIdx.y + ((q >> 1) & 1)][threadIdx.x + (q & 1)];
#pragma unroll 2
    for (int co = 0; co < C_OUT; co++) {
        float acc[8];
#pragma unroll
        for (int o = 0; o < 8; o++)
            acc[o] = s_bias[co];
#pragma unroll
        for (int ci = 0; ci < C_IN; ci++) {
            float wk[TAPS_PAD];
#pragma unroll
            for (int q = 0; q < TAPS_PAD / 4; q++) {
                float4 t = s_w4[co][ci][q];
                wk[4 * q] = t.x, wk[4 * q + 1] = t.y, wk[4 * q + 2] = t.z, wk[4 * q + 3] = t.w;
            }
#pragma unroll
            for (int k = 0; k < KS * KS * KS; k++) {
                int kd = k / 9, kh = (k / 3) % 3, kw = k % 3;
                int o = TAP_OUT(kd) * 4 + TAP_OUT(kh) * 2 + TAP_OUT(kw);
                acc[o] = fmaf(wk[k], xin[ci][TAP_IN(kd)][TAP_IN(kh)][TAP_IN(kw)], acc[o]);
            }
        }
        float *cn = c + (n * C_OUT + co) * s;
#pragma unroll
        for (int o = 0; o < 8; o++) {
            int zd = 2 * jd + (o >> 2), zh = 2 * jh + ((o >> 1) & 1), zw = 2 * jw + (o & 1);
            if (zd < od && zh < oh && zw < ow)
                cn[(zd * oh + zh) * ow + zw] = acc[o];
        }
    }
}

#define DW_TAPS (C_IN * KS * KS * KS) /* 81 sums per output channel */

/* [co][ci][k] -> PyTorch's [ci][co][k] */
__global__ void k_dw_reorder(const float *__restrict__ by_co, float *__restrict__ dw)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N_WEIGHT)
        return;
    int k = i % 27, co = (i / 27) % C_OUT, ci = i / (27 * C_OUT);
    dw[i] = by_co[(co * C_IN + ci) * 27 + k];
}

/* dw stage 1: block (bx, co) strides over input positions; writes 81 partials at
 * partials[(co * 81 + q) * gridDim.x + bx], q = ci * 27 + k, so stage 2 adds contiguous runs */
__global__ void __launch_bounds__(256)
    k_dw_partials(const float *__restrict__ x, const float *__restrict__ dc,
                  float *__restrict__ partials, int n, int d, int h, int w)
{
    __shared__ float red[8][DW_TAPS];
    int co = blockIdx.y, od = 2 * d - 1, oh = 2 * h - 1, ow = 2 * w - 1, s = od * oh * ow;
    int positions = n * d * h * w;
    float acc[DW_TAPS];
#pragma unroll
    for (int q = 0; q < DW_TAPS; q++)
        acc[q] = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < positions; i += gridDim.x * blockDim.x) {
        int jw = i % w, r = i / w, jh = r % h;
        r /= h;
        int jd = r % d, nn = r / d;
        float xv[C_IN];
#pragma unroll
        for (int ci = 0; ci < C_IN; ci++)
            xv[ci] = x[(((nn * C_IN + ci) * d + jd) * h + jh) * w + jw];
        const float *o = dc + (nn * C_OUT + co) * s;
#pragma unroll
        for (int k = 0; k < KS * KS * KS; k++) {
            int zd = 2 * jd - 1 + k / 9, zh = 2 * jh - 1 + (k / 3) % 3, zw = 2 * jw - 1 + k % 3;
            float v = (zd >= 0 && zd < od && zh >= 0 && zh < oh && zw >= 0 && zw < ow)
                          ? o[(zd * oh + zh) * ow + zw]
                          : 0.0f;
#pragma unroll
            for (int ci = 0; ci < C_IN; ci++)
                acc[ci * 27 + k] = fmaf(xv[ci], v, acc[ci * 27 + k]);
        }
    }
    /* reduce the 81 sums over the block: shuffles within each warp, then across warps */
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int q = 0; q < DW_TAPS; q++) {
        float v = acc[q];
        for (int off = 16; off > 0; off >>= 1)
            v += __shfl_down_sync(0xffffffffu, v, off);
        if (lane == 0)
            red[warp][q] = v;
    }
    __syncthreads();
    if (threadIdx.x < DW_TAPS) {
        float v = 0.0f;
        for (int wp = 0; wp < (int)(blockDim.x >> 5); wp++)
            v += red[wp][threadIdx.x];
        partials[(co * DW_TAPS + threadIdx.x) * gridDim.x + blockIdx.x] = v;
    }
}

/* A demonstration, not a version: logsumexp as the formula reads, log(sum(exp(v))), with the
 * fast intrinsics. exp(100) = 2.7e43 is past float's 3.4e38, so the sum is inf; exp(-100) =
 * 3.7e-44 is a float subnormal with a few significant bits left, so the sum is coarse. The
 * --test extreme-value checks run it beside the stable versions. This model's clamp hides the
 * damage in y (z = inf still gives y = 1), but the backward's softmax exp(v - z) would be 0 for
 * every channel: a silently zero gradient. Writes z and y. */
__global__ void k_epilogue_unstable(const float *__restrict__ c, const float *__restrict__ b,
                                    float *__restrict__ z, float *__restrict__ y, int n_pos, int s)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_pos; i += gridDim.x * blockDim.x) {
        int n = i / s, p = i - n * s;
        float sum = 0.0f;
        for (int ch = 0; ch < C_OUT; ch++)
            sum += __expf(c[(n * C_OUT + ch) * s + p]);
        z[i] = __logf(sum);
        y[i] = tail_fast(z[i], *b);
    }
}

/* ============================================================================================
 * 4. The baseline convolution (cuDNN), the versions table and the launchers
 * ========================================================================================== */

/*
 * PyTorch's ConvTranspose3d is the gradient of a Conv3d with respect to its input: cuDNN
 * computes it as cudnnConvolutionBackwardData of a forward conv that would map the 16-channel
 * output back to the 3-channel input. That forward conv's filter is K = 3 outputs x C = 16
 * inputs x 3 x 3 x 3, which is exactly PyTorch's transposed-conv weight layout (in x out x k^3).
 * The bias is added after, with cudnnAddTensor. CUDNN_FMA_MATH keeps cuDNN off TF32 tensor
 * cores, as PyTorch is with allow_tf32 = False: strict fp32 on both sides.
 */
typedef struct {
    cudnnHandle_t handle;
    cudnnTensorDescriptor_t x_desc, y_desc, b_desc;
    cudnnFilterDescriptor_t w_desc;
    cudnnConvolutionDescriptor_t conv_desc;
    cudnnConvolutionBwdDataAlgo_t algo;
    void *workspace;
    size_t workspace_bytes;
    int deterministic; /* the chosen algorithm gives the same bits every run */
    /* the conv's own gradients: dx is a forward Conv3d of dc, dw a backward-filter */
    cudnnConvolutionFwdAlgo_t dx_algo;
    cudnnConvolutionBwdFilterAlgo_t dw_algo;
    int grads_ready, dw_deterministic;
} cudnn_conv;

/* x, w and the output buffer y must be device buffers of the problem, x and w initialised:
 * cudnnFind...Ex times the algorithms on them and on a workspace we zero, so no algorithm reads
 * memory nobody wrote (the plain cudnnFind uses buffers of its own, which compute-sanitizer's
 * initcheck reports as uninitialised reads inside cuDNN). */
static void cudnn_conv_setup(cudnn_conv *cc, const shape *s, const float *x, const float *w,
                             float *y)
{
    int xd[5] = {s->n, C_IN, s->d, s->h, s->w};
    int xs[5] = {C_IN * s->d * s->h * s->w, s->d * s->h * s->w, s->h * s->w, s->w, 1};
    int yd[5] = {s->n, C_OUT, s->od, s->oh, s->ow};
    int ys[5] = {C_OUT * s->s, s->s, s->oh * s->ow, s->ow, 1};
    int bd[5] = {1, C_OUT, 1, 1, 1}, bs[5] = {C_OUT, 1, 1, 1, 1};
    int wd[5] = {C_IN, C_OUT, KS, KS, KS};
    int pad[3] = {1, 1, 1}, stride[3] = {2, 2, 2}, dil[3] = {1, 1, 1};
    memset(cc, 0, sizeof *cc);
    CUDNN_CHECK(cudnnCreate(&cc->handle));
    CUDNN_CHECK(cudnnSetStream(cc->handle, 0));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&cc->x_desc));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&cc->y_desc));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&cc->b_desc));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&cc->w_desc));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&cc->conv_desc));
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(cc->x_desc, CUDNN_DATA_FLOAT, 5, xd, xs));
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(cc->y_desc, CUDNN_DATA_FLOAT, 5, yd, ys));
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(cc->b_desc, CUDNN_DATA_FLOAT, 5, bd, bs));
    CUDNN_CHECK(cudnnSetFilterNdDescriptor(cc->w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 5, wd));
    CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(cc->conv_desc, 3, pad, stride, dil,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(cc->conv_desc, CUDNN_FMA_MATH));
    /* one workspace, as large as the hungriest algorithm asks (capped at 1 GiB: cudnnFind skips
     * an algorithm that needs more), zeroed */
    for (int a = 0; a < CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT; a++) {
        size_t bytes = 0;
        if (cudnnGetConvolutionBackwardDataWorkspaceSize(cc->handle, cc->w_desc, cc->x_desc,
                                                         cc->conv_desc, cc->y_desc,
                                                         (cudnnConvolutionBwdDataAlgo_t)a,
                                                         &bytes) == CUDNN_STATUS_SUCCESS &&
            bytes > cc->workspace_bytes && bytes <= ((size_t)1 << 30))
            cc->workspace_bytes = bytes;
    }
    cc->workspace = cc->workspace_bytes ? gpu_alloc(cc->workspace_bytes, "cuDNN workspace") : NULL;
    if (cc->workspace)
        CUDA_CHECK(cudaMemset(cc->workspace, 0, cc->workspace_bytes));
    /* cudnnFind times every algorithm on this shape and sorts them fastest first. The fastest
     * fp32 one is what PyTorch picks with torch.backends.cudnn.benchmark = True. It may be
     * nondeterministic (atomics): then the model's output can differ between runs in the last
     * bits, and the tests do not compare cuDNN-based model runs with each other. */
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int found = 0, pick = -1;
    CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
        cc->handle, cc->w_desc, w, cc->x_desc, x, cc->conv_desc, cc->y_desc, y,
        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found, perf, cc->workspace, cc->workspace_bytes));
    for (int i = 0; i < found && pick < 0; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].mathType != CUDNN_TENSOR_OP_MATH &&
            perf[i].mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
            pick = i;
    if (pick < 0)
        die(1, "cuDNN found no fp32 (non-tensor-core) algorithm for this transposed conv");
    cc->deterministic = perf[pick].determinism == CUDNN_DETERMINISTIC;
    cc->algo = perf[pick].algo;
    CUDNN_CHECK(cudnnSetConvolutionMathType(cc->conv_desc, perf[pick].mathType));
}

static void cudnn_conv_run(const cudnn_conv *cc, const float *x, const float *w, const float *bias,
                           float *out)
{
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnConvolutionBackwardData(cc->handle, &one, cc->w_desc, w, cc->x_desc, x,
                                             cc->conv_desc, cc->algo, cc->workspace,
                                             cc->workspace_bytes, &zero, cc->y_desc, out));
    CUDNN_CHECK(cudnnAddTensor(cc->handle, &one, cc->b_desc, bias, &one, cc->y_desc, out));
}

/*
 * The transposed conv's gradients through cuDNN, its algorithms chosen by cudnnFind...Ex on the
 * problem's own buffers (dc must hold finite values): dx = Conv3d(dc, w), a forward conv of the
 * 16-channel dc into 3 channels; dw = cudnnConvolutionBackwardFilter with dc as the "input" and x
 * as the "output gradient" (the transposed conv is that forward conv's data gradient, so the
 * roles swap); dbias = cudnnConvolutionBackwardBias of dc.
 */
static void cudnn_grads_setup(cudnn_conv *cc, const float *x, const float *w, const float *dc,
                              float *dx, float *dw)
{
    size_t need = 0, bytes;
    for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; a++)
        if (cudnnGetConvolutionForwardWorkspaceSize(cc->handle, cc->y_desc, cc->w_desc,
                                                    cc->conv_desc, cc->x_desc,
                                                    (cudnnConvolutionFwdAlgo_t)a,
                                                    &bytes) == CUDNN_STATUS_SUCCESS &&
            bytes > need && bytes <= ((size_t)1 << 30))
            need = bytes;
    for (int a = 0; a < CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT; a++)
        if (cudnnGetConvolutionBackwardFilterWorkspaceSize(cc->handle, cc->y_desc, cc->x_desc,
                                                           cc->conv_desc, cc->w_desc,
                                                           (cudnnConvolutionBwdFilterAlgo_t)a,
                                                           &bytes) == CUDNN_STATUS_SUCCESS &&
            bytes > need && bytes <= ((size_t)1 << 30))
            need = bytes;
    if (need > cc->workspace_bytes) {
        if (cc->workspace)
            CUDA_CHECK(cudaFree(cc->workspace));
        cc->workspace = gpu_alloc(need, "cuDNN workspace");
        cc->workspace_bytes = need;
    }
    if (cc->workspace)
        CUDA_CHECK(cudaMemset(cc->workspace, 0, cc->workspace_bytes));
    CUDNN_CHECK(cudnnSetConvolutionMathType(cc->conv_desc, CUDNN_FMA_MATH));
    cudnnConvolutionFwdAlgoPerf_t pf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    cudnnConvolutionBwdFilterAlgoPerf_t pw[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int found = 0, pick = -1;
    CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
        cc->handle, cc->y_desc, dc, cc->w_desc, w, cc->conv_desc, cc->x_desc, dx,
        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, pf, cc->workspace, cc->workspace_bytes));
    for (int i = 0; i < found && pick < 0; i++)
        if (pf[i].status == CUDNN_STATUS_SUCCESS && pf[i].mathType == CUDNN_FMA_MATH)
            pick = i;
    if (pick < 0)
        die(1, "cuDNN found no fp32 (non-tensor-core) algorithm for the conv's data gradient");
    cc->dx_algo = pf[pick].algo;
    found = 0, pick = -1;
    CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
        cc->handle, cc->y_desc, dc, cc->x_desc, x, cc->conv_desc, cc->w_desc, dw,
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found, pw, cc->workspace, cc->workspace_bytes));
    for (int i = 0; i < found && pick < 0; i++)
        if (pw[i].status == CUDNN_STATUS_SUCCESS && pw[i].mathType == CUDNN_FMA_MATH)
            pick = i;
    if (pick < 0)
        die(1, "cuDNN found no fp32 (non-tensor-core) algorithm for the conv's weight gradient");
    cc->dw_algo = pw[pick].algo;
    cc->dw_deterministic = pw[pick].determinism == CUDNN_DETERMINISTIC;
    cc->grads_ready = 1;
}

static void cudnn_dx(const cudnn_conv *cc, const float *w, const float *dc, float *dx)
{
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnConvolutionForward(cc->handle, &one, cc->y_desc, dc, cc->w_desc, w,
                                        cc->conv_desc, cc->dx_algo, cc->workspace,
                                        cc->workspace_bytes, &zero, cc->x_desc, dx));
}

static void cudnn_dw(const cudnn_conv *cc, const float *x, const float *dc, float *dw)
{
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(cc->handle, &one, cc->y_desc, dc, cc->x_desc, x,
                                               cc->conv_desc, cc->dw_algo, cc->workspace,
                                               cc->workspace_bytes, &zero, cc->w_desc, dw));
}

static void cudnn_dbias(const cudnn_conv *cc, const float *dc, float *dbias)
{
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnConvolutionBackwardBias(cc->handle, &one, cc->y_desc, dc, &zero, cc->b_desc,
                                             dbias));
}

static void cudnn_conv_destroy(cudnn_conv *cc)
{
    if (cc->workspace)
        CUDA_CHECK(cudaFree(cc->workspace));
    cudnnDestroyTensorDescriptor(cc->x_desc);
    cudnnDestroyTensorDescriptor(cc->y_desc);
    cudnnDestroyTensorDescriptor(cc->b_desc);
    cudnnDestroyFilterDescriptor(cc->w_desc);
    cudnnDestroyConvolutionDescriptor(cc->conv_desc);
    cudnnDestroy(cc->handle);
}

/* Everything a launch needs, all on the device. */
#define N_TMP 8
typedef struct {
    shape sh;
    int sm_count;
    const float *x, *weight, *conv_bias, *b; /* model input and parameters */
    float *conv;                             /* conv output: the epilogue's input */
    float *y;                                /* the output */
    float *tmp[N_TMP];                       /* v1's and b1's intermediates, N S floats each */
    const float *g;                          /* dL/dy, the upstream gradient */
    float *dc;                               /* dL/dc, 16 N S */
    float *db, *dx, *dw, *dbias;             /* the parameters' and the input's gradients */
    float *partials;                         /* one float per block, for the deterministic sums */
    int n_partials;
    float *partials2;                        /* dbias's, so it can run beside dw's */
    float *dw_by_co;                         /* dw in [co][ci][k] order before the reorder */
    cudnn_conv *cudnn;
} run_ctx;

static int grid_for(int n, int block, int sm_count)
{
    long long g = ((long long)n + block - 1) / block, cap = (long long)sm_count * 32;
    return (int)(g < cap ? g : cap) > 0 ? (int)(g < cap ? g : cap) : 1;
}

/* v1's intermediates, each its own tensor as in eager; b1 reads the saved z, t and s */
enum { T_Z, T_ZP3, T_T, T_ZT, T_A, T_S, T_X1, T_X2 };

static void launch_v1(const run_ctx *r)
{
    int n = (int)out_elems(&r->sh), g = grid_for(n, 256, r->sm_count);
    float *const *t = r->tmp;
    k_logsumexp_naive<<<g, 256>>>(r->conv, t[T_Z], n, r->sh.s); /* z */
    k_add_scalar<<<g, 256>>>(t[T_Z], 3.0f, t[T_ZP3], n);         /* z + 3 */
    k_sigmoid<<<g, 256>>>(t[T_ZP3], t[T_T], n);                  /* t = sigmoid(z + 3) */
    k_mul<<<g, 256>>>(t[T_Z], t[T_T], t[T_ZT], n);               /* z t */
    k_div_scalar<<<g, 256>>>(t[T_ZT], 6.0f, t[T_A], n);          /* a = z t / 6 */
    k_sub_param<<<g, 256>>>(t[T_A], r->b, t[T_S], n);            /* s = a - b */
    k_clamp<<<g, 256>>>(t[T_S], r->y, n);                        /* y = clamp(s, -1, 1) */
}

/* b1: autograd's backward over v1's saved z, t, s */
static void launch_b1(const run_ctx *r)
{
    int n = (int)out_elems(&r->sh), g = grid_for(n, 256, r->sm_count);
    float *const *t = r->tmp;
    float *ds = t[T_ZP3], *da = t[T_ZT], *dz1 = t[T_A], *dt = t[T_X1], *du = t[T_X2];
    k_clamp_backward<<<g, 256>>>(r->g, t[T_S], ds, n);             /* ds = g [-1 <= s <= 1] */
    k_partial_sums<<<r->n_partials, 256>>>(ds, r->partials, n);    /* db = -sum ds */
    k_final_sum<<<1, 1024>>>(r->partials, r->n_partials, -1.0f, r->db);
    k_div_scalar<<<g, 256>>>(ds, 6.0f, da, n);                     /* d(z t) = ds / 6 */
    k_mul_backward<<<g, 256>>>(da, t[T_Z], t[T_T], dz1, dt, n);    /* dz = d(zt) t, dt = d(zt) z */
    k_sigmoid_backward<<<g, 256>>>(dt, t[T_T], du, n);             /* d(z + 3) = dt t (1 - t) */
    k_add<<<g, 256>>>(dz1, du, ds, n);                             /* dz = both paths */
    k_logsumexp_backward<<<g, 256>>>(r->conv, t[T_Z], ds, r->dc, n, r->sh.s); /* dc */
}

static void launch_b2(const run_ctx *r)
{
    int quads = (r->sh.s + 3) / 4;
    dim3 grid((quads + 255) / 256, r->sh.n);
    k_epilogue_backward_fused<<<grid, 256>>>(r->conv, r->g, r->b, r->dc, r->partials, r->sh.s,
                                             (int)conv_elems(&r->sh));
    k_final_sum<<<1, 1024>>>(r->partials, grid.x * grid.y, -1.0f, r->db);
}

static void launch_v2(const run_ctx *r)
{
    int n = (int)out_elems(&r->sh);
    k_epilogue_fused<<<grid_for(n, 256, r->sm_count), 256>>>(r->conv, r->b, r->y, n, r->sh.s);
}

static void launch_v3(const run_ctx *r)
{
    k_epilogue_block_per_position<<<(unsigned)out_elems(&r->sh), C_OUT>>>(r->conv, r->b, r->y,
                                                                          r->sh.s);
}

static void launch_v4(const run_ctx *r)
{
    int quads = (r->sh.s + 3) / 4;
    dim3 grid((quads + V4_BLOCK - 1) / V4_BLOCK, r->sh.n);
    k_epilogue_vec4_online<<<grid, V4_BLOCK>>>(r->conv, r->b, r->y, r->sh.s, (int)conv_elems(&r->sh));
}

static void launch_v5(const run_ctx *r)
{
    const shape *s = &r->sh;
    /* the parameters live in global memory (a training step updates them): copy them into
     * constant memory on the stream, 5.2 KB, inside the timed region */
    CUDA_CHECK(cudaMemcpyToSymbolAsync(c_weight, r->weight, sizeof(float) * N_WEIGHT, 0,
                                       cudaMemcpyDeviceToDevice, 0));
    CUDA_CHECK(cudaMemcpyToSymbolAsync(c_conv_bias, r->conv_bias, sizeof(float) * C_OUT, 0,
                                       cudaMemcpyDeviceToDevice, 0));
    int tiles = ((s->w + TILE_W - 1) / TILE_W) * ((s->h + TILE_H - 1) / TILE_H);
    k_model_fused<<<dim3(tiles, s->d, s->n), dim3(TILE_W, TILE_H)>>>(r->x, r->b, r->y, s->d, s->h,
                                                                     s->w);
}

template <int CUBES>
static void launch_fused_smem(const run_ctx *r)
{
    const shape *s = &r->sh;
    int cols = V6_TW * CUBES;
    int tiles = ((s->w + cols - 1) / cols) * ((s->h + V6_TH - 1) / V6_TH);
    k_model_fused_v6<CUBES><<<dim3(tiles, s->d, s->n), dim3(V6_TW, V6_TH)>>>(
        r->x, r->weight, r->conv_bias, r->b, r->y, s->d, s->h, s->w);
}

static void launch_v6(const run_ctx *r) { launch_fused_smem<1>(r); }


/* b3's conv forward: the transposed conv by parity, writing c */
static void launch_conv_parity(const run_ctx *r)
{
    const shape *s = &r->sh;
    int tiles = ((s->w + V6_TW - 1) / V6_TW) * ((s->h + V6_TH - 1) / V6_TH);
    k_conv_transpose_parity<<<dim3(tiles, s->d, s->n), dim3(V6_TW, V6_TH)>>>(
        r->x, r->weight, r->conv_bias, r->conv, s->d, s->h, s->w);
}

#define DBIAS_BLOCKS 64 /* per channel: 16 x 64 blocks of 256 threads */
#define DW_BLOCKS 64    /* per channel: 16 x 64 blocks of 256 threads */

/* b3's conv gradients: cuDNN's dx, our deterministic dw and dbias */
static void conv_grads_own(const run_ctx *r)
{
    const shape *s = &r->sh;
    cudnn_dx(r->cudnn, r->weight, r->dc, r->dx);
    k_dw_partials<<<dim3(DW_BLOCKS, C_OUT), 256>>>(r->x, r->dc, r->partials, s->n, s->d, s->h, s->w);
    /* the partials of weight (ci, co, k) are contiguous: reorder to PyTorch's [ci][co][k] on the
     * way out by summing each run into its slot */
    k_segment_sums<<<C_OUT * DW_TAPS, 64>>>(r->partials, NULL, DW_BLOCKS, r->dw_by_co);
    k_dw_reorder<<<(N_WEIGHT + 255) / 256, 256>>>(r->dw_by_co, r->dw);
    k_channel_sums<<<dim3(DBIAS_BLOCKS, C_OUT), 256>>>(r->dc, NULL, r->partials2, s->n, s->s);
    k_segment_sums<<<C_OUT, 64>>>(r->partials2, NULL, DBIAS_BLOCKS, r->dbias);
}

static void launch_conv(const run_ctx *r)
{
    cudnn_conv_run(r->cudnn, r->x, r->weight, r->conv_bias, r->conv);
}

static void time_conv(const void *r) { launch_conv((const run_ctx *)r); }

/* cuDNN's three gradient operations one at a time, to see where a training step goes */
static void time_dx(const void *p)
{
    const run_ctx *r = (const run_ctx *)p;
    cudnn_dx(r->cudnn, r->weight, r->dc, r->dx);
}

static void time_dw(const void *p)
{
    const run_ctx *r = (const run_ctx *)p;
    cudnn_dw(r->cudnn, r->x, r->dc, r->dw);
}

static void time_dbias(const void *p)
{
    const run_ctx *r = (const run_ctx *)p;
    cudnn_dbias(r->cudnn, r->dc, r->dbias);
}

typedef struct {
    int id;
    const char *name;
    void (*epilogue)(const run_ctx *); /* reads r->conv; NULL if the version has no such form */
    void (*model)(const run_ctx *);    /* the whole model from x; NULL = cuDNN conv + epilogue */
} version;

static const version versions[] = {
    {1, "eager-like: cuDNN conv, 7 naive kernels", launch_v1, NULL},
    {2, "one fused epilogue kernel, thread per position", launch_v2, NULL},
    {3, "anti-pattern: block per position, smem tree", launch_v3, NULL},
    {4, "16-byte loads, online logsumexp, intrinsics", launch_v4, NULL},
    {5, "full fusion: transposed conv inside the kernel", NULL, launch_v5},
    {6, "full fusion: smem float4 weights, base-2 LSE", NULL, launch_v6},
};
#define N_VERSIONS ((int)(sizeof versions / sizeof versions[0]))

/* what gpu_time launches: one version in one scope */
typedef struct {
    const run_ctx *r;
    const version *v;
    int whole_model;
} job;

static void run_job(const void *p)
{
    const job *j = (const job *)p;
    if (!j->whole_model) {
        j->v->epilogue(j->r);
    } else if (j->v->model) {
        j->v->model(j->r);
    } else {
        launch_conv(j->r);
        j->v->epilogue(j->r);
    }
}

/* The backward versions: each pairs a forward with a backward of the epilogue. The training
 * step runs the whole model: cuDNN's transposed conv, this pair, then cuDNN's dx, dw, dbias. */
typedef struct {
    const char *id;
    const char *name;
    void (*forward)(const run_ctx *);    /* the epilogue forward */
    void (*backward)(const run_ctx *);   /* the epilogue backward: dc, db */
    void (*conv)(const run_ctx *);       /* the training step's conv forward, writing c */
    void (*conv_grads)(const run_ctx *); /* the training step's dx, dw, dbias */
} bwd_version;

static void conv_grads_cudnn(const run_ctx *r)
{
    cudnn_dx(r->cudnn, r->weight, r->dc, r->dx);
    cudnn_dw(r->cudnn, r->x, r->dc, r->dw);
    cudnn_dbias(r->cudnn, r->dc, r->dbias);
}

static const bwd_version bwd_versions[] = {
    {"b1", "autograd-like: v1 saving z t s; 8 kernels back", launch_v1, launch_b1, launch_conv,
     conv_grads_cudnn},
    {"b2", "fused: v4, then one pass recomputing z; det. db", launch_v4, launch_b2, launch_conv,
     conv_grads_cudnn},
    {"b3", "b2 + own conv fwd, dw, dbias (cuDNN dx only)", launch_v4, launch_b2,
     launch_conv_parity, conv_grads_own},
};
#define N_BWD ((int)(sizeof bwd_versions / sizeof bwd_versions[0]))

typedef struct {
    const run_ctx *r;
    const bwd_version *v;
    int train_step;
} bwd_job;

static void run_bwd_job(const void *p)
{
    const bwd_job *j = (const bwd_job *)p;
    if (j->train_step)
        j->v->conv(j->r);
    j->v->forward(j->r);
    j->v->backward(j->r);
    if (j->train_step)
        j->v->conv_grads(j->r);
}

/* ============================================================================================
 * 5. Verification and tests
 * ========================================================================================== */

/* fp32 against a double reference: the conv sums at most 81 products and the epilogue's
 * exp/log are accurate to a few ulp, so 1e-5 relative L2 and 1e-4 absolute leave room for
 * rounding and none for a wrong index or a missed tap. */
#define TOL_REL_L2 1e-5
#define TOL_ABS 1e-4

/* host and device copies of one problem */
typedef struct {
    shape sh;
    float *x, *weight, *conv_bias, b; /* host */
    float *g;                         /* host dL/dy, N(0, 1) */
    double *xd, *wd, *cbd;            /* the same in double, for the reference */
    run_ctx r;                        /* device */
    cudnn_conv cudnn;
    float *host_out;       /* N S floats: a version's output copied back */
    float *host_conv;      /* the cuDNN conv output copied back */
    float *host_dc, *host_dx, host_dw[N_WEIGHT], host_dbias[C_OUT], host_db;
    double *ref_conv;      /* double reference conv, 16 N S */
    double *ref_model;     /* reference y from the reference conv */
    double *ref_epilogue;  /* reference y from the GPU's conv output */
    /* backward references, computed when first needed (see problem_bwd_refs) */
    int have_bwd_refs;
    double *ref_dc_epilogue, ref_db_epilogue; /* from the GPU's conv output */
    double *ref_dc_model, ref_db_model;       /* from the reference conv */
    double *ref_dx, ref_dw[N_WEIGHT], ref_dbias[C_OUT];
    /* the sums of the magnitudes of the terms of each reduced gradient (verify_sum_f32) */
    double abs_db_epilogue, abs_db_model, abs_dw[N_WEIGHT], abs_dbias[C_OUT];
} problem;

static void *host_alloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        die(1, "out of host memory: %zu bytes", bytes);
    return p;
}

static void problem_params(problem *pb, uint64_t seed)
{
    rng_state rng;
    rng_seed(&rng, seed);
    fill_uniform(pb->x, x_elems(&pb->sh), 0.0, 1.0, &rng); /* torch.rand */
    /* ConvTranspose3d: fan_in = weight.size(1) * k^3 = 16 * 27 */
    init_conv_params(pb->weight, N_WEIGHT, pb->conv_bias, C_OUT, C_OUT * KS * KS * KS, &rng);
    pb->b = (float)rng_normal(&rng); /* torch.randn(1, 1, 1, 1) */
}

static void problem_init(problem *pb, const shape *s, int sm_count, uint64_t seed)
{
    memset(pb, 0, sizeof *pb);
    pb->sh = *s;
    pb->x = (float *)host_alloc(sizeof(float) * x_elems(s));
    pb->weight = (float *)host_alloc(sizeof(float) * N_WEIGHT);
    pb->conv_bias = (float *)host_alloc(sizeof(float) * C_OUT);
    pb->host_out = (float *)host_alloc(sizeof(float) * out_elems(s));
    pb->host_conv = (float *)host_alloc(sizeof(float) * conv_elems(s));
    pb->ref_conv = (double *)host_alloc(sizeof(double) * conv_elems(s));
    pb->ref_model = (double *)host_alloc(sizeof(double) * out_elems(s));
    pb->ref_epilogue = (double *)host_alloc(sizeof(double) * out_elems(s));
    pb->g = (float *)host_alloc(sizeof(float) * out_elems(s));
    pb->xd = (double *)host_alloc(sizeof(double) * x_elems(s));
    pb->wd = (double *)host_alloc(sizeof(double) * N_WEIGHT);
    pb->cbd = (double *)host_alloc(sizeof(double) * C_OUT);
    pb->host_dc = (float *)host_alloc(sizeof(float) * conv_elems(s));
    pb->host_dx = (float *)host_alloc(sizeof(float) * x_elems(s));
    pb->ref_dc_epilogue = (double *)host_alloc(sizeof(double) * conv_elems(s));
    pb->ref_dc_model = (double *)host_alloc(sizeof(double) * conv_elems(s));
    pb->ref_dx = (double *)host_alloc(sizeof(double) * x_elems(s));
    problem_params(pb, seed);
    rng_state rng_g;
    rng_seed(&rng_g, seed ^ 0x5DEECE66Dull); /* g from its own stream: x and the weights keep
                                                 the values they have without a backward */
    fill_normal(pb->g, out_elems(s), &rng_g);

    run_ctx *r = &pb->r;
    r->sh = *s;
    r->sm_count = sm_count;
    float *x = (float *)gpu_alloc(sizeof(float) * x_elems(s), "input x");
    float *w = (float *)gpu_alloc(sizeof(float) * N_WEIGHT, "conv weight");
    float *cb = (float *)gpu_alloc(sizeof(float) * C_OUT, "conv bias");
    float *b = (float *)gpu_alloc(sizeof(float), "bias b");
    r->conv = (float *)gpu_alloc(sizeof(float) * conv_elems(s), "conv output");
    r->y = (float *)gpu_alloc(sizeof(float) * out_elems(s), "output y");
    for (int i = 0; i < N_TMP; i++)
        r->tmp[i] = (float *)gpu_alloc(sizeof(float) * out_elems(s), "v1/b1 intermediate");
    r->x = x, r->weight = w, r->conv_bias = cb, r->b = b;
    float *g = (float *)gpu_alloc(sizeof(float) * out_elems(s), "grad_output g");
    CUDA_CHECK(cudaMemcpy(g, pb->g, sizeof(float) * out_elems(s), cudaMemcpyHostToDevice));
    r->g = g;
    r->dc = (float *)gpu_alloc(sizeof(float) * conv_elems(s), "dL/dc");
    r->db = (float *)gpu_alloc(sizeof(float), "dL/db");
    r->dx = (float *)gpu_alloc(sizeof(float) * x_elems(s), "dL/dx");
    r->dw = (float *)gpu_alloc(sizeof(float) * N_WEIGHT, "dL/dw");
    r->dbias = (float *)gpu_alloc(sizeof(float) * C_OUT, "dL/dbias");
    r->n_partials = sm_count * 4; /* k_partial_sums' grid */
    int b2_blocks = ((s->s + 3) / 4 + 255) / 256 * s->n;
    int most = b2_blocks > r->n_partials ? b2_blocks : r->n_partials;
    most = most > DW_BLOCKS * C_OUT * DW_TAPS ? most : DW_BLOCKS * C_OUT * DW_TAPS;
    r->partials = (float *)gpu_alloc(sizeof(float) * (size_t)most, "partial sums");
    r->partials2 = (float *)gpu_alloc(sizeof(float) * DBIAS_BLOCKS * C_OUT, "dbias partial sums");
    r->dw_by_co = (float *)gpu_alloc(sizeof(float) * N_WEIGHT, "dw by channel");
    CUDA_CHECK(cudaMemcpy(w, pb->weight, sizeof(float) * N_WEIGHT, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(cb, pb->conv_bias, sizeof(float) * C_OUT, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(b, &pb->b, sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(x, pb->x, sizeof(float) * x_elems(s), cudaMemcpyHostToDevice));
    gpu_poison(r->conv, conv_elems(s));
    cudnn_conv_setup(&pb->cudnn, s, x, w, r->conv);
    r->cudnn = &pb->cudnn;
    CUDA_CHECK(cudaMemset(r->dc, 0, sizeof(float) * conv_elems(s)));
    cudnn_grads_setup(&pb->cudnn, x, w, r->dc, r->dx, r->dw);
}

/* Uploads x (after the caller changed it), runs the cuDNN conv and computes both references. */
static void problem_refresh(problem *pb)
{
    const shape *s = &pb->sh;
    CUDA_CHECK(cudaMemcpy((void *)pb->r.x, pb->x, sizeof(float) * x_elems(s),
                          cudaMemcpyHostToDevice));
    launch_conv(&pb->r);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(pb->host_conv, pb->r.conv, sizeof(float) * conv_elems(s),
                          cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < x_elems(s); i++)
        pb->xd[i] = pb->x[i];
    for (int i = 0; i < N_WEIGHT; i++)
        pb->wd[i] = pb->weight[i];
    for (int i = 0; i < C_OUT; i++)
        pb->cbd[i] = pb->conv_bias[i];
    conv_transpose_ref(s, pb->xd, pb->wd, pb->cbd, pb->ref_conv);
    epilogue_ref(s, NULL, pb->ref_conv, pb->b, pb->ref_model);
    epilogue_ref(s, pb->host_conv, NULL, pb->b, pb->ref_epilogue);
    pb->have_bwd_refs = 0;
}

/* The backward references, computed once per state of the problem (they cost as much as the
 * forward reference twice over, so only runs that check a backward pay for them). */
static void problem_bwd_refs(problem *pb)
{
    const shape *s = &pb->sh;
    if (pb->have_bwd_refs)
        return;
    pb->ref_db_epilogue = epilogue_backward_ref(s, pb->host_conv, NULL, pb->b, pb->g,
                                                pb->ref_dc_epilogue, &pb->abs_db_epilogue);
    pb->ref_db_model = epilogue_backward_ref(s, NULL, pb->ref_conv, pb->b, pb->g, pb->ref_dc_model,
                                             &pb->abs_db_model);
    conv_transpose_backward_ref(s, pb->xd, pb->wd, pb->ref_dc_model, pb->ref_dx, pb->ref_dw,
                                pb->ref_dbias, pb->abs_dw, pb->abs_dbias);
    pb->have_bwd_refs = 1;
}

/* Sets the conv output directly (extreme-value tests) and recomputes the epilogue reference. */
static void problem_set_conv(problem *pb, const float *conv)
{
    const shape *s = &pb->sh;
    memcpy(pb->host_conv, conv, sizeof(float) * conv_elems(s));
    CUDA_CHECK(cudaMemcpy(pb->r.conv, conv, sizeof(float) * conv_elems(s), cudaMemcpyHostToDevice));
    epilogue_ref(s, pb->host_conv, NULL, pb->b, pb->ref_epilogue);
    pb->have_bwd_refs = 0;
}

static void problem_free(problem *pb)
{
    run_ctx *r = &pb->r;
    cudnn_conv_destroy(&pb->cudnn);
    const void *dev[] = {r->x, r->weight, r->conv_bias, r->b, r->conv, r->y, r->g, r->dc,
                         r->db, r->dx, r->dw, r->dbias, r->partials, r->partials2,
                         r->dw_by_co};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        CUDA_CHECK(cudaFree((void *)dev[i]));
    for (int i = 0; i < N_TMP; i++)
        CUDA_CHECK(cudaFree(r->tmp[i]));
    free(pb->x), free(pb->weight), free(pb->conv_bias), free(pb->host_out), free(pb->host_conv);
    free(pb->ref_conv), free(pb->ref_model), free(pb->ref_epilogue), free(pb->g), free(pb->xd);
    free(pb->wd), free(pb->cbd), free(pb->host_dc), free(pb->host_dx), free(pb->ref_dc_epilogue);
    free(pb->ref_dc_model), free(pb->ref_dx);
}

/* Poison y with NaN, run the version once, copy y back, compare every element. */
static verify_result verify_version(problem *pb, const version *v, int whole_model)
{
    job j = {&pb->r, v, whole_model};
    gpu_poison(pb->r.y, out_elems(&pb->sh));
    run_job(&j);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(pb->host_out, pb->r.y, sizeof(float) * out_elems(&pb->sh),
                          cudaMemcpyDeviceToHost));
    return verify_f32(pb->host_out, whole_model ? pb->ref_model : pb->ref_epilogue,
                      out_elems(&pb->sh), TOL_REL_L2, TOL_ABS);
}

static int version_selected(int id, int only) { return only == 0 || only == id; }

/* Share of reference outputs strictly inside (-1, 1). Where it is 0 the clamp decides every
 * output and a check says little about the rest of the epilogue, so every check prints it. */
static double inside_share(const double *ref, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ref[i] > -1.0 && ref[i] < 1.0;
    return n ? (double)k / (double)n : 0.0;
}

/* Sets b on the host and the device and recomputes both references' tails. */
static void problem_set_b(problem *pb, float b)
{
    pb->b = b;
    CUDA_CHECK(cudaMemcpy((void *)pb->r.b, &b, sizeof(float), cudaMemcpyHostToDevice));
    epilogue_ref(&pb->sh, NULL, pb->ref_conv, pb->b, pb->ref_model);
    epilogue_ref(&pb->sh, pb->host_conv, NULL, pb->b, pb->ref_epilogue);
    pb->have_bwd_refs = 0;
}

/* Gradients that are sums over every position (db, dw, dbias) are judged against the sum of the
 * magnitudes of their terms: 1e-6 of it is about 16 float roundings of the whole sum. At the
 * KernelBench shape dbias sums 7.9 M terms per channel that largely cancel, so a relative error
 * against the sum itself measured 1.4e-5 for cuDNN's (correct) result. */
#define TOL_SUM 1e-6

/* Poison every output of a backward version, run it (forward + backward, or the training step),
 * copy back and compare each gradient. Returns how many of the n_out results passed. */
#define N_GRADS 6
static int verify_bwd(problem *pb, const bwd_version *v, int train, verify_result res[N_GRADS],
                      const char *names[N_GRADS], int *n_out)
{
    run_ctx *r = &pb->r;
    const shape *s = &pb->sh;
    problem_bwd_refs(pb);
    gpu_poison(r->y, out_elems(s));
    gpu_poison(r->dc, conv_elems(s));
    gpu_poison(r->db, 1);
    gpu_poison(r->dx, x_elems(s));
    gpu_poison(r->dw, N_WEIGHT);
    gpu_poison(r->dbias, C_OUT);
    bwd_job j = {r, v, train};
    run_bwd_job(&j);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(pb->host_out, r->y, sizeof(float) * out_elems(s), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(pb->host_dc, r->dc, sizeof(float) * conv_elems(s), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(&pb->host_db, r->db, sizeof(float), cudaMemcpyDeviceToHost));
    int n = 0;
    names[n] = "y";
    res[n++] = verify_f32(pb->host_out, train ? pb->ref_model : pb->ref_epilogue, out_elems(s),
                          TOL_REL_L2, TOL_ABS);
    names[n] = "dc";
    res[n++] = verify_f32(pb->host_dc, train ? pb->ref_dc_model : pb->ref_dc_epilogue,
                          conv_elems(s), TOL_REL_L2, TOL_ABS);
    names[n] = "db";
    res[n++] = verify_sum_f32(&pb->host_db, train ? &pb->ref_db_model : &pb->ref_db_epilogue,
                              train ? &pb->abs_db_model : &pb->abs_db_epilogue, 1, TOL_SUM);
    if (train) {
        CUDA_CHECK(cudaMemcpy(pb->host_dx, r->dx, sizeof(float) * x_elems(s), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(pb->host_dw, r->dw, sizeof(float) * N_WEIGHT, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(pb->host_dbias, r->dbias, sizeof(float) * C_OUT, cudaMemcpyDeviceToHost));
        names[n] = "dx";
        res[n++] = verify_f32(pb->host_dx, pb->ref_dx, x_elems(s), TOL_REL_L2, TOL_ABS);
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

/* Every backward version, epilogue forward+backward and (unless the conv output was set by
 * hand) the whole training step, twice: the fused backward's db must be the same bits. */
static void check_bwd_versions(problem *pb, const char *label, int epilogue_only)
{
    char shape_s[64];
    snprintf(shape_s, sizeof shape_s, "%dx3x%dx%dx%d", pb->sh.n, pb->sh.d, pb->sh.h, pb->sh.w);
    for (int i = 0; i < N_BWD; i++)
        for (int train = 0; train < 2; train++) {
            if (train && epilogue_only)
                continue;
            verify_result a[N_GRADS], b[N_GRADS];
            const char *names[N_GRADS];
            int n = 0, pa = verify_bwd(pb, &bwd_versions[i], train, a, names, &n);
            int pb2 = verify_bwd(pb, &bwd_versions[i], train, b, names, &n);
            char line[512];
            /* the training step's cuDNN conv may be nondeterministic: then c, and so db, can
             * change in the last bits between runs */
            int must_match = !train || pb->cudnn.deterministic;
            int len = 0, same_db = !must_match || a[2].max_abs == b[2].max_abs;
            for (int k = 0; k < n; k++)
                len += snprintf(line + len, sizeof line - len, " %s %.1e", names[k], a[k].rel_l2);
            check(pa == n && pb2 == n && same_db, "%s %-8s %-14s %-14s rel_l2:%s%s", bwd_versions[i].id,
                  train ? "train" : "fwd+bwd", shape_s, label, line,
                  same_db ? "" : " (db differs between runs)");
        }
}

/* Every selected version, both scopes where it has them, twice (a moving result is a race). */
static void check_versions(problem *pb, const char *label, int only, int epilogue_only)
{
    char shape_s[64];
    snprintf(shape_s, sizeof shape_s, "%dx3x%dx%dx%d", pb->sh.n, pb->sh.d, pb->sh.h, pb->sh.w);
    for (int i = 0; i < N_VERSIONS; i++) {
        const version *v = &versions[i];
        if (!version_selected(v->id, only))
            continue;
        for (int whole = 0; whole < 2; whole++) {
            if ((!whole && !v->epilogue) || (whole && epilogue_only))
                continue;
            verify_result a = verify_version(pb, v, whole), b = verify_version(pb, v, whole);
            /* a moving result is a race, unless it is cuDNN's nondeterministic algorithm */
            int compare = !(whole && !v->model && !pb->cudnn.deterministic);
            int same = !compare || (a.rel_l2 == b.rel_l2 && a.max_abs == b.max_abs);
            double inside = inside_share(whole ? pb->ref_model : pb->ref_epilogue,
                                         out_elems(&pb->sh));
            check(a.pass && b.pass && same,
                  "v%d %-8s %-14s %-14s rel_l2 %.1e max_abs %.1e inside %3.0f%%%s%s", v->id,
                  whole ? "model" : "epilogue", shape_s, label, a.rel_l2, a.max_abs, 100 * inside,
                  a.nonfinite ? " (non-finite outputs)" : (same ? "" : " (differs between runs)"),
                  compare ? "" : " (cuDNN nondeterministic: runs not compared)");
        }
    }
}

/* --- the CPU checks: these run everywhere, CI included --- */

/* The transposed conv again, as a gather: each output asks which inputs reach it. An independent
 * formulation of the same definition, so a wrong index in either shows up. */
static double conv_gather_point(const shape *s, const float *x, const float *w, const float *bias,
                                int n, int co, int od, int oh, int ow)
{
    double acc = bias[co];
    for (int ci = 0; ci < C_IN; ci++)
        for (int kd = 0; kd < KS; kd++)
            for (int kh = 0; kh < KS; kh++)
                for (int kw = 0; kw < KS; kw++) {
                    int td = od + 1 - kd, th = oh + 1 - kh, tw = ow + 1 - kw;
                    if (td % 2 || th % 2 || tw % 2 || td < 0 || th < 0 || tw < 0)
                        continue;
                    int id = td / 2, ih = th / 2, iw = tw / 2;
                    if (id >= s->d || ih >= s->h || iw >= s->w)
                        continue;
                    acc += (double)x[(((n * C_IN + ci) * s->d + id) * s->h + ih) * s->w + iw] *
                           w[(((ci * C_OUT + co) * KS + kd) * KS + kh) * KS + kw];
                }
    return acc;
}

/* L = sum g y as a function of the model's tensors, for the central-difference checker */
typedef struct {
    shape sh;
    double *x, *w, *cb, *b, *c; /* the tensors gradcheck perturbs in place */
    const float *g;
    double *y;
    int epilogue_only; /* 1: c is the input (the epilogue alone); 0: c is computed from x */
} loss_ctx;

static double model_loss(const double *unused, void *p)
{
    loss_ctx *L = (loss_ctx *)p;
    (void)unused; /* gradcheck perturbs one of L's own arrays */
    if (!L->epilogue_only)
        conv_transpose_ref(&L->sh, L->x, L->w, L->cb, L->c);
    epilogue_ref(&L->sh, NULL, L->c, *L->b, L->y);
    double sum = 0.0;
    for (size_t i = 0; i < out_elems(&L->sh); i++)
        sum += L->g[i] * L->y[i];
    return sum;
}

/* The hand-derived gradients of section 2b against central differences of L = sum g y, on a
 * tiny shape, for every tensor: the conv output, b, the conv weight and bias, the input. Two
 * values of b: 0.25 keeps every output inside the clamp, -0.5 puts them astride the bound. */
static void gradient_checks(uint64_t seed)
{
    shape s = make_shape(1, 2, 3, 2);
    size_t nx = x_elems(&s), nc = conv_elems(&s), ny = out_elems(&s);
    double *x = (double *)host_alloc(sizeof(double) * nx), w[N_WEIGHT], cb[C_OUT], b;
    double *c = (double *)host_alloc(sizeof(double) * nc), *y = (double *)host_alloc(sizeof(double) * ny);
    double *dc = (double *)host_alloc(sizeof(double) * nc), *dx = (double *)host_alloc(sizeof(double) * nx);
    double dw[N_WEIGHT], dcb[C_OUT];
    float *g = (float *)host_alloc(sizeof(float) * ny), tmp[N_WEIGHT];
    rng_state rng;
    rng_seed(&rng, seed + 11);
    for (size_t i = 0; i < nx; i++)
        x[i] = rng_uniform(&rng);
    init_conv_params(tmp, N_WEIGHT, NULL, 0, C_OUT * 27, &rng);
    for (int i = 0; i < N_WEIGHT; i++)
        w[i] = tmp[i];
    init_conv_params(tmp, C_OUT, NULL, 0, C_OUT * 27, &rng);
    for (int i = 0; i < C_OUT; i++)
        cb[i] = tmp[i];
    fill_normal(g, ny, &rng);
    loss_ctx L = {s, x, w, cb, &b, c, g, y, 0};
    const double h = 1e-6;
    for (int k = 0; k < 2; k++) {
        b = k ? -0.5 : 0.25;
        conv_transpose_ref(&s, x, w, cb, c);
        double db = epilogue_backward_ref(&s, NULL, c, b, g, dc, NULL);
        conv_transpose_backward_ref(&s, x, w, dc, dx, dw, dcb, NULL, NULL);
        L.epilogue_only = 1;
        double e_c = gradcheck(model_loss, &L, c, nc, dc, h, NULL);
        L.epilogue_only = 0;
        double e_b = gradcheck(model_loss, &L, &b, 1, &db, h, NULL);
        double e_w = gradcheck(model_loss, &L, w, N_WEIGHT, dw, h, NULL);
        double e_cb = gradcheck(model_loss, &L, cb, C_OUT, dcb, h, NULL);
        double e_x = gradcheck(model_loss, &L, x, nx, dx, h, NULL);
        const double tol = 1e-6;
        const char *when = k ? "b = -0.5, outputs astride the clamp" : "b = 0.25";
        check(e_c < tol, "cpu: gradcheck dL/dc (epilogue, %zu values), %s: rel error %.1e", nc, when, e_c);
        check(e_b < tol, "cpu: gradcheck dL/db, %s: rel error %.1e", when, e_b);
        check(e_w < tol, "cpu: gradcheck dL/dw (1296 conv weights), %s: rel error %.1e", when, e_w);
        check(e_cb < tol, "cpu: gradcheck dL/dbias (16 conv biases), %s: rel error %.1e", when, e_cb);
        check(e_x < tol, "cpu: gradcheck dL/dx (%zu inputs), %s: rel error %.1e", nx, when, e_x);
    }
    free(x), free(c), free(y), free(dc), free(dx), free(g);
}

static void golden_checks(void); /* below: against PyTorch's own numbers */

static void cpu_checks(uint64_t seed)
{
    /* 1. reference conv (scatter) against the gather form */
    shape s = make_shape(2, 3, 4, 5);
    float *x = (float *)host_alloc(sizeof(float) * x_elems(&s)), w[N_WEIGHT], cb[C_OUT];
    double *ref = (double *)host_alloc(sizeof(double) * conv_elems(&s));
    rng_state rng;
    rng_seed(&rng, seed);
    fill_uniform(x, x_elems(&s), 0.0, 1.0, &rng);
    init_conv_params(w, N_WEIGHT, cb, C_OUT, C_OUT * 27, &rng);
    double *xd = (double *)host_alloc(sizeof(double) * x_elems(&s)), wd[N_WEIGHT], cbd[C_OUT];
    for (size_t i = 0; i < x_elems(&s); i++)
        xd[i] = x[i];
    for (int i = 0; i < N_WEIGHT; i++)
        wd[i] = w[i];
    for (int i = 0; i < C_OUT; i++)
        cbd[i] = cb[i];
    conv_transpose_ref(&s, xd, wd, cbd, ref);
    free(xd);
    double worst = 0;
    for (int n = 0; n < s.n; n++)
        for (int co = 0; co < C_OUT; co++)
            for (int od = 0; od < s.od; od++)
                for (int oh = 0; oh < s.oh; oh++)
                    for (int ow = 0; ow < s.ow; ow++) {
                        size_t i = (((size_t)n * C_OUT + co) * s.od + od) * s.oh * s.ow + oh * s.ow + ow;
                        worst = fmax(worst, fabs(ref[i] - conv_gather_point(&s, x, w, cb, n, co, od, oh, ow)));
                    }
    check(worst < 1e-12, "cpu: reference conv (scatter) = gather form on 2x3x3x4x5, max diff %.1e",
          worst);

    /* 2. v5's per-thread parity computation, run on the host over the whole tensor */
    double *yref = (double *)host_alloc(sizeof(double) * out_elems(&s));
    float *yf = (float *)host_alloc(sizeof(float) * out_elems(&s));
    float b = 0.3f;
    epilogue_ref(&s, NULL, ref, b, yref);
    for (int n = 0; n < s.n; n++)
        for (int jd = 0; jd < s.d; jd++)
            for (int jh = 0; jh < s.h; jh++)
                for (int jw = 0; jw < s.w; jw++) {
                    float xin[C_IN][2][2][2], z[8];
                    for (int ci = 0; ci < C_IN; ci++)
                        for (int q = 0; q < 8; q++) {
                            int gd = jd + (q >> 2), gh = jh + ((q >> 1) & 1), gw = jw + (q & 1);
                            xin[ci][q >> 2][(q >> 1) & 1][q & 1] =
                                (gd < s.d && gh < s.h && gw < s.w)
                                    ? x[(((n * C_IN + ci) * s.d + gd) * s.h + gh) * s.w + gw]
                                    : 0.0f;
                        }
                    fused_cube_lse(w, cb, xin, z);
                    for (int o = 0; o < 8; o++) {
                        int zd = 2 * jd + (o >> 2), zh = 2 * jh + ((o >> 1) & 1), zw = 2 * jw + (o & 1);
                        if (zd < s.od && zh < s.oh && zw < s.ow)
                            yf[(size_t)n * s.s + (zd * s.oh + zh) * s.ow + zw] = tail_fast(z[o], b);
                    }
                }
    verify_result v = verify_f32(yf, yref, out_elems(&s), TOL_REL_L2, TOL_ABS);
    check(v.pass, "cpu: v5's parity decomposition + online LSE (host run) = reference, rel_l2 %.1e",
          v.rel_l2);

    /* 3. the lesson in numbers: 16 channels near +100 and near -100, in float */
    for (int sign = 1; sign >= -1; sign -= 2) {
        double vd[C_OUT];
        float vf[C_OUT];
        for (int c = 0; c < C_OUT; c++)
            vf[c] = (float)(sign * 100.0 + c * 0.25), vd[c] = vf[c];
        float naive = 0, m = -INFINITY, sum = 0;
        for (int c = 0; c < C_OUT; c++)
            naive += expf(vf[c]);
        naive = logf(naive);
        for (int c = 0; c < C_OUT; c++)
            m = fmaxf(m, vf[c]);
        for (int c = 0; c < C_OUT; c++)
            sum += expf(vf[c] - m);
        double exact = lse_ref(vd, C_OUT), stable = m + logf(sum);
        double err_naive = fabs(naive - exact), err_stable = fabs(stable - exact);
        if (sign > 0)
            check(isinf(naive), "cpu: at +100, float log(sum(exp(v))) overflows: %g (exact %.6f)",
                  naive, exact);
        else /* exp(-100) = 3.7e-44 is subnormal in float: about 5 significant bits are left */
            check(!(err_naive <= 10.0 * err_stable),
                  "cpu: at -100, float log(sum(exp(v))) works in subnormals: error %.1e, "
                  "%.0fx the stable form's", err_naive, err_naive / fmax(err_stable, 1e-12));
        check(err_stable < 1e-6 * fabs(exact),
              "cpu: at %+d, the stable form m + log(sum(exp(v - m))) = %.6f (exact %.6f)",
              sign * 100, stable, exact);
    }

    /* 4. the tail at hand-computed points */
    check(tail_ref(0.0, 0.0) == 0.0 && fabs(tail_ref(3.0, 0.0) - 0.5 / (1.0 + exp(-6.0))) < 1e-15 &&
              tail_ref(20.0, 0.5) == 1.0 && tail_ref(-20.0, 1.5) == -1.0,
          "cpu: tail(z) = clamp(z sigmoid(z+3)/6 - b) at z = 0, 3, +-20");
    double eq[C_OUT];
    for (int c = 0; c < C_OUT; c++)
        eq[c] = 2.5;
    check(fabs(lse_ref(eq, C_OUT) - (2.5 + log(16.0))) < 1e-14, "cpu: LSE of 16 equal values = v + log 16");
    free(x), free(ref), free(yref), free(yf);
    gradient_checks(seed);
    golden_checks();
}

/* --- against PyTorch: golden tensors (data/golden/ch01/<shape>/, from
 * `python3 data/pytorch_peer.py golden`: PyTorch's model in float64, stored as float32). They
 * catch a reference that agrees with itself but means something else than PyTorch's model. */

#define GOLDEN_DIR "data/golden/ch01"


static void golden_case(const char *dir, const char *shape_name)
{
    int64_t dims[5];
    char err[256];
    if (parse_shape(shape_name, 5, dims, err, sizeof err) || shape_problem(dims)) {
        check(0, "golden: %s is not a shape of this model", dir);
        return;
    }
    shape s = make_shape((int)dims[0], (int)dims[2], (int)dims[3], (int)dims[4]);
    size_t nx = x_elems(&s), nc = conv_elems(&s), ny = out_elems(&s);
    const char *names[] = {"x", "conv_weight", "conv_bias", "bias", "grad_output", "out",
                           "grad_conv_out", "grad_bias", "grad_conv_weight", "grad_conv_bias",
                           "grad_x"};
    size_t sizes[] = {nx, N_WEIGHT, C_OUT, 1, ny, ny, nc, 1, N_WEIGHT, C_OUT, nx};
    float *t[11];
    int ok = 1;
    for (int i = 0; i < 11; i++)
        ok &= (t[i] = npy_load(dir, names[i], sizes[i])) != NULL;
    if (!ok) {
        check(0, "golden %s: missing or malformed tensors", shape_name);
        for (int i = 0; i < 11; i++)
            free(t[i]);
        return;
    }
    double *xd = (double *)host_alloc(sizeof(double) * nx), wd[N_WEIGHT], cbd[C_OUT];
    double *c = (double *)host_alloc(sizeof(double) * nc), *y = (double *)host_alloc(sizeof(double) * ny);
    double *dc = (double *)host_alloc(sizeof(double) * nc), *dx = (double *)host_alloc(sizeof(double) * nx);
    double dw[N_WEIGHT], dbias[C_OUT], abs_dw[N_WEIGHT], abs_dbias[C_OUT], db_abs;
    for (size_t i = 0; i < nx; i++)
        xd[i] = t[0][i];
    for (int i = 0; i < N_WEIGHT; i++)
        wd[i] = t[1][i];
    for (int i = 0; i < C_OUT; i++)
        cbd[i] = t[2][i];
    double b = t[3][0];
    conv_transpose_ref(&s, xd, wd, cbd, c);
    epilogue_ref(&s, NULL, c, b, y);
    double db = epilogue_backward_ref(&s, NULL, c, b, t[4], dc, &db_abs);
    conv_transpose_backward_ref(&s, xd, wd, dc, dx, dw, dbias, abs_dw, abs_dbias);
    /* golden = the float32 rounding of PyTorch's float64 result: 1e-6 leaves room for that
     * rounding and for summation order, none for another formula */
    verify_result v[6] = {
        verify_f32(t[5], y, ny, 1e-6, 1e-6),
        verify_f32(t[6], dc, nc, 1e-6, 1e-6),
        verify_sum_f32(t[7], &db, &db_abs, 1, 1e-6),
        verify_sum_f32(t[8], dw, abs_dw, N_WEIGHT, 1e-6),
        verify_sum_f32(t[9], dbias, abs_dbias, C_OUT, 1e-6),
        verify_f32(t[10], dx, nx, 1e-6, 1e-6),
    };
    check(v[0].pass && v[1].pass && v[2].pass && v[3].pass && v[4].pass && v[5].pass,
          "golden %s (PyTorch float64): rel_l2 y %.1e dc %.1e db %.1e dw %.1e dbias %.1e dx %.1e",
          shape_name, v[0].rel_l2, v[1].rel_l2, v[2].rel_l2, v[3].rel_l2, v[4].rel_l2, v[5].rel_l2);
    /* the same check would catch a reference that means something else: nn.Hardswish,
     * z relu6(z + 3) / 6, in place of z sigmoid(z + 3) / 6 */
    for (size_t i = 0; i < ny; i++) {
        int n = (int)(i / s.s), p = (int)(i % s.s);
        double vv[C_OUT];
        for (int ch = 0; ch < C_OUT; ch++)
            vv[ch] = c[((size_t)n * C_OUT + ch) * s.s + p];
        double z = lse_ref(vv, C_OUT), hs = z * fmin(fmax(z + 3.0, 0.0), 6.0) / 6.0 - b;
        y[i] = hs < -1.0 ? -1.0 : (hs > 1.0 ? 1.0 : hs);
    }
    verify_result alt = verify_f32(t[5], y, ny, 1e-6, 1e-6);
    check(!alt.pass, "golden %s: a reference with nn.Hardswish instead is caught, rel_l2 %.1e",
          shape_name, alt.rel_l2);
    free(xd), free(c), free(y), free(dc), free(dx);
    for (int i = 0; i < 11; i++)
        free(t[i]);
}

static void golden_checks(void) { for_each_golden_case(GOLDEN_DIR, golden_case); }

/* --- the GPU checks --- */

static const int test_shapes[][4] = {
    /* N, D, H, W: output 2L-1 per axis */
    {1, 1, 1, 1},   /* one output position */
    {1, 2, 3, 5},   /* 3 x 5 x 9 */
    {2, 3, 7, 11},  /* primes: 5 x 13 x 21 */
    {3, 5, 13, 17}, /* ow 33: a warp and one */
    {1, 4, 16, 33}, /* ow 65, two input tiles of 32 + 1 */
    {2, 7, 5, 64},  /* ow 127: just under the 128-thread block */
    {1, 3, 9, 65},  /* ow 129: just over it */
    {5, 2, 2, 2},   /* odd batch, S = 27 */
};

static void gpu_checks(int sm_count, uint64_t seed, int only, const int64_t *one_shape)
{
    int n_shapes = one_shape ? 1 : (int)(sizeof test_shapes / sizeof test_shapes[0]);
    for (int t = 0; t < n_shapes; t++) {
        shape s = one_shape ? make_shape((int)one_shape[0], (int)one_shape[2], (int)one_shape[3],
                                         (int)one_shape[4])
                            : make_shape(test_shapes[t][0], test_shapes[t][1], test_shapes[t][2],
                                         test_shapes[t][3]);
        problem pb;
        problem_init(&pb, &s, sm_count, seed + t);
        problem_refresh(&pb);
        /* b ~ N(0, 1) in the model, but z = LSE of 16 values near 0 is about log 16, so a is
         * about 0.46 and any b outside (-0.54, 1.46) clamps every output. The checks pick b so
         * the tail is exercised: 0.25 keeps every output inside (-1, 1), -0.5 puts them astride
         * the upper bound; the extreme-value cases below cover saturation. */
        problem_set_b(&pb, t % 2 ? -0.5f : 0.25f);
        verify_result vc = verify_f32(pb.host_conv, pb.ref_conv, conv_elems(&s), TOL_REL_L2, TOL_ABS);
        check(vc.pass, "cuDNN transposed conv = reference on %dx3x%dx%dx%d, rel_l2 %.1e", s.n, s.d,
              s.h, s.w, vc.rel_l2);
        /* b3's own transposed conv, into the same buffer (the next cuDNN run rewrites it) */
        gpu_poison(pb.r.conv, conv_elems(&s));
        launch_conv_parity(&pb.r);
        LAUNCH_CHECK();
        CUDA_CHECK(cudaMemcpy(pb.host_dc, pb.r.conv, sizeof(float) * conv_elems(&s),
                              cudaMemcpyDeviceToHost));
        verify_result vp = verify_f32(pb.host_dc, pb.ref_conv, conv_elems(&s), TOL_REL_L2, TOL_ABS);
        check(vp.pass, "own transposed conv (parity) = reference on %dx3x%dx%dx%d, rel_l2 %.1e", s.n,
              s.d, s.h, s.w, vp.rel_l2);
        launch_conv(&pb.r);
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(pb.host_conv, pb.r.conv, sizeof(float) * conv_elems(&s),
                              cudaMemcpyDeviceToHost)); /* the epilogue reference's input */
        epilogue_ref(&s, pb.host_conv, NULL, pb.b, pb.ref_epilogue);
        check_versions(&pb, "rand", only, 0);
        if (!only)
            check_bwd_versions(&pb, "rand", 0);
        if (t == 2 || one_shape) {
            /* extreme values 1: x scaled by 1000, conv outputs in the hundreds */
            for (size_t i = 0; i < x_elems(&s); i++)
                pb.x[i] *= 1000.0f;
            problem_refresh(&pb);
            check_versions(&pb, "x*1000", only, 0);
            if (!only)
                check_bwd_versions(&pb, "x*1000", 0);
            /* extreme values 2: the epilogue fed conv outputs near +100, near -100, and mixed */
            float *c = (float *)host_alloc(sizeof(float) * conv_elems(&s));
            rng_state rng;
            rng_seed(&rng, seed);
            const char *labels[3] = {"conv ~ +100", "conv ~ -100", "conv ~ +-100"};
            for (int kind = 0; kind < 3; kind++) {
                for (size_t i = 0; i < conv_elems(&s); i++) {
                    double sign = kind == 0 ? 1 : kind == 1 ? -1 : ((i / s.s) % 2 ? 1 : -1);
                    c[i] = (float)(sign * 100.0 + 8.0 * (rng_uniform(&rng) - 0.5));
                }
                problem_set_conv(&pb, c);
                check_versions(&pb, labels[kind], only, 1);
                if (!only)
                    check_bwd_versions(&pb, labels[kind], 1);
                if (kind == 2)
                    continue;
                /* the naive exp-sum-log on the same input: expected to break */
                int n_pos = (int)out_elems(&s);
                k_epilogue_unstable<<<grid_for(n_pos, 256, sm_count), 256>>>(
                    pb.r.conv, pb.r.b, pb.r.tmp[0], pb.r.y, n_pos, s.s);
                LAUNCH_CHECK();
                CUDA_CHECK(cudaMemcpy(pb.host_out, pb.r.tmp[0], sizeof(float) * n_pos,
                                      cudaMemcpyDeviceToHost));
                double worst = 0;
                size_t nonfinite = 0;
                for (int i = 0; i < n_pos; i++) {
                    double v[C_OUT];
                    int n = i / s.s, p = i - n * s.s;
                    for (int ch = 0; ch < C_OUT; ch++)
                        v[ch] = c[((size_t)n * C_OUT + ch) * s.s + p];
                    double e = fabs(pb.host_out[i] - lse_ref(v, C_OUT));
                    nonfinite += !isfinite(pb.host_out[i]);
                    worst = isfinite(e) ? fmax(worst, e) : worst;
                }
                if (kind == 0)
                    check(nonfinite == (size_t)n_pos,
                          "naive log(sum(exp)) on %s: z = inf at %zu of %d positions", labels[kind],
                          nonfinite, n_pos);
                else /* exp(-100) is a float subnormal: few significant bits survive */
                    check(nonfinite == 0 && worst > 1e-4,
                          "naive log(sum(exp)) on %s: z off by up to %.1e (the float spacing at "
                          "96 is 7.6e-06)", labels[kind], worst);
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
    "\nChapter 1, KernelBench level 2 model #58:\n"
    "  ConvTranspose3d(3->16, k3, s2, p1) -> logsumexp over channels -> z*sigmoid(z+3)/6\n"
    "  -> minus a learnable scalar b -> clamp(-1, 1)\n"
    "  --shape is N x 3 x D x H x W (default 128x3x16x32x32); the output is\n"
    "  N x 1 x (2D-1) x (2H-1) x (2W-1). Limits: batch and depth <= 65535, conv output < 2^31.\n"
    "  --dump DIR writes: x.npy, conv_weight.npy (3,16,3,3,3), conv_bias.npy (16), bias.npy\n"
    "  (1,1,1,1), conv_out.npy (the cuDNN conv output the epilogue versions read),\n"
    "  out_v1.npy .. out_v4.npy (epilogue versions, from conv_out), out_v5_model.npy and\n"
    "  out_v6_model.npy (the fused whole model, from x); without --version also grad_output.npy\n"
    "  and, from each backward version's training step (b1, b2), grad_conv_out_bK.npy,\n"
    "  grad_bias_bK.npy, grad_conv_weight_bK.npy, grad_conv_bias_bK.npy, grad_x_bK.npy.\n"
    "  --version K selects forward version K; the backward versions b1, b2 run when it is absent.\n"
    " Check them: python3 data/pytorch_peer.py check DIR\n";

static void dump_all(problem *pb, const char *dir, int only)
{
    const shape *s = &pb->sh;
    mkdir(dir, 0777);
    int64_t xs[5] = {s->n, C_IN, s->d, s->h, s->w}, ws[5] = {C_IN, C_OUT, KS, KS, KS};
    int64_t cbs[1] = {C_OUT}, bs[4] = {1, 1, 1, 1};
    int64_t cs[5] = {s->n, C_OUT, s->od, s->oh, s->ow}, ys[5] = {s->n, 1, s->od, s->oh, s->ow};
    npy_save_or_exit(dir, "x", pb->x, 5, xs);
    npy_save_or_exit(dir, "conv_weight", pb->weight, 5, ws);
    npy_save_or_exit(dir, "conv_bias", pb->conv_bias, 1, cbs);
    npy_save_or_exit(dir, "bias", &pb->b, 4, bs);
    npy_save_or_exit(dir, "conv_out", pb->host_conv, 5, cs);
    for (int i = 0; i < N_VERSIONS; i++) {
        const version *v = &versions[i];
        if (!version_selected(v->id, only))
            continue;
        job j = {&pb->r, v, v->epilogue == NULL};
        gpu_poison(pb->r.y, out_elems(s));
        run_job(&j);
        LAUNCH_CHECK();
        CUDA_CHECK(cudaMemcpy(pb->host_out, pb->r.y, sizeof(float) * out_elems(s),
                              cudaMemcpyDeviceToHost));
        char name[32];
        snprintf(name, sizeof name, v->epilogue ? "out_v%d" : "out_v%d_model", v->id);
        npy_save_or_exit(dir, name, pb->host_out, 5, ys);
    }
    if (only == 0) { /* the training step of each backward version: every gradient */
        npy_save_or_exit(dir, "grad_output", pb->g, 5, ys);
        for (int i = 0; i < N_BWD; i++) {
            const bwd_version *v = &bwd_versions[i];
            verify_result res[N_GRADS];
            const char *names[N_GRADS];
            int n = 0;
            verify_bwd(pb, v, 1, res, names, &n); /* runs it, copies every gradient back */
            char name[64];
            snprintf(name, sizeof name, "grad_conv_out_%s", v->id);
            npy_save_or_exit(dir, name, pb->host_dc, 5, cs);
            snprintf(name, sizeof name, "grad_bias_%s", v->id);
            npy_save_or_exit(dir, name, &pb->host_db, 4, bs);
            snprintf(name, sizeof name, "grad_conv_weight_%s", v->id);
            npy_save_or_exit(dir, name, pb->host_dw, 5, ws);
            snprintf(name, sizeof name, "grad_conv_bias_%s", v->id);
            npy_save_or_exit(dir, name, pb->host_dbias, 1, cbs);
            snprintf(name, sizeof name, "grad_x_%s", v->id);
            npy_save_or_exit(dir, name, pb->host_dx, 5, xs);
        }
    }
    printf("wrote the inputs, parameters and outputs as .npy to %s/\n", dir);
}

int main(int argc, char **argv)
{
    cli_args a;
    cli_parse_or_exit(argc, argv, 5, &a, help_text);
    if (a.list) {
        for (int i = 0; i < N_VERSIONS; i++)
            printf("v%d  %s\n", versions[i].id, versions[i].name);
        return 0;
    }
    int64_t dims[5] = {128, 3, 16, 32, 32};
    cli_version_shape_or_exit(&a, N_VERSIONS, 5, dims, shape_problem);
    setenv("NVIDIA_TF32_OVERRIDE", "0", 1); /* no TF32 anywhere, whatever cuDNN picks */

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
    snprintf(shape_s, sizeof shape_s, "%dx3x%dx%dx%d", s.n, s.d, s.h, s.w);
    problem pb;
    problem_init(&pb, &s, dev.sm_count, a.seed);
    problem_refresh(&pb);
    verify_result vc = verify_f32(pb.host_conv, pb.ref_conv, conv_elems(&s), TOL_REL_L2, TOL_ABS);
    if (!vc.pass) {
        fprintf(stderr, "error: cuDNN's conv output does not match the reference: ");
        verify_print(stderr, &vc);
        fputc('\n', stderr);
        return 1;
    }

    double inside = inside_share(pb.ref_model, out_elems(&s));
    printf("b = %.4f (seed %llu): %.1f%% of the outputs lie inside (-1, 1), the rest are clamped\n",
           pb.b, (unsigned long long)a.seed, 100 * inside);
    if (inside < 0.1)
        printf("warning: with this b the clamp decides %.0f%% of the outputs, so verification "
               "says little about the rest of the epilogue (timing is unaffected); b ~ N(0, 1) "
               "keeps fewer than 10%% inside when b is outside about (-0.54, 1.46): try another "
               "--seed\n", 100 * (1 - inside));
    report_ctx rc_ctx = {dev.tag, dev.name, "01", shape_s, dev.copy_gbps, dev.sm_count,
                         dev.l2_bytes / 1e6};
    report_row rows[2 * N_VERSIONS + 2 * N_BWD];
    char ver_names[2 * N_VERSIONS][8];
    int n_rows = 0, failed = 0;
    double v1_ms[2] = {0, 0};
    report_header(stdout, &rc_ctx);
    for (int i = 0; i < N_VERSIONS; i++) {
        const version *v = &versions[i];
        if (!version_selected(v->id, a.version))
            continue;
        for (int whole = 0; whole < 2; whole++) {
            if (!whole && !v->epilogue)
                continue;
            job j = {&pb.r, v, whole};
            verify_result before = verify_version(&pb, v, whole);
            timing t = gpu_time(run_job, &j, a.reps);
            verify_result after = verify_version(&pb, v, whole);
            snprintf(ver_names[n_rows], sizeof ver_names[0], "v%d", v->id);
            report_row *row = &rows[n_rows];
            *row = (report_row){ver_names[n_rows++], v->name, whole ? "model_fwd" : "epilogue_fwd", t,
                                whole ? model_bytes(&s) : epilogue_bytes(&s), 0};
            if (v->id == 1)
                v1_ms[whole] = t.median_ms;
            if (v1_ms[whole] > 0)
                row->speedup_v1 = v1_ms[whole] / t.median_ms;
            report_print(stdout, &rc_ctx, row);
            if (!before.pass || !after.pass) {
                failed = 1;
                printf("         ^ FAILED verification %s: ", before.pass ? "after timing" : "before timing");
                verify_print(stdout, before.pass ? &after : &before);
                putchar('\n');
            }
        }
    }
    /* the backward versions (all of them when no --version is given) */
    double b1_ms[2] = {0, 0};
    for (int i = 0; i < N_BWD && a.version == 0; i++) {
        const bwd_version *v = &bwd_versions[i];
        for (int train = 0; train < 2; train++) {
            bwd_job j = {&pb.r, v, train};
            verify_result res[N_GRADS];
            const char *names[N_GRADS];
            int n = 0, before = verify_bwd(&pb, v, train, res, names, &n);
            timing t = gpu_time(run_bwd_job, &j, a.reps);
            int after = verify_bwd(&pb, v, train, res, names, &n);
            report_row *row = &rows[n_rows++];
            *row = (report_row){v->id, v->name, train ? "train_step" : "epilogue_fwdbwd", t,
                                train ? train_step_bytes(&s) : epilogue_fwdbwd_bytes(&s), 0};
            if (i == 0)
                b1_ms[train] = t.median_ms;
            if (b1_ms[train] > 0)
                row->speedup_v1 = b1_ms[train] / t.median_ms;
            report_print(stdout, &rc_ctx, row);
            if (before != n || after != n) {
                failed = 1;
                printf("         ^ FAILED verification:");
                for (int k = 0; k < n; k++)
                    if (!res[k].pass)
                        printf(" %s rel_l2 %.1e max_abs %.1e", names[k], res[k].rel_l2, res[k].max_abs);
                putchar('\n');
            }
        }
    }
    timing tc = gpu_time(time_conv, &pb.r, a.reps);
    printf("cuDNN ConvTranspose3d alone (cudnnConvolutionBackwardData algo %d, %s, + bias): "
           "median %.4f ms [%.4f - %.4f]\n",
           (int)pb.cudnn.algo, pb.cudnn.deterministic ? "deterministic" : "nondeterministic",
           tc.median_ms, tc.min_ms, tc.max_ms);
    printf("floors at %.0f GB/s: epilogue %.1f MB -> %.4f ms; model %.1f MB -> %.4f ms, and "
           "%.2f GFLOP of conv; epilogue fwd+bwd %.1f MB -> %.4f ms\n",
           dev.copy_gbps, epilogue_bytes(&s) / 1e6, epilogue_bytes(&s) / (dev.copy_gbps * 1e6),
           model_bytes(&s) / 1e6, model_bytes(&s) / (dev.copy_gbps * 1e6), model_flops(&s) / 1e9,
           epilogue_fwdbwd_bytes(&s) / 1e6, epilogue_fwdbwd_bytes(&s) / (dev.copy_gbps * 1e6));
    if (a.version == 0) {
        timing tx = gpu_time(time_dx, &pb.r, a.reps), tw = gpu_time(time_dw, &pb.r, a.reps),
               tb = gpu_time(time_dbias, &pb.r, a.reps);
        printf("cuDNN in the training step, median ms: dx (forward conv) %.4f, dw (backward "
               "filter) %.4f, dbias (backward bias) %.4f\n",
               tx.median_ms, tw.median_ms, tb.median_ms);
    }
    if (a.version == 0)
        printf("cuDNN algorithms: transposed conv %d (%s), dx forward conv %d, dw backward-filter "
               "%d (%s)\n",
               (int)pb.cudnn.algo, pb.cudnn.deterministic ? "deterministic" : "nondeterministic",
               (int)pb.cudnn.dx_algo, (int)pb.cudnn.dw_algo,
               pb.cudnn.dw_deterministic ? "deterministic" : "nondeterministic");
    if (a.csv && report_csv(a.csv, &rc_ctx, rows, n_rows))
        failed = 1;
    if (a.dump_dir)
        dump_all(&pb, a.dump_dir, a.version);
    problem_free(&pb);
    gpu_release();
    if (failed)
        fprintf(stderr, "error: a version failed verification\n");
    return failed ? 1 : 0;
}
