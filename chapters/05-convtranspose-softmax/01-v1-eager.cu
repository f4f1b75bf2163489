/*
 * v1: what PyTorch eager does
 *
 * PyTorch eager runs the model op by op: AvgPool3d (ATen's own kernel, a thread an output),
 * the library's transposed conv, then clamp, softmax and the multiply by scale, each a kernel
 * that reads its input from DRAM and writes its result back. ATen's softmax for a row longer
 * than its shared memory holds (cunn_SoftMaxForward, aten/src/ATen/native/cuda/SoftMax.cu) is
 * a block a row making three passes over the row: the max, the sum of exp(v - max), then the
 * outputs. v1 is that, written plainly. The whole model (scope model_fwd) of v1..v6 is the
 * pool, the library's transposed conv, then the epilogue.
 * Bytes: clamp reads c and writes z, softmax reads z three times and writes p, scale reads p and
 * writes y: 8 x 1073.7 MB = 8.6 GB against the epilogue's 2.15 GB floor (model.h).
 * Prediction: about 4x the floor, 2.9 ms at the 2991 GB/s ceiling [v1 epilogue_fwd ceiling_gbps],
 * if the softmax's second and third reads come from DRAM (2 blocks of 1024 threads an SM: 264
 * rows of 512 KB in flight, 138 MB, more than the 52 MB L2 the run's notes print).
 * Measured (H100 80GB HBM3, KernelBench shape, data/h100/ch05.csv): the epilogue 3.229 ms
 * [v1 epilogue_fwd], 22.2% of the copy ceiling [v1 epilogue_fwd pct_ceiling], 4.5x its floor
 * [v1 epilogue_fwd median_ms/floor_ms], 1.12x the prediction; PyTorch eager's epilogue takes
 * 3.043 ms [eager epilogue_fwd]. The whole model 14.31 ms [v1 model_fwd], most of it the
 * library's transposed conv (PyTorch eager's alone: 10.73 ms [eager conv_fwd] in fp32).
 */
#include "model.h"
#include "reduce.cuh"

/* AvgPool3d(2), floor: a thread an output, the mean of its 2 x 2 x 2 window */
__global__ void v1_avg_pool(const float *__restrict__ x, float *__restrict__ xp, shape s)
{
    size_t total = pool_elems(&s);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int pw = (int)(i % s.pw), ph = (int)(i / s.pw % s.ph), pd = (int)(i / s.pw / s.ph % s.pd);
        size_t plane = i / ((size_t)s.pw * s.ph * s.pd); /* n C_IN + ci */
        const float *src = x + ((plane * s.d + 2 * pd) * s.h + 2 * ph) * s.w + 2 * pw;
        float sum = 0.0f;
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++)
                sum += src[((size_t)a * s.h + b) * s.w] + src[((size_t)a * s.h + b) * s.w + 1];
        xp[i] = sum * 0.125f;
    }
}

void pool_forward(const run_ctx *r)
{
    v1_avg_pool<<<grid_for((long long)pool_elems(&r->sh), 256, r->sm_count), 256, 0, r->stream>>>(
        r->x, r->xp, r->sh);
}

/* the library's ConvTranspose3d + bias (common/conv.h: the input gradient of the Conv3d it
 * transposes): cuDNN's fastest strict-fp32 algorithm by cudnnFind, or, in a build without cuDNN,
 * the direct kernel */
void conv_forward(const run_ctx *r) { lib_conv_transpose3d_forward(r->lib, r->weight, r->xp, r->bias, r->c); }

void model_front(const run_ctx *r)
{
    pool_forward(r);
    conv_forward(r);
}

__global__ void v1_clamp(const float *__restrict__ c, float *__restrict__ z, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        z[i] = fminf(fmaxf(c[i], CLAMP_LO), CLAMP_HI);
}

/* ATen's softmax for a long row: a block a row, three passes; lse[row] = max + log(sum), the
 * statistic every forward saves */
__global__ void __launch_bounds__(ROW_BLOCK)
v1_softmax_rows(const float *__restrict__ z, float *__restrict__ p, float *__restrict__ lse, int S)
{
    __shared__ float bcast;
    const float *in = z + (size_t)blockIdx.x * S;
    float *out = p + (size_t)blockIdx.x * S;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < S; j += ROW_BLOCK)
        m = fmaxf(m, in[j]);
    m = block_max(m);
    if (threadIdx.x == 0)
        bcast = m;
    __syncthreads();
    m = bcast;
    float sum = 0.0f;
    for (int j = threadIdx.x; j < S; j += ROW_BLOCK)
        sum += expf(in[j] - m);
    sum = block_sum(sum);
    if (threadIdx.x == 0)
        bcast = sum, lse[blockIdx.x] = m + logf(sum);
    __syncthreads();
    float inv = 1.0f / bcast;
    for (int j = threadIdx.x; j < S; j += ROW_BLOCK)
        out[j] = expf(in[j] - m) * inv;
}

/* y = p scale_c: scale is a parameter in device memory (it changes in training) */
__global__ void v1_scale(const float *__restrict__ p, const float *__restrict__ scale,
                         float *__restrict__ y, size_t n, int S)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = p[i] * scale[i / S % C_OUT];
}

/* z into t[0], p into t[1] (b1 keeps p for its backward), y */
void v1_epilogue(const run_ctx *r)
{
    size_t n = conv_elems(&r->sh);
    int grid = grid_for((long long)n, 256, r->sm_count);
    v1_clamp<<<grid, 256>>>(r->c, r->t[0], n);
    v1_softmax_rows<<<rows(&r->sh), ROW_BLOCK>>>(r->t[0], r->t[1], r->lse, r->sh.s);
    v1_scale<<<grid, 256>>>(r->t[1], r->scale, r->y, n, r->sh.s);
}

void v1_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_MODEL_FWD)
        model_front(r);
    v1_epilogue(r);
}
