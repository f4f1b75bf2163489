/*
 * api.h: chapter 1's model as a C library (build/libch01.so, `make lib CH=1`), for callers that
 * own the memory: PyTorch through python/handfused/ch01.py, or any C program.
 *
 *     y = clamp( z sigmoid(z + 3) / 6 - b, -1, 1 ),  z = logsumexp_c( ConvTranspose3d(x) )
 *
 * Tensors: float32, contiguous (NCDHW), on the current CUDA device, each pointer 16-byte aligned.
 *   x          n x 3 x d x h x w                 the model's input
 *   weight     3 x 16 x 3 x 3 x 3                ConvTranspose3d's weight (PyTorch's layout)
 *   conv_bias  16                                its bias
 *   b          1                                 the subtracted scalar (KernelBench's `bias`)
 *   c          n x 16 x od x oh x ow             the conv's output, od = 2d - 1 (oh, ow alike)
 *   y, g       n x 1 x od x oh x ow              the output and its gradient dL/dy
 * The geometry is fixed: 3 channels in, 16 out, kernel 3, stride 2, padding 1.
 *
 * Every function returns CH01_OK (0) or an error code, and never exits the process; after an
 * error ch01_last_error() says what was wrong (the calling thread's last error). Work is queued
 * on `stream` and not waited for, except where a function says otherwise.
 */
#ifndef CH01_API_H
#define CH01_API_H

#include <stddef.h>

#include <cuda_runtime.h>

#include "capi-codes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* the codes every chapter's library returns (common/capi-codes.h says each) */
enum {
    CH01_OK = CAPI_OK,
    CH01_EINVAL = CAPI_EINVAL,
    CH01_ENOMEM = CAPI_ENOMEM,
    CH01_ECUDA = CAPI_ECUDA,
};

/* The message of the calling thread's last error ("" if none). */
const char *ch01_last_error(void);

/* CH01_OK when an input of n x c_in x d x h x w is one the kernels take, else CH01_EINVAL and
 * the reason: c_in must be 3; n and d at most 65535 (grid dimensions); the conv output
 * n x 16 x od x oh x ow below 2^31 elements (32-bit indexing); every extent at least 1. */
int ch01_check_shape(long long n, long long c_in, long long d, long long h, long long w);

/* The floats of scratch ch01_backward needs for this shape (partial sums of db, dw, dbias). */
size_t ch01_workspace_floats(int n, int d, int h, int w);

/* The whole forward, inference: y from x (v8, the chapter's fastest: the transposed conv
 * computed inside the kernel, c never written). */
int ch01_forward(const float *x, const float *weight, const float *conv_bias, const float *b,
                 float *y, int n, int d, int h, int w, cudaStream_t stream);

/* The training forward (b4's training step): c = ConvTranspose3d(x) by parity (b3's kernel),
 * then y from c (v7's epilogue). c is what ch01_backward needs; keep it until then. */
int ch01_train_forward(const float *x, const float *weight, const float *conv_bias,
                       const float *b, float *c, float *y, int n, int d, int h, int w,
                       cudaStream_t stream);

/* The backward (b4's): from c and g, dc (n x 16 x od x oh x ow, scratch the caller provides),
 * db (1 float), then the conv's gradients: dw (3 x 16 x 3 x 3 x 3) and dbias (16), the chapter's
 * deterministic kernels, and dx (like x) through the library conv (common/conv.h: cuDNN, or the
 * direct kernels in a build without it). dx NULL: dx is skipped. workspace:
 * ch01_workspace_floats(n, d, h, w) floats. Every sum is in a fixed order: the same bits every
 * run, except dx where the engine cuDNN's search chose is not deterministic.
 * The library conv runs on the default stream: the call orders it after `stream`'s work and
 * `stream` after it with events, so the caller sees one stream. The first call with dx for a
 * shape sets the conv up (cuDNN times its engines on dc, dx and dw): it waits for `stream`, takes
 * a while, and wants 2.25 GiB of free device memory, else it returns CH01_ENOMEM
 * (a PyTorch caller may free its cache and call again). Up to 4 shapes stay set up. */
int ch01_backward(const float *x, const float *weight, const float *b, const float *c,
                  const float *g, float *dc, float *dx, float *dw, float *dbias, float *db,
                  float *workspace, int n, int d, int h, int w, cudaStream_t stream);

/* Frees the conv setups, each after its device's work. */
void ch01_release(void);

#ifdef __cplusplus
}
#endif
#endif
