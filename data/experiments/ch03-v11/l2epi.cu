/*
 * Experiment (issue 15; temporary, removed in the next commit): chapter 3's epilogue with the
 * sample held in L2 instead of shared memory. A cluster of P blocks a sample; each block streams
 * its slice of all 16 channels from DRAM into registers for the statistics (no shared memory but
 * the partials), exchanges them through distributed shared memory, then reads its slice again for
 * y, expecting L2 hits. H100, KernelBench shape, medians of 50, the chapters' L2 flush (memset of
 * twice the L2; clean=1: the memset then a read of the buffer, L2 left clean), one call:
 *   read of c alone, grid-stride, 1056 x 256 threads: 0.0413 ms (clean 0.0352)
 *   P 8, 256 threads, 4 float4 a lane: 0.0995 (stagger 0), 0.0853 (10 us); L2 evict_last on the
 *   first read, evict_first on the second: 0.0860, 0.0814; 8 float4 a lane 0.0798 (10 us); P 4,
 *   8 float4: 0.0804 - 0.0813; P 16: 0.0834 - 0.1048. v10 in the same call: 0.0676, 0.0678.
 * Why it loses: 62 to 124 clusters are resident at once (registers, not shared memory, limit
 * them), so every sample's first read happens before any second read, and L2 (50 MB) cannot
 * hold the 103 MB between them: the second read comes from DRAM too.
 * Build: nvcc -O3 -std=c++17 -arch=sm_90 l2epi.cu -o l2epi && ./l2epi
 */
// prototype: ch3 epilogue with the sample held in L2 (read from DRAM for statistics, re-read from L2 for y)
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <vector>
#include <algorithm>
namespace cg = cooperative_groups;
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1);} } while (0)
#define C_OUT 16
#define EPS 1e-5f

struct wf { float n, mean, m2; };
__device__ inline wf merge(wf a, wf b) {
    float n = a.n + b.n; if (b.n == 0) return a; if (a.n == 0) return b;
    float d = b.mean - a.mean, f = b.n / n;
    wf r = {n, a.mean + d * f, a.m2 + b.m2 + d * d * a.n * f}; return r;
}
template <int H> __device__ inline float4 ldc(const float4 *p) {
    float4 v;
    if (H) {
        unsigned long long pol;
        if (H == 1) asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
        else asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
        asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.f32 {%0,%1,%2,%3}, [%4], %5;" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p), "l"(pol));
    } else asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}
__host__ __device__ inline int slo(int S, int r, int P) { int q = S / 4; return 4 * (int)((long long)q * r / P); }

// P blocks a sample (cluster), NT threads, each warp (NT/32) takes rows w, w + NW, ...
// K: float4 a lane per row chunk
template <int P, int NT, int K, int HA, int HB>
__global__ void __launch_bounds__(NT) k_l2(const float *__restrict__ c, const float *__restrict__ m, float *__restrict__ y, int S, int wave, int span)
{
    constexpr int NW = NT / 32;
    __shared__ wf part[C_OUT];
    __shared__ float A[C_OUT], B[C_OUT], L[C_OUT];
    cg::cluster_group cl = cg::this_cluster();
    int rank = cl.block_rank(), n = blockIdx.x / P;
    if (span > 0 && n < wave && gridDim.x / P > wave) {
        unsigned long long t0, t, d = (unsigned long long)n * span / wave;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        for (t = t0; t - t0 < d;) { __nanosleep(200); asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); }
    }
    int lo = slo(S, rank, P), len4 = (slo(S, rank + 1, P) - lo) / 4;
    const float *base = c + (size_t)n * C_OUT * S + lo;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int co = w; co < C_OUT; co += NW) {
        const float4 *row = (const float4 *)(base + (size_t)co * S);
        wf acc = {0, 0, 0};
        for (int j0 = 0; j0 < len4; j0 += 32 * K) {
            float4 v[K];
            int cnt = 0;
#pragma unroll
            for (int k = 0; k < K; k++) {
                int j = j0 + lane + 32 * k;
                if (j < len4) { v[k] = ldc<HA>(row + j); cnt += 4; } else v[k] = make_float4(0, 0, 0, 0);
            }
            float s = 0;
#pragma unroll
            for (int k = 0; k < K; k++) s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
            float mu = cnt ? s / cnt : 0.f, q = 0;
#pragma unroll
            for (int k = 0; k < K; k++) if (j0 + lane + 32 * k < len4) {
                float a = v[k].x - mu, b = v[k].y - mu, e = v[k].z - mu, f = v[k].w - mu;
                q += (a * a + b * b) + (e * e + f * f);
            }
            wf t = {(float)cnt, mu, q};
            acc = merge(acc, t);
        }
#pragma unroll
        for (int off = 16; off; off >>= 1) {
            wf o = {__shfl_down_sync(~0u, acc.n, off), __shfl_down_sync(~0u, acc.mean, off), __shfl_down_sync(~0u, acc.m2, off)};
            acc = merge(acc, o);
        }
        if (lane == 0) part[co] = acc;
    }
    cl.sync();
    if (threadIdx.x < C_OUT) {
        int co = threadIdx.x;
        wf acc = {0, 0, 0};
        for (int r = 0; r < P; r++) { wf *p = cl.map_shared_rank(part, r); acc = merge(acc, p[co]); }
        float mm = m[co], var = acc.m2 / acc.n;
        float rs = rsqrtf(mm * mm * var + EPS);
        float a = mm * mm * rs;
        A[co] = a; B[co] = -a * acc.mean; L[co] = fabsf(mm);
    }
    __syncthreads();
    float *yo = y + (size_t)n * S + lo;
    for (int j = threadIdx.x; j < len4; j += NT) {
        float4 r = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
        const float4 *p = (const float4 *)base + j;
#pragma unroll
        for (int co = 0; co < C_OUT; co++) {
            float4 v = ldc<HB>(p + (size_t)co * (S / 4));
            float a = A[co], b = B[co], l = L[co];
            r.x = fmaxf(r.x, fminf(fmaxf(fmaf(v.x, a, b), -l), l));
            r.y = fmaxf(r.y, fminf(fmaxf(fmaf(v.y, a, b), -l), l));
            r.z = fmaxf(r.z, fminf(fmaxf(fmaf(v.z, a, b), -l), l));
            r.w = fmaxf(r.w, fminf(fmaxf(fmaf(v.w, a, b), -l), l));
        }
        __stcs((float4 *)yo + j, r);
    }
    cl.sync();
}

// the read alone: every element once, a sum a block
__global__ void k_read(const float *__restrict__ c, float *out, size_t n4) {
    float s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        float4 v = ldc<0>((const float4 *)c + i); s += v.x + v.y + v.z + v.w;
    }
    if (s == 12345.f) out[0] = s;
}
__global__ void k_readflush(const float4 *p, size_t n4, float *out) {
    float s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) { float4 v = p[i]; s += v.x; }
    if (s == 12345.f) out[0] = s;
}

static void *fbuf; static size_t fbytes; static float *dummy; static int clean;
static void flush() {
    CK(cudaMemsetAsync(fbuf, 0, fbytes));
    if (clean) k_readflush<<<132 * 4, 512>>>((const float4 *)fbuf, fbytes / 16, dummy);
}
template <class F> static void timeit(const char *name, F f, int reps = 50) {
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    for (int i = 0; i < 3; i++) f();
    std::vector<float> t;
    for (int i = 0; i < reps; i++) { flush(); cudaEventRecord(a); f(); cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); t.push_back(ms); }
    CK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    printf("%-34s clean=%d median %.4f ms [%.4f - %.4f]\n", name, clean, t[reps / 2], t[0], t[reps - 1]);
}

template <int P, int NT, int K, int HA, int HB>
static void run(const char *name, const float *c, const float *m, float *y, int N, int S, int span, std::vector<float> &h, const std::vector<double> &ref, int check) {
    auto kern = k_l2<P, NT, K, HA, HB>;
    cudaLaunchConfig_t cfg = {}; cudaLaunchAttribute at[1];
    cfg.gridDim = dim3(N * P); cfg.blockDim = dim3(NT); cfg.dynamicSmemBytes = 0;
    at[0].id = cudaLaunchAttributeClusterDimension; at[0].val.clusterDim.x = P; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
    cfg.attrs = at; cfg.numAttrs = 1;
    if (P > 8) CK(cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    int wave = 0; CK(cudaOccupancyMaxActiveClusters(&wave, kern, &cfg));
    auto f = [&]() { CK(cudaLaunchKernelEx(&cfg, kern, c, m, y, S, wave, span)); };
    char nm[128]; snprintf(nm, sizeof nm, "%s w%d s%d", name, wave, span);
    if (check) {
        CK(cudaMemset(y, 0xff, (size_t)N * S * 4)); f(); CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(h.data(), y, (size_t)N * S * 4, cudaMemcpyDeviceToHost));
        double worst = 0; long bad = 0;
        for (size_t i = 0; i < (size_t)N * S; i++) { double e = fabs(h[i] - ref[i]); if (!(e <= 1e-4)) bad++; if (!(e <= worst)) worst = e; }
        printf("check %s: worst %.3g, bad %ld\n", nm, worst, bad);
    }
    timeit(nm, f);
}

int main(int argc, char **argv) {
    int N = argc > 1 ? atoi(argv[1]) : 128, S = 14 * 30 * 30;
    size_t nc = (size_t)N * C_OUT * S;
    std::vector<float> hc(nc), hm(C_OUT), hy((size_t)N * S);
    srand(1);
    for (auto &v : hc) v = (rand() / (float)RAND_MAX) * 2 - 0.7f + 0.3f * sinf((float)(&v - &hc[0]) * 1e-3f);
    for (int i = 0; i < C_OUT; i++) hm[i] = (rand() / (float)RAND_MAX) * 4 - 2;
    // reference
    std::vector<double> ref((size_t)N * S, -1e300);
    for (int n = 0; n < N; n++) for (int co = 0; co < C_OUT; co++) {
        const float *r = &hc[((size_t)n * C_OUT + co) * S]; double mm = hm[co], s = 0, q = 0;
        for (int p = 0; p < S; p++) s += mm * r[p];
        double mu = s / S; for (int p = 0; p < S; p++) { double d = mm * r[p] - mu; q += d * d; }
        double rs = 1 / sqrt(q / S + 1e-5);
        for (int p = 0; p < S; p++) { double z = (mm * r[p] - mu) * rs; z = z < -1 ? -1 : z > 1 ? 1 : z; z *= mm; double &o = ref[(size_t)n * S + p]; if (z > o) o = z; }
    }
    float *c, *m, *y;
    CK(cudaMalloc(&c, nc * 4)); CK(cudaMalloc(&m, 64)); CK(cudaMalloc(&y, (size_t)N * S * 4)); CK(cudaMalloc(&dummy, 64));
    CK(cudaMemcpy(c, hc.data(), nc * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(m, hm.data(), 64, cudaMemcpyHostToDevice));
    int l2; CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0)); fbytes = 2 * (size_t)l2; CK(cudaMalloc(&fbuf, fbytes));
    const char *only = getenv("ONLY");
    for (clean = 0; clean < 2; clean++) {
        timeit("read c alone", [&]() { k_read<<<132 * 8, 256>>>(c, dummy, nc / 4); });
        int spans[] = {0, 5000, 10000};
        for (int si = 0; si < (only ? 1 : 3); si++) {
            int sp = spans[si];
            run<8, 256, 4, 0, 0>("P8 T256 K4 h00", c, m, y, N, S, sp, hy, ref, !clean && !si);
            run<8, 256, 4, 1, 2>("P8 T256 K4 h12", c, m, y, N, S, sp, hy, ref, !clean && !si);
            run<8, 256, 8, 0, 0>("P8 T256 K8 h00", c, m, y, N, S, sp, hy, ref, !clean && !si);
            run<8, 512, 4, 0, 0>("P8 T512 K4 h00", c, m, y, N, S, sp, hy, ref, !clean && !si);
            run<16, 256, 4, 0, 0>("P16 T256 K4 h00", c, m, y, N, S, sp, hy, ref, !clean && !si);
            run<16, 256, 4, 1, 2>("P16 T256 K4 h12", c, m, y, N, S, sp, hy, ref, !clean && !si);
            run<4, 512, 4, 0, 0>("P4 T512 K4 h00", c, m, y, N, S, sp, hy, ref, !clean && !si);
            run<4, 256, 8, 0, 0>("P4 T256 K8 h00", c, m, y, N, S, sp, hy, ref, !clean && !si);
        }
    }
    return 0;
}
