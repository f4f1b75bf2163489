/*
 * api.h: chapter 3's model as a C library (build/libch03.so, `make lib CH=3`), for callers that
 * own the memory: PyTorch through python/handfused/ch03.py, or any C program.
 *
 *     y = max_c( m * clamp( InstanceNorm3d( m * Conv3d(x) ), -1, 1 ) )
 *
 * Tensors: float32 (win: bytes), contiguous (NCDHW), on one CUDA device, each pointer 16-byte
 * aligned. S = (d-2)(h-2)(w-2), the positions of a sample's conv output.
 *   x           n x 3 x d x h x w              the model's input
 *   weight      16 x 3 x 3 x 3 x 3             Conv3d's weight (PyTorch's layout)
 *   bias        16                             its bias
 *   m           16 (16 x 1 x 1 x 1)            the per-channel factor, used twice
 *   c           n x 16 x S                     the conv's output
 *   y, g        n x S                          the output and its gradient dL/dy
 *   mean, rstd  n x 16                         the instance norm's statistics of each (n, c)
 *   win         n x S bytes                    each position's winning channel (bits 0..3) and
 *                                              whether its xh is inside the clamp (bit 7)
 *   workspace   ch03_workspace_bytes(n, d, h, w) bytes of scratch
 * The geometry is fixed: 3 channels in, 16 out, kernel 3, stride 1, no padding.
 *
 * Every function returns CAPI_OK (0) or an error code (common/capi-codes.h), never exiting for
 * inputs it accepts (api.cu: what still exits); then ch03_last_error() says what was wrong. Work
 * is queued on `stream`, not waited for unless a function says so. One device a process: the
 * first one used (launch settings are kept once); another one gets CAPI_EINVAL.
 */
#ifndef CH03_API_H
#define CH03_API_H

#include <stddef.h>

#include <cuda_runtime.h>

#include "capi-codes.h" /* CAPI_OK, CAPI_EINVAL, CAPI_ENOMEM, CAPI_ECUDA */

#ifdef __cplusplus
extern "C" {
#endif

/* CAPI_OK when an input of n x c_in x d x h x w is one the kernels take, else CAPI_EINVAL and
 * the reason: c_in must be 3; n at least 1; d, h, w at least 3 (a kernel of 3, no padding) and
 * S at least 2 (instance norm over one value is undefined; PyTorch refuses it in training); n at
 * most 65535 (a grid dimension); the input and the conv output n x 16 x S below 2^31 elements
 * (32-bit indexing). */
int ch03_check_shape(long long n, long long c_in, long long d, long long h, long long w);

/* The bytes of scratch the forwards and the backward need for this shape. */
size_t ch03_workspace_bytes(int n, int d, int h, int w);

/* The whole forward, inference: y from x, the chapter's fastest on this device and build: v18
 * (Hopper, sm_90a code), else v15 (clusters without wgmma), else v12. mean and rstd are written
 * to the workspace. v17 and v18 are cooperative launches that share one set of exchange words:
 * their launches are ordered one after another across streams (events). */
int ch03_forward(const float *x, const float *weight, const float *bias, const float *m,
                 float *y, void *workspace, int n, int d, int h, int w, cudaStream_t stream);

/* The training forward (b5's training step on Hopper, else b2's): c = Conv3d(x) by the library
 * conv (cuDNN, or common/conv.cu's direct kernels in a build without it), then y, mean, rstd
 * and win (b5: v10 saving the winner bytes; b2: v9, win untouched) from c. c, y, mean, rstd
 * and win are what ch03_backward needs: keep them until then. The first call for a shape sets
 * the conv up (ch03_backward says how). CAPI_EINVAL where b5 runs and V10SPAN (v10's start
 * span in ns, as the chapter's program reads it) is set to anything but an integer 0 to 1e8. */
int ch03_train_forward(const float *x, const float *weight, const float *bias, const float *m,
                       float *c, float *y, float *mean, float *rstd, unsigned char *win,
                       void *workspace, int n, int d, int h, int w, cudaStream_t stream);

/* The backward (b5's, or b2's where the training forward ran b2): from the saved tensors and g,
 * dc (n x 16 x S, scratch the caller provides) and dm (16), then the conv's gradients: dw
 * (16 x 3 x 3 x 3 x 3) and dbias (16), the chapter's deterministic kernels, and dx (like x)
 * through the library conv. dx NULL: dx is skipped. Every sum is in a fixed order, the same bits
 * every run, except dx where cuDNN's chosen engine may not be deterministic.
 * The library conv runs on the default stream: the call orders it after `stream`'s work and
 * `stream` after it with events. Its first use for a shape (here or in ch03_train_forward) sets
 * it up: it waits for `stream`, takes a while (cuDNN times its engines on x and weight, on c in
 * the training forward or dc here as the conv's output, which each function writes after, and
 * on scratch of its own for dx and dw), and wants 2.25 GiB of free device memory besides that
 * scratch, else it returns CAPI_ENOMEM (a PyTorch caller may free its cache and call again). Up
 * to 4 shapes stay set up. */
int ch03_backward(const float *x, const float *weight, const float *m, const float *c,
                  const float *y, const float *mean, const float *rstd, const unsigned char *win,
                  const float *g, float *dc, float *dx, float *dw, float *dbias, float *dm,
                  void *workspace, int n, int d, int h, int w, cudaStream_t stream);

/* Frees the conv setups and the exchange words, each after the device's work. */
void ch03_release(void);

/* The versions this device runs (the versions' names in the chapter's table), e.g.
 * "forward v18, training step b5"; on a sample too large for a cluster the forward falls back
 * inside the launcher (v18, v15: v14; v14: v12) and the training step runs b2. NULL after an
 * error (no device). */
const char *ch03_versions(void);

/* The message of the calling thread's last error ("" if none). */
const char *ch03_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
