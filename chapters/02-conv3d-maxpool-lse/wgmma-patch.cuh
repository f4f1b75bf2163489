/*
 * wgmma-patch.cuh: v10's tile and its staging, shared by 13-v10-v11-wgmma.cu (the conv of x:
 * v10 in TF32, v11 in 3xTF32) and 14-b4-wgmma-gradients.cu (dx, the conv of dc): a tile of
 * 2 x 4 x 64 outputs (v11: 2 x 2 x 64), its patch of 8 input channels a chunk stored [group of 4
 * channels][position][4 channels] (v11: 4 channels, [hi, then lo][position][4 channels]), 16
 * bytes a position, so that each tap is a descriptor offset; after it in the stage the chunk's
 * weights (W_BYTES). sm_90a code (read common/wgmma.cuh first).
 */
#ifndef CH02_WGMMA_PATCH_CUH
#define CH02_WGMMA_PATCH_CUH

#include <cuda_pipeline.h>

#include "tf32.cuh"

#define V10_TD 2                             /* the tile: planes, rows, columns of conv outputs */
#define V10_TH 4
#define V10_TW 64                            /* one wgmma's M */
#define V10_PH (V10_TH + 2)                  /* the patch: 4 x 6 x 66 positions */
#define V10_PW (V10_TW + 2)
#define V10_PATCH ((V10_TD + 2) * V10_PH * V10_PW) /* 1584 */
#define V10_CI 8                             /* input channels a chunk: one wgmma's k */
#define V10_PATCH_BYTES (2 * V10_PATCH * 16) /* two groups of 4 channels: 50688 */
#define V10_THREADS 512

/* a tile of ROWS rows (v10, b4: 4; v11: 2): its threads (a warpgroup a plane's pair of rows)
 * and patch (POSITIONS positions, PROWS rows a plane) */
template <int ROWS> struct v10_geom {
    static constexpr int THREADS = 128 * ROWS;
    static constexpr int PROWS = ROWS + 2;
    static constexpr int POSITIONS = (V10_TD + 2) * PROWS * V10_PW;
    static constexpr int PATCH_BYTES = 2 * POSITIONS * 16;
};

typedef struct {
    int n, d0, h0, w0;
} v10_tile;

/* the tiles of an n x d x h x w volume: columns of 64, ROWS rows, pairs of planes */
template <int ROWS = V10_TH>
__host__ __device__ static inline int v10_tiles(int n, int d, int h, int w)
{
    return (w + V10_TW - 1) / V10_TW * ((h + ROWS - 1) / ROWS) * ((d + 1) / 2) * n;
}

template <int ROWS = V10_TH>
__device__ static inline v10_tile v10_tile_of(int id, int d, int h, int w)
{
    int tw = (w + V10_TW - 1) / V10_TW, th = (h + ROWS - 1) / ROWS, td = (d + 1) / 2;
    v10_tile t;
    t.w0 = id % tw * V10_TW, id /= tw;
    t.h0 = id % th * ROWS, id /= th;
    t.d0 = id % td * V10_TD;
    t.n = id / td;
    return t;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* Loads chunk `chunk` of tile t of x (CH channels; b4's: dc) into stage: the weights by
 * cp.async (16 bytes each), the patch (zeros outside the volume: the conv's padding) through
 * registers, item it = (group, position)
 * a thread: 4 loads of one position, each coalesced along w over the warp, rounded to TF32 and
 * stored as 16 bytes. SPLIT (v11): a chunk is one group of 4 channels, each value split for
 * 3xTF32 (common/tf32.cuh's split_tf32), hi where v10 puts the first group, lo where it puts
 * the second. Waits for the cp.async; the caller fences and syncs. */
template <int CH, int W_BYTES, bool SPLIT = false, int ROWS = V10_TH>
__device__ static inline void v10_load(unsigned char *stage, const float *__restrict__ x,
                                       const float *__restrict__ w_t, v10_tile t, int chunk,
                                       int d, int h, int w)
{
    typedef v10_geom<ROWS> G;
    constexpr int ITEMS = (SPLIT ? 1 : 2) * G::POSITIONS;
    constexpr int LOADS = (ITEMS + G::THREADS - 1) / G::THREADS; /* 7; v11: 5 */
    const float4 *wsrc = reinterpret_cast<const float4 *>(w_t) + chunk * (W_BYTES / 16);
    float4 *wdst = reinterpret_cast<float4 *>(stage + G::PATCH_BYTES);
    for (int e = threadIdx.x; e < W_BYTES / 16; e += G::THREADS)
        __pipeline_memcpy_async(wdst + e, wsrc + e, 16);
    __pipeline_commit();
    size_t dhw = (size_t)d * h * w;
    const float *xc = x + ((size_t)t.n * CH + chunk * (SPLIT ? 4 : 8)) * dhw;
    float v[LOADS][4];
#pragma unroll
    for (int i = 0; i < LOADS; i++) {
        int it = threadIdx.x + i * G::THREADS;
        v[i][0] = v[i][1] = v[i][2] = v[i][3] = 0.0f;
        if (it < ITEMS) {
            int grp = it >= G::POSITIONS, pos = it - grp * G::POSITIONS;
            int pz = pos / (G::PROWS * V10_PW), r = pos - pz * (G::PROWS * V10_PW);
            int py = r / V10_PW, px = r - py * V10_PW;
            int gd = t.d0 + pz - 1, gh = t.h0 + py - 1, gw = t.w0 + px - 1;
            if (gd >= 0 && gd < d && gh >= 0 && gh < h && gw >= 0 && gw < w) {
                const float *p = xc + 4 * grp * dhw + ((size_t)gd * h + gh) * w + gw;
#pragma unroll
                for (int j = 0; j < 4; j++)
                    v[i][j] = __ldg(p + j * dhw);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < LOADS; i++) { /* item (group, position) to 16 (group PATCH + position) */
        int it = threadIdx.x + i * G::THREADS;
        if (it < ITEMS) {
            uint32_t hi[4], lo[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                if (SPLIT)
                    split_tf32(v[i][j], &hi[j], &lo[j]);
                else
                    hi[j] = to_tf32(v[i][j]);
            }
            reinterpret_cast<uint4 *>(stage)[it] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
            if (SPLIT)
                reinterpret_cast<uint4 *>(stage)[G::POSITIONS + it] =
                    make_uint4(lo[0], lo[1], lo[2], lo[3]);
        }
    }
    __pipeline_wait_prior(0);
}
#endif

#endif
