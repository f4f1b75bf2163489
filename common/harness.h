/*
 * harness.h: the one driver every chapter program runs on (host code, CUDA runtime).
 *
 * A chapter hands hx_main() a description of itself (hx_chapter): its flat table of versions,
 * and the few functions only it can write (make the problem, poison and verify its outputs,
 * count its bytes and FLOPs, its CPU checks, its dump). hx_main() does the rest, the same way
 * in every chapter:
 *
 *   --list           every version, forward (vN) and backward (bN), its scopes and requirements
 *   (no flag)        for each version and scope: poison -> run -> verify -> time (warm-up, L2
 *                    flushed, min/median/max) -> poison -> run -> verify again; the table, the
 *                    chapter's notes, CSV rows (--csv FILE replaces this GPU's rows of the same
 *                    shape, version, precision and scope; every row names its precision), --dump
 *   --version v5     only that version (b2: a backward version)
 *   --test           the chapter's CPU checks, then every version in every scope on the
 *                    chapter's awkward shapes and extreme-value cases, each run twice (outputs
 *                    that must be deterministic compared bit for bit)
 *
 * A version that needs what this GPU or this build lacks (thread-block clusters need sm_90
 * hardware and sm_90 code in the binary; a cuDNN baseline needs a build with cuDNN) is skipped
 * with one line that says why, in the table and in --test. In a build without cuDNN the library
 * conv is common/conv.cu's direct kernels: a timed row that ran them is marked (scope "*" in the
 * table, "[direct conv; no cuDNN]" after the name in the CSV), since it times a slow stand-in.
 *
 * The chapter's own types stay opaque here: `struct problem` (host data, references, device
 * buffers) and `struct run_ctx` (what a launcher reads) are defined by each chapter.
 */
#ifndef HARNESS_H
#define HARNESS_H

#include "conv.h"
#include "conv_ref.h"

/* The scopes a version can be timed in; their names are the CSV's `scope` column. */
enum {
    SCOPE_EPI_FWD,    /* "epilogue_fwd": the epilogue alone, from the conv output c to y */
    SCOPE_MODEL_FWD,  /* "model_fwd": the whole model, from the input x to y */
    SCOPE_EPI_FWDBWD, /* "epilogue_fwdbwd": the epilogue forward and its backward, c -> y, dL/dc */
    SCOPE_TRAIN,      /* "train_step": forward and every gradient (conv weight, bias, input x) */
    SCOPE_STATS,      /* "stats": a normalisation's statistics alone (chapters 3 and 4) */
    N_SCOPES
};
#define SC(s) (1u << (s)) /* a scope's bit in hx_version.scopes */
extern const char *const scope_name[N_SCOPES];

/* What a version needs beyond sm_80 (hx_version.needs). */
enum {
    NEEDS_SM90 = 1,  /* thread-block clusters, distributed shared memory, TMA bulk copies */
    NEEDS_CUDNN = 2, /* a cuDNN baseline (beyond the conv, which has a direct fallback) */
    NEEDS_SM90A = 4, /* Hopper's warpgroup MMA (wgmma): sm_90a code, which only compute
                      * capability 9.0 runs (H100, H200; not Blackwell); with NEEDS_SM90 */
};

typedef struct problem problem; /* each chapter defines struct problem */
typedef struct run_ctx run_ctx; /* and struct run_ctx */

/* One row of a chapter's version table. */
typedef struct {
    const char *id;    /* "v5" (forward) or "b2" (backward): --version takes it */
    unsigned scopes;   /* SC(SCOPE_EPI_FWD) | ...: where it runs */
    const char *title; /* one line, at most 52 characters */
    /* queues the version's kernels for one of its scopes on the default stream */
    void (*launch)(const run_ctx *r, int scope);
    unsigned needs;    /* NEEDS_SM90 | NEEDS_SM90A | NEEDS_CUDNN, or 0 */
    /* The precision of its arithmetic, the CSV's `precision` column (hx_precision_name):
     * HX_FP32 (0, every fp32 version); HX_3XTF32, tensor cores in 3xTF32 (three TF32 products a
     * product, fp32's accuracy: verified at fp32's tolerances, as an fp32 version); HX_TF32, TF32
     * on purpose (tensor cores, a 10-bit mantissa: each operand rounded to 2^-11 of itself, a
     * product to about 2^-10 = 1e-3), to show what that precision costs. A TF32 version's outputs are verified at HX_TF32_TOL times the
     * chapter's tolerances; where they pass only there, the verdict says "over fp32's tolerance"
     * (hx_check_output). Its CSV rows' name also ends in " [TF32]", and the READMEs' summaries of
     * the fastest version (data/readme-table.sh glance) leave it out. */
    int precision;
    /* Its source file in the chapter's folder ("02-v2-fused-epilogue.cu"): --list prints it.
     * Ids: v1, v2, ... forward; b1, b2, ... backward; x1, x2, ... exercises (hx_not_written). */
    const char *file;
} hx_version;
#define HX_TF32_TOL 100.0
enum hx_precision { HX_FP32 = 0, HX_TF32 = 1, HX_3XTF32 = 2 };
/* HX_TF32_TOL while the outputs of a TF32 version's run are verified (hx_chapter.verify), else
 * 1: for a chapter whose references or bounds depend on the run's precision (chapter 2's TF32
 * training step: its dc is checked against the backward of its own TF32 conv) */
double hx_tol_factor(void);
/* For a chapter that bounds a TF32 version's outputs itself (chapter 5: within twice the error
 * of a TF32 conv on the same tensors): its verify reads hx_tol_factor() first, then calls this,
 * and its checks that follow are not repeated at HX_TF32_TOL (until the next verification) */
void hx_tf32_own_bounds(void);
/* "fp32", "tf32" or "3xtf32": the CSV's precision column of a version's rows */
const char *hx_precision_name(int precision);

/* What a verification of one run found. */
typedef struct {
    int pass;           /* every output within its tolerance, none NaN where the reference is not */
    int deterministic;  /* the outputs hashed below must be the same bits in every run */
    uint64_t hash;      /* hash_f32 of those outputs */
    char detail[320];   /* "y rel_l2 1.2e-07 max_abs 3.0e-07, dc ..." */
} hx_verdict;

/* Appends "<name> rel_l2 .. max_abs .." (and " FAILED" when !v->pass) to out->detail and folds
 * v->pass into out->pass. */
void hx_verdict_add(hx_verdict *out, const char *name, const verify_result *v);

/* How hx_check_output bounds an output's error (common.h's verify functions):
 *   HX_ABS      verify_f32: relative L2 <= tol_rel and every |error| <= tol
 *   HX_SCALED   verify_f32_scaled: the same, tol scaled by max(1, max |ref|)
 *   HX_SUM      verify_sum_f32: every |error| <= tol x the sum of its terms' magnitudes (abs_sum)
 *   HX_ROWS     verify_rows_f32: each row by its own scale (hx_check_pieces only, which has the
 *               row length) */
typedef enum { HX_ABS, HX_SCALED, HX_SUM, HX_ROWS } hx_bound;

/* One output of a run, checked: copies n floats from the device to host, compares them with the
 * double reference under `bound`, and adds the result to out under name. While a TF32 version
 * (hx_version.precision HX_TF32) is verified, an output over the tolerances is checked again at
 * HX_TF32_TOL times them and, if it passes there, added as passed with "over fp32's tolerance". */
verify_result hx_check_output(hx_verdict *out, const char *name, const float *dev, float *host,
                              size_t n, const double *ref, hx_bound bound, const double *abs_sum,
                              double tol_rel, double tol);

/* A training step's conv gradients, checked (hx_check_output) against ref, conv_ref.h's
 * references from the same run's dc: dw and dbias element by element within tol_sum of their
 * terms' magnitudes plus the largest (HX_SUM); dx under dx_bound: HX_SUM within tol_sum of
 * ref->dx_abs, or HX_ABS / HX_SCALED with tol_rel and tol. dev: the run's dx, dw and dbias on the
 * device; host: room for their copies (ref->n_x, n_w, n_bias floats). Adds "dx", "dw", "dbias". */
void hx_check_conv_grads(hx_verdict *out, const float *const dev[3], float *const host[3],
                         const conv_grads *ref, hx_bound dx_bound, double tol_rel, double tol,
                         double tol_sum);

/* The reference of one piece of an output that hx_check_pieces streams: fills ref[0, n) with
 * the reference of the output's elements [first, first + n) and, for HX_SUM, abs_sum[0, n) with
 * their terms' magnitudes (else abs_sum is NULL); out[0, n) holds the run's values there. Called
 * for each piece in order; a second time for each, in order, when a TF32 version's check is
 * repeated at HX_TF32_TOL times the tolerances. */
typedef void (*hx_piece_ref)(void *ctx, size_t first, size_t n, const float *out, double *ref,
                             double *abs_sum);

/* hx_check_output for an output too large to copy back whole beside a whole double reference
 * (268 M floats are 1.07 GB, their reference 2.15 GB): copies the n floats at dev back `piece`
 * at a time (the last piece shorter; for HX_ROWS a multiple of row_len, the row length, else
 * row_len is 0), has fn compute each piece's reference, and feeds both to a verify_stream
 * (common.h), whose verdict is the whole-array check's, bit for bit. hash, if not NULL: extended
 * by hash_f32 of each piece in order (a fingerprint of the output's bits for this piece size,
 * for comparing two runs). Host memory: piece floats and piece doubles (HX_SUM: twice that),
 * kept for the next call. */
verify_result hx_check_pieces(hx_verdict *out, const char *name, const float *dev, size_t n,
                              size_t piece, size_t row_len, hx_bound bound, double tol_rel,
                              double tol, hx_piece_ref fn, void *ctx, uint64_t *hash);

/* A normalisation's saved statistics, checked (chapters 3 and 4): copies n means and n rstds
 * from the device into host (2n floats, the means first) and compares them with ref (double,
 * the same layout): each mean within tol of |mean| + 1 / rstd (the mean plus a standard
 * deviation: its scale), each rstd within tol of itself (verify_sum_f32 with those scales, 2n
 * doubles of room in scale). Adds the result to out as "mean,rstd". */
verify_result hx_check_stats(hx_verdict *out, const float *mean, const float *rstd, float *host,
                             double *scale, size_t n, const double *ref, double tol);
/* The shape checks every chapter's shape_problem starts from; each returns NULL or the reason.
 * hx_channels_problem: dims[1] must be the model's c_in. hx_index_problem: a tensor of `elems`
 * elements must be indexable with 32-bit ints, as the chapters' kernels do. */
const char *hx_channels_problem(const int64_t *dims, int c_in);
const char *hx_index_problem(double elems, const char *what);
/* NULL if code that needs `needs` (NEEDS_SM90, NEEDS_SM90A, NEEDS_CUDNN) runs on this GPU and
 * build, else the one line that says why not, as the version table's skips say it: for a
 * chapter's checks that call such code outside a version (device 0 must exist) */
const char *hx_needs_problem(unsigned needs);

/* A chapter's extreme-value case (hx_chapter.cases): what it is, where it applies. */
typedef struct {
    const char *label; /* "x*1000", "c ~ +100", ...; NULL ends the list */
    unsigned scopes;   /* the scopes the case is meaningful for (a planted c: epilogue scopes) */
    const char *versions; /* NULL: every version; else the ids it runs, space-separated */
} hx_case;

typedef struct {
    const char *number;   /* "02" */
    const char *title;    /* "Conv3d -> MaxPool3d -> LogSumExp -> ReLU (KernelBench level 2 #43)" */
    const char *help;     /* the chapter's part of --help: shape meaning, limits, dump files */
    int shape_dims;       /* dims of --shape */
    int64_t default_shape[CLI_MAX_DIMS]; /* the KernelBench shape */
    const hx_version *versions;
    int n_versions;

    /* NULL, or why dims is not a shape of this model ("C must be 32") */
    const char *(*shape_problem)(const int64_t *dims);
    /* Allocates and initialises everything for this shape and seed (inputs, parameters, device
     * buffers, the forward references); exits with a clear message on failure. */
    problem *(*create)(const int64_t *dims, uint64_t seed, const device_info *dev);
    void (*destroy)(problem *pb);
    const run_ctx *(*ctx)(const problem *pb);
    /* Fills with NaN every output the scope writes (gpu_poison). */
    void (*poison)(problem *pb, int scope);
    /* After a run of `scope`: copies every output back and compares it with the reference. */
    hx_verdict (*verify)(problem *pb, int scope);
    /* Per scope, the bytes it must move at the least (inputs read once, outputs written once)
     * and the FLOPs it must do (left 0 where bytes bound it): the floor is max(bytes / ceiling,
     * FLOPs / peak). Both arrays come zeroed. */
    void (*counts)(const problem *pb, double bytes[N_SCOPES], double flops[N_SCOPES]);

    /* --test: CPU checks (references against derivations, finite differences, golden tensors) */
    void (*cpu_checks)(uint64_t seed);
    /* --test on a GPU: the awkward shapes (as --shape would give them) */
    const int64_t (*test_shapes)[CLI_MAX_DIMS];
    int n_test_shapes;
    /* Checks of one shape's problem that are not a version's (the library conv against the
     * reference, say); NULL if none. t: the index in test_shapes under --test (0 with --shape),
     * -1 before a timed run (where a failure stops the program). */
    void (*shape_checks)(problem *pb, int t);
    /* Extreme-value cases, run after "rand" (the problem as created) on every test shape (or on
     * the --shape given): the list, ended by a NULL label, and the function that sets case k up
     * on a problem (cases[k]). set_case(k) must work from any earlier state: a skipped case
     * means case k need not follow case k - 1. NULL cases: none. */
    const hx_case *cases;
    void (*set_case)(problem *pb, int k);
    /* May be NULL: every case runs on every shape. Otherwise it returns NULL where case k runs on
     * a shape (dims as --shape gives them), or why it does not, reported as a skip: where float's
     * own rounding, in PyTorch's order of operations, exceeds the chapter's bound there (the
     * chapter says why, with the numbers). */
    const char *(*case_skip)(const int64_t *dims, int k);

    /* After the timing table: the chapter's own lines (library ops alone, floors); may be NULL */
    void (*notes)(problem *pb, const device_info *dev, int reps, const char *only);
    /* --dump DIR: id NULL once for the inputs and parameters, then once per version after a
     * verified run of `scope` (the last one the version has) */
    void (*dump)(problem *pb, const char *dir, const char *id, int scope);
} hx_chapter;

/* The library conv's ops alone, for hx_conv_ops: the buffers of the op as PyTorch names it. For a
 * Conv3d/Conv2d, in = x, out = y = conv(x, w) + bias, dout = dy, din = dx; for a ConvTranspose3d
 * set up as the conv it transposes (conv.h's transposed view), in is the transposed conv's input
 * and out its output, dout = d out and din = d in. bias has the op's output channels. */
typedef struct {
    int transposed; /* 1: the ops of conv.h's transposed view */
    const float *in, *w, *bias, *dout;
    float *out, *din, *dw, *dbias;
    double flops;   /* the conv's FLOPs (each of the forward, dx and dw does as many) */
} hx_conv_bufs;

/* For a chapter's notes: times the library conv's forward (with bias) and, when the run has a
 * version with a backward scope (every version, or --version of a backward one), its data,
 * weight and bias gradients, each alone (gpu_time: warm-up, L2 flushed, median of reps), and
 * prints them as a table beside PyTorch eager's time for the same op and shape: in fp32 (TF32
 * off, the precision ours runs in; the ratio ours / PyTorch is against it) and in PyTorch's
 * default precision (cudnn.allow_tf32 on), the rows `python3 data/pytorch_peer.py ops` (make
 * peers CH=N) wrote to pytorch-chNN-ops.csv in this GPU's data folder (data/<gpu>-mine/, then
 * data/<gpu>/), "-" where none matches this GPU, chapter, shape and precision. Overwrites out,
 * din, dw and dbias. In a build without cuDNN it prints one line saying so (the direct kernels
 * are a stand-in, too slow to time at a KernelBench shape). ms, if not NULL: the medians of
 * forward, dx, dw, dbias in milliseconds, -1 for an op not timed, so that a chapter's own tables
 * quote these rather than time the op again. Returns 1 when the run has a backward scope (the
 * gradients were timed, or would have been with cuDNN), else 0. */
int hx_conv_ops(const lib_conv3d *cc, const hx_conv_bufs *b, const device_info *dev, int reps,
                double ms[4]);

/* An exercise version's launcher (a chapter's x1, x2, ...) starts with
 *     if (hx_not_written("v2")) return;
 * until the learner has written its kernel, and deletes that line then. The call records that
 * the launcher ran nothing and returns 1; the harness then reports the version as
 *     x1  not written yet: see the chapter's exercises (v2 solves it)
 * a skip under --test, a line instead of a row in the timing table, and neither verifies nor
 * times it. solved_by: the id of the version whose file answers the exercise. */
int hx_not_written(const char *solved_by);

/* The whole program: parses the command line and does what it asks. Returns the exit status. */
int hx_main(int argc, char **argv, const hx_chapter *ch);

#endif
