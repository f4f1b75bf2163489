/*
 * Experiment (issue 15; temporary, removed in the next commit): the prototype of chapter 3's v11,
 * a cluster of 16 / RPB blocks a sample, block r holding whole channel rows, the statistics
 * local, the blocks' channel max exchanged through distributed shared memory (k_rows), and a
 * pushed form (k_push: u kept in registers over the barrier, then st.async into the owners).
 * H100, KernelBench shape, medians of 50, the chapters' L2 flush (clean=1: L2 left clean), spans
 * of the first wave's stagger in ns. Four calls:
 *   read of c alone, grid-stride: 0.0411 - 0.0414 ms (clean 0.0352 - 0.0373)
 *   RPB 2, 4 chunks a row, 256 threads (v11's form): 0.0591 - 0.0612 at 10 us (clean 0.0552 -
 *   0.0558); 8 us 0.0609, 12 us 0.0608 - 0.0614; no stagger 0.0676 - 0.0683
 *   the load and statistics alone (MODE 1): 0.0480 - 0.0502 (RPB 2), 0.0523 - 0.0582 (RPB 1)
 *   RPB 2, chunks x threads: 2 x 128 0.0690 - 0.0733, 4 x 128 0.0616 - 0.0639, 8 x 256 0.0615 -
 *   0.0626, 2 x 256 0.0671 - 0.0703, 16 x 512 0.0716 - 0.0779, 8 x 512 0.0651 - 0.0718,
 *   4 x 512 0.0631 - 0.0646, 4 x 384 0.0620 - 0.0621 (10 us unless a range over spans)
 *   RPB 1 (clusters of 16, non-portable; 14 or 28 resident): 0.0745 - 0.1078
 *   loops unrolled 2 or 4: 0.0591 - 0.0598, the same as not
 *   pushed (k_push): 0.0619 - 0.0743 (4 x 512 best, 0.0619 at 10 us)
 * Timeline of v11's form (TL, 10 us, later waves, medians): load and statistics 4.5 us, u 1.1,
 * first cluster barrier 2.2, pull and y 1.7, closing barrier 0.9; pushed: push and wait 2.6 -
 * 3.9 us, y 0.4 - 0.5, no closing barrier.
 * Build: nvcc -O3 -std=c++17 -arch=sm_90 -I../../../common rows.cu -o rows && ./rows
 */
// prototype 2: ch3 epilogue, a cluster of 8 blocks a sample, block r holding whole channel rows 2r, 2r+1
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <vector>
#include <algorithm>
#include "hopper.cuh"
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
__device__ inline void stagger(int n, int clusters, int wave, int span) {
    if (span <= 0 || n >= wave || clusters <= wave) return;
    unsigned long long t0, t, d = (unsigned long long)n * span / wave;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (t = t0; t - t0 < d;) { __nanosleep(200); asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); }
}
__host__ __device__ inline int clo(int n4, int k, int K) { return (int)((long long)n4 * k / K); }

// RPB rows a block (P = 16 / RPB blocks a cluster), NCH chunks a row, NT threads
// MODE 0: whole epilogue; 1: load + stats only (no partial max, no exchange, y)
__device__ unsigned long long tl[1024 * 8 * 6];
#define STAMP(k) do { if (TL && threadIdx.x == 0) { unsigned long long t_; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_)); tl[blockIdx.x * 6 + (k)] = t_; } } while (0)
template <int RPB, int NCH, int NT, int MODE, int TL = 0, int UNR = 1>
__global__ void __launch_bounds__(NT, (RPB == 2 || NT == 512) ? 2 : 4) k_rows(const float *__restrict__ c, const float *__restrict__ m, float *__restrict__ y, int S, int wave, int span)
{
    constexpr int P = C_OUT / RPB, NW = NT / 32;
    extern __shared__ float4 sm4[];
    float *buf = (float *)sm4; // RPB rows of S floats
    __shared__ unsigned long long bars[RPB * NCH];
    __shared__ wf part[RPB * NCH];
    __shared__ float A[RPB], B[RPB], L[RPB];
    cg::cluster_group cl = cg::this_cluster();
    int rank = cl.block_rank(), n = blockIdx.x / P, S4 = S / 4;
    stagger(n, gridDim.x / P, wave, span);
    STAMP(0);
    const float *src = c + ((size_t)n * C_OUT + rank * RPB) * S;
    if (threadIdx.x == 0) {
        for (int i = 0; i < RPB * NCH; i++) mbar_init(&bars[i]);
        mbar_init_fence();
        for (int j = 0; j < RPB; j++) for (int k = 0; k < NCH; k++) {
            int a = clo(S4, k, NCH), b = clo(S4, k + 1, NCH);
            mbar_expect_tx(&bars[j * NCH + k], 16u * (b - a));
            bulk_copy(buf + (size_t)j * S + 4 * a, src + (size_t)j * S + 4 * a, 16u * (b - a), &bars[j * NCH + k]);
        }
    }
    __syncthreads();
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int t = w; t < RPB * NCH; t += NW) {
        int j = t / NCH, k = t % NCH, a = clo(S4, k, NCH), b = clo(S4, k + 1, NCH);
        mbar_wait(&bars[t], 0);
        const float4 *r = (const float4 *)(buf + (size_t)j * S);
        float s = 0;
        for (int i = a + lane; i < b; i += 32) { float4 v = r[i]; s += (v.x + v.y) + (v.z + v.w); }
        for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(~0u, s, o);
        float mu = s / (4.f * (b - a)), q = 0;
        for (int i = a + lane; i < b; i += 32) { float4 v = r[i]; float d0 = v.x - mu, d1 = v.y - mu, d2 = v.z - mu, d3 = v.w - mu; q += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3); }
        for (int o = 16; o; o >>= 1) q += __shfl_xor_sync(~0u, q, o);
        if (lane == 0) { wf p = {4.f * (b - a), mu, q}; part[t] = p; }
    }
    __syncthreads();
    if (threadIdx.x < RPB) {
        int j = threadIdx.x; wf acc = {0, 0, 0};
        for (int k = 0; k < NCH; k++) acc = merge(acc, part[j * NCH + k]);
        float mm = m[rank * RPB + j], rs = rsqrtf(mm * mm * (acc.m2 / acc.n) + EPS), a = mm * mm * rs;
        A[j] = a; B[j] = -a * acc.mean; L[j] = fabsf(mm);
        if (MODE == 1 && acc.n == 12345.f) y[0] = a;
    }
    __syncthreads();
    STAMP(1);
    if (MODE == 1) return;
    float4 *u = (float4 *)buf; // the block's channel max, over row 0
#pragma unroll UNR
    for (int i = threadIdx.x; i < S4; i += NT) {
        float4 r = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
#pragma unroll
        for (int j = 0; j < RPB; j++) {
            float4 v = ((const float4 *)(buf + (size_t)j * S))[i];
            float a = A[j], b = B[j], l = L[j];
            r.x = fmaxf(r.x, fminf(fmaxf(fmaf(v.x, a, b), -l), l));
            r.y = fmaxf(r.y, fminf(fmaxf(fmaf(v.y, a, b), -l), l));
            r.z = fmaxf(r.z, fminf(fmaxf(fmaf(v.z, a, b), -l), l));
            r.w = fmaxf(r.w, fminf(fmaxf(fmaf(v.w, a, b), -l), l));
        }
        u[i] = r;
    }
    STAMP(2);
    cl.sync();
    STAMP(3);
    int lo = clo(S4, rank, P), hi = clo(S4, rank + 1, P);
    float4 *yo = (float4 *)(y + (size_t)n * S);
    const float4 *peer[P];
#pragma unroll
    for (int q = 0; q < P; q++) peer[q] = cl.map_shared_rank(u, (rank + q) % P);
#pragma unroll UNR
    for (int i = lo + threadIdx.x; i < hi; i += NT) {
        float4 r = peer[0][i];
#pragma unroll
        for (int q = 1; q < P; q++) { float4 v = peer[q][i]; r.x = fmaxf(r.x, v.x); r.y = fmaxf(r.y, v.y); r.z = fmaxf(r.z, v.z); r.w = fmaxf(r.w, v.w); }
        __stcs(yo + i, r);
    }
    STAMP(4);
    cl.sync();
    STAMP(5);
}

// push form: u kept in registers over the cluster barrier, then each block's u slices pushed into their
// owners' shared memory by st.async (row 1's space, free once the owner has passed the barrier); each
// block waits on its own mbarrier for the 7 peers' slices; no closing barrier
template <int NCH, int NT, int TL = 0>
__global__ void __launch_bounds__(NT, 2) k_push(const float *__restrict__ c, const float *__restrict__ m, float *__restrict__ y, int S, int wave, int span)
{
    constexpr int RPB = 2, P = 8, K = (3150 + NT - 1) / NT;
    extern __shared__ float4 sm4[];
    float *buf = (float *)sm4;
    __shared__ unsigned long long bars[RPB * NCH + 1];
    __shared__ wf part[RPB * NCH];
    __shared__ float A[RPB], B[RPB], L[RPB];
    cg::cluster_group cl = cg::this_cluster();
    int rank = cl.block_rank(), n = blockIdx.x / P, S4 = S / 4;
    stagger(n, gridDim.x / P, wave, span);
    STAMP(0);
    const float *src = c + ((size_t)n * C_OUT + rank * RPB) * S;
    int lo = clo(S4, rank, P), hi = clo(S4, rank + 1, P), cap4 = (S4 + P - 1) / P;
    float4 *recv = (float4 *)(buf + S); // row 1's space: slot q * cap4 from peer q
    if (threadIdx.x == 0) {
        for (int i = 0; i < RPB * NCH + 1; i++) mbar_init(&bars[i]);
        mbar_init_fence();
        mbar_expect_tx(&bars[RPB * NCH], 16u * (P - 1) * (hi - lo));
        for (int j = 0; j < RPB; j++) for (int k = 0; k < NCH; k++) {
            int a = clo(S4, k, NCH), b = clo(S4, k + 1, NCH);
            mbar_expect_tx(&bars[j * NCH + k], 16u * (b - a));
            bulk_copy(buf + (size_t)j * S + 4 * a, src + (size_t)j * S + 4 * a, 16u * (b - a), &bars[j * NCH + k]);
        }
    }
    __syncthreads();
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int t = w; t < RPB * NCH; t += NT / 32) {
        int j = t / NCH, k = t % NCH, a = clo(S4, k, NCH), b = clo(S4, k + 1, NCH);
        mbar_wait(&bars[t], 0);
        const float4 *r = (const float4 *)(buf + (size_t)j * S);
        float s = 0;
        for (int i = a + lane; i < b; i += 32) { float4 v = r[i]; s += (v.x + v.y) + (v.z + v.w); }
        for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(~0u, s, o);
        float mu = s / (4.f * (b - a)), q = 0;
        for (int i = a + lane; i < b; i += 32) { float4 v = r[i]; float d0 = v.x - mu, d1 = v.y - mu, d2 = v.z - mu, d3 = v.w - mu; q += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3); }
        for (int o = 16; o; o >>= 1) q += __shfl_xor_sync(~0u, q, o);
        if (lane == 0) { wf p = {4.f * (b - a), mu, q}; part[t] = p; }
    }
    __syncthreads();
    if (threadIdx.x < RPB) {
        int j = threadIdx.x; wf acc = {0, 0, 0};
        for (int k = 0; k < NCH; k++) acc = merge(acc, part[j * NCH + k]);
        float mm = m[rank * RPB + j], rs = rsqrtf(mm * mm * (acc.m2 / acc.n) + EPS), a = mm * mm * rs;
        A[j] = a; B[j] = -a * acc.mean; L[j] = fabsf(mm);
    }
    __syncthreads();
    STAMP(1);
    float4 u[K];
    float a0 = A[0], b0 = B[0], l0 = L[0], a1 = A[1], b1 = B[1], l1 = L[1];
#pragma unroll
    for (int k = 0; k < K; k++) {
        int i = threadIdx.x + k * NT;
        if (i < S4) {
            float4 v = ((const float4 *)buf)[i], x = ((const float4 *)(buf + S))[i], r;
            r.x = fmaxf(fminf(fmaxf(fmaf(v.x, a0, b0), -l0), l0), fminf(fmaxf(fmaf(x.x, a1, b1), -l1), l1));
            r.y = fmaxf(fminf(fmaxf(fmaf(v.y, a0, b0), -l0), l0), fminf(fmaxf(fmaf(x.y, a1, b1), -l1), l1));
            r.z = fmaxf(fminf(fmaxf(fmaf(v.z, a0, b0), -l0), l0), fminf(fmaxf(fmaf(x.z, a1, b1), -l1), l1));
            r.w = fmaxf(fminf(fmaxf(fmaf(v.w, a0, b0), -l0), l0), fminf(fmaxf(fmaf(x.w, a1, b1), -l1), l1));
            u[k] = r;
        }
    }
    STAMP(2);
    cl.sync(); // every block's rows consumed: its row-1 space may receive
    STAMP(3);
#pragma unroll
    for (int k = 0; k < K; k++) {
        int i = threadIdx.x + k * NT;
        if (i < S4) {
            int q = (int)(((long long)i * P + P - 1) / S4); // first guess, then fix
            while (q > 0 && clo(S4, q, P) > i) q--;
            while (q < P - 1 && clo(S4, q + 1, P) <= i) q++;
            float4 *dst = recv + rank * cap4 + (i - clo(S4, q, P));
            if (q == rank) *dst = u[k];
            else st_async16(cluster_addr(dst, q), make_uint4(__float_as_uint(u[k].x), __float_as_uint(u[k].y), __float_as_uint(u[k].z), __float_as_uint(u[k].w)), cluster_addr(&bars[RPB * NCH], q));
        }
    }
    mbar_wait_cluster(&bars[RPB * NCH], 0);
    __syncthreads(); // the block's own slot, written by plain stores
    STAMP(4);
    float4 *yo = (float4 *)(y + (size_t)n * S);
    for (int i = threadIdx.x; i < hi - lo; i += NT) {
        float4 r = recv[i];
#pragma unroll
        for (int q = 1; q < P; q++) { float4 v = recv[q * cap4 + i]; r.x = fmaxf(r.x, v.x); r.y = fmaxf(r.y, v.y); r.z = fmaxf(r.z, v.z); r.w = fmaxf(r.w, v.w); }
        __stcs(yo + lo + i, r);
    }
    STAMP(5);
}

__global__ void k_read(const float *__restrict__ c, float *out, size_t n4) {
    float s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        float4 v = __ldcs((const float4 *)c + i); s += v.x + v.y + v.z + v.w;
    }
    if (s == 12345.f) out[0] = s;
}
__global__ void k_readflush(const float4 *p, size_t n4, float *out) {
    float s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) { float4 v = p[i]; s += v.x; }
    if (s == 12345.f) out[0] = s;
}
static void *fbuf; static size_t fbytes; static float *dummy; static int clean;
static void flush() { CK(cudaMemsetAsync(fbuf, 0, fbytes)); if (clean) k_readflush<<<132 * 4, 512>>>((const float4 *)fbuf, fbytes / 16, dummy); }
template <class F> static float timeit(const char *name, F f, int reps = 50) {
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    for (int i = 0; i < 3; i++) f();
    std::vector<float> t;
    for (int i = 0; i < reps; i++) { flush(); cudaEventRecord(a); f(); cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); t.push_back(ms); }
    CK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    printf("%-34s clean=%d median %.4f ms [%.4f - %.4f]\n", name, clean, t[reps / 2], t[0], t[reps - 1]);
    return t[reps / 2];
}
template <int RPB, int NCH, int NT, int MODE, int TL = 0, int PUSH = 0, int UNR = 1>
static void run(const char *name, const float *c, const float *m, float *y, int N, int S, int span, std::vector<float> &h, const std::vector<double> &ref, int check) {
    auto kern = PUSH ? k_push<NCH, NT, TL> : k_rows<RPB, NCH, NT, MODE, TL, UNR>;
    constexpr int P = C_OUT / RPB;
    size_t smem = (size_t)RPB * S * 4 + (PUSH ? 16 * 8 : 0);
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    if (P > 8) CK(cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    cudaLaunchConfig_t cfg = {}; cudaLaunchAttribute at[1];
    cfg.gridDim = dim3(N * P); cfg.blockDim = dim3(NT); cfg.dynamicSmemBytes = smem;
    at[0].id = cudaLaunchAttributeClusterDimension; at[0].val.clusterDim.x = P; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
    cfg.attrs = at; cfg.numAttrs = 1;
    int wave = 0; CK(cudaOccupancyMaxActiveClusters(&wave, kern, &cfg));
    auto f = [&]() { CK(cudaLaunchKernelEx(&cfg, kern, c, m, y, S, wave, span)); };
    char nm[128]; snprintf(nm, sizeof nm, "%s w%d s%d", name, wave, span);
    if (check && MODE == 0) {
        CK(cudaMemset(y, 0xff, (size_t)N * S * 4)); f(); CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(h.data(), y, (size_t)N * S * 4, cudaMemcpyDeviceToHost));
        double worst = 0; long bad = 0;
        for (size_t i = 0; i < (size_t)N * S; i++) { double e = fabs(h[i] - ref[i]); if (!(e <= 1e-4)) bad++; if (!(e <= worst)) worst = e; }
        printf("check %s: worst %.3g, bad %ld\n", nm, worst, bad);
    }
    timeit(nm, f);
    if (TL) {
        std::vector<unsigned long long> h(N * P * 6);
        flush(); f(); CK(cudaDeviceSynchronize());
        CK(cudaMemcpyFromSymbol(h.data(), tl, h.size() * 8));
        unsigned long long t0 = ~0ull, t1 = 0;
        for (int b = 0; b < N * P; b++) { t0 = std::min(t0, h[b * 6]); t1 = std::max(t1, h[b * 6 + 5]); }
        printf("timeline %s: %.1f us end to end (first stamp to last)\n", nm, (t1 - t0) / 1e3);
        const char *ph[] = {"load+stats", "u pass", "cluster sync 1", PUSH ? "push+wait" : "pull + y", PUSH ? "y" : "closing sync"};
        for (int grp = 0; grp < 2; grp++) {
            printf("  %s:", grp ? "later waves" : "first wave ");
            for (int k = 0; k < 5; k++) {
                std::vector<double> d;
                for (int b = 0; b < N * P; b++) if ((b / P < wave) == !grp) d.push_back((h[b * 6 + k + 1] - h[b * 6 + k]) / 1e3);
                std::sort(d.begin(), d.end());
                printf(" %s %.2f", ph[k], d.size() ? d[d.size() / 2] : -1.0);
            }
            printf("\n");
        }
    }
}
int main(int argc, char **argv) {
    int N = argc > 1 ? atoi(argv[1]) : 128, S = 14 * 30 * 30;
    size_t nc = (size_t)N * C_OUT * S;
    std::vector<float> hc(nc), hm(C_OUT), hy((size_t)N * S);
    srand(1);
    for (auto &v : hc) v = (rand() / (float)RAND_MAX) * 2 - 0.7f + 0.3f * sinf((float)(&v - &hc[0]) * 1e-3f);
    for (int i = 0; i < C_OUT; i++) hm[i] = (rand() / (float)RAND_MAX) * 4 - 2;
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
    for (clean = 0; clean < 2; clean++) {
        timeit("read c alone (grid-stride)", [&]() { k_read<<<132 * 8, 256>>>(c, dummy, nc / 4); });
        for (int rep = 0; rep < 2; rep++) {
            int sp = 10000;
            run<2, 4, 256, 0>("rows2 ch4 T256", c, m, y, N, S, sp, hy, ref, !clean && !rep);
            run<2, 4, 256, 0, 0, 0, 2>("rows2 ch4 T256 unr2", c, m, y, N, S, sp, hy, ref, !clean && !rep);
            run<2, 4, 256, 0, 0, 0, 4>("rows2 ch4 T256 unr4", c, m, y, N, S, sp, hy, ref, !clean && !rep);
            run<2, 4, 512, 0, 0, 0, 2>("rows2 ch4 T512 unr2", c, m, y, N, S, sp, hy, ref, !clean && !rep);
            run<2, 4, 384, 0, 0, 0, 1>("rows2 ch4 T384", c, m, y, N, S, sp, hy, ref, !clean && !rep);
        }
        run<2, 4, 256, 0, 1, 0, 4>("TL rows2 ch4 T256 unr4", c, m, y, N, S, 10000, hy, ref, 0);
    }
    return 0;
}
