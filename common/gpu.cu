/* gpu.cu: the CUDA half of the shared library. See gpu.h for what each function promises. */
#include "gpu.h"

#include <stdlib.h>
#include <string.h>

void cuda_check_(cudaError_t e, const char *what, const char *file, int line)
{
    if (e == cudaSuccess)
        return;
    fprintf(stderr, "error: CUDA %s at %s:%d: %s (%s)\n", what, file, line, cudaGetErrorString(e),
            cudaGetErrorName(e));
    exit(1);
}

void cudnn_check_(cudnnStatus_t s, const char *what, const char *file, int line)
{
    if (s == CUDNN_STATUS_SUCCESS)
        return;
    fprintf(stderr, "error: cuDNN %s at %s:%d: %s\n", what, file, line, cudnnGetErrorString(s));
    exit(1);
}

int gpu_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" / "no device" error */
        return 0;
    }
    return n;
}

void gpu_require_or_exit(void)
{
    if (gpu_count() == 0)
        die(EXIT_USAGE, "no CUDA device (cudaGetDeviceCount found none or no driver); "
                        "`--test` runs the CPU checks without one");
}

static double measure_copy_gbps(void)
{
    size_t bytes = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    while (bytes >= ((size_t)1 << 24)) {
        if (cudaMalloc(&a, bytes) == cudaSuccess) {
            if (cudaMalloc(&b, bytes) == cudaSuccess)
                break;
            cudaFree(a);
        }
        cudaGetLastError();
        a = b = NULL;
        bytes /= 2;
    }
    if (!b)
        die(1, "cannot allocate two 16 MiB buffers to measure the copy ceiling");
    CUDA_CHECK(cudaMemset(a, 0x3c, bytes)); /* never copy untouched memory */
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    float ms[7];
    for (int i = -2; i < 7; i++) {
        CUDA_CHECK(cudaEventRecord(e0, 0));
        CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0));
        CUDA_CHECK(cudaEventRecord(e1, 0));
        CUDA_CHECK(cudaEventSynchronize(e1));
        if (i >= 0)
            CUDA_CHECK(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    timing t;
    stats_from_samples(ms, 7, &t);
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaFree(b));
    return 2.0 * (double)bytes / (t.median_ms * 1e6);
}

void device_info_get(device_info *d)
{
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", p.name);
    gpu_tag_from_name(p.name, d->tag, sizeof d->tag);
    d->sm_count = p.multiProcessorCount;
    d->cc_major = p.major;
    d->cc_minor = p.minor;
    /* fp32 lanes an SM: 64 on sm_80 (A100), 128 on sm_86, sm_89, sm_90 (CUDA C Programming
     * Guide, "Arithmetic Instructions" throughput table); the clock attribute is the boost clock */
    int khz = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    int lanes = (p.major == 8 && p.minor == 0) || p.major < 8 ? 64 : 128;
    d->fp32_tflops = 2.0 * p.multiProcessorCount * lanes * (khz * 1e3) / 1e12;
    d->l2_bytes = (size_t)p.l2CacheSize;
    d->global_bytes = p.totalGlobalMem;
    d->copy_gbps = measure_copy_gbps();
}

static __global__ void k_arch_probe(void) {}

int gpu_code_arch(void)
{
    cudaFuncAttributes fa;
    CUDA_CHECK(cudaFuncGetAttributes(&fa, k_arch_probe));
    return fa.ptxVersion;
}

int grid_for(long long n, int block, int sm_count)
{
    long long g = (n + block - 1) / block, cap = (long long)sm_count * 32;
    return (int)(g < cap ? (g > 0 ? g : 1) : cap);
}

void *gpu_alloc(size_t bytes, const char *what)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        die(1, "out of device memory: %s needs %zu bytes (%zu of %zu free)", what, bytes, free_b,
            total_b);
    }
    CUDA_CHECK(e);
    return p;
}

void gpu_poison(float *p, size_t n) { CUDA_CHECK(cudaMemset(p, 0xFF, n * sizeof(float))); }

static void *flush_buf;
static size_t flush_bytes;

void gpu_flush_l2(void)
{
    if (!flush_buf) {
        int dev, l2 = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
        flush_bytes = 2 * (size_t)(l2 > 0 ? l2 : (1 << 20));
        flush_buf = gpu_alloc(flush_bytes, "L2 flush buffer");
    }
    CUDA_CHECK(cudaMemsetAsync(flush_buf, 0, flush_bytes, 0));
}

void gpu_release(void)
{
    if (flush_buf)
        CUDA_CHECK(cudaFree(flush_buf));
    flush_buf = NULL;
}

timing gpu_time(launch_fn fn, const void *ctx, int reps)
{
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    float *ms = (float *)malloc(sizeof(float) * (size_t)reps);
    if (!ms)
        die(1, "out of host memory");
    for (int i = 0; i < 3; i++) {
        fn(ctx);
        LAUNCH_CHECK();
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < reps; i++) {
        gpu_flush_l2();
        CUDA_CHECK(cudaEventRecord(e0, 0));
        fn(ctx);
        LAUNCH_CHECK();
        CUDA_CHECK(cudaEventRecord(e1, 0));
        CUDA_CHECK(cudaEventSynchronize(e1));
        CUDA_CHECK(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    timing t;
    stats_from_samples(ms, reps, &t);
    free(ms);
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    return t;
}

/* ------------------------------------------------------------ cuDNN convolution */

static void workspace_need(size_t *need, size_t bytes, cudnnStatus_t st)
{
    if (st == CUDNN_STATUS_SUCCESS && bytes > *need && bytes <= ((size_t)1 << 31))
        *need = bytes;
}

/* the first successful strict-fp32 entry of a FindEx result (they come fastest first) */
#define FP32_OK(p) ((p).status == CUDNN_STATUS_SUCCESS && (p).mathType == CUDNN_FMA_MATH)
#define PICK_FP32(perf, found, out_algo, out_det, what)                                            \
    do {                                                                                           \
        int pick_ = -1;                                                                            \
        for (int i_ = 0; i_ < (found) && pick_ < 0; i_++)                                          \
            if (FP32_OK((perf)[i_]))                                                               \
                pick_ = i_;                                                                        \
        if (pick_ < 0)                                                                             \
            die(1, "cuDNN found no fp32 (non-tensor-core) algorithm for %s", what);                \
        out_algo = (perf)[pick_].algo;                                                             \
        out_det = (perf)[pick_].determinism == CUDNN_DETERMINISTIC;                                \
    } while (0)

void cudnn_conv3d_setup(cudnn_conv3d *cc, const int x_dims[5], int c_out, int k, int pad,
                        int stride, const float *x, const float *w, float *y, float *dy, float *dx,
                        float *dw)
{
    int n = x_dims[0], ci = x_dims[1], d = x_dims[2], h = x_dims[3], wd_ = x_dims[4];
    int od = (d + 2 * pad - k) / stride + 1, oh = (h + 2 * pad - k) / stride + 1;
    int ow = (wd_ + 2 * pad - k) / stride + 1;
    int xs[5] = {ci * d * h * wd_, d * h * wd_, h * wd_, wd_, 1};
    int yd[5] = {n, c_out, od, oh, ow};
    int ys[5] = {c_out * od * oh * ow, od * oh * ow, oh * ow, ow, 1};
    int bd[5] = {1, c_out, 1, 1, 1}, bs[5] = {c_out, 1, 1, 1, 1};
    int xbd[5] = {1, ci, 1, 1, 1}, xbs[5] = {ci, 1, 1, 1, 1};
    int wdims[5] = {c_out, ci, k, k, k};
    int pads[3] = {pad, pad, pad}, strides[3] = {stride, stride, stride}, one3[3] = {1, 1, 1};
    memset(cc, 0, sizeof *cc);
    CUDNN_CHECK(cudnnCreate(&cc->handle));
    CUDNN_CHECK(cudnnSetStream(cc->handle, 0));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&cc->x_desc));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&cc->y_desc));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&cc->b_desc));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&cc->xb_desc));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&cc->w_desc));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&cc->conv_desc));
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(cc->x_desc, CUDNN_DATA_FLOAT, 5, x_dims, xs));
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(cc->y_desc, CUDNN_DATA_FLOAT, 5, yd, ys));
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(cc->b_desc, CUDNN_DATA_FLOAT, 5, bd, bs));
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(cc->xb_desc, CUDNN_DATA_FLOAT, 5, xbd, xbs));
    CUDNN_CHECK(
        cudnnSetFilterNdDescriptor(cc->w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 5, wdims));
    CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(cc->conv_desc, 3, pads, strides, one3,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(cc->conv_desc, CUDNN_FMA_MATH));
    size_t need = 0, bytes = 0;
    for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; a++)
        workspace_need(&need, bytes, cudnnGetConvolutionForwardWorkspaceSize(
                                         cc->handle, cc->x_desc, cc->w_desc, cc->conv_desc,
                                         cc->y_desc, (cudnnConvolutionFwdAlgo_t)a, &bytes));
    for (int a = 0; a < CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT; a++)
        workspace_need(&need, bytes, cudnnGetConvolutionBackwardDataWorkspaceSize(
                                         cc->handle, cc->w_desc, cc->y_desc, cc->conv_desc,
                                         cc->x_desc, (cudnnConvolutionBwdDataAlgo_t)a, &bytes));
    for (int a = 0; a < CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT; a++)
        workspace_need(&need, bytes, cudnnGetConvolutionBackwardFilterWorkspaceSize(
                                         cc->handle, cc->x_desc, cc->y_desc, cc->conv_desc,
                                         cc->w_desc, (cudnnConvolutionBwdFilterAlgo_t)a, &bytes));
    cc->workspace_bytes = need;
    cc->workspace = need ? gpu_alloc(need, "cuDNN workspace") : NULL;
    if (need) /* zeroed: initcheck flags cuDNN reading workspace it did not write */
        CUDA_CHECK(cudaMemset(cc->workspace, 0, need));
    CUDA_CHECK(cudaMemset(dy, 0, sizeof(float) * (size_t)n * c_out * od * oh * ow));

    cudnnConvolutionFwdAlgoPerf_t pf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    cudnnConvolutionBwdDataAlgoPerf_t pdx[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    cudnnConvolutionBwdFilterAlgoPerf_t pdw[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int found = 0;
    CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
        cc->handle, cc->x_desc, x, cc->w_desc, w, cc->conv_desc, cc->y_desc, y,
        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, pf, cc->workspace, cc->workspace_bytes));
    PICK_FP32(pf, found, cc->fwd_algo, cc->fwd_det, "the conv");
    CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
        cc->handle, cc->w_desc, w, cc->y_desc, dy, cc->conv_desc, cc->x_desc, dx,
        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found, pdx, cc->workspace, cc->workspace_bytes));
    PICK_FP32(pdx, found, cc->dx_algo, cc->dx_det, "the conv's data gradient");
    CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
        cc->handle, cc->x_desc, x, cc->y_desc, dy, cc->conv_desc, cc->w_desc, dw,
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found, pdw, cc->workspace, cc->workspace_bytes));
    PICK_FP32(pdw, found, cc->dw_algo, cc->dw_det, "the conv's weight gradient");
}

void cudnn_conv3d_forward(const cudnn_conv3d *cc, const float *x, const float *w, const float *bias,
                        float *y)
{
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnConvolutionForward(cc->handle, &one, cc->x_desc, x, cc->w_desc, w,
                                        cc->conv_desc, cc->fwd_algo, cc->workspace,
                                        cc->workspace_bytes, &zero, cc->y_desc, y));
    if (bias)
        CUDNN_CHECK(cudnnAddTensor(cc->handle, &one, cc->b_desc, bias, &one, cc->y_desc, y));
}

void cudnn_conv_transpose3d_forward(const cudnn_conv3d *cc, const float *w, const float *in,
                                    const float *bias, float *out)
{
    const float one = 1.0f;
    cudnn_conv3d_backward_data(cc, w, in, out);
    CUDNN_CHECK(cudnnAddTensor(cc->handle, &one, cc->xb_desc, bias, &one, cc->x_desc, out));
}

void cudnn_conv_transpose3d_backward_bias(const cudnn_conv3d *cc, const float *dout, float *dbias)
{
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnConvolutionBackwardBias(cc->handle, &one, cc->x_desc, dout, &zero,
                                             cc->xb_desc, dbias));
}

void cudnn_conv3d_backward_data(const cudnn_conv3d *cc, const float *w, const float *dy, float *dx)
{
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnConvolutionBackwardData(cc->handle, &one, cc->w_desc, w, cc->y_desc, dy,
                                             cc->conv_desc, cc->dx_algo, cc->workspace,
                                             cc->workspace_bytes, &zero, cc->x_desc, dx));
}

void cudnn_conv3d_backward_filter(const cudnn_conv3d *cc, const float *x, const float *dy,
                                  float *dw)
{
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(cc->handle, &one, cc->x_desc, x, cc->y_desc, dy,
                                               cc->conv_desc, cc->dw_algo, cc->workspace,
                                               cc->workspace_bytes, &zero, cc->w_desc, dw));
}

void cudnn_conv3d_destroy(cudnn_conv3d *cc)
{
    if (cc->workspace)
        CUDA_CHECK(cudaFree(cc->workspace));
    cudnnDestroyTensorDescriptor(cc->x_desc);
    cudnnDestroyTensorDescriptor(cc->y_desc);
    cudnnDestroyTensorDescriptor(cc->b_desc);
    cudnnDestroyTensorDescriptor(cc->xb_desc);
    cudnnDestroyFilterDescriptor(cc->w_desc);
    cudnnDestroyConvolutionDescriptor(cc->conv_desc);
    cudnnDestroy(cc->handle);
}
