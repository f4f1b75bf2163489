/*
 * v9: fused apply
 *
 * Defect of v1..v8: after the statistics, five kernels and four 103 MB intermediates (a, xh, t,
 * u), 0.40 ms that no statistics kernel can touch. Change: v7's statistics (from c, m applied on
 * load), then one kernel does the rest: a thread per output position reads its 16 channel
 * values (16 loads in flight), normalises, clamps, multiplies, keeps the first maximum and
 * writes y. c is read twice in all (statistics, apply).
 * Prediction: the two-pass floor, 2 x 103.2 + 6.45 = 212.9 MB: 0.071 ms at the copy ceiling
 * (model.h), about 6x below v7's 0.441 ms [v7 epilogue_fwd] epilogue.
 * Measured: 0.0829 ms [v9 epilogue_fwd] (44% of the one-read floor [v9 epilogue_fwd pct_floor]),
 * 5.3x v8 [v8/v9 epilogue_fwd], 20x v1 [v1/v9 epilogue_fwd], 1.81x torch.compile
 * [compile/v9 epilogue_fwd] (0.1503 ms [compile epilogue_fwd]). The floor needs c read once:
 * the advanced part's clusters.
 */
#include "model.h"

__global__ void v9_apply_fused(const float *__restrict__ c, const float *__restrict__ m,
                               const float *__restrict__ mean, const float *__restrict__ rstd,
                               float *__restrict__ y, int n_pos, int S)
{
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < n_pos; p += gridDim.x * blockDim.x) {
        int n = p / S, s = p - n * S;
        const float *cp = c + (size_t)n * C_OUT * S + s;
        float best = 0.0f;
#pragma unroll
        for (int co = 0; co < C_OUT; co++) {
            float mc = __ldg(m + co);
            float u = clampf1((a_rounded(cp[(size_t)co * S], mc) - __ldg(mean + n * C_OUT + co)) *
                              __ldg(rstd + n * C_OUT + co)) * mc;
            if (co == 0 || u > best)
                best = u;
        }
        y[p] = best;
    }
}

void v9_epilogue(const run_ctx *r)
{
    int n_pos = (int)out_elems(&r->sh);
    stats_v7(r, r->c, r->m);
    v9_apply_fused<<<grid_for(n_pos, 256, r->sm_count), 256, 0, r->stream>>>(r->c, r->m, r->mean, r->rstd, r->y,
                                                              n_pos, r->sh.s);
}

void v9_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    v9_epilogue(r);
}
