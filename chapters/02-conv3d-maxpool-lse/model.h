/*
 * model.h: chapter 2's model, its shapes, and what it must cost (read this first, after main.cu)
 *
 *     y = relu( logsumexp_c( MaxPool3d_2( Conv3d(x) ) ) )          KernelBench level 2, #43
 *
 *   x      N x 32 x D x H x W                 (KernelBench: 4 x 32 x 32 x 128 x 128, rand)
 *   c      Conv3d(32 -> 64, kernel 3, stride 1, padding 1, bias)   -> N x 64 x D x H x W
 *          (4 x 64 x 32 x 128 x 128: 537 MB of float32)
 *   p      MaxPool3d(kernel 2, stride 2), floor: an odd extent drops its last row
 *          -> N x 64 x D/2 x H/2 x W/2
 *   z, y   logsumexp over the 64 channels, keepdim -> N x 1 x D/2 x H/2 x W/2; y = relu(z)
 *
 * Bytes (float32), KernelBench shape, S = (D/2)(H/2)(W/2) = 16 * 64 * 64 = 65536 per sample:
 *   epilogue  read c once (N 64 D H W * 4 = 536.9 MB), write y (N S * 4 = 1.05 MB): 537.9 MB,
 *             0.18 ms at the measured ~3000 GB/s copy ceiling.
 *   fwd + bwd read c in the forward and again in the backward, read g, write y and dc:
 *             2 * 536.9 + 536.9 + 2 * 1.05 = 1612.9 MB, 0.54 ms.
 *   model     read x (268 MB) and the weights, write y: about 0.09 ms of bytes, but the conv is
 *             2 * 4 * 64 * 32 * 27 * 32 * 128 * 128 = 232 GFLOP: 3.5 ms at the H100 SXM's
 *             67 TFLOP/s fp32 FMA peak. FLOPs bound the model, bytes the epilogue.
 *   training  the conv three times (forward, backward data, backward filter): 696 GFLOP.
 */
#ifndef CH02_MODEL_H
#define CH02_MODEL_H

#include "conv_ref.h"
#include "harness.h"

#define C_IN 32
#define C_OUT 64
#define KS 3
#define KVOL (KS * KS * KS)
#define N_WEIGHT (C_OUT * C_IN * KVOL) /* PyTorch layout: out x in x kD x kH x kW */

typedef struct {
    int n, d, h, w; /* input and conv output */
    int pd, ph, pw; /* pooled: floor(L / 2) */
    int sc;         /* d h w: conv-output positions per sample and channel */
    int s;          /* pd ph pw: output positions per sample */
} shape;

static inline shape make_shape(int n, int d, int h, int w)
{
    shape s = {n, d, h, w, d / 2, h / 2, w / 2, d * h * w, 0};
    s.s = s.pd * s.ph * s.pw;
    return s;
}

static inline size_t x_elems(const shape *s) { return (size_t)s->n * C_IN * s->sc; }
static inline size_t conv_elems(const shape *s) { return (size_t)s->n * C_OUT * s->sc; }
static inline size_t pool_elems(const shape *s) { return (size_t)s->n * C_OUT * s->s; }
static inline size_t out_elems(const shape *s) { return (size_t)s->n * s->s; }

static inline double epilogue_bytes(const shape *s) { return 4.0 * (conv_elems(s) + out_elems(s)); }
static inline double model_bytes(const shape *s)
{
    return 4.0 * (x_elems(s) + N_WEIGHT + C_OUT + out_elems(s));
}
static inline double epilogue_fwdbwd_bytes(const shape *s)
{
    return 4.0 * (3.0 * conv_elems(s) + 2.0 * out_elems(s));
}
/* the training step if c were never stored: read x twice (conv, dw), write y, read g, write dx
 * and the parameters' gradients */
static inline double train_step_bytes(const shape *s)
{
    return 4.0 * (3.0 * x_elems(s) + 2.0 * out_elems(s) + 2.0 * (N_WEIGHT + C_OUT));
}
static inline double conv_flops(const shape *s)
{
    return 2.0 * s->n * C_OUT * C_IN * KVOL * (double)s->sc;
}

/* the library: the conv and its gradients (common/conv.h), and v2's pooling baseline (cuDNN's;
 * a build without cuDNN skips v2) */
typedef struct {
    lib_conv3d conv;
#if HAVE_CUDNN
    cudnnTensorDescriptor_t p_desc; /* the pooled tensor */
    cudnnPoolingDescriptor_t pool_desc;
    lib_conv3d conv_tf32; /* the conv on cuDNN's TF32 engines: v10's accuracy peer (--test) */
    int tf32_state;       /* 0: not set up yet; 1: set up; -1: cuDNN has no TF32 engine here */
#endif
} lib_ctx;

/* Everything a launcher reads, on the device */
struct run_ctx {
    shape sh;
    int sm_count;
    const float *x, *weight, *bias; /* model input and parameters */
    float *c;                       /* conv output, the epilogue's input */
    float *y;                       /* output */
    float *p, *dp;                  /* v1's and b1's pooled tensor and its gradient (64 channels) */
    float *z, *dz;                  /* b1's saved logsumexp and its gradient */
    int *idx;                       /* b1's saved argmax */
    const float *g;                 /* dL/dy */
    float *dc, *dx, *dw, *dbias;    /* the gradients */
    float *partials;                /* the deterministic bias sum's stage-1 partials */
    float *w_k;                     /* v6 .. v11: the weights in the tiles' order (igemm.cuh;
                                     * v10's its own; v11's, split, 2 N_WEIGHT floats) */
    float *c_own;                   /* v6 .. v8's conv output (c stays cuDNN's, the epilogue
                                     * scopes' input, which the references were made from) */
    float *dw_part;                 /* b3's partial dw, one per position share */
    float *w_dx;                    /* b3's dx weights: flipped, in and out swapped */
    lib_ctx *lib;
    /* the stream the launchers of v5's epilogue, our convs (v6 .. v9), b2's backward and b3's
     * gradients queue their kernels on: 0 (the default stream) in this program; api.cu, the
     * chapter's C ABI, passes its caller's */
    cudaStream_t stream;
};

/* reference.cu: the CPU reference in double, the epilogue and its backward */
double window_max_ref(const double *plane, const shape *s, int pd, int ph, int pw, int *arg);
void epilogue_ref(const shape *s, const float *cf, const double *cd, double *y);
void epilogue_backward_ref(const shape *s, const float *cf, const double *cd, const float *g,
                           double *dc);
conv3d_geom conv_geom(const shape *s);

/* the versions' launchers, in reading order */
void conv_forward(const run_ctx *r); /* cuDNN's Conv3d + bias: c = conv(x) */
void v1_launch(const run_ctx *r, int scope);
void lse_relu_naive(const run_ctx *r); /* v1's logsumexp and relu kernels, after p */
void v2_launch(const run_ctx *r, int scope);
void v3_launch(const run_ctx *r, int scope);
void v4_launch(const run_ctx *r, int scope);
void v5_launch(const run_ctx *r, int scope);
void v5_epilogue(const run_ctx *r);    /* b2's forward: v5 on r->c */
void v5_epilogue_on(const run_ctx *r, const float *c); /* v6 .. v8's epilogue, on their c */
void conv_ffma(const run_ctx *r, float *c);   /* our convs, c = conv(x) + bias: v6's, */
void conv_tf32(const run_ctx *r, float *c);   /* v7's, */
void conv_3xtf32(const run_ctx *r, float *c); /* v8's */
/* 07-v7-tf32.cu: the tensor-core conv, out = conv(in) (+ bias if not NULL), in N x CIN x D x H x W,
 * w_k[cin][tap][cout]; PASSES 1 (TF32) or 3 (3xTF32). Instantiated for (1 and 3, 32, 64), the
 * forward (v7's own callers), and explicitly for (3, 64, 32), b3's dx. Queued on stream. */
template <int PASSES, int CIN, int COUT>
void conv_mma(const shape *s, const float *in, const float *w_k, const float *bias, float *out,
              cudaStream_t stream);
void v6_launch(const run_ctx *r, int scope);
void v7_launch(const run_ctx *r, int scope);
void v8_launch(const run_ctx *r, int scope);
void v9_launch(const run_ctx *r, int scope);
void v1_saving(const run_ctx *r);      /* b1's forward: v1 keeping the argmax, z and y */
void b1_launch(const run_ctx *r, int scope);
void b2_launch(const run_ctx *r, int scope);
void epilogue_backward(const run_ctx *r); /* b2's backward kernel: dc from c and g */
void epilogue_backward_on(const run_ctx *r, const float *c); /* the same from another c */
void b3_launch(const run_ctx *r, int scope);
void own_dx(const run_ctx *r);            /* b3's dx and dw in 3xTF32 */
void own_dw(const run_ctx *r);
int dw_shares_max(int sm_count);          /* own_dw's partials: r->dw_part holds this many */
/* b3's fixed-order sum: dw[i] = the shares' partials part[0 .. shares - 1][i] added in order */
__global__ void b3_dw_sum(const float *__restrict__ part, float *__restrict__ dw, int shares);
/* the training step's conv gradients */
void lib_dx(const run_ctx *r), lib_dw(const run_ctx *r), lib_dbias(const run_ctx *r);
void own_dbias(const run_ctx *r);
void v10_launch(const run_ctx *r, int scope); /* the advanced forward: wgmma (sm_90a) */
void conv_wgmma(const run_ctx *r, float *c);  /* v10's conv alone, c = conv(x) + bias, TF32 */
void v11_launch(const run_ctx *r, int scope); /* v10 in 3xTF32 (sm_90a) */
void conv_wgmma_3xtf32(const run_ctx *r, float *c); /* v11's conv alone, 3xTF32 */
void b4_launch(const run_ctx *r, int scope);  /* the training step on wgmma in TF32 (sm_90a) */
void tf32_dx(const run_ctx *r);               /* b4's dx and dw: wgmma, TF32, from r->dc */
void tf32_dw(const run_ctx *r);
void x1_launch(const run_ctx *r, int scope); /* the exercise: x1-fused-epilogue.cu */
#define DBIAS_BLOCKS 64

/* problem.cu: the host machinery the harness calls (inputs, buffers, verification, tests, dump);
 * main.cu adds the version table */
extern const hx_chapter chapter_machinery;

#endif
