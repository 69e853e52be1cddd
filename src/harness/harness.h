/* Internal harness shared by the CLI, the tests and the examples: decode cases in
 * the golden case directory format (tests/golden/README.md), synthetic cases,
 * docs/SPEC.md's numerical bar, and running a case through the library on the
 * GPU. Not part of the public API. */
#ifndef MLAJIT_HARNESS_H
#define MLAJIT_HARNESS_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "mlajit.h"

/* One KV cache of a case, in host memory. */
typedef struct mlajit_case_cache {
    uint8_t *bytes;         /* num_pages * page_stride bytes */
    int page_size;
    int64_t num_pages;
    int64_t page_stride;    /* bytes */
    uint16_t *source_bf16;  /* [num_pages, page_size, d_qk] or NULL: the quantizer's input */
} mlajit_case_cache;

/* One decode call with its expected result; every array is host memory, C order,
 * contiguous. Optional arrays are NULL when absent. */
typedef struct mlajit_case {
    mlajit_model model;
    mlajit_layout layout;   /* with model MLAJIT_MODEL_CUSTOM: the cache's layout (else zero) */
    int b, s_q, h_q;
    int topk, extra_topk;   /* extra_topk = 0 without an extra cache */
    double sm_scale;
    uint64_t seed;
    uint16_t *q;            /* bf16 [b, s_q, h_q, d_qk] */
    mlajit_case_cache kv;
    int32_t *indices;       /* [b, s_q, topk] */
    int32_t *topk_length;   /* [b] or NULL */
    float *attn_sink;       /* [h_q] or NULL */
    int has_extra;
    mlajit_case_cache extra_kv;
    int32_t *extra_indices;     /* [b, s_q, extra_topk] */
    int32_t *extra_topk_length; /* [b] or NULL */
    float *expected_out;    /* fp32 [b, s_q, h_q, d_v] or NULL */
    float *expected_lse;    /* fp32 [b, s_q, h_q] or NULL */
    uint16_t *flashmla_out; /* bf16 [b, s_q, h_q, d_v] or NULL */
    float *flashmla_lse;    /* fp32 [b, s_q, h_q] or NULL */
} mlajit_case;

/* Load a case directory (case.json + raw arrays). Every size is checked against
 * the file lengths; a bad file gives MLAJIT_ERR_IO or MLAJIT_ERR_CORRUPT with a
 * message naming the file and what was wrong, never a crash. */
int mlajit_case_load(const char *dir, mlajit_case *c);

/* Write a case directory in the same format (creates dir). */
int mlajit_case_save(const char *dir, const mlajit_case *c);

void mlajit_case_free(mlajit_case *c);

/* The descriptor of a case's (or synthetic parameters') layout: its model's, or
 * its custom layout's; NULL when neither is valid. */
const mlajit_model_desc *mlajit_case_desc(const mlajit_case *c);
struct mlajit_synth_params;
const mlajit_model_desc *mlajit_synth_desc(const struct mlajit_synth_params *p);

/* The spec (arch left ""), shape and host-pointer args that describe a case. */
void mlajit_case_spec(const mlajit_case *c, mlajit_kernel_spec *spec);
void mlajit_case_shape(const mlajit_case *c, mlajit_decode_shape *shape);
void mlajit_case_host_args(const mlajit_case *c, mlajit_decode_args *args);

/* The CPU reference over the first `batch` batch rows of a case (0..c->b),
 * rounded to float: *out [batch, s_q, h_q, d_v] and *lse [batch, s_q, h_q],
 * malloc'd (free them). */
int mlajit_case_reference(const mlajit_case *c, int batch, float **out, float **lse);

/* Fill expected_out / expected_lse from the CPU reference (allocating them). */
int mlajit_case_compute_expected(mlajit_case *c);

/* ---- synthetic cases ------------------------------------------------------ */

typedef struct mlajit_synth_params {
    mlajit_model model;
    mlajit_layout layout;       /* with model MLAJIT_MODEL_CUSTOM: the layout (else zero) */
    int b, s_q, h_q;
    int topk, extra_topk;       /* extra_topk > 0 turns the extra cache on */
    int page_size, extra_page_size;
    int seqlen, extra_seqlen;   /* tokens per sequence in each cache */
    int64_t page_stride_pad;    /* extra bytes per page (multiple of 16) */
    int with_sink, with_topk_length, with_extra_topk_length;
    double invalid_fraction;    /* share of indices set to -1 or out of range */
    uint64_t seed;
} mlajit_synth_params;

/* Make a case by BENCH.md's recipe: b sequences of seqlen tokens on pages from a
 * random block table, topk distinct random positions per (row, query token), K =
 * normal(0,1)/10 clamped to [-1, 1] quantized per SPEC.md, q normal clamped to
 * [-1, 1], sm_scale = d_qk^-0.55. Unreferenced slots are poisoned with 0xFF.
 * expected_* are left NULL (see mlajit_case_compute_expected). */
int mlajit_case_synthesize(const mlajit_synth_params *p, mlajit_case *c);

/* ---- the SPEC.md numerical bar -------------------------------------------- */

typedef struct mlajit_compare_result {
    double out_max_abs_err;
    double out_cosine;
    int64_t out_violations;  /* elements outside 1e-3 + 2^-7 |ref| (NaN counts) */
    double lse_max_abs_err;  /* over finite pairs */
    int64_t lse_violations;  /* outside 1e-5 + 1.2e-4 |ref|, infinities misplaced, or NaN */
    int pass;
} mlajit_compare_result;

/* Compare out (n_out values, given as float) and lse (n_lse) with the reference. */
void mlajit_compare(const float *out, const float *ref_out, size_t n_out,
                    const float *lse, const float *ref_lse, size_t n_lse,
                    mlajit_compare_result *r);

/* bf16 <-> float helpers. */
float mlajit_bf16_to_float(uint16_t v);
uint16_t mlajit_float_to_bf16(float f); /* round to nearest even */

/* ---- running through the library on the GPU ------------------------------- */

typedef struct mlajit_gpu_result {
    float *out;   /* [b, s_q, h_q, d_v] converted from bf16, malloc'd */
    float *lse;   /* [b, s_q, h_q], malloc'd */
    mlajit_kernel_report report;
    int num_splits;
} mlajit_gpu_result;

/* Variations of how a case is run (zero = the defaults). */
typedef struct mlajit_gpu_run_options {
    const char *arch;     /* spec.arch override ("" / NULL: the device's) */
    int tile;             /* spec.tile override (0: generator's choice) */
    int heads_per_cta;    /* spec.heads_per_cta override */
    mlajit_variant variant; /* spec.variant override (0: auto) */
    int num_splits;       /* shape.num_splits (0: planner's choice) */
    int lse_head_major;   /* lse laid out [b, h_q, s_q] (FlashMLA's order) via strides */
    int pad_strides;      /* q, out and indices with padded row strides */
} mlajit_gpu_run_options;

/* The spec a GPU run of the case plans: the case's, with opts' overrides (opts
 * may be NULL). */
void mlajit_gpu_run_spec(const mlajit_case *c, const mlajit_gpu_run_options *opts, mlajit_kernel_spec *spec);

/* Upload a case, plan, decode, download. out and lse are poisoned with NaN
 * first, so an element the kernel did not write fails the comparison.
 * MLAJIT_ERR_NO_DEVICE without a GPU. opts may be NULL. */
int mlajit_case_run_gpu(mlajit_context *ctx, const mlajit_case *c, const mlajit_gpu_run_options *opts,
                        mlajit_gpu_result *res);
void mlajit_gpu_result_free(mlajit_gpu_result *res);

/* A case's inputs on the device, with decode args pointing at them (out and lse
 * poisoned with NaN; workspace not set). Used by run_gpu and the benchmark. */
typedef struct mlajit_device_case {
    mlajit_context *ctx;
    unsigned long long ptrs[16];
    int count;
    int out_row;           /* out row stride in elements */
    mlajit_decode_args args;
} mlajit_device_case;

int mlajit_device_case_upload(mlajit_context *ctx, const mlajit_case *c, const mlajit_gpu_run_options *opts,
                              mlajit_device_case *dc);
/* Device memory of bytes (freed with the case); *ptr NULL on failure. */
int mlajit_device_case_alloc(mlajit_device_case *dc, size_t bytes, void **ptr);
/* Copy [rows, h_q, d_v] of out (first n_rows batch*s_q rows) and lse back as floats. */
int mlajit_device_case_download(mlajit_device_case *dc, const mlajit_case *c, const mlajit_gpu_run_options *opts,
                                size_t n_rows, float *out, float *lse);
void mlajit_device_case_free(mlajit_device_case *dc);

/* ---- GPU time by docs/BENCH.md's protocol (timing.c) ------------------------ */

/* Time plan by CUDA-graph replay: capture `calls` calls, call i with
 * args[i % n_args] (each captured call may read its own fresh indices, so
 * replays read the caches from HBM, not L2), replay the graph once untimed, then
 * `replays` times, each between two events; *us = the median replay / calls.
 * stream NULL: a stream of its own. Planning and the workspace (in each args)
 * are the caller's. BENCH.md's figure is calls 10, replays 20. */
int mlajit_time_plan_graph(mlajit_context *ctx, const mlajit_plan *plan, const mlajit_decode_args *args, int n_args,
                           int calls, int replays, void *stream, double *us);

/* The same in steps, so one capture serves several timings (the tuner's short
 * look, then its full one): create captures and instantiates the graph and
 * replays it once untimed; each time call replays it `replays` times, *us the
 * median replay / calls; free releases it (NULL is fine). */
typedef struct mlajit_graph_timer mlajit_graph_timer;
int mlajit_graph_timer_create(mlajit_context *ctx, const mlajit_plan *plan, const mlajit_decode_args *args,
                              int n_args, int calls, void *stream, mlajit_graph_timer **out);
int mlajit_graph_timer_time(mlajit_graph_timer *t, int replays, double *us);
void mlajit_graph_timer_free(mlajit_graph_timer *t);

/* ---- work and the H200's ceilings (work.c) ----------------------------------- */

/* docs/BENCH.md's measured H200 ceilings: the HBM device-to-device copy and
 * cuBLAS's dense bf16 product (the kernels' products are bf16). */
#define MLAJIT_H200_HBM_BYTES_PER_S 4.25e12
#define MLAJIT_H200_BF16_FLOPS 786e12

/* One decode call's work from its layout's descriptor. */
typedef struct mlajit_work {
    double flop;      /* BENCH.md: 2 h_q b s_q (topk + extra_topk) (d_qk + d_v) */
    double kv_bytes;  /* BENCH.md's bytes: b s_q (topk + extra_topk) bytes_per_token (row and footer gathered) */
    double q_bytes;   /* q read once: b s_q h_q d_qk, bf16 */
    double out_bytes; /* out (bf16, d_v wide) and lse (fp32) written: b s_q h_q (2 d_v + 4) */
} mlajit_work;
int mlajit_work_count(const mlajit_model_desc *m, int h_q, int b, int s_q, int topk, int extra_topk, mlajit_work *w);
/* kv + q + out: every byte the call must move at least once */
double mlajit_work_bytes(const mlajit_work *w);
/* The least time the ceilings allow for flop and bytes (µs): the larger of the
 * compute and the memory time; *memory_bound (may be NULL) says which. A
 * measured time's fraction of the ceiling is this over the measured time. */
double mlajit_ceiling_us(double flop, double bytes, int *memory_bound);

/* ---- the tuner (tune.c) ------------------------------------------------------- */

/* The buckets to tune: models x feature sets x page sizes x extra topks x heads
 * x topk buckets x row buckets. topk and rows are the buckets' lower edges
 * (each rounded down to a power of two), timed at b = rows, s_q = 1. A spec or
 * shape outside the envelope (a model without an extra cache given an extra
 * topk, say) is left out. */
typedef struct mlajit_tune_envelope {
    const mlajit_model *models;   int num_models;
    const int *heads;             int num_heads;
    const int *pages;             int num_pages;
    const unsigned *feature_sets; int num_feature_sets; /* NULL / 0: {no features} */
    const int *topks;             int num_topks;
    const int *rows;              int num_rows;
    const int *extra_topks;       int num_extra_topks;  /* NULL / 0: {0}: no extra cache */
    int extra_page_size;                                /* with an extra topk; 0: 64 */
    const mlajit_layout *layouts; int num_layouts;      /* custom layouts: the model axis after the models (a
                                                         * layout equal to a named model's tunes as that model) */
} mlajit_tune_envelope;

/* The production grid of issue 47 for each list of env left empty (count 0):
 * models V3.2 and DSV4 (none where env has layouts), heads 8, 16, 32, 64, 128, pages 64 and 256, topk
 * buckets 128..2048 and row buckets 1..4096 (powers of two); features and extra
 * topks stay empty (none). The lists are static. */
void mlajit_tune_envelope_defaults(mlajit_tune_envelope *env);

/* One candidate of a bucket: a kernel (forced through the spec's variant, tile
 * and heads per CTA) and a split count (forced through the shape's num_splits;
 * 0: the planner's own), told apart from the others by its effective grid. */
typedef struct mlajit_tune_candidate {
    mlajit_kernel_spec spec;  /* what is planned: the asked auto spec for the rules' choice, else the kernel forced */
    char kernel[128];         /* the resolved kernel's canonical string */
    int num_splits;           /* shape.num_splits; 0: the planner's own */
    int grid_splits, head_groups, tiles_per_split; /* the effective grid (mlajit_plan_describe) */
    int is_rules;             /* the rules' own choice (auto, planner's splits) */
} mlajit_tune_candidate;

#define MLAJIT_TUNE_MAX_CANDIDATES 64

/* The candidates of a bucket of spec `asked` (auto, arch set) at `shape` on
 * sm_count SMs: first the rules' own choice, then each kernel among it and
 * every walk alternative the spec resolver offers, at the planner's own split
 * count and 1, 2, 4, ... up to the kernel's tiles and MLAJIT_MAX_SPLITS, where
 * the shape is valid for it (a kernel that never splits gets none), dropping
 * any whose (kernel, effective grid) an earlier one has. */
int mlajit_tune_candidates(const mlajit_kernel_spec *asked, const mlajit_decode_shape *shape, int sm_count,
                           mlajit_tune_candidate *out, int max, int *count);

/* The split ladder of one kernel within a bucket: its counts are timed in
 * rising order until one is slower than the count before it by more than 3%
 * (the turn); the larger counts are then skipped (the tuner's "pruned"). */
typedef struct mlajit_tune_ladder {
    char kernel[128]; /* the kernel whose counts are being climbed */
    double last_us;   /* the time of its last count */
    int turned;       /* 1: past the turn */
} mlajit_tune_ladder;
/* 1 when c is a split count of the ladder's kernel past its turn. */
int mlajit_tune_ladder_skips(const mlajit_tune_ladder *l, const mlajit_tune_candidate *c);
/* Record c's time us (candidates off the ladder, the rules' and the planner's
 * own count, are ignored; another kernel starts a new ladder). */
void mlajit_tune_ladder_note(mlajit_tune_ladder *l, const mlajit_tune_candidate *c, double us);

/* A bucket's winner among the candidates timed in full (full_us[i] >= 0; -1:
 * not timed in full): the fastest that passes check (asked once per candidate
 * in the order of their times), then the rules' candidate (rules_ci, -1: none)
 * instead where it is within 1% of that one and passes its check. tuned_us is
 * the winner's time, what the record gives at the bucket; best_us the fastest
 * candidate that passed; runner_up_us the next time after the fastest passing
 * one (after the winner's, where the rules took it: the fastest's). */
typedef int (*mlajit_tune_check_fn)(void *user, int candidate, int *pass);
typedef struct mlajit_tune_settled {
    int winner; /* -1: none passed */
    double tuned_us, best_us, runner_up_us;
} mlajit_tune_settled;
int mlajit_tune_settle(const double *full_us, int n, int rules_ci, mlajit_tune_check_fn check, void *user,
                       mlajit_tune_settled *out);

typedef struct mlajit_tune_options {
    double seconds;     /* the budget: no candidate starts after it (0: none does) */
    int dry_run;        /* list buckets and candidates on `list`; no device needed */
    int skip_check;     /* testing only: take winners without the reference check */
    int64_t pool_bytes; /* the timing cache pool before its copies; 0: 24 MiB */
    int64_t spread_bytes; /* the pool copied over this much device memory, for rows
                           * to read their own sequences; 0: 4 GiB (at least one copy) */
    int replays;        /* the most timed replays per candidate (fewer where 40 ms of GPU time is
                         * reached first, 5 at least); 0: 20 (BENCH.md) */
    int sm_count;       /* dry run: 0 = the device's, else MLAJIT_DEFAULT_SM_COUNT */
    FILE *list;         /* the dry run's listing; NULL: stdout */
    FILE *progress;     /* progress lines; NULL: none, or the log's info level with log_progress */
    int log_progress;   /* progress lines to the log (mlajit_info) when progress is NULL */
    FILE *json;         /* one JSON line per bucket stored; NULL: none */
    const char *commit; /* for the JSON lines; NULL: "unknown" */
} mlajit_tune_options;

typedef struct mlajit_tune_summary {
    int buckets;         /* in the envelope */
    int buckets_done;    /* tuned to the end (stored or every candidate failed) */
    int stored;          /* tactic records written */
    int candidates;      /* over every bucket (the dry run's count) */
    int timed, dropped;  /* candidates timed; dropped early (> 1.2x the best so far) */
    int pruned;          /* split counts past their kernel's turn (slower than the count before), not timed */
    int compiled;        /* kernels acquired up front in parallel (compiled, or loaded from the cache) */
    int failed_checks;   /* (kernel, splits) pairs that failed the reference check */
    int deadline_hit;    /* 1: the budget ran out before the last bucket */
    double seconds;      /* wall time, and where it went (seconds): */
    double s_acquire;    /*   compiling or loading the kernels up front */
    double s_pools;      /*   building the cache pools */
    double s_inputs;     /*   drawing and uploading each bucket's indices and q */
    double s_captures;   /*   plans, captures, instantiation and the untimed replay */
    double s_replays;    /*   timed replays */
    double s_checks;     /*   reference checks */
} mlajit_tune_summary;

/* Tune every bucket of env: time each candidate by mlajit_time_plan_graph on
 * caches in HBM with fresh random indices for each captured call, drop one
 * slower than 1.2x the best so far after a short timing, check a candidate
 * against the fp64 reference once (per kernel and split count) before it may
 * win, and store each bucket's winner with mlajit_tactic_store. ctx may be NULL
 * for a dry run. MLAJIT_OK when it ran to the end or to the budget (summary
 * says which); an error stops it. */
int mlajit_tune_run(mlajit_context *ctx, const mlajit_tune_envelope *env, const mlajit_tune_options *opts,
                mlajit_tune_summary *summary);

/* How a plan chose (outline.tactic), as bench's and the sweep's JSON lines say
 * it: "rules", "tuned" or "tuned-below". */
const char *mlajit_tactic_source_name(int tactic);

/* ---- the sweep (tune.c): the tuner checked against every candidate ------------ */

/* One shape of the sweep: the spec as asked (auto, arch set) and the call. */
typedef struct mlajit_sweep_shape {
    mlajit_kernel_spec spec;
    mlajit_decode_shape shape;
} mlajit_sweep_shape;

/* One line "model=v32 h_q=16 page=64 b=128 s_q=1 topk=2048 [extra_topk=N
 * extra_page=N] [features=sink+topk-length]" (s_q 1, no extra cache and no
 * features when left out; model may be a layout: its canonical string, as
 * format writes it, or inline keys) into *out, arch set; the key or value at fault is
 * named, and a shape outside the envelope is refused with the envelope's reason. */
int mlajit_sweep_shape_parse(const char *line, const char *arch, mlajit_sweep_shape *out);
/* The same format back: parse(format(x)) gives x. */
int mlajit_sweep_shape_format(const mlajit_sweep_shape *s, char *buf, size_t len);
/* Shape i of the off-grid draw of seed: odd heads 1-127, topk 1-8192 (three in
 * four ragged), pages 1-256, s_q 1-4, rows (b x s_q) 1-32768 log-uniform with
 * rows x (topk + extra topk) at most 2^22; one in four DSV4 with the sink and an
 * extra cache of pages of 64 (extra topk 1-1024); each inside the envelope. */
void mlajit_sweep_draw(uint64_t seed, int i, const char *arch, mlajit_sweep_shape *out);

typedef struct mlajit_sweep_options {
    mlajit_tune_options tune; /* the tuning step's options; its seconds bound the whole sweep,
                               * its json gets one line per shape, its progress the lines */
    int tune_first;           /* 1: tune each shape's bucket into the cache first */
    int repeats;              /* the rules', tuned and best plans timed again, interleaved (0: 3; at most 16) */
} mlajit_sweep_options;

typedef struct mlajit_sweep_summary {
    int shapes, done;
    int within_3pct;          /* tuned within 3% of the best */
    int slower_than_rules;    /* tuned slower than the rules by more than the repeats' spread */
    int tuned_failed;         /* tuned plans that failed the fp64 check at their shape */
    double worst_pick_error;  /* the largest tuned / best - 1 */
    mlajit_tune_summary tune; /* the tuning step's */
    double seconds;
} mlajit_sweep_summary;

/* Issue 47's sweep: tune each shape's bucket (tune_first), then per shape time
 * every candidate at the shape itself in full (no early drop, no ladder), take
 * the fastest that passes the reference check as the best, and time the rules'
 * plan (tactics off), the tuned plan (tactics on) and the best `repeats` times
 * more in turn: the medians, and their largest max / min - 1 as the spread; then
 * check the tuned plan's kernel and split count at the shape's topk against the
 * fp64 reference (the tactic as carried there). On the tuner's inputs
 * (docs/tuning.md). */
int mlajit_sweep(mlajit_context *ctx, const mlajit_sweep_shape *shapes, int n, const mlajit_sweep_options *o,
                 mlajit_sweep_summary *sum);

#endif
