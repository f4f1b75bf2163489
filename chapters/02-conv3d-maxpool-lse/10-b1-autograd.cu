/*
 * b1: the backward as autograd runs it, and the training step's conv gradients
 *
 * Forward: v1 keeping what autograd saves (the pool's argmax indices, z, y). Backward: relu
 * backward, logsumexp backward (reads p, writes the 64-channel dp), then max-pool backward: a
 * 537 MB memset of dc and a scatter of dp to the saved indices. Section "the backward" of
 * reference.cu derives each term.
 * Bytes of the backward alone: relu's 3 MB; p read and dp written (67 MB each); dp and idx read
 * (67 MB each); the 537 MB memset of dc; the scatter writes one float in 8, 67 MB of values,
 * but up to the whole 537 MB in 32-byte sectors unless they merge in L2 with the memset's:
 * 0.8 to 1.3 GB. Prediction: with v1's 0.68 GB forward, 1.5 to 2.0 GB against the 1.61 GB
 * floor of forward + backward: 0.50 to 0.67 ms at the copy ceiling.
 * Measured (H100, KernelBench shape): 0.816 ms [b1 epilogue_fwdbwd] for forward + backward,
 * 66.9% of the floor [b1 epilogue_fwdbwd pct_floor] (PyTorch eager: 1.24 ms
 * [eager epilogue_fwdbwd], torch.compile 1.10 [compile epilogue_fwdbwd]).
 *
 * The training step (b1 and b2): cuDNN's conv, the epilogue forward and backward, then the
 * conv's gradients: cuDNN's dx (backward data) and dw (backward filter), and dbias: cuDNN's
 * backward bias in b1, a deterministic two-stage reduction of our own in b2 (and b3, which
 * computes dx and dw itself: 12-b3-own-gradients.cu).
 */
#include "model.h"
#include "reduce.cuh"

__global__ void b1_relu_backward(const float *__restrict__ g, const float *__restrict__ y,
                                 float *__restrict__ dz, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        dz[i] = y[i] > 0.0f ? g[i] : 0.0f;
}

__global__ void b1_logsumexp_backward(const float *__restrict__ p, const float *__restrict__ z,
                                      const float *__restrict__ dz, float *__restrict__ dp,
                                      int n_pos, int s)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_pos; i += gridDim.x * blockDim.x) {
        int n = i / s, q = i - n * s;
        for (int ch = 0; ch < C_OUT; ch++) {
            size_t j = ((size_t)n * C_OUT + ch) * s + q;
            dp[j] = dz[i] * expf(p[j] - z[i]);
        }
    }
}

/* windows do not overlap (stride = kernel = 2), so each pooled value owns its 8 elements and
 * the scatter needs no atomics */
__global__ void b1_maxpool_backward(const float *__restrict__ dp, const int *__restrict__ idx,
                                    float *__restrict__ dc, int total, int d, int h, int w)
{
    int pd = d / 2, ph = h / 2, pw = w / 2;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int x0 = i % pw, r = i / pw, y0 = r % ph;
        r /= ph;
        int z0 = r % pd, plane = r / pd, q = idx[i];
        dc[(size_t)plane * d * h * w + ((2 * z0 + (q >> 2)) * h + 2 * y0 + ((q >> 1) & 1)) * w +
           2 * x0 + (q & 1)] = dp[i];
    }
}

static void b1_backward(const run_ctx *r)
{
    const shape *s = &r->sh;
    int n = (int)out_elems(s), total = (int)pool_elems(s);
    b1_relu_backward<<<grid_for(n, 256, r->sm_count), 256>>>(r->g, r->y, r->dz, n);
    b1_logsumexp_backward<<<grid_for(n, 256, r->sm_count), 256>>>(r->p, r->z, r->dz, r->dp, n, s->s);
    CUDA_CHECK(cudaMemsetAsync(r->dc, 0, sizeof(float) * conv_elems(s), 0));
    b1_maxpool_backward<<<grid_for(total, 256, r->sm_count), 256>>>(r->dp, r->idx, r->dc, total,
                                                                    s->d, s->h, s->w);
}

void lib_dx(const run_ctx *r) { lib_conv3d_backward_data(&r->lib->conv, r->weight, r->dc, r->dx); }

void lib_dw(const run_ctx *r) { lib_conv3d_backward_filter(&r->lib->conv, r->x, r->dc, r->dw); }

void lib_dbias(const run_ctx *r) { lib_conv3d_backward_bias(&r->lib->conv, r->dc, r->dbias); }

/* dbias deterministically (common/reduce.cuh): per channel, blocks sum slices of every sample's
 * plane into one partial each; one block per channel then adds its partials in a fixed order */
void own_dbias(const run_ctx *r)
{
    k_channel_sums<<<dim3(DBIAS_BLOCKS, C_OUT), 256, 0, r->stream>>>(r->dc, NULL, r->partials,
                                                                      r->sh.n, r->sh.sc);
    k_segment_sums<<<C_OUT, 64, 0, r->stream>>>(r->partials, NULL, DBIAS_BLOCKS, r->dbias);
}

void b1_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_TRAIN)
        conv_forward(r);
    v1_saving(r);
    b1_backward(r);
    if (scope == SCOPE_TRAIN)
        lib_dx(r), lib_dw(r), lib_dbias(r);
}
