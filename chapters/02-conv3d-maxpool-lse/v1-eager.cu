/*
 * v1 and v2: what PyTorch eager does
 *
 * PyTorch eager: the library conv, max_pool3d (one kernel, writes the 64-channel pooled tensor,
 * 67 MB), then logsumexp (inside torch: amax, sub, exp, sum, log, add), then relu. Here: cuDNN's
 * conv, a naive pooling kernel (v1) or cuDNN's (v2, the library baseline for the pool), one
 * naive logsumexp kernel, one relu kernel.
 * Bytes: 537 MB in, 67 MB out for the pool; 67 MB in twice (two passes over the channels in
 * the logsumexp, the second often from L2) and 1 MB out; 1 MB in and out for relu. About 0.68 GB
 * against the 0.54 GB floor. Prediction: 0.68 / 0.54 = 1.26x the floor, plus four launches.
 * v2 moves the same bytes through a library kernel: the same time, or better if cuDNN's pool
 * loads its windows more efficiently than the naive one.
 * Measured (H100 80GB HBM3, KernelBench shape, data/h100/ch02.csv): v1 0.254 ms [v1 epilogue_fwd],
 * 1.40x [v1 epilogue_fwd median_ms/floor_ms] the 0.182 ms [v1 epilogue_fwd floor_ms] floor; v2 with
 * cuDNN's pooling 0.269 ms [v2 epilogue_fwd], 6% slower [v2 vs v1 epilogue_fwd] than the naive pool
 * (each median repeats within about 1%). PyTorch eager: 0.485 ms [eager epilogue_fwd].
 *
 * The whole model (scope model_fwd) of every version is cuDNN's conv, then its epilogue. The
 * conv is not fused in this chapter: it is 232 GFLOP, 3.5 ms at the fp32 peak even if every FMA
 * issued, against the epilogue's 0.18 ms floor; a fused conv must first match cuDNN's implicit
 * GEMM (model.h).
 */
#include "lse.cuh"
#include "model.h"

/* the library Conv3d + bias (common/conv.h): cuDNN's fastest strict-fp32 algorithm by cudnnFind,
 * or, in a build without cuDNN, the direct kernel */
void conv_forward(const run_ctx *r) { lib_conv3d_forward(&r->lib->conv, r->x, r->weight, r->bias, r->c); }

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

__global__ void k_relu(const float *__restrict__ a, float *__restrict__ o, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        o[i] = a[i] > 0.0f ? a[i] : (a[i] == a[i] ? 0.0f : a[i]); /* NaN stays NaN, as in torch */
}

/* the logsumexp and relu after either pool; z stays in r->z for b1 */
static void lse_relu_naive(const run_ctx *r)
{
    int n = (int)out_elems(&r->sh), g = grid_for(n, 256, r->sm_count);
    k_logsumexp_naive<C_OUT><<<g, 256>>>(r->p, r->z, n, r->sh.s);
    k_relu<<<g, 256>>>(r->z, r->y, n);
}

static void pool_naive(const run_ctx *r, int *idx)
{
    const shape *s = &r->sh;
    int total = (int)pool_elems(s);
    k_maxpool_naive<<<grid_for(total, 256, r->sm_count), 256>>>(r->c, r->p, idx, total, s->d,
                                                                 s->h, s->w);
}

void v1_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    pool_naive(r, NULL);
    lse_relu_naive(r);
}

/* b1's forward: v1 keeping what autograd saves (the pool's argmax, z, y) */
void v1_saving(const run_ctx *r)
{
    pool_naive(r, r->idx);
    lse_relu_naive(r);
}

void v2_launch(const run_ctx *r, int scope)
{
#if HAVE_CUDNN /* the version table marks v2 NEEDS_CUDNN: a build without it never calls this */
    const float one = 1.0f, zero = 0.0f;
    const lib_ctx *cc = r->lib;
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    CUDNN_CHECK(cudnnPoolingForward(cc->conv.handle, cc->pool_desc, &one, cc->conv.y_desc, r->c,
                                    &zero, cc->p_desc, r->p));
    lse_relu_naive(r);
#else
    (void)r, (void)scope;
#endif
}
