/* conv.cu: the library convolution, cuDNN's or the direct kernels. See conv.h for what each
 * function promises. */
#include "conv.h"

#include <stdlib.h>
#include <string.h>

#include "reduce.cuh"

static long direct_calls;

long lib_conv3d_direct_calls(void) { return direct_calls; }

/* the geometry both backends start from: kernel k[d] and padding pad[d] per spatial dim */
static void geometry(lib_conv3d *cc, const int x_dims[5], int c_out, const int k[3],
                     const int pad[3], int stride)
{
    memset(cc, 0, sizeof *cc);
    memcpy(cc->x_dims, x_dims, sizeof cc->x_dims);
    cc->y_dims[0] = x_dims[0];
    cc->y_dims[1] = c_out;
    for (int i = 0; i < 3; i++) {
        cc->y_dims[2 + i] = (x_dims[2 + i] + 2 * pad[i] - k[i]) / stride + 1;
        if (x_dims[2 + i] + 2 * pad[i] < k[i])
            die(1, "conv: an input extent of %d with padding %d is smaller than the kernel %d",
                x_dims[2 + i], pad[i], k[i]);
        cc->k[i] = k[i], cc->pad[i] = pad[i];
    }
    cc->stride = stride;
}

static void setup(lib_conv3d *cc, const int x_dims[5], int c_out, const int k[3],
                  const int pad[3], int stride, const float *x, const float *w, float *y,
                  float *dy, float *dx, float *dw);

void lib_conv3d_setup(lib_conv3d *cc, const int x_dims[5], int c_out, int k, int pad, int stride,
                      const float *x, const float *w, float *y, float *dy, float *dx, float *dw)
{
    int kk[3] = {k, k, k}, pp[3] = {pad, pad, pad};
    setup(cc, x_dims, c_out, kk, pp, stride, x, w, y, dy, dx, dw);
}

void lib_conv2d_setup(lib_conv3d *cc, const int x_dims[4], int c_out, int k, int pad, int stride,
                      const float *x, const float *w, float *y, float *dy, float *dx, float *dw)
{
    int xd[5] = {x_dims[0], x_dims[1], 1, x_dims[2], x_dims[3]};
    int kk[3] = {1, k, k}, pp[3] = {0, pad, pad};
    setup(cc, xd, c_out, kk, pp, stride, x, w, y, dy, dx, dw);
}

static size_t elems(const int dims[5])
{
    return (size_t)dims[0] * dims[1] * dims[2] * dims[3] * dims[4];
}

static void setup_nhwc(lib_conv3d *cc, const int x_dims[5], int c_out, const int k[3],
                       const int pad[3], int stride, const float *x, const float *w, float *y);

void lib_conv2d_setup_nhwc(lib_conv3d *cc, const int x_dims[4], int c_out, int k, int pad,
                           int stride, const float *x, const float *w, float *y)
{
    int xd[5] = {x_dims[0], x_dims[1], 1, x_dims[2], x_dims[3]};
    int kk[3] = {1, k, k}, pp[3] = {0, pad, pad};
    setup_nhwc(cc, xd, c_out, kk, pp, stride, x, w, y);
}

void lib_conv_channels_last(const float *in, float *out, int n, int channels, size_t s)
{
    for (int i = 0; i < n; i++)
        for (size_t j0 = 0; j0 < s; j0 += 64) /* 64 positions at a time: their rows stay cached */
            for (int c = 0; c < channels; c++)
                for (size_t j = j0; j < j0 + 64 && j < s; j++)
                    out[((size_t)i * s + j) * channels + c] = in[((size_t)i * channels + c) * s + j];
}

/* the backward directions of a channels-last setup were never set up */
static void forward_only(const lib_conv3d *cc, const char *what)
{
    if (cc->nhwc)
        die(1, "conv: %s of a channels-last conv: lib_conv2d_setup_nhwc sets up the forward only",
            what);
}

#if HAVE_CUDNN
/* ------------------------------------------------------------------ cuDNN */

void cudnn_check_(cudnnStatus_t s, const char *what, const char *file, int line)
{
    if (s == CUDNN_STATUS_SUCCESS)
        return;
    fprintf(stderr, "error: cuDNN %s at %s:%d: %s\n", what, file, line, cudnnGetErrorString(s));
    exit(1);
}

/* bytes is read here, after the cudnnGet...WorkspaceSize call that is the third argument has
 * written it (a by-value size_t argument could be evaluated before the call: C leaves the order
 * of argument evaluation unspecified) */
static int find_log(void);
static void workspace_need(size_t *need, const size_t *bytes, cudnnStatus_t st)
{
    if (st == CUDNN_STATUS_SUCCESS && *bytes > *need && *bytes <= ((size_t)1 << 31))
        *need = *bytes;
    if (st == CUDNN_STATUS_SUCCESS && *bytes > ((size_t)1 << 31) && find_log())
        fprintf(stderr, "cuDNN: an algorithm asks for %zu B of workspace, above the 2 GiB cap: "
                "left out of the search\n", *bytes);
}

/* the first successful strict-fp32 entry of a FindEx result (they come fastest first) */
#define FP32_OK(p) ((p).status == CUDNN_STATUS_SUCCESS && (p).mathType == CUDNN_FMA_MATH)
#define PICK_FP32(perf, found, out_algo, out_det, what)                                            \
    do {                                                                                           \
        int pick_ = -1;                                                                            \
        for (int i_ = 0; i_ < (found) && pick_ < 0; i_++)                                          \
            if (FP32_OK((perf)[i_]))                                                               \
                pick_ = i_;                                                                        \
        if (pick_ < 0)                                                                             \
            die(1, "cuDNN found no fp32 (non-tensor-core) algorithm for %s", what);                \
        out_algo = (int)(perf)[pick_].algo;                                                        \
        out_det = (perf)[pick_].determinism == CUDNN_DETERMINISTIC;                                \
    } while (0)

/* CONV_FIND_LOG=1 in the environment: every algorithm a FindEx call measured, to stderr (its
 * status, time, workspace, determinism and math type, in cuDNN's order, fastest first); and
 * every algorithm whose workspace the 2 GiB cap left out. A diagnostic for comparing the
 * library baseline with PyTorch's choices; off by default. */
static int find_log(void)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("CONV_FIND_LOG");
        on = e && *e && *e != '0';
    }
    return on;
}
#define LOG_FIND(perf, found, what, x_dims, y_dims)                                                \
    do {                                                                                           \
        if (!find_log())                                                                           \
            break;                                                                                 \
        fprintf(stderr, "cudnnFind %s, x %dx%dx%dx%dx%d -> y %dx%dx%dx%dx%d:\n", what,             \
                (x_dims)[0], (x_dims)[1], (x_dims)[2], (x_dims)[3], (x_dims)[4], (y_dims)[0],      \
                (y_dims)[1], (y_dims)[2], (y_dims)[3], (y_dims)[4]);                               \
        for (int i_ = 0; i_ < (found); i_++)                                                       \
            fprintf(stderr, "  algo %d status %d time %.3f ms workspace %zu B %s %s\n",            \
                    (int)(perf)[i_].algo, (int)(perf)[i_].status, (double)(perf)[i_].time,          \
                    (size_t)(perf)[i_].memory,                                                     \
                    (perf)[i_].determinism == CUDNN_DETERMINISTIC ? "deterministic"                \
                                                                   : "nondeterministic",           \
                    (perf)[i_].mathType == CUDNN_FMA_MATH ? "fma" : "tensor-op or default");       \
    } while (0)

/* the handle and every descriptor (the callers set them), the conv's strict fp32 math */
static void create_descriptors(lib_conv3d *cc)
{
    CUDNN_CHECK(cudnnCreate(&cc->handle));
    CUDNN_CHECK(cudnnSetStream(cc->handle, 0));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&cc->x_desc));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&cc->y_desc));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&cc->b_desc));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&cc->xb_desc));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&cc->yflat_desc));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&cc->w_desc));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&cc->conv_desc));
}

/* a zeroed workspace of `need` bytes: initcheck flags cuDNN reading workspace it did not write */
static void workspace_alloc(lib_conv3d *cc, size_t need)
{
    cc->workspace_bytes = need;
    cc->workspace = need ? gpu_alloc(need, "cuDNN workspace") : NULL;
    if (need)
        CUDA_CHECK(cudaMemset(cc->workspace, 0, need));
}

/* the largest forward workspace any algorithm asks for (at most 2 GiB) */
static size_t forward_workspace(const lib_conv3d *cc)
{
    size_t need = 0, bytes = 0;
    for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; a++)
        workspace_need(&need, &bytes, cudnnGetConvolutionForwardWorkspaceSize(
                                         cc->handle, cc->x_desc, cc->w_desc, cc->conv_desc,
                                         cc->y_desc, (cudnnConvolutionFwdAlgo_t)a, &bytes));
    return need;
}

static void find_forward(lib_conv3d *cc, const float *x, const float *w, float *y)
{
    cudnnConvolutionFwdAlgoPerf_t pf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0;
    CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
        cc->handle, cc->x_desc, x, cc->w_desc, w, cc->conv_desc, cc->y_desc, y,
        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, pf, cc->workspace, cc->workspace_bytes));
    LOG_FIND(pf, found, "forward", cc->x_dims, cc->y_dims);
    PICK_FP32(pf, found, cc->fwd_algo, cc->fwd_det, "the conv");
}

static void setup(lib_conv3d *cc, const int x_dims[5], int c_out, const int k[3],
                  const int pad[3], int stride, const float *x, const float *w, float *y,
                  float *dy, float *dx, float *dw)
{
    geometry(cc, x_dims, c_out, k, pad, stride);
    cc->backend = "cuDNN";
    const int *xd = cc->x_dims, *yd = cc->y_dims;
    int ci = xd[1];
    int xs[5] = {xd[1] * xd[2] * xd[3] * xd[4], xd[2] * xd[3] * xd[4], xd[3] * xd[4], xd[4], 1};
    int ys[5] = {yd[1] * yd[2] * yd[3] * yd[4], yd[2] * yd[3] * yd[4], yd[3] * yd[4], yd[4], 1};
    int bd[5] = {1, c_out, 1, 1, 1}, bs[5] = {c_out, 1, 1, 1, 1};
    int xbd[5] = {1, ci, 1, 1, 1}, xbs[5] = {ci, 1, 1, 1, 1};
    int wdims[5] = {c_out, ci, k[0], k[1], k[2]};
    int strides[3] = {stride, stride, stride}, one3[3] = {1, 1, 1};
    create_descriptors(cc);
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(cc->x_desc, CUDNN_DATA_FLOAT, 5, xd, xs));
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(cc->y_desc, CUDNN_DATA_FLOAT, 5, yd, ys));
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(cc->b_desc, CUDNN_DATA_FLOAT, 5, bd, bs));
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(cc->xb_desc, CUDNN_DATA_FLOAT, 5, xbd, xbs));
    CUDNN_CHECK(
        cudnnSetFilterNdDescriptor(cc->w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 5, wdims));
    CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(cc->conv_desc, 3, cc->pad, strides, one3,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(cc->conv_desc, CUDNN_FMA_MATH));
    size_t need = forward_workspace(cc), bytes = 0;
    for (int a = 0; a < CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT; a++)
        workspace_need(&need, &bytes, cudnnGetConvolutionBackwardDataWorkspaceSize(
                                         cc->handle, cc->w_desc, cc->y_desc, cc->conv_desc,
                                         cc->x_desc, (cudnnConvolutionBwdDataAlgo_t)a, &bytes));
    for (int a = 0; a < CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT; a++)
        workspace_need(&need, &bytes, cudnnGetConvolutionBackwardFilterWorkspaceSize(
                                         cc->handle, cc->x_desc, cc->y_desc, cc->conv_desc,
                                         cc->w_desc, (cudnnConvolutionBwdFilterAlgo_t)a, &bytes));
    workspace_alloc(cc, need);
    CUDA_CHECK(cudaMemset(dy, 0, sizeof(float) * elems(yd)));

    cudnnConvolutionBwdDataAlgoPerf_t pdx[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    cudnnConvolutionBwdFilterAlgoPerf_t pdw[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int found = 0;
    find_forward(cc, x, w, y);
    CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
        cc->handle, cc->w_desc, w, cc->y_desc, dy, cc->conv_desc, cc->x_desc, dx,
        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found, pdx, cc->workspace, cc->workspace_bytes));
    LOG_FIND(pdx, found, "backward data", cc->x_dims, cc->y_dims);
    PICK_FP32(pdx, found, cc->dx_algo, cc->dx_det, "the conv's data gradient");
    CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
        cc->handle, cc->x_desc, x, cc->y_desc, dy, cc->conv_desc, cc->w_desc, dw,
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found, pdw, cc->workspace, cc->workspace_bytes));
    LOG_FIND(pdw, found, "backward filter", cc->x_dims, cc->y_dims);
    PICK_FP32(pdw, found, cc->dw_algo, cc->dw_det, "the conv's weight gradient");
}

/* A true 2-D conv (4-D descriptors; the depth-1 form above stays NCDHW): x, y in
 * CUDNN_TENSOR_NHWC, the filter in CUDNN_TENSOR_NHWC, i.e. KRSC (cuDNN API reference,
 * cudnnSetFilter4dDescriptor). The bias add sees y as an NCHW tensor (N OH OW) x C_out x 1 x 1,
 * the same bytes, where adding a 1 x C_out x 1 x 1 bias is cudnnAddTensor's ordinary broadcast. */
static void setup_nhwc(lib_conv3d *cc, const int x_dims[5], int c_out, const int k[3],
                       const int pad[3], int stride, const float *x, const float *w, float *y)
{
    geometry(cc, x_dims, c_out, k, pad, stride);
    cc->backend = "cuDNN";
    cc->nhwc = 1;
    const int *xd = cc->x_dims, *yd = cc->y_dims;
    create_descriptors(cc);
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(cc->x_desc, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, xd[0],
                                           xd[1], xd[3], xd[4]));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(cc->y_desc, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, yd[0],
                                           yd[1], yd[3], yd[4]));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(cc->yflat_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                           yd[0] * yd[3] * yd[4], yd[1], 1, 1));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(cc->b_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                                           yd[1], 1, 1));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(cc->w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, yd[1],
                                           xd[1], k[1], k[2]));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(cc->conv_desc, pad[1], pad[2], stride, stride, 1,
                                                1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(cc->conv_desc, CUDNN_FMA_MATH));
    workspace_alloc(cc, forward_workspace(cc));
    find_forward(cc, x, w, y);
    cc->dx_algo = cc->dw_algo = -1;
}

void lib_conv3d_forward(const lib_conv3d *cc, const float *x, const float *w, const float *bias,
                        float *y)
{
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnConvolutionForward(cc->handle, &one, cc->x_desc, x, cc->w_desc, w,
                                        cc->conv_desc, (cudnnConvolutionFwdAlgo_t)cc->fwd_algo,
                                        cc->workspace, cc->workspace_bytes, &zero, cc->y_desc, y));
    if (bias)
        CUDNN_CHECK(cudnnAddTensor(cc->handle, &one, cc->b_desc, bias, &one,
                                   cc->nhwc ? cc->yflat_desc : cc->y_desc, y));
}

void lib_conv3d_backward_data(const lib_conv3d *cc, const float *w, const float *dy, float *dx)
{
    forward_only(cc, "the data gradient");
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnConvolutionBackwardData(
        cc->handle, &one, cc->w_desc, w, cc->y_desc, dy, cc->conv_desc,
        (cudnnConvolutionBwdDataAlgo_t)cc->dx_algo, cc->workspace, cc->workspace_bytes, &zero,
        cc->x_desc, dx));
}

void lib_conv3d_backward_filter(const lib_conv3d *cc, const float *x, const float *dy, float *dw)
{
    forward_only(cc, "the weight gradient");
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(
        cc->handle, &one, cc->x_desc, x, cc->y_desc, dy, cc->conv_desc,
        (cudnnConvolutionBwdFilterAlgo_t)cc->dw_algo, cc->workspace, cc->workspace_bytes, &zero,
        cc->w_desc, dw));
}

void lib_conv3d_backward_bias(const lib_conv3d *cc, const float *dy, float *dbias)
{
    forward_only(cc, "the bias gradient");
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnConvolutionBackwardBias(cc->handle, &one, cc->y_desc, dy, &zero, cc->b_desc,
                                             dbias));
}

void lib_conv_transpose3d_forward(const lib_conv3d *cc, const float *w, const float *in,
                                  const float *bias, float *out)
{
    const float one = 1.0f;
    lib_conv3d_backward_data(cc, w, in, out);
    CUDNN_CHECK(cudnnAddTensor(cc->handle, &one, cc->xb_desc, bias, &one, cc->x_desc, out));
}

void lib_conv_transpose3d_backward_bias(const lib_conv3d *cc, const float *dout, float *dbias)
{
    forward_only(cc, "the transposed view");
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnConvolutionBackwardBias(cc->handle, &one, cc->x_desc, dout, &zero,
                                             cc->xb_desc, dbias));
}

void lib_conv3d_destroy(lib_conv3d *cc)
{
    if (cc->workspace)
        CUDA_CHECK(cudaFree(cc->workspace));
    cudnnDestroyTensorDescriptor(cc->x_desc);
    cudnnDestroyTensorDescriptor(cc->y_desc);
    cudnnDestroyTensorDescriptor(cc->b_desc);
    cudnnDestroyTensorDescriptor(cc->xb_desc);
    cudnnDestroyTensorDescriptor(cc->yflat_desc);
    cudnnDestroyFilterDescriptor(cc->w_desc);
    cudnnDestroyConvolutionDescriptor(cc->conv_desc);
    cudnnDestroy(cc->handle);
}

#else
/* ------------------------------------------------------------------ the direct kernels
 * Written for being obviously right, not fast: every output is the definition's sum, in a fixed
 * order, so the results are the same bits every run. */

#define KMAX 3      /* the largest kernel extent the weight gradient keeps in registers */
#define DIRECT_BLOCK 256
#define SUM_BLOCKS 64 /* blocks a channel in the bias gradient's first stage */

typedef struct {
    int n, ci, d, h, w;    /* input */
    int co, od, oh, ow;    /* output */
    int kd, kh, kw;        /* kernel */
    int pd, ph, pw, stride;
    int nhwc;              /* x, y channels last and w C_out x taps x C_in (the forward only) */
} conv_dims;

static conv_dims dims_of(const lib_conv3d *cc)
{
    const int *x = cc->x_dims, *y = cc->y_dims;
    conv_dims g = {x[0], x[1], x[2], x[3], x[4], y[1], y[2], y[3], y[4], cc->k[0], cc->k[1],
                   cc->k[2], cc->pad[0], cc->pad[1], cc->pad[2], cc->stride, cc->nhwc};
    return g;
}

/* y[n][co][o] = bias[co] + sum over ci, kz, ky, kx of w[co][ci][kz][ky][kx] x[n][ci][o s + k - p];
 * one thread an output. Channels last (g.nhwc), the same sum in the same order; only where an
 * element lives changes: a channel is the fastest index of x and y, and w is C_out x taps x C_in.
 * x's channel and spatial strides are xc and xp: (D H W, 1) in NCDHW, (1, C_in) channels last. */
static __global__ void k_direct_forward(conv_dims g, const float *__restrict__ x,
                                        const float *__restrict__ w, const float *__restrict__ bias,
                                        float *__restrict__ y)
{
    size_t total = (size_t)g.n * g.co * g.od * g.oh * g.ow, opos = (size_t)g.od * g.oh * g.ow;
    int taps = g.kd * g.kh * g.kw;
    size_t xc = g.nhwc ? 1 : (size_t)g.d * g.h * g.w, xp = g.nhwc ? g.ci : 1;
    size_t wc = g.nhwc ? 1 : taps, wt = g.nhwc ? g.ci : 1; /* w's channel and tap strides */
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t o = g.nhwc ? i / g.co % opos : i % opos; /* the output position */
        int ox = (int)(o % g.ow), oy = (int)(o / g.ow % g.oh), oz = (int)(o / g.ow / g.oh);
        int co = (int)(g.nhwc ? i % g.co : i / opos % g.co);
        int n = (int)(i / (opos * g.co));
        float acc = bias ? bias[co] : 0.0f;
        for (int ci = 0; ci < g.ci; ci++) {
            const float *xs = x + (size_t)n * g.ci * g.d * g.h * g.w + ci * xc;
            const float *ws = w + (size_t)co * g.ci * taps + ci * wc;
            for (int kz = 0; kz < g.kd; kz++) {
                int iz = oz * g.stride - g.pd + kz;
                if (iz < 0 || iz >= g.d)
                    continue;
                for (int ky = 0; ky < g.kh; ky++) {
                    int iy = oy * g.stride - g.ph + ky;
                    if (iy < 0 || iy >= g.h)
                        continue;
                    for (int kx = 0; kx < g.kw; kx++) {
                        int ix = ox * g.stride - g.pw + kx;
                        if (ix >= 0 && ix < g.w)
                            acc += ws[((kz * g.kh + ky) * g.kw + kx) * wt] *
                                   xs[(((size_t)iz * g.h + iy) * g.w + ix) * xp];
                    }
                }
            }
        }
        y[i] = acc;
    }
}

/* dx[n][ci][i] = bias[ci] + sum over co and the taps with (i + p - k) a multiple of s of
 * w[co][ci][k] dy[n][co][(i + p - k) / s]; one thread an input (bias: the transposed conv's) */
static __global__ void k_direct_backward_data(conv_dims g, const float *__restrict__ w,
                                              const float *__restrict__ dy,
                                              const float *__restrict__ bias,
                                              float *__restrict__ dx)
{
    size_t total = (size_t)g.n * g.ci * g.d * g.h * g.w;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int ix = (int)(i % g.w), iy = (int)(i / g.w % g.h), iz = (int)(i / g.w / g.h % g.d);
        int ci = (int)(i / ((size_t)g.w * g.h * g.d) % g.ci);
        int n = (int)(i / ((size_t)g.w * g.h * g.d * g.ci));
        float acc = bias ? bias[ci] : 0.0f;
        for (int co = 0; co < g.co; co++) {
            const float *ds = dy + ((size_t)n * g.co + co) * g.od * g.oh * g.ow;
            const float *ws = w + ((size_t)co * g.ci + ci) * g.kd * g.kh * g.kw;
            for (int kz = 0; kz < g.kd; kz++) {
                int tz = iz + g.pd - kz, oz = tz / g.stride;
                if (tz < 0 || tz % g.stride || oz >= g.od)
                    continue;
                for (int ky = 0; ky < g.kh; ky++) {
                    int ty = iy + g.ph - ky, oy = ty / g.stride;
                    if (ty < 0 || ty % g.stride || oy >= g.oh)
                        continue;
                    for (int kx = 0; kx < g.kw; kx++) {
                        int tx = ix + g.pw - kx, ox = tx / g.stride;
                        if (tx >= 0 && tx % g.stride == 0 && ox < g.ow)
                            acc += ws[(kz * g.kh + ky) * g.kw + kx] *
                                   ds[((size_t)oz * g.oh + oy) * g.ow + ox];
                    }
                }
            }
        }
        dx[i] = acc;
    }
}

/* dw[co][ci][k] = sum over n and output positions o of dy[n][co][o] x[n][ci][o s + k - p].
 * Block (pair, j), pair = co C_in + ci, adds every gridDim.y-th chunk of the positions, all the
 * taps at once in registers (dy read once a position), and writes one partial a tap:
 * partials[(pair taps + tap) gridDim.y + j]; k_segment_sums adds them in a fixed order. */
static __global__ void k_direct_backward_filter(conv_dims g, const float *__restrict__ x,
                                                const float *__restrict__ dy,
                                                float *__restrict__ partials)
{
    int pair = blockIdx.x, co = pair / g.ci, ci = pair % g.ci, split = gridDim.y;
    int taps = g.kd * g.kh * g.kw;
    size_t positions = (size_t)g.n * g.od * g.oh * g.ow;
    float acc[KMAX * KMAX * KMAX];
#pragma unroll
    for (int t = 0; t < KMAX * KMAX * KMAX; t++)
        acc[t] = 0.0f;
    for (size_t p = (size_t)blockIdx.y * blockDim.x + threadIdx.x; p < positions;
         p += (size_t)split * blockDim.x) {
        int ox = (int)(p % g.ow), oy = (int)(p / g.ow % g.oh), oz = (int)(p / g.ow / g.oh % g.od);
        int n = (int)(p / ((size_t)g.ow * g.oh * g.od));
        float d = dy[(((size_t)n * g.co + co) * g.od + oz) * g.oh * g.ow + (size_t)oy * g.ow + ox];
        const float *xs = x + ((size_t)n * g.ci + ci) * g.d * g.h * g.w;
#pragma unroll
        for (int kz = 0; kz < KMAX; kz++) {
            int iz = oz * g.stride - g.pd + kz;
#pragma unroll
            for (int ky = 0; ky < KMAX; ky++) {
                int iy = oy * g.stride - g.ph + ky;
#pragma unroll
                for (int kx = 0; kx < KMAX; kx++) {
                    int ix = ox * g.stride - g.pw + kx;
                    if (kz < g.kd && ky < g.kh && kx < g.kw && iz >= 0 && iz < g.d && iy >= 0 &&
                        iy < g.h && ix >= 0 && ix < g.w)
                        acc[(kz * KMAX + ky) * KMAX + kx] += d * xs[((size_t)iz * g.h + iy) * g.w + ix];
                }
            }
        }
    }
#pragma unroll
    for (int kz = 0; kz < KMAX; kz++)
#pragma unroll
        for (int ky = 0; ky < KMAX; ky++)
#pragma unroll
            for (int kx = 0; kx < KMAX; kx++) {
                if (kz >= g.kd || ky >= g.kh || kx >= g.kw) /* the same for every thread */
                    continue;
                float v = block_sum(acc[(kz * KMAX + ky) * KMAX + kx]);
                if (threadIdx.x == 0)
                    partials[((size_t)pair * taps + (kz * g.kh + ky) * g.kw + kx) * split +
                             blockIdx.y] = v;
            }
}

static void setup(lib_conv3d *cc, const int x_dims[5], int c_out, const int k[3],
                  const int pad[3], int stride, const float *x, const float *w, float *y,
                  float *dy, float *dx, float *dw)
{
    (void)x, (void)w, (void)y, (void)dy, (void)dx, (void)dw; /* nothing to time */
    geometry(cc, x_dims, c_out, k, pad, stride);
    for (int i = 0; i < 3; i++)
        if (k[i] > KMAX)
            die(1, "conv: the direct kernels (a build without cuDNN) take kernels up to %d, not %d",
                KMAX, k[i]);
    cc->backend = "direct";
    cc->fwd_algo = cc->dx_algo = cc->dw_algo = -1;
    cc->fwd_det = cc->dx_det = cc->dw_det = 1;
    int sms = 0, pairs = c_out * x_dims[1], taps = k[0] * k[1] * k[2];
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cc->sm_count = sms;
    /* about four blocks an SM in the weight gradient, none with fewer than 2048 positions */
    long long positions = (long long)elems(cc->y_dims) / c_out;
    long long split = (4LL * sms + pairs - 1) / pairs, most = (positions + 2047) / 2048;
    cc->dw_split = (int)(split < most ? split : most);
    if (cc->dw_split < 1)
        cc->dw_split = 1;
    int channels = c_out > x_dims[1] ? c_out : x_dims[1];
    size_t dw_part = (size_t)pairs * taps * cc->dw_split, b_part = (size_t)channels * SUM_BLOCKS;
    cc->partials = (float *)gpu_alloc(sizeof(float) * (dw_part > b_part ? dw_part : b_part),
                                      "the direct conv's partial sums");
}

/* the direct forward reads any layout: setup's geometry and grids, channels last */
static void setup_nhwc(lib_conv3d *cc, const int x_dims[5], int c_out, const int k[3],
                       const int pad[3], int stride, const float *x, const float *w, float *y)
{
    setup(cc, x_dims, c_out, k, pad, stride, x, w, y, NULL, NULL, NULL);
    cc->nhwc = 1;
}

static int blocks_for(const lib_conv3d *cc, size_t n)
{
    return grid_for((long long)n, DIRECT_BLOCK, cc->sm_count);
}

void lib_conv3d_forward(const lib_conv3d *cc, const float *x, const float *w, const float *bias,
                        float *y)
{
    k_direct_forward<<<blocks_for(cc, elems(cc->y_dims)), DIRECT_BLOCK>>>(dims_of(cc), x, w, bias, y);
    LAUNCH_CHECK();
    direct_calls++;
}

void lib_conv3d_backward_data(const lib_conv3d *cc, const float *w, const float *dy, float *dx)
{
    forward_only(cc, "the data gradient");
    k_direct_backward_data<<<blocks_for(cc, elems(cc->x_dims)), DIRECT_BLOCK>>>(dims_of(cc), w, dy,
                                                                            NULL, dx);
    LAUNCH_CHECK();
    direct_calls++;
}

void lib_conv3d_backward_filter(const lib_conv3d *cc, const float *x, const float *dy, float *dw)
{
    forward_only(cc, "the weight gradient");
    conv_dims g = dims_of(cc);
    int taps = g.kd * g.kh * g.kw;
    k_direct_backward_filter<<<dim3(g.co * g.ci, cc->dw_split), DIRECT_BLOCK>>>(g, x, dy,
                                                                                cc->partials);
    LAUNCH_CHECK();
    k_segment_sums<<<g.co * g.ci * taps, 64>>>(cc->partials, NULL, cc->dw_split, dw);
    LAUNCH_CHECK();
    direct_calls++;
}

/* out[c] = the sum of an N x C x S tensor's channel c: reduce.cuh's two stages */
static void channel_sums(float *partials, const float *t, int n, int c, int s, float *out)
{
    k_channel_sums<<<dim3(SUM_BLOCKS, c), DIRECT_BLOCK>>>(t, NULL, partials, n, s);
    LAUNCH_CHECK();
    k_segment_sums<<<c, 64>>>(partials, NULL, SUM_BLOCKS, out);
    LAUNCH_CHECK();
    direct_calls++;
}

void lib_conv3d_backward_bias(const lib_conv3d *cc, const float *dy, float *dbias)
{
    forward_only(cc, "the bias gradient");
    const int *y = cc->y_dims;
    channel_sums(cc->partials, dy, y[0], y[1], y[2] * y[3] * y[4], dbias);
}

void lib_conv_transpose3d_forward(const lib_conv3d *cc, const float *w, const float *in,
                                  const float *bias, float *out)
{
    forward_only(cc, "the transposed view");
    k_direct_backward_data<<<blocks_for(cc, elems(cc->x_dims)), DIRECT_BLOCK>>>(dims_of(cc), w, in,
                                                                            bias, out);
    LAUNCH_CHECK();
    direct_calls++;
}

void lib_conv_transpose3d_backward_bias(const lib_conv3d *cc, const float *dout, float *dbias)
{
    forward_only(cc, "the transposed view");
    const int *x = cc->x_dims;
    channel_sums(cc->partials, dout, x[0], x[1], x[2] * x[3] * x[4], dbias);
}

void lib_conv3d_destroy(lib_conv3d *cc)
{
    if (cc->partials)
        CUDA_CHECK(cudaFree(cc->partials));
    cc->partials = NULL;
}
#endif
