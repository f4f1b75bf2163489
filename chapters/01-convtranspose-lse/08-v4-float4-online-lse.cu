/*
 * v4: 16-byte loads on misaligned planes, the online logsumexp, the fast intrinsics
 *
 * Defect of v2 (0.416 ms [v2 epilogue_fwd], 86% of the ceiling [v2 epilogue_fwd pct_ceiling]): one
 * 4-byte load instruction per channel per position, an integer division per position, and a max
 * pass before the exp pass (all 16 values must be held). It is not latency: 64 bytes in flight a
 * thread are 128 KB an SM at 2048 threads, eight times the 16 KB that Little's law asks for (3e12
 * B/s x 7e-7 s of DRAM latency / 132 SMs). Changes: (1) each thread takes 4 adjacent positions and
 * reads each channel with 16-byte loads
 *      (shifted-load.cuh). A channel's plane is S = 123039 floats, an odd number, so only one
 *      channel in four starts on a 16-byte boundary: the others take two aligned float4 and
 *      shift, the second usually the neighbour thread's first (an L1 hit, no extra DRAM bytes);
 *  (2) the online logsumexp (Milakov & Gimelshein, "Online normalizer calculation for softmax",
 *      2018; common/lse.cuh) folds each channel in as it arrives, one exp per value:
 *          v > m:  s = s exp(m - v) + 1,  m = v        otherwise:  s = s + exp(v - m)
 *      so no value waits for the max;
 *  (3) __expf/__logf instead of expf/logf, kept because the accuracy checks still pass.
 * Prediction: the same 1.071 GB, so the same 0.359 ms floor; what v2 lost is instructions per
 * byte. Per 4 positions, 64 load instructions become 4 x 1 + 12 x 2 = 28, and 4 divisions one.
 * If v2's 14% gap to the ceiling shrinks with the loads, 14% x 28 / 64 = 6%: about 0.382 ms.
 * Measured: 0.368 ms [v4 epilogue_fwd], 97.6% of the measured copy ceiling
 * [v4 epilogue_fwd pct_ceiling] (2912 of 2983 GB/s [v4 epilogue_fwd gbps ceiling_gbps]), 1.13x v2
 * [v2/v4 epilogue_fwd] and 2.4% above the 0.359 ms [v4 epilogue_fwd floor_ms] floor: better than
 * predicted. torch.compile's generated kernel takes 0.411 ms [compile epilogue_fwd] on the same
 * GPU (the same lease), 12% longer [compile vs v4 epilogue_fwd], the ranges apart. Streaming
 * loads were slower and other block sizes no faster (the chapter README's "tried" list).
 * v7 comes back to this kernel: measured later, the 16-byte loads were not the gain; a thread
 * per position with plain loads and the other two changes is 2% faster.
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
