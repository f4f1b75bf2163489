/*
 * v3: the anti-pattern, a block per position and a thread per channel
 *
 * The layout a first instinct picks: the reduction is over channels, so give each channel a
 * thread and reduce in shared memory, one block per output position. Defects: (1) a block of
 * 16 threads fills half a warp, and a multiprocessor holds at most 32 blocks, so at most 512 of
 * its 2048 thread slots are used; (2) the 16 threads of a block read addresses S floats apart:
 * 16 separate 32-byte sectors for 64 useful bytes, so DRAM moves 8x the bytes it needs unless
 * L2 keeps the neighbouring positions' sectors until their blocks come by; (3) eleven barriers
 * and two trees (a max, then a sum) per 68 bytes of work. Prediction: several times slower than v2.
 * Measured: 9.47 ms [v3 epilogue_fwd], 23x slower than v2 [v3/v2 epilogue_fwd], 3.8% of the copy
 * ceiling [v3 epilogue_fwd pct_ceiling]. At batch 1 the gap is only 11x [v3/v2 epilogue_fwd @1]
 * (data/h100/ch01-sweep.csv), not because v3 gains there (3.6% of the ceiling
 * [v3 epilogue_fwd @1 pct_ceiling], though the 7.9 MB conv output fits in the 50 MB L2) but because
 * v2 falls to 39% [v2 epilogue_fwd @1 pct_ceiling]: 7.2 us [v2 epilogue_fwd @1] for a launch
 * that small is mostly launch and latency.
 */
#include "model.h"
#include "tail.cuh"

__global__ void v3_epilogue_block_per_position(const float *__restrict__ c,
                                               const float *__restrict__ b, float *__restrict__ y,
                                               int s)
{
    __shared__ float sm[C_OUT];
    int i = blockIdx.x, ch = threadIdx.x;
    int n = i / s, p = i - n * s;
    float v = c[(n * C_OUT + ch) * s + p];
    sm[ch] = v;
    __syncthreads();
    for (int stride = C_OUT / 2; stride > 0; stride >>= 1) {
        if (ch < stride)
            sm[ch] = fmaxf(sm[ch], sm[ch + stride]);
        __syncthreads();
    }
    float m = sm[0];
    __syncthreads(); /* everyone has read sm[0] before it is overwritten */
    sm[ch] = expf(v - m);
    __syncthreads();
    for (int stride = C_OUT / 2; stride > 0; stride >>= 1) {
        if (ch < stride)
            sm[ch] += sm[ch + stride];
        __syncthreads();
    }
    if (ch == 0)
        y[i] = tail_accurate(m + logf(sm[0]), *b);
}

void v3_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    v3_epilogue_block_per_position<<<(unsigned)out_elems(&r->sh), C_OUT>>>(r->c, r->b, r->y,
                                                                           r->sh.s);
}
