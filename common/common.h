/*
 * common.h: the host (C) half of the tutorial's shared library.
 *
 *   checks      check(), skip(): PASS/FAIL/SKIP lines that `make test` counts
 *   statistics  stats_from_samples(): min / median / max of timed repetitions
 *   verify      verify_f32(): relative L2 and max abs error against a double reference, NaN-safe;
 *               verify_stream_*(): the same checks fed a piece at a time
 *   random      rng_*(), fill_*(), init_conv_params(): seeded and PyTorch-style initialisation
 *   npy         npy_write_f32(), npy_read_f32(): float32 C-order .npy files for numpy and PyTorch
 *   CLI         cli_parse(), parse_shape(), cli_usage(): the one command line every chapter shares
 *   report      report_*(): the timing table and its CSV rows
 *   gradcheck   gradcheck(): central differences in double for a hand-derived gradient
 *
 * The CUDA half (error checks, device facts, timer, poisoning) is in gpu.h.
 * Nothing here knows about any chapter's model.
 */
#ifndef COMMON_H
#define COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EXIT_USAGE 2 /* bad flags, impossible shape, no CUDA device */

/* Prints "error: <message>" to stderr and exits with `code`. */
void die(int code, const char *fmt, ...);
/* malloc, or exit 1 with "out of host memory: N bytes" (0 bytes allocates 1) */
void *host_alloc(size_t bytes);
/* The peak resident set of this process so far, in bytes (getrusage's ru_maxrss; 0 if unknown). */
double host_peak_bytes(void);
/*
 * The short tag of a GPU's name, for data/<tag>/ and plots/<tag>/: vendor, brand and memory or
 * form-factor words dropped, the rest lower case and joined by '-'. "NVIDIA H100 80GB HBM3" ->
 * "h100", "NVIDIA A100-SXM4-80GB" -> "a100", "NVIDIA GeForce RTX 4090" -> "rtx-4090",
 * "NVIDIA L4" -> "l4". An empty result becomes "gpu".
 */
void gpu_tag_from_name(const char *name, char *tag, size_t len);

/* ------------------------------------------------------------------ checks */

/*
 * Prints "PASS  <what>" or "FAIL  <what>" on stdout and counts it. Test runners grep these
 * prefixes, so every check a program makes shows up in `make test`'s total.
 * Returns ok so callers can chain.
 */
int check(int ok, const char *fmt, ...);
/* Prints "SKIP  <what>" and counts it (a check that could not run here, e.g. no GPU). */
void skip(const char *fmt, ...);
/* Counters since program start. */
int checks_passed(void);
int checks_failed(void);
int checks_skipped(void);

/* -------------------------------------------------------------- statistics */

typedef struct {
    double min_ms, median_ms, max_ms; /* milliseconds */
    int reps;                         /* number of samples */
} timing;

/* Sorts ms[0..n) in place and fills t. The median of an even count is the mean of the two middle
 * samples. n >= 1. */
void stats_from_samples(float *ms, int n, timing *t);

/* ------------------------------------------------------------ verification */

typedef struct {
    double rel_l2;     /* ||out - ref||_2 / ||ref||_2 (absolute ||out - ref||_2 when ||ref|| = 0) */
    double max_abs;    /* max_i |out_i - ref_i| */
    size_t max_idx;    /* index of max_abs, or of the first non-finite mismatch */
    size_t nonfinite;  /* elements where out is NaN/Inf and ref is not (or the reverse) */
    int pass;          /* 1 iff nonfinite == 0, rel_l2 <= tol_rel_l2 and max_abs <= tol_abs */
} verify_result;

/*
 * Compares n float outputs with a double reference, element by element. NaN-safe: a NaN or Inf
 * in out where ref is finite fails (so a NaN-poisoned, unwritten element fails); comparisons are
 * written so that a NaN can never satisfy them. Reference values below FLT_MIN (zero, or what a
 * float could only hold as a subnormal) count in max_abs but not in rel_l2, whose denominator
 * would otherwise make a float's unavoidable flush to 0 look like a 100% error.
 */
verify_result verify_f32(const float *out, const double *ref, size_t n, double tol_rel_l2,
                         double tol_abs);
/*
 * A kernel's error (t) within 2x its peer's (p) on the same tensors, in relative L2 and in the
 * largest error: for a TF32 kernel the peer is a TF32 model's error (operands rounded to TF32,
 * sums in double) or a library's TF32 kernel's; one that lost more in its products or sums, or
 * truncated its operands instead of rounding them (about 2.7x the rounded error on random data),
 * fails. For a 3xTF32 kernel the peer is cuDNN's fp32 kernel's.
 */
int verify_within_2x(verify_result t, verify_result p);
/*
 * For results that are sums of many terms (a bias gradient over millions of positions): element
 * i passes when |out_i - ref_i| <= tol * abs_sum_i, abs_sum_i being the sum of the magnitudes of
 * its terms. That is the scale of the rounding error of any float summation order (Higham,
 * "Accuracy and Stability of Numerical Algorithms", 2nd ed., ch. 4), however much the terms
 * cancel; a relative error against the sum itself would blame cancellation on the kernel.
 * rel_l2, max_abs and nonfinite are reported as by verify_f32; NaN-safe the same way.
 */
verify_result verify_sum_f32(const float *out, const double *ref, const double *abs_sum, size_t n,
                             double tol);
/*
 * Makes verify_sum_f32's n bounds componentwise plus normwise (Higham, ch. 7): adds the largest
 * abs_sum_i to every abs_sum_i. For a conv's weight and bias gradients: an element whose terms
 * are all tiny is otherwise held to float's smallest normal (1.2e-38, the floor verify_sum_f32
 * grants), which a kernel that flushes subnormal terms to zero can miss (with x * 1000, a dw
 * element of chapter 4 whose terms' magnitudes summed to 3.2e-37 came out of cuDNN as 0, the
 * reference being 2.9e-38). An error over tol times the tensor's largest sum still fails.
 */
void sum_bounds_add_max(double *abs_sum, size_t n);
/* verify_f32 for outputs whose scale varies with the input (a logsumexp grows with x): the
 * absolute bound is tol_abs x max(1, max_i |ref_i|), float rounding being relative. */
verify_result verify_f32_scaled(const float *out, const double *ref, size_t n, double tol_rel_l2,
                                double tol_abs);
/* A hash of the bits of n floats, to compare two runs' outputs bit for bit: 64-bit FNV-1a
 * (Fowler, Noll, Vo) over each span of HASH_SPAN floats, in parallel (OpenMP), then FNV-1a over
 * the spans' hashes in order, starting from h (HASH_INIT, or an earlier result to chain
 * outputs). Any change of a bit changes its span's hash and, with FNV's odds, the result. */
uint64_t hash_f32(uint64_t h, const float *x, size_t n);
#define HASH_INIT 0xcbf29ce484222325ull

/* For rows whose scale differs from row to row, none near 1 (a softmax over 131072 values: every
 * output below 2.1e-5, where an absolute tolerance of 1e-4 would accept all zeros): each of the
 * `rows` rows of `len` values must have its own relative L2 error <= tol_rel_l2 and every
 * |error| <= tol x the row's largest |ref| (so an all-zero reference row must be matched
 * exactly). Reported: rel_l2 the worst row's, max_abs the worst |error| relative to its row's
 * largest |ref| (a relative figure here), max_idx where it is, nonfinite over all rows.
 * NaN-safe as verify_f32. */
verify_result verify_rows_f32(const float *out, const double *ref, size_t rows, size_t len,
                              double tol_rel_l2, double tol);
/*
 * The same verifications fed a piece at a time, for an output too large to hold whole beside
 * its double reference (a chapter's output of 268 M floats is 1.07 GB, its reference 2.15 GB):
 * verify_stream_begin names the check and the output's length n, verify_stream_add takes the
 * next pieces in order (any sizes; for VERIFY_ROWS whole rows), verify_stream_end gives the
 * verdict. It is the whole-array function's, bit for bit, whatever the pieces: the same sums
 * over the same spans in the same order, the same first index of the largest error.
 *   VERIFY_ABS     verify_f32(out, ref, n, tol_rel_l2, tol)
 *   VERIFY_SCALED  verify_f32_scaled(out, ref, n, tol_rel_l2, tol)
 *   VERIFY_SUM     verify_sum_f32(out, ref, abs_sum, n, tol) (abs_sum given with each piece)
 *   VERIFY_ROWS    verify_rows_f32(out, ref, n / len, len, tol_rel_l2, tol)
 * verify_stream_add dies on a piece of VERIFY_ROWS that is not whole rows, or past n;
 * verify_stream_end on fewer than n elements fed.
 */
typedef enum { VERIFY_ABS, VERIFY_SCALED, VERIFY_SUM, VERIFY_ROWS } verify_kind;
typedef struct {
    verify_kind kind;
    size_t n, len;              /* the output's length; VERIFY_ROWS: the row length */
    double tol_rel_l2, tol;
    size_t next;                /* elements fed so far */
    verify_result all, span;    /* the spans (rows) merged so far; the span in progress */
    double err2, ref2;          /* their squared sums of errors and of the reference */
    double span_err2, span_ref2;
    double big;                 /* VERIFY_SCALED: max(1, the largest |ref| so far) */
    size_t first_bad;           /* VERIFY_SUM: the first element over its bound, or SIZE_MAX */
} verify_stream;

void verify_stream_begin(verify_stream *s, verify_kind kind, size_t n, size_t len,
                         double tol_rel_l2, double tol);
/* the next n_piece elements: out, ref (and for VERIFY_SUM abs_sum) hold them from their first */
void verify_stream_add(verify_stream *s, const float *out, const double *ref,
                       const double *abs_sum, size_t n_piece);
verify_result verify_stream_end(verify_stream *s);
/* The log of the sum of exp(v[i * stride]) over i < n, as m + log sum exp(v - m), m the max */
double logsumexp_ref(const double *v, int n, size_t stride);
/* v rounded to TF32 (10 mantissa bits) on the host as cvt.rna.tf32.f32 rounds it on the GPU
 * (PTX ISA, cvt: .rna, to nearest, ties away from zero; common/tf32.cuh's to_tf32): half the
 * weight of the 13 dropped bits added to the magnitude, then those bits cleared. Infinity and
 * NaN unchanged. The operands of a TF32 tensor-core product; a reference built from them has a
 * TF32 conv's error (the chapters' TF32 accuracy bounds). */
float tf32_round(float v);

/* ------------------------------------------------------------------ random */

/* splitmix64 (Steele, Lea, Flood: "Fast splittable pseudorandom number generators", OOPSLA 2014):
 * one 64-bit state, good enough for test data, identical on every platform. */
typedef struct {
    uint64_t s;
} rng_state;

void rng_seed(rng_state *r, uint64_t seed);
uint64_t rng_next(rng_state *r);
double rng_uniform(rng_state *r); /* [0, 1), 53 random bits */
double rng_normal(rng_state *r);  /* standard normal, Box-Muller */
void fill_uniform(float *x, size_t n, double lo, double hi, rng_state *r); /* U[lo, hi) */
void fill_normal(float *x, size_t n, rng_state *r);                        /* N(0, 1) */

/*
 * PyTorch's default initialisation of a convolution: weight by kaiming_uniform_(a = sqrt(5)),
 * which is U(-b, b) with b = sqrt(6 / ((1 + 5) * fan_in)) = 1 / sqrt(fan_in), and bias U(-b, b)
 * with the same b (torch/nn/modules/conv.py, reset_parameters). fan_in = weight.size(1) * k^d:
 * in_channels * k^d for ConvNd, out_channels * k^d for ConvTransposeNd (its weight is in x out x k..).
 * bias may be NULL.
 */
void init_conv_params(float *weight, size_t n_weight, float *bias, size_t n_bias, int fan_in,
                      rng_state *r);

/* --------------------------------------------------------------------- npy */

/*
 * Writes a float32, C-order array in NumPy's .npy format version 1.0
 * (numpy.org/doc/stable/reference/generated/numpy.lib.format.html). shape has ndim entries.
 * Returns 0, or -1 with a message on stderr (cannot open or write).
 */
int npy_write_f32(const char *path, const float *x, int ndim, const int64_t *shape);
/*
 * Reads a float32 ('<f4'), C-order .npy file (version 1.0 to 3.0). On success returns a malloc'd
 * array (free() it), sets *ndim (<= 8) and shape[0..*ndim). On any problem (missing file, other
 * dtype, Fortran order, truncated data) returns NULL with a message on stderr.
 */
float *npy_read_f32(const char *path, int *ndim, int64_t shape[8]);

/* Reads DIR/NAME.npy (float32) and checks it has `want` elements. Returns a malloc'd array, or
 * NULL with a message on stderr (missing, unreadable, or another size). */
float *npy_load(const char *dir, const char *name, size_t want);
/* Writes x as DIR/NAME.npy (see npy_write_f32); on failure exits 1 with "cannot write ...". */
void npy_save_or_exit(const char *dir, const char *name, const float *x, int ndim,
                      const int64_t *shape);
/* npy_save_or_exit as DIR/NAME_ID.npy: a version's output, e.g. grad_x_b2 */
void npy_save_id_or_exit(const char *dir, const char *name, const char *id, const float *x,
                         int ndim, const int64_t *shape);
/* The entries of DIR that do not start with '.', sorted, at most max_names; each name malloc'd
 * (free them). Returns the count, or -1 if DIR cannot be opened. */
int list_dir_sorted(const char *dir, char **names, int max_names);

/*
 * The golden-tensor walk every chapter's CPU checks make: for each case directory under dir
 * (sorted; at most 64), calls fn(path of the case, its name). A missing dir is a SKIP (the program
 * run from elsewhere than the repository root); an empty one a FAIL.
 */
void for_each_golden_case(const char *dir, void (*fn)(const char *path, const char *name));

/* --------------------------------------------------------------------- CLI */

#define CLI_MAX_DIMS 5

typedef struct {
    int ndim;                      /* 0 when --shape was not given */
    int64_t dims[CLI_MAX_DIMS];    /* the model input's dims, e.g. N, C, D, H, W */
    uint64_t seed;                 /* --seed, default 1 */
    int reps;                      /* --reps, timed repetitions, default 20, at least 1 */
    const char *version;           /* --version ID ("v5", "b2"), NULL = all */
    int list;                      /* --list */
    int test;                      /* --test */
    const char *dump_dir;          /* --dump DIR or NULL */
    const char *csv;               /* --csv FILE or NULL */
} cli_args;

/*
 * Parses "4x3x16x32x32" (also "4,3,16,32,32") into dims. Every dim must be a positive integer
 * below 2^31 and there must be exactly `want` of them. Returns 0, or -1 with a reason in err.
 */
int parse_shape(const char *s, int want, int64_t *dims, char *err, size_t errlen);

/*
 * Parses the shared flags with getopt_long (reentrant: resets optind). `shape_dims` is how many
 * dims --shape must have. Returns 0 to go on, 1 if --help was printed, -1 on a bad flag or value
 * (the reason is in err; the caller prints it with the usage and exits EXIT_USAGE).
 */
int cli_parse(int argc, char **argv, int shape_dims, cli_args *a, char *err, size_t errlen);

/* cli_parse, then: --help prints the usage with `extra` and exits 0; a bad flag or value prints
 * "error: <reason>" and the usage on stderr and exits EXIT_USAGE. Returns only on success. */
void cli_parse_or_exit(int argc, char **argv, int shape_dims, cli_args *a, const char *extra);

/* After cli_parse_or_exit: the shape to run (--shape, or the chapter's default already in
 * dims[0..ndims)) must be accepted by `problem`, which returns NULL or the reason it is
 * impossible. Exits EXIT_USAGE with one line on stderr otherwise; on success dims holds it. */
void cli_shape_or_exit(const cli_args *a, int ndims, int64_t *dims,
                       const char *(*problem)(const int64_t *dims));
/* Prints the shared usage, --shape's layout by shape_dims (4: NxCxHxW, 5: NxCxDxHxW); `extra` is
 * the chapter's own text (shape meaning, dump file names). */
void cli_usage(FILE *f, const char *prog, int shape_dims, const char *extra);

/* ------------------------------------------------------------------ report */

/* What the table header and every CSV row say about the run. */
typedef struct {
    const char *gpu;      /* short tag: "h100" */
    const char *gpu_name; /* full device name */
    const char *chapter;  /* "01" */
    const char *shape;    /* "128x3x16x32x32", the model input */
    double ceiling_gbps;  /* measured device-to-device copy, bytes read + written per second / 1e9 */
    double peak_tflops;   /* fp32 FMA peak: SMs x fp32 lanes x 2 x boost clock */
    int sm_count;         /* multiprocessors */
    double l2_mb;         /* L2 cache, MB */
} report_ctx;

typedef struct {
    const char *version; /* "v1", "eager", ... */
    const char *name;    /* one line */
    const char *scope;   /* epilogue_fwd | model_fwd | epilogue_fwdbwd | train_step | stats */
    timing t;
    double bytes; /* every byte the scope must move: inputs read once, outputs written once */
    double flops; /* the arithmetic it must do (the convolution's 2 x MACs); 0 = bytes bound it */
    /* the arithmetic's precision, the CSV's `precision` column: "fp32", "tf32" or "3xtf32" for
     * ours (harness.h's hx_precision), "fp32" or "default" for PyTorch's; NULL is written "fp32" */
    const char *precision;
} report_row;

/* The roofline floor of a row, ms: max(bytes / copy ceiling, flops / fp32 peak) */
double report_floor_ms(const report_ctx *c, const report_row *r);
/* Table header: GPU, SMs, L2, ceiling, fp32 peak, shape, column names. */
void report_header(FILE *f, const report_ctx *c);
/* One row: version, name, scope, median [min-max] ms, GB/s over the full byte count, % of the
 * copy ceiling, TFLOP/s (where the scope has FLOPs), % of the floor (floor / median). */
void report_print(FILE *f, const report_ctx *c, const report_row *r);
/* The CSV header line report_csv writes (no newline). */
extern const char *const report_csv_header;
/*
 * Writes rows to a CSV file: rows already there with the same gpu, chapter, shape, version,
 * precision and scope are replaced, every other row is kept in its place, new ones go at the end
 * (a file with another header is started anew). Columns: gpu,chapter,version,name,precision,
 * scope,shape,median_ms,min_ms,max_ms,bytes,gbps,ceiling_gbps,pct_ceiling,flops,tflops,
 * peak_tflops,floor_ms,pct_floor,reps,date. Commas and quotes in a name become ';' so every row
 * splits on commas. Returns 0, or -1 with a message on stderr.
 */
int report_csv(const char *path, const report_ctx *c, const report_row *rows, int n);

/* --------------------------------------------------------------- gradcheck */

/* A scalar loss of n double inputs; ctx carries whatever else it needs. */
typedef double (*loss_fn)(const double *x, void *ctx);

/*
 * Central differences: g_i = (L(x + h e_i) - L(x - h e_i)) / (2h), truncation error O(h^2)
 * (any numerical-analysis text, e.g. Nocedal & Wright, "Numerical Optimization", 8.1).
 * Compares with the analytic gradient grad[0..n) and returns ||g - grad|| / max(||g||, 1e-30);
 * *max_abs receives max_i |g_i - grad_i| if not NULL. x is perturbed in place and restored.
 * Cost: 2n evaluations of L, so use tiny shapes.
 */
double gradcheck(loss_fn loss, void *ctx, double *x, size_t n, const double *grad, double h,
                 double *max_abs);

#ifdef __cplusplus
}
#endif
#endif
