/*
 * v5: four outputs a thread, 16-byte loads
 *
 * Defect of v4 (95% of the ceiling [v4 epilogue_fwd pct_ceiling]): a float2 per row per window, 4
 * loads of 8 bytes for 32 bytes, and its index arithmetic once per output. Change: each thread
 * takes 4 adjacent outputs along W: per channel and row, columns 8t .. 8t+7, two 16-byte loads.
 * Aligned when W is a multiple of 4 (rows then start on 16 bytes and 8t is a multiple of 4); other
 * W, and a last group of fewer than 4 outputs, take v4's per-window path.
 * Bytes in flight: 8 loads of 16 bytes per channel per thread; with the channel loop unrolled
 * twice, 256 bytes a thread. At the KernelBench shape a row has 16 groups, so a block is one
 * warp with 16 working lanes; at 32 blocks an SM that is 512 threads, 128 KB per SM, still far
 * above the ~16 KB that 3 TB/s needs at about 700 ns of DRAM latency (Little's law: 3e12 B/s x
 * 7e-7 s / 132 SMs). The limit is elsewhere: instructions per byte, and the tail.
 * Prediction: a quarter of v4's load instructions and index arithmetic; v4's 5% gap to the
 * ceiling halves: about 97% of it, 0.19 ms.
 * Measured (H100): 0.177 ms [v5 epilogue_fwd], 102.6% of the floor [v5 epilogue_fwd pct_floor],
 * 1.08x v4 [v4/v5 epilogue_fwd], 1.54x [compile/v5 epilogue_fwd] torch.compile's 0.274 ms
 * [compile epilogue_fwd] (fp32; 1.35x [compile epilogue_fwd default / v5 epilogue_fwd] its default
 * precision's). Past the prediction, and past the copy ceiling itself: the ceiling is a copy,
 * which writes as many bytes as it reads, and DRAM moves reads alone a little faster; v5 reads
 * 537 MB and writes 1.
 */
#include "lse.cuh"
#include "model.h"
#include "window.cuh"

#define V5_OUT 4

__global__ void v5_epilogue_coarse(const float *__restrict__ c, float *__restrict__ y, int d, int h,
                                   int w)
{
    int pd = d / 2, ph = h / 2, pw = w / 2, sc = d * h * w, s = pd * ph * pw;
    int groups = (pw + V5_OUT - 1) / V5_OUT;
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int row_id = blockIdx.y; /* (n, pd, ph) flattened */
    if (t >= groups)
        return;
    int y0 = row_id % ph, r = row_id / ph, z0 = r % pd, n = r / pd;
    int x0 = t * V5_OUT;
    int base = n * C_OUT * sc + (2 * z0 * h + 2 * y0) * w + 2 * x0;
    float m[V5_OUT], sum[V5_OUT];
#pragma unroll
    for (int k = 0; k < V5_OUT; k++)
        m[k] = -INFINITY, sum[k] = 0.0f;
    if ((w & 3) == 0 && x0 + V5_OUT <= pw) {
#pragma unroll 2
        for (int ch = 0; ch < C_OUT; ch++) {
            float v[V5_OUT][8];
#pragma unroll
            for (int rr = 0; rr < 4; rr++) {
                const float4 *row =
                    reinterpret_cast<const float4 *>(c + base + ch * sc + ((rr >> 1) * h + (rr & 1)) * w);
                float4 a = __ldg(row), b = __ldg(row + 1);
                v[0][2 * rr] = a.x, v[0][2 * rr + 1] = a.y, v[1][2 * rr] = a.z, v[1][2 * rr + 1] = a.w;
                v[2][2 * rr] = b.x, v[2][2 * rr + 1] = b.y, v[3][2 * rr] = b.z, v[3][2 * rr + 1] = b.w;
            }
#pragma unroll
            for (int k = 0; k < V5_OUT; k++) {
                int arg;
                lse_online(max8(v[k], &arg), &m[k], &sum[k]);
            }
        }
    } else { /* W not a multiple of 4, or the row's last, partial group: v4's path */
        for (int ch = 0; ch < C_OUT; ch++)
            for (int k = 0; k < V5_OUT && x0 + k < pw; k++) {
                float v[8];
                int arg;
                load_window(c, base + ch * sc + 2 * k, h, w, v);
                lse_online(max8(v, &arg), &m[k], &sum[k]);
            }
    }
    float *yr = y + n * s + (z0 * ph + y0) * pw;
#pragma unroll
    for (int k = 0; k < V5_OUT; k++)
        if (x0 + k < pw) {
            float z = m[k] + __logf(sum[k]);
            yr[x0 + k] = z > 0.0f ? z : 0.0f;
        }
}

void v5_epilogue_on(const run_ctx *r, const float *c)
{
    const shape *s = &r->sh;
    int groups = (s->pw + V5_OUT - 1) / V5_OUT;
    int block = groups >= 128 ? 128 : ((groups + 31) / 32) * 32;
    dim3 grid((groups + block - 1) / block, s->n * s->pd * s->ph);
    v5_epilogue_coarse<<<grid, block, 0, r->stream>>>(c, r->y, s->d, s->h, s->w);
}

void v5_epilogue(const run_ctx *r) { v5_epilogue_on(r, r->c); }

void v5_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    v5_epilogue(r);
}
