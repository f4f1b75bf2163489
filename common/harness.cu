/* harness.cu: the driver every chapter runs on. See harness.h for what it promises. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *const scope_name[N_SCOPES] = {"epilogue_fwd", "model_fwd", "epilogue_fwdbwd",
                                          "train_step", "stats"};

const char *hx_precision_name(int precision)
{
    return precision == HX_TF32 ? "tf32" : precision == HX_3XTF32 ? "3xtf32" : "fp32";
}

void hx_verdict_add(hx_verdict *out, const char *name, const verify_result *v)
{
    size_t len = strlen(out->detail);
    snprintf(out->detail + len, sizeof out->detail - len, "%s%s rel_l2 %.1e max_abs %.1e%s",
             len ? ", " : "", name, v->rel_l2, v->max_abs, v->pass ? "" : " FAILED");
    out->pass = out->pass && v->pass;
}

/* HX_TF32_TOL while run_verified checks a TF32 version's outputs, else 1 */
static double tol_factor = 1.0;

double hx_tol_factor(void) { return tol_factor; }

void hx_tf32_own_bounds(void) { tol_factor = 1.0; }

static verify_result bounded(const float *host, const double *ref, size_t n, hx_bound bound,
                             const double *abs_sum, double tol_rel, double tol)
{
    if (bound == HX_ROWS)
        die(1, "hx_check_output: HX_ROWS needs a row length (hx_check_pieces)");
    return bound == HX_SUM      ? verify_sum_f32(host, ref, abs_sum, n, tol)
           : bound == HX_SCALED ? verify_f32_scaled(host, ref, n, tol_rel, tol)
                                : verify_f32(host, ref, n, tol_rel, tol);
}

/* a TF32 version's output that failed fp32's tolerances, checked again at tol_factor times
 * them (loose): added to out, marked, when it passes there; returns loose.pass */
static int tf32_within(hx_verdict *out, const char *name, const verify_result *loose)
{
    if (!loose->pass)
        return 0;
    char marked[64];
    snprintf(marked, sizeof marked, "%s (over fp32's tolerance, within TF32's x%.0f)", name,
             tol_factor);
    hx_verdict_add(out, marked, loose);
    return 1;
}

verify_result hx_check_output(hx_verdict *out, const char *name, const float *dev, float *host,
                              size_t n, const double *ref, hx_bound bound, const double *abs_sum,
                              double tol_rel, double tol)
{
    CUDA_CHECK(cudaMemcpy(host, dev, sizeof(float) * n, cudaMemcpyDeviceToHost));
    verify_result r = bounded(host, ref, n, bound, abs_sum, tol_rel, tol);
    if (!r.pass && tol_factor > 1.0) {
        verify_result loose = bounded(host, ref, n, bound, abs_sum, tol_factor * tol_rel,
                                      tol_factor * tol);
        if (tf32_within(out, name, &loose))
            return loose;
    }
    hx_verdict_add(out, name, &r);
    return r;
}

void hx_check_conv_grads(hx_verdict *out, const float *const dev[3], float *const host[3],
                         const conv_grads *ref, hx_bound dx_bound, double tol_rel, double tol,
                         double tol_sum)
{
    int dx_sum = dx_bound == HX_SUM;
    if (dx_sum && !ref->dx_abs)
        die(1, "hx_check_conv_grads: HX_SUM for dx needs ref->dx_abs");
    hx_check_output(out, "dx", dev[0], host[0], ref->n_x, ref->dx, dx_bound,
                    dx_sum ? ref->dx_abs : NULL, dx_sum ? 0 : tol_rel, dx_sum ? tol_sum : tol);
    hx_check_output(out, "dw", dev[1], host[1], ref->n_w, ref->dw, HX_SUM, ref->dw_abs, 0,
                    tol_sum);
    hx_check_output(out, "dbias", dev[2], host[2], ref->n_bias, ref->dbias, HX_SUM,
                    ref->dbias_abs, 0, tol_sum);
}

/* hx_check_pieces' host buffers, grown when a call needs more and kept: an output of 268 M
 * floats is checked a few dozen times a run, and fresh buffers of that size would be faulted
 * in page by page at every check */
static struct {
    size_t cap;
    float *out;
    double *ref, *abs_sum;
} pieces;

static void pieces_room(size_t piece)
{
    if (piece <= pieces.cap)
        return;
    free(pieces.out), free(pieces.ref), free(pieces.abs_sum);
    pieces.out = (float *)host_alloc(sizeof(float) * piece);
    pieces.ref = (double *)host_alloc(sizeof(double) * piece);
    pieces.abs_sum = (double *)host_alloc(sizeof(double) * piece);
    pieces.cap = piece;
}

static verify_result pieces_pass(const float *dev, size_t n, size_t piece, size_t row_len,
                                 hx_bound bound, double tol_rel, double tol, hx_piece_ref fn,
                                 void *ctx, uint64_t *hash)
{
    static const verify_kind kind[] = {VERIFY_ABS, VERIFY_SCALED, VERIFY_SUM, VERIFY_ROWS};
    verify_stream vs;
    verify_stream_begin(&vs, kind[bound], n, row_len, tol_rel, tol);
    for (size_t first = 0; first < n; first += piece) {
        size_t len = n - first < piece ? n - first : piece;
        CUDA_CHECK(cudaMemcpy(pieces.out, dev + first, sizeof(float) * len, cudaMemcpyDeviceToHost));
        double *abs_sum = bound == HX_SUM ? pieces.abs_sum : NULL;
        fn(ctx, first, len, pieces.out, pieces.ref, abs_sum);
        verify_stream_add(&vs, pieces.out, pieces.ref, abs_sum, len);
        if (hash)
            *hash = hash_f32(*hash, pieces.out, len);
    }
    return verify_stream_end(&vs);
}

verify_result hx_check_pieces(hx_verdict *out, const char *name, const float *dev, size_t n,
                              size_t piece, size_t row_len, hx_bound bound, double tol_rel,
                              double tol, hx_piece_ref fn, void *ctx, uint64_t *hash)
{
    if (piece == 0 || (bound == HX_ROWS) != (row_len > 0) || (row_len && piece % row_len))
        die(1, "hx_check_pieces %s: pieces of %zu with rows of %zu (HX_ROWS needs whole rows, "
               "the others no row length)", name, piece, row_len);
    pieces_room(piece);
    verify_result r = pieces_pass(dev, n, piece, row_len, bound, tol_rel, tol, fn, ctx, hash);
    if (!r.pass && tol_factor > 1.0) {
        verify_result loose = pieces_pass(dev, n, piece, row_len, bound, tol_factor * tol_rel,
                                          tol_factor * tol, fn, ctx, NULL);
        if (tf32_within(out, name, &loose))
            return loose;
    }
    hx_verdict_add(out, name, &r);
    return r;
}

verify_result hx_check_stats(hx_verdict *out, const float *mean, const float *rstd, float *host,
                             double *scale, size_t n, const double *ref, double tol)
{
    CUDA_CHECK(cudaMemcpy(host, mean, sizeof(float) * n, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(host + n, rstd, sizeof(float) * n, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) {
        scale[i] = fabs(ref[i]) + 1.0 / ref[n + i]; /* |mean| + std */
        scale[n + i] = ref[n + i];
    }
    verify_result r = verify_sum_f32(host, ref, scale, 2 * n, tol);
    hx_verdict_add(out, "mean,rstd", &r);
    return r;
}

const char *hx_channels_problem(const int64_t *dims, int c_in)
{
    static char why[128];
    if (dims[1] == c_in)
        return NULL;
    snprintf(why, sizeof why, "this model has %d input channels, --shape says %lld", c_in,
             (long long)dims[1]);
    return why;
}

const char *hx_index_problem(double elems, const char *what)
{
    static char why[192];
    if (elems < 2147483647.0)
        return NULL;
    snprintf(why, sizeof why, "%s would have %.0f elements; this chapter indexes with 32-bit ints "
             "(at most 2^31 - 1): use a smaller batch", what, elems);
    return why;
}

/* ------------------------------------------------------------ versions and requirements */

/* --version accepts "v5", "b2", or "5" for "v5"; NULL when no version has that id */
static const hx_version *find_version(const hx_chapter *ch, const char *want)
{
    char id[16];
    snprintf(id, sizeof id, "%s%s", (want[0] >= '0' && want[0] <= '9') ? "v" : "", want);
    for (int i = 0; i < ch->n_versions; i++)
        if (strcmp(ch->versions[i].id, id) == 0)
            return &ch->versions[i];
    return NULL;
}

/* NULL if v can run here, else the one line that says why not. The build's code arch matters
 * as much as the GPU's: an sm_80 build runs on an H100 (its PTX is compiled there), but the
 * Hopper-only kernels were compiled as empty stubs. */
static const char *unavailable(const hx_version *v)
{
    static char why[256];
    if ((v->needs & NEEDS_CUDNN) && !HAVE_CUDNN)
        return NO_CUDNN;
    if (!(v->needs & NEEDS_SM90))
        return NULL;
    /* what the version uses of Hopper: wgmma's versions say so, not the clusters they may not use */
    const char *hopper = v->needs & NEEDS_SM90A ? "needs Hopper (sm_90a: wgmma)"
                                                : "needs Hopper (sm_90: clusters, TMA)";
    int major = 0, minor = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    if (major < 9) {
        snprintf(why, sizeof why, "%s; this GPU is sm_%d%d", hopper, major, minor);
        return why;
    }
    int arch = gpu_code_arch();
    if (arch < 90) {
        snprintf(why, sizeof why, "%s; this build's code is sm_%d (make ARCH=sm_90)", hopper,
                 arch);
        return why;
    }
    if ((v->needs & NEEDS_SM90A) && gpu_sm90a_problem(0, why, sizeof why))
        return why; /* gpu.cu's reason, as the chapters' C libraries give it */
    return NULL;
}

const char *hx_needs_problem(unsigned needs)
{
    hx_version v;
    memset(&v, 0, sizeof v);
    v.needs = needs;
    return unavailable(&v);
}

static void list_versions(const hx_chapter *ch)
{
    printf("chapter %s: %s\n", ch->number, ch->title);
    for (int i = 0; i < ch->n_versions; i++) {
        const hx_version *v = &ch->versions[i];
        printf("%-4s %-52s %-34s ", v->id, v->title, v->file ? v->file : "-");
        const char *sep = "";
        for (int s = 0; s < N_SCOPES; s++)
            if (v->scopes & SC(s)) {
                printf("%s%s", sep, scope_name[s]);
                sep = ",";
            }
        printf("%s%s%s%s\n", v->needs & NEEDS_SM90 ? "  (sm_90: clusters, TMA)" : "",
               v->needs & NEEDS_SM90A ? "  (sm_90a: wgmma)" : "",
               v->needs & NEEDS_CUDNN ? "  (cuDNN)" : "",
               v->precision == HX_TF32     ? "  (TF32)"
               : v->precision == HX_3XTF32 ? "  (3xTF32)"
                                           : "");
    }
}

static void shape_string(const hx_chapter *ch, const int64_t *dims, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < ch->shape_dims && n < len; i++)
        n += snprintf(buf + n, len - n, "%s%lld", i ? "x" : "", (long long)dims[i]);
}

/* ------------------------------------------------------------------ the library's ops alone */

static const char *op_chapter; /* the chapter and shape of the run whose notes are printing */
static char op_shape[64];
static int op_grads; /* whether that run has a version with a backward scope */

typedef struct {
    const lib_conv3d *cc;
    const hx_conv_bufs *b;
} op_ctx;

static void op_fwd(const void *p)
{
    const op_ctx *o = (const op_ctx *)p;
    if (o->b->transposed)
        lib_conv_transpose3d_forward(o->cc, o->b->w, o->b->in, o->b->bias, o->b->out);
    else
        lib_conv3d_forward(o->cc, o->b->in, o->b->w, o->b->bias, o->b->out);
}
static void op_dx(const void *p)
{
    const op_ctx *o = (const op_ctx *)p;
    if (o->b->transposed) /* the transposed conv's input gradient is the conv's forward */
        lib_conv3d_forward(o->cc, o->b->dout, o->b->w, NULL, o->b->din);
    else
        lib_conv3d_backward_data(o->cc, o->b->w, o->b->dout, o->b->din);
}
static void op_dw(const void *p)
{
    const op_ctx *o = (const op_ctx *)p;
    if (o->b->transposed) /* the conv's x is the transposed conv's output gradient */
        lib_conv3d_backward_filter(o->cc, o->b->dout, o->b->in, o->b->dw);
    else
        lib_conv3d_backward_filter(o->cc, o->b->in, o->b->dout, o->b->dw);
}
static void op_dbias(const void *p)
{
    const op_ctx *o = (const op_ctx *)p;
    if (o->b->transposed)
        lib_conv_transpose3d_backward_bias(o->cc, o->b->dout, o->b->dbias);
    else
        lib_conv3d_backward_bias(o->cc, o->b->dout, o->b->dbias);
}

/* a CSV line split in place at its commas (no field holds one): up to max fields, their count */
static int split_csv(char *line, char **field, int max)
{
    int k = 0;
    line[strcspn(line, "\r\n")] = '\0';
    for (char *p = line; k < max && p;) {
        field[k++] = p;
        if ((p = strchr(p, ',')))
            *p++ = '\0';
    }
    return k;
}

/* PyTorch eager's medians of the n ops at this chapter's shape on this GPU, in strict fp32
 * (ms[0][i]) and in PyTorch's default precision (ms[1][i]), -1 where none, from the first of this
 * GPU's data folders whose pytorch-chNN-ops.csv has any; *from: that file, or "" when none has.
 * Columns are found by their header names; a file without a precision column holds fp32 rows
 * (the only precision it was written in). */
static void pytorch_ops_ms(const device_info *dev, const char *const *op, int n, double ms[2][4],
                           char *from, size_t len)
{
    static const char *const suffix[2] = {"-mine", ""};
    static const char *const want[7] = {"gpu", "chapter", "version", "precision", "scope",
                                        "shape", "median_ms"};
    for (int d = 0; d < 2; d++) {
        snprintf(from, len, "data/%s%s/pytorch-ch%s-ops.csv", dev->tag, suffix[d], op_chapter);
        FILE *f = fopen(from, "r");
        if (!f)
            continue;
        int found = 0, col[7], nf;
        char line[1024], *field[64];
        for (int i = 0; i < n; i++)
            ms[0][i] = ms[1][i] = -1;
        nf = fgets(line, sizeof line, f) ? split_csv(line, field, 64) : 0;
        for (int j = 0; j < 7; j++) {
            col[j] = -1;
            for (int k = 0; k < nf; k++)
                if (!strcmp(field[k], want[j]))
                    col[j] = k;
        }
        int ok = 1;
        for (int j = 0; j < 7; j++)
            ok &= col[j] >= 0 || j == 3;
        while (ok && fgets(line, sizeof line, f)) {
            nf = split_csv(line, field, 64);
            int short_row = 0;
            for (int j = 0; j < 7; j++)
                short_row |= col[j] >= nf;
            if (short_row || strcmp(field[col[0]], dev->tag) ||
                strcmp(field[col[1]], op_chapter) || strcmp(field[col[2]], "eager") ||
                strcmp(field[col[5]], op_shape))
                continue;
            const char *prec = col[3] >= 0 ? field[col[3]] : "fp32";
            int p = !strcmp(prec, "fp32") ? 0 : !strcmp(prec, "default") ? 1 : -1;
            for (int i = 0; p >= 0 && i < n; i++)
                if (!strcmp(field[col[4]], op[i]))
                    ms[p][i] = atof(field[col[6]]), found = 1;
        }
        fclose(f);
        if (found)
            return;
    }
    from[0] = '\0';
}

int hx_conv_ops(const lib_conv3d *cc, const hx_conv_bufs *b, const device_info *dev, int reps,
                double ms[4])
{
    static const char *const op[4] = {"conv_fwd", "conv_dx", "conv_dw", "conv_dbias"};
    static launch_fn const fn[4] = {op_fwd, op_dx, op_dw, op_dbias};
    int two_d = cc->x_dims[2] == 1 && cc->k[0] == 1;
    const char *kind = b->transposed ? "ConvTranspose3d" : two_d ? "Conv2d" : "Conv3d";
    /* the transposed conv's forward is the conv's data gradient, its dx the conv's forward */
    int engine[4] = {b->transposed ? cc->dx_algo : cc->fwd_algo,
                     b->transposed ? cc->fwd_algo : cc->dx_algo, cc->dw_algo, -1};
    int det[4] = {b->transposed ? cc->dx_det : cc->fwd_det,
                  b->transposed ? cc->fwd_det : cc->dx_det, cc->dw_det, 1};
    for (int i = 0; ms && i < 4; i++)
        ms[i] = -1.0;
    if (strcmp(cc->backend, "cuDNN")) {
        printf("the library's %s and its gradients alone: skipped: %s\n", kind, NO_CUDNN);
        return op_grads;
    }
    op_ctx o = {cc, b};
    int n = op_grads ? 4 : 1;
    double py[2][4];
    char from[256];
    pytorch_ops_ms(dev, op, n, py, from, sizeof from);
    /* ours is fp32 (the library conv's engines filtered as PyTorch filters them with TF32 off:
     * common/conv.cu), so the ratio is against PyTorch's fp32;
     * its default precision (cuDNN may take TF32) is shown beside it */
    printf("the library's %s alone at %s, each op timed by itself beside PyTorch eager's:\n"
           "  op          what ran                                                   median ms"
           "  TFLOP/s  PyTorch fp32 ms  ours/PyTorch fp32  PyTorch default ms\n", kind, op_shape);
    for (int i = 0; i < n; i++) {
        timing t = gpu_time(fn[i], &o, reps);
        if (ms)
            ms[i] = t.median_ms;
        char what[96];
        if (i == 3)
            snprintf(what, sizeof what, "dbias: CUB segmented sums, deterministic");
        else
            snprintf(what, sizeof what, "%s%s: cuDNN engine %d, %s", i ? op[i] + 5 : kind,
                     i ? "" : " + bias", engine[i], det[i] ? "deterministic" : "nondeterministic");
        char tf[16] = "-", p32[16] = "-", ratio[16] = "-", pdef[16] = "-";
        if (i < 3 && b->flops > 0)
            snprintf(tf, sizeof tf, "%.1f", b->flops / (t.median_ms * 1e9));
        if (from[0] && py[0][i] > 0) {
            snprintf(p32, sizeof p32, "%.4f", py[0][i]);
            snprintf(ratio, sizeof ratio, "%.2f", t.median_ms / py[0][i]);
        }
        if (from[0] && py[1][i] > 0)
            snprintf(pdef, sizeof pdef, "%.4f", py[1][i]);
        printf("  %-11s %-58s %9.4f %8s %16s %18s %19s\n", op[i], what, t.median_ms, tf, p32,
               ratio, pdef);
    }
    if (from[0])
        printf("  (PyTorch: %s; eager, cudnn.benchmark on; fp32: TF32 off; default: "
               "cudnn.allow_tf32 on, as PyTorch ships)\n", from);
    else
        printf("  (PyTorch: no rows for this GPU and shape in data/%s[-mine]/pytorch-ch%s-ops.csv; "
               "make peers CH=N writes them)\n", dev->tag, op_chapter);
    return op_grads;
}

/* ------------------------------------------------------------------ one verified run */

/* what the last hx_not_written call named (NULL: none since the last reset) */
static const char *not_written_hint;

int hx_not_written(const char *solved_by)
{
    not_written_hint = solved_by ? solved_by : "a version of this chapter";
    return 1;
}

/* For an exercise version (id x1, x2, ...): NULL if its launcher runs kernels, else the version
 * that solves it, found by one launch of scope on a poisoned problem (the caller then verifies
 * as usual). NULL for any other version, with nothing run. */
static const char *probe_not_written(const hx_chapter *ch, problem *pb, const hx_version *v,
                                     int scope)
{
    not_written_hint = NULL;
    if (v->id[0] != 'x') /* only exercise versions (x1, x2, ...) can be unwritten */
        return NULL;
    ch->poison(pb, scope);
    v->launch(ch->ctx(pb), scope);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaDeviceSynchronize());
    return not_written_hint;
}

static void print_not_written(const hx_version *v, const char *hint)
{
    printf("%-8s not written yet: see the chapter's exercises (%s solves it)\n", v->id, hint);
}

static hx_verdict run_verified(const hx_chapter *ch, problem *pb, const hx_version *v, int scope)
{
    ch->poison(pb, scope);
    v->launch(ch->ctx(pb), scope);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaDeviceSynchronize());
    tol_factor = v->precision == HX_TF32 ? HX_TF32_TOL : 1.0;
    hx_verdict verdict = ch->verify(pb, scope);
    tol_factor = 1.0;
    return verdict;
}

typedef struct {
    const run_ctx *r;
    const hx_version *v;
    int scope;
} job;

static void run_job(const void *p)
{
    const job *j = (const job *)p;
    j->v->launch(j->r, j->scope);
}

/* -------------------------------------------------------------------------- --test */

/* every selected version in every scope of `scopes`, twice */
/* v->id is a word of the space-separated list (NULL: every version) */
static int listed(const char *list, const char *id)
{
    size_t n = strlen(id);
    for (const char *p = list; p && (p = strstr(p, id)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
            return 1;
    return !list;
}

/* the exercise versions found not written (reported once, then left out) */
static unsigned char not_written_seen[64];

static void check_versions(const hx_chapter *ch, problem *pb, const char *shape, const char *label,
                           unsigned scopes, const char *versions, const hx_version *only)
{
    for (int i = 0; i < ch->n_versions; i++) {
        const hx_version *v = &ch->versions[i];
        if ((only && v != only) || unavailable(v) || !listed(versions, v->id))
            continue;
        for (int s = 0; s < N_SCOPES; s++) {
            if (!(v->scopes & scopes & SC(s)) || (i < 64 && not_written_seen[i]))
                continue;
            const char *hint = probe_not_written(ch, pb, v, s);
            if (hint) {
                skip("%-4s not written yet: see the chapter's exercises (%s solves it)", v->id,
                     hint);
                if (i < 64)
                    not_written_seen[i] = 1;
                continue;
            }
            hx_verdict a = run_verified(ch, pb, v, s), b = run_verified(ch, pb, v, s);
            int same = !a.deterministic || a.hash == b.hash;
            check(a.pass && b.pass && same, "%-4s %-15s %-16s %-10s %s%s%s", v->id, scope_name[s],
                  shape, label, a.detail, b.pass ? "" : " (second run FAILED)",
                  same ? "" : " (differs between runs)");
        }
    }
}

/* The run's peaks: host memory (what a desktop must have) and device memory (sampled). */
static void print_memory(const device_info *dev)
{
    printf("memory: peak host resident set %.2f GB; peak device memory in use %.2f of %.2f GB "
           "(sampled after setup and after each version)\n",
           host_peak_bytes() / 1e9, gpu_mem_peak() / 1e9, dev->global_bytes / 1e9);
}

static void run_tests(const hx_chapter *ch, const cli_args *a, const int64_t *dims,
                      const hx_version *only)
{
    ch->cpu_checks(a->seed);
    if (gpu_count() == 0) {
        skip("GPU checks of chapter %s (every version on awkward shapes and extreme values): "
             "no CUDA device", ch->number);
        return;
    }
    device_info dev;
    device_info_get(&dev);
    for (int i = 0; i < ch->n_versions; i++) {
        const char *why = unavailable(&ch->versions[i]);
        if (why && (!only || only == &ch->versions[i]))
            skip("%s (every scope and test shape): %s", ch->versions[i].id, why);
    }
    int n_shapes = a->ndim ? 1 : ch->n_test_shapes;
    for (int t = 0; t < n_shapes; t++) {
        const int64_t *d = a->ndim ? dims : ch->test_shapes[t];
        char shape[64];
        shape_string(ch, d, shape, sizeof shape);
        problem *pb = ch->create(d, a->seed + (uint64_t)t, &dev);
        if (ch->shape_checks)
            ch->shape_checks(pb, t);
        check_versions(ch, pb, shape, "rand", ~0u, NULL, only);
        for (int k = 0; ch->cases && ch->cases[k].label; k++) {
            const char *why = ch->case_skip ? ch->case_skip(d, k) : NULL;
            if (why) {
                skip("every version, case %s on %s: %s", ch->cases[k].label, shape, why);
                continue;
            }
            ch->set_case(pb, k);
            check_versions(ch, pb, shape, ch->cases[k].label, ch->cases[k].scopes,
                           ch->cases[k].versions, only);
        }
        gpu_mem_sample();
        ch->destroy(pb);
    }
    print_memory(&dev);
    gpu_release();
}

/* ------------------------------------------------------------------ the timed run */

static int run_bench(const hx_chapter *ch, const cli_args *a, const int64_t *dims,
                     const hx_version *only)
{
    gpu_require_or_exit();
    device_info dev;
    device_info_get(&dev);
    char shape[64];
    shape_string(ch, dims, shape, sizeof shape);
    problem *pb = ch->create(dims, a->seed, &dev);
    gpu_mem_sample();
    if (ch->shape_checks) { /* e.g. the library conv the epilogues read, against the reference */
        ch->shape_checks(pb, -1);
        if (checks_failed())
            die(1, "the inputs of the versions are wrong: nothing to time");
    }
    report_ctx ctx = {dev.tag, dev.name, ch->number, shape, dev.copy_gbps, dev.fp32_tflops,
                      dev.sm_count, dev.l2_bytes / 1e6};
    size_t max_rows = (size_t)ch->n_versions * N_SCOPES;
    report_row *rows = (report_row *)calloc(max_rows, sizeof *rows);
    char(*marked)[128] = (char(*)[128])calloc(max_rows, sizeof *marked); /* CSV names */
    if (!rows || !marked)
        die(1, "out of host memory");
    int n_rows = 0, failed = 0, n_direct = 0;
    double bytes[N_SCOPES] = {0}, flops[N_SCOPES] = {0};
    ch->counts(pb, bytes, flops);
    printf("chapter %s: %s\n", ch->number, ch->title);
    report_header(stdout, &ctx);
    for (int i = 0; i < ch->n_versions; i++) {
        const hx_version *v = &ch->versions[i];
        if (only && v != only)
            continue;
        const char *why = unavailable(v);
        if (why) {
            printf("%-8s skipped: %s\n", v->id, why);
            continue;
        }
        for (int s = 0; s < N_SCOPES; s++) {
            if (!(v->scopes & SC(s)))
                continue;
            const char *hint = probe_not_written(ch, pb, v, s);
            if (hint) {
                print_not_written(v, hint);
                break;
            }
            job j = {ch->ctx(pb), v, s};
            long direct0 = lib_conv3d_direct_calls();
            hx_verdict before = run_verified(ch, pb, v, s);
            timing t = gpu_time(run_job, &j, a->reps);
            hx_verdict after = run_verified(ch, pb, v, s);
            gpu_mem_sample();
            report_row *row = &rows[n_rows];
            *row = (report_row){v->id, v->title, scope_name[s], t, bytes[s], flops[s],
                                hx_precision_name(v->precision)};
            if (v->precision == HX_TF32) { /* the name says so too, as the recorded rows do */
                snprintf(marked[n_rows], sizeof marked[n_rows], "%s [TF32]", v->title);
                row->name = marked[n_rows];
            }
            if (lib_conv3d_direct_calls() != direct0) { /* a slow stand-in ran: say so */
                char scope_marked[32];
                snprintf(scope_marked, sizeof scope_marked, "%s*", scope_name[s]);
                report_row shown = *row;
                shown.scope = scope_marked;
                report_print(stdout, &ctx, &shown);
                snprintf(marked[n_rows], sizeof marked[n_rows], "%s [direct conv; no cuDNN]",
                         v->title);
                row->name = marked[n_rows];
                n_direct++;
            } else {
                report_print(stdout, &ctx, row);
            }
            n_rows++;
            if (!before.pass || !after.pass) {
                failed = 1;
                printf("         ^ FAILED verification %s timing: %s\n",
                       before.pass ? "after" : "before", before.pass ? after.detail : before.detail);
            }
        }
    }
    if (n_direct)
        printf("* (scope): that row's conv ran common/conv.cu's direct kernels (a build without "
               "cuDNN): a plain stand-in, not the library baseline\n");
    op_chapter = ch->number;
    snprintf(op_shape, sizeof op_shape, "%s", shape);
    op_grads = !only || (only->scopes & (SC(SCOPE_EPI_FWDBWD) | SC(SCOPE_TRAIN)));
    if (ch->notes)
        ch->notes(pb, &dev, a->reps, only ? only->id : NULL);
    print_memory(&dev);
    if (a->csv && n_rows && report_csv(a->csv, &ctx, rows, n_rows))
        failed = 1;
    if (a->csv && n_rows)
        printf("%d rows written to %s (rows of this GPU, chapter and shape replaced)\n", n_rows,
               a->csv);
    if (a->dump_dir) {
        mkdir(a->dump_dir, 0777);
        ch->dump(pb, a->dump_dir, NULL, 0);
        for (int i = 0; i < ch->n_versions; i++) {
            const hx_version *v = &ch->versions[i];
            if ((only && v != only) || unavailable(v))
                continue;
            /* the scope whose outputs say the most: every gradient, else y from c, else y */
            int s = v->scopes & SC(SCOPE_TRAIN)     ? SCOPE_TRAIN
                    : v->scopes & SC(SCOPE_EPI_FWD) ? SCOPE_EPI_FWD
                                                    : SCOPE_MODEL_FWD;
            if (!(v->scopes & SC(s)) || probe_not_written(ch, pb, v, s))
                continue;
            hx_verdict r = run_verified(ch, pb, v, s);
            failed |= !r.pass;
            ch->dump(pb, a->dump_dir, v->id, s);
        }
        printf("wrote the inputs, parameters, outputs and gradients as .npy to %s/\n", a->dump_dir);
    }
    ch->destroy(pb);
    free(rows);
    free(marked);
    gpu_release();
    if (failed)
        fprintf(stderr, "error: a version failed verification\n");
    return failed ? 1 : 0;
}

int hx_main(int argc, char **argv, const hx_chapter *ch)
{
    cli_args a;
    cli_parse_or_exit(argc, argv, ch->shape_dims, &a, ch->help);
    if (ch->n_versions > (int)sizeof not_written_seen)
        die(1, "chapter %s has %d versions; the harness keeps state for %d", ch->number,
            ch->n_versions, (int)sizeof not_written_seen);
    if (a.list) {
        list_versions(ch);
        return 0;
    }
    const hx_version *only = NULL;
    if (a.version && !(only = find_version(ch, a.version)))
        die(EXIT_USAGE, "there is no version '%s' in chapter %s (--list shows %s .. %s)", a.version,
            ch->number, ch->versions[0].id, ch->versions[ch->n_versions - 1].id);
    int64_t dims[CLI_MAX_DIMS];
    memcpy(dims, ch->default_shape, sizeof dims);
    cli_shape_or_exit(&a, ch->shape_dims, dims, ch->shape_problem);
    if (a.test) {
        run_tests(ch, &a, dims, only);
        return checks_failed() ? 1 : 0;
    }
    return run_bench(ch, &a, dims, only);
}
