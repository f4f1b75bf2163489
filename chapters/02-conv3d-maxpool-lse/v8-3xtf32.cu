/*
 * v8: fp32 accuracy back on tensor cores: 3xTF32 (mma.cuh explains the split)
 *
 * Defect of v7: fast and wrong for this tutorial's purpose. Its conv is off by TF32's 2^-11 a
 * product, 570x the fp32 conv's error (rel_l2 2.8e-4 against cuDNN's 4.9e-7); a model that
 * trains in fp32 should not change precision because a kernel was rewritten.
 *
 * Change: each operand split into a TF32 high part and a TF32 remainder; three products per
 * term (lo x hi, hi x lo, hi x hi), the fourth (lo x lo, about 2^-22 of the term) dropped. The
 * kernel is v7's with PASSES = 3 (v7-tf32.cu, conv_3xtf32): 48 mma a tap instead of 16, the
 * split's subtraction, and each tap's three products summed from zero and then added to the
 * running sum with a FADD (mma.cuh says why).
 *
 * Prediction: three times v7's tensor work. If v7 is bound by its loads rather than by the
 * tensor cores, v8 costs less than 3x v7; it must still beat v6's FMAs to be worth it. Error:
 * within 2x of cuDNN's fp32 conv (relative L2 and largest error against the double
 * reference), checked by --test on every awkward shape.
 * Measured (H100, KernelBench shape, the record of 2026-11-27): the conv alone 5.282 ms, 43.9
 * TFLOP/s (1.89x v7's time, 1.12x cuDNN's speed); the whole model 5.472 ms [v8 model_fwd]. Error:
 * rel_l2 2.0e-7, max_abs 8.4e-7, 0.41x and 0.32x cuDNN's; --test finds 0.3-0.55x on every test
 * shape. Summing all 108 taps in the tensor cores' accumulators instead was 7% faster (4.895
 * ms against 5.266, in a run of 2026-11-23 with the previous timer) and 12x less accurate
 * (rel_l2 5.7e-6). Nsight Compute (1x32x16x128x128): tensor pipe 41%
 * busy, 53% of issue slots used, 24% of warps active (2 blocks of 8 warps an SM), 7.2 cycles
 * between a warp's instructions: too few warps to hide the loads and the three dependent
 * products a tap (README: "Why 3xTF32 is not faster here").
 */
#include "model.h"

void v8_launch(const run_ctx *r, int scope)
{
    (void)scope;
    conv_3xtf32(r, r->c_own);
    v5_epilogue_on(r, r->c_own);
}
