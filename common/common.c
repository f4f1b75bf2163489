/* common.c: the host half of the shared library. See common.h for what each function promises. */
#ifndef _GNU_SOURCE /* g++ (and nvcc's host pass, compiling this file in the export) define it */
#define _GNU_SOURCE
#endif
#include "common.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

void die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

void *host_alloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        die(1, "out of host memory: %zu bytes", bytes);
    return p;
}

double host_peak_bytes(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0.0;
    return 1024.0 * (double)ru.ru_maxrss; /* kilobytes on Linux */
}

/* words of a device name that say nothing about the chip: vendor, brand, memory, form factor */
static int tag_noise(const char *w)
{
    static const char *const drop[] = {"nvidia", "geforce", "tesla", "quadro", "gpu", "pcie",
                                       "sxm", "sxm2", "sxm4", "sxm5", "nvl", "hbm2", "hbm2e",
                                       "hbm3", "hbm3e", "mig", "generation"};
    for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++)
        if (!strcmp(w, drop[i]))
            return 1;
    size_t n = strlen(w); /* "80gb", "16gb" */
    return n > 2 && !strcmp(w + n - 2, "gb") && w[0] >= '0' && w[0] <= '9';
}

void gpu_tag_from_name(const char *name, char *tag, size_t len)
{
    char word[64];
    size_t t = 0, k = 0;
    tag[0] = '\0';
    for (const char *p = name;; p++) {
        int sep = !*p || *p == ' ' || *p == '-' || *p == '_';
        if (!sep && k + 1 < sizeof word) {
            word[k++] = (char)tolower((unsigned char)*p);
            continue;
        }
        word[k] = '\0';
        /* "A100-SXM4-80GB": the first word of a hyphenated name is the chip */
        if (k && !tag_noise(word) && t + k + 2 < len && !(t && p[-k - 1] == '-'))
            t += (size_t)snprintf(tag + t, len - t, "%s%s", t ? "-" : "", word);
        k = 0;
        if (!*p)
            break;
    }
    if (!t)
        snprintf(tag, len, "gpu");
}

/* ------------------------------------------------------------------ checks */

static int n_pass, n_fail, n_skip;

int check(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs(ok ? "PASS  " : "FAIL  ", stdout);
    vprintf(fmt, ap);
    putchar('\n');
    va_end(ap);
    fflush(stdout);
    if (ok)
        n_pass++;
    else
        n_fail++;
    return ok;
}

void skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("SKIP  ", stdout);
    vprintf(fmt, ap);
    putchar('\n');
    va_end(ap);
    fflush(stdout);
    n_skip++;
}

int checks_passed(void) { return n_pass; }
int checks_failed(void) { return n_fail; }
int checks_skipped(void) { return n_skip; }

/* -------------------------------------------------------------- statistics */

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

void stats_from_samples(float *ms, int n, timing *t)
{
    qsort(ms, (size_t)n, sizeof(float), cmp_float);
    t->reps = n;
    t->min_ms = ms[0];
    t->max_ms = ms[n - 1];
    t->median_ms = (n % 2) ? ms[n / 2] : 0.5 * ((double)ms[n / 2 - 1] + ms[n / 2]);
}

/* ------------------------------------------------------------ verification */

/* verify_f32's pass over out[0, n) and ref[0, n), elements index0 .. index0 + n - 1 of the
 * whole output, continuing a span's state: v (max_abs, the first index of the largest error, a
 * non-finite mismatch counting as infinite; nonfinite) and the squared sums of errors and of
 * the reference that rel_l2 is made of. A span fed in several calls gives what one call gives. */
static void verify_span(const float *out, const double *ref, size_t n, size_t index0,
                        verify_result *state, double *err2_io, double *ref2_io)
{
    verify_result v = *state;
    double err2 = *err2_io, ref2 = *ref2_io;
    for (size_t j = 0; j < n; j++) {
        size_t i = index0 + j;
        double o = out[j], r = ref[j];
        if (isfinite(o) != isfinite(r)) {
            if (v.nonfinite++ == 0 && v.max_abs != INFINITY) {
                v.max_abs = INFINITY;
                v.max_idx = i;
            }
            continue;
        }
        double d = fabs(o - r);
        if (!isfinite(r)) /* both non-finite: the same value is a match (inf == inf) */
            d = (o == r) ? 0.0 : INFINITY;
        if (!(d <= v.max_abs)) { /* also true when d is NaN */
            v.max_abs = d;
            v.max_idx = i;
        }
        /* a reference below float's smallest normal number cannot be carried by a float result
         * (it flushes or loses its digits): such elements are judged by max_abs alone */
        if (isfinite(d) && fabs(r) >= FLT_MIN) {
            err2 += d * d;
            ref2 += r * r;
        }
    }
    *state = v, *err2_io = err2, *ref2_io = ref2;
}

/* a finished span's result merged into the running one, spans taken in index order */
static void verify_merge(verify_result *v, double *err2, double *ref2, const verify_result *part,
                         double part_err2, double part_ref2)
{
    if (!(part->max_abs <= v->max_abs)) /* strictly larger (or NaN): the earlier span wins ties */
        v->max_abs = part->max_abs, v->max_idx = part->max_idx;
    v->nonfinite += part->nonfinite;
    *err2 += part_err2, *ref2 += part_ref2;
}

/* rel_l2 and the verdict from the merged spans */
static verify_result verify_finish(verify_result v, double err2, double ref2, double tol_rel_l2,
                                   double tol_abs)
{
    v.rel_l2 = ref2 > 0.0 ? sqrt(err2 / ref2) : 0.0;
    if (v.nonfinite)
        v.rel_l2 = INFINITY;
    v.pass = v.nonfinite == 0 && v.rel_l2 <= tol_rel_l2 && v.max_abs <= tol_abs;
    return v;
}

/* Spans of VERIFY_SPAN elements run in parallel (OpenMP; a chapter's outputs reach 268 M
 * elements) and are merged in index order, so the first index of the largest error is the one
 * reported, as a serial pass would. */
#define VERIFY_SPAN ((size_t)1 << 20)

/* `spans` whole spans from out, ref (element index0 on), each verified alone, in parallel, and
 * merged in order into v, err2, ref2 */
static void verify_spans(const float *out, const double *ref, size_t spans, size_t index0,
                         verify_result *v, double *err2, double *ref2)
{
    verify_result *part = (verify_result *)host_alloc(sizeof(verify_result) * (spans ? spans : 1));
    double *sums = (double *)host_alloc(sizeof(double) * 2 * (spans ? spans : 1));
#pragma omp parallel for schedule(static)
    for (long long k = 0; k < (long long)spans; k++) {
        size_t first = (size_t)k * VERIFY_SPAN;
        part[k] = (verify_result){0};
        sums[2 * k] = sums[2 * k + 1] = 0.0;
        verify_span(out + first, ref + first, VERIFY_SPAN, index0 + first, &part[k], &sums[2 * k],
                    &sums[2 * k + 1]);
    }
    for (size_t k = 0; k < spans; k++)
        verify_merge(v, err2, ref2, &part[k], sums[2 * k], sums[2 * k + 1]);
    free(part), free(sums);
}

/* a whole array as one piece of a verify_stream */
static verify_result verify_whole(verify_kind kind, const float *out, const double *ref,
                                  const double *abs_sum, size_t n, double tol_rel_l2, double tol)
{
    verify_stream s;
    verify_stream_begin(&s, kind, n, 0, tol_rel_l2, tol);
    verify_stream_add(&s, out, ref, abs_sum, n);
    return verify_stream_end(&s);
}

verify_result verify_f32(const float *out, const double *ref, size_t n, double tol_rel_l2,
                         double tol_abs)
{
    return verify_whole(VERIFY_ABS, out, ref, NULL, n, tol_rel_l2, tol_abs);
}

/* the first i < n whose |out - ref| exceeds tol abs_sum (+ FLT_MIN), as index0 + i; SIZE_MAX
 * if none */
static size_t sum_first_bad(const float *out, const double *ref, const double *abs_sum, size_t n,
                            size_t index0, double tol)
{
    size_t spans = (n + VERIFY_SPAN - 1) / VERIFY_SPAN, first_bad = SIZE_MAX;
#pragma omp parallel for schedule(static) reduction(min : first_bad)
    for (long long k = 0; k < (long long)spans; k++) {
        size_t end = (size_t)(k + 1) * VERIFY_SPAN < n ? (size_t)(k + 1) * VERIFY_SPAN : n;
        for (size_t i = (size_t)k * VERIFY_SPAN; i < end; i++)
            if (!(fabs(out[i] - ref[i]) <= tol * abs_sum[i] + FLT_MIN)) {
                first_bad = index0 + i < first_bad ? index0 + i : first_bad;
                break;
            }
    }
    return first_bad;
}

int verify_within_2x(verify_result t, verify_result p)
{
    return t.rel_l2 <= 2.0 * p.rel_l2 && t.max_abs <= 2.0 * p.max_abs;
}

verify_result verify_sum_f32(const float *out, const double *ref, const double *abs_sum, size_t n,
                             double tol)
{
    return verify_whole(VERIFY_SUM, out, ref, abs_sum, n, 0.0, tol);
}

void sum_bounds_add_max(double *abs_sum, size_t n)
{
    double big = 0.0;
    for (size_t i = 0; i < n; i++)
        big = fmax(big, abs_sum[i]);
    for (size_t i = 0; i < n; i++)
        abs_sum[i] += big;
}

verify_result verify_f32_scaled(const float *out, const double *ref, size_t n, double tol_rel_l2,
                                double tol_abs)
{
    return verify_whole(VERIFY_SCALED, out, ref, NULL, n, tol_rel_l2, tol_abs);
}

/* rows rows of len values (row0 the first's index in the output), each verified alone against
 * its own scale, in parallel, and merged in order into all */
static void rows_merge(verify_result *all, const float *out, const double *ref, size_t rows,
                       size_t len, size_t row0, double tol_rel_l2, double tol)
{
    verify_result *part = (verify_result *)host_alloc(sizeof(verify_result) * (rows ? rows : 1));
    double *big = (double *)host_alloc(sizeof(double) * (rows ? rows : 1));
#pragma omp parallel for schedule(static)
    for (long long r = 0; r < (long long)rows; r++) { /* rows in parallel, each pass serial */
        const double *rr = ref + (size_t)r * len;
        double b = 0.0;
        for (size_t i = 0; i < len; i++)
            b = fmax(b, fabs(rr[i]));
        part[r] = verify_f32(out + (size_t)r * len, rr, len, tol_rel_l2, tol * b);
        big[r] = b;
    }
    for (size_t r = 0; r < rows; r++) {
        verify_result v = part[r];
        /* the row's max error relative to its own scale; an all-zero row must match exactly */
        double rel_abs = big[r] > 0.0 ? v.max_abs / big[r] : (v.max_abs > 0.0 ? INFINITY : 0.0);
        if (!(rel_abs <= all->max_abs))
            all->max_abs = rel_abs, all->max_idx = (row0 + r) * len + v.max_idx;
        if (!(v.rel_l2 <= all->rel_l2))
            all->rel_l2 = v.rel_l2;
        all->nonfinite += v.nonfinite;
        all->pass &= v.pass;
    }
    free(part), free(big);
}

verify_result verify_rows_f32(const float *out, const double *ref, size_t rows, size_t len,
                             double tol_rel_l2, double tol)
{
    verify_result all = {0};
    all.pass = 1;
    rows_merge(&all, out, ref, rows, len, 0, tol_rel_l2, tol);
    return all;
}

void verify_stream_begin(verify_stream *s, verify_kind kind, size_t n, size_t len,
                         double tol_rel_l2, double tol)
{
    if (kind == VERIFY_ROWS && (len == 0 || n % len))
        die(1, "verify_stream: %zu elements are not whole rows of %zu", n, len);
    memset(s, 0, sizeof *s);
    s->kind = kind, s->n = n, s->len = len, s->tol_rel_l2 = tol_rel_l2, s->tol = tol;
    s->all.pass = kind == VERIFY_ROWS; /* rows fold their verdicts in; the others decide at end */
    s->big = 1.0;
    s->first_bad = SIZE_MAX;
}

void verify_stream_add(verify_stream *s, const float *out, const double *ref,
                       const double *abs_sum, size_t n_piece)
{
    if (n_piece > s->n - s->next)
        die(1, "verify_stream: a piece of %zu elements past the output's %zu (%zu fed)", n_piece,
            s->n, s->next);
    if (s->kind == VERIFY_ROWS) {
        if (n_piece % s->len)
            die(1, "verify_stream: a piece of %zu elements is not whole rows of %zu", n_piece,
                s->len);
        rows_merge(&s->all, out, ref, n_piece / s->len, s->len, s->next / s->len, s->tol_rel_l2,
                   s->tol);
        s->next += n_piece;
        return;
    }
    if (s->kind == VERIFY_SCALED)
        for (size_t i = 0; i < n_piece; i++)
            s->big = fmax(s->big, fabs(ref[i]));
    if (s->kind == VERIFY_SUM && s->first_bad == SIZE_MAX)
        s->first_bad = sum_first_bad(out, ref, abs_sum, n_piece, s->next, s->tol);
    /* the spans of the whole output: the one in progress continued, whole ones in parallel,
     * the rest begun */
    for (size_t j = 0; j < n_piece;) {
        size_t at = s->next + j, into = at % VERIFY_SPAN;
        if (into == 0 && n_piece - j >= VERIFY_SPAN) {
            size_t spans = (n_piece - j) / VERIFY_SPAN;
            verify_spans(out + j, ref + j, spans, at, &s->all, &s->err2, &s->ref2);
            j += spans * VERIFY_SPAN;
            continue;
        }
        size_t take = n_piece - j < VERIFY_SPAN - into ? n_piece - j : VERIFY_SPAN - into;
        verify_span(out + j, ref + j, take, at, &s->span, &s->span_err2, &s->span_ref2);
        j += take;
        if (into + take == VERIFY_SPAN) { /* the span is complete */
            verify_merge(&s->all, &s->err2, &s->ref2, &s->span, s->span_err2, s->span_ref2);
            s->span = (verify_result){0};
            s->span_err2 = s->span_ref2 = 0.0;
        }
    }
    s->next += n_piece;
}

verify_result verify_stream_end(verify_stream *s)
{
    if (s->next != s->n)
        die(1, "verify_stream: %zu of the output's %zu elements fed", s->next, s->n);
    if (s->kind == VERIFY_ROWS)
        return s->all;
    if (s->n % VERIFY_SPAN) /* the last span, shorter */
        verify_merge(&s->all, &s->err2, &s->ref2, &s->span, s->span_err2, s->span_ref2);
    if (s->kind == VERIFY_SUM) { /* verify_sum_f32: no non-finite, every element in its bound */
        verify_result v = verify_finish(s->all, s->err2, s->ref2, INFINITY, INFINITY);
        v.pass = v.nonfinite == 0;
        if (v.pass && s->first_bad != SIZE_MAX)
            v.pass = 0, v.max_idx = s->first_bad;
        return v;
    }
    return verify_finish(s->all, s->err2, s->ref2, s->tol_rel_l2,
                         s->kind == VERIFY_SCALED ? s->tol * s->big : s->tol);
}

#define FNV_PRIME 0x100000001b3ull
#define HASH_SPAN ((size_t)1 << 18)

uint64_t hash_f32(uint64_t h, const float *x, size_t n)
{
    size_t spans = (n + HASH_SPAN - 1) / HASH_SPAN;
    uint64_t *part = (uint64_t *)host_alloc(sizeof(uint64_t) * (spans ? spans : 1));
#pragma omp parallel for schedule(static)
    for (long long k = 0; k < (long long)spans; k++) {
        size_t first = (size_t)k * HASH_SPAN, len = n - first < HASH_SPAN ? n - first : HASH_SPAN;
        const unsigned char *p = (const unsigned char *)(x + first);
        uint64_t s = HASH_INIT;
        for (size_t i = 0; i < len * sizeof(float); i++)
            s = (s ^ p[i]) * FNV_PRIME;
        part[k] = s;
    }
    for (size_t k = 0; k < spans; k++) /* the spans' hashes, byte by byte, in order */
        for (int b = 0; b < 8; b++)
            h = (h ^ ((part[k] >> (8 * b)) & 0xffu)) * FNV_PRIME;
    free(part);
    return h;
}

float tf32_round(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7f800000u) != 0x7f800000u)
        u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&v, &u, 4);
    return v;
}

double logsumexp_ref(const double *v, int n, size_t stride)
{
    double m = v[0], sum = 0.0;
    for (int i = 1; i < n; i++)
        m = fmax(m, v[i * stride]);
    for (int i = 0; i < n; i++)
        sum += exp(v[i * stride] - m);
    return m + log(sum);
}

/* ------------------------------------------------------------------ random */

void rng_seed(rng_state *r, uint64_t seed) { r->s = seed; }

uint64_t rng_next(rng_state *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double rng_uniform(rng_state *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

double rng_normal(rng_state *r)
{
    double u1 = 1.0 - rng_uniform(r); /* (0, 1]: log(u1) is finite */
    double u2 = rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void fill_uniform(float *x, size_t n, double lo, double hi, rng_state *r)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(lo + (hi - lo) * rng_uniform(r));
}

void fill_normal(float *x, size_t n, rng_state *r)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)rng_normal(r);
}

void init_conv_params(float *weight, size_t n_weight, float *bias, size_t n_bias, int fan_in,
                      rng_state *r)
{
    double b = 1.0 / sqrt((double)fan_in);
    fill_uniform(weight, n_weight, -b, b, r);
    if (bias)
        fill_uniform(bias, n_bias, -b, b, r);
}

/* --------------------------------------------------------------------- npy */

int npy_write_f32(const char *path, const float *x, int ndim, const int64_t *shape)
{
    char dict[256];
    int len = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    size_t count = 1;
    for (int i = 0; i < ndim; i++) {
        len += snprintf(dict + len, sizeof dict - len, "%lld,%s", (long long)shape[i],
                        (i + 1 < ndim) ? " " : "");
        count *= (size_t)shape[i];
    }
    if (ndim > 1) /* a 1-tuple needs its trailing comma, longer tuples read better without */
        len--;
    len += snprintf(dict + len, sizeof dict - len, "), }");
    /* magic (6) + version (2) + header length (2) + dict + padding + '\n', a multiple of 64 */
    int total = 10 + len + 1;
    int pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "error: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    unsigned short hlen = (unsigned short)(len + pad + 1);
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                             (unsigned char)(hlen >> 8)};
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)len, f) == (size_t)len;
    for (int i = 0; i < pad && ok; i++)
        ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    ok = ok && fwrite(x, sizeof(float), count, f) == count;
    ok = (fclose(f) == 0) && ok;
    if (!ok)
        fprintf(stderr, "error: short write to %s\n", path);
    return ok ? 0 : -1;
}

float *npy_read_f32(const char *path, int *ndim, int64_t shape[8])
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "error: cannot read %s: %s\n", path, strerror(errno));
        return NULL;
    }
    unsigned char pre[12];
    char *hdr = NULL;
    float *x = NULL;
    char *p;
    size_t hlen, count = 1; /* declared before the first goto: C++ (the export) forbids jumping
                               past an initialisation */
    if (fread(pre, 1, 8, f) != 8 || memcmp(pre, "\x93NUMPY", 6) != 0)
        goto bad;
    if (pre[6] == 1) {
        if (fread(pre + 8, 1, 2, f) != 2)
            goto bad;
        hlen = pre[8] | (size_t)pre[9] << 8;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 8, 1, 4, f) != 4)
            goto bad;
        hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    } else {
        goto bad;
    }
    hdr = (char *)calloc(hlen + 1, 1);
    if (!hdr || fread(hdr, 1, hlen, f) != hlen)
        goto bad;
    if (!strstr(hdr, "'descr': '<f4'") || !strstr(hdr, "'fortran_order': False")) {
        fprintf(stderr, "error: %s: only float32 ('<f4') C-order arrays are supported\n", path);
        goto fail;
    }
    p = strstr(hdr, "'shape': (");
    if (!p)
        goto bad;
    p += strlen("'shape': (");
    *ndim = 0;
    while (*p && *p != ')') {
        char *end;
        long long d = strtoll(p, &end, 10);
        if (end == p)
            break;
        if (*ndim == 8 || d < 0)
            goto bad;
        shape[(*ndim)++] = d;
        count *= (size_t)d;
        p = end;
        while (*p == ',' || *p == ' ')
            p++;
    }
    x = (float *)malloc(count ? count * sizeof(float) : 1);
    if (!x || fread(x, sizeof(float), count, f) != count)
        goto bad;
    free(hdr);
    fclose(f);
    return x;
bad:
    fprintf(stderr, "error: %s is not a readable .npy file (or is truncated)\n", path);
fail:
    free(hdr);
    free(x);
    fclose(f);
    return NULL;
}

float *npy_load(const char *dir, const char *name, size_t want)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    int nd = 0;
    int64_t sh[8];
    float *a = npy_read_f32(path, &nd, sh);
    size_t count = 1;
    for (int i = 0; a && i < nd; i++)
        count *= (size_t)sh[i];
    if (a && count != want) {
        fprintf(stderr, "error: %s has %zu elements, expected %zu\n", path, count, want);
        free(a);
        a = NULL;
    }
    return a;
}

void npy_save_or_exit(const char *dir, const char *name, const float *x, int ndim,
                      const int64_t *shape)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    if (npy_write_f32(path, x, ndim, shape))
        die(1, "cannot write %s", path);
}

void npy_save_id_or_exit(const char *dir, const char *name, const char *id, const float *x,
                         int ndim, const int64_t *shape)
{
    char full[256];
    snprintf(full, sizeof full, "%s_%s", name, id);
    npy_save_or_exit(dir, full, x, ndim, shape);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int list_dir_sorted(const char *dir, char **names, int max_names)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max_names)
        if (e->d_name[0] != '.')
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_name);
    return n;
}

void for_each_golden_case(const char *dir, void (*fn)(const char *path, const char *name))
{
    char *names[64];
    int n = list_dir_sorted(dir, names, 64);
    if (n < 0) {
        skip("golden: %s not found (run from the repository root; `make golden` writes it)", dir);
        return;
    }
    if (n == 0)
        check(0, "golden: %s is empty", dir);
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%.100s/%.900s", dir, names[i]);
        fn(path, names[i]);
        free(names[i]);
    }
}

/* --------------------------------------------------------------------- CLI */

int parse_shape(const char *s, int want, int64_t *dims, char *err, size_t errlen)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        if (*p == '-' || *p == '+' || *p == ' ') {
            snprintf(err, errlen, "bad --shape '%s': dims are positive integers", s);
            return -1;
        }
        long long d = strtoll(p, &end, 10);
        if (end == p || errno == ERANGE) {
            snprintf(err, errlen, "bad --shape '%s': expected %d dims like 1x2x3", s, want);
            return -1;
        }
        if (d <= 0 || d >= (1ll << 31)) {
            snprintf(err, errlen, "bad --shape '%s': dim %lld is not in [1, 2^31)", s, d);
            return -1;
        }
        if (n == want) {
            snprintf(err, errlen, "bad --shape '%s': more than %d dims", s, want);
            return -1;
        }
        dims[n++] = d;
        p = end;
        if (*p == 'x' || *p == 'X' || *p == ',') {
            p++;
            if (!*p) {
                snprintf(err, errlen, "bad --shape '%s': trailing separator", s);
                return -1;
            }
        } else if (*p) {
            snprintf(err, errlen, "bad --shape '%s': unexpected '%c'", s, *p);
            return -1;
        }
    }
    if (n != want) {
        snprintf(err, errlen, "bad --shape '%s': expected %d dims, got %d", s, want, n);
        return -1;
    }
    return 0;
}

static int parse_int(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno == ERANGE || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int cli_parse(int argc, char **argv, int shape_dims, cli_args *a, char *err, size_t errlen)
{
    static const struct option opts[] = {
        {"shape", required_argument, 0, 's'}, {"seed", required_argument, 0, 'S'},
        {"reps", required_argument, 0, 'r'},  {"version", required_argument, 0, 'v'},
        {"list", no_argument, 0, 'l'},        {"test", no_argument, 0, 't'},
        {"dump", required_argument, 0, 'd'},  {"csv", required_argument, 0, 'c'},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    memset(a, 0, sizeof *a);
    a->seed = 1;
    a->reps = 20;
    optind = 0; /* glibc: 0 re-initialises getopt, so cli_parse can be called more than once */
    opterr = 0; /* we print our own message */
    for (;;) {
        int c = getopt_long(argc, argv, ":", opts, NULL); /* ":": a missing value returns ':' */
        long long v;
        if (c == -1)
            break;
        switch (c) {
        case 's':
            if (parse_shape(optarg, shape_dims, a->dims, err, errlen))
                return -1;
            a->ndim = shape_dims;
            break;
        case 'S':
            if (parse_int(optarg, 0, INT64_MAX, &v)) {
                snprintf(err, errlen, "bad --seed '%s': expected a non-negative integer", optarg);
                return -1;
            }
            a->seed = (uint64_t)v;
            break;
        case 'r':
            if (parse_int(optarg, 1, 100000, &v)) {
                snprintf(err, errlen, "bad --reps '%s': expected an integer in [1, 100000]",
                         optarg);
                return -1;
            }
            a->reps = (int)v;
            break;
        case 'v':
            if (!optarg[0] || strlen(optarg) > 8) {
                snprintf(err, errlen, "bad --version '%s': expected a version id such as v5 or "
                         "b2 (--list)", optarg);
                return -1;
            }
            a->version = optarg;
            break;
        case 'l': a->list = 1; break;
        case 't': a->test = 1; break;
        case 'd': a->dump_dir = optarg; break;
        case 'c': a->csv = optarg; break;
        case 'h': return 1;
        case ':':
            snprintf(err, errlen, "option '%s' needs a value", argv[optind - 1]);
            return -1;
        default:
            snprintf(err, errlen, "unknown option '%s'", argv[optind - 1]);
            return -1;
        }
    }
    if (optind < argc) {
        snprintf(err, errlen, "unexpected argument '%s'", argv[optind]);
        return -1;
    }
    return 0;
}

void cli_shape_or_exit(const cli_args *a, int ndims, int64_t *dims,
                       const char *(*problem)(const int64_t *dims))
{
    if (a->ndim)
        memcpy(dims, a->dims, sizeof(int64_t) * ndims);
    const char *why = problem(dims);
    if (why) {
        fprintf(stderr, "error: impossible --shape: %s\n", why);
        exit(EXIT_USAGE);
    }
}

void cli_parse_or_exit(int argc, char **argv, int shape_dims, cli_args *a, const char *extra)
{
    char err[256];
    int rc = cli_parse(argc, argv, shape_dims, a, err, sizeof err);
    if (rc == 1) {
        cli_usage(stdout, argv[0], shape_dims, extra);
        exit(0);
    }
    if (rc < 0) {
        fprintf(stderr, "error: %s\n", err);
        cli_usage(stderr, argv[0], shape_dims, extra);
        exit(EXIT_USAGE);
    }
}

void cli_usage(FILE *f, const char *prog, int shape_dims, const char *extra)
{
    /* the layout of the model's input: NCHW for a 2-D model, NCDHW for a 3-D one */
    const char *layout = shape_dims == 4 ? "NxCxHxW  " : "NxCxDxHxW";
    fprintf(f,
            "usage: %s [options]\n"
            "  --shape %s  the model input's dims (default: the KernelBench shape)\n"
            "  --seed S           seed of the random inputs and parameters (default 1)\n"
            "  --reps R           timed repetitions per version, min/median/max (default 20)\n"
            "  --version ID       run only that version: v5, b2, x1 (see --list)\n"
            "  --list             list the versions, each with its source file, and exit\n"
            "  --test             CPU checks, then every version on awkward shapes and extreme\n"
            "                     values (GPU checks are skipped without a CUDA device);\n"
            "                     with --shape, only that shape\n"
            "  --dump DIR         write inputs, parameters and every version's output as .npy\n"
            "  --csv FILE         write the timing rows to FILE, replacing rows of the same GPU,\n"
            "                     chapter, shape, version and scope\n"
            "  --help             this text\n"
            "exit status: 0 ok, 1 verification or runtime failure, 2 bad input or no CUDA device\n",
            prog, layout);
    if (extra)
        fputs(extra, f);
}

/* ------------------------------------------------------------------ report */

double report_floor_ms(const report_ctx *c, const report_row *r)
{
    double mem = r->bytes / (c->ceiling_gbps * 1e6), math = 0.0;
    if (r->flops > 0 && c->peak_tflops > 0)
        math = r->flops / (c->peak_tflops * 1e9);
    return mem > math ? mem : math;
}

void report_header(FILE *f, const report_ctx *c)
{
    fprintf(f, "GPU: %s, %d SMs, %.0f MB L2, measured device-to-device copy ceiling %.0f GB/s "
               "(read + write), fp32 FMA peak %.1f TFLOP/s\n",
            c->gpu_name, c->sm_count, c->l2_mb, c->ceiling_gbps, c->peak_tflops);
    fprintf(f, "input shape %s; floor = max(bytes / ceiling, FLOPs / peak)\n", c->shape);
    fprintf(f, "%-8s %-52s %-16s %10s %20s %8s %6s %7s %7s\n", "version", "what", "scope",
            "median ms", "[min - max]", "GB/s", "% ceil", "TFLOP/s", "% floor");
}

void report_print(FILE *f, const report_ctx *c, const report_row *r)
{
    double gbps = r->bytes / (r->t.median_ms * 1e6);
    char range[32], tf[16] = "-";
    snprintf(range, sizeof range, "[%.4f - %.4f]", r->t.min_ms, r->t.max_ms);
    if (r->flops > 0)
        snprintf(tf, sizeof tf, "%.1f", r->flops / (r->t.median_ms * 1e9));
    fprintf(f, "%-8s %-52.52s %-16s %10.4f %20s %8.0f %6.1f %7s %7.1f\n", r->version, r->name,
            r->scope, r->t.median_ms, range, gbps, 100.0 * gbps / c->ceiling_gbps, tf,
            100.0 * report_floor_ms(c, r) / r->t.median_ms);
}

const char *const report_csv_header =
    "gpu,chapter,version,name,precision,scope,shape,median_ms,min_ms,max_ms,bytes,gbps,"
    "ceiling_gbps,pct_ceiling,flops,tflops,peak_tflops,floor_ms,pct_floor,reps,date";

/* the n-th comma-separated field of a line (0-based), copied into out */
static void csv_field(const char *line, int n, char *out, size_t len)
{
    for (int i = 0; i < n && line; i++)
        if ((line = strchr(line, ',')))
            line++;
    size_t k = 0;
    for (; line && *line && *line != ',' && *line != '\n' && k + 1 < len; line++)
        out[k++] = *line;
    out[k] = '\0';
}

static const char *row_precision(const report_row *r)
{
    return r->precision ? r->precision : "fp32";
}

/* the row's (gpu, chapter, version, precision, scope, shape) is one of the new rows' */
static int csv_replaced(const char *line, const report_ctx *c, const report_row *rows, int n)
{
    char f[6][64];
    int col[6] = {0, 1, 2, 4, 5, 6};
    for (int i = 0; i < 6; i++)
        csv_field(line, col[i], f[i], sizeof f[i]);
    if (strcmp(f[0], c->gpu) || strcmp(f[1], c->chapter) || strcmp(f[5], c->shape))
        return 0;
    for (int i = 0; i < n; i++)
        if (!strcmp(f[2], rows[i].version) && !strcmp(f[3], row_precision(&rows[i])) &&
            !strcmp(f[4], rows[i].scope))
            return 1;
    return 0;
}

int report_csv(const char *path, const report_ctx *c, const report_row *rows, int n)
{
    char tmp[4096], line[1024];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    if (!out) {
        fprintf(stderr, "error: cannot write %s: %s\n", tmp, strerror(errno));
        return -1;
    }
    fprintf(out, "%s\n", report_csv_header);
    FILE *in = fopen(path, "r");
    if (in) {
        if (fgets(line, sizeof line, in) && !strncmp(line, report_csv_header, strlen(report_csv_header)))
            while (fgets(line, sizeof line, in))
                if (!csv_replaced(line, c, rows, n))
                    fputs(line, out);
        fclose(in);
    }
    char date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
    for (int i = 0; i < n; i++) {
        const report_row *r = &rows[i];
        double gbps = r->bytes / (r->t.median_ms * 1e6), floor_ms = report_floor_ms(c, r);
        char name[128]; /* no commas inside a field: any tool can split the row on commas */
        snprintf(name, sizeof name, "%s", r->name);
        for (char *p = name; *p; p++)
            if (*p == ',' || *p == '"')
                *p = ';';
        fprintf(out, "%s,%s,%s,%s,%s,%s,%s,%.5f,%.5f,%.5f,%.0f,%.1f,%.1f,%.2f,%.0f,%.2f,%.1f,%.5f,"
                     "%.1f,%d,%s\n",
                c->gpu, c->chapter, r->version, name, row_precision(r), r->scope, c->shape,
                r->t.median_ms,
                r->t.min_ms, r->t.max_ms, r->bytes, gbps, c->ceiling_gbps,
                100.0 * gbps / c->ceiling_gbps, r->flops, r->flops / (r->t.median_ms * 1e9),
                c->peak_tflops, floor_ms, 100.0 * floor_ms / r->t.median_ms, r->t.reps, date);
    }
    if (fclose(out) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "error: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* --------------------------------------------------------------- gradcheck */

double gradcheck(loss_fn loss, void *ctx, double *x, size_t n, const double *grad, double h,
                 double *max_abs)
{
    double diff2 = 0.0, num2 = 0.0, worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double xi = x[i];
        x[i] = xi + h;
        double lp = loss(x, ctx);
        x[i] = xi - h;
        double lm = loss(x, ctx);
        x[i] = xi;
        double g = (lp - lm) / (2.0 * h);
        double d = fabs(g - grad[i]);
        if (!(d <= worst))
            worst = d;
        diff2 += d * d;
        num2 += g * g;
    }
    if (max_abs)
        *max_abs = worst;
    double rel = sqrt(diff2) / fmax(sqrt(num2), 1e-30);
    return isnan(rel) ? INFINITY : rel;
}
