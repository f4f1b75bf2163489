/*
 * test_common.c: unit tests of the shared library's host half. Each check can fail: the verifier
 * is fed planted faults, the CLI bad input, the gradient checker a wrong derivative.
 */
#define _DEFAULT_SOURCE /* mkdtemp, truncate */
#include "common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    int rc = parse("prog --shape 4x3x5x7x11 --seed 9 --reps 30 --version 2 --csv o.csv", &a, err);
    check(rc == 0 && a.ndim == 5 && a.dims[0] == 4 && a.dims[4] == 11 && a.seed == 9 &&
              a.reps == 30 && a.version == 2 && a.csv && strcmp(a.csv, "o.csv") == 0,
          "cli: a full valid command line parses");
    rc = parse("prog", &a, err);
    check(rc == 0 && a.ndim == 0 && a.reps == 20 && a.seed == 1 && a.version == 0,
          "cli: defaults (reps 20, seed 1, all versions)");
    static const char *bad[] = {
        "prog --bogus",          "prog --shape 4x3x5x7",     "prog --shape 4x3x5x7x11x2",
        "prog --shape 4x3x0x7x9", "prog --shape 4x3x-5x7x9", "prog --shape 4x3x5x7x",
        "prog --shape 4x3xAx7x9", "prog --reps 0",           "prog --reps 12abc",
        "prog --version x",      "prog stray",               "prog --shape 4x3x5x7x99999999999",
        "prog --shape",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        rc = parse(bad[i], &a, err);
        check(rc == -1 && err[0], "cli: rejects '%s' (%s)", bad[i] + 5, err);
    }
    check(parse("prog --help", &a, err) == 1, "cli: --help asks for the usage");
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

int main(void)
{
    test_verify();
    test_stats();
    test_npy();
    test_cli();
    test_rng();
    test_gradcheck();
    return checks_failed() ? 1 : 0;
}
