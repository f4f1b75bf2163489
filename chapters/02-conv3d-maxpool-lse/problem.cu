/*
 * problem.cu: chapter 2's host machinery, for the harness (common/harness.h): the inputs and
 * parameters, the device buffers, cuDNN's setup, the references, what each scope writes and how
 * it is verified, the CPU checks, the awkward shapes and extreme values, the notes after the
 * table, the dump. Nothing here is a lesson; the versions are in the files numbered in reading order, 01-v1-eager.cu on.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

#define TOL_REL_L2 1e-5
#define TOL_ABS 1e-4
#define TOL_SUM 1e-6 /* reduced gradients: against the sum of their terms' magnitudes */
/* a TF32 dw (b4): cvt.rna rounds each operand to within 2^-11 of itself, so a product is off by
 * up to 2^-10 + 2^-22 of its magnitude; the sum's own rounding is an fp32 sum's, TOL_SUM. Short
 * sums show it whole (one window a channel at 1x32x2x2x2: one term a weight), where
 * HX_TF32_TOL x TOL_SUM = 1e-4 would fail a correct kernel. */
#define TF32_SUM_TOL (0x1p-10 + 0x1p-22 + TOL_SUM)

struct problem {
    shape sh;
    float *x, *weight, *bias, *g; /* host */
    double *xd, *wd, *bd;
    run_ctx r;
    lib_ctx lib;
    float *host_out, *host_c, *host_dc, *host_dx, host_dw[N_WEIGHT], host_dbias[C_OUT];
    double *ref_c, *ref_model, *ref_epilogue;
    int have_bwd_refs;
    double *ref_dc;                               /* from host_c: the epilogue's backward */
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
        snprintf(why, sizeof why, "max pooling with kernel 2 needs D, H and W of at least 2");
        return why;
    }
    if (dims[0] > 65535 || dims[2] > 65535) {
        snprintf(why, sizeof why, "batch and depth must be at most 65535 (grid limits)");
        return why;
    }
    return hx_index_problem((double)dims[0] * C_OUT * dims[2] * dims[3] * dims[4], "the conv output");
}

static void lib_setup(lib_ctx *cc, const shape *s, const run_ctx *r)
{
    int xd[5] = {s->n, C_IN, s->d, s->h, s->w};
    lib_conv3d_setup(&cc->conv, xd, C_OUT, KS, 1, 1, r->x, r->weight, r->c, r->dc, r->dx, r->dw);
#if HAVE_CUDNN
    int pdim[5] = {s->n, C_OUT, s->pd, s->ph, s->pw};
    int pstr[5] = {C_OUT * s->s, s->s, s->ph * s->pw, s->pw, 1};
    int win[3] = {2, 2, 2}, zero3[3] = {0, 0, 0};
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&cc->p_desc));
    CUDNN_CHECK(cudnnCreatePoolingDescriptor(&cc->pool_desc));
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(cc->p_desc, CUDNN_DATA_FLOAT, 5, pdim, pstr));
    /* floor mode like PyTorch: cuDNN's output extent is 1 + (L - 2) / 2 = floor(L / 2) */
    CUDNN_CHECK(cudnnSetPoolingNdDescriptor(cc->pool_desc, CUDNN_POOLING_MAX,
                                            CUDNN_NOT_PROPAGATE_NAN, 3, win, zero3, win));
#endif
}

/* uploads x, runs the cuDNN conv, computes the forward references. y's reference comes from the
 * double conv; the backward's from the GPU's conv output (verified against the double conv):
 * the argmax is discontinuous, and where two window values are within float rounding of each
 * other the float and double convs may pick different elements. Measured at the KernelBench
 * shape (LABBOOK.md, the tolerance choices): dc off by up to 2e-2 at such windows against a
 * reference on the double conv. */
static void problem_refresh(problem *pb)
{
    const shape *s = &pb->sh;
    CUDA_CHECK(cudaMemcpy((void *)pb->r.x, pb->x, 4 * x_elems(s), cudaMemcpyHostToDevice));
    conv_forward(&pb->r);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(pb->host_c, pb->r.c, 4 * conv_elems(s), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < x_elems(s); i++)
        pb->xd[i] = pb->x[i];
    for (int i = 0; i < N_WEIGHT; i++)
        pb->wd[i] = pb->weight[i];
    for (int i = 0; i < C_OUT; i++)
        pb->bd[i] = pb->bias[i];
    conv3d_geom g = conv_geom(s);
    conv3d_ref(&g, pb->xd, pb->wd, pb->bd, pb->ref_c);
    epilogue_ref(s, NULL, pb->ref_c, pb->ref_model);
    epilogue_ref(s, pb->host_c, NULL, pb->ref_epilogue);
    pb->have_bwd_refs = 0;
    conv_grads_reset(&pb->cgr);
}

static problem *problem_create(const int64_t *dims, uint64_t seed, const device_info *dev)
{
    problem *pb = (problem *)calloc(1, sizeof *pb);
    if (!pb)
        die(1, "out of host memory");
    shape sh = shape_of(dims);
    const shape *s = &sh;
    pb->sh = sh;
    size_t nx = x_elems(s), nc = conv_elems(s), ny = out_elems(s);
    pb->x = (float *)host_alloc(4 * nx), pb->xd = (double *)host_alloc(8 * nx);
    pb->weight = (float *)host_alloc(4 * N_WEIGHT), pb->wd = (double *)host_alloc(8 * N_WEIGHT);
    pb->bias = (float *)host_alloc(4 * C_OUT), pb->bd = (double *)host_alloc(8 * C_OUT);
    pb->g = (float *)host_alloc(4 * ny);
    pb->host_out = (float *)host_alloc(4 * ny), pb->host_c = (float *)host_alloc(4 * nc);
    pb->host_dc = (float *)host_alloc(4 * nc), pb->host_dx = (float *)host_alloc(4 * nx);
    pb->ref_c = (double *)host_alloc(8 * nc);
    pb->ref_model = (double *)host_alloc(8 * ny), pb->ref_epilogue = (double *)host_alloc(8 * ny);
    pb->ref_dc = (double *)host_alloc(8 * nc);
    rng_state rng, rng_g;
    rng_seed(&rng, seed);
    fill_uniform(pb->x, nx, 0.0, 1.0, &rng);                                     /* torch.rand */
    init_conv_params(pb->weight, N_WEIGHT, pb->bias, C_OUT, C_IN * KVOL, &rng); /* fan_in 864 */
    rng_seed(&rng_g, seed ^ 0x5DEECE66Dull);
    fill_normal(pb->g, ny, &rng_g);

    run_ctx *r = &pb->r;
    r->sh = sh;
    r->sm_count = dev->sm_count;
    float *x = (float *)gpu_alloc(4 * nx, "input x"), *w = (float *)gpu_alloc(4 * N_WEIGHT, "weight");
    float *b = (float *)gpu_alloc(4 * C_OUT, "bias"), *g = (float *)gpu_alloc(4 * ny, "g");
    r->x = x, r->weight = w, r->bias = b, r->g = g;
    r->c = (float *)gpu_alloc(4 * nc, "conv output");
    r->y = (float *)gpu_alloc(4 * ny, "output y");
    r->p = (float *)gpu_alloc(4 * pool_elems(s), "pooled p");
    r->dp = (float *)gpu_alloc(4 * pool_elems(s), "dL/dp");
    r->idx = (int *)gpu_alloc(4 * pool_elems(s), "pool argmax");
    r->z = (float *)gpu_alloc(4 * ny, "z");
    r->dz = (float *)gpu_alloc(4 * ny, "dz");
    r->dc = (float *)gpu_alloc(4 * nc, "dL/dc");
    r->dx = (float *)gpu_alloc(4 * nx, "dL/dx");
    r->dw = (float *)gpu_alloc(4 * N_WEIGHT, "dL/dw");
    r->dbias = (float *)gpu_alloc(4 * C_OUT, "dL/dbias");
    r->partials = (float *)gpu_alloc(4 * DBIAS_BLOCKS * C_OUT, "partial sums");
    r->w_k = (float *)gpu_alloc(8 * N_WEIGHT, "weights, k-major (v11: split)");
    r->c_own = (float *)gpu_alloc(4 * nc, "our conv's output");
    r->dw_part = (float *)gpu_alloc(4 * (size_t)dw_shares_max(r->sm_count) * N_WEIGHT,
                                    "partial dw");
    r->w_dx = (float *)gpu_alloc(4 * N_WEIGHT, "dx's weights");
    CUDA_CHECK(cudaMemcpy(x, pb->x, 4 * nx, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(w, pb->weight, 4 * N_WEIGHT, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(b, pb->bias, 4 * C_OUT, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(g, pb->g, 4 * ny, cudaMemcpyHostToDevice));
    gpu_poison(r->c, nc);
    lib_setup(&pb->lib, s, r);
    r->lib = &pb->lib;
    problem_refresh(pb);
    return pb;
}

static void problem_destroy(problem *pb)
{
    run_ctx *r = &pb->r;
#if HAVE_CUDNN
    cudnnDestroyTensorDescriptor(pb->lib.p_desc);
    cudnnDestroyPoolingDescriptor(pb->lib.pool_desc);
    if (pb->lib.tf32_state)
        lib_conv3d_destroy(&pb->lib.conv_tf32);
#endif
    lib_conv3d_destroy(&pb->lib.conv);
    const void *dev[] = {r->x, r->weight, r->bias, r->g, r->c, r->y, r->p, r->dp, r->idx, r->z,
                         r->dz, r->dc, r->dx, r->dw, r->dbias, r->partials, r->w_k, r->c_own,
                         r->dw_part, r->w_dx};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        CUDA_CHECK(cudaFree((void *)dev[i]));
    void *host[] = {pb->x, pb->xd, pb->weight, pb->wd, pb->bias, pb->bd, pb->g, pb->host_out,
                    pb->host_c, pb->host_dc, pb->host_dx, pb->ref_c, pb->ref_model,
                    pb->ref_epilogue, pb->ref_dc};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
    conv_grads_free(&pb->cgr);
    free(pb);
}

static const run_ctx *problem_ctx(const problem *pb) { return &pb->r; }

static void problem_bwd_refs(problem *pb)
{
    if (pb->have_bwd_refs)
        return;
    epilogue_backward_ref(&pb->sh, pb->host_c, NULL, pb->g, pb->ref_dc);
    pb->have_bwd_refs = 1;
}

/* The conv's gradients from dc, a run's own (host, float): conv_ref.h's conv_grads, kept for
 * the next run whose dc has the same bits (the check after the timing, b2's dc again). dw's and
 * dbias's bounds are componentwise plus normwise there: with x * 1000 the softmax of a channel
 * that is never the largest is subnormal everywhere, and its dw, about 1e-36, is at the mercy of
 * cuDNN's algorithm, some of which bound their error by the tensor's norm. That algorithm is
 * chosen by timing, which compute-sanitizer changes: only there did the componentwise bound
 * alone fail. */
static void conv_grad_refs(problem *pb, const float *dc)
{
    conv3d_geom g = conv_geom(&pb->sh);
    conv3d_grads_of(&g, pb->xd, pb->wd, dc, &pb->cgr);
}

/* ------------------------------------------------------------ what a scope writes, verified */

static void problem_poison(problem *pb, int scope)
{
    const shape *s = &pb->sh;
    gpu_poison(pb->r.y, out_elems(s));
    if (scope == SCOPE_MODEL_FWD || scope == SCOPE_TRAIN) /* b4's step writes its c there */
        gpu_poison(pb->r.c_own, conv_elems(s));
    if (scope == SCOPE_EPI_FWDBWD || scope == SCOPE_TRAIN)
        gpu_poison(pb->r.dc, conv_elems(s));
    if (scope == SCOPE_TRAIN) {
        gpu_poison(pb->r.dx, x_elems(s));
        gpu_poison(pb->r.dw, N_WEIGHT);
        gpu_poison(pb->r.dbias, C_OUT);
    }
}

/* dc's relative L2 bound: TOL_REL_L2, plus the rounding of a large logsumexp z to a float, half
 * an ulp, at most 2^-24 z, which moves every softmax weight exp(p - z) of its position, and so
 * dc, by that factor (p - z and exp err by 2^-24 each, relative, where TOL_REL_L2 covers them).
 * z is the largest of the reference's y = relu(z) (dc is 0 where relu cuts). With x * 1000 z is
 * large: dc measured 1.2e-5 at 1x32x2x2x2 (make test) and 1.6e-5 at 1x32x3x5x7 (--seed 5), in
 * cuDNN's b1 as in b2 and b3, over TOL_REL_L2 alone. The added term is 6e-8 per unit of z. */
static double dc_tol_rel(const problem *pb)
{
    double z = 0.0;
    for (size_t i = 0; i < out_elems(&pb->sh); i++)
        z = fmax(z, pb->ref_epilogue[i]);
    return TOL_REL_L2 + 0x1p-24 * z;
}

static hx_verdict problem_verify(problem *pb, int scope)
{
    const run_ctx *r = &pb->r;
    const shape *s = &pb->sh;
    int whole = scope == SCOPE_MODEL_FWD || scope == SCOPE_TRAIN;
    hx_verdict v = {1, 1, HASH_INIT, ""};
    hx_check_output(&v, "y", r->y, pb->host_out, out_elems(s),
                    whole ? pb->ref_model : pb->ref_epilogue, HX_SCALED, NULL, TOL_REL_L2, TOL_ABS);
    v.hash = hash_f32(v.hash, pb->host_out, out_elems(s));
    /* the cuDNN conv may be nondeterministic, and with it the whole model's y and dc */
    v.deterministic = !whole || pb->lib.conv.fwd_det;
    if (scope == SCOPE_EPI_FWD || scope == SCOPE_MODEL_FWD)
        return v;
    /* A TF32 training step (b4) runs its own conv into c_own, and its dc is checked against the
     * backward of that c: where two window values lie within TF32's rounding of each other, its
     * argmax may differ from cuDNN's c's, as PyTorch's TF32 step's does. */
    int tf32_step = scope == SCOPE_TRAIN && hx_tol_factor() > 1.0;
    if (tf32_step) {
        CUDA_CHECK(cudaMemcpy(pb->host_dc, r->c_own, 4 * conv_elems(s), cudaMemcpyDeviceToHost));
        epilogue_backward_ref(s, pb->host_dc, NULL, pb->g, pb->ref_dc);
        pb->have_bwd_refs = 0; /* ref_dc is not cuDNN's c's any more */
    } else {
        problem_bwd_refs(pb);
    }
    hx_check_output(&v, "dc", r->dc, pb->host_dc, conv_elems(s), pb->ref_dc, HX_SCALED, NULL,
                    dc_tol_rel(pb), TOL_ABS);
    v.hash = hash_f32(v.hash, pb->host_dc, conv_elems(s));
    if (scope == SCOPE_EPI_FWDBWD)
        return v;
    conv_grad_refs(pb, pb->host_dc); /* the dc just checked */
    const float *dev[3] = {r->dx, r->dw, r->dbias};
    float *host[3] = {pb->host_dx, pb->host_dw, pb->host_dbias};
    if (!tf32_step) {
        hx_check_conv_grads(&v, dev, host, &pb->cgr, HX_SCALED, TOL_REL_L2, TOL_ABS, TOL_SUM);
    } else { /* dx at HX_TF32_TOL x fp32's tolerances (hx_check_output), dw at TF32_SUM_TOL */
        hx_check_output(&v, "dx", dev[0], host[0], x_elems(s), pb->cgr.dx, HX_SCALED, NULL,
                        TOL_REL_L2, TOL_ABS);
        CUDA_CHECK(cudaMemcpy(host[1], dev[1], 4 * N_WEIGHT, cudaMemcpyDeviceToHost));
        verify_result e = verify_sum_f32(host[1], pb->cgr.dw, pb->cgr.dw_abs, N_WEIGHT,
                                         TF32_SUM_TOL);
        hx_verdict_add(&v, "dw (TF32's bound)", &e);
        hx_check_output(&v, "dbias", dev[2], host[2], C_OUT, pb->cgr.dbias, HX_SUM,
                        pb->cgr.dbias_abs, 0, TOL_SUM);
    }
    return v;
}

/* model.h's counts; the conv's FLOPs once in the forward, three times in a training step
 * (forward, backward data, backward filter); the epilogue's few FLOPs a byte leave bytes in
 * charge */
static void problem_counts(const problem *pb, double bytes[N_SCOPES], double flops[N_SCOPES])
{
    const shape *s = &pb->sh;
    bytes[SCOPE_EPI_FWD] = epilogue_bytes(s), bytes[SCOPE_MODEL_FWD] = model_bytes(s);
    bytes[SCOPE_EPI_FWDBWD] = epilogue_fwdbwd_bytes(s), bytes[SCOPE_TRAIN] = train_step_bytes(s);
    flops[SCOPE_MODEL_FWD] = conv_flops(s), flops[SCOPE_TRAIN] = 3.0 * conv_flops(s);
}

/* ------------------------------------------------------------------- CPU checks (CI too) */

typedef struct {
    shape sh;
    double *x, *w, *b, *c, *y;
    const float *g;
    int epilogue_only;
} loss_ctx;

static double model_loss(const double *unused, void *p)
{
    loss_ctx *L = (loss_ctx *)p;
    (void)unused;
    if (!L->epilogue_only) {
        conv3d_geom g = conv_geom(&L->sh);
        conv3d_ref(&g, L->x, L->w, L->b, L->c);
    }
    epilogue_ref(&L->sh, NULL, L->c, L->y);
    double sum = 0.0;
    for (size_t i = 0; i < out_elems(&L->sh); i++)
        sum += L->g[i] * L->y[i];
    return sum;
}

/* The backward's gradients against central differences of L = sum g y on a tiny shape with 4
 * output positions. dw is checked for output channel 0 (864 of 55296 weights: each costs two
 * model evaluations). The second case shifts the conv bias down until relu cuts some, not all,
 * of the 4 outputs, so both branches of its gradient are exercised. */
static void gradient_checks(uint64_t seed)
{
    shape s = make_shape(1, 2, 4, 4);
    conv3d_geom cg = conv_geom(&s);
    size_t nx = x_elems(&s), nc = conv_elems(&s), ny = out_elems(&s);
    double *x = (double *)host_alloc(8 * nx), *w = (double *)host_alloc(8 * N_WEIGHT), b[C_OUT];
    double *c = (double *)host_alloc(8 * nc), *y = (double *)host_alloc(8 * ny);
    double *dc = (double *)host_alloc(8 * nc), *dx = (double *)host_alloc(8 * nx);
    double *dw = (double *)host_alloc(8 * N_WEIGHT), db[C_OUT];
    float *g = (float *)host_alloc(4 * ny), *tmp = (float *)host_alloc(4 * N_WEIGHT);
    rng_state rng;
    rng_seed(&rng, seed + 11);
    for (size_t i = 0; i < nx; i++)
        x[i] = rng_uniform(&rng);
    init_conv_params(tmp, N_WEIGHT, NULL, 0, C_IN * KVOL, &rng);
    for (int i = 0; i < N_WEIGHT; i++)
        w[i] = tmp[i];
    init_conv_params(tmp, C_OUT, NULL, 0, C_IN * KVOL, &rng);
    fill_normal(g, ny, &rng);
    loss_ctx L = {s, x, w, b, c, y, g, 0};
    double shift = 0.0;
    for (int k = 0; k < 2; k++) {
        /* lowering every conv bias by shift lowers every pooled value, and so every z, by exactly
         * shift (LSE(p - s) = LSE(p) - s): halfway between the 2nd and 3rd smallest z of the first
         * case cuts exactly two of the four outputs */
        for (int i = 0; i < C_OUT; i++)
            b[i] = tmp[i] - shift;
        conv3d_ref(&cg, x, w, b, c);
        epilogue_ref(&s, NULL, c, y);
        size_t zeros = 0;
        for (size_t i = 0; i < ny; i++)
            zeros += y[i] == 0.0;
        epilogue_backward_ref(&s, NULL, c, g, dc);
        conv3d_backward_ref(&cg, x, w, dc, dx, dw, db, NULL, NULL);
        L.epilogue_only = 1;
        double e_c = gradcheck(model_loss, &L, c, nc, dc, 1e-6, NULL);
        L.epilogue_only = 0;
        double e_w = gradcheck(model_loss, &L, w, C_IN * KVOL, dw, 1e-6, NULL);
        double e_b = gradcheck(model_loss, &L, b, C_OUT, db, 1e-6, NULL);
        double e_x = gradcheck(model_loss, &L, x, nx, dx, 1e-6, NULL);
        char when[64];
        snprintf(when, sizeof when, k ? "conv bias - %.3f" : "default init", shift);
        check(e_c < 1e-6 && (k == 0 ? zeros == 0 : zeros == 2),
              "cpu: gradcheck dL/dc (%zu values), %s, %zu of %zu outputs relu-cut: rel %.1e", nc,
              when, zeros, ny, e_c);
        check(e_w < 1e-6, "cpu: gradcheck dL/dw (output channel 0, 864 weights), %s: rel %.1e", when, e_w);
        check(e_b < 1e-6, "cpu: gradcheck dL/dbias (64), %s: rel %.1e", when, e_b);
        check(e_x < 1e-6, "cpu: gradcheck dL/dx (%zu inputs), %s: rel %.1e", nx, when, e_x);
        if (k == 0) { /* every z > 0 here, so y = z: sort the four */
            double zs[4] = {y[0], y[1], y[2], y[3]};
            for (int i = 0; i < 4; i++)
                for (int j = i + 1; j < 4; j++)
                    if (zs[j] < zs[i]) {
                        double tz = zs[i];
                        zs[i] = zs[j], zs[j] = tz;
                    }
            shift = 0.5 * (zs[1] + zs[2]);
        }
    }
    free(x), free(w), free(c), free(y), free(dc), free(dx), free(dw), free(g), free(tmp);
}

/* PyTorch's model in float64 on small shapes (`make golden`) against this reference: catches a
 * reference that agrees with itself but means something else, e.g. a max pool that routes the
 * gradient to the last maximum, or a ceil-mode pool */
static void golden_case(const char *dir, const char *name)
{
    int64_t dims[5];
    char err[256];
    if (parse_shape(name, 5, dims, err, sizeof err) || shape_problem(dims)) {
        check(0, "golden: %s is not a shape of this model", dir);
        return;
    }
    shape s = shape_of(dims);
    conv3d_geom cg = conv_geom(&s);
    size_t nx = x_elems(&s), nc = conv_elems(&s), ny = out_elems(&s);
    const char *names[] = {"x", "conv_weight", "conv_bias", "grad_output", "out", "grad_conv_out",
                           "grad_conv_weight", "grad_conv_bias", "grad_x"};
    size_t sizes[] = {nx, N_WEIGHT, C_OUT, ny, ny, nc, N_WEIGHT, C_OUT, nx};
    float *t[9];
    int ok = 1;
    for (int i = 0; i < 9; i++)
        ok &= (t[i] = npy_load(dir, names[i], sizes[i])) != NULL;
    if (ok) {
        double *xd = (double *)host_alloc(8 * nx), *wd = (double *)host_alloc(8 * N_WEIGHT);
        double bd[C_OUT], dbias[C_OUT], abs_dbias[C_OUT];
        double *c = (double *)host_alloc(8 * nc), *y = (double *)host_alloc(8 * ny);
        double *dc = (double *)host_alloc(8 * nc), *dx = (double *)host_alloc(8 * nx);
        double *dw = (double *)host_alloc(8 * N_WEIGHT), *abs_dw = (double *)host_alloc(8 * N_WEIGHT);
        for (size_t i = 0; i < nx; i++)
            xd[i] = t[0][i];
        for (int i = 0; i < N_WEIGHT; i++)
            wd[i] = t[1][i];
        for (int i = 0; i < C_OUT; i++)
            bd[i] = t[2][i];
        conv3d_ref(&cg, xd, wd, bd, c);
        epilogue_ref(&s, NULL, c, y);
        epilogue_backward_ref(&s, NULL, c, t[3], dc);
        conv3d_backward_ref(&cg, xd, wd, dc, dx, dw, dbias, abs_dw, abs_dbias);
        verify_result v[5] = {
            verify_f32(t[4], y, ny, 1e-6, 1e-6),
            verify_f32(t[5], dc, nc, 1e-6, 1e-6),
            verify_sum_f32(t[6], dw, abs_dw, N_WEIGHT, 1e-6),
            verify_sum_f32(t[7], dbias, abs_dbias, C_OUT, 1e-6),
            verify_f32(t[8], dx, nx, 1e-6, 1e-6),
        };
        check(v[0].pass && v[1].pass && v[2].pass && v[3].pass && v[4].pass,
              "golden %s (PyTorch float64): rel_l2 y %.1e dc %.1e dw %.1e dbias %.1e dx %.1e", name,
              v[0].rel_l2, v[1].rel_l2, v[2].rel_l2, v[3].rel_l2, v[4].rel_l2);
        free(xd), free(wd), free(c), free(y), free(dc), free(dx), free(dw), free(abs_dw);
    } else {
        check(0, "golden %s: missing or malformed tensors", name);
    }
    for (int i = 0; i < 9; i++)
        free(t[i]);
}

static void cpu_checks(uint64_t seed)
{
    /* max pool ties: the first maximum takes the gradient */
    shape t = make_shape(1, 2, 2, 2);
    double plane[8] = {0.5, 2.0, 1.0, 2.0, -1.0, 2.0, 0.0, 2.0};
    int arg;
    double m = window_max_ref(plane, &t, 0, 0, 0, &arg);
    check(m == 2.0 && arg == 1, "cpu: a window with four equal maxima routes to the first (index 1)");
    gradient_checks(seed);
    for_each_golden_case("data/golden/ch02", golden_case);
}

/* ---------------------------------------------------------------- GPU checks: shapes, cases */

static const int64_t test_shapes[][CLI_MAX_DIMS] = {
    /* N x 32 x D x H x W; pooled extents floor(L / 2) */
    {1, 32, 2, 2, 2},   /* one output position */
    {1, 32, 3, 5, 7},   /* every extent odd: the last row, column and plane are dropped */
    {2, 32, 4, 6, 9},   /* W odd: scalar window loads */
    {1, 32, 2, 3, 66},  /* 33 outputs a row: a warp and one */
    {3, 32, 3, 2, 130}, /* 65 a row, W not a multiple of 4 */
    {1, 32, 2, 2, 264}, /* 132 a row: v5's 16-byte path, a partial last group */
    {2, 32, 5, 4, 16},  /* odd depth, W a multiple of 4 */
    {3, 32, 9, 20, 100}, /* 300 tiles, more than b3's dw has shares on an H100 (264), so its
                          * blocks take two; dx's 8-row tile cut in H */
};

/* our convs (v6, v7, v8) alone: poison, run into c_own, compare with the double conv. host
 * is n floats of scratch. */
typedef void (*conv_fn)(const run_ctx *r, float *c);

static verify_result own_conv_error(problem *pb, conv_fn fn, float *host)
{
    size_t n = conv_elems(&pb->sh);
    gpu_poison(pb->r.c_own, n);
    fn(&pb->r, pb->r.c_own);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaMemcpy(host, pb->r.c_own, 4 * n, cudaMemcpyDeviceToHost));
    return verify_f32(host, pb->ref_c, n, TOL_REL_L2, TOL_ABS);
}

#if HAVE_CUDNN
/* cuDNN's conv on its TF32 tensor-core engines (PyTorch's default precision), set up at the
 * first call, into c_own, against the double conv; *ok = 0 (and nothing run) when cuDNN has no
 * such engine for this shape. host is n floats of scratch. */
static verify_result cudnn_tf32_error(problem *pb, float *host, int *ok)
{
    lib_ctx *L = &pb->lib;
    const shape *s = &pb->sh;
    verify_result e = {0};
    if (!L->tf32_state) {
        int xd[5] = {s->n, C_IN, s->d, s->h, s->w};
        L->tf32_state = lib_conv3d_setup_tf32(&L->conv_tf32, xd, C_OUT, KS, 1, 1, pb->r.x,
                                              pb->r.weight, pb->r.c_own) ? 1 : -1;
    }
    *ok = L->tf32_state > 0;
    if (!*ok)
        return e;
    size_t n = conv_elems(s);
    gpu_poison(pb->r.c_own, n);
    lib_conv3d_forward(&L->conv_tf32, pb->r.x, pb->r.weight, pb->r.bias, pb->r.c_own);
    CUDA_CHECK(cudaMemcpy(host, pb->r.c_own, 4 * n, cudaMemcpyDeviceToHost));
    return verify_f32(host, pb->ref_c, n, TOL_REL_L2, TOL_ABS);
}
#endif

/* A TF32 conv's error on these tensors, the accuracy peer of the TF32 versions everywhere (no
 * GPU library needed): the double conv of x and w each rounded to TF32 as the tensor cores'
 * operands are (tf32_round, as to_tf32 rounds them), against the exact double conv. A TF32
 * tensor-core conv (cuDNN's, PyTorch's default) differs from it only by its fp32 sums.
 * host: conv_elems floats of scratch. */
static verify_result tf32_conv_model_error(problem *pb, float *host)
{
    const shape *s = &pb->sh;
    conv3d_geom g = conv_geom(s);
    size_t nx = x_elems(s), nc = conv_elems(s);
    double *xt = (double *)host_alloc(8 * nx), *ct = (double *)host_alloc(8 * nc);
    double *wt = (double *)host_alloc(8 * N_WEIGHT);
    for (size_t i = 0; i < nx; i++)
        xt[i] = tf32_round(pb->x[i]);
    for (int i = 0; i < N_WEIGHT; i++)
        wt[i] = tf32_round(pb->weight[i]);
    conv3d_ref(&g, xt, wt, pb->bd, ct);
    for (size_t i = 0; i < nc; i++)
        host[i] = (float)ct[i];
    free(xt), free(ct), free(wt);
    return verify_f32(host, pb->ref_c, nc, TOL_REL_L2, TOL_ABS);
}

/* v10's conv (wgmma, TF32) on every test shape where it runs: over fp32's tolerance and within
 * TF32's, as v7's; and within 2x of cuDNN's TF32 conv's relative L2 and largest errors on the
 * same tensors (the issue of precision is TF32's rounding, which both share: a kernel whose
 * products or sums lost more, or that truncated instead of rounding, would fail it), and of the
 * TF32 model's, m (tf32_conv_model_error, computed once a shape for v7's check and this). */
static void v10_conv_checks(problem *pb, verify_result m)
{
    const shape *s = &pb->sh;
    const char *no = hx_needs_problem(NEEDS_SM90 | NEEDS_SM90A);
    if (no) {
        skip("v10 wgmma TF32 conv on %dx32x%dx%dx%d: %s", s->n, s->d, s->h, s->w, no);
        return;
    }
    verify_result t = own_conv_error(pb, conv_wgmma, pb->host_dc);
    check(!t.pass && t.rel_l2 > TOL_REL_L2 && t.rel_l2 < HX_TF32_TOL * TOL_REL_L2,
          "v10 wgmma TF32 conv over fp32's tolerance %.0e, within TF32's: rel_l2 %.1e max_abs %.1e",
          TOL_REL_L2, t.rel_l2, t.max_abs);
    check(verify_within_2x(t, m), "v10 wgmma TF32 conv within 2x a TF32 conv's error (x, w rounded to "
          "TF32, double sums): rel_l2 %.1e (%.1e) max_abs %.1e (%.1e)", t.rel_l2, m.rel_l2,
          t.max_abs, m.max_abs);
#if HAVE_CUDNN
    int ok = 0;
    verify_result c = cudnn_tf32_error(pb, pb->host_dc, &ok);
    if (!ok)
        skip("v10 against cuDNN's TF32 conv: cuDNN has no TF32 engine for %dx32x%dx%dx%d", s->n,
             s->d, s->h, s->w);
    else
        check(verify_within_2x(t, c),
              "v10 wgmma TF32 conv within 2x cuDNN's TF32 error (engine %d): rel_l2 %.1e (%.1e) "
              "max_abs %.1e (%.1e)", pb->lib.conv_tf32.fwd_algo, t.rel_l2, c.rel_l2, t.max_abs,
              c.max_abs);
#else
    skip("v10 against cuDNN's TF32 conv: " NO_CUDNN);
#endif
}

/* The conv's gradients from the GPU's dc (b2's backward on cuDNN's c), each against the double
 * backward of that dc (conv_grad_refs): e[0], e[1] = dx by cuDNN, by b3 (verify_f32_scaled, as
 * the table checks dx);
 * e[2], e[3] = dw by cuDNN, by b3 (verify_sum_f32). Overwrites dc, dx and dw. */
static void grad_errors(problem *pb, verify_result e[4])
{
    const run_ctx *r = &pb->r;
    const shape *s = &pb->sh;
    void (*const fn[4])(const run_ctx *) = {lib_dx, own_dx, lib_dw, own_dw};
    conv_forward(r);
    epilogue_backward(r);
    CUDA_CHECK(cudaMemcpy(pb->host_dc, r->dc, 4 * conv_elems(s), cudaMemcpyDeviceToHost));
    conv_grad_refs(pb, pb->host_dc);
    for (int i = 0; i < 4; i++) {
        int is_dx = i < 2;
        size_t n = is_dx ? x_elems(s) : N_WEIGHT;
        float *dev = is_dx ? r->dx : r->dw, *host = is_dx ? pb->host_dx : pb->host_dw;
        gpu_poison(dev, n);
        fn[i](r);
        LAUNCH_CHECK();
        CUDA_CHECK(cudaMemcpy(host, dev, 4 * n, cudaMemcpyDeviceToHost));
        e[i] = is_dx ? verify_f32_scaled(host, pb->cgr.dx, n, TOL_REL_L2, TOL_ABS)
                     : verify_sum_f32(host, pb->cgr.dw, pb->cgr.dw_abs, n, TOL_SUM);
    }
}

/* b4's TF32 dx and dw (wgmma, where sm_90a code runs) from grad_errors's dc, against the double
 * backward of that dc (pb->cgr): each over fp32's tolerance (TF32 really ran; waived where the
 * reference is all zeros: relu cut every output) and within TF32's: dx at HX_TF32_TOL times
 * fp32's (as v7's and v10's convs), dw at TF32_SUM_TOL. Its error beside cuDNN's TF32 gradients
 * is not checked: lib_conv3d_setup_tf32 sets up the forward only. */
static void b4_grad_checks(problem *pb)
{
    const run_ctx *r = &pb->r;
    const shape *s = &pb->sh;
    const char *no = hx_needs_problem(NEEDS_SM90 | NEEDS_SM90A);
    if (no) {
        skip("b4 wgmma TF32 dx and dw on %dx32x%dx%dx%d: %s", s->n, s->d, s->h, s->w, no);
        return;
    }
    size_t nx = x_elems(s);
    gpu_poison(r->dx, nx);
    gpu_poison(r->dw, N_WEIGHT);
    tf32_dx(r);
    tf32_dw(r);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaMemcpy(pb->host_dx, r->dx, 4 * nx, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(pb->host_dw, r->dw, 4 * N_WEIGHT, cudaMemcpyDeviceToHost));
    int zero = 1;
    for (size_t i = 0; i < nx; i++)
        zero &= pb->cgr.dx[i] == 0.0;
    verify_result x1 = verify_f32_scaled(pb->host_dx, pb->cgr.dx, nx, TOL_REL_L2, TOL_ABS);
    verify_result x2 = verify_f32_scaled(pb->host_dx, pb->cgr.dx, nx, HX_TF32_TOL * TOL_REL_L2,
                                         HX_TF32_TOL * TOL_ABS);
    verify_result w1 = verify_sum_f32(pb->host_dw, pb->cgr.dw, pb->cgr.dw_abs, N_WEIGHT, TOL_SUM);
    verify_result w2 = verify_sum_f32(pb->host_dw, pb->cgr.dw, pb->cgr.dw_abs, N_WEIGHT,
                                      TF32_SUM_TOL);
    check((zero || !x1.pass) && x2.pass, "b4 wgmma TF32 dx over fp32's tolerance, within TF32's "
          "(x%.0f): rel_l2 %.1e max_abs %.1e", HX_TF32_TOL, x2.rel_l2, x2.max_abs);
    check((zero || !w1.pass) && w2.pass, "b4 wgmma TF32 dw over fp32's bound, within TF32's "
          "(%.1e of its terms' magnitudes): rel_l2 %.1e max_abs %.1e", TF32_SUM_TOL, w2.rel_l2,
          w2.max_abs);
    /* beside a TF32 backward's error on the same dc: x, w and dc rounded to TF32, dx and dw in
     * double, against the exact backward of that dc (pb->cgr), within 2x in each measure */
    conv3d_geom g = conv_geom(s);
    size_t nc = conv_elems(s);
    double *xt = (double *)host_alloc(8 * nx), *dct = (double *)host_alloc(8 * nc);
    double *dxt = (double *)host_alloc(8 * nx), *wt = (double *)host_alloc(8 * N_WEIGHT);
    double *dwt = (double *)host_alloc(8 * N_WEIGHT), dbt[C_OUT];
    float *f = (float *)host_alloc(4 * (nx > N_WEIGHT ? nx : N_WEIGHT));
    for (size_t i = 0; i < nx; i++)
        xt[i] = tf32_round(pb->x[i]);
    for (int i = 0; i < N_WEIGHT; i++)
        wt[i] = tf32_round(pb->weight[i]);
    for (size_t i = 0; i < nc; i++)
        dct[i] = tf32_round(pb->host_dc[i]);
    conv3d_backward_ref(&g, xt, wt, dct, dxt, dwt, dbt, NULL, NULL);
    for (size_t i = 0; i < nx; i++)
        f[i] = (float)dxt[i];
    verify_result mx = verify_f32_scaled(f, pb->cgr.dx, nx, TOL_REL_L2, TOL_ABS);
    for (int i = 0; i < N_WEIGHT; i++)
        f[i] = (float)dwt[i];
    verify_result mw = verify_f32(f, pb->cgr.dw, N_WEIGHT, TOL_REL_L2, TOL_ABS);
    verify_result tw = verify_f32(pb->host_dw, pb->cgr.dw, N_WEIGHT, TOL_REL_L2, TOL_ABS);
    check(zero || (verify_within_2x(x2, mx) && verify_within_2x(tw, mw)),
          "b4 wgmma TF32 dx and dw within 2x a TF32 backward's error (x, w, dc rounded to TF32, "
          "double sums): dx rel_l2 %.1e (%.1e) max_abs %.1e (%.1e), dw rel_l2 %.1e (%.1e) "
          "max_abs %.1e (%.1e)", x2.rel_l2, mx.rel_l2, x2.max_abs, mx.max_abs, tw.rel_l2,
          mw.rel_l2, tw.max_abs, mw.max_abs);
    free(xt), free(dct), free(dxt), free(wt), free(dwt), free(f);
}

/* b3's 3xTF32 gradients against cuDNN's fp32 ones: how many times cuDNN's error b3's may be. A
 * 3xTF32 product drops lo x lo (up to 2^-22 of the product), and the tensor core truncates each
 * lo, passed unrounded, to TF32 (up to 2^-21 of its operand each: common/tf32.cuh), so it is
 * off by up to 2^-20 + 2^-22 = 1.25 x 2^-20, where an FMA's product is exact and each of the
 * sum's additions rounds by up to 2^-24 of the running sum: 20x. On the small test shapes' short
 * sums that shows (on the H100, 2026-11-26, seeds 1 to 8: up to 3.8x cuDNN's relative L2 error
 * and 7.2x its largest); on long sums the additions' rounding, alike in both, dominates (0.88x
 * and 0.96x at 4x32x32x128x128). TF32 alone is hundreds of times cuDNN's error (v7's conv:
 * 570x). The rule was 2x while the reference was the exact dc's backward, whose distance from
 * the float dc's (the same for both) hid the difference: b3 measured 0.6 - 1.3x there. */
#define B3_PEER_RATIO 20.0

static void shape_checks(problem *pb, int t)
{
    const shape *s = &pb->sh;
    verify_result vc = verify_f32(pb->host_c, pb->ref_c, conv_elems(s), TOL_REL_L2, TOL_ABS);
    check(vc.pass, "%s conv (engine %d) = reference on %dx32x%dx%dx%d, rel_l2 %.1e",
          pb->lib.conv.backend, pb->lib.conv.fwd_algo, s->n, s->d, s->h, s->w, vc.rel_l2);
    if (t < 0) /* before a timed run: the conv table in the notes measures these */
        return;
    /* what each precision buys, on every test shape: v6's FMA conv within fp32's tolerance;
     * v7's TF32 conv over it (the lesson's claim: a check that TF32 really ran) but within
     * TF32's; v8's 3xTF32 within 2x of cuDNN's fp32 conv's error, relative L2 and largest */
    verify_result f = own_conv_error(pb, conv_ffma, pb->host_dc);
    verify_result t1 = own_conv_error(pb, conv_tf32, pb->host_dc);
    verify_result t3 = own_conv_error(pb, conv_3xtf32, pb->host_dc);
    check(f.pass, "v6 FMA conv = reference on %dx32x%dx%dx%d: rel_l2 %.1e max_abs %.1e", s->n, s->d,
          s->h, s->w, f.rel_l2, f.max_abs);
    check(!t1.pass && t1.rel_l2 > TOL_REL_L2 && t1.rel_l2 < HX_TF32_TOL * TOL_REL_L2,
          "v7 TF32 conv over fp32's tolerance %.0e, within TF32's: rel_l2 %.1e max_abs %.1e",
          TOL_REL_L2, t1.rel_l2, t1.max_abs);
    verify_result m = tf32_conv_model_error(pb, pb->host_dc);
    check(verify_within_2x(t1, m), "v7 TF32 conv within 2x a TF32 conv's error (x, w rounded to TF32, "
          "double sums): rel_l2 %.1e (%.1e) max_abs %.1e (%.1e)", t1.rel_l2, m.rel_l2, t1.max_abs,
          m.max_abs);
    check(t3.pass && verify_within_2x(t3, vc),
          "v8 3xTF32 conv within 2x cuDNN's error: rel_l2 %.1e (cuDNN %.1e) max_abs %.1e (%.1e)",
          t3.rel_l2, vc.rel_l2, t3.max_abs, vc.max_abs);
    v10_conv_checks(pb, m);
    const char *no = hx_needs_problem(NEEDS_SM90 | NEEDS_SM90A);
    if (no) {
        skip("v11 wgmma 3xTF32 conv on %dx32x%dx%dx%d: %s", s->n, s->d, s->h, s->w, no);
    } else { /* v11's 3xTF32 on wgmma: as v8's */
        verify_result t11 = own_conv_error(pb, conv_wgmma_3xtf32, pb->host_dc);
        check(t11.pass && verify_within_2x(t11, vc),
              "v11 wgmma 3xTF32 conv within 2x %s's error: rel_l2 %.1e (%.1e) max_abs %.1e (%.1e)",
              pb->lib.conv.backend, t11.rel_l2, vc.rel_l2, t11.max_abs, vc.max_abs);
    }
    /* b3's gradients in 3xTF32 against cuDNN's fp32 ones, both from the same dc and judged
     * against the double backward of that dc (grad_errors): within B3_PEER_RATIO of cuDNN's
     * errors. Without cuDNN, the fp32 tolerances alone (which TF32's 2^-10 would fail): the
     * direct kernels stand in for the library and split their sums more finely than any fast
     * kernel (their dw's largest error was 0.45x b3's at 3x32x9x20x100, cuDNN's 1.2x, against
     * the exact dc's backward), so they are no accuracy peer. */
    verify_result e[4];
    grad_errors(pb, e);
    int peer = !strcmp(pb->lib.conv.backend, "cuDNN");
    for (int i = 0; i < 2; i++) {
        verify_result l = e[2 * i], o = e[2 * i + 1];
        if (peer)
            check(o.pass && o.rel_l2 <= B3_PEER_RATIO * l.rel_l2 &&
                      o.max_abs <= B3_PEER_RATIO * l.max_abs,
                  "b3 3xTF32 %s within %.0fx cuDNN's error: rel_l2 %.1e (%.1e) max_abs %.1e "
                  "(%.1e)", i ? "dw" : "dx", B3_PEER_RATIO, o.rel_l2, l.rel_l2, o.max_abs,
                  l.max_abs);
        else
            check(o.pass, "b3 3xTF32 %s within fp32's tolerance: rel_l2 %.1e max_abs %.1e (the "
                  "direct kernels: %.1e, %.1e)", i ? "dw" : "dx", o.rel_l2, o.max_abs, l.rel_l2,
                  l.max_abs);
    }
    b4_grad_checks(pb); /* r->dc and pb->cgr still grad_errors's */
}

/* extremes, on every test shape: the input x 1000 (dc's bound then grows with z: dc_tol_rel),
 * then planted conv outputs near +100, near -100 (relu cuts every z), and mixed by channel
 * parity */
static const hx_case cases[] = {
    {"x*1000", ~0u},
    {"c ~ +100", SC(SCOPE_EPI_FWD) | SC(SCOPE_EPI_FWDBWD)},
    {"c ~ -100", SC(SCOPE_EPI_FWD) | SC(SCOPE_EPI_FWDBWD)},
    {"c ~ +-100", SC(SCOPE_EPI_FWD) | SC(SCOPE_EPI_FWDBWD)},
    {NULL, 0},
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
    for (size_t i = 0; i < conv_elems(s); i++) {
        double sign = k == 1 ? 1 : k == 2 ? -1 : ((i / s->sc) % 2 ? 1 : -1);
        pb->host_c[i] = (float)(sign * 100.0 + 8.0 * (rng_uniform(&rng) - 0.5));
    }
    CUDA_CHECK(cudaMemcpy(pb->r.c, pb->host_c, 4 * conv_elems(s), cudaMemcpyHostToDevice));
    epilogue_ref(s, pb->host_c, NULL, pb->ref_epilogue);
    pb->have_bwd_refs = 0;
    conv_grads_reset(&pb->cgr);
}

/* ---------------------------------------------------------------- after the table; --dump */

static void time_dbias_own(const void *r) { own_dbias((const run_ctx *)r); }

typedef struct {
    conv_fn fn;
    const run_ctx *r;
} conv_job;

static void time_own_conv(const void *p)
{
    const conv_job *j = (const conv_job *)p;
    j->fn(j->r, j->r->c_own);
}

#if HAVE_CUDNN
static void time_tf32_conv(const void *p)
{
    const problem *pb = (const problem *)p;
    lib_conv3d_forward(&pb->lib.conv_tf32, pb->r.x, pb->r.weight, pb->r.bias, pb->r.c_own);
}
#endif

typedef struct {
    void (*fn)(const run_ctx *r);
    const run_ctx *r;
} grad_job;

/* Each conv alone (cuDNN's fp32 and TF32, v6's, v7's, v8's, v10's and v11's where they run): time,
 * TFLOP/s, and its error against the double conv, the numbers behind the README's precision
 * table. lib_ms: cuDNN's time from the
 * per-op table (hx_conv_ops), not measured twice; -1 if it did not run. */
static void conv_table(problem *pb, int reps, double lib_ms)
{
    const run_ctx *r = &pb->r;
    const shape *s = &pb->sh;
    double gflop = conv_flops(s) / 1e9;
    verify_result lib = verify_f32(pb->host_c, pb->ref_c, conv_elems(s), TOL_REL_L2, TOL_ABS);
    printf("\nThe conv alone, %.1f GFLOP (c = conv(x) + bias), against the double reference:\n"
           "  %-34s %9s %8s %10s %10s\n", gflop, "conv", "median ms", "TFLOP/s", "rel_l2",
           "max_abs");
    if (lib_ms > 0) {
        char name[48];
        snprintf(name, sizeof name, "cuDNN fp32 (engine %d)", pb->lib.conv.fwd_algo);
        printf("  %-34s %9.4f %8.1f %10.1e %10.1e\n", name, lib_ms, gflop / lib_ms, lib.rel_l2,
               lib.max_abs);
    }
    struct {
        const char *name;
        conv_fn fn;
    } own[] = {{"v6: implicit GEMM, FMA", conv_ffma},
               {"v7: tensor cores, TF32", conv_tf32},
               {"v8: tensor cores, 3xTF32", conv_3xtf32},
               {"v10: wgmma, TF32", conv_wgmma},
               {"v11: wgmma, 3xTF32", conv_wgmma_3xtf32}};
    int n_own = hx_needs_problem(NEEDS_SM90 | NEEDS_SM90A) ? 3 : 5;
#if HAVE_CUDNN
    {
        int ok = 0;
        verify_result c = cudnn_tf32_error(pb, pb->host_dc, &ok);
        if (ok) {
            char name[48];
            snprintf(name, sizeof name, "cuDNN TF32 (engine %d)", pb->lib.conv_tf32.fwd_algo);
            timing t = gpu_time(time_tf32_conv, pb, reps);
            printf("  %-34s %9.4f %8.1f %10.1e %10.1e\n", name, t.median_ms, gflop / t.median_ms,
                   c.rel_l2, c.max_abs);
        }
    }
#endif
    for (int i = 0; i < n_own; i++) {
        verify_result e = own_conv_error(pb, own[i].fn, pb->host_dc);
        conv_job j = {own[i].fn, r};
        timing t = gpu_time(time_own_conv, &j, reps);
        printf("  %-34s %9.4f %8.1f %10.1e %10.1e%s\n", own[i].name, t.median_ms,
               gflop / t.median_ms, e.rel_l2, e.max_abs, e.pass ? "" : "  (over fp32's tolerance)");
    }
}

static void time_own_grad(const void *p)
{
    const grad_job *j = (const grad_job *)p;
    j->fn(j->r);
}

/* The conv's gradients alone, cuDNN's (times from the per-op table) and b3's: time, TFLOP/s,
 * error against the double reference (grad_errors), the numbers behind the README's
 * gradient table. */
static void grad_table(problem *pb, int reps, const double lib_ms[4])
{
    const run_ctx *r = &pb->r;
    double gflop = conv_flops(&pb->sh) / 1e9;
    verify_result e[4];
    grad_errors(pb, e);
    printf("\nThe conv's gradients alone, %.1f GFLOP each, from the same dc, against the double "
           "reference:\n  %-34s %9s %8s %10s %10s\n", gflop, "op", "median ms", "TFLOP/s",
           "rel_l2", "max_abs");
    const char *name[4] = {"dx: cuDNN", "dx: b3, 3xTF32", "dw: cuDNN", "dw: b3, 3xTF32"};
    void (*const fn[2])(const run_ctx *) = {own_dx, own_dw};
    for (int i = 0; i < 4; i++) {
        double ms = lib_ms[1 + i / 2];
        if (i & 1) {
            grad_job j = {fn[i / 2], r};
            ms = gpu_time(time_own_grad, &j, reps).median_ms;
        }
        char t[16] = "-", tf[16] = "-";
        if (ms > 0)
            snprintf(t, sizeof t, "%.4f", ms), snprintf(tf, sizeof tf, "%.1f", gflop / ms);
        printf("  %-34s %9s %8s %10.1e %10.1e\n", name[i], t, tf, e[i].rel_l2, e[i].max_abs);
    }
    if (hx_needs_problem(NEEDS_SM90 | NEEDS_SM90A))
        return;
    /* b4's, on wgmma in TF32, from the same dc (r->dc and pb->cgr still grad_errors's) */
    const char *b4_name[2] = {"dx: b4, TF32 (wgmma)", "dw: b4, TF32 (wgmma)"};
    void (*const b4_fn[2])(const run_ctx *) = {tf32_dx, tf32_dw};
    for (int i = 0; i < 2; i++) {
        size_t n = i ? N_WEIGHT : x_elems(&pb->sh);
        float *dev = i ? r->dw : r->dx, *host = i ? pb->host_dw : pb->host_dx;
        gpu_poison(dev, n);
        b4_fn[i](r);
        LAUNCH_CHECK();
        CUDA_CHECK(cudaMemcpy(host, dev, 4 * n, cudaMemcpyDeviceToHost));
        verify_result v = i ? verify_sum_f32(host, pb->cgr.dw, pb->cgr.dw_abs, n, TF32_SUM_TOL)
                            : verify_f32_scaled(host, pb->cgr.dx, n, TOL_REL_L2, TOL_ABS);
        grad_job j = {b4_fn[i], r};
        double ms = gpu_time(time_own_grad, &j, reps).median_ms;
        printf("  %-34s %9.4f %8.1f %10.1e %10.1e\n", b4_name[i], ms, gflop / ms, v.rel_l2,
               v.max_abs);
    }
}

static void notes(problem *pb, const device_info *dev, int reps, const char *only)
{
    const run_ctx *r = &pb->r;
    hx_conv_bufs b = {0, r->x, r->weight, r->bias, r->dc, r->c, r->dx, r->dw, r->dbias,
                      conv_flops(&pb->sh)};
    double lib_ms[4];
    int grads = hx_conv_ops(&pb->lib.conv, &b, dev, reps, lib_ms);
    static const char *const own_convs[] = {"v6", "v7", "v8", "v9", "v10", "v11"};
    int conv_version = !only;
    for (int i = 0; i < 6; i++)
        conv_version |= only && !strcmp(only, own_convs[i]);
    if (conv_version)
        conv_table(pb, reps, lib_ms[0]);
    if (grads)
        grad_table(pb, reps, lib_ms);
    if (!only) {
        timing to = gpu_time(time_dbias_own, r, reps);
        printf("our dbias (b2's two-stage sum, common/reduce.cuh): median %.4f ms\n", to.median_ms);
    }
}

static void dump(problem *pb, const char *dir, const char *id, int scope)
{
    const shape *s = &pb->sh;
    int64_t xs[5] = {s->n, C_IN, s->d, s->h, s->w}, ws[5] = {C_OUT, C_IN, KS, KS, KS};
    int64_t bs[1] = {C_OUT}, cs[5] = {s->n, C_OUT, s->d, s->h, s->w};
    int64_t ys[5] = {s->n, 1, s->pd, s->ph, s->pw};
    if (!id) {
        npy_save_or_exit(dir, "x", pb->x, 5, xs);
        npy_save_or_exit(dir, "conv_weight", pb->weight, 5, ws);
        npy_save_or_exit(dir, "conv_bias", pb->bias, 1, bs);
        npy_save_or_exit(dir, "conv_out", pb->host_c, 5, cs);
        npy_save_or_exit(dir, "grad_output", pb->g, 5, ys);
        return;
    }
    if (scope != SCOPE_TRAIN) {
        npy_save_id_or_exit(dir, "out", id, pb->host_out, 5, ys);
        return;
    }
    npy_save_id_or_exit(dir, "grad_conv_out", id, pb->host_dc, 5, cs);
    npy_save_id_or_exit(dir, "grad_conv_weight", id, pb->host_dw, 5, ws);
    npy_save_id_or_exit(dir, "grad_conv_bias", id, pb->host_dbias, 1, bs);
    npy_save_id_or_exit(dir, "grad_x", id, pb->host_dx, 5, xs);
}

const hx_chapter chapter_machinery = {
    "02",
    "Conv3d -> MaxPool3d -> LogSumExp -> ReLU (KernelBench level 2, #43)",
    "\nChapter 2, KernelBench level 2 model #43:\n"
    "  Conv3d(32->64, k3, s1, p1) -> MaxPool3d(2) -> logsumexp over channels -> relu\n"
    "  --shape is N x 32 x D x H x W (default 4x32x32x128x128), D, H, W >= 2; the output is\n"
    "  N x 1 x D/2 x H/2 x W/2 (floor). Limits: batch and depth <= 65535, conv output < 2^31.\n"
    "  --dump DIR writes x.npy, conv_weight.npy (64,32,3,3,3), conv_bias.npy (64), conv_out.npy\n"
    "  (the cuDNN conv output the epilogue versions read), grad_output.npy, out_v1.npy ..\n"
    "  out_v5.npy and, from each backward version's training step (b1 .. b3),\n"
    "  grad_conv_out_bK.npy, grad_conv_weight_bK.npy, grad_conv_bias_bK.npy, grad_x_bK.npy.\n"
    "  Check a dump: python3 data/pytorch_peer.py check DIR --chapter 2\n",
    5,
    {4, 32, 32, 128, 128},
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
