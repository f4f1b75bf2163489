/*
 * v2..v6: the statistics by Harris's reduction progression
 *
 * M. Harris, "Optimizing Parallel Reduction in CUDA" (NVIDIA, 2007), measured here on an H100
 * rather than quoted. Each version is v1 with another statistics kernel (v1-eager.cu's chain
 * around it is unchanged); each kernel sums a = c m and a^2 over a slice and turns the sums into
 * mean = sum / S and var = sum_sq / S - mean^2. m is applied on load.
 *
 * v2..v5: each (n, c) slice of S values is cut into blocks; a block reduces its piece to one
 * partial (sum of a, sum of a^2) in shared memory, and k_stats_finish adds a slice's partials.
 * The kernels differ only in how the block reduces, which is what Harris's kernels 1, 3, 4 and
 * 5 change:
 *   v2 (kernel 1) interleaved addressing: at step s, thread tid adds sh[tid + s] if
 *      tid % (2s) == 0. v1's defect was one thread a slice; now a thread an element, but half
 *      the threads of every warp idle at the first step, three quarters at the second, ...: the
 *      warps stay resident and diverge, and % is slow.
 *   v3 (kernel 3) sequential addressing: at step s the first s threads add sh[tid + s]. Whole
 *      warps retire together; no bank conflicts (consecutive threads, consecutive words).
 *   v4 (kernel 4) first add during load: each thread loads two elements a block apart and adds
 *      them before the tree; half the threads of v3 were idle after the load.
 *   v5 (kernel 5) the last 64 values by warp shuffles (sums.cuh): no __syncthreads once one
 *      warp is left. Harris unrolled it with `volatile` shared memory and implicit warp
 *      synchrony; since Volta (independent thread scheduling) that needs __syncwarp, and
 *      __shfl_down_sync does it in registers.
 * Prediction: the statistics are one read of 103.2 MB (0.035 ms at the ceiling); v2 far above
 * it, each step closer, v4 about halving v3 (half the blocks do the same bytes).
 * Measured, the statistics alone (the stats rows, 103 MB in): v2 0.206 ms [v2 stats], v3 0.197
 * [v3 stats] (4% faster [v3 vs v2 stats]: on the H100 the divergent modulo costs little next to 50
 * blocks a slice and their partials), v4 0.105 [v4 stats] (1.87x [v3/v4 stats]: half the blocks,
 * half the partials), v5 0.0631 [v5 stats] (1.66x [v4/v5 stats]: five fewer barriers a block). Each
 * epilogue (v2..v5) is the statistics plus v1's other kernels, 0.40 ms [v2 epilogue_fwd-stats] of
 * them.
 *
 * v6 (Harris's kernel 7): v5 still runs the shared-memory tree once per 512 values and writes
 * 25 partials a slice for a second kernel. Each thread first reduces many elements in registers
 * (here S / 256, about 12 float4 loads at S = 12600), so the tree runs once per 12600 values
 * and one block per (n, c) needs no partials and no second kernel.
 * Prediction: near the read's 0.035 ms: nothing left but the load and one tree per slice.
 * Measured: 0.0379 ms [v6 stats], 2727 GB/s [v6 stats], 91% of the copy ceiling
 * [v6 stats pct_ceiling]: 33x v1's statistics [v1/v6 stats]. ncu (commit 508c56c): 79.6% of DRAM
 * peak, the warps waiting on their loads (91 cycles of long-scoreboard stall per issued
 * instruction): one 16-byte load in flight per thread, 12 a thread in all.
 *
 * Every one of them computes sum and sum of squares, which cancel when a slice's mean is large
 * against its spread: v7 fixes that. Their variance errs by about 2^-24 (mean^2 + var), not the
 * 2^-24 |mean| std of a stable algorithm (reference.cu derives both): rstd's condition number
 * squared. Their checks are held to that wider bound, which is what their launches declare in
 * r->var_from_squares; with two values a slice, the fewest instance norm allows, close together
 * against their mean, it is wide (the CPU check of two values a slice, problem.cu, shows the
 * gap), and with an offset it says nothing, so the offset cases leave v2..v6 out.
 */
#include "model.h"
#include "sums.cuh"

__device__ static inline float load_scaled(const float *__restrict__ p, int i, int S, float mult)
{
    return i < S ? p[i] * mult : 0.0f;
}

/* v2, v3: block b of slice seg (blockIdx.x = seg bps + b) puts its thread's element of a * m
 * and its square into shared memory; the caller synchronises */
__device__ static inline void load_piece(const float *__restrict__ a, const float *__restrict__ m,
                                         int S, int bps, float *sh_s, float *sh_q)
{
    int seg = blockIdx.x / bps, b = blockIdx.x - seg * bps, tid = threadIdx.x;
    float mult = m ? __ldg(m + seg % C_OUT) : 1.0f;
    float v = load_scaled(a + (size_t)seg * S, b * RED_BLOCK + tid, S, mult);
    sh_s[tid] = v, sh_q[tid] = v * v;
}

/* v2: Harris's kernel 1 */
__global__ void __launch_bounds__(RED_BLOCK)
k_stats_interleaved(const float *__restrict__ a, const float *__restrict__ m,
                    float2 *__restrict__ part, int S, int bps)
{
    __shared__ float sh_s[RED_BLOCK], sh_q[RED_BLOCK];
    int tid = threadIdx.x;
    load_piece(a, m, S, bps, sh_s, sh_q);
    __syncthreads();
    for (int s = 1; s < RED_BLOCK; s *= 2) {
        if (tid % (2 * s) == 0)
            sh_s[tid] += sh_s[tid + s], sh_q[tid] += sh_q[tid + s];
        __syncthreads();
    }
    if (tid == 0)
        part[blockIdx.x] = make_float2(sh_s[0], sh_q[0]);
}

/* v3: Harris's kernel 3, the same but for the loop */
__global__ void __launch_bounds__(RED_BLOCK)
k_stats_sequential(const float *__restrict__ a, const float *__restrict__ m,
                   float2 *__restrict__ part, int S, int bps)
{
    __shared__ float sh_s[RED_BLOCK], sh_q[RED_BLOCK];
    int tid = threadIdx.x;
    load_piece(a, m, S, bps, sh_s, sh_q);
    __syncthreads();
    for (int s = RED_BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s)
            sh_s[tid] += sh_s[tid + s], sh_q[tid] += sh_q[tid + s];
        __syncthreads();
    }
    if (tid == 0)
        part[blockIdx.x] = make_float2(sh_s[0], sh_q[0]);
}

/* v4 and v5 (Harris's kernels 4 and 5): a block covers 2 RED_BLOCK elements; UNROLL_LAST
 * selects v5's warp finish */
template <bool UNROLL_LAST>
__global__ void __launch_bounds__(RED_BLOCK)
k_stats_first_add(const float *__restrict__ a, const float *__restrict__ m,
                  float2 *__restrict__ part, int S, int bps)
{
    __shared__ float sh_s[RED_BLOCK], sh_q[RED_BLOCK];
    int seg = blockIdx.x / bps, b = blockIdx.x - seg * bps, tid = threadIdx.x;
    float mult = m ? __ldg(m + seg % C_OUT) : 1.0f;
    const float *p = a + (size_t)seg * S;
    int i = b * 2 * RED_BLOCK + tid;
    float v0 = load_scaled(p, i, S, mult), v1 = load_scaled(p, i + RED_BLOCK, S, mult);
    sh_s[tid] = v0 + v1, sh_q[tid] = v0 * v0 + v1 * v1;
    __syncthreads();
    for (int s = RED_BLOCK / 2; s > (UNROLL_LAST ? 32 : 0); s >>= 1) {
        if (tid < s)
            sh_s[tid] += sh_s[tid + s], sh_q[tid] += sh_q[tid + s];
        __syncthreads();
    }
    if (UNROLL_LAST) {
        if (tid < 32) {
            float vs = sh_s[tid] + sh_s[tid + 32], vq = sh_q[tid] + sh_q[tid + 32];
            vs = warp_sum(vs), vq = warp_sum(vq);
            if (tid == 0)
                part[blockIdx.x] = make_float2(vs, vq);
        }
    } else if (tid == 0) {
        part[blockIdx.x] = make_float2(sh_s[0], sh_q[0]);
    }
}

/* v2..v5's second kernel: a warp per slice adds its bps partials in a fixed order;
 * var = E[a^2] - mean^2, clipped at 0 (cancellation can make it negative: see v7) */
__global__ void k_stats_finish(const float2 *__restrict__ part, int bps, int segs, int S,
                               float *__restrict__ mean, float *__restrict__ rstd)
{
    int seg = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (seg >= segs)
        return;
    float2 t = warp_sum_partials(part + (size_t)seg * bps, bps);
    float s = t.x, q = t.y;
    if (lane == 0) {
        float mu = s / S, var = fmaxf(q / S - mu * mu, 0.0f);
        mean[seg] = mu, rstd[seg] = rsqrtf(var + (float)IN_EPS);
    }
}

/* v6: Harris's kernel 7, one block a slice */
__global__ void __launch_bounds__(MANY_BLOCK)
k_stats_many(const float *__restrict__ a, const float *__restrict__ m, float *__restrict__ mean,
             float *__restrict__ rstd, int S)
{
    int seg = blockIdx.x;
    float mult = m ? __ldg(m + seg % C_OUT) : 1.0f;
    const float *p = a + (size_t)seg * S;
    float2 acc = make_float2(0.0f, 0.0f);
    if ((S & 3) == 0) { /* every slice starts 16-byte aligned */
        const float4 *p4 = (const float4 *)p;
        for (int j = threadIdx.x; j < S / 4; j += MANY_BLOCK) {
            float4 v = p4[j];
            float x0 = v.x * mult, x1 = v.y * mult, x2 = v.z * mult, x3 = v.w * mult;
            acc.x += (x0 + x1) + (x2 + x3);
            acc.y += (x0 * x0 + x1 * x1) + (x2 * x2 + x3 * x3);
        }
    } else {
        for (int j = threadIdx.x; j < S; j += MANY_BLOCK) {
            float x = p[j] * mult;
            acc.x += x, acc.y += x * x;
        }
    }
    acc = block_sum2(acc);
    if (threadIdx.x == 0) {
        float mu = acc.x / S, var = fmaxf(acc.y / S - mu * mu, 0.0f);
        mean[seg] = mu, rstd[seg] = rsqrtf(var + (float)IN_EPS);
    }
}

/* the finishing kernel of v2..v5: 8 slices (warps) a block */
static void finish(const run_ctx *r, int bps)
{
    int segs = (int)seg_count(&r->sh);
    *r->var_from_squares = 1; /* the check's bound for sum and sum of squares (reference.cu) */
    k_stats_finish<<<ceil_div(segs, 8), 256>>>(r->part2, bps, segs, r->sh.s, r->mean, r->rstd);
}

static void stats_v2(const run_ctx *r, const float *a, const float *m)
{
    int bps = ceil_div(r->sh.s, RED_BLOCK);
    k_stats_interleaved<<<(int)seg_count(&r->sh) * bps, RED_BLOCK>>>(a, m, r->part2, r->sh.s, bps);
    finish(r, bps);
}

static void stats_v3(const run_ctx *r, const float *a, const float *m)
{
    int bps = ceil_div(r->sh.s, RED_BLOCK);
    k_stats_sequential<<<(int)seg_count(&r->sh) * bps, RED_BLOCK>>>(a, m, r->part2, r->sh.s, bps);
    finish(r, bps);
}

static void stats_v4(const run_ctx *r, const float *a, const float *m)
{
    int bps = ceil_div(r->sh.s, 2 * RED_BLOCK);
    k_stats_first_add<false><<<(int)seg_count(&r->sh) * bps, RED_BLOCK>>>(a, m, r->part2, r->sh.s, bps);
    finish(r, bps);
}

static void stats_v5(const run_ctx *r, const float *a, const float *m)
{
    int bps = ceil_div(r->sh.s, 2 * RED_BLOCK);
    k_stats_first_add<true><<<(int)seg_count(&r->sh) * bps, RED_BLOCK>>>(a, m, r->part2, r->sh.s, bps);
    finish(r, bps);
}

void stats_v6(const run_ctx *r, const float *a, const float *m)
{
    *r->var_from_squares = 1;
    k_stats_many<<<(int)seg_count(&r->sh), MANY_BLOCK>>>(a, m, r->mean, r->rstd, r->sh.s);
}

void v2_launch(const run_ctx *r, int scope) { eager_launch(r, scope, stats_v2); }
void v3_launch(const run_ctx *r, int scope) { eager_launch(r, scope, stats_v3); }
void v4_launch(const run_ctx *r, int scope) { eager_launch(r, scope, stats_v4); }
void v5_launch(const run_ctx *r, int scope) { eager_launch(r, scope, stats_v5); }
void v6_launch(const run_ctx *r, int scope) { eager_launch(r, scope, stats_v6); }
