/*
 * shifted-load.cuh: W consecutive floats of a channel plane with one W-float vector load, on
 * planes that do not start on a 4W-byte boundary (v4's lesson, W = 4: 16-byte loads; b2's
 * backward, W = 2: 8-byte loads, since it holds fewer values a thread).
 *
 * A plane is S floats (123039 at the KernelBench shape, an odd number), so plane (n, ch) starts
 * at float row = (n x 16 + ch) x S of the tensor, r = (row mod W) floats past an aligned
 * boundary, r the same for every thread that reads it.
 * The thread reads the aligned vector that holds its first value and, unless r = 0, the next
 * one (usually its neighbour's first: an L1 hit), and shifts by r. A group that runs past the
 * plane, or whose second vector would run past the tensor, takes a scalar path: the aligned
 * pair must not read past the allocation.
 *
 * The shift branches over the W - 1 possible offsets, so every index into the 2W loaded floats
 * is a compile-time constant: a runtime index (w[r + k]) would put them in local memory.
 */
#ifndef CH01_SHIFTED_LOAD_CUH
#define CH01_SHIFTED_LOAD_CUH

#include <type_traits>

__device__ static inline float4 ldg_vec(const float4 *p) { return __ldg(p); }
__device__ static inline float2 ldg_vec(const float2 *p) { return __ldg(p); }
__device__ static inline void unpack(float4 a, float *w)
{
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
}
__device__ static inline void unpack(float2 a, float *w) { w[0] = a.x, w[1] = a.y; }

/* v[k] = w[O + k]: O a compile-time offset, so w stays in registers */
template <int W, int O> __device__ static inline void take(const float *w, float *v)
{
#pragma unroll
    for (int k = 0; k < W; k++)
        v[k] = w[O + k];
}

/* v[k] = c[row + p0 + k] for k < W while p0 + k < s (0 past it); W is 2 or 4, p0 a multiple
 * of W, total the tensor's floats */
template <int W>
__device__ static inline void load_shifted(const float *__restrict__ c, int row, int p0, int s,
                                           int total, float v[W])
{
    typedef typename std::conditional<W == 4, float4, float2>::type vec;
    static_assert(W == 2 || W == 4, "vector loads of 2 or 4 floats");
    int a = row + p0, r = row & (W - 1);
    if (p0 + W <= s && a - r + 2 * W <= total) {
        const vec *q = reinterpret_cast<const vec *>(c + (a - r));
        float w[2 * W];
        unpack(ldg_vec(q), w);
        if (r == 0) {
            take<W, 0>(w, v);
            return;
        }
        unpack(ldg_vec(q + 1), w + W);
        /* the same r for the whole block: no divergence; W = 2 needs only the last case */
        if (W == 4 && r == 1)
            take<W, 1>(w, v);
        else if (W == 4 && r == 2)
            take<W, 2>(w, v);
        else
            take<W, W - 1>(w, v);
        return;
    }
    for (int k = 0; k < W; k++)
        v[k] = (p0 + k < s) ? c[a + k] : 0.0f;
}

#endif
