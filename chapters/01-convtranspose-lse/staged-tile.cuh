/*
 * staged-tile.cuh (experiment, issue 15): a block's tile of P positions x 16 channels of one
 * sample, moved between global and shared memory with aligned 16-byte accesses.
 *
 * Plane (n, ch) starts r = row mod 4 floats past a 16-byte boundary. Row ch of the tile holds
 * the aligned float4s that cover [row + p0, row + p0 + cnt): NF4 = P / 4 + 1 of them, the
 * position q at float r + q of the row. Loads read the whole aligned cover (its first and last
 * float4 shared with the neighbouring tiles: L2 hits); stores write the interior float4s whole
 * and the two partial ones element by element, so no tile writes a neighbour's floats.
 */
#ifndef CH01_STAGED_TILE_CUH
#define CH01_STAGED_TILE_CUH

#include <cuda_pipeline.h>

template <int P> struct staged {
    static constexpr int NF4 = P / 4 + 1; /* float4s a row */
    static constexpr int ROW = 4 * NF4;   /* floats a row */
    static constexpr size_t BYTES = (size_t)C_OUT * NF4 * 16;
};

/* the shift of channel ch's row: (plane0 + ch * s + p0) mod 4, plane0 = n * C_OUT * s */
__device__ static inline int tile_shift(int plane0, int ch, int s, int p0)
{
    return (plane0 + ch * s + p0) & 3;
}

/* tile <- c; ASYNC: cp.async (sm_80), no registers staged */
template <int P, int THREADS, bool ASYNC>
__device__ static inline void tile_load(const float *__restrict__ c, float4 *tile, int plane0,
                                        int s, int p0, int cnt, int total)
{
    constexpr int NF4 = staged<P>::NF4;
#pragma unroll 4
    for (int i = threadIdx.x; i < C_OUT * NF4; i += THREADS) {
        int ch = i / NF4, j = i - ch * NF4;
        int e0 = plane0 + ch * s + p0;
        int r = e0 & 3;
        if (4 * j >= r + cnt)
            continue;
        int idx = e0 - r + 4 * j;
        if (idx + 4 <= total) {
            if (ASYNC)
                __pipeline_memcpy_async(tile + i, reinterpret_cast<const float4 *>(c + idx), 16);
            else
                tile[i] = __ldg(reinterpret_cast<const float4 *>(c + idx));
        } else {
            float w[4];
            for (int k = 0; k < 4; k++)
                w[k] = idx + k < total ? c[idx + k] : 0.0f;
            tile[i] = make_float4(w[0], w[1], w[2], w[3]);
        }
    }
    if (ASYNC) {
        __pipeline_commit();
        __pipeline_wait_prior(0);
    }
}

/* dc <- tile, only the floats of [e0, e0 + cnt) of each row */
template <int P, int THREADS>
__device__ static inline void tile_store(float *__restrict__ dc, const float4 *tile, int plane0,
                                         int s, int p0, int cnt)
{
    constexpr int NF4 = staged<P>::NF4;
#pragma unroll 4
    for (int i = threadIdx.x; i < C_OUT * NF4; i += THREADS) {
        int ch = i / NF4, j = i - ch * NF4;
        int e0 = plane0 + ch * s + p0;
        int r = e0 & 3;
        if (4 * j >= r + cnt)
            continue;
        int idx = e0 - r + 4 * j;
        float4 v = tile[i];
        if (idx >= e0 && idx + 4 <= e0 + cnt) {
            *reinterpret_cast<float4 *>(dc + idx) = v;
        } else {
            float w[4] = {v.x, v.y, v.z, v.w};
            for (int k = 0; k < 4; k++)
                if (idx + k >= e0 && idx + k < e0 + cnt)
                    dc[idx + k] = w[k];
        }
    }
}

#endif
