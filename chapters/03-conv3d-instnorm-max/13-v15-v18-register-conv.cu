/*
 * v15: v14's conv with its output in registers, x in shared memory, persistent clusters (Hopper)
 *
 * v15 to v18 share one kernel body, compiled once for each STEP (15 .. 18) as v15_register_conv ..
 * v18_register_conv; a step's lines are `#if STEP >= 16` (v16), 17 and 18 regions, so `make diff
 * CH=3 A=v15 B=v16` prints what one step changed.
 *
 * Defect of v14: its gathers of x wait on L1 misses: its two 113 KB slices of conv output fill
 * shared memory and leave about 28 KB of L1 for x (77% hits).
 * Change: the conv's output stays where the mma leaves it, in the accumulators: a warp keeps 7
 * tiles of 16 corners x 16 channels (56 of a thread's 128 registers; one 512-thread block an SM).
 * A corner is a position of the input's index space, od (H W) + oh W + ow; its taps are
 * x[corner + tap offset]. The 12% of corners that are not output positions are computed and
 * dropped, and in exchange a tile's rows stand a fixed 4 corners apart, so the loop addresses x
 * with immediate offsets. Shared memory now holds the block's window of x (its 1792 corners and
 * their taps), so a gather is an LDS; v15_columns deals the taps over the column groups by their
 * offset mod 4, so that most groups' LDS fall in 32 banks. With one block an SM, only 15
 * clusters of 8 fit (a cluster's SMs share a GPC), so the clusters are persistent: each takes
 * samples n, n + 15, ..., and copies the next sample's window (cp.async, two buffers) while it
 * computes this one. The registers alone tied with v14; the persistence carries the gain.
 * Prediction (from a timeline of the non-persistent form): 9 rounds of 15.2 us, about 0.14 ms.
 * Measured: 0.1507 ms [v15 model_fwd], 42% of the floor [v15 model_fwd pct_floor], 1.22x v14
 * [v14/v15 model_fwd]; about 16 us a round. ncu: the first stall is now the tensor pipe itself.
 * LABBOOK.md: the three steps, each timed; tried, 8 tiles a warp in clusters of 7.
 */
/*
 * v16: v15 with the conv on Hopper's warpgroup MMA (wgmma; sm_90a code: H100, H200)
 *
 * Defect of v15: its first stall is the tensor pipe. mma.sync is a warp's 16 x 8 x 8; a tile and
 * step takes six (two channel halves, three products), and the pipe throttles their issue.
 * Change: wgmma.mma_async m64n16k8 (PTX ISA, "Asynchronous Warpgroup Level Matrix
 * Multiply-Accumulate"): a warpgroup, 4 consecutive warps, multiplies 64 x 8 by 8 x 16 in one
 * asynchronous instruction. A comes from registers, each warp its 16 rows in mma.sync's layout,
 * so v15's gathers stay; B from shared memory through a descriptor (v15_smem's layout); the
 * accumulators keep mma.sync's layout, so the statistics and y are unchanged. A tile and step is
 * 3 wgmma committed as one group; A's registers alternate between two buffers, and wait_group 1
 * ensures the group that read a buffer, two tiles back, is done before it is rewritten.
 * Prediction: if the conv's 9.9 us a round were all the tensor pipe's, halving its instructions
 * would take up to 5 us off each of the 9 rounds: about 0.108 ms.
 * Measured: 0.1164 ms [v16 model_fwd], 54% of the floor [v16 model_fwd pct_floor], 1.29x v15
 * [v15/v16 model_fwd]. The wgmma alone gave 5%: with the tensor pipe no longer throttling, the
 * gathers and splits that feed it are the limit. The wgmma is step 1; also, each timed alone
 * (LABBOOK.md): 2. the statistics pushed into the peers' shared memory by st.async, counted on
 * their mbarriers, no cluster barrier a sample (cluster_push, cluster_merge_pushed; 8%); 3. A's
 * values split by truncation (split_trunc: 2 instructions a value, split_fast's 3; 4 to 5%); 4.
 * the window's copies 8 bytes wide and 5. y's maxima by a reduce-scatter over the lanes, 11
 * shuffles where v15 takes 28 (5% the two); 6. most of the window by TMA bulk copies
 * (issue_window_tma; 4%).
 * Tried: x split once into hi and lo windows; per-warp pushes; copies spread over the conv.
 */
/*
 * v17: v16 without clusters: a team of plain blocks a sample, on every SM, the statistics
 * exchanged through L2
 *
 * Defect of v16: a cluster's blocks share a GPC, and the H100's 132 SMs spread unevenly over its
 * GPCs: 15 clusters of 8 fit at once, 12 SMs stay idle, and 128 samples take 9 rounds.
 * Change: the same kernel launched without a cluster: 16 teams of 8 blocks on 128 SMs, team j
 * taking samples j, j + 16, ...: 8 rounds. What the cluster gave now comes another way:
 *   - the exchange: lane 0 of warp w stores its block's triple of channel w as three 8-byte words,
 *     each a float beside a tag (the sample's number plus a base that grows at every launch), and
 *     the team's blocks poll those words until all three carry the tag: the data is its own flag
 *     (NCCL's "LL" protocol). A gpu-scope .relaxed store and load of the same aligned 8 bytes are
 *     performed with single-copy atomicity (PTX ISA, "Memory Consistency Model"), so a word read
 *     with the right tag holds the right value (team_publish, team_merge; a nap between polls);
 *   - that a sample's blocks run at once, without which a block could poll for a team-mate that
 *     waits for its SM: the launch is cooperative (cudaLaunchAttributeCooperative), which fails
 *     rather than start a grid that cannot be resident all at once.
 * Prediction: 8 rounds instead of 9, one round of 12.0 us less: about 0.104 ms, if the exchange
 * through L2 costs what v16's push costs.
 * Measured: 0.1026 ms [v17 model_fwd], 61% of the floor [v17 model_fwd pct_floor], 1.13x v16
 * [v16/v17 model_fwd]; the exchange through L2 costs about 0.6 us a round more than the push.
 * The teams are step 1; also (LABBOOK.md): 2. y with the multiply by m folded into the clamp
 * (lane_max_folded; 1%); 3. tap 80 by FFMA after the conv: k is 10 whole steps, not 11 (2 to 3%).
 * Tried: polling one word, then loading two; one poller a block; polling before the nap.
 */
/*
 * v18: v17 in half blocks: two teams an SM, one half's conv beside the other's statistics,
 * exchange and y
 *
 * Defect of v17: each round, the block's 16 warps finish the conv together, then compute the
 * statistics, exchange them and write y together, about 4 us of 12 in which the SM's tensor
 * cores idle; with one block an SM, no other block has work for them.
 * Change: the block's two halves of 8 warps (two warpgroups) are members of two teams. A warp
 * keeps its 7 tiles, so a half's span is 896 corners (TS = 128) and a sample takes 16 halves:
 * block row j's half 0 is in team 2 j, its half 1 in team 2 j + 1. Each half has its own two
 * window buffers, mbarriers, partials, statistics and barrier (bar.sync 1 + half over its 256
 * threads: named_sync); B, the columns and the corners' table stay the block's. Half 1 starts
 * its first conv when half 0 has finished its own (named barrier 3); from then on the halves
 * run half a round apart, each one's statistics, exchange and y beside the other's conv.
 * Prediction, from builds of v17 that leave warpgroups out of the conv: 8 warps run it at 76% of
 * 16 warps' rate, and the rest of a round takes 4.3 us. In antiphase, half A's 3.8 us of conv
 * runs at 0.76 while B is outside its conv and at 0.5 while both convs run: 0.76 x 4.3 + 0.5
 * (P - 2 x 4.3) = 3.8 gives a period P of 9.7 us against v17's 12.2: about 0.082 ms.
 * Measured: 0.0981 ms [v18 model_fwd], 64% of the floor [v18 model_fwd pct_floor], 1.05x v17
 * [v17/v18 model_fwd], far from the prediction. A timeline: the conv slows beside the other
 * half's statistics, exchange and y (4.5 us alone, 5.5 to 5.7 beside), and a half outside its
 * conv takes 4.9 to 5.2 us where v17's block took 4.1 (more copies a thread, 16 members to wait
 * for instead of 8).
 * Tried (LABBOOK.md): both halves starting together; half 1 after half 0's first exchange.
 */
#ifndef STEP /* the versions' shared part; below it, the body for one STEP */
#include <cuda_pipeline.h>
#include <string.h>

#include "cluster.cuh"
#include "conv.cuh"
#include "model.h"
#include "tf32.cuh"
#include "wgmma.cuh"

#define V15_KSTEPS ((C_IN * KVOL + 7) / 8) /* steps of 8 over the GEMM's k (81 taps): 11 */
#define V15_K (8 * V15_KSTEPS)             /* k padded to whole steps: 88 */
#define V15_GROUPS (V15_K / 4)             /* groups of 4 columns that one LDS reads: 22 */
#define V17_KSTEPS (C_IN * KVOL / 8) /* v17 (step 3): whole steps only, 10; tap 80 by FFMA */
#define V18_WARPS 8 /* v18: the warps of a half block, a member of its team */
#define V18_RANKS 16 /* v18: the most members a team */
#define V15_TILES 7 /* 16-corner tiles a warp holds in registers */
#define V15_SPAN (16 * 16 * V15_TILES) /* corners a block: 16 warps x V15_TILES tiles x 16 */

/* a buffer of the window, floats: its C_IN channels wstride apart, rounded up to a multiple of 4
 * for v16 (WGMMA), whose bulk copies need 16-byte aligned destinations (step 6) */
__host__ __device__ static inline unsigned v15_buffer(unsigned wstride, bool wgmma)
{
    return wgmma ? (C_IN * wstride + 3) & ~3u : C_IN * wstride;
}

/* The GEMM's columns for one shape, computed on the host (v15_columns): column k reads x at
 * off[k] floats from a corner in the block's window (a tap's offset in x plus its channel's
 * place in the window), with the weights of tap[k] (PyTorch's ci * 27 + kd * 9 + kh * 3 + kw;
 * -1: a padding column, weight 0) */
struct v15_cols {
    unsigned off[V15_K];
    signed char tap[V15_K];
};

/* B, split once by each block, the offsets of each step's columns, and the reductions'
 * partials. B's layout is the one wgmma reads (v16; PTX ISA, "Shared Memory Matrix Layout",
 * K-major, no swizzle): step st's 8 x 16 tile is four "core matrices" of 8 channels x 4 columns,
 * 128 contiguous bytes each (channel co's 4 columns in one 16-byte row), those of columns 4 .. 7
 * 128 bytes after those of 0 .. 3 (the descriptor's leading byte offset) and those of channels
 * 8 .. 15 256 bytes after 0 .. 7 (its stride byte offset): word 64 (co / 8) + 32 (k / 4) +
 * 4 (co % 8) + k % 4 of the step. v15's mma.sync lane (g, t) finds its b0 (column t, channel
 * g) at word 4 g + t = lane, b1 (column t + 4) at 32 + lane, and channel 8 + g's 64 words on:
 * four conflict-free LDS a step for b_hi and four for b_lo. */
struct v15_smem {
    uint32_t b_hi[V15_KSTEPS][128];
    uint32_t b_lo[V15_KSTEPS][128]; /* their 3xTF32 remainders */
    uint2 off[V15_KSTEPS][4];       /* step s, t: the offsets of columns 8 s + t and 8 s + t + 4 */
    float b[C_OUT];
    float part[16][C_OUT]; /* warp w's sum for channel co */
    int count[16];         /* warp w's corners that are positions */
    float bmean[C_OUT];    /* the block's mean of channel co */
};

/* the column order: groups of four columns (k = 4 j .. 4 j + 3) are read by one LDS each, lane
 * (g, t) at corner + 4 g + off[4 j + t], so the 32 words fall in 32 banks when the four offsets
 * differ mod 4. The taps are sorted by offset mod 4 and dealt round-robin over the 2 x ksteps
 * groups (v15, v16: 22; v17: 20): a residue class of at most that many taps never lands twice
 * in one group (the KernelBench shape's classes of 27 do: LABBOOK.md). A padding
 * column reads the same word as its group's first column (a broadcast, no conflict). v17 (ksteps
 * 10): taps 0 .. 79 in the steps, tap 80 at k = 80, for the FFMA column (its step 3). */
static void v15_columns(const shape *sh, unsigned wstride, int ksteps, v15_cols *c)
{
    int hw = sh->h * sh->w, next = 0, groups = 2 * ksteps, taps = min(C_IN * KVOL, 8 * ksteps);
    unsigned off[C_IN * KVOL];
    for (int j = 0; j < C_IN * KVOL; j++) {
        int ci = j / KVOL, r = j % KVOL;
        off[j] = ci * wstride + (r / 9) * hw + (r / 3 % 3) * sh->w + r % 3;
    }
    for (int res = 0; res < 4; res++)
        for (int j = 0; j < taps; j++)
            if ((off[j] & 3) == (unsigned)res) {
                int k = 4 * (next % groups) + next / groups;
                c->off[k] = off[j], c->tap[k] = (signed char)j;
                next++;
            }
    for (; next < 8 * ksteps; next++) {
        int k = 4 * (next % groups) + next / groups;
        c->off[k] = c->off[k & ~3], c->tap[k] = -1;
    }
    for (int j = taps; j < C_IN * KVOL; j++) /* v17: the taps past the steps, after them */
        c->off[j] = off[j], c->tap[j] = (signed char)j;
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900 /* the kernel's helpers: Hopper, as it is */
/* a lane's sums over its corners that are positions, per channel (s[h][e]: channel 8 h + 2 t +
 * e): of the values (SQUARES false), or of their squared distances from cm (true) */
template <bool SQUARES>
__device__ static inline void lane_sums(const float acc[V15_TILES][2][4],
                                        const int pos[V15_TILES][2], const float cm[2][2],
                                        float s[2][2])
{
    s[0][0] = s[0][1] = s[1][0] = s[1][1] = 0.0f;
#pragma unroll
    for (int r = 0; r < V15_TILES; r++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (pos[r][e >> 1] >= 0) {
                    float d = acc[r][h][e] - cm[h][e & 1];
                    s[h][e & 1] += SQUARES ? d * d : acc[r][h][e];
                }
}

/* y's candidates at a lane's corner hh (row g or g + 8) of a tile: u = m clamp(c (m rstd) -
 * mean rstd) for its four channels (c = acc[h][2 hh + e]: channel 8 h + 2 t + e), and their
 * maximum, the first on ties */
__device__ static inline float lane_max(const float acc[2][4], int hh, const float k1[2][2],
                                        const float k0[2][2], const float mult[2][2])
{
    float best = 0.0f;
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float u = clampf1(fmaf(acc[h][2 * hh + e], k1[h][e], k0[h][e])) * mult[h][e];
            best = (h == 0 && e == 0) || u > best ? u : best;
        }
    return best;
}

/* v17 (step 2): the same maxima, up to rounding, with the multiply by m folded into the clamp. m
 * clamp(z, -1, 1) = clamp(m z, -|m|, |m|) for either sign of m, and m z = c (m k1) + m k0, so u is
 * an FMA and two FMNMX: a1 = m k1, a0 = m k0, lim = |m|; the maximum over the channels is fmaxf,
 * which gives the same value as the first-on-ties select (a NaN is dropped, where clampf1 keeps it:
 * finite x has none) */
__device__ static inline float lane_max_folded(const float acc[2][4], int hh, const float a1[2][2],
                                               const float a0[2][2], const float lim[2][2])
{
    float best = -INFINITY;
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int e = 0; e < 2; e++)
            best = fmaxf(best, fminf(fmaxf(fmaf(acc[h][2 * hh + e], a1[h][e], a0[h][e]),
                                           -lim[h][e]),
                                     lim[h][e]));
    return best;
}

/* a lane's sums of its four channels (s[h][e]: channel 8 h + 2 t + e) added over the warp's 8
 * lanes of its t (lanes 4, 8, 16 apart), and the warp's 16 sums into part[warp] */
__device__ static inline void warp_part(float (*part)[C_OUT], int warp, float s[2][2])
{
    int lane = threadIdx.x & 31, t = lane & 3;
#pragma unroll
    for (int o = 4; o < 32; o <<= 1)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int e = 0; e < 2; e++)
                s[h][e] += __shfl_xor_sync(FULL, s[h][e], o);
    if (lane < 4)
#pragma unroll
        for (int h = 0; h < 2; h++)
            part[warp][8 * h + 2 * t] = s[h][0], part[warp][8 * h + 2 * t + 1] = s[h][1];
}

/* sample n's window of x for the block whose span starts at corner c_lo, into dst (channel ci
 * at dst + ci * wstride): its first `in` floats a channel, by cp.async of V floats each,
 * committed as one group. v15: V = 1 (wstride is 1 mod 4, so wider copies would be
 * misaligned). v16 (step 4): wstride 2 mod 4, and V = 2 where D H W is even: every channel's
 * source and destination then start 8-byte aligned, and `in` is even (the window's length is,
 * and so is the rest of the channel past an even c_lo). The rest of the window, past the end of x's
 * channel, is the same zeros for every sample: the kernel writes them once into each buffer,
 * and only corners that are not positions read them. */
template <int V, int NT = CL_THREADS>
__device__ static inline void issue_window(float *dst, const float *__restrict__ x, int n, int c_lo,
                                           int in, int dhw, unsigned wstride, unsigned tid)
{
    const float *src = x + ((size_t)n * C_IN * dhw + c_lo);
    for (int ci = 0; ci < C_IN; ci++, src += dhw, dst += wstride) {
        const float *s = src + V * tid, *end = src + in;
        for (float *d = dst + V * tid; s < end; s += V * NT, d += V * NT)
            __pipeline_memcpy_async(d, s, 4 * V);
    }
    __pipeline_commit();
}

#if __CUDA_ARCH__ >= 900
/* v16 (step 6) where D H W is a multiple of 4: channels 0 and 2 of the window (offsets 0 and
 * 2 wstride, both multiples of 4 floats, as is the buffer's stride win) by two bulk copies that
 * thread 0 asks of the TMA unit, completing on bar, their first `in` rounded down to 4 floats;
 * channel 1 (offset 2 mod 4) and the other two's last 0 or 2 floats by 8-byte cp.async,
 * committed as one group. Both are waited for: the group, and bar's phase. */
template <int NT = CL_THREADS>
__device__ static inline void issue_window_tma(float *dst, const float *__restrict__ x, int n,
                                               int c_lo, int in, int dhw, unsigned wstride,
                                               unsigned long long *bar, unsigned tid)
{
    const float *src = x + ((size_t)n * C_IN * dhw + c_lo);
    int body = in & ~3;
    if (tid == 0) {
        fence_proxy_async(); /* after the threads' last reads of this buffer (a barrier before) */
        mbar_expect_tx(bar, 2u * 4u * body);
        if (body) {
            bulk_copy(dst, src, 4u * body, bar);
            bulk_copy(dst + 2 * wstride, src + 2 * (size_t)dhw, 4u * body, bar);
        }
    }
    for (int j = 2 * tid; j < in; j += 2 * NT)
        __pipeline_memcpy_async(dst + wstride + j, src + dhw + j, 8);
    if (tid == 32 && body < in) {
        __pipeline_memcpy_async(dst + body, src + body, 8);
        __pipeline_memcpy_async(dst + 2 * wstride + body, src + 2 * (size_t)dhw + body, 8);
    }
    __pipeline_commit();
}
#endif

/* v15's conv: step st (8 columns) over the warp's 7 tiles, each tile's A gathered (4 LDS) and
 * split, then 6 mma.sync (2 channel halves x 3 products); the next step's offsets read early */
__device__ static inline void conv_mma_sync(float acc[V15_TILES][2][4], const v15_smem &sw,
                                            const float *xb, int lane)
{
    int t = lane & 3;
    uint2 o_next = sw.off[0][t];
#pragma unroll 1
    for (int st = 0; st < V15_KSTEPS; st++) {
        uint2 o = o_next;
        o_next = sw.off[st + 1 < V15_KSTEPS ? st + 1 : st][t];
        uint32_t b_hi[2][2] = {{sw.b_hi[st][lane], sw.b_hi[st][32 + lane]},
                               {sw.b_hi[st][64 + lane], sw.b_hi[st][96 + lane]}};
        uint32_t b_lo[2][2] = {{sw.b_lo[st][lane], sw.b_lo[st][32 + lane]},
                               {sw.b_lo[st][64 + lane], sw.b_lo[st][96 + lane]}};
        const float *px = xb + o.x, *py = xb + o.y;
#pragma unroll
        for (int r = 0; r < V15_TILES; r++) {
            float a[4] = {px[256 * r], px[256 * r + 32], py[256 * r], py[256 * r + 32]};
            uint32_t a_hi[4], a_lo[4];
#pragma unroll
            for (int e = 0; e < 4; e++)
                split_fast(a[e], &a_hi[e], &a_lo[e]);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                mma_tf32(acc[r][h], a_lo, b_hi[h]);
                mma_tf32(acc[r][h], a_hi, b_lo[h]);
                mma_tf32(acc[r][h], a_hi, b_hi[h]);
            }
        }
    }
}
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL) /* v16's helpers: sm_90a code only */
/* The warpgroup MMA's primitives are common/wgmma.cuh's: the descriptor of a B tile (v15_smem's
 * layout: core matrices of columns 4 .. 7 128 bytes after those of 0 .. 3, the leading byte
 * offset; channels 8 .. 15's 256 bytes after 0 .. 7's, the stride byte offset), the RS m64n16k8
 * (A, each warp's 16 rows in mma.sync's layout, from registers; d as two m16n8 accumulators side
 * by side, d[4 h + e]: channels 8 h .. 8 h + 7), commit and wait. */
__device__ static inline uint64_t v16_desc(const void *p) { return wgmma_desc(p, 128, 256); }

/* wgmma.fence: the registers written before it (here A's hi and lo, named so that the compiler
 * computes them first) are what the following wgmma reads */
__device__ static inline void wgmma_fence(uint32_t hi[4], uint32_t lo[4])
{
    asm volatile("wgmma.fence.sync.aligned;"
                 : "+r"(hi[0]), "+r"(hi[1]), "+r"(hi[2]), "+r"(hi[3]), "+r"(lo[0]), "+r"(lo[1]),
                   "+r"(lo[2]), "+r"(lo[3]));
}


/* v16's step st over the warp's 7 tiles: each tile's A gathered as in v15 and split by
 * truncation (step 3), then its three products on the warpgroup's tensor cores, one group a
 * tile. A's registers alternate between two buffers, tile r using (r + P) & 1 (P: the step's
 * parity, so that consecutive tiles, across steps too, use different ones); before a buffer is
 * rewritten, the group that read it two tiles back must be done: wait_group 1 (all but the
 * newest). */
template <int P, int TS>
__device__ static inline void wgmma_step(float acc[V15_TILES][2][4], uint32_t a_hi[2][4],
                                         uint32_t a_lo[2][4], const v15_smem &sw,
                                         const float *xb, int st, int t, uint64_t dhi,
                                         uint64_t dlo)
{
    uint2 o = sw.off[st][t];
    const float *px = xb + o.x, *py = xb + o.y;
    dhi += 32 * st, dlo += 32 * st; /* the step's B: 512 bytes on, 32 in 16-byte units */
#pragma unroll
    for (int r = 0; r < V15_TILES; r++) {
        const int b = (r + P) & 1;
        float a[4] = {px[TS * r], px[TS * r + 32], py[TS * r], py[TS * r + 32]};
        wgmma_wait<1>();
#pragma unroll
        for (int e = 0; e < 4; e++)
            split_trunc(a[e], &a_hi[b][e], &a_lo[b][e]);
        wgmma_fence(a_hi[b], a_lo[b]);
        wgmma_m64n16k8_tf32_rs(&acc[r][0][0], a_lo[b], dhi);
        wgmma_m64n16k8_tf32_rs(&acc[r][0][0], a_hi[b], dlo);
        wgmma_m64n16k8_tf32_rs(&acc[r][0][0], a_hi[b], dhi);
        wgmma_commit();
    }
}

/* v16's conv: the steps two at a time (the buffers' parity), then a wait for the last group.
 * The accumulators are pinned on both sides: the bias written before the first wgmma, and no
 * use moved above the final wait. */
template <int NST, int TS = 256>
__device__ static inline void conv_wgmma(float acc[V15_TILES][2][4], const v15_smem &sw,
                                         const float *xb, int t)
{
    uint64_t dhi = v16_desc(sw.b_hi[0]), dlo = v16_desc(sw.b_lo[0]);
    uint32_t a_hi[2][4], a_lo[2][4];
#pragma unroll
    for (int r = 0; r < V15_TILES; r++)
#pragma unroll
        for (int e = 0; e < 8; e++)
            wgmma_pin((&acc[r][0][0])[e]);
#pragma unroll 1
    for (int st = 0; st < NST; st += 2) {
        wgmma_step<0, TS>(acc, a_hi, a_lo, sw, xb, st, t, dhi, dlo);
        if (st + 1 < NST)
            wgmma_step<1, TS>(acc, a_hi, a_lo, sw, xb, st + 1, t, dhi, dlo);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int r = 0; r < V15_TILES; r++)
#pragma unroll
        for (int e = 0; e < 8; e++)
            wgmma_pin((&acc[r][0][0])[e]);
}
#endif

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
/* v17's exchange through L2 (v17's header). A word: a float in its low half, its tag
 * in the high half, stored and loaded at gpu scope (PTX ISA, "st" and "ld", .relaxed.gpu: the
 * access is coherent across the SMs, in practice served by L2, not the SM's own L1). rec: a
 * team's words for one parity, 3 x CL x C_OUT of them (TEAM_WORD). */
__device__ static inline void st_tagged(unsigned long long *p, float v, unsigned tag)
{
    unsigned long long w = (unsigned long long)tag << 32 | __float_as_uint(v);
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(w) : "memory");
}

__device__ static inline unsigned long long ld_tagged(const unsigned long long *p)
{
    unsigned long long w;
    asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(w) : "l"(p) : "memory");
    return w;
}

/* word k of block r's triple of channel co: word k of a channel's CL blocks side by side, so
 * that each of the polling warp's three loads reads 64 contiguous bytes (block r's 48 words side
 * by side, 8 words 384 bytes apart at each load, measured 3% slower: LABBOOK.md) */
#define TEAM_WORD_R(co, r, k, R) ((3 * (co) + (k)) * (R) + (r)) /* R: CL (v17), 16 (v18) */

/* block `rank`'s triple of channel co (count, mean, M2), in a team of at most R blocks (v17:
 * lane 0 of warp co; v18: lanes 0 and 8 of warp co / 2 of a half) */
template <int R = CL>
__device__ static inline void team_publish(unsigned long long *rec, int rank, int co, float4 v,
                                           unsigned tag)
{
    st_tagged(rec + TEAM_WORD_R(co, rank, 0, R), v.x, tag);
    st_tagged(rec + TEAM_WORD_R(co, rank, 1, R), v.y, tag);
    st_tagged(rec + TEAM_WORD_R(co, rank, 2, R), v.z, tag);
}

/* block r's triple of channel co, polled until its three words carry the tag; the warp until
 * every lane has its own (lanes with `have` set poll nothing) */
__device__ static inline float4 team_poll(const unsigned long long *rec, int word0, int stride,
                                          unsigned tag, bool have)
{
    float4 w = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    while (!__all_sync(FULL, have))
        if (!have) {
            __nanosleep(150);
            unsigned long long a = ld_tagged(rec + word0), b = ld_tagged(rec + word0 + stride),
                               c = ld_tagged(rec + word0 + 2 * stride);
            have = (unsigned)(a >> 32) == tag && (unsigned)(b >> 32) == tag &&
                   (unsigned)(c >> 32) == tag;
            w = make_float4(__uint_as_float((unsigned)a), __uint_as_float((unsigned)b),
                            __uint_as_float((unsigned)c), 0.0f);
        }
    return w;
}

/* every thread of the block: lane r of warp w polls block r's three words of channel w until
 * all carry the tag, the warp until all its lanes < ncl have theirs; then v16's merge. Before
 * each poll a nap (__nanosleep, about 150 ns): without it the run is 4% slower, presumably 2048
 * warps polling back to back loading L2 (naps of 0, 20, 60, 150, 400 and 1000 ns, and polling
 * before the nap, measured: LABBOOK.md). */
__device__ static inline void team_merge(cluster_shared *cs, const unsigned long long *rec,
                                         unsigned tag, int S, int ncl)
{
    int lane = threadIdx.x & 31, co = threadIdx.x >> 5;
    merge_triples(cs, team_poll(rec, TEAM_WORD_R(co, lane, 0, CL), CL, tag, lane >= ncl), S);
}

/* v18: warp w of a half merges channels 2 w (lanes 0 .. 15, lane r polling block r) and
 * 2 w + 1 (lanes 16 .. 31) of a team of up to 16 blocks into C's mean and rstd; the caller's
 * half then meets at its barrier */
__device__ static inline void team_merge16(cluster_shared *C, const unsigned long long *rec,
                                           int warp, unsigned tag, int S, int ncl)
{
    int lane = threadIdx.x & 31, co = 2 * warp + (lane >> 4), r = lane & 15;
    float mean, m2;
    merge_sums<16>(team_poll(rec, TEAM_WORD_R(co, r, 0, 16), 16, tag, r >= ncl), &mean, &m2);
    if (r == 0)
        C->mean[co] = mean, C->rstd[co] = rsqrtf(m2 / S + (float)IN_EPS);
}
#endif

/* v18: a named barrier (PTX ISA, "bar.sync"): the `count` threads that reach barrier `id` wait
 * for one another; bar.arrive counts a thread in without waiting. Ids 1 and 2: each half's own
 * barrier, 256 threads; id 3: the halves' one meeting at the start (512). __syncthreads is id 0. */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
__device__ static inline void named_sync(int id, int count)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
__device__ static inline void named_arrive(int id, int count)
{
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}
#endif

/* The steps: the body below, once for each (the file includes itself). The kernel and launcher
 * of step N are vN_register_conv and vN_launch (VNAME). */
#define VCAT_(a, b, c) a##b##c
#define VCAT(a, b, c) VCAT_(a, b, c)
#define VNAME(name) VCAT(v, STEP, _##name) /* v15_register_conv, ... */

/* v17, v18: the next launch's base tag (0: the words' initial tag); one count for both, since
 * they share the words */
static unsigned team_tag0 = 1;

#define STEP 15
#include "13-v15-v18-register-conv.cu"
#undef STEP
#define STEP 16
#include "13-v15-v18-register-conv.cu"
#undef STEP
#define STEP 17
#include "13-v15-v18-register-conv.cu"
#undef STEP
#define STEP 18
#include "13-v15-v18-register-conv.cu"
#undef STEP

#else /* STEP: the kernel and its launcher for one step, `#if STEP >= N` where step N changed */

/* v16's to v18's bodies exist only in sm_90a code; the harness runs them nowhere else
 * (NEEDS_SM90A). v17: xch, the teams' words (2 parities x CL blocks x C_OUT channels x 3 a team;
 * v18: 16 members), tag0, the launch's base tag. */
#if STEP == 15
__global__ void __launch_bounds__(CL_THREADS, 1) v15_register_conv(
#elif STEP == 16
__global__ void __launch_bounds__(CL_THREADS, 1) v16_register_conv(
#elif STEP == 17
__global__ void __launch_bounds__(CL_THREADS, 1) v17_register_conv(
#else
__global__ void __launch_bounds__(CL_THREADS, 1) v18_register_conv(
#endif
    const float *__restrict__ x, const float *__restrict__ weight, const float *__restrict__ bias,
    const float *__restrict__ m, float *__restrict__ y, float *__restrict__ mean,
    float *__restrict__ rstd, const shape sh, const __grid_constant__ v15_cols cols,
    unsigned wstride, unsigned long long *__restrict__ xch, unsigned tag0)
{
#if __CUDA_ARCH__ >= 900
#if STEP >= 16 && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    return;
#endif
    extern __shared__ __align__(16) float xs[]; /* two windows of x, then ptab (v16: bulk copies) */
    __shared__ cluster_shared cs;
    __shared__ __align__(128) v15_smem sw;
#if STEP >= 18
    /* the second half's statistics, and both halves' partials, counts and means */
    __shared__ cluster_shared cs1[1];
    __shared__ float part18[2][V18_WARPS][C_OUT];
    __shared__ int count18[2][V18_WARPS];
    __shared__ float bmean18[2][C_OUT];
#endif
#if STEP == 16
    /* the pushed triples, by parity and rank */
    __shared__ __align__(16) float4 pushed[2 * CL * C_OUT];
    __shared__ unsigned long long pushed_bar[2];
#endif
#if STEP >= 18
    __shared__ unsigned long long win_bar[4]; /* the bulk copies, one a buffer */
#elif STEP >= 16
    __shared__ unsigned long long win_bar[2]; /* the bulk copies, one a buffer */
#endif
#if STEP >= 17
    __shared__ float wcol[C_OUT]; /* step 3: tap 80's weights */
    constexpr int NST = V17_KSTEPS; /* the conv's steps of 8 columns */
#else
    constexpr int NST = V15_KSTEPS; /* the conv's steps of 8 columns */
#endif
#if STEP >= 18
    /* a member of a team is half the block, NW warps; its tiles TS corners apart */
    constexpr int NW = V18_WARPS, NT = 32 * NW, TS = 16 * NW;
#else
    constexpr int NW = 16, NT = 32 * NW, TS = 16 * NW;
#endif
    cg::cluster_group cluster = cg::this_cluster();
    const int span = TS * V15_TILES;
#if STEP >= 18
    const int hx = (int)threadIdx.x / NT; /* the half */
    const unsigned tid = threadIdx.x % NT;
    cluster_shared &C = hx ? cs1[0] : cs;
    int *count = count18[hx]; /* the member's count of positions a warp */
#else
    const int hx = 0;
    const unsigned tid = threadIdx.x;
    cluster_shared &C = cs;
    int *count = sw.count; /* the block's count of positions a warp */
#endif
#if STEP >= 17
    int rank = (int)blockIdx.x;
    int ncl = (int)gridDim.x;
#else
    int rank = (int)cluster.block_rank();
    int ncl = (int)cluster.num_blocks();
#endif
    int warp = tid >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int hw = sh.h * sh.w, dhw = sh.d * hw, c_lo = rank * span;
#if STEP >= 16
    int win = (int)v15_buffer(wstride, true);
    const bool tma = (dhw & 3) == 0; /* the window by bulk copies (step 6) */
#else
    int win = (int)v15_buffer(wstride, false);
#endif
    int len = span + 2 * hw + 2 * sh.w + 2; /* the window: the span's corners and their taps */
    int in = min(len, dhw - c_lo);          /* of which inside x's channel */
    float *xh = xs + 2 * hx * win;          /* the member's two buffers */
#if STEP >= 18
    unsigned long long *wbar = win_bar + 2 * hx;
    int *ptab = (int *)(xs + 4 * win); /* corner i of the span: its position in y, or -1 (both
                                        * halves' span) */
    /* team 2 blockIdx.y + hx, of 2 gridDim.y, takes samples team, team + teams, ... */
    const int team = 2 * (int)blockIdx.y + hx;
    const int teams = 2 * (int)gridDim.y;
#else
#if STEP >= 16
    unsigned long long *wbar = win_bar;
#endif
    int *ptab = (int *)(xs + 2 * win); /* corner i of the span: its position in y, or -1 */
    const int team = (int)blockIdx.y;
    const int teams = (int)gridDim.y;
#endif

    /* 1. the first sample's window; while it lands, the zeros past x's end (both buffers), B
     * split from the weights, the columns' offsets, and the corners' positions, for every
     * sample */
#if STEP >= 16
    if (tma) { /* the barriers first, seen by every thread before any use (racecheck) */
        if (threadIdx.x == 0) {
            mbar_init(&win_bar[0]), mbar_init(&win_bar[1]);
#if STEP >= 18
            mbar_init(&win_bar[2]), mbar_init(&win_bar[3]);
#endif
            mbar_init_fence();
        }
        __syncthreads();
    }
#endif
#if STEP >= 18
    if (team < sh.n) { /* (a half may have no sample in a tiny batch) */
#endif
#if STEP >= 16
        if (tma)
            issue_window_tma<NT>(xh, x, team, c_lo, in, dhw, wstride, &wbar[0], tid);
        else if ((dhw & 1) == 0)
            issue_window<2, NT>(xh, x, team, c_lo, in, dhw, wstride, tid);
        else
#endif
            issue_window<1, NT>(xh, x, team, c_lo, in, dhw, wstride, tid);
#if STEP >= 18
    }
    for (int i = threadIdx.x; i < 4 * C_IN * (len - in); i += CL_THREADS) {
#else
    for (int i = threadIdx.x; i < 2 * C_IN * (len - in); i += CL_THREADS) {
#endif
        int w = i / (len - in); /* window w: buffer w / C_IN, channel w % C_IN */
#if STEP >= 16
        int at = (w / C_IN) * win + (w % C_IN) * wstride;
#else
        int at = w * wstride;
#endif
        xs[at + in + (i - w * (len - in))] = 0.0f;
    }
    for (int i = threadIdx.x; i < NST * 128; i += CL_THREADS) {
        int st = i >> 7, w = i & 127; /* word w of step st: channel co, column k (v15_smem) */
        int co = 8 * (w >> 6) + ((w >> 2) & 7), k = 8 * st + 4 * ((w >> 5) & 1) + (w & 3);
        int tap = cols.tap[k];
        float v = tap >= 0 ? __ldg(weight + co * C_IN * KVOL + tap) : 0.0f;
        split_tf32(v, &sw.b_hi[st][w], &sw.b_lo[st][w]);
    }
    for (int k = threadIdx.x; k < 8 * NST; k += CL_THREADS)
        ((unsigned *)&sw.off[k / 8][k % 4])[(k % 8) / 4] = cols.off[k];
    if (threadIdx.x < C_OUT)
        sw.b[threadIdx.x] = __ldg(bias + threadIdx.x), cs.m[threadIdx.x] = __ldg(m + threadIdx.x);
#if STEP >= 18
    if (threadIdx.x < C_OUT)
        cs1[0].m[threadIdx.x] = __ldg(m + threadIdx.x);
#endif
#if STEP >= 17
    if (threadIdx.x < C_OUT) /* step 3: the weights of the tap past the steps */
        wcol[threadIdx.x] = __ldg(weight + threadIdx.x * C_IN * KVOL + cols.tap[8 * NST]);
#endif
    {
        unsigned mw = 0xffffffffu / (unsigned)sh.w, mh = 0xffffffffu / (unsigned)sh.h;
        for (int i = threadIdx.x; i < span; i += CL_THREADS) {
            unsigned c = c_lo + i, q = fast_div(c, sh.w, mw), od = fast_div(q, sh.h, mh);
            unsigned oh = q - od * sh.h, ow = c - q * sh.w;
            int ok = od < (unsigned)sh.od && oh < (unsigned)sh.oh && ow < (unsigned)sh.ow;
            ptab[i] = ok ? (int)((od * sh.oh + oh) * sh.ow + ow) : -1;
        }
    }
#if STEP >= 16
    /* the wgmma reads B through the async proxy: order these generic stores before it */
    fence_proxy_async(); /* hopper.cuh */
#endif
    __syncthreads();

    /* the lane's corners. Warp w's tile r is the corners w0 + 256 r + 4 i, i = 0 .. 15 (row i of
     * the tile), w0 = 64 (w / 4) + w % 4: warps 4 q .. 4 q + 3 interleave over corners 64 q ..
     * 64 q + 63, the 16 warps cover 256, so tile r adds 256 r. Lane (g, t) holds rows g and
     * g + 8: base = w0 + 4 g, and row g + 8 is base + 32. (For v16, warps 4 q .. 4 q + 3 are a
     * warpgroup, and warp 4 q + j holds rows 16 j .. 16 j + 15 of its 64-row tiles: which
     * corners those rows are is the warp's own choice, since it supplies their A.) The block's
     * count of positions, bc, is the same for every sample. */
    int base = 64 * (warp >> 2) + (warp & 3) + 4 * g, pos[V15_TILES][2], cnt = 0;
#pragma unroll
    for (int r = 0; r < V15_TILES; r++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++)
            pos[r][hh] = ptab[base + TS * r + 32 * hh], cnt += pos[r][hh] >= 0;
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) /* over g: the 4 lanes of one g hold the same corners */
        cnt += __shfl_xor_sync(FULL, cnt, o);
    if (lane == 0)
        count[warp] = cnt;
#if STEP == 16
    if (threadIdx.x == 0)
        mbar_init(&pushed_bar[0]), mbar_init(&pushed_bar[1]), mbar_init_fence();
    cluster.sync(); /* it pushes into its peers' shared memory: they must have started */
#else
    __syncthreads();
#endif
    int bc = lane < NW ? count[lane] : 0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) /* every lane gets the sum */
        bc += __shfl_xor_sync(FULL, bc, o);
#if STEP >= 18
    /* the second half starts its first conv when the first half has finished its own */
    if (hx == 0 && team >= sh.n)
        named_arrive(3, 2 * NT);
    if (hx == 1)
        named_sync(3, 2 * NT);
#endif

    int it = 0;
    for (int n = team; n < sh.n; n += teams, it++) {
        const float *xw = xh + (it & 1) * win;
        __pipeline_wait_prior(0); /* this sample's window has landed (each thread its own) */
#if STEP >= 16
        if (tma)
            mbar_wait(&wbar[it & 1], (it >> 1) & 1);
#endif
#if STEP >= 18
        named_sync(1 + hx, NT); /* (the half's), and every warp is done with the last one */
#else
        __syncthreads(); /* (everyone's), and every warp is done with the last one */
#endif
        if (n + teams < sh.n) { /* the next sample's window, while this one computes */
            float *nd = xh + ((it + 1) & 1) * win;
#if STEP >= 16
            if (tma)
                issue_window_tma<NT>(nd, x, n + teams, c_lo, in, dhw, wstride,
                                     &wbar[(it + 1) & 1], tid);
            else if ((dhw & 1) == 0)
                issue_window<2, NT>(nd, x, n + teams, c_lo, in, dhw, wstride, tid);
            else
#endif
                issue_window<1, NT>(nd, x, n + teams, c_lo, in, dhw, wstride, tid);
        }

        /* 2. the conv, from the bias */
        float acc[V15_TILES][2][4];
#pragma unroll
        for (int r = 0; r < V15_TILES; r++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                acc[r][h][0] = acc[r][h][2] = sw.b[8 * h + 2 * t],
                acc[r][h][1] = acc[r][h][3] = sw.b[8 * h + 2 * t + 1];
#if STEP >= 16 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
        conv_wgmma<NST, TS>(acc, sw, xw + base, t);
#else
        conv_mma_sync(acc, sw, xw + base, lane);
#endif
#if STEP >= 17
        { /* step 3: tap 80, the column past the steps, by FFMA in fp32 */
            const float *xc = xw + base + cols.off[8 * NST];
            float wc[2][2] = {{wcol[2 * t], wcol[2 * t + 1]}, {wcol[8 + 2 * t], wcol[9 + 2 * t]}};
#pragma unroll
            for (int r = 0; r < V15_TILES; r++)
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    float xv = xc[TS * r + 32 * hh];
#pragma unroll
                    for (int h = 0; h < 2; h++)
#pragma unroll
                        for (int e = 0; e < 2; e++)
                            acc[r][h][2 * hh + e] = fmaf(xv, wc[h][e], acc[r][h][2 * hh + e]);
                }
        }
#endif
#if STEP >= 18
        if (hx == 0 && it == 0) /* the second half may start its conv */
            named_arrive(3, 2 * NT);
#endif

        /* 3. the block's mean of each channel's conv, then its centred squares: the values are
         * in registers, so the second pass costs no memory. Lane (g, t) holds channels 2 t,
         * 2 t + 1 (h = 0) and 8 + 2 t, 9 + 2 t (h = 1); lanes of one t sum over g by shuffles.
         * a = c m has mean m mean(c) and M2 m^2 M2(c). */
        float s[2][2], zero[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}}, bm, bq;
        lane_sums<false>(acc, pos, zero, s);
#if STEP >= 18
        {
            /* warp w of a half reduces channels 2 w (lanes 0 .. 7, lane j warp j's partial) and
             * 2 w + 1 (lanes 8 .. 15); the same steps on the half's barrier */
            int co = 2 * warp + ((lane >> 3) & 1);
            warp_part(part18[hx], warp, s);
            named_sync(1 + hx, NT);
            float bs = lane < 16 ? part18[hx][lane & 7][co] : 0.0f;
#pragma unroll
            for (int o = 4; o > 0; o >>= 1)
                bs += __shfl_xor_sync(FULL, bs, o);
            bm = bc > 0 ? bs / bc : 0.0f;
            if ((lane & 23) == 0) /* lanes 0 and 8 */
                bmean18[hx][co] = bm;
            named_sync(1 + hx, NT);
            float cm[2][2] = {{bmean18[hx][2 * t], bmean18[hx][2 * t + 1]},
                              {bmean18[hx][8 + 2 * t], bmean18[hx][9 + 2 * t]}};
            lane_sums<true>(acc, pos, cm, s);
            warp_part(part18[hx], warp, s);
            named_sync(1 + hx, NT);
            bq = lane < 16 ? part18[hx][lane & 7][co] : 0.0f;
#pragma unroll
            for (int o = 4; o > 0; o >>= 1)
                bq += __shfl_xor_sync(FULL, bq, o);
        }
#else
        {
            warp_part(sw.part, warp, s);
            __syncthreads();
            /* warp w: channel w's block sum */
            float bs = __shfl_sync(FULL, warp_sum(lane < 16 ? sw.part[lane][warp] : 0.0f), 0);
            bm = bc > 0 ? bs / bc : 0.0f; /* every lane alike: no shuffle below a branch */
            if (lane == 0)
                sw.bmean[warp] = bm;
            __syncthreads();
            float cm[2][2] = {{sw.bmean[2 * t], sw.bmean[2 * t + 1]},
                              {sw.bmean[8 + 2 * t], sw.bmean[9 + 2 * t]}};
            lane_sums<true>(acc, pos, cm, s);
            warp_part(sw.part, warp, s); /* every warp read sw.part before the barrier above */
            __syncthreads();
            bq = warp_sum(lane < 16 ? sw.part[lane][warp] : 0.0f);
        }
#endif

        /* 4. the exchange (the triples alternate between samples by parity), then y: u = m
         * clamp(c m rstd - mean rstd), the max of the lane's four channels, then over the
         * group's four lanes by shuffles */
#if STEP >= 18
        { /* teams of up to 16, each warp two channels */
            int co = 2 * warp + ((lane >> 3) & 1);
            float mc = C.m[co];
            unsigned long long *rec = xch + (size_t)(2 * team + (it & 1)) * 16 * C_OUT * 3;
            if ((lane & 23) == 0) /* lanes 0 and 8 */
                team_publish<16>(rec, rank, co,
                                 make_float4((float)bc, bm * mc, bq * mc * mc, 0.0f), tag0 + n);
            team_merge16(&C, rec, warp, tag0 + n, sh.s, ncl);
            named_sync(1 + hx, NT);
        }
#elif STEP >= 17
        { /* through L2: publish the block's triple of channel w, poll the team's */
            float mc = cs.m[warp];
            unsigned long long *rec = xch + (size_t)(2 * blockIdx.y + (it & 1)) * CL * C_OUT * 3;
            if (lane == 0)
                team_publish(rec, rank, warp,
                             make_float4((float)bc, bm * mc, bq * mc * mc, 0.0f), tag0 + n);
            team_merge(&cs, rec, tag0 + n, sh.s, ncl);
        }
#elif STEP >= 16
        { /* send the block's triple of channel w to every peer by st.async, wait on the own
           * mbarrier for theirs (cluster.cuh) */
            float mc = cs.m[warp];
            float4 w = make_float4((float)bc, bm * mc, __shfl_sync(FULL, bq, 0) * mc * mc, 0.0f);
            float4 *in = pushed + (it & 1) * CL * C_OUT;
            if (lane < ncl)
                cluster_push(in, rank * C_OUT + warp, w, &pushed_bar[it & 1], lane, rank);
            cluster_merge_pushed(&cs, in, &pushed_bar[it & 1], (it >> 1) & 1, sh.s, ncl);
        }
#else
        { /* publish the block's triple of channel w, pull the others' after a cluster barrier */
            if (lane == 0) {
                float mc = cs.m[warp];
                welford w = {bc, bm * mc, bq * mc * mc};
                cs.wf[it & 1][warp] = w;
            }
            cluster_merge(&cs, sh.s, it & 1, ncl);
        }
#endif
        float k1[2][2], k0[2][2], mult[2][2];
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int co = 8 * h + 2 * t + e;
                mult[h][e] = C.m[co], k1[h][e] = C.m[co] * C.rstd[co],
                k0[h][e] = -C.mean[co] * C.rstd[co];
#if STEP >= 17
                /* step 2: lane_max_folded's a1, a0 and lim */
                k1[h][e] *= mult[h][e], k0[h][e] *= mult[h][e], mult[h][e] = fabsf(mult[h][e]);
#endif
            }
        float *yn = y + (size_t)n * sh.s;
#if STEP >= 16
        {
            /* step 5: the lane's 14 maxima of its 4 channels, items q = 2 r + hh, then a
             * reduce-scatter over the group's 4 lanes: 7 + 4 shuffles where v15 takes 28, and
             * lane t stores items t, 4 + t, 8 + t and (lanes 0, 1) 12 + t */
            static_assert(V15_TILES % 2 == 1, "the reduce-scatter takes an odd count of tiles");
            float v[2 * V15_TILES];
#pragma unroll
            for (int r = 0; r < V15_TILES; r++)
#pragma unroll
                for (int hh = 0; hh < 2; hh++)
#if STEP >= 17
                    v[2 * r + hh] = lane_max_folded(acc[r], hh, k1, k0, mult);
#else
                    v[2 * r + hh] = lane_max(acc[r], hh, k1, k0, mult);
#endif
            /* lanes t and t ^ 1: each keeps one item of a pair and sends the other, so w[i] is
             * item 2 i + (t & 1) over both; then lanes t and t ^ 2 the same over w's pairs, so
             * z is item 4 j + t over all four (fmaxf drops a NaN, torch.max keeps it; finite x
             * has none) */
            int b0 = t & 1, b1 = t >> 1;
            float w[V15_TILES];
#pragma unroll
            for (int i = 0; i < V15_TILES; i++) {
                float send = b0 ? v[2 * i] : v[2 * i + 1], keep = b0 ? v[2 * i + 1] : v[2 * i];
                w[i] = fmaxf(keep, __shfl_xor_sync(FULL, send, 1));
            }
#pragma unroll
            for (int j = 0; j < V15_TILES / 2; j++) {
                float send = b1 ? w[2 * j] : w[2 * j + 1], keep = b1 ? w[2 * j + 1] : w[2 * j];
                float z = fmaxf(keep, __shfl_xor_sync(FULL, send, 2));
                int p = ptab[base + TS * (2 * j + b1) + 32 * b0]; /* item 4 j + t's corner */
                if (p >= 0)
                    yn[p] = z;
            }
            float z = fmaxf(w[V15_TILES - 1], __shfl_xor_sync(FULL, w[V15_TILES - 1], 2));
            int p = ptab[base + TS * (V15_TILES - 1) + 32 * b0]; /* the last pair's item */
            if (b1 == 0 && p >= 0)
                yn[p] = z;
        }
#else
#pragma unroll
        for (int r = 0; r < V15_TILES; r++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                float best = lane_max(acc[r], hh, k1, k0, mult);
                /* fmaxf across lanes drops a NaN (torch.max keeps it); finite x has none */
                best = fmaxf(best, __shfl_xor_sync(FULL, best, 1));
                best = fmaxf(best, __shfl_xor_sync(FULL, best, 2));
                if (t == 0 && pos[r][hh] >= 0)
                    yn[pos[r][hh]] = best;
            }
#endif
        if (rank == 0 && tid < C_OUT)
            mean[n * C_OUT + tid] = C.mean[tid], rstd[n * C_OUT + tid] = C.rstd[tid];
    }
#if STEP < 17
    cluster.sync(); /* no block may exit while another still reads its partials (v15), nor while
                     * its own st.async stores may still be on their way to a peer (v16) */
#endif
#endif
}

/* persistent clusters, as many as fit at once, each taking samples blockIdx.y, + gridDim.y, ...;
 * a cluster has as many blocks as a sample's corners need (8 at the KernelBench shape). v17: the
 * same grid without the cluster, as many teams as the occupancy API says fit at once (one block
 * an SM: 16 teams of 8 on 132 SMs), launched cooperatively. v14 where a sample needs more than
 * CL blocks, the two windows do not fit shared memory, or no cluster (no team) fits the GPU.
 * wstride: the window's length rounded up to 1 mod 4 (v15), so that channel ci's offsets shift
 * by ci mod 4 (at 0 mod 4, the KernelBench shape's offsets fall in three classes of 27 and 15 of
 * the 22 column groups conflict; at 1 mod 4, 5 do), or to 2 mod 4 (v16's steps 4 and 6: 6 groups
 * conflict, the window's copies can be 8 bytes wide, and channels 0 and 2 start 16-byte aligned
 * for bulk copies; v17's 20 groups of 80 taps: 11 conflict, its step 3). v18: the same grid and
 * launch as v17's with members of 896 corners, up to 16 a team, a row of blocks two teams, as
 * many rows as fit but at most sm_count / 4 (r->xch holds sm_count x 2 CL teams' words, 2 x 16 a
 * v18 row). The columns and the clusters that fit are cached by shape (the harness runs on one
 * device). */
void VNAME(launch)(const run_ctx *r, int scope)
{
    const shape *sh = &r->sh;
#if STEP >= 18
    const int span = 16 * V18_WARPS * V15_TILES;
#else
    const int span = V15_SPAN;
#endif
    int hw = sh->h * sh->w, ncl = ceil_div(sh->od * hw, span);
    unsigned len = span + 2 * hw + 2 * sh->w + 2;
#if STEP >= 16
    unsigned wstride = len + ((2u - len) & 3u);
#else
    unsigned wstride = len + ((1u - len) & 3u);
#endif
#if STEP >= 18
    size_t smem = 16 * (size_t)v15_buffer(wstride, true) + 4 * (size_t)span;
    if (ncl > V18_RANKS || smem > r->smem_optin) {
#elif STEP >= 16
    size_t smem = 8 * (size_t)v15_buffer(wstride, true) + 4 * (size_t)span;
    if (ncl > CL || smem > r->smem_optin) {
#else
    size_t smem = 8 * (size_t)v15_buffer(wstride, false) + 4 * (size_t)span;
    if (ncl > CL || smem > r->smem_optin) {
#endif
        v14_launch(r, scope);
        return;
    }
    static int opted;   /* the kernel's shared-memory opt-in is set (cluster_launch_make) */
    static shape last;  /* the shape of the cache below */
    static int resident; /* clusters (v17: teams) that fit at once */
    static v15_cols cols;
    auto kernel = VNAME(register_conv);
    cluster_launch L;
    cluster_launch_make(&L, (const void *)kernel, &opted, r->smem_optin, ncl, dim3(ncl, sh->n),
                        CL_THREADS, smem);
    L.cfg.stream = r->stream;
#if STEP >= 17
    /* the same launch, cooperative instead of clustered */
    L.attr.id = cudaLaunchAttributeCooperative, L.attr.val.cooperative = 1;
#endif
    if (resident == 0 || memcmp(&last, sh, sizeof last) != 0) {
#if STEP >= 17
        int per_sm = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, CL_THREADS,
                                                                 smem));
        resident = per_sm * r->sm_count / ncl;
        if (resident > r->sm_count) /* r->xch holds sm_count teams' words */
            resident = r->sm_count;
#if STEP >= 18
        if (resident > r->sm_count * CL / (2 * V18_RANKS)) /* 2 teams a row of twice as */
            resident = r->sm_count * CL / (2 * V18_RANKS); /* many words */
#endif
#else
        resident = resident_clusters(&L, (const void *)kernel);
#endif
        last = *sh;
#if STEP >= 17
        v15_columns(sh, wstride, V17_KSTEPS, &cols);
#else
        v15_columns(sh, wstride, V15_KSTEPS, &cols);
#endif
    }
    if (resident == 0) {
        v14_launch(r, scope);
        return;
    }
#if STEP >= 18
    int rows = (sh->n + 1) / 2; /* a row of blocks is two teams */
#else
    int rows = sh->n;
#endif
    L.cfg.gridDim = dim3(ncl, resident < rows ? resident : rows);
    CUDA_CHECK(cudaLaunchKernelEx(&L.cfg, kernel, r->x, r->weight, r->bias, r->m, r->y, r->mean,
                                  r->rstd, r->sh, cols, wstride, r->xch, team_tag0));
#if STEP >= 17
    team_tag0 += (unsigned)sh->n;
#endif
}
#endif /* STEP */
