/*
 * b4: the argmax saved by the forward, the backward a stream (Hopper: its forward is v10's)
 *
 * Defect of b3: its backward holds a sample's c on chip, as v10 does, and inherits v10's
 * pattern: DRAM half busy (50% under ncu), because nothing can be written until the two sums per
 * (n, c) are known, and the sums need every channel's c at every position: the channel max
 * decides which channel's xh a position's gradient reaches (dxh is g m at the winner, zero at
 * the other 15), so b3 recomputes the argmax from c before it sums. Its backward takes about
 * 0.121 ms (b3's 0.1857 [b3 epilogue_fwdbwd] less v10's 0.0645 [v10 epilogue_fwd]) against a 0.071
 * ms floor.
 * Change: the forward already knows each position's winner. v10_saving (20-v10-cluster.cu) writes
 * it, one byte a position: the channel in bits 0 to 3, and WIN_INSIDE (bit 7, model.h) where
 * the winner's xh is inside the clamp, so that its gradient passes (PyTorch's max saves its
 * indices for the same reason, as b1 does, in an int). Then the backward needs c only where dc
 * is written:
 *   1. k_winner_sums: the sums per (n, c), from the winner bytes, g and y alone (14.5 MB, not
 *      c's 103 MB). Where channel c wins inside the clamp, dxh = g m_c and dxh xh = g m_c xh =
 *      g y (y = m_c xh there), so sum dxh = m_c sum g and sum dxh xh = sum g y over the
 *      positions c wins; a partial per (n, block, c), no atomics. The products round
 *      differently from b3's, so the results agree with b3's within the tests' tolerances, not
 *      bit for bit.
 *   2. k_stream_dc: with a = c m and da = dL/da, da = rstd (dxh - mean(dxh) - xh mean(dxh xh))
 *      and dc = m da at every element, each block adding its sample's partials in order first.
 *      A thread takes V = 4 positions (a float4) of all 16 channels: the winner bytes and g
 *      once, then the rows' loads, B4_H = 8 in flight at a time, then their stores. c and dc
 *      stream through, with no cluster and no exchange: the block's one barrier (for the
 *      per-(n, c) constants) comes after its first eight rows' loads are issued, so they stay
 *      in flight across it. m is used twice in the model, so dm = sum c da (the first use)
 *      + sum at the winner of g clamp(xh) (the second), both summed on the way, a partial per
 *      (n, block, c), added in order by k_segment_sums (common/reduce.cuh).
 * Bytes at the KernelBench shape (128 x 3 x 16 x 32 x 32: N S = 1,612,800 positions, c 103.2
 * MB): the forward writes 1.6 MB more; the sums read the winner bytes, g and y (1.6 + 6.45 +
 * 6.45 = 14.5 MB); the stream reads c, g and the winners and writes dc (103.2 + 6.45 + 1.6 +
 * 103.2 = 214.5 MB). 340.3 MB in all, 5.5% over the 322.6 MB floor (c read by the forward and
 * by the backward, dc written, y written, g read: model.h), but every byte of the backward moves
 * in a pass with no on-chip phase to wait for.
 * Prediction: the stream is a copy with arithmetic, and a copy runs at the copy ceiling (3000
 * GB/s here) by definition; allowing 10% for its start and tail, 214.5 MB take 0.079 ms, the
 * sums' 14.5 MB 0.005 ms at the ceiling; with v10's 0.068 ms forward (its row then, with the old
 * flush) and the 0.0005 of the bytes saved, about 0.153 ms against b3's 0.186 then. The 0.15 target
 * leaves the stream 0.15 - 0.068 - 0.0005 - 0.005 = 0.0765 ms: 93% of the ceiling.
 * Measured (H100, one call; each figure a median of 50, three interleaved rounds): 0.1571,
 * 0.1569, 0.1563 ms against b3's 0.1866, 0.1862, 0.1865: 16% less time. Recorded in the same
 * call (20 repetitions, the old flush): 0.1572 ms [0.1547 - 0.1634], 68.7% of the 0.108 ms floor;
 * the 0.15 ms target missed by 4.8%. Its kernels are since shared with b5's as the device functions
 * below (b4's the same instructions, in another order), and a = c m rounded once (model.h's
 * a_rounded). Re-recorded with the clean-L2 timer (data commit 29662c6, the README's table):
 * 0.1489 ms [0.1464 - 0.1521] [b4 epilogue_fwdbwd median_ms min_ms max_ms], 0.7% under the target,
 * some repetitions over it. ncu, each kernel alone at the GPU's own clocks: the
 * stream 72.5 - 72.7 us, 2.95 TB/s over its 214.5 MB: 99% of the copy ceiling (2988 GB/s in the
 * recording run), 7 us under its prediction; b3's backward kernel 111.5 - 112.2 us. The rest
 * missed, from forms timed with a kernel left out (an earlier call, not committed): the forward
 * with the byte saved took 0.0713 - 0.0723 ms against v10's 0.0675 - 0.0682, 4 us where 1.6 MB
 * predicts 0.5 (a byte store a position, and ptxas spills 16 bytes in the saving form); the sums
 * took about 10 us (ncu: 9.7 - 10.2 us, DRAM 43% busy) where 5 were predicted; and dm's totals, not
 * in the prediction, took 8.5 us with 128 threads a channel (13 dependent loads a thread), 3.9 -
 * 4.4 us with 1024. Balance: -7 us for the stream, +3.5, +5 and +4 for the rest: 0.157 against the
 * predicted 0.153. What was left to 0.15 ms then: the forward, v10 at 54% of the copy ceiling
 * then, 0.07 of the 0.157; the backward's stream already runs at the ceiling. The forms that
 * lost (the whole 16 rows in flight a thread, the sums inside the stream's blocks as a cluster,
 * programmatic dependent launch, the dm totals by the last block) are in the README's "tried"
 * list.
 */
#include "barrier.cuh" /* team_wait */
#include "cluster.cuh" /* cluster_fits */
#include "model.h"
#include "reduce.cuh"
#include "sums.cuh"

#define B4_THREADS 256 /* every kernel's blocks */
#define B4_H 8         /* the stream: rows a thread has in flight at once */

/* returns *p; with L2ONLY (b6), read through L2 only (__ldcg), for data a kernel still running
 * wrote, which this SM's L1 may hold stale */
template <bool L2ONLY, typename T>
__device__ static inline T load_from(const T *p)
{
    if constexpr (L2ONLY)
        return __ldcg(p);
    else
        return *p;
}

/* One block's sums from the winner bytes, positions [p WIN_SUMS_POS, (p + 1) WIN_SUMS_POS) of
 * sample n (model.h: 4096): part[(n P + p) 16 + c] = (sum g, sum g y) over those positions that
 * channel c wins inside the clamp; OUT (b5): also sum g y over those it wins outside the
 * clamp, the partial a float4 (the fourth 0). Each thread adds into its own 16 bins a sum,
 * bin[.][winner][thread] (shared memory, NB = 2 or 3 sums): the lanes of a warp touch 32
 * different banks whatever their winners; then the bins are added over the threads in a fixed
 * order. S a multiple of 4: a thread's 16 positions as four loads of each (the winner bytes as
 * one 32-bit word, g and y as float4), all issued before the first is used. */
template <bool OUT, bool L2ONLY = false>
__device__ static inline void winner_sums(float (*bin)[C_OUT][B4_THREADS],
                                          const unsigned char *__restrict__ win,
                                          const float *__restrict__ g, const float *__restrict__ y,
                                          float *__restrict__ part, int S, int n, int p, int P)
{
    constexpr int NB = OUT ? 3 : 2, PS = OUT ? 4 : 2; /* bins; floats a partial */
    int t = threadIdx.x, warp = t >> 5, lane = t & 31;
    size_t base = (size_t)n * S;
    int lo = p * WIN_SUMS_POS, hi = min(S, lo + WIN_SUMS_POS);
#pragma unroll
    for (int co = 0; co < C_OUT; co++) { /* a thread's own bins: no barrier before use */
        bin[0][co][t] = 0.0f, bin[1][co][t] = 0.0f;
        if (OUT)
            bin[NB - 1][co][t] = 0.0f;
    }
    if ((S & 3) == 0) {
        constexpr int G = WIN_SUMS_POS / (4 * B4_THREADS);
        unsigned w4[G];
        float4 g4[G], y4[G];
#pragma unroll
        for (int h = 0; h < G; h++) {
            int j = lo + 4 * t + h * 4 * B4_THREADS;
            w4[h] = 0; /* past hi: channel 0 outside the clamp, g = y = 0 (OUT adds 0) */
            if (OUT)
                g4[h] = y4[h] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (j < hi) {
                w4[h] = load_from<L2ONLY>(reinterpret_cast<const unsigned *>(win + base + j));
                g4[h] = *reinterpret_cast<const float4 *>(g + base + j);
                y4[h] = load_from<L2ONLY>(reinterpret_cast<const float4 *>(y + base + j));
            }
        }
#pragma unroll
        for (int h = 0; h < G; h++) {
            float gv[4] = {g4[h].x, g4[h].y, g4[h].z, g4[h].w};
            float yv[4] = {y4[h].x, y4[h].y, y4[h].z, y4[h].w};
#pragma unroll
            for (int i = 0; i < 4; i++) {
                unsigned w = (w4[h] >> (8 * i)) & 0xFFu;
                if (w & WIN_INSIDE) {
                    int k = (int)(w & (C_OUT - 1));
                    bin[0][k][t] += gv[i], bin[1][k][t] += gv[i] * yv[i];
                } else if (OUT) {
                    bin[NB - 1][w & (C_OUT - 1)][t] += gv[i] * yv[i];
                }
            }
        }
    } else {
        for (int j = lo + t; j < hi; j += B4_THREADS) {
            unsigned w = load_from<L2ONLY>(win + base + j);
            if (w & WIN_INSIDE) {
                int k = (int)(w & (C_OUT - 1));
                float gv = g[base + j];
                bin[0][k][t] += gv, bin[1][k][t] += gv * load_from<L2ONLY>(y + base + j);
            } else if (OUT) {
                bin[NB - 1][w & (C_OUT - 1)][t] += g[base + j] * load_from<L2ONLY>(y + base + j);
            }
        }
    }
    __syncthreads();
    /* warp w adds rows w, w + 8, ... of the NB x 16 (sum, channel) rows */
    float *out = part + ((size_t)n * P + p) * C_OUT * PS;
    for (int q = warp; q < NB * C_OUT; q += B4_THREADS / 32) {
        const float *row = &bin[q / C_OUT][q % C_OUT][0];
        float v = 0.0f;
        for (int i = lane; i < B4_THREADS; i += 32)
            v += row[i];
        v = warp_sum(v);
        if (lane == 0)
            out[PS * (q % C_OUT) + q / C_OUT] = v;
    }
    if (OUT && t < C_OUT)
        out[PS * t + 3] = 0.0f;
}

/* The sums: block (p, n), P = gridDim.x. WAIT (b6): the block first waits until the CL forward
 * blocks of sample n (CL: v10's cluster size, its blocks a sample) have published (done[n] =
 * CL: team_wait, common/barrier.cuh, thread 0 polling with a nap between tries, then a fence),
 * then reads y and the bytes through L2; b4 and b5 pass done = NULL. */
template <bool OUT, bool WAIT = false>
__global__ void __launch_bounds__(B4_THREADS)
k_winner_sums(const unsigned char *__restrict__ win, const float *__restrict__ g,
              const float *__restrict__ y, float *__restrict__ part, int S, const unsigned *done)
{
    __shared__ float bin[OUT ? 3 : 2][C_OUT][B4_THREADS]; /* 32 KB; b5, b6 48 KB */
    if constexpr (WAIT)
        team_wait(done + blockIdx.y, CL);
    winner_sums<OUT, WAIT>(bin, win, g, y, part, S, blockIdx.y, blockIdx.x, gridDim.x);
}

/* V floats from p (V = 4: a float4, p 16-byte aligned), streaming: read once, evict first */
template <int V>
__device__ static inline void load_v(float *v, const float *p)
{
    if constexpr (V == 4) {
        float4 t = __ldcs(reinterpret_cast<const float4 *>(p));
        v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
    } else {
        v[0] = __ldcs(p);
    }
}

template <int V>
__device__ static inline void store_v(float *p, const float *v)
{
    if constexpr (V == 4)
        __stcs(reinterpret_cast<float4 *>(p), make_float4(v[0], v[1], v[2], v[3]));
    else
        __stcs(p, v[0]);
}

/* The stream, one block: positions [b V B4_THREADS, (b + 1) V B4_THREADS) of sample n, all 16
 * channels; V = 4 when S is a multiple of 4 (aligned float4 rows), else 1. k: 5 x 16 floats of
 * shared memory. DM (b4): part holds float2 (winner_sums<false>), and the block's dm partial of
 * channel c goes to dm_out[c][n B + b] (N samples, B blocks a sample), red: 8 x 16 floats of
 * shared memory. Not DM (b5): part holds float4, and no dm here. */
template <int V, bool DM>
__device__ static inline void stream_dc(float (*k)[C_OUT], float (*red)[C_OUT],
                                        const float *__restrict__ c, const float *__restrict__ g,
                                        const unsigned char *__restrict__ win,
                                        const float *__restrict__ m,
                                        const float *__restrict__ mean,
                                        const float *__restrict__ rstd,
                                        const float *__restrict__ part, int P,
                                        float *__restrict__ dc, float *__restrict__ dm_out, int S,
                                        int n, int b, int B, unsigned N)
{
    int t = threadIdx.x, warp = t >> 5, lane = t & 31;
    int j = (b * B4_THREADS + t) * V;
    size_t base = (size_t)n * S + j;
    const float *cp = c + (size_t)n * C_OUT * S + j;
    float gv[V], cv[C_OUT][V];
    unsigned wv[V];
    if (j < S) { /* the winner bytes, g and the first B4_H rows: in flight before any is used */
        load_v<V>(gv, g + base);
        if constexpr (V == 4) {
            unsigned w4 = *reinterpret_cast<const unsigned *>(win + base);
#pragma unroll
            for (int i = 0; i < 4; i++)
                wv[i] = (w4 >> (8 * i)) & 0xFFu;
        } else {
            wv[0] = win[base];
        }
#pragma unroll
        for (int co = 0; co < B4_H; co++)
            load_v<V>(cv[co], cp + (size_t)co * S);
    }
    if (t < C_OUT) { /* the sample's sums: its P partials, in order */
        float a = 0.0f, bs = 0.0f;
        for (int p = 0; p < P; p++) {
            size_t i = ((size_t)n * P + p) * C_OUT + t;
            if constexpr (DM) {
                float2 q = reinterpret_cast<const float2 *>(part)[i];
                a += q.x, bs += q.y;
            } else {
                float4 q = reinterpret_cast<const float4 *>(part)[i];
                a += q.x, bs += q.y;
            }
        }
        float mc = m[t];
        k[0][t] = mc, k[1][t] = mean[n * C_OUT + t], k[2][t] = rstd[n * C_OUT + t];
        k[3][t] = mc * a / S, k[4][t] = bs / S;
    }
    __syncthreads();
    float acc[C_OUT];
#pragma unroll
    for (int co = 0; co < C_OUT; co++)
        acc[co] = 0.0f;
    if (j < S) {
        float *dp = dc + (size_t)n * C_OUT * S + j;
#pragma unroll
        for (int co = 0; co < C_OUT; co++) {
            if (co % B4_H == 0 && co > 0) { /* the next B4_H rows */
#pragma unroll
                for (int q = co; q < co + B4_H; q++)
                    load_v<V>(cv[q], cp + (size_t)q * S);
            }
            float mc = k[0][co], mu = k[1][co], rs = k[2][co], m1 = k[3][co], m2 = k[4][co], o[V];
#pragma unroll
            for (int i = 0; i < V; i++) {
                float xh = (a_rounded(cv[co][i], mc) - mu) * rs;
                float d = wv[i] == (unsigned)(co | WIN_INSIDE) ? gv[i] * mc : 0.0f;
                float da = rs * (d - m1 - xh * m2);
                o[i] = da * mc;
                if constexpr (DM) {
                    acc[co] += da * cv[co][i];
                    if ((wv[i] & (C_OUT - 1)) == (unsigned)co) /* dm's second use, at the winner */
                        acc[co] += gv[i] * clampf1(xh);
                }
            }
            store_v<V>(dp + (size_t)co * S, o);
        }
    }
    if constexpr (DM) {
#pragma unroll
        for (int co = 0; co < C_OUT; co++) {
            float v = warp_sum(acc[co]);
            if (lane == 0)
                red[warp][co] = v;
        }
        __syncthreads();
        if (t < C_OUT) { /* channel t's dm of this block: the warps' partials in order */
            float a = 0.0f;
            for (int w = 0; w < B4_THREADS / 32; w++)
                a += red[w][t];
            dm_out[(size_t)t * N * B + (size_t)n * B + b] = a;
        }
    }
}

/* b4's stream: block (b, n). __launch_bounds__(.., 3): three blocks an SM, so at most 80
 * registers (65536 / 768, rounded down to the allocation unit of 8). */
template <int V>
__global__ void __launch_bounds__(B4_THREADS, 3)
k_stream_dc(const float *__restrict__ c, const float *__restrict__ g,
            const unsigned char *__restrict__ win, const float *__restrict__ m,
            const float *__restrict__ mean, const float *__restrict__ rstd,
            const float *__restrict__ part, int P, float *__restrict__ dc,
            float *__restrict__ dm_part, int S)
{
    __shared__ float k[5][C_OUT]; /* m, mean, rstd, mean(dxh), mean(dxh xh) */
    __shared__ float red[B4_THREADS / 32][C_OUT];
    stream_dc<V, true>(k, red, c, g, win, m, mean, rstd, part, P, dc, dm_part, S, blockIdx.y,
                       blockIdx.x, gridDim.x, gridDim.y);
}

/* the backward from the saved winner bytes (r->win), the forward's statistics and y */
template <int V>
static void b4_backward(const run_ctx *r)
{
    const shape *s = &r->sh;
    int S = s->s, P = ceil_div(S, WIN_SUMS_POS), blocks = ceil_div(S, V * B4_THREADS);
    k_winner_sums<false><<<dim3(P, s->n), B4_THREADS>>>(r->win, r->g, r->y, r->bpart, S, NULL);
    k_stream_dc<V><<<dim3(blocks, s->n), B4_THREADS>>>(r->c, r->g, r->win, r->m, r->mean,
                                                        r->rstd, r->bpart, P, r->dc, r->dm_part1,
                                                        S);
    /* dm: the N B partials of each channel in order; 1024 threads, so that each thread's loads
     * are two, not channel_totals' 13 (8.5 us under ncu, for 106 KB) */
    k_segment_sums<<<C_OUT, 1024>>>(r->dm_part1, NULL, s->n * blocks, r->dm);
}

typedef void (*backward_fn)(const run_ctx *r);

/* b4's to b6's launch: v10 saving the winner bytes (form: 0 b4, 1 b5, 2 b6; v10_saving), then the
 * backward, bwd4 where S is a multiple of 4 (float4 rows), else bwd1; in a training step cuDNN's
 * conv first and the conv's gradients after */
static void saved_argmax_launch(const run_ctx *r, int scope, backward_fn bwd4, backward_fn bwd1,
                                int form)
{
    if (!cluster_fits(r, 0)) { /* a sample too large for v10's cluster: b2 (which b3 also runs) */
        b2_launch(r, scope);
        return;
    }
    if (scope == SCOPE_TRAIN)
        conv_forward(r);
    v10_saving(r, form);
    if ((r->sh.s & 3) == 0)
        bwd4(r);
    else
        bwd1(r);
    if (scope == SCOPE_TRAIN)
        lib_dx(r), own_dw(r), own_dbias(r);
}

void b4_launch(const run_ctx *r, int scope)
{
    saved_argmax_launch(r, scope, b4_backward<4>, b4_backward<1>, 0);
}

/*
 * b5: dm from the sums, and the winner's clamp bit kept as the forward goes (Hopper: its forward
 * is v10's)
 *
 * Defects of b4: (1) dm, the one gradient that is a reduction over the whole batch, costs b4 a
 * share of every stream block (16 accumulators a thread, 16 warp sums and a second barrier at
 * the block's end) and a fourth kernel to add the 1664 blocks' partials (3.9 - 4.4 us under ncu):
 * dm = sum c da (m's first use, a = c m) + sum at each position's winner of g clamp(xh) (its
 * second use, y = clamp(xh) m). (2) Saving the byte costs b4's forward 4 us, where its 1.6 MB
 * take 0.5 at the copy ceiling: after the channel loop, the winner's xh is computed again (four
 * shared loads: the winner's m, mean and rstd, and its value), and ptxas spills 16 bytes in
 * that form under v10's 64-register cap.
 * Change 1: both terms of dm follow from the sums b4 already takes, by the forward's own
 * identities. Over a slice (n, c) of S positions, sum xh = 0 and sum xh^2 = S var rstd^2 =
 * S (1 - eps rstd^2). With c = a / m = (xh / rstd + mean) / m and da = rstd (dxh - mean(dxh) -
 * xh mean(dxh xh)):
 *   sum da    = rstd (sum dxh - S mean(dxh) - mean(dxh xh) sum xh) = 0,
 *   sum xh da = rstd (S mean(dxh xh) - mean(dxh xh) sum xh^2) = rstd S mean(dxh xh) eps rstd^2,
 *   sum c da  = (sum xh da / rstd + mean sum da) / m = eps rstd^2 S mean(dxh xh) / m,
 * and S mean(dxh xh) = sum g y over the positions c wins inside the clamp (b4's second sum).
 * The first use is small: eps rstd^2 = eps / (var + eps), about 1e-5 / var where var >> eps,
 * and b4's stream summed it as 1.6 million terms of c da that cancel to it. At c's winners,
 * inside the clamp or not, clamp(xh) = y / m, so the second use is sum g y / m over all of c's
 * winners. So
 *   dm_c = (1 / m_c) sum over n of [(1 + eps rstd^2) sum_in g y + sum_out g y],
 * sum_in and sum_out over the positions c wins inside and outside the clamp. k_winner_sums<true>
 * adds sum_out as a third bin; the stream computes no dm; and one block of the stream's launch
 * (k_stream_dm: block 0 of the grid, in practice dispatched first, with the first wave) adds the N
 * P partials of each channel in a fixed order while the stream runs. m_c = 0 gives a = 0, xh = 0
 * and dm_c = 0 exactly, so it is set to 0, not divided by. The test "m 0, 1e-3" plants both: m =
 * 1e-3 on c = 50 +- 1, where var = 3.3e-7 and eps rstd^2 = 0.97: the first use is 0.97 of the
 * second's inside part there. y / m_c is inexact only where y = clamp(xh) m_c is subnormal (below
 * 1.2e-38): the error it adds to dm_c is at most |g| 1.4e-45 / |m_c| a position,
 * negligible unless |m_c| itself nears that range, where var = m_c^2 var(c) has long since
 * underflowed and the forward is degenerate anyway.
 * Change 2: the forward keeps the bit with the winning channel as its loop goes: xh is inside
 * the clamp exactly where clamp(xh) == xh (false for a NaN), two values the loop holds anyway
 * (cluster_apply's TRACK). In the source that is one more compare and select per channel, 16
 * of each per position, against the recomputation's four shared loads and one xh per position;
 * but nothing spills (ptxas: 0 bytes).
 * Prediction (change 1): the fourth kernel's 3.9 - 4.4 us go, and the stream sheds its
 * end-of-block reduction (its bytes, and so its time at the ceiling, unchanged); the third bin
 * makes the sums' blocks 48 KB of shared memory, four an SM, and 512 blocks still fit one wave
 * (528): b4's recorded 0.1572 less 4 us, about 0.153 ms.
 * Prediction (change 2): at most the 3.5 us the forward pays above the byte's DRAM time (4 -
 * 0.5); the instruction counts do not say how much of it goes, so both forms were timed.
 * Measured (H100; each figure a median of 50; interleaved rounds within a call):
 *   - change 1 alone, over four calls: twelve rounds 0.1533 - 0.1563 ms (median 0.1539) against
 *     nine of b4 0.1562 - 0.1588 (0.1571): 3.2 us, about 1 us short of the predicted 3.9 - 4.4
 *     (the sums 0.3 us slower with the third bin, below). An interim recording: 0.1529 ms. ncu,
 *     each kernel alone at the GPU's own clocks: the stream with its dm block 71.1 - 72.7 us
 *     (b4's stream 72.5 - 72.7), the sums 10.0 - 10.4 (b4's 9.7 - 10.2).
 *   - change 2, the forward alone (an experiment build timing the saving kernel in v10's scope,
 *     three rounds): v10 0.0674 - 0.0680, b4's saving form 0.0716 - 0.0721, the kept bit 0.0697
 *     - 0.0702: 1.9 us of the 3.5 gone. b5 with and without it, three calls of three rounds:
 *     0.1510 - 0.1521 against 0.1532 - 0.1563. ncu, the forward kernel alone, disagreed between
 *     its modes: the kept bit 65.3 - 67.4 us and b4's form 59.9 - 62.8 with its cache flush,
 *     68.4 - 69.8 and 69.6 - 75.4 without; the harness's timing of the scope is what the tables
 *     use.
 *   - both, the recording call: 0.1511, 0.1507, 0.1513 against b4's 0.1561, 0.1573, 0.1568,
 *     5.7 us between the medians (3.6%), beyond either version's spread of rounds. Recorded in
 *     the same call (the README's table then, 20 repetitions): 0.1518 ms [0.1485 - 0.1545], 71%
 *     of the 0.108 ms floor; the 0.15 ms target missed by 1.2%.
 *   - with the stream's grid revised (b6's comment): rounds 0.1520, 0.1515, 0.1515.
 *   - all of the above with the old flush. With the clean-L2 timer (data commit 29662c6's code,
 *     a = c m rounded once as model.h's a_rounded; three interleaved rounds of 30 repetitions):
 *     b4 0.1481, 0.1489, 0.1487 ms; b5 0.1508, 0.1502, 0.1502; b5's backward on b4's forward
 *     (change 1 alone) 0.1453, 0.1457, 0.1454. Change 1 still pays, about 3 us; change 2 now
 *     costs about 5 us (not profiled), so b5 as written is 1 - 2% slower than b4, and change 1
 *     alone is the fastest of the three. b5 and b6 (whose forward is b5's) still carry change 2.
 *     Recorded (the README's table): 0.1492 ms [0.1469 - 0.1520]
 *     [b5 epilogue_fwdbwd median_ms min_ms max_ms], 8.45x [compile/b5 epilogue_fwdbwd]
 *     torch.compile; b4 0.1489 [b4 epilogue_fwdbwd] in the same run, a tie there (the ranges
 *     overlap); 0.5% under 0.15 ms, some repetitions over it.
 * What is left: the forward, about 0.070 ms with the bytes saved (v10 is at 57% of
 * the copy ceiling [v10 epilogue_fwd pct_ceiling]), and the sums' 10 us for 14.5 MB, 4.9 us at the
 * copy ceiling. ncu on the sums: one wave of 512 blocks, the SMs active 71% of its cycles (ramp and
 * tail), DRAM 43% busy, per issued instruction 8.8 of 17.4 cycles waiting on loads; their loads
 * unrolled in the reduction, or 8192 positions a block, did not change that beyond the spread. The
 * forms that lost (the bytes stored four to a 32-bit word; the winner's xh kept instead of the bit;
 * the stream at four blocks an SM; the sums and the stream as one launch whose blocks take their
 * work in ticket order, a "b6" of two calls before this b6) are in the README's "tried" list.
 */

/* b5's dm, from the sums' partials alone (the comment above derives it): thread
 * (co, l) of 16 x 16 adds partials l, l + 16, ... of channel co over the N P of them, the 16
 * lanes of a channel are added by shuffles in a fixed order, and dm[co] = that / m[co] (0 where
 * m[co] = 0: then a = 0, xh = 0 and every term is 0) */
__device__ static void dm_from_sums(const float4 *part, int count, int P, const float *m,
                                    const float *rstd, float *dm)
{
    static_assert(B4_THREADS == 16 * C_OUT, "a thread per (channel, lane of 16)");
    int co = threadIdx.x >> 4, l = threadIdx.x & 15;
    float a = 0.0f;
#pragma unroll 4
    for (int i = l; i < count; i += 16) {
        float4 q = part[(size_t)i * C_OUT + co];
        float rs = rstd[(i / P) * C_OUT + co];
        a += q.y * (1.0f + (float)IN_EPS * rs * rs) + q.z;
    }
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) /* within each half warp */
        a += __shfl_xor_sync(FULL, a, o);
    float mc = m[co];
    if (l == 0)
        dm[co] = mc != 0.0f ? a / mc : 0.0f;
}

/* b5's (and b6's) stream, a grid of 1 + N B blocks in one dimension, B blocks a sample. N is
 * limited only by the sums' grid, N <= 65535, which is also the program's limit. Block 0 writes dm,
 * in practice dispatched first, so that it runs beside the stream; block 1 + n B + b streams
 * block b of sample n. RESET (b6): block 0 also sets b6's per-sample counters back to 0
 * (done, N of them; NULL for b5) */
template <int V, bool RESET = false>
__global__ void __launch_bounds__(B4_THREADS, 3)
k_stream_dm(const float *__restrict__ c, const float *__restrict__ g,
            const unsigned char *__restrict__ win, const float *__restrict__ m,
            const float *__restrict__ mean, const float *__restrict__ rstd,
            const float *__restrict__ part, int P, float *__restrict__ dc, float *__restrict__ dm,
            int S, int B, unsigned *done)
{
    __shared__ float k[5][C_OUT];
    if (blockIdx.x == 0) {
        int N = (gridDim.x - 1) / B;
        dm_from_sums(reinterpret_cast<const float4 *>(part), N * P, P, m, rstd, dm);
        if (RESET) /* b6: the per-sample counters back to 0 for the next run */
            for (int i = threadIdx.x; i < N; i += B4_THREADS)
                done[i] = 0;
        return;
    }
    int q = blockIdx.x - 1;
    stream_dc<V, false>(k, NULL, c, g, win, m, mean, rstd, part, P, dc, NULL, S, q / B, q % B, B,
                        (gridDim.x - 1) / B);
}

template <int V>
static void b5_backward(const run_ctx *r)
{
    const shape *s = &r->sh;
    int S = s->s, P = ceil_div(S, WIN_SUMS_POS), blocks = ceil_div(S, V * B4_THREADS);
    k_winner_sums<true><<<dim3(P, s->n), B4_THREADS>>>(r->win, r->g, r->y, r->bpart, S, NULL);
    k_stream_dm<V><<<1 + s->n * blocks, B4_THREADS>>>(r->c, r->g, r->win, r->m, r->mean, r->rstd,
                                                       r->bpart, P, r->dc, r->dm, S, blocks, NULL);
}

void b5_launch(const run_ctx *r, int scope)
{
    saved_argmax_launch(r, scope, b5_backward<4>, b5_backward<1>, 1);
}

/*
 * b6: the sums during the forward's last wave (Hopper: its forward is v10's)
 *
 * Defect of b5: its three kernels run one after another, and the sums' 10 us (ncu) sit between
 * the forward and the stream with nothing beside them. Yet the sums of sample n need only sample
 * n's forward, and the forward ends in a partial wave: 30 clusters fit the GPU at once, so its
 * 128 samples run in waves of 30, 30, 30, 30 and 8, and while the last 8 clusters (64 of 240
 * block slots) load, reduce and write, most SMs have nothing to do, and the sums of the first 120
 * samples could run there.
 * Change: a dependency per sample instead of per kernel.
 *   1. The forward (v10_saving's third form, k_cluster_epilogue<.., SIGNAL>): each block, as it
 *      starts, executes griddepcontrol.launch_dependents; once its y, bytes and (rank 0) the
 *      statistics are written, a block barrier, then thread 0 fences (__threadfence: after the
 *      barrier it orders the whole block's writes, a release) and adds 1 to done[n].
 *   2. The sums are launched with programmatic dependent launch (cudaLaunchKernelEx with
 *      cudaLaunchAttributeProgrammaticStreamSerialization; CUDA C++ Programming Guide,
 *      "Programmatic Dependent Launch and Synchronization"; PTX ISA, "griddepcontrol"): their
 *      grid may start once every forward block has executed launch_dependents or finished,
 *      that is, when the forward's last cluster starts, about one cluster's lifetime (12 to 14
 *      us) before the forward ends. Block (p, n) first waits for done[n] = CL (thread 0 polls,
 *      with a nap between tries, then fences: an acquire), then reads y and the bytes through
 *      L2 (__ldcg), since a kernel still running wrote them. No griddepcontrol.wait: the
 *      counters are the dependency.
 *   3. The stream is launched as before, after the sums have finished, and so after every
 *      forward block has published; its dm block resets done[] to 0 for the next run.
 * Why it cannot deadlock: a sums block waits only on forward blocks, and the sums grid starts
 * only when every forward block has started; a forward block waits only on the blocks of its
 * own cluster, which start together, never on the sums; so every block waited on runs to its
 * end. (Where the launch attribute were ignored, the two kernels would simply run in turn.) A
 * first form reset the counters from block (1, 0) of the stream, which the grid lacks when a
 * sample needs one stream block (S <= 1024): the counters kept the first run's counts, the
 * second run's sums did not wait, and the tests' second run (the harness runs each version
 * twice) failed with "differs between runs".
 * Prediction: the sums of the first 120 samples (94% of the 10 us, 9.4 us) run beside the last
 * wave, which v10's timeline puts at 12 to 14 us (8.6 to 9.9 to load, reduce and exchange, 2.1
 * to write y, 1.7 at the closing barrier); the last 8 samples' 32 blocks, each waiting on its
 * forward, then run after it, one latency-bound round of about 2 to 4 us: b5's 0.1518 less 5 to
 * 8 us, 0.144 to 0.147 ms.
 * Measured (H100; medians of 50, three interleaved rounds of the recording call): 0.1469,
 * 0.1472, 0.1473 ms against b5's 0.1512, 0.1515, 0.1518: 4.3 us (2.8%) less between the
 * medians, beyond the rounds' spread (0.4 and 0.6 us), at the short end of the prediction. Not
 * profiled; the likely causes: the sums compete with the
 * last wave's loads for DRAM, and after v10's staggered start the clusters do not run in clean
 * waves of 30 and 8, so block slots open gradually through the tail rather than at once.
 * Recorded in the same call (the README's table, 20 repetitions): 0.1462 ms [0.1449 - 0.1521],
 * 74% of the 0.108 ms floor; the 0.15 ms target met, by 2.5%.
 * Revised since, for the reader and to lift a limit: the stream's grid is one-dimensional (1 +
 * N B blocks, the dm block first), where the dm block was an extra row of a (B, N + 1) grid that
 * passed the grid's 65535 rows at a batch of 65535 (b5 and b6 ran b4 there; now they run
 * themselves); the sums are k_winner_sums<true, true>, where they were a kernel of their own.
 * Three interleaved rounds of one call: 0.1476, 0.1474, 0.1475 ms against b5's 0.1520, 0.1515,
 * 0.1515 and b4's 0.1565, 0.1564, 0.1571, the same as before within the spread between calls.
 * Revised again, so that no code lives twice: the forward's signal and the sums' wait are
 * common/barrier.cuh's team_arrive and team_wait, which chapter 4's teams use (the wait a volatile
 * poll, a 32 ns nap and a fence, where it was an acquire load and a 128 ns nap; the signal's SASS
 * unchanged). Three interleaved rounds of one call: 0.1476, 0.1473, 0.1480 ms against the
 * recorded code's 0.1471, 0.1473, 0.1474, the same within the spread of each run (0.1445 -
 * 0.1526), so b6's recorded row then stood. All of that with the old flush.
 * With the clean-L2 timer (data commit 29662c6's code, in the interleaved rounds of b5's comment):
 * b6 0.1459, 0.1464, 0.1460 ms against b5's 0.1508, 0.1502, 0.1502, about 4.3 us less, and without
 * v10's staggered start (V10SPAN=0) 0.1517, 0.1519, 0.1520: the start is worth about 6 us to b6.
 * b6 is within 1 us of b5's backward on b4's forward (0.1453 - 0.1457): the sums' early start wins
 * back about what change 2, which b6 keeps, loses.
 * Recorded (data commit 29662c6, the README's table): 0.1458 ms [0.1434 - 0.1472]
 * [b6 epilogue_fwdbwd median_ms min_ms max_ms], 74% of the floor [b6 epilogue_fwdbwd pct_floor],
 * 8.65x torch.compile [compile/b6 epilogue_fwdbwd]; 0.15 ms met, by 2.8%, every repetition under
 * it. Its range overlaps b4's and b5's in that run (a tie by the table's rule), which the
 * interleaved rounds above separate. A first form, every
 * thread fencing before the block barrier and thread 0 adding without a fence of its own (one fence
 * a warp, and not formally a release of the other threads' writes), measured 0.1477 - 0.1484
 * against b5's 0.1517 - 0.1520 in an earlier call (recorded there at 0.1483).
 */

template <int V>
static void b6_backward(const run_ctx *r)
{
    const shape *s = &r->sh;
    int S = s->s, P = ceil_div(S, WIN_SUMS_POS), blocks = ceil_div(S, V * B4_THREADS);
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = dim3(P, s->n), cfg.blockDim = dim3(B4_THREADS), cfg.attrs = at, cfg.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, k_winner_sums<true, true>, (const unsigned char *)r->win,
                                  (const float *)r->g, (const float *)r->y, r->bpart, S,
                                  (const unsigned *)r->fwd_done));
    k_stream_dm<V, true><<<1 + s->n * blocks, B4_THREADS>>>(r->c, r->g, r->win, r->m, r->mean,
                                                             r->rstd, r->bpart, P, r->dc, r->dm, S,
                                                             blocks, r->fwd_done);
}

void b6_launch(const run_ctx *r, int scope)
{
    saved_argmax_launch(r, scope, b6_backward<4>, b6_backward<1>, 2);
}
