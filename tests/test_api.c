/* The public API's argument checks: each bad argument gets its status and a
 * message naming it, before anything could launch. Runs without a GPU: plans on
 * a context without a device validate everything, then say "no device". */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlajit.h"

static char cache_dir[256];
static mlajit_context *ctx;

static void setup(void)
{
    snprintf(cache_dir, sizeof cache_dir, "/tmp/mlajit-api-XXXXXX");
    cr_assert_not_null(mkdtemp(cache_dir));
    mlajit_context_options o = {.cache_dir = cache_dir, .flags = MLAJIT_CONTEXT_NO_DEVICE};
    cr_assert_eq(mlajit_context_create(&o, &ctx), MLAJIT_OK, "%s", mlajit_last_error());
}

static void teardown(void)
{
    mlajit_context_destroy(ctx);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache_dir);
    cr_expect_eq(system(cmd), 0);
}

TestSuite(api, .init = setup, .fini = teardown, .timeout = 300);

#define FAKE(addr) ((void *)(uintptr_t)(addr)) /* never dereferenced: nothing launches */

static void valid_args(mlajit_decode_args *a)
{
    memset(a, 0, sizeof *a);
    a->q = FAKE(0x100000);
    a->kv = (mlajit_cache_view){FAKE(0x200000), 64 * 584, 10};
    a->indices = FAKE(0x300000);
    a->topk_length = FAKE(0x310000);
    a->attn_sink = FAKE(0x320000);
    a->extra_kv = (mlajit_cache_view){FAKE(0x400000), 2 * 584, 10};
    a->extra_indices = FAKE(0x500000);
    a->extra_topk_length = FAKE(0x510000);
    a->sm_scale = 0.04f;
    a->out = FAKE(0x600000);
    a->lse = FAKE(0x700000);
}

static mlajit_plan *make_plan(int batch, int splits)
{
    mlajit_kernel_spec s;
    cr_assert_eq(mlajit_spec_init(&s, MLAJIT_MODEL_DSV4, 64, 64), MLAJIT_OK);
    s.extra_page_size = 2;
    s.features = MLAJIT_FEATURE_ALL;
    mlajit_decode_shape shape = {.batch = batch, .s_q = 2, .topk = 128, .extra_topk = 256, .num_splits = splits};
    mlajit_plan *p = NULL;
    cr_assert_eq(mlajit_plan_create(ctx, &s, &shape, &p), MLAJIT_OK, "%s", mlajit_last_error());
    return p;
}

/* One row of the bad-argument table: a mutation and the word the message must hold. */
typedef struct bad_arg {
    const char *word;
    void (*mutate)(mlajit_decode_args *);
} bad_arg;

static void null_q(mlajit_decode_args *a) { a->q = NULL; }
static void misaligned_q(mlajit_decode_args *a) { a->q = FAKE(0x100008); }
static void q_stride_small(mlajit_decode_args *a) { a->q_stride_h = 256; }
static void q_stride_odd(mlajit_decode_args *a) { a->q_stride_h = 513; }
static void null_kv(mlajit_decode_args *a) { a->kv.data = NULL; }
static void misaligned_kv(mlajit_decode_args *a) { a->kv.data = FAKE(0x200004); }
static void kv_stride_small(mlajit_decode_args *a) { a->kv.page_stride = 64 * 584 - 16; }
static void kv_stride_unaligned(mlajit_decode_args *a) { a->kv.page_stride = 64 * 584 + 8; }
static void kv_pages_negative(mlajit_decode_args *a) { a->kv.num_pages = -1; }
static void kv_pages_huge(mlajit_decode_args *a) { a->kv.num_pages = (int64_t)1 << 40; }
static void null_indices(mlajit_decode_args *a) { a->indices = NULL; }
static void misaligned_indices(mlajit_decode_args *a) { a->indices = FAKE(0x300002); }
static void indices_stride_small(mlajit_decode_args *a) { a->indices_stride_s = 100; }
static void null_topk_length(mlajit_decode_args *a) { a->topk_length = NULL; }
static void null_sink(mlajit_decode_args *a) { a->attn_sink = NULL; }
static void null_extra_kv(mlajit_decode_args *a) { a->extra_kv.data = NULL; }
static void extra_stride_small(mlajit_decode_args *a) { a->extra_kv.page_stride = 584; }
static void null_extra_indices(mlajit_decode_args *a) { a->extra_indices = NULL; }
static void extra_indices_stride_small(mlajit_decode_args *a) { a->extra_indices_stride_s = 255; }
static void null_extra_length(mlajit_decode_args *a) { a->extra_topk_length = NULL; }
static void scale_zero(mlajit_decode_args *a) { a->sm_scale = 0.0f; }
static void scale_nan(mlajit_decode_args *a) { a->sm_scale = __builtin_nanf(""); }
static void scale_negative(mlajit_decode_args *a) { a->sm_scale = -1.0f; }
static void null_out(mlajit_decode_args *a) { a->out = NULL; }
static void misaligned_out(mlajit_decode_args *a) { a->out = FAKE(0x600002); }
static void out_stride_small(mlajit_decode_args *a) { a->out_stride_h = 511; }
static void out_stride_negative(mlajit_decode_args *a) { a->out_stride_b = -512; }
static void misaligned_lse(mlajit_decode_args *a) { a->lse = FAKE(0x700001); }

static const bad_arg table[] = {
    {"args.q", null_q},
    {"args.q", misaligned_q},
    {"q_stride_h", q_stride_small},
    {"args.q strides", q_stride_odd},
    {"args.kv.data", null_kv},
    {"args.kv.data", misaligned_kv},
    {"args.kv.page_stride", kv_stride_small},
    {"args.kv.page_stride", kv_stride_unaligned},
    {"args.kv.num_pages", kv_pages_negative},
    {"args.kv.num_pages", kv_pages_huge},
    {"args.indices", null_indices},
    {"args.indices", misaligned_indices},
    {"args.indices_stride_s", indices_stride_small},
    {"args.topk_length", null_topk_length},
    {"args.attn_sink", null_sink},
    {"args.extra_kv.data", null_extra_kv},
    {"args.extra_kv.page_stride", extra_stride_small},
    {"args.extra_indices", null_extra_indices},
    {"args.extra_indices_stride_s", extra_indices_stride_small},
    {"args.extra_topk_length", null_extra_length},
    {"args.sm_scale", scale_zero},
    {"args.sm_scale", scale_nan},
    {"args.sm_scale", scale_negative},
    {"args.out", null_out},
    {"args.out", misaligned_out},
    {"args.out_stride_h", out_stride_small},
    {"args.out strides", out_stride_negative},
    {"args.lse", misaligned_lse},
};

Test(api, valid_arguments_pass_validation_and_then_need_a_device)
{
    mlajit_plan *p = make_plan(3, 1);
    mlajit_decode_args a;
    valid_args(&a);
    cr_expect_eq(mlajit_decode(p, &a, NULL), MLAJIT_ERR_NO_DEVICE, "%s", mlajit_last_error());
    cr_expect(strstr(mlajit_last_error(), "GPU") != NULL);
    mlajit_plan_destroy(p);
}

Test(api, each_bad_argument_is_named)
{
    mlajit_plan *p = make_plan(3, 1);
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        mlajit_decode_args a;
        valid_args(&a);
        table[i].mutate(&a);
        int rc = mlajit_decode(p, &a, NULL);
        cr_expect_eq(rc, MLAJIT_ERR_INVALID_ARGUMENT, "row %zu (%s): got %d: %s", i, table[i].word, rc,
                     mlajit_last_error());
        cr_expect(strstr(mlajit_last_error(), table[i].word) != NULL, "row %zu: '%s' should name %s", i,
                  mlajit_last_error(), table[i].word);
    }
    mlajit_plan_destroy(p);
}

Test(api, workspace_too_small)
{
    mlajit_plan *p = make_plan(1, 3); /* 384 candidates = 6 tiles of 64: 2 per split */
    cr_assert_eq(mlajit_plan_num_splits(p), 3);
    size_t ws = mlajit_plan_workspace_size(p);
    cr_assert_gt(ws, 0u);
    mlajit_decode_args a;
    valid_args(&a);
    a.workspace = FAKE(0x800000);
    a.workspace_size = ws - 1;
    cr_expect_eq(mlajit_decode(p, &a, NULL), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "args.workspace") != NULL, "%s", mlajit_last_error());
    a.workspace_size = ws;
    a.workspace = NULL;
    cr_expect_eq(mlajit_decode(p, &a, NULL), MLAJIT_ERR_INVALID_ARGUMENT);
    a.workspace = FAKE(0x800000);
    cr_expect_eq(mlajit_decode(p, &a, NULL), MLAJIT_ERR_NO_DEVICE);
    mlajit_plan_destroy(p);
}

Test(api, plan_shape_checks)
{
    mlajit_kernel_spec s;
    mlajit_spec_init(&s, MLAJIT_MODEL_V32, 16, 64);
    struct { mlajit_decode_shape shape; const char *word; } bad[] = {
        {{.batch = -1, .s_q = 1, .topk = 64}, "batch"},
        {{.batch = 4097, .s_q = 1, .topk = 64}, "batch"},
        {{.batch = 1, .s_q = 17, .topk = 64}, "s_q"},
        {{.batch = 1, .s_q = 1, .topk = 0}, "topk"},
        {{.batch = 1, .s_q = 1, .topk = 16385}, "topk"},
        {{.batch = 1, .s_q = 1, .topk = 64, .extra_topk = 5}, "extra_topk"},
        {{.batch = 1, .s_q = 1, .topk = 64, .num_splits = 65}, "num_splits"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mlajit_plan *p = (mlajit_plan *)1;
        cr_expect_eq(mlajit_plan_create(ctx, &s, &bad[i].shape, &p), MLAJIT_ERR_INVALID_ARGUMENT);
        cr_expect_null(p, "no plan on failure");
        cr_expect(strstr(mlajit_last_error(), bad[i].word) != NULL, "'%s' names %s", mlajit_last_error(), bad[i].word);
    }
    s.h_q = 129;
    mlajit_decode_shape ok = {.batch = 1, .s_q = 1, .topk = 64};
    mlajit_plan *p;
    cr_expect_eq(mlajit_plan_create(ctx, &s, &ok, &p), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "h_q") != NULL);
    s.h_q = 16;
    strcpy(s.arch, "sm_70");
    cr_expect_eq(mlajit_plan_create(ctx, &s, &ok, &p), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "arch") != NULL);
    cr_expect_eq(mlajit_plan_create(NULL, &s, &ok, &p), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect_eq(mlajit_decode(NULL, NULL, NULL), MLAJIT_ERR_INVALID_ARGUMENT);
}

Test(api, planner_splits_small_batches_and_sizes_the_workspace)
{
    mlajit_plan *p = make_plan(1, 0);
    int splits = mlajit_plan_num_splits(p);
    cr_expect_gt(splits, 1, "one row on a 132-SM part needs split-KV");
    /* partial out (fp32 d_v) + partial lse per (split, row, head) */
    size_t need = (size_t)splits * 2 * 64 * (512 + 1) * 4;
    cr_expect_geq(mlajit_plan_workspace_size(p), need);
    mlajit_plan_destroy(p);
    p = make_plan(512, 0);
    cr_expect_eq(mlajit_plan_num_splits(p), 1, "a large batch fills the GPU without splitting");
    cr_expect_eq(mlajit_plan_workspace_size(p), 0u);
    mlajit_plan_destroy(p);
    p = make_plan(0, 0);
    cr_expect_eq(mlajit_plan_workspace_size(p), 0u);
    mlajit_plan_destroy(p);
}

Test(api, status_strings_and_context_options)
{
    for (int s = 0; s <= MLAJIT_ERR_INTERNAL; s++)
        cr_expect_neq(mlajit_status_string(s)[0], '\0');
    cr_expect_str_eq(mlajit_status_string(12345), "unknown status code");
    mlajit_context *c2 = (mlajit_context *)1;
    mlajit_context_options o = {.flags = 0x80};
    cr_expect_eq(mlajit_context_create(&o, &c2), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect_null(c2);
    cr_expect(strstr(mlajit_last_error(), "flags") != NULL);
    o = (mlajit_context_options){.device = -2};
    cr_expect_eq(mlajit_context_create(&o, &c2), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "device") != NULL);
    cr_expect_eq(mlajit_context_create(NULL, NULL), MLAJIT_ERR_INVALID_ARGUMENT);
}
