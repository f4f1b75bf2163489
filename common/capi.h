/*
 * capi.h: what a chapter's C library (its api.cu, `make lib CH=N`) needs besides its kernels:
 * an error message per thread instead of an exit, the library conv (conv.h) ordered into the
 * caller's stream, and the library conv set up once per device and shape. Host code, included
 * by one api.cu per library: each library keeps its own messages and setups.
 *
 *   capi_fail(code, fmt, ...)    keep the message, return code
 *   capi_last_error()            the calling thread's last message ("" if none)
 *   capi_launched(code, what)    code if the launches just queued failed (cudaGetLastError),
 *                                else 0
 *   capi_check_pointers          every pointer given, 16-byte aligned (the kernels load float4s)
 *   capi_check_channels          an input's channels (dim 1) are the model's
 *   capi_check_sm90a             the current device and this build run sm_90a code (wgmma)
 *   capi_on_default_stream       run(arg) queued on the default stream (the library conv's
 *                                calls): after the caller's stream's earlier work, and the
 *                                caller's later work after it (CUDA events), so the caller sees
 *                                one stream
 *   capi_conv_cached             the library conv for a shape on the current device, set up on
 *                                the first call by the chapter's function (4 shapes kept,
 *                                round robin), after a free-memory check
 *   capi_conv_get                capi_conv_cached for a Conv3d set up on the caller's buffers
 *   capi_conv_release            frees every setup, each after its device's work
 * The codes a library returns: capi-codes.h (a chapter's api.h names them for its callers).
 */
#ifndef CAPI_H
#define CAPI_H

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "capi-codes.h"
#include "conv.h"

static thread_local char capi_message[512];

static inline const char *capi_last_error(void) { return capi_message; }

static inline int capi_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(capi_message, sizeof capi_message, fmt, ap);
    va_end(ap);
    return code;
}

/* the launches just queued: a configuration error, or a fault of an earlier kernel */
static inline int capi_launched(int code, const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return capi_fail(code, "%s: CUDA error: %s", what, cudaGetErrorString(e));
    return 0;
}

/* 0, or code and the first of ptrs[0 .. count - 1] that is NULL or not 16-byte aligned, named */
static inline int capi_check_pointers(const void *const *ptrs, const char *const *names, int count,
                                      int code)
{
    for (int i = 0; i < count; i++) {
        if (!ptrs[i])
            return capi_fail(code, "%s is NULL", names[i]);
        if ((uintptr_t)ptrs[i] % 16)
            return capi_fail(code, "%s is not 16-byte aligned (the kernels load float4s)",
                             names[i]);
    }
    return 0;
}

/* 0, or code and the message when x's c_in channels are not the model's `want` */
static inline int capi_check_channels(long long c_in, int want, int code)
{
    if (c_in != want)
        return capi_fail(code, "x must have %d channels (dim 1), not %lld", want, c_in);
    return 0;
}

/* 0 where the current device runs this build's sm_90a code (Hopper's wgmma: H100, H200), else
 * CAPI_ENOTSUP and "<what> needs an sm_90a GPU ... and a build for it; this GPU is sm_86" (or
 * "this build has no sm_90a code": gpu_sm90a_problem), or CAPI_ECUDA where the device cannot be
 * queried. A function whose kernels are wgmma's calls it before it launches anything: in a build
 * for another architecture those kernels are empty stubs, which would leave its outputs unwritten
 * without an error. */
static inline int capi_check_sm90a(const char *what)
{
    int device = 0;
    char why[256];
    cudaError_t e = cudaGetDevice(&device);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return capi_fail(CAPI_ECUDA, "%s: no usable CUDA device: %s", what, cudaGetErrorString(e));
    }
    int no = gpu_sm90a_problem(device, why, sizeof why);
    if (no)
        return capi_fail(no < 0 ? CAPI_ECUDA : CAPI_ENOTSUP, "%s %s", what, why);
    return 0;
}

/* run(arg) queues work on the default stream; `stream`'s work before it runs first, and its
 * work after waits for it. 0, or code with what failed. */
static inline int capi_on_default_stream(cudaStream_t stream, void (*run)(const void *),
                                         const void *arg, int code, const char *what)
{
    if (stream == 0 || stream == cudaStreamLegacy) { /* the default stream itself */
        run(arg);
        return capi_launched(code, what);
    }
    cudaEvent_t before = NULL, after = NULL;
    if (cudaEventCreateWithFlags(&before, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&after, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventRecord(before, stream) != cudaSuccess ||
        cudaStreamWaitEvent(cudaStreamLegacy, before, 0) != cudaSuccess) {
        int err = capi_launched(code, "ordering the default stream after the caller's");
        if (before)
            cudaEventDestroy(before);
        if (after)
            cudaEventDestroy(after);
        return err;
    }
    run(arg);
    int err = capi_launched(code, what);
    if (cudaEventRecord(after, cudaStreamLegacy) != cudaSuccess ||
        cudaStreamWaitEvent(stream, after, 0) != cudaSuccess)
        err = err ? err : capi_launched(code, "ordering the caller's stream after the default "
                                        "stream");
    cudaEventDestroy(before); /* released once the work it marks is done */
    cudaEventDestroy(after);
    return err;
}

/* ---- the library conv, set up once per device and shape */

#define CAPI_SETUPS 4
/* what cuDNN's engine search may allocate: a workspace of at most 2 GiB (conv.cu's
 * WORKSPACE_BUDGET), and room for its handle and the bias sums */
#define CAPI_SETUP_BYTES ((size_t)9 << 28) /* 2.25 GiB */

typedef struct {
    int used, device, dims[5];
    lib_conv3d conv;
} capi_setup;

static capi_setup capi_setups[CAPI_SETUPS];
static int capi_next_setup; /* the slot the next new shape takes */
/* held by the caller from capi_conv_cached (or capi_conv_get) until its last use of the conv is
 * queued, so that no other thread (PyTorch runs each device's backward on its own thread)
 * replaces that setup in between: capi_conv_lock / capi_conv_unlock */
static pthread_mutex_t capi_setups_lock = PTHREAD_MUTEX_INITIALIZER;

static inline void capi_conv_lock(void) { pthread_mutex_lock(&capi_setups_lock); }
static inline void capi_conv_unlock(void) { pthread_mutex_unlock(&capi_setups_lock); }

/* frees slot k's setup on its own device, after that device's work */
static inline void capi_drop(int k)
{
    int current = 0;
    cudaGetDevice(&current);
    cudaSetDevice(capi_setups[k].device);
    cudaDeviceSynchronize();
    lib_conv3d_destroy(&capi_setups[k].conv);
    capi_setups[k].used = 0;
    cudaSetDevice(current);
}

/* Sets conv up on the shape the setup is kept under (lib_conv3d_setup, lib_conv2d_setup, on the
 * chapter's geometry and buffers: arg); returns 0, or a code with the message kept (capi_fail,
 * capi_launched). */
typedef int (*capi_conv_setup_fn)(lib_conv3d *conv, void *arg);

/* The library conv kept under key (five ints naming the shape: a library sets up one conv, whose
 * shape is its key) on the current device: the kept setup, or a new one from setup(conv, arg),
 * whose engine search (cuDNN) runs on the default stream after `stream`'s work and writes the
 * buffers setup names. scratch_bytes: device memory setup allocates for itself (0 when it times
 * the engines on the caller's buffers). NULL with *err set (enomem: less free device memory than
 * scratch_bytes plus what the search may want, CAPI_SETUP_BYTES with cuDNN; ecuda: a CUDA error;
 * or setup's code). Call with capi_conv_lock held. */
static inline lib_conv3d *capi_conv_cached(const int key[5], capi_conv_setup_fn setup, void *arg,
                                           size_t scratch_bytes, cudaStream_t stream, int enomem,
                                           int ecuda, int *err)
{
    int device = 0;
    *err = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
        *err = capi_fail(ecuda, "cudaGetDevice failed");
        return NULL;
    }
    for (int i = 0; i < CAPI_SETUPS; i++)
        if (capi_setups[i].used && capi_setups[i].device == device &&
            !memcmp(capi_setups[i].dims, key, sizeof capi_setups[i].dims))
            return &capi_setups[i].conv;
    /* the search writes the caller's buffers: wait for its work on them first, and for any use
     * of the slot's old setup */
    if (cudaStreamSynchronize(stream) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
        *err = capi_launched(ecuda, "before the library conv's setup");
        return NULL;
    }
    size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
        *err = capi_launched(ecuda, "cudaMemGetInfo");
        return NULL;
    }
    size_t want = scratch_bytes + (HAVE_CUDNN ? CAPI_SETUP_BYTES : 0);
    if (free_bytes < want) {
        *err = capi_fail(enomem, "the library conv's one-time setup (cuDNN's engine search) "
                         "needs about %.2f GB of free device memory, %.2f GB are free",
                         want / 1e9, free_bytes / 1e9);
        return NULL;
    }
    int slot = capi_next_setup;
    capi_next_setup = (capi_next_setup + 1) % CAPI_SETUPS;
    if (capi_setups[slot].used)
        capi_drop(slot);
    if ((*err = setup(&capi_setups[slot].conv, arg)))
        return NULL;
    if (cudaDeviceSynchronize() != cudaSuccess) {
        *err = capi_launched(ecuda, "the library conv's setup");
        return NULL;
    }
    capi_setups[slot].used = 1, capi_setups[slot].device = device;
    memcpy(capi_setups[slot].dims, key, sizeof capi_setups[slot].dims);
    return &capi_setups[slot].conv;
}

/* capi_conv_get's setup: x zeroed, then lib_conv3d_setup on the buffers */
typedef struct {
    const int *x_dims;
    int c_out, k, pad, stride, ecuda;
    float *x, *y, *dy, *dx, *dw;
    const float *w;
} capi_conv3d_args;

static inline int capi_conv3d_setup(lib_conv3d *conv, void *arg)
{
    const capi_conv3d_args *a = (const capi_conv3d_args *)arg;
    const int *xd = a->x_dims;
    size_t xn = (size_t)xd[0] * xd[1] * xd[2] * xd[3] * xd[4];
    if (cudaMemset(a->x, 0, sizeof(float) * xn) != cudaSuccess)
        return capi_launched(a->ecuda, "zeroing a buffer for the library conv's setup");
    lib_conv3d_setup(conv, xd, a->c_out, a->k, a->pad, a->stride, a->x, a->w, a->y, a->dy, a->dx,
                     a->dw);
    return 0;
}

/* The Conv3d on x_dims (N, C_in, D, H, W: the transposed conv's output) with c_out channels,
 * kernel k, padding pad, stride, kept under x_dims (capi_conv_cached): a new setup zeroes x and
 * times cuDNN's engines on x, w, y, dy, dx and dw (lib_conv3d_setup). NULL with *err set as
 * capi_conv_cached's. Call with capi_conv_lock held. */
static inline lib_conv3d *capi_conv_get(const int x_dims[5], int c_out, int k, int pad,
                                        int stride, float *x, const float *w, float *y,
                                        float *dy, float *dx, float *dw, cudaStream_t stream,
                                        int enomem, int ecuda, int *err)
{
    capi_conv3d_args a = {x_dims, c_out, k, pad, stride, ecuda, x, y, dy, dx, dw, w};
    return capi_conv_cached(x_dims, capi_conv3d_setup, &a, 0, stream, enomem, ecuda, err);
}

static inline void capi_conv_release(void)
{
    capi_conv_lock();
    for (int i = 0; i < CAPI_SETUPS; i++)
        if (capi_setups[i].used)
            capi_drop(i);
    capi_conv_unlock();
}

#endif
