/*
 * v1: what PyTorch eager does
 *
 * PyTorch eager: the library conv, then one kernel (or more) per op. Here: the library Conv2d,
 * the GroupNorm statistics with chapter 3's shared-memory tree (each thread's Welford state,
 * then a tree over shared memory with a __syncthreads at every level), then five kernels, each
 * reading and writing a 520 MB tensor: normalise + affine (gn), tanh (t), HardSwish in its
 * general form (h), the residual add (r = c + h), and the logsumexp over the 64 channels (two
 * passes, as torch.logsumexp: the max, then the sum of exp).
 * Bytes: the statistics read c (520 MB, 1 pass); gn reads c, writes gn (2); tanh and HardSwish
 * each read one tensor and write one (2 + 2); the add reads two and writes one (3); the
 * logsumexp reads r (1: its second pass mostly from L2) and writes y: 11 x 520 MB + 8 MB =
 * 5.73 GB, eleven times the 528 MB floor. Prediction: 5.73 GB at the 2988 GB/s
 * [v1 epilogue_fwd ceiling_gbps] copy ceiling, about 1.92 ms.
 * Measured (H100 80GB HBM3, KernelBench shape, data/h100/ch04.csv): the epilogue 2.478 ms
 * [v1 epilogue_fwd], 7.1% of the floor [v1 epilogue_fwd pct_floor] and 1.3x the prediction: the
 * statistics alone take 0.1849 ms [v1 stats] (94.2% of the ceiling [v1 stats pct_ceiling]), the
 * five kernels the other 2.29 ms [v1 epilogue_fwd-stats]. The whole model 3.63 ms [v1 model_fwd],
 * of which cuDNN's conv about 1.18 (the notes after the table).
 *
 * The whole model (scope model_fwd) of v1..v7 is the library conv, then the epilogue (v7's
 * channels last).
 */
#include "lse.cuh"
#include "model.h"
#include "group-welford.cuh"

/* the library Conv2d + bias (common/conv.h): cuDNN's fastest strict-fp32 algorithm by
 * cudnnFind, or, in a build without cuDNN, the direct kernel */
void conv_forward(const run_ctx *r) { lib_conv3d_forward(r->lib, r->x, r->weight, r->bias, r->c); }

/* One block a group (n, G): its 4 S values are contiguous and start on a 16-byte boundary
 * (offset (n 64 + 4 G) S floats, a multiple of 4), so every thread loads float4. Each thread
 * runs Welford's update over its share; then the shared-memory tree of chapter 3 (Harris's
 * kernel 3, sequential addressing): half the threads merge a pair with Chan's formula, a
 * barrier, half again: log2(512) = 9 levels, 9 __syncthreads. */
__global__ void __launch_bounds__(STATS_BLOCK)
v1_stats_tree(const float *__restrict__ c, float *__restrict__ mean, float *__restrict__ rstd, int S)
{
    __shared__ welford part[STATS_BLOCK];
    int seg = blockIdx.x, tid = threadIdx.x;
    welford w = thread_welford(c, seg, S, threadIdx.x, STATS_BLOCK);
    part[tid] = w;
    __syncthreads();
    for (int stride = STATS_BLOCK / 2; stride > 0; stride >>= 1) {
        if (tid < stride)
            part[tid] = chan_merge(part[tid], part[tid + stride]);
        __syncthreads();
    }
    if (tid == 0)
        mean[seg] = part[0].mean, rstd[seg] = group_rstd(part[0], S);
}

void stats_v1(const run_ctx *r)
{
    v1_stats_tree<<<(int)seg_count(&r->sh), STATS_BLOCK>>>(r->c, r->mean, r->rstd, r->sh.s);
}

/* the elementwise ops, one thread an element (grid-stride); element i of N x 64 x S is channel
 * (i / S) % 64 of group i / (4 S) */
__global__ void v1_groupnorm(const float *__restrict__ c, const float *__restrict__ mean,
                             const float *__restrict__ rstd, const float *__restrict__ gamma,
                             const float *__restrict__ beta, float *__restrict__ gn, size_t n, int S)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t seg = i / ((size_t)CPG * S);
        int ch = (int)(i / S % C_OUT);
        gn[i] = (c[i] - mean[seg]) * rstd[seg] * gamma[ch] + beta[ch];
    }
}

__global__ void v1_tanh(const float *__restrict__ a, float *__restrict__ o, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        o[i] = tanhf(a[i]);
}

/* nn.Hardswish as PyTorch computes it, for any input: t relu6(t + 3) / 6 */
__global__ void v1_hardswish(const float *__restrict__ a, float *__restrict__ o, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        o[i] = a[i] * fminf(fmaxf(a[i] + 3.0f, 0.0f), 6.0f) / 6.0f;
}

__global__ void v1_add(const float *__restrict__ a, const float *__restrict__ b,
                       float *__restrict__ o, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        o[i] = a[i] + b[i];
}

/* gn, t, h, r into t[0..3] (b1 reads them back), y by common/lse.cuh's two-pass kernel */
void eager_tail(const run_ctx *r)
{
    const shape *s = &r->sh;
    size_t n = conv_elems(s);
    int g = grid_for((long long)n, APPLY_BLOCK, r->sm_count);
    float *const *t = r->t;
    v1_groupnorm<<<g, APPLY_BLOCK>>>(r->c, r->mean, r->rstd, r->gamma, r->beta, t[0], n, s->s);
    v1_tanh<<<g, APPLY_BLOCK>>>(t[0], t[1], n);
    v1_hardswish<<<g, APPLY_BLOCK>>>(t[1], t[2], n);
    v1_add<<<g, APPLY_BLOCK>>>(r->c, t[2], t[3], n);
    int np = (int)out_elems(s);
    k_logsumexp_naive<C_OUT><<<grid_for(np, APPLY_BLOCK, r->sm_count), APPLY_BLOCK>>>(t[3], r->y, np,
                                                                                       s->s);
}

/* v1..v3 in each of their scopes: the statistics alone, the epilogue, or the conv first */
void eager_launch(const run_ctx *r, int scope, stats_fn stats)
{
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    stats(r);
    if (scope != SCOPE_STATS)
        eager_tail(r);
}

void v1_launch(const run_ctx *r, int scope) { eager_launch(r, scope, stats_v1); }
