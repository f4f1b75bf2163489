/*
 * v1: what PyTorch eager does, the baseline every later version is measured against
 *
 * The starting point: cuDNN's conv writes c (537 MB), then a naive kernel per op: max pool (a
 * thread per pooled value, the 64-channel pooled tensor p, 67 MB, written to DRAM), logsumexp
 * over the channels (common/lse.cuh's naive kernel, two passes over p), relu. PyTorch eager
 * runs the same ops (its logsumexp as amax, sub, exp, sum, log, add).
 * Bytes: c read once, p written once and read twice (the second pass often from L2), z
 * written and read by relu, y written: about 0.68 GB against the 0.54 GB floor (model.h).
 * Prediction: 0.68 / 0.54 = 1.26x the floor, plus three launches (pool, logsumexp, relu).
 * Measured (H100 80GB HBM3, KernelBench shape, data/h100/ch02.csv): 0.254 ms [v1 epilogue_fwd],
 * 1.40x [v1 epilogue_fwd median_ms/floor_ms] the 0.182 ms [v1 epilogue_fwd floor_ms] floor,
 * 71.6% of it [v1 epilogue_fwd pct_floor]; PyTorch eager's ops 0.485 ms [eager epilogue_fwd].
 *
 * The whole model (scope model_fwd) is cuDNN's conv, then the epilogue: 6.20 ms
 * [v1 model_fwd], almost all of it the conv (232 GFLOP, model.h). v2 to v5 make the epilogue
 * fast with cuDNN's conv still in front of it; v6 to v8 replace the conv with our own, and v9
 * fuses this epilogue into it, so that c never reaches DRAM.
 */
#include "lse.cuh"
#include "model.h"

/* the library Conv3d + bias (common/conv.h): cuDNN's fastest strict-fp32 algorithm by cudnnFind,
 * or, in a build without cuDNN, the direct kernel */
void conv_forward(const run_ctx *r) { lib_conv3d_forward(&r->lib->conv, r->x, r->weight, r->bias, r->c); }

/* one thread per pooled value: its 8-element window's max (the first maximum); idx, if not
 * NULL, receives the argmax (0..7), as autograd saves it for the backward */
__global__ void v1_maxpool(const float *__restrict__ c, float *__restrict__ p,
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

__global__ void v1_relu(const float *__restrict__ a, float *__restrict__ o, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        o[i] = a[i] > 0.0f ? a[i] : (a[i] == a[i] ? 0.0f : a[i]); /* NaN stays NaN, as in torch */
}

/* the logsumexp and relu after either pool (v2's too); z stays in r->z for b1 */
void lse_relu_naive(const run_ctx *r)
{
    int n = (int)out_elems(&r->sh), g = grid_for(n, 256, r->sm_count);
    k_logsumexp_naive<C_OUT><<<g, 256>>>(r->p, r->z, n, r->sh.s);
    v1_relu<<<g, 256>>>(r->z, r->y, n);
}

static void pool_naive(const run_ctx *r, int *idx)
{
    const shape *s = &r->sh;
    int total = (int)pool_elems(s);
    v1_maxpool<<<grid_for(total, 256, r->sm_count), 256>>>(r->c, r->p, idx, total, s->d, s->h,
                                                            s->w);
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
