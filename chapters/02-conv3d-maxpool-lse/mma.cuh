/*
 * mma.cuh: the implicit GEMM's tile on tensor cores (v7, v8, v9, b3), after igemm.cuh
 *
 * The tensor-core primitives (mma.sync m16n8k8 in TF32, its fragment layout with g = lane / 4
 * and t = lane % 4, the 3xTF32 split) are in common/tf32.cuh; mma-fragments.svg draws the
 * fragments and the banks they read.
 *
 * Here A's rows are positions, its columns (the k of the GEMM) the 8 input channels of a chunk
 * at one tap, B's columns output channels. Ordering k as (tap, channel) instead of PyTorch's
 * (channel, tap) is free (a sum does not care) and makes every fragment a plain strided read:
 * a0 of lane (g, t) is the patch at position g of channel t, so a warp's 32 reads hit 8
 * adjacent positions of 4 channels, CS = 840 floats apart, = 8 banks apart: conflict free
 * (igemm.cuh). B's reads, 8 output channels g of 4 input channels t, are adjacent along a
 * weight row (g) and 27 rows of WS = 72 floats (27 x 72 = 24 mod 32 banks) apart across t:
 * banks 24 t + g (mod 32), all 32 different.
 *
 * The block's 8 warps: warp q computes 64 positions (tile rows 2 (q % 4) and 2 (q % 4) + 1,
 * 32 columns each: four m16 pieces) by 32 channels (32 (q / 4) ..: four n8 pieces): 16 mma
 * tiles, 64 accumulators a lane. Per tap a warp reads 16 A and 8 B values a lane, then runs 16
 * mma instructions (TF32) or 48 (3xTF32).
 */
#ifndef CH02_MMA_CUH
#define CH02_MMA_CUH

#include "igemm.cuh"
#include "tf32.cuh"

#define MT 4 /* m16 pieces a warp */
#define NT 4 /* n8 pieces a warp */

/* Where warp q works: the row (plane TH + row) of its piece mt, and its first channel. With 64
 * output channels, warps q and q + 4 share rows and take channels 0 .. 31 and 32 .. 63; with
 * dx's 32, the 8 warps take 8 pairs of rows. */
template <int COUT>
__device__ static inline int warp_row(int q, int mt)
{
    return 2 * (q % (256 / COUT)) + (mt >> 1);
}
template <int COUT>
__device__ static inline int warp_channel(int q) { return q / (256 / COUT) * 32; }

/* The tile's products of one block, summed over all CIN x 27 k: 256 positions x 64 channels
 * for the forward (CIN = 32, COUT = 64), 512 x 32 for b3's dx (CIN = 64, COUT = 32); 8 warps
 * of 64 x 32 either way. acc[mt][nt][0..3] holds C's fragment of piece (mt, nt). PASSES = 1:
 * TF32; 3: 3xTF32. */
template <int PASSES, int CIN, int COUT>
__device__ static inline void mma_tile(float acc[MT][NT][4], float *s_in, float *s_w,
                                       const float *__restrict__ x, const float *__restrict__ w_k,
                                       tile_pos tp, int d, int h, int w)
{
    const int ws = W_STRIDE(COUT), th = TH_OF(COUT), ph = PH_OF(COUT), cs = CS_OF(COUT);
    int lane = threadIdx.x & 31, q = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    int row0 = warp_row<COUT>(q, 0);
    int a_lane = (row0 / th) * ph * PW + (row0 % th) * PW + t * cs + g;
    int b_lane = t * KVOL * ws + warp_channel<COUT>(q) + g;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[mt][nt][e] = 0.0f;
    for (int chunk = 0; chunk < CIN / CI_CHUNK; chunk++) {
        __syncthreads();
        load_chunk<CIN, COUT>(s_in, s_w, x, w_k, tp, chunk, d, h, w);
        __syncthreads();
        const float *sa = s_in + a_lane, *sb = s_w + b_lane;
        /* taps by (kd, kh), then kw unrolled: 27 taps fully unrolled would be ~60 KB of code,
         * past the instruction cache */
        for (int kdh = 0; kdh < KS * KS; kdh++)
#pragma unroll
        for (int kw = 0; kw < KS; kw++) {
            int tap = kdh * KS + kw, a_tap = (kdh / KS) * ph * PW + (kdh % KS) * PW + kw;
            uint32_t a_hi[MT][4], a_lo[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                /* piece mt: row mt / 2 of the warp's two, columns 16 (mt % 2) .. + 15 */
                const float *p = sa + a_tap + (mt >> 1) * PW + (mt & 1) * 16;
                float v[4] = {p[0], p[8], p[4 * cs], p[4 * cs + 8]};
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    if (PASSES == 3)
                        split_tf32(v[e], &a_hi[mt][e], &a_lo[mt][e]);
                    else
                        a_hi[mt][e] = to_tf32(v[e]);
                }
            }
            /* B piece by piece: A's 16 (or 32) registers stay, B's 2 (or 4) come and go */
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const float *p = sb + tap * ws + nt * 8;
                float v[2] = {p[0], p[4 * KVOL * ws]};
                uint32_t b_hi[2], b_lo[2];
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    if (PASSES == 3)
                        split_tf32(v[e], &b_hi[e], &b_lo[e]);
                    else
                        b_hi[e] = to_tf32(v[e]);
                }
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    if (PASSES == 3) /* a tap's 8 k at a time (mma_3xtf32 says why) */
                        mma_3xtf32(acc[mt][nt], a_hi[mt], a_lo[mt], b_hi, b_lo);
                    else
                        mma_tf32(acc[mt][nt], a_hi[mt], b_hi);
                }
            }
        }
    }
}

/* c = the tile's sums + bias (none if NULL: b3's dx), for the positions inside the volume:
 * piece (mt, nt)'s c0 .. c3 are positions g and g + 8 of its 16 columns, channels 2t and
 * 2t + 1 of its 8. A store instruction writes 8 adjacent floats (32 bytes, a whole sector) of
 * each of 4 channels. */
template <int COUT>
__device__ static inline void store_tile(const float acc[MT][NT][4], const float *__restrict__ bias,
                                         float *__restrict__ c, tile_pos tp, int d, int h, int w)
{
    int lane = threadIdx.x & 31, q = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        int row = warp_row<COUT>(q, mt);
        int gd = tp.d0 + row / TH_OF(COUT), gh = tp.h0 + row % TH_OF(COUT);
        if (gd >= d || gh >= h)
            continue;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int gw = tp.w0 + (mt & 1) * 16 + g + (e >> 1) * 8;
                int co = warp_channel<COUT>(q) + nt * 8 + 2 * t + (e & 1);
                if (gw < w)
                    c[((((size_t)tp.n * COUT + co) * d + gd) * h + gh) * w + gw] =
                        acc[mt][nt][e] + (bias ? __ldg(bias + co) : 0.0f);
            }
    }
}

#endif
