/*
 * b4: the training step with our own conv (v9) and our own weight gradient
 *
 * Defect of b1..b3 as a training step: the library's conv and its gradients are most of it.
 * b3's step takes 5.38 ms [b3 train_step], its epilogue forward and backward 1.10
 * [b3 epilogue_fwdbwd]; PyTorch's cuDNN weight gradient alone takes 1.355 ms [eager conv_dw].
 * Change: the forward is v9 (our conv once, c stored with the statistics, v4's apply); the
 * backward of the epilogue is b3's; dx stays cuDNN's backward data; dw and dbias are ours,
 * b4_dw below:
 *   dw[co][ci][kh][kw] = sum over n, oh, ow of dc[n][co][oh][ow] x[n][ci][oh + kh][ow + kw]
 *   dbias[co]          = sum over n, oh, ow of dc[n][co][oh][ow]
 * a GEMM of 64 x 72 outputs whose inner dimension is every position of the batch (2 M), so the
 * work is split over the positions (split-K): each persistent block sums its tiles' products in
 * registers, writes one partial, and b4_dw_sum adds the partials in block order (no atomics, the
 * same bits every run).
 * Prediction: dw is 18.7 GFLOP, 0.28 ms at the FMA peak, 0.6 ms at v8's 49% of it; the step
 * v9 (0.82 [v9 model_fwd]) + b3's backward (about 0.79) + cuDNN's dx (1.61) + 0.6: about
 * 3.8 ms, ahead of torch.compile's 6.36 [compile train_step].
 * Measured (H100 80GB HBM3, KernelBench shape, data/h100/ch04.csv): 4.017 ms [b4 train_step],
 * 1.34x faster [b3/b4 train_step] than b3's step, 1.58x faster [compile/b4 train_step] than
 * torch.compile's step in fp32 and 1.38x [compile train_step default / b4 train_step] in its
 * default precision (TF32 convs). Nsight Compute: b4_dw 957 us, the FMA pipe 48% busy. The one
 * library call left, cuDNN's dx, is the next step: our own transposed conv on conv-tile.cuh's tile.
 */
#include "conv-tile.cuh"
#include "model.h"

static_assert(CT_ROWS == 1 && CT_XROWS == KS, "b4: a tile is one output row, its input KS rows");

#define DW_HALF (CT_THREADS / 2)    /* threads a half of the block: 8 ci x 16 channel groups */
#define DW_COLS (CT_SEG / 2)        /* columns a half: 64 */
#define DW_G 16                     /* channel groups: thread g has channels g, g + 16, ... */
#define DW_CO (C_OUT / DW_G)        /* channels a thread: 4 */
#define DW_DCW (CT_SEG + 1)         /* a dc row in shared memory, padded: 129 floats */
#define DW_OUT (N_WEIGHT + C_OUT)   /* a block's partial: dw, then dbias */
#define DW_DCITER (C_OUT * CT_SEG / CT_THREADS)

static_assert(DW_HALF == C_IN * DW_G, "b4: a half of the block is 8 ci x 16 channel groups");

struct __align__(16) dw_smem {
    float x[C_IN][CT_XROWS][CT_XW];
    float dc[C_OUT][DW_DCW];
};

/* A persistent block walks conv-tile.cuh's tiles (one output row of 128 columns of one sample),
 * with dc's 64 channel rows of the tile and x's 3 input rows in shared memory. Thread (ci, g) of
 * a half of the block owns channels g, g + 16, g + 32, g + 48 for input channel ci: 4 x 9
 * accumulators, and walks its half's 64 columns with a sliding window of x (3 rows x 3 taps: 3
 * new loads a column) and 4 loads of dc: 7 shared-memory loads for 36 FMAs. The 16 channels a
 * warp reads are rows 129 floats apart (the rows padded by one): 16 different banks, no
 * conflict. A block's dw partials are summed over its tiles in registers (a tile's 64 columns
 * first, then added to the block's total, so no chain of additions grows beyond the tiles a
 * block walks) and written once per block. */
__global__ void __launch_bounds__(CT_THREADS, 2)
b4_dw(const float *__restrict__ x, const float *__restrict__ dc, float *__restrict__ part, const shape sh,
      int segs, int tiles)
{
    __shared__ dw_smem sm;
    int half = threadIdx.x / DW_HALF, rr = threadIdx.x % DW_HALF, ci = rr / DW_G, g = rr % DW_G;
    int c0 = half * DW_COLS;
    float acc[DW_CO][KVOL], bs[DW_CO];
#pragma unroll
    for (int j = 0; j < DW_CO; j++) {
        bs[j] = 0.0f;
#pragma unroll
        for (int k = 0; k < KVOL; k++)
            acc[j][k] = 0.0f;
    }
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        tile_at a = tile_of(t, sh, segs);
        tile_load_x(&sm.x[0][0][0], x, sh, a);
        /* dc's 64 rows of the tile: thread i has column i % 128 of rows i / 128, + 2, + 4, ... */
        int col = threadIdx.x % CT_SEG, co0 = threadIdx.x / CT_SEG;
        size_t plane = (size_t)sh.oh * sh.ow;
        const float *dcp = dc + ((size_t)a.n * C_OUT + co0) * plane + (size_t)a.oh0 * sh.ow + a.ow0 + col;
        bool in = a.ow0 + col < sh.ow;
#pragma unroll 8
        for (int k = 0; k < DW_DCITER; k++)
            sm.dc[co0 + k * (CT_THREADS / CT_SEG)][col] = in ? __ldg(dcp + k * (CT_THREADS / CT_SEG) * plane) : 0.0f;
        __syncthreads();
        float xw[KS][KS];
#pragma unroll
        for (int kh = 0; kh < KS; kh++)
            xw[kh][0] = sm.x[ci][kh][c0], xw[kh][1] = sm.x[ci][kh][c0 + 1];
#pragma unroll 4
        for (int col = c0; col < c0 + DW_COLS; col++) {
#pragma unroll
            for (int kh = 0; kh < KS; kh++)
                xw[kh][2] = sm.x[ci][kh][col + 2];
#pragma unroll
            for (int j = 0; j < DW_CO; j++) {
                float d = sm.dc[g + DW_G * j][col];
                bs[j] += d;
#pragma unroll
                for (int kh = 0; kh < KS; kh++)
#pragma unroll
                    for (int kw = 0; kw < KS; kw++)
                        acc[j][kh * KS + kw] = fmaf(d, xw[kh][kw], acc[j][kh * KS + kw]);
            }
#pragma unroll
            for (int kh = 0; kh < KS; kh++)
                xw[kh][0] = xw[kh][1], xw[kh][1] = xw[kh][2];
        }
        __syncthreads(); /* the next tile overwrites x and dc */
    }
    /* the two halves meet in shared memory (dc's space), then half 0 writes the block's partial */
    float *scr = &sm.dc[0][0];
    if (half == 1)
#pragma unroll
        for (int j = 0; j < DW_CO; j++) {
            scr[(DW_CO * KVOL + j) * DW_HALF + rr] = bs[j];
#pragma unroll
            for (int k = 0; k < KVOL; k++)
                scr[(j * KVOL + k) * DW_HALF + rr] = acc[j][k];
        }
    __syncthreads();
    if (half == 0) {
        float *p = part + (size_t)blockIdx.x * DW_OUT;
#pragma unroll
        for (int j = 0; j < DW_CO; j++) {
            int co = g + DW_G * j;
#pragma unroll
            for (int k = 0; k < KVOL; k++)
                p[(co * C_IN + ci) * KVOL + k] = acc[j][k] + scr[(j * KVOL + k) * DW_HALF + rr];
            if (ci == 0)
                p[N_WEIGHT + co] = bs[j] + scr[(DW_CO * KVOL + j) * DW_HALF + rr];
        }
    }
}

/* dw and dbias: output i adds the blocks' partials in block order */
__global__ void b4_dw_sum(const float *__restrict__ part, int blocks, float *__restrict__ dw,
                          float *__restrict__ dbias)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= DW_OUT)
        return;
    float s = 0.0f;
    for (int b = 0; b < blocks; b++)
        s += part[(size_t)b * DW_OUT + i];
    if (i < N_WEIGHT)
        dw[i] = s;
    else
        dbias[i - N_WEIGHT] = s;
}

/* the blocks of b4_dw resident on an SM (the partial buffer's size, problem.cu) */
int b4_blocks_per_sm(void)
{
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, (const void *)b4_dw, CT_THREADS, 0));
    return per_sm;
}

void b4_own_dw(const run_ctx *r)
{
    static int per_sm;
    const shape *s = &r->sh;
    int tiles = tile_count(s), blocks = resident_grid((const void *)b4_dw, &per_sm, r, tiles, 0);
    b4_dw<<<blocks, CT_THREADS, 0, r->queue>>>(r->x, r->dc, r->dwpart, *s, tile_segs(s), tiles);
    b4_dw_sum<<<ceil_div(DW_OUT, 256), 256, 0, r->queue>>>(r->dwpart, blocks, r->dw, r->dbias);
}

void b4_launch(const run_ctx *r, int scope)
{
    (void)scope; /* the training step only */
    v9_launch(r, SCOPE_MODEL_FWD);
    b3_backward(r);
    lib_dx(r);
    b4_own_dw(r);
}
