/*
 * api.h: chapter 2's model as a C library (build/libch02.so, `make lib CH=2`), for callers that
 * own the memory: PyTorch through python/handfused/ch02.py, or any C program.
 *
 *     y = relu( logsumexp_c( MaxPool3d_2( Conv3d(x) ) ) )
 *
 * Tensors: float32, contiguous (NCDHW), on the current CUDA device, each pointer 16-byte aligned.
 *   x          n x 32 x d x h x w                the model's input
 *   weight     64 x 32 x 3 x 3 x 3               Conv3d's weight (PyTorch's layout)
 *   bias       64                                its bias
 *   c          n x 64 x d x h x w                the conv's output
 *   y, g       n x 1 x d/2 x h/2 x w/2 (floor)   the output and its gradient dL/dy
 *   workspace  ch02_workspace_floats(...) floats of scratch
 * The geometry is fixed: 32 channels in, 64 out, kernel 3, stride 1, padding 1; pooling 2.
 * fp32 (ch02_forward, _train_forward, _backward): the conv and its gradients in 3xTF32 (v8, v9,
 * b3), tensor cores at fp32's accuracy. TF32 (the same names with _tf32): TF32 on Hopper's wgmma
 * (v10, b4), an error about PyTorch's TF32 convs'; sm_90a code, CH02_ENOTSUP on other GPUs.
 * Neither depends on the caller's TF32 settings.
 *
 * Every function returns CH02_OK (0) or an error code instead of exiting (the one exit left,
 * on a device an earlier kernel's fault broke, is api.cu's); after an error ch02_last_error()
 * says what was wrong (the calling thread's last error). Work is queued on `stream` and not
 * waited for.
 */
#ifndef CH02_API_H
#define CH02_API_H

#include <stddef.h>

#include <cuda_runtime.h>

#include "capi-codes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* the codes every chapter's library returns (common/capi-codes.h says each) */
enum {
    CH02_OK = CAPI_OK,
    CH02_EINVAL = CAPI_EINVAL,
    CH02_ECUDA = CAPI_ECUDA,
    CH02_ENOTSUP = CAPI_ENOTSUP, /* the TF32 functions on a GPU or build without sm_90a code */
};

/* The message of the calling thread's last error ("" if none). */
const char *ch02_last_error(void);

/* CH02_OK when an input of n x c_in x d x h x w is one the kernels take, else CH02_EINVAL and
 * the reason: c_in must be 32; d, h and w at least 2 (the pooling window); n and d at most
 * 65535 and n (d/2) (h/2) at most 65535 (grid dimensions); the conv output n x 64 x d x h x w
 * below 2^31 elements (32-bit indexing). */
int ch02_check_shape(long long n, long long c_in, long long d, long long h, long long w);

/* The floats of workspace the forwards (backward 0) or the backwards (backward 1) need on the
 * current device, the same for both precisions (the backward's dw is summed in shares sized to
 * its SMs); 0 if the device cannot be queried (ch02_last_error says why). */
size_t ch02_workspace_floats(int backward);

/* The whole forward, inference: y from x (v9, the chapter's fastest fp32-accurate version: the
 * pooling and the logsumexp in the conv's epilogue, c never written). */
int ch02_forward(const float *x, const float *weight, const float *bias, float *y,
                 float *workspace, size_t workspace_floats, int n, int d, int h, int w,
                 cudaStream_t stream);

/* The training forward: c = Conv3d(x) (v8's conv), then y from c (v5's epilogue). c is what
 * ch02_backward needs; keep it until then. */
int ch02_train_forward(const float *x, const float *weight, const float *bias, float *c,
                       float *y, float *workspace, size_t workspace_floats, int n, int d, int h,
                       int w, cudaStream_t stream);

/* The backward (b3's): from c and g, dc (like c, scratch the caller provides: every element
 * written) by b2's kernel, then the conv's gradients: dx (like x) and dw (64 x 32 x 3 x 3 x 3)
 * in 3xTF32, dbias (64). dx NULL: dx is skipped. Every sum is in a fixed order: the same bits
 * every run. */
int ch02_backward(const float *x, const float *weight, const float *c, const float *g,
                  float *dc, float *dx, float *dw, float *dbias, float *workspace,
                  size_t workspace_floats, int n, int d, int h, int w, cudaStream_t stream);

/* ---- TF32 on wgmma (sm_90a: H100, H200). Each takes what its fp32 function takes, writes what
 * it writes, and needs the same workspace; on a GPU that is not compute capability 9.0, or a
 * build without sm_90a code (make lib ARCH=sm_90 builds it), it returns CH02_ENOTSUP ("needs an
 * sm_90a GPU (Hopper's wgmma: H100, H200) and a build for it; ...") and launches nothing. */

/* The whole forward, inference, in TF32: v10, v9's fusion with the conv on wgmma (c never
 * written). */
int ch02_forward_tf32(const float *x, const float *weight, const float *bias, float *y,
                      float *workspace, size_t workspace_floats, int n, int d, int h, int w,
                      cudaStream_t stream);

/* The training forward in TF32: c = Conv3d(x) by v10's conv, then y from c (v5's epilogue), as
 * b4 runs it. c is what ch02_backward_tf32 needs; keep it until then. */
int ch02_train_forward_tf32(const float *x, const float *weight, const float *bias, float *c,
                            float *y, float *workspace, size_t workspace_floats, int n, int d,
                            int h, int w, cudaStream_t stream);

/* The backward in TF32 (b4's): dc from c and g by b2's kernel (fp32, as ch02_backward's), then
 * dx (like x; NULL: skipped) and dw on wgmma in TF32, dbias (fp32 sums of dc). Every sum is in
 * a fixed order: the same bits every run. */
int ch02_backward_tf32(const float *x, const float *weight, const float *c, const float *g,
                       float *dc, float *dx, float *dw, float *dbias, float *workspace,
                       size_t workspace_floats, int n, int d, int h, int w, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
