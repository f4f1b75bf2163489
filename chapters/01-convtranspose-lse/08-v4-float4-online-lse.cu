/*
 * v4: four positions a thread, 16-byte loads on misaligned planes: the loads cost time
 *
 * Defect of v7 this version tests: one 4-byte load instruction per channel per position; a
 * 16-byte load takes four positions at once. (v4 was written before v7, from v2, with v7's other
 * changes bundled in; measured apart, those changes were the gain, the loads were not.)
 * Change: each thread takes 4 adjacent positions and reads each channel with 16-byte loads
 * (shifted-load.cuh, shifted-load.svg). A channel's plane is S = 123039 floats, an odd number, so
 * only one channel in four starts on a 16-byte boundary: the others take two aligned float4 and
 * shift, the second usually the neighbour thread's first (an L1 hit, no extra DRAM bytes). Four
 * positions' values arrive a channel at a time, so the logsumexp is the online one
 * (common/lse.cuh), each channel folded in as it arrives.
 * Prediction: the same 1.071 GB, so the same floor; per 4 positions, 64 load instructions become
 * 4 x 1 + 12 x 2 = 28. If load instructions were what kept v2 from the ceiling, v4 beats v7.
 * Measured: 0.368 ms [v4 epilogue_fwd], 97.6% of the copy ceiling [v4 epilogue_fwd pct_ceiling],
 * 1.13x v2 [v2/v4 epilogue_fwd], but v7 is 2.3% faster [v7 vs v4 epilogue_fwd], the ranges apart.
 * ncu: v4 asks L1 for 1.81x the sectors its bytes need (the second float4s), v7 for 1.23x, and v4
 * issues more instructions (the shifts; the online update's compare and select before each exp).
 * The lesson: a warp's 4-byte loads of 128 contiguous bytes are already coalesced whatever the
 * alignment; wider loads save instructions only where instructions bind, and the shift spends
 * them back. (b2 uses the 8-byte form, where it holds fewer values a thread.)
 * Tried: streaming loads (__ldcs), __ldlu, blocks of 128 or 512: slower (LABBOOK.md).
 */
#include "shifted-load.cuh"
#include "lse.cuh"
#include "model.h"
#include "tail.cuh"

#define V4_BLOCK 256

__global__ void v4_epilogue_vec4_online(const float *__restrict__ c, const float *__restrict__ b,
                                        float *__restrict__ y, int s, int total)
{
    int n = blockIdx.y;
    int p0 = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (p0 >= s)
        return;
    float m[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, sum[4] = {0, 0, 0, 0};
#pragma unroll
    for (int ch = 0; ch < C_OUT; ch++) {
        float v[4];
        load_shifted<4>(c, (n * C_OUT + ch) * s, p0, s, total, v);
#pragma unroll
        for (int k = 0; k < 4; k++)
            lse_online(v[k], &m[k], &sum[k]);
    }
    float bv = *b;
#pragma unroll
    for (int k = 0; k < 4; k++)
        if (p0 + k < s)
            y[n * s + p0 + k] = tail_fast(m[k] + LOG_FAST(sum[k]), bv);
}

void v4_epilogue(const run_ctx *r)
{
    int quads = (r->sh.s + 3) / 4;
    dim3 grid((quads + V4_BLOCK - 1) / V4_BLOCK, r->sh.n);
    v4_epilogue_vec4_online<<<grid, V4_BLOCK>>>(r->c, r->b, r->y, r->sh.s, (int)conv_elems(&r->sh));
}

void v4_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    v4_epilogue(r);
}
