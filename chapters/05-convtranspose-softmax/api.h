/*
 * api.h: chapter 5's model as a C library (build/libch05.so, `make lib CH=5`), for callers that
 * own the memory: PyTorch through python/handfused/ch05.py, or any C program.
 *
 *     y = scale_c softmax_row( clamp( ConvTranspose3d( AvgPool3d(x) ), 0, 1 ) )
 *
 * Tensors: float32, contiguous (NCDHW), on the current CUDA device, each pointer 16-byte aligned.
 *   x          n x 32 x d x h x w                the model's input
 *   weight     32 x 64 x 3 x 3 x 3               ConvTranspose3d's weight (PyTorch's layout)
 *   conv_bias  64                                its bias
 *   scale      64                                the learnable scale (KernelBench's
 *                                                1 x 64 x 1 x 1 x 1)
 *   xp         n x 32 x pd x ph x pw             AvgPool3d(2)(x): pd = d / 2 (floor), ph, pw alike
 *   c, y, g    n x 64 x od x oh x ow             the conv's output, the model's output and its
 *                                                gradient dL/dy: od = 2 pd, oh = 2 ph, ow = 2 pw
 *   lse        n x 64                            each softmax row's log sum exp(clamp(c))
 * The geometry is fixed: 32 channels in, 64 out, kernel 3, stride 2, padding 1, output padding
 * 1; the pool's kernel and stride 2; the clamp to [0, 1].
 * Every function is fp32 but ch05_forward_tf32 (TF32 on Hopper's wgmma, sm_90a).
 *
 * Every function returns CAPI_OK (0) or an error code (common/capi-codes.h), and never exits
 * the process; after an error ch05_last_error() says what was wrong (the calling thread's last
 * error). Work is queued on `stream` and not waited for, except where a function says
 * otherwise.
 */
#ifndef CH05_API_H
#define CH05_API_H

#include <stddef.h>

#include <cuda_runtime.h>

#include "capi-codes.h" /* CAPI_OK, CAPI_EINVAL, CAPI_ENOMEM, CAPI_ECUDA, CAPI_ENOTSUP */

#ifdef __cplusplus
extern "C" {
#endif


/* The message of the calling thread's last error ("" if none). */
const char *ch05_last_error(void);

/* CAPI_OK when an input of n x c_in x d x h x w is one the kernels take, else CAPI_EINVAL and
 * the reason: c_in must be 32; n at least 1 and d, h, w at least 2 (the pool's window); x and
 * the conv output (n x 64 x 2 (d/2) x 2 (h/2) x 2 (w/2)) below 2^31 elements (32-bit indexing). */
int ch05_check_shape(long long n, long long c_in, long long d, long long h, long long w);

/* The floats of scratch `workspace` holds for any function below at this shape (the partial sums
 * of v7, v8 and the backward, v7's and v8's reordered weights, v8's pooled input, the pool's
 * gradient). */
size_t ch05_workspace_floats(int n, int d, int h, int w);

/* Whether this GPU and this build run the cluster kernels (Hopper, sm_90): 1 yes, 0 no, or
 * -CAPI_ECUDA on a CUDA error (a build with no code for this GPU). Where they run, the training
 * step is b3's, else b2's. */
int ch05_clusters(void);

/* The whole forward, inference: y from x (v7, the chapter's fastest: its own transposed conv,
 * the pool in its loads, the row sums in its epilogue). c: scratch the caller provides (v7 writes
 * the conv's output once and reads it back); workspace: ch05_workspace_floats floats. */
int ch05_forward(const float *x, const float *weight, const float *conv_bias, const float *scale,
                 float *c, float *y, float *workspace, int n, int d, int h, int w,
                 cudaStream_t stream);

/* The whole forward, inference, in TF32: v8, the pool (writing xp into the workspace), then the
 * transposed conv on Hopper's warpgroup MMA twice (each tile's sums of exp(clamp(c)), then y
 * from each row's total), c never written: no c argument. Each product's operands are rounded to
 * TF32 (a 10-bit mantissa, 2^-11 of themselves), the sums in fp32: an error about that of
 * PyTorch's TF32 ConvTranspose3d (torch.backends.cudnn.allow_tf32), where ch05_forward is fp32.
 * sm_90a code: on a GPU that is not compute capability 9.0 (H100, H200), or a build without
 * sm_90a code (make lib ARCH=sm_90 builds it), it returns CAPI_ENOTSUP ("needs an sm_90a GPU
 * (Hopper's wgmma: H100, H200) and a build for it; ...") and launches nothing. The chapter has no
 * TF32 backward: the training step is ch05_train_forward's and ch05_backward's, in fp32.
 * workspace: ch05_workspace_floats floats. */
int ch05_forward_tf32(const float *x, const float *weight, const float *conv_bias,
                      const float *scale, float *y, float *workspace, int n, int d, int h, int w,
                      cudaStream_t stream);

/* The training forward: xp = AvgPool3d(x) (the conv's input, which the backward's dw reads),
 * then v7 as ch05_forward runs it, which writes c (the conv's output) and lse on its way to y.
 * xp, c and lse are what ch05_backward needs; keep them until then. workspace:
 * ch05_workspace_floats floats. */
int ch05_train_forward(const float *x, const float *weight, const float *conv_bias,
                       const float *scale, float *xp, float *c, float *lse, float *y,
                       float *workspace, int n, int d, int h, int w, cudaStream_t stream);

/* The backward (b3's on Hopper, else b2's): from c, lse and g, dc (like c, scratch the caller
 * provides) and dscale (64); then the conv's gradients dw (32 x 64 x 3 x 3 x 3) and dbias (64)
 * by the library conv, and dx (like x) through the library conv and the pool's backward. dx NULL:
 * dx is skipped. The library conv runs on the default stream, ordered after `stream`'s work and
 * `stream` after it with events, so the caller sees one stream. The first call for a shape sets
 * the conv up (cuDNN times its engines, writing dc, dx's scratch and dw before they are
 * computed): it waits for `stream`, takes a while, and wants 2.25 GiB of free device memory,
 * else it returns CAPI_ENOMEM (a PyTorch caller may free its cache and call again). Up to 4
 * shapes stay set up. workspace: ch05_workspace_floats floats. dscale's sums are in a fixed
 * order: the same bits every run; dx, dw and dbias are the library's (cuDNN's chosen engines may
 * not be deterministic). */
int ch05_backward(const float *weight, const float *scale, const float *xp, const float *c,
                  const float *lse, const float *g, float *dc, float *dx, float *dw,
                  float *dbias, float *dscale, float *workspace, int n, int d, int h, int w,
                  cudaStream_t stream);

/* Frees the library conv's setups, each after its device's work. */
void ch05_release(void);

#ifdef __cplusplus
}
#endif
#endif
