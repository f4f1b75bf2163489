/*
 * tf32.cuh: tensor-core products in TF32 and 3xTF32 (chapter 2's implicit GEMM, chapter 3's
 * v14 to v16), CUDA, header only, sm_80 and up.
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
 * TF32: a tensor core reads a float's sign, 8 exponent bits and only the top 10 of its 23
 * mantissa bits (cvt.rna.tf32.f32 rounds to them): each operand is off by up to 2^-11 = 4.9e-4
 * of itself, so a product of two rounded operands is off by up to about 2^-10 = 9.8e-4
 * ((1 + 2^-11)^2 - 1), where fp32's product is off by at most 2^-24 = 6e-8; the sums stay fp32.
 * 3xTF32: split each float a into a_hi = tf32(a) and a_lo = a - a_hi (exact in fp32). a_hi holds
 * the top 11 significant bits; the tensor core reads a_lo's top 11, the next 11 of a, so a_hi +
 * a_lo is a to about 2^-21 relative. (a_lo is passed as it is, not rounded with a second cvt.rna:
 * the core then truncates it, an error of 2^-10 of a_lo, 2^-21 of a, and the instruction saved
 * made chapter 2's v8 conv 7% faster with the same measured error, rel_l2 2.1e-7, at
 * 2x32x32x128x128 on the H100.) Then
 *     a b = a_hi b_hi + a_hi b_lo + a_lo b_hi + a_lo b_lo
 * and the last product, about 2^-22 of a b, is left out: each product is then within about
 * 1.25 x 2^-20 of the exact one (2^-21 for each factor's truncated a_lo or b_lo, 2^-22 for the
 * dropped term), 20 times fp32's own rounding (2^-24), and a sum of many lands near
 * fp32's accuracy (chapter 2's v8: rel_l2 2.1e-7). (NVIDIA's CUTLASS calls this "3xTF32"; the
 * split is the classic one of Dekker, "A floating-point technique for extending the available
 * precision", 1971.) The small products go first, so they are added while the accumulator is still small.
 */
#ifndef COMMON_TF32_CUH
#define COMMON_TF32_CUH

#include <stdint.h>

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

/* split_tf32 with the rounding done by hand (chapter 3's v14 and v15): hi = v rounded to its top 11
 * significant bits, ties away from zero as cvt.rna (add half of the 13 dropped bits' weight,
 * then clear them), lo = v - hi; 3 instructions where cvt.rna.tf32.f32 compiles to 5 on sm_90.
 * Finite inputs below 2^128 (1 - 2^-12) only: above that, hi overflows to infinity. */
__device__ static inline void split_fast(float v, uint32_t *hi, uint32_t *lo)
{
    *hi = (__float_as_uint(v) + 0x1000u) & 0xffffe000u;
    *lo = __float_as_uint(v - __uint_as_float(*hi));
}

/* split_fast without the rounding (chapter 3's v16, for A only): hi = v with its 13 low
 * mantissa bits cleared, lo = v - hi (exact: hi and v share sign and exponent); 2 instructions,
 * one fewer on each value's dependent chain. The price is precision: |lo| < 2^-10 |v| instead
 * of 2^-11, so the core's truncation of lo costs up to 2^-20 of v instead of 2^-21, and a
 * product with a B split by split_tf32 is within about 2^-19 of the exact one (the three terms:
 * 2^-20, 2^-21 and the dropped lo lo's 2^-21), 32 times fp32's rounding (2^-24), where two
 * rounded splits give 1.25 x 2^-20 (20 times). Finite inputs; an infinity gives lo = NaN. */
__device__ static inline void split_trunc(float v, uint32_t *hi, uint32_t *lo)
{
    *hi = __float_as_uint(v) & 0xffffe000u;
    *lo = __float_as_uint(v - __uint_as_float(*hi));
}

#endif
