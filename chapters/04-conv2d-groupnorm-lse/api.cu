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
 * failure (common/conv.cu), or when its allocations fail after the free-memory check
 * (common/capi.h's) passed (another process took the memory in between). The messages, the
 * library conv's setups and its ordering on the default stream: common/capi.h.
 */
#include <stdint.h>
#include <string.h>

#include "api.h"
#include "capi.h"
#include "conv-tile.cuh"
#include "model.h"

const char *ch04_last_error(void) { return capi_last_error(); }

int ch04_check_shape(long long n, long long c_in, long long h, long long w)
{
    if (capi_check_channels(c_in, C_IN, CH04_EINVAL))
        return CH04_EINVAL;
    if (n < 1 || h < KS || w < KS)
        return capi_fail(CH04_EINVAL, "x of %lld x %lld x %lld x %lld: the batch must be at "
                         "least 1 and H and W at least 3 (a 3x3 convolution without padding)",
                         n, c_in, h, w);
    if (n > 65535)
        return capi_fail(CH04_EINVAL, "x's batch (%lld) must be at most 65535: the kernels put "
                         "it on a grid dimension", n);
    double in = (double)n * C_IN * h * w, out = (double)n * C_OUT * (h - 2.0) * (w - 2.0);
    if (in >= 2147483647.0 || out >= 2147483647.0)
        return capi_fail(CH04_EINVAL, "x (%lld x %lld x %lld x %lld, %.0f elements) or its conv "
                         "output (%.0f elements) reaches 2^31 elements; the kernels index with "
                         "32-bit ints: use a smaller batch", n, c_in, h, w, in, out);
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
        return capi_launched(CH04_ECUDA, "the device's SM count and L2 size");
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

static int forward(const float *x, const float *weight, const float *bias, const float *gamma,
                   const float *beta, float *c, float *stats, float *y, float *workspace, int n,
                   int h, int w, cudaStream_t stream)
{
    const void *p[] = {x, weight, bias, gamma, beta, c, y, workspace};
    const char *names[] = {"x", "weight", "bias", "gamma", "beta", "c", "y", "workspace"};
    run_ctx r;
    int err = capi_check_pointers(p, names, 8, CH04_EINVAL);
    if (err || (err = plan(&r, n, h, w, stream)))
        return err;
    carve(&r, workspace);
    if (stats)
        r.mean = stats, r.rstd = stats + seg_count(&r.sh);
    r.x = x, r.weight = weight, r.bias = bias, r.gamma = gamma, r.beta = beta, r.c = c, r.y = y;
    v9_launch(&r, SCOPE_MODEL_FWD);
    return capi_launched(CH04_ECUDA, "the forward (v9)");
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
    const char *names[] = {"stats"};
    int err = capi_check_pointers(p, names, 1, CH04_EINVAL);
    return err ? err : forward(x, weight, bias, gamma, beta, c, stats, y, workspace, n, h, w, stream);
}

/* ---- the library conv for dx: common/capi.h keeps its setups, per device and shape */

void ch04_release(void) { capi_conv_release(); }

/* as problem.cu's setup: Conv2d(8 -> 64, 3, no padding) on x; y and dy are dc's space. The
 * engine search writes dc, dx and dw, which the backward writes again afterwards. */
static int setup_conv(lib_conv3d *conv, void *arg)
{
    const run_ctx *r = (const run_ctx *)arg;
    int dims[4] = {r->sh.n, C_IN, r->sh.h, r->sh.w};
    lib_conv2d_setup(conv, dims, C_OUT, KS, 0, 1, r->x, r->weight, r->dc, r->dc, r->dx, r->dw);
    return CH04_OK;
}

static void run_lib_dx(const void *r) { lib_dx((const run_ctx *)r); }

int ch04_backward(const float *x, const float *weight, const float *gamma, const float *beta,
                  const float *c, const float *y, const float *stats, const float *g, float *dc,
                  float *dx, float *dw, float *dbias, float *dgamma, float *dbeta,
                  float *workspace, int n, int h, int w, cudaStream_t stream)
{
    const void *p[] = {x, weight, gamma, beta, c, y, stats, g, dc, dw, dbias, dgamma, dbeta,
                       workspace};
    const char *names[] = {"x", "weight", "gamma", "beta", "c", "y", "stats", "g", "dc", "dw",
                           "dbias", "dgamma", "dbeta", "workspace"};
    run_ctx r;
    int err = capi_check_pointers(p, names, 14, CH04_EINVAL);
    if (!err && (uintptr_t)dx % 16)
        err = capi_fail(CH04_EINVAL, "dx is not 16-byte aligned");
    if (err || (err = plan(&r, n, h, w, stream)))
        return err;
    carve(&r, workspace);
    r.x = x, r.weight = weight, r.gamma = gamma, r.beta = beta, r.g = g;
    r.c = (float *)c, r.y = (float *)y; /* the forward's outputs; the backward only reads them */
    r.mean = (float *)stats, r.rstd = (float *)stats + seg_count(&r.sh);
    r.dc = dc, r.dx = dx, r.dw = dw, r.dbias = dbias, r.dgamma = dgamma, r.dbeta = dbeta;
    if (dx) {
        int key[5] = {n, C_IN, 1, h, w};
        capi_conv_lock();
        if (!(r.lib = capi_conv_cached(key, setup_conv, &r, 0, stream, CH04_ENOMEM,
                                       CH04_ECUDA, &err))) {
            capi_conv_unlock();
            return err;
        }
    }
    b3_backward(&r); /* dc, dgamma, dbeta */
    b4_own_dw(&r);   /* dw, dbias */
    err = capi_launched(CH04_ECUDA, "the backward (b3's, b4's dw and dbias)");
    if (dx) {
        if (!err)
            err = capi_on_default_stream(stream, run_lib_dx, &r, CH04_ECUDA,
                                         "dx (the library conv)");
        capi_conv_unlock();
    }
    return err;
}
