/*
 * b1: the backward as autograd runs it
 *
 * Forward: v1 keeping what autograd saves (a, xh, t and the argmax: int32 here, autograd keeps
 * int64). Backward: one kernel per op of the derivation in reference.cu, every intermediate
 * gradient a dense 103 MB tensor: du (g at the argmax channel, 0 elsewhere), dt = du m, the
 * clamp's mask, the instance norm's two means and its da, dc = da m; dm's two uses as
 * deterministic per-channel sums (training-grads.cu): no atomics, the same bits every run.
 * Bytes: the forward's 1038.6 MB and the saved argmax (6.45 MB); the backward reads g and the
 * argmax and writes du (116.1 MB), then five passes that read one 103 MB tensor and write one
 * or read two (dt = du m, dm's first sum, the means, dc = da m, dm's second sum: 1032 MB) and
 * two that read two and write one (the clamp's mask, da: 619 MB): 2.81 GB in all.
 * Prediction: 0.95 ms at the copy ceiling, plus what v1's serial statistics cost beyond their
 * share (1.257 [v1 stats] - 0.034 ms [v1 stats floor_ms], v1's stats row): about 2.2 ms.
 * Measured, forward + backward: 2.426 ms [b1 epilogue_fwdbwd], 4.4% of the floor
 * [b1 epilogue_fwdbwd pct_floor] (PyTorch eager 1.53 ms [eager epilogue_fwdbwd], torch.compile
 * 1.261 ms [compile epilogue_fwdbwd]).
 *
 * The training step (every b version): cuDNN's conv, the epilogue forward and backward, then
 * the conv's gradients: cuDNN's dx (backward data); dw by cuDNN's backward filter (b1) or our
 * own (b2 to b6); our own deterministic dbias (training-grads.cu). Measured (b1): 5.868 ms
 * [b1 train_step], of which the epilogue forward and backward 2.426 [b1 epilogue_fwdbwd], and
 * cuDNN's conv, dx and dw with our dbias the other 3.44 ms [b1 train_step-epilogue_fwdbwd]
 * (cuDNN's timings each, printed after the table: LABBOOK.md).
 */
#include "model.h"
#include "sums.cuh"

/* du = g at the argmax channel, 0 elsewhere (autograd: zeros, then a scatter) */
__global__ void b1_max_backward(const float *__restrict__ g, const int *__restrict__ idx,
                                float *__restrict__ du, int total, int S)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int s = i % S, nc = i / S, n = nc / C_OUT, co = nc - n * C_OUT;
        du[i] = idx[n * S + s] == co ? g[n * S + s] : 0.0f;
    }
}

/* the clamp's mask is closed: the gradient passes at xh = -1 and xh = 1 */
__global__ void b1_clamp_backward(const float *__restrict__ dt, const float *__restrict__ xh,
                                  float *__restrict__ dxh, int total)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        float v = xh[i];
        dxh[i] = v >= -1.0f && v <= 1.0f ? dt[i] : 0.0f;
    }
}

/* a block per (n, c): the means of dxh and dxh xh (v6's technique) */
__global__ void __launch_bounds__(MANY_BLOCK)
b1_instnorm_bwd_reduce(const float *__restrict__ dxh, const float *__restrict__ xh,
                       float2 *__restrict__ means, int S)
{
    const float *d = dxh + (size_t)blockIdx.x * S, *x = xh + (size_t)blockIdx.x * S;
    float2 acc = make_float2(0.0f, 0.0f);
    for (int j = threadIdx.x; j < S; j += MANY_BLOCK) {
        float v = d[j];
        acc.x += v, acc.y += v * x[j];
    }
    acc = block_sum2(acc);
    if (threadIdx.x == 0)
        means[blockIdx.x] = make_float2(acc.x / S, acc.y / S);
}

/* da = rstd (dxh - mean(dxh) - xh mean(dxh xh)) */
__global__ void b1_instnorm_bwd_apply(const float *__restrict__ dxh, const float *__restrict__ xh,
                                      const float *__restrict__ rstd,
                                      const float2 *__restrict__ means, float *__restrict__ da,
                                      int total, int S)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int seg = i / S;
        float2 mm = means[seg];
        da[i] = __ldg(rstd + seg) * (dxh[i] - mm.x - xh[i] * mm.y);
    }
}

static void b1_backward(const run_ctx *r)
{
    const shape *s = &r->sh;
    int total = (int)conv_elems(s), g = grid_for(total, 256, r->sm_count), S = s->s;
    float *xh = r->t[1], *t = r->t[2], *du = r->t[3], *dt = r->t[4];
    b1_max_backward<<<g, 256>>>(r->g, r->idx, du, total, S);
    scale_channels(r, du, dt);             /* dt = du m */
    channel_dot(r, du, t, r->dm_part1);    /* dm += du t */
    float *dxh = du;                       /* du is spent */
    b1_clamp_backward<<<g, 256>>>(dt, xh, dxh, total);
    b1_instnorm_bwd_reduce<<<(int)seg_count(s), MANY_BLOCK>>>(dxh, xh, r->means, S);
    float *da = dt;
    b1_instnorm_bwd_apply<<<g, 256>>>(dxh, xh, r->rstd, r->means, da, total, S);
    scale_channels(r, da, r->dc);          /* dc = da m */
    channel_dot(r, da, r->c, r->dm_part2); /* dm += da c */
    channel_totals(r->dm_part1, r->dm_part2, DOT_BLOCKS, r->dm, r->stream);
}

void b1_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_TRAIN)
        conv_forward(r);
    v1_saving(r);
    b1_backward(r);
    if (scope == SCOPE_TRAIN)
        lib_dx(r), lib_dw(r), own_dbias(r);
}
