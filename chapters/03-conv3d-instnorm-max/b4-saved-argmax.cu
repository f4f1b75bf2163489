/*
 * b4: the argmax saved by the forward, the backward a stream (Hopper: its forward is v10's)
 *
 * Defect of b3: its backward holds a sample's c on chip, as v10 does, and inherits v10's
 * pattern: DRAM half busy (50% under ncu), because nothing can be written until the two sums per
 * (n, c) are known, and the sums need every channel's c at every position: the channel max
 * decides which channel's xh a position's gradient reaches (dxh is g m at the winner, zero at
 * the other 15), so b3 recomputes the argmax from c before it sums. Its backward takes about
 * 0.118 ms (b3's 0.1860 less v10's 0.0679) against a 0.071 ms floor.
 * Change: the forward already knows each position's winner. v10_saving (v10-cluster.cu) writes
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
 * sums' 14.5 MB 0.005 ms at the ceiling; with v10's 0.068 forward and the 0.0005 of the bytes
 * saved, about 0.153 ms against b3's 0.186. The 0.15 target leaves the stream 0.15 - 0.068 -
 * 0.0005 - 0.005 = 0.0765 ms: 93% of the ceiling.
 * Measured (H100, one call; each figure a median of 50, three interleaved rounds): 0.1571,
 * 0.1569, 0.1563 ms against b3's 0.1866, 0.1862, 0.1865: 16% less time. Recorded in the same
 * call (the README's table; 20 repetitions): 0.1572 ms [0.1547 - 0.1634], 68.7% of the 0.108 ms
 * floor, 5.56x torch.compile's 0.8745; issue 15's 0.15 ms is missed by 4.8%. ncu, each kernel
 * alone at the GPU's own clocks: the stream 72.5 - 72.7 us, 2.95 TB/s over its 214.5 MB: 99% of
 * the copy ceiling (2988 GB/s in the recording run), 7 us under its prediction; b3's backward
 * kernel 111.5 - 112.2 us. The rest missed, from forms timed with a kernel left out (an earlier
 * call, not committed): the forward with the byte saved took 0.0713 - 0.0723 ms against v10's
 * 0.0675 - 0.0682, 4 us where 1.6 MB predicts 0.5 (a byte store a position, and ptxas spills 16
 * bytes in the saving form); the sums took about 10 us (ncu: 9.7 - 10.2 us, DRAM 43% busy)
 * where 5 were predicted; and dm's totals, not in the prediction, took 8.5 us with 128 threads a
 * channel (13 dependent loads a thread), 3.9 - 4.4 us with 1024. Balance: -7 us for the stream,
 * +3.5, +5 and +4 for the rest: 0.157 against the predicted 0.153.
 * What is left to 0.15 ms: the forward, v10 at 54% of the copy ceiling (its comment), is 0.07
 * of the 0.157; the backward's stream already runs at the ceiling. The forms that lost (the
 * whole 16 rows in flight a thread, the sums inside the stream's blocks as a cluster,
 * programmatic dependent launch, the dm totals by the last block) are in the README's "tried"
 * list.
 */
#include "cluster.cuh" /* cluster_fits */
#include "model.h"
#include "reduce.cuh"
#include "sums.cuh"

#define B4_THREADS 256   /* both kernels' blocks */
#define B4_SUMS_POS 4096 /* k_winner_sums: positions a block, 16 a thread */
#define B4_H 8           /* k_stream_dc: rows a thread has in flight at once */

/* block (p, n): positions [p B4_SUMS_POS, (p + 1) B4_SUMS_POS) of sample n;
 * part[(n P + p) 16 + c] = (sum g, sum g y) over those positions that channel c wins inside the
 * clamp. Each thread adds into its own 16 bins a sum, bin[.][winner][thread]: the lanes of a warp
 * touch 32 different banks whatever their winners; then the bins are added over the threads in
 * a fixed order. S a multiple of 4: a thread's 16 positions as four loads of each (the winner
 * bytes as one 32-bit word, g and y as float4), all issued before the first is used. */
__global__ void __launch_bounds__(B4_THREADS)
k_winner_sums(const unsigned char *__restrict__ win, const float *__restrict__ g,
              const float *__restrict__ y, float2 *__restrict__ part, int S)
{
    __shared__ float bin[2][C_OUT][B4_THREADS]; /* [sum][winner][thread]: 32 KB */
    int t = threadIdx.x, n = blockIdx.y, warp = t >> 5, lane = t & 31;
    size_t base = (size_t)n * S;
    int lo = blockIdx.x * B4_SUMS_POS, hi = min(S, lo + B4_SUMS_POS);
#pragma unroll
    for (int co = 0; co < C_OUT; co++) /* a thread's own bins: no barrier before use */
        bin[0][co][t] = 0.0f, bin[1][co][t] = 0.0f;
    if ((S & 3) == 0) {
        constexpr int G = B4_SUMS_POS / (4 * B4_THREADS);
        unsigned w4[G];
        float4 g4[G], y4[G];
#pragma unroll
        for (int h = 0; h < G; h++) {
            int j = lo + 4 * t + h * 4 * B4_THREADS;
            w4[h] = 0;
            if (j < hi) {
                w4[h] = *reinterpret_cast<const unsigned *>(win + base + j);
                g4[h] = *reinterpret_cast<const float4 *>(g + base + j);
                y4[h] = *reinterpret_cast<const float4 *>(y + base + j);
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
                }
            }
        }
    } else {
        for (int j = lo + t; j < hi; j += B4_THREADS) {
            unsigned w = win[base + j];
            if (w & WIN_INSIDE) {
                int k = (int)(w & (C_OUT - 1));
                float gv = g[base + j];
                bin[0][k][t] += gv, bin[1][k][t] += gv * y[base + j];
            }
        }
    }
    __syncthreads();
    /* warp w adds rows w, w + 8, ... of the 32 (sum, channel) rows */
    float *out = reinterpret_cast<float *>(part + ((size_t)n * gridDim.x + blockIdx.x) * C_OUT);
    for (int q = warp; q < 2 * C_OUT; q += B4_THREADS / 32) {
        const float *row = &bin[q / C_OUT][q % C_OUT][0];
        float v = 0.0f;
        for (int i = lane; i < B4_THREADS; i += 32)
            v += row[i];
        v = warp_sum(v);
        if (lane == 0)
            out[2 * (q % C_OUT) + q / C_OUT] = v;
    }
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

/* block (b, n): positions [b V B4_THREADS, (b + 1) V B4_THREADS) of sample n, all 16 channels;
 * V = 4 when S is a multiple of 4 (aligned float4 rows), else 1. Its dm partial of channel c
 * goes to dm_part[c][n B + b], B = gridDim.x. __launch_bounds__(.., 3): three blocks an SM, so
 * at most 80 registers (65536 / 768, rounded down to the allocation unit of 8). */
template <int V>
__global__ void __launch_bounds__(B4_THREADS, 3)
k_stream_dc(const float *__restrict__ c, const float *__restrict__ g,
            const unsigned char *__restrict__ win, const float *__restrict__ m,
            const float *__restrict__ mean, const float *__restrict__ rstd,
            const float2 *__restrict__ part, int P, float *__restrict__ dc,
            float *__restrict__ dm_part, int S)
{
    __shared__ float k[5][C_OUT]; /* m, mean, rstd, mean(dxh), mean(dxh xh) */
    __shared__ float red[B4_THREADS / 32][C_OUT];
    int t = threadIdx.x, n = blockIdx.y, warp = t >> 5, lane = t & 31;
    int j = (blockIdx.x * B4_THREADS + t) * V;
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
        float a = 0.0f, b = 0.0f;
        for (int p = 0; p < P; p++) {
            float2 q = part[((size_t)n * P + p) * C_OUT + t];
            a += q.x, b += q.y;
        }
        float mc = m[t];
        k[0][t] = mc, k[1][t] = mean[n * C_OUT + t], k[2][t] = rstd[n * C_OUT + t];
        k[3][t] = mc * a / S, k[4][t] = b / S;
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
                float xh = (cv[co][i] * mc - mu) * rs;
                float d = wv[i] == (unsigned)(co | WIN_INSIDE) ? gv[i] * mc : 0.0f;
                float da = rs * (d - m1 - xh * m2);
                o[i] = da * mc;
                acc[co] += da * cv[co][i];
                if ((wv[i] & (C_OUT - 1)) == (unsigned)co) /* dm's second use, at the winner */
                    acc[co] += gv[i] * clampf1(xh);
            }
            store_v<V>(dp + (size_t)co * S, o);
        }
    }
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
        dm_part[(size_t)t * gridDim.y * gridDim.x + (size_t)n * gridDim.x + blockIdx.x] = a;
    }
}

/* the backward from the saved winner bytes (r->win), the forward's statistics and y */
template <int V>
static void b4_backward(const run_ctx *r)
{
    const shape *s = &r->sh;
    int S = s->s, P = ceil_div(S, B4_SUMS_POS), blocks = ceil_div(S, V * B4_THREADS);
    k_winner_sums<<<dim3(P, s->n), B4_THREADS>>>(r->win, r->g, r->y, (float2 *)r->bpart, S);
    k_stream_dc<V><<<dim3(blocks, s->n), B4_THREADS>>>(r->c, r->g, r->win, r->m, r->mean, r->rstd,
                                                        (const float2 *)r->bpart, P, r->dc,
                                                        r->dm_part1, S);
    /* dm: the N B partials of each channel in order; 1024 threads, so that each thread's loads
     * are two, not channel_totals' 13 (8.5 us under ncu, for 106 KB) */
    k_segment_sums<<<C_OUT, 1024>>>(r->dm_part1, NULL, s->n * blocks, r->dm);
}

void b4_launch(const run_ctx *r, int scope)
{
    if (!cluster_fits(r, 0)) { /* a sample too large for v10's cluster: b2 (which b3 also runs) */
        b2_launch(r, scope);
        return;
    }
    if (scope == SCOPE_TRAIN)
        conv_forward(r);
    v10_saving(r);
    if ((r->sh.s & 3) == 0)
        b4_backward<4>(r);
    else
        b4_backward<1>(r);
    if (scope == SCOPE_TRAIN)
        lib_dx(r), own_dw(r), own_dbias(r);
}
