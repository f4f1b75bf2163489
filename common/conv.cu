/* conv.cu: the library convolution, cuDNN's or the direct kernels. See conv.h for what each
 * function promises. */
#include "conv.h"

#include <stdlib.h>
#include <string.h>

#include "reduce.cuh"

#if HAVE_CUDNN
#include <cub/device/device_segmented_reduce.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/permutation_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#endif

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
    if (cc->tf32)
        die(1, "conv: %s of a TF32 conv: lib_conv3d_setup_tf32 sets up the forward only", what);
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

/* ---- the graph (backend) API: a convolution as a one-operation graph, its engines by measurement
 * cuDNN documentation, "Graph API" and "Backend Descriptor Types": a tensor, convolution and
 * operation descriptor make an operation graph; the engine heuristics (mode A, then the fallback
 * list) propose engine configurations; each that finalizes as an execution plan within the
 * workspace budget is run and timed on the caller's buffers, and the fastest is kept, as PyTorch
 * does with torch.backends.cudnn.benchmark = True. The legacy cudnnFind...Ex offers far fewer
 * engines: at chapter 2's shape its best weight gradient took 57 ms where this search finds the
 * 18 ms engine PyTorch runs (H100, CONV_FIND_LOG=1, 2026-11-23). */

typedef cudnnBackendDescriptor_t bdesc;
enum { UID_X = 1, UID_W, UID_Y };   /* the tensors' unique ids in every graph and variant pack */
#define WORKSPACE_BUDGET ((int64_t)1 << 31) /* 2 GiB: engines that ask for more are left out */
#define MAX_CANDIDATES 24           /* engine configurations timed a direction, at most */
static const char *const dir_name[3] = {"forward", "backward data", "backward filter"};

static bdesc bd_make(cudnnBackendDescriptorType_t t)
{
    bdesc d;
    CUDNN_CHECK(cudnnBackendCreateDescriptor(t, &d));
    return d;
}
#define BD_SET(d, attr, type, n, p) CUDNN_CHECK(cudnnBackendSetAttribute(d, attr, type, n, p))

/* CONV_FIND_LOG=1 in the environment: every engine configuration each search considered, to
 * stderr (its engine number, notes, workspace and time, or why it was left out). A diagnostic
 * for comparing the library baseline with PyTorch's choices; off by default. */
static int find_log(void)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("CONV_FIND_LOG");
        on = e && *e && *e != '0';
    }
    return on;
}

/* a float tensor: dims and strides in elements, 16-byte aligned (execute checks the pointers) */
static bdesc tensor_desc(int64_t uid, int nd, const int64_t *dims, const int64_t *strides)
{
    bdesc t = bd_make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    cudnnDataType_t f = CUDNN_DATA_FLOAT;
    int64_t align = 16;
    BD_SET(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
    BD_SET(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, nd, dims);
    BD_SET(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, nd, strides);
    BD_SET(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    BD_SET(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    CUDNN_CHECK(cudnnBackendFinalize(t));
    return t;
}

/* dims of x, w, y as cuDNN sees them (PyTorch's shapes; a depth-1 conv with a 1 x k x k kernel
 * is a true 2-D conv on 4-D tensors, as PyTorch hands Conv2d to cuDNN) and their strides:
 * packed NC(D)HW, or channels last (NHWC, the filter KRSC) */
typedef struct {
    int nd;                                 /* 4 or 5 */
    int64_t x[5], xs[5], w[5], ws[5], y[5], ys[5];
} graph_dims;

static void strides_of(const int64_t *dims, int nd, int channels_last, int64_t *s)
{
    s[nd - 1] = 1;
    for (int i = nd - 2; i >= 0; i--)
        s[i] = s[i + 1] * dims[i + 1];
    if (channels_last) { /* C fastest, then W, H, (D), N */
        s[1] = 1;
        int64_t st = dims[1];
        for (int i = nd - 1; i >= 2; i--)
            s[i] = st, st *= dims[i];
        s[0] = st;
    }
}

static graph_dims dims_for(const lib_conv3d *cc)
{
    graph_dims g;
    int two_d = cc->x_dims[2] == 1 && cc->k[0] == 1 && cc->pad[0] == 0;
    g.nd = two_d ? 4 : 5;
    for (int i = 0, j = 0; i < 5; i++) {
        if (two_d && i == 2)
            continue; /* drop the depth */
        g.x[j] = cc->x_dims[i];
        g.y[j] = cc->y_dims[i];
        g.w[j] = i == 0 ? cc->y_dims[1] : i == 1 ? cc->x_dims[1] : cc->k[i - 2];
        j++;
    }
    strides_of(g.x, g.nd, cc->nhwc, g.xs);
    strides_of(g.y, g.nd, cc->nhwc, g.ys);
    strides_of(g.w, g.nd, cc->nhwc, g.ws);
    return g;
}

/* the operation graph of one direction: forward (x, w -> y), backward data (w, dy -> dx) or
 * backward filter (x, dy -> dw); the tensors keep the uids of x, w and y */
static bdesc op_graph(const lib_conv3d *cc, int dir)
{
    graph_dims g = dims_for(cc);
    int64_t sp = g.nd - 2, dil[3] = {1, 1, 1}, str[3], pad[3];
    for (int i = 0; i < sp; i++)
        str[i] = cc->stride, pad[i] = cc->pad[3 - sp + i];
    bdesc x = tensor_desc(UID_X, g.nd, g.x, g.xs), w = tensor_desc(UID_W, g.nd, g.w, g.ws);
    bdesc y = tensor_desc(UID_Y, g.nd, g.y, g.ys);
    bdesc conv = bd_make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    BD_SET(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    BD_SET(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    BD_SET(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sp);
    BD_SET(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, sp, dil);
    BD_SET(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, sp, str);
    BD_SET(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, sp, pad);
    BD_SET(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, sp, pad);
    CUDNN_CHECK(cudnnBackendFinalize(conv));
    static const cudnnBackendDescriptorType_t kind[3] = {
        CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
    /* each direction's names for (x, w, y, conv, alpha, beta) */
    static const cudnnBackendAttributeName_t at[3][6] = {
        {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA}};
    bdesc op = bd_make(kind[dir]);
    float alpha = 1.0f, beta = 0.0f;
    BD_SET(op, at[dir][0], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    BD_SET(op, at[dir][1], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
    BD_SET(op, at[dir][2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    BD_SET(op, at[dir][3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
    BD_SET(op, at[dir][4], CUDNN_TYPE_FLOAT, 1, &alpha);
    BD_SET(op, at[dir][5], CUDNN_TYPE_FLOAT, 1, &beta);
    CUDNN_CHECK(cudnnBackendFinalize(op));
    bdesc graph = bd_make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    cudnnHandle_t h = cc->handle;
    BD_SET(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op);
    BD_SET(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    CUDNN_CHECK(cudnnBackendFinalize(graph));
    cudnnBackendDestroyDescriptor(op);
    cudnnBackendDestroyDescriptor(conv);
    cudnnBackendDestroyDescriptor(x);
    cudnnBackendDestroyDescriptor(w);
    cudnnBackendDestroyDescriptor(y);
    return graph;
}

typedef struct {
    bdesc plan;
    int64_t workspace, engine;
    int det;
    float ms;
} candidate;

/* an engine configuration's engine number, whether it is deterministic and its numerical notes
 * (names, for the log); 0 when it is fp32 as PyTorch runs it with allow_tf32 = False, -1 when it
 * uses tensor cores or down-converts its inputs (PyTorch's filter, filterEngineConfigs in
 * aten/src/ATen/native/cudnn/Conv_v8.cpp, which keeps reduced-precision reductions too); with
 * tf32 (lib_conv3d_setup_tf32), 1 when it uses tensor cores, -2 when it reduces in reduced
 * precision, else 0 */
static int engine_info(bdesc cfg, int tf32, int64_t *engine, int *det, char *names, size_t size)
{
    static const char *const note_name[CUDNN_NUMERICAL_NOTE_TYPE_COUNT] = {
        "tensor cores", "down-converted inputs", "reduced-precision reduction", "FFT",
        "nondeterministic", "Winograd", "Winograd 4x4", "Winograd 6x6", "Winograd 13x13",
        "strict NaN propagation"};
    bdesc eng = bd_make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t n = 0;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    CUDNN_CHECK(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng));
    CUDNN_CHECK(cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                         &n, engine));
    CUDNN_CHECK(cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                         CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT,
                                         &n, notes));
    cudnnBackendDestroyDescriptor(eng);
    int ok = 0;
    size_t used = 0;
    *det = 1;
    names[0] = '\0';
    for (int64_t i = 0; i < n; i++) {
        if (!tf32 && (notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE ||
                      notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS))
            ok = -1;
        if (tf32 && notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION)
            ok = -2;
        if (tf32 && notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE && ok == 0)
            ok = 1;
        if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)
            *det = 0;
        if ((int)notes[i] >= 0 && notes[i] < CUDNN_NUMERICAL_NOTE_TYPE_COUNT && used < size)
            used += (size_t)snprintf(names + used, size - used, "%s%s", used ? ", " : "",
                                     note_name[notes[i]]);
    }
    return ok;
}

/* the fp32 execution plans of a graph's engine configurations from the heuristics' mode A and
 * then the fallback list, within the workspace budget, at most MAX_CANDIDATES */
static int candidates(const lib_conv3d *cc, bdesc graph, int dir, candidate *out)
{
    static const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    int found = 0;
    for (int m = 0; m < 2; m++) {
        bdesc heur = bd_make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        BD_SET(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
        BD_SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m]);
        CUDNN_CHECK(cudnnBackendFinalize(heur));
        int64_t count = 0;
        CUDNN_CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL));
        bdesc *cfg = (bdesc *)malloc(sizeof(bdesc) * (count ? count : 1));
        for (int64_t i = 0; i < count; i++)
            cfg[i] = bd_make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        CUDNN_CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                             CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count, cfg));
        for (int64_t i = 0; i < count; i++) {
            candidate c = {0};
            char notes[160];
            int fp32 = engine_info(cfg[i], cc->tf32, &c.engine, &c.det, notes, sizeof notes);
            const char *why = NULL;
            if (fp32 < 0 || (cc->tf32 && fp32 != 1))
                why = !cc->tf32 ? "tensor cores or down-converted inputs"
                      : fp32 < 0 ? "reduced-precision reduction" : "no tensor cores";
            if (!why) {
                c.plan = bd_make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
                cudnnHandle_t h = cc->handle;
                BD_SET(c.plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
                BD_SET(c.plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
                int64_t n = 0;
                if (cudnnBackendFinalize(c.plan) != CUDNN_STATUS_SUCCESS)
                    why = "no plan for this graph";
                else
                    CUDNN_CHECK(cudnnBackendGetAttribute(c.plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                         CUDNN_TYPE_INT64, 1, &n, &c.workspace));
                if (!why && c.workspace > WORKSPACE_BUDGET)
                    why = "workspace above the 2 GiB budget";
                if (!why && found == MAX_CANDIDATES)
                    why = "beyond the candidates timed";
                if (why)
                    cudnnBackendDestroyDescriptor(c.plan);
            }
            if (find_log())
                fprintf(stderr, "  %s engine %lld (%s list; notes: %s): %s%s, workspace %lld B\n",
                        dir_name[dir], (long long)c.engine, m ? "fallback" : "heuristics",
                        notes[0] ? notes : "none", why ? "left out: " : "candidate",
                        why ? why : "", (long long)c.workspace);
            if (!why)
                out[found++] = c;
            cudnnBackendDestroyDescriptor(cfg[i]);
        }
        free(cfg);
        cudnnBackendDestroyDescriptor(heur);
    }
    return found;
}

/* runs plan with x, w and y (as uids; for a backward direction, w and dy or x and dy) */
static cudnnStatus_t execute(const lib_conv3d *cc, bdesc plan, const void *x, const void *w,
                             const void *y)
{
    if (((uintptr_t)x | (uintptr_t)w | (uintptr_t)y) % 16)
        die(1, "conv: a tensor not 16-byte aligned (cuDNN's plans were built for 16)");
    bdesc pack = bd_make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    int64_t uids[3] = {UID_X, UID_W, UID_Y};
    void *ptrs[3] = {(void *)x, (void *)w, (void *)y}, *ws = cc->workspace;
    BD_SET(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
    BD_SET(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
    BD_SET(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    CUDNN_CHECK(cudnnBackendFinalize(pack));
    cudnnStatus_t st = cudnnBackendExecute(cc->handle, plan, pack);
    cudnnBackendDestroyDescriptor(pack);
    return st;
}

/* a zeroed workspace of `need` bytes: initcheck flags cuDNN reading workspace it did not write */
static void workspace_alloc(lib_conv3d *cc, size_t need)
{
    if (cc->workspace)
        CUDA_CHECK(cudaFree(cc->workspace));
    cc->workspace_bytes = need;
    cc->workspace = need ? gpu_alloc(need, "cuDNN workspace") : NULL;
    if (need)
        CUDA_CHECK(cudaMemset(cc->workspace, 0, need));
}

/* the fastest of a candidate's runs: one, and three more unless it is 4x slower than the best */
static float time_plan(const lib_conv3d *cc, candidate *c, float best, const void *x,
                       const void *w, const void *y)
{
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    float ms = -1.0f;
    for (int rep = 0; rep < 4; rep++) {
        CUDA_CHECK(cudaEventRecord(e0));
        if (execute(cc, c->plan, x, w, y) != CUDNN_STATUS_SUCCESS) {
            ms = -1.0f;
            break;
        }
        CUDA_CHECK(cudaEventRecord(e1));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float t;
        CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
        ms = ms < 0 || t < ms ? t : ms;
        if (rep == 0 && best > 0 && t > 4 * best)
            break;
    }
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    return ms;
}

/* chooses cc->plan[dir] for each of the first `dirs` directions by timing every candidate on
 * the given buffers (ptrs[dir] = the x, w, y uids' pointers), then keeps a workspace as large as
 * the chosen plans need */
static void search(lib_conv3d *cc, int dirs, const void *const ptrs[3][3])
{
    static const char *const what[3] = {"the conv", "the conv's data gradient",
                                        "the conv's weight gradient"};
    candidate *cand[3];
    int found[3];
    int64_t need = 0;
    for (int d = 0; d < dirs; d++) {
        cand[d] = (candidate *)malloc(sizeof(candidate) * MAX_CANDIDATES);
        bdesc graph = op_graph(cc, d);
        if (find_log()) {
            graph_dims g = dims_for(cc);
            fprintf(stderr, "cuDNN %s, x %lldx%lldx%lld..., %d-D tensors%s:\n", dir_name[d],
                    (long long)g.x[0], (long long)g.x[1], (long long)g.x[2], g.nd,
                    cc->nhwc ? ", channels last" : "");
        }
        found[d] = candidates(cc, graph, d, cand[d]);
        cudnnBackendDestroyDescriptor(graph);
        if (!found[d] && cc->tf32) { /* lib_conv3d_setup_tf32 says so to its caller */
            free(cand[d]);
            return;
        }
        if (!found[d])
            die(1, "cuDNN has no fp32 (non-tensor-core) engine for %s", what[d]);
        for (int i = 0; i < found[d]; i++)
            need = cand[d][i].workspace > need ? cand[d][i].workspace : need;
    }
    workspace_alloc(cc, (size_t)need);
    int64_t keep = 0;
    for (int d = 0; d < dirs; d++) {
        int best = -1;
        for (int i = 0; i < found[d]; i++) {
            candidate *c = &cand[d][i];
            c->ms = time_plan(cc, c, best < 0 ? -1.0f : cand[d][best].ms, ptrs[d][0], ptrs[d][1],
                              ptrs[d][2]);
            if (find_log())
                fprintf(stderr, "  %s engine %lld: %.3f ms%s, %s, workspace %lld B\n",
                        dir_name[d], (long long)c->engine, c->ms,
                        c->ms < 0 ? " (failed to run)" : "",
                        c->det ? "deterministic" : "nondeterministic", (long long)c->workspace);
            if (c->ms >= 0 && (best < 0 || c->ms < cand[d][best].ms))
                best = i;
        }
        if (best < 0)
            die(1, "cuDNN: no fp32 engine for %s ran", what[d]);
        for (int i = 0; i < found[d]; i++)
            if (i != best)
                cudnnBackendDestroyDescriptor(cand[d][i].plan);
        cc->plan[d] = cand[d][best].plan;
        int engine = (int)cand[d][best].engine, det = cand[d][best].det;
        if (d == 0)
            cc->fwd_algo = engine, cc->fwd_det = det;
        else if (d == 1)
            cc->dx_algo = engine, cc->dx_det = det;
        else
            cc->dw_algo = engine, cc->dw_det = det;
        keep = cand[d][best].workspace > keep ? cand[d][best].workspace : keep;
        free(cand[d]);
    }
    workspace_alloc(cc, (size_t)keep);
}

/* the legacy tensor descriptors the bias adds use (cudnnAddTensor) */
static void create_descriptors(lib_conv3d *cc)
{
    CUDNN_CHECK(cudnnCreate(&cc->handle));
    CUDNN_CHECK(cudnnSetStream(cc->handle, 0));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&cc->x_desc));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&cc->y_desc));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&cc->b_desc));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&cc->xb_desc));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&cc->yflat_desc));
}

/* ---- the bias gradients: CUB's segmented sums (PyTorch sums them with its own reduction, not
 * cuDNN's cudnnConvolutionBackwardBias, which took 63 ms at chapter 1's shape where a sum at the
 * copy ceiling takes 0.35: H100, 2026-11-22). CUB documentation, "cub::DeviceSegmentedReduce". */
struct times_len { /* segment i starts at i len */
    long long len;
    __host__ __device__ long long operator()(long long i) const { return i * len; }
};
struct channel_major { /* the i-th of C N partial sums [n][c], read channel by channel */
    long long n, c;
    __host__ __device__ long long operator()(long long i) const { return i % n * c + i / n; }
};

/* out[c] = the sum of an N x C x S tensor's channel c (NCDHW): the N C rows of S, then each
 * channel's N row sums; temp == NULL asks for the bytes of temporary storage, as CUB does */
static size_t channel_sums(void *temp, size_t bytes, float *partials, const float *t, long long n,
                           long long c, long long s, float *out)
{
    thrust::counting_iterator<long long> i0(0);
    auto row = thrust::make_transform_iterator(i0, times_len{s});
    auto seg = thrust::make_transform_iterator(i0, times_len{n});
    auto by_channel = thrust::make_permutation_iterator(
        partials, thrust::make_transform_iterator(i0, channel_major{n, c}));
    size_t b1 = 0, b2 = 0;
    if (!temp) {
        CUDA_CHECK(cub::DeviceSegmentedReduce::Sum(NULL, b1, t, partials, n * c, row, row + 1));
        CUDA_CHECK(cub::DeviceSegmentedReduce::Sum(NULL, b2, by_channel, out, c, seg, seg + 1));
        return b1 > b2 ? b1 : b2;
    }
    CUDA_CHECK(cub::DeviceSegmentedReduce::Sum(temp, bytes, t, partials, n * c, row, row + 1));
    CUDA_CHECK(cub::DeviceSegmentedReduce::Sum(temp, bytes, by_channel, out, c, seg, seg + 1));
    return bytes;
}

/* CUB's storage for both bias gradients: the conv's (y's channels) and the transposed view's */
static void sums_alloc(lib_conv3d *cc)
{
    const int *x = cc->x_dims, *y = cc->y_dims;
    long long sx = (long long)x[2] * x[3] * x[4], sy = (long long)y[2] * y[3] * y[4];
    size_t bx = channel_sums(NULL, 0, NULL, NULL, x[0], x[1], sx, NULL);
    size_t by = channel_sums(NULL, 0, NULL, NULL, y[0], y[1], sy, NULL);
    cc->sum_bytes = bx > by ? bx : by;
    cc->sum_temp = gpu_alloc(cc->sum_bytes ? cc->sum_bytes : 1, "CUB's temporary storage");
    int rows = x[0] * (x[1] > y[1] ? x[1] : y[1]);
    cc->partials = (float *)gpu_alloc(sizeof(float) * rows, "the bias gradients' row sums");
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
    create_descriptors(cc);
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(cc->x_desc, CUDNN_DATA_FLOAT, 5, xd, xs));
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(cc->y_desc, CUDNN_DATA_FLOAT, 5, yd, ys));
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(cc->b_desc, CUDNN_DATA_FLOAT, 5, bd, bs));
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(cc->xb_desc, CUDNN_DATA_FLOAT, 5, xbd, xbs));
    CUDA_CHECK(cudaMemset(dy, 0, sizeof(float) * elems(yd)));
    const void *const ptrs[3][3] = {{x, w, y}, {dx, w, dy}, {x, dw, dy}};
    search(cc, 3, ptrs);
    sums_alloc(cc);
}

/* The forward in TF32 (conv.h): the same search over the engines with tensor cores, less those
 * with reduced-precision reductions (PyTorch's filter with allow_tf32 = True, as above) */
int lib_conv3d_setup_tf32(lib_conv3d *cc, const int x_dims[5], int c_out, int k, int pad,
                          int stride, const float *x, const float *w, float *y)
{
    int kk[3] = {k, k, k}, pp[3] = {pad, pad, pad};
    geometry(cc, x_dims, c_out, kk, pp, stride);
    cc->backend = "cuDNN";
    cc->tf32 = 1;
    const int *yd = cc->y_dims;
    int ys[5] = {yd[1] * yd[2] * yd[3] * yd[4], yd[2] * yd[3] * yd[4], yd[3] * yd[4], yd[4], 1};
    int bd[5] = {1, c_out, 1, 1, 1}, bs[5] = {c_out, 1, 1, 1, 1};
    create_descriptors(cc);
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(cc->y_desc, CUDNN_DATA_FLOAT, 5, yd, ys));
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(cc->b_desc, CUDNN_DATA_FLOAT, 5, bd, bs));
    const void *const ptrs[3][3] = {{x, w, y}, {NULL, NULL, NULL}, {NULL, NULL, NULL}};
    search(cc, 1, ptrs);
    cc->dx_algo = cc->dw_algo = -1;
    return cc->plan[0] != NULL;
}

/* A true 2-D conv, channels last: x, y NHWC and the filter KRSC (dims_for's strides). The bias
 * add sees y as an NCHW tensor (N OH OW) x C_out x 1 x 1, the same bytes, where adding a
 * 1 x C_out x 1 x 1 bias is cudnnAddTensor's ordinary broadcast. */
static void setup_nhwc(lib_conv3d *cc, const int x_dims[5], int c_out, const int k[3],
                       const int pad[3], int stride, const float *x, const float *w, float *y)
{
    geometry(cc, x_dims, c_out, k, pad, stride);
    cc->backend = "cuDNN";
    cc->nhwc = 1;
    const int *yd = cc->y_dims;
    create_descriptors(cc);
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(cc->yflat_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                           yd[0] * yd[3] * yd[4], yd[1], 1, 1));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(cc->b_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                                           yd[1], 1, 1));
    const void *const ptrs[3][3] = {{x, w, y}, {NULL, NULL, NULL}, {NULL, NULL, NULL}};
    search(cc, 1, ptrs);
    cc->dx_algo = cc->dw_algo = -1;
}

void lib_conv3d_forward(const lib_conv3d *cc, const float *x, const float *w, const float *bias,
                        float *y)
{
    const float one = 1.0f;
    CUDNN_CHECK(execute(cc, cc->plan[0], x, w, y));
    if (bias)
        CUDNN_CHECK(cudnnAddTensor(cc->handle, &one, cc->b_desc, bias, &one,
                                   cc->nhwc ? cc->yflat_desc : cc->y_desc, y));
}

void lib_conv3d_backward_data(const lib_conv3d *cc, const float *w, const float *dy, float *dx)
{
    forward_only(cc, "the data gradient");
    CUDNN_CHECK(execute(cc, cc->plan[1], dx, w, dy));
}

void lib_conv3d_backward_filter(const lib_conv3d *cc, const float *x, const float *dy, float *dw)
{
    forward_only(cc, "the weight gradient");
    CUDNN_CHECK(execute(cc, cc->plan[2], x, dw, dy));
}

void lib_conv3d_backward_bias(const lib_conv3d *cc, const float *dy, float *dbias)
{
    forward_only(cc, "the bias gradient");
    const int *y = cc->y_dims;
    channel_sums(cc->sum_temp, cc->sum_bytes, cc->partials, dy, y[0], y[1],
                 (long long)y[2] * y[3] * y[4], dbias);
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
    const int *x = cc->x_dims;
    channel_sums(cc->sum_temp, cc->sum_bytes, cc->partials, dout, x[0], x[1],
                 (long long)x[2] * x[3] * x[4], dbias);
}

void lib_conv3d_destroy(lib_conv3d *cc)
{
    if (cc->workspace)
        CUDA_CHECK(cudaFree(cc->workspace));
    if (cc->sum_temp)
        CUDA_CHECK(cudaFree(cc->sum_temp));
    if (cc->partials)
        CUDA_CHECK(cudaFree(cc->partials));
    for (int d = 0; d < 3; d++)
        if (cc->plan[d])
            cudnnBackendDestroyDescriptor(cc->plan[d]);
    cudnnDestroyTensorDescriptor(cc->x_desc);
    cudnnDestroyTensorDescriptor(cc->y_desc);
    cudnnDestroyTensorDescriptor(cc->b_desc);
    cudnnDestroyTensorDescriptor(cc->xb_desc);
    cudnnDestroyTensorDescriptor(cc->yflat_desc);
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
