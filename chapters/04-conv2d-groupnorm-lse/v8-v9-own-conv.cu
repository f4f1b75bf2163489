/*
 * v8: the whole model with the conv inside, computed twice, c never stored
 *
 * Defect of v1..v7 as a whole model: the library conv writes c (520 MB) to DRAM and the
 * epilogue reads it back at least once, and cuDNN's conv is itself slow here: 8 input channels
 * give it little to tile (the notes after the table time it alone: 1.181 ms, 15.9 TFLOP/s,
 * against 0.280 ms at the FMA peak). v6's whole model takes 1.462 ms [v6 model_fwd], four
 * fifths of it the conv.
 * Change: our own conv (conv-tile.cuh: a thread 4 positions x 16 channels in registers), and
 * since no output can be written before a sample's statistics are complete, two passes over
 * it, neither of which stores c:
 *   k_shifts        a thread per (n, group): the group's first conv value, the shift K of its
 *                   sums (v6's shifted sums: with one K a group, every partial simply adds);
 *   k_conv_stats    pass 1: a persistent block per resident slot walks the tiles; each warp
 *                   computes its (row, slice) of the tile and reduces its 4 groups' shifted
 *                   sums s1 = sum (c - K), s2 = sum (c - K)^2 by warp shuffles into one float2
 *                   a (group, output row, column segment): no atomics;
 *   k_finalize      a warp per (n, group) adds its partials in a fixed order, in double, and
 *                   writes mean and rstd;
 *   k_conv_apply    pass 2: the same tiles again; the conv, then the epilogue in base 2 from
 *                   registers (apply.cuh's affine_of2, tanh_of_u, r2_of), each thread's part of
 *                   the logsumexp over its 16 channels, the 4 slices' (max, sum) joined in
 *                   shared memory, and y written.
 * What it costs instead of c's 1040 MB of DRAM traffic: the conv's 18.7 GFLOP a second time. x
 * (67 MB) is read by both passes, mostly from L2 (a tile's 4 input rows are read by the tiles
 * above and below it too).
 * Prediction: two convs are 37.5 GFLOP, 0.56 ms at 66.9 TFLOP/s; the epilogue adds about 15
 * instructions a value to pass 2's 72 FMAs (20%): about 0.62 ms if the FMA pipes stayed busy,
 * under the 1.0 ms target and about half of v6's whole model.
 * Measured (H100 80GB HBM3, KernelBench shape, data/h100/ch04.csv): 1.1444 ms [1.1419 - 1.1473]
 * [v8 model_fwd median_ms min_ms max_ms], 32.7 TFLOP/s over the two convs (49% of the peak): 1.28x
 * faster [v6/v8 model_fwd] than v6's whole model and 2.09x faster [compile/v8 model_fwd] than
 * torch.compile's in fp32 (2.394 ms [compile model_fwd]; 1.39x
 * [compile model_fwd default / v8 model_fwd] its default precision's), but 0.144 ms over the 1.0 ms
 * target and twice the prediction. c never reaches DRAM: at 32x8x128x128 (data/run-device.sh dram)
 * pass 1 reads 16.7 MB (x is 16.8 MB) and pass 2 almost nothing (x is still in L2). Nsight Compute
 * at the KernelBench shape: the FMA pipe 60% busy in pass 1, 58% in pass 2, the issue slots 75% and
 * 73%, with 16 warps an SM (127 registers a thread: two blocks). How the tile got there: a first
 * form with 16 channels a thread (64 accumulators) needed 241 registers, one block of 8 warps an
 * SM: 1.198 ms, the FMA pipe 57% busy; 8 channels a thread and two blocks an SM: 1.144
 * [v8 model_fwd].
 * What is left: a tile's input is loaded after the previous tile's barrier, so a block's warps wait
 * for L2 once a tile (a copy of the next tile started before the conv, cp.async, would hide it),
 * and the FMAs are 80% of the instructions issued.
 */
#include "apply.cuh"
#include "conv-tile.cuh"
#include "model.h"
#include "reduce.cuh"

/* the shift of group G of sample n: its first value, conv channel 4 G at output (0, 0) */
__global__ void k_shifts(const float *__restrict__ x, const float *__restrict__ weight,
                         const float *__restrict__ bias, float *__restrict__ shift, const shape sh)
{
    int seg = blockIdx.x * blockDim.x + threadIdx.x;
    if (seg >= sh.n * GROUPS)
        return;
    int n = seg / GROUPS, co = seg % GROUPS * CPG;
    float v = __ldg(bias + co);
    for (int ci = 0; ci < C_IN; ci++)
        for (int kh = 0; kh < KS; kh++)
            for (int kw = 0; kw < KS; kw++)
                v = fmaf(__ldg(weight + ((co * C_IN + ci) * KS + kh) * KS + kw),
                         __ldg(x + (((size_t)n * C_IN + ci) * sh.h + kh) * sh.w + kw), v);
    shift[seg] = v;
}

/* v9: a warp's 8 channels x 128 columns of c, through shared memory so that the stores are
 * coalesced: a lane's registers hold 4 consecutive columns, and a store of those from every lane
 * would touch 512 bytes in 4-byte pieces; from shared memory, 32 lanes store 32 consecutive
 * floats. (Columns are not 16-byte aligned in DRAM unless OW is a multiple of 4, so float4
 * stores are not an option at 126.) */
__device__ static inline void store_c(float *st, float acc[CT_SLICE_CH][CT_QUAD], float *__restrict__ c,
                                      const shape sh, tile_at a, int oh, int slice, int lane)
{
#pragma unroll
    for (int j = 0; j < CT_SLICE_CH; j++)
        *(float4 *)(st + j * CT_SEG + CT_QUAD * lane) = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
    __syncwarp();
    if (oh < sh.oh)
#pragma unroll
        for (int j = 0; j < CT_SLICE_CH; j++) {
            float *row = c + (((size_t)a.n * C_OUT + slice * CT_SLICE_CH + j) * sh.oh + oh) * sh.ow;
#pragma unroll
            for (int k = 0; k < CT_QUAD; k++) {
                int col = lane + 32 * k;
                if (a.ow0 + col < sh.ow)
                    row[a.ow0 + col] = st[j * CT_SEG + col];
            }
        }
    __syncwarp(); /* the next tile's writes to st come after these reads */
}

/* pass 1: block b takes tiles b, b + gridDim.x, ...; partial (s1, s2) of group G of sample n,
 * output row oh, column segment sg at part[(n 16 + G) P + oh segs + sg], P = OH segs. With
 * STORE (v9, below), the tile's c also goes to DRAM, through `stage`, CT_STAGE bytes of dynamic
 * shared memory. */
template <bool STORE>
__global__ void __launch_bounds__(CT_THREADS, CT_MINB)
k_conv_stats(const float *__restrict__ x, const float *__restrict__ weight, const float *__restrict__ bias,
             const float *__restrict__ shift, float2 *__restrict__ part, float *__restrict__ c,
             const shape sh, int segs, int tiles)
{
    __shared__ conv_tile_smem sm;
    extern __shared__ __align__(16) float stage[];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, slice = warp % CT_SLICES, row = warp / CT_SLICES;
    int P = sh.oh * segs;
    tile_load_weights(&sm, weight, bias);
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        tile_at a = tile_of(t, sh, segs);
        tile_load_x(&sm.x[0][0][0], x, sh, a);
        float k[CT_SLICE_CH / CPG]; /* the shifts of this thread's groups */
#pragma unroll
        for (int g = 0; g < CT_SLICE_CH / CPG; g++)
            k[g] = __ldg(shift + a.n * GROUPS + slice * (CT_SLICE_CH / CPG) + g);
        __syncthreads();
        float acc[CT_SLICE_CH][CT_QUAD];
        tile_conv(&sm, row, slice, lane, acc);
        int oh = a.oh0 + row;
        if (STORE)
            store_c(stage + warp * CT_SLICE_CH * CT_SEG, acc, c, sh, a, oh, slice, lane);
        float s1[CT_SLICE_CH / CPG], s2[CT_SLICE_CH / CPG];
#pragma unroll
        for (int g = 0; g < CT_SLICE_CH / CPG; g++) {
            s1[g] = 0.0f, s2[g] = 0.0f;
#pragma unroll
            for (int q = 0; q < CT_QUAD; q++)
                if (a.ow0 + CT_QUAD * lane + q < sh.ow)
#pragma unroll
                    for (int j = 0; j < CPG; j++) {
                        float d = acc[g * CPG + j][q] - k[g];
                        s1[g] += d, s2[g] = fmaf(d, d, s2[g]);
                    }
            s1[g] = warp_sum(s1[g]), s2[g] = warp_sum(s2[g]);
        }
        if (lane == 0 && oh < sh.oh)
#pragma unroll
            for (int g = 0; g < CT_SLICE_CH / CPG; g++)
                part[(size_t)(a.n * GROUPS + slice * (CT_SLICE_CH / CPG) + g) * P + oh * segs + a.sg] =
                    make_float2(s1[g], s2[g]);
        __syncthreads(); /* the next tile's input overwrites this one's */
    }
}

/* a warp per (n, group): its P partials in a fixed order (common/reduce.cuh), then
 * mean = K + s1 / m and M2 = s2 - s1^2 / m with m = 4 S values (v6's publish_stats) */
__global__ void k_finalize(const float2 *__restrict__ part, const float *__restrict__ shift,
                           float *__restrict__ mean, float *__restrict__ rstd, int segs_total, int P, int S)
{
    int seg = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (seg >= segs_total)
        return;
    float2 t = warp_sum_partials(part + (size_t)seg * P, P);
    if ((threadIdx.x & 31) == 0) {
        float m = (float)(CPG * S), d = t.x / m;
        mean[seg] = shift[seg] + d;
        rstd[seg] = rsqrtf(fmaxf(t.y - t.x * d, 0.0f) / m + (float)GN_EPS);
    }
}

/* pass 2: the conv again, the epilogue from registers, y; the 4 slices' (max, sum) of a
 * position meet in lp[row][slice][column] */
__global__ void __launch_bounds__(CT_THREADS, CT_MINB)
k_conv_apply(const float *__restrict__ x, const float *__restrict__ weight, const float *__restrict__ bias,
             const float *__restrict__ mean, const float *__restrict__ rstd, const float *__restrict__ gamma,
             const float *__restrict__ beta, float *__restrict__ y, const shape sh, int segs, int tiles)
{
    __shared__ conv_tile_smem sm;
    __shared__ __align__(16) float sa2[C_OUT], sb2[C_OUT];
    __shared__ float2 lp[CT_ROWS][CT_SLICES][CT_SEG];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, slice = warp % CT_SLICES, row = warp / CT_SLICES;
    tile_load_weights(&sm, weight, bias);
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        tile_at a = tile_of(t, sh, segs);
        tile_load_x(&sm.x[0][0][0], x, sh, a);
        affine_of2(sa2, sb2, mean + a.n * GROUPS, rstd + a.n * GROUPS, gamma, beta);
        __syncthreads();
        float acc[CT_SLICE_CH][CT_QUAD];
        tile_conv(&sm, row, slice, lane, acc);
        float m[CT_QUAD], s[CT_QUAD];
#pragma unroll
        for (int q = 0; q < CT_QUAD; q++)
            m[q] = -INFINITY, s[q] = 0.0f;
#pragma unroll
        for (int j = 0; j < CT_SLICE_CH; j++) {
            int ch = slice * CT_SLICE_CH + j;
            float a2 = sa2[ch], b2 = sb2[ch];
#pragma unroll
            for (int q = 0; q < CT_QUAD; q++) { /* log2(e) r, apply.cuh */
                acc[j][q] = r2_of(acc[j][q], tanh_of_u(fmaf(acc[j][q], a2, b2)));
                m[q] = fmaxf(m[q], acc[j][q]);
            }
        }
#pragma unroll
        for (int j = 0; j < CT_SLICE_CH; j++)
#pragma unroll
            for (int q = 0; q < CT_QUAD; q++)
                s[q] += ex2_approx(acc[j][q] - m[q]);
#pragma unroll
        for (int q = 0; q < CT_QUAD; q++)
            lp[row][slice][CT_QUAD * lane + q] = make_float2(m[q], s[q]);
        __syncthreads();
        /* a thread a position joins the slices' (max, sum) and writes y */
        for (int i = threadIdx.x; i < CT_ROWS * CT_SEG; i += CT_THREADS) {
            int rr = i / CT_SEG, col = i % CT_SEG, oh = a.oh0 + rr, ow = a.ow0 + col;
            if (oh < sh.oh && ow < sh.ow) {
                float mm = -INFINITY, ss = 0.0f;
#pragma unroll
                for (int k = 0; k < CT_SLICES; k++)
                    mm = fmaxf(mm, lp[rr][k][col].x);
#pragma unroll
                for (int k = 0; k < CT_SLICES; k++)
                    ss += lp[rr][k][col].y * ex2_approx(lp[rr][k][col].x - mm);
                y[(size_t)a.n * sh.s + (size_t)oh * sh.ow + ow] = (mm + lg2_approx(ss)) * LN2_F;
            }
        }
        /* the next tile's first __syncthreads orders these reads of lp before its writes */
    }
}

void v8_launch(const run_ctx *r, int scope)
{
    (void)scope; /* whole model only */
    static int stats_per_sm, apply_per_sm;
    const shape *s = &r->sh;
    int segs = tile_segs(s), tiles = tile_count(s), segs_total = s->n * GROUPS;
    k_shifts<<<ceil_div(segs_total, 128), 128>>>(r->x, r->weight, r->bias, r->shift, *s);
    k_conv_stats<false><<<resident_grid((const void *)k_conv_stats<false>, &stats_per_sm, r, tiles, 0),
                          CT_THREADS>>>(r->x, r->weight, r->bias, r->shift, r->rowpart, NULL, *s, segs, tiles);
    k_finalize<<<ceil_div(segs_total * 32, 256), 256>>>(r->rowpart, r->shift, r->mean, r->rstd, segs_total,
                                                       s->oh * segs, s->s);
    k_conv_apply<<<resident_grid((const void *)k_conv_apply, &apply_per_sm, r, tiles, 0), CT_THREADS>>>(
        r->x, r->weight, r->bias, r->mean, r->rstd, r->gamma, r->beta, r->y, *s, segs, tiles);
}

/*
 * v9: the whole model with c written once, in the conv's epilogue with its statistics
 *
 * Defect of v8: the conv's FLOPs twice, where the second pass only recomputes what the first
 * already had in registers: 1.144 ms [v8 model_fwd], at 32.7 TFLOP/s over two convs.
 * Change: pass 1 also stores the tile's c (store_c above: through shared memory, coalesced),
 * and v4's apply (k_apply, one thread a position) reads it back: the conv once, c written once
 * and read once.
 * Prediction: 18.7 GFLOP of conv, plus 1040 MB of DRAM traffic (c written and read) and y. The
 * write is issued while pass 1 computes (520 MB in pass 1's time is under half the copy
 * ceiling), the read is v4's apply alone, about 0.19 ms: so pass 1 plus 0.19 ms, about 0.75 ms
 * if pass 1 keeps v8's speed. The lesson of the pair: 18.7 GFLOP take 0.280 ms at the FMA peak,
 * 1040 MB take 0.348 ms at the copy ceiling; at the speed our conv reaches (v8), recomputing
 * costs more than storing. A conv at the FMA peak would reverse it.
 * Measured (H100 80GB HBM3, KernelBench shape, data/h100/ch04.csv): 0.8211 ms [0.8189 - 0.8257]
 * [v9 model_fwd median_ms min_ms max_ms], 1.39x faster than v8 [v8/v9 model_fwd], 1.85x faster
 * [v4/v9 model_fwd] than v4's whole model (1.522 [v4 model_fwd]) and 2.92x faster
 * [compile/v9 model_fwd] than torch.compile's in fp32 (2.394 [compile model_fwd]) and 1.94x
 * [compile model_fwd default / v9 model_fwd] its default precision's (1.590
 * [compile model_fwd default]): the 1.0 ms target is met. The store is not free: Nsight Compute,
 * under its own clocks, times pass 1 at 755 us with the store and 667 us without (the FMA pipe 54%
 * busy instead of 60%), and v4's apply at 207 us (2.56 TB/s). At 32x8x128x128 (data/run-device.sh
 * dram) pass 1 writes 107 to 125 MB and the apply reads 130 MB and writes the rest of c's dirty
 * lines from L2 (25 MB): c crosses DRAM twice, once each way, as designed. So this version gives up
 * the aim that only y leaves the chip, and is faster for it; the L2-resident ring the issue names
 * (c of a few samples written into L2 and read back before it is evicted, v6's teams with the conv
 * as producer) would keep v9's single conv without its 1040 MB, and is the next step.
 */
#define CT_STAGE (CT_THREADS / 32 * CT_SLICE_CH * CT_SEG * 4) /* 32 KB: a warp's tile of c */

void v9_launch(const run_ctx *r, int scope)
{
    (void)scope; /* whole model only */
    static int per_sm;
    const shape *s = &r->sh;
    int segs = tile_segs(s), tiles = tile_count(s), segs_total = s->n * GROUPS;
    if (!per_sm) /* static shared memory and CT_STAGE together exceed the default 48 KB */
        CUDA_CHECK(cudaFuncSetAttribute((const void *)k_conv_stats<true>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, CT_STAGE));
    k_shifts<<<ceil_div(segs_total, 128), 128>>>(r->x, r->weight, r->bias, r->shift, *s);
    k_conv_stats<true><<<resident_grid((const void *)k_conv_stats<true>, &per_sm, r, tiles, CT_STAGE),
                         CT_THREADS, CT_STAGE>>>(r->x, r->weight, r->bias, r->shift, r->rowpart, r->c, *s,
                                                segs, tiles);
    k_finalize<<<ceil_div(segs_total * 32, 256), 256>>>(r->rowpart, r->shift, r->mean, r->rstd, segs_total,
                                                       s->oh * segs, s->s);
    apply_v4(r);
}
