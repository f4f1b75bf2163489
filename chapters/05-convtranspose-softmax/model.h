/*
 * model.h: chapter 5's model, its shapes, and what it must cost (read this first, after main.cu)
 *
 *     y = scale_c * softmax_row( clamp( ConvTranspose3d( AvgPool3d(x) ), 0, 1 ) )
 *                                                                   KernelBench level 2, #38
 *   x      N x 32 x D x H x W                  (KernelBench: 32 x 32 x 32 x 64 x 64, rand)
 *   xp     AvgPool3d(kernel 2, stride 2): the mean of each 2 x 2 x 2 window, no padding, the
 *          last slice of an odd extent dropped (floor): N x 32 x PD x PH x PW, PD = D / 2, ...
 *          (32 x 32 x 16 x 32 x 32)
 *   c      ConvTranspose3d(32 -> 64, kernel 3, stride 2, padding 1, output_padding 1, bias):
 *          N x 64 x OD x OH x OW with OD = (PD - 1) 2 - 2 + 3 + 1 = 2 PD, ... (torch.nn.
 *          ConvTranspose3d's output size). 32 x 64 x 32 x 64 x 64: 1073.7 MB of float32.
 *          Weights in PyTorch's layout: in x out x k x k x k, 32 x 64 x 27.
 *   z      clamp(c, 0, 1)
 *   p      softmax over each (n, channel) row of S = OD OH OW values (the model views c as
 *          N x 64 x S): p = exp(z) / sum over the row of exp(z). S = 131072 at the KernelBench
 *          shape: a row is 512 KB, more than any SM's 228 KB of shared memory (H100 datasheet).
 *          S = 8 PD PH PW is always a multiple of 8.
 *   y      scale_c p: scale is 1 x 64 x 1 x 1 x 1, learnable, ones at PyTorch's init; the tests
 *          use other values (a channel's scale negative, one 0).
 *
 * Every p of a row lies in [1/(e S), e/S] (each exp(z) in [1, e]): at S = 131072 every output is
 * below 2.1e-5, so an absolute tolerance of 1e-4 would accept all zeros. Verification judges each
 * row by its own scale (problem.cu).
 *
 * Bytes (float32) at the KernelBench shape. C is the copy ceiling the run measures, P the fp32
 * FMA peak it reports (SMs x 128 FMA/clk x 2 x boost clock: 66.9 TFLOP/s on the H100 SXM). A
 * scope's floor is max(bytes / C, FLOPs / P).
 *   epilogue  read c once (N 64 S * 4 = 1073.7 MB) and scale (256 B), write y (the same size),
 *             and the row statistic every forward saves for the backward (lse, N 64 floats):
 *             2147.5 MB. Three reads and a write (PyTorch's softmax: max, sum, write) move
 *             4295 MB, two reads (the online softmax) 3221 MB.
 *   model     read x (N 32 D H W * 4 = 536.9 MB) and the parameters (55296 weights, 64 biases,
 *             64 scales: 221.7 KB), write y (1073.7 MB): 1610.8 MB. The transposed conv is a
 *             multiply-add per input value (of the pooled input), tap and output channel:
 *             2 * 32 * 32 * 64 * 27 * 16384 = 57.98 GFLOP, 0.867 ms [v7 model_fwd floor_ms] at
 *             66.9 TFLOP/s, longer than the bytes take (0.54 ms at the 2991 GB/s
 *             [v7 model_fwd ceiling_gbps] the run measured): the FLOPs are the model's floor.
 *             This is the nominal count (every tap of every input, as FLOP counters count a
 *             ConvTranspose3d); padding 1 crops the taps that land outside the output, one in
 *             3 PD along depth and likewise along the others, so the multiply-adds that count
 *             are (47/48)(95/96)^2 = 95.9% of it, 55.6 GFLOP.
 *   fwd + bwd the forward reads c and writes y; the backward reads c again (p is recomputed from
 *             c and the saved lse) and g, and writes dc: 5 * 1073.7 MB (+ the scales, their
 *             gradients, lse) = 5368.7 MB.
 *   training  the transposed conv three times (forward, the gradients of its input and of its
 *             weights): 173.9 GFLOP. Bytes, if c is never stored: x read by the forward and by
 *             the backward (which recomputes c), dx written (x's size), y written, g read, the
 *             parameters read and their gradients written:
 *             3 * 536.9 + 2 * 1073.7 MB + 2 * 221.7 KB = 3758.6 MB.
 * The epilogue's own arithmetic is an exp per value: its scopes are bound by bytes and their
 * FLOPs are counted as 0.
 */
#ifndef CH05_MODEL_H
#define CH05_MODEL_H

#include "conv_ref.h"
#include "harness.h"

#define C_IN 32
#define C_OUT 64
#define KS 3
#define KVOL (KS * KS * KS)
#define N_WEIGHT (C_IN * C_OUT * KVOL)  /* PyTorch's ConvTranspose3d layout: in x out x k^3, 55296 */
#define N_PARAMS (N_WEIGHT + 2 * C_OUT) /* weights, conv bias, scale: 55424 */
#define CLAMP_LO 0.0f
#define CLAMP_HI 1.0f

typedef struct {
    int n, d, h, w;  /* input */
    int pd, ph, pw;  /* pooled: D / 2, H / 2, W / 2 (floor) */
    int od, oh, ow;  /* conv output: 2 PD, 2 PH, 2 PW */
    int ps;          /* PD PH PW: pooled positions per (n, channel) */
    int s;           /* OD OH OW = 8 ps: a softmax row's length */
} shape;

static inline shape make_shape(int n, int d, int h, int w)
{
    shape s = {n, d, h, w, d / 2, h / 2, w / 2, 0, 0, 0, 0, 0};
    s.od = 2 * s.pd, s.oh = 2 * s.ph, s.ow = 2 * s.pw;
    s.ps = s.pd * s.ph * s.pw;
    s.s = s.od * s.oh * s.ow;
    return s;
}

__host__ __device__ static inline size_t x_elems(const shape *s) { return (size_t)s->n * C_IN * s->d * s->h * s->w; }
__host__ __device__ static inline size_t pool_elems(const shape *s) { return (size_t)s->n * C_IN * s->ps; }
__host__ __device__ static inline size_t conv_elems(const shape *s) { return (size_t)s->n * C_OUT * s->s; }
__host__ __device__ static inline size_t out_elems(const shape *s) { return conv_elems(s); } /* y has c's shape */
__host__ __device__ static inline int rows(const shape *s) { return s->n * C_OUT; }            /* softmax rows */

static inline double epilogue_bytes(const shape *s)
{
    return 4.0 * (conv_elems(s) + out_elems(s) + C_OUT + rows(s));
}
static inline double model_bytes(const shape *s)
{
    return 4.0 * (x_elems(s) + N_PARAMS + out_elems(s));
}
/* c read by the forward and by the backward, y written, g read, dc written; scale read, dscale
 * written, lse written and read */
static inline double epilogue_fwdbwd_bytes(const shape *s)
{
    return 4.0 * (3.0 * conv_elems(s) + 2.0 * out_elems(s) + 2.0 * C_OUT + 2.0 * rows(s));
}
/* the training step if c were never stored (above) */
static inline double train_step_bytes(const shape *s)
{
    return 4.0 * (3.0 * x_elems(s) + 2.0 * out_elems(s) + 2.0 * N_PARAMS);
}
static inline double conv_flops(const shape *s)
{
    return 2.0 * s->n * C_IN * C_OUT * KVOL * (double)s->ps;
}

__host__ __device__ static inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

/* reference.cu: the CPU reference in double (and the backward's derivation) */
convT3d_geom conv_geom(const shape *s); /* ConvTranspose3d(32 -> 64, 3, 2, 1, output_padding 1) */
/* xp (N x 32 x PD x PH x PW) = AvgPool3d(2)(x), x float (xf) or double (xd), the other NULL */
void pool_ref(const shape *s, const float *xf, const double *xd, double *xp);
/* dx (like x) from dxp (like xp): each value of a window gets 1/8 of its window's gradient; the
 * values the pool drops (the last slice of an odd extent) get 0 */
void pool_backward_ref(const shape *s, const double *dxp, double *dx);
/* the same, x's elements first .. first + n - 1 alone, into dx[0, n) */
void pool_backward_range_ref(const shape *s, const double *dxp, size_t first, size_t n,
                             double *dx);
/* y (N x 64 x S) from c (cf or cd, exactly one non-NULL) and scale (64); lse (N 64, may be NULL)
 * receives each row's log sum exp(z), the statistic the GPU forwards save; y may be NULL (lse
 * alone) */
void epilogue_ref(const shape *s, const float *cf, const double *cd, const double *scale,
                  double *y, double *lse);
/* y of rows r0 .. r0 + n_rows - 1 alone, from their lse (epilogue_ref's, all rows' array): cf or
 * cd and y point at row r0's first value. The same values as epilogue_ref's there. */
void epilogue_rows_ref(const shape *s, int r0, int n_rows, const float *cf, const double *cd,
                       const double *scale, const double *lse, double *y);
typedef struct {
    double *dc;               /* N x 64 x S */
    double *abs_dc;           /* N x 64 x S: the scale of dc's float error (NULL: not wanted) */
    double dscale[C_OUT];     /* sum over n and positions of g p */
    double abs_dscale[C_OUT]; /* the sum of its terms' magnitudes (verify_sum_f32) */
} bwd_ref;
/* dL/dc and dL/dscale of L = sum g y */
void epilogue_backward_ref(const shape *s, const float *cf, const double *cd, const double *scale,
                           const float *g, bwd_ref *out);
/* epilogue_backward_ref in pieces: dc (and abs_dc, may be NULL) of rows r0 .. r0 + n_rows - 1,
 * cf or cd, g, dc and abs_dc pointing at row r0's first value; parts (2 N 64, all rows') gets
 * each row's sums of g p and |g p|; once every row's are in, epilogue_dscale_ref sums them over
 * n in order into dscale and abs_dscale (64 each). The same values as epilogue_backward_ref's. */
void epilogue_backward_rows_ref(const shape *s, int r0, int n_rows, const float *cf,
                                const double *cd, const double *scale, const float *g,
                                double *dc, double *abs_dc, double *parts);
void epilogue_dscale_ref(const shape *s, const double *parts, double *dscale, double *abs_dscale);
/* the reference against its definition and central differences, on small awkward shapes */
void reference_checks(uint64_t seed);

/* Block sizes the device buffers are sized by (problem.cu) */
#define ROW_BLOCK 1024 /* v1's softmax, v2..v4: threads a row */
#define V5_BLOCK 512   /* v5, b2: threads a chunk of a row */
#define V6_CL 8        /* v6, b3: blocks a cluster, a cluster a row */
#define V6_THREADS 512 /* their threads a block */
#define V6_CHUNKS 4    /* v6: bulk copies (and mbarriers) a block's slice arrives in */
#define B3_CL 8        /* b3: blocks a cluster (16 with CH05_B3_CL=16: 09-b3-cluster-backward.cu) */
#define SMEM_STATIC_MAX 1024 /* the most static shared memory a cluster kernel has */

/* Everything a launcher reads, on the device */
struct run_ctx {
    shape sh;
    int sm_count;
    size_t smem_optin;              /* the most dynamic shared memory a block may ask for */
    const float *x, *weight, *bias; /* model input (N x 32 x D x H x W), conv parameters */
    const float *scale;             /* 64 */
    float *xp;                      /* the pooled input, N x 32 x PD x PH x PW */
    float *c;                       /* conv output, the epilogue's input, N x 64 x S */
    float *y;                       /* output, N x 64 x S */
    float *t[4];                    /* v1's and b1's N x 64 x S intermediates (z, p, g', dz) */
    float *lse;                     /* N x 64: log sum exp(z) of each row (every forward) */
    int split;                      /* v5: blocks a row is split over */
    float *rpart;                   /* v5: N x 64 x split partial sums */
    float *tpart;                   /* v7, v8: N x 64 x v7_tiles (v8_tiles) partial sums */
    float *wt;                      /* v7: the weights [ci][tap][co]; v8: its own order */
    float *rowk;                    /* v8: N x 64, each row's scale_c over its sum of exp(z) */
    float *bpart;                   /* b1: dscale partials (64 x 64); b2: N x 64 x split dot partials */
    float *dot;                     /* N x 64: sum over the row of g p (the backward's reduction) */
    const float *g;                 /* dL/dy */
    float *dc, *dscale, *dxp, *dx, *dw, *dbias; /* the gradients */
    float *dbpart; /* b4: [n][co][k], the sum of dc of block k of b3's cluster on row (n, co);
                    * k < b3_cluster_size (8 or 16): room for N x 64 x 16 */
    float *dwpart; /* b4: [block][tap][co][ci % 16], dw's blocks' partial sums; blocks 2 p and
                    * 2 p + 1 take ci 0 .. 15 and 16 .. 31: room for sm_count / 2 x N_WEIGHT */
    float *wx;     /* b4: dxp's weights, [chunk of 8 co][tap][group of 4 co][ci][co % 4] */
    const lib_conv3d *lib;
    /* the stream the launchers of the pool, v4's, v6's and v7's forwards, b2's and b3's
     * backwards and the pool's gradient queue their kernels on: 0 (the default stream) in this
     * program; api.cu, the chapter's C ABI, passes its caller's. The library conv's calls stay
     * on the default stream. */
    cudaStream_t stream;
};

/* the versions' launchers, in reading order */
void pool_forward(const run_ctx *r);  /* xp = AvgPool3d(x) (01-v1-eager.cu) */
void conv_forward(const run_ctx *r);  /* the library ConvTranspose3d + bias: c = convT(xp) */
void model_front(const run_ctx *r);   /* pool, then the library transposed conv */
void v1_epilogue(const run_ctx *r); /* b1's forward: z in t[0], p in t[1] */
void v1_launch(const run_ctx *r, int scope);
void v2_launch(const run_ctx *r, int scope);
void v3_launch(const run_ctx *r, int scope);
void v4_epilogue(const run_ctx *r); /* b2's forward */
void v4_launch(const run_ctx *r, int scope);
int v5_split(const shape *s, int sm_count); /* v5, b2: blocks a row is split over */
void v5_launch(const run_ctx *r, int scope);
int v6_keep4(const run_ctx *r);             /* v6: float4 a block keeps in shared memory */
int v6_resident_clusters(const run_ctx *r); /* v6: clusters resident at once */
void v6_epilogue_keep(const run_ctx *r, int keep4); /* v6 keeping keep4 float4 a block */
void v6_epilogue(const run_ctx *r);         /* b3's forward */
void v6_launch(const run_ctx *r, int scope);
int v7_tiles(const shape *s); /* v7: tiles of pooled cells a sample */
void v7_launch(const run_ctx *r, int scope);
int v8_tiles(const shape *s); /* v8: tiles of 64 pooled cells a sample */
void v8_launch(const run_ctx *r, int scope);
void v8_forward_c(const run_ctx *r); /* b4's forward: v8's conv writing c, then y and lse */
/* y and lse from c and each row's tiles' sums of exp(clamp(c)) (10-v7-own-convt.cu) */
__global__ void v7_rows_from_partials(const float *__restrict__ c, const float *__restrict__ tpart,
                                      const float *__restrict__ scale, float *__restrict__ y,
                                      float *__restrict__ lse, int S, int tiles, int split);
void b1_launch(const run_ctx *r, int scope);
void b2_backward(const run_ctx *r);
void b2_launch(const run_ctx *r, int scope);
/* dscale_ch = sum over n of dot[n][ch], in n order: a thread a channel (07-b2-fused-backward.cu) */
__global__ void b2_dscale(const float *__restrict__ dot, float *__restrict__ dscale, int n);
int b3_cluster_size(const run_ctx *r); /* b3: B3_CL, or 16 if asked and possible */
int b3_keep4_max(const run_ctx *r);               /* b3: float4 of c (and of g) a block keeps */
void b3_backward_keep(const run_ctx *r, int keep4); /* b3's backward keeping keep4 of them */
void b3_backward(const run_ctx *r);
void b3_backward_dsum(const run_ctx *r); /* b3's backward, and its blocks' sums of dc (b4) */
void b3_launch(const run_ctx *r, int scope);
void b4_grads(const run_ctx *r); /* b4: dw, dbias, dxp on wgmma from dc, then the pool's */
void b4_launch(const run_ctx *r, int scope);
void x1_launch(const run_ctx *r, int scope); /* the exercise (x1-online-softmax.cu) */
/* the training step's gradients from dc: the transposed conv's (library: dxp, skipped where
 * dxp is NULL, dw, dbias), then the pool's (dx from dxp), the two halves apart for api.cu */
void library_conv_grads(const run_ctx *r);
void pool_grad(const run_ctx *r);
void conv_pool_grads(const run_ctx *r);

/* problem.cu: the host machinery the harness calls; main.cu adds the version table */
extern const hx_chapter chapter_machinery;

#endif
