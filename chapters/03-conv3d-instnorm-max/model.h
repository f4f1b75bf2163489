/*
 * model.h: chapter 3's model, its shapes, and what it must cost (read this first)
 *
 *     y = max_c( m * clamp( InstanceNorm3d( m * Conv3d(x) ), -1, 1 ) )    KernelBench level 2, #79
 *
 *   x      N x 3 x D x H x W                  (KernelBench: 128 x 3 x 16 x 32 x 32, rand)
 *   c      Conv3d(3 -> 16, kernel 3, stride 1, no padding, bias) -> N x 16 x (D-2) x (H-2) x (W-2)
 *          (128 x 16 x 14 x 30 x 30: 103 MB of float32; S = 14 * 30 * 30 = 12600 per channel)
 *   a      a = c * m, m a learnable 16 x 1 x 1 x 1 (one factor per channel, standard normal)
 *   xh     InstanceNorm3d(16) with PyTorch's defaults: per (n, c) mean and *biased* variance over
 *          the S positions, xh = (a - mean) * rstd, rstd = 1 / sqrt(var + 1e-5); no affine
 *   t, u   t = clamp(xh, -1, 1); u = t * m (the same m again)
 *   y      max over the 16 channels, no keepdim -> N x (D-2) x (H-2) x (W-2)
 *
 * Bytes (float32), KernelBench shape, S = 12600 positions per (n, c); the copy ceiling is the
 * ~3000 GB/s this H100 measured (data/h100/ch03.csv, ceiling_gbps):
 *   epilogue  read c once (N 16 S * 4 = 103.2 MB), write y (N S * 4 = 6.45 MB): 109.7 MB,
 *             0.037 ms. The statistics need all of an (n, c) slice before its first output, so
 *             a kernel that reads c for the statistics and again for the output moves 212.9 MB:
 *             0.071 ms. Meeting the floor means holding the values on chip between the two
 *             uses: 16 x 12600 floats = 806 KB a sample, more than one SM's 228 KB of shared
 *             memory, less than eight SMs'.
 *   stats     the statistics alone: c in, a mean and an rstd per (n, c) out: 103.2 MB, 0.034 ms.
 *   fwd + bwd read c in the forward and again in the backward, write y and dc, read g:
 *             3 * 103.2 + 2 * 6.45 = 322.6 MB, 0.108 ms.
 *   model     read x (25.2 MB) and the parameters, write y (6.45 MB): 0.011 ms of bytes, and
 *             2 * 128 * 16 * 3 * 27 * 12600 = 4.18 GFLOP, 0.062 ms at the H100 SXM's 67 TFLOP/s
 *             fp32 (datasheet: 132 SMs * 128 FMA/clk * 2 * 1.98 GHz). The conv is the model's
 *             floor, not the bytes: computing it twice (v12) costs at least 0.125 ms.
 *   training  the conv three times (forward, backward data, backward filter): 12.5 GFLOP.
 */
#ifndef CH03_MODEL_H
#define CH03_MODEL_H

#include "conv_ref.h"
#include "harness.h"

#define C_IN 3
#define C_OUT 16
#define KS 3
#define KVOL (KS * KS * KS)
#define N_WEIGHT (C_OUT * C_IN * KVOL) /* PyTorch layout: out x in x kD x kH x kW, 1296 */
#define IN_EPS 1e-5                    /* InstanceNorm3d's default eps */

typedef struct {
    int n, d, h, w; /* input */
    int od, oh, ow; /* conv output: L - 2 (kernel 3, no padding) */
    int s;          /* od oh ow: positions per (n, c), the instance norm's count */
} shape;

static inline shape make_shape(int n, int d, int h, int w)
{
    shape s = {n, d, h, w, d - 2, h - 2, w - 2, 0};
    s.s = s.od * s.oh * s.ow;
    return s;
}

static inline size_t x_elems(const shape *s) { return (size_t)s->n * C_IN * s->d * s->h * s->w; }
static inline size_t conv_elems(const shape *s) { return (size_t)s->n * C_OUT * s->s; }
static inline size_t out_elems(const shape *s) { return (size_t)s->n * s->s; }
static inline size_t seg_count(const shape *s) { return (size_t)s->n * C_OUT; } /* (n, c) slices */

static inline double epilogue_bytes(const shape *s) { return 4.0 * (conv_elems(s) + out_elems(s)); }
static inline double stats_bytes(const shape *s) { return 4.0 * (conv_elems(s) + 2.0 * seg_count(s)); }
static inline double model_bytes(const shape *s)
{
    return 4.0 * (x_elems(s) + N_WEIGHT + 2 * C_OUT + out_elems(s));
}
static inline double epilogue_fwdbwd_bytes(const shape *s)
{
    return 4.0 * (3.0 * conv_elems(s) + 2.0 * out_elems(s));
}
/* the training step if c were never stored: read x three times (conv, dw, and the epilogue's
 * recomputation), read g, write y and dx, the parameters and their gradients */
static inline double train_step_bytes(const shape *s)
{
    return 4.0 * (3.0 * x_elems(s) + 2.0 * out_elems(s) + 2.0 * (N_WEIGHT + 2 * C_OUT));
}
static inline double conv_flops(const shape *s)
{
    return 2.0 * s->n * C_OUT * C_IN * KVOL * (double)s->s;
}
static inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

/* the model's clamp as the GPU computes it: comparisons, not fminf/fmaxf, so a NaN stays NaN
 * (torch.clamp) */
__device__ static inline float clampf1(float v) { return v < -1.0f ? -1.0f : (v > 1.0f ? 1.0f : v); }

/* a = c m rounded to a float once, as PyTorch's tensor c * m is. The statistics and the
 * normalisation must take the same a: a mean of rounded products subtracted from an exact one
 * (what an FMA of c m - mean computes) misses by up to half an ulp of a, which rstd magnifies
 * where a slice's values lie close together against their size (reference.cu, the forward
 * checks' bounds: at two values a slice, r ~ 1 / h), and a - mean no longer sums to zero over
 * the slice. __fmul_rn is never contracted into an FMA (CUDA C++ Programming Guide, "Intrinsic
 * Functions"). */
__device__ static inline float a_rounded(float c, float m) { return __fmul_rn(c, m); }

/* Block sizes and partial-sum counts that the device buffers are sized by (problem.cu) */
#define RED_BLOCK 256   /* v2..v5: a block reduces RED_BLOCK (v4, v5: 2 RED_BLOCK) elements */
#define MANY_BLOCK 256  /* v6..v8 and b1: one block a slice */
#define CL 8            /* v10, v11, v13, v14, b3: blocks a cluster, one cluster a sample (the
                         * portable maximum) */
#define CL_THREADS 512  /* their blocks: 16 warps, warp w reduces channel w (v11's: 256, its
                         * own V11_THREADS) */
#define CONV_TILE 512   /* v12: positions a block computes the conv at */
#define B2_BLOCK 256    /* b2: positions a block */
#define DOT_BLOCKS 64   /* b1 and dbias: blocks a channel in the deterministic channel sums */
#define DW_CHUNK 512    /* our dw: positions a block */
#define WIN_SUMS_POS 4096 /* b4 .. b6: positions a block of the sums from the winner bytes */
#define WIN_INSIDE 0x80 /* b4's .. b6's winner byte: the argmax channel (bits 0..3), and this bit
                         * where the winner's xh is inside the clamp (its gradient passes) */

struct welford; /* (count, mean, M2): common/welford.cuh */

/* Everything a launcher reads, on the device */
struct run_ctx {
    shape sh;
    int sm_count;
    size_t smem_optin;                  /* the most dynamic shared memory a cluster kernel may ask for */
    int v10_wave, v11_wave, b3_wave;    /* v10's, v11's and b3's backward's: their first waves, the
                                         * clusters resident at once (v11: 0 where it does not fit,
                                         * and runs v10) */
    const float *x, *weight, *bias, *m; /* model input and parameters */
    float *c;                           /* conv output, the epilogue's input */
    float *y;                           /* output */
    float *t[5];                        /* v1's and b1's 103 MB intermediates */
    int *idx;                           /* b1's saved argmax */
    unsigned char *win;                 /* b4's .. b6's saved winner byte a position (WIN_INSIDE) */
    unsigned *fwd_done;                 /* b6: per sample, its forward blocks done (0 between runs) */
    unsigned long long *xch; /* v17, v18: the teams' tagged words, sm_count x 2 x 3 CL C_OUT */
    float *mean, *rstd;                 /* per (n, c): every forward writes them, the backward reads */
    float2 *part2, *means;              /* v2..v5 partials; the instance-norm backward's two means */
    struct welford *wpart;              /* v12's tile statistics */
    float *bpart, *dm_part1, *dm_part2, *db_part, *dw_part; /* partial sums */
    const float *g;                     /* dL/dy */
    float *dc, *dx, *dw, *dbias, *dm;   /* the gradients */
    const lib_conv3d *lib;
    cudaStream_t stream; /* the library's launchers' (api.cu): its caller's; 0 in this program */
    int *var_from_squares; /* host memory: the check's to clear, v2..v6's launches set it (their
                            * variance is sum of squares less mean^2, bounded as such) */
};

/* reference.cu: the CPU reference in double (and the backward's derivation) */
conv3d_geom conv_geom(const shape *s);
void slice_stats_ref(const float *cf, const double *cd, size_t base, int S, double m, double eps,
                     double *mean, double *rstd);
void epilogue_ref(const shape *s, const float *cf, const double *cd, const double *m, double eps,
                  double *y, double *mean_out, double *rstd_out);
/* the forward checks' bounds (derived in reference.cu), from c (cf or cd, as epilogue_ref) and m;
 * conv_terms: T of every (n, c) for the whole model (the conv's terms, bounded), NULL for the
 * epilogue; squares: the statistics are sum and sum of squares (v2..v6). Out, per (n, c): the
 * mean's scale M = |mean| + std and rstd's condition number V r^2 (V_sq r^2 with squares); per
 * output position: y's bound over TOL_SUM */
void forward_bounds(const shape *s, const float *cf, const double *cd, const double *m,
                    const double *conv_terms, int squares, double *mean_scale, double *rstd_cond,
                    double *y_terms);
#define AMB 2e-6     /* the margin of an ambiguous decision (reference.cu) */
#define TOL_SUM 1e-5 /* reduced and cancelling results, against the sum of their terms' magnitudes */
typedef struct {
    double *dc;           /* N x 16 x S */
    double *abs_dc;       /* N x 16 x S: the magnitude of dc's terms (NULL: not wanted) */
    double dm[C_OUT];     /* sum over n, both uses of m */
    double abs_dm[C_OUT]; /* sum of the magnitudes of dm's terms (for verify_sum_f32) */
    double amb_dm[C_OUT]; /* what the ambiguous decisions could move dm by */
    int n_amb;            /* ambiguous positions */
} bwd_ref;
void epilogue_backward_ref(const shape *s, const float *cf, const double *cd, const double *m,
                           const float *g, bwd_ref *out);

/* the versions' launchers, in reading order; stats_fn: the statistics of a, or of a * m when m
 * is not NULL, into r->mean and r->rstd */
typedef void (*stats_fn)(const run_ctx *r, const float *a, const float *m);
void conv_forward(const run_ctx *r); /* cuDNN's Conv3d + bias: c = conv(x) */
void eager_epilogue(const run_ctx *r, stats_fn stats, int *idx); /* v1..v8, b1's forward */
void eager_launch(const run_ctx *r, int scope, stats_fn stats);  /* v1..v8 in any scope */
void v1_launch(const run_ctx *r, int scope);
void v1_saving(const run_ctx *r);                                /* b1's forward */
void scale_channels(const run_ctx *r, const float *in, float *out); /* out = in m, per channel */
void v2_launch(const run_ctx *r, int scope);
void v3_launch(const run_ctx *r, int scope);
void v4_launch(const run_ctx *r, int scope);
void v5_launch(const run_ctx *r, int scope);
void stats_v6(const run_ctx *r, const float *a, const float *m);
void v6_launch(const run_ctx *r, int scope);
void stats_v7(const run_ctx *r, const float *a, const float *m);
void v7_launch(const run_ctx *r, int scope);
void stats_v8(const run_ctx *r, const float *a, const float *m);
void v8_launch(const run_ctx *r, int scope);
void v9_epilogue(const run_ctx *r);  /* b2's forward, v10's fallback */
void v9_launch(const run_ctx *r, int scope);
void v10_epilogue(const run_ctx *r); /* b3's forward, v11's fallback */
void v10_saving(const run_ctx *r, int form); /* b4's .. b6's forward: v10 writing r->win */
void v10_launch(const run_ctx *r, int scope);
int v10_resident_clusters(const run_ctx *r);
int v11_resident_clusters(const run_ctx *r);
int b3_resident_clusters(const run_ctx *r);
void v11_launch(const run_ctx *r, int scope);
void v12_model(const run_ctx *r);    /* v13's and v14's fallback */
void v12_launch(const run_ctx *r, int scope);
void v13_launch(const run_ctx *r, int scope);
void v14_launch(const run_ctx *r, int scope);               /* v15's fallback */
void v15_launch(const run_ctx *r, int scope);
void v16_launch(const run_ctx *r, int scope);
void v17_launch(const run_ctx *r, int scope);
void v18_launch(const run_ctx *r, int scope);
void b1_launch(const run_ctx *r, int scope);
void b2_backward(const run_ctx *r);  /* b3's fallback (b4 .. b6 fall back to b2_launch) */
void b2_launch(const run_ctx *r, int scope);
void b3_launch(const run_ctx *r, int scope);
void b4_launch(const run_ctx *r, int scope);
void b5_launch(const run_ctx *r, int scope);
void b6_launch(const run_ctx *r, int scope);
void x1_launch(const run_ctx *r, int scope); /* the exercise: x1-welford-stats.cu */

/* training-grads.cu: the deterministic per-channel sums and the conv's gradients */
void channel_dot(const run_ctx *r, const float *a, const float *b, float *partials);
void channel_totals(const float *p1, const float *p2, int count, float *out, cudaStream_t st);
void lib_dx(const run_ctx *r);
void lib_dw(const run_ctx *r);
void own_dw(const run_ctx *r);
void own_dbias(const run_ctx *r);

/* problem.cu: the host machinery the harness calls (inputs, buffers, verification, tests, dump);
 * main.cu adds the version table */
extern const hx_chapter chapter_machinery;

#endif
