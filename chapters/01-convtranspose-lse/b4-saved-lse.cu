/*
 * b4: save z in the forward, so that the backward streams: what torch.compile does
 *
 * Defect of b2 (1.282 ms for forward + backward, 1.186 for torch.compile): b2's backward
 * recomputes z from c, so a thread must hold all 16 channels of its 4 positions (64 values)
 * before it can write the first dc. 80 registers, 37% occupancy, and 22.9 cycles an
 * instruction stalled on loads (ncu, commit 67d6ee5): its kernel moves c, g and dc at 73.7% of
 * DRAM's peak.
 *
 * What torch.compile does instead (its generated code, TORCH_LOGS=output_code, PyTorch 2.11 on
 * the H100, at the KernelBench shape): the forward kernel writes z as well as y, 63 MB (its
 * planes padded from 3969 to 4000 floats); the backward is two small reduction kernels for db
 * (over z, b and g) and one pointwise kernel over all 252 million elements of dc:
 *     dc[n][ch][p] = dL/dz[n][p] exp(c[n][ch][p] - z[n][p])
 * reading z and g with evict_last (each is read by 16 channels) and c once. Nothing is held:
 * the kernel runs at full occupancy, as a copy does.
 *
 * Change: v4's forward writes z too (v4-float4-online-lse.cu, SAVE_Z). The backward: a thread
 * takes 4 positions as v4 does (load4.cuh), reads their z and g, forms dL/dz (reference.cu's
 * chain rule) and its share of db, then streams the 16 channels: load c, write
 * dL/dz exp(c - z). Five values a position live across the channel loop instead of 16. db is
 * summed per block into a partial (common/reduce.cuh's block_sum) and the partials in a fixed
 * order, as in b2: deterministic, no atomics, and one kernel fewer than torch.compile's three.
 *
 * Prediction: the bytes grow by z, written once and read once: 2 x 63 MB on b2's 3.15 GB, 3.34
 * GB, a floor of 1.12 ms at the ~2990 GB/s copy ceiling (b2's is 1.05: saving costs 6%). If
 * both kernels stream at v4's 95% of the ceiling, about 1.18 ms: level with torch.compile, 8%
 * ahead of b2.
 * Measured (H100, KernelBench shape, 2026-11-23; each against b2 in the same run, on a
 * machine that ran b2 at 1.30-1.31 ms against the recorded 1.282), three designs:
 *   1. a thread per 4 positions as in b2, z and g read once, then the 16 channels streamed in
 *      batches of 4 (load4, 4 scalar stores a channel): 1.900 ms (b2 1.304). Its backward
 *      kernel 1.47 ms, DRAM 45% of peak, 62% of warps active.
 *   2. the kernel below with z and g gathered element by element and IEEE divisions: 1.672 ms
 *      (b2 1.301); backward 1.43 ms, DRAM 44%, 95% of warps active: not memory-bound.
 *   3. the kernel below (aligned float4 of c and dc, load4 for z and g, fast division):
 *      1.339 ms (b2 1.312); backward 0.911 ms, DRAM 70%, 86% of issue slots busy. The
 *      forward saving z: 0.422 ms, DRAM 80%.
 * Lost: design 3 is 2% behind b2. It computes the tail's gradient (two exps, a division) for
 * each of the 16 elements of a position, as torch.compile's kernel does; with our instruction
 * mix that makes it issue-bound before it is memory-bound. Not kept (the chapter README's
 * Tried list).
 */
#include "load4.cuh"
#include "model.h"
#include "reduce.cuh"
#include "tail.cuh"

#define B4_BLOCK 256

/* blocks of b4's backward, one db partial each: a thread per 4 elements of dc */
int b4_blocks(int total) { return ((total + 3) / 4 + B4_BLOCK - 1) / B4_BLOCK; }

/* The tail's gradient at one position: dL/dz, and ds = dL/ds (g inside the clamp, else 0).
 * Fast division and a multiply by 1/6: this runs once per element of dc, 16 times a position */
__device__ static inline float tail_dz(float z, float b, float g, float *ds)
{
    const float sixth = 1.0f / 6.0f;
    float t = DIV_FAST(1.0f, 1.0f + EXP_FAST(-(z + 3.0f))), a = z * t * sixth - b;
    *ds = (a >= -1.0f && a <= 1.0f) ? g : 0.0f;
    return *ds * t * (1.0f + z * (1.0f - t)) * sixth;
}

/* Thread i: dc's elements 4i .. 4i + 3 in memory order (one aligned float4 of c and of dc, the
 * last thread's tail scalar), wherever their channel planes begin; their z and g with load4
 * (16 channels read each: L2 and L1 hits), element by element where the four straddle two
 * planes. The elements of channel 0 also add their -ds to db's partial: each position once. */
__global__ void __launch_bounds__(B4_BLOCK)
    k_epilogue_backward_streaming(const float *__restrict__ c, const float *__restrict__ z,
                                  const float *__restrict__ g, const float *__restrict__ b,
                                  float *__restrict__ dc, float *__restrict__ partials, int s,
                                  int total)
{
    int i0 = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    float db_sum = 0.0f, bv = *b;
    if (i0 < total) {
        float v[4], zk[4], gk[4], out[4];
        bool whole = i0 + 4 <= total;
        if (whole) {
            float4 q = __ldg(reinterpret_cast<const float4 *>(c + i0));
            v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
        } else {
            for (int k = 0; k < 4; k++)
                v[k] = i0 + k < total ? c[i0 + k] : 0.0f;
        }
        int row = i0 / s, p = i0 - row * s, n = row / C_OUT; /* row = n C_OUT + ch */
        int zs = total / C_OUT;                               /* z and g: N S floats */
        bool one_plane = whole && p + 4 <= s;
        if (one_plane) {
            load4(z, n * s + p, 0, 4, zs, zk);
            load4(g, n * s + p, 0, 4, zs, gk);
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int rk = row, pk = p + k;
            while (pk >= s) /* the next channel's plane (s < 4 on tiny shapes: maybe more) */
                pk -= s, rk++;
            float ds = 0.0f, dz = 0.0f, zv = 0.0f;
            if (i0 + k < total) {
                int at = (rk / C_OUT) * s + pk;
                zv = one_plane ? zk[k] : __ldg(z + at);
                dz = tail_dz(zv, bv, one_plane ? gk[k] : __ldg(g + at), &ds);
            }
            out[k] = dz * EXP_FAST(v[k] - zv);
            if (rk % C_OUT == 0)
                db_sum -= ds;
        }
        if (whole)
            *reinterpret_cast<float4 *>(dc + i0) = make_float4(out[0], out[1], out[2], out[3]);
        else
            for (int k = 0; k < 4 && i0 + k < total; k++)
                dc[i0 + k] = out[k];
    }
    db_sum = block_sum(db_sum);
    if (threadIdx.x == 0)
        partials[blockIdx.x] = db_sum;
}

void b4_launch(const run_ctx *r, int scope)
{
    (void)scope;
    float *z = r->tmp[0];
    int total = (int)conv_elems(&r->sh), blocks = b4_blocks(total);
    v4_epilogue_saving_z(r, z);
    k_epilogue_backward_streaming<<<blocks, B4_BLOCK>>>(r->c, z, r->g, r->b, r->dc, r->partials,
                                                        r->sh.s, total);
    sum_segments(r->partials, 1, blocks, 1024, r->db); /* db */
}
