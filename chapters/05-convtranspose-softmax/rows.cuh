/*
 * rows.cuh: what the block-per-row versions share (v2..v5, b2): a row of c read as float4, the
 * clamp, the broadcast of a block's result, and the last pass that writes y.
 *
 * A row starts at (n 64 + ch) S floats and S = 8 PD PH PW is a multiple of 8, so every row
 * starts on a 32-byte boundary (cudaMalloc's buffers start on 256) and is a whole number of
 * float4: the kernels load 16 bytes a thread and instruction, with no tail.
 */
#ifndef CH05_ROWS_CUH
#define CH05_ROWS_CUH

#include "model.h"
#include "reduce.cuh"

/* fmaxf drops a NaN: unlike torch.clamp, which keeps it, a NaN c becomes 0 here (and
 * v1_clamp, and b3's mask counts it outside [0, 1]) */
__device__ static inline float clamp01(float v) { return fminf(fmaxf(v, CLAMP_LO), CLAMP_HI); }

__device__ static inline float4 clamp4(float4 v)
{
    return make_float4(clamp01(v.x), clamp01(v.y), clamp01(v.z), clamp01(v.w));
}

/* exp(z - m) for a float4 of z (__expf: one ex2.approx and a multiply; its error is
 * 2 + floor(1.173 |x|) ulp, CUDA C++ Programming Guide, "Intrinsic Functions": at most 3 ulp for
 * the forward's arguments in [-1, 1], up to about 16 for the backward's z - lse, lse near 12;
 * the checks' bounds (reference.cu's error model) allow for it) */
__device__ static inline float4 exp4(float4 z, float m)
{
    return make_float4(__expf(z.x - m), __expf(z.y - m), __expf(z.z - m), __expf(z.w - m));
}

__device__ static inline float hsum4(float4 v) { return (v.x + v.y) + (v.z + v.w); }

/* thread 0's v, to every thread of the block (after a block_sum or block_max) */
__device__ static inline float block_bcast(float v)
{
    __shared__ float slot;
    __syncthreads(); /* a previous call's readers are done with slot */
    if (threadIdx.x == 0)
        slot = v;
    __syncthreads();
    return slot;
}

/* the last pass: y = k exp(clamp(c) - m) over float4 j = first, first + step, ... < end of a row
 * (k = scale_c / sum, m the max the sum was taken after, 0 where there is none) */
__device__ static inline void row_write(const float4 *__restrict__ c4, float4 *__restrict__ y4,
                                        int first, int end, int step, float m, float k)
{
    for (int j = first; j < end; j += step) {
        float4 e = exp4(clamp4(c4[j]), m);
        y4[j] = make_float4(e.x * k, e.y * k, e.z * k, e.w * k);
    }
}

#endif
