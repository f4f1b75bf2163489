/* gpu.cu: the CUDA half of the shared library. See gpu.h for what each function promises. */
#include "gpu.h"

#include <stdlib.h>
#include <string.h>

void cuda_check_(cudaError_t e, const char *what, const char *file, int line)
{
    if (e == cudaSuccess)
        return;
    fprintf(stderr, "error: CUDA %s at %s:%d: %s (%s)\n", what, file, line, cudaGetErrorString(e),
            cudaGetErrorName(e));
    exit(1);
}

int gpu_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" / "no device" error */
        return 0;
    }
    return n;
}

void gpu_require_or_exit(void)
{
    if (gpu_count() == 0)
        die(EXIT_USAGE, "no CUDA device (cudaGetDeviceCount found none or no driver); "
                        "`--test` runs the CPU checks without one");
}

static double measure_copy_gbps(void)
{
    size_t bytes = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    while (bytes >= ((size_t)1 << 24)) {
        if (cudaMalloc(&a, bytes) == cudaSuccess) {
            if (cudaMalloc(&b, bytes) == cudaSuccess)
                break;
            cudaFree(a);
        }
        cudaGetLastError();
        a = b = NULL;
        bytes /= 2;
    }
    if (!b)
        die(1, "cannot allocate two 16 MiB buffers to measure the copy ceiling");
    CUDA_CHECK(cudaMemset(a, 0x3c, bytes)); /* never copy untouched memory */
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    float ms[7];
    for (int i = -2; i < 7; i++) {
        CUDA_CHECK(cudaEventRecord(e0, 0));
        CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0));
        CUDA_CHECK(cudaEventRecord(e1, 0));
        CUDA_CHECK(cudaEventSynchronize(e1));
        if (i >= 0)
            CUDA_CHECK(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    timing t;
    stats_from_samples(ms, 7, &t);
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaFree(b));
    return 2.0 * (double)bytes / (t.median_ms * 1e6);
}

void device_info_get(device_info *d)
{
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", p.name);
    gpu_tag_from_name(p.name, d->tag, sizeof d->tag);
    d->sm_count = p.multiProcessorCount;
    d->cc_major = p.major;
    d->cc_minor = p.minor;
    /* fp32 lanes an SM: 64 on sm_80 (A100), 128 on sm_86, sm_89, sm_90 (CUDA C Programming
     * Guide, "Arithmetic Instructions" throughput table); the clock attribute is the boost clock */
    int khz = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    int lanes = (p.major == 8 && p.minor == 0) || p.major < 8 ? 64 : 128;
    d->fp32_tflops = 2.0 * p.multiProcessorCount * lanes * (khz * 1e3) / 1e12;
    d->l2_bytes = (size_t)p.l2CacheSize;
    d->global_bytes = p.totalGlobalMem;
    d->copy_gbps = measure_copy_gbps();
    gpu_code_arch(); /* a build without code for this GPU stops here, saying so */
}

static __global__ void k_arch_probe(void) {}

int gpu_code_arch(void)
{
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, k_arch_probe);
    if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction) {
        int dev = 0, major = 0, minor = 0;
        cudaGetLastError();
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
        die(1, "this build has no code for this GPU (compute capability %d.%d): rebuild it "
            "here, `make clean && make` (the build targets the visible GPU)", major, minor);
    }
    CUDA_CHECK(e);
    return fa.ptxVersion;
}

#ifndef HAVE_SM90A
#error "HAVE_SM90A must be 0 or 1: the Makefile sets it (1 where the build's code is sm_90a)"
#endif

int gpu_sm90a_problem(int device, char *why, size_t size)
{
    static const char needs[] = "needs an sm_90a GPU (Hopper's wgmma: H100, H200) and a build "
                                "for it";
    int major = 0, minor = 0;
    cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    if (e != cudaSuccess) {
        cudaGetLastError();
        snprintf(why, size, "%s; device %d cannot be queried: %s", needs, device,
                 cudaGetErrorString(e));
        return -1;
    }
    if (major != 9 || minor != 0) {
        snprintf(why, size, "%s; this GPU is sm_%d%d", needs, major, minor);
        return 1;
    }
    if (!HAVE_SM90A) {
        snprintf(why, size, "%s; this build has no sm_90a code (build it with ARCH=sm_90)", needs);
        return 1;
    }
    return 0;
}

int grid_for(long long n, int block, int sm_count)
{
    long long g = (n + block - 1) / block, cap = (long long)sm_count * 32;
    return (int)(g < cap ? (g > 0 ? g : 1) : cap);
}

void *gpu_alloc(size_t bytes, const char *what)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        die(1, "out of device memory: %s needs %zu bytes (%zu of %zu free)", what, bytes, free_b,
            total_b);
    }
    CUDA_CHECK(e);
    return p;
}

static double mem_peak;

void gpu_mem_sample(void)
{
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    double used = (double)total_b - (double)free_b;
    if (used > mem_peak)
        mem_peak = used;
}

double gpu_mem_peak(void) { return mem_peak; }

void gpu_poison(float *p, size_t n) { CUDA_CHECK(cudaMemset(p, 0xFF, n * sizeof(float))); }

static float *flush_buf;
static size_t flush_floats;
static float *flush_sink;
static int flush_grid;

/* Reads n4 float4s and writes nothing: the sum is stored only if it equals a value it cannot
 * take (the buffer holds zeros), which keeps the loads from being optimised away. */
static __global__ void k_flush_read(const float4 *p, size_t n4, float *sink)
{
    float acc = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
         i += (size_t)gridDim.x * blockDim.x) {
        float4 v = p[i];
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == 1.0f)
        *sink = acc;
}

void gpu_flush_l2(void)
{
    if (!flush_buf) {
        int dev, l2 = 0, sms = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        flush_floats = 2 * (size_t)(l2 > 0 ? l2 : (1 << 20)) / sizeof(float);
        flush_floats = (flush_floats + 3) & ~(size_t)3;
        flush_buf = (float *)gpu_alloc(flush_floats * sizeof(float), "L2 flush buffer");
        flush_sink = (float *)gpu_alloc(sizeof(float), "L2 flush sink");
        flush_grid = 8 * (sms > 0 ? sms : 1);
        CUDA_CHECK(cudaMemset(flush_buf, 0, flush_floats * sizeof(float)));
        CUDA_CHECK(cudaDeviceSynchronize());
    }
    k_flush_read<<<flush_grid, 512>>>((const float4 *)flush_buf, flush_floats / 4, flush_sink);
    LAUNCH_CHECK();
}

void gpu_release(void)
{
    if (flush_buf) {
        CUDA_CHECK(cudaFree(flush_buf));
        CUDA_CHECK(cudaFree(flush_sink));
    }
    flush_buf = NULL, flush_sink = NULL;
}

timing gpu_time(launch_fn fn, const void *ctx, int reps)
{
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    float *ms = (float *)malloc(sizeof(float) * (size_t)reps);
    if (!ms)
        die(1, "out of host memory");
    for (int i = 0; i < 3; i++) {
        fn(ctx);
        LAUNCH_CHECK();
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < reps; i++) {
        gpu_flush_l2();
        CUDA_CHECK(cudaEventRecord(e0, 0));
        fn(ctx);
        LAUNCH_CHECK();
        CUDA_CHECK(cudaEventRecord(e1, 0));
        CUDA_CHECK(cudaEventSynchronize(e1));
        CUDA_CHECK(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    timing t;
    stats_from_samples(ms, reps, &t);
    free(ms);
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    return t;
}
