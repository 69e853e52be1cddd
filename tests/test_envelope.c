/* The envelope query agrees with the library: a spec it accepts compiles (a
 * sample of fuzz draws, through NVRTC), one it rejects is refused by prepare and
 * the planner too, with a reason. No GPU. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "harness/fuzz.h"
#include "mlajit.h"
#include "runtime/nvrtc.h"

static mlajit_context *ctx;

static void setup(void)
{
    mlajit_context_options o = {.struct_size = sizeof o,
                                .flags = MLAJIT_CONTEXT_NO_DEVICE | MLAJIT_CONTEXT_NO_DISK_CACHE};
    cr_assert_eq(mlajit_context_create(&o, &ctx), MLAJIT_OK, "%s", mlajit_last_error());
}

static void teardown(void) { mlajit_context_destroy(ctx); }

TestSuite(envelope, .init = setup, .fini = teardown, .timeout = 600);

static const char *const sample_arches[] = {"sm_80", "sm_90a", "sm_100a", "sm_120a"};

Test(envelope, accepted_fuzz_draws_compile_and_plan)
{
    int compiled = 0, rejected = 0;
    for (int64_t k = 0; compiled < 6 && k < 200; k++) {
        mlajit_fuzz_call call;
        mlajit_fuzz_draw(20261130, k, 0, &call);
        mlajit_kernel_spec spec = call.spec;
        strcpy(spec.arch, sample_arches[k % 4]);
        int env = mlajit_envelope_check(&spec, &call.shape);
        if (env != MLAJIT_OK) {
            rejected++;
            cr_expect_neq(mlajit_last_error()[0], '\0', "call %lld: rejected without a reason", (long long)k);
            continue;
        }
        mlajit_plan *plan = NULL;
        int rc = mlajit_plan_create(ctx, &spec, &call.shape, &plan);
        char desc[600];
        mlajit_fuzz_describe(&call, desc, sizeof desc);
        cr_expect_eq(rc, MLAJIT_OK, "call %lld (%s, %s) was accepted but did not plan: %s", (long long)k, desc,
                     spec.arch, mlajit_last_error());
        if (rc == MLAJIT_OK)
            cr_expect_gt(mlajit_plan_report(plan)->cubin_bytes, 1000u);
        mlajit_plan_destroy(plan);
        compiled++;
    }
    cr_expect_eq(compiled, 6, "the draws should mostly be inside the envelope (%d rejected)", rejected);
}

/* Every generator choice on every arch: the query accepts exactly what resolves
 * (shared memory fits) on an arch NVRTC can target; what it rejects, prepare
 * rejects with the same status, before compiling anything. */
Test(envelope, agrees_with_prepare_on_every_variant)
{
    char list[256];
    snprintf(list, sizeof list, "%s", mlajit_arch_list());
    const mlajit_model models[] = {MLAJIT_MODEL_V32,       MLAJIT_MODEL_DSV4,      MLAJIT_MODEL_GLM_NSA,
                                   MLAJIT_MODEL_GLM53_NOPE, MLAJIT_MODEL_DOTS3_SWA, MLAJIT_MODEL_V32_BF16,
                                   MLAJIT_MODEL_DSV4_BF16};
    const int tiles[] = {0, 32, 64}, hcs[] = {0, 16, 32};
    int accepted = 0, refused = 0;
    for (char *save = NULL, *arch = strtok_r(list, ", ", &save); arch; arch = strtok_r(NULL, ", ", &save))
        for (int m = 0; m < (int)(sizeof models / sizeof models[0]); m++)
            for (int t = 0; t < 3; t++)
                for (int h = 0; h < 3; h++) {
                    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, r = MLAJIT_KERNEL_SPEC_INIT;
                    cr_assert_eq(mlajit_spec_init(&s, models[m], 128, 64), MLAJIT_OK);
                    s.tile = tiles[t];
                    s.heads_per_cta = hcs[h];
                    strcpy(s.arch, arch);
                    int env = mlajit_envelope_check(&s, NULL);
                    int expect_ok = mlajit_spec_resolve(&s, &r) == MLAJIT_OK && mlajit_nvrtc_supports(arch);
                    cr_expect_eq(env == MLAJIT_OK, expect_ok, "%s t%d hc%d %s: query %d", arch, tiles[t], hcs[h],
                                 mlajit_model_describe(models[m])->name, env);
                    if (env == MLAJIT_OK) {
                        accepted++;
                        continue;
                    }
                    refused++;
                    char reason[1024];
                    snprintf(reason, sizeof reason, "%s", mlajit_last_error());
                    cr_expect(strstr(reason, "shared memory") || strstr(reason, "cannot target"),
                              "the reason says why: %s", reason);
                    cr_expect_eq(mlajit_kernel_prepare(ctx, &s, NULL), env, "prepare agrees: %s", mlajit_last_error());
                }
    cr_expect_gt(accepted, 0);
    cr_expect_gt(refused, 0, "sm_86-class parts cannot hold tile 64 with 32 heads");
}

Test(envelope, empty_arch_is_the_default_target)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_spec_init(&s, MLAJIT_MODEL_V32, 128, 64);
    s.tile = 64;
    s.heads_per_cta = 32;
    cr_expect_eq(mlajit_envelope_check(&s, NULL), MLAJIT_OK, "%s", mlajit_last_error());
    strcpy(s.arch, MLAJIT_DEFAULT_ARCH);
    cr_expect_eq(mlajit_envelope_check(&s, NULL), MLAJIT_OK, "%s", mlajit_last_error());
    strcpy(s.arch, "sm_86");
    cr_expect_eq(mlajit_envelope_check(&s, NULL), MLAJIT_ERR_UNSUPPORTED);
    cr_expect(strstr(mlajit_last_error(), "shared memory") != NULL, "%s", mlajit_last_error());
}

/* The planner and the query check a geometry with the same rules. */
Test(envelope, shapes_agree_with_the_planner)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_spec_init(&s, MLAJIT_MODEL_DSV4, 8, 64);
    s.extra_page_size = 3;
    strcpy(s.arch, "sm_90a");
    const struct {
        mlajit_decode_shape shape;
        const char *word; /* NULL: accepted */
    } rows[] = {
        {{.batch = 0, .s_q = 0, .topk = 1, .extra_topk = 1}, NULL},
        {{.batch = 4096, .s_q = 16, .topk = 16384, .extra_topk = 16384, .num_splits = 64}, NULL},
        {{.batch = 65536, .s_q = 1, .topk = 16384, .extra_topk = 16384, .num_splits = 64}, NULL},
        {{.batch = 1024, .s_q = 64, .topk = 2048, .extra_topk = 1}, NULL},
        {{.batch = 1, .s_q = 64, .topk = 1, .extra_topk = 1}, NULL},
        {{.batch = 1025, .s_q = 64, .topk = 64, .extra_topk = 1}, "MLAJIT_MAX_ROWS"},
        {{.batch = 65536, .s_q = 2, .topk = 64, .extra_topk = 1}, "65536 x 2 = 131072 rows"},
        {{.batch = 3, .s_q = 1, .topk = 33, .extra_topk = 7, .num_splits = 5}, NULL},
        {{.batch = -1, .s_q = 1, .topk = 64, .extra_topk = 1}, "shape.batch"},
        {{.batch = 65537, .s_q = 1, .topk = 64, .extra_topk = 1}, "shape.batch"},
        {{.batch = 1, .s_q = -1, .topk = 64, .extra_topk = 1}, "shape.s_q"},
        {{.batch = 1, .s_q = 65, .topk = 64, .extra_topk = 1}, "shape.s_q"},
        {{.batch = 1, .s_q = 1, .topk = 0, .extra_topk = 1}, "shape.topk"},
        {{.batch = 1, .s_q = 1, .topk = 16385, .extra_topk = 1}, "shape.topk"},
        {{.batch = 1, .s_q = 1, .topk = 64, .extra_topk = 0}, "shape.extra_topk"},
        {{.batch = 1, .s_q = 1, .topk = 64, .extra_topk = 16385}, "shape.extra_topk"},
        {{.batch = 1, .s_q = 1, .topk = 64, .extra_topk = 1, .num_splits = -1}, "shape.num_splits"},
        {{.batch = 1, .s_q = 1, .topk = 64, .extra_topk = 1, .num_splits = 65}, "shape.num_splits"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        mlajit_decode_shape shape = rows[i].shape;
        shape.struct_size = sizeof shape;
        int env = mlajit_envelope_check(&s, &shape);
        char reason[1024];
        snprintf(reason, sizeof reason, "%s", mlajit_last_error());
        mlajit_plan *p = NULL;
        int plan = mlajit_plan_create(ctx, &s, &shape, &p);
        mlajit_plan_destroy(p);
        cr_expect_eq(env, plan, "row %zu: query %d, planner %d (%s)", i, env, plan, mlajit_last_error());
        if (rows[i].word) {
            cr_expect_eq(env, MLAJIT_ERR_INVALID_ARGUMENT, "row %zu", i);
            cr_expect(strstr(reason, rows[i].word) != NULL, "row %zu: '%s' names %s", i, reason, rows[i].word);
        } else {
            cr_expect_eq(env, MLAJIT_OK, "row %zu: %s", i, reason);
        }
    }
    /* without an extra cache, extra_topk must be 0 */
    s.extra_page_size = 0;
    mlajit_decode_shape no_extra = {.struct_size = sizeof no_extra, .batch = 1, .s_q = 1, .topk = 64, .extra_topk = 2};
    cr_expect_eq(mlajit_envelope_check(&s, &no_extra), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "extra_topk") != NULL);
}

/* --tuned-grid: every call on a spec of the tuner's production grid, within
 * the budgets, its shape drawn as ever. */
Test(envelope, tuned_grid_draws_take_the_grids_specs)
{
    int heads_seen = 0, pages_seen = 0, models_seen = 0, past_edge = 0;
    for (int64_t k = 0; k < 2000; k++) {
        mlajit_fuzz_call c, plain, again;
        mlajit_fuzz_draw(11, k, MLAJIT_FUZZ_TUNED_GRID, &c);
        const mlajit_kernel_spec *s = &c.spec;
        cr_assert(s->model == MLAJIT_MODEL_V32 || s->model == MLAJIT_MODEL_DSV4, "call %lld: model %d",
                  (long long)k, (int)s->model);
        cr_assert(s->page_size == 64 || s->page_size == 256, "call %lld: page %d", (long long)k, s->page_size);
        cr_assert(s->extra_page_size == 0 && s->features == 0 && s->tile == 0 && s->heads_per_cta == 0 &&
                      s->variant == MLAJIT_VARIANT_AUTO && c.shape.extra_topk == 0,
                  "call %lld: not the grid's auto spec", (long long)k);
        /* the reference budget may halve the heads: 128 -> 64 -> ... -> 1 */
        cr_assert(s->h_q >= 1 && s->h_q <= 128 && (s->h_q & (s->h_q - 1)) == 0, "call %lld: h_q %d", (long long)k,
                  s->h_q);
        cr_assert_eq(mlajit_envelope_check(s, &c.shape), MLAJIT_OK, "call %lld: %s", (long long)k,
                     mlajit_last_error());
        int64_t cost = (int64_t)c.shape.batch * c.shape.s_q * s->h_q * c.shape.topk;
        cr_assert_leq(cost, MLAJIT_FUZZ_REF_BUDGET, "call %lld over the reference budget", (long long)k);
        heads_seen |= 1 << (s->h_q == 8 ? 0 : s->h_q == 16 ? 1 : s->h_q == 32 ? 2 : s->h_q == 64 ? 3 : 4);
        pages_seen |= s->page_size == 64 ? 1 : 2;
        models_seen |= s->model == MLAJIT_MODEL_V32 ? 1 : 2;
        past_edge += c.shape.topk & (c.shape.topk - 1) ? 1 : 0; /* topk off a power of two: a carried tactic */
        mlajit_fuzz_draw(11, k, MLAJIT_FUZZ_TUNED_GRID, &again);
        cr_assert(memcmp(&c.spec, &again.spec, sizeof c.spec) == 0 && memcmp(&c.shape, &again.shape, sizeof c.shape) == 0,
                  "a call is a function of (seed, number, flags)");
        mlajit_fuzz_draw(11, k, 0, &plain);
        cr_assert_eq(plain.seed, c.seed);
    }
    cr_expect_eq(heads_seen, 31, "the grid's head counts 8..128 drawn: mask %x", heads_seen);
    cr_expect(pages_seen == 3 && models_seen == 3 && past_edge > 100, "pages %x, models %x, off-edge topks %d",
              pages_seen, models_seen, past_edge);
}

/* The draws cover the envelope's corners over a modest number of calls. */
Test(envelope, fuzz_draws_cover_the_envelope)
{
    int models[MLAJIT_MODEL_DSV4_BF16 + 1] = {0}, extra = 0, tile_multiple = 0, off_tile = 0, b0 = 0, big_b = 0, sq16 = 0, h128 = 0, h1 = 0;
    int page1 = 0, page1024 = 0, invalid = 0, all_features = 0, rows_past_4096 = 0, sq_past_16 = 0, custom = 0;
    int bf16 = 0, dv256 = 0, nope256_ue8m0_inline = 0, rope0_fp32_footer = 0; /* issue 49's layouts */
    for (int64_t k = 0; k < 4000; k++) {
        mlajit_fuzz_call c;
        mlajit_fuzz_draw(7, k, 0, &c);
        cr_assert_eq(mlajit_spec_validate(&c.spec), MLAJIT_OK, "call %lld: %s", (long long)k, mlajit_last_error());
        cr_assert_eq(mlajit_envelope_check(&c.spec, &c.shape), MLAJIT_OK, "call %lld: %s", (long long)k,
                     mlajit_last_error());
        int64_t cost = (int64_t)c.shape.batch * c.shape.s_q * c.spec.h_q * (c.shape.topk + c.shape.extra_topk);
        cr_assert_leq(cost, MLAJIT_FUZZ_REF_BUDGET, "call %lld over the reference budget", (long long)k);
        int64_t pages = (int64_t)c.shape.batch * ((c.synth.seqlen + c.spec.page_size - 1) / c.spec.page_size);
        cr_assert_leq(pages * c.spec.page_size, MLAJIT_FUZZ_MAX_TOKENS, "call %lld over the token budget",
                      (long long)k);
        if (c.spec.model == MLAJIT_MODEL_CUSTOM)
            custom++;
        else
            models[c.spec.model]++;
        const mlajit_model_desc *d = mlajit_spec_desc(&c.spec);
        bf16 += d->scale_format == MLAJIT_SCALE_NONE;
        dv256 += d->d_v == 256;
        nope256_ue8m0_inline += d->d_nope == 256 && d->scale_format == MLAJIT_SCALE_UE8M0 &&
                                d->scale_place == MLAJIT_SCALES_INLINE;
        rope0_fp32_footer += d->d_rope == 0 && d->scale_format == MLAJIT_SCALE_FP32 &&
                             d->scale_place == MLAJIT_SCALES_PAGE_FOOTER;
        extra += c.spec.extra_page_size > 0;
        tile_multiple += c.shape.topk % 64 == 0;
        off_tile += c.shape.topk % 32 != 0;
        b0 += c.shape.batch == 0;
        big_b += c.shape.batch > 256;
        sq16 += c.shape.s_q == 16;
        rows_past_4096 += (int64_t)c.shape.batch * c.shape.s_q > 4096; /* the old limit of b */
        sq_past_16 += c.shape.s_q > 16;                                  /* the old limit of s_q */
        h128 += c.spec.h_q == 128;
        h1 += c.spec.h_q == 1;
        page1 += c.spec.page_size == 1;
        page1024 += c.spec.page_size == 1024;
        invalid += c.synth.invalid_fraction > 0;
        all_features += c.spec.features == MLAJIT_FEATURE_ALL;
        mlajit_fuzz_call again;
        mlajit_fuzz_draw(7, k, 0, &again);
        cr_assert(memcmp(&c.spec, &again.spec, sizeof c.spec) == 0 &&
                      memcmp(&c.shape, &again.shape, sizeof c.shape) == 0 && c.seed == again.seed &&
                      c.synth.seqlen == again.synth.seqlen && c.synth.extra_seqlen == again.synth.extra_seqlen &&
                      c.synth.invalid_fraction == again.synth.invalid_fraction &&
                      c.synth.page_stride_pad == again.synth.page_stride_pad,
                  "a call is a function of (seed, number)");
    }
    cr_expect(models[MLAJIT_MODEL_V32] && models[MLAJIT_MODEL_DSV4] && models[MLAJIT_MODEL_GLM_NSA] &&
              models[MLAJIT_MODEL_GLM53_NOPE] && models[MLAJIT_MODEL_DOTS3_SWA]);
    cr_expect_gt(custom, 100, "custom layouts drawn: %d of 4000", custom);
    cr_expect(bf16 >= 10 && dv256 >= 10 && nope256_ue8m0_inline >= 3 && rope0_fp32_footer >= 3,
              "of 4000: %d bf16 (scales none), %d at d_v 256, %d d_nope 256 ue8m0 inline, %d no RoPE fp32 footer",
              bf16, dv256, nope256_ue8m0_inline, rope0_fp32_footer);
    cr_expect(extra && tile_multiple && off_tile && b0 && big_b && sq16 && h128 && h1 && page1 && page1024 &&
                  invalid && all_features,
              "extra %d, multiple %d, off %d, b0 %d, b>256 %d, s_q16 %d, h128 %d, h1 %d, p1 %d, p1024 %d, invalid %d, "
              "all features %d",
              extra, tile_multiple, off_tile, b0, big_b, sq16, h128, h1, page1, page1024, invalid, all_features);
    cr_expect(rows_past_4096 >= 10 && sq_past_16 >= 10, "wide calls: %d past 4096 rows, %d past s_q 16", rows_past_4096,
              sq_past_16);
}

/* mlajit fuzz --model: every call on the model, inside the envelope, a function
 * of (seed, number, flags). */
Test(envelope, fuzz_draws_of_one_model)
{
    const mlajit_model models[] = {MLAJIT_MODEL_GLM53_NOPE, MLAJIT_MODEL_DOTS3_SWA};
    for (int m = 0; m < 2; m++) {
        const unsigned flags = (unsigned)models[m] << MLAJIT_FUZZ_MODEL_SHIFT;
        int extra = 0, features = 0, forced_tiles = 0, narrow_groups_past_16 = 0;
        for (int64_t k = 0; k < 500; k++) {
            mlajit_fuzz_call c, again;
            mlajit_fuzz_draw(49, k, flags, &c);
            cr_assert_eq(c.spec.model, models[m], "call %lld: model %d", (long long)k, (int)c.spec.model);
            cr_assert_eq(c.synth.model, models[m]);
            cr_assert_eq(mlajit_envelope_check(&c.spec, &c.shape), MLAJIT_OK, "call %lld: %s", (long long)k,
                         mlajit_last_error());
            mlajit_fuzz_draw(49, k, flags, &again);
            cr_assert(memcmp(&c.spec, &again.spec, sizeof c.spec) == 0 && memcmp(&c.shape, &again.shape,
                                                                                 sizeof c.shape) == 0);
            extra += c.spec.extra_page_size > 0;
            features += c.spec.features == MLAJIT_FEATURE_ALL;
            forced_tiles += c.spec.tile != 0 || c.spec.heads_per_cta != 0;
            narrow_groups_past_16 += c.spec.variant == MLAJIT_VARIANT_SM90_NARROW && c.spec.h_q > 16;
        }
        cr_expect(extra && features && forced_tiles, "extra %d, all features %d, forced tile or heads %d", extra,
                  features, forced_tiles);
        /* sm90-narrow's head groups past 16 heads: DOTS3_SWA's of 8 or 16 (its CTA
         * holds at most 16) are drawn too, each passing the envelope above */
        cr_expect_gt(narrow_groups_past_16, 0, "%s: no sm90-narrow draw past 16 heads",
                     m ? "dots3_swa" : "glm53_nope");
    }
}

/* GLM53_NOPE and DOTS3_SWA: the families whose templates serve them accept them
 * (at 16 heads auto takes sm90-narrow for both on sm_90a, DOTS3_SWA's with one K
 * buffer; its sm90-split pair runs from 33 heads); every other
 * family refuses them with a reason naming the model and why, and prepare refuses
 * the same way before compiling anything. */
Test(envelope, the_new_layouts_are_served_or_refused_with_the_reason)
{
    static const struct {
        mlajit_model model;
        const char *name;
    } layouts[] = {{MLAJIT_MODEL_GLM53_NOPE, "glm53_nope"}, {MLAJIT_MODEL_DOTS3_SWA, "dots3_swa"}};
    /* per family, for each model: NULL where it serves it, else a phrase of its reason */
    static const struct {
        mlajit_variant variant;
        const char *why[2];
        mlajit_variant resolves_to[2];
    } rows[] = {
        {MLAJIT_VARIANT_PORTABLE, {NULL, NULL}, {MLAJIT_VARIANT_PORTABLE, MLAJIT_VARIANT_PORTABLE}},
        {MLAJIT_VARIANT_SM90, {NULL, "kDV == 512"}, {MLAJIT_VARIANT_SM90, MLAJIT_VARIANT_AUTO}},
        {MLAJIT_VARIANT_SM90_STAGED, {NULL, "kDV == 512"}, {MLAJIT_VARIANT_SM90_STAGED, MLAJIT_VARIANT_AUTO}},
        {MLAJIT_VARIANT_SM90_NARROW, {NULL, NULL}, {MLAJIT_VARIANT_SM90_NARROW, MLAJIT_VARIANT_SM90_NARROW}},
        {MLAJIT_VARIANT_SM90_NARROW_LONG, {NULL, NULL}, {MLAJIT_VARIANT_SM90_NARROW_LONG, MLAJIT_VARIANT_SM90_NARROW}},
        {MLAJIT_VARIANT_SM90_NARROW_SCORES, {NULL, NULL}, {MLAJIT_VARIANT_SM90_NARROW, MLAJIT_VARIANT_SM90_NARROW}},
        {MLAJIT_VARIANT_SM90_SPLIT, {"layout.d_nope and d_v must be 1024", NULL},
         {MLAJIT_VARIANT_AUTO, MLAJIT_VARIANT_SM90_SPLIT}},
        {MLAJIT_VARIANT_AUTO, {NULL, NULL}, {MLAJIT_VARIANT_SM90_NARROW, MLAJIT_VARIANT_SM90_NARROW}},
    };
    cr_assert_eq(sizeof rows / sizeof rows[0], (size_t)mlajit_family_count + 1, "a row per family, and auto");
    for (size_t m = 0; m < 2; m++)
        for (size_t f = 0; f < sizeof rows / sizeof rows[0]; f++) {
            const mlajit_family *fam = mlajit_family_of(rows[f].variant);
            mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, r = MLAJIT_KERNEL_SPEC_INIT;
            cr_assert_eq(mlajit_spec_init(&s, layouts[m].model, 16, 64), MLAJIT_OK, "%s", mlajit_last_error());
            s.variant = rows[f].variant;
            strcpy(s.arch, fam && fam->arch ? fam->arch : "sm_90a");
            const int env = mlajit_envelope_check(&s, NULL);
            char reason[1024];
            snprintf(reason, sizeof reason, "%s", mlajit_last_error());
            if (!rows[f].why[m]) {
                cr_expect_eq(env, MLAJIT_OK, "%s %s: %s", layouts[m].name, mlajit_variant_name(rows[f].variant),
                             reason);
                cr_expect_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
                cr_expect_eq(r.variant, rows[f].resolves_to[m], "%s %s resolves to %s", layouts[m].name,
                             mlajit_variant_name(rows[f].variant), mlajit_variant_name(r.variant));
                continue;
            }
            cr_expect_eq(env, MLAJIT_ERR_UNSUPPORTED, "%s %s: %d", layouts[m].name, mlajit_variant_name(rows[f].variant),
                         env);
            cr_expect(strstr(reason, layouts[m].name) && strstr(reason, rows[f].why[m]),
                      "%s %s: the reason names the model and why: %s", layouts[m].name,
                      mlajit_variant_name(rows[f].variant), reason);
            cr_expect_eq(mlajit_kernel_prepare(ctx, &s, NULL), MLAJIT_ERR_UNSUPPORTED, "prepare agrees: %s",
                         mlajit_last_error());
        }
}
