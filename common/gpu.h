/*
 * gpu.h: the CUDA half of the tutorial's shared library (host code; nothing chapter-specific).
 *
 *   CUDA_CHECK(call)   every runtime call: file, line and the CUDA error string, then exit 1
 *   LAUNCH_CHECK()     after every kernel launch (launch configuration errors)
 *   SMEM_OPT_IN()      a kernel's dynamic shared memory above 48 KB, once per device
 *   gpu_count()        0 when there is no device or no driver, never an exit
 *   device_info_get()  name, SMs, L2, fp32 peak, and the measured device-to-device copy ceiling
 *   gpu_code_arch()    the sm_XY this build's device code is, as loaded (skips Hopper versions)
 *   gpu_sm90a_problem() why a device or this build cannot run sm_90a code (wgmma), never an exit
 *   gpu_alloc()        cudaMalloc that names the bytes and the tensor when memory runs out
 *   gpu_poison()       fill with NaN so an element a kernel forgot to write fails verification
 *   gpu_time()         CUDA events, warm-up, L2 flushed clean before every repetition,
 *                      min/median/max
 */
#ifndef GPU_H
#define GPU_H

#include <cuda_runtime.h>

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CUDA_CHECK(call) cuda_check_((call), #call, __FILE__, __LINE__)
#define LAUNCH_CHECK() cuda_check_(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
void cuda_check_(cudaError_t e, const char *what, const char *file, int line);

/* cudaFuncSetAttribute for a kernel's dynamic shared memory above 48 KB, once per device (the
 * attribute is the device's: a chapter's C API may launch on several); devices past 63 set it
 * at every launch */
#define SMEM_OPT_IN(kernel, bytes)                                                                 \
    do {                                                                                           \
        static unsigned long long done_ = 0; /* bit k: device k */                                 \
        int dev_ = 0;                                                                              \
        CUDA_CHECK(cudaGetDevice(&dev_));                                                          \
        if (dev_ > 63 || !(done_ >> dev_ & 1)) {                                                   \
            CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,   \
                                            bytes));                                               \
            if (dev_ <= 63)                                                                        \
                done_ |= 1ull << dev_;                                                             \
        }                                                                                          \
    } while (0)

/* Number of usable CUDA devices: 0 when cudaGetDeviceCount fails (no driver, no device). */
int gpu_count(void);

/* Exits EXIT_USAGE with "error: no CUDA device ..." when gpu_count() is 0 (a timed run needs one;
 * `--test` runs the CPU checks without). */
void gpu_require_or_exit(void);

typedef struct {
    char name[256];      /* "NVIDIA H100 80GB HBM3" */
    char tag[32];        /* "h100": the name's model token, lower case, for data/<tag>/ */
    int sm_count;        /* multiprocessors */
    int cc_major, cc_minor;
    size_t l2_bytes;     /* L2 cache size */
    size_t global_bytes; /* device memory */
    double copy_gbps;    /* measured cudaMemcpy device-to-device, (read + written bytes) / s / 1e9 */
    double fp32_tflops;  /* fp32 FMA peak: SMs x fp32 lanes an SM x 2 x boost clock */
} device_info;

/*
 * Fills d for device 0 and measures copy_gbps: the median of 7 copies of a 1 GiB buffer (halved
 * until it fits) after 2 warm-ups, counting the bytes read plus the bytes written. This is the
 * "100%" of every table: what the memory system actually moves, not the datasheet's figure.
 */
void device_info_get(device_info *d);

/* The compute capability this program's device code was compiled for, as loaded on device 0
 * (cudaFuncAttributes.ptxVersion: 80 for an sm_80 build, even when its PTX runs on an H100).
 * Hopper-only kernels are compiled as empty stubs below 90, so their versions must not run. */
int gpu_code_arch(void);

/* Whether `device` runs this build's sm_90a code (Hopper's warpgroup MMA, wgmma), which only
 * compute capability 9.0 runs (H100, H200) and only a build for sm_90a holds (HAVE_SM90A: the
 * Makefile's ARCH=sm_90, or native on such a GPU); elsewhere those kernels are empty stubs.
 * 0: it does. 1: it does not, and why[0 .. size - 1] says why in one line ("needs an sm_90a GPU
 * ...; this GPU is sm_86"). -1: the device could not be queried (the CUDA error in why). Never
 * exits: the harness's version table and the chapters' C libraries both ask it. */
int gpu_sm90a_problem(int device, char *why, size_t size);

/* Blocks for a grid-stride loop over n elements: enough to cover n, at most 32 a multiprocessor
 * (more only adds scheduling), at least 1. */
int grid_for(long long n, int block, int sm_count);

/* cudaMalloc, or exit 1 with "out of device memory: <what> needs <bytes> bytes (<free> free)". */
void *gpu_alloc(size_t bytes, const char *what);

/* Device memory in use (the device's total less cudaMemGetInfo's free: every process's
 * allocations, the CUDA context and the libraries' workspaces), sampled: gpu_mem_sample takes a
 * sample, gpu_mem_peak returns the largest so far in bytes. The harness samples after a problem's
 * setup and after every version's runs, so a buffer a version allocates and frees inside one
 * call is not seen. */
void gpu_mem_sample(void);
double gpu_mem_peak(void);

/* Writes 0xFF bytes over n floats: every element becomes NaN (all exponent bits set, mantissa
 * non-zero), so verify_f32 fails on any element the kernel did not write. Synchronous. */
void gpu_poison(float *p, size_t n);

/*
 * Reads a buffer of 2 x the L2 size (allocated and zeroed once, freed by gpu_release) with a
 * kernel that writes nothing, so that a timed run starts with its inputs in DRAM, as in a real
 * model, and with L2 clean: the lines a previous repetition wrote are written back to DRAM during
 * this sweep, before the timer starts. (A flush that writes, as a memset over the buffer, leaves
 * L2 full of dirty lines whose write-back then lands inside the timed region: on an H100 it added
 * 3 to 11 us to a DRAM-bound scope: the README's "How we measure".)
 */
void gpu_flush_l2(void);

/* Frees the L2 flush buffer. */
void gpu_release(void);

/* One launch of a version: queue its kernels on the default stream. */
typedef void (*launch_fn)(const void *ctx);

/*
 * Times fn: 3 warm-up calls, then reps x (flush L2; event; fn; event), each repetition's
 * cudaEventElapsedTime (resolution about 0.5 us per the CUDA runtime documentation) collected
 * and summarised by stats_from_samples. Checks launch errors after every call.
 */
timing gpu_time(launch_fn fn, const void *ctx, int reps);

#ifdef __cplusplus
}
#endif
#endif
