/*
 * v2..v6: the statistics by Harris's reduction progression
 *
 * M. Harris, "Optimizing Parallel Reduction in CUDA" (NVIDIA, 2007), kernels 1, 3, 4, 5 and 7,
 * measured here on an H100 rather than quoted. Each version is v1 with another statistics
 * kernel (01-v1-eager.cu's chain around it is unchanged, 0.40 ms [v2 epilogue_fwd-stats] of
 * the epilogue); each sums a = c m and a^2 over a slice and turns the sums into mean = sum / S
 * and var = sum_sq / S - mean^2, m applied on load. Each kernel below has its own four beats;
 * the prediction they share: the statistics are one read of 103.2 MB, 0.034 ms at the copy
 * ceiling [v1 stats floor_ms], and each step removes a cost that keeps a kernel above it.
 *
 * v2..v5 cut each (n, c) slice of S values into blocks; a block reduces its piece to one partial
 * (sum of a, sum of a^2) in shared memory, and v2_stats_finish adds a slice's partials. They
 * differ only in how the block reduces. v6 gives each slice one block and needs no partials.
 *
 * All compute sum and sum of squares, which cancel when a slice's mean is large against its
 * spread: v7 fixes that. Their variance errs by about 2^-24 (mean^2 + var), not the 2^-24 |mean|
 * std of a stable algorithm (reference.cu derives both): rstd's condition number squared. Their
 * checks are held to that wider bound, which is what their launches declare in
 * r->var_from_squares; with two values a slice, the fewest instance norm allows, close together
 * against their mean, it is wide (the CPU check of two values a slice, problem.cu, shows the gap),
 * and with an offset it says nothing, so the offset cases leave v2..v6 out.
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

/*
 * v2 (Harris's kernel 1): a thread an element, interleaved addressing
 * Defect of v1: one thread a slice, 16 SMs busy, each thread waiting on its own loads.
 * Change: a thread an element. A block of RED_BLOCK threads (50 blocks a slice at S = 12600)
 * puts its values and their squares in shared memory and halves them in a tree: at step s,
 * thread tid adds sh[tid + s] if tid % (2s) == 0, then the block waits at a barrier. Half the
 * threads of every warp idle at the first step, three quarters at the second, ...: the warps
 * stay resident and diverge, and % is slow.
 * Prediction: every SM busy, so far faster than v1, but far above the read's time: a barrier a
 * step, 50 blocks a slice, their partials and a second kernel.
 * Measured: 0.206 ms [v2 stats], 17% of the copy ceiling [v2 stats pct_ceiling], 6.1x v1
 * [v1/v2 stats].
 */
__global__ void __launch_bounds__(RED_BLOCK)
v2_stats_interleaved(const float *__restrict__ a, const float *__restrict__ m,
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

/*
 * v3 (Harris's kernel 3): sequential addressing, the same as v2 but for the loop
 * Defect of v2: divergent warps, and a modulo at every step.
 * Change: at step s the first s threads add sh[tid + s]. Whole warps retire together, and
 * consecutive threads read consecutive words (no bank conflicts).
 * Prediction: fewer instructions a step, but the same barriers, blocks and partials: a small
 * gain if those are the cost.
 * Measured: 0.197 ms [v3 stats], 18% of the copy ceiling [v3 stats pct_ceiling], 4% faster
 * [v3 vs v2 stats]: on the H100 the divergent modulo costs little beside 50 blocks a slice.
 */
__global__ void __launch_bounds__(RED_BLOCK)
v3_stats_sequential(const float *__restrict__ a, const float *__restrict__ m,
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

/*
 * v4 (Harris's kernel 4, UNROLL_LAST false): the first add during the load
 * Defect of v3: half its threads idle from the tree's first step on.
 * Change: each thread loads two elements a block apart and adds them before the tree: a block
 * covers 2 RED_BLOCK elements, so half the blocks and half the partials.
 * Prediction: the same bytes in half the blocks: about half v3's time, if blocks are the cost.
 * Measured: 0.105 ms [v4 stats], 33% of the copy ceiling [v4 stats pct_ceiling], 1.87x v3
 * [v3/v4 stats].
 *
 * v5 (Harris's kernel 5, UNROLL_LAST true): the last warp by shuffles
 * Defect of v4: a block barrier at every step of the tree, even with one warp left.
 * Change: once 64 values are left, warp 0 adds its two and finishes by warp_sum: five
 * __shfl_down_sync steps in registers, no shared memory, no barrier. On the tutorial's learning
 * path sums.cuh, read before v2, is where warp shuffles are taught (v2's finishing kernel
 * already adds partials with them); chapter 4 builds on them. Harris unrolled the last warp with
 * `volatile` shared memory and implicit warp synchrony; since Volta (independent thread
 * scheduling) that needs __syncwarp, and the shuffle does it without.
 * Prediction: six of the tree's eight barriers gone (RED_BLOCK 256), the bytes and blocks of v4.
 * Measured: 0.0631 ms [v5 stats], 55% of the copy ceiling [v5 stats pct_ceiling], 1.66x v4
 * [v4/v5 stats].
 */
template <bool UNROLL_LAST>
__global__ void __launch_bounds__(RED_BLOCK)
v4_stats_first_add(const float *__restrict__ a, const float *__restrict__ m,
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
__global__ void v2_stats_finish(const float2 *__restrict__ part, int bps, int segs, int S,
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

/*
 * v6 (Harris's kernel 7): many elements a thread, one block a slice
 * Defect of v5: the shared-memory tree runs once per 512 values, and a slice's 25 partials need
 * a second kernel.
 * Change: each thread first adds many elements in registers (S / 256 values, about 12 float4
 * loads at S = 12600), so the tree (block_sum2, sums.cuh) runs once a slice, and one block per
 * (n, c) writes mean and rstd itself: no partials, no second kernel.
 * Prediction: near the read's time: nothing left but the loads and one tree a slice.
 * Measured: 0.0379 ms [v6 stats], 91% of the copy ceiling [v6 stats pct_ceiling], 1.67x v5
 * [v5/v6 stats], 33x v1's statistics [v1/v6 stats]. The warps wait on their loads (ncu in
 * LABBOOK.md): one 16-byte load in flight per thread at a time.
 */
__global__ void __launch_bounds__(MANY_BLOCK)
v6_stats_many(const float *__restrict__ a, const float *__restrict__ m, float *__restrict__ mean,
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
    v2_stats_finish<<<ceil_div(segs, 8), 256>>>(r->part2, bps, segs, r->sh.s, r->mean, r->rstd);
}

static void stats_v2(const run_ctx *r, const float *a, const float *m)
{
    int bps = ceil_div(r->sh.s, RED_BLOCK);
    v2_stats_interleaved<<<(int)seg_count(&r->sh) * bps, RED_BLOCK>>>(a, m, r->part2, r->sh.s, bps);
    finish(r, bps);
}

static void stats_v3(const run_ctx *r, const float *a, const float *m)
{
    int bps = ceil_div(r->sh.s, RED_BLOCK);
    v3_stats_sequential<<<(int)seg_count(&r->sh) * bps, RED_BLOCK>>>(a, m, r->part2, r->sh.s, bps);
    finish(r, bps);
}

static void stats_v4(const run_ctx *r, const float *a, const float *m)
{
    int bps = ceil_div(r->sh.s, 2 * RED_BLOCK);
    v4_stats_first_add<false><<<(int)seg_count(&r->sh) * bps, RED_BLOCK>>>(a, m, r->part2, r->sh.s, bps);
    finish(r, bps);
}

static void stats_v5(const run_ctx *r, const float *a, const float *m)
{
    int bps = ceil_div(r->sh.s, 2 * RED_BLOCK);
    v4_stats_first_add<true><<<(int)seg_count(&r->sh) * bps, RED_BLOCK>>>(a, m, r->part2, r->sh.s, bps);
    finish(r, bps);
}

void stats_v6(const run_ctx *r, const float *a, const float *m)
{
    *r->var_from_squares = 1;
    v6_stats_many<<<(int)seg_count(&r->sh), MANY_BLOCK>>>(a, m, r->mean, r->rstd, r->sh.s);
}

void v2_launch(const run_ctx *r, int scope) { eager_launch(r, scope, stats_v2); }
void v3_launch(const run_ctx *r, int scope) { eager_launch(r, scope, stats_v3); }
void v4_launch(const run_ctx *r, int scope) { eager_launch(r, scope, stats_v4); }
void v5_launch(const run_ctx *r, int scope) { eager_launch(r, scope, stats_v5); }
void v6_launch(const run_ctx *r, int scope) { eager_launch(r, scope, stats_v6); }
