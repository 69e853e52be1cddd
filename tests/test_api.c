/* The public API's bad input: every entry point with each bad argument gets its
 * status code and a message naming the argument, before anything could launch or
 * be written. One test per row of two tables: mlajit_decode's argument mutations
 * (bad_decode_args.h, shared with the GPU suite's poisoned-out test) and the
 * other entry points' calls (BAD rows below). Runs without a GPU: plans on a
 * context without a device validate everything, then say "no device". */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bad_decode_args.h"
#include "row_params.h"
#include "harness/harness.h"
#include "mlajit.h"
#include "runtime/runtime.h" /* the planner's rules, tested apart below */

/* Rows override one field of a valid designated initializer. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Winitializer-overrides"
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Woverride-init"
#endif

/* One disk cache for the run: the table's plan would otherwise be compiled again
 * for each row. */
#include "shared_cache.h"

static mlajit_context *ctx;

static void setup(void)
{
    const char *dir = shared_cache_dir();
    mlajit_context_options o = {.struct_size = sizeof o, .cache_dir = dir, .flags = MLAJIT_CONTEXT_NO_DEVICE};
    if (!dir)
        o.flags |= MLAJIT_CONTEXT_NO_DISK_CACHE;
    cr_assert_eq(mlajit_context_create(&o, &ctx), MLAJIT_OK, "%s", mlajit_last_error());
}

static void teardown(void) { mlajit_context_destroy(ctx); }

TestSuite(api, .init = setup, .fini = teardown, .timeout = 300);
TestSuite(bad_input, .init = setup, .fini = teardown, .timeout = 300);

#define FAKE(addr) ((void *)(uintptr_t)(addr)) /* never dereferenced: nothing launches */

static mlajit_plan *make_plan(int batch, int splits)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_decode_shape shape = MLAJIT_DECODE_SHAPE_INIT;
    cr_assert_eq(bad_args_plan_inputs(batch, splits, &s, &shape), MLAJIT_OK);
    mlajit_plan *p = NULL;
    cr_assert_eq(mlajit_plan_create(ctx, &s, &shape, &p), MLAJIT_OK, "%s", mlajit_last_error());
    return p;
}

/* Valid arguments for the plan of bad_decode_args.h (fake, aligned pointers). */
static void valid_args(const mlajit_plan *p, mlajit_decode_args *a)
{
    memset(a, 0, sizeof *a);
    a->struct_size = sizeof *a;
    a->q = FAKE(0x100000);
    a->kv = (mlajit_cache_view){FAKE(0x200000), mlajit_min_page_stride(BAD_ARGS_MODEL, BAD_ARGS_PAGE), 10};
    a->indices = FAKE(0x300000);
    a->topk_length = FAKE(0x310000);
    a->attn_sink = FAKE(0x320000);
    a->extra_kv = (mlajit_cache_view){FAKE(0x400000), mlajit_min_page_stride(BAD_ARGS_MODEL, BAD_ARGS_EXTRA_PAGE), 10};
    a->extra_indices = FAKE(0x500000);
    a->extra_topk_length = FAKE(0x510000);
    a->sm_scale = 0.04f;
    a->out = FAKE(0x600000);
    a->lse = FAKE(0x700000);
    a->workspace = FAKE(0x800000);
    a->workspace_size = mlajit_plan_workspace_size(p);
}

Test(api, valid_arguments_pass_validation_and_then_need_a_device)
{
    mlajit_plan *p = make_plan(BAD_ARGS_BATCH, BAD_ARGS_SPLITS);
    cr_assert_gt(mlajit_plan_workspace_size(p), 0u, "the table's plan splits, so it has a workspace row");
    mlajit_decode_args a = MLAJIT_DECODE_ARGS_INIT;
    valid_args(p, &a);
    cr_expect_eq(mlajit_decode(p, &a, NULL), MLAJIT_ERR_NO_DEVICE, "%s", mlajit_last_error());
    cr_expect(strstr(mlajit_last_error(), "GPU") != NULL);
    mlajit_plan_destroy(p);
}

/* ---- mlajit_decode: one test per row of bad_decode_args.h ------------------- */

ParameterizedTestParameters(bad_input, decode_argument)
{
    static size_t rows[BAD_DECODE_ARG_COUNT];
    return row_indices(rows, BAD_DECODE_ARG_COUNT);
}

ParameterizedTest(size_t *row, bad_input, decode_argument)
{
    const bad_decode_arg *bad = &bad_decode_args[*row];
    mlajit_plan *p = make_plan(BAD_ARGS_BATCH, BAD_ARGS_SPLITS);
    mlajit_decode_args a = MLAJIT_DECODE_ARGS_INIT;
    valid_args(p, &a);
    bad->mutate(&a);
    int rc = mlajit_decode(p, &a, NULL);
    cr_expect_eq(rc, MLAJIT_ERR_INVALID_ARGUMENT, "%s: got %d: %s", bad->name, rc, mlajit_last_error());
    cr_expect(strstr(mlajit_last_error(), bad->word) != NULL, "%s: '%s' should name '%s'", bad->name,
              mlajit_last_error(), bad->word);
    mlajit_plan_destroy(p);
}

/* ---- every other entry point: one Test per BAD row --------------------------- */

/* BAD(row name, expected status, word the message must hold, the call). */
#define BAD(name, status, word, call)                                                                       \
    Test(bad_input, name)                                                                                   \
    {                                                                                                       \
        int rc_ = (call);                                                                                   \
        const char *msg_ = mlajit_last_error();                                                             \
        cr_expect_eq(rc_, status, "%s: got %s (%d): %s", #call, mlajit_status_string(rc_), rc_, msg_);      \
        cr_expect(strstr(msg_, word) != NULL, "%s: message '%s' should name '%s'", #call, msg_, word);      \
    }

#define INVALID MLAJIT_ERR_INVALID_ARGUMENT
#define UNSUPPORTED MLAJIT_ERR_UNSUPPORTED
/* A valid spec / shape with some fields overridden: SPEC(.h_q = 0). */
#define SPEC(...)                                                                                              \
    (&(mlajit_kernel_spec){.struct_size = sizeof(mlajit_kernel_spec), .model = MLAJIT_MODEL_V32, .h_q = 16,      \
                           .page_size = 64, __VA_ARGS__})
#define SHAPE(...)                                                                                             \
    (&(mlajit_decode_shape){.struct_size = sizeof(mlajit_decode_shape), .batch = 1, .s_q = 1, .topk = 64,        \
                            __VA_ARGS__})

static mlajit_kernel_spec spec_out = MLAJIT_KERNEL_SPEC_INIT;
static mlajit_model model_out;
static char text_out[256];
static mlajit_context *context_out;
static mlajit_context_info info_out = MLAJIT_CONTEXT_INFO_INIT;
static mlajit_plan *plan_out;

/* mlajit_spec_init */
BAD(spec_init_null_spec, INVALID, "spec: NULL", mlajit_spec_init(NULL, MLAJIT_MODEL_V32, 16, 64))
BAD(spec_init_unknown_model, INVALID, "spec.model = 9", mlajit_spec_init(&spec_out, (mlajit_model)9, 16, 64))
BAD(spec_init_h_q_0, INVALID, "spec.h_q = 0; allowed 1..128", mlajit_spec_init(&spec_out, MLAJIT_MODEL_V32, 0, 64))
BAD(spec_init_h_q_129, INVALID, "spec.h_q = 129", mlajit_spec_init(&spec_out, MLAJIT_MODEL_V32, 129, 64))
BAD(spec_init_h_q_negative, INVALID, "spec.h_q = -4", mlajit_spec_init(&spec_out, MLAJIT_MODEL_DSV4, -4, 64))
BAD(spec_init_page_0, INVALID, "spec.page_size = 0; allowed 1..1024", mlajit_spec_init(&spec_out, MLAJIT_MODEL_V32, 16, 0))
BAD(spec_init_page_1025, INVALID, "spec.page_size = 1025", mlajit_spec_init(&spec_out, MLAJIT_MODEL_V32, 16, 1025))
BAD(spec_init_page_negative, INVALID, "spec.page_size = -64", mlajit_spec_init(&spec_out, MLAJIT_MODEL_GLM_NSA, 16, -64))

/* mlajit_spec_validate */
BAD(spec_validate_null, INVALID, "spec: NULL", mlajit_spec_validate(NULL))
BAD(spec_validate_unknown_model, INVALID, "spec.model = 0", mlajit_spec_validate(SPEC(.model = 0)))
BAD(spec_validate_h_q_0, INVALID, "spec.h_q = 0", mlajit_spec_validate(SPEC(.h_q = 0)))
BAD(spec_validate_h_q_129, INVALID, "spec.h_q = 129", mlajit_spec_validate(SPEC(.h_q = 129)))
BAD(spec_validate_page_0, INVALID, "spec.page_size = 0", mlajit_spec_validate(SPEC(.page_size = 0)))
BAD(spec_validate_extra_page_negative, INVALID, "spec.extra_page_size = -1",
    mlajit_spec_validate(SPEC(.extra_page_size = -1)))
BAD(spec_validate_extra_page_1025, INVALID, "spec.extra_page_size = 1025",
    mlajit_spec_validate(SPEC(.extra_page_size = 1025)))
BAD(spec_validate_unknown_feature, INVALID, "spec.features = 0x10", mlajit_spec_validate(SPEC(.features = 0x10)))
BAD(spec_validate_extra_length_without_extra, INVALID, "extra_page_size is 0",
    mlajit_spec_validate(SPEC(.features = MLAJIT_FEATURE_EXTRA_TOPK_LENGTH)))
BAD(spec_validate_tile_48, INVALID, "spec.tile = 48", mlajit_spec_validate(SPEC(.tile = 48)))
BAD(spec_validate_tile_negative, INVALID, "spec.tile = -32", mlajit_spec_validate(SPEC(.tile = -32)))
BAD(spec_validate_heads_per_cta_8, INVALID, "spec.heads_per_cta = 8", mlajit_spec_validate(SPEC(.heads_per_cta = 8)))
BAD(spec_validate_variant, INVALID, "spec.variant = 10", mlajit_spec_validate(SPEC(.variant = (mlajit_variant)10)))
BAD(spec_validate_retired_sliced, UNSUPPORTED, "spec.variant = 3: variant sliced was retired",
    mlajit_spec_validate(SPEC(.variant = MLAJIT_VARIANT_SLICED)))
BAD(spec_validate_retired_unpaired, UNSUPPORTED, "spec.variant = 5: variant sm90-unpaired was retired",
    mlajit_spec_validate(SPEC(.variant = MLAJIT_VARIANT_SM90_UNPAIRED)))
BAD(spec_validate_arch_sm_70, INVALID, "spec.arch = 'sm_70'", mlajit_spec_validate(SPEC(.arch = "sm_70")))
BAD(spec_validate_arch_unknown, INVALID, "spec.arch = 'gfx90a'", mlajit_spec_validate(SPEC(.arch = "gfx90a")))
BAD(spec_validate_arch_unterminated, INVALID, "spec.arch is not NUL-terminated",
    mlajit_spec_validate(SPEC(.arch = {'s', 'm', '_', '9', '0', 'a', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x'})))

/* mlajit_spec_string / mlajit_spec_parse / mlajit_spec_resolve */
BAD(spec_string_null_spec, INVALID, "spec: NULL", mlajit_spec_string(NULL, text_out, sizeof text_out))
BAD(spec_string_null_buf, INVALID, "buf: NULL", mlajit_spec_string(SPEC(.arch = "sm_90a"), NULL, 64))
BAD(spec_string_short_buf, INVALID, "buf: 8 bytes is too short", mlajit_spec_string(SPEC(.arch = "sm_90a"), text_out, 8))
BAD(spec_string_bad_spec, INVALID, "spec.h_q = 0", mlajit_spec_string(SPEC(.h_q = 0), text_out, sizeof text_out))
BAD(spec_parse_null_string, INVALID, "spec string: NULL", mlajit_spec_parse(NULL, &spec_out))
BAD(spec_parse_null_out, INVALID, "out: NULL; pass a mlajit_kernel_spec",
    mlajit_spec_parse("v32.h16.p64.t64.hc16.portable.sm_90a", NULL))
BAD(spec_parse_truncated, INVALID, "is malformed", mlajit_spec_parse("v32.h16", &spec_out))
BAD(spec_parse_unknown_feature, INVALID, "unknown feature 'q'",
    mlajit_spec_parse("v32.h16.p64.fq.t64.hc16.portable.sm_90a", &spec_out))
BAD(spec_parse_unknown_variant, INVALID, "variant 'fast'", mlajit_spec_parse("v32.h16.p64.t64.hc16.fast.sm_90a", &spec_out))
BAD(spec_parse_retired_variant, UNSUPPORTED, "v32.h16.p64.t32.hc16.sliced.sm_90a': variant sliced was retired",
    mlajit_spec_parse("v32.h16.p64.t32.hc16.sliced.sm_90a", &spec_out))
BAD(spec_parse_h_q_0, INVALID, "spec.h_q = 0", mlajit_spec_parse("v32.h0.p64.t64.hc16.portable.sm_90a", &spec_out))
BAD(spec_parse_unknown_arch, INVALID, "spec.arch = 'sm_91'", mlajit_spec_parse("v32.h1.p1.t64.hc16.portable.sm_91", &spec_out))
BAD(spec_parse_too_long, INVALID, "longer than 255 characters",
    mlajit_spec_parse("v32.h16.p64.t64.hc16.portable.sm_90a....................................................................."
                      "..........................................................................................."
                      "...........................................................................................",
                      &spec_out))
BAD(spec_resolve_no_arch, INVALID, "spec.arch is empty", mlajit_spec_resolve(SPEC(), &spec_out))
BAD(spec_resolve_null_out, INVALID, "resolved: NULL", mlajit_spec_resolve(SPEC(.arch = "sm_90a"), NULL))
BAD(spec_resolve_too_much_shared_memory, UNSUPPORTED, "shared memory",
    mlajit_spec_resolve(SPEC(.h_q = 128, .tile = 64, .heads_per_cta = 32, .arch = "sm_86"), &spec_out))
BAD(spec_validate_variant_10, INVALID, "spec.variant = 10", mlajit_spec_validate(SPEC(.variant = 10)))
BAD(spec_resolve_sm90_on_sm_80, UNSUPPORTED, "variant sm90 needs spec.arch = sm_90a",
    mlajit_spec_resolve(SPEC(.variant = MLAJIT_VARIANT_SM90, .arch = "sm_80"), &spec_out))
BAD(spec_resolve_sm90_on_sm_100a, UNSUPPORTED, "variant sm90 needs spec.arch = sm_90a",
    mlajit_spec_resolve(SPEC(.variant = MLAJIT_VARIANT_SM90, .arch = "sm_100a"), &spec_out))
BAD(spec_resolve_sm90_tile_32, UNSUPPORTED, "variant sm90 runs tile 64",
    mlajit_spec_resolve(SPEC(.variant = MLAJIT_VARIANT_SM90, .tile = 32, .arch = "sm_90a"), &spec_out))
BAD(spec_resolve_sm90_16_heads_per_cta, UNSUPPORTED, "heads_per_cta 16",
    mlajit_spec_resolve(SPEC(.variant = MLAJIT_VARIANT_SM90, .heads_per_cta = 16, .arch = "sm_90a"), &spec_out))

/* mlajit_generate_source */
static char *source_out;
BAD(generate_null_source, INVALID, "source: NULL", mlajit_generate_source(SPEC(.arch = "sm_90a"), NULL))
BAD(generate_null_spec, INVALID, "spec: NULL", mlajit_generate_source(NULL, &source_out))
BAD(generate_no_arch, INVALID, "spec.arch is empty", mlajit_generate_source(SPEC(), &source_out))
BAD(generate_bad_spec, INVALID, "spec.page_size = 0", mlajit_generate_source(SPEC(.page_size = 0, .arch = "sm_90a"), &source_out))

/* mlajit_model_from_name */
BAD(model_from_name_null, INVALID, "model name: NULL", mlajit_model_from_name(NULL, &model_out))
BAD(model_from_name_null_out, INVALID, "model name: NULL", mlajit_model_from_name("v32", NULL))
BAD(model_from_name_unknown, INVALID, "model 'llama' is unknown; allowed: v32, dsv4, glm_nsa, glm53_nope, dots3_swa",
    mlajit_model_from_name("llama", &model_out))

/* mlajit_envelope_check */
BAD(envelope_null_spec, INVALID, "spec: NULL", mlajit_envelope_check(NULL, NULL))
BAD(envelope_h_q_0, INVALID, "spec.h_q = 0", mlajit_envelope_check(SPEC(.h_q = 0), NULL))
BAD(envelope_h_q_129, INVALID, "spec.h_q = 129", mlajit_envelope_check(SPEC(.h_q = 129), NULL))
BAD(envelope_page_0, INVALID, "spec.page_size = 0", mlajit_envelope_check(SPEC(.page_size = 0), NULL))
BAD(envelope_unknown_model, INVALID, "spec.model = 77", mlajit_envelope_check(SPEC(.model = 77), NULL))
BAD(envelope_unknown_arch, INVALID, "spec.arch = 'sm_75'", mlajit_envelope_check(SPEC(.arch = "sm_75"), NULL))
BAD(envelope_shared_memory, UNSUPPORTED, "shared memory",
    mlajit_envelope_check(SPEC(.tile = 64, .heads_per_cta = 32, .arch = "sm_120a"), NULL))
BAD(envelope_batch_negative, INVALID, "shape.batch = -1", mlajit_envelope_check(SPEC(), SHAPE(.batch = -1)))
BAD(envelope_batch_65537, INVALID, "shape.batch = 65537", mlajit_envelope_check(SPEC(), SHAPE(.batch = 65537)))
BAD(envelope_s_q_65, INVALID, "shape.s_q = 65", mlajit_envelope_check(SPEC(), SHAPE(.s_q = 65)))
BAD(envelope_rows_65600, INVALID, "shape.batch x shape.s_q = 1025 x 64 = 65600 rows",
    mlajit_envelope_check(SPEC(), SHAPE(.batch = 1025, .s_q = 64)))
BAD(envelope_topk_0, INVALID, "shape.topk = 0", mlajit_envelope_check(SPEC(), SHAPE(.topk = 0)))
BAD(envelope_topk_16385, INVALID, "shape.topk = 16385", mlajit_envelope_check(SPEC(), SHAPE(.topk = 16385)))
BAD(envelope_extra_topk_without_extra, INVALID, "shape.extra_topk = 5", mlajit_envelope_check(SPEC(), SHAPE(.extra_topk = 5)))
BAD(envelope_extra_topk_0_with_extra, INVALID, "shape.extra_topk = 0",
    mlajit_envelope_check(SPEC(.extra_page_size = 2), SHAPE(.extra_topk = 0)))
BAD(envelope_splits_65, INVALID, "shape.num_splits = 65", mlajit_envelope_check(SPEC(), SHAPE(.num_splits = 65)))
BAD(envelope_retired_variant, UNSUPPORTED, "variant sm90-unpaired was retired",
    mlajit_envelope_check(SPEC(.h_q = 128, .variant = MLAJIT_VARIANT_SM90_UNPAIRED, .arch = "sm_90a"), NULL))

/* mlajit_context_create / mlajit_context_get_info */
BAD(context_null_out, INVALID, "out: NULL", mlajit_context_create(NULL, NULL))
BAD(context_unknown_flags, INVALID, "options.flags = 0x80",
    mlajit_context_create(&(mlajit_context_options){.struct_size = sizeof(mlajit_context_options), .flags = 0x80},
                          &context_out))
BAD(context_negative_device, INVALID, "options.device = -2",
    mlajit_context_create(&(mlajit_context_options){.struct_size = sizeof(mlajit_context_options), .device = -2},
                          &context_out))
BAD(context_info_null_ctx, INVALID, "ctx: NULL", mlajit_context_get_info(NULL, &info_out))
BAD(context_info_null_info, INVALID, "info: NULL; pass a mlajit_context_info", mlajit_context_get_info(ctx, NULL))

/* mlajit_kernel_prepare */
BAD(prepare_null_ctx, INVALID, "ctx or spec: NULL", mlajit_kernel_prepare(NULL, SPEC(), NULL))
BAD(prepare_null_spec, INVALID, "ctx or spec: NULL", mlajit_kernel_prepare(ctx, NULL, NULL))
BAD(prepare_h_q_129, INVALID, "spec.h_q = 129", mlajit_kernel_prepare(ctx, SPEC(.h_q = 129), NULL))
BAD(prepare_page_0, INVALID, "spec.page_size = 0", mlajit_kernel_prepare(ctx, SPEC(.page_size = 0), NULL))
BAD(prepare_unknown_model, INVALID, "spec.model = 42", mlajit_kernel_prepare(ctx, SPEC(.model = 42), NULL))
BAD(prepare_unknown_arch, INVALID, "spec.arch = 'sm_70'", mlajit_kernel_prepare(ctx, SPEC(.arch = "sm_70"), NULL))
BAD(prepare_shared_memory, UNSUPPORTED, "shared memory",
    mlajit_kernel_prepare(ctx, SPEC(.tile = 64, .heads_per_cta = 32, .arch = "sm_89"), NULL))
BAD(prepare_retired_variant, UNSUPPORTED, "variant sliced was retired",
    mlajit_kernel_prepare(ctx, SPEC(.variant = MLAJIT_VARIANT_SLICED, .arch = "sm_80"), NULL))

/* mlajit_plan_create */
BAD(plan_null_out, INVALID, "out: NULL", mlajit_plan_create(ctx, SPEC(), SHAPE(), NULL))
BAD(plan_null_ctx, INVALID, "ctx: NULL", mlajit_plan_create(NULL, SPEC(), SHAPE(), &plan_out))
BAD(plan_null_spec, INVALID, "spec: NULL", mlajit_plan_create(ctx, NULL, SHAPE(), &plan_out))
BAD(plan_null_shape, INVALID, "shape: NULL", mlajit_plan_create(ctx, SPEC(), NULL, &plan_out))
BAD(plan_h_q_0, INVALID, "spec.h_q = 0", mlajit_plan_create(ctx, SPEC(.h_q = 0), SHAPE(), &plan_out))
BAD(plan_h_q_129, INVALID, "spec.h_q = 129", mlajit_plan_create(ctx, SPEC(.h_q = 129), SHAPE(), &plan_out))
BAD(plan_page_0, INVALID, "spec.page_size = 0", mlajit_plan_create(ctx, SPEC(.page_size = 0), SHAPE(), &plan_out))
BAD(plan_unknown_arch, INVALID, "spec.arch = 'sm_70'", mlajit_plan_create(ctx, SPEC(.arch = "sm_70"), SHAPE(), &plan_out))
BAD(plan_shared_memory, UNSUPPORTED, "shared memory",
    mlajit_plan_create(ctx, SPEC(.tile = 64, .heads_per_cta = 32, .arch = "sm_86"), SHAPE(), &plan_out))
BAD(plan_batch_negative, INVALID, "shape.batch = -1", mlajit_plan_create(ctx, SPEC(), SHAPE(.batch = -1), &plan_out))
BAD(plan_batch_65537, INVALID, "shape.batch = 65537", mlajit_plan_create(ctx, SPEC(), SHAPE(.batch = 65537), &plan_out))
BAD(plan_rows_65544, INVALID, "8193 x 8 = 65544 rows", mlajit_plan_create(ctx, SPEC(), SHAPE(.batch = 8193, .s_q = 8), &plan_out))
BAD(plan_s_q_negative, INVALID, "shape.s_q = -1", mlajit_plan_create(ctx, SPEC(), SHAPE(.s_q = -1), &plan_out))
BAD(plan_s_q_65, INVALID, "shape.s_q = 65", mlajit_plan_create(ctx, SPEC(), SHAPE(.s_q = 65), &plan_out))
BAD(plan_topk_0, INVALID, "shape.topk = 0", mlajit_plan_create(ctx, SPEC(), SHAPE(.topk = 0), &plan_out))
BAD(plan_topk_16385, INVALID, "shape.topk = 16385", mlajit_plan_create(ctx, SPEC(), SHAPE(.topk = 16385), &plan_out))
BAD(plan_extra_topk_without_extra, INVALID, "shape.extra_topk = 5",
    mlajit_plan_create(ctx, SPEC(), SHAPE(.extra_topk = 5), &plan_out))
BAD(plan_extra_topk_negative, INVALID, "shape.extra_topk = -3",
    mlajit_plan_create(ctx, SPEC(.extra_page_size = 7), SHAPE(.extra_topk = -3), &plan_out))
BAD(plan_splits_negative, INVALID, "shape.num_splits = -1", mlajit_plan_create(ctx, SPEC(), SHAPE(.num_splits = -1), &plan_out))
BAD(plan_splits_65, INVALID, "shape.num_splits = 65", mlajit_plan_create(ctx, SPEC(), SHAPE(.num_splits = 65), &plan_out))
BAD(plan_retired_variant, UNSUPPORTED, "variant sm90-unpaired was retired",
    mlajit_plan_create(ctx, SPEC(.h_q = 128, .variant = MLAJIT_VARIANT_SM90_UNPAIRED), SHAPE(), &plan_out))

/* mlajit_decode's own pointers (its arguments' fields are the parameterized rows) */
static int decode_null_plan(void)
{
    mlajit_decode_args a = MLAJIT_DECODE_ARGS_INIT;
    return mlajit_decode(NULL, &a, NULL);
}
static int decode_null_args(void)
{
    mlajit_plan *p = make_plan(1, 1);
    int rc = mlajit_decode(p, NULL, NULL);
    mlajit_plan_destroy(p);
    return rc;
}
BAD(decode_null_plan, INVALID, "plan: NULL", decode_null_plan())
BAD(decode_null_args, INVALID, "args: NULL", decode_null_args())

/* mlajit_quantize_token / mlajit_dequantize_token */
static _Alignas(16) unsigned char page_bytes[4 * 656];
static uint16_t token_values[576];
static float token_out[576];
BAD(quantize_unknown_model, INVALID, "model 0 is unknown", mlajit_quantize_token(0, token_values, page_bytes, 4, 0))
BAD(quantize_null_values, INVALID, "values_bf16 is NULL", mlajit_quantize_token(MLAJIT_MODEL_V32, NULL, page_bytes, 4, 0))
BAD(quantize_null_page, INVALID, "page_base is NULL", mlajit_quantize_token(MLAJIT_MODEL_V32, token_values, NULL, 4, 0))
BAD(quantize_page_0, INVALID, "page_size is 0", mlajit_quantize_token(MLAJIT_MODEL_V32, token_values, page_bytes, 0, 0))
BAD(quantize_page_1025, INVALID, "page_size is 1025",
    mlajit_quantize_token(MLAJIT_MODEL_V32, token_values, page_bytes, 1025, 0))
BAD(quantize_token_negative, INVALID, "token_in_page is -1; allowed 0..3",
    mlajit_quantize_token(MLAJIT_MODEL_V32, token_values, page_bytes, 4, -1))
BAD(quantize_token_past_page, INVALID, "token_in_page is 4; allowed 0..3",
    mlajit_quantize_token(MLAJIT_MODEL_V32, token_values, page_bytes, 4, 4))
BAD(dequantize_unknown_model, INVALID, "model 9 is unknown", mlajit_dequantize_token(9, page_bytes, 4, 0, token_out))
BAD(dequantize_null_page, INVALID, "page_base is NULL", mlajit_dequantize_token(MLAJIT_MODEL_DSV4, NULL, 4, 0, token_out))
BAD(dequantize_null_out, INVALID, "out is NULL", mlajit_dequantize_token(MLAJIT_MODEL_DSV4, page_bytes, 4, 0, NULL))
BAD(dequantize_page_0, INVALID, "page_size is 0", mlajit_dequantize_token(MLAJIT_MODEL_DSV4, page_bytes, 0, 0, token_out))
BAD(dequantize_token_past_page, INVALID, "token_in_page is 9",
    mlajit_dequantize_token(MLAJIT_MODEL_GLM_NSA, page_bytes, 4, 9, token_out))

/* mlajit_reference_decode: a small valid host case, one field broken per row */
typedef void (*ref_mutation)(mlajit_kernel_spec *, mlajit_decode_shape *, mlajit_decode_args *, double **);

static int reference_with(ref_mutation mutate)
{
    mlajit_synth_params p = {.model = MLAJIT_MODEL_V32, .b = 2, .s_q = 1, .h_q = 2, .topk = 8, .page_size = 4,
                             .seqlen = 16, .with_sink = 1, .with_topk_length = 1, .seed = 1};
    mlajit_case c;
    cr_assert_eq(mlajit_case_synthesize(&p, &c), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_kernel_spec spec = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_decode_shape shape = MLAJIT_DECODE_SHAPE_INIT;
    mlajit_decode_args args = MLAJIT_DECODE_ARGS_INIT;
    mlajit_case_spec(&c, &spec);
    mlajit_case_shape(&c, &shape);
    mlajit_case_host_args(&c, &args);
    double out[2 * 2 * 512], lse[4], *outs[2] = {out, lse};
    mutate(&spec, &shape, &args, outs);
    int rc = mlajit_reference_decode(&spec, &shape, &args, outs[0], outs[1]);
    mlajit_case_free(&c); /* leaves the thread's message alone */
    return rc;
}

static void ref_h_q_0(mlajit_kernel_spec *s, mlajit_decode_shape *sh, mlajit_decode_args *a, double **o) { s->h_q = 0; }
static void ref_model(mlajit_kernel_spec *s, mlajit_decode_shape *sh, mlajit_decode_args *a, double **o) { s->model = 0; }
static void ref_page_0(mlajit_kernel_spec *s, mlajit_decode_shape *sh, mlajit_decode_args *a, double **o) { s->page_size = 0; }
static void ref_features(mlajit_kernel_spec *s, mlajit_decode_shape *sh, mlajit_decode_args *a, double **o) { s->features = 0x40; }
static void ref_batch(mlajit_kernel_spec *s, mlajit_decode_shape *sh, mlajit_decode_args *a, double **o) { sh->batch = -1; }
static void ref_s_q(mlajit_kernel_spec *s, mlajit_decode_shape *sh, mlajit_decode_args *a, double **o) { sh->s_q = 65; }
static void ref_topk(mlajit_kernel_spec *s, mlajit_decode_shape *sh, mlajit_decode_args *a, double **o) { sh->topk = 0; }
static void ref_extra_topk(mlajit_kernel_spec *s, mlajit_decode_shape *sh, mlajit_decode_args *a, double **o) { sh->extra_topk = 3; }
static void ref_scale(mlajit_kernel_spec *s, mlajit_decode_shape *sh, mlajit_decode_args *a, double **o) { a->sm_scale = 0.0f; }
static void ref_out(mlajit_kernel_spec *s, mlajit_decode_shape *sh, mlajit_decode_args *a, double **o) { o[0] = NULL; }
static void ref_lse(mlajit_kernel_spec *s, mlajit_decode_shape *sh, mlajit_decode_args *a, double **o) { o[1] = NULL; }
static void ref_q(mlajit_kernel_spec *s, mlajit_decode_shape *sh, mlajit_decode_args *a, double **o) { a->q = NULL; }
static void ref_indices(mlajit_kernel_spec *s, mlajit_decode_shape *sh, mlajit_decode_args *a, double **o) { a->indices = NULL; }
static void ref_kv(mlajit_kernel_spec *s, mlajit_decode_shape *sh, mlajit_decode_args *a, double **o) { a->kv.data = NULL; }
static void ref_kv_stride(mlajit_kernel_spec *s, mlajit_decode_shape *sh, mlajit_decode_args *a, double **o) { a->kv.page_stride = 100; }
static void ref_kv_pages(mlajit_kernel_spec *s, mlajit_decode_shape *sh, mlajit_decode_args *a, double **o) { a->kv.num_pages = -1; }
static void ref_length(mlajit_kernel_spec *s, mlajit_decode_shape *sh, mlajit_decode_args *a, double **o) { a->topk_length = NULL; }
static void ref_sink(mlajit_kernel_spec *s, mlajit_decode_shape *sh, mlajit_decode_args *a, double **o) { a->attn_sink = NULL; }
static void ref_stride(mlajit_kernel_spec *s, mlajit_decode_shape *sh, mlajit_decode_args *a, double **o) { a->q_stride_b = -1; }
static void ref_idx_stride(mlajit_kernel_spec *s, mlajit_decode_shape *sh, mlajit_decode_args *a, double **o) { a->indices_stride_s = -8; }

static mlajit_decode_args args_out = MLAJIT_DECODE_ARGS_INIT;
BAD(reference_null_spec, INVALID, "spec, shape and args must not be NULL",
    mlajit_reference_decode(NULL, SHAPE(), &args_out, NULL, NULL))
BAD(reference_null_shape, INVALID, "spec, shape and args must not be NULL",
    mlajit_reference_decode(SPEC(), NULL, &args_out, NULL, NULL))
BAD(reference_null_args, INVALID, "spec, shape and args must not be NULL",
    mlajit_reference_decode(SPEC(), SHAPE(), NULL, NULL, NULL))
BAD(reference_h_q_0, INVALID, "spec.h_q is 0", reference_with(ref_h_q_0))
BAD(reference_unknown_model, INVALID, "spec.model 0 is unknown", reference_with(ref_model))
BAD(reference_page_0, INVALID, "spec.page_size is 0", reference_with(ref_page_0))
BAD(reference_unknown_feature, INVALID, "spec.features is 0x40", reference_with(ref_features))
BAD(reference_batch_negative, INVALID, "shape.batch is -1", reference_with(ref_batch))
BAD(reference_s_q_65, INVALID, "shape.s_q is 65", reference_with(ref_s_q))
BAD(reference_topk_0, INVALID, "shape.topk is 0", reference_with(ref_topk))
BAD(reference_extra_topk_without_extra, INVALID, "shape.extra_topk is 3", reference_with(ref_extra_topk))
BAD(reference_scale_zero, INVALID, "sm_scale is 0", reference_with(ref_scale))
BAD(reference_null_out, INVALID, "out_ref and lse_ref must not be NULL", reference_with(ref_out))
BAD(reference_null_lse, INVALID, "out_ref and lse_ref must not be NULL", reference_with(ref_lse))
BAD(reference_null_q, INVALID, "args.q is NULL", reference_with(ref_q))
BAD(reference_null_indices, INVALID, "args.indices is NULL", reference_with(ref_indices))
BAD(reference_null_kv, INVALID, "kv.data is NULL", reference_with(ref_kv))
BAD(reference_kv_stride_small, INVALID, "kv.page_stride is 100 bytes", reference_with(ref_kv_stride))
BAD(reference_kv_pages_negative, INVALID, "kv.num_pages is -1", reference_with(ref_kv_pages))
BAD(reference_null_topk_length, INVALID, "args.topk_length is NULL", reference_with(ref_length))
BAD(reference_null_sink, INVALID, "args.attn_sink is NULL", reference_with(ref_sink))
BAD(reference_negative_q_stride, INVALID, "q_stride_b is -1", reference_with(ref_stride))
BAD(reference_negative_indices_stride, INVALID, "indices_stride_s is -8", reference_with(ref_idx_stride))

/* ---- the rest: values rather than statuses, and the planner's sizes --------- */

Test(api, lookups_of_unknown_values)
{
    cr_expect_null(mlajit_model_describe((mlajit_model)0));
    cr_expect_null(mlajit_model_describe((mlajit_model)99));
    cr_expect_eq(mlajit_min_page_stride((mlajit_model)99, 64), -1);
    cr_expect_eq(mlajit_min_page_stride(MLAJIT_MODEL_V32, 0), -1);
    cr_expect_eq(mlajit_min_page_stride(MLAJIT_MODEL_V32, -3), -1);
    cr_expect_str_eq(mlajit_status_string(12345), "unknown status code");
    cr_expect_str_eq(mlajit_status_string(-1), "unknown status code");
    for (int s = 0; s <= MLAJIT_ERR_INTERNAL; s++)
        cr_expect_neq(mlajit_status_string(s)[0], '\0');
    cr_expect_eq(mlajit_plan_workspace_size(NULL), 0u);
    cr_expect_eq(mlajit_plan_num_splits(NULL), 0);
    cr_expect_null(mlajit_plan_report(NULL));
    mlajit_plan_destroy(NULL);
    mlajit_context_destroy(NULL);
}

Test(api, a_failed_create_leaves_no_handle)
{
    mlajit_context *c2 = (mlajit_context *)1;
    mlajit_context_options o = {.struct_size = sizeof o, .flags = 0x80};
    cr_expect_eq(mlajit_context_create(&o, &c2), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect_null(c2);
    mlajit_plan *p = (mlajit_plan *)1;
    cr_expect_eq(mlajit_plan_create(ctx, SPEC(.h_q = 0), SHAPE(), &p), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect_null(p, "no plan on failure");
    char *src = (char *)1;
    cr_expect_eq(mlajit_generate_source(SPEC(), &src), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect_null(src);
}

Test(api, workspace_too_small)
{
    mlajit_plan *p = make_plan(1, 3); /* 384 candidates = 6 tiles of 64: 2 per split */
    cr_assert_eq(mlajit_plan_num_splits(p), 3);
    size_t ws = mlajit_plan_workspace_size(p);
    cr_assert_gt(ws, 0u);
    mlajit_decode_args a = MLAJIT_DECODE_ARGS_INIT;
    valid_args(p, &a);
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

/* Whether any two of the [b][s][h] rows of `row` elements overlap, by listing
 * every row's start and comparing neighbours. */
static int compare_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int rows_overlap_by_listing(int b, int s_q, int h_q, const int64_t stride[3], int64_t row)
{
    int64_t *starts = malloc(sizeof *starts * (size_t)b * s_q * h_q);
    cr_assert_not_null(starts);
    size_t n = 0;
    for (int i = 0; i < b; i++)
        for (int j = 0; j < s_q; j++)
            for (int k = 0; k < h_q; k++)
                starts[n++] = i * stride[0] + j * stride[1] + k * stride[2];
    qsort(starts, n, sizeof *starts, compare_i64);
    int overlap = 0;
    for (size_t i = 1; i < n && !overlap; i++)
        overlap = starts[i] - starts[i - 1] < row;
    free(starts);
    return overlap;
}

/* The out strides decode accepts never put two rows on the same memory: random
 * stride triples (multiples of 8 elements, in any order of the dimensions) are
 * checked against the listing of every row. Dense permutations, which are the
 * layouts engines pass, must all be accepted. */
Test(api, accepted_out_strides_never_overlap_rows)
{
    mlajit_plan *p = make_plan(BAD_ARGS_BATCH, BAD_ARGS_SPLITS);
    const int b = BAD_ARGS_BATCH, s_q = BAD_ARGS_SQ, h_q = BAD_ARGS_HEADS;
    const int64_t row = BAD_ARGS_DV;
    uint64_t seed = 12345;
    int accepted = 0, refused = 0;
    for (int trial = 0; trial < 3000; trial++) {
        int64_t stride[3];
        for (int d = 0; d < 3; d++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            stride[d] = (int64_t)((seed >> 33) % (2 * (uint64_t)h_q * s_q * row / 8) + 1) * 8;
        }
        mlajit_decode_args a = MLAJIT_DECODE_ARGS_INIT;
        valid_args(p, &a);
        a.out_stride_b = stride[0];
        a.out_stride_s = stride[1];
        a.out_stride_h = stride[2];
        int rc = mlajit_decode(p, &a, NULL);
        const int overlap = rows_overlap_by_listing(b, s_q, h_q, stride, row);
        if (rc == MLAJIT_ERR_NO_DEVICE) {
            accepted++;
            cr_assert(!overlap, "strides (%lld, %lld, %lld) accepted, but rows overlap", (long long)stride[0],
                      (long long)stride[1], (long long)stride[2]);
        } else {
            refused++;
            cr_assert_eq(rc, MLAJIT_ERR_INVALID_ARGUMENT);
        }
    }
    cr_expect(accepted > 100 && refused > 100, "the draw covers both sides: %d accepted, %d refused", accepted,
              refused);
    /* Every order of dense dimensions. */
    static const int orders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    const int size[3] = {b, s_q, h_q};
    for (int o = 0; o < 6; o++) {
        int64_t stride[3], step = row;
        for (int i = 2; i >= 0; i--) { /* orders[o][2] is innermost */
            stride[orders[o][i]] = step;
            step *= size[orders[o][i]];
        }
        mlajit_decode_args a = MLAJIT_DECODE_ARGS_INIT;
        valid_args(p, &a);
        a.out_stride_b = stride[0];
        a.out_stride_s = stride[1];
        a.out_stride_h = stride[2];
        cr_expect_eq(mlajit_decode(p, &a, NULL), MLAJIT_ERR_NO_DEVICE, "dense order %d: %s", o, mlajit_last_error());
    }
    mlajit_plan_destroy(p);
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

/* The grid after the main kernel starts at the main kernel's start only beside idle
 * SMs: at most 4 of its CTAs per SM the main grid leaves idle (132 SMs here). That
 * grid is the combine where the plan splits; unsplit, the next call's main grid,
 * taken to be this one's size. */
Test(api, planner_starts_the_next_grid_early_only_beside_idle_sms)
{
    cr_expect_eq(mlajit_dependent_starts_early(64, 132, 128), 1, "b 1 h 128: 64 CTAs, 68 idle SMs");
    cr_expect_eq(mlajit_dependent_starts_early(32, 132, 8), 1, "b 1 h 8");
    cr_expect_eq(mlajit_dependent_starts_early(100, 132, 128), 1, "32 idle SMs hold 128");
    cr_expect_eq(mlajit_dependent_starts_early(100, 132, 129), 0, "but not 129");
    cr_expect_eq(mlajit_dependent_starts_early(128, 132, 64), 0, "b 8 h 8: 4 idle SMs (measured +5 us)");
    cr_expect_eq(mlajit_dependent_starts_early(105, 132, 105), 1, "unsplit: 27 idle SMs hold the next 105");
    cr_expect_eq(mlajit_dependent_starts_early(106, 132, 106), 0, "but not the next 106");
    cr_expect_eq(mlajit_dependent_starts_early(132, 132, 1), 0, "no idle SM");
    cr_expect_eq(mlajit_dependent_starts_early(500, 132, 1), 0, "several waves");
    cr_expect_eq(mlajit_dependent_starts_early(0, 132, 8), 0, "no main grid");
    cr_expect_eq(mlajit_dependent_starts_early(8, 132, 0), 0, "no grid after it");

    mlajit_plan *p = make_plan(1, 0); /* 2 rows x 6 splits of DSV4 h 64 beside 128 combine CTAs */
    cr_assert_gt(mlajit_plan_num_splits(p), 1);
    cr_assert(p->kernel->layout.dependent_launch, "a context without a device plans for sm_90a");
    cr_expect_eq(p->release_dependent_early, 1);
    mlajit_plan_destroy(p);
    p = make_plan(50, 2); /* 200 CTAs: no SM idle */
    cr_expect_eq(p->release_dependent_early, 0);
    mlajit_plan_destroy(p);
    p = make_plan(1, 1); /* no split: 2 rows, a few CTAs, and the next call's wait on the idle SMs */
    cr_assert_eq(mlajit_plan_num_splits(p), 1);
    cr_expect_leq((long)p->head_groups * p->rows, 8, "%d x %d CTAs", p->head_groups, p->rows);
    cr_expect_eq(p->release_dependent_early, 1);
    mlajit_plan_destroy(p);
    p = make_plan(60, 1); /* no split: 120 CTAs leave 12 SMs, too few for the next call's */
    cr_assert_eq(mlajit_plan_num_splits(p), 1);
    cr_expect_eq((long)p->head_groups * p->rows, 120);
    cr_expect_eq(p->release_dependent_early, 0);
    mlajit_plan_destroy(p);
}

/* The context reports the L2 its plans weigh the prefetch hint against: the
 * device's (a few MB at least on any GPU mlajit targets), 0 without one. */
Test(api, context_info_reports_the_l2_plans_use)
{
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    cr_assert_eq(mlajit_context_get_info(ctx, &info), MLAJIT_OK);
    if (info.has_device)
        cr_expect_geq(info.l2_bytes, 1 << 20, "%s: %lld bytes of L2", info.device_name, (long long)info.l2_bytes);
    else
        cr_expect_eq(info.l2_bytes, 0, "no device, no L2");
}

/* A context without a device says why (this suite's are made without one). */
Test(api, context_info_says_why_there_is_no_gpu)
{
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    cr_assert_eq(mlajit_context_get_info(ctx, &info), MLAJIT_OK);
    cr_expect_eq(info.has_device, 0);
    cr_expect(strstr(info.no_device_reason, "MLAJIT_CONTEXT_NO_DEVICE") != NULL, "'%s'", info.no_device_reason);
}

/* The L2 prefetches are evict-last only where the call's rows come to at least 1.5
 * times the L2 (measured on the H200's 50 MB: faster from 86 MB, slower at 43-48 MB,
 * whatever the walk per CTA). */
Test(api, planner_marks_prefetches_evict_last_when_the_rows_outgrow_l2)
{
    const int64_t l2 = 50LL << 20;
    cr_expect_eq(mlajit_prefetch_evict_last(l2 + l2 / 2, l2), 1);
    cr_expect_eq(mlajit_prefetch_evict_last(l2 + l2 / 2 - 1, l2), 0);
    cr_expect_eq(mlajit_prefetch_evict_last(l2, l2), 0);
    cr_expect_eq(mlajit_prefetch_evict_last(INT64_C(1) << 40, 0), 0, "no L2 known: the plain prefetch");
    static const struct {
        mlajit_model model;
        int h_q, batch, s_q, topk, extra_topk, evict_last;
        const char *why;
    } rows[] = {
        {MLAJIT_MODEL_V32, 128, 128, 1, 2048, 0, 1, "172 MB, 32 tiles per CTA"},
        {MLAJIT_MODEL_V32, 64, 128, 1, 512, 0, 0, "43 MB (measured 39.2 -> 38.3 us without)"},
        {MLAJIT_MODEL_DSV4, 64, 64, 2, 128, 512, 0, "48 MB, 10 tiles (45.5 -> 44.3 us without)"},
        {MLAJIT_MODEL_DSV4, 64, 128, 2, 128, 512, 1, "96 MB, the same 10 tiles (91.6 -> 89.5 us with)"},
        {MLAJIT_MODEL_V32, 128, 1, 1, 2048, 0, 0, "1.3 MB"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
        cr_assert_eq(mlajit_spec_init(&s, rows[i].model, rows[i].h_q, rows[i].model == MLAJIT_MODEL_DSV4 ? 256 : 64),
                     MLAJIT_OK);
        if (rows[i].extra_topk) s.extra_page_size = 64;
        mlajit_decode_shape shape = {.struct_size = sizeof shape,
                                     .batch = rows[i].batch, .s_q = rows[i].s_q, .topk = rows[i].topk,
                                     .extra_topk = rows[i].extra_topk};
        mlajit_plan *p = NULL;
        cr_assert_eq(mlajit_plan_create(ctx, &s, &shape, &p), MLAJIT_OK, "%s", mlajit_last_error());
        cr_expect_eq(p->prefetch_evict_last, rows[i].evict_last, "%s", rows[i].why);
        mlajit_plan_destroy(p);
    }
}

/* The combine stages its split rows in dynamic shared memory, a round of at most
 * layout.combine_staged_splits rows of d_v fp32 at a time: the plan asks for one
 * round's worth, and nothing without a combine. */
static int combine_smem_for(int topk, int splits)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init(&s, MLAJIT_MODEL_V32, 8, 64), MLAJIT_OK);
    mlajit_decode_shape shape = {.struct_size = sizeof shape, .batch = 1, .s_q = 1, .topk = topk, .num_splits = splits};
    mlajit_plan *p = NULL;
    cr_assert_eq(mlajit_plan_create(ctx, &s, &shape, &p), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_plan_num_splits(p), splits);
    cr_assert_eq(p->kernel->layout.combine_bytes_per_split, 512 * 4, "a V3.2 split row: 512 fp32");
    cr_assert_eq(p->kernel->layout.combine_staged_splits, 32);
    int bytes = p->combine_smem_bytes;
    mlajit_plan_destroy(p);
    return bytes;
}

Test(api, planner_sizes_the_combine_staging_to_one_round)
{
    cr_expect_eq(combine_smem_for(4096, 64), 32 * 2048, "64 splits: two rounds of 32");
    cr_expect_eq(combine_smem_for(2048, 32), 32 * 2048);
    cr_expect_eq(combine_smem_for(2048, 7), 7 * 2048, "fewer splits than a round: all of them");
    cr_expect_eq(combine_smem_for(2048, 1), 0, "no split, no combine");
}

/* auto's shape-dependent family: at most 32 heads with power-of-two scales
 * sm90-narrow on every walk; the wgmma kernels elsewhere, by walk; and auto's own
 * kernel when the walk's alternative cannot be had. */
static const char *plan_family(mlajit_context *c, mlajit_model model, int h_q, int batch, int topk, int splits,
                               char *buf, size_t len)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init(&s, model, h_q, 64), MLAJIT_OK);
    mlajit_decode_shape shape = {.struct_size = sizeof shape,
                                 .batch = batch, .s_q = 1, .topk = topk, .num_splits = splits};
    mlajit_plan *p = NULL;
    if (mlajit_plan_create(c, &s, &shape, &p) != MLAJIT_OK) {
        snprintf(buf, len, "error: %s", mlajit_last_error());
        return buf;
    }
    snprintf(buf, len, "%s", mlajit_plan_report(p)->spec);
    mlajit_plan_destroy(p);
    return buf;
}

/* What auto's plan of one shape should run: its kernel family (a fragment of the
 * spec string) and why. */
typedef struct plan_case {
    mlajit_model model;
    int h_q, batch, topk, splits;
    const char *family, *why;
} plan_case;

static void expect_plan_families(const plan_case *cases, size_t n)
{
    char b[256];
    for (size_t i = 0; i < n; i++) {
        const plan_case *c = &cases[i];
        cr_expect(strstr(plan_family(ctx, c->model, c->h_q, c->batch, c->topk, c->splits, b, sizeof b), c->family),
                  "h_q %d, b %d, topk %d, splits %d (%s): want %s, got %s", c->h_q, c->batch, c->topk, c->splits,
                  c->why, c->family, b);
    }
}

static const plan_case auto_cases[] = {
    /* at most 32 heads: sm90-narrow (arbitrary scales too); at 16 heads and
     * fewer with V3.2's rows, a walk of 16 tiles or more per CTA: sm90-narrow-long
     * (its third producer group); at 1-8 heads with V3.2's rows, 4 tiles or more:
     * sm90-narrow-scores */
    {MLAJIT_MODEL_V32, 16, 256, 2048, 0, ".hc16.sm90-narrow-long.sm_90a", "a long walk, unsplit"},
    {MLAJIT_MODEL_V32, 9, 256, 2048, 0, ".hc16.sm90-narrow-long.sm_90a", "a long walk at 9 heads, unsplit"},
    {MLAJIT_MODEL_V32, 8, 256, 2048, 0, ".hc8.sm90-narrow-scores.sm_90a", "a long walk at 8 heads, unsplit"},
    {MLAJIT_MODEL_V32, 8, 64, 2048, 0, ".hc8.sm90-narrow-scores.sm_90a", "8 heads, 2 splits of 16 tiles"},
    {MLAJIT_MODEL_V32, 4, 128, 2048, 0, ".hc8.sm90-narrow-scores.sm_90a", "a long walk at 4 heads"},
    {MLAJIT_MODEL_V32, 8, 128, 2048, 2, ".hc8.sm90-narrow-scores.sm_90a", "forced: 2 splits of 16 tiles"},
    {MLAJIT_MODEL_V32, 8, 128, 2048, 3, ".hc8.sm90-narrow-scores.sm_90a", "forced: 3 splits of 11 tiles"},
    {MLAJIT_MODEL_V32, 8, 128, 2048, 8, ".hc8.sm90-narrow-scores.sm_90a", "forced: 8 splits of 4 tiles"},
    {MLAJIT_MODEL_V32, 8, 128, 2048, 11, ".hc8.sm90-narrow.sm_90a", "forced: 11 splits of 3 tiles"},
    {MLAJIT_MODEL_V32, 8, 128, 2048, 16, ".hc8.sm90-narrow.sm_90a", "forced: 16 splits of 2 tiles"},
    {MLAJIT_MODEL_V32, 8, 8, 2048, 0, ".hc8.sm90-narrow.sm_90a", "b 8: 16 splits of 2 tiles"},
    {MLAJIT_MODEL_DSV4, 8, 128, 2048, 0, ".hc8.sm90-narrow.sm_90a", "DSV4's rows: no ring, no third group"},
    {MLAJIT_MODEL_V32, 16, 128, 2048, 0, ".hc16.sm90-narrow-long.sm_90a", "16 heads, b 128"},
    {MLAJIT_MODEL_V32, 16, 256, 2048, 2, ".hc16.sm90-narrow-long.sm_90a", "16 heads, 2 splits of 16 tiles"},
    {MLAJIT_MODEL_V32, 16, 128, 512, 0, ".hc16.sm90-narrow.sm_90a", "16 heads, 8 tiles"},
    {MLAJIT_MODEL_V32, 24, 128, 2048, 0, ".hc24.sm90-narrow.sm_90a", "24 heads: no room for the third group"},
    /* short walks: one row (many splits), a short topk, a forced split count */
    {MLAJIT_MODEL_V32, 16, 8, 2048, 0, ".hc16.sm90-narrow.sm_90a", "b 8: 16 splits, 128 CTAs"},
    {MLAJIT_MODEL_V32, 8, 128, 512, 0, ".hc8.sm90-narrow-scores.sm_90a", "topk 512 at 8 heads: 8 tiles"},
    {MLAJIT_MODEL_V32, 8, 128, 128, 0, ".hc8.sm90-narrow.sm_90a", "a short topk: 2 tiles"},
    {MLAJIT_MODEL_V32, 7, 128, 512, 0, ".hc8.sm90-narrow-scores.sm_90a", "7 heads: 8 tiles"},
    {MLAJIT_MODEL_V32, 1, 128, 2048, 0, ".hc8.sm90-narrow-scores.sm_90a", "1 head: 32 tiles"},
    {MLAJIT_MODEL_V32, 5, 128, 128, 0, ".hc8.sm90-narrow.sm_90a", "5 heads, a short topk: 2 tiles"},
    {MLAJIT_MODEL_V32, 8, 128, 2048, 64, ".hc8.sm90-narrow.sm_90a", "forced splits of one tile"},
    /* where the plan leaves half of the SMs idle, the heads in two groups */
    {MLAJIT_MODEL_V32, 16, 1, 2048, 0, ".hc8.sm90-narrow.sm_90a", "one row: 32 CTAs"},
    {MLAJIT_MODEL_V32, 32, 1, 2048, 0, ".hc16.sm90-narrow.sm_90a", "one row at 32 heads"},
    {MLAJIT_MODEL_V32, 20, 1, 2048, 0, ".hc16.sm90-narrow.sm_90a", "20 heads: 16 and 4"},
    {MLAJIT_MODEL_V32, 32, 64, 128, 0, ".hc16.sm90-narrow.sm_90a", "64 rows unsplit: 64 CTAs"},
    {MLAJIT_MODEL_V32, 32, 66, 128, 0, ".hc16.sm90-narrow.sm_90a", "66 rows: 132 CTAs in groups"},
    {MLAJIT_MODEL_V32, 32, 67, 128, 0, ".hc32.sm90-narrow.sm_90a", "67 rows: 134 would not fit"},
    {MLAJIT_MODEL_V32, 32, 128, 128, 0, ".hc32.sm90-narrow.sm_90a", "128 rows fill the SMs"},
    {MLAJIT_MODEL_V32, 32, 64, 512, 0, ".hc32.sm90-narrow.sm_90a", "2 splits fill them"},
    {MLAJIT_MODEL_V32, 32, 1, 2048, 2, ".hc16.sm90-narrow.sm_90a", "forced: 2 splits, 2 CTAs"},
    {MLAJIT_MODEL_DSV4, 16, 2, 640, 0, ".hc8.sm90-narrow.sm_90a", "DSV4, 2 rows of 10 splits"},
    {MLAJIT_MODEL_V32, 8, 1, 2048, 0, ".hc8.sm90-narrow.sm_90a", "8 heads: no smaller group"},
    {MLAJIT_MODEL_GLM_NSA, 16, 1, 2048, 0, ".hc8.sm90-narrow.sm_90a", "arbitrary scales: as V3.2, one row"},
    {MLAJIT_MODEL_GLM53_NOPE, 16, 1, 2048, 0, ".hc8.sm90-narrow.sm_90a", "no RoPE, arbitrary scales: one row"},
    /* 17-32 heads, DSV4's layout: sm90-narrow, h_q rounded up to 8 */
    {MLAJIT_MODEL_V32, 32, 128, 2048, 0, ".hc32.sm90-narrow.sm_90a", "32 heads"},
    {MLAJIT_MODEL_V32, 20, 128, 2048, 0, ".hc24.sm90-narrow.sm_90a", "20 heads"},
    {MLAJIT_MODEL_DSV4, 16, 128, 2048, 0, ".hc16.sm90-narrow.sm_90a", "DSV4's layout"},
    {MLAJIT_MODEL_GLM_NSA, 16, 128, 2048, 0, ".hc16.sm90-narrow-long.sm_90a", "arbitrary scales: as V3.2"},
    {MLAJIT_MODEL_GLM53_NOPE, 16, 64, 2048, 0, ".hc16.sm90-narrow-long.sm_90a", "GLM53_NOPE, b 64: as V3.2"},
    {MLAJIT_MODEL_GLM53_NOPE, 32, 128, 2048, 0, ".hc32.sm90-narrow.sm_90a", "GLM53_NOPE at 32 heads"},
    /* more heads: auto's wgmma kernel; arbitrary scales keep it (no head groups) */
    {MLAJIT_MODEL_GLM_NSA, 64, 8, 2048, 0, ".hc64.sm90.sm_90a", "arbitrary scales past 32 heads"},
    {MLAJIT_MODEL_GLM53_NOPE, 48, 1, 2048, 0, ".hc64.sm90.sm_90a", "arbitrary scales past 32 heads, one row"},
    {MLAJIT_MODEL_V32, 33, 128, 2048, 4, ".hc64.sm90.sm_90a", "33 heads, split"},
    {MLAJIT_MODEL_GLM_NSA, 128, 1, 2048, 0, ".hc64.sm90.sm_90a", "b 1, 32 splits of one tile keep the pair"},
    {MLAJIT_MODEL_GLM_NSA, 96, 2, 2048, 0, ".hc64.sm90.sm_90a", "96 heads pair too"},
    {MLAJIT_MODEL_V32, 128, 8, 2048, 32, ".hc64.sm90.sm_90a", "forced: 32 splits of one tile, 1024 CTAs "
                                                               "in head groups"},
    {MLAJIT_MODEL_V32, 128, 8, 2048, 0, ".sm90.sm_90a", "b 8: 8 splits of 4 tiles keep the pair (head groups "
                                                         "of 32: 8 tiles, 4 groups, 32 tile gathers)"},
    {MLAJIT_MODEL_V32, 128, 1, 2048, 2, ".sm90.sm_90a", "forced: 2 splits of 16 tiles"},
    {MLAJIT_MODEL_V32, 64, 128, 2048, 2, ".sm90.sm_90a", "64 heads: no pair to leave out"},
    {MLAJIT_MODEL_V32, 128, 128, 64, 0, ".sm90-staged.sm_90a", "one tile, no split: the short walk's kernel"},
    {MLAJIT_MODEL_V32, 64, 128, 128, 0, ".sm90-staged.sm_90a", "head groups of 32 would take 256 CTAs"},
    {MLAJIT_MODEL_V32, 64, 64, 2048, 0, ".hc64.sm90.sm_90a", "64 rows of 32 tiles in 2 groups: 64 gathers"},
    /* past 32 heads with power-of-two scales, small grids: sm90-narrow in head
     * groups of 32, or of 16 where that leaves half the SMs idle */
    {MLAJIT_MODEL_V32, 128, 1, 2048, 0, ".hc32.sm90-narrow.sm_90a", "b 1: 4 groups x 32 splits of one tile"},
    {MLAJIT_MODEL_V32, 96, 2, 2048, 0, ".hc32.sm90-narrow.sm_90a", "96 heads, b 2: 3 groups"},
    {MLAJIT_MODEL_V32, 64, 64, 512, 0, ".hc32.sm90-narrow.sm_90a", "64 rows of 8 tiles: 128 CTAs"},
    {MLAJIT_MODEL_V32, 64, 64, 128, 0, ".hc32.sm90-narrow.sm_90a", "64 rows of 2 tiles"},
    {MLAJIT_MODEL_V32, 64, 8, 2048, 0, ".hc32.sm90-narrow.sm_90a", "b 8: 8 splits of 4 tiles"},
    {MLAJIT_MODEL_V32, 64, 1, 2048, 0, ".hc16.sm90-narrow.sm_90a", "b 1: groups of 32 leave half the SMs idle"},
    {MLAJIT_MODEL_V32, 128, 1, 2048, 8, ".hc16.sm90-narrow.sm_90a", "forced: 8 splits, 32 CTAs in groups of 32"},
};

Test(api, auto_takes_narrow_or_sm90_by_heads_and_walk)
{
    expect_plan_families(auto_cases, sizeof auto_cases / sizeof auto_cases[0]);
}

/* mlajit_plan_describe answers, without compiling, what mlajit_plan_create
 * launches: the same kernel and split count on every shape of the cases above
 * (a context without a device plans for 132 SMs, describe's default), and the
 * grid it implies. */
Test(api, plan_describe_names_what_the_plan_launches)
{
    for (size_t i = 0; i < sizeof auto_cases / sizeof auto_cases[0]; i++) {
        const plan_case *c = &auto_cases[i];
        mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
        cr_assert_eq(mlajit_spec_init(&s, c->model, c->h_q, 64), MLAJIT_OK);
        mlajit_decode_shape shape = {.struct_size = sizeof shape,
                                     .batch = c->batch, .s_q = 1, .topk = c->topk, .num_splits = c->splits};
        mlajit_plan *p = NULL;
        cr_assert_eq(mlajit_plan_create(ctx, &s, &shape, &p), MLAJIT_OK, "case %zu: %s", i, mlajit_last_error());
        mlajit_plan_outline o = MLAJIT_PLAN_OUTLINE_INIT;
        cr_assert_eq(mlajit_plan_describe(&s, &shape, 0, &o), MLAJIT_OK, "case %zu: %s", i, mlajit_last_error());
        cr_expect_str_eq(o.kernel, mlajit_plan_report(p)->spec, "case %zu (%s)", i, c->why);
        mlajit_kernel_spec named = MLAJIT_KERNEL_SPEC_INIT;
        cr_assert_eq(mlajit_spec_parse(o.kernel, &named), MLAJIT_OK, "%s", mlajit_last_error());
        cr_expect(named.variant == o.variant && named.tile == o.tile && named.heads_per_cta == o.heads_per_cta,
                  "case %zu: the outline's choices are its kernel's (%s)", i, o.kernel);
        cr_expect_eq(o.num_splits, mlajit_plan_num_splits(p), "case %zu (%s)", i, c->why);
        cr_expect_eq(o.rows, c->batch);
        const int heads_per_cta = o.heads_per_cta;
        cr_expect_eq(o.head_groups, (c->h_q + heads_per_cta - 1) / heads_per_cta, "case %zu", i);
        cr_expect_eq(o.tiles_per_split, ((c->topk + 63) / 64 + o.num_splits - 1) / o.num_splits, "case %zu", i);
        mlajit_plan_destroy(p);
    }
    /* V3.2 h64 b 1: 4 groups of 16 x 32 splits of one tile on 132 SMs; on 64 SMs
     * the groups of 32 would take all of them, so groups of 32 */
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init(&s, MLAJIT_MODEL_V32, 64, 64), MLAJIT_OK);
    mlajit_decode_shape one_row = {.struct_size = sizeof one_row, .batch = 1, .s_q = 1, .topk = 2048};
    mlajit_plan_outline o = MLAJIT_PLAN_OUTLINE_INIT;
    cr_assert_eq(mlajit_plan_describe(&s, &one_row, 0, &o), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(o.variant, MLAJIT_VARIANT_SM90_NARROW);
    cr_expect_eq(o.heads_per_cta, 16);
    cr_expect_eq(o.head_groups, 4);
    cr_expect_eq(o.num_splits, 32);
    cr_expect_eq(o.tiles_per_split, 1);
    cr_assert_eq(mlajit_plan_describe(&s, &one_row, 64, &o), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(o.heads_per_cta, 32, "64 SMs: 2 groups x 32 splits fill them");
    /* a spec that fixes its kernel keeps it; another arch has no alternatives */
    s.variant = MLAJIT_VARIANT_SM90;
    cr_assert_eq(mlajit_plan_describe(&s, &one_row, 0, &o), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(o.variant, MLAJIT_VARIANT_SM90);
    s.variant = MLAJIT_VARIANT_AUTO;
    strcpy(s.arch, "sm_80");
    cr_assert_eq(mlajit_plan_describe(&s, &one_row, 0, &o), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(o.variant, MLAJIT_VARIANT_PORTABLE);
}

/* Bad input to mlajit_plan_describe: a status naming the argument, *out untouched. */
/* The split count counts what a CTA costs beyond its tiles, more with more
 * heads: at 64 heads per CTA (v32 h49 b 46 s_q 3 topk 1834, 138 CTAs a split on
 * 132 SMs) 3 splits, where a tile per CTA chose 5 and the sweep measured 5 at
 * 11.5% behind the best (2); at 16 heads per CTA the same walk still splits into
 * more. */
Test(api, planner_split_count_weighs_a_ctas_own_cost_by_its_heads)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init(&s, MLAJIT_MODEL_V32, 49, 3), MLAJIT_OK);
    s.variant = MLAJIT_VARIANT_SM90;
    mlajit_decode_shape shape = {.struct_size = sizeof shape, .batch = 46, .s_q = 3, .topk = 1834};
    mlajit_plan_outline o = MLAJIT_PLAN_OUTLINE_INIT;
    cr_assert_eq(mlajit_plan_describe(&s, &shape, 132, &o), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(o.heads_per_cta, 64);
    cr_expect_eq(o.num_splits, 3, "64 heads a CTA: %d splits", o.num_splits);
    /* 16 heads a CTA (4 groups of 16 at 64 heads, b 8): 32 CTAs a split, a walk of 29 tiles */
    cr_assert_eq(mlajit_spec_init(&s, MLAJIT_MODEL_V32, 64, 3), MLAJIT_OK);
    s.variant = MLAJIT_VARIANT_SM90_NARROW;
    s.heads_per_cta = 16;
    shape.batch = 8;
    shape.s_q = 1;
    cr_assert_eq(mlajit_plan_describe(&s, &shape, 132, &o), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(o.head_groups, 4);
    cr_expect_gt(o.num_splits, 3, "16 heads a CTA, 32 CTAs a split: %d splits", o.num_splits);
}

/* Past 32 heads, auto's plan runs heads in groups of 32 where that grid fits one
 * wave and a row-split's tiles summed over the groups are at most 24 (v32 h125
 * b 17 topk 333: 4 groups x 6 tiles, measured 4% ahead of sm90), not at 32 (topk
 * 512: 4 x 8). */
Test(api, planner_takes_head_groups_up_to_24_summed_tiles)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init(&s, MLAJIT_MODEL_V32, 125, 7), MLAJIT_OK);
    mlajit_decode_shape shape = {.struct_size = sizeof shape, .batch = 17, .s_q = 1, .topk = 333};
    mlajit_plan_outline o = MLAJIT_PLAN_OUTLINE_INIT;
    cr_assert_eq(mlajit_plan_describe(&s, &shape, 132, &o), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(o.variant, MLAJIT_VARIANT_SM90_NARROW, "%s", o.kernel);
    cr_expect_eq(o.heads_per_cta, 32);
    cr_expect_eq(o.num_splits, 1);
    shape.topk = 512;
    cr_assert_eq(mlajit_plan_describe(&s, &shape, 132, &o), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(o.heads_per_cta, 64, "32 summed tiles: %s", o.kernel);
}

Test(bad_input, plan_describe)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init(&s, MLAJIT_MODEL_V32, 16, 64), MLAJIT_OK);
    mlajit_decode_shape shape = {.struct_size = sizeof shape, .batch = 2, .s_q = 1, .topk = 512};
    mlajit_plan_outline o = MLAJIT_PLAN_OUTLINE_INIT, before = MLAJIT_PLAN_OUTLINE_INIT;
    memset(&o, 0x5a, sizeof o);
    o.struct_size = sizeof o;
    before = o;
    cr_expect_eq(mlajit_plan_describe(NULL, &shape, 0, &o), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "spec") != NULL, "%s", mlajit_last_error());
    cr_expect_eq(mlajit_plan_describe(&s, NULL, 0, &o), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "shape") != NULL, "%s", mlajit_last_error());
    cr_expect_eq(mlajit_plan_describe(&s, &shape, 0, NULL), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect_eq(mlajit_plan_describe(&s, &shape, -1, &o), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "sm_count = -1") != NULL, "%s", mlajit_last_error());
    shape.batch = 65537;
    cr_expect_eq(mlajit_plan_describe(&s, &shape, 0, &o), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "shape.batch = 65537") != NULL, "%s", mlajit_last_error());
    shape.batch = 2;
    s.h_q = 129;
    cr_expect_eq(mlajit_plan_describe(&s, &shape, 0, &o), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "spec.h_q = 129") != NULL, "%s", mlajit_last_error());
    cr_expect_eq(memcmp(&o, &before, sizeof o), 0, "nothing written on an error");
}

Test(api, auto_keeps_its_kernel_when_the_walks_one_cannot_be_had)
{
    char dir[64] = "/tmp/mlajit-walk-XXXXXX", b[256];
    cr_assert_not_null(mkdtemp(dir));
    mlajit_context *jit = NULL, *no_jit = NULL;
    mlajit_context_options o = {.struct_size = sizeof o, .cache_dir = dir, .flags = MLAJIT_CONTEXT_NO_DEVICE};
    cr_assert_eq(mlajit_context_create(&o, &jit), MLAJIT_OK, "%s", mlajit_last_error());
    o.flags |= MLAJIT_CONTEXT_NO_JIT;
    cr_assert_eq(mlajit_context_create(&o, &no_jit), MLAJIT_OK, "%s", mlajit_last_error());
    /* only auto's own kernel (sm90, which splits b 1) is in the cache: an unsplit
     * walk (sm90-staged's) without JIT keeps it */
    cr_expect(strstr(plan_family(jit, MLAJIT_MODEL_V32, 64, 128, 2048, 2, b, sizeof b), ".hc64.sm90.sm_90a"), "%s",
              b);
    cr_expect(strstr(plan_family(no_jit, MLAJIT_MODEL_V32, 64, 128, 2048, 0, b, sizeof b), ".hc64.sm90.sm_90a"), "%s",
              b);
    /* once the sm90-staged kernel is cached, the same context takes it */
    cr_expect(strstr(plan_family(jit, MLAJIT_MODEL_V32, 64, 128, 2048, 0, b, sizeof b), ".sm90-staged."), "%s", b);
    mlajit_context_destroy(no_jit);
    o.flags = MLAJIT_CONTEXT_NO_DEVICE | MLAJIT_CONTEXT_NO_JIT;
    cr_assert_eq(mlajit_context_create(&o, &no_jit), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect(strstr(plan_family(no_jit, MLAJIT_MODEL_V32, 64, 128, 2048, 0, b, sizeof b), ".sm90-staged."), "%s", b);
    mlajit_context_destroy(no_jit);
    mlajit_context_destroy(jit);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}
