/* The host quantizer and dequantizer of one cache token (SPEC.md "Quantization"
 * and "Dequantization"). Every size and offset comes from the model descriptor.
 *
 * Byte-exactness with the golden caches (FlashMLA's tests/quant.py run by torch):
 *  - amax is taken over the bf16 inputs and divided by 448 in fp32;
 *  - power-of-two scales are 2^ceil(log2(max(s, 1e-4))); torch evaluates log2 in
 *    fp32, we find the exponent exactly from the bits. The two differ only when
 *    s lies within an fp32 log2 rounding error above a power of two, which a bf16
 *    amax cannot produce (amax / 448 is then at least 1/224 above it);
 *  - q = e4m3fn(x / s) with x / s computed in fp32 (exact for power-of-two s)
 *    and rounded to nearest even, subnormals included.
 * Differences from torch, which the golden data never exercises: magnitudes at or
 * above 464 saturate to 448 here (torch yields NaN from 480 up), and +-inf
 * saturates too. With the scales above x / s never exceeds 448 for finite x. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "codegen/codegen.h"
#include "common/error.h"
#include "mlajit.h"
#include "reference/quantize.h"

/* HFAI FP8's FP8_AMAX_MARGIN, also FlashMLA's: the smallest scale before rounding,
 * so an all-zero tile still gets a usable (and, for pow2, finite-exponent) scale.
 * GLM_NSA's arbitrary fp32 scales use the same floor, for the same reason. */
#define SCALE_FLOOR 1e-4f
#define FP8_E4M3_MAX 448.0f

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float bf16_value(uint16_t v) { return bits_float((uint32_t)v << 16); }

static uint16_t bf16_round(float f)
{
    uint32_t u = float_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x0040u); /* NaN stays NaN (quiet) */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* float -> float8 e4m3fn, round to nearest even, saturating (see the top comment).
 * Not static: the unit tests check it directly (declared there). */
uint8_t mlajit_fp8_e4m3_from_float(float x)
{
    uint32_t u = float_bits(x);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u)
        return sign | 0x7Fu;
    /* From 448 up everything rounds to 448 or past it: 464 is the tie between
     * 448 (even mantissa) and 480, which e4m3fn cannot hold. */
    if (a >= float_bits(FP8_E4M3_MAX))
        return sign | 0x7Eu;
    if (a < (121u << 23)) {
        /* Below 2^-6, the smallest normal: a multiple of 2^-9. Adding 2^14, whose
         * ulp is 2^-9, lets the FPU round to nearest even for us; the result
         * may be 8 * 2^-9 = 2^-6, which is code 0x08, the right answer. */
        const float magic = 16384.0f;
        uint32_t m = float_bits(bits_float(a) + magic) - float_bits(magic);
        return sign | (uint8_t)m;
    }
    /* Normal: rebias the exponent (127 -> 7) and round the 23-bit mantissa to 3
     * bits, nearest even (a carry into the exponent is the correct rounding). */
    uint32_t mantissa_odd = (a >> 20) & 1u;
    a += ((uint32_t)(7 - 127) << 23) + 0x7FFFFu + mantissa_odd;
    return sign | (uint8_t)(a >> 20);
}

/* float8 e4m3fn -> float (exact). 0x7F and 0xFF are NaN. */
float mlajit_fp8_e4m3_to_float(uint8_t code)
{
    uint32_t sign = (uint32_t)(code & 0x80u) << 24;
    uint32_t exponent = (code >> 3) & 0xFu;
    uint32_t mantissa = code & 0x7u;
    if (exponent == 0xF && mantissa == 0x7)
        return bits_float(sign | 0x7FC00000u);
    if (exponent == 0) {
        float v = (float)mantissa * (1.0f / 512.0f); /* subnormal: m * 2^-9 */
        return sign ? -v : v;
    }
    return bits_float(sign | ((exponent - 7 + 127) << 23) | (mantissa << 20));
}

/* The smallest power of two >= s, for a positive finite normal s. */
static float pow2_ceil(float s)
{
    uint32_t u = float_bits(s);
    if ((u & 0x007FFFFFu) == 0)
        return s; /* already a power of two */
    return bits_float((u & 0x7F800000u) + (1u << 23));
}

static float ue8m0_value(uint8_t e)
{
    if (e == 0xFF)
        return bits_float(0x7FC00000u);
    return ldexpf(1.0f, (int)e - 127);
}

/* Where a token's pieces live in a page (the descriptor's offsets: models.c). */
typedef struct token_layout {
    size_t row;    /* NoPE values: fp8, or bf16 without scales */
    size_t scales; /* fp32 or ue8m0 scales, inline or in the page footer */
    size_t rope;   /* bf16 RoPE values */
} token_layout;

static token_layout layout_of(const mlajit_model_desc *d, int page_size, int token)
{
    token_layout l;
    l.row = (size_t)token * (size_t)d->row_bytes;
    l.rope = l.row + (size_t)d->rope_offset;
    if (d->scale_place == MLAJIT_SCALES_INLINE)
        l.scales = l.row + (size_t)d->scale_offset;
    else
        l.scales = (size_t)page_size * (size_t)d->row_bytes + (size_t)token * (size_t)d->footer_bytes;
    return l;
}

static int check_token_args(const mlajit_model_desc *d, const void *values, const char *values_name,
                            const void *page_base, int page_size, int token_in_page, const char *fn)
{
    if (!values)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, values_name);
    if (!page_base)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "%s: page_base is NULL", fn);
    if (page_size < 1 || page_size > MLAJIT_MAX_PAGE_SIZE)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "%s: page_size is %d; allowed 1..%d", fn, page_size,
                           MLAJIT_MAX_PAGE_SIZE);
    if (token_in_page < 0 || token_in_page >= page_size)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "%s: token_in_page is %d; allowed 0..%d", fn, token_in_page,
                           page_size - 1);
    (void)d;
    return MLAJIT_OK;
}

static const mlajit_model_desc *model_desc(mlajit_model model, const char *fn)
{
    const mlajit_model_desc *d = mlajit_model_describe(model);
    if (!d)
        mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                    "%s: model %d is unknown; allowed: " MLAJIT_MODEL_NAMES " (a custom layout: "
                    "the _layout function)", fn, (int)model);
    return d;
}

static int layout_desc(const mlajit_layout *layout, const char *fn, const mlajit_model_desc **d)
{
    int st = mlajit_layout_validate(layout);
    if (st)
        return mlajit_fail_prefix(st, "%s: ", fn);
    if (!(*d = mlajit_layout_describe(layout)))
        return mlajit_fail(MLAJIT_ERR_OUT_OF_MEMORY, "%s: out of host memory for the layout's descriptor", fn);
    return MLAJIT_OK;
}

int mlajit_quantize_token_desc(const mlajit_model_desc *d, const uint16_t *values_bf16, void *page_base,
                               int page_size, int token_in_page)
{
    int st = check_token_args(d, values_bf16, "values_bf16", page_base, page_size, token_in_page,
                              "mlajit_quantize_token");
    if (st != MLAJIT_OK)
        return st;
    uint8_t *page = page_base;
    token_layout l = layout_of(d, page_size, token_in_page);

    if (d->scale_format == MLAJIT_SCALE_NONE) /* the bf16 layout: NoPE values as they are */
        memcpy(page + l.row, values_bf16, (size_t)d->d_nope * sizeof(uint16_t));
    for (int tile = 0; tile < d->num_scales; tile++) {
        const uint16_t *x = values_bf16 + (size_t)tile * (size_t)d->quant_tile;
        float amax = 0.0f;
        for (int k = 0; k < d->quant_tile; k++)
            amax = fmaxf(amax, fabsf(bf16_value(x[k])));
        float s = fmaxf(amax / FP8_E4M3_MAX, SCALE_FLOOR);
        if (d->scale_format != MLAJIT_SCALE_FP32)
            s = pow2_ceil(s);

        uint8_t *q = page + l.row + (size_t)tile * (size_t)d->quant_tile;
        for (int k = 0; k < d->quant_tile; k++)
            q[k] = mlajit_fp8_e4m3_from_float(bf16_value(x[k]) / s);

        if (d->scale_format == MLAJIT_SCALE_UE8M0)
            page[l.scales + (size_t)tile] = (uint8_t)(float_bits(s) >> 23); /* the biased exponent */
        else
            memcpy(page + l.scales + (size_t)tile * sizeof(float), &s, sizeof s);
    }
    if (d->scale_place == MLAJIT_SCALES_INLINE) {
        /* inline scales' padding up to the RoPE values, written zero */
        size_t scales_end = l.scales + (size_t)d->num_scales * (d->scale_format == MLAJIT_SCALE_UE8M0 ? 1 : 4);
        if (l.rope > scales_end)
            memset(page + scales_end, 0, l.rope - scales_end);
    }
    memcpy(page + l.rope, values_bf16 + d->d_nope, (size_t)d->d_rope * sizeof(uint16_t));
    if (d->scale_place != MLAJIT_SCALES_PAGE_FOOTER) {
        /* a record's unused tail (GLM53_NOPE: [528, 656)) is written zero */
        size_t used = l.rope + (size_t)d->d_rope * sizeof(uint16_t), end = l.row + (size_t)d->row_bytes;
        if (end > used)
            memset(page + used, 0, end - used);
    }
    return MLAJIT_OK;
}

int mlajit_dequantize_token_desc(const mlajit_model_desc *d, const void *page_base, int page_size, int token_in_page,
                                 float *out)
{
    int st = check_token_args(d, out, "out", page_base, page_size, token_in_page, "mlajit_dequantize_token");
    if (st != MLAJIT_OK)
        return st;
    const uint8_t *page = page_base;
    token_layout l = layout_of(d, page_size, token_in_page);

    if (d->scale_format == MLAJIT_SCALE_NONE) {
        for (int k = 0; k < d->d_nope; k++) {
            uint16_t v;
            memcpy(&v, page + l.row + (size_t)k * sizeof v, sizeof v);
            out[k] = bf16_value(v);
        }
    }
    for (int tile = 0; tile < d->num_scales; tile++) {
        float scale;
        if (d->scale_format == MLAJIT_SCALE_UE8M0)
            scale = ue8m0_value(page[l.scales + (size_t)tile]);
        else
            memcpy(&scale, page + l.scales + (size_t)tile * sizeof(float), sizeof scale);
        const uint8_t *q = page + l.row + (size_t)tile * (size_t)d->quant_tile;
        float *o = out + (size_t)tile * (size_t)d->quant_tile;
        for (int k = 0; k < d->quant_tile; k++)
            o[k] = bf16_value(bf16_round(mlajit_fp8_e4m3_to_float(q[k]) * scale));
    }
    const uint8_t *rope = page + l.rope;
    for (int k = 0; k < d->d_rope; k++) {
        uint16_t v;
        memcpy(&v, rope + (size_t)k * sizeof v, sizeof v);
        out[d->d_nope + k] = bf16_value(v);
    }
    return MLAJIT_OK;
}

int mlajit_quantize_token(mlajit_model model, const uint16_t *values_bf16, void *page_base, int page_size,
                          int token_in_page)
{
    const mlajit_model_desc *d = model_desc(model, "mlajit_quantize_token");
    return d ? mlajit_quantize_token_desc(d, values_bf16, page_base, page_size, token_in_page)
             : MLAJIT_ERR_INVALID_ARGUMENT;
}

int mlajit_dequantize_token(mlajit_model model, const void *page_base, int page_size, int token_in_page, float *out)
{
    const mlajit_model_desc *d = model_desc(model, "mlajit_dequantize_token");
    return d ? mlajit_dequantize_token_desc(d, page_base, page_size, token_in_page, out) : MLAJIT_ERR_INVALID_ARGUMENT;
}

int mlajit_quantize_token_layout(const mlajit_layout *layout, const uint16_t *values_bf16, void *page_base,
                                 int page_size, int token_in_page)
{
    const mlajit_model_desc *d = NULL;
    int st = layout_desc(layout, "mlajit_quantize_token_layout", &d);
    return st ? st : mlajit_quantize_token_desc(d, values_bf16, page_base, page_size, token_in_page);
}

int mlajit_dequantize_token_layout(const mlajit_layout *layout, const void *page_base, int page_size,
                                   int token_in_page, float *out)
{
    const mlajit_model_desc *d = NULL;
    int st = layout_desc(layout, "mlajit_dequantize_token_layout", &d);
    return st ? st : mlajit_dequantize_token_desc(d, page_base, page_size, token_in_page, out);
}
