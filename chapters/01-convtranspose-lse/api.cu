/*
 * api.cu: the C library of api.h, on the chapter's own launchers (no kernel of its own).
 *
 * Each function fills a run_ctx (model.h) with the caller's buffers and stream, on the stack, and
 * calls the launchers the chapter's versions use: v8_launch for the inference forward,
 * b3_conv_forward and v7_epilogue for the training forward, b4_backward, own_dw, own_dbias and
 * lib_dx for the backward, b4's training step piece by piece. None of them reads a global; the
 * run_ctx fields they read are the ones filled here. The harness's checks (CUDA_CHECK, die) exit
 * the process, so this file checks every input before it launches anything and reports a failed
 * launch with cudaGetLastError instead. What still exits: the library conv's one-time setup
 * (common/conv.cu) on a cuDNN failure, or when its allocations fail after the free-memory check
 * below passed (another process took the memory in between); and its later calls on a failed
 * cuDNN call, which valid buffers do not cause.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "api-error.h"
#include "api.h"
#include "model.h"

const char *ch01_last_error(void) { return api_last_error(); }

/* the launches just queued: a configuration error, or a fault of an earlier kernel */
static int launched(const char *what) { return api_cuda(CH01_ECUDA, what); }

int ch01_check_shape(long long n, long long c_in, long long d, long long h, long long w)
{
    if (c_in != C_IN)
        return api_fail(CH01_EINVAL, "x must have %d channels (dim 1), not %lld", C_IN, c_in);
    if (n < 1 || d < 1 || h < 1 || w < 1)
        return api_fail(CH01_EINVAL, "x's extents must be at least 1, not %lld x %lld x %lld x "
                        "%lld x %lld", n, c_in, d, h, w);
    if (n > 65535 || d > 65535)
        return api_fail(CH01_EINVAL, "x's batch (%lld) and depth (%lld) must be at most 65535: "
                        "the kernels put them on grid dimensions", n, d);
    double elems = (double)n * C_OUT * (2.0 * d - 1) * (2.0 * h - 1) * (2.0 * w - 1);
    if (elems >= 2147483647.0)
        return api_fail(CH01_EINVAL, "the conv output of x (%lld x %lld x %lld x %lld x %lld) "
                        "would have %.0f elements; the kernels index with 32-bit ints (below "
                        "2^31): use a smaller batch", n, c_in, d, h, w, elems);
    return CH01_OK;
}

/* the partial sums b4's db, b3's dw and dbias write (problem.cu sizes them alike) */
static size_t partials_floats(const shape *s)
{
    dim3 g = b4_grid(s);
    size_t b4 = (size_t)g.x * g.y, dw = (size_t)DW_BLOCKS * C_OUT * DW_TAPS;
    return b4 > dw ? b4 : dw;
}

size_t ch01_workspace_floats(int n, int d, int h, int w)
{
    shape s = make_shape(n, d, h, w);
    return partials_floats(&s) + (size_t)DBIAS_BLOCKS * C_OUT + N_WEIGHT;
}

/* the shape and the pointers, checked; *r filled with the shape, the stream and the SMs */
static int begin(run_ctx *r, int n, int d, int h, int w, cudaStream_t stream,
                 const void *const *ptrs, const char *const *names, int count)
{
    if (ch01_check_shape(n, C_IN, d, h, w))
        return CH01_EINVAL;
    for (int i = 0; i < count; i++) {
        if (!ptrs[i])
            return api_fail(CH01_EINVAL, "%s is NULL", names[i]);
        if ((uintptr_t)ptrs[i] % 16)
            return api_fail(CH01_EINVAL, "%s is not 16-byte aligned (the kernels load float4s)",
                            names[i]);
    }
    memset(r, 0, sizeof *r);
    r->sh = make_shape(n, d, h, w);
    r->stream = stream;
    return CH01_OK;
}

int ch01_forward(const float *x, const float *weight, const float *conv_bias, const float *b,
                 float *y, int n, int d, int h, int w, cudaStream_t stream)
{
    run_ctx r;
    const void *p[] = {x, weight, conv_bias, b, y};
    const char *names[] = {"x", "weight", "conv_bias", "b", "y"};
    if (begin(&r, n, d, h, w, stream, p, names, 5))
        return CH01_EINVAL;
    r.x = x, r.weight = weight, r.conv_bias = conv_bias, r.b = b, r.y = y;
    v8_launch(&r, SCOPE_MODEL_FWD);
    return launched("the forward (v8)");
}

int ch01_train_forward(const float *x, const float *weight, const float *conv_bias,
                       const float *b, float *c, float *y, int n, int d, int h, int w,
                       cudaStream_t stream)
{
    run_ctx r;
    const void *p[] = {x, weight, conv_bias, b, c, y};
    const char *names[] = {"x", "weight", "conv_bias", "b", "c", "y"};
    if (begin(&r, n, d, h, w, stream, p, names, 6))
        return CH01_EINVAL;
    r.x = x, r.weight = weight, r.conv_bias = conv_bias, r.b = b, r.c = c, r.y = y;
    b3_conv_forward(&r);
    v7_epilogue(&r);
    return launched("the training forward (b3's conv, v7's epilogue)");
}

/* ---- the library conv for dx, set up once per device and shape */

#define N_SETUPS 4
/* what cuDNN's engine search may allocate: a workspace of at most 2 GiB (common/conv.cu's
 * WORKSPACE_BUDGET), and room for its handle and the bias sums */
#define SETUP_BYTES ((size_t)9 << 28) /* 2.25 GiB */
static struct {
    int used, device, n, d, h, w;
    lib_ctx lib;
} setups[N_SETUPS];
static int next_setup; /* the slot the next new shape takes, round robin */
/* held from a backward's lookup of its setup to the launch of its dx, so that no other thread
 * (PyTorch runs each device's backward on its own thread) replaces that setup in between */
static pthread_mutex_t setups_lock = PTHREAD_MUTEX_INITIALIZER;

/* frees slot k's setup on its own device, after that device's work */
static void drop(int k)
{
    int current = 0;
    cudaGetDevice(&current);
    cudaSetDevice(setups[k].device);
    cudaDeviceSynchronize();
    lib_conv3d_destroy(&setups[k].lib.conv);
    setups[k].used = 0;
    cudaSetDevice(current);
}

static lib_ctx *conv_for(int n, int d, int h, int w, const float *weight, float *dc, float *dx,
                         float *dw, cudaStream_t stream, int *err)
{
    int device = 0;
    *err = CH01_OK;
    if (cudaGetDevice(&device) != cudaSuccess) {
        *err = api_fail(CH01_ECUDA, "cudaGetDevice failed");
        return NULL;
    }
    for (int i = 0; i < N_SETUPS; i++)
        if (setups[i].used && setups[i].device == device && setups[i].n == n &&
            setups[i].d == d && setups[i].h == h && setups[i].w == w)
            return &setups[i].lib;
    /* the engine search runs on the default stream and writes dc, dx and dw: wait for the
     * caller's work on them first, and for any use of the slot's old setup */
    if (cudaStreamSynchronize(stream) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
        *err = launched("before the conv's setup");
        return NULL;
    }
    size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
        *err = launched("cudaMemGetInfo");
        return NULL;
    }
    if (HAVE_CUDNN && free_bytes < SETUP_BYTES) {
        *err = api_fail(CH01_ENOMEM, "the conv's one-time setup for dx (cuDNN's engine search) "
                        "needs about %.2f GB of free device memory, %.2f GB are free",
                        SETUP_BYTES / 1e9, free_bytes / 1e9);
        return NULL;
    }
    int k = next_setup;
    next_setup = (next_setup + 1) % N_SETUPS;
    if (setups[k].used)
        drop(k);
    /* as problem.cu's lib_setup: the Conv3d whose input gradient the transposed conv is, on
     * c's shape; its input and input gradient are dc (zeroed), its output and output gradient
     * dx. Every buffer it writes is written again by the backward. */
    shape s = make_shape(n, d, h, w);
    int cdims[5] = {n, C_OUT, s.od, s.oh, s.ow};
    if (cudaMemset(dc, 0, sizeof(float) * conv_elems(&s)) != cudaSuccess) {
        *err = launched("zeroing dc for the conv's setup");
        return NULL;
    }
    lib_conv3d_setup(&setups[k].lib.conv, cdims, C_IN, KS, 1, 2, dc, weight, dx, dx, dc, dw);
    if (cudaDeviceSynchronize() != cudaSuccess) {
        *err = launched("the conv's setup");
        return NULL;
    }
    setups[k].used = 1, setups[k].device = device;
    setups[k].n = n, setups[k].d = d, setups[k].h = h, setups[k].w = w;
    return &setups[k].lib;
}

void ch01_release(void)
{
    pthread_mutex_lock(&setups_lock);
    for (int i = 0; i < N_SETUPS; i++)
        if (setups[i].used)
            drop(i);
    pthread_mutex_unlock(&setups_lock);
}

/* lib_dx on the default stream, ordered between the caller's stream's work before and after */
static int dx_on_default_stream(const run_ctx *r)
{
    cudaStream_t st = r->stream;
    int other = st != 0 && st != cudaStreamLegacy;
    cudaEvent_t before = NULL, after = NULL;
    if (other) {
        if (cudaEventCreateWithFlags(&before, cudaEventDisableTiming) != cudaSuccess ||
            cudaEventCreateWithFlags(&after, cudaEventDisableTiming) != cudaSuccess ||
            cudaEventRecord(before, st) != cudaSuccess ||
            cudaStreamWaitEvent(cudaStreamLegacy, before, 0) != cudaSuccess)
            return launched("ordering the default stream after the caller's");
    }
    lib_dx(r);
    int err = launched("dx (the library conv)");
    if (other) {
        if (cudaEventRecord(after, cudaStreamLegacy) != cudaSuccess ||
            cudaStreamWaitEvent(st, after, 0) != cudaSuccess)
            err = launched("ordering the caller's stream after the default stream");
        cudaEventDestroy(before); /* released once the work it marks is done */
        cudaEventDestroy(after);
    }
    return err;
}

int ch01_backward(const float *x, const float *weight, const float *b, const float *c,
                  const float *g, float *dc, float *dx, float *dw, float *dbias, float *db,
                  float *workspace, int n, int d, int h, int w, cudaStream_t stream)
{
    run_ctx r;
    const void *p[] = {x, weight, b, c, g, dc, dw, dbias, db, workspace};
    const char *names[] = {"x", "weight", "b", "c", "g", "dc", "dw", "dbias", "db", "workspace"};
    if (begin(&r, n, d, h, w, stream, p, names, 10))
        return CH01_EINVAL;
    if ((uintptr_t)dx % 16)
        return api_fail(CH01_EINVAL, "dx is not 16-byte aligned (cuDNN's plans are built for 16)");
    lib_ctx *lib = NULL;
    if (dx) {
        int err;
        pthread_mutex_lock(&setups_lock);
        lib = conv_for(n, d, h, w, weight, dc, dx, dw, stream, &err);
        if (!lib) {
            pthread_mutex_unlock(&setups_lock);
            return err;
        }
    }
    r.x = x, r.weight = weight, r.b = b, r.g = g;
    r.c = (float *)c; /* run_ctx's c is the forward's output; the backward only reads it */
    r.dc = dc, r.dx = dx, r.dw = dw, r.dbias = dbias, r.db = db, r.lib = lib;
    r.partials = workspace;
    r.partials2 = workspace + partials_floats(&r.sh);
    r.dw_by_co = r.partials2 + DBIAS_BLOCKS * C_OUT;
    b4_backward(&r); /* dc, db */
    own_dw(&r);
    own_dbias(&r);
    int err = launched("the backward (b4's, b3's dw and dbias)");
    if (dx) {
        if (err == CH01_OK)
            err = dx_on_default_stream(&r);
        pthread_mutex_unlock(&setups_lock);
    }
    return err;
}
