/* Internal harness shared by the CLI, the tests and the examples: decode cases in
 * the golden case directory format (tests/golden/README.md), synthetic cases,
 * docs/SPEC.md's numerical bar, and running a case through the library on the
 * GPU. Not part of the public API. */
#ifndef MLAJIT_HARNESS_H
#define MLAJIT_HARNESS_H

#include <stddef.h>
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

#endif
