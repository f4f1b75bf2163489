/*
 * v3: one fused kernel, windows read as float2, a two-pass logsumexp
 *
 * Defect of v1/v2: the pooled tensor's round trip (67 MB written, read twice) and three
 * launches. Change: one kernel, one thread per output position (n, pd, ph, pw), looping over
 * the 64 channels; for each, the 2x2x2 window: 4 rows of 2 adjacent floats (window.cuh: a warp
 * reads 64 adjacent floats of a row). The 64 pooled values would need 64 registers per thread
 * to be held for a two-pass logsumexp; this version does it the other way, computing the max
 * over the channels in a first pass and the sum of exps in a second, which reads the window
 * again.
 * Prediction: c read once from DRAM is the 0.18 ms floor; the second read comes partly from
 * L1/L2, so between 1x and 2x the floor (0.18 to 0.36 ms).
 * Measured (H100): 0.354 ms [v3 epilogue_fwd], 1.9x the floor [v3 epilogue_fwd median_ms/floor_ms]
 * (51.5% of it [v3 epilogue_fwd pct_floor]), 0.72x v1 [v1/v3 epilogue_fwd]: slower than v1. Most
 * likely the second pass reads DRAM again: between a thread's two reads of a window every
 * resident thread reads 64 windows, 2 MB apart (one channel plane each), far more than L1
 * holds (not profiled).
 */
#include "model.h"
#include "window.cuh"

__global__ void v3_epilogue_two_pass(const float *__restrict__ c, float *__restrict__ y, int n_pos,
                                     int d, int h, int w)
{
    int pd = d / 2, ph = h / 2, pw = w / 2, sc = d * h * w;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_pos; i += gridDim.x * blockDim.x) {
        int x0 = i % pw, r = i / pw, y0 = r % ph;
        r /= ph;
        int z0 = r % pd, n = r / pd;
        int base = n * C_OUT * sc + (2 * z0 * h + 2 * y0) * w + 2 * x0, arg;
        float m = -INFINITY, sum = 0.0f, v[8];
        for (int ch = 0; ch < C_OUT; ch++) {
            load_window(c, base + ch * sc, h, w, v);
            m = fmaxf(m, max8(v, &arg));
        }
        for (int ch = 0; ch < C_OUT; ch++) {
            load_window(c, base + ch * sc, h, w, v);
            sum += expf(max8(v, &arg) - m);
        }
        float z = m + logf(sum);
        y[i] = z > 0.0f ? z : 0.0f;
    }
}

void v3_launch(const run_ctx *r, int scope)
{
    const shape *s = &r->sh;
    int n = (int)out_elems(s);
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    v3_epilogue_two_pass<<<grid_for(n, 256, r->sm_count), 256>>>(r->c, r->y, n, s->d, s->h, s->w);
}
