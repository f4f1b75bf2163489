/*
 * api.h: chapter 4's model as a C library (build/libch04.so, `make lib CH=4`), for callers that
 * own the memory: PyTorch through python/handfused/ch04.py, or any C program.
 *
 *     y = logsumexp_c( c + HardSwish( tanh( GroupNorm_16(c) ) ) ),  c = Conv2d(x)
 *
 * Tensors: float32, contiguous (NCHW), on the current CUDA device, each pointer 16-byte aligned.
 *   x            n x 8 x h x w                 the model's input
 *   weight       64 x 8 x 3 x 3                Conv2d's weight (PyTorch's layout)
 *   bias         64                            its bias
 *   gamma, beta  64                            GroupNorm's affine weight and bias
 *   c            n x 64 x oh x ow              the conv's output, oh = h - 2, ow = w - 2
 *   stats        2 x n x 16                    each (sample, group)'s mean, then its rstd
 *   y, g         n x 1 x oh x ow               the output and its gradient dL/dy
 * The geometry is fixed: 8 channels in, 64 out, kernel 3, stride 1, no padding, 16 groups,
 * eps 1e-5.
 *
 * Every function returns CH04_OK (0) or an error code, and never exits the process for valid
 * inputs; after an error ch04_last_error() says what was wrong (the calling thread's last
 * error). Work is queued on `stream` and not waited for, except where a function says otherwise.
 */
#ifndef CH04_API_H
#define CH04_API_H

#include <stddef.h>

#include <cuda_runtime.h>

#include "capi-codes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* the codes every chapter's library returns (common/capi-codes.h says each) */
enum {
    CH04_OK = CAPI_OK,
    CH04_EINVAL = CAPI_EINVAL,
    CH04_ENOMEM = CAPI_ENOMEM,
    CH04_ECUDA = CAPI_ECUDA,
};

/* The message of the calling thread's last error ("" if none). */
const char *ch04_last_error(void);

/* CH04_OK when an input of n x c_in x h x w is one the kernels take, else CH04_EINVAL and the
 * reason: c_in must be 8; h and w at least 3 (a 3 x 3 conv without padding); n from 1 to 65535
 * (a grid dimension); x and the conv output n x 64 x (h-2) x (w-2) below 2^31 elements (32-bit
 * indexing). */
int ch04_check_shape(long long n, long long c_in, long long h, long long w);

/* The floats of scratch the forwards and the backward need for this shape on the current device
 * (v9's shifted row sums, b3's team partials and barrier counters, b4's dw partials); 0 after an
 * error (a bad shape, or no device). */
size_t ch04_workspace_floats(int n, int h, int w);

/* The whole forward, inference: y from x (v9, the chapter's fastest: our conv with the
 * GroupNorm statistics in its epilogue, c stored once, then v4's apply). c is scratch here. */
int ch04_forward(const float *x, const float *weight, const float *bias, const float *gamma,
                 const float *beta, float *c, float *y, float *workspace, int n, int h, int w,
                 cudaStream_t stream);

/* The training forward (b4's training step): v9 as above, keeping c and the statistics for
 * ch04_backward. */
int ch04_train_forward(const float *x, const float *weight, const float *bias, const float *gamma,
                       const float *beta, float *c, float *stats, float *y, float *workspace,
                       int n, int h, int w, cudaStream_t stream);

/* The backward (b4's): from c, y, stats and g, b3's epilogue backward in teams writes dc
 * (n x 64 x oh x ow, scratch the caller provides), dgamma and dbeta (64 each); b4's kernels
 * write dw (64 x 8 x 3 x 3) and dbias (64); dx (like x) comes from the library conv
 * (common/conv.h: cuDNN, or the direct kernels in a build without it). dx NULL: dx is skipped.
 * Every sum but dx's is added in a fixed order: the same bits every run.
 * The library conv runs on the default stream: the call orders it after `stream`'s work and
 * `stream` after it with events, so the caller sees one stream. The first call with dx for a
 * shape sets the conv up (cuDNN times its engines on dc, dx and dw): it waits for `stream`, takes
 * a while, and wants 2.25 GiB of free device memory, else it returns CH04_ENOMEM (a PyTorch
 * caller may free its cache and call again). Up to 4 shapes stay set up. */
int ch04_backward(const float *x, const float *weight, const float *gamma, const float *beta,
                  const float *c, const float *y, const float *stats, const float *g, float *dc,
                  float *dx, float *dw, float *dbias, float *dgamma, float *dbeta,
                  float *workspace, int n, int h, int w, cudaStream_t stream);

/* Frees the conv setups, each after its device's work. */
void ch04_release(void);

#ifdef __cplusplus
}
#endif
#endif
