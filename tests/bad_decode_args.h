/* The bad mlajit_decode arguments, one row each: a mutation of valid arguments
 * and the words the message must hold. Shared by test_api.c (fake pointers, no
 * device: validation must refuse) and test_gpu.c (real device buffers: out must
 * stay untouched). Every mutation is relative to the valid arguments, so it means
 * the same thing for fake and real pointers.
 *
 * The valid arguments are for BAD_ARGS_* below: DSV4, 64 heads, pages of 64 with
 * an extra cache of pages of 2, every feature, b 3, s_q 2, topk 128 + 256 extra,
 * 2 splits (so a workspace is needed). */
#ifndef MLAJIT_TESTS_BAD_DECODE_ARGS_H
#define MLAJIT_TESTS_BAD_DECODE_ARGS_H

#include <stdint.h>

#include "mlajit.h"

#define BAD_ARGS_MODEL MLAJIT_MODEL_DSV4
#define BAD_ARGS_HEADS 64
#define BAD_ARGS_PAGE 64
#define BAD_ARGS_EXTRA_PAGE 2
#define BAD_ARGS_BATCH 3
#define BAD_ARGS_SQ 2
#define BAD_ARGS_TOPK 128
#define BAD_ARGS_EXTRA_TOPK 256
#define BAD_ARGS_SPLITS 2
#define BAD_ARGS_DQK 512 /* DSV4's d_qk and d_v */
#define BAD_ARGS_DV 512

/* The spec and shape of the table's plan, at `batch` rows and `splits` splits;
 * mlajit_spec_init's status. */
static inline int bad_args_plan_inputs(int batch, int splits, mlajit_kernel_spec *s, mlajit_decode_shape *shape)
{
    int rc = mlajit_spec_init(s, BAD_ARGS_MODEL, BAD_ARGS_HEADS, BAD_ARGS_PAGE);
    s->extra_page_size = BAD_ARGS_EXTRA_PAGE;
    s->features = MLAJIT_FEATURE_ALL;
    *shape = (mlajit_decode_shape){.struct_size = sizeof *shape,
                                   .batch = batch, .s_q = BAD_ARGS_SQ, .topk = BAD_ARGS_TOPK,
                                   .extra_topk = BAD_ARGS_EXTRA_TOPK, .num_splits = splits};
    return rc;
}

typedef struct bad_decode_arg {
    const char *name; /* the row, for messages */
    const char *word; /* what the message must name */
    void (*mutate)(mlajit_decode_args *);
} bad_decode_arg;

#define SHIFT(ptr, bytes) ((void *)((uintptr_t)(ptr) + (bytes)))

static inline void bad_null_q(mlajit_decode_args *a) { a->q = NULL; }
static inline void bad_misaligned_q(mlajit_decode_args *a) { a->q = SHIFT(a->q, 8); }
static inline void bad_q_stride_small(mlajit_decode_args *a) { a->q_stride_h = BAD_ARGS_DQK / 2; }
static inline void bad_q_stride_odd(mlajit_decode_args *a) { a->q_stride_h = BAD_ARGS_DQK + 1; }
static inline void bad_q_stride_negative(mlajit_decode_args *a) { a->q_stride_s = -8; }
static inline void bad_null_kv(mlajit_decode_args *a) { a->kv.data = NULL; }
static inline void bad_misaligned_kv(mlajit_decode_args *a) { a->kv.data = SHIFT(a->kv.data, 4); }
static inline void bad_kv_stride_small(mlajit_decode_args *a)
{
    a->kv.page_stride = mlajit_min_page_stride(BAD_ARGS_MODEL, BAD_ARGS_PAGE) - 16;
}
static inline void bad_kv_stride_unaligned(mlajit_decode_args *a) { a->kv.page_stride += 8; }
static inline void bad_kv_stride_zero(mlajit_decode_args *a) { a->kv.page_stride = 0; }
static inline void bad_kv_pages_negative(mlajit_decode_args *a) { a->kv.num_pages = -1; }
static inline void bad_kv_pages_huge(mlajit_decode_args *a) { a->kv.num_pages = (int64_t)1 << 40; }
static inline void bad_null_indices(mlajit_decode_args *a) { a->indices = NULL; }
static inline void bad_misaligned_indices(mlajit_decode_args *a) { a->indices = SHIFT(a->indices, 2); }
static inline void bad_indices_stride_small(mlajit_decode_args *a) { a->indices_stride_s = BAD_ARGS_TOPK - 28; }
static inline void bad_indices_stride_negative(mlajit_decode_args *a) { a->indices_stride_b = -1; }
static inline void bad_null_topk_length(mlajit_decode_args *a) { a->topk_length = NULL; }
static inline void bad_misaligned_topk_length(mlajit_decode_args *a) { a->topk_length = SHIFT(a->topk_length, 2); }
static inline void bad_null_sink(mlajit_decode_args *a) { a->attn_sink = NULL; }
static inline void bad_misaligned_sink(mlajit_decode_args *a) { a->attn_sink = SHIFT(a->attn_sink, 1); }
static inline void bad_null_extra_kv(mlajit_decode_args *a) { a->extra_kv.data = NULL; }
static inline void bad_misaligned_extra_kv(mlajit_decode_args *a) { a->extra_kv.data = SHIFT(a->extra_kv.data, 8); }
static inline void bad_extra_stride_small(mlajit_decode_args *a)
{
    a->extra_kv.page_stride = mlajit_min_page_stride(BAD_ARGS_MODEL, BAD_ARGS_EXTRA_PAGE) / 2;
}
static inline void bad_extra_pages_negative(mlajit_decode_args *a) { a->extra_kv.num_pages = -5; }
static inline void bad_null_extra_indices(mlajit_decode_args *a) { a->extra_indices = NULL; }
static inline void bad_extra_indices_stride_small(mlajit_decode_args *a)
{
    a->extra_indices_stride_s = BAD_ARGS_EXTRA_TOPK - 1;
}
static inline void bad_null_extra_length(mlajit_decode_args *a) { a->extra_topk_length = NULL; }
static inline void bad_misaligned_extra_length(mlajit_decode_args *a)
{
    a->extra_topk_length = SHIFT(a->extra_topk_length, 2);
}
static inline void bad_scale_zero(mlajit_decode_args *a) { a->sm_scale = 0.0f; }
static inline void bad_scale_nan(mlajit_decode_args *a) { a->sm_scale = __builtin_nanf(""); }
static inline void bad_scale_inf(mlajit_decode_args *a) { a->sm_scale = __builtin_inff(); }
static inline void bad_scale_negative(mlajit_decode_args *a) { a->sm_scale = -1.0f; }
static inline void bad_null_out(mlajit_decode_args *a) { a->out = NULL; }
static inline void bad_misaligned_out(mlajit_decode_args *a) { a->out = SHIFT(a->out, 2); }
static inline void bad_out_stride_small(mlajit_decode_args *a) { a->out_stride_h = BAD_ARGS_DV - 1; }
static inline void bad_out_stride_negative(mlajit_decode_args *a) { a->out_stride_b = -BAD_ARGS_DV; }
static inline void bad_out_rows_overlap(mlajit_decode_args *a) /* each query token's heads on the next's */
{
    a->out_stride_h = BAD_ARGS_DV;
    a->out_stride_s = BAD_ARGS_DV;
}
static inline void bad_misaligned_lse(mlajit_decode_args *a) { a->lse = SHIFT(a->lse, 1); }
static inline void bad_lse_rows_overlap(mlajit_decode_args *a) /* head-major, with s stepping like h */
{
    a->lse_stride_s = 1;
    a->lse_stride_h = 1;
}
static inline void bad_lse_stride_negative(mlajit_decode_args *a) { a->lse_stride_b = -1; }
static inline void bad_null_workspace(mlajit_decode_args *a) { a->workspace = NULL; }
static inline void bad_workspace_small(mlajit_decode_args *a) { a->workspace_size -= 1; }
static inline void bad_workspace_zero(mlajit_decode_args *a) { a->workspace_size = 0; }
static inline void bad_misaligned_workspace(mlajit_decode_args *a) { a->workspace = SHIFT(a->workspace, 4); }

#define BAD_ROW(fn, word) {#fn, word, bad_##fn}
static const bad_decode_arg bad_decode_args[] = {
    BAD_ROW(null_q, "args.q: NULL"),
    BAD_ROW(misaligned_q, "args.q = "),
    BAD_ROW(q_stride_small, "args.q_stride_h"),
    BAD_ROW(q_stride_odd, "args.q strides"),
    BAD_ROW(q_stride_negative, "args.q strides must be >= 0"),
    BAD_ROW(null_kv, "args.kv.data: NULL"),
    BAD_ROW(misaligned_kv, "args.kv.data"),
    BAD_ROW(kv_stride_small, "args.kv.page_stride"),
    BAD_ROW(kv_stride_unaligned, "args.kv.page_stride"),
    BAD_ROW(kv_stride_zero, "args.kv.page_stride = 0"),
    BAD_ROW(kv_pages_negative, "args.kv.num_pages = -1"),
    BAD_ROW(kv_pages_huge, "args.kv.num_pages"),
    BAD_ROW(null_indices, "args.indices: NULL"),
    BAD_ROW(misaligned_indices, "args.indices is not 4-byte aligned"),
    BAD_ROW(indices_stride_small, "args.indices_stride_s = 100"),
    BAD_ROW(indices_stride_negative, "args.indices"),
    BAD_ROW(null_topk_length, "args.topk_length: NULL"),
    BAD_ROW(misaligned_topk_length, "args.topk_length is not 4-byte aligned"),
    BAD_ROW(null_sink, "args.attn_sink: NULL"),
    BAD_ROW(misaligned_sink, "args.attn_sink is not 4-byte aligned"),
    BAD_ROW(null_extra_kv, "args.extra_kv.data: NULL"),
    BAD_ROW(misaligned_extra_kv, "args.extra_kv.data"),
    BAD_ROW(extra_stride_small, "args.extra_kv.page_stride"),
    BAD_ROW(extra_pages_negative, "args.extra_kv.num_pages = -5"),
    BAD_ROW(null_extra_indices, "args.extra_indices: NULL"),
    BAD_ROW(extra_indices_stride_small, "args.extra_indices_stride_s = 255"),
    BAD_ROW(null_extra_length, "args.extra_topk_length: NULL"),
    BAD_ROW(misaligned_extra_length, "args.extra_topk_length is not 4-byte aligned"),
    BAD_ROW(scale_zero, "args.sm_scale = 0"),
    BAD_ROW(scale_nan, "args.sm_scale = nan"),
    BAD_ROW(scale_inf, "args.sm_scale = inf"),
    BAD_ROW(scale_negative, "args.sm_scale = -1"),
    BAD_ROW(null_out, "args.out: NULL"),
    BAD_ROW(misaligned_out, "args.out = "),
    BAD_ROW(out_stride_small, "args.out_stride_h = 511"),
    BAD_ROW(out_stride_negative, "args.out strides must be >= 0"),
    BAD_ROW(out_rows_overlap, "s 512, h 512) overlap rows"), /* b: the dense step of the shape */
    BAD_ROW(misaligned_lse, "args.lse is not 4-byte aligned"),
    BAD_ROW(lse_rows_overlap, "args.lse strides (b 2, s 1, h 1) overlap rows"),
    BAD_ROW(lse_stride_negative, "args.lse strides must be >= 0"),
    BAD_ROW(null_workspace, "args.workspace"),
    BAD_ROW(workspace_small, "args.workspace"),
    BAD_ROW(workspace_zero, "args.workspace: 0 bytes"),
    BAD_ROW(misaligned_workspace, "args.workspace = "),
};
#undef BAD_ROW
#define BAD_DECODE_ARG_COUNT (sizeof bad_decode_args / sizeof bad_decode_args[0])

#endif
