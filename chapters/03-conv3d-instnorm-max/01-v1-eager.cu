/*
 * v1: what eager does
 *
 * PyTorch eager runs a kernel per op and keeps every intermediate in DRAM. Here: cuDNN's conv,
 * then the statistics of a = c m, then a = c m, normalise, clamp, x m and the channel max, a
 * naive kernel each. The statistics are v1's defect to fix: one thread per (n, c) walking its
 * 12600 values one after another. 2048 threads in 16 blocks of 128 occupy 16 of the 132 SMs, 4
 * warps each, and each thread's next load waits for DRAM: the kernel is latency-bound.
 * Bytes: 103.2 MB in and out for each of the four elementwise ops, 103.2 MB in for the
 * statistics, 103.2 MB in and 6.45 MB out for the max: 1038.6 MB, 9.5x the epilogue's floor
 * (c read once, y written: 109.7 MB, model.h).
 * Prediction: 0.35 ms at the copy ceiling for the bytes, plus whatever the serial statistics cost
 * beyond their 0.034 ms [v1 stats floor_ms] share.
 * Measured (H100 80GB HBM3, KernelBench shape, data/h100/ch03.csv, as every figure in the version
 * comments unless they say otherwise): 1.655 ms [v1 epilogue_fwd], 2.2% of the floor
 * [v1 epilogue_fwd pct_floor]; the serial statistics alone take 1.257 ms [v1 stats] (82 GB/s
 * [v1 stats]), the five other kernels 0.40 ms [v1 epilogue_fwd-stats]. PyTorch eager: 0.472 ms
 * [eager epilogue_fwd].
 *
 * The statistics come first, from c with m applied as each value is loaded (the same float
 * products a holds), and then a: so the `stats` scope, the statistics kernel alone on c fresh
 * from DRAM, is exactly the epilogue's first kernel at every batch size (with a written first,
 * small batches found a in L2: LABBOOK.md). The whole model (model_fwd) of v1..v11 is cuDNN's
 * conv, then the epilogue.
 */
#include "model.h"

/* the library Conv3d + bias (common/conv.h): cuDNN's fastest fp32 algorithm by cudnnFind, or,
 * in a build without cuDNN, the direct kernel */
void conv_forward(const run_ctx *r) { lib_conv3d_forward(r->lib, r->x, r->weight, r->bias, r->c); }

__global__ void v1_scale(const float *__restrict__ in, const float *__restrict__ m,
                         float *__restrict__ out, int total, int S)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x)
        out[i] = in[i] * __ldg(m + (i / S) % C_OUT);
}

/* one thread per (n, c): two passes (mean, then the centred squares) over a * mult. Accumulated
 * in double: a serial float sum of S terms may be off by up to about S * 2^-24 of the sum of
 * magnitudes (Higham, ch. 4: 7.5e-4 at S = 12600), more than the tolerance of the checks; the
 * tree-shaped sums of v2..v8 bound it by log2(S) * 2^-24 instead. v1 is latency-bound either
 * way. */
__global__ void v1_stats_serial(const float *__restrict__ a, const float *__restrict__ m,
                                float *__restrict__ mean, float *__restrict__ rstd, int segs, int S)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= segs)
        return;
    const float *p = a + (size_t)j * S;
    float mult = m ? __ldg(m + j % C_OUT) : 1.0f;
    double sum = 0.0, sq = 0.0;
    for (int i = 0; i < S; i++)
        sum += p[i] * mult;
    double mu = sum / S;
    for (int i = 0; i < S; i++) {
        double d = p[i] * mult - mu;
        sq += d * d;
    }
    mean[j] = (float)mu, rstd[j] = (float)(1.0 / sqrt(sq / S + IN_EPS));
}

__global__ void v1_normalize(const float *__restrict__ a, const float *__restrict__ mean,
                             const float *__restrict__ rstd, float *__restrict__ xh, int total, int S)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int seg = i / S;
        xh[i] = (a[i] - __ldg(mean + seg)) * __ldg(rstd + seg);
    }
}

__global__ void v1_clamp(const float *__restrict__ in, float *__restrict__ out, int total)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x)
        out[i] = clampf1(in[i]);
}

/* one thread per output position: the largest of 16 channel values S apart, the first on
 * ties (strict >); idx, if not NULL, keeps the argmax for the backward as autograd does */
__global__ void v1_channel_max(const float *__restrict__ u, float *__restrict__ y,
                               int *__restrict__ idx, int n_pos, int S)
{
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < n_pos; p += gridDim.x * blockDim.x) {
        int n = p / S, s = p - n * S, k = 0;
        const float *up = u + (size_t)n * C_OUT * S + s;
        float best = up[0];
        for (int co = 1; co < C_OUT; co++) {
            float v = up[(size_t)co * S];
            if (v > best)
                best = v, k = co;
        }
        y[p] = best;
        if (idx)
            idx[p] = k;
    }
}

static void stats_v1(const run_ctx *r, const float *a, const float *m)
{
    int segs = (int)seg_count(&r->sh);
    v1_stats_serial<<<ceil_div(segs, 128), 128>>>(a, m, r->mean, r->rstd, segs, r->sh.s);
}

/* out = in m, channel by channel (v1's v1_scale; b1's dt and dc too) */
void scale_channels(const run_ctx *r, const float *in, float *out)
{
    int total = (int)conv_elems(&r->sh);
    v1_scale<<<grid_for(total, 256, r->sm_count), 256>>>(in, r->m, out, total, r->sh.s);
}

/* v1..v8: the statistics of c m by `stats`, then a = c m and a kernel per op; idx (b1) keeps
 * the argmax */
void eager_epilogue(const run_ctx *r, stats_fn stats, int *idx)
{
    const shape *s = &r->sh;
    int total = (int)conv_elems(s), g = grid_for(total, 256, r->sm_count);
    int n_pos = (int)out_elems(s);
    stats(r, r->c, r->m);                                                       /* mean, rstd */
    scale_channels(r, r->c, r->t[0]);                                           /* a */
    v1_normalize<<<g, 256>>>(r->t[0], r->mean, r->rstd, r->t[1], total, s->s); /* xh */
    v1_clamp<<<g, 256>>>(r->t[1], r->t[2], total);                              /* t */
    scale_channels(r, r->t[2], r->t[3]);                                        /* u */
    v1_channel_max<<<grid_for(n_pos, 256, r->sm_count), 256>>>(r->t[3], r->y, idx, n_pos, s->s);
}

/* v1..v8 in each of their scopes: the statistics alone, the epilogue, or cuDNN's conv and the
 * epilogue */
void eager_launch(const run_ctx *r, int scope, stats_fn stats)
{
    if (scope == SCOPE_STATS) {
        stats(r, r->c, r->m);
        return;
    }
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    eager_epilogue(r, stats, NULL);
}

void v1_launch(const run_ctx *r, int scope) { eager_launch(r, scope, stats_v1); }

/* b1's forward: v1 keeping what autograd saves (a, xh, t and the argmax) */
void v1_saving(const run_ctx *r) { eager_epilogue(r, stats_v1, r->idx); }
