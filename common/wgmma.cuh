/*
 * wgmma.cuh: Hopper's warpgroup MMA (wgmma) in TF32, for chapter 2's v10, v11 and b4, chapter 3's
 * v16 to v18 and chapter 5's v8 and b4 (CUDA, header only, sm_90a code: H100, H200).
 *
 * A warpgroup is 4 consecutive warps (128 threads, the first warp's index a multiple of 4).
 * wgmma.mma_async (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate
 * Instructions: wgmma.mma_async") multiplies A (64 x 8) by B (8 x N) into D (64 x N, fp32) for
 * the whole warpgroup in one instruction; N = 8 .. 256 in steps of 8. A comes from registers
 * (warp w of the warpgroup holds rows 16 w .. 16 w + 15 in mma.sync.m16n8k8's A layout,
 * common/tf32.cuh) or from shared memory; B always from shared memory. D is in registers: warp w
 * holds rows 16 w .. 16 w + 15, lane (g = lane / 4, t = lane % 4) the four values
 *     d[4 j] = D[16 w + g][8 j + 2 t]       d[4 j + 1] = D[16 w + g][8 j + 2 t + 1]
 *     d[4 j + 2] = D[16 w + g + 8][8 j + 2 t]   d[4 j + 3] = D[16 w + g + 8][8 j + 2 t + 1]
 * of each group j of 8 columns: mma.sync's m16n8 accumulators side by side.
 *
 * The instruction is asynchronous (PTX ISA, "wgmma.fence", "wgmma.commit_group",
 * "wgmma.wait_group"): it returns at once and the tensor cores read A and B and write D later.
 *   wgmma_fence    before the first wgmma, and before any wgmma whose registers (A, or the
 *                  accumulators D) other instructions have written since the last one
 *   wgmma_commit   the wgmmas issued since the last commit form a group
 *   wgmma_wait<N>  waits until at most N groups are pending: then the others have read their
 *                  shared memory and written their D, which may be read and their shared
 *                  memory rewritten
 * Shared memory that threads wrote with ordinary stores (the generic proxy) must be made
 * visible to the wgmma's reads (the async proxy) with fence.proxy.async (common/hopper.cuh's
 * fence_proxy_async) by the writing threads, then a barrier, before the wgmma issues.
 *
 * TF32 (PTX ISA, "Matrix Data-types"): the tensor cores read an fp32 register or word's sign, 8
 * exponent bits and top 10 mantissa bits, and drop the other 13 (truncation); round values
 * first (cvt.rna.tf32.f32, common/tf32.cuh's to_tf32) for TF32's rounding error. A and B of a
 * .tf32 wgmma in shared memory must be K-major: a row's k contiguous.
 *
 * Shared-memory operands (PTX ISA, "Shared Memory Matrix Layout" and "Matrix Descriptor
 * Format"): without swizzling, a matrix is made of "core matrices" of 8 rows x 16 bytes (4 TF32
 * k), each 128 contiguous bytes (row r at 16 r), 16-byte aligned. A 64-bit descriptor tells the
 * tensor cores where they are:
 *     bits  0-13  the start address (the first core matrix) in shared memory, in 16-byte units
 *     bits 16-29  the leading dimension byte offset (LBO), 16-byte units: from a core matrix to
 *                 the next along K (k 0 .. 3 to k 4 .. 7 of a k8 instruction)
 *     bits 32-45  the stride dimension byte offset (SBO), 16-byte units: from a core matrix to
 *                 the next along M (A) or N (B), rows 0 .. 7 to rows 8 .. 15
 *     bits 49-51  base offset (swizzled layouts only: 0), bits 62-63 swizzle mode (0: none)
 * Adding m to a descriptor moves its start by 16 m bytes (while the address stays below 2^18).
 */
#ifndef COMMON_WGMMA_CUH
#define COMMON_WGMMA_CUH

#include <stdint.h>

/* __CUDA_ARCH_FEAT_SM90_ALL: defined only while nvcc compiles sm_90a code (the architecture-
 * specific Hopper target, -gencode arch=compute_90a,code=sm_90a); wgmma exists nowhere else, so
 * in another build these helpers are absent and the kernels that call them keep their bodies
 * under the same test: empty stubs, whose versions the harness lists as skipped. */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* the descriptor of a no-swizzle K-major operand at shared address p (16-byte aligned): core
 * matrices lbo bytes apart along K, sbo bytes apart along M or N (multiples of 16, below 2^18) */
__device__ static inline uint64_t wgmma_desc(const void *p, unsigned lbo, unsigned sbo)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a & 0x3ffffu) >> 4) | (uint64_t)((lbo & 0x3ffffu) >> 4) << 16 |
           (uint64_t)((sbo & 0x3ffffu) >> 4) << 32;
}

/* wgmma.fence (the instruction takes no operands): for a caller whose accumulators were last
 * written by wgmmas or before the previous fence. Chapter 3's v16 issues it in an asm statement
 * of its own that lists A's registers as operands, so that the compiler computes A first. */
__device__ static inline void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }

/* keeps the compiler from moving a definition or use of v across this point: it does not know
 * that a wgmma reads and writes its accumulator registers after the instruction issues, until
 * wgmma_wait, so without a pin on each accumulator it could move an epilogue's reads above the
 * wait, or a tile's zeroing below the wgmmas that add to it (asm volatile statements keep their
 * order) */
__device__ static inline void wgmma_pin(float &v) { asm volatile("" : "+f"(v)); }

/* the wgmmas issued since the last commit form a group; wait until at most N groups are pending */
__device__ static inline void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;"); }
template <int N> __device__ static inline void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N));
}

/* d (the warpgroup's 64 x 64, fp32) += A (64 x 8, shared memory, descriptor da) B (8 x 64,
 * shared memory, db) in TF32: the SS form (both operands from shared memory). The operands after
 * the descriptors: scale-d, the predicate p set true (the accumulators are added to, not
 * replaced), then imm-scale-a and imm-scale-b, 1 each (A and B not negated). */
__device__ static inline void wgmma_m64n64k8_tf32_ss(float d[32], uint64_t da, uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, p, 1, 1;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db));
}

/* d (the warpgroup's 64 x 32, fp32: d's 16 values a thread as m64n64k8's first 16) += A (64 x 8,
 * shared memory, descriptor da) B (8 x 32, shared memory, db) in TF32: the SS form at N = 32
 * (chapter 2's b4 dx and chapter 5's v8: 32 output channels). It reads A's 2 KB for half the
 * products: 3 KB in 16 cycles at the datasheet's peak, more than shared memory's 128 bytes a
 * cycle deliver, so at this N shared memory binds first. */
__device__ static inline void wgmma_m64n32k8_tf32_ss(float d[16], uint64_t da, uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
                 "%16, %17, p, 1, 1;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "l"(da), "l"(db));
}

/* d (64 x 48) += A (64 x 8) B (8 x 48), both in shared memory, in TF32: the SS form at N = 48
 * (chapter 5's b4, dw: 16 input channels at kw = 0, 1, 2). d's 24 values a thread: groups
 * j = 0 .. 5 of 8 columns. */
__device__ static inline void wgmma_m64n48k8_tf32_ss(float d[24], uint64_t da, uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n48k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
                 "%18, %19, %20, %21, %22, %23}, "
                 "%24, %25, p, 1, 1;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
                   "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
                 : "l"(da), "l"(db));
}

/* d (64 x 96) += A (64 x 8) B (8 x 96), both in shared memory, in TF32: the SS form at N = 96
 * (chapter 2's b4, dw: 32 input channels at 3 taps; chapter 5's b4, dw: 16 input channels at 2
 * row offsets x 3 taps). d's 48 values a thread: groups j = 0 .. 11 of 8 columns, as in the
 * layout above. */
__device__ static inline void wgmma_m64n96k8_tf32_ss(float d[48], uint64_t da, uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n96k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, "
                 "%48, %49, p, 1, 1;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
                   "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
                   "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
                 : "l"(da), "l"(db));
}

/* d (64 x 16) += a (64 x 8, registers: each warp its 16 rows as mma.sync.m16n8k8's A fragment)
 * b (8 x 16, shared memory, descriptor db) in TF32: the RS form (chapter 3's v16) */
__device__ static inline void wgmma_m64n16k8_tf32_rs(float d[8], const uint32_t a[4], uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
#endif

#endif
