/*
 * b4: b2's backward with its tile staged in shared memory by cp.async
 *
 * Defect of b2 (at c8c7057, v7 then in blocks of 512, the earlier timer: 1.203 ms for forward +
 * backward, 9% over the 1.10 ms target and 1.7% behind torch.compile's 1.183 as then timed): less
 * v7's 0.3695 ms forward, its backward takes about 0.834 ms for 2.079 GB (c and g read, dc
 * written), 0.694 ms at the 2995 GB/s copy ceiling of that call: 83% of it, where v7's forward
 * reaches 96.8%. ncu on b2's kernel alone (the table below): DRAM 73% busy, 28 cycles between a
 * warp's instructions, 48% of warps active, the limit its 64 registers a thread (4 blocks of 256 an
 * SM). Every value a thread waits for sits in a register from the load's issue to its use, so
 * registers cap the loads in flight, and b2 spent them all: fewer registers spilled, fewer
 * positions a thread lost (b2's comment).
 * Change: load without registers. A block takes a tile of 512 positions x 16 channels of one
 * sample. Each channel row of the tile is copied global -> shared with cp.async (sm_80 and
 * later: the copy goes to shared memory without a register, and a thread issues all of its
 * copies before it waits for any), as the 16-byte-aligned float4s that cover the row: the plane
 * starts r = (row mod 4) floats past a 16-byte boundary, so the tile's row keeps position q at
 * float r + q, and the first and last float4 of a row are shared with the neighbouring tiles
 * (L2 hits). After one barrier each thread takes positions q = tid, tid + 256 from shared
 * memory, computes as b2 does, and writes its 16 dc values over its c values in the tile; after
 * a second barrier the block stores the tile with aligned float4 stores, the two partial ones a
 * row element by element, so no tile writes its neighbour's floats. db as b2: one partial a
 * block, summed in a fixed order.
 * Prediction: if registers were what held b2's kernel back, b4's backward runs at v7's 96.8% of
 * the ceiling: 0.694 / 0.968 = 0.717 ms, and forward + backward 0.3695 + 0.717 = 1.087 ms,
 * under the target. Its 44 registers (allocated as 48) allow 5 blocks of 256 an SM, 62.5% of
 * warps, and the driver sizes the SM's shared memory for those 5 tiles of 33 KB (ncu reports
 * both limits at 5).
 * Measured (H100, 2026-11-27, the README's table, v7 by then in blocks of 1024): 1.0923 ms
 * [1.0889 - 1.0941] [b4 epilogue_fwdbwd median_ms min_ms max_ms] against b2's 1.1797
 * [b2 epilogue_fwdbwd] in the same run, 7% less time [b4 vs b2 epilogue_fwdbwd]; 96.7%
 * [b4 epilogue_fwdbwd pct_floor] of the 1.056 ms [b4 epilogue_fwdbwd floor_ms] floor at that run's
 * 2983 GB/s [b4 epilogue_fwdbwd ceiling_gbps] ceiling, 0.7% under the target, and 18.5% under
 * [b4 vs compile epilogue_fwdbwd] torch.compile's 1.3395 [compile epilogue_fwdbwd] (recorded in the
 * same lease); first recorded at 1.0818 with v7's blocks of 512 and the earlier timer (cdcc3f1).
 * Less v7's 0.3594 [v7 epilogue_fwd], the backward takes about 0.733 ms for its 2.079 GB: 2836
 * GB/s, 95% of the ceiling, 2% over the predicted 0.717 ms. ncu on each kernel alone (ncu's clocks,
 * this code):
 *                      time      DRAM busy  cycles between   warps active  registers
 *                                           a warp's instr.
 *   b2's kernel      842.9 us    73.0%      28.2             48.3%         64
 *   b4's kernel      716.5 us    85.7%      20.8             60.5%         44
 * Both read 1.07 GB and write 0.99 GB of DRAM: the bytes did not change, the waiting did.
 * How it was found (commit c8c7057, one call, two interleaved rounds, medians of 30): the same
 * kernel with dynamic shared memory (48 registers) took 1.1013 and 1.1021 ms against b2's 1.2030
 * and 1.2024; under ncu it takes the same time as b4's (715.6 us), so the 1.8% between that 1.1013
 * and b4's 1.0812 is not in the kernel alone, and was not traced. The same tile loaded through
 * registers (ld.global, then st.shared; 256 threads, 512 positions) took 1.2102 and 1.2103: staging
 * alone does not help, cp.async does, likely because a thread then holds only the few loads the
 * compiler batches per round and waits a full memory latency per round. Also measured there:
 * 1024-position tiles, 66 KB (1.1003 / 1.0999, inside that form's spread, and they need the
 * shared-memory opt-in); 128 threads a block (1.1096 / 1.1083); 512 threads and 1024 positions
 * without cp.async (1.3177 / 1.3180); v7's forward staged the same way (0.3797 to 0.4142 ms against
 * v7's 0.3695: the forward has no stores to align, and v7 is already at 96.8%). And in b4's own
 * recording call: 6 blocks an SM (__launch_bounds__(256, 6): 40 registers, 4 bytes spilled) 1.1059
 * and 1.1061 against 1.0812 and 1.0812 interleaved: more warps, slower.
 * b4's training step is b3's (own conv forward, dw, dbias; cuDNN's dx) with this backward: 4.776
 * ms [b4 train_step] in the README's table, against b3's 4.866 [b3 train_step].
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
    b4_epilogue_backward_staged<<<grid, B4_BLOCK>>>(r->c, r->g, r->b, r->dc, r->partials,
                                                    r->sh.s, (int)conv_elems(&r->sh));
    sum_segments(r->partials, 1, grid.x * grid.y, 1024, r->db); /* db */
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
