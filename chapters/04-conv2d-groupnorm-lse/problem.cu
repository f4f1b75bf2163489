/*
 * problem.cu: chapter 4's host machinery, for the harness (common/harness.h): the inputs and
 * parameters, the device buffers, the library conv's setup, the references, what each scope
 * writes and how it is verified (the statistics included), the CPU checks, the awkward shapes
 * and extreme values, the notes after the table, the dump. Nothing here is a lesson; the
 * versions are in the v*.cu and b*.cu files.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "conv-tile.cuh"
#include "model.h"
#include "welford.cuh"

#define TOL_REL_L2 1e-5
#define TOL_ABS 1e-4
#define TOL_STATS 1e-4 /* mean against |mean| + std (its scale), rstd against itself */
#define TOL_SUM 1e-5   /* reduced results against their error scale (reference.cu) */

struct problem {
    shape sh;
    float *x, *weight, *bias, gamma[C_OUT], beta[C_OUT], *g; /* host */
    double *xd, *wd, *bd, gd[C_OUT], bed[C_OUT];
    run_ctx r;
    lib_conv3d lib, lib_nhwc; /* the library conv; channels last (v7) */
    float *host_out, *host_c, *host_dc, *host_dx, host_dw[N_WEIGHT], host_dbias[C_OUT];
    float host_dgamma[C_OUT], host_dbeta[C_OUT], *host_stats; /* mean, then rstd, per (n, G) */
    float *host_cl; /* c channels last: v7's input, staged; its conv's output, read back */
    double *ref_c, *ref_model, *ref_epilogue;
    double *stats_model, *stats_epi, *stats_scale;
    int have_bwd_refs;
    bwd_ref bref;
    conv_grads cgr; /* the conv's gradient references, from a run's own dc (conv_ref.h) */
};

static shape shape_of(const int64_t *dims) { return make_shape((int)dims[0], (int)dims[2], (int)dims[3]); }

static const char *shape_problem(const int64_t *dims)
{
    static char why[256];
    const char *bad = hx_channels_problem(dims, C_IN);
    if (bad)
        return bad;
    if (dims[2] < 3 || dims[3] < 3) {
        snprintf(why, sizeof why, "a 3x3 convolution without padding needs H and W of at least 3");
        return why;
    }
    if (dims[0] > 65535) {
        snprintf(why, sizeof why, "batch must be at most 65535 (grid limits)");
        return why;
    }
    bad = hx_index_problem((double)dims[0] * C_IN * dims[2] * dims[3], "the input");
    return bad ? bad
               : hx_index_problem((double)dims[0] * C_OUT * (dims[2] - 2) * (dims[3] - 2),
                                  "the conv output");
}

/* ------------------------------------------------------------------ inputs and buffers */

/* the epilogue's references from host_c (the GPU's conv output, or a planted one) */
static void epilogue_refs(problem *pb)
{
    size_t ns = seg_count(&pb->sh);
    epilogue_ref(&pb->sh, pb->host_c, NULL, pb->gd, pb->bed, GN_EPS, pb->ref_epilogue, pb->stats_epi,
                 pb->stats_epi + ns);
    pb->have_bwd_refs = 0;
}

/* v7's input: host_c made channels last on the host (untimed) and uploaded to r.c_nhwc */
static void upload_c_nhwc(problem *pb)
{
    const shape *s = &pb->sh;
    lib_conv_channels_last(pb->host_c, pb->host_cl, s->n, C_OUT, (size_t)s->s);
    CUDA_CHECK(cudaMemcpy(pb->r.c_nhwc, pb->host_cl, 4 * conv_elems(s), cudaMemcpyHostToDevice));
}

/* uploads x, runs the library conv, computes the forward references: the model's from the
 * double conv, the epilogue's (and the backward's) from the GPU's float conv output, which
 * shape_checks compares with the double conv; v7's x and c channels last follow x and host_c */
static void problem_refresh(problem *pb)
{
    const shape *s = &pb->sh;
    size_t ns = seg_count(s);
    CUDA_CHECK(cudaMemcpy((void *)pb->r.x, pb->x, 4 * x_elems(s), cudaMemcpyHostToDevice));
    conv_forward(&pb->r);
    x_to_nhwc(&pb->r);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(pb->host_c, pb->r.c, 4 * conv_elems(s), cudaMemcpyDeviceToHost));
    upload_c_nhwc(pb);
    for (size_t i = 0; i < x_elems(s); i++)
        pb->xd[i] = pb->x[i];
    for (int i = 0; i < N_WEIGHT; i++)
        pb->wd[i] = pb->weight[i];
    conv_grads_reset(&pb->cgr); /* x or w may have changed */
    for (int i = 0; i < C_OUT; i++)
        pb->bd[i] = pb->bias[i], pb->gd[i] = pb->gamma[i], pb->bed[i] = pb->beta[i];
    conv3d_geom g = conv_geom(s);
    conv3d_ref(&g, pb->xd, pb->wd, pb->bd, pb->ref_c);
    epilogue_ref(s, NULL, pb->ref_c, pb->gd, pb->bed, GN_EPS, pb->ref_model, pb->stats_model,
                 pb->stats_model + ns);
    epilogue_refs(pb);
}

static problem *problem_create(const int64_t *dims, uint64_t seed, const device_info *dev)
{
    problem *pb = (problem *)calloc(1, sizeof *pb);
    if (!pb)
        die(1, "out of host memory");
    shape sh = shape_of(dims);
    const shape *s = &sh;
    pb->sh = sh;
    size_t nx = x_elems(s), nc = conv_elems(s), ny = out_elems(s), ns = seg_count(s);
    int tiles = ceil_div(s->s, APPLY_BLOCK);
    pb->x = (float *)host_alloc(4 * nx), pb->xd = (double *)host_alloc(8 * nx);
    pb->weight = (float *)host_alloc(4 * N_WEIGHT), pb->wd = (double *)host_alloc(8 * N_WEIGHT);
    pb->bias = (float *)host_alloc(4 * C_OUT), pb->bd = (double *)host_alloc(8 * C_OUT);
    pb->g = (float *)host_alloc(4 * ny);
    pb->host_out = (float *)host_alloc(4 * ny), pb->host_c = (float *)host_alloc(4 * nc);
    pb->host_dc = (float *)host_alloc(4 * nc), pb->host_dx = (float *)host_alloc(4 * nx);
    pb->host_stats = (float *)host_alloc(8 * ns);
    pb->host_cl = (float *)host_alloc(4 * nc);
    pb->ref_c = (double *)host_alloc(8 * nc);
    pb->ref_model = (double *)host_alloc(8 * ny), pb->ref_epilogue = (double *)host_alloc(8 * ny);
    pb->stats_model = (double *)host_alloc(16 * ns), pb->stats_epi = (double *)host_alloc(16 * ns);
    pb->stats_scale = (double *)host_alloc(16 * ns);
    pb->bref.dc = (double *)host_alloc(8 * nc);
    pb->bref.abs_dc = (double *)host_alloc(8 * nc);
    rng_state rng, rng_g;
    rng_seed(&rng, seed);
    fill_uniform(pb->x, nx, 0.0, 1.0, &rng);                                    /* torch.rand */
    init_conv_params(pb->weight, N_WEIGHT, pb->bias, C_OUT, C_IN * KVOL, &rng); /* fan_in 72 */
    /* GroupNorm starts at gamma = 1, beta = 0; learned values are anything: test with those */
    for (int c = 0; c < C_OUT; c++) {
        pb->gamma[c] = (float)(1.5 * (2.0 * rng_uniform(&rng) - 1.0));
        pb->beta[c] = (float)(2.0 * rng_uniform(&rng) - 1.0);
    }
    rng_seed(&rng_g, seed ^ 0x5DEECE66Dull);
    fill_normal(pb->g, ny, &rng_g);

    run_ctx *r = &pb->r;
    r->sh = sh;
    r->sm_count = dev->sm_count;
    double sample_bytes = 4.0 * C_OUT * s->s;
    r->chunk = (int)(L2_SHARE * (double)dev->l2_bytes / (2.0 * sample_bytes));
    r->chunk = r->chunk < 1 ? 1 : (r->chunk > s->n ? s->n : r->chunk);
    int chunks = ceil_div(s->n, r->chunk);
    r->stats_done = (cudaEvent_t *)host_alloc(sizeof(cudaEvent_t) * chunks);
    r->applied = (cudaEvent_t *)host_alloc(sizeof(cudaEvent_t) * chunks);
    for (int k = 0; k < chunks; k++) {
        CUDA_CHECK(cudaEventCreateWithFlags(&r->stats_done[k], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&r->applied[k], cudaEventDisableTiming));
    }
    team_plan(r, dev->l2_bytes);
    CUDA_CHECK(cudaStreamCreate(&r->stream[0])); /* blocking: ordered with the legacy stream */
    CUDA_CHECK(cudaStreamCreate(&r->stream[1]));
    float *x = (float *)gpu_alloc(4 * nx, "input x"), *w = (float *)gpu_alloc(4 * N_WEIGHT, "weight");
    float *b = (float *)gpu_alloc(4 * C_OUT, "bias"), *g = (float *)gpu_alloc(4 * ny, "g");
    float *gm = (float *)gpu_alloc(4 * C_OUT, "gamma"), *bt = (float *)gpu_alloc(4 * C_OUT, "beta");
    r->x = x, r->weight = w, r->bias = b, r->g = g, r->gamma = gm, r->beta = bt;
    r->c = (float *)gpu_alloc(4 * nc, "conv output");
    r->y = (float *)gpu_alloc(4 * ny, "output y");
    const char *tn[4] = {"gn (v1)", "t (v1)", "h (v1)", "r (v1)"};
    for (int i = 0; i < 4; i++)
        r->t[i] = (float *)gpu_alloc(4 * nc, tn[i]);
    r->mean = (float *)gpu_alloc(4 * ns, "mean"), r->rstd = (float *)gpu_alloc(4 * ns, "rstd");
    r->wpart = (welford *)gpu_alloc(sizeof(welford) * ns * SPLIT, "v5 partial statistics");
    r->gpart = (float2 *)gpu_alloc(sizeof(float2) * ns * r->team_ctas, "v6, b3 partial sums");
    r->pparam = (float *)gpu_alloc(4 * (size_t)r->team_grid * C_OUT * 2, "b3 partial dgamma, dbeta");
    r->x_nhwc = (float *)gpu_alloc(4 * nx, "x channels last (v7)");
    r->c_nhwc = (float *)gpu_alloc(4 * nc, "conv output channels last (v7)");
    float *w_nhwc = (float *)gpu_alloc(4 * N_WEIGHT, "weight channels last (v7)");
    r->w_nhwc = w_nhwc;
    r->v7part = (welford *)gpu_alloc(sizeof(welford) * ns * v7_split(s, r->sm_count),
                                     "v7 partial statistics");
    r->arrived = (unsigned *)gpu_alloc(sizeof(unsigned) * 2 * s->n, "team barrier counters");
    r->shift = (float *)gpu_alloc(4 * ns, "v8 shifts");
    r->rowpart = (float2 *)gpu_alloc(sizeof(float2) * ns * s->oh * tile_segs(s), "v8 row sums");
    r->dwpart = (float *)gpu_alloc(4 * (size_t)b4_blocks_per_sm() * dev->sm_count * (N_WEIGHT + C_OUT),
                                   "b4 dw partials");
    size_t bp = ns * tiles * N_BSUMS;
    if (bp < (size_t)s->n * C_OUT * 2)
        bp = (size_t)s->n * C_OUT * 2;
    r->bpart = (float *)gpu_alloc(4 * bp, "backward partials");
    r->m1 = (float *)gpu_alloc(4 * ns, "mean(dxh)"), r->m2 = (float *)gpu_alloc(4 * ns, "mean(dxh xh)");
    r->dc = (float *)gpu_alloc(4 * nc, "dL/dc");
    r->dx = (float *)gpu_alloc(4 * nx, "dL/dx");
    r->dw = (float *)gpu_alloc(4 * N_WEIGHT, "dL/dw");
    r->dbias = (float *)gpu_alloc(4 * C_OUT, "dL/dbias");
    r->dgamma = (float *)gpu_alloc(4 * C_OUT, "dL/dgamma");
    r->dbeta = (float *)gpu_alloc(4 * C_OUT, "dL/dbeta");
    CUDA_CHECK(cudaMemcpy(w, pb->weight, 4 * N_WEIGHT, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(b, pb->bias, 4 * C_OUT, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(gm, pb->gamma, 4 * C_OUT, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(bt, pb->beta, 4 * C_OUT, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(g, pb->g, 4 * ny, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(x, pb->x, 4 * nx, cudaMemcpyHostToDevice));
    gpu_poison(r->c, nc);
    int xd[4] = {s->n, C_IN, s->h, s->w};
    lib_conv2d_setup(&pb->lib, xd, C_OUT, KS, 0, 1, x, w, r->c, r->dc, r->dx, r->dw);
    r->lib = &pb->lib;
    /* v7's conv: x and the weights channels last (64 x 3 x 3 x 8, what cuDNN's NHWC filter is) */
    float w_cl[N_WEIGHT];
    lib_conv_channels_last(pb->weight, w_cl, C_OUT, C_IN, KVOL);
    CUDA_CHECK(cudaMemcpy(w_nhwc, w_cl, 4 * N_WEIGHT, cudaMemcpyHostToDevice));
    x_to_nhwc(r);
    lib_conv2d_setup_nhwc(&pb->lib_nhwc, xd, C_OUT, KS, 0, 1, r->x_nhwc, w_nhwc, r->c_nhwc);
    r->lib_nhwc = &pb->lib_nhwc;
    problem_refresh(pb);
    return pb;
}

static void problem_destroy(problem *pb)
{
    run_ctx *r = &pb->r;
    lib_conv3d_destroy(&pb->lib);
    lib_conv3d_destroy(&pb->lib_nhwc);
    for (int k = 0; k < ceil_div(pb->sh.n, r->chunk); k++) {
        CUDA_CHECK(cudaEventDestroy(r->stats_done[k]));
        CUDA_CHECK(cudaEventDestroy(r->applied[k]));
    }
    free(r->stats_done), free(r->applied);
    CUDA_CHECK(cudaStreamDestroy(r->stream[0]));
    CUDA_CHECK(cudaStreamDestroy(r->stream[1]));
    const void *dev[] = {r->x, r->weight, r->bias, r->g, r->gamma, r->beta, r->c, r->y, r->t[0],
                         r->t[1], r->t[2], r->t[3], r->mean, r->rstd, r->wpart, r->gpart, r->pparam,
                         r->x_nhwc, r->c_nhwc, r->w_nhwc, r->v7part,
                         r->arrived, r->shift, r->rowpart, r->dwpart, r->bpart, r->m1, r->m2, r->dc, r->dx, r->dw, r->dbias,
                         r->dgamma, r->dbeta};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        CUDA_CHECK(cudaFree((void *)dev[i]));
    void *host[] = {pb->x, pb->xd, pb->weight, pb->wd, pb->bias, pb->bd, pb->g, pb->host_out,
                    pb->host_c, pb->host_dc, pb->host_dx, pb->host_stats, pb->ref_c,
                    pb->ref_model, pb->ref_epilogue, pb->stats_model, pb->stats_epi,
                    pb->stats_scale, pb->bref.dc, pb->bref.abs_dc, pb->host_cl};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
    conv_grads_free(&pb->cgr);
    free(pb);
}

static const run_ctx *problem_ctx(const problem *pb) { return &pb->r; }

/* ------------------------------------------------------------ what a scope writes, verified */

/* every scope writes the statistics (the stats scope nothing else); the forward ones y; the
 * backward ones dc, dgamma, dbeta; a training step also dx, dw, dbias */
static void problem_poison(problem *pb, int scope)
{
    const shape *s = &pb->sh;
    gpu_poison(pb->r.mean, seg_count(s));
    gpu_poison(pb->r.rstd, seg_count(s));
    if (scope != SCOPE_STATS)
        gpu_poison(pb->r.y, out_elems(s));
    if (scope == SCOPE_EPI_FWDBWD || scope == SCOPE_TRAIN) {
        gpu_poison(pb->r.dc, conv_elems(s));
        gpu_poison(pb->r.dgamma, C_OUT);
        gpu_poison(pb->r.dbeta, C_OUT);
    }
    if (scope == SCOPE_TRAIN) {
        gpu_poison(pb->r.dx, x_elems(s));
        gpu_poison(pb->r.dw, N_WEIGHT);
        gpu_poison(pb->r.dbias, C_OUT);
    }
}

static hx_verdict problem_verify(problem *pb, int scope)
{
    const run_ctx *r = &pb->r;
    const shape *s = &pb->sh;
    size_t nc = conv_elems(s), ny = out_elems(s), ns = seg_count(s);
    int whole = scope == SCOPE_MODEL_FWD || scope == SCOPE_TRAIN;
    hx_verdict v = {1, 1, HASH_INIT, ""};
    /* the library conv may be nondeterministic, and with it what a whole-model run computes */
    v.deterministic = !whole || (pb->lib.fwd_det && pb->lib_nhwc.fwd_det); /* v7's, too */
    if (scope != SCOPE_STATS) {
        hx_check_output(&v, "y", r->y, pb->host_out, ny, whole ? pb->ref_model : pb->ref_epilogue,
                        HX_SCALED, NULL, TOL_REL_L2, TOL_ABS);
        v.hash = hash_f32(v.hash, pb->host_out, ny);
    }
    hx_check_stats(&v, r->mean, r->rstd, pb->host_stats, pb->stats_scale, ns,
                   whole ? pb->stats_model : pb->stats_epi, TOL_STATS);
    v.hash = hash_f32(v.hash, pb->host_stats, 2 * ns);
    if (scope != SCOPE_EPI_FWDBWD && scope != SCOPE_TRAIN)
        return v;
    /* the backward from the GPU's conv output (the epilogue's input in both scopes) */
    if (!pb->have_bwd_refs) {
        epilogue_backward_ref(s, pb->host_c, NULL, pb->gd, pb->bed, pb->g, &pb->bref);
        /* componentwise plus normwise, as dw's: with x * 1000 at 2x8x18x18 (--seed 2) a dgamma
         * of -1.5e-38, its terms' magnitudes 2e-35, came out of b3 as 0 */
        sum_bounds_add_max(pb->bref.abs_dgamma, C_OUT);
        sum_bounds_add_max(pb->bref.abs_dbeta, C_OUT);
        pb->have_bwd_refs = 1;
    }
    hx_check_output(&v, "dc", r->dc, pb->host_dc, nc, pb->bref.dc, HX_SUM, pb->bref.abs_dc, 0,
                    TOL_SUM);
    hx_check_output(&v, "dgamma", r->dgamma, pb->host_dgamma, C_OUT, pb->bref.dgamma, HX_SUM,
                    pb->bref.abs_dgamma, 0, TOL_SUM);
    hx_check_output(&v, "dbeta", r->dbeta, pb->host_dbeta, C_OUT, pb->bref.dbeta, HX_SUM,
                    pb->bref.abs_dbeta, 0, TOL_SUM);
    v.hash = hash_f32(hash_f32(hash_f32(v.hash, pb->host_dc, nc), pb->host_dgamma, C_OUT),
                      pb->host_dbeta, C_OUT);
    if (scope == SCOPE_EPI_FWDBWD)
        return v;
    /* the conv's gradients against the double backward of this run's dc (conv_ref.h) */
    conv3d_geom g = conv_geom(s);
    conv3d_grads_of(&g, pb->xd, pb->wd, pb->host_dc, &pb->cgr);
    const float *dev[3] = {r->dx, r->dw, r->dbias};
    float *host[3] = {pb->host_dx, pb->host_dw, pb->host_dbias};
    hx_check_conv_grads(&v, dev, host, &pb->cgr, HX_SCALED, TOL_REL_L2, TOL_ABS, TOL_SUM);
    return v;
}

/* model.h's counts; the conv's FLOPs once in the forward, three times in a training step */
static void problem_counts(const problem *pb, double bytes[N_SCOPES], double flops[N_SCOPES])
{
    const shape *s = &pb->sh;
    bytes[SCOPE_EPI_FWD] = epilogue_bytes(s), bytes[SCOPE_MODEL_FWD] = model_bytes(s);
    bytes[SCOPE_EPI_FWDBWD] = epilogue_fwdbwd_bytes(s), bytes[SCOPE_TRAIN] = train_step_bytes(s);
    bytes[SCOPE_STATS] = stats_bytes(s);
    flops[SCOPE_MODEL_FWD] = conv_flops(s), flops[SCOPE_TRAIN] = 3.0 * conv_flops(s);
}

/* ------------------------------------------------------------ CPU checks: golden tensors */

/* a folder written by `make golden` (data/golden/ch04/NxCxHxW/): PyTorch's float64 model on a
 * small input, stored float32, against this reference; catches a reference that agrees with
 * itself (reference.cu's checks) but means something else than PyTorch's model. Two planted
 * faults show the check can fail: GroupNorm with eps 1e-3 instead of 1e-5, and the affine part
 * at PyTorch's initial gamma = 1, beta = 0 instead of the learned values the golden data has. */
static void golden_case(const char *dir, const char *name)
{
    int64_t dims[4];
    char err[128];
    if (parse_shape(name, 4, dims, err, sizeof err) || shape_problem(dims)) {
        check(0, "golden %s: not a valid shape name", name);
        return;
    }
    shape s = shape_of(dims);
    conv3d_geom cg = conv_geom(&s);
    size_t nx = x_elems(&s), nc = conv_elems(&s), ny = out_elems(&s);
    enum { X, W, B, GAMMA, BETA, C, Y, G, DC, DW, DB, DX, DGAMMA, DBETA, N_FILES };
    const char *files[N_FILES] = {"x", "conv_weight", "conv_bias", "gamma", "beta", "conv_out",
                                  "out", "grad_output", "grad_conv_out", "grad_conv_weight",
                                  "grad_conv_bias", "grad_x", "grad_gamma", "grad_beta"};
    size_t sizes[N_FILES] = {nx, N_WEIGHT, C_OUT, C_OUT, C_OUT, nc, ny, ny, nc, N_WEIGHT, C_OUT,
                             nx, C_OUT, C_OUT};
    float *t[N_FILES];
    int ok = 1;
    for (int i = 0; i < N_FILES; i++)
        ok &= (t[i] = npy_load(dir, files[i], sizes[i])) != NULL;
    if (ok) {
        double *xd = (double *)host_alloc(8 * nx), *wd = (double *)host_alloc(8 * N_WEIGHT);
        double *c = (double *)host_alloc(8 * nc), *y = (double *)host_alloc(8 * ny);
        double *dx = (double *)host_alloc(8 * nx), *dw = (double *)host_alloc(8 * N_WEIGHT);
        double *abs_dw = (double *)host_alloc(8 * N_WEIGHT);
        double bd[C_OUT], gd[C_OUT], bed[C_OUT], db[C_OUT], abs_db[C_OUT], one[C_OUT], zero[C_OUT];
        bwd_ref br;
        memset(&br, 0, sizeof br);
        br.dc = (double *)host_alloc(8 * nc);
        for (size_t i = 0; i < nx; i++)
            xd[i] = t[X][i];
        for (int i = 0; i < N_WEIGHT; i++)
            wd[i] = t[W][i];
        for (int i = 0; i < C_OUT; i++)
            bd[i] = t[B][i], gd[i] = t[GAMMA][i], bed[i] = t[BETA][i], one[i] = 1.0, zero[i] = 0.0;
        conv3d_ref(&cg, xd, wd, bd, c);
        epilogue_ref(&s, NULL, c, gd, bed, GN_EPS, y, NULL, NULL);
        epilogue_backward_ref(&s, NULL, c, gd, bed, t[G], &br);
        conv3d_backward_ref(&cg, xd, wd, br.dc, dx, dw, db, abs_dw, abs_db);
        /* golden = the float32 rounding of PyTorch's float64 result: 1e-6 leaves room for that
         * rounding and for summation order, none for another formula; the sums (dw, dbias,
         * dgamma, dbeta) against the magnitudes of their terms (componentwise: the GPU checks
         * add the normwise term, sum_bounds_add_max, for float's flushes) */
        verify_result v[8] = {
            verify_f32(t[C], c, nc, 1e-6, 1e-6),
            verify_f32(t[Y], y, ny, 1e-6, 1e-6),
            verify_f32(t[DC], br.dc, nc, 1e-6, 1e-6),
            verify_sum_f32(t[DGAMMA], br.dgamma, br.abs_dgamma, C_OUT, 1e-6),
            verify_sum_f32(t[DBETA], br.dbeta, br.abs_dbeta, C_OUT, 1e-6),
            verify_sum_f32(t[DW], dw, abs_dw, N_WEIGHT, 1e-6),
            verify_sum_f32(t[DB], db, abs_db, C_OUT, 1e-6),
            verify_f32(t[DX], dx, nx, 1e-6, 1e-6),
        };
        int all = 1;
        for (int i = 0; i < 8; i++)
            all &= v[i].pass;
        check(all,
              "golden %s (PyTorch float64): rel_l2 c %.1e y %.1e dc %.1e dgamma %.1e dbeta %.1e "
              "dw %.1e dbias %.1e dx %.1e",
              name, v[0].rel_l2, v[1].rel_l2, v[2].rel_l2, v[3].rel_l2, v[4].rel_l2, v[5].rel_l2,
              v[6].rel_l2, v[7].rel_l2);
        epilogue_ref(&s, NULL, c, gd, bed, 1e-3, y, NULL, NULL);
        verify_result bad_eps = verify_f32(t[Y], y, ny, 1e-6, 1e-6);
        epilogue_ref(&s, NULL, c, one, zero, GN_EPS, y, NULL, NULL);
        verify_result bad_affine = verify_f32(t[Y], y, ny, 1e-6, 1e-6);
        check(!bad_eps.pass && !bad_affine.pass,
              "golden %s: references with eps = 1e-3 (rel_l2 %.1e) and with gamma = 1, beta = 0 "
              "(rel_l2 %.1e) are caught", name, bad_eps.rel_l2, bad_affine.rel_l2);
        free(xd), free(wd), free(c), free(y), free(dx), free(dw), free(abs_dw), free(br.dc);
    } else {
        check(0, "golden %s: missing or malformed tensors", name);
    }
    for (int i = 0; i < N_FILES; i++)
        free(t[i]);
}

/* --test's CPU checks: the reference against its derivation (reference.cu), then against
 * PyTorch (a missing data/golden/ch04 is a SKIP: `make golden` writes it) */
static void cpu_checks(uint64_t seed)
{
    reference_checks(seed);
    for_each_golden_case("data/golden/ch04", golden_case);
}

/* ------------------------------------------------- GPU checks: shapes, cases */

static const int64_t test_shapes[][CLI_MAX_DIMS] = {
    /* N x 8 x H x W; S = (H-2)(W-2) positions, a group 4 S values */
    {1, 8, 3, 3},     /* S = 1: a group of 4 values, one a channel */
    {2, 8, 5, 7},     /* S = 15: odd, most threads idle */
    {3, 8, 3, 35},    /* S = 33: a warp and one */
    {2, 8, 18, 18},   /* S = 256 = APPLY_BLOCK */
    {1, 8, 19, 19},   /* S = 289 = 17^2, one past a block */
    {5, 8, 41, 47},   /* S = 1755: several apply tiles, a partial last one */
    {1, 8, 128, 128}, /* S = 15876: the KernelBench sample */
    {13, 8, 128, 128}, /* v5: 13 samples in chunks of the L2 (3 on an H100: 3, 3, 3, 3, 1) */
    {2, 8, 7, 260},   /* S = 5 x 258: v8's tiles, 3 column segments (the last 2 wide), odd rows */
};

/* the library conv the epilogues read, against the reference */
static void shape_checks(problem *pb, int t)
{
    const shape *s = &pb->sh;
    (void)t;
    verify_result vc = verify_f32(pb->host_c, pb->ref_c, conv_elems(s), TOL_REL_L2, TOL_ABS);
    check(vc.pass, "%s conv (engine %d) = reference on %dx8x%dx%d, rel_l2 %.1e", pb->lib.backend,
          pb->lib.fwd_algo, s->n, s->h, s->w, vc.rel_l2);
    /* v7's conv channels last (on x channels last, problem_refresh), made NCHW again; then
     * c_nhwc is host_c channels last again, the input of v7's epilogue */
    size_t nc = conv_elems(s);
    float *back = (float *)host_alloc(4 * nc);
    conv_forward_nhwc(&pb->r);
    CUDA_CHECK(cudaMemcpy(pb->host_cl, pb->r.c_nhwc, 4 * nc, cudaMemcpyDeviceToHost));
    lib_conv_channels_last(pb->host_cl, back, s->n, s->s, C_OUT);
    verify_result vn = verify_f32(back, pb->ref_c, nc, TOL_REL_L2, TOL_ABS);
    check(vn.pass, "%s conv channels last (v7, engine %d) = reference on %dx8x%dx%d, rel_l2 %.1e",
          pb->lib_nhwc.backend, pb->lib_nhwc.fwd_algo, s->n, s->h, s->w, vn.rel_l2);
    free(back);
    upload_c_nhwc(pb);
}

/* extremes: the input x 1000 (c in the thousands: tanh saturates, the logsumexp's terms span
 * thousands), a planted c of +-100 by group (alternating signs), and a constant group (variance
 * zero: rstd = 1 / sqrt(eps), xh = 0) */
static const hx_case cases[] = {
    {"x*1000", ~0u, NULL},
    {"c ~ +-100", SC(SCOPE_EPI_FWD) | SC(SCOPE_EPI_FWDBWD) | SC(SCOPE_STATS), NULL},
    {"c const/G", SC(SCOPE_EPI_FWD) | SC(SCOPE_EPI_FWDBWD) | SC(SCOPE_STATS), NULL},
    {NULL, 0, NULL},
};

static void set_case(problem *pb, int k)
{
    const shape *s = &pb->sh;
    if (k == 0) {
        for (size_t i = 0; i < x_elems(s); i++)
            pb->x[i] *= 1000.0f;
        problem_refresh(pb);
        return;
    }
    rng_state rng;
    rng_seed(&rng, 7 + k);
    size_t m = (size_t)CPG * s->s;
    for (size_t i = 0; i < conv_elems(s); i++) {
        size_t seg = i / m;
        if (k == 1)
            pb->host_c[i] = (float)((seg % 2 ? 100.0 : -100.0) + 8.0 * (rng_uniform(&rng) - 0.5));
        else /* every value of a group the same, a different constant a group */
            pb->host_c[i] = (float)(0.25 * (double)(seg % 7) - 0.5);
    }
    CUDA_CHECK(cudaMemcpy(pb->r.c, pb->host_c, 4 * conv_elems(s), cudaMemcpyHostToDevice));
    upload_c_nhwc(pb);
    epilogue_refs(pb);
}

/* ---------------------------------------------------------------- after the table; --dump */

static void time_conv_nhwc(const void *r) { conv_forward_nhwc((const run_ctx *)r); }
static void time_x_nhwc(const void *r) { x_to_nhwc((const run_ctx *)r); }

static void notes(problem *pb, const device_info *dev, int reps, const char *only)
{
    const shape *s = &pb->sh;
    const run_ctx *r = &pb->r;
    hx_conv_bufs b = {0, r->x, r->weight, r->bias, r->dc, r->c, r->dx, r->dw, r->dbias,
                      conv_flops(s)};
    hx_conv_ops(&pb->lib, &b, dev, reps, NULL);
    if (HAVE_CUDNN) {
        const lib_conv3d *cn = &pb->lib_nhwc;
        timing tn = gpu_time(time_conv_nhwc, r, reps), tt = gpu_time(time_x_nhwc, r, reps);
        printf("cuDNN Conv2d channels last alone (v7; engine %d, %s, + bias): median %.4f ms "
               "[%.4f - %.4f], %.1f TFLOP/s; x to channels last (v7's transposition) %.4f ms\n",
               cn->fwd_algo, cn->fwd_det ? "deterministic" : "nondeterministic", tn.median_ms,
               tn.min_ms, tn.max_ms, conv_flops(s) / (tn.median_ms * 1e9), tt.median_ms);
        upload_c_nhwc(pb); /* c_nhwc is v7's epilogue input again (--dump runs it next) */
    }
    printf("v5: chunks of %d samples (%.1f MB of c; two chunks within %.0f%% of the %.0f MB L2)\n",
           r->chunk, 4.0 * C_OUT * s->s * r->chunk / 1e6, 100.0 * L2_SHARE, dev->l2_bytes / 1e6);
    printf("v6, b3: %d teams of %d blocks (%d resident on %d SMs); a team keeps two samples' c "
           "(%.1f MB) in L2%s\n", r->teams, r->team_ctas, r->team_grid, dev->sm_count,
           2 * 4.0 * C_OUT * s->s / 1e6,
           getenv("CH04_TEAMS") ? " (teams set by CH04_TEAMS)" : "");
    printf("floors at %.0f GB/s: epilogue %.1f MB -> %.4f ms; c read twice %.1f MB -> %.4f ms; "
           "epilogue fwd+bwd %.1f MB -> %.4f ms; the conv: %.2f GFLOP -> %.4f ms at %.1f TFLOP/s\n",
           dev->copy_gbps, epilogue_bytes(s) / 1e6, epilogue_bytes(s) / (dev->copy_gbps * 1e6),
           (epilogue_bytes(s) + 4.0 * conv_elems(s)) / 1e6,
           (epilogue_bytes(s) + 4.0 * conv_elems(s)) / (dev->copy_gbps * 1e6),
           epilogue_fwdbwd_bytes(s) / 1e6, epilogue_fwdbwd_bytes(s) / (dev->copy_gbps * 1e6),
           conv_flops(s) / 1e9, conv_flops(s) / (dev->fp32_tflops * 1e9), dev->fp32_tflops);
}

static void dump(problem *pb, const char *dir, const char *id, int scope)
{
    const shape *s = &pb->sh;
    int64_t xs[4] = {s->n, C_IN, s->h, s->w}, ws[4] = {C_OUT, C_IN, KS, KS};
    int64_t bs[1] = {C_OUT}, cs[4] = {s->n, C_OUT, s->oh, s->ow}, ys[4] = {s->n, 1, s->oh, s->ow};
    if (!id) {
        npy_save_or_exit(dir, "x", pb->x, 4, xs);
        npy_save_or_exit(dir, "conv_weight", pb->weight, 4, ws);
        npy_save_or_exit(dir, "conv_bias", pb->bias, 1, bs);
        npy_save_or_exit(dir, "gamma", pb->gamma, 1, bs);
        npy_save_or_exit(dir, "beta", pb->beta, 1, bs);
        npy_save_or_exit(dir, "conv_out", pb->host_c, 4, cs);
        npy_save_or_exit(dir, "grad_output", pb->g, 4, ys);
        return;
    }
    if (scope != SCOPE_TRAIN) {
        char name[64];
        snprintf(name, sizeof name, scope == SCOPE_MODEL_FWD ? "out_%s_model" : "out_%s", id);
        npy_save_or_exit(dir, name, pb->host_out, 4, ys);
        return;
    }
    npy_save_id_or_exit(dir, "grad_conv_out", id, pb->host_dc, 4, cs);
    npy_save_id_or_exit(dir, "grad_gamma", id, pb->host_dgamma, 1, bs);
    npy_save_id_or_exit(dir, "grad_beta", id, pb->host_dbeta, 1, bs);
    npy_save_id_or_exit(dir, "grad_conv_weight", id, pb->host_dw, 4, ws);
    npy_save_id_or_exit(dir, "grad_conv_bias", id, pb->host_dbias, 1, bs);
    npy_save_id_or_exit(dir, "grad_x", id, pb->host_dx, 4, xs);
}

const hx_chapter chapter_machinery = {
    "04",
    "Conv2d -> GroupNorm -> tanh -> HardSwish -> + c -> LogSumExp (KernelBench level 2, #92)",
    "\nChapter 4, KernelBench level 2 model #92:\n"
    "  Conv2d(8->64, k3, no padding) -> GroupNorm(16 groups, affine) -> tanh -> HardSwish ->\n"
    "  residual (+ the conv output) -> logsumexp over the 64 channels, keepdim. --shape is\n"
    "  N x 8 x H x W (default 128x8x128x128), H, W >= 3; the output is N x 1 x (H-2) x (W-2).\n"
    "  Limits: batch <= 65535, conv output < 2^31 elements.\n"
    "  --dump DIR writes x.npy, conv_weight.npy (64,8,3,3), conv_bias.npy, gamma.npy, beta.npy\n"
    "  (64 each), conv_out.npy (the library conv output the epilogue versions read),\n"
    "  grad_output.npy; then out_v1.npy .. out_v7.npy (the epilogue from conv_out),\n"
    "  out_v8_model.npy and out_v9_model.npy (the whole model from x), and from each backward\n"
    "  version's training step (b1..b4) grad_conv_out_bK.npy, grad_gamma_bK.npy,\n"
    "  grad_beta_bK.npy, grad_conv_weight_bK.npy, grad_conv_bias_bK.npy, grad_x_bK.npy.\n"
    "  CH04_TEAMS=T in the environment sets v6's and b3's number of teams (the sweep in\n"
    "  LABBOOK.md); by default it follows from the L2's size.\n",
    4,
    {128, 8, 128, 128},
    NULL, /* main.cu's version table */
    0,
    shape_problem,
    problem_create,
    problem_destroy,
    problem_ctx,
    problem_poison,
    problem_verify,
    problem_counts,
    cpu_checks,
    test_shapes,
    (int)(sizeof test_shapes / sizeof test_shapes[0]),
    shape_checks,
    cases,
    set_case,
    NULL, /* every case on every shape */
    notes,
    dump,
};
