/*
 * api.cu: the C library of api.h, on the chapter's own launchers (no kernel of its own).
 *
 * Each function fills a run_ctx (model.h) with the caller's buffers and stream, on the stack, and
 * calls the launchers the chapter's versions use: v7_launch for the inference forward (v8_launch
 * for the TF32 one, after capi_check_sm90a: wgmma's kernels are empty stubs in a build for
 * another architecture, and sm_90a code runs on compute capability 9.0 alone);
 * pool_forward and v7_launch for the training forward (v7 writes c and lse, what the backward
 * reads, on its way to y); b3_backward (b2_backward), library_conv_grads and pool_grad for the
 * backward: b3's (b2's) piece by piece. The harness's checks (CUDA_CHECK, die) exit the process,
 * so this file checks every input before it launches anything and reports a failed launch with
 * cudaGetLastError instead. What still exits: the library conv's one-time setup (common/conv.cu)
 * on a cuDNN failure, or when its allocations fail after the free-memory check passed (another
 * process took the memory in between); its later calls on a failed cuDNN call, which valid
 * buffers do not cause; and v8's shared-memory opt-in (cudaGetDevice, cudaFuncSetAttribute),
 * which fails only on a device already broken.
 */
#include "api.h"
#include "capi.h"
#include "hopper.cuh"
#include "model.h"

const char *ch05_last_error(void) { return capi_last_error(); }

int ch05_check_shape(long long n, long long c_in, long long d, long long h, long long w)
{
    if (capi_check_channels(c_in, C_IN, CAPI_EINVAL))
        return CAPI_EINVAL;
    if (n < 1 || d < 2 || h < 2 || w < 2)
        return capi_fail(CAPI_EINVAL, "x's batch must be at least 1 and its depth, height and "
                         "width at least 2 (the pool's 2 x 2 x 2 window), not %lld x %lld x %lld "
                         "x %lld x %lld", n, c_in, d, h, w);
    double xs = (double)n * C_IN * d * h * w;
    double cs = (double)n * C_OUT * (2.0 * (d / 2)) * (2.0 * (h / 2)) * (2.0 * (w / 2));
    if (xs >= 2147483647.0 || cs >= 2147483647.0)
        return capi_fail(CAPI_EINVAL, "x (%lld x %lld x %lld x %lld x %lld) has %.0f elements and "
                         "the conv output would have %.0f; the kernels index with 32-bit ints "
                         "(each below 2^31): use a smaller batch", n, c_in, d, h, w, xs, cs);
    return CAPI_OK;
}

/* floats rounded up to a float4, so that every piece of the workspace stays 16-byte aligned */
static size_t f4(size_t floats) { return (floats + 3) / 4 * 4; }

static int sm_count(void)
{
    int dev = 0, sms = 1;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    return sms;
}

/* the backward's partial sums (b2's; problem.cu sizes them alike) */
static size_t bpart_floats(const shape *s, int split)
{
    size_t b2 = (size_t)rows(s) * split, b1 = 64 * C_OUT;
    return b2 > b1 ? b2 : b1;
}

/* the TF32 forward's (v8's): its tiles' partial sums, its weights, each row's factor and lse,
 * and xp (the pool's output, the conv's input), in this order */
static size_t v8_floats(const shape *s)
{
    return f4((size_t)rows(s) * v8_tiles(s)) + f4(N_WEIGHT) + 2 * f4(rows(s)) + f4(pool_elems(s));
}

size_t ch05_workspace_floats(int n, int d, int h, int w)
{
    shape s = make_shape(n, d, h, w);
    int split = v5_split(&s, sm_count());
    size_t fwd = f4((size_t)rows(&s) * v7_tiles(&s)) + f4(N_WEIGHT) + f4(rows(&s));
    size_t bwd = f4(rows(&s)) + f4(bpart_floats(&s, split)) + f4(pool_elems(&s));
    size_t most = fwd > bwd ? fwd : bwd;
    return most > v8_floats(&s) ? most : v8_floats(&s);
}

int ch05_clusters(void)
{
    cudaFuncAttributes fa;
    if (cudaFuncGetAttributes(&fa, (const void *)b2_dscale) != cudaSuccess) {
        cudaGetLastError();
        int dev = 0, major = 0, minor = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
        return -capi_fail(CAPI_ECUDA, "this build has no code for this GPU (compute capability "
                          "%d.%d): rebuild it with make lib CH=5 ARCH=sm_%d%d", major, minor,
                          major, minor);
    }
    int dev = 0, major = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    return major >= 9 && fa.ptxVersion >= 90; /* as problem.cu decides (gpu_code_arch) */
}

/* the shape and the pointers, checked; *r filled with the shape, the stream, the SMs, v5's
 * split and the shared memory a block may opt in to; *clusters as ch05_clusters */
static int begin(run_ctx *r, int *clusters, int n, int d, int h, int w, cudaStream_t stream,
                 const void *const *ptrs, const char *const *names, int count)
{
    if (ch05_check_shape(n, C_IN, d, h, w) || capi_check_pointers(ptrs, names, count, CAPI_EINVAL))
        return CAPI_EINVAL;
    int cl = ch05_clusters();
    if (cl < 0)
        return -cl;
    *clusters = cl;
    memset(r, 0, sizeof *r);
    r->sh = make_shape(n, d, h, w);
    r->sm_count = sm_count();
    r->split = v5_split(&r->sh, r->sm_count);
    r->smem_optin = smem_optin_bytes(SMEM_STATIC_MAX);
    r->stream = stream;
    return CAPI_OK;
}

/* the library conv's call, as capi_on_default_stream runs it */
static void run_conv_grads(const void *r) { library_conv_grads((const run_ctx *)r); }

/* The library conv's part of a step: its setup for r's shape (a new one's engine search writes
 * x_zero, y, dx and dw: buffers the step writes again), then `before` on the caller's stream,
 * then `lib` on the default stream between the caller's work before and after it. */
static int with_library_conv(run_ctx *r, float *x_zero, float *y, float *dx, float *dw,
                             void (*before)(const run_ctx *), const char *before_what,
                             void (*lib)(const void *), const char *lib_what)
{
    int err, cdims[5] = {r->sh.n, C_OUT, r->sh.od, r->sh.oh, r->sh.ow};
    capi_conv_lock();
    r->lib = capi_conv_get(cdims, C_IN, KS, 1, 2, x_zero, r->weight, y, y, dx, dw, r->stream,
                           CAPI_ENOMEM, CAPI_ECUDA, &err);
    if (r->lib) {
        before(r);
        if (!(err = capi_launched(CAPI_ECUDA, before_what)))
            err = capi_on_default_stream(r->stream, lib, r, CAPI_ECUDA, lib_what);
    }
    capi_conv_unlock();
    return err;
}

int ch05_forward(const float *x, const float *weight, const float *conv_bias, const float *scale,
                 float *c, float *y, float *workspace, int n, int d, int h, int w,
                 cudaStream_t stream)
{
    run_ctx r;
    int clusters = 0, err;
    const void *p[] = {x, weight, conv_bias, scale, c, y, workspace};
    const char *names[] = {"x", "weight", "conv_bias", "scale", "c", "y", "workspace"};
    if ((err = begin(&r, &clusters, n, d, h, w, stream, p, names, 7)))
        return err;
    r.x = x, r.weight = weight, r.bias = conv_bias, r.scale = scale, r.c = c, r.y = y;
    r.tpart = workspace;
    r.wt = r.tpart + f4((size_t)rows(&r.sh) * v7_tiles(&r.sh));
    r.lse = r.wt + f4(N_WEIGHT); /* v7 writes it; the inference forward does not keep it */
    v7_launch(&r, SCOPE_MODEL_FWD);
    return capi_launched(CAPI_ECUDA, "the forward (v7)");
}

int ch05_forward_tf32(const float *x, const float *weight, const float *conv_bias,
                      const float *scale, float *y, float *workspace, int n, int d, int h, int w,
                      cudaStream_t stream)
{
    run_ctx r;
    int clusters = 0, err;
    const void *p[] = {x, weight, conv_bias, scale, y, workspace};
    const char *names[] = {"x", "weight", "conv_bias", "scale", "y", "workspace"};
    if ((err = capi_check_sm90a("ch05_forward_tf32 (v8)")) ||
        (err = begin(&r, &clusters, n, d, h, w, stream, p, names, 6)))
        return err;
    r.x = x, r.weight = weight, r.bias = conv_bias, r.scale = scale, r.y = y;
    r.tpart = workspace; /* v8_floats's parts */
    r.wt = r.tpart + f4((size_t)rows(&r.sh) * v8_tiles(&r.sh));
    r.rowk = r.wt + f4(N_WEIGHT);
    r.lse = r.rowk + f4(rows(&r.sh)); /* v8 writes it; the inference forward does not keep it */
    r.xp = r.lse + f4(rows(&r.sh));
    v8_launch(&r, SCOPE_MODEL_FWD);
    return capi_launched(CAPI_ECUDA, "the TF32 forward (the pool, then v8)");
}

int ch05_train_forward(const float *x, const float *weight, const float *conv_bias,
                       const float *scale, float *xp, float *c, float *lse, float *y,
                       float *workspace, int n, int d, int h, int w, cudaStream_t stream)
{
    run_ctx r;
    int clusters = 0, err;
    const void *p[] = {x, weight, conv_bias, scale, xp, c, lse, y, workspace};
    const char *names[] = {"x", "weight", "conv_bias", "scale", "xp", "c", "lse", "y",
                           "workspace"};
    if ((err = begin(&r, &clusters, n, d, h, w, stream, p, names, 9)))
        return err;
    r.x = x, r.weight = weight, r.bias = conv_bias, r.scale = scale;
    r.xp = xp, r.c = c, r.lse = lse, r.y = y;
    r.tpart = workspace;
    r.wt = r.tpart + f4((size_t)rows(&r.sh) * v7_tiles(&r.sh));
    pool_forward(&r); /* xp: the conv's input, for dw in the backward */
    v7_launch(&r, SCOPE_MODEL_FWD); /* c, lse and y, as the inference forward */
    return capi_launched(CAPI_ECUDA, "the training forward (the pool, then v7)");
}

int ch05_backward(const float *weight, const float *scale, const float *xp, const float *c,
                  const float *lse, const float *g, float *dc, float *dx, float *dw,
                  float *dbias, float *dscale, float *workspace, int n, int d, int h, int w,
                  cudaStream_t stream)
{
    run_ctx r;
    int clusters = 0, err;
    const void *p[] = {weight, scale, xp, c, lse, g, dc, dw, dbias, dscale, workspace};
    const char *names[] = {"weight", "scale", "xp", "c", "lse", "g", "dc", "dw", "dbias",
                           "dscale", "workspace"};
    if ((err = begin(&r, &clusters, n, d, h, w, stream, p, names, 11)))
        return err;
    if ((uintptr_t)dx % 16)
        return capi_fail(CAPI_EINVAL, "dx is not 16-byte aligned");
    r.weight = weight, r.scale = scale, r.xp = (float *)xp; /* only read here */
    r.c = (float *)c, r.lse = (float *)lse, r.g = g;           /* likewise */
    r.dc = dc, r.dx = dx, r.dw = dw, r.dbias = dbias, r.dscale = dscale;
    r.dot = workspace;
    r.bpart = r.dot + f4(rows(&r.sh));
    float *dxp = r.bpart + f4(bpart_floats(&r.sh, r.split));
    r.dxp = dx ? dxp : NULL; /* library_conv_grads skips the input's gradient without it */
    /* a new setup writes dc (zeroed: the Conv3d's input, and its input gradient), the pool's
     * gradient's scratch and dw: each is written again below */
    err = with_library_conv(&r, dc, dxp, dc, dw, clusters ? b3_backward : b2_backward,
                            clusters ? "the backward (b3)" : "the backward (b2)",
                            run_conv_grads, "the conv's gradients (the library conv)");
    if (err || !dx)
        return err;
    pool_grad(&r); /* dx from dxp, on the caller's stream */
    return capi_launched(CAPI_ECUDA, "the pool's backward");
}

void ch05_release(void) { capi_conv_release(); }
