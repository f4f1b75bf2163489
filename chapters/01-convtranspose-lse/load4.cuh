/*
 * load4.cuh: four consecutive floats of a channel plane with 16-byte loads, on planes that do not
 * start on 16 bytes (v4's lesson), and load2: two with 8-byte loads (b2's backward).
 *
 * A plane is S floats (123039 at the KernelBench shape, an odd number), so plane (n, ch) starts
 * at r = (row mod 4) floats past a 16-byte boundary, r the same for every thread that reads it.
 * The thread reads the aligned float4 that holds its first value and, unless r = 0, the next
 * one (usually its neighbour's first: an L1 hit), and shifts by r. A group that runs past the
 * plane, or whose second float4 would run past the tensor, takes a scalar path: the aligned
 * pair must not read past the allocation.
 *
 * load2 is the same for two floats and 8-byte loads (b2's backward, which holds fewer values a
 * thread): half of the planes start on 8 bytes (r = row mod 2 = 0), the others take two
 * aligned float2 and shift by one.
 */
#ifndef CH01_LOAD4_CUH
#define CH01_LOAD4_CUH

/* v[k] = c[row + p0 + k] for k < 4 while p0 + k < s (0 past it); p0 a multiple of 4, total the
 * tensor's floats */
__device__ static inline void load4(const float *__restrict__ c, int row, int p0, int s,
                                    int total, float v[4])
{
    int a = row + p0, r = row & 3;
    if (p0 + 4 <= s && a - r + 8 <= total) {
        const float4 *q = reinterpret_cast<const float4 *>(c + (a - r));
        float4 lo = __ldg(q);
        if (r == 0) {
            v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w;
            return;
        }
        float4 hi = __ldg(q + 1);
        switch (r) { /* the same r for the whole block: no divergence */
        case 1: v[0] = lo.y, v[1] = lo.z, v[2] = lo.w, v[3] = hi.x; break;
        case 2: v[0] = lo.z, v[1] = lo.w, v[2] = hi.x, v[3] = hi.y; break;
        default: v[0] = lo.w, v[1] = hi.x, v[2] = hi.y, v[3] = hi.z; break;
        }
        return;
    }
    for (int k = 0; k < 4; k++)
        v[k] = (p0 + k < s) ? c[a + k] : 0.0f;
}

/* v[k] = c[row + p0 + k] for k < 2 while p0 + k < s (0 past it); p0 even */
__device__ static inline void load2(const float *__restrict__ c, int row, int p0, int s,
                                    int total, float v[2])
{
    int a = row + p0, r = row & 1;
    if (p0 + 2 <= s && a - r + 4 <= total) {
        const float2 *q = reinterpret_cast<const float2 *>(c + (a - r));
        float2 lo = __ldg(q);
        if (r == 0) {
            v[0] = lo.x, v[1] = lo.y;
            return;
        }
        float2 hi = __ldg(q + 1);
        v[0] = lo.y, v[1] = hi.x;
        return;
    }
    for (int k = 0; k < 2; k++)
        v[k] = (p0 + k < s) ? c[a + k] : 0.0f;
}

#endif
