/*
 * x1 (exercise): the fused epilogue, c read once
 *
 * Write the kernel that does v1's pool, logsumexp and relu kernels' work in one pass. c is the
 * conv output, N x 64 x D x H x W float32, NCDHW: element (n, ch, d, h, w) at
 * (((n * 64 + ch) * D + d) * H + h) * W + w. y is N x 1 x D/2 x H/2 x W/2: for each output
 * position (n, pd, ph, pw), the max of each channel's 2x2x2 window (planes 2pd, 2pd + 1, rows
 * 2ph, 2ph + 1, columns 2pw, 2pw + 1), the logsumexp z of those 64 maxima, and y = max(0, z).
 * Pooling floors: an odd D, H or W drops its last plane, row or column, which no window reads.
 * Read c once: keep a running max m and a running sum s of exp(p - m) as the channels go by
 * (the online logsumexp: when p > m, s = s exp(m - p) + 1 and m = p; else s = s + exp(p - m)),
 * not a max pass and then a sum pass. The launcher below starts a grid of 256-thread blocks;
 * give a thread one position at a time, positions flattened as (n, pd, ph, pw), in a
 * grid-stride loop. window.cuh (load_window, max8, window_base) and common/lse.cuh
 * (lse_online) are there to use, or write your own.
 *
 * Check it: make -j2 build/ch02, then build/ch02 --test --version x1 (every test shape, odd
 * extents and W not a multiple of 4 among them, with extreme values; each element against the
 * float64 reference, the output poisoned before each run), then build/ch02 --version x1 for its
 * time at the KernelBench shape, beside v3's 0.354 ms [v3 epilogue_fwd] and v4's 0.192 ms
 * [v4 epilogue_fwd]. Until the hx_not_written line is deleted the harness reports x1 as not
 * written yet. Hint: 04-v4-online-lse.cu solves it; 03-v3-fused-window.cu is the two-pass form.
 */
#include "lse.cuh"
#include "model.h"
#include "window.cuh"

/* x1: begin */
/* y[i] for output position i = (n, pd, ph, pw) flattened, n_pos = N (D/2) (H/2) (W/2) of them;
 * c and d, h, w: the conv output and its extents */
__global__ void x1_epilogue(const float *__restrict__ c, float *__restrict__ y, int n_pos, int d,
                            int h, int w)
{
    /* yours to write */
}

void x1_launch(const run_ctx *r, int scope)
{
    if (hx_not_written("v4")) return; /* delete this line once x1_epilogue is written */
    const shape *s = &r->sh;
    int n = (int)out_elems(s);
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    x1_epilogue<<<grid_for(n, 256, r->sm_count), 256>>>(r->c, r->y, n, s->d, s->h, s->w);
}
/* x1: end */
