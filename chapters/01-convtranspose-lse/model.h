/*
 * model.h: chapter 1's model, its shapes, and what it must cost (read this first, after main.cu)
 *
 *     y = clamp( z sigmoid(z + 3) / 6 - b, -1, 1 ),  z = logsumexp_c( ConvTranspose3d(x) )
 *                                                                   KernelBench level 2, #58
 *   x      N x 3 x D x H x W                  (KernelBench: 128 x 3 x 16 x 32 x 32, rand)
 *   c      ConvTranspose3d(3 -> 16, kernel 3, stride 2, padding 1, bias)
 *          -> N x 16 x (2D-1) x (2H-1) x (2W-1)  (128 x 16 x 31 x 63 x 63: 1.008 GB of float32)
 *   z      logsumexp over the 16 channels, keepdim -> N x 1 x OD x OH x OW
 *   a      z sigmoid(z + 3) / 6                   (not nn.Hardswish: a smooth cousin of it)
 *   s, y   s = a - b (b: one learnable scalar, N(0, 1)), y = clamp(s, -1, 1)
 *
 * Shape. With stride 2, padding 1, kernel 3 an input length L gives (L-1)*2 - 2 + 3 = 2L - 1
 * outputs. S = OD OH OW positions a sample: 31 * 63 * 63 = 123039 at the KernelBench shape,
 * N S = 15,748,992 output positions.
 *
 * Bytes (float32). The epilogue must read the conv output once and write y once:
 *     epilogue  = 16 N S * 4  +  N S * 4  (+ 4 bytes of b)
 *               = 1,007,935,488 + 62,995,968 + 4 = 1.071 GB,
 *     0.359 ms at the H100's measured copy ceiling (2982 GB/s read + write in the run these
 *     floors were first computed from; 2983 GB/s [v7 epilogue_fwd ceiling_gbps] and 0.359 ms
 *     [v7 epilogue_fwd floor_ms] in the table's run): no kernel that
 *     takes c as its input can beat it, because c has to come in from DRAM.
 * The whole model need only read x and the parameters and write y:
 *     model     = 3 N D H W * 4 + (1296 + 16 + 1) * 4 + N S * 4 = 25.2 MB + 63.0 MB = 88 MB,
 *     0.03 ms at the ceiling. Fusing the conv removes the 1 GB round trip entirely.
 * FLOPs. Along one axis an output of even index receives 1 tap, one of odd index 2, so an axis
 * of input length L contributes 3L - 2 (tap, output) pairs, and the conv is
 *     2 * N * 16 * 3 * (3D-2)(3H-2)(3W-2) = 2 * 6144 * 46 * 94 * 94 = 4.99 GFLOP,
 * 0.075 ms at the H100 SXM's 67 TFLOP/s fp32 FMA peak (datasheet) if every FMA issued at peak.
 * The epilogue adds 16 exps, one log and one more exp a position: 18 * 15,748,992 = 283 M
 * special-function operations. So the fused model is bound by arithmetic and issue, not by
 * DRAM: its floor is the conv's FLOPs, not its bytes.
 * Forward + backward of the epilogue: c read twice (forward, backward), y written, g read, dc
 * written: 2 * 1.008 + 0.063 + 0.063 + 1.008 = 3.15 GB, 1.056 ms.
 * Training step: the conv three times (forward, its input gradient, its weight gradient),
 * 15 GFLOP; its bytes, if c were never stored, 201.5 MB (x twice, y, g, dx, the gradients).
 */
#ifndef CH01_MODEL_H
#define CH01_MODEL_H

#include "conv_ref.h"
#include "harness.h"

#define C_IN 3
#define C_OUT 16
#define KS 3
#define KVOL (KS * KS * KS)
#define N_WEIGHT (C_IN * C_OUT * KVOL) /* PyTorch layout: in x out x kD x kH x kW */

typedef struct {
    int n, d, h, w; /* input */
    int od, oh, ow; /* conv output: 2L - 1 each */
    int s;          /* od * oh * ow positions a sample */
} shape;

static inline shape make_shape(int n, int d, int h, int w)
{
    shape s = {n, d, h, w, 2 * d - 1, 2 * h - 1, 2 * w - 1, 0};
    s.s = s.od * s.oh * s.ow;
    return s;
}

static inline size_t x_elems(const shape *s) { return (size_t)s->n * C_IN * s->d * s->h * s->w; }
static inline size_t conv_elems(const shape *s) { return (size_t)s->n * C_OUT * s->s; }
static inline size_t out_elems(const shape *s) { return (size_t)s->n * s->s; }

static inline double epilogue_bytes(const shape *s)
{
    return 4.0 * (double)conv_elems(s) + 4.0 * (double)out_elems(s) + 4.0;
}
static inline double model_bytes(const shape *s)
{
    return 4.0 * (double)x_elems(s) + 4.0 * (N_WEIGHT + C_OUT + 1) + 4.0 * (double)out_elems(s);
}
/* read c twice (forward, backward), write y, read g, write dc */
static inline double epilogue_fwdbwd_bytes(const shape *s)
{
    return 4.0 * (2.0 * conv_elems(s) + 2.0 * out_elems(s) + conv_elems(s)) + 4.0;
}
/* the training step if c were never stored: read x twice (forward, dw), write y, read g, write
 * dx and the parameters' gradients. A floor for bytes; the step is compute-bound */
static inline double train_step_bytes(const shape *s)
{
    return 4.0 * (3.0 * x_elems(s) + 2.0 * out_elems(s) + 2.0 * (N_WEIGHT + C_OUT + 1));
}
static inline double conv_flops(const shape *s)
{
    return 2.0 * s->n * C_OUT * C_IN * (3.0 * s->d - 2) * (3.0 * s->h - 2) * (3.0 * s->w - 2);
}

/* the library transposed conv and its gradients (common/conv.h: the Conv3d whose input gradient it
 * is, set up on the transposed conv's output shape) */
typedef struct {
    lib_conv3d conv;
    int forward_ran; /* conv_forward ran since the last poison: y went through cuDNN's algorithm,
                        which may be nondeterministic (cc.dx_det) */
} lib_ctx;

#define N_TMP 8 /* v1's and b1's intermediates, N S floats each: */
enum { T_Z, T_ZP3, T_T, T_ZT, T_A, T_S, T_X1, T_X2 }; /* z, z + 3, t, z t, a, s; b1's scratch */
#define DBIAS_BLOCKS 64 /* b3's dbias: 16 x 64 blocks of 256 threads */
#define DW_BLOCKS 64    /* b3's dw: 16 x 64 blocks of 256 threads */
#define DW_TAPS (C_IN * KVOL) /* 81 sums an output channel */

/* Everything a launcher reads, on the device */
struct run_ctx {
    shape sh;
    int sm_count;
    const float *x, *weight, *conv_bias, *b; /* model input and parameters */
    float *c;                                /* conv output: the epilogue's input */
    float *y;                                /* output */
    float *tmp[N_TMP];                       /* v1's intermediates; b1 reads the saved z, t, s */
    const float *g;                          /* dL/dy */
    float *dc, *db, *dx, *dw, *dbias;        /* the gradients */
    float *partials;  /* stage-1 partial sums: b1's and b2's db, b3's dw */
    int n_partials;   /* b1's db: blocks of stage 1 */
    float *partials2; /* b3's dbias */
    float *dw_by_co;  /* b3's dw in [co][ci][k] order, before the reorder */
    lib_ctx *lib;
    /* the stream the launchers of v7, v8, b2, b3 and b4 queue their kernels on: 0 (the default
     * stream) in this program; api.cu, the chapter's C ABI, passes its caller's */
    cudaStream_t stream;
};

/* reference.cu: the CPU reference in double; the transposed conv itself is common/conv_ref.c's
 * conv_transpose3d_ref and conv_transpose3d_backward_ref, on this geometry */
convT3d_geom conv_geom(const shape *s); /* ConvTranspose3d(3 -> 16, 3, stride 2, padding 1) */
double tail_ref(double z, double b);
void epilogue_ref(const shape *s, const float *cf, const double *cd, double b, double *y);
double epilogue_backward_ref(const shape *s, const float *cf, const double *cd, double b,
                             const float *g, double *dc, double *db_abs);

/* the versions' launchers, in reading order */
void conv_forward(const run_ctx *r);   /* cuDNN's ConvTranspose3d + bias: c = convT(x) */
void v1_launch(const run_ctx *r, int scope);
void v1_epilogue(const run_ctx *r);    /* b1's forward: keeps z, t, s in tmp */
void div_scalar(const run_ctx *r, const float *a, float k, float *o); /* b1's "/ 6" backward */
void unstable_lse(const run_ctx *r, float *z); /* the demonstration --test runs at +-100 */
void v2_launch(const run_ctx *r, int scope);
void v3_launch(const run_ctx *r, int scope);
void v7_launch(const run_ctx *r, int scope);
void v7_epilogue(const run_ctx *r);    /* b2's, b3's and b4's forward */
void v5_launch(const run_ctx *r, int scope);
/* v5's per-thread computation run on the host over a whole tensor (a CPU check) */
void v5_host(const shape *s, const float *x, const float *w, const float *bias, float b,
             float *y);
void b1_launch(const run_ctx *r, int scope);
void lib_dx(const run_ctx *r);       /* the training step's conv gradients through cuDNN */
void lib_dw(const run_ctx *r);
void lib_dbias(const run_ctx *r);
void b2_launch(const run_ctx *r, int scope);
void b2_backward(const run_ctx *r);    /* b3's epilogue backward too */
dim3 b2_grid(const shape *sh);         /* b2 backward's blocks (problem.cu sizes its partials) */
/* the two stages of common/reduce.cuh as one call each (07-b2-fused-backward.cu): sum_channels
 * adds each channel of an n x channels x s tensor into out[channel]; sum_segments adds each run
 * of count partials */
void sum_channels(const float *a, int n, int channels, int s, int blocks, float *partials,
                  float *out, cudaStream_t stream);
void sum_segments(const float *partials, int segments, int count, int threads, float *out,
                  cudaStream_t stream);
/* the advanced part */
void v4_launch(const run_ctx *r, int scope);
void v4_epilogue(const run_ctx *r);
void v6_launch(const run_ctx *r, int scope);
void v8_launch(const run_ctx *r, int scope);
void b3_launch(const run_ctx *r, int scope);
void b3_conv_forward(const run_ctx *r); /* the transposed conv by parity, writing c */
void own_dw(const run_ctx *r);
void own_dbias(const run_ctx *r);
void b4_launch(const run_ctx *r, int scope);
void b4_backward(const run_ctx *r);    /* b4's epilogue backward: dc and db from c and g */
dim3 b4_grid(const shape *sh);         /* b4 backward's blocks (problem.cu sizes its partials) */
/* the exercise: x1-fused-epilogue.cu */
void x1_launch(const run_ctx *r, int scope);

/* problem.cu: the host machinery the harness calls (inputs, buffers, verification, tests, dump);
 * main.cu adds the version table */
extern const hx_chapter chapter_machinery;

#endif
