/*
 * b4: b2's backward with its tile staged in shared memory by cp.async
 *
 * Defect of b2 (1.180 ms [b2 epilogue_fwdbwd]): its backward kernel waits on loads (ncu: DRAM
 * 73% busy, 48% of warps active, the limit its 64 registers). A loaded value sits in a register
 * from the load's issue to its use, so registers cap the loads in flight; b2 spent them all.
 * Change: load without registers. A block takes a tile of 512 positions x 16 channels of one
 * sample. Each channel row of the tile is copied global -> shared with cp.async (sm_80 and
 * later: the copy goes to shared memory without a register; a thread issues all of its copies
 * before it waits for any), as the 16-byte-aligned float4s that cover the row: the plane
 * starts r = (row mod 4) floats past a 16-byte boundary (shifted-load.svg), so the tile's row
 * keeps position q at float r + q. After a barrier each thread takes positions q = tid, tid + 256
 * from shared memory, computes as b2 does and writes its 16 dc values over its c values; after a
 * second barrier the block stores the tile as aligned float4s, a row's two partial float4s
 * element by element, so no tile writes its neighbour's floats.
 * Prediction: if registers held b2 back, b4's backward runs at v7's share of the ceiling, and
 * forward + backward comes near the 1.056 ms [b4 epilogue_fwdbwd floor_ms] floor. Its 44
 * registers allow 5 blocks of 256 an SM, 62.5% of warps; 5 tiles of 33 KB fit the shared memory.
 * Measured: 1.092 ms [b4 epilogue_fwdbwd], 96.7% of the floor [b4 epilogue_fwdbwd pct_floor], 7%
 * less time than b2 [b4 vs b2 epilogue_fwdbwd], 18.5% less [b4 vs compile epilogue_fwdbwd] than
 * torch.compile; its training step 4.78 ms [b4 train_step]. ncu, each kernel alone: the same
 * DRAM bytes, DRAM 85.7% busy against 73.0%: the bytes did not change, the waiting did.
 * Tried: the tile loaded through registers (no faster than b2: cp.async is the gain), other tile
 * and block sizes, 6 blocks an SM (LABBOOK.md).
 */
#include <cuda_pipeline.h>
#include "model.h"
#include "reduce.cuh"
#include "tail.cuh"

#define B4_BLOCK 256
#define B4_TILE 512                 /* positions a block */
#define B4_F4 (B4_TILE / 4 + 1)     /* float4s a tile row: the aligned cover of 512 floats */
#define B4_ROW (4 * B4_F4)          /* floats a tile row */

/* where channel ch's row of the tile starts past a 16-byte boundary: (first float) mod 4 */
__device__ static inline int row_shift(int plane0, int ch, int s, int p0)
{
    return (plane0 + ch * s + p0) & 3;
}

/* tile <- c for positions [p0, p0 + cnt) of every channel: the aligned float4s that cover each
 * row, by cp.async; a float4 that would run past the tensor's end (total floats) is read
 * element by element, so no copy reads past the allocation. Waits for this thread's copies;
 * the caller's barrier waits for the block's. */
__device__ static inline void tile_load(const float *__restrict__ c, float4 *tile, int plane0,
                                        int s, int p0, int cnt, int total)
{
#pragma unroll 4
    for (int i = threadIdx.x; i < C_OUT * B4_F4; i += B4_BLOCK) {
        int ch = i / B4_F4, j = i - ch * B4_F4;
        int e0 = plane0 + ch * s + p0, r = e0 & 3;
        if (4 * j >= r + cnt)
            continue; /* past this row's last position */
        int idx = e0 - r + 4 * j;
        if (idx + 4 <= total) {
            __pipeline_memcpy_async(tile + i, reinterpret_cast<const float4 *>(c + idx), 16);
        } else {
            float w[4];
            for (int k = 0; k < 4; k++)
                w[k] = idx + k < total ? c[idx + k] : 0.0f;
            tile[i] = make_float4(w[0], w[1], w[2], w[3]);
        }
    }
    __pipeline_commit();
    __pipeline_wait_prior(0);
}

/* dc <- tile, only the floats of positions [p0, p0 + cnt) of each row: whole float4 stores
 * inside, the partial float4s at a row's two ends element by element */
__device__ static inline void tile_store(float *__restrict__ dc, const float4 *tile, int plane0,
                                         int s, int p0, int cnt)
{
#pragma unroll 4
    for (int i = threadIdx.x; i < C_OUT * B4_F4; i += B4_BLOCK) {
        int ch = i / B4_F4, j = i - ch * B4_F4;
        int e0 = plane0 + ch * s + p0, r = e0 & 3;
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

/* block (x, n): positions [x * B4_TILE, ...) of sample n; one db partial a block */
__global__ void __launch_bounds__(B4_BLOCK)
    b4_epilogue_backward_staged(const float *__restrict__ c, const float *__restrict__ g,
                                const float *__restrict__ b, float *__restrict__ dc,
                                float *__restrict__ partials, int s, int total)
{
    __shared__ float4 tile4[C_OUT * B4_F4]; /* 33,024 bytes */
    float *tile = reinterpret_cast<float *>(tile4);
    int n = blockIdx.y, p0 = blockIdx.x * B4_TILE, plane0 = n * C_OUT * s;
    int cnt = min(B4_TILE, s - p0);
    tile_load(c, tile4, plane0, s, p0, cnt, total);
    __syncthreads();
    float bv = *b, db_sum = 0.0f; /* -ds summed: the minus of s = a - b */
    for (int q = threadIdx.x; q < cnt; q += B4_BLOCK) {
        float e[C_OUT], m = -INFINITY;
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++) {
            e[ch] = tile[ch * B4_ROW + row_shift(plane0, ch, s, p0) + q];
            m = fmaxf(m, e[ch]);
        }
        float sum = 0.0f;
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++) {
            e[ch] = EXP_FAST(e[ch] - m);
            sum += e[ch];
        }
        float z = m + LOG_FAST(sum);
        float t = 1.0f / (1.0f + EXP_FAST(-(z + 3.0f)));
        float sv = z * t / 6.0f - bv;
        float ds = (sv >= -1.0f && sv <= 1.0f) ? g[n * s + p0 + q] : 0.0f;
        db_sum -= ds;
        float dz_over_sum = ds * t * (1.0f + z * (1.0f - t)) / (6.0f * sum);
#pragma unroll
        for (int ch = 0; ch < C_OUT; ch++) /* dc over c, each thread its own floats */
            tile[ch * B4_ROW + row_shift(plane0, ch, s, p0) + q] = dz_over_sum * e[ch];
    }
    __syncthreads();
    tile_store(dc, tile4, plane0, s, p0, cnt);
    db_sum = block_sum(db_sum);
    if (threadIdx.x == 0)
        partials[blockIdx.y * gridDim.x + blockIdx.x] = db_sum;
}

/* b4's grid: x along a sample's S positions, a tile a block; y the sample (problem.cu sizes
 * the partials by it) */
dim3 b4_grid(const shape *sh)
{
    return dim3((sh->s + B4_TILE - 1) / B4_TILE, sh->n);
}

void b4_backward(const run_ctx *r)
{
    dim3 grid = b4_grid(&r->sh);
    b4_epilogue_backward_staged<<<grid, B4_BLOCK, 0, r->stream>>>(
      r->c, r->g, r->b, r->dc, r->partials, r->sh.s, (int)conv_elems(&r->sh));
    sum_segments(r->partials, 1, grid.x * grid.y, 1024, r->db, r->stream); /* db */
}

void b4_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_TRAIN)
        b3_conv_forward(r);
    v7_epilogue(r);
    b4_backward(r);
    if (scope == SCOPE_TRAIN)
        lib_dx(r), own_dw(r), own_dbias(r);
}
