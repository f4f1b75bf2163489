/*
 * team.cuh: one launch that walks the batch in teams of blocks (v6, b3)
 *
 * v5 showed that a chunk of samples small enough for L2 is too little work for a launch: 43
 * chunks of two launches and two events cost 13 us a chunk. Here the whole batch is one
 * launch. Its grid is as many blocks as the GPU holds at once (the occupancy API: 2 blocks of
 * 512 threads an SM, 264 on the H100), cut into `teams` teams of `ctas` blocks; team j takes
 * samples j, j + teams, j + 2 teams, ... For each sample the team's blocks first read it from
 * DRAM for the statistics (phase A), meet at a barrier, then read it again for the outputs
 * (phase B); between the two the team has read only its current samples, so they are still in
 * L2. The teams do not wait for one another: while one waits at its barrier or reads L2, the
 * others read DRAM.
 *
 * The team barrier is a counter in global memory, one a sample (zeroed before the launch;
 * common/barrier.cuh, shared with chapter 3): each block, its writes done, fences them
 * (__threadfence: visible to the whole GPU before the increment is) and adds 1; a waiting
 * block's thread 0 polls until all `ctas` blocks have arrived. That only ends if every block of
 * the team is running, not waiting for a slot behind a block that polls: the launch is
 * cooperative (cudaLaunchCooperativeKernel fails rather than start a grid that cannot all be
 * resident; CUDA C Programming Guide, "Grid Synchronization"). Other blocks' partial results are
 * read after the barrier with __ldcg (from L2: an SM's L1 is not coherent with others' writes).
 *
 * A block's share of a sample's positions is a contiguous range, S / ctas of them (240 with
 * 66 blocks a team), walked in passes.
 */
#ifndef CH04_TEAM_CUH
#define CH04_TEAM_CUH

#include "model.h"
#include "barrier.cuh" /* common/: team_signal, team_poll, team_arrive, team_wait */

#define TEAM_BLOCK 512 /* threads a block: 16 warps */
static_assert(TEAM_BLOCK / 32 == GROUPS, "b3 gives each warp one group");

/* a barrier for `threads` threads of the block (a multiple of 32), id 1..15: __syncthreads is
 * id 0 for all of them (PTX ISA, "bar.sync"); v6's producer and consumer warps each have one */
__device__ static inline void named_barrier(int id, int threads)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

/* positions [q0, q1) of a sample that block `rank` of `ctas` owns in phase B */
__device__ static inline void team_range(int S, int rank, int ctas, int *q0, int *q1)
{
    *q0 = (int)((long long)S * rank / ctas);
    *q1 = (int)((long long)S * (rank + 1) / ctas);
}

#endif
