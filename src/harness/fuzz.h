/* Internal: random decode calls over the whole envelope, for `mlajit fuzz` and
 * the tests. A call is a pure function of (run seed, call number), so any call
 * of any run can be drawn again from those two numbers. */
#ifndef MLAJIT_HARNESS_FUZZ_H
#define MLAJIT_HARNESS_FUZZ_H

#include <stdint.h>

#include "harness/harness.h"
#include "mlajit.h"

/* Bounds that keep one call cheap on a shared GPU host and on the CPU. */
#define MLAJIT_FUZZ_MAX_TOKENS 65536       /* slots per cache (b * pages * page size) */
#define MLAJIT_FUZZ_REF_BUDGET 65536       /* b * s_q * h_q * (topk + extra_topk): ~50 ms of reference */
#define MLAJIT_FUZZ_HEAVY_BUDGET (1 << 21) /* one row at h_q 128, topk 16384 */

typedef struct mlajit_fuzz_call {
    uint64_t run_seed;
    int64_t number;            /* the call's number in its run */
    uint64_t seed;             /* the call's own seed: drives the draw and the case data */
    mlajit_kernel_spec spec;   /* model, h_q, pages, features, tile, heads_per_cta; arch "" */
    mlajit_decode_shape shape; /* b, s_q, topk, extra_topk, num_splits */
    mlajit_synth_params synth; /* the case's data (its shape fields match shape) */
    int lse_head_major;        /* lse in FlashMLA's [b, h_q, s_q] order, through strides */
    int pad_strides;           /* q, out and indices rows padded */
    int zero_length_rows;      /* percent of rows whose topk_length / extra_topk_length become 0 */
    int huge_length_rows;      /* percent of full-length rows whose length becomes INT32_MAX */
    int duplicate_percent;     /* percent of attended indices replaced by another attended one */
    int heavy;                 /* over MLAJIT_FUZZ_REF_BUDGET (one row, up to the heavy budget) */
    int wide;                  /* many rows or a long s_q: up to MLAJIT_MAX_ROWS within the budget */
} mlajit_fuzz_call;

/* The seed of call number `call` of a run: splitmix64 of both, so neighbouring
 * calls are unrelated and call 0 of seed 1 is not call 1 of seed 0. */
uint64_t mlajit_fuzz_call_seed(uint64_t run_seed, int64_t call);

/* How calls are drawn (mlajit_fuzz_draw's flags). */
enum {
    MLAJIT_FUZZ_ALLOW_HEAVY = 1, /* some calls up to MLAJIT_FUZZ_HEAVY_BUDGET (the GPU runs) */
    MLAJIT_FUZZ_TUNED_GRID = 2,  /* specs of the tuner's production grid (V3.2 / DSV4, heads 8-128,
                                    pages 64 / 256, auto, no features or extra cache), shapes as
                                    ever: plans carry tuned tactics to random shapes */
    MLAJIT_FUZZ_MODEL_SHIFT = 8,  /* flags | model << 8: every call on that model (mlajit fuzz
                                     --model; its calls are not a plain run's with the model set) */
};

/* Draw call number `call` of the run seeded run_seed, with flags. Without
 * MLAJIT_FUZZ_ALLOW_HEAVY every call stays within MLAJIT_FUZZ_REF_BUDGET (the
 * CPU-only and sanitizer runs). */
void mlajit_fuzz_draw(uint64_t run_seed, int64_t call, unsigned flags, mlajit_fuzz_call *out);

/* Build the call's case: synthesize it, then apply the length and duplicate
 * edits (only ones that keep every attended slot quantized, so the unreferenced
 * slots stay NaN and the reference stays defined). expected_* are not filled. */
int mlajit_fuzz_make_case(const mlajit_fuzz_call *call, mlajit_case *c);

/* The run options the call asks for (arch left NULL: the caller's). */
void mlajit_fuzz_run_options(const mlajit_fuzz_call *call, mlajit_gpu_run_options *opts);

/* A one-line description: "v32 h_q 17 page 61 extra 2/133 b 3 s_q 2 topk 200 ...". */
void mlajit_fuzz_describe(const mlajit_fuzz_call *call, char *buf, size_t len);

#endif
