/*
 * The backward, derived. L = sum g y with g = dL/dy. Per row (n, ch) of S values, with
 * z = clamp(c, 0, 1), p = softmax(z), y = scale_ch p:
 *   dscale_ch = sum over n and the row of g p          (y is linear in scale)
 *   dp        = g scale_ch                             (= g')
 *   dz        = p (g' - sum over the row of g' p)      (softmax's Jacobian, diag(p) - p p^T,
 *                                                       applied to g': the row's one reduction)
 *   dc        = dz [0 <= c <= 1]                       (clamp passes the gradient inside and at
 *                                                       the bounds, PyTorch's clamp backward:
 *                                                       g * (min <= c <= max))
 * Since sum g' p = scale_ch sum g p, the one reduction a row serves both: with
 * dot = sum over the row of g p, dscale_ch = sum over n of dot, and dz = scale_ch p (g - dot).
 * Then the model's own gradients, through the transposed conv and the pool (reference.cu):
 *   dxp = the Conv3d that the transposed conv transposes, of dc (common/conv.h); dw = the
 *   weight gradient from dc and xp; dbias = the sum of dc over n and positions; dx = dxp / 8
 *   spread over each 2 x 2 x 2 window (0 for the values the pool dropped).
 */

/*
 * b1: what autograd does
 *
 * Autograd saves what each op's backward needs and runs a kernel (or two) per op: the multiply
 * by scale saved p (its backward: g' = g scale, and dscale = sum g p, a product kernel and a
 * reduction), the softmax saved its output p (ATen's softmax backward: a block a row, the dot
 * product, then p (g' - dot)), the clamp saved c (its backward: the mask). Forward: v1, whose
 * softmax writes p to t[1].
 * Bytes of the backward: g p (read 2, write 1), the reduction (read 1), g' (read 1, write 1),
 * the softmax backward (read g' and p twice, write dz: 5), the mask (read c and dz, write dc:
 * 3): 14 x 1073.7 MB; with v1's forward (8 tensor passes) 22 x 1073.7 MB = 23.6 GB against the
 * fwd + bwd floor of 5.4 GB. Prediction: about 4.4x the floor, 7.9 ms at the ceiling.
 * Measured: 8.937 ms [b1 epilogue_fwdbwd], 20.1% of the ceiling [b1 epilogue_fwdbwd pct_ceiling]
 * (5.0x [b1 epilogue_fwdbwd median_ms/floor_ms] the floor), 1.13x the prediction; PyTorch eager's
 * epilogue forward + backward takes 10.29 ms [eager epilogue_fwdbwd]. The training step 27.78 ms
 * [b1 train_step], most of it the library's transposed conv and its gradients (conv_pool_grads
 * below; PyTorch eager's conv weight gradient alone takes 4.813 ms [eager conv_dw] in fp32).
 */
#include "model.h"
#include "reduce.cuh"

__global__ void b1_mul(const float *__restrict__ a, const float *__restrict__ b,
                       float *__restrict__ o, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        o[i] = a[i] * b[i];
}

__global__ void b1_mul_channel(const float *__restrict__ a, const float *__restrict__ scale,
                               float *__restrict__ o, size_t n, int S)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        o[i] = a[i] * scale[i / S % C_OUT];
}

/* ATen's softmax backward for a long row: a block a row, dot = sum dp p, then p (dp - dot) */
__global__ void __launch_bounds__(ROW_BLOCK)
b1_softmax_backward(const float *__restrict__ dp, const float *__restrict__ p,
                    float *__restrict__ dz, int S)
{
    __shared__ float bcast;
    size_t base = (size_t)blockIdx.x * S;
    float dot = 0.0f;
    for (int j = threadIdx.x; j < S; j += ROW_BLOCK)
        dot += dp[base + j] * p[base + j];
    dot = block_sum(dot);
    if (threadIdx.x == 0)
        bcast = dot;
    __syncthreads();
    dot = bcast;
    for (int j = threadIdx.x; j < S; j += ROW_BLOCK)
        dz[base + j] = p[base + j] * (dp[base + j] - dot);
}

__global__ void b1_clamp_backward(const float *__restrict__ dz, const float *__restrict__ c,
                                  float *__restrict__ dc, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dc[i] = (c[i] >= CLAMP_LO && c[i] <= CLAMP_HI) ? dz[i] : 0.0f;
}

#define DSCALE_SPLIT 64 /* blocks a channel's dscale sum is split over (common/reduce.cuh) */

/* dscale_ch = the sum over n and positions of a, in two deterministic stages */
void channel_sums(const run_ctx *r, const float *a, const float *b)
{
    k_channel_sums<<<dim3(DSCALE_SPLIT, C_OUT), 256>>>(a, b, r->bpart, r->sh.n, r->sh.s);
    k_segment_sums<<<C_OUT, 256>>>(r->bpart, NULL, DSCALE_SPLIT, r->dscale);
}

void b1_backward(const run_ctx *r)
{
    size_t n = conv_elems(&r->sh);
    int grid = grid_for((long long)n, 256, r->sm_count);
    float *const *t = r->t; /* z, p (v1's), then g p and g', then dz */
    b1_mul<<<grid, 256>>>(r->g, t[1], t[2], n);                    /* g p */
    channel_sums(r, t[2], NULL);                                  /* dscale */
    b1_mul_channel<<<grid, 256>>>(r->g, r->scale, t[2], n, r->sh.s); /* g' = g scale */
    b1_softmax_backward<<<rows(&r->sh), ROW_BLOCK>>>(t[2], t[1], t[3], r->sh.s); /* dz */
    b1_clamp_backward<<<grid, 256>>>(t[3], r->c, r->dc, n);        /* dc */
}

/* dx = dxp / 8 on each value of a window, 0 on the values the pool dropped: a thread a value of x */
__global__ void b1_pool_backward(const float *__restrict__ dxp, float *__restrict__ dx, shape s)
{
    size_t total = x_elems(&s);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int w = (int)(i % s.w), h = (int)(i / s.w % s.h), d = (int)(i / s.w / s.h % s.d);
        size_t plane = i / ((size_t)s.w * s.h * s.d);
        int pd = d >> 1, ph = h >> 1, pw = w >> 1;
        dx[i] = (pd < s.pd && ph < s.ph && pw < s.pw)
                    ? dxp[((plane * s.pd + pd) * s.ph + ph) * s.pw + pw] * 0.125f
                    : 0.0f;
    }
}

/* the training step's gradients from dc: the library's (the Conv3d the transposed conv
 * transposes: its forward is dxp, its weight gradient dw; the bias gradient), then the pool's */
void library_conv_grads(const run_ctx *r)
{
    if (r->dxp) /* NULL: the input's gradient is not wanted (api.cu) */
        lib_conv3d_forward(r->lib, r->dc, r->weight, NULL, r->dxp);
    lib_conv3d_backward_filter(r->lib, r->dc, r->xp, r->dw);
    lib_conv_transpose3d_backward_bias(r->lib, r->dc, r->dbias);
}

void pool_grad(const run_ctx *r)
{
    b1_pool_backward<<<grid_for((long long)x_elems(&r->sh), 256, r->sm_count), 256, 0, r->stream>>>(
        r->dxp, r->dx, r->sh);
}

void conv_pool_grads(const run_ctx *r)
{
    library_conv_grads(r);
    pool_grad(r);
}

void b1_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_TRAIN)
        model_front(r);
    v1_epilogue(r);
    b1_backward(r);
    if (scope == SCOPE_TRAIN)
        conv_pool_grads(r);
}
