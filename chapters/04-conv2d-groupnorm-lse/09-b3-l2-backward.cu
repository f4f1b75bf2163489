/*
 * b3: the backward as one persistent launch, c's second read from L2 (team.cuh)
 *
 * Defect of b2: after v4's forward (c read twice), its backward reads c twice more from DRAM
 * (the group sums, then dc) and writes dc: 2.6 GB in all, where 1.58 GB is the floor of a
 * forward and a separate backward (model.h).
 * Change: v6's forward, then the backward in teams (team.cuh), each block doing both reads in
 * turn. Per sample, warp G of a block recomputes the forward of group G at the block's
 * positions from c, y and the saved statistics (apply.cuh's base-2 epilogue) and adds up the
 * GroupNorm backward's two sums, dxh and dxh xh, by warp_sum (phase A, c from DRAM); the team
 * barrier; every block adds the team's partials in a fixed order into mean(dxh) and
 * mean(dxh xh); phase B recomputes once more, from c now in L2, and writes dc = dr + rstd (dxh -
 * mean(dxh) - xh mean(dxh xh)) with streaming stores. A block does phase A of the sample after
 * next before it waits for the current one (the look-ahead). dgamma and dbeta: each lane keeps
 * its group's 4 channels' sums in registers across its samples, each block writes one partial
 * a channel, and b1's b1_param_sums adds them in block order: deterministic.
 * Prediction: v6's forward, 0.31 ms [v6 epilogue_fwd]; the backward reads c once and g, writes
 * dc: 1048 MB, 0.35 ms at the ceiling: about 0.7 ms for the pair, the target.
 * Measured (H100 80GB HBM3, KernelBench shape, data/h100/ch04.csv): 1.099 ms [b3 epilogue_fwdbwd],
 * 1.37x faster [b2/b3 epilogue_fwdbwd] than b2, but 2.1x [b3 epilogue_fwdbwd median_ms/floor_ms]
 * the floor; the backward alone takes about 0.79 ms, 2.3x its 0.35. Nsight Compute at
 * 32x8x128x128: the backward reads 249 MB from DRAM for 130 MB of c, so most of phase B misses
 * L2 (two samples a team, and dc's streaming stores pass through the same L2). The step: 5.38 ms
 * [b3 train_step]. Left: v6's producer/consumer split for the backward too.
 */
#include "apply.cuh"
#include "model.h"
#include "reduce.cuh"
#include "team.cuh"

/* what a block keeps of one sample in shared memory: v6's base-2 affine (apply.cuh), gamma,
 * and each group's rstd and -mean rstd (xh = c rstd - mean rstd, one FMA); read as float4 */
struct sample_smem {
    __align__(16) float a2[C_OUT];
    __align__(16) float b2[C_OUT];
    __align__(16) float gamma[C_OUT];
    float rstd[GROUPS], nmr[GROUPS];
};

__device__ static inline void load_sample(sample_smem *ss, const float *__restrict__ mean,
                                          const float *__restrict__ rstd, const float *__restrict__ gamma,
                                          const float *__restrict__ beta, int n)
{
    __shared__ float smean[GROUPS], srstd[GROUPS];
    if (threadIdx.x < GROUPS) {
        float mu = mean[n * GROUPS + threadIdx.x], rs = rstd[n * GROUPS + threadIdx.x];
        smean[threadIdx.x] = mu, srstd[threadIdx.x] = rs;
        ss->rstd[threadIdx.x] = rs, ss->nmr[threadIdx.x] = -mu * rs;
    }
    if (threadIdx.x < C_OUT)
        ss->gamma[threadIdx.x] = gamma[threadIdx.x];
    __syncthreads();
    affine_of2(ss->a2, ss->b2, smean, srstd, gamma, beta);
    __syncthreads();
}

/* the 4 channels' constants of a warp's group, from shared memory as float4 */
struct group_consts {
    float a2[CPG], b2[CPG], gamma[CPG], rstd, nmr;
};

__device__ static inline void load_group(group_consts *k, const sample_smem *ss, int G)
{
    float4 a = *(const float4 *)&ss->a2[G * CPG], b = *(const float4 *)&ss->b2[G * CPG];
    float4 gm = *(const float4 *)&ss->gamma[G * CPG];
    k->a2[0] = a.x, k->a2[1] = a.y, k->a2[2] = a.z, k->a2[3] = a.w;
    k->b2[0] = b.x, k->b2[1] = b.y, k->b2[2] = b.z, k->b2[3] = b.w;
    k->gamma[0] = gm.x, k->gamma[1] = gm.y, k->gamma[2] = gm.z, k->gamma[3] = gm.w;
    k->rstd = ss->rstd[G], k->nmr = ss->nmr[G];
}

/* one value's recomputed forward and backward, from c's value v, y2 = log2(e) y and g at its
 * position: returns dr = g softmax_c(r) (the residual's direct term of dc), sets
 * dgn = dr HardSwish'(t) (1 - t^2) and dxh = dgn gamma */
__device__ static inline float backward_at(float v, float a2, float b2, float gamma, float y2, float gv,
                                           float *dgn, float *dxh)
{
    float t = tanh_of_u(fmaf(v, a2, b2));
    float dr = gv * ex2_approx(r2_of(v, t) - y2);
    *dgn = dr * fmaf(t, 1.0f / 3.0f, 0.5f) * fmaf(-t, t, 1.0f); /* (2t + 3) / 6, 1 - t^2 */
    *dxh = *dgn * gamma;
    return dr;
}

/* phase A: warp G's sums of dxh and dxh xh over group G at the block's positions of sample n,
 * 32 positions a pass (a lane each), by warp_sum into one partial a (group, block); each
 * lane's dgamma and dbeta of the group's 4 channels go on adding up across samples */
__device__ static inline void backward_sums(const float *__restrict__ c, const float *__restrict__ y,
                                            const float *__restrict__ g, const sample_smem *ss,
                                            float2 *__restrict__ part, int n, int S, int q0, int q1,
                                            int rank, int ctas, float *dgamma, float *dbeta)
{
    int G = threadIdx.x >> 5, lane = threadIdx.x & 31;
    group_consts kc;
    load_group(&kc, ss, G);
    float s1 = 0.0f, s2 = 0.0f; /* sum dxh, sum dxh xh */
    for (int q = q0 + lane; q < q1; q += 32) {
        const float *cs = c + ((size_t)n * C_OUT + G * CPG) * S + q;
        float y2 = y[(size_t)n * S + q] * LOG2E_F, gv = g[(size_t)n * S + q], v[CPG];
#pragma unroll
        for (int k = 0; k < CPG; k++)
            v[k] = cs[(size_t)k * S];
#pragma unroll
        for (int k = 0; k < CPG; k++) {
            float dgn, dxh, xh = fmaf(v[k], kc.rstd, kc.nmr);
            backward_at(v[k], kc.a2[k], kc.b2[k], kc.gamma[k], y2, gv, &dgn, &dxh);
            s1 += dxh, s2 = fmaf(dxh, xh, s2);
            dgamma[k] = fmaf(dgn, xh, dgamma[k]), dbeta[k] += dgn;
        }
    }
    s1 = warp_sum(s1), s2 = warp_sum(s2);
    if (lane == 0)
        part[((size_t)n * GROUPS + G) * ctas + rank] = make_float2(s1, s2);
}

/* after the barrier: warp G adds group G's partials (lanes in a fixed stride, then warp_sum)
 * into mean(dxh), mean(dxh xh) */
__device__ static inline void backward_merge(const float2 *__restrict__ part, int n, int S, int ctas,
                                             float *sm1, float *sm2)
{
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float a = 0.0f, b = 0.0f;
    for (int j = lane; j < ctas; j += 32) {
        const float2 *p = part + ((size_t)n * GROUPS + warp) * ctas + j;
        a += __ldcg(&p->x), b += __ldcg(&p->y);
    }
    a = warp_sum(a), b = warp_sum(b);
    if (lane == 0)
        sm1[warp] = a / (float)(CPG * S), sm2[warp] = b / (float)(CPG * S);
}

/* phase B: dc of group G (warp G) at the block's positions of sample n, c from L2, dc streamed out */
__device__ static inline void backward_apply(const float *__restrict__ c, const float *__restrict__ y,
                                             const float *__restrict__ g, const sample_smem *ss,
                                             const float *sm1, const float *sm2,
                                             float *__restrict__ dc, int n, int S, int q0, int q1)
{
    int G = threadIdx.x >> 5, lane = threadIdx.x & 31;
    group_consts kc;
    load_group(&kc, ss, G);
    float m1 = sm1[G], m2 = sm2[G];
    for (int q = q0 + lane; q < q1; q += 32) {
        size_t at = ((size_t)n * C_OUT + G * CPG) * S + q;
        float y2 = y[(size_t)n * S + q] * LOG2E_F, gv = g[(size_t)n * S + q], v[CPG];
#pragma unroll
        for (int k = 0; k < CPG; k++)
            v[k] = __ldcs(c + at + (size_t)k * S);
#pragma unroll
        for (int k = 0; k < CPG; k++) {
            float dgn, dxh, xh = fmaf(v[k], kc.rstd, kc.nmr);
            float dr = backward_at(v[k], kc.a2[k], kc.b2[k], kc.gamma[k], y2, gv, &dgn, &dxh);
            __stcs(dc + at + (size_t)k * S, fmaf(kc.rstd, dxh - m1 - xh * m2, dr));
        }
    }
}

/* block (team rank): v6's schedule with the look-ahead, phase A the sums, phase B dc; two
 * samples' statistics in shared memory (the one looked ahead at, the one being applied); at
 * the end the block's dgamma, dbeta partials */
__global__ void __launch_bounds__(TEAM_BLOCK, 2)
b3_team_backward(const float *__restrict__ c, const float *__restrict__ y, const float *__restrict__ g,
                 const float *__restrict__ mean, const float *__restrict__ rstd,
                 const float *__restrict__ gamma, const float *__restrict__ beta,
                 float2 *__restrict__ part, float *__restrict__ pparam, unsigned *arrived,
                 float *__restrict__ dc, int N, int S, int teams, int ctas)
{
    __shared__ sample_smem ss[2];
    __shared__ float sm1[GROUPS], sm2[GROUPS];
    int team = blockIdx.x / ctas, rank = blockIdx.x % ctas, q0, q1;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    team_range(S, rank, ctas, &q0, &q1);
    float dgamma[CPG] = {0.0f, 0.0f, 0.0f, 0.0f}, dbeta[CPG] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (team < N) {
        load_sample(&ss[0], mean, rstd, gamma, beta, team);
        backward_sums(c, y, g, &ss[0], part, team, S, q0, q1, rank, ctas, dgamma, dbeta);
        team_arrive(arrived + team);
    }
    for (int n = team, k = 0; n < N; n += teams, k ^= 1) {
        if (n + teams < N) {
            load_sample(&ss[k ^ 1], mean, rstd, gamma, beta, n + teams);
            backward_sums(c, y, g, &ss[k ^ 1], part, n + teams, S, q0, q1, rank, ctas,
                          dgamma, dbeta);
            team_arrive(arrived + n + teams);
        }
        team_wait(arrived + n, ctas);
        backward_merge(part, n, S, ctas, sm1, sm2);
        __syncthreads();
        backward_apply(c, y, g, &ss[k], sm1, sm2, dc, n, S, q0, q1);
        __syncthreads(); /* sm1, sm2 and ss[k] are the next samples' */
    }
    /* the block's dgamma, dbeta partials: warp G's lanes summed for its 4 channels */
#pragma unroll
    for (int k = 0; k < CPG; k++) {
        float a = warp_sum(dgamma[k]), b = warp_sum(dbeta[k]);
        if (lane == 0) {
            size_t e = ((size_t)blockIdx.x * C_OUT + warp * CPG + k) * 2;
            pparam[e] = a, pparam[e + 1] = b;
        }
    }
}

int b3_blocks_per_sm(void)
{
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, b3_team_backward, TEAM_BLOCK, 0));
    return per_sm;
}

/* the backward in teams after any forward that left c, y, mean and rstd (b3, b4) */
void b3_backward(const run_ctx *r)
{
    const float *c = r->c, *y = r->y, *g = r->g, *mean = r->mean, *rstd = r->rstd;
    const float *gamma = r->gamma, *beta = r->beta;
    float2 *part = r->gpart;
    float *pparam = r->pparam, *dc = r->dc;
    unsigned *arrived = r->arrived + r->sh.n; /* the forward's counters are the first N */
    int N = r->sh.n, S = r->sh.s, teams = r->teams, ctas = r->team_ctas;
    void *args[] = {&c, &y, &g, &mean, &rstd, &gamma, &beta, &part, &pparam, &arrived, &dc,
                    &N, &S, &teams, &ctas};
    CUDA_CHECK(cudaMemsetAsync(arrived, 0, sizeof(unsigned) * N, r->queue));
    team_launch((const void *)b3_team_backward, r, args);
    b1_param_sums<<<C_OUT, 256, 0, r->queue>>>(pparam, r->dgamma, r->dbeta, r->team_grid); /* b1's */
}

void b3_launch(const run_ctx *r, int scope)
{
    if (scope == SCOPE_TRAIN)
        conv_forward(r);
    v6_epilogue(r);
    b3_backward(r);
    if (scope == SCOPE_TRAIN)
        lib_dx(r), lib_dw(r), lib_dbias(r);
}
