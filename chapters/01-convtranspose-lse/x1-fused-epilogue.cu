/*
 * x1, an exercise: write the fused epilogue
 *
 * What to write: the kernel x1_epilogue and its launcher, between the two marker lines below.
 * The kernel computes, for every output position, y = clamp(z sigmoid(z + 3) / 6 - b, -1, 1)
 * with z = logsumexp over the 16 channels of the conv output, reading c once and writing y once.
 *
 * Shapes and layout: c is N x 16 x S floats (S = OD OH OW positions a sample, r->sh.s), so the
 * value of channel ch at position p of sample n is c[(n * 16 + ch) * S + p]; y is N x S, position
 * i = n S + p at y[i]; b is one float in device memory. n_pos = N S (out_elems). Take one output
 * position a thread, so that a warp's 32 threads read 32 adjacent floats of each channel plane
 * (128 contiguous bytes: coalesced). Subtract the max before the exps (the stable logsumexp:
 * --test plants conv outputs near +100, where exp overflows float, and near -100), and finish
 * with tail.cuh's tail_accurate(z, b). In the whole-model scope (SCOPE_MODEL_FWD) the launcher
 * first runs the conv, conv_forward(r), which writes r->c; in the epilogue scope r->c is given.
 *
 * What the harness checks, once the hx_not_written line is gone: `build/ch01 --test --version x1`
 * runs it on every test shape, with b inside and astride the clamp and with extreme values,
 * against the float64 reference (relative L2 1e-5, max abs 1e-4), twice, and the two runs must
 * give the same bits; `build/ch01 --version x1` times it at the KernelBench shape beside the
 * floor. Hint: v2 (02-v2-fused-epilogue.cu) solves it; v7 solves it faster.
 */
#include "model.h"
#include "tail.cuh"

/* x1: begin */
__global__ void x1_epilogue(const float *__restrict__ c, const float *__restrict__ b,
                            float *__restrict__ y, int n_pos, int s)
{
}

void x1_launch(const run_ctx *r, int scope)
{
    if (hx_not_written("v2"))
        return;
}
/* x1: end */
