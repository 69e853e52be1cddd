/* layout: layouts described at run time (mlajit_layout): validation naming each
 * field, the inline keys and their defaults, the canonical string and its round
 * trip, the named models as layouts, specs that carry a layout (strings, memo,
 * source, refusals) and the quantizer on a layout. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "codegen/families.h"
#include "harness/rng.h"
#include "runtime/runtime.h"
#include "mlajit.h"

/* Each named model's layout as inline keys, with only what its defaults do not give. */
static const struct {
    mlajit_model model;
    const char *keys;
    const char *canonical;
} named[] = {
    {MLAJIT_MODEL_V32, "d_nope=512,d_rope=64,tile=128,scales=pow2,place=inline",
     "nope512-rope64-v512-tile128-pow2-inline-row656"},
    {MLAJIT_MODEL_DSV4, "d_nope=448,d_rope=64,v=all,tile=64,scales=ue8m0,place=footer",
     "nope448-rope64-v512-tile64-ue8m0-footer8-row576"},
    {MLAJIT_MODEL_GLM_NSA, "d_nope=512,d_rope=64,tile=128,scales=fp32,place=inline",
     "nope512-rope64-v512-tile128-fp32-inline-row656"},
    {MLAJIT_MODEL_GLM53_NOPE, "d_nope=512,tile=128,scales=fp32,place=inline,row_bytes=656",
     "nope512-rope0-v512-tile128-fp32-inline-row656"},
    {MLAJIT_MODEL_DOTS3_SWA, "d_nope=1024,d_rope=64,tile=128,scales=ue8m0,place=footer",
     "nope1024-rope64-v1024-tile128-ue8m0-footer8-row1152"},
    {MLAJIT_MODEL_V32_BF16, "d_nope=512,d_rope=64,scales=none", "nope512-rope64-v512-none-row1152"},
    {MLAJIT_MODEL_DSV4_BF16, "d_nope=448,d_rope=64,v=all,scales=none", "nope448-rope64-v512-none-row1024"},
};
#define NAMED (sizeof named / sizeof named[0])

static mlajit_layout parsed(const char *text)
{
    mlajit_layout l;
    cr_assert_eq(mlajit_layout_parse(text, &l), MLAJIT_OK, "%s: %s", text, mlajit_last_error());
    return l;
}

Test(layout, named_models_are_layouts_from_their_keys)
{
    for (size_t i = 0; i < NAMED; i++) {
        mlajit_layout own, from_keys = parsed(named[i].keys), from_name, from_string;
        const mlajit_model_desc *d = mlajit_model_describe(named[i].model);
        cr_assert_eq(mlajit_model_layout(named[i].model, &own), MLAJIT_OK);
        cr_expect_eq(memcmp(&own, &from_keys, sizeof own), 0, "%s: its keys give its layout", d->name);
        from_name = parsed(d->name);
        cr_expect_eq(memcmp(&own, &from_name, sizeof own), 0, "%s: its name gives its layout", d->name);
        char text[MLAJIT_LAYOUT_STRING_LEN];
        cr_assert_eq(mlajit_layout_string(&own, text, sizeof text), MLAJIT_OK);
        cr_expect_str_eq(text, named[i].canonical);
        from_string = parsed(text);
        cr_expect_eq(memcmp(&own, &from_string, sizeof own), 0);
        /* one mechanism: a layout equal to a model's describes as the model */
        cr_expect_eq(mlajit_layout_describe(&own), d, "%s", d->name);
        cr_expect_eq(d->bytes_per_token, own.row_bytes + own.footer_bytes);
        cr_expect_eq(mlajit_layout_min_page_stride(&own, 64), mlajit_min_page_stride(named[i].model, 64));
    }
    /* SPEC.md's offsets: inline scales after the fp8 values, RoPE after them */
    const mlajit_model_desc *v32 = mlajit_model_describe(MLAJIT_MODEL_V32);
    cr_expect_eq(v32->scale_offset, 512);
    cr_expect_eq(v32->rope_offset, 528);
    const mlajit_model_desc *dsv4 = mlajit_model_describe(MLAJIT_MODEL_DSV4);
    cr_expect_eq(dsv4->rope_offset, 448);
    mlajit_layout l;
    cr_expect_eq(mlajit_model_layout(MLAJIT_MODEL_CUSTOM, &l), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect_null(mlajit_model_describe(MLAJIT_MODEL_CUSTOM));
}

Test(layout, defaults_follow_the_rules)
{
    /* inline ue8m0: 8 one-byte scales padded to 16, RoPE at 272, row 400 */
    mlajit_layout l = parsed("d_nope=256,d_rope=64,d_v=256,tile=32,scales=ue8m0,place=inline");
    cr_expect_eq(l.row_bytes, 400);
    cr_expect_eq(l.footer_bytes, 0);
    const mlajit_model_desc *d = mlajit_layout_describe(&l);
    cr_assert_not_null(d);
    cr_expect_eq(d->model, MLAJIT_MODEL_CUSTOM);
    cr_expect_str_eq(d->name, "nope256-rope64-v256-tile32-ue8m0-inline-row400");
    cr_expect_eq(d->d_qk, 320);
    cr_expect_eq(d->num_scales, 8);
    cr_expect_eq(d->rope_offset, 272);
    cr_expect_eq(mlajit_layout_describe(&l), d, "one descriptor per distinct layout");
    /* footer: scales' bytes rounded up to 8 */
    l = parsed("d_nope=512,d_rope=64,tile=32,scales=ue8m0,place=footer");
    cr_expect_eq(l.footer_bytes, 16);
    cr_expect_eq(l.row_bytes, 640);
    l = parsed("d_nope=512,tile=128,scales=fp32,place=footer");
    cr_expect_eq(l.footer_bytes, 16);
    /* bf16: no scales, NoPE two bytes a dim; v=all takes every dim */
    l = parsed("d_nope=512,d_rope=64,v=all,scales=none");
    cr_expect_eq(l.row_bytes, 1152);
    cr_expect_eq(l.d_v, 576);
    cr_expect_eq(l.quant_tile, 0);
    cr_expect_eq(l.scale_place, 0);
    /* keys in any order; d_v given and v agreeing is fine */
    mlajit_layout a = parsed("place=inline,scales=pow2,tile=128,d_rope=64,d_nope=512,d_v=512,v=nope");
    mlajit_layout b = parsed("v32");
    cr_expect_eq(memcmp(&a, &b, sizeof a), 0);
}

/* A valid layout changed one way must be refused naming the field (and, for
 * combinations, saying what is allowed). */
Test(layout, validate_names_each_field)
{
    const mlajit_layout base = parsed("d_nope=512,d_rope=64,tile=128,scales=pow2,place=inline");
    const mlajit_layout footer = parsed("d_nope=448,d_rope=64,v=all,tile=64,scales=ue8m0,place=footer");
    const mlajit_layout none = parsed("d_nope=512,d_rope=64,scales=none");
    struct {
        const mlajit_layout *from;
        int field, value; /* field: index in the struct's ints */
        const char *names;
    } cases[] = {
        {&base, 0, 0, "layout.d_nope = 0; allowed 16..2048"},
        {&base, 0, 520, "layout.d_nope = 520"},
        {&base, 0, 4096, "layout.d_nope = 4096"},
        {&base, 1, -8, "layout.d_rope = -8"},
        {&base, 1, 12, "layout.d_rope = 12; allowed 0..512, a multiple of 8"},
        {&base, 1, 2048, "layout.d_rope = 2048"},
        {&base, 2, 0, "layout.d_v = 0"},
        {&base, 2, 640, "layout.d_v = 640; allowed 16..576"},
        {&base, 2, 100, "layout.d_v = 100"},
        {&base, 3, 48, "layout.quant_tile = 48; allowed a multiple of 16 that divides d_nope 512"},
        {&base, 3, 0, "layout.quant_tile = 0"},
        {&base, 3, 1024, "layout.quant_tile = 1024"},
        {&base, 3, 16, "layout.row_bytes = 656; allowed 768..16384 (what the row holds: 768)"},
        {&base, 4, 0, "layout.scale_format = 0; allowed MLAJIT_SCALE_FP32_POW2"},
        {&base, 4, 9, "layout.scale_format = 9"},
        {&base, 5, 0, "layout.scale_place = 0; allowed MLAJIT_SCALES_INLINE"},
        {&base, 5, 3, "layout.scale_place = 3"},
        {&base, 6, 640, "layout.row_bytes = 640; allowed 656..16384 (what the row holds: 656)"},
        {&base, 6, 664, "layout.row_bytes = 664"},
        {&base, 6, 20000, "layout.row_bytes = 20000"},
        {&base, 7, 8, "layout.footer_bytes = 8 without scales in a page footer; allowed 0"},
        {&footer, 7, 0, "layout.footer_bytes = 0; allowed 8..1024"},
        {&footer, 7, 12, "layout.footer_bytes = 12"},
        {&footer, 7, 2048, "layout.footer_bytes = 2048"},
        {&none, 3, 64, "layout.quant_tile = 64 with scale format none"},
        {&none, 5, 1, "layout.scale_place = 1 with scale format none"},
        {&base, 8, 1, "layout.reserved[0] = 1; allowed 0"},
        {&base, 15, 7, "layout.reserved[7] = 7; allowed 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mlajit_layout l = *cases[i].from;
        ((int *)&l)[cases[i].field] = cases[i].value;
        cr_expect_eq(mlajit_layout_validate(&l), MLAJIT_ERR_INVALID_ARGUMENT, "case %zu", i);
        cr_expect(strstr(mlajit_last_error(), cases[i].names) != NULL, "case %zu: wanted '%s' in '%s'", i,
                  cases[i].names, mlajit_last_error());
        char text[64];
        cr_expect_eq(mlajit_layout_string(&l, text, sizeof text), MLAJIT_ERR_INVALID_ARGUMENT);
        cr_expect_null(mlajit_layout_describe(&l));
        cr_expect_eq(mlajit_layout_min_page_stride(&l, 64), -1);
    }
    cr_expect_eq(mlajit_layout_validate(NULL), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect_eq(mlajit_layout_validate(&base), MLAJIT_OK);
    cr_expect_eq(mlajit_layout_min_page_stride(&base, 0), -1);
}

Test(layout, bad_text_names_the_key)
{
    const struct {
        const char *text, *names;
    } cases[] = {
        {"", "neither a model name"},
        {"llama", "neither a model name (v32, dsv4"},
        {"d_nope=512,d_rope=64,tile=128,scales=pow2,place=inline,colour=red", "layout key 'colour' is unknown"},
        {"d_nope=512,d_nope=256,scales=none", "layout key d_nope is given twice"},
        {"d_rope=64,scales=none", "layout key d_nope is missing"},
        {"d_nope=512,tile=128,place=inline", "layout key scales is missing"},
        {"d_nope=512,scales=pow2,place=inline", "layout key tile is missing"},
        {"d_nope=512,tile=128,scales=pow2", "layout key place is missing"},
        {"d_nope=512,scales=none,place=inline", "layout key place is given with scales=none"},
        {"d_nope=512,scales=none,tile=64", "layout key tile is given with scales=none"},
        {"d_nope=512,tile=128,scales=fp16,place=inline", "layout key scales = 'fp16' is unknown; allowed pow2"},
        {"d_nope=512,tile=128,scales=pow2,place=middle", "layout key place = 'middle' is unknown; allowed inline"},
        {"d_nope=512,tile=128,scales=pow2,place=inline,v=some", "layout key v = 'some' is unknown"},
        {"d_nope=512,d_rope=64,d_v=512,v=all,tile=128,scales=pow2,place=inline", "layout key v = all means d_v 576"},
        {"d_nope=5x2,tile=128,scales=pow2,place=inline", "layout key d_nope = '5x2' is not a number"},
        {"d_nope=-512,tile=128,scales=pow2,place=inline", "layout key d_nope = '-512' is not a number"},
        {"d_nope=,tile=128,scales=pow2,place=inline", "layout key d_nope = '' is not a number"},
        {"d_nope=99999999999,tile=128,scales=pow2,place=inline", "is not a number"},
        {"d_nope=512,tile=100,scales=pow2,place=inline", "layout.quant_tile = 100"},
        {"d_nope=512,tile=128,scales=pow2,place=inline,row_bytes=100", "layout.row_bytes = 100"},
        {"d_nope=512,tile=128,scales=pow2,place=inline,footer_bytes=8", "layout.footer_bytes = 8"},
        {"d_nope=512,tile", "layout item 'tile' is not key=value"},
        {"nope512-rope64-v512-tile128-pow2-inline", "neither a model name"},
        {"nope512-rope64-v512-tile128-pow2-inline-row600", "layout.row_bytes = 600"},
        {"nope512-rope64-v512-tile128-none-inline-row656", "neither a model name"},
        {"nope512-rope64-v512-tile128-pow2-footer-row656", "neither a model name"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mlajit_layout l;
        memset(&l, 0x77, sizeof l);
        const mlajit_layout before = l;
        cr_expect_eq(mlajit_layout_parse(cases[i].text, &l), MLAJIT_ERR_INVALID_ARGUMENT, "'%s'", cases[i].text);
        cr_expect(strstr(mlajit_last_error(), cases[i].names) != NULL, "'%s': wanted '%s' in '%s'", cases[i].text,
                  cases[i].names, mlajit_last_error());
        cr_expect_eq(memcmp(&l, &before, sizeof l), 0, "'%s': out unchanged on a failure", cases[i].text);
    }
    mlajit_layout l;
    cr_expect_eq(mlajit_layout_parse(NULL, &l), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect_eq(mlajit_layout_parse("v32", NULL), MLAJIT_ERR_INVALID_ARGUMENT);
    char small[16];
    mlajit_layout v32 = parsed("v32");
    cr_expect_eq(mlajit_layout_string(&v32, small, sizeof small), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "too short") != NULL);
}

/* A random layout of the valid space, drawn field by field (many land invalid
 * on purpose: those must be refused and the rest must round-trip). */
static mlajit_layout random_layout(mlajit_rng *r)
{
    mlajit_layout l = {0};
    l.d_nope = 16 * (1 + (int)(mlajit_rng_next(r) % 80));
    l.d_rope = 8 * (int)(mlajit_rng_next(r) % 20);
    int d_qk = l.d_nope + l.d_rope;
    l.d_v = 16 * (1 + (int)(mlajit_rng_next(r) % (uint64_t)(d_qk / 16 + 1)));
    l.scale_format = (mlajit_scale_format)(1 + mlajit_rng_next(r) % 4);
    int tiles[] = {16, 32, 64, 128, 256, 48, 80};
    if (l.scale_format != MLAJIT_SCALE_NONE) {
        l.quant_tile = tiles[mlajit_rng_next(r) % 7];
        l.scale_place = (mlajit_scale_place)(1 + mlajit_rng_next(r) % 2);
    }
    char keys[256];
    snprintf(keys, sizeof keys, "d_nope=%d,d_rope=%d,d_v=%d,scales=%s", l.d_nope, l.d_rope, l.d_v,
             (const char *[]){"", "pow2", "fp32", "ue8m0", "none"}[l.scale_format]);
    if (l.quant_tile) {
        size_t n = strlen(keys);
        snprintf(keys + n, sizeof keys - n, ",tile=%d,place=%s", l.quant_tile,
                 l.scale_place == MLAJIT_SCALES_INLINE ? "inline" : "footer");
    }
    mlajit_layout out;
    if (mlajit_layout_parse(keys, &out) != MLAJIT_OK)
        return (mlajit_layout){0};
    /* padding past the default, sometimes */
    if (mlajit_rng_next(r) % 3 == 0)
        out.row_bytes += 16 * (int)(mlajit_rng_next(r) % 8);
    if (out.footer_bytes && mlajit_rng_next(r) % 3 == 0)
        out.footer_bytes += 8 * (int)(mlajit_rng_next(r) % 4);
    return out;
}

Test(layout, random_layouts_round_trip)
{
    mlajit_rng r;
    mlajit_rng_seed(&r, 49);
    int valid = 0;
    for (int i = 0; i < 4000; i++) {
        mlajit_layout l = random_layout(&r);
        if (l.d_nope == 0 || mlajit_layout_validate(&l) != MLAJIT_OK)
            continue;
        valid++;
        char text[MLAJIT_LAYOUT_STRING_LEN], again[MLAJIT_LAYOUT_STRING_LEN];
        cr_assert_eq(mlajit_layout_string(&l, text, sizeof text), MLAJIT_OK);
        cr_assert(strchr(text, '.') == NULL && strchr(text, ',') == NULL && strchr(text, '=') == NULL, "%s", text);
        mlajit_layout back = parsed(text);
        cr_assert_eq(memcmp(&back, &l, sizeof l), 0, "%s reads back", text);
        cr_assert_eq(mlajit_layout_string(&back, again, sizeof again), MLAJIT_OK);
        cr_assert_str_eq(text, again);
        /* and a spec of it: its string starts with the layout's and reads back */
        mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, p = MLAJIT_KERNEL_SPEC_INIT;
        cr_assert_eq(mlajit_spec_init_layout(&s, &l, 16, 64), MLAJIT_OK, "%s", mlajit_last_error());
        char spec[128];
        cr_assert_eq(mlajit_spec_string(&s, spec, sizeof spec), MLAJIT_OK);
        cr_assert_eq(mlajit_spec_parse(spec, &p), MLAJIT_OK, "%s: %s", spec, mlajit_last_error());
        const mlajit_model_desc *d = mlajit_layout_describe(&l);
        cr_assert_not_null(d);
        cr_assert_eq(strncmp(spec, d->name, strlen(d->name)), 0, "%s starts with %s", spec, d->name);
        cr_assert_eq(mlajit_spec_desc(&p), d);
    }
    cr_expect_gt(valid, 1000, "%d valid layouts drawn", valid);
}

Test(layout, specs_carry_a_layout)
{
    mlajit_layout l = parsed("d_nope=512,d_rope=64,tile=128,scales=fp32,place=inline,row_bytes=672");
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, p = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init_layout(&s, &l, 64, 64), MLAJIT_OK);
    cr_expect_eq(s.model, MLAJIT_MODEL_CUSTOM);
    strcpy(s.arch, "sm_90a");
    char str[128];
    cr_assert_eq(mlajit_spec_string(&s, str, sizeof str), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_str_eq(str, "nope512-rope64-v512-tile128-fp32-inline-row672.h64.p64.t64.hc64.sm90.sm_90a");
    cr_assert_eq(mlajit_spec_parse(str, &p), MLAJIT_OK);
    cr_expect_eq(p.model, MLAJIT_MODEL_CUSTOM);
    cr_expect_eq(memcmp(&p.layout, &l, sizeof l), 0);
    /* the inline keys are a spec string's first field too */
    cr_assert_eq(mlajit_spec_parse("d_nope=512,d_rope=64,tile=128,scales=fp32,place=inline,row_bytes=672.h64.p64.sm_90a", &p),
                 MLAJIT_OK);
    cr_expect_eq(memcmp(&p.layout, &l, sizeof l), 0);
    /* a layout that is a named model's is that model: same string, same source */
    mlajit_layout v32;
    mlajit_model_layout(MLAJIT_MODEL_V32, &v32);
    mlajit_kernel_spec c = MLAJIT_KERNEL_SPEC_INIT, n = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init_layout(&c, &v32, 16, 64), MLAJIT_OK);
    cr_assert_eq(mlajit_spec_init(&n, MLAJIT_MODEL_V32, 16, 64), MLAJIT_OK);
    strcpy(c.arch, "sm_90a");
    strcpy(n.arch, "sm_90a");
    char cs[128], ns[128];
    cr_assert_eq(mlajit_spec_string(&c, cs, sizeof cs), MLAJIT_OK);
    cr_assert_eq(mlajit_spec_string(&n, ns, sizeof ns), MLAJIT_OK);
    cr_expect_str_eq(cs, ns);
    char *csrc = NULL, *nsrc = NULL;
    cr_assert_eq(mlajit_generate_source(&c, &csrc), MLAJIT_OK);
    cr_assert_eq(mlajit_generate_source(&n, &nsrc), MLAJIT_OK);
    cr_expect_str_eq(csrc, nsrc);
    cr_assert_eq(mlajit_spec_parse("nope512-rope64-v512-tile128-pow2-inline-row656.h16.p64", &p), MLAJIT_OK);
    cr_expect_eq(p.model, MLAJIT_MODEL_V32);
    mlajit_free(csrc);
    mlajit_free(nsrc);
    /* a custom layout's source carries its numbers (so the cache key covers them) */
    char *src = NULL;
    cr_assert_eq(mlajit_generate_source(&s, &src), MLAJIT_OK);
    cr_expect(strstr(src, "constexpr int kRowBytes = 672;") != NULL);
    cr_expect(strstr(src, "constexpr int kNumScales = 4;") != NULL);
    cr_expect(strstr(src, "constexpr int kRopeOffset = 528;") != NULL);
    mlajit_free(src);
}

Test(layout, spec_refusals_name_the_field)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init(&s, MLAJIT_MODEL_V32, 16, 64), MLAJIT_OK);
    s.layout.d_nope = 512;
    cr_expect_eq(mlajit_spec_validate(&s), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "spec.layout is set with spec.model = 1") != NULL, "%s", mlajit_last_error());
    s.model = MLAJIT_MODEL_CUSTOM;
    cr_expect_eq(mlajit_spec_validate(&s), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "spec.layout.d_v = 0") != NULL, "%s", mlajit_last_error());
    memset(&s.layout, 0, sizeof s.layout);
    cr_expect_eq(mlajit_spec_validate(&s), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "spec.layout.d_nope = 0") != NULL, "%s", mlajit_last_error());
    /* a 1.0 program's spec has no room for a layout */
    mlajit_layout l = parsed("v32");
    mlajit_kernel_spec old = MLAJIT_KERNEL_SPEC_INIT;
    old.struct_size = offsetof(mlajit_kernel_spec, layout);
    cr_expect_eq(mlajit_spec_init_layout(&old, &l, 16, 64), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "no room for spec.layout") != NULL, "%s", mlajit_last_error());
    /* valid but not served: a reason naming the field and what it allows, from the
     * envelope and the resolver alike (the family's one layout check) */
    static const struct {
        const char *layout;
        mlajit_variant variant;
        const char *arch, *words;
    } refused[] = {
        /* the combine's d_v, whatever the family */
        {"d_nope=512,d_rope=64,d_v=576,scales=none", MLAJIT_VARIANT_AUTO, "sm_90a",
         "layout.d_v must be a multiple of 128 and at least 256"},
        {"d_nope=256,d_rope=64,d_v=128,tile=32,scales=ue8m0,place=inline", MLAJIT_VARIANT_PORTABLE, "sm_80",
         "layout.d_v must be a multiple of 128 and at least 256"},
        /* the portable template's fragments and RoPE chunks */
        {"d_nope=256,d_rope=24,d_v=256,tile=32,scales=ue8m0,place=inline", MLAJIT_VARIANT_PORTABLE, "sm_80",
         "layout.d_nope + d_rope must be a multiple of 32"},
        {"d_nope=256,d_rope=96,d_v=256,tile=32,scales=pow2,place=inline", MLAJIT_VARIANT_PORTABLE, "sm_80",
         "layout.d_rope must be 0, 8, 16, 32, 64, 128 or 256"},
        /* sm90_common.cu's producers: fp8 codes only, its scale reads, its blocks */
        {"v32_bf16", MLAJIT_VARIANT_SM90_STAGED, "sm_90a", "layout.scale_format is none (bf16 NoPE values)"},
        {"d_nope=480,d_rope=32,v=all,scales=none", MLAJIT_VARIANT_SM90, "sm_90a",
         "layout.d_nope and d_rope must be multiples of 64 for bf16 rows"},
        {"d_nope=480,d_rope=32,v=all,scales=none", MLAJIT_VARIANT_SM90_NARROW, "sm_90a",
         "layout.d_nope and d_rope must be multiples of 64 for bf16 rows in the sm90 and sm90-narrow"},
        {"d_nope=512,tile=128,scales=fp32,place=footer", MLAJIT_VARIANT_SM90, "sm_90a",
         "layout.scale_format and scale_place"},
        {"d_nope=512,d_rope=64,tile=128,scales=ue8m0,place=inline", MLAJIT_VARIANT_SM90, "sm_90a",
         "layout.scale_format and scale_place"},
        {"d_nope=480,d_rope=32,v=all,tile=32,scales=ue8m0,place=footer", MLAJIT_VARIANT_SM90, "sm_90a",
         "layout.d_nope, d_rope and quant_tile must be multiples of 64"},
        {"d_nope=1024,d_rope=64,d_v=512,tile=64,scales=ue8m0,place=footer", MLAJIT_VARIANT_SM90_STAGED, "sm_90a",
         "layout.footer_bytes must be 8"},
        {"d_nope=512,d_rope=64,tile=256,scales=pow2,place=inline", MLAJIT_VARIANT_SM90, "sm_90a",
         "layout.quant_tile must be d_nope / 4"},
        {"d_nope=512,d_rope=64,d_v=256,tile=128,scales=pow2,place=inline", MLAJIT_VARIANT_SM90, "sm_90a",
         "layout.d_v must be 512"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        l = parsed(refused[i].layout);
        cr_assert_eq(mlajit_spec_init_layout(&s, &l, 16, 64), MLAJIT_OK);
        s.variant = refused[i].variant;
        strcpy(s.arch, refused[i].arch);
        cr_expect_eq(mlajit_envelope_check(&s, NULL), MLAJIT_ERR_UNSUPPORTED, "%s", refused[i].layout);
        cr_expect(strstr(mlajit_last_error(), refused[i].words) != NULL, "%s: %s", refused[i].layout,
                  mlajit_last_error());
        mlajit_kernel_spec r = MLAJIT_KERNEL_SPEC_INIT;
        cr_expect_eq(mlajit_spec_resolve(&s, &r), MLAJIT_ERR_UNSUPPORTED, "%s", refused[i].layout);
        cr_expect(strstr(mlajit_last_error(), refused[i].words) != NULL, "%s: %s", refused[i].layout,
                  mlajit_last_error());
    }
    s.variant = MLAJIT_VARIANT_AUTO;
    /* served: bf16 V3.2 and V4, and the three custom layouts issue 49 names, by the
     * portable family; on sm_90a auto takes sm90's bf16 edition for bf16 and the
     * portable family for the three custom layouts; a custom layout sm90_common.cu
     * reads (fp32 inline, 4 scales) by sm90 as well */
    static const struct {
        const char *layout;
        mlajit_variant on_sm90a; /* auto's kernel at 64 heads */
    } served[] = {
        {"v32_bf16", MLAJIT_VARIANT_SM90},
        {"dsv4_bf16", MLAJIT_VARIANT_SM90},
        {"d_nope=256,d_rope=64,d_v=256,tile=32,scales=ue8m0,place=inline", MLAJIT_VARIANT_PORTABLE},
        {"d_nope=512,tile=128,scales=fp32,place=footer", MLAJIT_VARIANT_PORTABLE},
        {"d_nope=512,d_rope=64,d_v=256,tile=128,scales=pow2,place=inline", MLAJIT_VARIANT_PORTABLE},
        {"d_nope=512,d_rope=64,tile=128,scales=fp32,place=inline,row_bytes=672", MLAJIT_VARIANT_SM90},
    };
    for (size_t i = 0; i < sizeof served / sizeof served[0]; i++) {
        l = parsed(served[i].layout);
        for (int h = 1; h <= 128; h = h * 2 + 1) {
            cr_assert_eq(mlajit_spec_init_layout(&s, &l, h, 64), MLAJIT_OK);
            strcpy(s.arch, "sm_80");
            s.variant = MLAJIT_VARIANT_PORTABLE;
            cr_expect_eq(mlajit_envelope_check(&s, NULL), MLAJIT_OK, "%s h%d: %s", served[i].layout, h,
                         mlajit_last_error());
            strcpy(s.arch, "sm_90a");
            s.variant = MLAJIT_VARIANT_AUTO;
            mlajit_kernel_spec r = MLAJIT_KERNEL_SPEC_INIT;
            cr_expect_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s h%d: %s", served[i].layout, h,
                         mlajit_last_error());
            if (h > 32)
                cr_expect_eq(r.variant, served[i].on_sm90a, "%s h%d: auto took %s", served[i].layout, h,
                             mlajit_variant_name(r.variant));
        }
    }
    s.variant = MLAJIT_VARIANT_AUTO;
    /* spec strings with a bad layout say which key */
    mlajit_kernel_spec p = MLAJIT_KERNEL_SPEC_INIT;
    cr_expect_eq(mlajit_spec_parse("d_nope=512,tile=100,scales=pow2,place=inline.h16.p64", &p),
                 MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "layout.quant_tile = 100") != NULL, "%s", mlajit_last_error());
    cr_expect_eq(mlajit_spec_parse("nope512-rope64.h16.p64", &p), MLAJIT_ERR_INVALID_ARGUMENT);
}

/* sm90-narrow's bf16 edition ties sm90's (families.c's mlajit_family_forced_only):
 * forced, it resolves for bf16 rows at 8-32 heads per CTA;
 * auto keeps sm90 there, and no plan alternative (the head split, the head groups,
 * the long walk, the scores kernel) takes it, while V3.2's fp8 rows still have them. */
Test(layout, narrow_bf16_edition_is_forced_only)
{
    const char *layouts[] = {"v32_bf16", "dsv4_bf16"};
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        mlajit_layout l = parsed(layouts[i]);
        for (int h = 8; h <= 128; h *= 2) {
            mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, r = MLAJIT_KERNEL_SPEC_INIT;
            cr_assert_eq(mlajit_spec_init_layout(&s, &l, h, 64), MLAJIT_OK);
            strcpy(s.arch, "sm_90a");
            s.variant = MLAJIT_VARIANT_SM90_NARROW;
            s.heads_per_cta = h > 32 ? 32 : 0; /* past 32 heads, in head groups */
            cr_expect_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s h%d: %s", layouts[i], h, mlajit_last_error());
            cr_expect_eq(r.variant, MLAJIT_VARIANT_SM90_NARROW, "%s h%d", layouts[i], h);
            cr_expect(mlajit_family_forced_only(mlajit_family_of(r.variant), mlajit_spec_desc(&r)), "%s h%d", layouts[i], h);
            s.variant = MLAJIT_VARIANT_AUTO;
            s.heads_per_cta = 0;
            cr_expect_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s h%d: %s", layouts[i], h, mlajit_last_error());
            cr_expect_eq(r.variant, MLAJIT_VARIANT_SM90, "%s h%d: auto took %s", layouts[i], h,
                         mlajit_variant_name(r.variant));
            mlajit_kernel_spec alts[MLAJIT_WALK_ALTERNATIVES];
            cr_expect_eq(mlajit_spec_walk_alternatives(&s, "sm_90a", alts), 0, "%s h%d: a plan alternative",
                         layouts[i], h);
        }
    }
    /* the same gate leaves V3.2's fp8 rows their alternatives (its long walk at 16
     * heads, the head groups at 64) */
    for (int h = 16; h <= 64; h *= 4) {
        mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
        mlajit_spec_init(&s, MLAJIT_MODEL_V32, h, 64);
        strcpy(s.arch, "sm_90a");
        mlajit_kernel_spec alts[MLAJIT_WALK_ALTERNATIVES];
        cr_expect_gt(mlajit_spec_walk_alternatives(&s, "sm_90a", alts), 0, "v32 h%d", h);
        cr_expect(!mlajit_family_forced_only(mlajit_family_of(MLAJIT_VARIANT_SM90_NARROW), mlajit_spec_desc(&s)));
    }
}

Test(layout, quantizer_follows_the_layout)
{
    enum { PAGE = 4 };
    const char *texts[] = {"d_nope=256,d_rope=64,d_v=256,tile=32,scales=ue8m0,place=inline",
                           "d_nope=512,d_rope=64,tile=32,scales=pow2,place=footer,footer_bytes=136",
                           "d_nope=512,d_rope=64,v=all,scales=none,row_bytes=1168", "v32", "dsv4", "v32_bf16",
                           "dsv4_bf16"};
    for (size_t t = 0; t < sizeof texts / sizeof texts[0]; t++) {
        mlajit_layout l = parsed(texts[t]);
        const mlajit_model_desc *d = mlajit_layout_describe(&l);
        size_t bytes = (size_t)mlajit_layout_min_page_stride(&l, PAGE);
        unsigned char *page = malloc(bytes);
        memset(page, 0xAB, bytes);
        uint16_t *values = malloc(sizeof(uint16_t) * (size_t)d->d_qk);
        float *out = malloc(sizeof(float) * (size_t)d->d_qk);
        for (int tok = 0; tok < PAGE; tok++) {
            for (int k = 0; k < d->d_qk; k++)
                values[k] = (uint16_t)(0x3F80 + ((k * 7 + tok * 13) % 64) - 32); /* bf16 near +-1 */
            cr_assert_eq(mlajit_quantize_token_layout(&l, values, page, PAGE, tok), MLAJIT_OK, "%s",
                         mlajit_last_error());
        }
        for (int tok = 0; tok < PAGE; tok++) {
            cr_assert_eq(mlajit_dequantize_token_layout(&l, page, PAGE, tok, out), MLAJIT_OK);
            for (int k = 0; k < d->d_qk; k++) {
                uint16_t v = (uint16_t)(0x3F80 + ((k * 7 + tok * 13) % 64) - 32);
                uint32_t u = (uint32_t)v << 16;
                float want;
                memcpy(&want, &u, sizeof want);
                float tol = (k >= d->d_nope || d->scale_format == MLAJIT_SCALE_NONE) ? 0.0f : 0.07f * want;
                cr_expect(out[k] - want <= (tol < 0 ? -tol : tol) && want - out[k] <= (tol < 0 ? -tol : tol),
                          "%s tok %d dim %d: %g vs %g", texts[t], tok, k, out[k], want);
            }
            /* the row's padding (inline scales' and the tail) is written zero */
            const unsigned char *row = page + (size_t)tok * (size_t)d->row_bytes;
            if (d->scale_place == MLAJIT_SCALES_INLINE)
                for (int b = d->scale_offset + d->num_scales * (d->scale_format == MLAJIT_SCALE_UE8M0 ? 1 : 4);
                     b < d->rope_offset; b++)
                    cr_expect_eq(row[b], 0, "%s: scale padding byte %d", texts[t], b);
            for (int b = d->rope_offset + 2 * d->d_rope; b < d->row_bytes && d->scale_place != MLAJIT_SCALES_PAGE_FOOTER;
                 b++)
                cr_expect_eq(row[b], 0, "%s: tail byte %d", texts[t], b);
        }
        free(page);
        free(values);
        free(out);
    }
    mlajit_layout bad = {0};
    uint16_t v[16] = {0};
    unsigned char page[64];
    cr_expect_eq(mlajit_quantize_token_layout(&bad, v, page, 1, 0), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "mlajit_quantize_token_layout: layout.d_nope") != NULL, "%s",
              mlajit_last_error());
}

/* The longest layout and spec strings fit their buffers: MLAJIT_LAYOUT_STRING_LEN,
 * and the 128 bytes of reports, outlines, pack manifests and tactic records. */
Test(layout, longest_strings_fit)
{
    mlajit_layout l = parsed("d_nope=1536,d_rope=512,d_v=2048,tile=16,scales=ue8m0,place=footer,"
                             "footer_bytes=1024,row_bytes=16384");
    char text[MLAJIT_LAYOUT_STRING_LEN];
    cr_assert_eq(mlajit_layout_string(&l, text, sizeof text), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init_layout(&s, &l, 128, 1024), MLAJIT_OK);
    s.extra_page_size = 1024;
    s.features = MLAJIT_FEATURE_ALL;
    s.tile = 64;
    s.heads_per_cta = 64;
    s.variant = MLAJIT_VARIANT_SM90_NARROW_SCORES;
    char spec[128];
    cr_assert_eq(mlajit_spec_string(&s, spec, sizeof spec), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_lt(strlen(spec) + strlen("sm_120a") - strlen("any"), sizeof spec, "%s", spec);
}

/* Grids (warm-up, pack build) take custom layouts beside the models. */
Test(layout, grids_take_layouts)
{
    const mlajit_model models[] = {MLAJIT_MODEL_V32};
    const mlajit_layout layouts[] = {parsed("d_nope=448,d_rope=64,v=all,tile=32,scales=ue8m0,place=footer"),
                                     parsed("d_nope=512,d_rope=64,tile=128,scales=fp32,place=inline,row_bytes=672")};
    const int heads[] = {16}, pages[] = {64};
    mlajit_kernel_grid grid = MLAJIT_KERNEL_GRID_INIT;
    grid.head_counts = heads;
    grid.num_head_counts = 1;
    grid.page_sizes = pages;
    grid.num_page_sizes = 1;
    grid.layouts = layouts;
    grid.num_layouts = 2;
    mlajit_kernel_spec *specs = NULL;
    int count = 0;
    cr_assert_eq(mlajit_grid_expand(&grid, "sm_80", &specs, &count), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(count, 2, "layouts alone make a grid");
    cr_expect_eq(specs[0].model, MLAJIT_MODEL_CUSTOM);
    cr_expect_eq(memcmp(&specs[1].layout, &layouts[1], sizeof layouts[1]), 0);
    free(specs);
    grid.models = models;
    grid.num_models = 1;
    cr_assert_eq(mlajit_grid_expand(&grid, "sm_80", &specs, &count), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(count, 3);
    cr_expect_eq(specs[0].model, MLAJIT_MODEL_V32);
    free(specs);
    mlajit_layout bad[] = {layouts[0]};
    bad[0].quant_tile = 40;
    grid.layouts = bad;
    grid.num_layouts = 1;
    cr_expect_eq(mlajit_grid_expand(&grid, "sm_80", &specs, &count), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "layouts[0]") && strstr(mlajit_last_error(), "layout.quant_tile = 40"), "%s",
              mlajit_last_error());
}

/* The message lists of model names (MLAJIT_MODEL_NAMES) name every named model,
 * in the table's order, and nothing else. */
Test(models, the_names_every_message_lists_are_the_tables)
{
    char joined[256] = "";
    int m = 1;
    for (const mlajit_model_desc *d; (d = mlajit_model_describe((mlajit_model)m)) != NULL; m++) {
        cr_assert_lt(strlen(joined) + strlen(d->name) + 3, sizeof joined);
        if (joined[0])
            strcat(joined, ", ");
        strcat(joined, d->name);
    }
    cr_expect_gt(m, 7, "the named models are 1..%d", m - 1);
    cr_expect_str_eq(joined, MLAJIT_MODEL_NAMES);
}
