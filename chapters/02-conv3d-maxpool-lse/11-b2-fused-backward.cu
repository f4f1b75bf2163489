/*
 * b2: the fused backward, c read once more and dc written once
 *
 * Defect of b1: the saved tensors (p, indices: 134 MB written and read), dp's round trip, and a
 * separate memset of the 537 MB dc before a scattered write into it (0.816 ms
 * [b1 epilogue_fwdbwd], 1.50x the floor [b1 epilogue_fwdbwd median_ms/floor_ms]).
 * Change: one kernel after v5's forward: a thread per output position recomputes, channel by
 * channel, the window max, its argmax and the online logsumexp; the 64 pooled values and
 * argmaxes wait in shared memory, one column per thread (thread t reads and writes word t of
 * each row: no bank conflicts), until z is known. Then it writes each channel's whole window,
 * dp at the argmax and 0 elsewhere, as float2 stores (a warp: 64 adjacent floats per row), and
 * the zeros of the rows and columns no window covers. No memset, no scatter: dc is written once.
 * Tried: the 64 values and argmaxes in registers (161 registers, 12 warps an SM): slower than
 * b1, lost (LABBOOK.md). Shared memory costs 320 bytes a thread and gives the registers back
 * for warps that hide the loads.
 * Prediction: read c, write dc: 1.07 GB, 0.36 ms; with v5's forward 0.54 ms, the floor.
 * Measured (H100, KernelBench shape): 0.564 ms [b2 epilogue_fwdbwd] for v5 + this, 96.8% of the
 * floor [b2 epilogue_fwdbwd pct_floor], 1.45x b1 [b1/b2 epilogue_fwdbwd], 1.95x torch.compile
 * [compile/b2 epilogue_fwdbwd] (1.10 ms [compile epilogue_fwdbwd]).
 */
#include "lse.cuh"
#include "model.h"
#include "window.cuh"

#define B2_BLOCK 128

__global__ void __launch_bounds__(B2_BLOCK)
    b2_epilogue_backward(const float *__restrict__ c, const float *__restrict__ g,
                         float *__restrict__ dc, int n_pos, int d, int h, int w)
{
    __shared__ float s_p[C_OUT][B2_BLOCK];
    __shared__ unsigned char s_a[C_OUT][B2_BLOCK];
    int i = blockIdx.x * blockDim.x + threadIdx.x, t = threadIdx.x;
    if (i >= n_pos)
        return; /* no barrier follows: the shared memory is each thread's own column */
    int pd = d / 2, ph = h / 2, pw = w / 2, sc = d * h * w;
    int x0 = i % pw, y0 = (i / pw) % ph, z0 = (i / (pw * ph)) % pd;
    int base = window_base(i, d, h, w);
    float m = -INFINITY, sum = 0.0f;
#pragma unroll 4
    for (int ch = 0; ch < C_OUT; ch++) {
        float v[8];
        int a;
        load_window(c, base + ch * sc, h, w, v);
        float pv = max8(v, &a);
        s_p[ch][t] = pv;
        s_a[ch][t] = (unsigned char)a;
        lse_online(pv, &m, &sum);
    }
    float z = m + __logf(sum);
    float dz = z > 0.0f ? g[i] : 0.0f;
    /* this thread's share of dc: its window, plus the rows and columns after it that no window
     * covers when it is the last along an odd extent */
    int ed = z0 == pd - 1 ? d - 2 * z0 : 2, eh = y0 == ph - 1 ? h - 2 * y0 : 2;
    int extra_col = x0 == pw - 1 && (w & 1);
#pragma unroll 2
    for (int ch = 0; ch < C_OUT; ch++) {
        float dp = dz * __expf(s_p[ch][t] - z);
        int a = s_a[ch][t];
        for (int dd = 0; dd < ed; dd++)
            for (int dh = 0; dh < eh; dh++) {
                float *row = dc + base + ch * sc + (dd * h + dh) * w;
                int q = dd * 4 + dh * 2, inside = dd < 2 && dh < 2;
                float v0 = inside && a == q ? dp : 0.0f, v1 = inside && a == q + 1 ? dp : 0.0f;
                if ((w & 1) == 0)
                    *reinterpret_cast<float2 *>(row) = make_float2(v0, v1);
                else
                    row[0] = v0, row[1] = v1;
                if (extra_col)
                    row[2] = 0.0f;
            }
    }
}

void epilogue_backward_on(const run_ctx *r, const float *c)
{
    const shape *s = &r->sh;
    int n = (int)out_elems(s);
    b2_epilogue_backward<<<(n + B2_BLOCK - 1) / B2_BLOCK, B2_BLOCK, 0, r->stream>>>(
        c, r->g, r->dc, n, s->d, s->h, s->w);
}

void epilogue_backward(const run_ctx *r) { epilogue_backward_on(r, r->c); }

void b2_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_TRAIN)
        conv_forward(r);
    v5_epilogue(r);
    epilogue_backward(r);
    if (scope == SCOPE_TRAIN)
        lib_dx(r), lib_dw(r), own_dbias(r);
}
