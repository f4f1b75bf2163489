/*
 * v8: fp32 accuracy back on tensor cores: 3xTF32 (common/tf32.cuh explains the split)
 *
 * Defect of v7: fast and wrong for this tutorial's purpose. Its conv is off by TF32's 2^-10 a
 * product, 570x the fp32 conv's error (rel_l2 2.8e-4 against cuDNN's 4.9e-7); a model that
 * trains in fp32 should not change precision because a kernel was rewritten.
 *
 * Change: each operand split into a TF32 high part and the remainder; three products per term
 * (lo x hi, hi x lo, hi x hi), the fourth (lo x lo, about 2^-22 of the term) dropped. The
 * kernel is v7's with PASSES = 3 (07-v7-tf32.cu, conv_3xtf32): 48 mma a tap instead of 16, the
 * split's subtraction, and each tap's three products summed from zero and then added to the
 * running sum with a FADD (tf32.cuh's mma_3xtf32 says why).
 * Tried: summing all 108 taps in the tensor cores' accumulators, 7% faster and 12x less
 * accurate, lost (LABBOOK.md).
 *
 * Prediction: three times v7's tensor work. If v7 is bound by its loads rather than by the
 * tensor cores, v8 costs less than 3x v7; it must still beat v6's FMAs to be worth it. Error:
 * within 2x of cuDNN's fp32 conv (relative L2 and largest), checked by --test on every shape.
 * Measured (H100, KernelBench shape): the whole model 5.47 ms [v8 model_fwd], 63.3% of the floor
 * [v8 model_fwd pct_floor], 0.55x v7 [v7/v8 model_fwd] and 1.16x v6 [v6/v8 model_fwd]; the conv
 * alone rel_l2 2.0e-7, 0.41x cuDNN's (0.3-0.55x on every test shape). Less than 3x v7's time,
 * as predicted, and ahead of v6, but far from v7: two blocks of 8 warps an SM are too few to
 * hide the loads and the three dependent products a tap (README: "Why 3xTF32 is not faster").
 */
#include "model.h"

void v8_launch(const run_ctx *r, int scope)
{
    (void)scope;
    conv_3xtf32(r, r->c_own);
    v5_epilogue_on(r, r->c_own);
}
