/*
 * window.cuh: the 2x2x2 window helpers every fused version (v3, v4, v5, b2) reads c with.
 *
 * Coalescing with a stride-2 window: the thread of output column pw reads columns 2pw and
 * 2pw + 1, so a warp's 32 threads read 64 adjacent floats of each row, one float2 (8-byte) load
 * each: every byte of every sector fetched is used. (A thread per pooled value reading its 8
 * elements with scalar loads would ask for half of each sector twice.)
 */
#ifndef CH02_WINDOW_CUH
#define CH02_WINDOW_CUH

/* the window's 8 values in registers, index dd * 4 + dh * 2 + dw; base = the element at
 * (plane, 2pd, 2ph, 2pw). 8-byte loads when W is even (then every 2pw is 8-byte aligned: the
 * row starts at a multiple of W floats), scalar loads otherwise. */
__device__ static inline void load_window(const float *__restrict__ c, int base, int h, int w,
                                          float v[8])
{
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const float *row = c + base + ((r >> 1) * h + (r & 1)) * w;
        if ((w & 1) == 0) {
            float2 t = __ldg(reinterpret_cast<const float2 *>(row));
            v[2 * r] = t.x, v[2 * r + 1] = t.y;
        } else {
            v[2 * r] = __ldg(row), v[2 * r + 1] = __ldg(row + 1);
        }
    }
}

/* max of the 8, and the index of the first maximum (PyTorch's max pool keeps the first) */
__device__ static inline float max8(const float v[8], int *arg)
{
    float m = v[0];
    int a = 0;
#pragma unroll
    for (int q = 1; q < 8; q++)
        if (v[q] > m)
            m = v[q], a = q;
    *arg = a;
    return m;
}

/* output position i = (n, pd, ph, pw) -> the offset in c of its window in channel 0 */
__device__ static inline int window_base(int i, int d, int h, int w)
{
    int pd = d / 2, ph = h / 2, pw = w / 2;
    int x0 = i % pw, r = i / pw, y0 = r % ph;
    r /= ph;
    int z0 = r % pd, n = r / pd;
    return n * C_OUT * d * h * w + (2 * z0 * h + 2 * y0) * w + 2 * x0;
}

#endif
