/*
 * v14: persistent teams, a software pipeline (comment to be written from the measurements)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.cuh"
#include "model.h"

#define TEAM_THREADS CL_THREADS /* 16 warps: warp w reduces channel w, as in the clusters */
#define SIG (TEAM_THREADS - 1)  /* the thread that counts the readers: it issues no copies */
#define SLOT_EMPTY 0xffffffffffffffffull /* no (mean, M2) is this: the GPU's NaN is 0x7fffffff */

/* A part's (mean, M2) of one channel as one 64-bit word: a relaxed store is seen whole or not at
 * all (PTX ISA, memory consistency model: single-copy atomicity up to 64 bits), so the word is
 * its own flag: no fence, no counter, and a reader spins on the word itself */
__device__ static inline void slot_put(unsigned long long *p, float mean, float m2)
{
    unsigned long long v = (unsigned long long)__float_as_uint(mean) |
                           ((unsigned long long)__float_as_uint(m2) << 32);
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ static inline unsigned long long slot_get(const unsigned long long *p)
{
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
#define CP_THREADS (TEAM_THREADS - 32) /* cp.async issuers: all but the last warp */

/* Item i of the launch is part i % P of sample i / P. Block b walks items b, b + G, b + 2G, ...
 * (G the grid); item k of a block sits in buffer k % NB. A sample's positions are cut into
 * chunks of CH (a multiple of 4); part r owns chunks r, r + P, r + 2P, ..., stored one after
 * another in its buffer (CH = the part's whole share: contiguous parts). */
struct team_item {
    int n, r, len; /* len: positions the part owns */
};

__host__ __device__ static inline int part_len(int S, int CH, int P, int r)
{
    int NC = (S + CH - 1) / CH;
    if (r >= NC)
        return 0;
    int len = (NC - r + P - 1) / P * CH;
    if ((NC - 1) % P == r)
        len -= NC * CH - S;
    return len;
}

/* floats a channel row of a part takes in shared memory: the most chunks any part owns */
__host__ __device__ static inline int chunk_cap(int S, int CH, int P)
{
    int NC = (S + CH - 1) / CH;
    return (NC + P - 1) / P * CH;
}

/* the sample position of the part's local position q */
__device__ static inline int pos_of(int q, int r, int CH, int P) { return ((q / CH) * P + r) * CH + q % CH; }

__device__ static inline team_item item_of(int i, int S, int CH, int P)
{
    team_item t;
    t.n = i / P, t.r = i - t.n * P;
    t.len = part_len(S, CH, P, t.r);
    return t;
}

/* this block's k-th item into buffer k % NB: bulk copies by thread 0 (one mbarrier a row), or
 * cp.async by every thread (one commit group an item, empty past the last item, so that every
 * thread's group count stays in step) */
template <int NB>
__device__ static inline void team_issue(float *smem, int cap, unsigned long long (*bars)[C_OUT],
                                         const float *__restrict__ c, int k, int S, int CH, int P,
                                         int total, int bulk)
{
    int i = blockIdx.x + k * gridDim.x, b = k % NB;
    float *buf = smem + (size_t)b * C_OUT * cap;
    if (i >= total) {
        if (!bulk)
            __pipeline_commit();
        return;
    }
    team_item t = item_of(i, S, CH, P);
    const float *src = c + (size_t)t.n * C_OUT * S;
    if (threadIdx.x == 0)
        tl_mark(k, 0);
#if __CUDA_ARCH__ >= 900
    if (bulk) { /* contiguous parts only: one bulk copy a row */
        if (threadIdx.x == 0) {
            fence_proxy_async(); /* the block's reads of this buffer (before the caller's barrier) */
            bulk_rows(buf, cap, src + t.r * CH, t.len, S, bars[b]);
        }
        return;
    }
#endif
    if (threadIdx.x < CP_THREADS) { /* by all but the last warp */
        if ((S & 3) == 0) {
            int len4 = t.len >> 2, n4 = C_OUT * len4;
            for (int j = threadIdx.x; j < n4; j += CP_THREADS) {
                int co = j / len4, q = 4 * (j - co * len4);
                __pipeline_memcpy_async(buf + co * cap + q, src + (size_t)co * S + pos_of(q, t.r, CH, P), 16);
            }
        } else {
            for (int j = threadIdx.x; j < C_OUT * t.len; j += CP_THREADS) {
                int co = j / t.len, q = j - co * t.len;
                __pipeline_memcpy_async(buf + co * cap + q, src + (size_t)co * S + pos_of(q, t.r, CH, P), 4);
            }
        }
    }
    __pipeline_commit();
}

/* item k's statistics: warp w waits for its row (bulk) or the block for its copies (cp.async:
 * `newer` groups were committed after item k's), reduces row w, and publishes (mean, M2) */
template <int NB>
__device__ static inline void team_stats(const float *smem, int cap,
                                         unsigned long long (*bars)[C_OUT], const float *sm_m,
                                         unsigned long long *slots, int k, int S, int CH, int P,
                                         int bulk, int newer, int mode, cluster_shared *cs)
{
    int i = blockIdx.x + k * gridDim.x, b = k % NB, warp = threadIdx.x >> 5;
    team_item t = item_of(i, S, CH, P);
    const float *buf = smem + (size_t)b * C_OUT * cap;
    if (bulk) {
        mbar_wait(&bars[b][warp], (unsigned)(k / NB) & 1);
    } else {
        if (newer >= NB - 1)
            __pipeline_wait_prior(NB - 1);
        else
            __pipeline_wait_prior(NB - 2 > 0 ? NB - 2 : 0);
        __syncthreads();
    }
    if (threadIdx.x == SIG)
        tl_mark(k, 1);
    if (mode == 1)
        return;
    welford w = row_welford(buf + warp * cap, t.len, sm_m[warp]);
    if (mode == 2) {
        if ((threadIdx.x & 31) == 0)
            cs->wf[k & 1][warp] = w;
        return;
    }
    if ((threadIdx.x & 31) == 0)
        slot_put(slots + (size_t)i * C_OUT + warp, w.mean, w.m2);
    if (threadIdx.x == 0)
        tl_mark(k, 2);
}

/* y for the part's positions, from shared memory; part 0 also writes the statistics */
__device__ static inline void team_write(const cluster_shared *cs, const float *vals, int cap,
                                         team_item t, float *__restrict__ y, float *__restrict__ mean,
                                         float *__restrict__ rstd, int S, int CH, int P)
{
    for (int q = threadIdx.x; q < t.len; q += TEAM_THREADS) {
        float best = 0.0f;
#pragma unroll
        for (int co = 0; co < C_OUT; co++) {
            float u = clampf1((vals[co * cap + q] * cs->m[co] - cs->mean[co]) * cs->rstd[co]) * cs->m[co];
            if (co == 0 || u > best)
                best = u;
        }
        y[(size_t)t.n * S + pos_of(q, t.r, CH, P)] = best;
    }
    if (t.r == 0 && threadIdx.x < C_OUT)
        mean[t.n * C_OUT + threadIdx.x] = cs->mean[threadIdx.x],
        rstd[t.n * C_OUT + threadIdx.x] = cs->rstd[threadIdx.x];
}

/* item k: warp w's lane l waits for part l's word of channel w, the warp merges the P parts in
 * part order (the same bits in every block of the team), and the block writes y for the item's
 * positions. The last block of the team to have read the words empties them for the next
 * launch (done: one counter a sample). */
template <int NB>
__device__ static inline void team_apply(const float *smem, int cap, cluster_shared *cs,
                                         unsigned long long *slots, unsigned *done,
                                         float *__restrict__ y, float *__restrict__ mean,
                                         float *__restrict__ rstd, int k, int S, int CH, int P,
                                         int mode)
{
    int i = blockIdx.x + k * gridDim.x, b = k % NB, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    team_item t = item_of(i, S, CH, P);
    unsigned long long *team = slots + (size_t)t.n * P * C_OUT;
    if (threadIdx.x == SIG)
        tl_mark(k, 3);
    welford w = {0, 0.0f, 0.0f};
    if (mode == 1) {
        __syncthreads();
        return;
    }
    if (mode == 2) {
        if (lane == 0) {
            w = cs->wf[k & 1][warp];
            cs->mean[warp] = w.mean, cs->rstd[warp] = rsqrtf(w.m2 / w.n + (float)IN_EPS);
        }
        __syncthreads();
        team_write(cs, smem + (size_t)b * C_OUT * cap, cap, t, y, mean, rstd, S, CH, P);
        return;
    }
    if (lane < P) {
        unsigned long long v;
        while ((v = slot_get(team + lane * C_OUT + warp)) == SLOT_EMPTY)
            __nanosleep(20);
        w.n = part_len(S, CH, P, lane);
        w.mean = __uint_as_float((unsigned)v), w.m2 = __uint_as_float((unsigned)(v >> 32));
    }
    for (int off = 16; off > 0; off >>= 1)
        w = chan_merge(w, shfl_welford(w, off));
    if (lane == 0)
        cs->mean[warp] = w.mean, cs->rstd[warp] = rsqrtf(w.m2 / S + (float)IN_EPS);
    __syncthreads();
    if (threadIdx.x == SIG && atomicAdd(done + t.n, 1u) == (unsigned)P - 1) {
        for (int j = 0; j < P * C_OUT; j++)
            slot_put(team + j, __uint_as_float(~0u), __uint_as_float(~0u));
        done[t.n] = 0;
    }
    if (threadIdx.x == 0)
        tl_mark(k, 4);
    team_write(cs, smem + (size_t)b * C_OUT * cap, cap, t, y, mean, rstd, S, CH, P);
}

template <int NB, int LA, int MINB = 1>
__global__ void __launch_bounds__(TEAM_THREADS, MINB)
k_teams(const float *__restrict__ c, const float *__restrict__ m, float *__restrict__ y,
        float *__restrict__ mean, float *__restrict__ rstd, unsigned long long *slots,
        unsigned *done, int S, int N, int CH, int P, int bulk, int mode)
{
    extern __shared__ float4 smem4[];
    float *smem = (float *)smem4;
    __shared__ cluster_shared cs;
    __shared__ unsigned long long bars[NB][C_OUT];
    int cap = chunk_cap(S, CH, P), total = N * P, G = gridDim.x;
    if (threadIdx.x < C_OUT)
        cs.m[threadIdx.x] = __ldg(m + threadIdx.x);
    if (bulk && threadIdx.x == 0) {
        for (int b = 0; b < NB; b++)
            for (int co = 0; co < C_OUT; co++)
                mbar_init(&bars[b][co]);
        mbar_init_fence();
    }
    __syncthreads();
    for (int k = 0; k < NB; k++)
        team_issue<NB>(smem, cap, bars, c, k, S, CH, P, total, bulk);
    int items = blockIdx.x < total ? (total - 1 - blockIdx.x) / G + 1 : 0;
    if (LA && items > 0)
        team_stats<NB>(smem, cap, bars, cs.m, slots, 0, S, CH, P, bulk, NB - 1, mode, &cs);
    for (int k = 0; k < items; k++) {
        if (!LA)
            team_stats<NB>(smem, cap, bars, cs.m, slots, k, S, CH, P, bulk, NB - 1, mode, &cs);
        else if (k + 1 < items)
            team_stats<NB>(smem, cap, bars, cs.m, slots, k + 1, S, CH, P, bulk, NB - 2, mode, &cs);
        team_apply<NB>(smem, cap, &cs, slots, done, y, mean, rstd, k, S, CH, P, mode);
        __syncthreads(); /* buffer k % NB is free */
        if (threadIdx.x == 0)
            tl_mark(k, 5);
        team_issue<NB>(smem, cap, bars, c, k + NB, S, CH, P, total, bulk);
    }
}

typedef void (*teams_kernel)(const float *, const float *, float *, float *, float *,
                             unsigned long long *, unsigned *, int, int, int, int, int, int);

struct teams_form {
    const char *name;
    teams_kernel k;
    int nb, la, minb;
};

static const teams_form forms[] = {
    {"2", k_teams<2, 0>, 2, 0, 1}, {"3", k_teams<3, 0>, 3, 0, 1}, {"3la", k_teams<3, 1>, 3, 1, 1},
    {"4", k_teams<4, 0>, 4, 0, 1}, {"4la", k_teams<4, 1>, 4, 1, 1}, {"6la", k_teams<6, 1>, 6, 1, 1},
    {"2x2", k_teams<2, 0, 2>, 2, 0, 2}, {"3lax2", k_teams<3, 1, 2>, 3, 1, 2},
};

/* V14X="<form>,<bulk|cp>,<mode>,<CH>,<align>" (experiment) */
static int xfield(const char *e, int k, int dflt)
{
    for (int i = 0; i < k && e; i++) {
        e = strchr(e, ',');
        e = e ? e + 1 : NULL;
    }
    return e && *e && *e != ',' ? atoi(e) : dflt;
}

static const teams_form *pick(void)
{
    const char *e = getenv("V14X");
    char name[32] = "4la";
    if (e) {
        snprintf(name, sizeof name, "%s", e);
        char *comma = strchr(name, ',');
        if (comma)
            *comma = 0;
    }
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++)
        if (!strcmp(forms[i].name, name))
            return &forms[i];
    die(2, "V14X=%s: no such form", e);
    return NULL;
}

/* a part's floats a channel row for P parts: contiguous parts (ch 0) or chunks of ch */
static int row_cap(int S, int ch, int P) { return ch ? chunk_cap(S, ch, P) : part_cap(S, P); }

/* the fewest parts a sample whose NB buffers fit the shared-memory opt-in; 0 if none */
static int teams_parts(const run_ctx *r, int nb, int ch, int minb)
{
    for (int P = 1; P <= MAX_PARTS; P++)
        if ((size_t)nb * C_OUT * row_cap(r->sh.s, ch, P) * 4 <= r->smem_optin / minb - 2048)
            return P;
    return 0;
}

void v14_epilogue(const run_ctx *r)
{
    const teams_form *f = pick();
    const char *e = getenv("V14X");
    int bulk = !(e && strstr(e, ",cp")), mode = xfield(e, 2, 0), ch = xfield(e, 3, 0);
    int align = xfield(e, 4, 0);
    int S = r->sh.s, N = r->sh.n, P = teams_parts(r, f->nb, ch, f->minb);
    if (P == 0) {
        v9_epilogue(r);
        return;
    }
    int CH = ch ? ch : part_cap(S, P);
    bulk = bulk && !ch && r->hopper && (S & 3) == 0;
    size_t smem = (size_t)f->nb * C_OUT * row_cap(S, ch, P) * 4;
    CUDA_CHECK(cudaFuncSetAttribute((const void *)f->k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)r->smem_optin));
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f->k, TEAM_THREADS, smem));
    int G = per_sm * r->sm_count, total = N * P;
    if (per_sm < 1 || G < P) {
        v9_epilogue(r);
        return;
    }
    if (align)
        G = G / P * P;
    G = G < total ? G : total;
    const float *c = r->c, *m = r->m;
    float *y = r->y, *mean = r->mean, *rstd = r->rstd;
    tl_setup();
    unsigned long long *slots = r->slots;
    unsigned *done = r->done;
    void *args[] = {&c, &m, &y, &mean, &rstd, &slots, &done, &S, &N, &CH, &P, &bulk, &mode};
    CUDA_CHECK(cudaLaunchCooperativeKernel((const void *)f->k, G, TEAM_THREADS, args, smem, 0));
    tl_dump("v14", G);
}

void v14_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    v14_epilogue(r);
}

