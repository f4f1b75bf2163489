/*
 * b4: the training step in TF32 on wgmma: v8's conv writes c; dw and dxp on wgmma (sm_90a)
 * Defect of b3: its transposed conv and both of the conv's gradients are cuDNN's in fp32: 21.05 ms
 * [b3 train_step], half the speed of torch.compile in PyTorch's default precision (TF32 convs).
 * Change: every conv on the tensor cores in TF32. The forward is v8's conv run once, writing c
 * and each tile's sums, then v7's last kernel (y, lse); b3's backward writes dc and each block's
 * sum of it (dbias). dw: under a pooled row, each of dc's 4 output rows (a, b) is an A as it
 * lies (M = 64 co, K = the outputs along width), copied by 16-byte cp.async; each tap's B holds
 * xp at the outputs of its width parity and zeros at the others (half the products are 0).
 * dxp: v8's tile of 64 pooled cells, dc gathered per tap as v8 gathers xp (a plane per (kd, kh),
 * the odd and even outputs of a segment side by side), N = 32 ci, K = 8 co a stage. Then the
 * pool's backward, a warp writing the 2 x 2 rows of x under a row of dxp.
 * Prediction: at the 2991 GB/s copy ceiling the pool takes 0.20 ms, c written 0.36, y from c
 * 0.72, b3's backward (c and g read, dc written) 1.08, dw and dxp a read of dc each (0.36 + 0.36,
 * their 58 GFLOP each at 300 TFLOP/s under it), dx written 0.18: 3.3 ms. Guess: 4.5 ms.
 * Measured (H100): 7.779 ms [b4 train_step], 33.4% of the fp32 floor [b4 train_step pct_floor],
 * 2.71x b3 [b3/b4 train_step], 1.35x torch.compile in TF32
 * [compile train_step default / b4 train_step]: the 6 ms target is missed by 30%. Nsight Compute
 * (at its locked clocks): the conv writing c 0.91 ms, y and lse 0.75, b3's backward 1.56, dw
 * 2.50 (tensor pipe 13% busy), dxp 2.64 (6%), the pool's backward 0.23. dw and dxp wait on
 * their loads, one stage ahead: without dw's dc copies its time fell to 0.54x (LABBOOK.md), and
 * dxp gathers 4 channels a 16-byte position by 4 loads through registers.
 * Errors: dxp and dw within 2x a TF32 backward's on every test shape (problem.cu's b4_checks).
 */
#include <cuda_pipeline.h>

#include "hopper.cuh"
#include "model.h"
#include "tf32.cuh"
#include "wgmma.cuh"

/* per axis, kernel index k: the parity of the outputs it reaches from input cell m (o = 2 m + k
 * - 1: k = 1 even, k = 0 and 2 odd) and the offset from the output's cell m' (o = 2 m' + parity)
 * back to m (k = 0: m = m' + 1, else m = m') */
__host__ __device__ constexpr int b4_par(int k) { return k != 1; }
__host__ __device__ constexpr int b4_off(int k) { return k == 0; }

/* ------------------------------------------------------------------------------------ dw */

/*
 * dw[ci][co][tap] = sum over n and output positions o of dc[co][o] xp[ci][m], m the input cell
 * the tap takes o from. An item is a chunk of 32 cells along a pooled row (n, pd, ph): the 4
 * output rows (2 pd + a, 2 ph + b), a, b in {0, 1}, of dc (A (a, b), ab = 2 a + b), 64 outputs
 * ow a channel, copied as they lie (cp.async, 16 bytes). Each row is the A (M = 64 co, K = 64
 * ow) of the taps with b4_par(kd) = a, b4_par(kh) = b. K runs over both width parities: a tap's
 * B holds xp at the outputs of its parity and zeros at the others (half the products are 0, the
 * price of copying dc as it lies). B: xp at the 4 input rows (pd + offd, ph + offh), offd =
 * b4_off(kd) and offh = b4_off(kh) (row offset r = 2 offd + offh), each at kw = 0, 1, 2, the
 * block's 16 input channels: N = [slot][kw][ci], r = 0, 1, 2, 3 in slots 1, 0, 2, 3 (b4w_slot),
 * so that the taps of one A are consecutive rows of N (48 a slot):
 *   warpgroup 0: A (1, 1), 12 taps, slots 0 .. 3 (two N = 96); A (0, 0), 3 taps, slot 1 (N = 48)
 *   warpgroup 1: A (0, 1), 6 taps, slots 0, 1 (N = 96); A (1, 0), 6 taps, slots 1, 2 (N = 96)
 * A warpgroup's D is 64 co x 240 columns: 120 accumulators a thread, so two warpgroups (with
 * three, a thread may hold at most 168 registers). A block takes half the input channels; blocks
 * 2 p and 2 p + 1 (a pair) copy the same dc.
 *   A, a row: [co / 8][ow / 4][co % 8][ow % 4]: core matrices 128 bytes apart along K (LBO), 2048
 *   along co (SBO); a k-step of 8 outputs starts 256 bytes further.
 *   B: [slot][kw][ci / 8][ow / 4][ci % 8][ow % 4], the same strides along K (LBO 128) and N
 *   (SBO 2048: 8 ci); a kw 4096 bytes, a slot 12288.
 * dw-parity.svg draws the rows, the parity in B and the slots.
 */
#define B4W_CELLS 32 /* cells an item */
#define B4W_OW (2 * B4W_CELLS)
#define B4W_CI 16    /* input channels a block */
#define B4W_THREADS 256
#define B4W_A_BYTES (C_OUT * B4W_OW * 4)                        /* a row of dc: 16384 */
#define B4W_SLOT_BYTES (3 * B4W_CI * B4W_OW * 4)                 /* a row offset's B: 12288 */
#define B4W_B_BYTES (4 * B4W_SLOT_BYTES)                        /* 49152 */
#define B4W_STAGE (4 * B4W_A_BYTES + B4W_B_BYTES)               /* 114688 */
#define B4W_SMEM (2 * B4W_STAGE)                                /* 229376 */
#define B4W_A_COPIES (4 * C_OUT * B4W_OW / 4 / B4W_THREADS) /* 16-byte copies a thread: 16 */
#define B4W_B_ITEMS (4 * B4W_CI * B4W_CELLS)                     /* xp cells a stage: 2048 */
#define B4W_B_LOADS ((B4W_B_ITEMS + B4W_THREADS - 1) / B4W_THREADS) /* xp cells a thread: 8 */

/* items of a shape: N PD PH rows, ceil(PW / 32) chunks each */
static int b4w_items(const shape *s) { return s->n * s->pd * s->ph * ceil_div(s->pw, B4W_CELLS); }

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

/* B's slot of row offset r = 2 offd + offh, and back (slots 0 .. 3 hold r = 1, 0, 2, 3), so that
 * the row offsets each A needs are consecutive slots: A (0, 1) r = 0, 1; A (1, 0) r = 0, 2;
 * A (1, 1) all; A (0, 0) r = 0 */
__device__ static inline int b4w_slot(int r) { return r < 2 ? 1 - r : r; }
__device__ static inline int b4w_row(int slot) { return slot < 2 ? 1 - slot : slot; }

/* Item id's dc into stage by cp.async (zeros past the row's end; two 8-byte copies a chunk where
 * OW is not a multiple of 4, so 16 bytes are not aligned), rounded to TF32 by b4w_round once
 * landed, and its xp (input channels 16 half ..) through registers, rounded. Copy u (16 bytes,
 * 4 outputs) has, from its lowest bit: co % 8 (3 bits), ow / 4 (4), co / 8 (3), ab (2); so a
 * warp copies the 8 channels of a core matrix at 4 consecutive ow / 4. */
__device__ static inline void b4w_load(unsigned char *stage, const float *__restrict__ dc,
                                       const float *__restrict__ xp, int id, int half,
                                       const shape &s)
{
    int nch = ceil_div(s.pw, B4W_CELLS);
    int w0 = id % nch * B4W_CELLS, row = id / nch, ph = row % s.ph, pd = row / s.ph % s.pd;
    int n = row / (s.ph * s.pd);
    const float *base = dc + (((size_t)n * C_OUT * s.od + 2 * pd) * s.oh + 2 * ph) * s.ow + 2 * w0;
    int left = s.ow - 2 * w0; /* outputs of the row from the chunk's first */
    bool a16 = (s.ow & 3) == 0;
    /* one copy an iteration, not unrolled: registers stay free for the accumulators of the
     * wgmmas in flight (unrolled, ptxas serialized them) */
#pragma unroll 1
    for (int i = 0; i < B4W_A_COPIES; i++) {
        int u = threadIdx.x + i * B4W_THREADS;
        if (u < 4 * C_OUT * B4W_OW / 4) {
            int co = (u >> 7 & 7) * 8 + (u & 7), q4 = u >> 3 & 15, ab = u >> 10;
            unsigned char *dst = stage + ab * B4W_A_BYTES + (u >> 7 & 7) * 2048 + q4 * 128 +
                                 (u & 7) * 16;
            const float *src = base + ((size_t)co * s.od + (ab >> 1)) * s.oh * s.ow +
                               (ab & 1) * s.ow + 4 * q4;
            int v = left - 4 * q4; /* valid outputs of the 4 */
            v = v < 0 ? 0 : (v > 4 ? 4 : v);
            if (a16) {
                __pipeline_memcpy_async(dst, v ? src : dc, 16, 16 - 4 * v);
            } else {
                int v0 = v < 2 ? v : 2, v1 = v - v0;
                __pipeline_memcpy_async(dst, v0 ? src : dc, 8, 8 - 4 * v0);
                __pipeline_memcpy_async(dst + 8, v1 ? src + 2 : dc, 8, 8 - 4 * v1);
            }
        }
    }
    __pipeline_commit();
    /* B: item (r, ci, c) reads xp at cells c and c + 1 of row r: kw = 1 at ow 2 c, kw = 2 at
     * 2 c + 1 (cell c), kw = 0 at 2 c + 1 (cell c + 1). Item u has, from its lowest bit: c % 2,
     * ci % 8 (3 bits), c / 2 (4), ci / 8 (1, of the block's 16), r (2) */
    float *b = reinterpret_cast<float *>(stage + 4 * B4W_A_BYTES);
#pragma unroll 1
    for (int i0 = 0; i0 < B4W_B_LOADS; i0 += 4) { /* 4 items' loads in flight at a time */
        float x[4][2];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int u = threadIdx.x + (i0 + i) * B4W_THREADS;
            int c = (u >> 4 & 15) * 2 + (u & 1);
            int ci = B4W_CI * half + (u >> 8 & 1) * 8 + (u >> 1 & 7);
            int r = u >> 9, id_ = pd + (r >> 1), ih = ph + (r & 1), cell = w0 + c;
            x[i][0] = x[i][1] = 0.0f;
            if (u < B4W_B_ITEMS && id_ < s.pd && ih < s.ph) {
                const float *p =
                    xp + ((((size_t)n * C_IN + ci) * s.pd + id_) * s.ph + ih) * s.pw + cell;
                if (cell < s.pw)
                    x[i][0] = __ldg(p);
                if (cell + 1 < s.pw)
                    x[i][1] = __ldg(p + 1);
            }
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int u = threadIdx.x + (i0 + i) * B4W_THREADS;
            if (u < B4W_B_ITEMS) {
                int c = (u >> 4 & 15) * 2 + (u & 1), r = u >> 9;
                /* [slot][kw][ci / 8][ow / 4][ci % 8][ow % 4], ow = 2 c (+ 1) */
                int at = (u >> 8 & 1) * 512 + (c >> 1) * 32 + (u >> 1 & 7) * 4 + (c & 1) * 2;
                int sl = b4w_slot(r);
                b[(sl * 3 + 1) * 1024 + at] = __uint_as_float(to_tf32(x[i][0]));
                b[(sl * 3 + 2) * 1024 + at + 1] = __uint_as_float(to_tf32(x[i][0]));
                b[(sl * 3 + 0) * 1024 + at + 1] = __uint_as_float(to_tf32(x[i][1]));
            }
        }
    }
}

/* the thread's own copies of b4w_load, landed (__pipeline_wait_prior), rounded to TF32 in place */
__device__ static inline void b4w_round(unsigned char *stage)
{
#pragma unroll
    for (int i = 0; i < B4W_A_COPIES; i++) {
        int u = threadIdx.x + i * B4W_THREADS;
        if (u < 4 * C_OUT * B4W_OW / 4) {
            uint4 *p = reinterpret_cast<uint4 *>(stage + (u >> 10) * B4W_A_BYTES +
                                                 (u >> 7 & 7) * 2048 + (u >> 3 & 15) * 128 +
                                                 (u & 7) * 16);
            uint4 v = *p;
            *p = make_uint4(to_tf32(__uint_as_float(v.x)), to_tf32(__uint_as_float(v.y)),
                            to_tf32(__uint_as_float(v.z)), to_tf32(__uint_as_float(v.w)));
        }
    }
}

/* Segment k of warpgroup q's accumulators (one wgmma's D: acc[48 k ..], D's columns 96 k ..):
 * its A row ab = 2 a + b and its first B slot s0 (the table above; segment 2 is warpgroup 0's
 * alone) */
__device__ static inline void b4w_seg(int q, int k, int &ab, int &s0)
{
    if (k == 0)
        ab = q ? 1 : 3, s0 = 0;
    else if (k == 1)
        ab = q ? 2 : 3, s0 = q ? 1 : 2;
    else
        ab = 0, s0 = 1;
}

/* warpgroup q's wgmmas over a stage's 8 k-steps. Both warpgroups run this one loop, issuing the
 * same shapes (N = 96, 96, 48) into the same accumulators, their operands chosen at run time
 * (b4w_seg): ptxas then keeps the accumulators in registers without serializing the wgmmas or
 * adding fences, and the block's barriers stay at one place (LABBOOK.md has the forms that did
 * not). Warpgroup 1 computes segment 2 as well (warpgroup 0's operands) and drops it: 48 columns
 * a k-step beside the block's 432 that count, 1/9 more tensor work. */
__device__ static inline void b4w_mma(float acc[120], uint64_t da, uint64_t db, int q)
{
    uint64_t a[3], b[3];
#pragma unroll
    for (int k = 0; k < 3; k++) {
        int ab, s0;
        b4w_seg(q, k, ab, s0);
        a[k] = da + ab * (B4W_A_BYTES / 16), b[k] = db + s0 * (B4W_SLOT_BYTES / 16);
    }
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < B4W_OW / 8; ks++) {
        wgmma_m64n96k8_tf32_ss(acc, a[0] + ks * 16, b[0] + ks * 16);
        wgmma_m64n96k8_tf32_ss(acc + 48, a[1] + ks * 16, b[1] + ks * 16);
        wgmma_m64n48k8_tf32_ss(acc + 96, a[2] + ks * 16, b[2] + ks * 16);
    }
    wgmma_commit();
}

/* the tap of warpgroup q's accumulator column n (lane t's acc[4 j + 2 r], acc[4 j + 2 r + 1]
 * hold columns n = 8 j + 2 t and n + 1: common/wgmma.cuh): in segment k = n / 96, column
 * m = n - 96 k is B slot s0 + m / 48, kw = m / 16 % 3, ci m % 16 */
__device__ static inline int b4w_tap(int q, int n)
{
    int k = n / 96, m = n - 96 * k, ab, s0;
    b4w_seg(q, k, ab, s0);
    int r = b4w_row(s0 + m / 48), kw = m / 16 % 3, offd = r >> 1, offh = r & 1;
    int kd = ab >> 1 ? (offd ? 0 : 2) : 1, kh = ab & 1 ? (offh ? 0 : 2) : 1;
    return (kd * KS + kh) * KS + kw;
}
#endif

/* Persistent: block b takes input channels 16 (b % 2) .. + 15 and items b / 2, b / 2 + grid / 2,
 * ...; its sums into dwpart[b][tap][co][ci % 16] */
__global__ void __launch_bounds__(B4W_THREADS, 1)
    b4_dw(const float *__restrict__ dc, const float *__restrict__ xp, float *__restrict__ dwpart,
          shape s, int items)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 smem4[];
    unsigned char *smem = reinterpret_cast<unsigned char *>(smem4);
    int half = blockIdx.x & 1, slot0 = blockIdx.x >> 1, slots = gridDim.x >> 1;
    int mine = slot0 < items ? (items - 1 - slot0) / slots + 1 : 0;
    int q = __shfl_sync(0xffffffffu, (int)threadIdx.x >> 7, 0);
    float acc[120];
#pragma unroll
    for (int i = 0; i < 120; i++) {
        acc[i] = 0.0f;
        wgmma_pin(acc[i]);
    }
    /* B's zeros (the other parity's outputs) once: the loads write only the others */
    for (int st = 0; st < 2; st++)
        for (int e = threadIdx.x; e < B4W_B_BYTES / 16; e += B4W_THREADS)
            reinterpret_cast<float4 *>(smem + st * B4W_STAGE + 4 * B4W_A_BYTES)[e] =
                make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    __syncthreads();
    uint64_t da = wgmma_desc(smem, 128, 2048), db = wgmma_desc(smem + 4 * B4W_A_BYTES, 128, 2048);
    if (mine)
        b4w_load(smem, dc, xp, slot0, half, s);
#pragma unroll 1
    for (int st = 0; st < mine; st++) {
        unsigned stage = (st & 1) * (B4W_STAGE / 16);
        __pipeline_wait_prior(0);
        b4w_round(smem + (st & 1) * B4W_STAGE);
        fence_proxy_async();
        __syncthreads(); /* stage st complete; every wgmma of step st - 1 done */
        b4w_mma(acc, da + stage, db + stage, q);
        if (st + 1 < mine)
            b4w_load(smem + ((st + 1) & 1) * B4W_STAGE, dc, xp, slot0 + (st + 1) * slots, half, s);
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < 120; i++)
            wgmma_pin(acc[i]);
    }
    /* D[co][n]: warp w's rows 16 w + g (+ 8), lane (g, t)'s columns 8 j + 2 t (+ 1), acc[4 j ..] */
    int w = (threadIdx.x >> 5) & 3, g = (threadIdx.x >> 2) & 7, t = threadIdx.x & 3;
    float *dst = dwpart + (size_t)blockIdx.x * KVOL * (C_OUT * B4W_CI);
#pragma unroll
    for (int j = 0; j < 30; j++) {
        if (q == 1 && j >= 24) /* segment 2: warpgroup 0's alone */
            break;
        int n = 8 * j + 2 * t;
        float *p = dst + b4w_tap(q, n) * (C_OUT * B4W_CI) + n % B4W_CI;
#pragma unroll
        for (int r = 0; r < 2; r++)
            *reinterpret_cast<float2 *>(p + (16 * w + g + 8 * r) * B4W_CI) =
                make_float2(acc[4 * j + 2 * r], acc[4 * j + 2 * r + 1]);
    }
#else
    (void)dc, (void)xp, (void)dwpart, (void)s, (void)items;
#endif
}

/* dw in PyTorch's layout from the blocks' partials, added in block order */
__global__ void b4_dw_sum(const float *__restrict__ dwpart, float *__restrict__ dw, int slots)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N_WEIGHT)
        return;
    int ci = i / (C_OUT * KVOL), co = i / KVOL % C_OUT, tap = i % KVOL, half = ci / B4W_CI;
    float v = 0.0f;
    for (int b = 0; b < slots; b++)
        v += dwpart[((size_t)(2 * b + half) * KVOL + tap) * (C_OUT * B4W_CI) + co * B4W_CI +
                    ci % B4W_CI];
    dw[i] = v;
}

/* dbias[co] from b3's blocks' sums of dc, in (n, block) order: a thread a channel */
__global__ void b4_dbias(const float *__restrict__ dbpart, float *__restrict__ dbias, int n, int cl)
{
    int co = threadIdx.x;
    float v = 0.0f;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < cl; k++)
            v += dbpart[((size_t)i * C_OUT + co) * cl + k];
    dbias[co] = v;
}

/* ----------------------------------------------------------------------------------- dxp */

/*
 * dxp[ci][m] = sum over taps and co of w[ci][co][tap] dc[co][2 m + k - 1] (per axis): an implicit
 * GEMM per tap, M = 64 pooled cells (v8's tile: 8 segments of 8 cells along width), N = 32 ci,
 * K = co in chunks of 8 (one k-step). The patch of a chunk holds, for each (kd, kh) (a plane:
 * the output rows 2 pd + kd - 1, 2 ph + kh - 1 of each segment's cells), the outputs along width
 * of a segment (cells 8 sw .. 8 sw + 7 of its row) split by parity: the 9 odd ones 16 sw - 1,
 * 16 sw + 1, .. (slots 0 .. 8), then the 8 even ones 16 sw, .. (slots 9 .. 16). Tap kw = 0 reads
 * odd slots 0 .. 7, kw = 2 odd slots 1 .. 8, kw = 1 even slots: a start address each.
 *     patch[group of 4 co][plane = 3 kd + kh][segment][slot][co % 4]: SBO 272 (a segment),
 *     LBO 19584 (a group)
 * The chunk's weights [tap][group][ci][co % 4] (b4_weights_dxp): B of tap t at 1024 t bytes, SBO
 * 128 (8 ci), LBO 512 (a group). Three warpgroups take kd = 0, 1, 2; their sums meet in shared
 * memory.
 */
#define B4X_SEG 8                              /* cells a segment (v8's tile, v8_tiles) */
#define B4X_SEGS 8                             /* segments a tile */
#define B4X_SLOTS 17
#define B4X_PLANE (B4X_SEGS * B4X_SLOTS)       /* positions a plane: 136 */
#define B4X_GRP_BYTES (9 * B4X_PLANE * 16)     /* 19584 */
#define B4X_PATCH (2 * B4X_GRP_BYTES)          /* 39168 */
#define B4X_W_BYTES (KVOL * 8 * C_IN * 4)      /* 27648 */
#define B4X_STAGE (B4X_PATCH + B4X_W_BYTES)    /* 66816 */
#define B4X_RED_PITCH 68                       /* floats a ci row of the sums: 64 cells + 4 */
#define B4X_RED_BYTES (3 * C_IN * B4X_RED_PITCH * 4) /* 26112 */
#define B4X_SMEM (2 * B4X_STAGE + B4X_RED_BYTES)     /* 159744 */
#define B4X_THREADS 384
#define B4X_ITEMS (2 * 9 * B4X_PLANE)                /* 16-byte positions a patch: 2448 */
#define B4X_LOADS ((B4X_ITEMS + B4X_THREADS - 1) / B4X_THREADS) /* 7 */
#define B4X_CHUNKS (C_OUT / 8)

/* dxp's weights, rounded to TF32:
 * wx[chunk][tap][group][ci][j] = w[ci][8 chunk + 4 group + j][tap] */
__global__ void b4_weights_dxp(const float *__restrict__ w, float *__restrict__ wx)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N_WEIGHT) {
        int j = i & 3, ci = (i >> 2) & 31, grp = (i >> 7) & 1, tap = (i >> 8) % KVOL;
        int co = (i / (KVOL * 256)) * 8 + grp * 4 + j;
        wx[i] = __uint_as_float(to_tf32(w[(ci * C_OUT + co) * KVOL + tap]));
    }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* chunk k of tile tt of sample n: the patch (4 loads of dc a position, stride S) and the chunk's
 * weights (cp.async) into stage. Item it is the patch's 16-byte position
 * ((group 9 + plane) 8 + segment) 17 + slot (the layout above); zeros outside dc */
__device__ static inline void b4x_load(unsigned char *stage, const float *__restrict__ dc,
                                       const float *__restrict__ wx, int n, int tt, int k,
                                       const shape &s)
{
    const float4 *src = reinterpret_cast<const float4 *>(wx) + k * (B4X_W_BYTES / 16);
    float4 *wdst = reinterpret_cast<float4 *>(stage + B4X_PATCH);
    for (int e = threadIdx.x; e < B4X_W_BYTES / 16; e += B4X_THREADS)
        __pipeline_memcpy_async(wdst + e, src + e, 16);
    __pipeline_commit();
    int sw_n = ceil_div(s.pw, B4X_SEG), segs = s.pd * s.ph * sw_n;
    float v[B4X_LOADS][4];
#pragma unroll
    for (int i = 0; i < B4X_LOADS; i++) {
        int it = threadIdx.x + i * B4X_THREADS;
        v[i][0] = v[i][1] = v[i][2] = v[i][3] = 0.0f;
        int grp = it / (9 * B4X_PLANE), r = it - grp * (9 * B4X_PLANE);
        int plane = r / B4X_PLANE, r2 = r - plane * B4X_PLANE;
        int seg = r2 / B4X_SLOTS, slot = r2 - seg * B4X_SLOTS;
        int sg = tt * B4X_SEGS + seg;
        if (it < B4X_ITEMS && sg < segs) {
            int sw = sg % sw_n, row = sg / sw_n;
            int od = 2 * (row / s.ph) + plane / 3 - 1, oh = 2 * (row % s.ph) + plane % 3 - 1;
            int ow = slot < 9 ? 16 * sw - 1 + 2 * slot : 16 * sw + 2 * (slot - 9);
            if (od >= 0 && oh >= 0 && ow >= 0 && ow < s.ow) {
                const float *p = dc + ((((size_t)n * C_OUT + 8 * k + 4 * grp) * s.od + od) * s.oh +
                                       oh) * s.ow + ow;
#pragma unroll
                for (int j = 0; j < 4; j++)
                    v[i][j] = __ldg(p + (size_t)j * s.s);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < B4X_LOADS; i++) {
        int it = threadIdx.x + i * B4X_THREADS;
        if (it < B4X_ITEMS)
            reinterpret_cast<uint4 *>(stage)[it] = make_uint4(
                to_tf32(v[i][0]), to_tf32(v[i][1]), to_tf32(v[i][2]), to_tf32(v[i][3]));
    }
}

/* warpgroup KD's 9 taps of a chunk into acc */
template <int KD> __device__ static inline void b4x_mma(float acc[16], uint64_t da, uint64_t db)
{
    wgmma_fence();
#pragma unroll
    for (int kh = 0; kh < KS; kh++)
#pragma unroll
        for (int kw = 0; kw < KS; kw++)
            wgmma_m64n32k8_tf32_ss(acc, da + (KD * 3 + kh) * B4X_PLANE + (kw == 1 ? 9 : kw / 2),
                                   db + ((KD * 3 + kh) * 3 + kw) * 64);
    wgmma_commit();
}
#endif

/* Persistent: block b takes tiles b, b + grid, ... (tile id = n tiles + tt), each in 8 chunks of
 * the output channels; step st (a tile's chunk) in stage st % 2 */
__global__ void __launch_bounds__(B4X_THREADS, 1)
    b4_dxp(const float *__restrict__ dc, const float *__restrict__ wx, float *__restrict__ dxp,
           shape s, int tiles)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 smem4[];
    unsigned char *smem = reinterpret_cast<unsigned char *>(smem4);
    float *red = reinterpret_cast<float *>(smem + 2 * B4X_STAGE);
    int total = s.n * tiles;
    int mine = (int)blockIdx.x < total ? (total - 1 - (int)blockIdx.x) / gridDim.x + 1 : 0;
    int steps = mine * B4X_CHUNKS;
    int q = __shfl_sync(0xffffffffu, (int)threadIdx.x >> 7, 0);
    int w = (threadIdx.x >> 5) & 3, g = (threadIdx.x >> 2) & 7, t = threadIdx.x & 3;
    int sw_n = ceil_div(s.pw, B4X_SEG), segs = s.pd * s.ph * sw_n;
    uint64_t da = wgmma_desc(smem, B4X_GRP_BYTES, B4X_SLOTS * 16);
    uint64_t db = wgmma_desc(smem + B4X_PATCH, 512, 128);
    if (steps) {
        b4x_load(smem, dc, wx, blockIdx.x / tiles, blockIdx.x % tiles, 0, s);
        __pipeline_wait_prior(0);
        fence_proxy_async();
    }
    __syncthreads();
    float acc[16];
#pragma unroll 1
    for (int st = 0; st < steps; st++) {
        int id = blockIdx.x + (st / B4X_CHUNKS) * gridDim.x, k = st % B4X_CHUNKS;
        unsigned stage = (st & 1) * (B4X_STAGE / 16);
        if (k == 0)
#pragma unroll
            for (int i = 0; i < 16; i++) {
                acc[i] = 0.0f;
                wgmma_pin(acc[i]);
            }
        if (q == 0)
            b4x_mma<0>(acc, da + stage, db + stage);
        else if (q == 1)
            b4x_mma<1>(acc, da + stage, db + stage);
        else
            b4x_mma<2>(acc, da + stage, db + stage);
        if (st + 1 < steps) {
            int nid = blockIdx.x + ((st + 1) / B4X_CHUNKS) * gridDim.x;
            b4x_load(smem + ((st + 1) & 1) * B4X_STAGE, dc, wx, nid / tiles, nid % tiles,
                     (st + 1) % B4X_CHUNKS, s);
            __pipeline_wait_prior(0);
            fence_proxy_async();
        }
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < 16; i++)
            wgmma_pin(acc[i]);
        if (k == B4X_CHUNKS - 1) { /* the tile's sums: each warpgroup's, then added in order */
            float *mine_red = red + q * C_IN * B4X_RED_PITCH;
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int r = 0; r < 2; r++)
#pragma unroll
                    for (int u = 0; u < 2; u++)
                        mine_red[(8 * j + 2 * t + u) * B4X_RED_PITCH + 16 * w + g + 8 * r] =
                            acc[4 * j + 2 * r + u];
            __syncthreads();
            int n = id / tiles, tt = id - n * tiles;
            for (int o = threadIdx.x; o < C_IN * 64; o += B4X_THREADS) {
                int ci = o >> 6, cell = o & 63, sg = tt * B4X_SEGS + (cell >> 3);
                int sw = sg % sw_n, row = sg / sw_n, pw = B4X_SEG * sw + (cell & 7);
                if (sg < segs && pw < s.pw) {
                    float v = red[ci * B4X_RED_PITCH + cell];
                    v += red[(C_IN + ci) * B4X_RED_PITCH + cell];
                    v += red[(2 * C_IN + ci) * B4X_RED_PITCH + cell];
                    dxp[(((size_t)n * C_IN + ci) * s.pd + row / s.ph) * s.ph * s.pw +
                        (size_t)(row % s.ph) * s.pw + pw] = v;
                }
            }
        }
        __syncthreads();
    }
#else
    (void)dc, (void)wx, (void)dxp, (void)s, (void)tiles;
#endif
}

/* ------------------------------------------------------------------------ the pool's backward */

/* dx = dxp / 8 on each value of a window, 0 on the values the pool dropped. b1's kernel (a
 * thread a value, its five coordinates by 64-bit division) took 0.91 ms here (Nsight Compute)
 * for 0.6 GB. Here a warp takes the 2 x 2 rows (d, h) of x under a row of dxp (n, ci, pd, ph),
 * along w: each dxp value read once, stored to 8 values of dx, two a lane where W is even. */
template <bool PAIRS>
__global__ void b4_pool_backward(const float *__restrict__ dxp, float *__restrict__ dx, shape s)
{
    int hq_n = (s.h + 1) / 2, dq_n = (s.d + 1) / 2, lane = threadIdx.x & 31;
    int quads = s.n * C_IN * dq_n * hq_n;
    for (int q = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; q < quads;
         q += (gridDim.x * blockDim.x) >> 5) {
        int hq = q % hq_n, dq = q / hq_n % dq_n, plane = q / (hq_n * dq_n);
        bool in = dq < s.pd && hq < s.ph; /* else the slice the pool dropped: zeros */
        const float *src = dxp + (((size_t)plane * s.pd + dq) * s.ph + hq) * s.pw;
        float *out = dx + (((size_t)plane * s.d + 2 * dq) * s.h + 2 * hq) * s.w;
        int rows_d = 2 * dq + 1 < s.d ? 2 : 1, rows_h = 2 * hq + 1 < s.h ? 2 : 1;
        for (int k = lane; k < (PAIRS ? s.w / 2 : s.w); k += 32) {
            int cell = PAIRS ? k : k >> 1;
            float v = in && cell < s.pw ? __ldg(src + cell) * 0.125f : 0.0f;
            for (int a = 0; a < rows_d; a++)
                for (int b = 0; b < rows_h; b++) {
                    float *o = out + ((size_t)a * s.h + b) * s.w;
                    if (PAIRS)
                        reinterpret_cast<float2 *>(o)[k] = make_float2(v, v);
                    else
                        o[k] = v;
                }
        }
    }
}

/* --------------------------------------------------------------------------- the launchers */

/* the transposed conv's and the pool's gradients from dc (and b3's sums of dc): dw, dbias, dxp,
 * then the pool's backward */
void b4_grads(const run_ctx *r)
{
    const shape *s = &r->sh;
    int items = b4w_items(s), slots = r->sm_count / 2;
    slots = slots < 1 ? 1 : (items < slots ? items : slots);
    SMEM_OPT_IN((const void *)b4_dw, B4W_SMEM);
    b4_dw<<<2 * slots, B4W_THREADS, B4W_SMEM, r->stream>>>(r->dc, r->xp, r->dwpart, *s, items);
    b4_dw_sum<<<ceil_div(N_WEIGHT, 256), 256, 0, r->stream>>>(r->dwpart, r->dw, slots);
    b4_dbias<<<1, C_OUT, 0, r->stream>>>(r->dbpart, r->dbias, s->n, b3_cluster_size(r));
    int tiles = v8_tiles(s), total = s->n * tiles;
    int grid = r->sm_count < total ? r->sm_count : total;
    b4_weights_dxp<<<ceil_div(N_WEIGHT, 256), 256, 0, r->stream>>>(r->weight, r->wx);
    SMEM_OPT_IN((const void *)b4_dxp, B4X_SMEM);
    b4_dxp<<<grid, B4X_THREADS, B4X_SMEM, r->stream>>>(r->dc, r->wx, r->dxp, *s, tiles);
    int blocks = 16 * r->sm_count;
    if (s->w % 2 == 0)
        b4_pool_backward<true><<<blocks, 256, 0, r->stream>>>(r->dxp, r->dx, *s);
    else
        b4_pool_backward<false><<<blocks, 256, 0, r->stream>>>(r->dxp, r->dx, *s);
}

void b4_launch(const run_ctx *r, int scope)
{
    (void)scope; /* the training step only */
    v8_forward_c(r);
    b3_backward_dsum(r);
    b4_grads(r);
}
