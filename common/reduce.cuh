/*
 * reduce.cuh: the device half of a deterministic reduction, shared by the chapters (CUDA, header
 * only: each chapter is one translation unit and includes it).
 *
 *   warp_sum(v)        the warp's sum of its 32 lanes' v, in lane 0: __shfl_down_sync hands each
 *                      lane the v of the lane `off` above it, so five steps (16, 8, 4, 2, 1)
 *                      leave the sum in lane 0 (CUDA C++ Programming Guide, "Warp Shuffle
 *                      Functions"); no shared memory, no barrier
 *   warp_sum_partials  one warp's sum of a row of float2 partials, in a fixed order
 *   block_sum(v)       the block's sum of every thread's v, returned to thread 0
 *   block_max(v)       the same for the max (chapter 5's softmax); both are block_reduce
 *   k_channel_sums     stage 1: for an N x C x S tensor a (or the product a b of two), block
 *                      (j, c) adds a fixed grid-strided set of channel c's elements over all N
 *                      samples into partials[c * gridDim.x + j]; launch with gridDim.y = C
 *   k_segment_sums     stage 2: block i writes out[i] = the sum of p1[i * count ...] plus that of
 *                      p2 (NULL: none), each added in the same order every run
 *
 * The kernels are static: every file of a chapter that includes this header gets its own copy,
 * so any of them can launch them.
 * No atomics, so the same bits every run (a bias gradient, a per-channel parameter gradient);
 * the two stages are the two-pass form of any deterministic parallel sum (e.g. CUB's
 * DeviceReduce, which these do not use: per-channel slices of a 5-D tensor are not contiguous).
 */
#ifndef REDUCE_CUH
#define REDUCE_CUH

/* the two reductions below are written once, for an operation Op: Op::f(a, b) and Op::identity */
struct op_add {
    __device__ static inline float f(float a, float b) { return a + b; }
    static constexpr float identity = 0.0f;
};
struct op_max { /* fmaxf: a NaN loses to a number */
    __device__ static inline float f(float a, float b) { return fmaxf(a, b); }
    static constexpr float identity = -INFINITY;
};

template <typename Op> __device__ static inline float warp_reduce(float v)
{
    for (int off = 16; off > 0; off >>= 1)
        v = Op::f(v, __shfl_down_sync(0xffffffffu, v, off));
    return v;
}
__device__ static inline float warp_sum(float v) { return warp_reduce<op_add>(v); }

/* the sums of count float2 partials at p, x and y apart, by one warp in a fixed order: lane i
 * adds p[i], p[i + 32], ..., then warp_sum; the result in lane 0 (a second stage's merge of
 * per-block partial sums: chapter 3's v2_stats_finish, chapter 4's k_finalize) */
__device__ static inline float2 warp_sum_partials(const float2 *__restrict__ p, int count)
{
    float s = 0.0f, q = 0.0f;
    for (int j = threadIdx.x & 31; j < count; j += 32) {
        float2 v = p[j];
        s += v.x, q += v.y;
    }
    s = warp_sum(s), q = warp_sum(q);
    return make_float2(s, q);
}

/* warp shuffles, then one value per warp in shared memory, then the first warp. blockDim.x *
 * blockDim.y must be a multiple of 32, at most 1024. */
template <typename Op> __device__ static float block_reduce(float v)
{
    __shared__ float warp_sums[32];
    int tid = threadIdx.y * blockDim.x + threadIdx.x, lane = tid & 31, warp = tid >> 5;
    __syncthreads(); /* a previous call's readers are done with warp_sums */
    int n_warps = (blockDim.x * blockDim.y) >> 5;
    v = warp_reduce<Op>(v);
    if (lane == 0)
        warp_sums[warp] = v;
    __syncthreads();
    v = Op::identity;
    if (warp == 0) {
        v = lane < n_warps ? warp_sums[lane] : Op::identity;
        v = warp_reduce<Op>(v);
    }
    return v;
}
__device__ static inline float block_sum(float v) { return block_reduce<op_add>(v); }
__device__ static inline float block_max(float v) { return block_reduce<op_max>(v); }

static __global__ void k_channel_sums(const float *__restrict__ a, const float *__restrict__ b,
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

static __global__ void k_segment_sums(const float *__restrict__ p1, const float *__restrict__ p2,
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
