/*
 * b1: what autograd does (a kernel per op backward)
 *
 * The backward of the model, derived term by term in reference.cu:
 *   dc = dr + rstd (dxh - mean(dxh) - xh mean(dxh xh)),  dr = g softmax_c(r),
 *   dxh = dgn gamma, dgn = dr hardswish'(t) (1 - t^2); dgamma = sum dgn xh, dbeta = sum dgn.
 * Autograd runs it op by op on what the forward saved (v1's gn, t, h, r and y): the logsumexp's
 * backward writes dr (520 MB), HardSwish's writes dt, tanh's writes dgn, GroupNorm's backward
 * reduces each group's dxh and dxh xh and each channel's dgamma and dbeta terms, then writes
 * its part of dc, added to dr (the residual's gradient).
 * Bytes: the forward's 5.7 GB (v1), then 14 x 520 MB in the backward (dr 2 passes, dt 3,
 * dgn 3, the group sums 2, dc 4): 25 passes over 520 MB, 13 GB.
 * Measured (H100 80GB HBM3, KernelBench shape, data/h100/ch04.csv): epilogue forward + backward
 * 5.45 ms [b1 epilogue_fwdbwd], 9.7% of the floor [b1 epilogue_fwdbwd pct_floor]; the training step
 * 9.74 ms [b1 train_step] (through cuDNN's legacy API it took over five times as long: LABBOOK.md).
 *
 * The training step (b1..b3): the library conv, the epilogue forward and backward, then the
 * conv's gradients from dc through the library: dx (backward data), dw (backward filter),
 * dbias (the sum of dc over n and positions).
 */
#include "model.h"
#include "reduce.cuh"

void lib_dx(const run_ctx *r) { lib_conv3d_backward_data(r->lib, r->weight, r->dc, r->dx); }
void lib_dw(const run_ctx *r) { lib_conv3d_backward_filter(r->lib, r->x, r->dc, r->dw); }
void lib_dbias(const run_ctx *r) { lib_conv3d_backward_bias(r->lib, r->dc, r->dbias); }

#define GRID_STRIDE(i, n)                                                                          \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

/* logsumexp: dr = g exp(r - y), y and g broadcast over the 64 channels */
__global__ void b1_logsumexp_backward(const float *__restrict__ rr, const float *__restrict__ y,
                                      const float *__restrict__ g, float *__restrict__ dr, size_t n,
                                      int S)
{
    GRID_STRIDE(i, n) {
        size_t pos = i / ((size_t)C_OUT * S) * S + i % S;
        dr[i] = g[pos] * expf(rr[i] - y[pos]);
    }
}

/* nn.Hardswish's backward as PyTorch writes it: 0 below -3, (2t + 3) / 6 up to 3, 1 above */
__global__ void b1_hardswish_backward(const float *__restrict__ dh, const float *__restrict__ t,
                                      float *__restrict__ dt, size_t n)
{
    GRID_STRIDE(i, n) {
        float v = t[i];
        dt[i] = v < -3.0f ? 0.0f : (v <= 3.0f ? dh[i] * (2.0f * v + 3.0f) / 6.0f : dh[i]);
    }
}

/* tanh's backward from its output: dgn = dt (1 - t^2) */
__global__ void b1_tanh_backward(const float *__restrict__ dt, const float *__restrict__ t,
                                 float *__restrict__ dgn, size_t n)
{
    GRID_STRIDE(i, n) dgn[i] = dt[i] * (1.0f - t[i] * t[i]);
}

/* GroupNorm's backward, its reductions: block (n, G) sums over the group's 4 S values
 * dxh = dgn gamma and dxh xh (into m1, m2 as means), and per channel dgn xh and dgn (into
 * part[(n 64 + c) 2 + {0, 1}]) */
__global__ void __launch_bounds__(STATS_BLOCK)
b1_groupnorm_backward_sums(const float *__restrict__ c, const float *__restrict__ dgn,
                           const float *__restrict__ mean, const float *__restrict__ rstd,
                           const float *__restrict__ gamma, float *__restrict__ m1,
                           float *__restrict__ m2, float *__restrict__ part, int S)
{
    int seg = blockIdx.x, G = seg % GROUPS;
    size_t base = (size_t)seg * CPG * S;
    float mu = mean[seg], rs = rstd[seg], s1 = 0.0f, s2 = 0.0f, dg[CPG], db[CPG];
    for (int k = 0; k < CPG; k++)
        dg[k] = db[k] = 0.0f;
    for (int k = 0; k < CPG; k++) {
        float gm = gamma[G * CPG + k];
        for (int j = threadIdx.x; j < S; j += STATS_BLOCK) {
            size_t e = base + (size_t)k * S + j;
            float xh = (c[e] - mu) * rs, d = dgn[e];
            s1 += d * gm, s2 += d * gm * xh;
            dg[k] += d * xh, db[k] += d;
        }
    }
    s1 = block_sum(s1), s2 = block_sum(s2);
    for (int k = 0; k < CPG; k++) {
        float a = block_sum(dg[k]), b = block_sum(db[k]);
        if (threadIdx.x == 0)
            part[((size_t)seg * CPG + k) * 2] = a, part[((size_t)seg * CPG + k) * 2 + 1] = b;
    }
    if (threadIdx.x == 0)
        m1[seg] = s1 / (float)(CPG * S), m2[seg] = s2 / (float)(CPG * S);
}

/* dgamma, dbeta: block c adds its N partials in order */
__global__ void b1_param_sums(const float *__restrict__ part, float *__restrict__ dgamma,
                              float *__restrict__ dbeta, int N)
{
    int ch = blockIdx.x;
    float a = 0.0f, b = 0.0f;
    for (int n = threadIdx.x; n < N; n += blockDim.x)
        a += part[((size_t)n * C_OUT + ch) * 2], b += part[((size_t)n * C_OUT + ch) * 2 + 1];
    a = block_sum(a), b = block_sum(b);
    if (threadIdx.x == 0)
        dgamma[ch] = a, dbeta[ch] = b;
}

/* dc = dr + rstd (dgn gamma - mean(dxh) - xh mean(dxh xh)), in place over dr */
__global__ void b1_groupnorm_backward_apply(const float *__restrict__ c, const float *__restrict__ dgn,
                                            const float *__restrict__ mean,
                                            const float *__restrict__ rstd,
                                            const float *__restrict__ gamma,
                                            const float *__restrict__ m1,
                                            const float *__restrict__ m2, float *__restrict__ dc,
                                            size_t n, int S)
{
    GRID_STRIDE(i, n) {
        size_t seg = i / ((size_t)CPG * S);
        int ch = (int)(i / S % C_OUT);
        float rs = rstd[seg], xh = (c[i] - mean[seg]) * rs;
        dc[i] += rs * (dgn[i] * gamma[ch] - m1[seg] - xh * m2[seg]);
    }
}

static void b1_backward(const run_ctx *r)
{
    const shape *s = &r->sh;
    size_t n = conv_elems(s);
    int g = grid_for((long long)n, APPLY_BLOCK, r->sm_count);
    float *const *t = r->t; /* gn, t, h, r from v1's forward; gn's and h's room is reused */
    b1_logsumexp_backward<<<g, APPLY_BLOCK>>>(t[3], r->y, r->g, r->dc, n, s->s); /* dr = dh */
    b1_hardswish_backward<<<g, APPLY_BLOCK>>>(r->dc, t[1], t[2], n);           /* dt */
    b1_tanh_backward<<<g, APPLY_BLOCK>>>(t[2], t[1], t[0], n);                 /* dgn */
    b1_groupnorm_backward_sums<<<(int)seg_count(s), STATS_BLOCK>>>(
        r->c, t[0], r->mean, r->rstd, r->gamma, r->m1, r->m2, r->bpart, s->s);
    b1_param_sums<<<C_OUT, 128>>>(r->bpart, r->dgamma, r->dbeta, s->n);
    b1_groupnorm_backward_apply<<<g, APPLY_BLOCK>>>(r->c, t[0], r->mean, r->rstd, r->gamma, r->m1,
                                                    r->m2, r->dc, n, s->s);
}

void b1_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_TRAIN)
        conv_forward(r);
    v1_launch(r, SCOPE_EPI_FWD);
    b1_backward(r);
    if (scope == SCOPE_TRAIN)
        lib_dx(r), lib_dw(r), lib_dbias(r);
}
