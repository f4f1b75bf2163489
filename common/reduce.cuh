/*
 * reduce.cuh: the device half of a deterministic reduction, shared by the chapters (CUDA, header
 * only: each chapter is one translation unit and includes it).
 *
 *   block_sum(v)       the block's sum of every thread's v, returned to thread 0
 *   k_channel_sums     stage 1: for an N x C x S tensor a (or the product a b of two), block
 *                      (j, c) adds a fixed grid-strided set of channel c's elements over all N
 *                      samples into partials[c * gridDim.x + j]; launch with gridDim.y = C
 *   k_segment_sums     stage 2: block i writes out[i] = the sum of p1[i * count ...] plus that of
 *                      p2 (NULL: none), each added in the same order every run
 *
 * No atomics, so the same bits every run (a bias gradient, a per-channel parameter gradient);
 * the two stages are the two-pass form of any deterministic parallel sum (e.g. CUB's
 * DeviceReduce, which these do not use: per-channel slices of a 5-D tensor are not contiguous).
 */
#ifndef REDUCE_CUH
#define REDUCE_CUH

/* warp shuffles, then one value per warp in shared memory, then the first warp. blockDim.x *
 * blockDim.y must be a multiple of 32, at most 1024. */
__device__ static float block_sum(float v)
{
    __shared__ float warp_sums[32];
    int tid = threadIdx.y * blockDim.x + threadIdx.x, lane = tid & 31, warp = tid >> 5;
    __syncthreads(); /* a previous call's readers are done with warp_sums */
    int n_warps = (blockDim.x * blockDim.y) >> 5;
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0)
        warp_sums[warp] = v;
    __syncthreads();
    v = 0.0f;
    if (warp == 0) {
        v = lane < n_warps ? warp_sums[lane] : 0.0f;
        for (int off = 16; off > 0; off >>= 1)
            v += __shfl_down_sync(0xffffffffu, v, off);
    }
    return v;
}

__global__ void k_channel_sums(const float *__restrict__ a, const float *__restrict__ b,
                               float *__restrict__ partials, int n, int s)
{
    int c = blockIdx.y, channels = gridDim.y;
    float v = 0.0f;
    for (int nn = 0; nn < n; nn++) {
        size_t row = ((size_t)nn * channels + c) * s;
        for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < s; p += gridDim.x * blockDim.x)
            v += b ? a[row + p] * b[row + p] : a[row + p];
    }
    v = block_sum(v);
    if (threadIdx.x == 0)
        partials[c * gridDim.x + blockIdx.x] = v;
}

__global__ void k_segment_sums(const float *__restrict__ p1, const float *__restrict__ p2,
                               int count, float *__restrict__ out)
{
    float v = 0.0f, w = 0.0f;
    for (int j = threadIdx.x; j < count; j += blockDim.x) {
        v += p1[(size_t)blockIdx.x * count + j];
        if (p2)
            w += p2[(size_t)blockIdx.x * count + j];
    }
    v = block_sum(v);
    w = block_sum(w);
    if (threadIdx.x == 0)
        out[blockIdx.x] = v + w;
}

#endif
