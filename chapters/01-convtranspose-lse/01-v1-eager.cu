/*
 * v1: what PyTorch eager does
 *
 * PyTorch eager runs the model op by op: the library's transposed conv, then logsumexp (itself
 * amax, a guard for infinite maxima, sub, exp, sum, log, add inside torch), then x + 3, sigmoid,
 * *, / 6, - b, clamp: each a kernel that reads its input from DRAM and writes its result back.
 * Here: cuDNN's transposed conv, one naive logsumexp kernel (common/lse.cuh's k_logsumexp_naive:
 * a thread per position, a max pass and a sum pass over the 16 channels) and one kernel per
 * elementwise op.
 * Bytes: the logsumexp reads 1.008 GB and writes 63 MB; the 6 elementwise kernels then read 7
 * and write 6 tensors of 63 MB: 1.008 + 0.063 + 13 * 0.063 = 1.9 GB moved for a result whose
 * floor is 1.07 GB, plus 7 launches. Prediction: about 1.8x the floor.
 * Measured (H100 80GB HBM3, KernelBench shape, data/h100/ch01.csv): 0.758 ms [v1 epilogue_fwd],
 * 2.1x [v1 epilogue_fwd median_ms/floor_ms] the 0.359 ms [v1 epilogue_fwd floor_ms] floor, 47% of
 * the copy ceiling [v1 epilogue_fwd pct_ceiling]. PyTorch eager's epilogue takes 2.78 ms
 * [eager epilogue_fwd] on the same GPU (data/h100/pytorch-ch01.csv): its logsumexp alone is nine
 * kernels (torch.profiler, PyTorch 2.11 on the H100: amax; abs, == inf and masked_fill for the
 * guard; sub, exp, sum, log, add; 2.5 ms of kernel time together) and writes 1 GB twice (sub's
 * result, then exp in place).
 *
 * The whole model (scope model_fwd) of v1 to v4 is cuDNN's transposed conv, then the epilogue:
 * v1's measured 6.99 ms [v1 model_fwd], of which the epilogue is 0.76 [v1 epilogue_fwd] and the
 * conv the rest (cuDNN's engine 74, 6.23 ms alone: its own line follows the table). v5 and v6
 * compute the conv themselves.
 */
#include "lse.cuh"
#include "model.h"
#include "tail.cuh"

/* cuDNN's ConvTranspose3d + bias, the strict-fp32 engine its search measured fastest: the
 * input gradient of the Conv3d it transposes (common/conv.h) */
void conv_forward(const run_ctx *r)
{
    lib_conv_transpose3d_forward(&r->lib->conv, r->weight, r->x, r->conv_bias, r->c);
    r->lib->forward_ran = 1;
}

__global__ void v1_add_scalar(const float *__restrict__ a, float k, float *__restrict__ o, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        o[i] = a[i] + k;
}

__global__ void v1_sigmoid(const float *__restrict__ a, float *__restrict__ o, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        o[i] = 1.0f / (1.0f + expf(-a[i]));
}

__global__ void v1_mul(const float *__restrict__ a, const float *__restrict__ b,
                       float *__restrict__ o, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        o[i] = a[i] * b[i];
}

__global__ void v1_div_scalar(const float *__restrict__ a, float k, float *__restrict__ o, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        o[i] = a[i] / k;
}

/* b is a parameter: it lives in device memory, as in a training loop where it changes */
__global__ void v1_sub_param(const float *__restrict__ a, const float *__restrict__ b,
                             float *__restrict__ o, int n)
{
    float bv = *b;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        o[i] = a[i] - bv;
}

__global__ void v1_clamp(const float *__restrict__ a, float *__restrict__ o, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        o[i] = clamp_pm1(a[i]);
}

void v1_epilogue(const run_ctx *r)
{
    int n = (int)out_elems(&r->sh), g = grid_for(n, 256, r->sm_count);
    float *const *t = r->tmp;
    k_logsumexp_naive<C_OUT><<<g, 256>>>(r->c, t[T_Z], n, r->sh.s); /* z */
    v1_add_scalar<<<g, 256>>>(t[T_Z], 3.0f, t[T_ZP3], n);      /* z + 3 */
    v1_sigmoid<<<g, 256>>>(t[T_ZP3], t[T_T], n);               /* t = sigmoid(z + 3) */
    v1_mul<<<g, 256>>>(t[T_Z], t[T_T], t[T_ZT], n);            /* z t */
    v1_div_scalar<<<g, 256>>>(t[T_ZT], 6.0f, t[T_A], n);       /* a = z t / 6 */
    v1_sub_param<<<g, 256>>>(t[T_A], r->b, t[T_S], n);         /* s = a - b */
    v1_clamp<<<g, 256>>>(t[T_S], r->y, n);                     /* y = clamp(s, -1, 1) */
}

/* o = a / k over N S floats: also b1's backward of "/ 6" */
void div_scalar(const run_ctx *r, const float *a, float k, float *o)
{
    int n = (int)out_elems(&r->sh);
    v1_div_scalar<<<grid_for(n, 256, r->sm_count), 256>>>(a, k, o, n);
}

void v1_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    v1_epilogue(r);
}

/* ------------------------------------------------------------ a demonstration, not a version
 * Why even the naive kernel above subtracts the max: logsumexp as the formula reads,
 * log(sum(exp(v))), with the fast intrinsics. exp(100) = 2.7e43 is past float's 3.4e38, so the
 * sum is inf; exp(-100) = 3.7e-44 is a float subnormal with a few significant bits left, so the
 * sum is coarse. --test runs it on its conv outputs planted near +100 and near -100 and checks
 * that it breaks there (z = inf everywhere; z off by more than 1e-4) while every version passes.
 * This model's clamp hides the damage in y (z = inf still gives y = 1), but the backward's
 * softmax exp(v - z) would be 0 for every channel: a silently zero gradient. */
__global__ void v1_epilogue_unstable(const float *__restrict__ c, const float *__restrict__ b,
                                     float *__restrict__ z, float *__restrict__ y, int n_pos, int s)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_pos; i += gridDim.x * blockDim.x) {
        int n = i / s, p = i - n * s;
        float sum = 0.0f;
        for (int ch = 0; ch < C_OUT; ch++)
            sum += __expf(c[(n * C_OUT + ch) * s + p]);
        z[i] = __logf(sum);
        y[i] = tail_fast(z[i], *b);
    }
}

/* z (N S floats) = the unstable logsumexp of c; writes y too */
void unstable_lse(const run_ctx *r, float *z)
{
    int n = (int)out_elems(&r->sh);
    v1_epilogue_unstable<<<grid_for(n, 256, r->sm_count), 256>>>(r->c, r->b, z, r->y, n, r->sh.s);
}
