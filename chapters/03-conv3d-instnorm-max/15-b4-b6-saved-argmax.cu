/*
 * b4: the argmax saved by the forward, the backward a stream (Hopper: its forward is v10's)
 *
 * Defect of b3: its backward holds a sample's c on chip, as v10 does, and inherits v10's pattern
 * (DRAM half busy): nothing is written until the two sums per (n, c) are known, and b3 finds each
 * position's winning channel from c before it sums (dxh is g m at the winner, 0 at the other 15).
 * Change: the forward already knows each position's winner. v10_saving (08-v10-cluster.cu)
 * writes it, a byte a position: the channel in bits 0 to 3, WIN_INSIDE (bit 7, model.h) where the
 * winner's xh is inside the clamp (PyTorch's max saves its indices for the same reason). Then the
 * backward needs c only where dc is written:
 *   1. b4_winner_sums: the sums per (n, c) from the bytes, g and y alone (14.5 MB, not c's 103
 *      MB): where c wins inside the clamp, dxh = g m_c and dxh xh = g y, so sum dxh = m_c sum g
 *      and sum dxh xh = sum g y over the positions c wins; a partial per (n, block, c);
 *   2. b4_stream_dc: da = rstd (dxh - mean(dxh) - xh mean(dxh xh)), dc = m da at every element.
 *      A thread takes 4 positions of all 16 channels: the byte and g once, then c's rows, 8 loads
 *      in flight; no cluster, no exchange, one block barrier after the first loads are issued.
 *      dm's two terms (m is used twice) are summed on the way, added in order by k_segment_sums.
 * Bytes: about 5% over the floor (the byte written and read, g and y read again), but every byte
 * of the backward moves in a pass with no on-chip phase to wait for.
 * Prediction: the stream at the copy ceiling plus 10%, 0.079 ms; with the rest, about 0.153 ms.
 * Measured: 0.1489 ms [b4 epilogue_fwdbwd], 72% of the floor [b4 epilogue_fwdbwd pct_floor],
 * 1.25x b3 [b3/b4 epilogue_fwdbwd]. ncu: the stream at 99% of the copy ceiling; the rest missed
 * (the byte costs the forward 4 us where 0.5 were predicted, the sums 10 us where 5 were).
 * Tried (LABBOOK.md): 16 rows in flight; the sums in the stream's blocks; dm by the last block.
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
b4_winner_sums(const unsigned char *__restrict__ win, const float *__restrict__ g,
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
b4_stream_dc(const float *__restrict__ c, const float *__restrict__ g,
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
    b4_winner_sums<false><<<dim3(P, s->n), B4_THREADS>>>(r->win, r->g, r->y, r->bpart, S, NULL);
    b4_stream_dc<V><<<dim3(blocks, s->n), B4_THREADS>>>(r->c, r->g, r->win, r->m, r->mean,
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
 * b5: b4 with dm from the sums: no dm in the stream, no kernel to add it (Hopper)
 *
 * Defect of b4: dm, the one gradient reduced over the whole batch, costs every stream block 16
 * accumulators a thread, 16 warp sums and a second barrier, and a fourth kernel adds the partials.
 * Change: both terms of dm follow from the sums b4 already takes, by the forward's identities.
 * Over a slice (n, c) of S positions, sum xh = 0 and sum xh^2 = S (1 - eps rstd^2). With
 * c = (xh / rstd + mean) / m and da = rstd (dxh - mean(dxh) - xh mean(dxh xh)):
 *   sum da = 0,   sum xh da = rstd S mean(dxh xh) eps rstd^2,
 *   sum c da = (sum xh da / rstd + mean sum da) / m = eps rstd^2 S mean(dxh xh) / m,
 * and S mean(dxh xh) = sum g y over the positions c wins inside the clamp. At c's winners,
 * clamp(xh) = y / m, so
 *   dm_c = (1 / m_c) sum over n of [(1 + eps rstd^2) sum_in g y + sum_out g y],
 * sum_in and sum_out over the positions c wins inside and outside the clamp. b4_winner_sums<true>
 * adds sum_out as a third bin; the stream computes no dm; block 0 of the stream's grid
 * (b5_stream_dm) adds each channel's partials in a fixed order while the stream runs. m_c = 0
 * gives a = 0, xh = 0 and dm_c = 0 exactly: set to 0, not divided by.
 * Prediction: the fourth kernel's 4 us go.
 * Measured: 0.1492 ms [b5 epilogue_fwdbwd], 72% of the floor [b5 epilogue_fwdbwd pct_floor],
 * 0.2% slower than b4 [b5 vs b4 epilogue_fwdbwd]: a tie. In interleaved rounds, b5's backward on
 * b4's forward is about 3 us faster than b4, and the "also" below loses about as much.
 * Also: the forward keeps the winner's clamp bit as its channel loop goes (cluster_apply's TRACK)
 * instead of computing the winner's xh again; it won 2 us with the older timer and loses about
 * 5 us with today's clean-L2 one (LABBOOK.md). b6 keeps it.
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
b5_stream_dm(const float *__restrict__ c, const float *__restrict__ g,
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
    b4_winner_sums<true><<<dim3(P, s->n), B4_THREADS, 0, r->stream>>>(r->win, r->g, r->y, r->bpart, S, NULL);
    b5_stream_dm<V><<<1 + s->n * blocks, B4_THREADS, 0, r->stream>>>(r->c, r->g, r->win, r->m, r->mean, r->rstd,
                                                       r->bpart, P, r->dc, r->dm, S, blocks, NULL);
}

void b5_launch(const run_ctx *r, int scope)
{
    saved_argmax_launch(r, scope, b5_backward<4>, b5_backward<1>, 1);
}

/* b5's backward after v10_saving(r, 1), as saved_argmax_launch picks it */
void b5_epilogue_backward(const run_ctx *r)
{
    if ((r->sh.s & 3) == 0)
        b5_backward<4>(r);
    else
        b5_backward<1>(r);
}

/*
 * b6: b5 with the sums started during the forward's last wave (Hopper)
 *
 * Defect of b5: its three kernels run in turn, and the sums' 10 us sit between the forward and
 * the stream with nothing beside them. Yet the sums of sample n need only sample n's forward, and
 * the forward ends in a partial wave (128 samples on 30 resident clusters), with most SMs idle.
 * Change: a dependency per sample instead of per kernel.
 *   1. The forward (v10_saving's third form, v10_cluster_epilogue<.., SIGNAL>): each block runs
 *      griddepcontrol.launch_dependents as it starts; once its y, bytes and statistics are
 *      written, a block barrier, then thread 0 fences and adds 1 to done[n] (team_arrive,
 *      common/barrier.cuh: the fence after the barrier makes it a release of the block's writes).
 *   2. The sums are launched with programmatic dependent launch (cudaLaunchKernelEx,
 *      cudaLaunchAttributeProgrammaticStreamSerialization): their grid may start once every
 *      forward block has started. Block (p, n) first waits for done[n] = CL (team_wait), then
 *      reads y and the bytes through L2 (__ldcg), since a kernel still running wrote them.
 *   3. The stream runs after the sums as before; its dm block resets done[] for the next run.
 * Why it cannot deadlock: a sums block waits only on forward blocks, and the sums grid starts
 * only when every forward block has started; a forward block waits only on its own cluster,
 * never on the sums; so every block waited on runs to its end.
 * Prediction: the sums of the first 120 samples run beside the last wave, the last 8 samples'
 * after it (about 2 to 4 us): 5 to 8 us less than b5.
 * Measured: 0.1458 ms [b6 epilogue_fwdbwd], 74% of the floor [b6 epilogue_fwdbwd pct_floor],
 * 1.02x b5 [b5/b6 epilogue_fwdbwd]: about 4 us less, short of the prediction (not profiled; the
 * sums presumably compete with the last wave's loads for DRAM). The 0.15 ms target is met.
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
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, b4_winner_sums<true, true>, (const unsigned char *)r->win,
                                  (const float *)r->g, (const float *)r->y, r->bpart, S,
                                  (const unsigned *)r->fwd_done));
    b5_stream_dm<V, true><<<1 + s->n * blocks, B4_THREADS>>>(r->c, r->g, r->win, r->m, r->mean,
                                                             r->rstd, r->bpart, P, r->dc, r->dm, S,
                                                             blocks, r->fwd_done);
}

void b6_launch(const run_ctx *r, int scope)
{
    saved_argmax_launch(r, scope, b6_backward<4>, b6_backward<1>, 2);
}
