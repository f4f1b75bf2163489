/*
 * b1: the backward as autograd runs it, and the training step's conv gradients through cuDNN
 *
 * What PyTorch's autograd runs for this graph: one kernel per op backward, reading what the
 * forward saved (z, t = sigmoid(z + 3), s); the forward is v1 with those three kept. Then clamp
 * backward (ds), the sum for db, / 6 backward, the product rule (two outputs), sigmoid backward,
 * the sum of the two paths into z, and logsumexp backward (reads the 1 GB conv output again,
 * writes the 1 GB dc). Section "the backward" of reference.cu derives each term.
 * Bytes, tensors of N S floats being 63 MB: v1's forward 1.89 GB; clamp backward 3 x 63 MB, the
 * sum 63, / 6 backward 126, the product rule 5 x 63, sigmoid backward 3 x 63, the add 3 x 63,
 * logsumexp backward 1008 + 126 + 1008: 3.21 GB.
 * Prediction: 5.10 GB against the 3.15 GB floor of forward + backward, 1.056 ms
 * [b1 epilogue_fwdbwd floor_ms]; at the 2.49 TB/s v1 reached (1.89 GB in 0.758 ms
 * [v1 epilogue_fwd]), 2.05 ms, about 2x the floor.
 * Measured: 2.41 ms [b1 epilogue_fwdbwd], 2.3x the floor [b1 epilogue_fwdbwd median_ms/floor_ms];
 * PyTorch eager takes 5.73 ms [eager epilogue_fwdbwd] (its logsumexp and autograd launch more).
 *
 * The training step (every b version): the conv, the epilogue forward and backward, then the
 * conv's gradients. b1 and b2 take them from cuDNN, through the Conv3d the transposed conv is the
 * input gradient of (common/conv.h): dx = that Conv3d's forward of dc, dw = its backward filter
 * with dc as its input and x as its output gradient, dbias = the backward bias of dc. b1's step
 * takes 15.4 ms [b1 train_step], most of it cuDNN's conv pieces (the README's per-op table).
 */
#include "model.h"

__global__ void b1_clamp_backward(const float *__restrict__ g, const float *__restrict__ s,
                                  float *__restrict__ ds, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        ds[i] = (s[i] >= -1.0f && s[i] <= 1.0f) ? g[i] : 0.0f;
}

/* s = a - b: db is minus the sum of ds; the sum is common/reduce.cuh's, this is the minus */
__global__ void b1_negate(float *v) { *v = -*v; }

__global__ void b1_mul_backward(const float *__restrict__ da, const float *__restrict__ z,
                                const float *__restrict__ t, float *__restrict__ dz,
                                float *__restrict__ dt, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        dz[i] = da[i] * t[i]; /* d(z t)/dz = t */
        dt[i] = da[i] * z[i]; /* d(z t)/dt = z */
    }
}

__global__ void b1_sigmoid_backward(const float *__restrict__ dt, const float *__restrict__ t,
                                    float *__restrict__ du, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        du[i] = dt[i] * t[i] * (1.0f - t[i]);
}

__global__ void b1_add(const float *__restrict__ a, const float *__restrict__ b,
                       float *__restrict__ o, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        o[i] = a[i] + b[i];
}

__global__ void b1_logsumexp_backward(const float *__restrict__ c, const float *__restrict__ z,
                                      const float *__restrict__ dz, float *__restrict__ dc,
                                      int n_pos, int s)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_pos; i += gridDim.x * blockDim.x) {
        int n = i / s, p = i - n * s;
        for (int ch = 0; ch < C_OUT; ch++) {
            int j = (n * C_OUT + ch) * s + p;
            dc[j] = dz[i] * expf(c[j] - z[i]);
        }
    }
}

/* autograd's backward over v1's saved z, t, s */
static void b1_backward(const run_ctx *r)
{
    int n = (int)out_elems(&r->sh), g = grid_for(n, 256, r->sm_count);
    float *const *t = r->tmp;
    float *ds = t[T_ZP3], *da = t[T_ZT], *dz1 = t[T_A], *dt = t[T_X1], *du = t[T_X2];
    b1_clamp_backward<<<g, 256>>>(r->g, t[T_S], ds, n);           /* ds = g [-1 <= s <= 1] */
    /* db = -sum ds: sum_channels (07-b2-fused-backward.cu) is the two-stage deterministic sum */
    sum_channels(ds, r->sh.n, 1, r->sh.s, r->n_partials, r->partials, r->db, r->stream);
    b1_negate<<<1, 1>>>(r->db);                                   /* db = -sum ds */
    div_scalar(r, ds, 6.0f, da);                                 /* d(z t) = ds / 6 */
    b1_mul_backward<<<g, 256>>>(da, t[T_Z], t[T_T], dz1, dt, n);  /* dz = d(zt) t, dt = d(zt) z */
    b1_sigmoid_backward<<<g, 256>>>(dt, t[T_T], du, n);           /* d(z + 3) = dt t (1 - t) */
    b1_add<<<g, 256>>>(dz1, du, ds, n);                           /* dz = both paths */
    b1_logsumexp_backward<<<g, 256>>>(r->c, t[T_Z], ds, r->dc, n, r->sh.s); /* dc */
}

void lib_dx(const run_ctx *r)
{
    lib_conv3d_forward(&r->lib->conv, r->dc, r->weight, NULL, r->dx);
}

void lib_dw(const run_ctx *r)
{
    lib_conv3d_backward_filter(&r->lib->conv, r->dc, r->x, r->dw);
}

void lib_dbias(const run_ctx *r)
{
    lib_conv_transpose3d_backward_bias(&r->lib->conv, r->dc, r->dbias);
}

void b1_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_TRAIN)
        conv_forward(r);
    v1_epilogue(r);
    b1_backward(r);
    if (scope == SCOPE_TRAIN)
        lib_dx(r), lib_dw(r), lib_dbias(r);
}
