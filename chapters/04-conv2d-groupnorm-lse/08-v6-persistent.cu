/*
 * v6: one persistent launch; teams of blocks, producer and consumer warps (team.cuh)
 *
 * Defect of v5: the second read of c comes from L2, but 43 chunks of two launches joined by
 * events cost 13 us a chunk: 0.742 ms [v5 epilogue_fwd], 1.98x v4 [v5/v4 epilogue_fwd].
 * Change: one launch for the whole batch, as many blocks as are resident at once, in teams
 * (team.cuh); a team takes a sample at a time, so L2 holds only the teams' current samples.
 * Inside each block the two reads of c are done by different warps at once:
 *   producers (warps 0..7)   read the block's share of the sample's 16 groups from DRAM into
 *                            shifted sums (below) and arrive at the team's counter; the last
 *                            block to arrive adds the team's partials in block order and
 *                            publishes mean and rstd; at most LOOKAHEAD = 1 sample ahead;
 *   consumers (warps 8..15)  wait for the statistics, read the block's positions again from L2
 *                            (evict-first: c's last use) and write y, the epilogue in base 2 on
 *                            the special-function unit (apply.cuh: 16 instructions a value).
 * Teams: TEAM_L2_SHARE of the L2 over LOOKAHEAD + 1 samples, 4 on the H100. Tried: both reads
 * in turn in every block: slower than v4; 5 teams: 1 to 2% faster, not the rule (LABBOOK.md).
 * Prediction: DRAM sees c once and y: 528 MB, 0.177 ms at the ceiling [v6 epilogue_fwd floor_ms];
 * about 0.2 ms if the producers keep DRAM busy while the consumers work from L2.
 * Measured (H100 80GB HBM3, KernelBench shape, data/h100/ch04.csv): 0.3092 ms [v6 epilogue_fwd],
 * 1.21x faster [v4/v6 epilogue_fwd] than v4, 57% of the floor [v6 epilogue_fwd pct_floor]; c
 * crosses DRAM once (Nsight Compute). The prediction missed: a team's sample is a chain of
 * latencies (two DRAM round trips, the last arrival, the publication, the consumers' pass) that
 * more teams would overlap, but beyond 5 their samples no longer fit L2.
 */
#include <stdlib.h>

#include "apply.cuh"
#include "reduce.cuh"
#include "model.h"
#include "team.cuh"

#define PRODUCERS 256                  /* warps 0..7: phase A, two groups a warp */
#define CONSUMERS (TEAM_BLOCK - PRODUCERS) /* warps 8..15: the merge and phase B */
#define V6_POS 64                      /* positions a pass of phase B */
#define V6_SLICES (CONSUMERS / V6_POS) /* consumer threads a position: 4 */
#define V6_SLICE_CH (C_OUT / V6_SLICES) /* channels a consumer thread: 16 */
#ifndef LOOKAHEAD
#define LOOKAHEAD 1 /* samples the producers may be ahead of the consumers */
#endif
#define BAR_PRODUCERS 1                /* named barrier ids (team.cuh) */
#define BAR_CONSUMERS 2

/* phase A, producer warp pw: groups 2 pw and 2 pw + 1 of sample n, contiguous in NCHW (8
 * channels, 2 S float4), block `rank`'s share: float4 rank 32 + lane, stepping ctas 32, eight
 * loads issued before the first is used (the share is 15 or 16 float4 a lane with 66 blocks a
 * team, 4 teams on the H100: two round trips to DRAM a sample). Not Welford's (count, mean, M2) this time but shifted
 * sums: with K the group's first value, the same for every lane and every block,
 * s1 = sum (v - K) and s2 = sum (v - K)^2 cost 3 instructions a value, and, the shift being
 * common, the partial sums of all lanes and blocks simply add (Welford's update divides at
 * every value, Chan's merge at every merge). mean = K + s1 / n and M2 = s2 - s1^2 / n cancel
 * only as far as K is from the mean in standard deviations (Chan, Golub and LeVeque,
 * "Algorithms for computing the sample variance", 1983: the shifted data); K is one of the
 * group's own values, a few standard deviations at most. */
__device__ static inline void produce_sums(const float *__restrict__ c, float2 *__restrict__ part,
                                           int n, int S, int rank, int ctas)
{
    int pw = threadIdx.x >> 5, lane = threadIdx.x & 31, seg = n * GROUPS + 2 * pw;
    const float *base = c + (size_t)seg * CPG * S;
    const float4 *p = (const float4 *)base;
    float ka = base[0], kb = base[(size_t)CPG * S]; /* the shifts: each group's first value */
    float a1 = 0.0f, a2 = 0.0f, b1 = 0.0f, b2 = 0.0f;
    int step = ctas * 32, s2 = 2 * S;
    for (int j = rank * 32 + lane; j < s2; j += 8 * step) {
        float4 v[8];
#pragma unroll
        for (int i = 0; i < 8; i++)
            if (j + i * step < s2)
                v[i] = p[j + i * step];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int idx = j + i * step;
            if (idx < s2) {
                float k = idx < S ? ka : kb;
                float d0 = v[i].x - k, d1 = v[i].y - k, d2 = v[i].z - k, d3 = v[i].w - k;
                float t1 = (d0 + d1) + (d2 + d3);
                float t2 = fmaf(d0, d0, fmaf(d1, d1, fmaf(d2, d2, d3 * d3)));
                if (idx < S)
                    a1 += t1, a2 += t2;
                else
                    b1 += t1, b2 += t2;
            }
        }
    }
    a1 = warp_sum(a1), a2 = warp_sum(a2), b1 = warp_sum(b1), b2 = warp_sum(b2);
    if (lane == 0)
        part[(size_t)seg * ctas + rank] = make_float2(a1, a2),
        part[(size_t)(seg + 1) * ctas + rank] = make_float2(b1, b2);
}

/* the last block of the team to finish sample n's sums adds the team's partials, in block
 * order (deterministic), into the sample's mean and rstd: producer warp pw, groups 2 pw and
 * 2 pw + 1, lanes in a fixed stride, then warp_sum */
__device__ static inline void publish_stats(const float *__restrict__ c, const float2 *__restrict__ part,
                                            float *__restrict__ mean, float *__restrict__ rstd,
                                            int n, int S, int ctas)
{
    int pw = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int h = 0; h < 2; h++) {
        int seg = n * GROUPS + 2 * pw + h;
        float s1 = 0.0f, s2 = 0.0f;
        for (int j = lane; j < ctas; j += 32) {
            const float2 *q = part + (size_t)seg * ctas + j;
            s1 += __ldcg(&q->x), s2 += __ldcg(&q->y);
        }
        s1 = warp_sum(s1), s2 = warp_sum(s2);
        if (lane == 0) {
            float cnt = (float)(CPG * S), d = s1 / cnt;
            mean[seg] = c[(size_t)seg * CPG * S] + d;
            rstd[seg] = rsqrtf(fmaxf(s2 - s1 * d, 0.0f) / cnt + (float)GN_EPS);
        }
    }
}

/* the producers: each of the team's samples in turn, at most LOOKAHEAD ahead of this block's
 * consumers (so a team has at most LOOKAHEAD + 1 samples in L2); then the arrival (team_arrive
 * done by hand, for the producers' threads only: their named barrier, then common/barrier.cuh's
 * team_signal, whose count tells the last); the last to arrive publishes the statistics and moves
 * the counter on to ctas + 1, which is what the consumers wait for */
__device__ static inline void producer(const float *__restrict__ c, float2 *__restrict__ part,
                                       unsigned *arrived, int *consumed,
                                       float *__restrict__ mean, float *__restrict__ rstd, int team,
                                       int teams, int N, int S, int rank, int ctas)
{
    __shared__ int last;
    for (int n = team, i = 0; n < N; n += teams, i++) {
        if (threadIdx.x == 0)
            while (atomicAdd(consumed, 0) < i - LOOKAHEAD) /* an atomic read: see v6_team_forward */
                __nanosleep(32);
        named_barrier(BAR_PRODUCERS, PRODUCERS);
        produce_sums(c, part, n, S, rank, ctas);
        named_barrier(BAR_PRODUCERS, PRODUCERS);
        if (threadIdx.x == 0) {
            last = team_signal(arrived + n) == (unsigned)ctas - 1;
            __threadfence(); /* the last one then reads what the others fenced before adding */
        }
        named_barrier(BAR_PRODUCERS, PRODUCERS);
        if (last) {
            publish_stats(c, part, mean, rstd, n, S, ctas);
            named_barrier(BAR_PRODUCERS, PRODUCERS);
            if (threadIdx.x == 0)
                team_signal(arrived + n);
        }
    }
}

/* phase B for one pass of V6_POS positions from q: consumer thread (pos, sl) has channels
 * 16 sl .. 16 sl + 15 of position q + pos, the epilogue in base 2 (apply.cuh). Its 16 values
 * are in registers at once, so its part of the logsumexp is two passes over them (the max,
 * then the sum of 2^(r2 - max)), not the online update and its branch; the 4 slices'
 * (max, sum) meet in shared memory. */
__device__ static inline void consume_pass(const float *__restrict__ c, const float *sa2, const float *sb2,
                                           float *__restrict__ y, int n, int S, int q, int q1,
                                           float (*pm)[V6_POS], float (*ps)[V6_POS])
{
    int ci = threadIdx.x - PRODUCERS, pos = ci % V6_POS, sl = ci / V6_POS, ch0 = sl * V6_SLICE_CH;
    q += pos;
    float m = -INFINITY, sum = 0.0f;
    if (q < q1) {
        const float *cs = c + ((size_t)n * C_OUT + ch0) * S + q;
        float v[V6_SLICE_CH];
#pragma unroll
        for (int k = 0; k < V6_SLICE_CH; k++)
            v[k] = __ldcs(cs + (size_t)k * S); /* c's last use: evict first */
#pragma unroll
        for (int k = 0; k < V6_SLICE_CH; k++) {
            v[k] = r2_of(v[k], tanh_of_u(fmaf(v[k], sa2[ch0 + k], sb2[ch0 + k]))); /* log2(e) r */
            m = fmaxf(m, v[k]);
        }
#pragma unroll
        for (int k = 0; k < V6_SLICE_CH; k++)
            sum += ex2_approx(v[k] - m);
    }
    pm[sl][pos] = m, ps[sl][pos] = sum;
    named_barrier(BAR_CONSUMERS, CONSUMERS);
    if (sl == 0 && q < q1) {
        for (int k = 1; k < V6_SLICES; k++)
            m = fmaxf(m, pm[k][pos]);
        sum = 0.0f;
        for (int k = 0; k < V6_SLICES; k++)
            sum += ps[k][pos] * ex2_approx(pm[k][pos] - m);
        y[(size_t)n * S + q] = (m + __log2f(sum)) * LN2_F;
    }
    named_barrier(BAR_CONSUMERS, CONSUMERS);
}

/* the consumers: for each of the team's samples, wait for its statistics, the base-2 affine,
 * phase B over the block's positions; then tell this block's producers */
__device__ static inline void consumer(const float *__restrict__ c, const float *__restrict__ gamma,
                                       const float *__restrict__ beta, const unsigned *arrived,
                                       int *consumed, const float *__restrict__ mean,
                                       const float *__restrict__ rstd, float *__restrict__ y,
                                       int team, int teams, int N, int S, int rank, int ctas)
{
    __shared__ float sa2[C_OUT], sb2[C_OUT];
    __shared__ float pm[V6_SLICES][V6_POS], ps[V6_SLICES][V6_POS];
    int ci = threadIdx.x - PRODUCERS, q0, q1;
    team_range(S, rank, ctas, &q0, &q1);
    for (int n = team, i = 0; n < N; n += teams, i++) {
        if (ci == 0)
            team_poll(arrived + n, (unsigned)ctas + 1);
        named_barrier(BAR_CONSUMERS, CONSUMERS);
        if (ci < C_OUT) { /* apply.cuh's affine_of2, for the consumers' thread numbers */
            int G = ci / CPG;
            float mu = __ldcg(mean + n * GROUPS + G), rs = __ldcg(rstd + n * GROUPS + G);
            float a = rs * gamma[ci];
            sa2[ci] = 2.0f * LOG2E_F * a, sb2[ci] = 2.0f * LOG2E_F * (beta[ci] - mu * a);
        }
        named_barrier(BAR_CONSUMERS, CONSUMERS);
        for (int q = q0; q < q1; q += V6_POS)
            consume_pass(c, sa2, sb2, y, n, S, q, q1, pm, ps);
        if (ci == 0)
            atomicExch(consumed, i + 1);
    }
}

/* block (team rank): warps 0..7 the producers, 8..15 the consumers */
__global__ void __launch_bounds__(TEAM_BLOCK, 2)
v6_team_forward(const float *__restrict__ c, const float *__restrict__ gamma,
                const float *__restrict__ beta, float2 *__restrict__ part, unsigned *arrived,
                float *__restrict__ mean, float *__restrict__ rstd, float *__restrict__ y, int N,
                int S, int teams, int ctas)
{
    /* samples this block's consumers have finished: written by a consumer, polled by a producer,
     * with no barrier between them, so both by shared-memory atomics. The count paces the
     * producers only (the L2 footprint; each sample has its own partials and statistics), but a
     * volatile int, as it first was, is no atomic in CUDA C++: the pair was a data race at the
     * language level, and racecheck reported it (1320 hazards at 13x8x128x128, where the teams
     * take several samples; none at the sanitizers' small shape, where they take one).
     * common/barrier.cuh's team_poll still reads its global counter by a volatile load, the
     * common idiom, outside racecheck's view (shared memory only); an atomic load there is the
     * same change, not yet made. */
    __shared__ int consumed;
    int team = blockIdx.x / ctas, rank = blockIdx.x % ctas;
    if (threadIdx.x == 0)
        consumed = 0;
    __syncthreads();
    if (threadIdx.x < PRODUCERS)
        producer(c, part, arrived, &consumed, mean, rstd, team, teams, N, S, rank, ctas);
    else
        consumer(c, gamma, beta, arrived, &consumed, mean, rstd, y, team, teams, N, S, rank, ctas);
}

/* the teams' shape: the resident grid of the team kernels (the smaller, if they differ), cut
 * into teams of whole samples' worth of L2 */
void team_plan(run_ctx *r, size_t l2_bytes)
{
    int per_sm = 0, per_sm_b = b3_blocks_per_sm();
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, v6_team_forward, TEAM_BLOCK, 0));
    per_sm = per_sm_b < per_sm ? per_sm_b : per_sm;
    if (per_sm < 1)
        die(1, "chapter 4's team kernels do not fit on an SM of this GPU");
    int grid = per_sm * r->sm_count;
    double sample_bytes = 4.0 * C_OUT * r->sh.s;
    int teams = (int)(TEAM_L2_SHARE * (double)l2_bytes / ((LOOKAHEAD + 1) * sample_bytes));
    const char *env = getenv("CH04_TEAMS"), *end = NULL;
    if (env) {
        long t = strtol(env, (char **)&end, 10);
        if (end == env || *end || t < 1 || t > 4096)
            die(2, "CH04_TEAMS=%s: the number of teams must be an integer from 1 to 4096", env);
        teams = (int)t;
    }
    teams = teams < 1 ? 1 : teams;
    teams = teams > r->sh.n ? r->sh.n : teams;
    teams = teams > grid ? grid : teams;
    r->teams = teams;
    r->team_ctas = grid / teams;
    r->team_grid = teams * r->team_ctas;
}

/* the cooperative launch: every block resident, or an error instead of a hang */
void team_launch(const void *kernel, const run_ctx *r, void **args)
{
    CUDA_CHECK(cudaLaunchCooperativeKernel(kernel, r->team_grid, TEAM_BLOCK, args, 0, r->queue));
}

void v6_epilogue(const run_ctx *r)
{
    const float *c = r->c, *gamma = r->gamma, *beta = r->beta;
    float2 *part = r->gpart;
    unsigned *arrived = r->arrived;
    float *mean = r->mean, *rstd = r->rstd, *y = r->y;
    int N = r->sh.n, S = r->sh.s, teams = r->teams, ctas = r->team_ctas;
    void *args[] = {&c, &gamma, &beta, &part, &arrived, &mean, &rstd, &y, &N, &S, &teams, &ctas};
    CUDA_CHECK(cudaMemsetAsync(arrived, 0, sizeof(unsigned) * N, r->queue));
    team_launch((const void *)v6_team_forward, r, args);
}

void v6_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_MODEL_FWD)
        conv_forward(r);
    v6_epilogue(r);
}
