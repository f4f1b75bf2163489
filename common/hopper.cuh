/*
 * hopper.cuh: Hopper's asynchronous copies and thread-block clusters, for the cluster versions of
 * chapters 3 and 5 (CUDA, header only: device helpers in raw PTX, and the launch of a cluster
 * kernel from the host).
 *
 * Hopper only. Thread-block clusters, distributed shared memory, TMA bulk copies and the
 * mbarrier waits they complete on exist from sm_90; every device body below that uses them is
 * compiled only for sm_90 (#if __CUDA_ARCH__ >= 900) and is empty elsewhere: in an sm_80 build
 * the cluster kernels that call them are empty stubs, and the harness skips their versions
 * (NEEDS_SM90 in a chapter's version table) on a GPU or build without sm_90.
 *
 * Raw PTX. CUDA C++ reaches these features through libcu++ (cuda::barrier, cuda::memcpy_async);
 * the tutorial writes the PTX itself, in asm volatile statements, so that each instruction is
 * in view (PTX ISA, "Parallel Synchronization and Communication Instructions: mbarrier" and
 * "Data Movement and Conversion Instructions: cp.async.bulk"):
 *   mbarrier    a 64-bit barrier object in shared memory. init sets how many arrivals complete a
 *               phase (here 1); arrive.expect_tx arrives and says how many bytes of asynchronous
 *               copies the phase must also wait for; try_wait.parity spins until the phase with
 *               that parity (0, 1, 0, ...) has completed. fence.mbarrier_init makes a new
 *               barrier visible to the copy engine before its first use. A phase's expected
 *               bytes count at most 2^20 - 1.
 *   bulk copy   cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [src],
 *               bytes, [bar]: one thread asks the TMA unit (Hopper's copy engine) to move a
 *               contiguous run of global memory into shared memory; each byte that lands counts
 *               down the barrier's expected bytes. Source, destination and size must be
 *               multiples of 16 bytes. No thread spends registers or instructions on the data.
 *   fence.proxy.async  orders this thread's earlier generic accesses of shared memory before
 *               later asynchronous (bulk copy) ones: needed before a bulk copy overwrites
 *               shared memory that threads have just read.
 *   mapa, st.async  a block of a cluster addresses a peer's shared memory by mapa's 32-bit
 *               shared::cluster address; st.async stores up to 16 bytes there and counts them
 *               down on the peer's mbarrier as they land, like a bulk copy's bytes (chapter 3's
 *               v16 exchanges its statistics so).
 * "memory" clobbers keep the compiler from moving loads and stores across them.
 */
#ifndef HOPPER_CUH
#define HOPPER_CUH

#include "gpu.h"

__device__ static inline unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

/* a barrier in shared memory whose phases complete on one arrival (and its expected bytes) */
__device__ static inline void mbar_init(unsigned long long *bar)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bar)) : "memory");
#endif
}

/* after a thread's mbar_init calls: visible to the copy engine and the cluster */
__device__ static inline void mbar_init_fence(void)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

/* the phase's one arrival, and the bytes of bulk copies it must also wait for */
__device__ static inline void mbar_expect_tx(unsigned long long *bar, unsigned bytes)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
#endif
}

/* the spin of mbar_wait and mbar_wait_cluster; sem: the wait's memory semantics and scope */
#define MBAR_TRY_WAIT(sem)                                                                        \
    "{\n\t.reg .pred p;\n"                                                                        \
    "WAIT_%=:\n\t"                                                                               \
    "mbarrier.try_wait.parity" sem ".shared::cta.b64 p, [%0], %1;\n\t"                             \
    "@!p bra WAIT_%=;\n}"

/* spins until the phase of parity `parity` of bar has completed */
__device__ static inline void mbar_wait(unsigned long long *bar, unsigned parity)
{
#if __CUDA_ARCH__ >= 900
    asm volatile(MBAR_TRY_WAIT("") ::"r"(smem_u32(bar)), "r"(parity) : "memory");
#endif
}

/* mbar_wait with acquire at cluster scope (PTX ISA, "mbarrier.test_wait/mbarrier.try_wait"):
 * each st.async that counted its bytes on bar completes them as a release at cluster scope, so
 * what other blocks of the cluster stored into this block's shared memory that way is visible
 * to every thread that has seen the phase complete */
__device__ static inline void mbar_wait_cluster(unsigned long long *bar, unsigned parity)
{
#if __CUDA_ARCH__ >= 900
    asm volatile(MBAR_TRY_WAIT(".acquire.cluster") ::"r"(smem_u32(bar)), "r"(parity) : "memory");
#endif
}

/* the address of the shared variable p (this block's) in block `rank` of the cluster, as a
 * 32-bit shared::cluster address for st.async (PTX ISA, "mapa"); rank < the cluster's size */
__device__ static inline unsigned cluster_addr(const void *p, int rank)
{
    unsigned a = 0;
#if __CUDA_ARCH__ >= 900
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(smem_u32(p)), "r"(rank));
#endif
    return a;
}

/* 16 bytes (dst 16-byte aligned) into another block's shared memory, counted down on that
 * block's mbarrier bar as they land (complete_tx, as a bulk copy's bytes); both are cluster_addr
 * addresses in the same peer block, never this block's own (chapter 3's v16 stores its own
 * values with a plain store). The store needs no reply: the thread goes on at once (PTX ISA,
 * "st.async"). The peer must be running: a cluster barrier after its mbarrier's init */
__device__ static inline void st_async16(unsigned dst, uint4 v, unsigned bar)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, "
                 "%4}, [%5];" ::"r"(dst),
                 "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(bar)
                 : "memory");
#endif
}

/* bytes (a multiple of 16, both addresses 16-byte aligned) from global src to shared dst, by
 * the TMA unit, completing on bar (whose phase must expect them: mbar_expect_tx) */
__device__ static inline void bulk_copy(void *dst, const void *src, unsigned bytes,
                                        unsigned long long *bar)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
#endif
}

/* this thread's generic shared-memory accesses before any later bulk copy's */
__device__ static inline void fence_proxy_async(void)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

/* The launch of a cluster kernel: `grid` blocks of `threads`, `smem` bytes of dynamic shared
 * memory, clusters of cluster_x blocks along x. The cluster shape is a launch attribute
 * (cudaLaunchKernelEx; CUDA C++ Programming Guide, "Thread Block Clusters"), not
 * __cluster_dims__ on the kernel, which nvcc rejects when it compiles for sm_80. Dynamic shared
 * memory above 48 KB is an opt-in per kernel (cudaFuncAttributeMaxDynamicSharedMemorySize),
 * set to smem_optin at the kernel's first launch (*opted: the caller's flag for it). Only
 * Hopper versions' launchers call this, so an sm_80 build or GPU never does. Launch with
 * CUDA_CHECK(cudaLaunchKernelEx(&L.cfg, kernel, args...)). */
typedef struct {
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr;
} cluster_launch;

static inline void cluster_launch_make(cluster_launch *L, const void *kernel, int *opted,
                                       size_t smem_optin, int cluster_x, dim3 grid, int threads,
                                       size_t smem)
{
    if (!*opted) {
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem_optin));
        *opted = 1;
    }
    cluster_launch zero = {};
    *L = zero;
    L->attr.id = cudaLaunchAttributeClusterDimension;
    L->attr.val.clusterDim.x = cluster_x;
    L->attr.val.clusterDim.y = 1;
    L->attr.val.clusterDim.z = 1;
    L->cfg.gridDim = grid;
    L->cfg.blockDim = dim3(threads);
    L->cfg.dynamicSmemBytes = smem;
    L->cfg.attrs = &L->attr;
    L->cfg.numAttrs = 1;
}

/* how many clusters of this launch fit on the GPU at once (cudaOccupancyMaxActiveClusters);
 * 0 when none does */
static inline int resident_clusters(const cluster_launch *L, const void *kernel)
{
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, kernel, &L->cfg) != cudaSuccess) {
        cudaGetLastError(); /* e.g. the shared memory fits no SM: none */
        return 0;
    }
    return n;
}

/* the most dynamic shared memory a block of this GPU may opt in to, when its kernel also has
 * up to static_bytes of static shared memory (cudaDevAttrMaxSharedMemoryPerBlockOptin) */
static inline size_t smem_optin_bytes(size_t static_bytes)
{
    int optin = 0, dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return (size_t)optin - static_bytes;
}

#endif
