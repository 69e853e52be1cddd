/* GPU: every golden case and a sweep of shapes through the library, against the
 * fp64 reference under SPEC.md's bar. Skipped, saying why, without a GPU. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bad_decode_args.h"
#include "codegen/codegen.h"
#include "harness/harness.h"
#include "mlajit.h"

static mlajit_context *ctx;
static char cache_dir[256];

static void teardown(void);

static void setup(void)
{
    snprintf(cache_dir, sizeof cache_dir, "/tmp/mlajit-gpu-XXXXXX");
    cr_assert_not_null(mkdtemp(cache_dir));
    mlajit_context_options o = {.struct_size = sizeof o, .cache_dir = cache_dir};
    cr_assert_eq(mlajit_context_create(&o, &ctx), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    if (!info.has_device) {
        teardown(); /* a skipped test's fini does not run */
        cr_skip_test("no GPU on this machine (no CUDA driver or device); GPU suites run on the H200 host");
    }
}

static void teardown(void)
{
    mlajit_context_destroy(ctx);
    ctx = NULL;
    if (!cache_dir[0])
        return;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache_dir);
    cr_expect_eq(system(cmd), 0);
    cache_dir[0] = '\0';
}

TestSuite(gpu, .init = setup, .fini = teardown, .timeout = 1200);

static void check_case(const mlajit_case *c, const mlajit_gpu_run_options *opts, const char *label)
{
    mlajit_gpu_result res;
    int rc = mlajit_case_run_gpu(ctx, c, opts, &res);
    cr_assert_eq(rc, MLAJIT_OK, "%s: %s", label, mlajit_last_error());
    size_t n_lse = (size_t)c->b * c->s_q * c->h_q;
    mlajit_compare_result r;
    mlajit_compare(res.out, c->expected_out, n_lse * mlajit_model_describe(c->model)->d_v, res.lse, c->expected_lse,
                   n_lse, &r);
    cr_expect(r.pass, "%s [%s, %d splits]: max|err| %.3e cos %.7f out violations %lld lse max|err| %.3e violations %lld",
              label, res.report.spec, res.num_splits, r.out_max_abs_err, r.out_cosine, (long long)r.out_violations,
              r.lse_max_abs_err, (long long)r.lse_violations);
    mlajit_gpu_result_free(&res);
}

#include "golden_cases.h"

/* Every golden case found (golden_cases.h: the full set where it is here, and
 * tests/golden's subset) of the models in `models` (a bit per mlajit_model; 0:
 * all) with at most max_heads heads (0: any); `expected` of them with the full
 * set, at least one without it. */
static void for_each_golden_where(const mlajit_gpu_run_options *opts, const char *variant, unsigned models,
                                  int max_heads, int expected)
{
    static case_list l; /* large: off the stack */
    list_golden_cases(&l);
    int n = 0;
    for (int k = 0; k < l.count; k++) {
        mlajit_case c;
        cr_assert_eq(mlajit_case_load(l.cases[k].path, &c), MLAJIT_OK, "%s: %s", l.cases[k].path,
                     mlajit_last_error());
        if ((models && !(models & (1u << c.model))) || (max_heads && c.h_q > max_heads)) {
            mlajit_case_free(&c);
            continue;
        }
        char label[1200];
        snprintf(label, sizeof label, "%s (%s)", l.cases[k].name, variant);
        check_case(&c, opts, label);
        mlajit_case_free(&c);
        n++;
    }
    cr_expect_geq(n, golden_expected(&l, expected), "expected %d golden cases, found %d (full set: %s)",
                  golden_expected(&l, expected), n, l.full_dir[0] ? l.full_dir : l.why_no_full);
}

static void for_each_golden(const mlajit_gpu_run_options *opts, const char *variant)
{
    for_each_golden_where(opts, variant, 0, 0, GOLDEN_FULL_SET_CASES);
}

Test(gpu, golden_cases)
{
    for_each_golden(NULL, "planner's choice");
}

Test(gpu, golden_cases_split_strided)
{
    /* the portable family (auto picks sm90 on sm_90a; sm90_golden_cases has its split run) */
    mlajit_gpu_run_options o = {.variant = MLAJIT_VARIANT_PORTABLE, .num_splits = 3, .lse_head_major = 1,
                                .pad_strides = 1};
    for_each_golden(&o, "portable, 3 splits, lse [b,h,s], padded strides");
}

Test(gpu, golden_cases_small_tiles)
{
    mlajit_gpu_run_options o = {.tile = 32, .heads_per_cta = 16, .num_splits = 1};
    for_each_golden(&o, "tile 32, 16 heads per CTA, no split");
}

static void synth_check(const mlajit_synth_params *p, const mlajit_gpu_run_options *opts, const char *label)
{
    mlajit_case c;
    cr_assert_eq(mlajit_case_synthesize(p, &c), MLAJIT_OK, "%s: %s", label, mlajit_last_error());
    cr_assert_eq(mlajit_case_compute_expected(&c), MLAJIT_OK, "%s: %s", label, mlajit_last_error());
    check_case(&c, opts, label);
    mlajit_case_free(&c);
}

/* `dsv4_as`: the model that takes DSV4's rows (DSV4 itself, or V3.2 for a
 * variant that runs only V3.2's rows). */
static void sweep_models_upto(const mlajit_gpu_run_options *opts, const char *variant, mlajit_model dsv4_as,
                              int max_heads)
{
    const int heads[] = {1, 2, 3, 8, 16, 24, 32, 48, 64, 80, 128};
    const int pages[] = {1, 2, 61, 64, 256};
    const int topks[] = {1, 37, 64, 133, 200, 511, 1152};
    int k = 0;
    for (size_t hi = 0; hi < sizeof heads / sizeof heads[0] && heads[hi] <= max_heads; hi++)
        for (size_t pi = 0; pi < sizeof pages / sizeof pages[0]; pi++, k++) {
            int topk = topks[k % 7];
            int dual = k % 3 == 2;
            mlajit_synth_params p = {
                .model = k % 2 ? dsv4_as : MLAJIT_MODEL_V32,
                .b = 1 + k % 3, .s_q = 1 + k % 2, .h_q = heads[hi],
                .topk = topk, .page_size = pages[pi], .seqlen = topk * 2 + 50,
                .extra_topk = dual ? 1 + (k * 37) % 300 : 0, .extra_page_size = dual ? pages[(pi + 2) % 5] : 0,
                .extra_seqlen = dual ? 700 : 0,
                .with_sink = k % 4 == 1, .with_topk_length = k % 5 == 3, .with_extra_topk_length = dual && k % 2,
                .invalid_fraction = k % 3 == 0 ? 0.1 : 0.0, .page_stride_pad = k % 4 == 3 ? 32 : 0,
                .seed = 7000 + (uint64_t)k,
            };
            char label[200];
            snprintf(label, sizeof label, "sweep %d (%s): %s h%d p%d topk %d extra %d/%d b%d s_q%d", k, variant,
                     mlajit_model_describe(p.model)->name, p.h_q, p.page_size, p.topk, p.extra_topk,
                     p.extra_page_size, p.b, p.s_q);
            synth_check(&p, opts, label);
        }
}

static void sweep_heads_pages_ragged_topk(const mlajit_gpu_run_options *opts, const char *variant)
{
    sweep_models_upto(opts, variant, MLAJIT_MODEL_DSV4, 128);
}

Test(gpu, sweep_heads_pages_ragged_topk)
{
    mlajit_gpu_run_options o = {.variant = MLAJIT_VARIANT_PORTABLE};
    sweep_heads_pages_ragged_topk(&o, "portable");
}

Test(gpu, glm_nsa_arbitrary_scales)
{
    mlajit_synth_params p = {.model = MLAJIT_MODEL_GLM_NSA, .b = 2, .s_q = 1, .h_q = 32, .topk = 300,
                             .page_size = 64, .seqlen = 1000, .seed = 99};
    synth_check(&p, NULL, "glm_nsa h32");
}

Test(gpu, rows_with_nothing_to_attend)
{
    mlajit_synth_params p = {.model = MLAJIT_MODEL_V32, .b = 3, .s_q = 2, .h_q = 16, .topk = 100,
                             .page_size = 64, .seqlen = 400, .invalid_fraction = 1.0, .with_sink = 1, .seed = 5};
    synth_check(&p, NULL, "every index invalid");
    mlajit_gpu_run_options split = {.num_splits = 2};
    synth_check(&p, &split, "every index invalid, split");
    mlajit_gpu_run_options portable = {.variant = MLAJIT_VARIANT_PORTABLE, .num_splits = 2};
    synth_check(&p, &portable, "every index invalid, portable, split");
}

Test(gpu, empty_batch_is_a_no_op)
{
    mlajit_synth_params p = {.model = MLAJIT_MODEL_DSV4, .b = 0, .s_q = 1, .h_q = 8, .topk = 64,
                             .page_size = 64, .seqlen = 128, .seed = 3};
    mlajit_case c;
    cr_assert_eq(mlajit_case_synthesize(&p, &c), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_gpu_result res;
    cr_expect_eq(mlajit_case_run_gpu(ctx, &c, NULL, &res), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_gpu_result_free(&res);
    mlajit_case_free(&c);
}

/* The geometry engines send (MLAJIT_MAX_ROWS, MLAJIT_MAX_SQ): a mixed batch of
 * T = 32768 tokens as (T, 1) rows, each its own sequence, and speculative
 * decoding's s_q 64; then the most rows, 65536, over fewer sequences' worth of
 * candidates. Few heads and candidates keep the fp64 reference to seconds. */
Test(gpu, engine_geometry_many_rows_and_long_s_q, .timeout = 600)
{
    const mlajit_synth_params shapes[] = {
        {.model = MLAJIT_MODEL_V32, .b = 32768, .s_q = 1, .h_q = 8, .topk = 16, .page_size = 16, .seqlen = 16,
         .invalid_fraction = 0.1, .seed = 32768},
        {.model = MLAJIT_MODEL_V32, .b = 16, .s_q = MLAJIT_MAX_SQ, .h_q = 16, .topk = 256, .page_size = 64,
         .seqlen = 1024, .with_topk_length = 1, .seed = 64},
        {.model = MLAJIT_MODEL_DSV4, .b = MLAJIT_MAX_ROWS / 4, .s_q = 4, .h_q = 8, .topk = 8, .page_size = 64,
         .seqlen = 64, .with_sink = 1, .seed = 65536},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        char label[96];
        snprintf(label, sizeof label, "%s b %d s_q %d h_q %d topk %d", mlajit_model_describe(shapes[i].model)->name,
                 shapes[i].b, shapes[i].s_q, shapes[i].h_q, shapes[i].topk);
        synth_check(&shapes[i], NULL, label);
    }
}

Test(gpu, large_topk_many_splits)
{
    mlajit_synth_params p = {.model = MLAJIT_MODEL_V32, .b = 1, .s_q = 1, .h_q = 128, .topk = 16384,
                             .page_size = 64, .seqlen = 40000, .seed = 11};
    synth_check(&p, NULL, "topk 16384");
}

/* The combine at the split counts it must handle: 64 (the most: one lse per
 * thread), 13 and 11 (the last group of partial rows not full), 2; the rows'
 * topk lengths leave one row nothing at all and empty the last splits of others
 * (lse -inf, their partial rows never written). */
Test(gpu, combine_split_counts, .timeout = 180)
{
    /* Synthesized with every candidate's row written, then given lengths (the
     * synthesizer leaves rows past its own random lengths poisoned). */
    mlajit_synth_params p = {.model = MLAJIT_MODEL_V32, .b = 4, .s_q = 1, .h_q = 16, .topk = 4096,
                             .page_size = 64, .seqlen = 6000, .with_sink = 1, .seed = 21};
    mlajit_case c;
    cr_assert_eq(mlajit_case_synthesize(&p, &c), MLAJIT_OK, "%s", mlajit_last_error());
    static const int32_t lengths[] = {0, 100, 4096, 2500};  /* nothing; a few candidates; all; most */
    c.topk_length = malloc(sizeof lengths);                   /* freed by mlajit_case_free */
    cr_assert_not_null(c.topk_length);
    memcpy(c.topk_length, lengths, sizeof lengths);
    cr_assert_eq(mlajit_case_compute_expected(&c), MLAJIT_OK, "%s", mlajit_last_error());
    const size_t n_lse = (size_t)c.b * c.s_q * c.h_q;
    static const int splits[] = {64, 13, 11, 2};
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
        mlajit_gpu_run_options o = {.num_splits = splits[i]};
        mlajit_gpu_result res;
        cr_assert_eq(mlajit_case_run_gpu(ctx, &c, &o, &res), MLAJIT_OK, "%d splits: %s", splits[i],
                     mlajit_last_error());
        cr_expect_eq(res.num_splits, splits[i], "the plan ran %d splits, not %d", res.num_splits, splits[i]);
        mlajit_compare_result r;
        mlajit_compare(res.out, c.expected_out, n_lse * mlajit_model_describe(c.model)->d_v, res.lse,
                       c.expected_lse, n_lse, &r);
        cr_expect(r.pass, "%d splits [%s]: max|err| %.3e out violations %lld lse violations %lld", splits[i],
                  res.report.spec, r.out_max_abs_err, (long long)r.out_violations, (long long)r.lse_violations);
        mlajit_gpu_result_free(&res);
    }
    mlajit_case_free(&c);
}

/* Every row of the API's bad-argument table (bad_decode_args.h) with real device
 * buffers: decode refuses with the row's message, and out and lse keep their
 * poison; then a valid call does write them (so the check can fail). */
Test(gpu, bad_arguments_leave_out_untouched)
{
    mlajit_synth_params p = {
        .model = BAD_ARGS_MODEL, .b = BAD_ARGS_BATCH, .s_q = BAD_ARGS_SQ, .h_q = BAD_ARGS_HEADS,
        .topk = BAD_ARGS_TOPK, .extra_topk = BAD_ARGS_EXTRA_TOPK, .page_size = BAD_ARGS_PAGE,
        .extra_page_size = BAD_ARGS_EXTRA_PAGE, .seqlen = 300, .extra_seqlen = 600, .with_sink = 1,
        .with_topk_length = 1, .with_extra_topk_length = 1, .seed = 404,
    };
    mlajit_case c;
    cr_assert_eq(mlajit_case_synthesize(&p, &c), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_kernel_spec spec = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_decode_shape shape = MLAJIT_DECODE_SHAPE_INIT;
    mlajit_case_spec(&c, &spec);
    mlajit_case_shape(&c, &shape);
    shape.num_splits = BAD_ARGS_SPLITS;
    mlajit_plan *plan;
    cr_assert_eq(mlajit_plan_create(ctx, &spec, &shape, &plan), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_device_case dc;
    cr_assert_eq(mlajit_device_case_upload(ctx, &c, NULL, &dc), MLAJIT_OK, "%s", mlajit_last_error());
    size_t ws = mlajit_plan_workspace_size(plan);
    cr_assert_gt(ws, 0u, "the table has workspace rows: the plan must split");
    cr_assert_eq(mlajit_device_case_alloc(&dc, ws, &dc.args.workspace), MLAJIT_OK, "%s", mlajit_last_error());
    dc.args.workspace_size = ws;

    const size_t rows = (size_t)c.b * c.s_q, n_lse = rows * c.h_q, n_out = n_lse * BAD_ARGS_DV;
    float *out = malloc(n_out * sizeof *out), *lse = malloc(n_lse * sizeof *lse);
    cr_assert(out && lse);
    for (size_t r = 0; r < BAD_DECODE_ARG_COUNT; r++) {
        const bad_decode_arg *bad = &bad_decode_args[r];
        mlajit_decode_args a = dc.args;
        bad->mutate(&a);
        int rc = mlajit_decode(plan, &a, NULL);
        cr_expect_eq(rc, MLAJIT_ERR_INVALID_ARGUMENT, "%s: got %d: %s", bad->name, rc, mlajit_last_error());
        cr_expect(strstr(mlajit_last_error(), bad->word) != NULL, "%s: '%s' should name '%s'", bad->name,
                  mlajit_last_error(), bad->word);
        cr_assert_eq(mlajit_device_case_download(&dc, &c, NULL, rows, out, lse), MLAJIT_OK, "%s", mlajit_last_error());
        size_t touched = 0;
        for (size_t k = 0; k < n_out; k++) {
            uint32_t bits;
            memcpy(&bits, &out[k], 4);
            touched += bits != 0xFFFF0000u; /* the bf16 poison 0xFFFF, widened */
        }
        for (size_t k = 0; k < n_lse; k++) {
            uint32_t bits;
            memcpy(&bits, &lse[k], 4);
            touched += bits != 0xFFFFFFFFu;
        }
        cr_expect_eq(touched, 0u, "%s: a refused call wrote %zu elements of out / lse", bad->name, touched);
    }
    cr_expect_eq(mlajit_decode(plan, &dc.args, NULL), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_device_case_download(&dc, &c, NULL, rows, out, lse), MLAJIT_OK, "%s", mlajit_last_error());
    uint32_t first;
    memcpy(&first, &lse[0], 4);
    cr_expect_neq(first, 0xFFFFFFFFu, "the valid call writes lse");
    free(out);
    free(lse);
    mlajit_device_case_free(&dc);
    mlajit_plan_destroy(plan);
    mlajit_case_free(&c);
}

/* Every fp8 code times every scale the formats allow (as far as the products stay
 * finite), through the kernel's dequantizer, bit for bit against the host's: one
 * row per cache token, topk 1 and q = 0, so softmax gives that token weight 1 and
 * out is its V row, exact. Covers the power-of-two fast path (scales up to 2^7),
 * the exact path it falls back to (larger, zero, subnormal and non-power-of-two
 * scales) and subnormal codes and products. */
static void check_dequant_exhaustive(mlajit_model model, int code_offset, int h_q, const mlajit_gpu_run_options *opts)
{
    const mlajit_model_desc *d = mlajit_model_describe(model);
    /* scales, as fp32 bits or ue8m0 bytes; 448 * scale must stay below 2^128 */
    uint32_t scales[300];
    int n = 0;
    if (d->scale_format == MLAJIT_SCALE_UE8M0) {
        for (uint32_t e = 0; e <= 246; e++) scales[n++] = e;
    } else {
        for (uint32_t e = 1; e <= 246; e++) scales[n++] = e << 23;  /* 2^-126 .. 2^119 */
        const float odd[] = {0.0f, 1.5f, 0.3f, 3e-39f, 1e-45f, 7.0e-3f, 123.456f};
        for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) memcpy(&scales[n++], &odd[i], 4);
    }
    int tokens = (n + d->num_scales - 1) / d->num_scales;
    mlajit_synth_params p = {.model = model, .b = tokens, .s_q = 1, .h_q = h_q, .topk = 1,
                             .page_size = 64, .seqlen = 64, .seed = 11};
    mlajit_case c;
    cr_assert_eq(mlajit_case_synthesize(&p, &c), MLAJIT_OK, "%s", mlajit_last_error());
    memset(c.q, 0, (size_t)c.b * c.h_q * d->d_qk * 2);
    int scale_off = d->d_nope, rope_off = d->d_nope + (d->scale_place == MLAJIT_SCALES_INLINE ? 4 * d->num_scales : 0);
    for (int r = 0; r < tokens; r++) {
        uint8_t *page = c.kv.bytes + (int64_t)r * c.kv.page_stride;
        uint8_t *row = page; /* token 0 of page r */
        for (int k = 0; k < d->d_nope; k++) {
            uint8_t code = (uint8_t)(k + r * 7 + code_offset);
            row[k] = (code & 0x7f) == 0x7f ? 0 : code; /* no NaN codes */
        }
        memset(row + rope_off, 0, (size_t)d->d_rope * 2);
        for (int s = 0; s < d->num_scales; s++) {
            uint32_t v = scales[(r * d->num_scales + s) % n];
            if (d->scale_place == MLAJIT_SCALES_INLINE)
                memcpy(row + scale_off + 4 * s, &v, 4);
            else
                page[(int64_t)c.kv.page_size * d->row_bytes + s] = (uint8_t)v;
        }
        c.indices[r] = r * c.kv.page_size;
    }
    mlajit_gpu_result res;
    cr_assert_eq(mlajit_case_run_gpu(ctx, &c, opts, &res), MLAJIT_OK, "%s", mlajit_last_error());
    float *want = malloc((size_t)d->d_qk * sizeof(float));
    int64_t mismatches = 0;
    for (int r = 0; r < tokens; r++) {
        cr_assert_eq(mlajit_dequantize_token(model, c.kv.bytes + (int64_t)r * c.kv.page_stride, c.kv.page_size, 0, want),
                     MLAJIT_OK);
        for (int h = 0; h < c.h_q; h++)
            for (int k = 0; k < d->d_v; k++) {
                float got = res.out[((int64_t)r * c.h_q + h) * d->d_v + k];
                if (!(got == want[k]) && mismatches++ < 5)
                    cr_log_error("%s token %d head %d dim %d: code 0x%02x scale bits 0x%08x: kernel %a, host %a",
                                 d->name, r, h, k, (c.kv.bytes + (int64_t)r * c.kv.page_stride)[k],
                                 scales[(r * d->num_scales + k / d->quant_tile) % n], got, want[k]);
            }
    }
    cr_expect_eq(mismatches, 0, "%s: %lld dequantized values differ from the host's", d->name, (long long)mismatches);
    free(want);
    mlajit_gpu_result_free(&res);
    mlajit_case_free(&c);
}

/* Every code and scale through `variant`'s dequantization, for each model in the
 * bit set `models`: code offsets 0, 64, 128, 192, so every code meets every scale,
 * DSV4's 64-dim quantization blocks included. */
static void dequant_every_code_and_scale_of(mlajit_variant variant, unsigned models)
{
    mlajit_gpu_run_options o = {.variant = variant};
    static const mlajit_model all[] = {MLAJIT_MODEL_V32, MLAJIT_MODEL_DSV4, MLAJIT_MODEL_GLM_NSA};
    for (int offset = 0; offset < 4; offset++)
        for (size_t m = 0; m < sizeof all / sizeof all[0]; m++)
            if (models & (1u << all[m])) check_dequant_exhaustive(all[m], offset * 64, 16, &o);
}

#define ALL_MODELS ((1u << MLAJIT_MODEL_V32) | (1u << MLAJIT_MODEL_DSV4) | (1u << MLAJIT_MODEL_GLM_NSA))

/* The portable family; each other family has its own test. */
Test(gpu, dequant_every_code_and_scale)
{
    dequant_every_code_and_scale_of(MLAJIT_VARIANT_PORTABLE, ALL_MODELS);
}

/* The wgmma family (MLAJIT_VARIANT_SM90, auto's choice on sm_90a) against the same oracles: every
 * golden case (planner's splits, then 3 splits with strided lse and padded rows),
 * the shape sweep, and the exhaustive dequantization. sm_90a devices only. */
static void require_sm90a(void)
{
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    if (strcmp(info.device_arch, "sm_90a") != 0) {
        teardown();
        cr_skip_test("the sm90 variant needs an sm_90a device; this one is %s", info.device_arch);
    }
}

/* Every golden case with `variant` as the planner runs it, then with [b,h,s] lse and
 * padded strides, and `splits` splits (0 for a variant that never splits). */
static void golden_plain_and_padded(mlajit_variant variant, int splits)
{
    const char *name = mlajit_variant_name(variant);
    mlajit_gpu_run_options o = {.variant = variant};
    for_each_golden(&o, name);
    mlajit_gpu_run_options padded = {.variant = variant, .num_splits = splits, .lse_head_major = 1, .pad_strides = 1};
    char label[128];
    snprintf(label, sizeof label, "%s, %d splits, lse [b,h,s], padded strides", name, splits);
    for_each_golden(&padded, label);
}

/* The shape sweep with one sm90-family variant (sm_90a devices only). */
static void sweep_sm90_variant(mlajit_variant variant)
{
    require_sm90a();
    mlajit_gpu_run_options o = {.variant = variant};
    sweep_heads_pages_ragged_topk(&o, mlajit_variant_name(variant));
}

/* Short timeouts: a synchronization bug in a new kernel shows up as a hang; fail in
 * minutes instead of spending the suite's 20. */
Test(gpu, sm90_golden_cases, .timeout = 180)
{
    require_sm90a();
    golden_plain_and_padded(MLAJIT_VARIANT_SM90, 3);
}

Test(gpu, sm90_sweep_heads_pages_ragged_topk, .timeout = 300)
{
    sweep_sm90_variant(MLAJIT_VARIANT_SM90);
}

/* ... and at 128 heads, the CTA pair, whose producer takes the exact product's
 * converted form (cvt.rn.f16x2.e4m3x2, the templates' layouts edition) for
 * arbitrary fp32 scales: the same bits as the host's dequantizer. */
Test(gpu, sm90_dequant_every_code_and_scale, .timeout = 240)
{
    require_sm90a();
    dequant_every_code_and_scale_of(MLAJIT_VARIANT_SM90, ALL_MODELS);
    mlajit_gpu_run_options o = {.variant = MLAJIT_VARIANT_SM90};
    for (int offset = 0; offset < 4; offset++) check_dequant_exhaustive(MLAJIT_MODEL_GLM_NSA, offset * 64, 128, &o);
}

/* sm90-staged (the sm90 kernel with its output rows staged through shared memory;
 * it never splits) against the same oracles: every golden case, with padded
 * strides too (the rows are written back 16 bytes per lane at out_stride_h), the
 * shape sweep and the exhaustive dequantization; and a forced split is refused. */
Test(gpu, sm90_staged_golden_cases, .timeout = 180)
{
    require_sm90a();
    golden_plain_and_padded(MLAJIT_VARIANT_SM90_STAGED, 0);
}

Test(gpu, sm90_staged_sweep_heads_pages_ragged_topk, .timeout = 300)
{
    sweep_sm90_variant(MLAJIT_VARIANT_SM90_STAGED);
}

/* Every scale format, GLM_NSA's arbitrary fp32 scales too (the exact
 * dequantization's converted form, which the staged kernel takes since it stopped
 * spilling beside the staged epilogue). */
Test(gpu, sm90_staged_dequant_every_code_and_scale, .timeout = 180)
{
    require_sm90a();
    dequant_every_code_and_scale_of(MLAJIT_VARIANT_SM90_STAGED, ALL_MODELS);
}

Test(gpu, sm90_staged_refuses_a_split)
{
    require_sm90a();
    mlajit_synth_params p = {.model = MLAJIT_MODEL_V32, .b = 1, .s_q = 1, .h_q = 64, .topk = 256,
                             .page_size = 64, .seqlen = 512, .seed = 5};
    mlajit_case c;
    cr_assert_eq(mlajit_case_synthesize(&p, &c), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_gpu_run_options o = {.variant = MLAJIT_VARIANT_SM90_STAGED, .num_splits = 2};
    mlajit_gpu_result res;
    cr_expect_eq(mlajit_case_run_gpu(ctx, &c, &o, &res), MLAJIT_ERR_UNSUPPORTED);
    cr_expect(strstr(mlajit_last_error(), "num_splits = 2") != NULL, "%s", mlajit_last_error());
    mlajit_case_free(&c);
}

/* sm90-narrow (the transposed wgmma kernel, at most 32 heads) against the same
 * oracles: the golden cases of at most 32 heads, with 3 splits and padded strides
 * too; the shape sweep up to 32 heads (DSV4 in its rows); the exhaustive
 * dequantization of the power-of-two formats; and what it refuses. */
Test(gpu, sm90_narrow_golden_cases, .timeout = 180)
{
    require_sm90a();
    mlajit_gpu_run_options o = {.variant = MLAJIT_VARIANT_SM90_NARROW};
    for_each_golden_where(&o, "sm90-narrow", 0, 32, 2);
    mlajit_gpu_run_options padded = {.variant = MLAJIT_VARIANT_SM90_NARROW, .num_splits = 3, .lse_head_major = 1,
                                      .pad_strides = 1};
    for_each_golden_where(&padded, "sm90-narrow, 3 splits, lse [b,h,s], padded strides", 0, 32, 2);
}

Test(gpu, sm90_narrow_sweep_heads_pages_ragged_topk, .timeout = 300)
{
    require_sm90a();
    mlajit_gpu_run_options o = {.variant = MLAJIT_VARIANT_SM90_NARROW};
    sweep_models_upto(&o, "sm90-narrow", MLAJIT_MODEL_DSV4, 32);
}

Test(gpu, sm90_narrow_dequant_every_code_and_scale, .timeout = 180)
{
    require_sm90a();
    dequant_every_code_and_scale_of(MLAJIT_VARIANT_SM90_NARROW, (1u << MLAJIT_MODEL_V32) | (1u << MLAJIT_MODEL_DSV4));
}

/* sm90-narrow with the heads split into groups (plan.c takes them where the
 * rows alone leave SMs idle): each CTA stages its group's Q rows (zeros past
 * h_q) and writes only its live heads' rows, lse and sink share. The golden
 * cases of at most 32 heads at 8 and 16 heads per CTA, split and strided too;
 * then head counts that leave the last group part empty (20 in groups of 8, 32
 * in groups of 24), with a sink, ragged and split, and sm90-narrow-long, whose
 * third producer group fits at 16 heads per CTA where it does not at 32; then
 * 48-128 heads in groups of 16 or 32 (every golden case at 16 per CTA). */
Test(gpu, sm90_narrow_head_groups, .timeout = 300)
{
    require_sm90a();
    mlajit_gpu_run_options by8 = {.variant = MLAJIT_VARIANT_SM90_NARROW, .heads_per_cta = 8};
    for_each_golden_where(&by8, "sm90-narrow, 8 heads per CTA", 0, 32, 2);
    mlajit_gpu_run_options by16 = {.variant = MLAJIT_VARIANT_SM90_NARROW, .heads_per_cta = 16, .num_splits = 3,
                                   .lse_head_major = 1, .pad_strides = 1};
    for_each_golden_where(&by16, "sm90-narrow, 16 heads per CTA, 3 splits, lse [b,h,s], padded strides", 0, 32, 1);
    mlajit_gpu_run_options wide16 = {.variant = MLAJIT_VARIANT_SM90_NARROW, .heads_per_cta = 16, .num_splits = 2};
    for_each_golden_where(&wide16, "sm90-narrow, 16 heads per CTA, 2 splits", 0, 0, GOLDEN_FULL_SET_CASES);
    const struct {
        mlajit_model model;
        int h_q, heads_per_cta, splits;
        mlajit_variant variant;
    } runs[] = {
        {MLAJIT_MODEL_V32, 20, 8, 0, MLAJIT_VARIANT_SM90_NARROW},
        {MLAJIT_MODEL_DSV4, 32, 24, 0, MLAJIT_VARIANT_SM90_NARROW},
        {MLAJIT_MODEL_V32, 24, 16, 5, MLAJIT_VARIANT_SM90_NARROW},
        {MLAJIT_MODEL_V32, 32, 16, 1, MLAJIT_VARIANT_SM90_NARROW_LONG},
        {MLAJIT_MODEL_V32, 13, 8, 2, MLAJIT_VARIANT_SM90_NARROW_LONG},
        /* past 32 heads, groups of at most 32 (a grid of 2-5 head groups) */
        {MLAJIT_MODEL_V32, 64, 32, 0, MLAJIT_VARIANT_SM90_NARROW},
        {MLAJIT_MODEL_DSV4, 48, 16, 3, MLAJIT_VARIANT_SM90_NARROW},
        {MLAJIT_MODEL_V32, 128, 32, 2, MLAJIT_VARIANT_SM90_NARROW},
        {MLAJIT_MODEL_V32, 72, 16, 1, MLAJIT_VARIANT_SM90_NARROW_LONG},
    };
    for (int i = 0; i < (int)(sizeof runs / sizeof runs[0]); i++) {
        mlajit_synth_params p = {.model = runs[i].model, .b = 2 + i % 2, .s_q = 1 + i % 2, .h_q = runs[i].h_q,
                                 .topk = i < 5 ? 700 - 97 * i : 300 + 211 * (i - 5), .page_size = i % 2 ? 64 : 61,
                                 .seqlen = 2000,
                                 .with_sink = i != 1, .with_topk_length = i % 2,
                                 .invalid_fraction = i % 2 ? 0.0 : 0.1, .seed = 9300 + (uint64_t)i};
        mlajit_gpu_run_options o = {.variant = runs[i].variant, .heads_per_cta = runs[i].heads_per_cta,
                                    .num_splits = runs[i].splits, .lse_head_major = i == 2};
        char label[128];
        snprintf(label, sizeof label, "%s %s h%d, %d heads per CTA, topk %d, %d splits",
                 mlajit_variant_name(runs[i].variant), mlajit_model_describe(p.model)->name, p.h_q,
                 runs[i].heads_per_cta, p.topk, runs[i].splits);
        synth_check(&p, &o, label);
    }
}

/* V3.2 walks of topk ~2048 with `variant`, split so that a CTA walks 32, 11, 3, 2
 * and 1 tiles: b 2, s_q 1 or 2, h_q from `heads` down by `heads_step`, ragged (a
 * topk off the tile, a topk_length), with sinks and skipped candidates in turn. */
static void split_walks(mlajit_variant variant, int heads, int heads_step, uint64_t seed)
{
    const int splits[] = {1, 3, 11, 16, 32};
    for (int i = 0; i < 5; i++) {
        mlajit_synth_params p = {.model = MLAJIT_MODEL_V32, .b = 2, .s_q = 1 + i % 2, .h_q = heads - heads_step * i,
                                 .topk = 2048 - 29 * i, .page_size = 64, .seqlen = 4096,
                                 .with_sink = i % 2, .with_topk_length = i == 2,
                                 .invalid_fraction = i % 2 ? 0.1 : 0.0, .seed = seed + (uint64_t)i};
        mlajit_gpu_run_options split = {.variant = variant, .num_splits = splits[i]};
        char label[96];
        snprintf(label, sizeof label, "%s h%d topk %d, %d splits", mlajit_variant_name(variant), p.h_q, p.topk,
                 splits[i]);
        synth_check(&p, &split, label);
    }
}

/* sm90-narrow-scores (the gathering groups compute S^T from registers and take
 * the walk's tiles in turn, handing the running maximum on; the value group
 * rescales by it) against the fp64 reference: the golden cases at 8 heads per
 * CTA (V3.2's; planner's splits, then 3 splits with padded strides), the shape
 * sweep at 1-8 heads with V3.2's rows, long walks at 8 heads split so that a CTA
 * walks 32, 11, 3, 2 and 1 tiles (a group with no tile, or one more than the
 * other), ragged and with skipped candidates, and every code and scale (the
 * exact product where the fast path cannot take a scale). */
Test(gpu, sm90_narrow_scores, .timeout = 300)
{
    require_sm90a();
    const unsigned v32 = 1u << MLAJIT_MODEL_V32;
    mlajit_gpu_run_options by8 = {.variant = MLAJIT_VARIANT_SM90_NARROW_SCORES, .heads_per_cta = 8};
    for_each_golden_where(&by8, "sm90-narrow-scores, 8 heads per CTA", v32, 0, 4);
    mlajit_gpu_run_options padded = {.variant = MLAJIT_VARIANT_SM90_NARROW_SCORES, .heads_per_cta = 8,
                                     .num_splits = 3, .lse_head_major = 1, .pad_strides = 1};
    for_each_golden_where(&padded, "sm90-narrow-scores, 8 per CTA, 3 splits, padded strides", v32, 0, 4);
    mlajit_gpu_run_options o = {.variant = MLAJIT_VARIANT_SM90_NARROW_SCORES};
    sweep_models_upto(&o, "sm90-narrow-scores", MLAJIT_MODEL_V32, 8);
    split_walks(MLAJIT_VARIANT_SM90_NARROW_SCORES, 8, 1, 9300);
    dequant_every_code_and_scale_of(MLAJIT_VARIANT_SM90_NARROW_SCORES, v32);
}

/* sm90-narrow-long (three producer groups, the walk's rounds dealt to them in
 * turn, so each group skips tiles and starts at its own tile and round) against
 * the fp64 reference: the shape sweep at 1-16 heads with V3.2's rows (DSV4's
 * resolve to sm90-narrow), then long walks at 16-8 heads split so that a CTA
 * walks 32, 11, 3, 2 and 1 tiles, ragged and with skipped candidates (the groups'
 * end of walk differs by up to a tile). */
Test(gpu, sm90_narrow_long_sweep_and_walks, .timeout = 300)
{
    require_sm90a();
    mlajit_gpu_run_options o = {.variant = MLAJIT_VARIANT_SM90_NARROW_LONG};
    sweep_models_upto(&o, "sm90-narrow-long", MLAJIT_MODEL_V32, 16);
    split_walks(MLAJIT_VARIANT_SM90_NARROW_LONG, 16, 2, 9100);
}
