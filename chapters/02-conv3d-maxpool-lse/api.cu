/*
 * api.cu: the C library of api.h, on the chapter's own launchers (no kernel of its own).
 *
 * Each function fills a run_ctx (model.h) with the caller's buffers and stream, on the stack, and
 * calls the launchers the chapter's versions use: v9_launch for the inference forward,
 * conv_3xtf32 and v5_epilogue for the training forward, and b3's backward: epilogue_backward
 * (b2's kernel), own_dx, own_dw and own_dbias. The TF32 functions call v10's and b4's the same
 * way: v10_launch; conv_wgmma and v5_epilogue; epilogue_backward, tf32_dx, tf32_dw and
 * own_dbias, after capi_check_sm90a (wgmma's kernels are empty stubs in a build for another
 * architecture, and sm_90a code runs on compute capability 9.0 alone). b4's scratch is b3's
 * (the weights in a tile's order, the dw shares, the dbias partials), so both precisions share
 * the workspace layout below. The training forward's conv is v8's rather than
 * b3's library conv: it is faster at the KernelBench shape (v8's and v5's model_fwd rows of
 * data/h100/ch02.csv) and more accurate (v8's header), and the library then needs no cuDNN and
 * no per-shape setup. None of the launchers reads a global; the run_ctx fields they read are
 * the ones filled here. The harness's checks (CUDA_CHECK, die) exit the process, so this file
 * checks every input before it launches anything and reports a failed launch with
 * cudaGetLastError instead (common/capi.h: the messages, kept per thread). What still exits: SMEM_OPT_IN's cudaGetDevice and
 * cudaFuncSetAttribute (igemm.cuh), which fail only on a device already broken (an earlier
 * kernel's fault).
 */
#include <stdint.h>
#include <string.h>

#include "api.h"
#include "capi.h"
#include "model.h"

const char *ch02_last_error(void) { return capi_last_error(); }

int ch02_check_shape(long long n, long long c_in, long long d, long long h, long long w)
{
    if (capi_check_channels(c_in, C_IN, CH02_EINVAL))
        return CH02_EINVAL;
    if (n < 1)
        return capi_fail(CH02_EINVAL, "x's batch must be at least 1, not %lld", n);
    if (d < 2 || h < 2 || w < 2)
        return capi_fail(CH02_EINVAL, "x's depth, height and width must be at least 2 (max "
                         "pooling with kernel 2), not %lld x %lld x %lld", d, h, w);
    if (n > 65535 || d > 65535)
        return capi_fail(CH02_EINVAL, "x's batch (%lld) and depth (%lld) must be at most 65535: "
                         "the kernels put them on grid dimensions", n, d);
    double elems = (double)n * C_OUT * d * h * w;
    if (elems >= 2147483647.0)
        return capi_fail(CH02_EINVAL, "the conv output of x (%lld x %lld x %lld x %lld x %lld) "
                         "would have %.0f elements; the kernels index with 32-bit ints (below "
                         "2^31): use a smaller batch", n, c_in, d, h, w, elems);
    /* v5's epilogue: a grid row per pooled row of every sample and plane */
    double rows = (double)n * (d / 2) * (h / 2);
    if (rows > 65535)
        return capi_fail(CH02_EINVAL, "x (%lld x %lld x %lld x %lld x %lld) has %.0f pooled "
                         "rows (batch x depth/2 x height/2); the training forward's epilogue "
                         "puts them on a grid dimension, at most 65535", n, c_in, d, h, w, rows);
    return CH02_OK;
}

/* the workspace: the weights in a tile's order (w_k, the forward's; w_dx, the backward's: one
 * after the other on the stream, so they share it), then b3's dbias partials and dw shares */
#define WS_WEIGHTS 0
#define WS_PARTIALS ((size_t)N_WEIGHT)
#define WS_DW_PART (WS_PARTIALS + (size_t)DBIAS_BLOCKS * C_OUT)

static int sm_count(int *count)
{
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
        return capi_launched(CH02_ECUDA, "querying the device's SM count");
    return CH02_OK;
}

static size_t workspace_for(int backward, int sms)
{
    return backward ? WS_DW_PART + (size_t)dw_shares_max(sms) * N_WEIGHT : (size_t)N_WEIGHT;
}

size_t ch02_workspace_floats(int backward)
{
    int sms = 0;
    if (sm_count(&sms))
        return 0;
    return workspace_for(backward, sms);
}

/* wgmma (NULL for the fp32 functions: the function's name, for the message), the shape, the
 * pointers and the workspace, checked; *r filled with the shape, the stream, the SMs and the
 * workspace's parts */
static int begin(run_ctx *r, const char *wgmma, int n, int d, int h, int w, cudaStream_t stream,
                 const void *const *ptrs, const char *const *names, int count, float *workspace,
                 size_t workspace_floats, int backward)
{
    int err;
    if (wgmma && (err = capi_check_sm90a(wgmma)))
        return err;
    if (ch02_check_shape(n, C_IN, d, h, w))
        return CH02_EINVAL;
    if (capi_check_pointers(ptrs, names, count, CH02_EINVAL))
        return CH02_EINVAL;
    if (!workspace || (uintptr_t)workspace % 16)
        return capi_fail(CH02_EINVAL, "workspace is NULL or not 16-byte aligned");
    int sms = 0;
    if (sm_count(&sms))
        return CH02_ECUDA;
    size_t need = workspace_for(backward, sms);
    if (workspace_floats < need)
        return capi_fail(CH02_EINVAL, "workspace holds %zu floats; %s needs %zu on this "
                         "device (ch02_workspace_floats(%d))", workspace_floats,
                         backward ? "the backward" : "the forward", need, backward);
    memset(r, 0, sizeof *r);
    r->sh = make_shape(n, d, h, w);
    r->sm_count = sms;
    r->stream = stream;
    r->w_k = r->w_dx = workspace + WS_WEIGHTS;
    if (backward)
        r->partials = workspace + WS_PARTIALS, r->dw_part = workspace + WS_DW_PART;
    return CH02_OK;
}

/* The forward (v9), or in TF32 (v10) */
static int api_forward(int tf32, const float *x, const float *weight, const float *bias,
                       float *y, float *workspace, size_t workspace_floats, int n, int d, int h,
                       int w, cudaStream_t stream)
{
    run_ctx r;
    const void *p[] = {x, weight, bias, y};
    const char *names[] = {"x", "weight", "bias", "y"};
    int err = begin(&r, tf32 ? "ch02_forward_tf32 (v10)" : NULL, n, d, h, w, stream, p, names,
                    4, workspace, workspace_floats, 0);
    if (err)
        return err;
    r.x = x, r.weight = weight, r.bias = bias, r.y = y;
    if (tf32)
        v10_launch(&r, SCOPE_MODEL_FWD);
    else
        v9_launch(&r, SCOPE_MODEL_FWD);
    return capi_launched(CH02_ECUDA, tf32 ? "the TF32 forward (v10)" : "the forward (v9)");
}

/* The training forward: v8's conv (3xTF32) or v10's (TF32) into c, then v5's epilogue */
static int api_train_forward(int tf32, const float *x, const float *weight,
                             const float *bias, float *c, float *y, float *workspace,
                             size_t workspace_floats, int n, int d, int h, int w,
                             cudaStream_t stream)
{
    run_ctx r;
    const void *p[] = {x, weight, bias, c, y};
    const char *names[] = {"x", "weight", "bias", "c", "y"};
    int err = begin(&r, tf32 ? "ch02_train_forward_tf32 (v10's conv)" : NULL, n, d, h, w,
                    stream, p, names, 5, workspace, workspace_floats, 0);
    if (err)
        return err;
    r.x = x, r.weight = weight, r.bias = bias, r.c = c, r.y = y;
    if (tf32)
        conv_wgmma(&r, c);
    else
        conv_3xtf32(&r, c);
    v5_epilogue(&r);
    return capi_launched(CH02_ECUDA, tf32 ? "the TF32 training forward (v10's conv, v5's "
                         "epilogue)" : "the training forward (v8's conv, v5's epilogue)");
}

/* The backward: b2's epilogue backward (dc), then b3's dx and dw (3xTF32) or b4's (TF32), and
 * dbias */
static int api_backward(int tf32, const float *x, const float *weight, const float *c,
                        const float *g, float *dc, float *dx, float *dw, float *dbias,
                        float *workspace, size_t workspace_floats, int n, int d, int h, int w,
                        cudaStream_t stream)
{
    run_ctx r;
    const void *p[] = {x, weight, c, g, dc, dw, dbias};
    const char *names[] = {"x", "weight", "c", "g", "dc", "dw", "dbias"};
    int err = begin(&r, tf32 ? "ch02_backward_tf32 (b4)" : NULL, n, d, h, w, stream, p, names,
                    7, workspace, workspace_floats, 1);
    if (err)
        return err;
    if ((uintptr_t)dx % 16)
        return capi_fail(CH02_EINVAL, "dx is not 16-byte aligned (the kernels load float4s)");
    r.x = x, r.weight = weight, r.g = g;
    r.c = (float *)c; /* run_ctx's c is the forward's output; the backward only reads it */
    r.dc = dc, r.dx = dx, r.dw = dw, r.dbias = dbias;
    epilogue_backward(&r); /* dc */
    if (dx && tf32)
        tf32_dx(&r);
    else if (dx)
        own_dx(&r);
    if (tf32)
        tf32_dw(&r);
    else
        own_dw(&r);
    own_dbias(&r);
    return capi_launched(CH02_ECUDA, tf32 ? "the TF32 backward (b4's: b2's epilogue backward, "
                         "dx, dw, dbias)" : "the backward (b3's: b2's epilogue backward, dx, dw, "
                         "dbias)");
}

int ch02_forward(const float *x, const float *weight, const float *bias, float *y,
                 float *workspace, size_t workspace_floats, int n, int d, int h, int w,
                 cudaStream_t stream)
{
    return api_forward(0, x, weight, bias, y, workspace, workspace_floats, n, d, h, w, stream);
}

int ch02_forward_tf32(const float *x, const float *weight, const float *bias, float *y,
                      float *workspace, size_t workspace_floats, int n, int d, int h, int w,
                      cudaStream_t stream)
{
    return api_forward(1, x, weight, bias, y, workspace, workspace_floats, n, d, h, w, stream);
}

int ch02_train_forward(const float *x, const float *weight, const float *bias, float *c,
                       float *y, float *workspace, size_t workspace_floats, int n, int d, int h,
                       int w, cudaStream_t stream)
{
    return api_train_forward(0, x, weight, bias, c, y, workspace, workspace_floats, n, d, h, w,
                         stream);
}

int ch02_train_forward_tf32(const float *x, const float *weight, const float *bias, float *c,
                            float *y, float *workspace, size_t workspace_floats, int n, int d,
                            int h, int w, cudaStream_t stream)
{
    return api_train_forward(1, x, weight, bias, c, y, workspace, workspace_floats, n, d, h, w,
                         stream);
}

int ch02_backward(const float *x, const float *weight, const float *c, const float *g,
                  float *dc, float *dx, float *dw, float *dbias, float *workspace,
                  size_t workspace_floats, int n, int d, int h, int w, cudaStream_t stream)
{
    return api_backward(0, x, weight, c, g, dc, dx, dw, dbias, workspace, workspace_floats, n, d, h,
                    w, stream);
}

int ch02_backward_tf32(const float *x, const float *weight, const float *c, const float *g,
                       float *dc, float *dx, float *dw, float *dbias, float *workspace,
                       size_t workspace_floats, int n, int d, int h, int w, cudaStream_t stream)
{
    return api_backward(1, x, weight, c, g, dc, dx, dw, dbias, workspace, workspace_floats, n, d, h,
                    w, stream);
}
