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
 * (common/capi.h's) passed (another process took the memory in between); and its later calls
 * on a failed cuDNN call, which valid buffers do not cause. The messages, the library conv's
 * setups and its ordering on the default stream: common/capi.h.
 */
#include "api.h"
#include "capi.h"
#include "model.h"

const char *ch01_last_error(void) { return capi_last_error(); }

int ch01_check_shape(long long n, long long c_in, long long d, long long h, long long w)
{
    if (capi_check_channels(c_in, C_IN, CH01_EINVAL))
        return CH01_EINVAL;
    if (n < 1 || d < 1 || h < 1 || w < 1)
        return capi_fail(CH01_EINVAL, "x's extents must be at least 1, not %lld x %lld x %lld x "
                         "%lld x %lld", n, c_in, d, h, w);
    if (n > 65535 || d > 65535)
        return capi_fail(CH01_EINVAL, "x's batch (%lld) and depth (%lld) must be at most 65535: "
                         "the kernels put them on grid dimensions", n, d);
    double elems = (double)n * C_OUT * (2.0 * d - 1) * (2.0 * h - 1) * (2.0 * w - 1);
    if (elems >= 2147483647.0)
        return capi_fail(CH01_EINVAL, "the conv output of x (%lld x %lld x %lld x %lld x %lld) "
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
    if (capi_check_pointers(ptrs, names, count, CH01_EINVAL))
        return CH01_EINVAL;
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
    return capi_launched(CH01_ECUDA, "the forward (v8)");
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
    return capi_launched(CH01_ECUDA, "the training forward (b3's conv, v7's epilogue)");
}

/* the library conv for dx (common/capi.h keeps it, per device and shape) */
void ch01_release(void) { capi_conv_release(); }

static void run_lib_dx(const void *r) { lib_dx((const run_ctx *)r); }

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
        return capi_fail(CH01_EINVAL, "dx is not 16-byte aligned (cuDNN's plans are built for "
                         "16)");
    lib_ctx lib;
    if (dx) {
        int err, cdims[5] = {n, C_OUT, r.sh.od, r.sh.oh, r.sh.ow};
        capi_conv_lock();
        /* as problem.cu's lib_setup: the Conv3d whose input gradient the transposed conv is, on
         * c's shape; a new setup's engine search writes dc (zeroed: its input), dx (its output
         * and output gradient) and dw, each written again by the backward */
        const lib_conv3d *conv = capi_conv_get(cdims, C_IN, KS, 1, 2, dc, weight, dx, dx, dc, dw,
                                               stream, CH01_ENOMEM, CH01_ECUDA, &err);
        if (!conv) {
            capi_conv_unlock();
            return err;
        }
        lib.conv = *conv, lib.forward_ran = 0; /* a copy of the kept setup's handles */
    }
    r.x = x, r.weight = weight, r.b = b, r.g = g;
    r.c = (float *)c; /* run_ctx's c is the forward's output; the backward only reads it */
    r.dc = dc, r.dx = dx, r.dw = dw, r.dbias = dbias, r.db = db, r.lib = dx ? &lib : NULL;
    r.partials = workspace;
    r.partials2 = workspace + partials_floats(&r.sh);
    r.dw_by_co = r.partials2 + DBIAS_BLOCKS * C_OUT;
    b4_backward(&r); /* dc, db */
    own_dw(&r);
    own_dbias(&r);
    int err = capi_launched(CH01_ECUDA, "the backward (b4's, b3's dw and dbias)");
    if (dx) {
        if (!err)
            err = capi_on_default_stream(stream, run_lib_dx, &r, CH01_ECUDA,
                                         "dx (the library conv)");
        capi_conv_unlock();
    }
    return err;
}
