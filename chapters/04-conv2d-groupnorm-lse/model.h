/*
 * model.h: chapter 4's model, its shapes, and what it must cost (read this first, after main.cu)
 *
 *     y = logsumexp_c( c + HardSwish( tanh( GroupNorm_16(c) ) ) ),  c = Conv2d(x)
 *                                                                   KernelBench level 2, #92
 *   x      N x 8 x H x W                       (KernelBench: 128 x 8 x 128 x 128, rand)
 *   c      Conv2d(8 -> 64, kernel 3, stride 1, no padding, bias) -> N x 64 x (H-2) x (W-2)
 *          (128 x 64 x 126 x 126: 520.2 MB of float32; S = 126 * 126 = 15876 positions a channel)
 *   xh     GroupNorm(16 groups of 4 channels, eps 1e-5): group G of sample n is channels
 *          4G .. 4G+3, its 4 S = 63504 values contiguous in NCHW. Per (n, G), the mean and the
 *          *biased* variance over those values, xh = (c - mean) rstd, rstd = 1 / sqrt(var + eps)
 *          (torch.nn.GroupNorm; Wu and He, "Group Normalization", ECCV 2018)
 *   gn     gn = gamma_c xh + beta_c: the affine part, one gamma and one beta per channel (not per
 *          group). PyTorch starts them at gamma = 1, beta = 0, but both are learned: the
 *          reference and every test use other values.
 *   t      tanh(gn), in (-1, 1)
 *   h      nn.Hardswish: h = t relu6(t + 3) / 6, relu6(v) = min(max(v, 0), 6). Because t lies in
 *          (-1, 1), t + 3 lies in (2, 4), inside [0, 6], so relu6 never clips and
 *          h = t (t + 3) / 6. The same holds in float: a float tanh rounds to at most +-1 (to
 *          exactly +-1 for |gn| above about 9), far from the clipping points -3 and 3. The
 *          reference keeps the general form; its CPU checks show the two agree on (-1, 1).
 *   r      r = c + h: the residual is the conv output itself, not the normalised value
 *   y      logsumexp over the 64 channels, keepdim -> N x 1 x (H-2) x (W-2)
 *
 * Where the statistics sit. y at a position needs all 64 channels there, so all 16 groups'
 * statistics of its sample, and a group's statistics need all of its 4 S values: no output of a
 * sample can be written before the whole sample has been read once. A group is
 * 4 * 15876 * 4 = 254 KB, more than one SM's 228 KB of shared memory (H100 datasheet); a sample
 * is 64 * 15876 * 4 = 4.06 MB, more than a cluster of 16 SMs holds (3.6 MB); but it fits the
 * H100's L2 a dozen times over: 52 MB as the run's notes print it (cudaDevAttrL2CacheSize; the
 * datasheet's 50 MB are MiB), the size from which v5's chunks and v6's teams are planned.
 *
 * Bytes (float32) at the KernelBench shape. C is the copy ceiling the run measures (ceiling_gbps
 * in data/h100/ch04.csv), P the fp32 FMA peak it reports (peak_tflops: SMs x 128 FMA/clk x 2 x
 * boost clock; 66.9 TFLOP/s for the H100 SXM's 132 SMs at 1.98 GHz, datasheet). A scope's floor
 * is max(bytes / C, FLOPs / P).
 *   epilogue  read c once (N 64 S * 4 = 520.2 MB) and gamma, beta (512 B), write y
 *             (N S * 4 = 8.13 MB): 528.4 MB, floor 528.4 MB / C. A kernel that reads c from DRAM
 *             for the statistics and again for the outputs moves 1048.6 MB, twice the floor,
 *             unless its second read is served from L2.
 *   stats     the GroupNorm statistics alone: c in, a mean and an rstd per (n, group) out:
 *             520.2 MB + 16 KB.
 *   fwd + bwd the forward reads c and writes y; the backward, a separate pass once g arrives,
 *             reads c again and g, and writes dc, dgamma and dbeta:
 *             3 * 520.2 MB + 2 * 8.13 MB (+ 1 KB: gamma, beta and their gradients) = 1576.9 MB.
 *   model     read x (N 8 H W * 4 = 67.1 MB) and the parameters (4608 weights, 64 biases, 64
 *             gamma, 64 beta: 19.2 KB), write y (8.13 MB): 75.3 MB. The conv is
 *             2 * 128 * 64 * 8 * 9 * 15876 = 18.73 GFLOP: 0.280 ms at 66.9 TFLOP/s. The bytes
 *             take as long only at C = 75.3 MB / 0.280 ms = 269 GB/s, so on the H100 the conv's
 *             FLOPs, not the bytes, are the model's floor.
 *   training  the conv three times (forward, backward data, backward filter): 56.2 GFLOP. Bytes,
 *             if c is never stored: x read by the forward and again by the backward (which
 *             recomputes c for dc, and reads x for dw), dx written (x's size), g read, y written,
 *             the parameters read and their gradients written:
 *             3 * 67.1 MB + 2 * 8.13 MB + 2 * 19.2 KB = 217.6 MB.
 *             Each count is a lower bound on its own (storing c would save a recompute's FLOPs
 *             but move 520 MB twice), so their max is one too.
 * The epilogue's own arithmetic is a tanh and an exp a conv value (260 M of each) and a few
 * FLOPs: its scopes are bound by bytes, and their FLOPs are counted as 0.
 */
#ifndef CH04_MODEL_H
#define CH04_MODEL_H

#include "conv_ref.h"
#include "harness.h"

#define C_IN 8
#define C_OUT 64
#define GROUPS 16
#define CPG (C_OUT / GROUPS) /* channels per group: 4 */
#define KS 3
#define KVOL (KS * KS)
#define N_WEIGHT (C_OUT * C_IN * KVOL)   /* PyTorch layout: out x in x kH x kW, 4608 */
#define N_PARAMS (N_WEIGHT + 3 * C_OUT)  /* weights, conv bias, gamma, beta: 4800 */
#define GN_EPS 1e-5                      /* the model's GroupNorm eps (nn.GroupNorm's default) */

typedef struct {
    int n, h, w; /* input */
    int oh, ow;  /* conv output: H - 2, W - 2 (kernel 3, no padding) */
    int s;       /* oh ow: positions per (n, c); a group holds CPG s values */
} shape;

static inline shape make_shape(int n, int h, int w)
{
    shape s = {n, h, w, h - 2, w - 2, 0};
    s.s = s.oh * s.ow;
    return s;
}

static inline size_t x_elems(const shape *s) { return (size_t)s->n * C_IN * s->h * s->w; }
static inline size_t conv_elems(const shape *s) { return (size_t)s->n * C_OUT * s->s; }
static inline size_t out_elems(const shape *s) { return (size_t)s->n * s->s; }
static inline size_t seg_count(const shape *s) { return (size_t)s->n * GROUPS; } /* (n, group) */
static inline int group_elems(const shape *s) { return CPG * s->s; } /* values a group normalises */

static inline double epilogue_bytes(const shape *s)
{
    return 4.0 * (conv_elems(s) + out_elems(s) + 2.0 * C_OUT);
}
static inline double stats_bytes(const shape *s)
{
    return 4.0 * (conv_elems(s) + 2.0 * seg_count(s));
}
static inline double model_bytes(const shape *s)
{
    return 4.0 * (x_elems(s) + N_PARAMS + out_elems(s));
}
/* c read by the forward and by the backward, dc written; y written, g read; gamma and beta
 * read, dgamma and dbeta written */
static inline double epilogue_fwdbwd_bytes(const shape *s)
{
    return 4.0 * (3.0 * conv_elems(s) + 2.0 * out_elems(s) + 4.0 * C_OUT);
}
/* the training step if c were never stored: x read by the forward and by the backward, dx
 * written, g read, y written, the parameters read and their gradients written */
static inline double train_step_bytes(const shape *s)
{
    return 4.0 * (3.0 * x_elems(s) + 2.0 * out_elems(s) + 2.0 * N_PARAMS);
}
static inline double conv_flops(const shape *s)
{
    return 2.0 * s->n * C_OUT * C_IN * KVOL * (double)s->s;
}

static inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

/* reference.cu: the CPU reference in double (and the backward's derivation) */
conv3d_geom conv_geom(const shape *s); /* Conv2d(8 -> 64, 3, no padding) as a depth-1 Conv3d */
double hardswish_ref(double v);        /* nn.Hardswish */
double hardswish_grad_ref(double v);   /* its derivative, PyTorch's choice at the kinks */
/* mean and rstd of the count values from base, c as float (cf) or double (cd) */
void group_stats_ref(const float *cf, const double *cd, size_t base, int count, double eps,
                     double *mean, double *rstd);
/* y (N x S) from c (cf or cd, exactly one non-NULL); mean_out and rstd_out (N x GROUPS, may be
 * NULL) receive the GroupNorm statistics */
void epilogue_ref(const shape *s, const float *cf, const double *cd, const double *gamma,
                  const double *beta, double eps, double *y, double *mean_out, double *rstd_out);
typedef struct {
    double *dc;               /* N x 64 x S */
    double *abs_dc;           /* N x 64 x S: the scale of dc's float error (NULL: not wanted) */
    double *mdxh, *mdxh_xh;   /* N x 16: mean(dxh) and mean(dxh xh) of each (n, group), the
                               * GroupNorm backward's two reductions (NULL: not wanted) */
    double dgamma[C_OUT];     /* sums over n and the positions */
    double dbeta[C_OUT];
    double abs_dgamma[C_OUT]; /* the scale of their float error (for verify_sum_f32) */
    double abs_dbeta[C_OUT];
} bwd_ref;
/* dL/dc, dL/dgamma, dL/dbeta of L = sum g y (eps GN_EPS) */
void epilogue_backward_ref(const shape *s, const float *cf, const double *cd, const double *gamma,
                           const double *beta, const float *g, bwd_ref *out);
/* the reference against its definition and central differences, on small awkward shapes */
void reference_checks(uint64_t seed);

/* the model's HardSwish on tanh's range, as the GPU computes it: t + 3 lies in (2, 4), so
 * relu6 never clips (above) and h = t (t + 3) / 6; its derivative there is (2t + 3) / 6 */
__device__ static inline float hardswish_on_tanh(float t) { return t * (t + 3.0f) * (1.0f / 6.0f); }
__device__ static inline float hardswish_grad_on_tanh(float t) { return (2.0f * t + 3.0f) * (1.0f / 6.0f); }

/* Block sizes and counts that the device buffers are sized by (problem.cu) */
#define STATS_BLOCK 512 /* v1..v5: threads a group's statistics (16 warps) */
#define APPLY_BLOCK 256 /* v1's tail, v4, v5, b2: positions a block */
#define SPLIT 8         /* v5: blocks a group's statistics are split over */
#define L2_SHARE 0.5    /* v5: the part of L2 two chunks of samples may fill */
#define TEAM_L2_SHARE 0.65 /* v6, b3: the part of L2 the teams' samples may fill (08-v6-persistent.cu) */
#define N_BSUMS 10      /* b2's sums a block: mean(dxh), mean(dxh xh), dgamma and dbeta of 4 channels */

struct welford; /* (count, mean, M2): common/welford.cuh */

/* Everything a launcher reads, on the device */
struct run_ctx {
    shape sh;
    int sm_count;
    int chunk;                                   /* v5: samples a chunk (two in L2_SHARE of L2) */
    cudaStream_t stream[2];                      /* v5: the statistics', the apply's */
    cudaEvent_t *stats_done, *applied;           /* v5: one a chunk */
    const float *x, *weight, *bias;              /* model input, conv parameters */
    const float *gamma, *beta;                   /* GroupNorm's affine parameters */
    float *c;                                    /* conv output, the epilogue's input */
    float *y;                                    /* output, N x S */
    float *t[4];                                 /* v1's and b1's N x 64 x S intermediates */
    float *mean, *rstd;                          /* per (n, group): every forward writes them */
    int teams, team_ctas, team_grid;             /* v6, b3: teams of team_ctas blocks (team.cuh) */
    unsigned *arrived;                           /* v6, b3: team barrier counters, 2 N */
    struct welford *wpart;                       /* v5: N x 16 x SPLIT partial statistics */
    float2 *gpart;                               /* v6, b3: N x 16 x team_ctas partial sums */
    float *pparam;                               /* b3: team_grid x 64 x (dgamma, dbeta) */
    float *x_nhwc, *c_nhwc;                      /* v7: x and c channels last (N x H x W x C) */
    const float *w_nhwc;                         /* v7: the conv weights 64 x 3 x 3 x 8 (KRSC) */
    struct welford *v7part;                      /* v7: N x 16 x v7_split partial statistics */
    float *shift;                                /* v8: per (n, group), its sums' shift */
    float2 *rowpart;                             /* v8: N x 16 x OH x column segments sums */
    float *dwpart;                               /* b4: a block's dw and dbias partials */
    float *bpart;                                /* b1, b2: partial sums */
    float *m1, *m2;                              /* per (n, group): mean(dxh), mean(dxh xh) */
    const float *g;                              /* dL/dy */
    float *dc, *dgamma, *dbeta, *dx, *dw, *dbias; /* the gradients */
    const lib_conv3d *lib;
    const lib_conv3d *lib_nhwc;                  /* v7: the library conv, channels last */
    /* the stream the launchers of v4's apply, v6's teams, v9, b3's backward and b4's dw queue
     * their kernels on: 0 (the default stream) in this program; api.cu, the chapter's C ABI,
     * passes its caller's */
    cudaStream_t queue;
};

/* the versions' launchers, in reading order; stats_fn: the GroupNorm statistics of c into
 * r->mean and r->rstd */
typedef void (*stats_fn)(const run_ctx *r);
void conv_forward(const run_ctx *r); /* the library Conv2d + bias: c = conv(x) */
void eager_tail(const run_ctx *r);   /* v1..v3: a kernel per op after the statistics */
void eager_launch(const run_ctx *r, int scope, stats_fn stats);
void stats_v1(const run_ctx *r);
void v1_launch(const run_ctx *r, int scope);
void stats_v2(const run_ctx *r);
void v2_launch(const run_ctx *r, int scope);
void stats_v3(const run_ctx *r);
void v3_launch(const run_ctx *r, int scope);
void apply_v4(const run_ctx *r);     /* v4's apply alone (v9) */
void v4_epilogue(const run_ctx *r);  /* b2's forward */
void v4_launch(const run_ctx *r, int scope);
void v5_launch(const run_ctx *r, int scope);
void team_plan(run_ctx *r, size_t l2_bytes); /* v6, b3: the grid and its teams, once */
void team_launch(const void *kernel, const run_ctx *r, void **args);
void v6_epilogue(const run_ctx *r);  /* b3's forward */
void v6_launch(const run_ctx *r, int scope);
void x_to_nhwc(const run_ctx *r);         /* v7: x_nhwc = x channels last */
void conv_forward_nhwc(const run_ctx *r); /* v7: the library Conv2d channels last: c_nhwc */
int v7_split(const shape *s, int sm_count); /* v7: blocks a sample's statistics are split over */
void v7_launch(const run_ctx *r, int scope);
void v8_launch(const run_ctx *r, int scope);
void v9_launch(const run_ctx *r, int scope);
void b1_launch(const run_ctx *r, int scope);
void b2_launch(const run_ctx *r, int scope);
int b3_blocks_per_sm(void);
void b3_backward(const run_ctx *r); /* b3's backward after a forward (b4) */
void b3_launch(const run_ctx *r, int scope);
int b4_blocks_per_sm(void);
void b4_own_dw(const run_ctx *r);   /* b4's dw and dbias from x and dc */
void b4_launch(const run_ctx *r, int scope);
void x1_launch(const run_ctx *r, int scope); /* the exercise: x1-warp-stats.cu */
/* the training step's conv gradients from dc (06-b1-autograd.cu) */
void lib_dx(const run_ctx *r);
void lib_dw(const run_ctx *r);
void lib_dbias(const run_ctx *r);
/* dgamma, dbeta from `count` partials laid out count x 64 x (dgamma, dbeta), added in order;
 * block ch, any block size (06-b1-autograd.cu; b1, b3) */
__global__ void b1_param_sums(const float *__restrict__ part, float *__restrict__ dgamma,
                              float *__restrict__ dbeta, int count);

/* problem.cu: the host machinery the harness calls (inputs, buffers, verification, tests, dump);
 * main.cu adds the version table */
extern const hx_chapter chapter_machinery;

#endif
