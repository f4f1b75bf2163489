/*
 * barrier.cuh: a counter in global memory as a barrier between the blocks of one grid (CUDA,
 * header only), shared by chapter 3 (b6's sums waiting for v10's forward blocks of their sample)
 * and chapter 4 (v6's and b3's teams of blocks).
 *
 *   team_signal(ctr)          one thread, once the threads whose writes it stands for have met it
 *                             at a block or named barrier: fences those writes (__threadfence:
 *                             ordered before the increment for the whole GPU, so the pair is a
 *                             release) and adds 1 to *ctr; returns the count before
 *   team_poll(ctr, target)    one thread: waits until *ctr >= target (a volatile load, so each try
 *                             reaches L2, with a 32 ns nap between tries), then fences, so that
 *                             what the signalling threads fenced is seen after it (an acquire)
 *   team_arrive(ctr)          the whole block: a block barrier, then thread 0's team_signal
 *   team_wait(ctr, target)    the whole block: thread 0's team_poll, then a block barrier, after
 *                             which every thread may read what the counted blocks wrote (through
 *                             L2, e.g. __ldcg: an SM's L1 is not kept coherent with other SMs'
 *                             writes)
 *
 * ctr: one unsigned in global memory a barrier, which the caller sets (usually to 0) before the
 * blocks that count on it run; target: the number of arrivals to wait for. No error is reported:
 * a target that is never reached hangs the grid. A poll only ends if every block it waits for
 * runs, so the blocks waited on must be resident at once (a cooperative launch: CUDA C++
 * Programming Guide, "Grid Synchronization") or must not wait, themselves, on the waiting ones
 * (b6: the forward blocks never wait on the sums). The fence-then-add publish and poll-then-fence
 * wait are the pattern of the Programming Guide's "Memory Fence Functions" example (the last block
 * of a sum).
 */
#ifndef BARRIER_CUH
#define BARRIER_CUH

__device__ static inline unsigned team_signal(unsigned *ctr)
{
    __threadfence();
    return atomicAdd(ctr, 1u);
}

__device__ static inline void team_poll(const unsigned *ctr, unsigned target)
{
    while (*(const volatile unsigned *)ctr < target)
        __nanosleep(32);
    __threadfence();
}

__device__ static inline void team_arrive(unsigned *ctr)
{
    __syncthreads(); /* the block's writes are done */
    if (threadIdx.x == 0)
        team_signal(ctr);
}

__device__ static inline void team_wait(const unsigned *ctr, unsigned target)
{
    if (threadIdx.x == 0)
        team_poll(ctr, target);
    __syncthreads();
}

#endif
