/*
 * mma.cuh: the implicit GEMM's tile on tensor cores (v7, v8, v9, b3), after igemm.cuh
 *
 * A tensor core multiplies small matrices a warp holds in registers. The instruction here is
 * PTX's mma.sync.m16n8k8 with TF32 inputs (sm_80 and up): D (16 x 8, fp32) = A (16 x 8) B (8 x 8)
 * + C, 2048 FLOP an instruction, issued by all 32 lanes together. Each lane holds a fixed piece
 * of each matrix (the "fragment" layout, PTX ISA, "Matrix Fragments for mma.m16n8k8"). With
 * g = lane / 4 (the group, 0 .. 7) and t = lane % 4 (the thread in the group, 0 .. 3):
 *
 *     A, 4 registers:  a0 = A[g][t]     a1 = A[g + 8][t]     a2 = A[g][t + 4]   a3 = A[g + 8][t + 4]
 *     B, 2 registers:  b0 = B[t][g]     b1 = B[t + 4][g]
 *     C, D, 4 floats:  c0 = C[g][2t]    c1 = C[g][2t + 1]    c2 = C[g + 8][2t]  c3 = C[g + 8][2t + 1]
 *
 * Here A's rows are positions, its columns (the k of the GEMM) the 8 input channels of a chunk
 * at one tap, B's columns output channels. Ordering k as (tap, channel) instead of PyTorch's
 * (channel, tap) is free (a sum does not care) and makes every fragment a plain strided read:
 * a0 of lane (g, t) is the patch at position g of channel t, so a warp's 32 reads hit 8
 * adjacent positions of 4 channels, CS = 840 floats apart, = 8 banks apart: conflict free
 * (igemm.cuh). B's reads, 8 output channels g of 4 input channels t, are WS = 72 floats apart
 * along g's row and 27 rows (27 x 72 = 24 mod 32 banks) apart across t: banks 24 t + g (mod 32),
 * all 32 different.
 *
 * TF32: a tensor core reads a float's sign, 8 exponent bits and only the top 10 of its 23
 * mantissa bits (cvt.rna.tf32.f32 rounds to them). Each product then carries a relative error
 * up to 2^-11 = 4.9e-4 instead of fp32's 6e-8; the sums stay fp32.
 * 3xTF32: split each float a into a_hi = tf32(a) and a_lo = a - a_hi (exact in fp32). a_hi holds
 * the top 11 significant bits; the tensor core reads a_lo's top 11, the next 11 of a, so a_hi +
 * a_lo is a to about 2^-21 relative. (a_lo is passed as it is, not rounded with a second
 * cvt.rna: the core then truncates it, an error of 2^-10 of a_lo, 2^-21 of a, and the
 * instruction saved made v8's conv 7% faster with the same measured error, rel_l2 2.1e-7, at
 * 2x32x32x128x128 on the H100.) Then
 *     a b = a_hi b_hi + a_hi b_lo + a_lo b_hi + a_lo b_lo
 * and the last product, about 2^-22 of a b, is below fp32's own rounding of the sum: three
 * tensor-core products give an fp32-accurate one. (NVIDIA's CUTLASS calls this "3xTF32"; the
 * split is the classic one of Dekker, "A floating-point technique for extending the available
 * precision", 1971.) The small products go first, so they are added while the accumulator is
 * still small.
 *
 * The block's 8 warps: warp q computes 64 positions (tile rows 2 (q % 4) and 2 (q % 4) + 1,
 * 32 columns each: four m16 pieces) by 32 channels (32 (q / 4) ..: four n8 pieces): 16 mma
 * tiles, 64 accumulators a lane. Per tap a warp reads 16 A and 8 B values a lane and issues 16
 * mma (TF32) or 48 (3xTF32).
 */
#ifndef CH02_MMA_CUH
#define CH02_MMA_CUH

#include <stdint.h>

#include "igemm.cuh"

#define MT 4 /* m16 pieces a warp */
#define NT 4 /* n8 pieces a warp */

/* fp32 -> TF32, round to nearest (ties away): the value's top 10 mantissa bits, in a 32-bit register */
__device__ static inline uint32_t to_tf32(float v)
{
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
    return r;
}

/* d += a b on the tensor cores, one m16n8k8 TF32 product with fp32 accumulation */
__device__ static inline void mma_tf32(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* a float split for 3xTF32: hi = tf32(v), lo = the remainder as it is (see above) */
__device__ static inline void split_tf32(float v, uint32_t *hi, uint32_t *lo)
{
    *hi = to_tf32(v);
    *lo = __float_as_uint(v - __uint_as_float(*hi));
}

/* acc += a b in 3xTF32: the three products (lo hi, hi lo, hi hi) summed from 0, then added to
 * acc with one FADD each. A tensor core adds with truncation to about fp32's precision of the
 * largest addend (Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of NVIDIA tensor
 * cores", 2021); summing every k in the mma's accumulator would let those errors, all of one
 * sign, grow with the running sum. */
__device__ static inline void mma_3xtf32(float acc[4], const uint32_t a_hi[4],
                                         const uint32_t a_lo[4], const uint32_t b_hi[2],
                                         const uint32_t b_lo[2])
{
    float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma_tf32(part, a_lo, b_hi);
    mma_tf32(part, a_hi, b_lo);
    mma_tf32(part, a_hi, b_hi);
#pragma unroll
    for (int e = 0; e < 4; e++)
        acc[e] += part[e];
}

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
