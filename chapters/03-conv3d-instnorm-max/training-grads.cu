/*
 * training-grads.cu: the parameter gradients' sums and the conv's gradients in the training step
 *
 * Per-channel sums over (n, s), deterministic: common/reduce.cuh's two stages, block (j, co)
 * summing a fixed set of channel co's elements into partials[co][j], then each channel's
 * partials added in order. No atomics: the same bits every run. They give dm (b1: both uses of
 * m) and dbias = the sum of dc, which is zero up to rounding (reference.cu derives it) and is
 * computed anyway, as autograd does.
 *
 * The conv's gradients: cuDNN's dx (backward data) in every training step; for dw cuDNN's
 * backward filter (b1) or our own (b2 and later):
 * dw[co][ci][k] = sum over n and s of dc[n][co][s] x[n][ci][s shifted by tap k]: 1296 sums of
 * 1.6M terms each, 2.1 GFMA.
 *   k_dw_partials: a block per (n, chunk of DW_CHUNK positions) copies the chunk's dc into
 *     shared memory as [position][co] (the 16 channels of a position: four 16-byte
 *     broadcasts); thread (group g, tap) accumulates acc[co] += x(tap) dc[co] over every third
 *     position, so each x load feeds 16 FFMA; the three groups are added in shared memory and
 *     the block writes its 1296 partials, transposed so that
 *   k_dw_sum: a block per weight adds that weight's partials, contiguous, in a fixed order.
 * Prediction: bounded by its 4.2 GFLOP, 0.062 ms at the FMA peak; a few times that in practice.
 * Measured (the notes after the table, in the run of data/h100/ch03.csv): 0.570 ms against
 * cuDNN's 1.610 ms (engine 20, the fastest fp32 engine of its graph API; PyTorch's in its
 * default precision, in TF32, 0.738 ms [eager conv_dw default]). Why not cuDNN's legacy
 * backward filter, and the profile: LABBOOK.md.
 */
#include "conv.cuh"
#include "model.h"
#include "reduce.cuh"

#define DW_GROUPS 3
#define DW_THREADS (DW_GROUPS * C_IN * KVOL) /* 243 */

/* stage 1 of the sum of a b over (n, s), channel by channel (b = NULL: of a alone): DOT_BLOCKS
 * partials a channel */
void channel_dot(const run_ctx *r, const float *a, const float *b, float *partials)
{
    k_channel_sums<<<dim3(DOT_BLOCKS, C_OUT), 256, 0, r->stream>>>(a, b, partials, r->sh.n, r->sh.s);
}

/* stage 2: out[co] = the sum of p1's count partials of channel co plus p2's (NULL: none) */
void channel_totals(const float *p1, const float *p2, int count, float *out, cudaStream_t st)
{
    k_segment_sums<<<C_OUT, count <= 64 ? 64 : 128, 0, st>>>(p1, p2, count, out);
}

void own_dbias(const run_ctx *r)
{
    channel_dot(r, r->dc, NULL, r->db_part);
    channel_totals(r->db_part, NULL, DOT_BLOCKS, r->dbias, r->stream);
}

void lib_dx(const run_ctx *r) { lib_conv3d_backward_data(r->lib, r->weight, r->dc, r->dx); }

void lib_dw(const run_ctx *r) { lib_conv3d_backward_filter(r->lib, r->x, r->dc, r->dw); }

__global__ void __launch_bounds__(256)
k_dw_partials(const float *__restrict__ x, const float *__restrict__ dc,
              float *__restrict__ part, const shape sh, int chunks)
{
    __shared__ __align__(16) float sdc[DW_CHUNK][C_OUT];
    __shared__ float red[DW_GROUPS - 1][C_IN * KVOL][C_OUT + 1];
    int S = sh.s, n = blockIdx.y, s0 = blockIdx.x * DW_CHUNK, len = min(DW_CHUNK, S - s0);
    for (int i = threadIdx.x; i < C_OUT * len; i += blockDim.x) {
        int co = i / len, j = i - co * len;
        sdc[j][co] = dc[((size_t)n * C_OUT + co) * S + s0 + j];
    }
    __syncthreads();
    int tid = threadIdx.x, g = tid / (C_IN * KVOL), tap = tid - g * (C_IN * KVOL);
    float acc[C_OUT];
#pragma unroll
    for (int co = 0; co < C_OUT; co++)
        acc[co] = 0.0f;
    if (tid < DW_THREADS) {
        int ci = tap / KVOL, k = tap - ci * KVOL, hw = sh.h * sh.w;
        const float *xb = x + ((size_t)n * C_IN + ci) * sh.d * hw + (k / 9) * hw +
                          ((k / 3) % 3) * sh.w + k % 3;
        for (int j = g; j < len; j += DW_GROUPS) {
            int s = s0 + j, ow = s % sh.ow, q = s / sh.ow, oh = q % sh.oh, od = q / sh.oh;
            float xv = __ldg(xb + ((size_t)od * sh.h + oh) * sh.w + ow);
            const float4 *d4 = (const float4 *)sdc[j];
            float4 w0 = d4[0], w1 = d4[1], w2 = d4[2], w3 = d4[3];
            FMA4(acc, 0, xv, w0);
            FMA4(acc, 4, xv, w1);
            FMA4(acc, 8, xv, w2);
            FMA4(acc, 12, xv, w3);
        }
        if (g > 0)
#pragma unroll
            for (int co = 0; co < C_OUT; co++)
                red[g - 1][tap][co] = acc[co];
    }
    __syncthreads();
    if (g == 0 && tid < DW_THREADS) {
        int blocks = gridDim.x * gridDim.y, b = blockIdx.y * gridDim.x + blockIdx.x;
#pragma unroll
        for (int co = 0; co < C_OUT; co++) {
            float v = acc[co];
            for (int q = 0; q < DW_GROUPS - 1; q++)
                v += red[q][tap][co];
            part[(size_t)(co * C_IN * KVOL + tap) * blocks + b] = v; /* [weight][block] */
        }
    }
}

/* a block per weight: its partials in order */
__global__ void k_dw_sum(const float *__restrict__ part, int blocks, float *__restrict__ dw)
{
    float v = 0.0f;
    for (int j = threadIdx.x; j < blocks; j += blockDim.x)
        v += part[(size_t)blockIdx.x * blocks + j];
    v = block_sum(v);
    if (threadIdx.x == 0)
        dw[blockIdx.x] = v;
}

void own_dw(const run_ctx *r)
{
    int chunks = ceil_div(r->sh.s, DW_CHUNK);
    k_dw_partials<<<dim3(chunks, r->sh.n), 256, 0, r->stream>>>(r->x, r->dc, r->dw_part, r->sh, chunks);
    k_dw_sum<<<N_WEIGHT, 256, 0, r->stream>>>(r->dw_part, chunks * r->sh.n, r->dw);
}
