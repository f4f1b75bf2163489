/*
 * gpu.h: the CUDA half of the tutorial's shared library (host code; nothing chapter-specific).
 *
 *   CUDA_CHECK(call)   every runtime call: file, line and the CUDA error string, then exit 1
 *   LAUNCH_CHECK()     after every kernel launch (launch configuration errors)
 *   CUDNN_CHECK(call)  every cuDNN call (the chapters' baseline convolutions)
 *   gpu_count()        0 when there is no device or no driver, never an exit
 *   device_info_get()  name, SMs, L2, fp32 peak, and the measured device-to-device copy ceiling
 *   gpu_code_arch()    the sm_XY this build's device code is, as loaded (skips Hopper versions)
 *   gpu_alloc()        cudaMalloc that names the bytes and the tensor when memory runs out
 *   gpu_poison()       fill with NaN so an element a kernel forgot to write fails verification
 *   gpu_time()         CUDA events, warm-up, L2 flushed before every repetition, min/median/max
 *   cudnn_conv3d_*()   cuDNN's Conv3d and its gradients, the chapters' library baseline
 */
#ifndef GPU_H
#define GPU_H

#include <cuda_runtime.h>
#include <cudnn.h>

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CUDA_CHECK(call) cuda_check_((call), #call, __FILE__, __LINE__)
#define LAUNCH_CHECK() cuda_check_(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
void cuda_check_(cudaError_t e, const char *what, const char *file, int line);
#define CUDNN_CHECK(call) cudnn_check_((call), #call, __FILE__, __LINE__)
void cudnn_check_(cudnnStatus_t s, const char *what, const char *file, int line);

/* Number of usable CUDA devices: 0 when cudaGetDeviceCount fails (no driver, no device). */
int gpu_count(void);

/* Exits EXIT_USAGE with "error: no CUDA device ..." when gpu_count() is 0 (a timed run needs one;
 * `--test` runs the CPU checks without). */
void gpu_require_or_exit(void);

typedef struct {
    char name[256];      /* "NVIDIA H100 80GB HBM3" */
    char tag[32];        /* "h100": the name's model token, lower case, for data/<tag>/ */
    int sm_count;        /* multiprocessors */
    int cc_major, cc_minor;
    size_t l2_bytes;     /* L2 cache size */
    size_t global_bytes; /* device memory */
    double copy_gbps;    /* measured cudaMemcpy device-to-device, (read + written bytes) / s / 1e9 */
    double fp32_tflops;  /* fp32 FMA peak: SMs x fp32 lanes an SM x 2 x boost clock */
} device_info;

/*
 * Fills d for device 0 and measures copy_gbps: the median of 7 copies of a 1 GiB buffer (halved
 * until it fits) after 2 warm-ups, counting the bytes read plus the bytes written. This is the
 * "100%" of every table: what the memory system actually moves, not the datasheet's figure.
 */
void device_info_get(device_info *d);

/* The compute capability this program's device code was compiled for, as loaded on device 0
 * (cudaFuncAttributes.ptxVersion: 80 for an sm_80 build, even when its PTX runs on an H100).
 * Hopper-only kernels are compiled as empty stubs below 90, so their versions must not run. */
int gpu_code_arch(void);

/* Blocks for a grid-stride loop over n elements: enough to cover n, at most 32 a multiprocessor
 * (more only adds scheduling), at least 1. */
int grid_for(long long n, int block, int sm_count);

/* cudaMalloc, or exit 1 with "out of device memory: <what> needs <bytes> bytes (<free> free)". */
void *gpu_alloc(size_t bytes, const char *what);

/* Writes 0xFF bytes over n floats: every element becomes NaN (all exponent bits set, mantissa
 * non-zero), so verify_f32 fails on any element the kernel did not write. Synchronous. */
void gpu_poison(float *p, size_t n);

/* Writes a buffer of 2 x the L2 size (allocated once, freed by gpu_release), evicting whatever a
 * previous repetition left in L2, so a timed run reads its inputs from DRAM as in a real model. */
void gpu_flush_l2(void);

/* Frees the L2 flush buffer. */
void gpu_release(void);

/* One launch of a version: queue its kernels on the default stream. */
typedef void (*launch_fn)(const void *ctx);

/*
 * Times fn: 3 warm-up calls, then reps x (flush L2; event; fn; event), each repetition's
 * cudaEventElapsedTime (resolution about 0.5 us per the CUDA runtime documentation) collected
 * and summarised by stats_from_samples. Checks launch errors after every call.
 */
timing gpu_time(launch_fn fn, const void *ctx, int reps);

/* ------------------------------------------------------------ cuDNN convolution */
/*
 * The library baseline every chapter with a Conv3d measures against: PyTorch's Conv3d (cross-
 * correlation, stride `stride`, dilation 1, zero padding `pad` on every side), float32 NCDHW tensors,
 * weights C_out x C_in x k x k x k, through cuDNN's legacy API. CUDNN_FMA_MATH keeps it off
 * TF32 (strict fp32, as PyTorch with allow_tf32 = False). Each direction uses the fastest
 * fp32 algorithm cudnnFind...Ex measures on the given buffers (what torch.backends.cudnn.
 * benchmark = True does), with a zeroed workspace large enough for every algorithm (at most
 * 2 GiB) and a zeroed dy (FindEx reads it). *_det: whether that algorithm is deterministic.
 * cuDNN documentation: "cudnnFindConvolutionForwardAlgorithmEx" and the backward ones.
 */
typedef struct {
    cudnnHandle_t handle;
    cudnnTensorDescriptor_t x_desc, y_desc, b_desc; /* input, output, bias 1 x C_out x 1 x 1 x 1 */
    cudnnTensorDescriptor_t xb_desc;                /* 1 x C_in x 1 x 1 x 1: a transposed conv's bias */
    cudnnFilterDescriptor_t w_desc;
    cudnnConvolutionDescriptor_t conv_desc;
    cudnnConvolutionFwdAlgo_t fwd_algo;
    cudnnConvolutionBwdDataAlgo_t dx_algo;
    cudnnConvolutionBwdFilterAlgo_t dw_algo;
    int fwd_det, dx_det, dw_det;
    void *workspace;
    size_t workspace_bytes;
} cudnn_conv3d;

/* x_dims: N, C_in, D, H, W; y, dy: N x c_out x ((D + 2 pad - k) / stride + 1) x ...; dx like x;
 * dw like the weights. The buffers are only used to time the algorithms (dy is zeroed, y, dx and
 * dw are overwritten; x and w must hold finite values); exits 1 with a message when cuDNN has no
 * fp32 algorithm for a direction. */
void cudnn_conv3d_setup(cudnn_conv3d *cc, const int x_dims[5], int c_out, int k, int pad,
                        int stride, const float *x, const float *w, float *y, float *dy, float *dx,
                        float *dw);
/* y = conv(x, w) + bias (bias: c_out floats, or NULL for none), on the default stream */
void cudnn_conv3d_forward(const cudnn_conv3d *cc, const float *x, const float *w, const float *bias,
                        float *y);
/* dx = the gradient of the conv with respect to x, given dy (backward data) */
void cudnn_conv3d_backward_data(const cudnn_conv3d *cc, const float *w, const float *dy, float *dx);
/* dw = the gradient with respect to the weights, given x and dy (backward filter) */
void cudnn_conv3d_backward_filter(const cudnn_conv3d *cc, const float *x, const float *dy,
                                  float *dw);
/*
 * The same conv read the other way round. PyTorch's ConvTranspose3d(in_channels = c_out,
 * out_channels = C_in, k, stride, padding = pad) is this conv's gradient with respect to its
 * input, and its weight (in x out x k^3) is this conv's filter. So, with the conv set up on the
 * transposed conv's output shape as x_dims:
 *   out = convT(in, w) + bias      cudnn_conv_transpose3d_forward (in: y-shaped, out: x-shaped,
 *                                  bias: C_in floats)
 *   d in                           cudnn_conv3d_forward(cc, d out, w, NULL, d in)
 *   d w                            cudnn_conv3d_backward_filter(cc, d out, in, d w)
 *   d bias                         cudnn_conv_transpose3d_backward_bias(cc, d out, d bias)
 */
void cudnn_conv_transpose3d_forward(const cudnn_conv3d *cc, const float *w, const float *in,
                                    const float *bias, float *out);
void cudnn_conv_transpose3d_backward_bias(const cudnn_conv3d *cc, const float *dout, float *dbias);
void cudnn_conv3d_destroy(cudnn_conv3d *cc);

#ifdef __cplusplus
}
#endif
#endif
