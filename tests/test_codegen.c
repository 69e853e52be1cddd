/* codegen: the descriptor table, spec validation and strings, generated source. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "codegen/codegen.h"
#include "codegen/families.h"
#include "codegen/kernel_abi.h"
#include "mlajit.h"

Test(models, descriptor_table_is_consistent)
{
    const mlajit_model models[] = {MLAJIT_MODEL_V32, MLAJIT_MODEL_DSV4, MLAJIT_MODEL_GLM_NSA};
    for (size_t i = 0; i < 3; i++) {
        const mlajit_model_desc *d = mlajit_model_describe(models[i]);
        cr_assert_not_null(d);
        cr_expect_eq(d->d_nope + d->d_rope, d->d_qk, "%s: nope + rope = qk", d->name);
        cr_expect_eq(d->num_scales * d->quant_tile, d->d_nope, "%s: scales cover the NoPE dims", d->name);
        int inline_bytes = d->scale_place == MLAJIT_SCALES_INLINE ? d->num_scales * 4 : 0;
        cr_expect_leq(d->d_nope + inline_bytes + d->d_rope * 2, d->row_bytes, "%s: the row holds its parts", d->name);
        cr_expect_eq(d->row_bytes + d->footer_bytes, d->bytes_per_token, "%s", d->name);
        if (d->scale_place == MLAJIT_SCALES_PAGE_FOOTER)
            cr_expect_geq(d->footer_bytes, d->num_scales, "%s: footer holds the scales", d->name);
        mlajit_model back;
        cr_expect_eq(mlajit_model_from_name(d->name, &back), MLAJIT_OK);
        cr_expect_eq(back, models[i]);
    }
    /* SPEC.md's numbers */
    cr_expect_eq(mlajit_model_describe(MLAJIT_MODEL_V32)->bytes_per_token, 656);
    cr_expect_eq(mlajit_model_describe(MLAJIT_MODEL_DSV4)->bytes_per_token, 584);
    cr_expect_eq(mlajit_model_describe(MLAJIT_MODEL_DSV4)->d_qk, 512);
    cr_expect_null(mlajit_model_describe((mlajit_model)99));
    mlajit_model m;
    cr_expect_eq(mlajit_model_from_name("llama", &m), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "v32") != NULL, "message lists the allowed models");
    cr_expect_eq(mlajit_min_page_stride(MLAJIT_MODEL_DSV4, 64), 64 * 584);
}

Test(spec, validation_names_the_field)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    struct { int h, p; const char *word; } bad[] = {{0, 64, "h_q"}, {129, 64, "h_q"}, {16, 0, "page_size"},
                                                    {16, 1025, "page_size"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_eq(mlajit_spec_init(&s, MLAJIT_MODEL_V32, bad[i].h, bad[i].p), MLAJIT_ERR_INVALID_ARGUMENT);
        cr_expect(strstr(mlajit_last_error(), bad[i].word) != NULL, "'%s' names %s", mlajit_last_error(), bad[i].word);
    }
    cr_assert_eq(mlajit_spec_init(&s, MLAJIT_MODEL_V32, 128, 64), MLAJIT_OK);
    s.features = 0x100;
    cr_expect_eq(mlajit_spec_validate(&s), MLAJIT_ERR_INVALID_ARGUMENT);
    s.features = MLAJIT_FEATURE_EXTRA_TOPK_LENGTH;
    cr_expect_eq(mlajit_spec_validate(&s), MLAJIT_ERR_INVALID_ARGUMENT, "extra length needs an extra cache");
    s.features = 0;
    strcpy(s.arch, "sm_75");
    cr_expect_eq(mlajit_spec_validate(&s), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "sm_90a") != NULL, "message lists the arches");
    strcpy(s.arch, "sm_90a");
    s.tile = 48;
    cr_expect_eq(mlajit_spec_validate(&s), MLAJIT_ERR_INVALID_ARGUMENT);
    s.model = (mlajit_model)8; /* past the named models (v32 .. dsv4_bf16) */
    s.tile = 0;
    cr_expect_eq(mlajit_spec_validate(&s), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect_eq(mlajit_spec_validate(NULL), MLAJIT_ERR_INVALID_ARGUMENT);
}

Test(spec, canonical_string_round_trips)
{
    const mlajit_model models[] = {MLAJIT_MODEL_V32, MLAJIT_MODEL_DSV4, MLAJIT_MODEL_GLM_NSA};
    const char *arches[] = {"sm_80", "sm_86", "sm_90a", "sm_100a", "sm_120a"};
    int count = 0;
    for (int mi = 0; mi < 3; mi++)
        for (int h = 1; h <= 128; h += 21)
            for (int ai = 0; ai < 5; ai++)
                for (unsigned f = 0; f < 8; f++) {
                    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
                    mlajit_kernel_spec back = MLAJIT_KERNEL_SPEC_INIT;
                    mlajit_kernel_spec r = MLAJIT_KERNEL_SPEC_INIT;
                    cr_assert_eq(mlajit_spec_init(&s, models[mi], h, 1 + h * 7), MLAJIT_OK);
                    strcpy(s.arch, arches[ai]);
                    s.features = f;
                    if (f & MLAJIT_FEATURE_EXTRA_TOPK_LENGTH)
                        s.extra_page_size = 64;
                    char str[128], str2[128];
                    cr_assert_eq(mlajit_spec_string(&s, str, sizeof str), MLAJIT_OK, "%s", mlajit_last_error());
                    cr_assert_eq(mlajit_spec_parse(str, &back), MLAJIT_OK, "%s: %s", str, mlajit_last_error());
                    cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK);
                    cr_expect_eq(back.model, r.model);
                    cr_expect_eq(back.h_q, r.h_q);
                    cr_expect_eq(back.page_size, r.page_size);
                    cr_expect_eq(back.extra_page_size, r.extra_page_size);
                    cr_expect_eq(back.features, r.features);
                    cr_expect_eq(back.tile, r.tile);
                    cr_expect_eq(back.heads_per_cta, r.heads_per_cta);
                    cr_expect_str_eq(back.arch, r.arch);
                    cr_assert_eq(mlajit_spec_string(&back, str2, sizeof str2), MLAJIT_OK);
                    cr_expect_str_eq(str, str2, "the string of a parsed string is itself");
                    count++;
                }
    cr_expect_gt(count, 500);
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_spec_init(&s, MLAJIT_MODEL_DSV4, 64, 256);
    s.extra_page_size = 64;
    s.features = MLAJIT_FEATURE_ALL;
    strcpy(s.arch, "sm_90a");
    char str[128];
    cr_assert_eq(mlajit_spec_string(&s, str, sizeof str), MLAJIT_OK);
    cr_expect_str_eq(str, "dsv4.h64.p256.e64.fslx.t64.hc64.sm90.sm_90a", "auto is the wgmma family on sm_90a");
    s.variant = MLAJIT_VARIANT_PORTABLE;
    cr_assert_eq(mlajit_spec_string(&s, str, sizeof str), MLAJIT_OK);
    cr_expect_str_eq(str, "dsv4.h64.p256.e64.fslx.t64.hc64.portable.sm_90a");
    s.variant = MLAJIT_VARIANT_AUTO;
    s.heads_per_cta = 32; /* a head group sm90 does not run: auto stays portable */
    cr_assert_eq(mlajit_spec_string(&s, str, sizeof str), MLAJIT_OK);
    cr_expect_str_eq(str, "dsv4.h64.p256.e64.fslx.t64.hc32.portable.sm_90a");
    s.heads_per_cta = 0;
    s.variant = MLAJIT_VARIANT_SM90;
    cr_assert_eq(mlajit_spec_string(&s, str, sizeof str), MLAJIT_OK);
    cr_expect_str_eq(str, "dsv4.h64.p256.e64.fslx.t64.hc64.sm90.sm_90a");
    mlajit_kernel_spec back = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_parse(str, &back), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(back.variant, MLAJIT_VARIANT_SM90);
    cr_expect_eq(mlajit_spec_string(&s, str, 10), MLAJIT_ERR_INVALID_ARGUMENT, "a short buffer is an error");
}

Test(spec, parse_rejects_garbage)
{
    const char *bad[] = {"", "v32", "v32.h0.p64.t64.hc16.portable.sm_90a", "x.h1.p1.t64.hc16.portable.sm_90a",
                         "v32.h1.p1.t64.hc16.portable.sm_91", "v32.h1.p1.fq.t64.hc16.portable.sm_90a",
                         "v32.h1.p1.t64.hc16.fast.sm_90a", "v32.h1.p1.t64.hc16.portable.sm_90a.extra",
                         "v32.h-1.p1.t64.hc16.portable.sm_90a", "v32.h1.p99999999999.t64.hc16.portable.sm_90a"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
        cr_expect_eq(mlajit_spec_parse(bad[i], &s), MLAJIT_ERR_INVALID_ARGUMENT, "'%s' must be rejected", bad[i]);
        cr_expect_neq(mlajit_last_error()[0], '\0');
    }
}

/* Short forms leave fields off; each field left off takes its default, and a
 * short form names the same spec as the full string with those defaults. */
Test(spec, parse_takes_short_forms)
{
    const struct { const char *short_form, *full; } pairs[] = {
        {"v32.h16.p64", "v32.h16.p64.t0.hc0.auto.any"},
        {"v32.h16.p64.sm_80", "v32.h16.p64.t0.hc0.auto.sm_80"},
        {"v32.h16.p64.portable", "v32.h16.p64.t0.hc0.portable.any"},
        {"v32.h16.p64.t32", "v32.h16.p64.t32.hc0.auto.any"},
        {"v32.h16.p64.hc16.sm_90a", "v32.h16.p64.t0.hc16.auto.sm_90a"},
        {"dsv4.h64.p256.e64.fs", "dsv4.h64.p256.e64.fs.t0.hc0.auto.any"},
        {"dsv4.h8.p64.e2.fslx.sm90-narrow", "dsv4.h8.p64.e2.fslx.t0.hc0.sm90-narrow.any"},
        {"glm_nsa.h1.p1.any", "glm_nsa.h1.p1.t0.hc0.auto.any"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        mlajit_kernel_spec a = MLAJIT_KERNEL_SPEC_INIT, b = MLAJIT_KERNEL_SPEC_INIT;
        cr_assert_eq(mlajit_spec_parse(pairs[i].short_form, &a), MLAJIT_OK, "%s: %s", pairs[i].short_form,
                     mlajit_last_error());
        cr_assert_eq(mlajit_spec_parse(pairs[i].full, &b), MLAJIT_OK, "%s: %s", pairs[i].full, mlajit_last_error());
        cr_expect_eq(memcmp(&a, &b, sizeof a), 0, "%s should be %s", pairs[i].short_form, pairs[i].full);
    }
    /* fields out of order, unknown or doubled are malformed, not defaults */
    const char *bad[] = {"v32.h16", "v32.p64.h16", "v32.h16.p64.sm_90a.portable", "v32.h16.p64.hc16.t64",
                         "v32.h16.p64.fast", "v32.h16.p64.t64.t64", "v32.h16.p64.sm_90a.any"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
        cr_expect_eq(mlajit_spec_parse(bad[i], &s), MLAJIT_ERR_INVALID_ARGUMENT, "'%s' must be rejected", bad[i]);
    }
    /* the fields alone parse without the envelope's check; the full parse checks it */
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    cr_expect_eq(mlajit_spec_parse_fields("v32.h0.p64", &s), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(s.h_q, 0);
    cr_expect_eq(mlajit_spec_parse("v32.h0.p64", &s), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "spec.h_q = 0") != NULL, "%s", mlajit_last_error());
}

Test(spec, resolve_fits_shared_memory_of_each_arch)
{
    const char *arches[] = {"sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_120", "sm_120a"};
    for (size_t a = 0; a < sizeof arches / sizeof arches[0]; a++)
        for (int h = 1; h <= 128; h++) {
            mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, r = MLAJIT_KERNEL_SPEC_INIT;
            mlajit_spec_init(&s, MLAJIT_MODEL_V32, h, 64);
            strcpy(s.arch, arches[a]);
            cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s h%d: %s", arches[a], h, mlajit_last_error());
            mlajit_kernel_layout l;
            cr_assert_eq(mlajit_codegen_layout(&r, &l), MLAJIT_OK);
            cr_expect_leq(l.smem_bytes, mlajit_arch_max_smem(arches[a]));
            /* sm90-narrow's head group is h_q rounded up to 8; the others' whole mma row tiles */
            if (mlajit_family_of(r.variant)->max_heads_per_cta)
                cr_expect(r.heads_per_cta == (h + 7) / 8 * 8 && h <= 32, "%s h%d: hc%d", arches[a], h,
                          r.heads_per_cta);
            else
                cr_expect(r.heads_per_cta >= 16 && r.heads_per_cta % 16 == 0);
        }
    /* forcing a tile that does not fit is an error, not a silent change */
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, r = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_spec_init(&s, MLAJIT_MODEL_V32, 128, 64);
    strcpy(s.arch, "sm_86");
    s.tile = 64;
    cr_expect_eq(mlajit_spec_resolve(&s, &r), MLAJIT_ERR_UNSUPPORTED);
    cr_expect(strstr(mlajit_last_error(), "shared memory") != NULL);
    /* the message names the tile and head group, and what lowers them (the portable
     * family's choices) */
    cr_expect(strstr(mlajit_last_error(), "at tile 64 and ") && strstr(mlajit_last_error(), "use tile 32 or fewer "
                                                                                            "heads_per_cta"),
              "%s", mlajit_last_error());
}

/* sm90 pairs the CTAs of two head groups into a cluster (h_q 65..128); one head
 * group, or the portable family, launches no cluster. */
Test(generate, cluster_pairs_two_sm90_head_groups)
{
    struct { int h_q; mlajit_variant variant; int cluster; } rows[] = {
        {128, MLAJIT_VARIANT_SM90, 2}, {65, MLAJIT_VARIANT_SM90, 2}, {64, MLAJIT_VARIANT_SM90, 1},
        {8, MLAJIT_VARIANT_SM90, 1},   {128, MLAJIT_VARIANT_PORTABLE, 1},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, r = MLAJIT_KERNEL_SPEC_INIT;
        mlajit_spec_init(&s, MLAJIT_MODEL_V32, rows[i].h_q, 64);
        strcpy(s.arch, "sm_90a");
        s.variant = rows[i].variant;
        cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
        mlajit_kernel_layout l;
        cr_assert_eq(mlajit_codegen_layout(&r, &l), MLAJIT_OK);
        cr_expect_eq(l.cluster_ctas, rows[i].cluster, "h%d variant %d", rows[i].h_q, rows[i].variant);
        char *src = NULL;
        cr_assert_eq(mlajit_generate_source(&s, &src), MLAJIT_OK, "%s", mlajit_last_error());
        char expect[64];
        snprintf(expect, sizeof expect, "constexpr int kClusterCtas = %d;", rows[i].cluster);
        cr_expect(strstr(src, expect) != NULL, "h%d: %s", rows[i].h_q, expect);
        cr_expect_eq(strstr(src, "__cluster_dims__(1, 2, 1)") != NULL, rows[i].cluster == 2, "h%d", rows[i].h_q);
        if (rows[i].variant == MLAJIT_VARIANT_PORTABLE) /* a map field it does not use is 0, not stack bytes */
            cr_expect(strstr(src, "constexpr int kSmemBarriers = 0;") != NULL);
        mlajit_free(src);
    }
}

/* sm90-split (auto's kernel for DOTS3_SWA past 32 heads): every head group a
 * cluster of two CTAs (the dims' halves), so the plan's grid has two CTAs per head
 * group along y, and its map fits sm_90a; no P V in flight (a head-group pair's
 * option). */
Test(generate, sm90_split_is_two_ctas_per_head_group)
{
    const int heads[] = {33, 64, 65, 128};
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
        mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, r = MLAJIT_KERNEL_SPEC_INIT;
        mlajit_spec_init(&s, MLAJIT_MODEL_DOTS3_SWA, heads[i], 64);
        strcpy(s.arch, "sm_90a");
        s.variant = MLAJIT_VARIANT_SM90_SPLIT;
        cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
        cr_expect_eq(r.variant, MLAJIT_VARIANT_SM90_SPLIT, "h%d: %s", heads[i], mlajit_variant_name(r.variant));
        mlajit_kernel_layout l;
        cr_assert_eq(mlajit_codegen_layout(&r, &l), MLAJIT_OK);
        cr_expect(l.cluster_ctas == 2 && l.ctas_per_head_group == 2 && l.threads == 384, "h%d", heads[i]);
        cr_expect_leq(l.smem_bytes, mlajit_arch_max_smem("sm_90a"), "h%d", heads[i]);
        mlajit_decode_shape shape = MLAJIT_DECODE_SHAPE_INIT;
        shape.batch = 3;
        shape.topk = 2048;
        shape.num_splits = 1;
        mlajit_plan_outline o = MLAJIT_PLAN_OUTLINE_INIT;
        cr_assert_eq(mlajit_plan_describe(&s, &shape, 132, &o), MLAJIT_OK, "%s", mlajit_last_error());
        cr_expect_eq(o.head_groups, 2 * ((heads[i] + 63) / 64), "h%d: two CTAs per head group", heads[i]);
        char *src = NULL;
        cr_assert_eq(mlajit_generate_source(&s, &src), MLAJIT_OK, "%s", mlajit_last_error());
        cr_expect(strstr(src, "__cluster_dims__(1, 2, 1)") && strstr(src, "constexpr bool kPvInFlight = false;"),
                  "h%d", heads[i]);
        mlajit_free(src);
    }
    /* auto: sm90-split past 32 heads, where a pair of 64-head CTAs pads no more than
     * half; sm90-narrow (one K buffer) at 16 and fewer; the portable family between */
    for (int h = 16; h <= 128; h *= 2) {
        mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, r = MLAJIT_KERNEL_SPEC_INIT;
        mlajit_spec_init(&s, MLAJIT_MODEL_DOTS3_SWA, h, 64);
        strcpy(s.arch, "sm_90a");
        cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
        cr_expect_eq(r.variant,
                     h > 32   ? MLAJIT_VARIANT_SM90_SPLIT
                     : h > 16 ? MLAJIT_VARIANT_PORTABLE
                              : MLAJIT_VARIANT_SM90_NARROW,
                     "h%d: auto took %s", h, mlajit_variant_name(r.variant));
    }
}

/* sm90-narrow at DOTS3_SWA's d_v 1024: one K buffer (two 139 KB tiles do not fit
 * beside Q), at most 16 heads per CTA (O^T's registers), the template's layouts
 * edition (its base text has two buffers); V3.2's narrow kernel keeps two and the
 * base text. */
/* The staging area, the mbarriers, the total of a generated source's map, and its
 * producer groups and threads, as the generator wrote them (generate.c). */
typedef struct {
    int staging, bytes, stages, barriers, total, groups, threads;
} source_map;
/* The value of `constexpr int NAME = value;` in a generated source (asserted present). */
static int source_constant(const char *src, const char *name)
{
    char decl[64];
    int value = -1;
    snprintf(decl, sizeof decl, "constexpr int %s = ", name);
    const char *at = strstr(src, decl);
    cr_assert(at && sscanf(at + strlen(decl), "%d;", &value) == 1, "%s", decl);
    return value;
}
static source_map map_of_source(const char *src)
{
    source_map m = {-1, -1, -1, -1, -1, -1, -1};
    const char *at = strstr(src, "constexpr int kSmemStaging = ");
    cr_assert(at && sscanf(at, "constexpr int kSmemStaging = %d, kSmemStagingBytes = %d, kStagingStages = %d;",
                           &m.staging, &m.bytes, &m.stages) == 3);
    m.barriers = source_constant(src, "kSmemBarriers");
    m.total = source_constant(src, "kSmemBytes");
    m.groups = source_constant(src, "kProducerGroups");
    m.threads = source_constant(src, "kThreads");
    return m;
}

Test(generate, narrow_takes_one_k_buffer_where_two_do_not_fit)
{
    static const struct { mlajit_model model; int h_q, heads_per_cta, buffers; } rows[] = {
        {MLAJIT_MODEL_DOTS3_SWA, 16, 0, 1}, {MLAJIT_MODEL_DOTS3_SWA, 5, 0, 1}, {MLAJIT_MODEL_DOTS3_SWA, 64, 16, 1},
        {MLAJIT_MODEL_V32, 32, 0, 2}, {MLAJIT_MODEL_DSV4, 16, 0, 2}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, r = MLAJIT_KERNEL_SPEC_INIT;
        mlajit_spec_init(&s, rows[i].model, rows[i].h_q, 64);
        strcpy(s.arch, "sm_90a");
        s.variant = MLAJIT_VARIANT_SM90_NARROW;
        s.heads_per_cta = rows[i].heads_per_cta;
        cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "row %zu: %s", i, mlajit_last_error());
        cr_expect_eq(mlajit_narrow_k_buffers(&r), rows[i].buffers, "row %zu", i);
        mlajit_kernel_layout layout;
        cr_assert_eq(mlajit_codegen_layout(&r, &layout), MLAJIT_OK, "%s", mlajit_last_error());
        cr_expect_leq(layout.smem_bytes, mlajit_arch_max_smem("sm_90a"), "row %zu", i);
        char *src = NULL;
        cr_assert_eq(mlajit_generate_source(&s, &src), MLAJIT_OK, "%s", mlajit_last_error());
        /* the layouts edition's count of the buffers, only where there is one */
        cr_expect_eq(strstr(src, "kKBuffers") != NULL, rows[i].buffers == 1, "row %zu", i);
        if (rows[i].buffers == 1) {
            /* at 16 heads what is left holds the heads of a tile's 64 rows (whole
             * 64-byte steps of NoPE codes, 832 a row) and the two groups' mbarriers,
             * and a step more would not fit; at 8 (5 rounded up) nothing: the whole
             * round in registers, which measured faster there */
            const source_map m = map_of_source(src);
            cr_expect_eq(m.stages, 0, "row %zu: not the row ring", i);
            cr_expect_leq(m.total, mlajit_arch_max_smem("sm_90a"), "row %zu", i);
            if (r.heads_per_cta == 16) {
                cr_expect_eq(m.bytes, 64 * 832, "row %zu: %d bytes", i, m.bytes);
                cr_expect(m.barriers > 0 && m.barriers + 2 * 8 <= m.staging && m.staging % 16 == 0, "row %zu", i);
                cr_expect_leq(m.staging + m.bytes + 1024, m.total, "row %zu: the alignment slack stays", i);
                cr_expect_gt(m.total + 64 * 64, mlajit_arch_max_smem("sm_90a"), "row %zu: a step more would not fit", i);
            } else {
                cr_expect_eq(m.bytes, 0, "row %zu: %d bytes", i, m.bytes);
            }
        }
        mlajit_free(src);
    }
    /* past 16 heads per CTA at d_v 1024: refused, saying why and what to set */
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, r = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_spec_init(&s, MLAJIT_MODEL_DOTS3_SWA, 24, 64);
    strcpy(s.arch, "sm_90a");
    s.variant = MLAJIT_VARIANT_SM90_NARROW;
    cr_expect_eq(mlajit_spec_resolve(&s, &r), MLAJIT_ERR_UNSUPPORTED);
    cr_expect(strstr(mlajit_last_error(), "at most 16 heads per CTA at d_v past 512") &&
                  strstr(mlajit_last_error(), "8 or 16"),
              "%s", mlajit_last_error());
    s.heads_per_cta = 32;
    cr_expect_eq(mlajit_spec_resolve(&s, &r), MLAJIT_ERR_UNSUPPORTED);
    s.heads_per_cta = 8;
    cr_expect_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
    /* one buffer only for the kind run on the GPU (d_v past 512, fp8 rows, footer
     * scales): the same dims with inline scales keep two and are refused for size */
    mlajit_layout l;
    cr_assert_eq(mlajit_layout_parse("d_nope=1024,d_rope=64,d_v=1024,tile=256,scales=pow2,place=inline", &l),
                 MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_kernel_spec inline_spec = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init_layout(&inline_spec, &l, 16, 64), MLAJIT_OK, "%s", mlajit_last_error());
    strcpy(inline_spec.arch, "sm_90a");
    inline_spec.variant = MLAJIT_VARIANT_SM90_NARROW;
    cr_expect_eq(mlajit_envelope_check(&inline_spec, NULL), MLAJIT_ERR_UNSUPPORTED);
    cr_expect(strstr(mlajit_last_error(), "bytes of shared memory") != NULL, "%s", mlajit_last_error());
    mlajit_kernel_spec inline_resolved = inline_spec;
    inline_resolved.heads_per_cta = 16;
    inline_resolved.tile = 64;
    cr_expect_eq(mlajit_narrow_k_buffers(&inline_resolved), 2);
    /* the rows' heads through the slot only with RoPE (DOTS3_SWA's kind): a footer
     * layout without it keeps one K buffer and the round in registers */
    cr_assert_eq(mlajit_layout_parse("d_nope=1024,d_rope=0,d_v=1024,tile=128,scales=ue8m0,place=footer", &l),
                 MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_kernel_spec no_rope = MLAJIT_KERNEL_SPEC_INIT, no_rope_resolved = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init_layout(&no_rope, &l, 16, 64), MLAJIT_OK, "%s", mlajit_last_error());
    strcpy(no_rope.arch, "sm_90a");
    no_rope.variant = MLAJIT_VARIANT_SM90_NARROW;
    cr_assert_eq(mlajit_spec_resolve(&no_rope, &no_rope_resolved), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(mlajit_narrow_k_buffers(&no_rope_resolved), 1);
    char *src = NULL;
    cr_assert_eq(mlajit_generate_source(&no_rope, &src), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(map_of_source(src).bytes, 0, "no slot without RoPE");
    mlajit_free(src);
}

/* kPvInFlight, the pair's P V left in flight behind the next S: chosen for the
 * DSV4 pairs (footer scales), where it was measured faster; not for V3.2's pairs
 * (slower), GLM's (exact scales: no registers for it) or one head group (slower,
 * and spills), nor any other family. */
Test(generate, pv_in_flight_for_footer_scaled_pairs_only)
{
    struct { mlajit_model model; int h_q; mlajit_variant variant; int in_flight; } rows[] = {
        {MLAJIT_MODEL_DSV4, 128, MLAJIT_VARIANT_SM90, 1},
        {MLAJIT_MODEL_DSV4, 128, MLAJIT_VARIANT_SM90_STAGED, 1},
        {MLAJIT_MODEL_DSV4, 65, MLAJIT_VARIANT_SM90, 1},
        {MLAJIT_MODEL_DSV4, 64, MLAJIT_VARIANT_SM90, 0},
        {MLAJIT_MODEL_DSV4, 32, MLAJIT_VARIANT_SM90_NARROW, 0},
        {MLAJIT_MODEL_DSV4, 128, MLAJIT_VARIANT_PORTABLE, 0},
        {MLAJIT_MODEL_V32, 128, MLAJIT_VARIANT_SM90, 0},
        {MLAJIT_MODEL_V32, 128, MLAJIT_VARIANT_SM90_STAGED, 0},
        {MLAJIT_MODEL_GLM_NSA, 128, MLAJIT_VARIANT_SM90, 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
        mlajit_spec_init(&s, rows[i].model, rows[i].h_q, 64);
        strcpy(s.arch, "sm_90a");
        s.variant = rows[i].variant;
        char *src = NULL;
        cr_assert_eq(mlajit_generate_source(&s, &src), MLAJIT_OK, "row %zu: %s", i, mlajit_last_error());
        const char *expect = rows[i].in_flight ? "constexpr bool kPvInFlight = true;" : "constexpr bool kPvInFlight = false;";
        cr_expect(strstr(src, expect) != NULL, "row %zu (model %d, h%d, variant %d): %s", i, (int)rows[i].model,
                  rows[i].h_q, (int)rows[i].variant, expect);
        mlajit_free(src);
    }
}

/* sm90-narrow's row ring: one round of rows per producer group, in shared memory
 * beside Q and both K buffers, where the rows hold their scales (V32: every head
 * count of the variant); DSV4's footer scales keep the register rounds.
 * sm90-narrow-long adds a third producer group (a fourth warp group, 512 threads)
 * where its slot fits too: V32 at 16 heads and fewer (the heads' final statistics
 * follow the staged output in the K buffers, which makes the room at 16), not at
 * 24-32, where it resolves to sm90-narrow. The ring and its
 * mbarriers lie inside the kernel's shared memory, 16-byte aligned for the bulk
 * copies. */
Test(generate, narrow_row_ring_where_the_rows_hold_their_scales)
{
    const mlajit_variant narrow = MLAJIT_VARIANT_SM90_NARROW, narrow_long = MLAJIT_VARIANT_SM90_NARROW_LONG;
    struct { mlajit_model model; int h_q; mlajit_variant variant; int rounds; int groups; } rows[] = {
        {MLAJIT_MODEL_V32, 1, narrow, 1, 2},       {MLAJIT_MODEL_V32, 8, narrow, 1, 2},
        {MLAJIT_MODEL_V32, 16, narrow, 1, 2},      {MLAJIT_MODEL_V32, 24, narrow, 1, 2},
        {MLAJIT_MODEL_V32, 32, narrow, 1, 2},      {MLAJIT_MODEL_DSV4, 8, narrow, 0, 2},
        {MLAJIT_MODEL_DSV4, 16, narrow, 0, 2},     {MLAJIT_MODEL_DSV4, 32, narrow, 0, 2},
        {MLAJIT_MODEL_V32, 1, narrow_long, 1, 3},  {MLAJIT_MODEL_V32, 8, narrow_long, 1, 3},
        {MLAJIT_MODEL_V32, 16, narrow_long, 1, 3}, {MLAJIT_MODEL_V32, 24, narrow_long, 1, 2},
        {MLAJIT_MODEL_V32, 32, narrow_long, 1, 2},
        {MLAJIT_MODEL_DSV4, 8, narrow_long, 0, 2},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, r = MLAJIT_KERNEL_SPEC_INIT;
        mlajit_spec_init(&s, rows[i].model, rows[i].h_q, 64);
        strcpy(s.arch, "sm_90a");
        s.variant = rows[i].variant;
        cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
        /* one name per kernel: sm90-narrow-long without its third group is sm90-narrow */
        cr_expect_eq(r.variant, rows[i].groups == 3 ? narrow_long : narrow, "h%d", rows[i].h_q);
        cr_expect_eq(mlajit_narrow_producer_groups(&r), rows[i].groups, "h%d", rows[i].h_q);
        mlajit_kernel_layout l;
        cr_assert_eq(mlajit_codegen_layout(&r, &l), MLAJIT_OK);
        char *src = NULL;
        cr_assert_eq(mlajit_generate_source(&s, &src), MLAJIT_OK, "%s", mlajit_last_error());
        const source_map map = map_of_source(src);
        const char *name = mlajit_model_describe(rows[i].model)->name;
        cr_expect_eq(map.stages, rows[i].rounds, "%s h%d", name, rows[i].h_q);
        cr_expect_eq(map.groups, rows[i].groups, "%s h%d", name, rows[i].h_q);
        cr_expect_eq(map.threads, 128 * (1 + map.groups), "%s h%d", name, rows[i].h_q);
        cr_expect_eq(l.threads, map.threads, "%s h%d: the launch's block is the kernel's", name, rows[i].h_q);
        if (rows[i].rounds) {
            cr_expect_eq(map.bytes, map.groups * rows[i].rounds * 32 * mlajit_model_describe(rows[i].model)->row_bytes);
            /* a slot's mbarrier each, and with three groups the K buffers' two */
            int mbarriers = map.groups * rows[i].rounds + (map.groups > 2 ? 2 : 0);
            cr_expect(map.barriers > 0 && map.barriers + mbarriers * 8 <= map.staging && map.staging % 16 == 0,
                      "%s h%d: mbarriers at %d, rows at %d", name, rows[i].h_q, map.barriers, map.staging);
            cr_expect_leq(map.staging + map.bytes + 1024, map.total, "%s h%d: the alignment slack stays", name, rows[i].h_q);
        } else {
            cr_expect_eq(map.bytes, 0, "%s h%d", name, rows[i].h_q);
        }
        cr_expect_eq(l.smem_bytes, map.total);
        cr_expect_leq(map.total, mlajit_arch_max_smem("sm_90a"), "%s h%d", name, rows[i].h_q);
        mlajit_free(src);
    }
}

/* sm90-narrow's head group: 0 resolves to h_q rounded up to 8 (every head in one
 * CTA); 8-32 up to that split the heads into groups (a grid dimension); more
 * than the heads is refused, naming the allowed values. At 32 heads in groups
 * of 16 sm90-narrow-long's third producer group fits (a group's shared memory). */
/* sm90-narrow-scores resolves as itself where its layout fits (V3.2's inline scales
 * at 8 heads per CTA: 512 threads, two slots of a tile's rows) and is sm90-narrow
 * elsewhere: 16 heads per CTA (7 KB too many), DSV4's footer scales, and on sm_90a
 * only (wgmma). */
Test(generate, narrow_scores_where_its_layout_fits)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, r = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_kernel_layout l;
    cr_assert_eq(mlajit_spec_init(&s, MLAJIT_MODEL_V32, 8, 64), MLAJIT_OK);
    s.variant = MLAJIT_VARIANT_SM90_NARROW_SCORES;
    snprintf(s.arch, sizeof s.arch, "sm_90a");
    cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.variant, MLAJIT_VARIANT_SM90_NARROW_SCORES);
    cr_expect_eq(r.heads_per_cta, 8);
    cr_assert_eq(mlajit_codegen_layout(&r, &l), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(l.threads, 512, "value, two score and a copier warp group");
    cr_expect_leq(l.smem_bytes, mlajit_arch_max_smem("sm_90a"));
    cr_expect(mlajit_narrow_scores_fits(&r));
    s.h_q = 3;
    cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.variant, MLAJIT_VARIANT_SM90_NARROW_SCORES, "3 heads: a group of 8");
    s.h_q = 16;
    cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.variant, MLAJIT_VARIANT_SM90_NARROW, "16 heads per CTA: no room");
    s.heads_per_cta = 8;
    cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.variant, MLAJIT_VARIANT_SM90_NARROW_SCORES, "16 heads in groups of 8");
    s.model = MLAJIT_MODEL_DSV4;
    cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.variant, MLAJIT_VARIANT_SM90_NARROW, "DSV4's footer scales: no ring");
    s.model = MLAJIT_MODEL_V32;
    snprintf(s.arch, sizeof s.arch, "sm_80");
    cr_expect_eq(mlajit_spec_resolve(&s, &r), MLAJIT_ERR_UNSUPPORTED);
    cr_expect(strstr(mlajit_last_error(), "sm90-narrow-scores needs spec.arch = sm_90a") != NULL, "%s",
              mlajit_last_error());
}

Test(spec, narrow_head_groups_resolve_up_to_the_heads)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, r = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init(&s, MLAJIT_MODEL_V32, 20, 64), MLAJIT_OK);
    strcpy(s.arch, "sm_90a");
    s.variant = MLAJIT_VARIANT_SM90_NARROW;
    cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.heads_per_cta, 24);
    const int groups[] = {8, 16, 24};
    for (int i = 0; i < 3; i++) {
        s.heads_per_cta = groups[i];
        cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "hc%d: %s", groups[i], mlajit_last_error());
        cr_expect_eq(r.heads_per_cta, groups[i]);
        cr_expect_eq(r.variant, MLAJIT_VARIANT_SM90_NARROW);
        mlajit_kernel_layout l;
        cr_assert_eq(mlajit_codegen_layout(&r, &l), MLAJIT_OK);
        cr_expect_eq(l.heads_per_cta, groups[i]);
        cr_expect_eq(l.cluster_ctas, 1, "a head group is a CTA of its own");
    }
    s.heads_per_cta = 32;
    cr_expect_eq(mlajit_spec_resolve(&s, &r), MLAJIT_ERR_UNSUPPORTED);
    cr_expect(strstr(mlajit_last_error(), "heads_per_cta 32") && strstr(mlajit_last_error(), "8, 16, 24 or 32 up to 24"),
              "%s", mlajit_last_error());
    s.h_q = 32;
    s.variant = MLAJIT_VARIANT_SM90_NARROW_LONG;
    s.heads_per_cta = 0;
    cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.variant, MLAJIT_VARIANT_SM90_NARROW, "32 heads in one CTA: no room for the third group");
    s.heads_per_cta = 16;
    cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.variant, MLAJIT_VARIANT_SM90_NARROW_LONG, "16 of 32 heads per CTA: the third group fits");
    cr_expect_eq(mlajit_narrow_producer_groups(&r), 3);
    /* past 32 heads the head group must be given: groups of at most 32 */
    s.variant = MLAJIT_VARIANT_SM90_NARROW;
    s.h_q = 72;
    s.heads_per_cta = 0;
    cr_expect_eq(mlajit_spec_resolve(&s, &r), MLAJIT_ERR_UNSUPPORTED);
    cr_expect(strstr(mlajit_last_error(), "set heads_per_cta to 8, 16, 24 or 32") != NULL, "%s", mlajit_last_error());
    s.heads_per_cta = 64;
    cr_expect_eq(mlajit_spec_resolve(&s, &r), MLAJIT_ERR_UNSUPPORTED);
    cr_expect(strstr(mlajit_last_error(), "8, 16, 24 or 32 up to 32") != NULL, "%s", mlajit_last_error());
    const struct { int h_q, heads_per_cta; mlajit_variant variant; } wide[] = {
        {64, 32, MLAJIT_VARIANT_SM90_NARROW}, {72, 16, MLAJIT_VARIANT_SM90_NARROW_LONG}, {128, 24, MLAJIT_VARIANT_SM90_NARROW},
    };
    for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++) {
        s.h_q = wide[i].h_q;
        s.heads_per_cta = wide[i].heads_per_cta;
        s.variant = wide[i].variant;
        cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "h%d: %s", s.h_q, mlajit_last_error());
        cr_expect_eq(r.variant, wide[i].variant, "h%d hc%d", s.h_q, s.heads_per_cta);
        cr_expect_eq(r.heads_per_cta, wide[i].heads_per_cta);
        char *src = NULL;
        cr_assert_eq(mlajit_generate_source(&s, &src), MLAJIT_OK, "h%d: %s", s.h_q, mlajit_last_error());
        char line[64];
        snprintf(line, sizeof line, "constexpr int kHeads = %d;", s.h_q);
        cr_expect(strstr(src, line) != NULL, "h%d: the kernel's head count", s.h_q);
        mlajit_free(src);
    }
}

/* From sm_90 both kernels wait on the device for the grid before them
 * (griddepcontrol), so the runtime may launch them early; before sm_90 they must
 * not be launched that way. */
Test(generate, kernels_are_dependent_launches_from_sm_90)
{
    struct { const char *arch; mlajit_variant variant; int dependent; } rows[] = {
        {"sm_90a", MLAJIT_VARIANT_SM90, 1}, {"sm_90a", MLAJIT_VARIANT_PORTABLE, 1}, {"sm_90", MLAJIT_VARIANT_PORTABLE, 1},
        {"sm_100a", MLAJIT_VARIANT_PORTABLE, 1}, {"sm_120", MLAJIT_VARIANT_PORTABLE, 1},
        {"sm_80", MLAJIT_VARIANT_PORTABLE, 0}, {"sm_89", MLAJIT_VARIANT_PORTABLE, 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, r = MLAJIT_KERNEL_SPEC_INIT;
        mlajit_spec_init(&s, MLAJIT_MODEL_V32, 16, 64);
        strcpy(s.arch, rows[i].arch);
        s.variant = rows[i].variant;
        cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s: %s", rows[i].arch, mlajit_last_error());
        mlajit_kernel_layout l;
        cr_assert_eq(mlajit_codegen_layout(&r, &l), MLAJIT_OK);
        cr_expect_eq(l.dependent_launch, rows[i].dependent, "%s", rows[i].arch);
        cr_expect_eq(mlajit_arch_has_grid_dependency(rows[i].arch), rows[i].dependent, "%s", rows[i].arch);
        char *src = NULL;
        cr_assert_eq(mlajit_generate_source(&s, &src), MLAJIT_OK, "%s", mlajit_last_error());
        const char *expect = rows[i].dependent ? "constexpr bool kDependentLaunch = true;"
                                               : "constexpr bool kDependentLaunch = false;";
        cr_expect(strstr(src, expect) != NULL, "%s: %s", rows[i].arch, expect);
        mlajit_free(src);
    }
    cr_expect_eq(mlajit_arch_has_grid_dependency("sm_91"), 0, "an unknown arch has none");
    cr_expect_eq(mlajit_arch_has_grid_dependency(NULL), 0);
}

/* A main kernel launched early may run before the kernel that writes its inputs
 * (q, indices, lengths) has finished: in every family the wait for that grid is
 * the first statement of mlajit_decode_main, ahead of anything that reads an
 * argument. */
Test(generate, main_kernel_waits_for_the_previous_grid_first)
{
    struct { mlajit_variant variant; int h_q; } rows[] = {
        {MLAJIT_VARIANT_PORTABLE, 64}, {MLAJIT_VARIANT_SM90, 128}, {MLAJIT_VARIANT_SM90_STAGED, 64},
        {MLAJIT_VARIANT_SM90_NARROW, 32}, {MLAJIT_VARIANT_SM90_NARROW_LONG, 8},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
        mlajit_spec_init(&s, MLAJIT_MODEL_V32, rows[i].h_q, 64);
        strcpy(s.arch, "sm_90a");
        s.variant = rows[i].variant;
        char *src = NULL;
        cr_assert_eq(mlajit_generate_source(&s, &src), MLAJIT_OK, "%s", mlajit_last_error());
        const char *entry = strstr(src, "mlajit_decode_main(");
        cr_assert(entry != NULL, "variant %d: no main entry", (int)rows[i].variant);
        const char *body = strchr(entry, '{');
        cr_assert(body != NULL);
        body++;
        while (*body == ' ' || *body == '\n') body++;
        if (strncmp(body, "using namespace", 15) == 0) {
            body = strchr(body, ';') + 1;
            while (*body == ' ' || *body == '\n') body++;
        }
        cr_expect(strncmp(body, "wait_for_prerequisite_grid();", 29) == 0,
                  "variant %d: the main kernel's first statement is not the wait: %.60s", (int)rows[i].variant, body);
        mlajit_free(src);
    }
}

Test(generate, source_carries_the_config_block)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_spec_init(&s, MLAJIT_MODEL_DSV4, 48, 61);
    s.extra_page_size = 2;
    s.features = MLAJIT_FEATURE_SINK | MLAJIT_FEATURE_EXTRA_TOPK_LENGTH;
    strcpy(s.arch, "sm_90a");
    char *src = NULL;
    cr_assert_eq(mlajit_generate_source(&s, &src), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_not_null(src);
    cr_expect(strstr(src, "constexpr int kDQK = 512;") != NULL);
    cr_expect(strstr(src, "constexpr int kHeads = 48;") != NULL);
    cr_expect(strstr(src, "constexpr int kPageSize = 61;") != NULL);
    cr_expect(strstr(src, "constexpr int kExtraPageSize = 2;") != NULL);
    cr_expect(strstr(src, "constexpr bool kHasSink = true;") != NULL);
    cr_expect(strstr(src, "constexpr bool kHasTopkLength = false;") != NULL);
    cr_expect(strstr(src, "constexpr bool kHasExtraTopkLength = true;") != NULL);
    cr_expect(strstr(src, "constexpr int kScaleFormat = 3;") != NULL);
    cr_expect(strstr(src, "mlajit_decode_main") != NULL);
    cr_expect(strstr(src, "mlajit_decode_combine") != NULL);
    cr_expect(strstr(src, "#include") == NULL, "kernels need no toolkit headers");
    cr_expect(strncmp(src, "#define MLAJIT_SPEC \"dsv4.h48.p61.e2.fsx.", 41) == 0, "the spec heads it: %.60s", src);
    mlajit_free(src);
}

/* The kernels' parameter block is written from kernel_abi.h's list: every field in
 * order with its CUDA type, then the size and each field's offset checked against
 * the host struct's (what NVRTC then enforces: test_nvrtc's params suite). */
Test(generate, parameter_block_is_emitted_from_the_one_list)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_spec_init(&s, MLAJIT_MODEL_V32, 16, 64);
    strcpy(s.arch, "sm_80");
    char *src = NULL;
    cr_assert_eq(mlajit_generate_source(&s, &src), MLAJIT_OK, "%s", mlajit_last_error());
    const char *at = strstr(src, "struct DecodeParams {\n");
    cr_assert_not_null(at);
    const char *prelude = strstr(src, "typedef unsigned char u8;");
    cr_assert(prelude && prelude > at, "the struct comes before the templates");
    char line[160];
    int fields = 0;
#define EXPECT_FIELD(c_type, cuda_type, name, offset)                                                              \
    snprintf(line, sizeof line, "\n    %s %s;\n", #cuda_type, #name);                                             \
    cr_expect(strstr(at, line) != NULL && strstr(at, line) < prelude, "field %s", #name);                         \
    if (strstr(at, line))                                                                                         \
        at = strstr(at, line) + 1;                                                                                 \
    fields++;
    MLAJIT_DECODE_PARAMS_FIELDS(EXPECT_FIELD)
#undef EXPECT_FIELD
    cr_expect_eq(fields, 38);
    snprintf(line, sizeof line, "static_assert(sizeof(DecodeParams) == %d,", MLAJIT_DECODE_PARAMS_BYTES);
    cr_expect(strstr(src, line) != NULL, "%s", line);
#define EXPECT_CHECK(c_type, cuda_type, name, offset)                                                              \
    snprintf(line, sizeof line, "static_assert(__INTADDR__(&((DecodeParams*)0)->%s) == %d,", #name, offset);       \
    cr_expect(strstr(src, line) != NULL && strstr(src, line) < prelude, "%s", line);
    MLAJIT_DECODE_PARAMS_FIELDS(EXPECT_CHECK)
#undef EXPECT_CHECK
    mlajit_free(src);
    /* the layout hash follows the list: fixed, and not zero */
    cr_expect_eq(mlajit_decode_params_layout_hash(), mlajit_decode_params_layout_hash());
    cr_expect_neq(mlajit_decode_params_layout_hash(), 0u);
}

Test(generate, equal_specs_equal_source_and_different_specs_differ)
{
    mlajit_kernel_spec a = MLAJIT_KERNEL_SPEC_INIT, b = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_spec_init(&a, MLAJIT_MODEL_V32, 16, 64);
    strcpy(a.arch, "sm_90a");
    b = a;
    char *sa, *sb;
    cr_assert_eq(mlajit_generate_source(&a, &sa), MLAJIT_OK);
    cr_assert_eq(mlajit_generate_source(&b, &sb), MLAJIT_OK);
    cr_expect_str_eq(sa, sb);
    mlajit_free(sb);
    b.page_size = 63;
    cr_assert_eq(mlajit_generate_source(&b, &sb), MLAJIT_OK);
    cr_expect_str_neq(sa, sb);
    mlajit_free(sa);
    mlajit_free(sb);
}

Test(generate, needs_an_arch)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_spec_init(&s, MLAJIT_MODEL_V32, 16, 64);
    char *src = (char *)1;
    cr_expect_eq(mlajit_generate_source(&s, &src), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect_null(src);
    cr_expect(strstr(mlajit_last_error(), "arch") != NULL);
}

/* Every alternative of a spec, as grids and pack hints take them: scores kernel,
 * long walk, head split, head groups and short walk, each only where the spec has
 * it: at 9-32 heads with power-of-two scales sm90-narrow with its head group halved
 * (8 at 9-16 heads, 16 at 17-32), at 16 and fewer with V3.2's rows first the long
 * walk's sm90-narrow-long (17-32 heads have no long-walk kernel); past 32 heads
 * with power-of-two scales sm90-narrow in groups of 16 and 32 before sm90-staged.
 * Arbitrary scales have none (the one-tile kernel, sm90-unpaired, is retired). */
Test(codegen, walk_alternatives_list_each_one_the_spec_has)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, alts[MLAJIT_WALK_ALTERNATIVES];
    cr_assert_eq(mlajit_spec_init(&s, MLAJIT_MODEL_V32, 16, 64), MLAJIT_OK);
    const struct { int h_q, group; } splits[] = {{17, 16}, {24, 16}, {25, 16}, {32, 16}};
    for (int i = 0; i < 4; i++) {
        s.h_q = splits[i].h_q;
        cr_expect_eq(mlajit_spec_walk_alternatives(&s, "sm_90a", alts), 1, "%d heads: the head split", s.h_q);
        cr_expect_eq(alts[0].variant, MLAJIT_VARIANT_SM90_NARROW);
        cr_expect_eq(alts[0].heads_per_cta, splits[i].group, "%d heads", s.h_q);
    }
    const int narrow_heads[] = {1, 6, 8, 11, 16};
    for (int i = 0; i < 5; i++) {
        const int h = narrow_heads[i];
        s.h_q = h;
        const int scores = h <= 8, split = h > 8;  /* sm90-narrow-scores at 1-8 heads */
        const int n = 1 + scores + split;
        cr_expect_eq(mlajit_spec_walk_alternatives(&s, "sm_90a", alts), n, "%d heads: %ssm90-narrow-long%s", h,
                     scores ? "sm90-narrow-scores, " : "", split ? ", the head split" : "");
        if (scores) {
            cr_expect_eq(alts[0].variant, MLAJIT_VARIANT_SM90_NARROW_SCORES);
            cr_expect_eq(alts[0].heads_per_cta, 0, "the scores kernel keeps the generator's head group");
            cr_expect_str_eq(alts[0].arch, "sm_90a");
        }
        cr_expect_eq(alts[scores].variant, MLAJIT_VARIANT_SM90_NARROW_LONG);
        cr_expect_eq(alts[scores].heads_per_cta, 0, "the long walk's kernel keeps the generator's head group");
        cr_expect_str_eq(alts[scores].arch, "sm_90a");
        if (split) {
            cr_expect_eq(alts[1].variant, MLAJIT_VARIANT_SM90_NARROW);
            cr_expect_eq(alts[1].heads_per_cta, 8);
            cr_expect_str_eq(alts[1].arch, "sm_90a");
        }
        cr_expect_eq(mlajit_spec_walk_alternatives(&s, "sm_80", alts), 0, "sm_80: none");
    }
    s.model = MLAJIT_MODEL_DSV4;
    cr_expect_eq(mlajit_spec_walk_alternatives(&s, "sm_90a", alts), 1, "DSV4 at 16 heads: no ring, the head split");
    cr_expect_eq(alts[0].heads_per_cta, 8);
    s.h_q = 8;
    cr_expect_eq(mlajit_spec_walk_alternatives(&s, "sm_90a", alts), 0, "DSV4 at 8 heads: none");
    s.model = MLAJIT_MODEL_V32;
    s.variant = MLAJIT_VARIANT_SM90_NARROW;
    cr_expect_eq(mlajit_spec_walk_alternatives(&s, "sm_90a", alts), 0, "a spec that names its variant: none");
    s.variant = MLAJIT_VARIANT_AUTO;
    s.h_q = 16;
    s.heads_per_cta = 16;
    cr_expect_eq(mlajit_spec_walk_alternatives(&s, "sm_90a", alts), 0, "a spec that names its head group: none");
    s.heads_per_cta = 0;
    /* arbitrary scales at 16 heads: V3.2's (GLM_NSA's rows are V3.2's); no scores
     * kernel (power-of-two scales only); at 8 heads the long walk alone */
    s.model = MLAJIT_MODEL_GLM_NSA;
    cr_expect_eq(mlajit_spec_walk_alternatives(&s, "sm_90a", alts), 2, "arbitrary scales at 16 heads: as V3.2");
    cr_expect_eq(alts[0].variant, MLAJIT_VARIANT_SM90_NARROW_LONG);
    cr_expect_eq(alts[1].variant, MLAJIT_VARIANT_SM90_NARROW);
    cr_expect_eq(alts[1].heads_per_cta, 8);
    s.model = MLAJIT_MODEL_GLM53_NOPE;
    s.h_q = 8;
    cr_expect_eq(mlajit_spec_walk_alternatives(&s, "sm_90a", alts), 1, "GLM53_NOPE at 8 heads: the long walk");
    cr_expect_eq(alts[0].variant, MLAJIT_VARIANT_SM90_NARROW_LONG);
    s.h_q = 16;
    s.model = MLAJIT_MODEL_V32;
    /* past 32 heads, in the order plans ask them: the head split (groups of 16),
     * the head groups (of 32), then the wide kernels' short walk */
    const int wide_heads[] = {33, 64, 96, 128};
    for (int i = 0; i < 4; i++) {
        s.h_q = wide_heads[i];
        cr_expect_eq(mlajit_spec_walk_alternatives(&s, "sm_90a", alts), 3, "%d heads", s.h_q);
        cr_expect_eq(alts[0].variant, MLAJIT_VARIANT_SM90_NARROW, "%d heads: the head split", s.h_q);
        cr_expect_eq(alts[0].heads_per_cta, 16);
        cr_expect_eq(alts[1].variant, MLAJIT_VARIANT_SM90_NARROW, "%d heads: the head groups", s.h_q);
        cr_expect_eq(alts[1].heads_per_cta, 32);
        cr_expect_eq(alts[2].variant, MLAJIT_VARIANT_SM90_STAGED);
        cr_expect_eq(alts[2].heads_per_cta, 0, "the short walk's kernel keeps the generator's head group");
        cr_expect_str_eq(alts[2].arch, "sm_90a");
    }
    s.model = MLAJIT_MODEL_DSV4;
    cr_expect_eq(mlajit_spec_walk_alternatives(&s, "sm_90a", alts), 3, "DSV4 at 128 heads: as V3.2");
    /* arbitrary scales past 32 heads: neither the head split nor the head groups
     * (unmeasured: spec.c); sm90-staged, with RoPE or without */
    s.model = MLAJIT_MODEL_GLM_NSA;
    cr_assert_eq(mlajit_spec_walk_alternatives(&s, "sm_90a", alts), 1, "GLM_NSA at 128 heads: sm90-staged");
    cr_expect_eq(alts[0].variant, MLAJIT_VARIANT_SM90_STAGED);
    s.model = MLAJIT_MODEL_GLM53_NOPE;
    s.h_q = 48;
    cr_assert_eq(mlajit_spec_walk_alternatives(&s, "sm_90a", alts), 1, "GLM53_NOPE at 48 heads: sm90-staged");
    cr_expect_eq(alts[0].variant, MLAJIT_VARIANT_SM90_STAGED);
    s.h_q = 128;
    s.model = MLAJIT_MODEL_V32;
    cr_expect_eq(mlajit_spec_walk_alternatives(&s, "sm_80", alts), 0, "not sm_90a: none");
    cr_expect_eq(mlajit_spec_walk_alternatives(NULL, "sm_90a", alts), 0);
}

/* Arbitrary fp32 scales (GLM_NSA, GLM53_NOPE, a custom layout of that kind): auto
 * runs sm90-narrow at most 32 heads on sm_90a, as for V3.2, its template's layouts
 * edition (the exact dequantization's register splits); past 32 heads sm90. V3.2's
 * narrow kernel keeps the base text. */
Test(spec, auto_takes_sm90_narrow_for_arbitrary_scales_up_to_32_heads)
{
    const mlajit_model models[] = {MLAJIT_MODEL_GLM_NSA, MLAJIT_MODEL_GLM53_NOPE};
    const struct { int h_q, hc; mlajit_variant variant; } rows[] = {
        {1, 8, MLAJIT_VARIANT_SM90_NARROW},   {7, 8, MLAJIT_VARIANT_SM90_NARROW},
        {16, 16, MLAJIT_VARIANT_SM90_NARROW}, {20, 24, MLAJIT_VARIANT_SM90_NARROW},
        {32, 32, MLAJIT_VARIANT_SM90_NARROW}, {33, 64, MLAJIT_VARIANT_SM90},
        {64, 64, MLAJIT_VARIANT_SM90},        {128, 64, MLAJIT_VARIANT_SM90},
    };
    for (size_t m = 0; m < 2; m++)
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
            mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, r = MLAJIT_KERNEL_SPEC_INIT;
            cr_assert_eq(mlajit_spec_init(&s, models[m], rows[i].h_q, 64), MLAJIT_OK);
            strcpy(s.arch, "sm_90a");
            cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
            cr_expect_eq(r.variant, rows[i].variant, "model %d, %d heads: %s", (int)models[m], rows[i].h_q,
                         mlajit_variant_name(r.variant));
            cr_expect_eq(r.heads_per_cta, rows[i].hc, "model %d, %d heads", (int)models[m], rows[i].h_q);
            if (r.variant != MLAJIT_VARIANT_SM90_NARROW)
                continue;
            char *src = NULL;
            cr_assert_eq(mlajit_generate_source(&s, &src), MLAJIT_OK, "%s", mlajit_last_error());
            cr_expect(strstr(src, "kRopeLoads == 0 ? RegisterSplit{240, 128}") != NULL, "the layouts edition");
            cr_expect(strstr(src, "static_assert(!kExactScalesOnly") == NULL, "no refusal of the scales");
            mlajit_free(src);
        }
    /* not on sm_80, and not where the spec names a head group sm90 runs */
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, r = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init(&s, MLAJIT_MODEL_GLM_NSA, 16, 64), MLAJIT_OK);
    strcpy(s.arch, "sm_80");
    cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.variant, MLAJIT_VARIANT_PORTABLE);
    strcpy(s.arch, "sm_90a");
    s.heads_per_cta = 64;
    cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.variant, MLAJIT_VARIANT_SM90);
    /* sm90-narrow-scores is sm90-narrow there (its template reads power-of-two scales) */
    s.heads_per_cta = 0;
    s.h_q = 8;
    s.variant = MLAJIT_VARIANT_SM90_NARROW_SCORES;
    cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.variant, MLAJIT_VARIANT_SM90_NARROW);
    /* the third producer group at 32 heads: not with arbitrary scales (the consumer's
     * 200 registers spilled there), kept for the power-of-two twin (216/96 spill none) */
    static const char *const rows528[] = {"d_nope=512,d_rope=0,d_v=512,tile=128,scales=fp32,place=inline",
                                          "d_nope=512,d_rope=0,d_v=512,tile=128,scales=pow2,place=inline"};
    for (int k = 0; k < 2; k++) {
        mlajit_layout l;
        cr_assert_eq(mlajit_layout_parse(rows528[k], &l), MLAJIT_OK, "%s", mlajit_last_error());
        mlajit_kernel_spec c = MLAJIT_KERNEL_SPEC_INIT, rc = MLAJIT_KERNEL_SPEC_INIT;
        cr_assert_eq(mlajit_spec_init_layout(&c, &l, 32, 64), MLAJIT_OK);
        c.variant = MLAJIT_VARIANT_SM90_NARROW_LONG;
        strcpy(c.arch, "sm_90a");
        cr_assert_eq(mlajit_spec_resolve(&c, &rc), MLAJIT_OK, "%s", mlajit_last_error());
        cr_expect_eq(rc.variant, k == 0 ? MLAJIT_VARIANT_SM90_NARROW : MLAJIT_VARIANT_SM90_NARROW_LONG, "%s",
                     rows528[k]);
        c.h_q = 24;
        cr_assert_eq(mlajit_spec_resolve(&c, &rc), MLAJIT_OK, "%s", mlajit_last_error());
        cr_expect_eq(rc.variant, MLAJIT_VARIANT_SM90_NARROW_LONG, "%s at 24 heads", rows528[k]);
    }
    /* V3.2's narrow kernel: the base text */
    cr_assert_eq(mlajit_spec_init(&s, MLAJIT_MODEL_V32, 16, 64), MLAJIT_OK);
    strcpy(s.arch, "sm_90a");
    char *src = NULL;
    cr_assert_eq(mlajit_generate_source(&s, &src), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect(strstr(src, "static_assert(!kExactScalesOnly") != NULL, "V3.2: the base text");
    cr_expect(strstr(src, "kExactScalesOnly && kRopeLoads == 0") == NULL);
    mlajit_free(src);
}

Test(codegen, short_walk_alternative_is_sm90_staged_on_sm90a_auto_specs)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, alt = MLAJIT_KERNEL_SPEC_INIT, r = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init(&s, MLAJIT_MODEL_DSV4, 128, 256), MLAJIT_OK);
    cr_expect_eq(mlajit_spec_short_walk_alternative(&s, "sm_90a", &alt), 1);
    cr_expect_eq(alt.variant, MLAJIT_VARIANT_SM90_STAGED);
    cr_expect_str_eq(alt.arch, "sm_90a");
    cr_assert_eq(mlajit_spec_resolve(&alt, &r), MLAJIT_OK);
    cr_expect_eq(r.tile, 64);
    cr_expect_eq(r.heads_per_cta, 64);
    mlajit_kernel_layout layout;
    cr_assert_eq(mlajit_codegen_layout(&r, &layout), MLAJIT_OK);
    cr_expect_eq(layout.single_split, 1);
    cr_expect_eq(mlajit_spec_short_walk_alternative(&s, "sm_80", &alt), 0, "wgmma: sm_90a only");
    s.variant = MLAJIT_VARIANT_SM90;
    cr_expect_eq(mlajit_spec_short_walk_alternative(&s, "sm_90a", &alt), 0, "only auto switches");
    s.variant = MLAJIT_VARIANT_AUTO;
    s.tile = 64;
    cr_expect_eq(mlajit_spec_short_walk_alternative(&s, "sm_90a", &alt), 0, "a chosen tile stays");
    cr_expect_eq(mlajit_spec_short_walk_alternative(NULL, "sm_90a", &alt), 0);
    mlajit_kernel_spec h32 = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init(&h32, MLAJIT_MODEL_V32, 32, 64), MLAJIT_OK);
    cr_expect_eq(mlajit_spec_short_walk_alternative(&h32, "sm_90a", &alt), 0, "32 heads: tied or lost");
    h32.h_q = 33;
    cr_expect_eq(mlajit_spec_short_walk_alternative(&h32, "sm_90a", &alt), 1);
    mlajit_kernel_spec glm = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init(&glm, MLAJIT_MODEL_GLM_NSA, 64, 64), MLAJIT_OK);
    cr_expect_eq(mlajit_spec_short_walk_alternative(&glm, "sm_90a", &alt), 1, "arbitrary scales with RoPE too");
    cr_expect_eq(alt.variant, MLAJIT_VARIANT_SM90_STAGED);
    /* its name round-trips, and it is sm90's generated kernel with the staged epilogue */
    char name[128];
    cr_assert_eq(mlajit_spec_string(&r, name, sizeof name), MLAJIT_OK);
    cr_expect_str_eq(name, "dsv4.h128.p256.t64.hc64.sm90-staged.sm_90a");
    mlajit_kernel_spec back = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_parse(name, &back), MLAJIT_OK);
    cr_expect_eq(back.variant, MLAJIT_VARIANT_SM90_STAGED);
    char *src = NULL;
    cr_assert_eq(mlajit_generate_source(&r, &src), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect(strstr(src, "constexpr bool kStagedOutput = true;") != NULL);
    mlajit_free(src);
    r.variant = MLAJIT_VARIANT_SM90;
    cr_assert_eq(mlajit_generate_source(&r, &src), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect(strstr(src, "constexpr bool kStagedOutput = false;") != NULL);
    mlajit_free(src);
}

Test(spec, variant_names_round_trip_and_unknown_names_are_refused)
{
    const mlajit_variant all[] = {MLAJIT_VARIANT_AUTO,          MLAJIT_VARIANT_PORTABLE,
                                  MLAJIT_VARIANT_SM90,          MLAJIT_VARIANT_SM90_STAGED,
                                  MLAJIT_VARIANT_SM90_NARROW,   MLAJIT_VARIANT_SM90_NARROW_LONG,
                                  MLAJIT_VARIANT_SM90_NARROW_SCORES, MLAJIT_VARIANT_SM90_SPLIT};
    cr_expect_eq(sizeof all / sizeof all[0], (size_t)mlajit_family_count + 1, "every row of the table, and auto");
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        const char *name = mlajit_variant_name(all[i]);
        cr_expect_not_null(strstr(MLAJIT_VARIANT_NAMES, name), "'%s' missing from MLAJIT_VARIANT_NAMES", name);
        mlajit_variant back = (mlajit_variant)-1;
        cr_expect_eq(mlajit_variant_from_name(name, &back), 1, "%s", name);
        cr_expect_eq(back, all[i], "%s", name);
    }
    mlajit_variant v = MLAJIT_VARIANT_SM90;
    cr_expect_eq(mlajit_variant_from_name("fast", &v), 0);
    cr_expect_eq(mlajit_variant_from_name("", &v), 0);
    cr_expect_eq(mlajit_variant_from_name(NULL, &v), 0);
    cr_expect_eq(v, MLAJIT_VARIANT_SM90, "a refused name leaves *out alone");
}

/* The retired variants (sliced, sm90-unpaired) keep their numbers, and every other
 * variant its own; a spec that names one, by number or by name in a spec string,
 * is refused as unsupported, the message naming it, saying it was retired and
 * what to use; nothing resolves, generates or lists it. */
Test(spec, retired_variants_are_refused_with_what_to_use)
{
    cr_expect(MLAJIT_VARIANT_AUTO == 0 && MLAJIT_VARIANT_PORTABLE == 1 && MLAJIT_VARIANT_SM90 == 2 &&
                  MLAJIT_VARIANT_SLICED == 3 && MLAJIT_VARIANT_SM90_STAGED == 4 && MLAJIT_VARIANT_SM90_UNPAIRED == 5 &&
                  MLAJIT_VARIANT_SM90_NARROW == 6 && MLAJIT_VARIANT_SM90_NARROW_LONG == 7 &&
                  MLAJIT_VARIANT_SM90_NARROW_SCORES == 8,
              "the enum's numbers do not move");
    const struct {
        mlajit_variant variant;
        const char *name, *number, *instead, *spec_string;
    } retired[] = {
        {MLAJIT_VARIANT_SLICED, "sliced", "spec.variant = 3: ", "use auto, or force sm90 (sm_90a) or portable",
         "v32.h16.p64.t32.hc16.sliced.sm_90a"},
        {MLAJIT_VARIANT_SM90_UNPAIRED, "sm90-unpaired", "spec.variant = 5: ", "use auto, or force sm90",
         "v32.h128.p64.sm90-unpaired"},
    };
    for (size_t i = 0; i < sizeof retired / sizeof retired[0]; i++) {
        char said[160];
        snprintf(said, sizeof said, "%svariant %s was retired: ", retired[i].number, retired[i].name);
        mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, r = MLAJIT_KERNEL_SPEC_INIT;
        cr_assert_eq(mlajit_spec_init(&s, MLAJIT_MODEL_V32, 128, 64), MLAJIT_OK);
        s.variant = retired[i].variant;
        cr_expect_eq(mlajit_spec_validate(&s), MLAJIT_ERR_UNSUPPORTED, "%s", retired[i].name);
        cr_expect(strstr(mlajit_last_error(), said) && strstr(mlajit_last_error(), retired[i].instead) &&
                      strstr(mlajit_last_error(), "bench/NOTES.md"),
                  "'%s' should say '%s' and '%s'", mlajit_last_error(), said, retired[i].instead);
        s.heads_per_cta = 8; /* a head group only a family can take: still the retirement that is said */
        cr_expect_eq(mlajit_spec_validate(&s), MLAJIT_ERR_UNSUPPORTED, "%s", mlajit_last_error());
        cr_expect(strstr(mlajit_last_error(), said) != NULL, "%s", mlajit_last_error());
        s.heads_per_cta = 0;
        /* on every arch, through every entry that takes a spec */
        const char *archs[] = {"sm_80", "sm_90a", "sm_100a"};
        for (int a = 0; a < 3; a++) {
            strcpy(s.arch, archs[a]);
            cr_expect_eq(mlajit_spec_resolve(&s, &r), MLAJIT_ERR_UNSUPPORTED, "%s %s", retired[i].name, archs[a]);
            cr_expect(strstr(mlajit_last_error(), said) != NULL, "%s", mlajit_last_error());
            char name[128], *src = NULL;
            cr_expect_eq(mlajit_spec_string(&s, name, sizeof name), MLAJIT_ERR_UNSUPPORTED);
            cr_expect_eq(mlajit_generate_source(&s, &src), MLAJIT_ERR_UNSUPPORTED);
            cr_expect_null(src);
            cr_expect_eq(mlajit_envelope_check(&s, NULL), MLAJIT_ERR_UNSUPPORTED);
            cr_expect(strstr(mlajit_last_error(), said) != NULL, "%s", mlajit_last_error());
        }
        /* by name: in a spec string, and as a variant name */
        mlajit_kernel_spec parsed = MLAJIT_KERNEL_SPEC_INIT;
        cr_expect_eq(mlajit_spec_parse(retired[i].spec_string, &parsed), MLAJIT_ERR_UNSUPPORTED);
        snprintf(said, sizeof said, "spec string '%s': variant %s was retired: ", retired[i].spec_string,
                 retired[i].name);
        cr_expect(strstr(mlajit_last_error(), said) && strstr(mlajit_last_error(), retired[i].instead),
                  "'%s' should say '%s'", mlajit_last_error(), said);
        cr_expect_eq(mlajit_spec_parse_fields(retired[i].spec_string, &parsed), MLAJIT_ERR_UNSUPPORTED);
        mlajit_variant v = MLAJIT_VARIANT_AUTO;
        cr_expect_eq(mlajit_variant_from_name(retired[i].name, &v), 0, "%s is no variant name now", retired[i].name);
        cr_expect_eq(mlajit_variant_refuse_retired(MLAJIT_VARIANT_AUTO, retired[i].name), MLAJIT_ERR_UNSUPPORTED);
        cr_expect_eq(mlajit_variant_refuse_retired(retired[i].variant, NULL), MLAJIT_ERR_UNSUPPORTED);
        /* no row, no listing: only the retired names' list has it */
        cr_expect_null(mlajit_family_of(retired[i].variant));
        char list[256], item[64];
        snprintf(list, sizeof list, ", %s,", MLAJIT_VARIANT_NAMES);
        snprintf(item, sizeof item, ", %s,", retired[i].name);
        cr_expect_null(strstr(list, item), "%s is in MLAJIT_VARIANT_NAMES", retired[i].name);
        snprintf(list, sizeof list, ", %s,", MLAJIT_VARIANT_RETIRED_NAMES);
        cr_expect_not_null(strstr(list, item), "%s is not in MLAJIT_VARIANT_RETIRED_NAMES", retired[i].name);
        char allowed[256], number[16];
        mlajit_variant_values(allowed, sizeof allowed);
        snprintf(number, sizeof number, "%d (", (int)retired[i].variant);
        cr_expect_null(strstr(allowed, number), "'%s' lists %s", allowed, retired[i].name);
    }
    /* the others are not retired; an unknown number is still an invalid argument */
    for (int i = 0; i < mlajit_family_count; i++)
        cr_expect_eq(mlajit_variant_refuse_retired(mlajit_families[i].variant, NULL), MLAJIT_OK);
    cr_expect_eq(mlajit_variant_refuse_retired(MLAJIT_VARIANT_AUTO, "sm90"), MLAJIT_OK);
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init(&s, MLAJIT_MODEL_V32, 16, 64), MLAJIT_OK);
    s.variant = (mlajit_variant)10;
    cr_expect_eq(mlajit_spec_validate(&s), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "spec.variant = 10; allowed 0 (auto), 1 (portable), 2 (sm90), 4 "),
              "%s", mlajit_last_error());
}
