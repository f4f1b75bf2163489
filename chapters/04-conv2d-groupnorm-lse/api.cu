/*
 * api.cu: the C library of api.h, on the chapter's own launchers (no kernel of its own).
 *
 * Each function fills a run_ctx (model.h) with the caller's buffers and stream, on the stack, and
 * calls the launchers of b4's training step: v9_launch for both forwards, b3_backward, lib_dx
 * and b4_own_dw for the backward. None of them reads a global; the run_ctx fields they read are
 * the ones filled here (workspace carved below). The harness's checks (CUDA_CHECK, die) exit the
 * process, so this file checks every input before it launches anything and reports a failed
 * launch with cudaGetLastError instead. What still exits: a CUDA_CHECK inside a launcher (the
 * occupancy queries, b3's cooperative launch and its counters' memset), which valid inputs on a
 * healthy device do not fail, but an earlier kernel's fault reported there does; CH04_TEAMS set
 * to a bad value (08-v6-persistent.cu); and the library conv's setup and calls on a cuDNN
 * failure (common/conv.cu), or when its allocations fail after the free-memory check below
 * passed (another process took the memory in between).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "conv-tile.cuh"
#include "model.h"

static thread_local char message[512];

const char *ch04_last_error(void) { return message; }

static int error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    return code;
}

/* CH04_OK, or CH04_ECUDA and e's message */
static int cuda_status(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return CH04_OK;
    cudaGetLastError(); /* the error reported here; a sticky one stays */
    return error(CH04_ECUDA, "%s: CUDA error: %s", what, cudaGetErrorString(e));
}

/* CH04_OK, or the CUDA error the launches just queued left (a fault of an earlier kernel too) */
static int queued(const char *what) { return cuda_status(cudaGetLastError(), what); }

int ch04_check_shape(long long n, long long c_in, long long h, long long w)
{
    if (c_in != C_IN)
        return error(CH04_EINVAL, "x must have %d channels (dim 1), not %lld", C_IN, c_in);
    if (n < 1 || h < KS || w < KS)
        return error(CH04_EINVAL, "x of %lld x %lld x %lld x %lld: the batch must be at least 1 "
                     "and H and W at least 3 (a 3x3 convolution without padding)", n, c_in, h, w);
    if (n > 65535)
        return error(CH04_EINVAL, "x's batch (%lld) must be at most 65535: the kernels put it on "
                     "a grid dimension", n);
    double in = (double)n * C_IN * h * w, out = (double)n * C_OUT * (h - 2.0) * (w - 2.0);
    if (in >= 2147483647.0 || out >= 2147483647.0)
        return error(CH04_EINVAL, "x (%lld x %lld x %lld x %lld, %.0f elements) or its conv output "
                     "(%.0f elements) reaches 2^31 elements; the kernels index with 32-bit ints: "
                     "use a smaller batch", n, c_in, h, w, in, out);
    return CH04_OK;
}

/* ---- the run_ctx of a call: shape, device, teams, and the workspace's pieces */

/* floats rounded up to 16 bytes, so that every piece of the workspace stays aligned */
static size_t q4(size_t floats) { return (floats + 3) & ~(size_t)3; }

/* the shape, the SMs and b3's teams of the current device; CH04_OK or an error */
static int plan(run_ctx *r, int n, int h, int w, cudaStream_t stream)
{
    if (ch04_check_shape(n, C_IN, h, w))
        return CH04_EINVAL;
    int device = 0, sms = 0, l2 = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device);
    if (e != cudaSuccess)
        return cuda_status(e, "the device's SM count and L2 size");
    memset(r, 0, sizeof *r);
    r->sh = make_shape(n, h, w);
    r->sm_count = sms;
    r->queue = stream;
    team_plan(r, (size_t)l2);
    return CH04_OK;
}

/* the workspace's pieces, in this order: v9's shifts and row sums, the inference forward's
 * statistics, b3's partial sums and parameter partials and barrier counters, b4's dw partials.
 * workspace NULL: only the size. Returns the floats it takes. */
static size_t carve(run_ctx *r, float *workspace)
{
    const shape *s = &r->sh;
    size_t ns = seg_count(s), at = 0;
    size_t sizes[] = {ns, 2 * ns * s->oh * tile_segs(s), 2 * ns, 2 * ns * r->team_ctas,
                      (size_t)r->team_grid * C_OUT * 2, 2 * (size_t)s->n,
                      (size_t)b4_blocks_per_sm() * r->sm_count * (N_WEIGHT + C_OUT)};
    float *p[7];
    for (int i = 0; i < 7; i++)
        p[i] = workspace ? workspace + at : NULL, at += q4(sizes[i]);
    if (workspace) {
        r->shift = p[0], r->rowpart = (float2 *)p[1], r->mean = p[2], r->rstd = p[2] + ns;
        r->gpart = (float2 *)p[3], r->pparam = p[4], r->arrived = (unsigned *)p[5];
        r->dwpart = p[6];
    }
    return at;
}

size_t ch04_workspace_floats(int n, int h, int w)
{
    run_ctx r;
    return plan(&r, n, h, w, 0) ? 0 : carve(&r, NULL);
}

/* every pointer non-NULL and 16-byte aligned, else CH04_EINVAL naming the first that is not */
static int pointers(const void *const *p, const char *names, int count)
{
    for (int i = 0; i < count; i++, names += strlen(names) + 1) {
        if (!p[i])
            return error(CH04_EINVAL, "%s is NULL", names);
        if ((uintptr_t)p[i] % 16)
            return error(CH04_EINVAL, "%s is not 16-byte aligned", names);
    }
    return CH04_OK;
}

static int forward(const float *x, const float *weight, const float *bias, const float *gamma,
                   const float *beta, float *c, float *stats, float *y, float *workspace, int n,
                   int h, int w, cudaStream_t stream)
{
    const void *p[] = {x, weight, bias, gamma, beta, c, y, workspace};
    run_ctx r;
    int err = pointers(p, "x\0weight\0bias\0gamma\0beta\0c\0y\0workspace", 8);
    if (err || (err = plan(&r, n, h, w, stream)))
        return err;
    carve(&r, workspace);
    if (stats)
        r.mean = stats, r.rstd = stats + seg_count(&r.sh);
    r.x = x, r.weight = weight, r.bias = bias, r.gamma = gamma, r.beta = beta, r.c = c, r.y = y;
    v9_launch(&r, SCOPE_MODEL_FWD);
    return queued("the forward (v9)");
}

int ch04_forward(const float *x, const float *weight, const float *bias, const float *gamma,
                 const float *beta, float *c, float *y, float *workspace, int n, int h, int w,
                 cudaStream_t stream)
{
    return forward(x, weight, bias, gamma, beta, c, NULL, y, workspace, n, h, w, stream);
}

int ch04_train_forward(const float *x, const float *weight, const float *bias, const float *gamma,
                       const float *beta, float *c, float *stats, float *y, float *workspace,
                       int n, int h, int w, cudaStream_t stream)
{
    const void *p[] = {stats};
    int err = pointers(p, "stats", 1);
    return err ? err : forward(x, weight, bias, gamma, beta, c, stats, y, workspace, n, h, w, stream);
}

/* ---- the library conv for dx: set up once per device and shape, kept in a few slots */

#define SLOTS 4
/* what cuDNN's engine search may take: a workspace of at most 2 GiB (common/conv.cu's
 * WORKSPACE_BUDGET), and room for its handle */
#define SETUP_BYTES ((size_t)9 << 28) /* 2.25 GiB */
static struct {
    int in_use, device, n, h, w;
    lib_conv3d conv;
} slots[SLOTS];
static int slot_next; /* round robin */
/* held from a backward's lookup of its slot until its dx is queued: PyTorch runs each device's
 * backward on its own thread, and another shape must not take the slot in between */
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;

static void slot_free(int k)
{
    int current = 0;
    cudaGetDevice(&current);
    cudaSetDevice(slots[k].device);
    cudaDeviceSynchronize(); /* its last dx may still run */
    lib_conv3d_destroy(&slots[k].conv);
    slots[k].in_use = 0;
    cudaSetDevice(current);
}

void ch04_release(void)
{
    pthread_mutex_lock(&slots_lock);
    for (int k = 0; k < SLOTS; k++)
        if (slots[k].in_use)
            slot_free(k);
    pthread_mutex_unlock(&slots_lock);
}

/* the conv set up for r's shape on the current device, in *conv; CH04_OK or an error. The engine
 * search writes dc, dx and dw, which the backward writes again afterwards. */
static int conv_of(const run_ctx *r, const lib_conv3d **conv)
{
    const shape *s = &r->sh;
    int device = 0, err = cuda_status(cudaGetDevice(&device), "cudaGetDevice");
    if (err)
        return err;
    for (int k = 0; k < SLOTS; k++)
        if (slots[k].in_use && slots[k].device == device && slots[k].n == s->n &&
            slots[k].h == s->h && slots[k].w == s->w) {
            *conv = &slots[k].conv;
            return CH04_OK;
        }
    /* the search runs on the default stream: the caller's work on x, dc, dx, dw first */
    size_t free_bytes = 0, total = 0;
    if ((err = cuda_status(cudaStreamSynchronize(r->queue), "before the conv's setup")) ||
        (err = cuda_status(cudaDeviceSynchronize(), "before the conv's setup")) ||
        (err = cuda_status(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo")))
        return err;
    if (HAVE_CUDNN && free_bytes < SETUP_BYTES)
        return error(CH04_ENOMEM, "the conv's one-time setup for dx (cuDNN's engine search) "
                     "wants %.2f GB of free device memory, %.2f GB are free", SETUP_BYTES / 1e9,
                     free_bytes / 1e9);
    int k = slot_next;
    slot_next = (slot_next + 1) % SLOTS;
    if (slots[k].in_use)
        slot_free(k);
    /* as problem.cu's setup: Conv2d(8 -> 64, 3, no padding) on x; y and dy are dc's space */
    int dims[4] = {s->n, C_IN, s->h, s->w};
    lib_conv2d_setup(&slots[k].conv, dims, C_OUT, KS, 0, 1, r->x, r->weight, r->dc, r->dc, r->dx,
                     r->dw);
    if ((err = cuda_status(cudaDeviceSynchronize(), "the conv's setup")))
        return err;
    slots[k].in_use = 1, slots[k].device = device;
    slots[k].n = s->n, slots[k].h = s->h, slots[k].w = s->w;
    *conv = &slots[k].conv;
    return CH04_OK;
}

/* lib_dx on the default stream, between the caller's stream's work before it and after it */
static int dx_between(const run_ctx *r)
{
    cudaStream_t st = r->queue;
    if (st == 0 || st == cudaStreamLegacy) {
        lib_dx(r);
        return queued("dx (the library conv)");
    }
    cudaEvent_t ready = NULL, done = NULL;
    const char *wait = "the default stream waiting for the caller's stream";
    int err;
    if (!(err = cuda_status(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), wait)) &&
        !(err = cuda_status(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), wait)) &&
        !(err = cuda_status(cudaEventRecord(ready, st), wait)) &&
        !(err = cuda_status(cudaStreamWaitEvent(cudaStreamLegacy, ready, 0), wait))) {
        lib_dx(r);
        wait = "the caller's stream waiting for the default stream";
        if (!(err = queued("dx (the library conv)")) &&
            !(err = cuda_status(cudaEventRecord(done, cudaStreamLegacy), wait)))
            err = cuda_status(cudaStreamWaitEvent(st, done, 0), wait);
    }
    if (ready)
        cudaEventDestroy(ready); /* released once the work it marks is done */
    if (done)
        cudaEventDestroy(done);
    return err;
}

int ch04_backward(const float *x, const float *weight, const float *gamma, const float *beta,
                  const float *c, const float *y, const float *stats, const float *g, float *dc,
                  float *dx, float *dw, float *dbias, float *dgamma, float *dbeta,
                  float *workspace, int n, int h, int w, cudaStream_t stream)
{
    const void *p[] = {x, weight, gamma, beta, c, y, stats, g, dc, dw, dbias, dgamma, dbeta,
                       workspace};
    run_ctx r;
    int err = pointers(p, "x\0weight\0gamma\0beta\0c\0y\0stats\0g\0dc\0dw\0dbias\0dgamma\0dbeta\0"
                       "workspace", 14);
    if (!err && (uintptr_t)dx % 16)
        err = error(CH04_EINVAL, "dx is not 16-byte aligned");
    if (err || (err = plan(&r, n, h, w, stream)))
        return err;
    carve(&r, workspace);
    r.x = x, r.weight = weight, r.gamma = gamma, r.beta = beta, r.g = g;
    r.c = (float *)c, r.y = (float *)y; /* the forward's outputs; the backward only reads them */
    r.mean = (float *)stats, r.rstd = (float *)stats + seg_count(&r.sh);
    r.dc = dc, r.dx = dx, r.dw = dw, r.dbias = dbias, r.dgamma = dgamma, r.dbeta = dbeta;
    if (dx) {
        pthread_mutex_lock(&slots_lock);
        if ((err = conv_of(&r, &r.lib))) {
            pthread_mutex_unlock(&slots_lock);
            return err;
        }
    }
    b3_backward(&r); /* dc, dgamma, dbeta */
    b4_own_dw(&r);   /* dw, dbias */
    err = queued("the backward (b3's, b4's dw and dbias)");
    if (dx) {
        if (!err)
            err = dx_between(&r);
        pthread_mutex_unlock(&slots_lock);
    }
    return err;
}
