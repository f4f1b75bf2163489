/*
 * v2: v1 with cuDNN's pooling, the library baseline for the pool
 *
 * Defect of v1: its pool is a naive kernel of ours; would a library's do better? Change: the
 * pool by cudnnPoolingForward (its descriptors are set up in problem.cu), then v1's logsumexp
 * and relu kernels.
 * Prediction: the same bytes as v1 (0.68 GB), so the same time, or better if cuDNN's pool loads
 * its windows more efficiently than the naive one.
 * Measured (H100, KernelBench shape): 0.269 ms [v2 epilogue_fwd], 67.7% of the floor
 * [v2 epilogue_fwd pct_floor], 0.95x v1 [v1/v2 epilogue_fwd]: 6% slower [v2 vs v1 epilogue_fwd].
 * The library's pool buys nothing; what is left comes from fusing the ops (v3).
 */
#include "model.h"

void v2_launch(const run_ctx *r, int scope)
{
#if HAVE_CUDNN /* the version table marks v2 NEEDS_CUDNN: a build without it never calls this */
    const float one = 1.0f, zero = 0.0f;
    const lib_ctx *cc = r->lib;
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    CUDNN_CHECK(cudnnPoolingForward(cc->conv.handle, cc->pool_desc, &one, cc->conv.y_desc, r->c,
                                    &zero, cc->p_desc, r->p));
    lse_relu_naive(r);
#else
    (void)r, (void)scope;
#endif
}
