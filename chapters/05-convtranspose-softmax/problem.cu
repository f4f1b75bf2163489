/*
 * problem.cu: chapter 5's host machinery, for the harness (common/harness.h): the inputs and
 * parameters, the device buffers, the library conv's setup, the references, what each scope
 * writes and how it is verified, the CPU checks, the awkward shapes and extreme values, the
 * notes after the table, the dump. Nothing here is a lesson; the versions are in the v*.cu and
 * b*.cu files.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hopper.cuh"
#include "model.h"

/* y is judged row by row (a softmax row): every output is far below 1, so each row's error is
 * measured against that row's own scale (common.h, verify_rows_f32); fp32 exp and a sum of up to
 * 131072 terms: a few 1e-7. The gradients are sums whose terms cancel (dc, dscale, dx, dw,
 * dbias): each against the sum of its terms' magnitudes (verify_sum_f32). */
#define TOL_REL_L2 1e-5
#define TOL_ROW 1e-5 /* every |error| against its row's largest |value| */
#define TOL_LSE 1e-5 /* lse (about ln S + 0.5) against max(1, |lse|) */
#define TOL_SUM 1e-5 /* dc, dscale, dw, dbias against the sums of their terms' magnitudes */

/* Host memory at the KernelBench shape (c: 268 M values), what stays whole: x (0.54 GB), host_c
 * (1.07 GB), g (1.07 GB), ref_c (double, 2.15 GB), xpd and the conv's dx references (double,
 * pooled shape: 0.13 GB each). Every other reference is computed a piece of PIECE values at a
 * time while its output is read back (hx_check_pieces, harness.h), and the conv's gradient
 * references widen dc a sample at a time (conv_ref.h). */
#define PIECE ((size_t)1 << 23) /* values of an output read back and checked at a time */

/* rows a piece of y or dc holds: PIECE values, whole rows, at least one */
static size_t piece_rows(const shape *s)
{
    size_t k = PIECE / (size_t)s->s;
    return k < 1 ? 1 : k;
}

struct problem {
    shape sh;
    float *x, *weight, *bias, scale[C_OUT], *g; /* host */
    double *wd, *bd, sd[C_OUT];
    run_ctx r;
    lib_conv3d lib;
    int clusters_run; /* this GPU and this build run the cluster versions (sm_90) */
    float *host_c;    /* the GPU's conv output, what the epilogue scopes read */
    float *c_run;     /* a piece of the c a training step's own conv wrote, read back */
    float host_dw[N_WEIGHT], host_dbias[C_OUT], host_dscale[C_OUT], *host_lse;
    double *ref_c;               /* the double conv of the double pool of x */
    double *lse_model, *lse_epi; /* each row's lse: from ref_c; from host_c */
    double c_err; /* the library conv's largest error against the double one */
    /* a TF32 conv's error, y's (worst row's rel_l2 and row-scaled |error|) and lse's (scaled
     * by max(1, |lse|)): tf32_conv_error; tf32_known 0 until computed for this x */
    int tf32_known;
    double tf32_y_rel, tf32_y_row, tf32_lse;
    double *parts;               /* each row's sums of g p and |g p| (epilogue_backward_rows_ref) */
    double dscale[C_OUT], abs_dscale[C_OUT]; /* dscale's reference and its terms' magnitudes */
    double *xpd;    /* the pooled x, the transposed conv's input */
    conv_grads cgr; /* the conv's gradient references, from a run's own dc (conv_ref.h) */
};

static shape shape_of(const int64_t *dims)
{
    return make_shape((int)dims[0], (int)dims[2], (int)dims[3], (int)dims[4]);
}

static const char *shape_problem(const int64_t *dims)
{
    static char why[256];
    const char *bad = hx_channels_problem(dims, C_IN);
    if (bad)
        return bad;
    if (dims[2] < 2 || dims[3] < 2 || dims[4] < 2) {
        snprintf(why, sizeof why, "AvgPool3d(2) needs D, H and W of at least 2");
        return why;
    }
    bad = hx_index_problem((double)dims[0] * C_IN * dims[2] * dims[3] * dims[4], "the input");
    return bad ? bad
               : hx_index_problem((double)dims[0] * C_OUT * 8.0 * (dims[2] / 2) * (dims[3] / 2) *
                                      (dims[4] / 2), "the conv output");
}

/* ------------------------------------------------------------------ inputs and buffers */

/* device bytes of a problem of this shape: the buffers below (x, dx, xp, dxp; c, y, g, dc and
 * t[0..3]; the small ones, b4's dw partials for up to 128 block pairs), not cuDNN's workspace */
static double device_bytes(const shape *s)
{
    return 4.0 * (2.0 * x_elems(s) + 2.0 * pool_elems(s) + 8.0 * conv_elems(s)) +
           4.0 * (double)rows(s) * (3.0 + 16.0 + v5_split(s, 1024)) + 4.0 * 130.0 * N_WEIGHT;
}

/* the epilogue's row statistics from host_c (the GPU's conv output, or a planted one); its
 * outputs' references are computed from them at each check */
static void epilogue_refs(problem *pb)
{
    epilogue_ref(&pb->sh, pb->host_c, NULL, pb->sd, NULL, pb->lse_epi);
}

/* uploads x, runs the library pool and conv, computes the forward references: the model's from
 * the double pool and conv, the epilogue's (and the backward's) from the GPU's float conv
 * output, which shape_checks compares with the double conv */
static void problem_refresh(problem *pb)
{
    const shape *s = &pb->sh;
    CUDA_CHECK(cudaMemcpy((void *)pb->r.x, pb->x, 4 * x_elems(s), cudaMemcpyHostToDevice));
    model_front(&pb->r);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(pb->host_c, pb->r.c, 4 * conv_elems(s), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N_WEIGHT; i++)
        pb->wd[i] = pb->weight[i];
    conv_grads_reset(&pb->cgr); /* x or w may have changed */
    for (int i = 0; i < C_OUT; i++)
        pb->bd[i] = pb->bias[i], pb->sd[i] = pb->scale[i];
    convT3d_geom g = conv_geom(s);
    pool_ref(s, pb->x, NULL, pb->xpd);
    conv_transpose3d_ref(&g, pb->xpd, pb->wd, pb->bd, pb->ref_c);
    epilogue_ref(s, NULL, pb->ref_c, pb->sd, NULL, pb->lse_model);
    epilogue_refs(pb);
    verify_result vc = verify_f32(pb->host_c, pb->ref_c, conv_elems(s), INFINITY, INFINITY);
    pb->c_err = vc.max_abs;
    pb->tf32_known = 0;
}

/* The error a TF32 conv makes on this shape's tensors, the bound of a TF32 version: the
 * transposed conv in double of the pooled x and the weights each rounded to TF32 (tf32_round, as
 * v8 rounds them), then y and lse from it, against the exact model's. A tensor-core TF32 conv
 * differs from it only by its fp32 sums. A sample at a time (its conv 8.4 M doubles at the
 * KernelBench shape), once for each x. */
static void tf32_conv_error(problem *pb)
{
    if (pb->tf32_known)
        return;
    const shape *s = &pb->sh;
    shape s1 = *s;
    s1.n = 1;
    convT3d_geom g1 = conv_geom(&s1);
    size_t np = pool_elems(&s1), nc = conv_elems(&s1);
    double *xt = (double *)host_alloc(8 * np), *ct = (double *)host_alloc(8 * nc);
    double *yt = (double *)host_alloc(8 * nc), *ye = (double *)host_alloc(8 * nc), wt[N_WEIGHT];
    float *yf = (float *)host_alloc(4 * nc);
    double lse_t[C_OUT], lse_err = 0.0, lse_big = 1.0;
    for (int i = 0; i < N_WEIGHT; i++)
        wt[i] = tf32_round(pb->weight[i]);
    verify_stream vs;
    verify_stream_begin(&vs, VERIFY_ROWS, conv_elems(s), s->s, INFINITY, INFINITY);
    for (int n = 0; n < s->n; n++) {
        for (size_t i = 0; i < np; i++)
            xt[i] = tf32_round((float)pb->xpd[n * np + i]);
        conv_transpose3d_ref(&g1, xt, wt, pb->bd, ct);
        epilogue_ref(&s1, NULL, ct, pb->sd, yt, lse_t);
        for (size_t i = 0; i < nc; i++)
            yf[i] = (float)yt[i];
        epilogue_rows_ref(s, n * C_OUT, C_OUT, NULL, pb->ref_c + n * nc, pb->sd, pb->lse_model,
                          ye);
        verify_stream_add(&vs, yf, ye, NULL, nc);
        for (int co = 0; co < C_OUT; co++) {
            double e = pb->lse_model[n * C_OUT + co];
            lse_err = fmax(lse_err, fabs(lse_t[co] - e)), lse_big = fmax(lse_big, fabs(e));
        }
    }
    verify_result r = verify_stream_end(&vs);
    pb->tf32_y_rel = r.rel_l2, pb->tf32_y_row = r.max_abs, pb->tf32_lse = lse_err / lse_big;
    pb->tf32_known = 1;
    free(xt), free(ct), free(yt), free(ye), free(yf);
}

static problem *problem_create(const int64_t *dims, uint64_t seed, const device_info *dev)
{
    shape sh = shape_of(dims);
    const shape *s = &sh;
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    double need = device_bytes(s);
    if (need > (double)free_b) {
        int fit = (int)((double)s->n * 0.8 * free_b / need);
        die(1, "out of device memory: chapter 5 at %dx%dx%dx%dx%d needs %.2f GB of device memory "
            "(c, y, g, dc and v1's four intermediates are %.2f GB each), %.2f of %.2f GB free: "
            "try --shape %dx%dx%dx%dx%d", s->n, C_IN, s->d, s->h, s->w, need / 1e9,
            4.0 * conv_elems(s) / 1e9, free_b / 1e9, total_b / 1e9, fit < 1 ? 1 : fit, C_IN,
            s->d, s->h, s->w);
    }
    problem *pb = (problem *)calloc(1, sizeof *pb);
    if (!pb)
        die(1, "out of host memory");
    pb->sh = sh;
    size_t nx = x_elems(s), np = pool_elems(s), nc = conv_elems(s), nr = rows(s);
    pb->x = (float *)host_alloc(4 * nx);
    pb->weight = (float *)host_alloc(4 * N_WEIGHT), pb->wd = (double *)host_alloc(8 * N_WEIGHT);
    pb->bias = (float *)host_alloc(4 * C_OUT), pb->bd = (double *)host_alloc(8 * C_OUT);
    pb->g = (float *)host_alloc(4 * nc), pb->host_c = (float *)host_alloc(4 * nc);
    pb->c_run = (float *)host_alloc(4 * piece_rows(s) * (size_t)s->s);
    pb->host_lse = (float *)host_alloc(4 * nr);
    pb->ref_c = (double *)host_alloc(8 * nc), pb->xpd = (double *)host_alloc(8 * np);
    pb->lse_model = (double *)host_alloc(8 * nr), pb->lse_epi = (double *)host_alloc(8 * nr);
    pb->parts = (double *)host_alloc(8 * 2 * nr);
    rng_state rng, rng_g;
    rng_seed(&rng, seed);
    fill_uniform(pb->x, nx, 0.0, 1.0, &rng); /* torch.rand */
    /* ConvTranspose3d's fan_in is weight.size(1) x 27 = 64 x 27 (PyTorch's rule) */
    init_conv_params(pb->weight, N_WEIGHT, pb->bias, C_OUT, C_OUT * KVOL, &rng);
    /* scale starts at ones but is learned: test with other values, one negative, one zero */
    for (int c = 0; c < C_OUT; c++)
        pb->scale[c] = (float)(1.5 * (2.0 * rng_uniform(&rng) - 1.0));
    pb->scale[5] = 0.0f;
    rng_seed(&rng_g, seed ^ 0x5DEECE66Dull);
    fill_normal(pb->g, nc, &rng_g);

    run_ctx *r = &pb->r;
    r->sh = sh;
    r->sm_count = dev->sm_count;
    r->smem_optin = smem_optin_bytes(SMEM_STATIC_MAX);
    pb->clusters_run = dev->cc_major >= 9 && gpu_code_arch() >= 90;
    r->split = v5_split(s, dev->sm_count);
    float *x = (float *)gpu_alloc(4 * nx, "input x"), *w = (float *)gpu_alloc(4 * N_WEIGHT, "weight");
    float *b = (float *)gpu_alloc(4 * C_OUT, "bias"), *g = (float *)gpu_alloc(4 * nc, "g");
    float *sc = (float *)gpu_alloc(4 * C_OUT, "scale");
    r->x = x, r->weight = w, r->bias = b, r->g = g, r->scale = sc;
    r->xp = (float *)gpu_alloc(4 * np, "pooled input");
    r->c = (float *)gpu_alloc(4 * nc, "conv output");
    r->y = (float *)gpu_alloc(4 * nc, "output y");
    const char *tn[4] = {"z (v1)", "p (v1)", "g' (b1)", "dz (b1)"};
    for (int i = 0; i < 4; i++)
        r->t[i] = (float *)gpu_alloc(4 * nc, tn[i]);
    r->lse = (float *)gpu_alloc(4 * nr, "lse");
    r->rpart = (float *)gpu_alloc(4 * nr * r->split, "v5 partial sums");
    int tiles = v7_tiles(s) > v8_tiles(s) ? v7_tiles(s) : v8_tiles(s);
    r->tpart = (float *)gpu_alloc(4 * nr * tiles, "v7 and v8 partial sums");
    r->wt = (float *)gpu_alloc(4 * N_WEIGHT, "v7 and v8 weights, reordered");
    r->rowk = (float *)gpu_alloc(4 * nr, "v8 row factors");
    size_t bp = nr * r->split > 64 * C_OUT ? nr * r->split : 64 * C_OUT;
    r->bpart = (float *)gpu_alloc(4 * bp, "backward partials");
    r->dot = (float *)gpu_alloc(4 * nr, "row dot products");
    r->dc = (float *)gpu_alloc(4 * nc, "dL/dc");
    r->dscale = (float *)gpu_alloc(4 * C_OUT, "dL/dscale");
    r->dxp = (float *)gpu_alloc(4 * np, "dL/dxp");
    r->dx = (float *)gpu_alloc(4 * nx, "dL/dx");
    r->dw = (float *)gpu_alloc(4 * N_WEIGHT, "dL/dw");
    r->dbias = (float *)gpu_alloc(4 * C_OUT, "dL/dbias");
    r->dbpart = (float *)gpu_alloc(4 * nr * 16, "b4 sums of dc");
    r->dwpart = (float *)gpu_alloc(4 * (size_t)(dev->sm_count / 2 > 1 ? dev->sm_count / 2 : 1) *
                                       N_WEIGHT, "b4 dw partials");
    r->wx = (float *)gpu_alloc(4 * N_WEIGHT, "b4 dxp weights");
    CUDA_CHECK(cudaMemcpy(w, pb->weight, 4 * N_WEIGHT, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(b, pb->bias, 4 * C_OUT, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(sc, pb->scale, 4 * C_OUT, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(g, pb->g, 4 * nc, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(x, pb->x, 4 * nx, cudaMemcpyHostToDevice));
    /* The library's transposed conv is set up as the Conv3d whose input gradient it is
     * (common/conv.h), on the transposed conv's output shape: 64 channels in, 32 out, kernel 3,
     * padding 1, stride 2. cudnnFind times its algorithms on the buffers it is given and writes
     * some of them: dc (zeroed) stands for that conv's input, dxp for its output and output
     * gradient (xp-shaped), c for its input gradient. */
    int cdims[5] = {s->n, C_OUT, s->od, s->oh, s->ow};
    CUDA_CHECK(cudaMemset(r->dc, 0, 4 * nc));
    lib_conv3d_setup(&pb->lib, cdims, C_IN, KS, 1, 2, r->dc, w, r->dxp, r->dxp, r->c, r->dw);
    r->lib = &pb->lib;
    problem_refresh(pb);
    return pb;
}

static void problem_destroy(problem *pb)
{
    run_ctx *r = &pb->r;
    lib_conv3d_destroy(&pb->lib);
    const void *dev[] = {r->x, r->weight, r->bias, r->g, r->scale, r->xp, r->c, r->y, r->t[0],
                         r->t[1], r->t[2], r->t[3], r->lse, r->rpart, r->tpart, r->wt, r->rowk, r->bpart, r->dot, r->dc,
                         r->dscale, r->dxp, r->dx, r->dw, r->dbias, r->dbpart, r->dwpart, r->wx};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        CUDA_CHECK(cudaFree((void *)dev[i]));
    void *host[] = {pb->x, pb->weight, pb->wd, pb->bias, pb->bd, pb->g, pb->host_c, pb->c_run,
                    pb->host_lse, pb->ref_c, pb->xpd, pb->lse_model, pb->lse_epi, pb->parts};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
    conv_grads_free(&pb->cgr);
    free(pb);
}

static const run_ctx *problem_ctx(const problem *pb) { return &pb->r; }

/* ------------------------------------------------------------ what a scope writes, verified */

/* every scope writes y and lse; the backward ones dc and dscale; a training step also dx, dw,
 * dbias. An epilogue scope reads c: host_c again, since a whole-model run before it rewrote c
 * with the library conv, whose algorithm may be nondeterministic (a value of c near 0 that
 * changes sign moves dc by its whole size) */
static void problem_poison(problem *pb, int scope)
{
    const shape *s = &pb->sh;
    if (scope == SCOPE_EPI_FWD || scope == SCOPE_EPI_FWDBWD)
        CUDA_CHECK(cudaMemcpy(pb->r.c, pb->host_c, 4 * conv_elems(s), cudaMemcpyHostToDevice));
    gpu_poison(pb->r.y, out_elems(s));
    gpu_poison(pb->r.lse, rows(s));
    if (scope == SCOPE_EPI_FWDBWD || scope == SCOPE_TRAIN) {
        gpu_poison(pb->r.dc, conv_elems(s));
        gpu_poison(pb->r.dscale, C_OUT);
    }
    if (scope == SCOPE_TRAIN) {
        gpu_poison(pb->r.dx, x_elems(s));
        gpu_poison(pb->r.dw, N_WEIGHT);
        gpu_poison(pb->r.dbias, C_OUT);
    }
}

/* the references of a piece of y: from the double conv (the whole model) or host_c */
typedef struct {
    const problem *pb;
    int whole;
} y_refs;

static void y_piece(void *ctx, size_t first, size_t n, const float *out, double *ref,
                    double *abs_sum)
{
    const y_refs *k = (const y_refs *)ctx;
    const problem *pb = k->pb;
    size_t S = (size_t)pb->sh.s;
    (void)out, (void)abs_sum;
    epilogue_rows_ref(&pb->sh, (int)(first / S), (int)(n / S), k->whole ? NULL : pb->host_c + first,
                      k->whole ? pb->ref_c + first : NULL, pb->sd,
                      k->whole ? pb->lse_model : pb->lse_epi, ref);
}

/* y, by row, and lse, against the model's references (whole) or the epilogue's from host_c,
 * within tol (y's rel_l2 and row-scaled |error|, lse's scaled |error|; lse's rel_l2 at y's);
 * both into v's hash */
typedef struct {
    double y_rel, y_row, lse;
} fwd_tol;
static const fwd_tol FP32_TOL = {TOL_REL_L2, TOL_ROW, TOL_LSE};

static void check_forward(problem *pb, hx_verdict *v, int whole, fwd_tol tol)
{
    const shape *s = &pb->sh;
    y_refs k = {pb, whole};
    hx_check_pieces(v, "y (by row)", pb->r.y, out_elems(s), piece_rows(s) * s->s, s->s, HX_ROWS,
                    tol.y_rel, tol.y_row, y_piece, &k, &v->hash);
    hx_check_output(v, "lse", pb->r.lse, pb->host_lse, rows(s),
                    whole ? pb->lse_model : pb->lse_epi, HX_SCALED, NULL, tol.y_rel, tol.lse);
    v->hash = hash_f32(v->hash, pb->host_lse, rows(s));
}

/* the references of a piece of dc: from host_c, or from the c the run's own conv wrote (read
 * back a piece at a time); each row's sums for dscale into pb->parts */
typedef struct {
    problem *pb;
    int from_run;
} dc_refs;

static void dc_piece(void *ctx, size_t first, size_t n, const float *out, double *ref,
                     double *abs_sum)
{
    const dc_refs *k = (const dc_refs *)ctx;
    problem *pb = k->pb;
    size_t S = (size_t)pb->sh.s;
    const float *c = pb->host_c + first;
    (void)out;
    if (k->from_run) {
        CUDA_CHECK(cudaMemcpy(pb->c_run, pb->r.c + first, 4 * n, cudaMemcpyDeviceToHost));
        c = pb->c_run;
    }
    epilogue_backward_rows_ref(&pb->sh, (int)(first / S), (int)(n / S), c, NULL, pb->sd,
                               pb->g + first, ref, abs_sum, pb->parts);
}

/* dc and dscale against the backward from host_c (the epilogue scope) or from the c the run's
 * own library conv wrote (a training step); both into v's hash */
static void check_backward(problem *pb, hx_verdict *v, int from_run)
{
    const shape *s = &pb->sh;
    dc_refs k = {pb, from_run};
    hx_check_pieces(v, "dc", pb->r.dc, conv_elems(s), piece_rows(s) * s->s, 0, HX_SUM, 0, TOL_SUM,
                    dc_piece, &k, &v->hash);
    epilogue_dscale_ref(s, pb->parts, pb->dscale, pb->abs_dscale);
    hx_check_output(v, "dscale", pb->r.dscale, pb->host_dscale, C_OUT, pb->dscale, HX_SUM,
                    pb->abs_dscale, 0, TOL_SUM);
    v->hash = hash_f32(v->hash, pb->host_dscale, C_OUT);
}

/* the run's dc, count samples from n0, read back for the conv's gradient references */
static const float *dc_fetch(void *ctx, int n0, int count, float *room)
{
    const problem *pb = (const problem *)ctx;
    size_t per = (size_t)C_OUT * pb->sh.s;
    CUDA_CHECK(cudaMemcpy(room, pb->r.dc + n0 * per, 4 * count * per, cudaMemcpyDeviceToHost));
    return room;
}

/* the references of a piece of dx (x's shape): the conv's dx (xpd's) and its terms' magnitudes
 * through the pool's backward, whose weights (1/8) are positive */
static void dx_piece(void *ctx, size_t first, size_t n, const float *out, double *ref,
                     double *abs_sum)
{
    const problem *pb = (const problem *)ctx;
    (void)out;
    pool_backward_range_ref(&pb->sh, pb->cgr.dx, first, n, ref);
    pool_backward_range_ref(&pb->sh, pb->cgr.dx_abs, first, n, abs_sum);
}

static hx_verdict problem_verify(problem *pb, int scope)
{
    const run_ctx *r = &pb->r;
    const shape *s = &pb->sh;
    int whole = scope == SCOPE_MODEL_FWD || scope == SCOPE_TRAIN;
    hx_verdict v = {1, 1, HASH_INIT, ""};
    /* the library's transposed conv (its backward-data algorithm, common/conv.h) may be
     * nondeterministic, and with it what a whole-model run computes */
    v.deterministic = !whole || pb->lib.dx_det;
    /* from x, y carries the conv's float error: z moves by at most c_err, so each p by a factor
     * exp(+-c_err) and the row's sum by as much, a relative error of 2 c_err on top; twice that
     * again for another run of a nondeterministic conv than the one c_err was measured on */
    fwd_tol tol = FP32_TOL;
    tol.y_row += whole ? 4.0 * pb->c_err : 0.0;
    /* a TF32 version (v8, b4): within twice a TF32 conv's error on these tensors, in each measure */
    int tf32 = whole && hx_tol_factor() > 1.0;
    if (tf32) {
        tf32_conv_error(pb);
        hx_tf32_own_bounds();
        tol.y_rel = fmax(tol.y_rel, 2.0 * pb->tf32_y_rel);
        tol.y_row = fmax(tol.y_row, 2.0 * pb->tf32_y_row);
        tol.lse = fmax(tol.lse, 2.0 * pb->tf32_lse);
        snprintf(v.detail, sizeof v.detail, "bounds twice a TF32 conv's: y rel_l2 %.1e row %.1e, "
                 "lse %.1e", pb->tf32_y_rel, pb->tf32_y_row, pb->tf32_lse);
    }
    check_forward(pb, &v, whole, tol);
    if (scope != SCOPE_EPI_FWDBWD && scope != SCOPE_TRAIN)
        return v;
    /* the backward from the conv output the run read: host_c in the epilogue scope, and in a
     * training step the c its own library conv wrote */
    check_backward(pb, &v, scope == SCOPE_TRAIN);
    if (scope == SCOPE_EPI_FWDBWD)
        return v;
    /* the transposed conv's and the pool's gradients against the double backward of this
     * run's dc (conv_ref.h, dc read back a sample at a time); the conv's dx is xpd's, taken
     * through the pool's backward to x's shape. dx is a sum of 864 products a value, which
     * cancel: against their magnitudes */
    convT3d_geom g = conv_geom(s);
    conv_transpose3d_grads_fetch(&g, pb->xpd, pb->wd, dc_fetch, pb, 1, &pb->cgr);
    /* a TF32 step's (b4): products of operands each rounded to 2^-11 of itself, off by up to
     * about 2^-10 of the terms' magnitudes: dx and dw within HX_TF32_TOL x TOL_SUM = 1e-3 of
     * them (dbias, sums of dc in fp32, at fp32's); how they compare with a TF32 backward's error
     * is b4_checks's */
    double grad_tol = tf32 ? HX_TF32_TOL * TOL_SUM : TOL_SUM;
    hx_check_pieces(&v, tf32 ? "dx (TF32's bound)" : "dx", r->dx, x_elems(s), PIECE, 0, HX_SUM, 0,
                    grad_tol, dx_piece, pb, NULL);
    hx_check_output(&v, tf32 ? "dw (TF32's bound)" : "dw", r->dw, pb->host_dw, N_WEIGHT,
                    pb->cgr.dw, HX_SUM, pb->cgr.dw_abs, 0, grad_tol);
    hx_check_output(&v, "dbias", r->dbias, pb->host_dbias, C_OUT, pb->cgr.dbias, HX_SUM,
                    pb->cgr.dbias_abs, 0, TOL_SUM);
    return v;
}

/* model.h's counts; the conv's FLOPs once in the forward, three times in a training step */
static void problem_counts(const problem *pb, double bytes[N_SCOPES], double flops[N_SCOPES])
{
    const shape *s = &pb->sh;
    bytes[SCOPE_EPI_FWD] = epilogue_bytes(s), bytes[SCOPE_MODEL_FWD] = model_bytes(s);
    bytes[SCOPE_EPI_FWDBWD] = epilogue_fwdbwd_bytes(s), bytes[SCOPE_TRAIN] = train_step_bytes(s);
    flops[SCOPE_MODEL_FWD] = conv_flops(s), flops[SCOPE_TRAIN] = 3.0 * conv_flops(s);
}

/* ------------------------------------------------------------ CPU checks: golden tensors */

/* a folder written by `make golden` (data/golden/ch05/NxCxDxHxW/): PyTorch's float64 model on a
 * small input, stored float32, against this reference; catches a reference that agrees with
 * itself (reference.cu's checks) but means something else than PyTorch's model. Two planted
 * faults show the check can fail: scale at PyTorch's initial ones instead of the learned values
 * the golden data has, and the clamp's window moved (clamp(c - 0.5, 0, 1), the bounds
 * [0.5, 1.5] in effect). */
static void golden_case(const char *dir, const char *name)
{
    int64_t dims[5];
    char err[128];
    if (parse_shape(name, 5, dims, err, sizeof err) || shape_problem(dims)) {
        check(0, "golden %s: not a valid shape name", name);
        return;
    }
    shape s = shape_of(dims);
    convT3d_geom cg = conv_geom(&s);
    size_t nx = x_elems(&s), np = pool_elems(&s), nc = conv_elems(&s);
    enum { X, W, B, SCALE, C, Y, G, DC, DW, DB, DX, DSCALE, N_FILES };
    const char *files[N_FILES] = {"x", "conv_weight", "conv_bias", "scale", "conv_out", "out",
                                  "grad_output", "grad_conv_out", "grad_conv_weight",
                                  "grad_conv_bias", "grad_x", "grad_scale"};
    size_t sizes[N_FILES] = {nx, N_WEIGHT, C_OUT, C_OUT, nc, nc, nc, nc, N_WEIGHT, C_OUT, nx, C_OUT};
    float *t[N_FILES];
    int ok = 1;
    for (int i = 0; i < N_FILES; i++)
        ok &= (t[i] = npy_load(dir, files[i], sizes[i])) != NULL;
    if (ok) {
        double *xd = (double *)host_alloc(8 * nx), *xp = (double *)host_alloc(8 * np);
        double *wd = (double *)host_alloc(8 * N_WEIGHT), *c = (double *)host_alloc(8 * nc);
        double *y = (double *)host_alloc(8 * nc), *dxp = (double *)host_alloc(8 * np);
        double *dx = (double *)host_alloc(8 * nx), *dw = (double *)host_alloc(8 * N_WEIGHT);
        double *abs_dw = (double *)host_alloc(8 * N_WEIGHT);
        double *adxp = (double *)host_alloc(8 * np), *adx = (double *)host_alloc(8 * nx);
        double bd[C_OUT], sd[C_OUT], db[C_OUT], abs_db[C_OUT], one[C_OUT];
        bwd_ref br;
        memset(&br, 0, sizeof br);
        br.dc = (double *)host_alloc(8 * nc), br.abs_dc = (double *)host_alloc(8 * nc);
        for (size_t i = 0; i < nx; i++)
            xd[i] = t[X][i];
        for (int i = 0; i < N_WEIGHT; i++)
            wd[i] = t[W][i];
        for (int i = 0; i < C_OUT; i++)
            bd[i] = t[B][i], sd[i] = t[SCALE][i], one[i] = 1.0;
        pool_ref(&s, NULL, xd, xp);
        conv_transpose3d_ref(&cg, xp, wd, bd, c);
        epilogue_ref(&s, NULL, c, sd, y, NULL);
        epilogue_backward_ref(&s, NULL, c, sd, t[G], &br);
        conv_transpose3d_backward_ref(&cg, xp, wd, br.dc, dxp, dw, db, abs_dw, abs_db, adxp);
        pool_backward_ref(&s, dxp, dx);
        pool_backward_ref(&s, adxp, adx);
        /* golden = the float32 rounding of PyTorch's float64 result: 1e-6 leaves room for that
         * rounding and for summation order, none for another formula; y and dc (all far below
         * 1) by row and against their terms' magnitudes, the sums against theirs */
        verify_result v[7] = {
            verify_f32(t[C], c, nc, 1e-6, 1e-6),
            verify_rows_f32(t[Y], y, rows(&s), s.s, 1e-6, 1e-6),
            verify_sum_f32(t[DC], br.dc, br.abs_dc, nc, 1e-6),
            verify_sum_f32(t[DSCALE], br.dscale, br.abs_dscale, C_OUT, 1e-6),
            verify_sum_f32(t[DW], dw, abs_dw, N_WEIGHT, 1e-6),
            verify_sum_f32(t[DB], db, abs_db, C_OUT, 1e-6),
            verify_sum_f32(t[DX], dx, adx, nx, 1e-6),
        };
        int all = 1;
        for (int i = 0; i < 7; i++)
            all &= v[i].pass;
        check(all,
              "golden %s (PyTorch float64): rel_l2 c %.1e y %.1e (worst row) dc %.1e dscale %.1e "
              "dw %.1e dbias %.1e dx %.1e",
              name, v[0].rel_l2, v[1].rel_l2, v[2].rel_l2, v[3].rel_l2, v[4].rel_l2, v[5].rel_l2,
              v[6].rel_l2);
        /* planted faults: scale left at ones; the clamp's window moved by 0.5 */
        epilogue_ref(&s, NULL, c, one, y, NULL);
        verify_result bad_scale = verify_rows_f32(t[Y], y, rows(&s), s.s, 1e-6, 1e-6);
        double *cu = (double *)host_alloc(8 * nc);
        for (size_t i = 0; i < nc; i++)
            cu[i] = c[i] - 0.5;
        epilogue_ref(&s, NULL, cu, sd, y, NULL);
        verify_result bad_clamp = verify_rows_f32(t[Y], y, rows(&s), s.s, 1e-6, 1e-6);
        check(!bad_scale.pass && !bad_clamp.pass,
              "golden %s: references with scale = 1 (rel_l2 %.1e) and with the clamp's window "
              "moved by 0.5 (rel_l2 %.1e) are caught", name, bad_scale.rel_l2, bad_clamp.rel_l2);
        free(cu);
        free(xd), free(xp), free(wd), free(c), free(y), free(dxp), free(dx), free(dw), free(abs_dw);
        free(adxp), free(adx);
        free(br.dc), free(br.abs_dc);
    } else {
        check(0, "golden %s: missing or malformed tensors", name);
    }
    for (int i = 0; i < N_FILES; i++)
        free(t[i]);
}

/* --test's CPU checks: the reference against its derivation (reference.cu), then against
 * PyTorch (a missing data/golden/ch05 is a SKIP: `make golden` writes it) */
static void cpu_checks(uint64_t seed)
{
    reference_checks(seed);
    for_each_golden_case("data/golden/ch05", golden_case);
}

/* ------------------------------------------------- GPU checks: shapes, cases */

static const int64_t test_shapes[][CLI_MAX_DIMS] = {
    /* N x 32 x D x H x W; pooled PD x PH x PW; a row is S = 8 PD PH PW values */
    {1, 32, 2, 2, 2},    /* S = 8: two float4 a row, most threads and 6 of v6's 8 blocks idle */
    {2, 32, 3, 5, 7},    /* odd extents (the pool drops a slice of each), S = 48 */
    {3, 32, 4, 6, 10},   /* S = 240, 60 float4: fewer than a warp's worth for some blocks */
    {2, 32, 6, 10, 22},  /* S = 1320 = 8 x 3 x 5 x 11, 330 float4: v6's slices uneven */
    {1, 32, 18, 34, 66}, /* S = 40392, 10098 float4: several chunks of a block's slice */
    {1, 32, 32, 64, 64}, /* S = 131072: the KernelBench row (v6: 64 KB a block) */
};

/* b4's TF32 dxp and dw (wgmma, where sm_90a code runs), from its own training step, against the
 * exact backward (double) of the step's dc, beside the error a TF32 backward makes on the same
 * tensors (xp, w and dc rounded to TF32, sums in double): b4's within 2x of it in relative L2 and
 * in largest error (verify_within_2x). Its dx is dxp through the pool's backward, which only
 * scales by 1/8 (problem_verify checks dx itself). */
static void b4_checks(problem *pb)
{
    const run_ctx *r = &pb->r;
    const shape *s = &pb->sh;
    const char *no = hx_needs_problem(NEEDS_SM90 | NEEDS_SM90A);
    if (no) {
        skip("b4 TF32 dxp and dw within 2x a TF32 backward's error on %dx32x%dx%dx%d: %s", s->n,
             s->d, s->h, s->w, no);
        return;
    }
    size_t np = pool_elems(s), nc = conv_elems(s);
    gpu_poison(r->dxp, np);
    gpu_poison(r->dw, N_WEIGHT);
    b4_launch(r, SCOPE_TRAIN);
    CUDA_CHECK(cudaDeviceSynchronize());
    float *dc = (float *)host_alloc(4 * nc), *dxp = (float *)host_alloc(4 * np);
    float *dw = (float *)host_alloc(4 * N_WEIGHT);
    float *f = (float *)host_alloc(4 * (np > N_WEIGHT ? np : N_WEIGHT));
    CUDA_CHECK(cudaMemcpy(dc, r->dc, 4 * nc, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(dxp, r->dxp, 4 * np, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(dw, r->dw, 4 * N_WEIGHT, cudaMemcpyDeviceToHost));
    double *dcd = (double *)host_alloc(8 * nc), *xt = (double *)host_alloc(8 * np);
    double *wt = (double *)host_alloc(8 * N_WEIGHT), *dx_e = (double *)host_alloc(8 * np);
    double *dx_m = (double *)host_alloc(8 * np), *dw_e = (double *)host_alloc(8 * N_WEIGHT);
    double *dw_m = (double *)host_alloc(8 * N_WEIGHT), db[C_OUT];
    convT3d_geom g = conv_geom(s);
    for (size_t i = 0; i < nc; i++)
        dcd[i] = dc[i];
    conv_transpose3d_backward_ref(&g, pb->xpd, pb->wd, dcd, dx_e, dw_e, db, NULL, NULL, NULL);
    for (size_t i = 0; i < nc; i++)
        dcd[i] = tf32_round(dc[i]);
    for (size_t i = 0; i < np; i++)
        xt[i] = tf32_round((float)pb->xpd[i]);
    for (int i = 0; i < N_WEIGHT; i++)
        wt[i] = tf32_round(pb->weight[i]);
    conv_transpose3d_backward_ref(&g, xt, wt, dcd, dx_m, dw_m, db, NULL, NULL, NULL);
    verify_result tx = verify_f32(dxp, dx_e, np, INFINITY, INFINITY);
    verify_result tw = verify_f32(dw, dw_e, N_WEIGHT, INFINITY, INFINITY);
    for (size_t i = 0; i < np; i++)
        f[i] = (float)dx_m[i];
    verify_result mx = verify_f32(f, dx_e, np, INFINITY, INFINITY);
    for (int i = 0; i < N_WEIGHT; i++)
        f[i] = (float)dw_m[i];
    verify_result mw = verify_f32(f, dw_e, N_WEIGHT, INFINITY, INFINITY);
    check(tx.nonfinite == 0 && tw.nonfinite == 0 && verify_within_2x(tx, mx) &&
              verify_within_2x(tw, mw),
          "b4 TF32 dxp and dw within 2x a TF32 backward's error (xp, w, dc rounded to TF32, double "
          "sums) on %dx32x%dx%dx%d: dxp rel_l2 %.1e (%.1e) max_abs %.1e (%.1e), dw rel_l2 %.1e "
          "(%.1e) max_abs %.1e (%.1e)", s->n, s->d, s->h, s->w, tx.rel_l2, mx.rel_l2, tx.max_abs,
          mx.max_abs, tw.rel_l2, mw.rel_l2, tw.max_abs, mw.max_abs);
    free(dc), free(dxp), free(dw), free(f), free(dcd), free(xt), free(wt), free(dx_e), free(dx_m);
    free(dw_e), free(dw_m);
}

/* the library conv the epilogues read, against the reference; then v6 and b3 forced to keep
 * only a third of each block's slice in shared memory, so that their path for rows longer than
 * a cluster holds (the rest read twice) runs on every test shape */
static void shape_checks(problem *pb, int t)
{
    const shape *s = &pb->sh;
    (void)t;
    verify_result vc = verify_f32(pb->host_c, pb->ref_c, conv_elems(s), TOL_REL_L2, 1e-4);
    check(vc.pass, "%s transposed conv (engine %d) = reference on %dx32x%dx%dx%d, rel_l2 %.1e",
          pb->lib.backend, pb->lib.dx_algo, s->n, s->d, s->h, s->w, vc.rel_l2);
    if (!pb->clusters_run) {
        skip("v6 keeping a third of each slice on %dx32x%dx%dx%d: needs sm_90 (clusters)", s->n,
             s->d, s->h, s->w);
        return;
    }
    int keep4 = v6_keep4(&pb->r) / 3;
    gpu_poison(pb->r.y, out_elems(s));
    gpu_poison(pb->r.lse, rows(s));
    v6_epilogue_keep(&pb->r, keep4);
    CUDA_CHECK(cudaDeviceSynchronize());
    hx_verdict v = {1, 1, HASH_INIT, ""};
    check_forward(pb, &v, 0, FP32_TOL);
    check(v.pass, "v6 keeping %d of %d float4 a block in shared memory, the rest read twice, on "
          "%dx32x%dx%dx%d: %s", keep4, v6_keep4(&pb->r), s->n, s->d, s->h, s->w, v.detail);
    /* the same for b3's backward, after v6's forward (lse) */
    int keep_b = b3_keep4_max(&pb->r) / 3;
    gpu_poison(pb->r.dc, conv_elems(s));
    gpu_poison(pb->r.dscale, C_OUT);
    b3_backward_keep(&pb->r, keep_b);
    CUDA_CHECK(cudaDeviceSynchronize());
    hx_verdict vb = {1, 1, HASH_INIT, ""};
    check_backward(pb, &vb, 0);
    check(vb.pass, "b3 keeping %d of %d float4 of c and of g a block, the rest read twice, on "
          "%dx32x%dx%dx%d: %s", keep_b, b3_keep4_max(&pb->r), s->n, s->d, s->h, s->w, vb.detail);
    b4_checks(pb);
}

/* extremes: the input x 1000 (c in the hundreds: nearly every value clamps to 0 or 1), a
 * planted c of +-1000 (what the clamp makes harmless: exp(1000) is inf in float), c planted at
 * exactly the bounds 0 and 1 among values inside and outside (the clamp passes the gradient at
 * the bounds), and a constant row (p = 1 / S exactly) */
static const hx_case cases[] = {
    {"x*1000", ~0u, NULL},
    {"c ~ +-1000", SC(SCOPE_EPI_FWD) | SC(SCOPE_EPI_FWDBWD), NULL},
    {"c at 0, 1", SC(SCOPE_EPI_FWD) | SC(SCOPE_EPI_FWDBWD), NULL},
    {"c const/row", SC(SCOPE_EPI_FWD) | SC(SCOPE_EPI_FWDBWD), NULL},
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
    static const float at[5] = {0.0f, 1.0f, -0.25f, 1.25f, 0.5f};
    for (size_t i = 0; i < conv_elems(s); i++) {
        size_t row = i / s->s;
        if (k == 1)
            pb->host_c[i] = (float)((row % 2 ? 1000.0 : -1000.0) * (2.0 * rng_uniform(&rng) - 1.0));
        else if (k == 2) /* a mix: the bounds, outside, inside */
            pb->host_c[i] = rng_uniform(&rng) < 0.5 ? at[i % 5] : (float)rng_uniform(&rng);
        else
            pb->host_c[i] = (float)(0.2 * (double)(row % 7) - 0.3);
    }
    CUDA_CHECK(cudaMemcpy(pb->r.c, pb->host_c, 4 * conv_elems(s), cudaMemcpyHostToDevice));
    epilogue_refs(pb);
}

/* ---------------------------------------------------------------- after the table; --dump */

static void time_pool(const void *r) { pool_forward((const run_ctx *)r); }
static void time_grads(const void *r) { conv_pool_grads((const run_ctx *)r); }

static void notes(problem *pb, const device_info *dev, int reps, const char *only)
{
    const shape *s = &pb->sh;
    const lib_conv3d *cc = &pb->lib;
    const run_ctx *r = &pb->r;
    timing tp = gpu_time(time_pool, r, reps);
    printf("AvgPool3d alone (v1's kernel, as ATen's): median %.4f ms [%.4f - %.4f], %.0f GB/s\n",
           tp.median_ms, tp.min_ms, tp.max_ms,
           4.0 * (x_elems(s) + pool_elems(s)) / (tp.median_ms * 1e6));
    hx_conv_bufs b = {1, r->xp, r->weight, r->bias, r->dc, r->c, r->dxp, r->dw, r->dbias,
                      conv_flops(s)};
    hx_conv_ops(cc, &b, dev, reps, NULL);
    if (!only) {
        timing tg = gpu_time(time_grads, r, reps);
        printf("in the training step: the transposed conv's and the pool's gradients together "
               "(the table's dx, dw, dbias, then the pool's backward): median %.4f ms\n",
               tg.median_ms);
    }
    printf("v5, b2: rows split over %d blocks of %d threads\n", r->split, V5_BLOCK);
    if (pb->clusters_run)
        printf("v6: clusters of %d blocks, %d KB of a row a block in shared memory (of %zu KB "
               "allowed), %d clusters resident at once for %d rows; b3: clusters of %d\n", V6_CL,
               v6_keep4(r) * 16 / 1024, r->smem_optin / 1024, v6_resident_clusters(r), rows(s),
               b3_cluster_size(r));
    printf("floors at %.0f GB/s: epilogue %.1f MB -> %.4f ms; c read twice %.1f MB -> %.4f ms; "
           "epilogue fwd+bwd %.1f MB -> %.4f ms; the transposed conv: %.2f GFLOP -> %.4f ms at "
           "%.1f TFLOP/s\n",
           dev->copy_gbps, epilogue_bytes(s) / 1e6, epilogue_bytes(s) / (dev->copy_gbps * 1e6),
           (epilogue_bytes(s) + 4.0 * conv_elems(s)) / 1e6,
           (epilogue_bytes(s) + 4.0 * conv_elems(s)) / (dev->copy_gbps * 1e6),
           epilogue_fwdbwd_bytes(s) / 1e6, epilogue_fwdbwd_bytes(s) / (dev->copy_gbps * 1e6),
           conv_flops(s) / 1e9, conv_flops(s) / (dev->fp32_tflops * 1e9), dev->fp32_tflops);
}

/* DIR/NAME[_ID].npy from n floats on the device (read back whole: a dump is for small shapes) */
static void dump_device(const char *dir, const char *name, const char *id, const float *dev,
                        size_t n, const int64_t *dims)
{
    float *host = (float *)host_alloc(4 * n);
    CUDA_CHECK(cudaMemcpy(host, dev, 4 * n, cudaMemcpyDeviceToHost));
    if (id)
        npy_save_id_or_exit(dir, name, id, host, 5, dims);
    else
        npy_save_or_exit(dir, name, host, 5, dims);
    free(host);
}

static void dump(problem *pb, const char *dir, const char *id, int scope)
{
    const shape *s = &pb->sh;
    const run_ctx *r = &pb->r;
    int64_t xs[5] = {s->n, C_IN, s->d, s->h, s->w}, ws[5] = {C_IN, C_OUT, KS, KS, KS};
    int64_t bs[1] = {C_OUT}, ss[5] = {1, C_OUT, 1, 1, 1};
    int64_t cs[5] = {s->n, C_OUT, s->od, s->oh, s->ow};
    if (!id) {
        npy_save_or_exit(dir, "x", pb->x, 5, xs);
        npy_save_or_exit(dir, "conv_weight", pb->weight, 5, ws);
        npy_save_or_exit(dir, "conv_bias", pb->bias, 1, bs);
        npy_save_or_exit(dir, "scale", pb->scale, 5, ss);
        npy_save_or_exit(dir, "conv_out", pb->host_c, 5, cs);
        npy_save_or_exit(dir, "grad_output", pb->g, 5, cs);
        return;
    }
    /* the outputs of the verified run just made, still on the device */
    if (scope != SCOPE_TRAIN) {
        char name[64];
        snprintf(name, sizeof name, scope == SCOPE_MODEL_FWD ? "out_%s_model" : "out_%s", id);
        dump_device(dir, name, NULL, r->y, out_elems(s), cs);
        return;
    }
    dump_device(dir, "grad_conv_out", id, r->dc, conv_elems(s), cs);
    npy_save_id_or_exit(dir, "grad_scale", id, pb->host_dscale, 5, ss);
    npy_save_id_or_exit(dir, "grad_conv_weight", id, pb->host_dw, 5, ws);
    npy_save_id_or_exit(dir, "grad_conv_bias", id, pb->host_dbias, 1, bs);
    dump_device(dir, "grad_x", id, r->dx, x_elems(s), xs);
}

const hx_chapter chapter_machinery = {
    "05",
    "AvgPool3d -> ConvTranspose3d -> clamp -> softmax over D*H*W -> *scale (KernelBench level 2, #38)",
    "\nChapter 5, KernelBench level 2 model #38:\n"
    "  AvgPool3d(2) -> ConvTranspose3d(32->64, k3, s2, p1, output_padding 1) -> clamp(0, 1)\n"
    "  -> softmax over each (n, channel) row of D*H*W values -> * scale (1x64x1x1x1, learned).\n"
    "  --shape is N x 32 x D x H x W (default 32x32x32x64x64), D, H, W >= 2; the output is\n"
    "  N x 64 x 2(D/2) x 2(H/2) x 2(W/2). The default shape needs about 9.8 GB of device memory\n"
    "  and up to 2 GiB of cuDNN workspace (c, y, g, dc and v1's four intermediates are 1.07 GB\n"
    "  each); a smaller batch needs less.\n"
    "  Limits: input and conv output < 2^31 elements.\n"
    "  --dump DIR writes x.npy, conv_weight.npy (32,64,3,3,3), conv_bias.npy (64), scale.npy\n"
    "  (1,64,1,1,1), conv_out.npy (the library conv output the epilogue versions read),\n"
    "  grad_output.npy; then out_v1.npy .. out_v6.npy (the epilogue from conv_out),\n"
    "  out_vK_model.npy (the whole model from x) and from each backward version's training step\n"
    "  grad_conv_out_bK.npy, grad_scale_bK.npy, grad_conv_weight_bK.npy, grad_conv_bias_bK.npy,\n"
    "  grad_x_bK.npy. Check a dump: python3 data/pytorch_peer.py check DIR --chapter 5\n",
    5,
    {32, 32, 32, 64, 64},
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
