/*
 * v4: the online logsumexp, c read once
 *
 * Defect of v3: the conv output is read twice, the second read most likely from DRAM again (v3
 * took 1.9x the floor [v3 epilogue_fwd median_ms/floor_ms]). Change: the online logsumexp
 * (Milakov & Gimelshein, 2018; common/lse.cuh) folds each channel's pooled value in as it
 * arrives, one exp per value:
 *     p > m:  s = s exp(m - p) + 1, m = p        otherwise:  s = s + exp(p - m)
 * One pass, every byte of c read once. __expf/__logf: the accuracy checks still pass.
 * Prediction: 537.9 MB read once: the 0.18 ms floor at the copy ceiling, half of v3's time.
 * Measured (H100): 0.192 ms [v4 epilogue_fwd], 94.7% of the floor [v4 epilogue_fwd pct_floor],
 * 1.84x v3 [v3/v4 epilogue_fwd], 1.32x v1 [v1/v4 epilogue_fwd].
 */
#include "lse.cuh"
#include "model.h"
#include "window.cuh"

__global__ void v4_epilogue_online(const float *__restrict__ c, float *__restrict__ y, int n_pos,
                                   int d, int h, int w)
{
    int sc = d * h * w;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_pos; i += gridDim.x * blockDim.x) {
        int base = window_base(i, d, h, w), arg;
        float m = -INFINITY, sum = 0.0f, v[8];
#pragma unroll 4
        for (int ch = 0; ch < C_OUT; ch++) {
            load_window(c, base + ch * sc, h, w, v);
            lse_online(max8(v, &arg), &m, &sum);
        }
        float z = m + __logf(sum);
        y[i] = z > 0.0f ? z : 0.0f;
    }
}

void v4_launch(const run_ctx *r, int scope)
{
    const shape *s = &r->sh;
    int n = (int)out_elems(s);
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    v4_epilogue_online<<<grid_for(n, 256, r->sm_count), 256>>>(r->c, r->y, n, s->d, s->h, s->w);
}
