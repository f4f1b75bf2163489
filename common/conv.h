/*
 * conv.h: the library convolution every chapter's epilogue versions read and its training steps
 * differentiate through (host code; the kernels are in conv.cu).
 *
 * PyTorch's Conv3d: cross-correlation, dilation 1, zero padding `pad` and stride `stride` on
 * every side, float32 NCDHW tensors, weights C_out x C_in x k x k x k (torch.nn.functional.conv3d):
 *
 *   y[n][co][o] = bias[co] + sum over ci and the k^3 taps t of w[co][ci][t] x[n][ci][o stride + t - pad]
 *
 * Two backends, chosen when the program is built (the Makefile's CUDNN, HAVE_CUDNN here):
 *   cuDNN   (HAVE_CUDNN 1) the library baseline, set up as PyTorch sets it up (fp32 with
 *           allow_tf32 = False, cudnn.benchmark = True): each direction is a one-operation graph
 *           of cuDNN's graph (backend) API, the API PyTorch uses, on 5-D tensors (4-D for
 *           Conv2d); its engines come from the heuristics (mode A) and the fallback list, those
 *           with tensor cores or down-converted inputs are left out, and the fastest of the rest on
 *           the given buffers, within a 2 GiB workspace, is kept. Engines are labelled by cuDNN's
 *           engine number and whether they are deterministic. The bias gradients are CUB's
 *           segmented sums, as PyTorch sums them with its own reduction. cuDNN documentation:
 *           "Graph API", "Backend Descriptor Types"; CUB: "cub::DeviceSegmentedReduce".
 *           CONV_FIND_LOG=1 in the environment prints every engine each search considered (why
 *           it was left out, or its workspace and time), to stderr.
 *   direct  (HAVE_CUDNN 0) conv.cu's own kernels, so a machine with only the CUDA toolkit runs
 *           every chapter: one thread per output (forward) or per input (backward data) looping
 *           over the taps, the weight gradient as per-block partial sums added in a fixed order.
 *           Correct and deterministic, untuned: a stand-in, not a baseline.
 *           lib_conv3d_direct_calls() counts their launches, so the harness can mark every
 *           timed row that ran them.
 *
 * The transposed view: PyTorch's ConvTranspose3d(in_channels = c_out, out_channels = C_in, k,
 * stride, padding = pad) is this conv's gradient with respect to its input, and its weight
 * (in x out x k^3) is this conv's filter. With the conv set up on the transposed conv's output
 * shape as x_dims:
 *   out = convT(in, w) + bias      lib_conv_transpose3d_forward (in: y-shaped, out: x-shaped,
 *                                  bias: C_in floats)
 *   d in                           lib_conv3d_forward(cc, d out, w, NULL, d in)
 *   d w                            lib_conv3d_backward_filter(cc, d out, in, d w)
 *   d bias                         lib_conv_transpose3d_backward_bias(cc, d out, d bias)
 *
 * Channels last (NHWC, PyTorch's torch.channels_last): lib_conv2d_setup_nhwc sets up the same
 * Conv2d on tensors stored N x H x W x C (a position's channels contiguous), as cuDNN runs it when
 * PyTorch hands it channels-last tensors. cuDNN then wants the filter channels last too,
 * C_out x k x k x C_in ("KRSC", cuDNN's name for it), so PyTorch's C_out x C_in x k x k
 * weights must be permuted first (lib_conv_channels_last). Forward only: the backward functions
 * exit on such a setup.
 */
#ifndef CONV_H
#define CONV_H

#include "gpu.h"

#ifndef HAVE_CUDNN
#error "HAVE_CUDNN must be 0 or 1: the Makefile sets it (make CUDNN=0 builds without cuDNN)"
#endif
/* why a baseline that needs cuDNN is skipped in a build without it */
#define NO_CUDNN "built without cuDNN"

#if HAVE_CUDNN
#include <cudnn.h>
#define CUDNN_CHECK(call) cudnn_check_((call), #call, __FILE__, __LINE__)
#endif

#ifdef __cplusplus
extern "C" {
#endif

#if HAVE_CUDNN
void cudnn_check_(cudnnStatus_t s, const char *what, const char *file, int line);
#endif

typedef struct {
    int x_dims[5], y_dims[5]; /* N, C, D, H, W of the input and of the output */
    int k[3], pad[3], stride; /* kernel and zero padding per spatial dim (D, H, W) */
    const char *backend;      /* "cuDNN" or "direct" */
    int fwd_algo, dx_algo, dw_algo; /* cuDNN's engine numbers; -1 for the direct kernels */
    int fwd_det, dx_det, dw_det;    /* whether that engine is deterministic */
    float *partials;          /* per-block (direct) or per-row (cuDNN) sums for dw and dbias */
    int dw_split;             /* blocks a (co, ci) pair's weight gradient is split over */
    int sm_count;             /* the direct kernels' grids */
    int nhwc;                 /* 1: lib_conv2d_setup_nhwc's (channels last, forward only) */
    int tf32;                 /* 1: lib_conv3d_setup_tf32's (TF32 allowed, forward only) */
#if HAVE_CUDNN
    cudnnHandle_t handle;
    /* the bias adds' (cudnnAddTensor) descriptors: input, output, bias 1 x C_out x 1 x 1 x 1 */
    cudnnTensorDescriptor_t x_desc, y_desc, b_desc;
    cudnnTensorDescriptor_t xb_desc;                /* 1 x C_in x 1 x 1 x 1: a transposed conv's bias */
    cudnnTensorDescriptor_t yflat_desc;             /* NHWC: y as (N OH OW) x C_out x 1 x 1 */
    cudnnBackendDescriptor_t plan[3]; /* the chosen engines: forward, backward data, filter */
    void *workspace;
    size_t workspace_bytes;
    void *sum_temp;                 /* CUB's temporary storage for the bias gradients */
    size_t sum_bytes;
#endif
} lib_conv3d;

/* x_dims: N, C_in, D, H, W; y, dy: N x c_out x ((D + 2 pad - k) / stride + 1) x ...; dx like x;
 * dw like the weights. The buffers are only used to time cuDNN's engines (dy is zeroed, y, dx
 * and dw are overwritten; x and w must hold finite values). Exits 1 with a message when cuDNN has
 * no fp32 engine for a direction, or (direct) when k is above 3. */
void lib_conv3d_setup(lib_conv3d *cc, const int x_dims[5], int c_out, int k, int pad, int stride,
                      const float *x, const float *w, float *y, float *dy, float *dx, float *dw);
/* Conv2d(k, padding pad, stride) on N x C_in x H x W (x_dims[4]) as the depth-1 Conv3d with a
 * 1 x k x k kernel: the same functions below then serve it (weights C_out x C_in x k x k). */
void lib_conv2d_setup(lib_conv3d *cc, const int x_dims[4], int c_out, int k, int pad, int stride,
                      const float *x, const float *w, float *y, float *dy, float *dx, float *dw);
#if HAVE_CUDNN
/* The same Conv3d forward on cuDNN's TF32 tensor-core engines, as PyTorch's default precision
 * (cudnn.allow_tf32 = True) runs it where it picks one: only engines with tensor cores, less
 * those with reduced-precision reductions; the fastest on x, w and y (overwritten) is kept. The
 * accuracy peer of TF32 kernels. Returns 0 when cuDNN has no such engine for the shape (then
 * only lib_conv3d_destroy may be called), else 1: lib_conv3d_forward runs it; the backward
 * functions exit on it. cuDNN builds only. */
int lib_conv3d_setup_tf32(lib_conv3d *cc, const int x_dims[5], int c_out, int k, int pad,
                          int stride, const float *x, const float *w, float *y);
#endif
/* The same Conv2d, channels last and forward only (see the top): x_dims is N, C_in, H, W as
 * above (PyTorch's shape), but x is stored N x H x W x C_in, y N x OH x OW x c_out, and the
 * weights w C_out x k x k x C_in. x and w must hold finite values; y is overwritten while cuDNN's
 * engines are timed (4-D tensors with channels-last strides). Exits 1 with a message when cuDNN
 * has no fp32 engine for it, or (direct) when k is above 3. lib_conv3d_forward then runs it;
 * lib_conv3d_destroy frees it. */
void lib_conv2d_setup_nhwc(lib_conv3d *cc, const int x_dims[4], int c_out, int k, int pad,
                           int stride, const float *x, const float *w, float *y);
/* out[i][j][c] = in[i][c][j] for i < n, c < channels, j < s (host memory, floats): an N x C x S
 * tensor made channels last (NCHW -> NHWC, S = H W), or PyTorch's C_out x C_in x k x k weights
 * made C_out x k x k x C_in (n = C_out, channels = C_in, s = k k) for lib_conv2d_setup_nhwc.
 * in and out must not overlap. Called with (n, s, channels) it undoes itself. */
void lib_conv_channels_last(const float *in, float *out, int n, int channels, size_t s);
/* y = conv(x, w) + bias (bias: c_out floats, or NULL for none), on the default stream; in the
 * layout the conv was set up for */
void lib_conv3d_forward(const lib_conv3d *cc, const float *x, const float *w, const float *bias,
                        float *y);
/* dx = the gradient of the conv with respect to x, given dy (backward data) */
void lib_conv3d_backward_data(const lib_conv3d *cc, const float *w, const float *dy, float *dx);
/* dw = the gradient with respect to the weights, given x and dy (backward filter) */
void lib_conv3d_backward_filter(const lib_conv3d *cc, const float *x, const float *dy, float *dw);
/* dbias[co] = the sum of dy over n and every output position (backward bias) */
void lib_conv3d_backward_bias(const lib_conv3d *cc, const float *dy, float *dbias);
/* the transposed view (above) */
void lib_conv_transpose3d_forward(const lib_conv3d *cc, const float *w, const float *in,
                                  const float *bias, float *out);
void lib_conv_transpose3d_backward_bias(const lib_conv3d *cc, const float *dout, float *dbias);
void lib_conv3d_destroy(lib_conv3d *cc);

/* Launches of the direct kernels since the program started (0 in a cuDNN build). */
long lib_conv3d_direct_calls(void);

#ifdef __cplusplus
}
#endif
#endif
