/*
 * v7: v4 without its 16-byte loads: a thread per position again, and nothing else of v2's
 *
 * Defect of v4 (0.368 ms [v4 epilogue_fwd], 97.6% of the copy ceiling
 * [v4 epilogue_fwd pct_ceiling]; torch.compile's 0.411 [compile epilogue_fwd] 12% slower
 * [compile vs v4 epilogue_fwd]): its four positions a thread buy 16-byte loads, but on planes that
 * start off a 16-byte boundary three channels in four need two float4 a thread, the second usually
 * an L1 hit. A warp asks L1 for 1.75 float4 a thread per 16 bytes it needs, and the online
 * logsumexp puts a compare and a select in front of every value's exp. v2, which v4 replaced, had
 * three defects at once (an integer division per position, accurate expf/logf, a grid-stride loop
 * over a grid sized to the SMs); v4 fixed all three along with the loads, so how much of v2 -> v4's
 * 13% (0.416 [v2 epilogue_fwd] -> 0.368 ms [v4 epilogue_fwd]) the loads bought was never measured.
 * Change: v2's layout, one position a thread, each channel one 4-byte load through the read-only
 * path (__ldg; a warp reads 128 contiguous bytes of a plane: coalesced without any alignment),
 * with v4's other fixes: a sample per blockIdx.y (no division), the fast intrinsics, a grid that
 * covers the tensor once. The 16 loads are independent, so the two-pass logsumexp (max, then 16
 * exps) costs no wait. Blocks of 1024 threads (__launch_bounds__ lets the compiler plan for
 * them: 32 registers, two blocks an SM, full occupancy).
 * Prediction: the bytes are v4's, 1.071 GB against the 0.359 ms [v4 epilogue_fwd floor_ms] floor,
 * so only the distance to the ceiling can move. This version was found by measuring, not foreseen;
 * the arithmetic after the fact: scalar coalesced loads ask L1 for 1.23 sectors per sector of data
 * (below), v4 for 1.81, so if L1 requests are what keep v4 2.4% from the ceiling, v7 closes part of
 * that.
 * Measured: 0.3594 ms [0.3577 - 0.3600] [v7 epilogue_fwd median_ms min_ms max_ms], 2980 GB/s
 * [v7 epilogue_fwd], 99.9% of the copy ceiling [v7 epilogue_fwd pct_ceiling], against v4's 0.3677
 * [v4 epilogue_fwd] in the same run: 2.3% faster [v7 vs v4 epilogue_fwd], the ranges apart.
 * torch.compile's 0.4113 ms [compile epilogue_fwd] (recorded in the same lease) is 14.4% slower
 * [compile vs v7 epilogue_fwd], the ranges apart. Under the 0.36 ms target, by 0.2%; the floor is
 * 0.359 [v7 epilogue_fwd floor_ms], 0.1% away (99.9% [v7 epilogue_fwd pct_floor]); ncu (below)
 * finds DRAM 88.7% busy.
 * The form was chosen from measurements side by side. Commit be13152: blocks of 256 threads 0.372,
 * of 128 0.375; the online logsumexp instead of two passes 0.373; two positions a thread with
 * 8-byte loads 0.381. So v4's 16-byte loads were not what took v2's 0.416 ms [v2 epilogue_fwd] to
 * 0.368 [v4 epilogue_fwd]: the division, the accurate exp and log, and the grid-stride loop were.
 * Commit cbcb2da, three interleaved rounds: blocks of 512 (v7's size until then) 0.3692-0.3695, of
 * 1024 0.3676-0.3678, of 256 0.3715; a 0.4% step, less than one run's min-to-max spread, but the
 * same sign in every round, so 1024 it is. Re-measured with the clean-L2 timer (the code of commit
 * 29662c6, three interleaved rounds of 30 repetitions): 1024 0.3588-0.3593, 512 0.3606-0.3611, 1024
 * below 512 by about 1.8 us (0.5%) in every round. Every cache hint was slower (cbcb2da): streaming
 * loads (__ldcs) 0.3803, an L2 evict_first policy 0.3804, with L1::no_allocate 0.3842, a 256-byte
 * L2 prefetch 0.3833; streaming stores of y 0.3697, a tie.
 * ncu, the kernel alone at the KernelBench shape (ncu's clocks): blocks of 1024, 360.1 us, DRAM
 * 88.7% busy, 1.01 GB read, 82% of the warp slots occupied. Blocks of 512 (commit 955323d),
 * against v4: v4 asks L1 for 57.0 M sectors of global loads, 1.81x the 31.5 M that 1.008 GB is
 * (48% hit in L1, the second float4s), v7 for 38.9 M, 1.23x (a warp's 128 bytes off a 32-byte
 * boundary touch five sectors, not four); v7 issues 99.9 M warp instructions against v4's 137.6
 * M (issue slots 33% busy against 45%), waits 19.8 cycles an issue on loads against 28.7, and
 * keeps DRAM 88.2% busy against 86.4%: 362 against 370 us.
 */
#include "model.h"
#include "tail.cuh"

#define V7_BLOCK 1024

__global__ void __launch_bounds__(V7_BLOCK)
    v7_epilogue_per_position(const float *__restrict__ c, const float *__restrict__ b,
                             float *__restrict__ y, int s)
{
    int n = blockIdx.y;
    int p = blockIdx.x * V7_BLOCK + threadIdx.x;
    if (p >= s)
        return;
    const float *src = c + n * C_OUT * s + p;
    float v[C_OUT];
#pragma unroll
    for (int ch = 0; ch < C_OUT; ch++)
        v[ch] = __ldg(src + ch * s);
    float m = v[0];
#pragma unroll
    for (int ch = 1; ch < C_OUT; ch++)
        m = fmaxf(m, v[ch]);
    float sum = 0.0f;
#pragma unroll
    for (int ch = 0; ch < C_OUT; ch++)
        sum += EXP_FAST(v[ch] - m);
    y[n * s + p] = tail_fast(m + LOG_FAST(sum), *b);
}

void v7_epilogue(const run_ctx *r)
{
    dim3 grid((r->sh.s + V7_BLOCK - 1) / V7_BLOCK, r->sh.n);
    v7_epilogue_per_position<<<grid, V7_BLOCK>>>(r->c, r->b, r->y, r->sh.s);
}

void v7_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    v7_epilogue(r);
}
