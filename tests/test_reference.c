/* The host quantizer, the fp64 reference and the comparator, checked against the
 * golden cases (shared/golden, produced by FlashMLA) and against small inputs
 * whose results are known in closed form. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness/harness.h"
#include "mlajit.h"

/* Internal helpers of src/reference/quantize.c, tested directly. */
uint8_t mlajit_fp8_e4m3_from_float(float x);
float mlajit_fp8_e4m3_to_float(uint8_t code);

/* ---- golden cases ------------------------------------------------------------ */

#include "golden_cases.h"

static void load_golden(const case_list *l, int k, mlajit_case *c)
{
    char path[2048];
    snprintf(path, sizeof path, "%s", l->cases[k].path);
    int st = mlajit_case_load(path, c);
    cr_assert_eq(st, MLAJIT_OK, "loading %s: %s", path, mlajit_last_error());
}

/* The byte ranges the quantizer writes for one token (padding excluded), from
 * SPEC.md's layouts: NoPE, scales, RoPE. */
typedef struct byte_range {
    size_t offset, length;
    const char *what;
} byte_range;

static void token_ranges(const mlajit_model_desc *d, int page_size, int token, byte_range r[3])
{
    const size_t row = (size_t)token * (size_t)d->row_bytes;
    r[0] = (byte_range){row, (size_t)d->d_nope, "fp8 NoPE"};
    if (d->scale_place == MLAJIT_SCALES_INLINE) {
        r[1] = (byte_range){row + (size_t)d->d_nope, (size_t)d->num_scales * 4, "fp32 scales"};
        r[2] = (byte_range){row + (size_t)d->d_nope + (size_t)d->num_scales * 4, (size_t)d->d_rope * 2, "bf16 RoPE"};
    } else {
        r[1] = (byte_range){(size_t)page_size * (size_t)d->row_bytes + (size_t)token * (size_t)d->footer_bytes,
                            (size_t)d->num_scales, "ue8m0 scales"};
        r[2] = (byte_range){row + (size_t)d->d_nope, (size_t)d->d_rope * 2, "bf16 RoPE"};
    }
}

/* Quantize the source of every attended slot of one scope and compare with the
 * stored bytes. Returns the number of slots checked. */
static int64_t check_scope_quantization(const char *name, mlajit_model model, const mlajit_case_cache *cache,
                                        const int32_t *indices, const int32_t *lengths, int b, int s_q, int topk)
{
    const mlajit_model_desc *d = mlajit_model_describe(model);
    uint8_t *scratch = malloc((size_t)cache->page_stride);
    cr_assert_not_null(scratch);
    const int64_t num_slots = cache->num_pages * cache->page_size;
    int64_t checked = 0, mismatched_slots = 0;
    for (int i = 0; i < b; i++) {
        int limit = topk;
        if (lengths)
            limit = lengths[i] < 0 ? 0 : (lengths[i] > topk ? topk : lengths[i]);
        for (int j = 0; j < s_q; j++) {
            for (int p = 0; p < limit; p++) {
                const int64_t slot = indices[((int64_t)i * s_q + j) * topk + p];
                if (slot < 0 || slot >= num_slots)
                    continue;
                const int64_t page = slot / cache->page_size;
                const int token = (int)(slot % cache->page_size);
                memset(scratch, 0xAB, (size_t)cache->page_stride);
                int st = mlajit_quantize_token(model, cache->source_bf16 + slot * d->d_qk, scratch,
                                               cache->page_size, token);
                cr_assert_eq(st, MLAJIT_OK, "%s: quantize: %s", name, mlajit_last_error());
                const uint8_t *stored = cache->bytes + page * cache->page_stride;
                byte_range r[3];
                token_ranges(d, cache->page_size, token, r);
                int bad = 0;
                for (int k = 0; k < 3 && !bad; k++) {
                    for (size_t x = 0; x < r[k].length; x++) {
                        const size_t at = r[k].offset + x;
                        if (scratch[at] != stored[at]) {
                            if (mismatched_slots < 5)
                                cr_log_error("%s: slot %lld (page %lld, token %d): %s byte %zu is 0x%02x, golden "
                                             "0x%02x",
                                             name, (long long)slot, (long long)page, token, r[k].what, x,
                                             scratch[at], stored[at]);
                            bad = 1;
                            break;
                        }
                    }
                }
                mismatched_slots += bad;
                checked++;
            }
        }
    }
    free(scratch);
    cr_expect_eq(mismatched_slots, 0, "%s: %lld of %lld attended slots differ from the golden bytes", name,
                 (long long)mismatched_slots, (long long)checked);
    return checked;
}

Test(golden, quantizer_reproduces_cache_bytes, .timeout = 60)
{
    case_list l;
    list_golden_cases(&l);
    int with_source = 0;
    for (int k = 0; k < l.count; k++) {
        mlajit_case c;
        load_golden(&l, k, &c);
        char name[NAME_LEN + 16];
        if (c.kv.source_bf16) {
            snprintf(name, sizeof name, "%s kv", l.cases[k].name);
            int64_t n = check_scope_quantization(name, c.model, &c.kv, c.indices, c.topk_length, c.b, c.s_q, c.topk);
            cr_expect_gt(n, 0, "%s: no attended slot to check", name);
            cr_log_info("%s: %lld attended slots byte-exact", name, (long long)n);
            with_source++;
        }
        if (c.has_extra && c.extra_kv.source_bf16) {
            snprintf(name, sizeof name, "%s extra_kv", l.cases[k].name);
            int64_t n = check_scope_quantization(name, c.model, &c.extra_kv, c.extra_indices, c.extra_topk_length,
                                                 c.b, c.s_q, c.extra_topk);
            cr_expect_gt(n, 0, "%s: no attended slot to check", name);
            cr_log_info("%s: %lld attended slots byte-exact", name, (long long)n);
        }
        mlajit_case_free(&c);
    }
    /* tests/golden's subset keeps one (dsv4_h32_b2_q1_k192_p64), so there always is one */
    cr_expect_gt(with_source, 0, "no golden case has kv.source_bf16; the quantizer was not checked against FlashMLA");
}

Test(golden, reference_matches_expected, .timeout = 60)
{
    case_list l;
    list_golden_cases(&l);
    for (int k = 0; k < l.count; k++) {
        mlajit_case c;
        load_golden(&l, k, &c);
        cr_assert_not_null(c.expected_out, "%s: no expected output", l.cases[k].name);
        mlajit_kernel_spec spec = MLAJIT_KERNEL_SPEC_INIT;
        mlajit_decode_shape shape = MLAJIT_DECODE_SHAPE_INIT;
        mlajit_decode_args args = MLAJIT_DECODE_ARGS_INIT;
        mlajit_case_spec(&c, &spec);
        mlajit_case_shape(&c, &shape);
        mlajit_case_host_args(&c, &args);
        const mlajit_model_desc *d = mlajit_model_describe(c.model);
        const size_t n_lse = (size_t)c.b * (size_t)c.s_q * (size_t)c.h_q, n_out = n_lse * (size_t)d->d_v;
        double *out = malloc(n_out * sizeof *out), *lse = malloc(n_lse * sizeof *lse);
        cr_assert(out && lse);
        int st = mlajit_reference_decode(&spec, &shape, &args, out, lse);
        cr_assert_eq(st, MLAJIT_OK, "%s: %s", l.cases[k].name, mlajit_last_error());

        double out_err = 0.0, lse_err = 0.0;
        int64_t bad = 0, infinite = 0;
        for (size_t x = 0; x < n_out; x++) {
            double e = fabs(out[x] - (double)c.expected_out[x]);
            if (!(e <= 1e-6))
                bad++;
            if (e > out_err || isnan(e))
                out_err = e;
        }
        for (size_t x = 0; x < n_lse; x++) {
            const double want = c.expected_lse[x];
            if (isinf(want) || isinf(lse[x])) {
                infinite++;
                if (lse[x] != want)
                    bad++;
                continue;
            }
            double e = fabs(lse[x] - want);
            if (!(e <= 1e-6))
                bad++;
            if (e > lse_err || isnan(e))
                lse_err = e;
        }
        cr_log_info("%s: reference vs expected: max |out err| %.3g, max |lse err| %.3g, %lld infinite lse", l.cases[k].name,
                    out_err, lse_err, (long long)infinite);
        cr_expect_eq(bad, 0, "%s: %lld values differ from expected by more than 1e-6 (max out %.3g, lse %.3g)",
                     l.cases[k].name, (long long)bad, out_err, lse_err);
        free(out);
        free(lse);
        mlajit_case_free(&c);
    }
}

Test(golden, flashmla_output_passes_comparator, .timeout = 60)
{
    case_list l;
    list_golden_cases(&l);
    int compared = 0;
    for (int k = 0; k < l.count; k++) {
        mlajit_case c;
        load_golden(&l, k, &c);
        if (c.flashmla_out && c.expected_out) {
            const mlajit_model_desc *d = mlajit_model_describe(c.model);
            const size_t n_lse = (size_t)c.b * (size_t)c.s_q * (size_t)c.h_q, n_out = n_lse * (size_t)d->d_v;
            float *out = malloc(n_out * sizeof *out);
            cr_assert_not_null(out);
            for (size_t x = 0; x < n_out; x++)
                out[x] = mlajit_bf16_to_float(c.flashmla_out[x]);
            mlajit_compare_result r;
            mlajit_compare(out, c.expected_out, n_out, c.flashmla_lse, c.expected_lse, n_lse, &r);
            cr_log_info("%s: FlashMLA vs expected: max |out err| %.3g, cosine %.9f, max |lse err| %.3g", l.cases[k].name,
                        r.out_max_abs_err, r.out_cosine, r.lse_max_abs_err);
            cr_expect(r.pass, "%s: FlashMLA fails the bar: %lld out / %lld lse violations, cosine %.9f", l.cases[k].name,
                      (long long)r.out_violations, (long long)r.lse_violations, r.out_cosine);
            /* The comparator must also reject it when one element is pushed past the bar. */
            out[n_out / 2] = c.expected_out[n_out / 2] + 0.01f + fabsf(c.expected_out[n_out / 2]) * 0.01f;
            mlajit_compare(out, c.expected_out, n_out, c.flashmla_lse, c.expected_lse, n_lse, &r);
            cr_expect(!r.pass && r.out_violations == 1, "%s: a perturbed element was not caught", l.cases[k].name);
            free(out);
            compared++;
        }
        mlajit_case_free(&c);
    }
    cr_log_info("%d golden cases carry FlashMLA output", compared);
}

/* ---- fp8 e4m3 ------------------------------------------------------------------ */

static int is_nan_code(int code) { return (code & 0x7F) == 0x7F; }

static float bf16_float(uint16_t v) { return mlajit_bf16_to_float(v); }

Test(fp8, every_code_round_trips)
{
    for (int code = 0; code < 256; code++) {
        float v = mlajit_fp8_e4m3_to_float((uint8_t)code);
        if (is_nan_code(code)) {
            cr_expect(isnan(v), "code 0x%02x must be NaN", code);
            continue;
        }
        cr_expect_eq(mlajit_fp8_e4m3_from_float(v), code, "code 0x%02x (%g) does not round-trip", code, (double)v);
    }
    cr_expect_eq(mlajit_fp8_e4m3_to_float(0x7E), 448.0f);
    cr_expect_eq(mlajit_fp8_e4m3_to_float(0x01), 0x1p-9f);
    cr_expect_eq(mlajit_fp8_e4m3_to_float(0x07), 7 * 0x1p-9f);
    cr_expect_eq(mlajit_fp8_e4m3_to_float(0x08), 0x1p-6f);
    cr_expect_eq(mlajit_fp8_e4m3_to_float(0x38), 1.0f);
    cr_expect_eq(mlajit_fp8_e4m3_to_float(0xB8), -1.0f);
    cr_expect(signbit(mlajit_fp8_e4m3_to_float(0x80)) && mlajit_fp8_e4m3_to_float(0x80) == 0.0f);
}

/* The nearest code by search; ties go to the even code (mantissa lsb 0). */
static int brute_force_nearest(float x)
{
    int best = -1;
    double best_err = INFINITY;
    for (int code = 0; code < 0x7F; code++) {
        double err = fabs(fabs((double)x) - (double)mlajit_fp8_e4m3_to_float((uint8_t)code));
        if (err < best_err || (err == best_err && (code & 1) == 0)) {
            best = code;
            best_err = err;
        }
    }
    return best | (signbit(x) ? 0x80 : 0);
}

Test(fp8, rounding_matches_brute_force_for_every_bf16_value)
{
    /* every bf16 value below the saturation point, plus fp32 values between them */
    int64_t checked = 0;
    for (uint32_t bits = 0; bits < 0x10000; bits++) {
        float x = bf16_float((uint16_t)bits);
        if (!isfinite(x) || fabsf(x) >= 448.0f)
            continue;
        cr_assert_eq(mlajit_fp8_e4m3_from_float(x), brute_force_nearest(x), "x = %a", (double)x);
        float between = nextafterf(x, 0.0f);
        cr_assert_eq(mlajit_fp8_e4m3_from_float(between), brute_force_nearest(between), "x = %a", (double)between);
        checked++;
    }
    cr_expect_gt(checked, 30000);
}

Test(fp8, ties_round_to_even)
{
    /* normal range: 1.0 (0x38) | 1.125 (0x39) | 1.25 (0x3A) */
    cr_expect_eq(mlajit_fp8_e4m3_from_float(1.0625f), 0x38);
    cr_expect_eq(mlajit_fp8_e4m3_from_float(1.1875f), 0x3A);
    cr_expect_eq(mlajit_fp8_e4m3_from_float(nextafterf(1.0625f, 2.0f)), 0x39);
    cr_expect_eq(mlajit_fp8_e4m3_from_float(-1.0625f), 0xB8);
    /* 240 (0x77) | 256 (0x78): the tie 248 goes to 256, whose mantissa is even */
    cr_expect_eq(mlajit_fp8_e4m3_from_float(248.0f), 0x78);
    /* subnormals: multiples of 2^-9 */
    cr_expect_eq(mlajit_fp8_e4m3_from_float(0x1p-10f), 0x00);       /* 0.5 ulp -> 0 */
    cr_expect_eq(mlajit_fp8_e4m3_from_float(3 * 0x1p-10f), 0x02);   /* 1.5 ulp -> 2 */
    cr_expect_eq(mlajit_fp8_e4m3_from_float(5 * 0x1p-10f), 0x02);   /* 2.5 ulp -> 2 */
    cr_expect_eq(mlajit_fp8_e4m3_from_float(15 * 0x1p-10f), 0x08);  /* 7.5 ulp -> 2^-6, the first normal */
    cr_expect_eq(mlajit_fp8_e4m3_from_float(0x1p-30f), 0x00);
    cr_expect_eq(mlajit_fp8_e4m3_from_float(-0x1p-30f), 0x80);
}

Test(fp8, saturates_at_448)
{
    const float big[] = {448.0f, 449.0f, 463.9f, 464.0f, 465.0f, 480.0f, 1e6f, 3e38f, INFINITY};
    for (size_t k = 0; k < sizeof big / sizeof big[0]; k++) {
        cr_expect_eq(mlajit_fp8_e4m3_from_float(big[k]), 0x7E, "%g", (double)big[k]);
        cr_expect_eq(mlajit_fp8_e4m3_from_float(-big[k]), 0xFE, "%g", -(double)big[k]);
    }
    cr_expect_eq(mlajit_fp8_e4m3_from_float(NAN) & 0x7F, 0x7F);
    cr_expect_eq(mlajit_fp8_e4m3_from_float(432.0f), 0x7E); /* 432 is the tie 416 | 448 */
    cr_expect_eq(mlajit_fp8_e4m3_from_float(431.0f), 0x7D);
}

/* ---- quantizer through the public API --------------------------------------------- */

typedef struct page_buf {
    uint8_t *bytes;
    size_t size;
} page_buf;

static page_buf make_page(mlajit_model model, int page_size, uint8_t fill)
{
    page_buf p;
    p.size = (size_t)mlajit_min_page_stride(model, page_size);
    p.bytes = malloc(p.size);
    cr_assert_not_null(p.bytes);
    memset(p.bytes, fill, p.size);
    return p;
}

/* Every finite fp8 value placed in tiles whose amax is 448 (so the scale is 1)
 * quantizes to its own code and dequantizes back to itself, in every model. */
Test(quantize, every_fp8_value_survives_quantize_dequantize)
{
    const mlajit_model models[] = {MLAJIT_MODEL_V32, MLAJIT_MODEL_DSV4, MLAJIT_MODEL_GLM_NSA,
                                   MLAJIT_MODEL_GLM53_NOPE, MLAJIT_MODEL_DOTS3_SWA};
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        const mlajit_model_desc *d = mlajit_model_describe(models[m]);
        uint16_t *values = malloc((size_t)d->d_qk * sizeof *values);
        float *back = malloc((size_t)d->d_qk * sizeof *back);
        page_buf page = make_page(models[m], 2, 0);
        int next_code = 0;
        while (next_code < 256) {
            int placed[1152];
            for (int x = 0; x < d->d_qk; x++) {
                placed[x] = -1;
                if (x >= d->d_nope) {
                    values[x] = mlajit_float_to_bf16(0.25f); /* RoPE */
                    continue;
                }
                if (x % d->quant_tile == 0) {
                    values[x] = mlajit_float_to_bf16(448.0f); /* sets the tile's scale to 1 */
                    continue;
                }
                while (next_code < 256 && is_nan_code(next_code))
                    next_code++;
                if (next_code < 256) {
                    placed[x] = next_code;
                    values[x] = mlajit_float_to_bf16(mlajit_fp8_e4m3_to_float((uint8_t)next_code++));
                } else {
                    values[x] = 0;
                }
            }
            cr_assert_eq(mlajit_quantize_token(models[m], values, page.bytes, 2, 1), MLAJIT_OK, "%s",
                         mlajit_last_error());
            cr_assert_eq(mlajit_dequantize_token(models[m], page.bytes, 2, 1, back), MLAJIT_OK, "%s",
                         mlajit_last_error());
            for (int x = 0; x < d->d_qk; x++) {
                cr_expect_eq(back[x], bf16_float(values[x]), "%s dim %d: %g -> %g", d->name, x,
                             (double)bf16_float(values[x]), (double)back[x]);
                if (placed[x] >= 0)
                    cr_expect_eq(page.bytes[(size_t)d->row_bytes + (size_t)x], placed[x], "%s dim %d code", d->name,
                                 x);
            }
        }
        free(values);
        free(back);
        free(page.bytes);
    }
}

static void fill_tile_values(uint16_t *values, int n, float amax)
{
    for (int x = 0; x < n; x++)
        values[x] = mlajit_float_to_bf16(amax * (float)(x % 7) / 6.0f * ((x & 1) ? -1.0f : 1.0f));
}

Test(quantize, power_of_two_scales_follow_the_rule)
{
    /* V32: inline fp32 scales. amax 1.0 -> 1/448 -> 2^-8; amax 0 -> floor 1e-4 ->
     * 2^-13; amax 448 * 2^-5 -> exactly 2^-5 (a power of two stays). */
    const mlajit_model_desc *d = mlajit_model_describe(MLAJIT_MODEL_V32);
    uint16_t values[1024];
    memset(values, 0, sizeof values);
    fill_tile_values(values, d->quant_tile, 1.0f);
    fill_tile_values(values + 2 * d->quant_tile, d->quant_tile, 448.0f * 0x1p-5f);
    fill_tile_values(values + 3 * d->quant_tile, d->quant_tile, 3.0f);
    page_buf page = make_page(MLAJIT_MODEL_V32, 1, 0xEE);
    cr_assert_eq(mlajit_quantize_token(MLAJIT_MODEL_V32, values, page.bytes, 1, 0), MLAJIT_OK);
    float scales[4];
    memcpy(scales, page.bytes + d->d_nope, sizeof scales);
    cr_expect_eq(scales[0], 0x1p-8f);
    cr_expect_eq(scales[1], 0x1p-13f);
    cr_expect_eq(scales[2], 0x1p-5f);
    cr_expect_eq(scales[3], 0x1p-7f); /* 3 / 448 = 0.0067 -> 2^-7 */
    free(page.bytes);

    /* DSV4: the same rule, stored as ue8m0 exponent bytes in the page footer. */
    d = mlajit_model_describe(MLAJIT_MODEL_DSV4);
    memset(values, 0, sizeof values);
    fill_tile_values(values, d->quant_tile, 1.0f);
    fill_tile_values(values + 2 * d->quant_tile, d->quant_tile, 448.0f * 0x1p-5f);
    const int page_size = 3, token = 1;
    page = make_page(MLAJIT_MODEL_DSV4, page_size, 0xEE);
    cr_assert_eq(mlajit_quantize_token(MLAJIT_MODEL_DSV4, values, page.bytes, page_size, token), MLAJIT_OK);
    const uint8_t *footer = page.bytes + (size_t)page_size * d->row_bytes + (size_t)token * d->footer_bytes;
    cr_expect_eq(footer[0], 127 - 8);
    cr_expect_eq(footer[1], 127 - 13);
    cr_expect_eq(footer[2], 127 - 5);
    for (int k = 3; k < d->num_scales; k++)
        cr_expect_eq(footer[k], 127 - 13);
    /* the padding byte and the other tokens are not written */
    for (int k = d->num_scales; k < d->footer_bytes; k++)
        cr_expect_eq(footer[k], 0xEE, "footer padding byte %d was written", k);
    for (size_t k = 0; k < (size_t)d->row_bytes; k++) {
        cr_expect_eq(page.bytes[k], 0xEE);
        cr_expect_eq(page.bytes[2 * (size_t)d->row_bytes + k], 0xEE);
    }
    const uint8_t *prev_footer = footer - d->footer_bytes;
    for (int k = 0; k < d->footer_bytes; k++)
        cr_expect_eq(prev_footer[k], 0xEE);
    /* RoPE verbatim */
    cr_expect_eq(memcmp(page.bytes + (size_t)token * d->row_bytes + d->d_nope, values + d->d_nope,
                        (size_t)d->d_rope * 2),
                 0);
    free(page.bytes);
}

Test(quantize, ue8m0_scales_dequantize_as_powers_of_two)
{
    const mlajit_model_desc *d = mlajit_model_describe(MLAJIT_MODEL_DSV4);
    const int page_size = 2, token = 0;
    page_buf page = make_page(MLAJIT_MODEL_DSV4, page_size, 0);
    uint8_t *row = page.bytes;
    uint8_t *footer = page.bytes + (size_t)page_size * d->row_bytes;
    const uint8_t exps[7] = {127, 130, 120, 0, 254, 255, 100};
    memcpy(footer, exps, sizeof exps);
    for (int t = 0; t < d->num_scales; t++)
        row[t * d->quant_tile] = 0x38; /* 1.0 */
    row[1] = 0xC0;                     /* -2.0 */
    uint16_t rope = mlajit_float_to_bf16(-0.3f);
    memcpy(row + d->d_nope, &rope, 2);
    float out[1024];
    cr_assert_eq(mlajit_dequantize_token(MLAJIT_MODEL_DSV4, page.bytes, page_size, token, out), MLAJIT_OK);
    cr_expect_eq(out[0], 1.0f);
    cr_expect_eq(out[1], -2.0f);
    cr_expect_eq(out[1 * d->quant_tile], 8.0f);
    cr_expect_eq(out[2 * d->quant_tile], 0x1p-7f);
    cr_expect_eq(out[3 * d->quant_tile], 0x1p-127f); /* e = 0: 2^-127, a subnormal */
    cr_expect_eq(out[4 * d->quant_tile], 0x1p127f);
    cr_expect(isnan(out[5 * d->quant_tile])); /* e = 255 is NaN */
    cr_expect_eq(out[6 * d->quant_tile], 0x1p-27f);
    cr_expect_eq(out[2], 0.0f);
    cr_expect_eq(out[d->d_nope], bf16_float(rope));
    free(page.bytes);
}

Test(quantize, arbitrary_fp32_scales_round_products_to_bf16)
{
    /* GLM_NSA: s = amax / 448 in fp32, dequant = bf16(float(fp8) * s). */
    const mlajit_model_desc *d = mlajit_model_describe(MLAJIT_MODEL_GLM_NSA);
    uint16_t values[1024];
    memset(values, 0, sizeof values);
    values[0] = mlajit_float_to_bf16(1.0f);
    values[1] = mlajit_float_to_bf16(0.3f);
    values[2] = mlajit_float_to_bf16(-0.7f);
    page_buf page = make_page(MLAJIT_MODEL_GLM_NSA, 1, 0);
    cr_assert_eq(mlajit_quantize_token(MLAJIT_MODEL_GLM_NSA, values, page.bytes, 1, 0), MLAJIT_OK);
    float scale;
    memcpy(&scale, page.bytes + d->d_nope, sizeof scale);
    cr_expect_eq(scale, 1.0f / 448.0f);
    float scale1;
    memcpy(&scale1, page.bytes + d->d_nope + 4, sizeof scale1);
    cr_expect_eq(scale1, 1e-4f, "an all-zero tile gets the 1e-4 floor");
    float out[1024];
    cr_assert_eq(mlajit_dequantize_token(MLAJIT_MODEL_GLM_NSA, page.bytes, 1, 0, out), MLAJIT_OK);
    for (int x = 0; x < 3; x++) {
        uint8_t code = mlajit_fp8_e4m3_from_float(bf16_float(values[x]) / scale);
        cr_expect_eq(page.bytes[x], code);
        float want = bf16_float(mlajit_float_to_bf16(mlajit_fp8_e4m3_to_float(code) * scale));
        cr_expect_eq(out[x], want, "dim %d: %a vs %a", x, (double)out[x], (double)want);
    }
    cr_expect_eq(page.bytes[0], 0x7E); /* the amax maps to 448 */
    free(page.bytes);
}

Test(quantize, rejects_bad_arguments)
{
    uint16_t values[1024] = {0};
    float out[1024];
    page_buf page = make_page(MLAJIT_MODEL_V32, 4, 0);
    cr_expect_eq(mlajit_quantize_token((mlajit_model)99, values, page.bytes, 4, 0), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "model") != NULL);
    cr_expect_eq(mlajit_quantize_token(MLAJIT_MODEL_V32, values, page.bytes, 4, 4), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "token_in_page") != NULL);
    cr_expect_eq(mlajit_quantize_token(MLAJIT_MODEL_V32, values, page.bytes, 0, 0), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect_eq(mlajit_quantize_token(MLAJIT_MODEL_V32, NULL, page.bytes, 4, 0), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect_eq(mlajit_dequantize_token(MLAJIT_MODEL_V32, NULL, 4, 0, out), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect_eq(mlajit_dequantize_token(MLAJIT_MODEL_V32, page.bytes, 4, -1, out), MLAJIT_ERR_INVALID_ARGUMENT);
    free(page.bytes);
}

/* ---- GLM53_NOPE and DOTS3_SWA: the descriptor, the bytes at SPEC.md's offsets ---- */

Test(quantize, new_layouts_have_spec_numbers)
{
    const mlajit_model_desc *g = mlajit_model_describe(MLAJIT_MODEL_GLM53_NOPE);
    const mlajit_model_desc *s = mlajit_model_describe(MLAJIT_MODEL_DOTS3_SWA);
    cr_assert(g && s);
    cr_expect_str_eq(g->name, "glm53_nope");
    cr_expect(g->d_qk == 512 && g->d_nope == 512 && g->d_rope == 0 && g->d_v == 512);
    cr_expect(g->quant_tile == 128 && g->num_scales == 4 && g->scale_format == MLAJIT_SCALE_FP32 &&
              g->scale_place == MLAJIT_SCALES_INLINE && g->row_bytes == 656 && g->bytes_per_token == 656);
    cr_expect_str_eq(s->name, "dots3_swa");
    cr_expect(s->d_qk == 1088 && s->d_nope == 1024 && s->d_rope == 64 && s->d_v == 1024);
    cr_expect(s->quant_tile == 128 && s->num_scales == 8 && s->scale_format == MLAJIT_SCALE_UE8M0 &&
              s->scale_place == MLAJIT_SCALES_PAGE_FOOTER && s->row_bytes == 1152 && s->footer_bytes == 8 &&
              s->bytes_per_token == 1160);
    cr_expect_eq(mlajit_min_page_stride(MLAJIT_MODEL_GLM53_NOPE, 64), 64 * 656);
    cr_expect_eq(mlajit_min_page_stride(MLAJIT_MODEL_DOTS3_SWA, 64), 64 * 1160);
    mlajit_model m;
    cr_expect(mlajit_model_from_name("glm53_nope", &m) == MLAJIT_OK && m == MLAJIT_MODEL_GLM53_NOPE);
    cr_expect(mlajit_model_from_name("DOTS3_SWA", &m) == MLAJIT_OK && m == MLAJIT_MODEL_DOTS3_SWA);
}

/* A token of values x = sign * (1 + dim % 7) * 2^(tile - 3): a different amax per tile. */
static void fill_layout_token(uint16_t *v, const mlajit_model_desc *d)
{
    for (int x = 0; x < d->d_qk; x++) {
        float mag = (float)(1 + x % 7) * ldexpf(1.0f, x / d->quant_tile - 3);
        v[x] = mlajit_float_to_bf16(x % 3 ? mag : -mag);
    }
    for (int x = d->d_nope; x < d->d_qk; x++)
        v[x] = mlajit_float_to_bf16(0.1f * (float)(x - d->d_nope) - 3.0f); /* RoPE: verbatim, not fp8 */
}

Test(quantize, glm53_nope_record_bytes)
{
    const mlajit_model_desc *d = mlajit_model_describe(MLAJIT_MODEL_GLM53_NOPE);
    page_buf page = make_page(MLAJIT_MODEL_GLM53_NOPE, 3, 0xAB);
    cr_assert_eq(page.size, 3 * 656u);
    uint16_t v[512];
    fill_layout_token(v, d);
    cr_assert_eq(mlajit_quantize_token(MLAJIT_MODEL_GLM53_NOPE, v, page.bytes, 3, 1), MLAJIT_OK, "%s",
                 mlajit_last_error());
    const uint8_t *rec = page.bytes + 656;
    for (int k = 0; k < 4; k++) {
        /* [512, 528): four fp32 scales, amax / 448 of each 128-dim tile (arbitrary, not rounded up) */
        float scale, amax = 7.0f * ldexpf(1.0f, k - 3);
        memcpy(&scale, rec + 512 + 4 * k, 4);
        cr_expect_eq(scale, amax / 448.0f, "scale %d: %g", k, (double)scale);
    }
    for (int b = 528; b < 656; b++)
        cr_expect_eq(rec[b], 0, "padding byte %d is 0x%02x, expected 0", b, rec[b]);
    for (size_t b = 0; b < 656; b++) { /* the neighbours are untouched */
        cr_expect_eq(page.bytes[b], 0xAB, "token 0 byte %zu", b);
        cr_expect_eq(page.bytes[2 * 656 + b], 0xAB, "token 2 byte %zu", b);
    }
    float back[512];
    cr_assert_eq(mlajit_dequantize_token(MLAJIT_MODEL_GLM53_NOPE, page.bytes, 3, 1, back), MLAJIT_OK);
    for (int x = 0; x < 512; x++) {
        float scale;
        memcpy(&scale, rec + 512 + 4 * (x / 128), 4);
        const float want = mlajit_bf16_to_float(mlajit_float_to_bf16(mlajit_fp8_e4m3_to_float(rec[x]) * scale));
        cr_expect_eq(back[x], want, "dim %d", x);
    }
    free(page.bytes);
}

Test(quantize, dots3_swa_page_bytes)
{
    const mlajit_model_desc *d = mlajit_model_describe(MLAJIT_MODEL_DOTS3_SWA);
    enum { B = 4, T = 2 };
    page_buf page = make_page(MLAJIT_MODEL_DOTS3_SWA, B, 0xAB);
    cr_assert_eq(page.size, (size_t)B * 1160u);
    uint16_t v[1088];
    fill_layout_token(v, d);
    cr_assert_eq(mlajit_quantize_token(MLAJIT_MODEL_DOTS3_SWA, v, page.bytes, B, T), MLAJIT_OK, "%s",
                 mlajit_last_error());
    /* footer: B * 1152 + t * 8, eight ue8m0 bytes: 2^ceil(log2(amax / 448)) */
    const uint8_t *footer = page.bytes + (size_t)B * 1152 + (size_t)T * 8;
    for (int k = 0; k < 8; k++) {
        const double s = ldexp(1.0, (int)ceil(log2(7.0 * ldexp(1.0, k - 3) / 448.0)));
        cr_expect_eq(footer[k], (uint8_t)(127 + (int)log2(s)), "ue8m0 scale %d: %d", k, footer[k]);
    }
    /* the RoPE: 64 bf16 at T * 1152 + [1024, 1152), verbatim */
    cr_expect_eq(memcmp(page.bytes + (size_t)T * 1152 + 1024, v + 1024, 128), 0);
    /* fp8 codes at T * 1152 + [0, 1024): value / scale exactly (power-of-two scales) */
    for (int x = 0; x < 1024; x++) {
        const float s = ldexpf(1.0f, footer[x / 128] - 127);
        cr_expect_eq(page.bytes[(size_t)T * 1152 + (size_t)x], mlajit_fp8_e4m3_from_float(mlajit_bf16_to_float(v[x]) / s),
                     "dim %d", x);
    }
    for (size_t t = 0; t < B; t++) { /* other tokens' rows and footers are untouched */
        if (t == T)
            continue;
        for (size_t b = 0; b < 1152; b++)
            cr_expect_eq(page.bytes[t * 1152 + b], 0xAB, "token %zu row byte %zu", t, b);
        for (size_t b = 0; b < 8; b++)
            cr_expect_eq(page.bytes[B * 1152 + t * 8 + b], 0xAB, "token %zu footer byte %zu", t, b);
    }
    float back[1088];
    cr_assert_eq(mlajit_dequantize_token(MLAJIT_MODEL_DOTS3_SWA, page.bytes, B, T, back), MLAJIT_OK);
    for (int x = 1024; x < 1088; x++)
        cr_expect_eq(back[x], mlajit_bf16_to_float(v[x]), "RoPE dim %d", x);
    free(page.bytes);
}

/* Random tokens quantize and dequantize within the fp8 bound: per value, half an
 * e4m3 ulp (2^-4 relative) plus the bf16 rounding of the product, or the
 * subnormal step (2^-9 of the scale) near zero. */
Test(quantize, new_layouts_round_trip_within_fp8_bound)
{
    const mlajit_model models[] = {MLAJIT_MODEL_GLM53_NOPE, MLAJIT_MODEL_DOTS3_SWA};
    uint64_t state = 12345;
    for (size_t m = 0; m < 2; m++) {
        const mlajit_model_desc *d = mlajit_model_describe(models[m]);
        page_buf page = make_page(models[m], 16, 0);
        uint16_t v[1088];
        float back[1088];
        for (int token = 0; token < 16; token++) {
            for (int x = 0; x < d->d_qk; x++) {
                state = state * 6364136223846793005ull + 1442695040888963407ull;
                const double u = (double)(state >> 11) / 9007199254740992.0; /* [0, 1) */
                v[x] = mlajit_float_to_bf16((float)((u - 0.5) * ldexp(1.0, token % 9 - 4)));
            }
            cr_assert_eq(mlajit_quantize_token(models[m], v, page.bytes, 16, token), MLAJIT_OK);
            cr_assert_eq(mlajit_dequantize_token(models[m], page.bytes, 16, token, back), MLAJIT_OK);
            for (int tile = 0; tile < d->num_scales; tile++) {
                float amax = 0.0f;
                for (int k = 0; k < d->quant_tile; k++)
                    amax = fmaxf(amax, fabsf(mlajit_bf16_to_float(v[tile * d->quant_tile + k])));
                const double s = fmax(amax / 448.0, 1e-4) * 2.0; /* ue8m0 rounds the scale up, at most 2x */
                for (int k = 0; k < d->quant_tile; k++) {
                    const int x = tile * d->quant_tile + k;
                    const double want = mlajit_bf16_to_float(v[x]);
                    cr_expect(fabs(back[x] - want) <= fabs(want) * (0.0625 + 0.0079) + s * ldexp(1.0, -9),
                              "%s token %d dim %d: %g -> %g", d->name, token, x, want, (double)back[x]);
                }
            }
            for (int x = d->d_nope; x < d->d_qk; x++)
                cr_expect_eq(back[x], mlajit_bf16_to_float(v[x]), "%s RoPE dim %d", d->name, x);
        }
        free(page.bytes);
    }
}

/* ---- reference on tiny hand-made inputs ------------------------------------------------ */

/* A tiny cache: TINY_PAGES pages of TINY_PAGE tokens poisoned with 0xFF, one extra
 * poisoned page past the end (num_pages excludes it), and tokens whose every
 * dimension holds one power-of-two-friendly value a, so K = a * ones exactly and
 * q = qv * ones gives score = sm_scale * qv * a * d_qk. */
#define TINY_PAGE 4
#define TINY_PAGES 3
#define TINY_HEADS 2
#define TINY_MAX_DQK 1152 /* DOTS3_SWA's 1088, rounded up */

typedef struct tiny {
    mlajit_model model;
    const mlajit_model_desc *d;
    uint8_t *cache;
    int64_t stride;
    uint16_t q[TINY_HEADS * TINY_MAX_DQK];
    float qv[TINY_HEADS];
    float sink[TINY_HEADS];
    mlajit_kernel_spec spec;
    mlajit_decode_shape shape;
    mlajit_decode_args args;
    double out[TINY_HEADS * TINY_MAX_DQK];
    double lse[TINY_HEADS];
} tiny;

static void tiny_put(tiny *t, int slot, float a)
{
    uint16_t values[TINY_MAX_DQK];
    for (int x = 0; x < t->d->d_qk; x++)
        values[x] = mlajit_float_to_bf16(a);
    cr_assert_eq(mlajit_quantize_token(t->model, values, t->cache + (slot / TINY_PAGE) * t->stride, TINY_PAGE,
                                       slot % TINY_PAGE),
                 MLAJIT_OK, "%s", mlajit_last_error());
}

/* Slots 1, 2, 5, 9 hold 0.5, -0.25, 1.0, 0.125; every other slot is NaN. */
static void tiny_init(tiny *t, mlajit_model model, const int32_t *indices, int topk)
{
    memset(t, 0, sizeof *t);
    t->model = model;
    t->d = mlajit_model_describe(model);
    t->stride = mlajit_min_page_stride(model, TINY_PAGE);
    t->cache = malloc((size_t)(t->stride * (TINY_PAGES + 1)));
    cr_assert_not_null(t->cache);
    memset(t->cache, 0xFF, (size_t)(t->stride * (TINY_PAGES + 1)));
    tiny_put(t, 1, 0.5f);
    tiny_put(t, 2, -0.25f);
    tiny_put(t, 5, 1.0f);
    tiny_put(t, 9, 0.125f);
    t->qv[0] = 0.5f;
    t->qv[1] = -1.0f;
    for (int h = 0; h < TINY_HEADS; h++)
        for (int x = 0; x < t->d->d_qk; x++)
            t->q[h * t->d->d_qk + x] = mlajit_float_to_bf16(t->qv[h]);

    t->spec.struct_size = sizeof t->spec;
    t->shape.struct_size = sizeof t->shape;
    t->args.struct_size = sizeof t->args;
    t->spec.model = model;
    t->spec.h_q = TINY_HEADS;
    t->spec.page_size = TINY_PAGE;
    t->shape.batch = 1;
    t->shape.s_q = 1;
    t->shape.topk = topk;
    t->args.q = t->q;
    t->args.kv = (mlajit_cache_view){t->cache, t->stride, TINY_PAGES};
    t->args.indices = indices;
    t->args.attn_sink = t->sink;
    t->args.sm_scale = 0.03125f;
}

static double tiny_value(int slot)
{
    switch (slot) {
    case 1: return 0.5;
    case 2: return -0.25;
    case 5: return 1.0;
    case 9: return 0.125;
    }
    return NAN;
}

static double tiny_score(const tiny *t, int h, int slot)
{
    return (double)t->args.sm_scale * (double)t->qv[h] * tiny_value(slot) * t->d->d_qk;
}

static void tiny_run(tiny *t)
{
    int st = mlajit_reference_decode(&t->spec, &t->shape, &t->args, t->out, t->lse);
    cr_assert_eq(st, MLAJIT_OK, "%s", mlajit_last_error());
}

/* Check head h against the softmax over the given slots (with multiplicity). */
static void tiny_expect(const tiny *t, int h, const int *slots, int n, double out_factor)
{
    double m = -INFINITY;
    for (int k = 0; k < n; k++)
        m = fmax(m, tiny_score(t, h, slots[k]));
    double sum = 0.0, weighted = 0.0;
    for (int k = 0; k < n; k++) {
        double w = exp(tiny_score(t, h, slots[k]) - m);
        sum += w;
        weighted += w * tiny_value(slots[k]);
    }
    const double lse = n ? m + log(sum) : INFINITY;
    const double value = n ? weighted / sum * out_factor : 0.0;
    if (n == 0)
        cr_expect(isinf(t->lse[h]) && t->lse[h] > 0, "head %d: lse %g, expected +inf", h, t->lse[h]);
    else
        cr_expect(fabs(t->lse[h] - lse) <= 1e-12, "head %d: lse %.17g, expected %.17g", h, t->lse[h], lse);
    for (int x = 0; x < t->d->d_v; x++) {
        const double got = t->out[h * t->d->d_v + x];
        cr_expect(fabs(got - value) <= 1e-12 && !isnan(got), "head %d dim %d: %.17g, expected %.17g", h, x, got,
                  value);
        if (fabs(got - value) > 1e-12)
            break;
    }
}

Test(reference, no_valid_candidate_gives_zero_and_infinite_lse)
{
    const int32_t idx[4] = {-1, -1, -1, -1};
    tiny t;
    tiny_init(&t, MLAJIT_MODEL_V32, idx, 4);
    tiny_run(&t);
    for (int h = 0; h < TINY_HEADS; h++)
        tiny_expect(&t, h, NULL, 0, 1.0);
    free(t.cache);
}

Test(reference, one_candidate_returns_its_value)
{
    const int32_t idx[1] = {5};
    tiny t;
    tiny_init(&t, MLAJIT_MODEL_V32, idx, 1);
    tiny_run(&t);
    const int slots[] = {5};
    for (int h = 0; h < TINY_HEADS; h++) {
        tiny_expect(&t, h, slots, 1, 1.0);
        cr_expect_eq(t.out[h * t.d->d_v], 1.0);
        cr_expect(fabs(t.lse[h] - tiny_score(&t, h, 5)) < 1e-15);
    }
    free(t.cache);
}

Test(reference, softmax_over_several_candidates)
{
    const int32_t idx[4] = {1, 2, 5, 9};
    const int slots[4] = {1, 2, 5, 9};
    tiny t;
    tiny_init(&t, MLAJIT_MODEL_V32, idx, 4);
    tiny_run(&t);
    for (int h = 0; h < TINY_HEADS; h++)
        tiny_expect(&t, h, slots, 4, 1.0);
    free(t.cache);
}

Test(reference, sink_scales_out_but_not_lse)
{
    const int32_t idx[3] = {1, 5, 9};
    const int slots[3] = {1, 5, 9};
    tiny t;
    tiny_init(&t, MLAJIT_MODEL_V32, idx, 3);
    t.spec.features = MLAJIT_FEATURE_SINK;

    t.sink[0] = INFINITY; /* out = 0, lse unchanged */
    t.sink[1] = -INFINITY; /* no effect */
    tiny_run(&t);
    tiny_expect(&t, 0, slots, 3, 0.0);
    tiny_expect(&t, 1, slots, 3, 1.0);
    for (int x = 0; x < t.d->d_v; x++)
        cr_expect_eq(t.out[x], 0.0);

    t.sink[0] = 0.7f;
    t.sink[1] = -2.0f;
    tiny_run(&t);
    for (int h = 0; h < TINY_HEADS; h++) {
        double lse = t.lse[h];
        tiny_expect(&t, h, slots, 3, 1.0 / (1.0 + exp((double)t.sink[h] - lse)));
    }
    free(t.cache);
}

Test(reference, sink_with_nothing_to_attend_keeps_zero)
{
    const int32_t idx[2] = {-1, -1};
    tiny t;
    tiny_init(&t, MLAJIT_MODEL_V32, idx, 2);
    t.spec.features = MLAJIT_FEATURE_SINK;
    t.sink[0] = INFINITY;
    t.sink[1] = 1.0f;
    tiny_run(&t);
    for (int h = 0; h < TINY_HEADS; h++)
        tiny_expect(&t, h, NULL, 0, 1.0);
    free(t.cache);
}

Test(reference, skipped_indices_are_never_read)
{
    /* Slot 0 and slot 12 (on the poisoned page past num_pages) hold NaN bytes, so
     * reading them would make the result NaN. */
    const int32_t idx[7] = {-1, 5, TINY_PAGES * TINY_PAGE, -7, INT32_MAX, INT32_MIN, TINY_PAGES * TINY_PAGE + 3};
    const int slots[1] = {5};
    tiny t;
    tiny_init(&t, MLAJIT_MODEL_V32, idx, 7);
    tiny_run(&t);
    for (int h = 0; h < TINY_HEADS; h++)
        tiny_expect(&t, h, slots, 1, 1.0);

    /* and a referenced NaN slot does poison the result: the cache really is NaN there */
    const int32_t nan_idx[2] = {5, 0};
    t.args.indices = nan_idx;
    t.shape.topk = 2;
    tiny_run(&t);
    cr_expect(isnan(t.out[0]));
    free(t.cache);
}

Test(reference, topk_length_limits_and_is_clamped)
{
    const int32_t idx[3] = {1, 5, 0}; /* slot 0 is NaN: only reachable past the length */
    tiny t;
    tiny_init(&t, MLAJIT_MODEL_V32, idx, 3);
    t.spec.features = MLAJIT_FEATURE_TOPK_LENGTH;
    int32_t length = 0;
    t.args.topk_length = &length;
    tiny_run(&t);
    tiny_expect(&t, 0, NULL, 0, 1.0);
    tiny_expect(&t, 1, NULL, 0, 1.0);

    length = -3; /* negative counts as 0 */
    tiny_run(&t);
    tiny_expect(&t, 0, NULL, 0, 1.0);

    length = 1;
    tiny_run(&t);
    const int first[1] = {1};
    tiny_expect(&t, 0, first, 1, 1.0);
    tiny_expect(&t, 1, first, 1, 1.0);

    const int32_t idx2[2] = {1, 5};
    t.args.indices = idx2;
    t.shape.topk = 2;
    length = 1000; /* past topk: clamped to topk */
    tiny_run(&t);
    const int both[2] = {1, 5};
    tiny_expect(&t, 0, both, 2, 1.0);
    tiny_expect(&t, 1, both, 2, 1.0);
    free(t.cache);
}

Test(reference, duplicate_indices_count_twice)
{
    const int32_t idx[3] = {5, 5, 2};
    const int slots[3] = {5, 5, 2};
    tiny t;
    tiny_init(&t, MLAJIT_MODEL_V32, idx, 3);
    tiny_run(&t);
    for (int h = 0; h < TINY_HEADS; h++)
        tiny_expect(&t, h, slots, 3, 1.0);

    const int32_t twice[2] = {9, 9};
    t.args.indices = twice;
    t.shape.topk = 2;
    tiny_run(&t);
    for (int h = 0; h < TINY_HEADS; h++) {
        cr_expect(fabs(t.lse[h] - (tiny_score(&t, h, 9) + log(2.0))) < 1e-14);
        cr_expect_eq(t.out[h * t.d->d_v], 0.125);
    }
    free(t.cache);
}

Test(reference, extra_cache_joins_the_main_candidates)
{
    const int32_t main_idx[2] = {1, -1};
    const int32_t extra_idx[3] = {9, 2, 0}; /* slot 0 (NaN) sits past extra_topk_length */
    tiny t;
    tiny_init(&t, MLAJIT_MODEL_V32, main_idx, 2);
    t.spec.extra_page_size = TINY_PAGE;
    t.spec.features = MLAJIT_FEATURE_EXTRA_TOPK_LENGTH;
    t.shape.extra_topk = 3;
    t.args.extra_kv = t.args.kv; /* the same pages serve as the extra cache */
    t.args.extra_indices = extra_idx;
    int32_t extra_len = 2;
    t.args.extra_topk_length = &extra_len;
    tiny_run(&t);
    const int slots[3] = {1, 9, 2};
    for (int h = 0; h < TINY_HEADS; h++)
        tiny_expect(&t, h, slots, 3, 1.0);

    extra_len = 0;
    tiny_run(&t);
    for (int h = 0; h < TINY_HEADS; h++)
        tiny_expect(&t, h, slots, 1, 1.0);
    free(t.cache);
}

Test(reference, dsv4_value_includes_rope_dims)
{
    const int32_t idx[2] = {1, 9};
    const int slots[2] = {1, 9};
    tiny t;
    tiny_init(&t, MLAJIT_MODEL_DSV4, idx, 2);
    cr_assert_eq(t.d->d_v, t.d->d_qk);
    tiny_run(&t);
    for (int h = 0; h < TINY_HEADS; h++)
        tiny_expect(&t, h, slots, 2, 1.0);
    free(t.cache);
}

/* GLM53_NOPE (V = all 512 dims, no RoPE) and DOTS3_SWA (V = the 1024 NoPE dims,
 * d_qk 1088) on the tiny cache: a ragged row of skipped (-1, out of range) and
 * valid slots, the softmax computed here in doubles. */
Test(reference, new_layouts_softmax_with_skipped_indices)
{
    const mlajit_model models[] = {MLAJIT_MODEL_GLM53_NOPE, MLAJIT_MODEL_DOTS3_SWA};
    for (size_t m = 0; m < 2; m++) {
        const int32_t idx[7] = {-1, 1, 5, -1, TINY_PAGES * TINY_PAGE, 9, 2};
        const int slots[4] = {1, 5, 9, 2};
        tiny t;
        tiny_init(&t, models[m], idx, 7);
        tiny_run(&t);
        for (int h = 0; h < TINY_HEADS; h++)
            tiny_expect(&t, h, slots, 4, 1.0);
        /* a ragged row: topk_length 2 counts slots -1 and 1 only */
        t.spec.features = MLAJIT_FEATURE_TOPK_LENGTH;
        int32_t length = 2;
        t.args.topk_length = &length;
        tiny_run(&t);
        const int first[1] = {1};
        for (int h = 0; h < TINY_HEADS; h++)
            tiny_expect(&t, h, first, 1, 1.0);
        free(t.cache);
    }
}

/* One token whose RoPE differs from its NoPE: DOTS3_SWA's output is the NoPE
 * value (V = the 1024 NoPE dims, not the RoPE), its lse counts all 1088 dims. */
Test(reference, dots3_swa_value_is_nope_dims)
{
    const mlajit_model_desc *d = mlajit_model_describe(MLAJIT_MODEL_DOTS3_SWA);
    const int64_t stride = mlajit_min_page_stride(MLAJIT_MODEL_DOTS3_SWA, 2);
    uint8_t *cache = calloc(2, (size_t)stride);
    uint16_t k[1088], q[1088];
    for (int x = 0; x < 1088; x++) {
        k[x] = mlajit_float_to_bf16(x < 1024 ? 0.5f : 2.0f);
        q[x] = mlajit_float_to_bf16(0.25f);
    }
    cr_assert_eq(mlajit_quantize_token(MLAJIT_MODEL_DOTS3_SWA, k, cache + stride, 2, 1), MLAJIT_OK);
    const int32_t idx[2] = {3, -1};
    mlajit_kernel_spec spec = {.struct_size = sizeof spec, .model = MLAJIT_MODEL_DOTS3_SWA, .h_q = 1, .page_size = 2};
    mlajit_decode_shape shape = {.struct_size = sizeof shape, .batch = 1, .s_q = 1, .topk = 2};
    mlajit_decode_args args = {.struct_size = sizeof args, .q = q, .kv = {cache, stride, 2}, .indices = idx,
                               .sm_scale = 0.0625f};
    double out[1024], lse;
    cr_assert_eq(mlajit_reference_decode(&spec, &shape, &args, out, &lse), MLAJIT_OK, "%s", mlajit_last_error());
    const double score = 0.0625 * (1024 * 0.25 * 0.5 + 64 * 0.25 * 2.0);
    cr_expect(fabs(lse - score) <= 1e-12, "lse %.17g, expected %.17g", lse, score);
    for (int x = 0; x < d->d_v; x++)
        cr_expect_eq(out[x], 0.5, "dim %d: %g", x, out[x]);
    free(cache);
}

/* GLM53_NOPE: V is all 512 dims; two tokens with per-tile values, softmax by hand. */
Test(reference, glm53_nope_two_tokens_by_hand)
{
    const int64_t stride = mlajit_min_page_stride(MLAJIT_MODEL_GLM53_NOPE, 2);
    uint8_t *cache = calloc(1, (size_t)stride);
    uint16_t k0[512], k1[512], q[512];
    for (int x = 0; x < 512; x++) {
        k0[x] = mlajit_float_to_bf16(x < 256 ? 1.0f : -0.5f);
        k1[x] = mlajit_float_to_bf16(0.25f);
        q[x] = mlajit_float_to_bf16(x % 2 ? 0.125f : 0.25f);
    }
    cr_assert_eq(mlajit_quantize_token(MLAJIT_MODEL_GLM53_NOPE, k0, cache, 2, 0), MLAJIT_OK);
    cr_assert_eq(mlajit_quantize_token(MLAJIT_MODEL_GLM53_NOPE, k1, cache, 2, 1), MLAJIT_OK);
    const int32_t idx[3] = {1, -1, 0};
    mlajit_kernel_spec spec = {.struct_size = sizeof spec, .model = MLAJIT_MODEL_GLM53_NOPE, .h_q = 1, .page_size = 2};
    mlajit_decode_shape shape = {.struct_size = sizeof shape, .batch = 1, .s_q = 1, .topk = 3};
    mlajit_decode_args args = {.struct_size = sizeof args, .q = q, .kv = {cache, stride, 1}, .indices = idx,
                               .sm_scale = 0.125f};
    double out[512], lse;
    cr_assert_eq(mlajit_reference_decode(&spec, &shape, &args, out, &lse), MLAJIT_OK, "%s", mlajit_last_error());
    /* q . k0 = 128 * (0.25 + 0.125) * 1 - 128 * (0.25 + 0.125) * 0.5 = 24; q . k1 = 256 * 0.375 * 0.25 = 24 */
    const double s0 = 0.125 * 24.0, s1 = 0.125 * 24.0;
    const double mx = fmax(s0, s1), w0 = exp(s0 - mx), w1 = exp(s1 - mx);
    const double want_lse = mx + log(w0 + w1);
    cr_expect(fabs(lse - want_lse) <= 1e-12, "lse %.17g, expected %.17g", lse, want_lse);
    for (int x = 0; x < 512; x++) {
        const double want = (w0 * (x < 256 ? 1.0 : -0.5) + w1 * 0.25) / (w0 + w1);
        cr_expect(fabs(out[x] - want) <= 1e-12, "dim %d: %.17g, expected %.17g", x, out[x], want);
    }
    free(cache);
}

Test(reference, strides_are_honoured)
{
    /* b = 2, s_q = 2 with padded q and index rows must equal the packed layout */
    tiny t;
    const int32_t dummy[1] = {1};
    tiny_init(&t, MLAJIT_MODEL_GLM_NSA, dummy, 1);
    const int d_qk = t.d->d_qk, d_v = t.d->d_v, topk = 2, b = 2, s_q = 2, h_q = TINY_HEADS;
    const int32_t packed_idx[8] = {1, 2, 5, 9, 9, -1, 2, 5};
    const int64_t idx_pad = 3, q_pad = 8;
    int32_t strided_idx[2 * 2 * 5];
    for (int r = 0; r < b * s_q; r++)
        for (int k = 0; k < topk + idx_pad; k++)
            strided_idx[r * (topk + idx_pad) + k] = k < topk ? packed_idx[r * topk + k] : 0; /* 0: NaN slot */
    uint16_t *packed_q = malloc((size_t)b * s_q * h_q * d_qk * 2);
    uint16_t *strided_q = malloc((size_t)b * s_q * h_q * (d_qk + q_pad) * 2);
    for (int r = 0; r < b * s_q * h_q; r++)
        for (int x = 0; x < d_qk + q_pad; x++) {
            uint16_t v = mlajit_float_to_bf16((float)((r * 7 + x) % 11) / 11.0f - 0.5f);
            if (x < d_qk)
                packed_q[r * d_qk + x] = v;
            strided_q[r * (d_qk + q_pad) + x] = x < d_qk ? v : 0xFFFF;
        }
    double *a_out = malloc((size_t)b * s_q * h_q * d_v * sizeof(double));
    double *b_out = malloc((size_t)b * s_q * h_q * d_v * sizeof(double));
    double a_lse[8], b_lse[8];
    t.shape.batch = b;
    t.shape.s_q = s_q;
    t.shape.topk = topk;
    t.args.q = packed_q;
    t.args.indices = packed_idx;
    cr_assert_eq(mlajit_reference_decode(&t.spec, &t.shape, &t.args, a_out, a_lse), MLAJIT_OK, "%s",
                 mlajit_last_error());
    t.args.q = strided_q;
    t.args.q_stride_h = d_qk + q_pad;
    t.args.q_stride_s = h_q * (d_qk + q_pad);
    t.args.q_stride_b = s_q * h_q * (d_qk + q_pad);
    t.args.indices = strided_idx;
    t.args.indices_stride_s = topk + idx_pad;
    t.args.indices_stride_b = s_q * (topk + idx_pad);
    cr_assert_eq(mlajit_reference_decode(&t.spec, &t.shape, &t.args, b_out, b_lse), MLAJIT_OK, "%s",
                 mlajit_last_error());
    cr_expect_eq(memcmp(a_out, b_out, (size_t)b * s_q * h_q * d_v * sizeof(double)), 0);
    cr_expect_eq(memcmp(a_lse, b_lse, sizeof a_lse), 0);
    for (int k = 0; k < 8; k++)
        cr_expect(isfinite(a_lse[k]));
    free(packed_q);
    free(strided_q);
    free(a_out);
    free(b_out);
    free(t.cache);
}

Test(reference, empty_batch_and_zero_query_tokens_are_legal)
{
    tiny t;
    const int32_t idx[1] = {1};
    tiny_init(&t, MLAJIT_MODEL_V32, idx, 1);
    t.shape.batch = 0;
    cr_expect_eq(mlajit_reference_decode(&t.spec, &t.shape, &t.args, NULL, NULL), MLAJIT_OK);
    t.shape.batch = 1;
    t.shape.s_q = 0;
    cr_expect_eq(mlajit_reference_decode(&t.spec, &t.shape, &t.args, NULL, NULL), MLAJIT_OK);
    free(t.cache);
}

static void expect_rejected(tiny *t, const char *needle)
{
    int st = mlajit_reference_decode(&t->spec, &t->shape, &t->args, t->out, t->lse);
    cr_expect_eq(st, MLAJIT_ERR_INVALID_ARGUMENT, "expected a rejection naming '%s'", needle);
    cr_expect(strstr(mlajit_last_error(), needle) != NULL, "message '%s' does not name '%s'", mlajit_last_error(),
              needle);
}

Test(reference, bad_arguments_are_named)
{
    const int32_t idx[1] = {1};
    tiny t;
    tiny_init(&t, MLAJIT_MODEL_V32, idx, 1);
    cr_expect_eq(mlajit_reference_decode(NULL, &t.shape, &t.args, t.out, t.lse), MLAJIT_ERR_INVALID_ARGUMENT);

    t.spec.h_q = 0;
    expect_rejected(&t, "h_q");
    t.spec.h_q = TINY_HEADS;
    t.spec.model = (mlajit_model)42;
    expect_rejected(&t, "model");
    t.spec.model = MLAJIT_MODEL_V32;
    t.args.sm_scale = 0.0f;
    expect_rejected(&t, "sm_scale");
    t.args.sm_scale = NAN;
    expect_rejected(&t, "sm_scale");
    t.args.sm_scale = 0.5f;
    t.args.kv.page_stride = 16;
    expect_rejected(&t, "page_stride");
    t.args.kv.page_stride = t.stride;
    t.shape.topk = 0;
    expect_rejected(&t, "topk");
    t.shape.topk = 1;
    t.spec.features = MLAJIT_FEATURE_TOPK_LENGTH;
    expect_rejected(&t, "topk_length");
    t.spec.features = MLAJIT_FEATURE_EXTRA_TOPK_LENGTH;
    expect_rejected(&t, "EXTRA_TOPK_LENGTH");
    t.spec.features = 0;
    t.shape.extra_topk = 4;
    expect_rejected(&t, "extra_topk");
    t.shape.extra_topk = 0;
    t.args.q_stride_h = -1;
    expect_rejected(&t, "q_stride_h");
    t.args.q_stride_h = 0;
    t.args.indices = NULL;
    expect_rejected(&t, "indices");
    free(t.cache);
}

/* ---- comparator and bf16 helpers ------------------------------------------------------ */

Test(compare, identical_inputs_pass)
{
    const float out[4] = {1.0f, -2.0f, 0.5f, 0.0f}, lse[2] = {3.0f, INFINITY};
    mlajit_compare_result r;
    mlajit_compare(out, out, 4, lse, lse, 2, &r);
    cr_expect(r.pass);
    cr_expect_eq(r.out_max_abs_err, 0.0);
    cr_expect(fabs(r.out_cosine - 1.0) < 1e-15);
    cr_expect_eq(r.lse_violations, 0);
}

Test(compare, zero_vectors_have_cosine_one)
{
    const float zeros[3] = {0, 0, 0}, small[3] = {1e-4f, 0, 0};
    mlajit_compare_result r;
    mlajit_compare(zeros, zeros, 3, NULL, NULL, 0, &r);
    cr_expect(r.pass);
    cr_expect_eq(r.out_cosine, 1.0);
    mlajit_compare(small, zeros, 3, NULL, NULL, 0, &r);
    cr_expect_eq(r.out_cosine, 0.0);
    cr_expect(!r.pass);
}

Test(compare, tolerances_follow_the_bar)
{
    float ref[1000], out[1000];
    for (int k = 0; k < 1000; k++)
        ref[k] = out[k] = (float)(k % 17) - 8.0f;
    mlajit_compare_result r;
    out[3] = ref[3] + 0.9e-3f + fabsf(ref[3]) / 128.0f * 0.99f; /* inside */
    mlajit_compare(out, ref, 1000, NULL, NULL, 0, &r);
    cr_expect_eq(r.out_violations, 0);
    cr_expect(r.pass);
    out[3] = ref[3] + 1.1e-3f + fabsf(ref[3]) / 128.0f; /* outside */
    mlajit_compare(out, ref, 1000, NULL, NULL, 0, &r);
    cr_expect_eq(r.out_violations, 1);
    cr_expect(!r.pass);
    out[3] = ref[3];
    out[5] = NAN;
    mlajit_compare(out, ref, 1000, NULL, NULL, 0, &r);
    cr_expect_eq(r.out_violations, 1);
    cr_expect(!r.pass);

    const float lse_ref[4] = {10.0f, INFINITY, -3.0f, 0.0f};
    float lse[4] = {10.0f + 1.2e-3f * 0.9f, INFINITY, -3.0f, 0.0f};
    mlajit_compare(NULL, NULL, 0, lse, lse_ref, 4, &r);
    cr_expect(r.pass, "lse inside 1e-5 + 1.2e-4 |ref|");
    lse[0] = 10.0f + 1.3e-3f;
    mlajit_compare(NULL, NULL, 0, lse, lse_ref, 4, &r);
    cr_expect_eq(r.lse_violations, 1);
    lse[0] = 10.0f;
    lse[1] = 1e30f; /* infinity misplaced */
    mlajit_compare(NULL, NULL, 0, lse, lse_ref, 4, &r);
    cr_expect_eq(r.lse_violations, 1);
    lse[1] = INFINITY;
    lse[2] = -INFINITY;
    mlajit_compare(NULL, NULL, 0, lse, lse_ref, 4, &r);
    cr_expect_eq(r.lse_violations, 1);
    lse[2] = NAN;
    mlajit_compare(NULL, NULL, 0, lse, lse_ref, 4, &r);
    cr_expect_eq(r.lse_violations, 1);
    cr_expect(!r.pass);
}

Test(compare, low_cosine_fails)
{
    /* each element inside the absolute tolerance, but the vector points elsewhere */
    float ref[64], out[64];
    for (int k = 0; k < 64; k++) {
        ref[k] = (k % 2) ? 1e-4f : -1e-4f;
        out[k] = -ref[k];
    }
    mlajit_compare_result r;
    mlajit_compare(out, ref, 64, NULL, NULL, 0, &r);
    cr_expect_eq(r.out_violations, 0);
    cr_expect(r.out_cosine < 0.0);
    cr_expect(!r.pass);
}

static uint16_t bf16_of_bits(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return mlajit_float_to_bf16(f);
}

Test(compare, bf16_helpers_round_to_nearest_even)
{
    cr_expect_eq(bf16_of_bits(0x3F800000u), 0x3F80);
    cr_expect_eq(bf16_of_bits(0x3F808000u), 0x3F80); /* tie, even stays */
    cr_expect_eq(bf16_of_bits(0x3F818000u), 0x3F82); /* tie, odd rounds up */
    cr_expect_eq(bf16_of_bits(0x3F808001u), 0x3F81);
    cr_expect_eq(bf16_of_bits(0x3F807FFFu), 0x3F80);
    cr_expect_eq(bf16_of_bits(0x7F7FFFFFu), 0x7F80); /* rounds up to inf */
    cr_expect_eq(bf16_of_bits(0xFF800000u), 0xFF80);
    cr_expect_eq(bf16_of_bits(0x00000001u), 0x0000);
    uint16_t nan = bf16_of_bits(0x7F800001u); /* a NaN whose payload lies in the low bits */
    cr_expect((nan & 0x7F80) == 0x7F80 && (nan & 0x7F) != 0, "NaN became 0x%04x", nan);
    cr_expect(isnan(mlajit_bf16_to_float(bf16_of_bits(0xFFC00000u))));
    cr_expect_eq(mlajit_bf16_to_float(0x3F80), 1.0f);
    cr_expect_eq(mlajit_bf16_to_float(0xC040), -3.0f);
    for (uint32_t v = 0; v < 0x10000; v++) {
        float f = mlajit_bf16_to_float((uint16_t)v);
        if (!isnan(f))
            cr_assert_eq(mlajit_float_to_bf16(f), v, "bf16 0x%04x does not round-trip", v);
    }
}
