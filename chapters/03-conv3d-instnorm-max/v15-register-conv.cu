/*
 * v15: v14's tensor-core conv with its output in registers and x in shared memory (Hopper)
 *
 * Defect of v14: its gathers of x wait on L1 misses (ncu: 3.78 cycles an instruction of long
 * scoreboard, 77% L1 hits): its two 113 KB slices of conv output fill shared memory and leave
 * about 28 KB of L1 for x.
 * Change, in three steps, each measured (not predicted) until the third:
 * 1. The conv's output stays where the mma leaves it, in the accumulators: a warp keeps 7 tiles of
 *    16 corners x 16 channels, 56 of each thread's 127 registers (512 threads x 127 fill the SM's
 *    64K registers: one block an SM). A corner is a position of the input's index space, od (H W) +
 *    oh W + ow; corner c's taps are x[c + tap offset]. 14 x 32 x 32 = 14336 corners a sample, 8
 *    blocks of 16 warps x 7 tiles x 16 = 1792 corners each (the block's span); the 12% that are not
 *    positions (oh or ow past the output) are computed and dropped, and in exchange a tile's rows
 *    stand a fixed 4 corners apart and its tiles 256 (the layout is at the loop), so the loop
 *    addresses x with immediate offsets, no division. Shared memory now holds the block's window of
 *    x (the span's corners and their taps: 1792 + 2 x 1024 + 2 x 32 + 2 = 3906 floats a channel, 47
 *    KB), so a gather is an LDS. Each LDS of A reads 4 columns at 8 rows 4 corners apart, lane g's
 *    word in bank 4 g plus its column's offset mod 4: the 32 words fall in 32 banks when the 4
 *    columns' offsets differ mod 4, so v15_columns deals the taps, sorted by offset mod 4, over the
 *    column groups (here 27 taps share one class, so 5 of the 22 groups still conflict). The
 *    statistics: two passes over the registers (mean, then centred squares), then v10's exchange
 *    (cluster_merge). Measured (H100, medians of 50, three interleaved rounds): 0.1847, 0.1834,
 *    0.1833 ms against v14's 0.1846, 0.1830, 0.1830: a tie. The conv's loop is 24 instructions a
 *    tile and step against v14's 38 (v15's final loop: 26), and the gathers no longer wait (SASS;
 *    ncu: 16% of the shared-memory wavefronts are bank conflicts, the 5 groups), but the code
 *    around the loop grew: 67.5 million instructions in all against v14's 66.2 (ncu).
 * 2. The rest, trimmed: the statistics of c, scaled by m and m^2 afterwards; y as one FMA per
 *    value, m clamp(c (m rstd) - mean rstd); the corners' positions in y from a table the block
 *    computes once; each step's offsets read one step early. 0.1793, 0.1771 ms against v14's
 *    0.1833, 0.1836 (two rounds). A timeline of this form (each block writing %globaltimer at its
 *    phase boundaries, medians): 2.94 us loading the window and splitting the weights, 9.92 us of
 *    conv, 3.10 us of statistics and exchange, 2.18 us of y. Only 15 clusters of 8 fit at once
 *    (cudaOccupancyMaxActiveClusters: a cluster's 8 SMs must share a GPC), so 1024 blocks run in 9
 *    waves on 120 SMs, and with one block an SM nothing overlaps a block's phases.
 * 3. Persistent clusters: the 15 that fit each take samples n, n + 15, ..., split the weights once,
 *    and copy the next sample's window (cp.async, two buffers, 94 KB) while this one computes.
 *    Predicted from the timeline: 9 rounds of 18.1 - 2.9 = 15.2 us, about 0.14 ms.
 * Measured (H100, medians of 50, three interleaved rounds of the recording call): 0.1523, 0.1522,
 * 0.1523 ms against v14's 0.1841, 0.1842, 0.1841, 17% less time (1.21x). In an earlier call, the
 * kernel before its two reductions became warp_part and a redundant barrier went: 0.1542, 0.1520 ms
 * against v14's 0.1825, 0.1825, 16% less time. The batch sweep puts a round at 16.2 us (128 samples
 * against 8, over 8 rounds), 1.0 us over the prediction, not analysed. ncu in that earlier call
 * (the kernel alone, at its locked clocks): 189.3 us against v14's 223.4; 59.6 million instructions
 * (v14 66.2); the tensor pipe 36.7% busy, issue slots 48.1%, and the first stall is now the tensor
 * pipe itself (math pipe throttle, 1.92 cycles an instruction), then fixed latencies (1.61) and
 * ready warps waiting for the slot (1.24). What is left: the conv at mma.sync's rate, 9 rounds for
 * 8.53 samples a cluster, and the 5.3 us a round of statistics, exchange and y (the timeline's 3.10
 * and 2.18) that no other block on the SM overlaps. y's error in make test: rel_l2 3.2e-7 at
 * 1x3x16x32x32, 3.0e-7 at 2x3x4x35x37 (v14: 2.7e-7 to 2.9e-7).
 * Tried (the README's list): 8 tiles a warp, clusters of 7 (the first form; 128 registers, 15
 * clusters still): 0.1995, 0.1975, 0.1977 against 0.1847, 0.1834, 0.1833.
 * Recorded (the README's table): 0.1523 ms [0.1520 - 0.1532], 27.5 TFLOP/s, 3.23x torch.compile's
 * 0.491 ms; issue 15's 0.10 ms is missed by 1.52x.
 */
#include <cuda_pipeline.h>
#include <string.h>

#include "cluster.cuh"
#include "conv.cuh"
#include "model.h"
#include "tf32.cuh"

#define V15_KSTEPS ((C_IN * KVOL + 7) / 8) /* the GEMM's k, 81 taps, in steps of 8: 88 */
#define V15_K (8 * V15_KSTEPS)
#define V15_GROUPS (V15_K / 4)             /* groups of 4 columns that one LDS reads: 22 */
#define V15_TILES 7 /* 16-corner tiles a warp holds in registers */
#define V15_SPAN (16 * 16 * V15_TILES) /* corners a block: 16 warps x V15_TILES tiles x 16 */

/* The GEMM's columns for one shape, computed on the host (v15_columns): column k reads x at
 * off[k] floats from a corner in the block's window (a tap's offset in x plus its channel's
 * place in the window), with the weights of tap[k] (PyTorch's ci * 27 + kd * 9 + kh * 3 + kw;
 * -1: a padding column, weight 0) */
struct v15_cols {
    unsigned off[V15_K];
    signed char tap[V15_K];
};

/* B's fragments, split once by each block, the offsets of each step's columns, and the
 * reductions' partials */
struct v15_smem {
    uint4 b_hi[V15_KSTEPS][32]; /* lane (g, t): b0, b1 of channel g (.x, .y) and 8 + g (.z, .w) */
    uint4 b_lo[V15_KSTEPS][32]; /* their 3xTF32 remainders */
    uint2 off[V15_KSTEPS][4];   /* step s, t: the offsets of columns 8 s + t and 8 s + t + 4 */
    float b[C_OUT];
    float part[16][C_OUT]; /* warp w's sum for channel co */
    int count[16];         /* warp w's corners that are positions */
    float bmean[C_OUT];    /* the block's mean of channel co */
};

/* the column order: groups of four columns (k = 4 j .. 4 j + 3) are read by one LDS each, lane
 * (g, t) at corner + 4 g + off[4 j + t], so the 32 words fall in 32 banks when the four offsets
 * differ mod 4. The taps are sorted by offset mod 4 and dealt round-robin over the 22 groups:
 * a residue class of at most 22 taps never lands twice in one group. A padding column reads the
 * same word as its group's first column (a broadcast, no conflict). */
static void v15_columns(const shape *sh, unsigned wstride, v15_cols *c)
{
    int hw = sh->h * sh->w, next = 0;
    unsigned off[C_IN * KVOL];
    for (int j = 0; j < C_IN * KVOL; j++) {
        int ci = j / KVOL, r = j % KVOL;
        off[j] = ci * wstride + (r / 9) * hw + (r / 3 % 3) * sh->w + r % 3;
    }
    for (int res = 0; res < 4; res++)
        for (int j = 0; j < C_IN * KVOL; j++)
            if ((off[j] & 3) == (unsigned)res) {
                int k = 4 * (next % V15_GROUPS) + next / V15_GROUPS;
                c->off[k] = off[j], c->tap[k] = (signed char)j;
                next++;
            }
    for (; next < V15_K; next++) {
        int k = 4 * (next % V15_GROUPS) + next / V15_GROUPS;
        c->off[k] = c->off[k & ~3], c->tap[k] = -1;
    }
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900 /* k_v15's helpers: Hopper, as k_v15 is */
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

/* a lane's sums of its four channels (s[h][e]: channel 8 h + 2 t + e) added over the warp's 8
 * lanes of its t (lanes 4, 8, 16 apart), and the warp's 16 sums into sw->part[warp] */
__device__ static inline void warp_part(v15_smem *sw, float s[2][2])
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
            sw->part[threadIdx.x >> 5][8 * h + 2 * t] = s[h][0],
            sw->part[threadIdx.x >> 5][8 * h + 2 * t + 1] = s[h][1];
}

/* sample n's window of x for the block whose span starts at corner c_lo, into dst (channel ci
 * at dst + ci * wstride), by cp.async (4 bytes each: wstride is 1 mod 4, so 16-byte copies would
 * be misaligned), committed as one group; zeros past the end of each channel of x, which only
 * corners that are not positions read */
__device__ static inline void issue_window(float *dst, const float *__restrict__ x, int n, int c_lo,
                                           int len, int dhw, unsigned wstride)
{
    const float *xn = x + (size_t)n * C_IN * dhw;
    for (int ci = 0; ci < C_IN; ci++)
        for (int i = threadIdx.x; i < len; i += CL_THREADS) {
            if (c_lo + i < dhw)
                __pipeline_memcpy_async(dst + ci * wstride + i, xn + (size_t)ci * dhw + c_lo + i,
                                        4);
            else
                dst[ci * wstride + i] = 0.0f;
        }
    __pipeline_commit();
}
#endif

__global__ void __launch_bounds__(CL_THREADS, 1)
k_v15(const float *__restrict__ x, const float *__restrict__ weight, const float *__restrict__ bias,
      const float *__restrict__ m, float *__restrict__ y, float *__restrict__ mean,
      float *__restrict__ rstd, const shape sh, const __grid_constant__ v15_cols cols,
      unsigned wstride)
{
#if __CUDA_ARCH__ >= 900
    extern __shared__ float xs[]; /* two windows of x, then ptab */
    __shared__ cluster_shared cs;
    __shared__ __align__(16) v15_smem sw;
    cg::cluster_group cluster = cg::this_cluster();
    const int span = V15_SPAN;
    int rank = (int)cluster.block_rank(), ncl = (int)cluster.num_blocks();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int hw = sh.h * sh.w, dhw = sh.d * hw, c_lo = rank * span, win = C_IN * wstride;
    int len = span + 2 * hw + 2 * sh.w + 2; /* the window: the span's corners and their taps */
    int *ptab = (int *)(xs + 2 * win);      /* corner i of the span: its position in y, or -1 */

    /* 1. the first sample's window; while it lands, the weights split into B's fragments, the
     * columns' offsets, and the corners' positions, for every sample */
    issue_window(xs, x, blockIdx.y, c_lo, len, dhw, wstride);
    for (int i = threadIdx.x; i < V15_KSTEPS * 32 * 4; i += CL_THREADS) {
        int e = i & 3, l = (i >> 2) & 31, st = i >> 7;
        int k = 8 * st + (l & 3) + 4 * (e & 1), co = (l >> 2) + 8 * (e >> 1), tap = cols.tap[k];
        float v = tap >= 0 ? __ldg(weight + co * C_IN * KVOL + tap) : 0.0f;
        split_tf32(v, (uint32_t *)&sw.b_hi[st][l] + e, (uint32_t *)&sw.b_lo[st][l] + e);
    }
    for (int k = threadIdx.x; k < V15_K; k += CL_THREADS)
        ((unsigned *)&sw.off[k / 8][k % 4])[(k % 8) / 4] = cols.off[k];
    if (threadIdx.x < C_OUT)
        sw.b[threadIdx.x] = __ldg(bias + threadIdx.x), cs.m[threadIdx.x] = __ldg(m + threadIdx.x);
    {
        unsigned mw = 0xffffffffu / (unsigned)sh.w, mh = 0xffffffffu / (unsigned)sh.h;
        for (int i = threadIdx.x; i < span; i += CL_THREADS) {
            unsigned c = c_lo + i, q = fast_div(c, sh.w, mw), od = fast_div(q, sh.h, mh);
            unsigned oh = q - od * sh.h, ow = c - q * sh.w;
            int ok = od < (unsigned)sh.od && oh < (unsigned)sh.oh && ow < (unsigned)sh.ow;
            ptab[i] = ok ? (int)((od * sh.oh + oh) * sh.ow + ow) : -1;
        }
    }
    __pipeline_wait_prior(0);
    __syncthreads();

    /* the lane's corners. Warp w's tile r is the corners w0 + 256 r + 4 i, i = 0 .. 15 (row i of
     * the tile), w0 = 64 (w / 4) + w % 4: warps 4 q .. 4 q + 3 interleave over corners 64 q ..
     * 64 q + 63, the 16 warps cover 256, so tile r adds 256 r. Lane (g, t) holds rows g and
     * g + 8: base = w0 + 4 g, and row g + 8 is base + 32. */
    int base = 64 * (warp >> 2) + (warp & 3) + 4 * g;
    int pos[V15_TILES][2], cnt = 0;
#pragma unroll
    for (int r = 0; r < V15_TILES; r++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++)
            pos[r][hh] = ptab[base + 256 * r + 32 * hh], cnt += pos[r][hh] >= 0;
#pragma unroll
    for (int o = 4; o < 32; o <<= 1)
        cnt += __shfl_xor_sync(FULL, cnt, o);

    int it = 0;
    for (int n = blockIdx.y; n < sh.n; n += gridDim.y, it++) {
        const float *xw = xs + (it & 1) * win;
        if (n + (int)gridDim.y < sh.n) /* the next sample's window, while this one computes */
            issue_window(xs + ((it + 1) & 1) * win, x, n + gridDim.y, c_lo, len, dhw, wstride);

        /* 2. the conv */
        float acc[V15_TILES][2][4];
#pragma unroll
        for (int r = 0; r < V15_TILES; r++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                acc[r][h][0] = acc[r][h][2] = sw.b[8 * h + 2 * t],
                acc[r][h][1] = acc[r][h][3] = sw.b[8 * h + 2 * t + 1];
        uint2 o_next = sw.off[0][t];
#pragma unroll 1
        for (int st = 0; st < V15_KSTEPS; st++) {
            uint2 o = o_next;
            o_next = sw.off[st + 1 < V15_KSTEPS ? st + 1 : st][t]; /* the next step's, early */
            uint4 bh = sw.b_hi[st][lane], bl = sw.b_lo[st][lane];
            uint32_t b_hi[2][2] = {{bh.x, bh.y}, {bh.z, bh.w}};
            uint32_t b_lo[2][2] = {{bl.x, bl.y}, {bl.z, bl.w}};
            const float *px = xw + base + o.x, *py = xw + base + o.y;
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

        /* 3. the block's mean of each channel's conv, then its centred squares: the values are
         * in registers, so the second pass costs no memory. Lane (g, t) holds channels 2 t,
         * 2 t + 1 (h = 0) and 8 + 2 t, 9 + 2 t (h = 1); lanes of one t sum over g by shuffles.
         * a = c m has mean m mean(c) and M2 m^2 M2(c). */
        float s[2][2], zero[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
        lane_sums<false>(acc, pos, zero, s);
        warp_part(&sw, s);
        if (lane == 0)
            sw.count[warp] = cnt;
        __syncthreads();
        /* warp w: channel w's block sum and count */
        float bs = __shfl_sync(FULL, warp_sum(lane < 16 ? sw.part[lane][warp] : 0.0f), 0);
        int bc = lane < 16 ? sw.count[lane] : 0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            bc += __shfl_xor_sync(FULL, bc, o);
        float bm = bc > 0 ? bs / bc : 0.0f; /* every lane alike: no shuffle below a branch */
        if (lane == 0)
            sw.bmean[warp] = bm;
        __syncthreads();
        float cm[2][2] = {{sw.bmean[2 * t], sw.bmean[2 * t + 1]},
                          {sw.bmean[8 + 2 * t], sw.bmean[9 + 2 * t]}};
        lane_sums<true>(acc, pos, cm, s);
        warp_part(&sw, s); /* every warp read sw.part before the barrier above */
        __syncthreads();
        float bq = warp_sum(lane < 16 ? sw.part[lane][warp] : 0.0f);
        if (lane == 0) {
            float mc = cs.m[warp];
            welford w = {bc, bm * mc, bq * mc * mc};
            cs.wf[it & 1][warp] = w;
        }

        /* 4. the exchange (cluster.cuh; the triples alternate between samples, v11's parity),
         * then y: u = m clamp(c m rstd - mean rstd), the max of the lane's four channels, then
         * over the group's four lanes by shuffles; lane t = 0 writes it */
        cluster_merge(&cs, sh.s, it & 1, ncl);
        float k1[2][2], k0[2][2], mult[2][2];
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int co = 8 * h + 2 * t + e;
                mult[h][e] = cs.m[co], k1[h][e] = cs.m[co] * cs.rstd[co],
                k0[h][e] = -cs.mean[co] * cs.rstd[co];
            }
        float *yn = y + (size_t)n * sh.s;
#pragma unroll
        for (int r = 0; r < V15_TILES; r++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                float best = 0.0f;
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        float v = fmaf(acc[r][h][2 * hh + e], k1[h][e], k0[h][e]);
                        float u = clampf1(v) * mult[h][e];
                        best = (h == 0 && e == 0) || u > best ? u : best;
                    }
                /* fmaxf across lanes drops a NaN (torch.max keeps it); finite x has none */
                best = fmaxf(best, __shfl_xor_sync(FULL, best, 1));
                best = fmaxf(best, __shfl_xor_sync(FULL, best, 2));
                if (t == 0 && pos[r][hh] >= 0)
                    yn[pos[r][hh]] = best;
            }
        if (rank == 0 && threadIdx.x < C_OUT)
            mean[n * C_OUT + threadIdx.x] = cs.mean[threadIdx.x],
            rstd[n * C_OUT + threadIdx.x] = cs.rstd[threadIdx.x];
        __pipeline_wait_prior(0); /* the next window has landed */
        __syncthreads();          /* and every warp is done with this one's statistics */
    }
    cluster.sync(); /* no block may exit while another still reads its partials */
#endif
}

static int opted; /* k_v15's shared-memory opt-in is set (cluster_launch_make) */

/* persistent clusters, as many as fit at once, each taking samples blockIdx.y, + gridDim.y, ...;
 * a cluster has as many blocks as a sample's corners need (8 at the KernelBench shape). v14
 * where a sample needs more than CL blocks, the two windows do not fit shared memory, or no
 * cluster fits the GPU. wstride: the window's length rounded up to 1 mod 4, so that channel
 * ci's offsets shift by ci mod 4 (at 0 mod 4, the KernelBench shape's offsets fall in three
 * classes of 27 and 15 of the 22 column groups conflict; at 1 mod 4, 5 do). The cache of the
 * clusters that fit is keyed by the shape alone: the harness runs on one device. */
void v15_launch(const run_ctx *r, int scope)
{
    const shape *sh = &r->sh;
    int hw = sh->h * sh->w, ncl = ceil_div(sh->od * hw, V15_SPAN);
    unsigned len = V15_SPAN + 2 * hw + 2 * sh->w + 2, wstride = len + ((1u - len) & 3u);
    size_t smem = 8 * (size_t)C_IN * wstride + 4 * (size_t)V15_SPAN;
    if (ncl > CL || smem > r->smem_optin) {
        v14_launch(r, scope);
        return;
    }
    v15_cols cols;
    v15_columns(sh, wstride, &cols);
    cluster_launch L;
    cluster_launch_make(&L, (const void *)k_v15, &opted, r->smem_optin, ncl, dim3(ncl, sh->n),
                        CL_THREADS, smem);
    static shape last;
    static int resident; /* clusters that fit at once, for the last shape */
    if (resident == 0 || memcmp(&last, sh, sizeof last) != 0)
        resident = resident_clusters(&L, (const void *)k_v15), last = *sh;
    if (resident == 0) {
        v14_launch(r, scope);
        return;
    }
    L.cfg.gridDim = dim3(ncl, resident < sh->n ? resident : sh->n);
    CUDA_CHECK(cudaLaunchKernelEx(&L.cfg, k_v15, r->x, r->weight, r->bias, r->m, r->y, r->mean,
                                  r->rstd, r->sh, cols, wstride));
}
