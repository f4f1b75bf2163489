/*
 * test_common.c: unit tests of the shared library's host half. Each check can fail: the verifier
 * is fed planted faults, the CLI bad input, the gradient checker a wrong derivative.
 */
#define _DEFAULT_SOURCE /* mkdtemp, truncate */
#include "common.h"
#include "conv_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* hash_f32: the same bits give the same hash, any flipped bit another, wherever it is */
static void test_hash(void)
{
    enum { N = 1000003 }; /* four spans and a partial one */
    static float x[N];
    rng_state r;
    rng_seed(&r, 3);
    fill_normal(x, N, &r);
    uint64_t h0 = hash_f32(HASH_INIT, x, N), h1 = hash_f32(HASH_INIT, x, N);
    int caught = 0, tries = 0;
    size_t at[4] = {0, (size_t)1 << 18, N / 2, N - 1};
    for (int k = 0; k < 4; k++)
        for (int bit = 0; bit < 32; bit += 31) {
            uint32_t u;
            memcpy(&u, &x[at[k]], 4);
            u ^= 1u << bit;
            float saved = x[at[k]];
            memcpy(&x[at[k]], &u, 4);
            caught += hash_f32(HASH_INIT, x, N) != h0;
            tries++;
            x[at[k]] = saved;
        }
    check(h0 == h1 && caught == tries && hash_f32(HASH_INIT, x, N) == h0 &&
              hash_f32(h0, x, N) != h0 && hash_f32(h0, x, 0) == h0,
          "hash_f32: the same bits hash alike; a flipped bit (lowest or sign, in the first, a "
          "span's first, the middle and the last float of 1000003) changes it (%d of %d); "
          "chaining and n = 0 behave", caught, tries);
}

/* verify_rows_f32 on softmax-like rows: values near 1/len, where an absolute tolerance of 1e-4
 * would pass anything */
static void test_verify_rows(void)
{
    enum { ROWS = 6, LEN = 131072 }; /* chapter 5's row at the KernelBench shape */
    static float out[ROWS * LEN];
    static double ref[ROWS * LEN];
    rng_state r;
    rng_seed(&r, 11);
    for (int row = 0; row < ROWS; row++) {
        double sum = 0.0, sc = row == 3 ? -0.7 : 1.0 + 0.1 * row; /* one row's scale negative */
        for (int i = 0; i < LEN; i++)
            sum += ref[row * LEN + i] = exp(rng_uniform(&r));
        for (int i = 0; i < LEN; i++) {
            ref[row * LEN + i] *= sc / sum;
            out[row * LEN + i] = (float)(ref[row * LEN + i] * (1.0 + 2e-7 * (rng_uniform(&r) - 0.5)));
        }
    }
    verify_result v = verify_rows_f32(out, ref, ROWS, LEN, 1e-5, 1e-5);
    check(v.pass, "verify rows: softmax rows of 131072 (values below 3e-5) with 1e-7 relative noise pass "
          "(worst row rel_l2 %.1e, max error %.1e of its row's scale)", v.rel_l2, v.max_abs);
    static float zeros[ROWS * LEN];
    v = verify_rows_f32(zeros, ref, ROWS, LEN, 1e-5, 1e-5);
    verify_result va = verify_f32(zeros, ref, (size_t)ROWS * LEN, INFINITY, 1e-4);
    check(!v.pass && va.pass, "verify rows: an all-zero output fails (rel_l2 %.1e), where an absolute "
          "1e-4 alone would pass it", v.rel_l2);
    for (int i = 0; i < LEN; i++)
        out[2 * LEN + i] *= 1.01f;
    v = verify_rows_f32(out, ref, ROWS, LEN, 1e-5, 1e-5);
    check(!v.pass && v.max_idx / LEN == 2, "verify rows: one row 1%% off fails, found in row 2 "
          "(rel_l2 %.1e)", v.rel_l2);
    for (int i = 0; i < LEN; i++)
        out[2 * LEN + i] = (float)ref[2 * LEN + i];
    out[5 * LEN + 17] = NAN;
    v = verify_rows_f32(out, ref, ROWS, LEN, 1e-5, 1e-5);
    check(!v.pass && v.nonfinite == 1 && v.max_idx == 5 * LEN + 17, "verify rows: a NaN fails, found "
          "at its index");
    out[5 * LEN + 17] = (float)ref[5 * LEN + 17];
    static double zref[LEN];
    static float zout[LEN];
    zout[9] = 1e-30f;
    v = verify_rows_f32(zout, zref, 1, LEN, 1e-5, 1e-5);
    check(!v.pass, "verify rows: an all-zero reference row must be matched exactly (1e-30 fails)");
}

static void test_tf32_round(void)
{
    float one = 1.0f, ulp = ldexpf(1.0f, -10); /* TF32's spacing at 1 */
    int ok = tf32_round(one + ulp / 2) == one + ulp && tf32_round(-(one + ulp / 2)) == -(one + ulp) &&
             tf32_round(one + ulp / 4) == one && tf32_round(one + 3 * ulp / 4) == one + ulp &&
             tf32_round(one + ulp) == one + ulp && isinf(tf32_round(INFINITY)) &&
             isnan(tf32_round(NAN)) && tf32_round(0.0f) == 0.0f;
    check(ok, "tf32_round: to 10 mantissa bits, ties away from zero (1 + 2^-11 -> 1 + 2^-10, "
          "-(1 + 2^-11) -> -(1 + 2^-10), 1 + 2^-12 -> 1); infinity and NaN unchanged");
}

static void test_verify(void)
{
    enum { N = 1000 };
    static float out[N];
    static double ref[N];
    rng_state r;
    rng_seed(&r, 7);
    for (int i = 0; i < N; i++) {
        ref[i] = rng_normal(&r);
        out[i] = (float)ref[i];
    }
    verify_result v = verify_f32(out, ref, N, 1e-6, 1e-6);
    check(v.pass && v.rel_l2 < 1e-7, "verify: exact float copy of the reference passes (rel_l2 %.1e)",
          v.rel_l2);

    out[123] = NAN;
    v = verify_f32(out, ref, N, 1e-6, 1e-6);
    check(!v.pass && v.nonfinite == 1 && v.max_idx == 123, "verify: a planted NaN fails, found at 123");
    out[123] = (float)ref[123];

    out[456] = INFINITY;
    v = verify_f32(out, ref, N, 1e-6, 1e-6);
    check(!v.pass && v.max_idx == 456, "verify: a planted +Inf fails, found at 456");
    out[456] = (float)ref[456];

    out[789] += 1e-3f;
    v = verify_f32(out, ref, N, 1e-3, 1e-4);
    check(!v.pass && v.max_idx == 789 && fabs(v.max_abs - 1e-3) < 1e-6,
          "verify: one wrong element (off by 1e-3) fails on max abs, found at 789");
    out[789] = (float)ref[789];

    /* an unwritten element: the GPU harness poisons outputs with 0xFF bytes before every run */
    memset(&out[N - 1], 0xFF, sizeof(float));
    v = verify_f32(out, ref, N, 1e-6, 1e-6);
    check(!v.pass && v.max_idx == N - 1, "verify: an unwritten (0xFF-poisoned) last element fails");
    out[N - 1] = (float)ref[N - 1];

    v = verify_f32(out, ref, N, 1e-6, 1e-6);
    check(v.pass, "verify: passes again once every planted fault is removed");

    double zref[4] = {0, 0, 0, 0};
    float zout[4] = {0, 0, 1e-3f, 0};
    v = verify_f32(zout, zref, 4, 1e-6, 1e-6);
    check(!v.pass && v.max_idx == 2, "verify: an all-zero reference still catches an error (max abs)");
    double tiny[3] = {1e-41, -2e-42, 3e-40};
    float flushed[3] = {0, 0, 0};
    v = verify_f32(flushed, tiny, 3, 1e-6, 1e-6);
    check(v.pass, "verify: float's flush of subnormal references (1e-41) to 0 passes on max abs");

    /* sums: 1e6 terms of magnitude ~1 that cancel to 0.5; a float summation error of 1e-4 is
     * within tol * sum|terms| = 1e-6 * 1e6 = 1, a missing term of size 1 is not */
    double sref[2] = {0.5, 0.5}, sabs[2] = {1e6, 1e6};
    float sout[2] = {0.5001f, 0.5f};
    v = verify_sum_f32(sout, sref, sabs, 2, 1e-6);
    check(v.pass, "verify_sum: rounding (1e-4) on a sum of 1e6 unit terms that cancel passes");
    sout[1] = 2.5f;
    v = verify_sum_f32(sout, sref, sabs, 2, 1e-6);
    check(!v.pass && v.max_idx == 1, "verify_sum: an error of 2 on the same sum fails, at 1");
    sout[1] = NAN;
    v = verify_sum_f32(sout, sref, sabs, 2, 1e-6);
    check(!v.pass, "verify_sum: a NaN fails");

    /* normwise: an element of 3e-38 (terms 1e-37) returned as 0, as when its subnormal terms
     * are flushed, beside one of sum 1e4: fails componentwise, passes with the largest sum
     * added; an error of 1 on it still fails */
    double nref[2] = {3e-38, 100.0}, nabs[2] = {1e-37, 1e4};
    float nout[2] = {0.0f, 100.0f};
    v = verify_sum_f32(nout, nref, nabs, 2, 1e-5);
    check(!v.pass && v.max_idx == 0, "verify_sum: a tiny sum returned as 0 fails componentwise");
    sum_bounds_add_max(nabs, 2);
    check(nabs[0] == 1e-37 + 1e4 && nabs[1] == 2e4, "sum_bounds_add_max: 1e4 added to each");
    v = verify_sum_f32(nout, nref, nabs, 2, 1e-5);
    check(v.pass, "verify_sum: the tiny sum returned as 0 passes componentwise plus normwise");
    nout[0] = 1.0f;
    v = verify_sum_f32(nout, nref, nabs, 2, 1e-5);
    check(!v.pass && v.max_idx == 0, "verify_sum: an error of 1 there still fails (bound 0.1)");
}

/* two verify_results the same, bit for bit (rel_l2 and max_abs compared as bits: NaN-proof) */
static int same_result(verify_result a, verify_result b)
{
    return !memcmp(&a.rel_l2, &b.rel_l2, sizeof a.rel_l2) &&
           !memcmp(&a.max_abs, &b.max_abs, sizeof a.max_abs) && a.max_idx == b.max_idx &&
           a.nonfinite == b.nonfinite && a.pass == b.pass;
}

/* kind's stream over out, ref, abs_sum in pieces of the given sizes (cycled) */
static verify_result streamed(verify_kind kind, const float *out, const double *ref,
                              const double *abs_sum, size_t n, size_t len, double tol_rel,
                              double tol, const size_t *sizes, int n_sizes)
{
    verify_stream vs;
    verify_stream_begin(&vs, kind, n, len, tol_rel, tol);
    for (size_t at = 0, k = 0; at < n; k++) {
        size_t take = sizes[k % n_sizes] < n - at ? sizes[k % n_sizes] : n - at;
        verify_stream_add(&vs, out + at, ref + at, abs_sum ? abs_sum + at : NULL, take);
        at += take;
    }
    return verify_stream_end(&vs);
}

/* verify_stream: in pieces of any size (one element, pieces across the 2^20-element spans,
 * whole spans, all at once), every kind gives the whole-array function's result bit for bit,
 * on data with planted faults; a poisoned element in a middle piece fails, at its index */
static void test_verify_stream(void)
{
    enum { ROWS = 26, LEN = 131072, N = ROWS * LEN }; /* 3.25 spans of 2^20 */
    float *out = (float *)host_alloc(4 * (size_t)N);
    double *ref = (double *)host_alloc(8 * (size_t)N), *abs_sum = (double *)host_alloc(8 * (size_t)N);
    rng_state r;
    rng_seed(&r, 17);
    for (size_t i = 0; i < N; i++) {
        ref[i] = rng_normal(&r) * (i % 7 == 0 ? 1e-40 : 1e-5); /* some below FLT_MIN */
        out[i] = (float)(ref[i] * (1.0 + 1e-7 * rng_normal(&r)));
        abs_sum[i] = fabs(ref[i]) * (1.0 + 10.0 * rng_uniform(&r));
    }
    /* planted: an error of 1e-7 (1e-2 of its row's scale: every kind's bounds fail there), two
     * NaNs and an Inf (in other spans), a reference Inf matched by the output */
    size_t bad = (size_t)3 << 18;
    out[bad] = (float)(ref[bad] + 1e-7);
    out[((size_t)1 << 20) + 5] = NAN, out[(size_t)N - 3] = NAN, out[2 * LEN + 1] = INFINITY;
    ref[7 * LEN] = INFINITY, out[7 * LEN] = INFINITY;
    static const size_t cut[5][3] = {{(size_t)N, 0, 0},     /* all at once */
                                     {1 << 20, 0, 0},        /* whole spans */
                                     {LEN, 3 * LEN, 5 * LEN}, /* whole rows, across spans */
                                     {1, 999983, 7},          /* odd sizes across spans */
                                     {2 * LEN + 1, 1, 0}};    /* (rows: not whole, skipped) */
    static const int n_cut[5] = {1, 1, 3, 3, 2};
    int same = 0, tries = 0;
    for (int faults = 1; faults >= 0; faults--) {
        if (!faults) { /* the second round without the non-finite ones: the finite verdicts */
            out[((size_t)1 << 20) + 5] = (float)ref[((size_t)1 << 20) + 5];
            out[(size_t)N - 3] = (float)ref[(size_t)N - 3];
            out[2 * LEN + 1] = (float)ref[2 * LEN + 1];
        }
        verify_result whole[4] = {verify_f32(out, ref, N, 1e-6, 1e-9),
                                  verify_f32_scaled(out, ref, N, 1e-6, 1e-9),
                                  verify_sum_f32(out, ref, abs_sum, N, 1e-6),
                                  verify_rows_f32(out, ref, ROWS, LEN, 1e-5, 1e-5)};
        for (int kind = 0; kind < 4; kind++)
            for (int c = 0; c < 5; c++) {
                if (kind == VERIFY_ROWS && c >= 3)
                    continue;
                verify_result v = streamed((verify_kind)kind, out, ref, abs_sum, N, LEN,
                                           kind == VERIFY_ROWS ? 1e-5 : 1e-6,
                                           kind == VERIFY_ROWS ? 1e-5 : (kind == VERIFY_SUM ? 1e-6 : 1e-9),
                                           cut[c], n_cut[c]);
                same += same_result(v, whole[kind]), tries++;
            }
    }
    check(same == tries, "verify_stream = verify_f32, _scaled, verify_sum_f32, verify_rows_f32 "
          "bit for bit, in pieces of 1 to 3.25 M elements across 2^20-element spans, with and "
          "without planted NaN and Inf (%d of %d)", same, tries);
    /* the one planted error left (1e-7 at element 3 x 2^18; the reference's Inf made finite,
     * which the sums' bound, |inf - inf| being NaN, would fail): each kind fails there */
    ref[7 * LEN] = abs_sum[7 * LEN] = 1e-5, out[7 * LEN] = (float)ref[7 * LEN];
    verify_result f[3] = {
        streamed(VERIFY_SUM, out, ref, abs_sum, N, 0, 0, 1e-6, cut[3], 3),
        streamed(VERIFY_ROWS, out, ref, abs_sum, N, LEN, 1e-5, 1e-5, cut[2], 3),
        streamed(VERIFY_ABS, out, ref, abs_sum, N, 0, 1e-6, 1e-9, cut[3], 3)};
    check(!f[0].pass && f[0].max_idx == bad && !f[1].pass && f[1].max_idx == bad && !f[2].pass,
          "verify_stream: an error of 1e-7 (1e-2 of its row's scale) in one element fails every "
          "kind, found at its index by the sums' and the rows' bounds");
    out[bad] = (float)ref[bad];
    verify_result ok = streamed(VERIFY_SUM, out, ref, abs_sum, N, 0, 0, 1e-6, cut[3], 3);
    memset(&out[(size_t)N / 2 + 3], 0xFF, sizeof(float)); /* unwritten: the GPU poison */
    verify_result poisoned = streamed(VERIFY_SUM, out, ref, abs_sum, N, 0, 0, 1e-6, cut[3], 3);
    check(ok.pass && !poisoned.pass && poisoned.nonfinite == 1 &&
              poisoned.max_idx == (size_t)N / 2 + 3,
          "verify_stream: passes once the error is removed; a 0xFF-poisoned element in a middle "
          "piece fails, found at its index");
    free(out), free(ref), free(abs_sum);
}

static void test_stats(void)
{
    float odd[5] = {5, 1, 4, 2, 3}, even[4] = {4, 1, 3, 2};
    timing t;
    stats_from_samples(odd, 5, &t);
    check(t.min_ms == 1 && t.median_ms == 3 && t.max_ms == 5 && t.reps == 5,
          "stats: min/median/max of 5 samples = 1/3/5");
    stats_from_samples(even, 4, &t);
    check(t.median_ms == 2.5 && t.min_ms == 1 && t.max_ms == 4,
          "stats: median of an even count is the mean of the middle two (2.5)");
    float one[1] = {0.25f};
    stats_from_samples(one, 1, &t);
    check(t.min_ms == 0.25 && t.median_ms == 0.25 && t.max_ms == 0.25, "stats: one sample");
}

static void test_npy(void)
{
    char dir[] = "/tmp/test_common_XXXXXX", path[64];
    if (!mkdtemp(dir)) {
        check(0, "npy: cannot make a temporary folder");
        return;
    }
    snprintf(path, sizeof path, "%s/a.npy", dir);
    int64_t shape[3] = {2, 3, 5}, got[8];
    float x[30];
    for (int i = 0; i < 30; i++)
        x[i] = (float)i * 0.5f - 3.0f;
    x[7] = -0.0f;
    int ndim = 0;
    int w = npy_write_f32(path, x, 3, shape);
    float *y = npy_read_f32(path, &ndim, got);
    check(w == 0 && y && ndim == 3 && got[0] == 2 && got[1] == 3 && got[2] == 5 &&
              memcmp(x, y, sizeof x) == 0,
          "npy: 2x3x5 float32 round trip is bit-exact");
    free(y);

    FILE *f = fopen(path, "rb");
    unsigned char pre[10] = {0};
    size_t nr = f ? fread(pre, 1, 10, f) : 0;
    if (f)
        fclose(f);
    check(nr == 10 && (10 + (pre[8] | pre[9] << 8)) % 64 == 0,
          "npy: header padded to a multiple of 64 bytes (NumPy format 1.0)");

    int64_t s1[1] = {4};
    w = npy_write_f32(path, x, 1, s1);
    y = npy_read_f32(path, &ndim, got);
    check(w == 0 && y && ndim == 1 && got[0] == 4, "npy: 1-d shape (4,) round trip");
    free(y);

    float *z = npy_load(dir, "a", 4), *wrong;
    fprintf(stderr, "(the next error line is expected)\n");
    wrong = npy_load(dir, "a", 5);
    char *names[4];
    int nn = list_dir_sorted(dir, names, 4);
    check(z && z[3] == x[3] && !wrong && nn == 1 && strcmp(names[0], "a.npy") == 0,
          "npy_load: DIR/NAME.npy read back, a wrong element count refused; list_dir_sorted");
    free(z);
    for (int i = 0; i < nn; i++)
        free(names[i]);
    int cut = truncate(path, 128 + 4 * 4 - 2); /* header + 4 floats, less 2 bytes */
    fprintf(stderr, "(the next error line is expected)\n");
    y = npy_read_f32(path, &ndim, got);
    check(cut == 0 && y == NULL, "npy: a truncated file is rejected");
    free(y);
    unlink(path);
    rmdir(dir);
}

static int parse(const char *line, cli_args *a, char *err)
{
    char buf[256], *argv[16];
    int argc = 0;
    snprintf(buf, sizeof buf, "%s", line);
    for (char *t = strtok(buf, " "); t && argc < 15; t = strtok(NULL, " "))
        argv[argc++] = t;
    argv[argc] = NULL;
    return cli_parse(argc, argv, 5, a, err, 256);
}

static void test_cli(void)
{
    cli_args a;
    char err[256] = "";
    int rc = parse("prog --shape 4x3x5x7x11 --seed 9 --reps 30 --version b2 --csv o.csv", &a, err);
    check(rc == 0 && a.ndim == 5 && a.dims[0] == 4 && a.dims[4] == 11 && a.seed == 9 &&
              a.reps == 30 && a.version && strcmp(a.version, "b2") == 0 && a.csv && strcmp(a.csv, "o.csv") == 0,
          "cli: a full valid command line parses");
    rc = parse("prog", &a, err);
    check(rc == 0 && a.ndim == 0 && a.reps == 20 && a.seed == 1 && !a.version,
          "cli: defaults (reps 20, seed 1, all versions)");
    static const char *bad[] = {
        "prog --bogus",          "prog --shape 4x3x5x7",     "prog --shape 4x3x5x7x11x2",
        "prog --shape 4x3x0x7x9", "prog --shape 4x3x-5x7x9", "prog --shape 4x3x5x7x",
        "prog --shape 4x3xAx7x9", "prog --reps 0",           "prog --reps 12abc",
        "prog --version v123456789", "prog stray",               "prog --shape 4x3x5x7x99999999999",
        "prog --shape",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        rc = parse(bad[i], &a, err);
        check(rc == -1 && err[0], "cli: rejects '%s' (%s)", bad[i] + 5, err);
    }
    check(parse("prog --help", &a, err) == 1, "cli: --help asks for the usage");
}

static void test_gpu_tag(void)
{
    static const char *const cases[][2] = {
        {"NVIDIA H100 80GB HBM3", "h100"},      {"NVIDIA A100-SXM4-80GB", "a100"},
        {"NVIDIA GeForce RTX 4090", "rtx-4090"}, {"NVIDIA L4", "l4"},
        {"NVIDIA H100 PCIe", "h100"},           {"NVIDIA GeForce RTX 3090 Ti", "rtx-3090-ti"},
        {"NVIDIA RTX A6000", "rtx-a6000"},      {"NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"},
        {"Tesla V100-SXM2-16GB", "v100"},       {"", "gpu"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char tag[32];
        gpu_tag_from_name(cases[i][0], tag, sizeof tag);
        check(!strcmp(tag, cases[i][1]), "gpu tag: '%s' -> '%s' (want '%s')", cases[i][0], tag,
              cases[i][1]);
    }
}

/* report_csv replaces the rows of the same GPU, chapter, shape, version, precision and scope */
static void test_report_csv(void)
{
    char path[] = "/tmp/test_common_csv_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        check(0, "report_csv: cannot make a temporary file");
        return;
    }
    close(fd);
    report_ctx c = {"h100", "NVIDIA H100", "02", "4x32x8x8x8", 3000.0, 67.0, 132, 50.0};
    timing t = {1.0, 2.0, 3.0, 20};
    report_row a[3] = {{"v1", "first, with a comma", "epilogue_fwd", t, 6e9, 0, "fp32"},
                       {"v1", "first", "model_fwd", t, 1e6, 1.34e11, NULL},
                       {"v1", "first", "model_fwd", t, 1e6, 1.34e11, "tf32"}};
    report_csv(path, &c, a, 2);
    report_csv(path, &c, a, 1); /* the same (version, precision, scope): replaced, not appended */
    report_csv(path, &c, a + 2, 1); /* another precision: kept beside */
    c.shape = "1x32x8x8x8";
    report_csv(path, &c, a, 1); /* another shape: kept beside */
    FILE *f = fopen(path, "r");
    char line[1024];
    int lines = 0, header = 0, epi = 0, comma_free = 1, fp32 = 0, tf32 = 0;
    double floor_model = 0;
    while (f && fgets(line, sizeof line, f)) {
        lines++;
        header += !strncmp(line, report_csv_header, strlen(report_csv_header));
        epi += strstr(line, ",fp32,epilogue_fwd,4x32x8x8x8,") != NULL;
        comma_free &= strstr(line, "first, with") == NULL;
        fp32 += strstr(line, ",first,fp32,model_fwd,4x32x8x8x8,") != NULL; /* NULL: fp32 */
        tf32 += strstr(line, ",first,tf32,model_fwd,4x32x8x8x8,") != NULL;
        if (strstr(line, ",fp32,model_fwd,")) { /* floor_ms, field 18: 1.34e11 / 67e12 s = 2 ms */
            const char *p = line;
            for (int k = 0; k < 17 && p; k++)
                if ((p = strchr(p, ',')))
                    p++;
            floor_model = p ? atof(p) : 0;
        }
    }
    if (f)
        fclose(f);
    unlink(path);
    check(lines == 5 && header == 1 && epi == 1 && comma_free && fp32 == 1 && tf32 == 1,
          "report_csv: header once, a rerun replaces its rows, another precision and another "
          "shape are kept (%d lines)", lines);
    check(fabs(floor_model - 2.0) < 1e-9, "report_csv: floor = max(bytes / ceiling, FLOPs / peak) "
          "= %.5f ms (want 2)", floor_model);
}

/* conv3d_ref against the definition summed directly at every output, with and without padding,
 * and conv3d_backward_ref against central differences of L = sum dy * conv3d(x, w, b) */
typedef struct {
    conv3d_geom g;
    double *x, *w, *b, *y;
    const double *dy;
    int wrt; /* 0: x, 1: w, 2: b */
} conv_loss_ctx;

static double conv_loss(const double *unused, void *p)
{
    conv_loss_ctx *L = (conv_loss_ctx *)p;
    (void)unused;
    conv3d_ref(&L->g, L->x, L->w, L->b, L->y);
    size_t n = (size_t)L->g.n * L->g.c_out * L->g.od * L->g.oh * L->g.ow;
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += L->dy[i] * L->y[i];
    return s;
}

/* a convolution test's tensors from seed: x, w, b ~ U(-0.5, 0.5), dy ~ N(0, 1), in that order */
static void fill_conv_case(uint64_t seed, double *x, size_t nx, double *w, size_t nw, double *b,
                           int nb, double *dy, size_t ny)
{
    rng_state r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < nx; i++)
        x[i] = rng_uniform(&r) - 0.5;
    for (size_t i = 0; i < nw; i++)
        w[i] = rng_uniform(&r) - 0.5;
    for (int i = 0; i < nb; i++)
        b[i] = rng_uniform(&r) - 0.5;
    for (size_t i = 0; i < ny; i++)
        dy[i] = rng_normal(&r);
}

static void test_conv_ref(void)
{
    for (int pad = 0; pad <= 1; pad++) {
        conv3d_geom g = conv3d_geom_make(2, 3, 4, 3, 4, 5, 3, pad);
        size_t nx = 2 * 3 * 3 * 4 * 5, nw = 4 * 3 * 27, ny = (size_t)2 * 4 * g.od * g.oh * g.ow;
        double x[360], w[324], b[4], y[480], dy[480], dx[360], dw[324], db[4];
        fill_conv_case(5 + pad, x, nx, w, nw, b, 4, dy, ny);
        conv3d_ref(&g, x, w, b, y);
        double worst = 0.0;
        for (int n = 0; n < 2; n++)
            for (int co = 0; co < 4; co++)
                for (int od = 0; od < g.od; od++)
                    for (int oh = 0; oh < g.oh; oh++)
                        for (int ow = 0; ow < g.ow; ow++) {
                            double acc = b[co];
                            for (int ci = 0; ci < 3; ci++)
                                for (int k = 0; k < 27; k++) {
                                    int id = od + k / 9 - pad, ih = oh + (k / 3) % 3 - pad,
                                        iw = ow + k % 3 - pad;
                                    if (id >= 0 && id < 3 && ih >= 0 && ih < 4 && iw >= 0 && iw < 5)
                                        acc += x[(((n * 3 + ci) * 3 + id) * 4 + ih) * 5 + iw] *
                                               w[(co * 3 + ci) * 27 + k];
                                }
                            size_t o = (((size_t)(n * 4 + co) * g.od + od) * g.oh + oh) * g.ow + ow;
                            worst = fmax(worst, fabs(acc - y[o]));
                        }
        check(worst < 1e-12, "conv3d_ref (padding %d) = the definition summed directly, max diff %.1e",
              pad, worst);
        conv3d_backward_ref(&g, x, w, dy, dx, dw, db, NULL, NULL);
        conv_loss_ctx L = {g, x, w, b, y, dy, 0};
        double ex = gradcheck(conv_loss, &L, x, nx, dx, 1e-6, NULL);
        double ew = gradcheck(conv_loss, &L, w, nw, dw, 1e-6, NULL);
        double eb = gradcheck(conv_loss, &L, b, 4, db, 1e-6, NULL);
        check(ex < 1e-7 && ew < 1e-7 && eb < 1e-7,
              "conv3d_backward_ref (padding %d) = central differences: dx %.1e dw %.1e dbias %.1e",
              pad, ex, ew, eb);
    }
}

/* Conv2d as the depth-1 Conv3d (conv2d_geom_make): against Conv2d's own definition written with
 * 2-D indices, y[n][co][oh][ow] = b[co] + sum over ci, kh, kw of x[n][ci][ih][iw] w[co][ci][kh][kw]
 * (ih = oh + kh - pad, iw = ow + kw - pad, in range), and its backward against central
 * differences. Awkward extents: a batch of 1, one input channel, an output of one row (H = 3,
 * no padding), an input of width 1 (with padding 1), primes elsewhere. */
static void test_conv2d_ref(void)
{
    static const int cases[2][7] = {
        /* n, c_in, c_out, h, w, k, pad */
        {1, 1, 3, 3, 7, 3, 0}, /* output 1 x 5 */
        {2, 3, 5, 7, 1, 3, 1}, /* output 7 x 1 */
    };
    for (int t = 0; t < 2; t++) {
        const int *q = cases[t];
        int N = q[0], CI = q[1], CO = q[2], H = q[3], W = q[4], K = q[5], P = q[6];
        conv3d_geom g = conv2d_geom_make(N, CI, CO, H, W, K, P);
        int OH = H + 2 * P - K + 1, OW = W + 2 * P - K + 1;
        int shape_ok = g.d == 1 && g.kd == 1 && g.pd == 0 && g.od == 1 && g.kh == K && g.kw == K &&
                       g.ph == P && g.pw == P && g.oh == OH && g.ow == OW;
        size_t nx = (size_t)N * CI * H * W, nw = (size_t)CO * CI * K * K;
        size_t ny = (size_t)N * CO * OH * OW;
        double *x = (double *)host_alloc(8 * nx), *w = (double *)host_alloc(8 * nw), b[5];
        double *y = (double *)host_alloc(8 * ny), *dy = (double *)host_alloc(8 * ny);
        double *dx = (double *)host_alloc(8 * nx), *dw = (double *)host_alloc(8 * nw), db[5];
        fill_conv_case(17 + t, x, nx, w, nw, b, CO, dy, ny);
        conv3d_ref(&g, x, w, b, y);
        double worst = 0.0;
        for (int n = 0; n < N; n++)
            for (int co = 0; co < CO; co++)
                for (int oh = 0; oh < OH; oh++)
                    for (int ow = 0; ow < OW; ow++) {
                        double acc = b[co];
                        for (int ci = 0; ci < CI; ci++)
                            for (int kh = 0; kh < K; kh++)
                                for (int kw = 0; kw < K; kw++) {
                                    int ih = oh + kh - P, iw = ow + kw - P;
                                    if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                                        acc += x[(((size_t)n * CI + ci) * H + ih) * W + iw] *
                                               w[(((size_t)co * CI + ci) * K + kh) * K + kw];
                                }
                        size_t o = (((size_t)n * CO + co) * OH + oh) * OW + ow;
                        worst = fmax(worst, fabs(acc - y[o]));
                    }
        check(shape_ok && worst < 1e-12,
              "conv2d (depth-1 conv3d_ref) %dx%dx%dx%d -> %dx%dx%dx%d, padding %d = the 2-D "
              "definition summed directly, max diff %.1e", N, CI, H, W, N, CO, OH, OW, P, worst);
        conv3d_backward_ref(&g, x, w, dy, dx, dw, db, NULL, NULL);
        conv_loss_ctx L = {g, x, w, b, y, dy, 0};
        double ex = gradcheck(conv_loss, &L, x, nx, dx, 1e-6, NULL);
        double ew = gradcheck(conv_loss, &L, w, nw, dw, 1e-6, NULL);
        double eb = gradcheck(conv_loss, &L, b, CO, db, 1e-6, NULL);
        check(ex < 1e-7 && ew < 1e-7 && eb < 1e-7,
              "conv2d backward (padding %d) = central differences: dx %.1e dw %.1e dbias %.1e", P,
              ex, ew, eb);
        free(x), free(w), free(y), free(dy), free(dx), free(dw);
    }
}

/* ConvTranspose3d's direct gathers (conv_transpose3d_ref, and its backward) against its scatter
 * definition: every input element adds x w to the outputs o = i stride - pad + t it reaches. The
 * same loop, read backwards, is the definition of the gradients (the adjoint of the scatter):
 * dx[i] gathers w dy[o], dw[t] gathers x[i] dy[o], dbias sums dy. Shapes: 2 x 3 x 3 x 4 x 5 -> 4
 * channels; kernel 3, stride 2, padding 1 with output_padding 0 and 1 (chapters 1 and 5), and
 * kernel 2, stride 3, no padding, output_padding 2, no bias (gaps the kernel never reaches:
 * outputs of bias alone, and output_padding's two trailing ones). */
static void test_conv_transpose_ref(void)
{
    static const int cases[3][4] = {{3, 2, 1, 0}, {3, 2, 1, 1}, {2, 3, 0, 2}}; /* k, s, p, op */
    enum { N = 2, CI = 3, CO = 4, D = 3, H = 4, W = 5 };
    for (int c = 0; c < 3; c++) {
        int K = cases[c][0], S = cases[c][1], P = cases[c][2], OP = cases[c][3], with_bias = c < 2;
        convT3d_geom g = convT3d_geom_make(N, CI, CO, D, H, W, K, S, P, OP);
        int OD = (D - 1) * S - 2 * P + K + OP, OH = (H - 1) * S - 2 * P + K + OP;
        int OW = (W - 1) * S - 2 * P + K + OP, KV = K * K * K;
        int shape_ok = g.od == OD && g.oh == OH && g.ow == OW;
        size_t nx = (size_t)N * CI * D * H * W, nw = (size_t)CI * CO * KV;
        size_t ny = (size_t)N * CO * OD * OH * OW;
        double *x = (double *)host_alloc(8 * nx), *w = (double *)host_alloc(8 * nw), b[CO];
        double *y = (double *)host_alloc(8 * ny), *dy = (double *)host_alloc(8 * ny);
        double *ys = (double *)host_alloc(8 * ny); /* the scatter's y */
        double *dx = (double *)host_alloc(8 * nx), *dxs = (double *)host_alloc(8 * nx);
        double *dw = (double *)host_alloc(8 * nw), *dws = (double *)host_alloc(8 * nw);
        double *dwa = (double *)host_alloc(8 * nw), *dwas = (double *)host_alloc(8 * nw);
        double *dxa = (double *)host_alloc(8 * nx), *dxas = (double *)host_alloc(8 * nx);
        double db[CO], dba[CO], dbs[CO] = {0}, dbas[CO] = {0};
        fill_conv_case(41 + c, x, nx, w, nw, b, CO, dy, ny);
        for (int i = 0; i < CO && !with_bias; i++)
            b[i] = 0.0; /* what the scatter adds: conv_transpose3d_ref gets NULL */
        memset(dxs, 0, 8 * nx), memset(dws, 0, 8 * nw), memset(dwas, 0, 8 * nw);
        memset(dxas, 0, 8 * nx);
        for (size_t o = 0; o < ny; o++) {
            int co = (int)(o / ((size_t)OD * OH * OW) % CO);
            ys[o] = b[co];
            dbs[co] += dy[o], dbas[co] += fabs(dy[o]);
        }
        for (size_t e = 0; e < nx; e++) { /* the scatter, and its adjoint */
            int iw = (int)(e % W), ih = (int)(e / W % H), id = (int)(e / W / H % D);
            int ci = (int)(e / ((size_t)D * H * W) % CI), n = (int)(e / ((size_t)CI * D * H * W));
            for (int co = 0; co < CO; co++)
                for (int t = 0; t < KV; t++) {
                    int od = id * S - P + t / (K * K), oh = ih * S - P + t / K % K,
                        ow = iw * S - P + t % K;
                    if (od < 0 || od >= OD || oh < 0 || oh >= OH || ow < 0 || ow >= OW)
                        continue;
                    size_t o = ((((size_t)n * CO + co) * OD + od) * OH + oh) * OW + ow;
                    size_t k = ((size_t)ci * CO + co) * KV + t;
                    ys[o] += x[e] * w[k];
                    dxs[e] += w[k] * dy[o];
                    dxas[e] += fabs(w[k] * dy[o]);
                    dws[k] += x[e] * dy[o];
                    dwas[k] += fabs(x[e] * dy[o]);
                }
        }
        conv_transpose3d_ref(&g, x, w, with_bias ? b : NULL, y);
        conv_transpose3d_backward_ref(&g, x, w, dy, dx, dw, db, dwa, dba, dxa);
        double ey = 0, ex = 0, ew = 0, eb = 0, ea = 0, yy = 0, xx = 0, ww = 0;
        for (size_t i = 0; i < ny; i++) {
            ey = fmax(ey, fabs(y[i] - ys[i]));
            yy += (ys[i] - b[i / ((size_t)OD * OH * OW) % CO]) * dy[i];
        }
        for (size_t i = 0; i < nx; i++)
            ex = fmax(ex, fabs(dx[i] - dxs[i])), ea = fmax(ea, fabs(dxa[i] - dxas[i])),
            xx += x[i] * dx[i];
        for (size_t i = 0; i < nw; i++)
            ew = fmax(ew, fabs(dw[i] - dws[i])), ea = fmax(ea, fabs(dwa[i] - dwas[i])),
            ww += w[i] * dw[i];
        for (int i = 0; i < CO; i++)
            eb = fmax(eb, fabs(db[i] - dbs[i])), ea = fmax(ea, fabs(dba[i] - dbas[i]));
        /* y - bias is bilinear in (x, w): <y - bias, dy> = <x, dx> = <w, dw> */
        double dot = fmax(fabs(yy - xx), fabs(yy - ww)) / fmax(fabs(yy), 1e-300);
        check(shape_ok && ey < 1e-12,
              "conv_transpose3d_ref (k %d, stride %d, pad %d, output_padding %d%s) %dx%dx%dx%dx%d "
              "-> %dx%dx%dx%dx%d = the scatter definition, max diff %.1e", K, S, P, OP,
              with_bias ? "" : ", no bias", N, CI, D, H, W, N, CO, OD, OH, OW, ey);
        check(ex < 1e-12 && ew < 1e-12 && eb < 1e-12 && ea < 1e-12 && dot < 1e-12,
              "conv_transpose3d_backward_ref (k %d, stride %d, pad %d, output_padding %d) = the "
              "scatter's adjoint: dx %.1e dw %.1e dbias %.1e, their abs sums %.1e; <y - bias, dy> "
              "= <x, dx> = <w, dw> to %.1e", K, S, P, OP, ex, ew, eb, ea, dot);
        free(x), free(w), free(y), free(dy), free(ys), free(dx), free(dxs), free(dw), free(dws);
        free(dwa), free(dwas), free(dxa), free(dxas);
    }
}

static void test_rng(void)
{
    rng_state a, b;
    rng_seed(&a, 42);
    rng_seed(&b, 42);
    int same = 1;
    for (int i = 0; i < 100; i++)
        same &= rng_next(&a) == rng_next(&b);
    check(same, "rng: one seed, one sequence");
    double lo = 1, hi = 0, s = 0, s2 = 0;
    enum { N = 200000 };
    for (int i = 0; i < N; i++) {
        double u = rng_uniform(&a);
        lo = fmin(lo, u);
        hi = fmax(hi, u);
        double z = rng_normal(&a);
        s += z;
        s2 += z * z;
    }
    double mean = s / N, var = s2 / N - mean * mean;
    check(lo >= 0 && hi < 1 && lo < 1e-3 && hi > 0.999, "rng: uniform in [0,1), spans it");
    check(fabs(mean) < 0.01 && fabs(var - 1) < 0.02, "rng: normal mean %.4f var %.4f", mean, var);
    float w[1000];
    init_conv_params(w, 1000, NULL, 0, 16 * 27, &a);
    double bound = 1.0 / sqrt(16.0 * 27.0), wmax = 0;
    for (int i = 0; i < 1000; i++)
        wmax = fmax(wmax, fabs(w[i]));
    check(wmax <= bound && wmax > 0.95 * bound, "init: conv weights in +-1/sqrt(fan_in) = %.4f",
          bound);
}

/* L(x) = sum_i sin(x_i) x_i^2 + x_0 x_1; dL/dx_i = cos(x_i) x_i^2 + 2 sin(x_i) x_i + [x_1 | x_0] */
static double toy_loss(const double *x, void *ctx)
{
    size_t n = *(size_t *)ctx;
    double s = x[0] * x[1];
    for (size_t i = 0; i < n; i++)
        s += sin(x[i]) * x[i] * x[i];
    return s;
}

static void test_gradcheck(void)
{
    size_t n = 8;
    double x[8], g[8], max_abs;
    rng_state r;
    rng_seed(&r, 3);
    for (size_t i = 0; i < n; i++)
        x[i] = 2 * rng_uniform(&r) - 1;
    for (size_t i = 0; i < n; i++)
        g[i] = cos(x[i]) * x[i] * x[i] + 2 * sin(x[i]) * x[i];
    g[0] += x[1];
    g[1] += x[0];
    double rel = gradcheck(toy_loss, &n, x, n, g, 1e-5, &max_abs);
    check(rel < 1e-8, "gradcheck: correct derivative, rel error %.1e", rel);
    g[1] -= x[0]; /* plant a wrong derivative: forget the cross term's share */
    rel = gradcheck(toy_loss, &n, x, n, g, 1e-5, &max_abs);
    check(rel > 1e-3, "gradcheck: a planted wrong derivative is caught, rel error %.1e", rel);
}

/* conv_grads (the references for a run's own dy): the backward of exactly that float dy, dw's
 * and dbias's bounds with the largest added, recomputed only when dy's bits change or after
 * conv_grads_reset; the transposed form's dx_abs as conv_transpose3d_backward_ref's. */
static void test_conv_grads(void)
{
    enum { N = 2, CI = 3, CO = 4, D = 3, H = 4, W = 5 };
    conv3d_geom g = conv3d_geom_make(N, CI, CO, D, H, W, 3, 1);
    size_t nx = (size_t)N * CI * D * H * W, nw = (size_t)CO * CI * 27, ny = nx / CI * CO;
    double *x = (double *)host_alloc(8 * nx), *w = (double *)host_alloc(8 * nw), b[CO];
    double *dy = (double *)host_alloc(8 * ny), *dx = (double *)host_alloc(8 * nx);
    double *dw = (double *)host_alloc(8 * nw), *dwa = (double *)host_alloc(8 * nw), db[CO], dba[CO];
    float *dyf = (float *)host_alloc(4 * ny);
    fill_conv_case(61, x, nx, w, nw, b, CO, dy, ny);
    for (size_t i = 0; i < ny; i++)
        dyf[i] = (float)dy[i], dy[i] = dyf[i]; /* the float dy, and exactly it widened */
    conv3d_backward_ref(&g, x, w, dy, dx, dw, db, dwa, dba);
    conv_grads r = {0};
    int first = conv3d_grads_of(&g, x, w, dyf, &r);
    double e = 0, dwa_max = 0, dba_max = 0;
    for (size_t i = 0; i < nw; i++)
        dwa_max = fmax(dwa_max, dwa[i]);
    for (int i = 0; i < CO; i++)
        dba_max = fmax(dba_max, dba[i]);
    for (size_t i = 0; i < nx; i++)
        e = fmax(e, fabs(r.dx[i] - dx[i]));
    for (size_t i = 0; i < nw; i++)
        e = fmax(e, fmax(fabs(r.dw[i] - dw[i]), fabs(r.dw_abs[i] - (dwa[i] + dwa_max))));
    for (int i = 0; i < CO; i++)
        e = fmax(e, fmax(fabs(r.dbias[i] - db[i]), fabs(r.dbias_abs[i] - (dba[i] + dba_max))));
    check(first == 1 && r.n_x == nx && r.n_w == nw && r.n_y == ny && r.n_bias == CO && e == 0.0,
          "conv3d_grads_of = conv3d_backward_ref of the float dy, bounds plus their largest "
          "(max diff %.1e)", e);
    int same = conv3d_grads_of(&g, x, w, dyf, &r);
    dyf[7] = -dyf[7];
    int changed = conv3d_grads_of(&g, x, w, dyf, &r);
    int again = conv3d_grads_of(&g, x, w, dyf, &r);
    conv_grads_reset(&r);
    int after_reset = conv3d_grads_of(&g, x, w, dyf, &r);
    check(same == 0 && changed == 1 && again == 0 && after_reset == 1 && r.dy[7] == dyf[7],
          "conv_grads recomputes only for new dy bits or after a reset (same %d, changed %d, "
          "again %d, after reset %d)", same, changed, again, after_reset);
    conv_grads_free(&r);
    check(!r.dy && !r.dx && r.dy_hash == 0, "conv_grads_free frees and zeroes");
    free(x), free(w), free(dy), free(dx), free(dw), free(dwa), free(dyf);

    convT3d_geom tg = convT3d_geom_make(N, CI, CO, D, H, W, 3, 2, 1, 1);
    size_t tw = (size_t)CI * CO * 27, ty = (size_t)N * CO * tg.od * tg.oh * tg.ow;
    x = (double *)host_alloc(8 * nx), w = (double *)host_alloc(8 * tw);
    dy = (double *)host_alloc(8 * ty), dx = (double *)host_alloc(8 * nx);
    dw = (double *)host_alloc(8 * tw), dwa = (double *)host_alloc(8 * tw);
    double *dxa = (double *)host_alloc(8 * nx);
    dyf = (float *)host_alloc(4 * ty);
    fill_conv_case(62, x, nx, w, tw, b, CO, dy, ty);
    for (size_t i = 0; i < ty; i++)
        dyf[i] = (float)dy[i], dy[i] = dyf[i];
    conv_transpose3d_backward_ref(&tg, x, w, dy, dx, dw, db, dwa, dba, dxa);
    first = conv_transpose3d_grads_of(&tg, x, w, dyf, 1, &r);
    e = 0;
    for (size_t i = 0; i < nx; i++)
        e = fmax(e, fmax(fabs(r.dx[i] - dx[i]), fabs(r.dx_abs[i] - dxa[i])));
    for (size_t i = 0; i < tw; i++)
        e = fmax(e, fabs(r.dw[i] - dw[i]));
    check(first == 1 && r.n_w == tw && r.n_y == ty && e == 0.0,
          "conv_transpose3d_grads_of = conv_transpose3d_backward_ref of the float dy, dx_abs "
          "too (max diff %.1e)", e);
    dyf[3] = -dyf[3], dy[3] = dyf[3]; /* a new dy, asked without dx_abs: still kept current */
    conv_transpose3d_backward_ref(&tg, x, w, dy, dx, dw, db, dwa, dba, dxa);
    int later = conv_transpose3d_grads_of(&tg, x, w, dyf, 0, &r);
    e = 0;
    for (size_t i = 0; i < nx; i++)
        e = fmax(e, fmax(fabs(r.dx[i] - dx[i]), fabs(r.dx_abs[i] - dxa[i])));
    conv_grads_free(&r);
    int fresh = conv_transpose3d_grads_of(&tg, x, w, dyf, 0, &r);
    check(later == 1 && e == 0.0 && fresh == 1 && !r.dx_abs,
          "conv_transpose3d_grads_of without dx_abs: none allocated on a fresh struct, kept "
          "current where an earlier call asked for it (max diff %.1e)", e);
    conv_grads_free(&r);
    free(x), free(w), free(dy), free(dx), free(dw), free(dwa), free(dxa), free(dyf);
}

/* a fetch of dy from a host array by copying (as a GPU's read back would), counting its calls;
 * shift > 0 plants a fault: each group gets the samples `shift` after the asked ones (wrapped) */
typedef struct {
    const float *dy;
    size_t per; /* elements a sample */
    int samples, shift, calls;
} copy_fetch_ctx;

static const float *copy_fetch(void *ctx, int n0, int count, float *room)
{
    copy_fetch_ctx *c = (copy_fetch_ctx *)ctx;
    for (int k = 0; k < count; k++)
        memcpy(room + (size_t)k * c->per, c->dy + (size_t)((n0 + k + c->shift) % c->samples) * c->per,
               sizeof(float) * c->per);
    c->calls++;
    return room;
}

/* the largest difference of r's references from the whole-batch backward's (dx, dx_abs when
 * given, dw, dbias, and the bounds with their largest added) */
static double grads_diff(const conv_grads *r, const double *dx, const double *dxa, const double *dw,
                         const double *dwa, const double *db, const double *dba)
{
    double e = 0, dwa_max = 0, dba_max = 0;
    for (size_t i = 0; i < r->n_w; i++)
        dwa_max = fmax(dwa_max, dwa[i]);
    for (size_t i = 0; i < r->n_bias; i++)
        dba_max = fmax(dba_max, dba[i]);
    for (size_t i = 0; i < r->n_x; i++)
        e = fmax(e, fmax(fabs(r->dx[i] - dx[i]), dxa ? fabs(r->dx_abs[i] - dxa[i]) : 0.0));
    for (size_t i = 0; i < r->n_w; i++)
        e = fmax(e, fmax(fabs(r->dw[i] - dw[i]), fabs(r->dw_abs[i] - (dwa[i] + dwa_max))));
    for (size_t i = 0; i < r->n_bias; i++)
        e = fmax(e, fmax(fabs(r->dbias[i] - db[i]), fabs(r->dbias_abs[i] - (dba[i] + dba_max))));
    return e;
}

/* conv_grads a group of samples at a time: several groups (5 samples in groups of 2, 2, 1, and
 * of 1) give the whole-batch backward's references exactly, for a Conv3d from a host dy and a
 * ConvTranspose3d from a fetch that copies; the fetch is called twice a group for new dy bits,
 * once (the hash) for the same; a fetch that serves the wrong samples is caught */
static void test_conv_grads_groups(void)
{
    enum { N = 5, CI = 3, CO = 4, D = 3, H = 4, W = 5 };
    size_t nx = (size_t)N * CI * D * H * W;
    conv3d_geom g = conv3d_geom_make(N, CI, CO, D, H, W, 3, 1);
    convT3d_geom tg = convT3d_geom_make(N, CI, CO, D, H, W, 3, 2, 1, 1);
    size_t nw = (size_t)CO * CI * 27, ny = nx / CI * CO;
    size_t ty = (size_t)N * CO * tg.od * tg.oh * tg.ow, tper = ty / N;
    double *x = (double *)host_alloc(8 * nx), *w = (double *)host_alloc(8 * nw), b[CO];
    double *dy = (double *)host_alloc(8 * ty), *dx = (double *)host_alloc(8 * nx);
    double *dxa = (double *)host_alloc(8 * nx), *dw = (double *)host_alloc(8 * nw);
    double *dwa = (double *)host_alloc(8 * nw), db[CO], dba[CO];
    float *dyf = (float *)host_alloc(4 * ty);
    fill_conv_case(71, x, nx, w, nw, b, CO, dy, ty);
    for (size_t i = 0; i < ty; i++)
        dyf[i] = (float)dy[i], dy[i] = dyf[i];

    conv3d_backward_ref(&g, x, w, dy, dx, dw, db, dwa, dba);
    double e3[2];
    int groups3[2];
    for (int k = 0; k < 2; k++) {
        conv_grads r = {0};
        r.group_elems = k ? 1 : 2 * (ny / N); /* 2 samples a group; fewer than 1: 1 */
        conv3d_grads_of(&g, x, w, dyf, &r);
        e3[k] = grads_diff(&r, dx, NULL, dw, dwa, db, dba);
        groups3[k] = r.group;
        conv_grads_free(&r);
    }
    check(e3[0] == 0.0 && e3[1] == 0.0 && groups3[0] == 2 && groups3[1] == 1,
          "conv3d_grads_of in groups of %d and %d of %d samples = conv3d_backward_ref of the "
          "whole batch, bit for bit (max diff %.1e, %.1e)", groups3[0], groups3[1], N, e3[0],
          e3[1]);

    conv_transpose3d_backward_ref(&tg, x, w, dy, dx, dw, db, dwa, dba, dxa);
    copy_fetch_ctx c = {dyf, tper, N, 0, 0};
    conv_grads r = {0};
    r.group_elems = 2 * tper;
    int first = conv_transpose3d_grads_fetch(&tg, x, w, copy_fetch, &c, 1, &r);
    int calls_first = c.calls;
    double e = grads_diff(&r, dx, dxa, dw, dwa, db, dba);
    c.calls = 0;
    int again = conv_transpose3d_grads_fetch(&tg, x, w, copy_fetch, &c, 1, &r);
    check(first == 1 && e == 0.0 && calls_first == 6 && again == 0 && c.calls == 3,
          "conv_transpose3d_grads_fetch in groups of 2 of %d samples = the whole batch's "
          "backward, dx_abs too, bit for bit (max diff %.1e); %d fetches for new dy bits, %d "
          "for the same", N, e, calls_first, c.calls);
    conv_grads_reset(&r);
    c.shift = 1; /* planted: every group served the next samples' dy */
    int shifted = conv_transpose3d_grads_fetch(&tg, x, w, copy_fetch, &c, 1, &r);
    double e_bad = grads_diff(&r, dx, dxa, dw, dwa, db, dba);
    check(shifted == 1 && e_bad > 1e-3, "conv_transpose3d_grads_fetch: a fetch serving each "
          "group the next samples' dy is caught by the same comparison (max diff %.1e)", e_bad);
    conv_grads_free(&r);
    free(x), free(w), free(dy), free(dx), free(dxa), free(dw), free(dwa), free(dyf);
}

int main(void)
{
    test_verify();
    test_tf32_round();
    test_verify_rows();
    test_verify_stream();
    test_hash();
    test_stats();
    test_npy();
    test_cli();
    test_gpu_tag();
    test_conv_ref();
    test_conv2d_ref();
    test_conv_transpose_ref();
    test_conv_grads();
    test_conv_grads_groups();
    test_report_csv();
    test_rng();
    test_gradcheck();
    return checks_failed() ? 1 : 0;
}
