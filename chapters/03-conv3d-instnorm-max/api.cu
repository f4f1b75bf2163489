/*
 * api.cu: the C library of api.h, on the chapter's own launchers (no model kernel of its own).
 *
 * Each function fills a run_ctx (model.h) on the stack with the caller's buffers, its stream and
 * the workspace carved into the launchers' scratch, and calls the launchers the chapter's
 * versions use: v18_launch (or v15_launch, v12_launch) for the inference forward; for the
 * training step b5's pieces, conv_forward then v10_saving, b5_epilogue_backward, own_dw,
 * own_dbias and lib_dx (b2's, v9_epilogue and b2_backward, where b5 cannot run). The harness's
 * checks (CUDA_CHECK, die) exit the process, so this file checks every input before it launches
 * anything and reports a failed launch with cudaGetLastError instead: the shape (common/conv.cu
 * exits on an extent below the kernel's), every pointer it hands to the launchers or to the
 * library conv, its setup's scratch included (conv.cu exits on one not 16-byte aligned), an
 * error left by earlier work, V10SPAN (v10's launcher exits on a value it cannot read), and the
 * free device memory before the library conv's setup. What still exits: that setup
 * (common/conv.cu) on a cuDNN failure, or when its allocations fail after the free-memory check
 * (common/capi.h's) passed (another process took the memory in between); the library conv's
 * later calls on a failed cuDNN call, which valid buffers do not cause; a launch the launchers
 * CUDA_CHECK (cudaLaunchKernelEx, their one-time attribute and occupancy queries) on a CUDA
 * error, which an input this file accepts does not cause, but a kernel's fault reported in
 * between does. The messages, the library conv's setups and its ordering on the default stream:
 * common/capi.h.
 *
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "capi.h"
#include "cluster.cuh" /* cluster_fits, span_parse */
#include "model.h"
#include "welford.cuh"

void b5_epilogue_backward(const run_ctx *r); /* 15-b4-b6-saved-argmax.cu: b5's backward alone */

const char *ch03_last_error(void) { return capi_last_error(); }

/* what the launches so far left: a configuration error, or a fault of an earlier kernel */
static int cuda_status(const char *what) { return capi_launched(CAPI_ECUDA, what); }

int ch03_check_shape(long long n, long long c_in, long long d, long long h, long long w)
{
    const char *what = "x (%lld x %lld x %lld x %lld x %lld): %s";
    if (capi_check_channels(c_in, C_IN, CAPI_EINVAL))
        return CAPI_EINVAL;
    if (n < 1 || d < KS || h < KS || w < KS)
        return capi_fail(CAPI_EINVAL, what, n, c_in, d, h, w, "a batch of at least 1 and D, H, "
                        "W of at least 3 are needed: a 3x3x3 convolution without padding");
    double s = (double)(d - 2) * (h - 2) * (w - 2);
    if (s < 2)
        return capi_fail(CAPI_EINVAL, what, n, c_in, d, h, w, "the conv output has one position "
                        "a channel; instance norm needs more than one");
    if (n > 65535)
        return capi_fail(CAPI_EINVAL, "x's batch (%lld) must be at most 65535: the kernels put "
                        "it on a grid dimension", n);
    double in = (double)n * C_IN * d * h * w, out = (double)n * C_OUT * s;
    if (in >= 2147483647.0 || out >= 2147483647.0)
        return capi_fail(CAPI_EINVAL, "x (%lld x %lld x %lld x %lld x %lld: %.0f elements, its "
                        "conv output %.0f) is too large: the kernels index with 32-bit ints "
                        "(below 2^31); use a smaller batch", n, c_in, d, h, w, in, out);
    return CAPI_OK;
}

/* ---- the workspace: the launchers' scratch, each piece 256-byte aligned */

typedef struct {
    size_t mean, rstd, wpart, bpart, means, dm_part1, dm_part2, db_part, dw_part, total;
} ws_layout;

static size_t take(size_t *at, size_t bytes)
{
    size_t here = *at;
    *at += (bytes + 255) & ~(size_t)255;
    return here;
}

/* the sizes problem.cu gives the same buffers */
static ws_layout layout_of(const shape *s)
{
    ws_layout L;
    size_t ns = seg_count(s), at = 0;
    int tiles_b2 = ceil_div(s->s, B2_BLOCK);
    size_t bp = 8 * ns * tiles_b2, bp5 = 16 * ns * ceil_div(s->s, WIN_SUMS_POS);
    size_t dmp = (size_t)C_OUT * (s->n * (tiles_b2 > CL ? tiles_b2 : CL));
    if (dmp < (size_t)C_OUT * DOT_BLOCKS)
        dmp = (size_t)C_OUT * DOT_BLOCKS;
    L.mean = take(&at, 4 * ns);
    L.rstd = take(&at, 4 * ns);
    L.wpart = take(&at, sizeof(welford) * ns * ceil_div(s->s, CONV_TILE));
    L.bpart = take(&at, bp > bp5 ? bp : bp5);
    L.means = take(&at, 8 * ns);
    L.dm_part1 = take(&at, 4 * dmp);
    L.dm_part2 = take(&at, 4 * dmp);
    L.db_part = take(&at, 4 * C_OUT * DOT_BLOCKS);
    L.dw_part = take(&at, 4 * (size_t)N_WEIGHT * s->n * ceil_div(s->s, DW_CHUNK));
    L.total = at;
    return L;
}

size_t ch03_workspace_bytes(int n, int d, int h, int w)
{
    shape s = make_shape(n, d, h, w);
    return layout_of(&s).total;
}

/* ---- the device: bound at the first call */

/* Every function holds this lock from its checks to its last launch: the launchers keep host
 * state between launches (shared-memory opt-ins, v15..v18's per-shape cache, v17's and v18's tag
 * counter), written by one thread at a time. One that uses the library conv takes capi.h's lock
 * inside it, always in that order. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int bound, device, sm_count, major, minor, code_arch;
    size_t smem_optin;
    unsigned long long *xch; /* v17's and v18's exchange words, zeroed once */
    cudaEvent_t xch_last;    /* the last launch that may use them */
    int xch_recorded;
} dev;

static __global__ void k_probe(void) {}

/* with the lock held: the device bound (the first call's), its properties; EINVAL on another */
static int bind_device(void)
{
    int current = 0;
    if (cudaGetDevice(&current) != cudaSuccess)
        return cuda_status("cudaGetDevice (no CUDA device?)");
    if (dev.bound)
        return current == dev.device
                   ? CAPI_OK
                   : capi_fail(CAPI_EINVAL, "this library runs on one device a process: device %d "
                              "first, now device %d", dev.device, current);
    int optin = 0;
    if (cudaDeviceGetAttribute(&dev.sm_count, cudaDevAttrMultiProcessorCount, current) ||
        cudaDeviceGetAttribute(&dev.major, cudaDevAttrComputeCapabilityMajor, current) ||
        cudaDeviceGetAttribute(&dev.minor, cudaDevAttrComputeCapabilityMinor, current) ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, current))
        return cuda_status("the device's attributes");
    cudaFuncAttributes fa;
    if (cudaFuncGetAttributes(&fa, k_probe) != cudaSuccess) {
        cudaGetLastError();
        return capi_fail(CAPI_ECUDA, "this library has no code for this GPU (compute capability "
                        "%d.%d): rebuild it on this machine (make lib CH=3)", dev.major, dev.minor);
    }
    dev.code_arch = fa.ptxVersion;
    dev.smem_optin = (size_t)optin - SMEM_STATIC_MAX;
    dev.device = current, dev.bound = 1;
    return CAPI_OK;
}

/* what the versions need (common/harness.cu's rules): clusters and TMA: a Hopper GPU and sm_90
 * code; wgmma (v16..v18): also compute capability 9.0 exactly and sm_90a code */
static int clusters_run(void) { return dev.major >= 9 && dev.code_arch >= 90; }
static int wgmma_runs(void)
{
    return clusters_run() && dev.major == 9 && dev.minor == 0 && HAVE_SM90A;
}

const char *ch03_versions(void)
{
    pthread_mutex_lock(&lock);
    int err = bind_device();
    pthread_mutex_unlock(&lock);
    if (err)
        return NULL;
    return wgmma_runs()      ? "forward v18, training step b5"
           : clusters_run() ? "forward v15, training step b5"
                            : "forward v12, training step b2";
}

/* b5 where clusters run and a sample fits v10's cluster; else b2 (saved_argmax_launch's rule) */
static int b5_runs(const run_ctx *r) { return clusters_run() && cluster_fits(r, 0); }

/* with the lock held: the shape, the pointers (ptrs, then the workspace; before the device is
 * touched), the device and the errors earlier work left checked; *r filled with the shape, the
 * stream, the device's figures and the workspace's pieces */
static int begin(run_ctx *r, int n, int d, int h, int w, void *workspace, cudaStream_t stream,
                 const void *const *ptrs, const char *const *names, int count)
{
    const void *ws_ptr[] = {workspace};
    const char *ws_name[] = {"workspace"};
    int err = ch03_check_shape(n, C_IN, d, h, w);
    if (err || (err = capi_check_pointers(ptrs, names, count, CAPI_EINVAL)) ||
        (err = capi_check_pointers(ws_ptr, ws_name, 1, CAPI_EINVAL)) || (err = bind_device()))
        return err;
    /* an error already there (a fault of earlier work) is named as such, not as ours; the
     * launchers' own checks would exit on it */
    if ((err = cuda_status("before this function's work (an earlier kernel's fault, or a "
                           "failed launch left unchecked)")))
        return err;
    memset(r, 0, sizeof *r);
    r->sh = make_shape(n, d, h, w);
    r->stream = stream;
    r->sm_count = dev.sm_count;
    r->smem_optin = dev.smem_optin;
    ws_layout L = layout_of(&r->sh);
    char *ws = (char *)workspace;
    r->mean = (float *)(ws + L.mean), r->rstd = (float *)(ws + L.rstd);
    r->wpart = (welford *)(ws + L.wpart);
    r->bpart = (float *)(ws + L.bpart);
    r->means = (float2 *)(ws + L.means);
    r->dm_part1 = (float *)(ws + L.dm_part1), r->dm_part2 = (float *)(ws + L.dm_part2);
    r->db_part = (float *)(ws + L.db_part), r->dw_part = (float *)(ws + L.dw_part);
    return CAPI_OK;
}

/* ---- the inference forward */

/* v17 and v18: the exchange words, zeroed on the caller's stream at the first use; every launch
 * waits for the previous one, whatever its stream: two at once would share the words */
static int xch_before(run_ctx *r)
{
    size_t bytes = 8 * (size_t)dev.sm_count * 2 * CL * C_OUT * 3;
    if (!dev.xch) {
        if (cudaMalloc((void **)&dev.xch, bytes) != cudaSuccess) {
            cudaGetLastError();
            dev.xch = NULL;
            return capi_fail(CAPI_ENOMEM, "v18's exchange words (%zu bytes): cudaMalloc failed",
                            bytes);
        }
        if (cudaEventCreateWithFlags(&dev.xch_last, cudaEventDisableTiming) != cudaSuccess ||
            cudaMemsetAsync(dev.xch, 0, bytes, r->stream) != cudaSuccess) /* tag 0: no launch's */
            return cuda_status("v18's exchange words");
    } else if (dev.xch_recorded && cudaStreamWaitEvent(r->stream, dev.xch_last, 0) != cudaSuccess) {
        return cuda_status("ordering v18 after its previous launch");
    }
    r->xch = dev.xch;
    return CAPI_OK;
}

int ch03_forward(const float *x, const float *weight, const float *bias, const float *m,
                 float *y, void *workspace, int n, int d, int h, int w, cudaStream_t stream)
{
    run_ctx r;
    const void *p[] = {x, weight, bias, m, y};
    const char *names[] = {"x", "weight", "bias", "m", "y"};
    pthread_mutex_lock(&lock);
    int err = begin(&r, n, d, h, w, workspace, stream, p, names, 5);
    if (!err) {
        r.x = x, r.weight = weight, r.bias = bias, r.m = m, r.y = y;
        if (wgmma_runs()) {
            err = xch_before(&r);
            if (!err) {
                v18_launch(&r, SCOPE_MODEL_FWD);
                dev.xch_recorded = cudaEventRecord(dev.xch_last, stream) == cudaSuccess;
            }
        } else if (clusters_run()) {
            v15_launch(&r, SCOPE_MODEL_FWD);
        } else {
            v12_launch(&r, SCOPE_MODEL_FWD);
        }
        if (!err)
            err = cuda_status("the forward");
    }
    pthread_mutex_unlock(&lock);
    return err;
}

/* ---- the library conv (c, dx): common/capi.h keeps its setups, per device and shape */

/* floats rounded up to 64 (256 bytes), so that a piece carved after them stays aligned */
static size_t round64(size_t floats) { return (floats + 63) & ~(size_t)63; }

/* the setup's scratch: dx (x's size), then dw at a 256-byte offset. x's size is often not a
 * multiple of 4 floats (1 x 3 x 5 x 7 x 11: 1155), and dw right after it would not be 16-byte
 * aligned, which common/conv.cu's engine search exits on. */
static size_t setup_scratch_bytes(const shape *s) { return 4 * (round64(x_elems(s)) + N_WEIGHT); }

typedef struct {
    const run_ctx *r;
    float *y; /* the conv's output during the search: c (the training forward) or dc */
} setup_args;

/* as problem.cu's setup: Conv3d(3 -> 16, 3, no padding) on x; y and dy are the caller's c or dc,
 * which the call writes afterwards; dx and dw scratch of this function's own. Every pointer the
 * search gets is checked first. */
static int setup_conv(lib_conv3d *conv, void *arg)
{
    const setup_args *a = (const setup_args *)arg;
    const shape *s = &a->r->sh;
    size_t bytes = setup_scratch_bytes(s);
    float *buf = NULL;
    if (cudaMalloc((void **)&buf, bytes) != cudaSuccess) {
        cudaGetLastError();
        return capi_fail(CAPI_ENOMEM, "the library conv's setup scratch (%zu bytes): cudaMalloc "
                         "failed", bytes);
    }
    float *dx = buf, *dw = buf + round64(x_elems(s));
    const void *p[] = {a->r->x, a->r->weight, a->y, dx, dw};
    const char *names[] = {"x", "weight", "the conv's output", "the setup's dx scratch",
                           "the setup's dw scratch"};
    int err = capi_check_pointers(p, names, 5, CAPI_EINVAL);
    if (!err) {
        int xd[5] = {s->n, C_IN, s->d, s->h, s->w};
        lib_conv3d_setup(conv, xd, C_OUT, KS, 0, 1, a->r->x, a->r->weight, a->y, a->y, dx, dw);
        if (cudaDeviceSynchronize() != cudaSuccess) /* the search's work on buf, before it goes */
            err = cuda_status("the library conv's setup");
    }
    cudaFree(buf);
    return err;
}

/* with capi_conv_lock held: r->lib, the setup of r's shape (made if new: its search writes y) */
static int conv_for(run_ctx *r, float *y)
{
    int err, key[5] = {r->sh.n, C_IN, r->sh.d, r->sh.h, r->sh.w};
    setup_args a = {r, y};
    r->lib = capi_conv_cached(key, setup_conv, &a, setup_scratch_bytes(&r->sh), r->stream,
                              CAPI_ENOMEM, CAPI_ECUDA, &err);
    return err;
}

/* the library conv's calls, as capi_on_default_stream runs them; their pointers are begin's,
 * checked there */
static void run_conv_forward(const void *r) { conv_forward((const run_ctx *)r); }
static void run_lib_dx(const void *r) { lib_dx((const run_ctx *)r); }

/* ---- the training step */

int ch03_train_forward(const float *x, const float *weight, const float *bias, const float *m,
                       float *c, float *y, float *mean, float *rstd, unsigned char *win,
                       void *workspace, int n, int d, int h, int w, cudaStream_t stream)
{
    run_ctx r;
    const void *p[] = {x, weight, bias, m, c, y, mean, rstd, win};
    const char *names[] = {"x", "weight", "bias", "m", "c", "y", "mean", "rstd", "win"};
    pthread_mutex_lock(&lock);
    int err = begin(&r, n, d, h, w, workspace, stream, p, names, 9);
    if (!err && b5_runs(&r) && span_parse("V10SPAN", 0) < 0)
        err = capi_fail(CAPI_EINVAL, "V10SPAN=%s: v10's start span must be an integer number of "
                        "ns, 0 to 1e8 (unset it for the default)", getenv("V10SPAN"));
    if (!err) {
        r.x = x, r.weight = weight, r.bias = bias, r.m = m, r.c = c, r.y = y;
        r.mean = mean, r.rstd = rstd, r.win = win;
        capi_conv_lock();
        if (!(err = conv_for(&r, c)))
            err = capi_on_default_stream(stream, run_conv_forward, &r, CAPI_ECUDA,
                                         "the conv (the library conv)");
        capi_conv_unlock();
    }
    if (!err) {
        if (b5_runs(&r)) {
            static int wave_s = -1, wave; /* v10's first wave depends on S alone */
            if (wave_s != r.sh.s)
                wave = v10_resident_clusters(&r), wave_s = r.sh.s;
            r.v10_wave = wave;
            v10_saving(&r, 1);
        } else {
            v9_epilogue(&r);
        }
        err = cuda_status("the training forward's epilogue (v10 saving the winners, or v9)");
    }
    pthread_mutex_unlock(&lock);
    return err;
}

/* b5's backward, not b6's: b6 starts its sums by a programmatic dependent launch on the kernel
 * queued just before them, its own forward in the chapter's step; here the caller queues the
 * kernels that compute g in between, which the sums read without waiting for. The two tie on the
 * H100's training step: b5 2.547 ms [b5 train_step], b6 2.544 ms [b6 train_step]. */
int ch03_backward(const float *x, const float *weight, const float *m, const float *c,
                  const float *y, const float *mean, const float *rstd, const unsigned char *win,
                  const float *g, float *dc, float *dx, float *dw, float *dbias, float *dm,
                  void *workspace, int n, int d, int h, int w, cudaStream_t stream)
{
    run_ctx r;
    const void *p[] = {x, weight, m, c, y, mean, rstd, win, g, dc, dw, dbias, dm};
    const char *names[] = {"x", "weight", "m", "c", "y", "mean", "rstd", "win", "g", "dc", "dw",
                           "dbias", "dm"};
    int locked = 0;
    pthread_mutex_lock(&lock);
    int err = begin(&r, n, d, h, w, workspace, stream, p, names, 13);
    if (!err && (uintptr_t)dx % 16) /* NULL is fine: dx is skipped */
        err = capi_fail(CAPI_EINVAL, "dx is not 16-byte aligned");
    if (!err) {
        /* run_ctx's c, y, win are the forward's outputs; the backward only reads them */
        r.x = x, r.weight = weight, r.m = m, r.c = (float *)c, r.y = (float *)y;
        r.mean = (float *)mean, r.rstd = (float *)rstd, r.win = (unsigned char *)win, r.g = g;
        r.dc = dc, r.dx = dx, r.dw = dw, r.dbias = dbias, r.dm = dm;
        if (dx) {
            capi_conv_lock(); /* held until dx is queued: no other thread replaces the setup */
            locked = 1;
            err = conv_for(&r, dc);
        }
    }
    if (!err) {
        if (b5_runs(&r))
            b5_epilogue_backward(&r); /* dc, dm */
        else
            b2_backward(&r);
        own_dw(&r);
        own_dbias(&r);
        err = cuda_status("the backward (b5's or b2's, our dw and dbias)");
        if (!err && dx)
            err = capi_on_default_stream(stream, run_lib_dx, &r, CAPI_ECUDA,
                                         "dx (the library conv)");
    }
    if (locked)
        capi_conv_unlock();
    pthread_mutex_unlock(&lock);
    return err;
}

void ch03_release(void)
{
    pthread_mutex_lock(&lock);
    capi_conv_release();
    if (dev.bound && dev.xch) {
        int current = 0;
        cudaGetDevice(&current);
        cudaSetDevice(dev.device);
        cudaDeviceSynchronize();
        cudaFree(dev.xch);
        cudaEventDestroy(dev.xch_last);
        dev.xch = NULL, dev.xch_recorded = 0;
        cudaSetDevice(current);
    }
    pthread_mutex_unlock(&lock);
}
