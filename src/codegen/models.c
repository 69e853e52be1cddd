/* KV-cache layouts: the named models as (name, layout) entries, the layout
 * descriptor's rules (what is valid, what each field defaults to, the canonical
 * string) and the descriptors derived from layouts. The one place a layout's
 * numbers are turned into offsets. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "codegen/codegen.h"
#include "common/alloc.h"
#include "common/error.h"
#include "mlajit.h"

/* The named models, each a layout (SPEC.md "Model types"). Their descriptors
 * are derived from these rows by the same rules as any layout's. */
static const struct {
    mlajit_model model;
    const char *name;
    mlajit_layout layout;
} named_models[] = {
    {MLAJIT_MODEL_V32, "v32",
     {.d_nope = 512, .d_rope = 64, .d_v = 512, .quant_tile = 128, .scale_format = MLAJIT_SCALE_FP32_POW2,
      .scale_place = MLAJIT_SCALES_INLINE, .row_bytes = 656}},
    {MLAJIT_MODEL_DSV4, "dsv4",
     {.d_nope = 448, .d_rope = 64, .d_v = 512, .quant_tile = 64, .scale_format = MLAJIT_SCALE_UE8M0,
      .scale_place = MLAJIT_SCALES_PAGE_FOOTER, .row_bytes = 576, .footer_bytes = 8}},
    {MLAJIT_MODEL_GLM_NSA, "glm_nsa",
     {.d_nope = 512, .d_rope = 64, .d_v = 512, .quant_tile = 128, .scale_format = MLAJIT_SCALE_FP32,
      .scale_place = MLAJIT_SCALES_INLINE, .row_bytes = 656}},
    /* no RoPE: V is all 512 dims; the record keeps V3.2's 656 bytes, of which
     * [528, 656) is padding (the quantizer writes it zero) */
    {MLAJIT_MODEL_GLM53_NOPE, "glm53_nope",
     {.d_nope = 512, .d_rope = 0, .d_v = 512, .quant_tile = 128, .scale_format = MLAJIT_SCALE_FP32,
      .scale_place = MLAJIT_SCALES_INLINE, .row_bytes = 656}},
    /* DSV4's page shape at twice the width: data rows of 1024 fp8 + 128 bytes of
     * RoPE, then a footer of 8 ue8m0 scales a token; V is the 1024 NoPE dims */
    {MLAJIT_MODEL_DOTS3_SWA, "dots3_swa",
     {.d_nope = 1024, .d_rope = 64, .d_v = 1024, .quant_tile = 128, .scale_format = MLAJIT_SCALE_UE8M0,
      .scale_place = MLAJIT_SCALES_PAGE_FOOTER, .row_bytes = 1152, .footer_bytes = 8}},
    /* the bf16 caches of V3.2's and V4's dims (an engine's cache upconverted for
     * prefill, or a bf16-cache model): every dim a bf16 value, no scales; V is the
     * first 512 dims (V4's: its 448 NoPE and 64 RoPE dims) */
    {MLAJIT_MODEL_V32_BF16, "v32_bf16",
     {.d_nope = 512, .d_rope = 64, .d_v = 512, .scale_format = MLAJIT_SCALE_NONE, .row_bytes = 1152}},
    {MLAJIT_MODEL_DSV4_BF16, "dsv4_bf16",
     {.d_nope = 448, .d_rope = 64, .d_v = 512, .scale_format = MLAJIT_SCALE_NONE, .row_bytes = 1024}},
};

#define MODEL_COUNT (sizeof named_models / sizeof named_models[0])

/* ---- the layout's rules ------------------------------------------------------ */

#define MAX_D_QK 2048
#define MAX_D_ROPE 512
#define MAX_ROW_BYTES 16384
#define MAX_FOOTER_BYTES 1024

static int round_up(int v, int to) { return (v + to - 1) / to * to; }

static int scale_bytes(mlajit_scale_format f)
{
    return f == MLAJIT_SCALE_UE8M0 ? 1 : f == MLAJIT_SCALE_NONE ? 0 : 4;
}

static int num_scales(const mlajit_layout *l)
{
    return l->scale_format == MLAJIT_SCALE_NONE || l->quant_tile <= 0 ? 0 : l->d_nope / l->quant_tile;
}

/* Where a row's pieces sit, and the bytes it needs (before its padding). Inline
 * scales are padded to 16 bytes so that the RoPE values start 16-byte aligned
 * (the kernels load them 16 bytes at a time). */
static void row_offsets(const mlajit_layout *l, int *scale_offset, int *rope_offset, int *used)
{
    const int nope_bytes = l->d_nope * (l->scale_format == MLAJIT_SCALE_NONE ? 2 : 1);
    const int inline_scales = l->scale_place == MLAJIT_SCALES_INLINE && l->scale_format != MLAJIT_SCALE_NONE;
    *scale_offset = inline_scales ? nope_bytes : 0;
    *rope_offset = nope_bytes + (inline_scales ? round_up(num_scales(l) * scale_bytes(l->scale_format), 16) : 0);
    *used = *rope_offset + 2 * l->d_rope;
}

static int default_footer_bytes(const mlajit_layout *l)
{
    return round_up(num_scales(l) * scale_bytes(l->scale_format), 8);
}

static const char *format_word(mlajit_scale_format f)
{
    switch (f) {
    case MLAJIT_SCALE_FP32_POW2: return "pow2";
    case MLAJIT_SCALE_FP32: return "fp32";
    case MLAJIT_SCALE_UE8M0: return "ue8m0";
    case MLAJIT_SCALE_NONE: return "none";
    }
    return NULL;
}

int mlajit_layout_validate(const mlajit_layout *l)
{
    if (!l)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "layout: NULL; pass an mlajit_layout");
    if (l->d_nope < 16 || l->d_nope > MAX_D_QK || l->d_nope % 16)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "layout.d_nope = %d; allowed 16..%d, a multiple of 16",
                           l->d_nope, MAX_D_QK);
    if (l->d_rope < 0 || l->d_rope > MAX_D_ROPE || l->d_rope % 8)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "layout.d_rope = %d; allowed 0..%d, a multiple of 8",
                           l->d_rope, MAX_D_ROPE);
    const int d_qk = l->d_nope + l->d_rope;
    if (d_qk > MAX_D_QK)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "layout.d_rope = %d with d_nope %d makes d_qk %d; allowed d_nope + d_rope <= %d", l->d_rope,
                           l->d_nope, d_qk, MAX_D_QK);
    if (l->d_v < 16 || l->d_v > d_qk || l->d_v % 16)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "layout.d_v = %d; allowed 16..%d (d_nope + d_rope: V = K[0 : d_v]), a multiple of 16",
                           l->d_v, d_qk);
    if (!format_word(l->scale_format))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "layout.scale_format = %d; allowed MLAJIT_SCALE_FP32_POW2 (1, pow2), MLAJIT_SCALE_FP32 (2, "
                           "fp32), MLAJIT_SCALE_UE8M0 (3, ue8m0), MLAJIT_SCALE_NONE (4, none: bf16 values)",
                           (int)l->scale_format);
    const int scaled = l->scale_format != MLAJIT_SCALE_NONE;
    if (!scaled) {
        if (l->quant_tile != 0)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                               "layout.quant_tile = %d with scale format none (bf16 values, no scales); allowed 0",
                               l->quant_tile);
        if (l->scale_place != 0)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                               "layout.scale_place = %d with scale format none (no scales to place); allowed 0",
                               (int)l->scale_place);
    } else {
        if (l->quant_tile < 16 || l->quant_tile % 16 || l->quant_tile > l->d_nope || l->d_nope % l->quant_tile)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                               "layout.quant_tile = %d; allowed a multiple of 16 that divides d_nope %d", l->quant_tile,
                               l->d_nope);
        if (l->scale_place != MLAJIT_SCALES_INLINE && l->scale_place != MLAJIT_SCALES_PAGE_FOOTER)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                               "layout.scale_place = %d; allowed MLAJIT_SCALES_INLINE (1, inline), "
                               "MLAJIT_SCALES_PAGE_FOOTER (2, footer)",
                               (int)l->scale_place);
    }
    int scale_offset, rope_offset, used;
    row_offsets(l, &scale_offset, &rope_offset, &used);
    if (l->row_bytes < used || l->row_bytes % 16 || l->row_bytes > MAX_ROW_BYTES)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "layout.row_bytes = %d; allowed %d..%d (what the row holds: %d), a multiple of 16",
                           l->row_bytes, round_up(used, 16), MAX_ROW_BYTES, used);
    if (scaled && l->scale_place == MLAJIT_SCALES_PAGE_FOOTER) {
        const int need = num_scales(l) * scale_bytes(l->scale_format);
        if (l->footer_bytes < need || l->footer_bytes % 8 || l->footer_bytes > MAX_FOOTER_BYTES)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                               "layout.footer_bytes = %d; allowed %d..%d (a token's %d scales of %d bytes), "
                               "a multiple of 8",
                               l->footer_bytes, round_up(need, 8), MAX_FOOTER_BYTES, num_scales(l),
                               scale_bytes(l->scale_format));
    } else if (l->footer_bytes != 0) {
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "layout.footer_bytes = %d without scales in a page footer; allowed 0", l->footer_bytes);
    }
    for (size_t i = 0; i < sizeof l->reserved / sizeof l->reserved[0]; i++)
        if (l->reserved[i])
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "layout.reserved[%zu] = %d; allowed 0", i,
                               l->reserved[i]);
    return MLAJIT_OK;
}

int mlajit_layout_string(const mlajit_layout *l, char *buf, size_t len)
{
    int rc = mlajit_layout_validate(l);
    if (rc)
        return rc;
    if (!buf)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "buf: NULL");
    int n;
    if (l->scale_format == MLAJIT_SCALE_NONE)
        n = snprintf(buf, len, "nope%d-rope%d-v%d-none-row%d", l->d_nope, l->d_rope, l->d_v, l->row_bytes);
    else if (l->scale_place == MLAJIT_SCALES_INLINE)
        n = snprintf(buf, len, "nope%d-rope%d-v%d-tile%d-%s-inline-row%d", l->d_nope, l->d_rope, l->d_v,
                     l->quant_tile, format_word(l->scale_format), l->row_bytes);
    else
        n = snprintf(buf, len, "nope%d-rope%d-v%d-tile%d-%s-footer%d-row%d", l->d_nope, l->d_rope, l->d_v,
                     l->quant_tile, format_word(l->scale_format), l->footer_bytes, l->row_bytes);
    if (n < 0 || (size_t)n >= len)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "buf: %zu bytes is too short for the layout string (needs %d; %d always suffice)", len,
                           n + 1, MLAJIT_LAYOUT_STRING_LEN);
    return MLAJIT_OK;
}

/* ---- parsing ----------------------------------------------------------------- */

/* One key's integer: digits only, 0..1000000. */
static int parse_int(const char *key, const char *value, int *out)
{
    char *end;
    long v = strtol(value, &end, 10);
    if (!*value || *end || value[0] == '-' || value[0] == '+' || value[0] == ' ' || v > 1000000)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "layout key %s = '%s' is not a number; allowed a count, "
                           "e.g. %s=64", key, value, key);
    *out = (int)v;
    return MLAJIT_OK;
}

static int parse_format(const char *key, const char *value, mlajit_scale_format *out)
{
    static const mlajit_scale_format formats[] = {MLAJIT_SCALE_FP32_POW2, MLAJIT_SCALE_FP32, MLAJIT_SCALE_UE8M0,
                                                  MLAJIT_SCALE_NONE};
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (strcmp(value, format_word(formats[i])) == 0) {
            *out = formats[i];
            return MLAJIT_OK;
        }
    return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                       "layout key %s = '%s' is unknown; allowed pow2 (fp32 powers of two), fp32 (arbitrary), "
                       "ue8m0, none (bf16 values, no scales)",
                       key, value);
}

/* The inline keys ("d_nope=512,d_rope=64,...") with their defaults. */
static int parse_keys(const char *text, mlajit_layout *out)
{
    char copy[512];
    if (strlen(text) >= sizeof copy)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "layout text is longer than %zu characters", sizeof copy - 1);
    strcpy(copy, text);
    enum { K_NOPE, K_ROPE, K_V, K_TILE, K_SCALES, K_PLACE, K_ROW, K_FOOTER, K_VDIMS, K_COUNT };
    static const char *const keys[K_COUNT] = {"d_nope", "d_rope", "d_v", "tile", "scales", "place",
                                              "row_bytes", "footer_bytes", "v"};
#define KEY_LIST "d_nope, d_rope, d_v, tile, scales, place, row_bytes, footer_bytes, v"
    int given[K_COUNT] = {0};
    int place_inline = 0, place_footer = 0, v_all = 0;
    mlajit_layout l = {0};
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "layout item '%s' is not key=value; keys: " KEY_LIST,
                               item);
        *eq = '\0';
        const char *key = item, *value = eq + 1;
        int k = 0;
        while (k < K_COUNT && strcmp(keys[k], key) != 0)
            k++;
        if (k == K_COUNT)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "layout key '%s' is unknown; allowed " KEY_LIST, key);
        if (given[k])
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "layout key %s is given twice; give it once", key);
        given[k] = 1;
        int rc = MLAJIT_OK;
        switch (k) {
        case K_NOPE: rc = parse_int(key, value, &l.d_nope); break;
        case K_ROPE: rc = parse_int(key, value, &l.d_rope); break;
        case K_V: rc = parse_int(key, value, &l.d_v); break;
        case K_TILE: rc = parse_int(key, value, &l.quant_tile); break;
        case K_ROW: rc = parse_int(key, value, &l.row_bytes); break;
        case K_FOOTER: rc = parse_int(key, value, &l.footer_bytes); break;
        case K_SCALES: rc = parse_format(key, value, &l.scale_format); break;
        case K_PLACE:
            place_inline = strcmp(value, "inline") == 0;
            place_footer = strcmp(value, "footer") == 0;
            if (!place_inline && !place_footer)
                rc = mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                                 "layout key place = '%s' is unknown; allowed inline (after each row's NoPE values), "
                                 "footer (after a page's rows)",
                                 value);
            break;
        case K_VDIMS:
            v_all = strcmp(value, "all") == 0;
            if (!v_all && strcmp(value, "nope") != 0)
                rc = mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                                 "layout key v = '%s' is unknown; allowed nope (V is the d_nope dims), all (V is "
                                 "all d_nope + d_rope dims)",
                                 value);
            break;
        }
        if (rc)
            return rc;
    }
#undef KEY_LIST
    if (!given[K_NOPE])
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "layout key d_nope is missing; it is required, e.g. d_nope=512");
    if (!given[K_SCALES])
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "layout key scales is missing; it is required: pow2, fp32, ue8m0 or none");
    const int scaled = l.scale_format != MLAJIT_SCALE_NONE;
    if (scaled && !given[K_TILE])
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "layout key tile is missing; scales=%s needs the NoPE dims per scale, e.g. tile=128",
                           format_word(l.scale_format));
    if (!scaled && given[K_TILE])
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "layout key tile is given with scales=none; leave it out");
    if (scaled && !given[K_PLACE])
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "layout key place is missing; scales=%s needs inline or footer", format_word(l.scale_format));
    if (!scaled && given[K_PLACE])
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "layout key place is given with scales=none (no scales to place); leave it out");
    if (scaled)
        l.scale_place = place_inline ? MLAJIT_SCALES_INLINE : MLAJIT_SCALES_PAGE_FOOTER;
    const int v_default = v_all ? l.d_nope + l.d_rope : l.d_nope;
    if (!given[K_V])
        l.d_v = v_default;
    else if (given[K_VDIMS] && l.d_v != v_default)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "layout key v = %s means d_v %d, but d_v = %d; give one of them",
                           v_all ? "all" : "nope", v_default, l.d_v);
    if (!given[K_ROW]) {
        int scale_offset, rope_offset, used;
        row_offsets(&l, &scale_offset, &rope_offset, &used);
        l.row_bytes = round_up(used, 16);
    }
    if (!given[K_FOOTER] && l.scale_place == MLAJIT_SCALES_PAGE_FOOTER)
        l.footer_bytes = default_footer_bytes(&l);
    int rc = mlajit_layout_validate(&l);
    if (rc)
        return rc;
    *out = l;
    return MLAJIT_OK;
}

/* "<word><digits>" into *out; 1 when tok is that. */
static int word_number(const char *tok, const char *word, int *out)
{
    size_t n = strlen(word);
    if (strncmp(tok, word, n) != 0 || !tok[n] || strspn(tok + n, "0123456789") != strlen(tok + n) ||
        strlen(tok + n) > 6)
        return 0;
    *out = atoi(tok + n);
    return 1;
}

/* The canonical string mlajit_layout_string writes. */
static int parse_canonical(const char *text, mlajit_layout *out)
{
    char copy[MLAJIT_LAYOUT_STRING_LEN + 16];
    const char *form = "nope<n>-rope<n>-v<n>-tile<n>-<pow2|fp32|ue8m0>-<inline|footer<n>>-row<n>, or "
                       "nope<n>-rope<n>-v<n>-none-row<n>";
    if (strlen(text) >= sizeof copy)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "layout '%.80s' is too long; form: %s", text, form);
    strcpy(copy, text);
    char *toks[8];
    int nt = 0;
    char *save = NULL;
    for (char *t = strtok_r(copy, "-", &save); t; t = strtok_r(NULL, "-", &save)) {
        if (nt == 8)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "layout '%s' has too many fields; form: %s", text, form);
        toks[nt++] = t;
    }
    mlajit_layout l = {0};
    int ok = nt >= 5 && word_number(toks[0], "nope", &l.d_nope) && word_number(toks[1], "rope", &l.d_rope) &&
             word_number(toks[2], "v", &l.d_v);
    if (ok && nt == 5 && strcmp(toks[3], "none") == 0) {
        l.scale_format = MLAJIT_SCALE_NONE;
        ok = word_number(toks[4], "row", &l.row_bytes);
    } else if (ok && nt == 7) {
        ok = word_number(toks[3], "tile", &l.quant_tile) && parse_format("scales", toks[4], &l.scale_format) == 0 &&
             l.scale_format != MLAJIT_SCALE_NONE && word_number(toks[6], "row", &l.row_bytes);
        mlajit_clear_error();
        if (ok && strcmp(toks[5], "inline") == 0)
            l.scale_place = MLAJIT_SCALES_INLINE;
        else if (ok && word_number(toks[5], "footer", &l.footer_bytes))
            l.scale_place = MLAJIT_SCALES_PAGE_FOOTER;
        else
            ok = 0;
    } else {
        ok = 0;
    }
    if (!ok)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "layout '%s' is neither a model name (" MLAJIT_MODEL_NAMES "), key=value pairs nor the canonical "
                           "form %s",
                           text, form);
    int rc = mlajit_layout_validate(&l);
    if (rc)
        return mlajit_fail_prefix(rc, "layout '%s': ", text);
    *out = l;
    return MLAJIT_OK;
}

int mlajit_layout_parse(const char *text, mlajit_layout *out)
{
    if (!text || !out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "layout text or out: NULL");
    if (strchr(text, '='))
        return parse_keys(text, out);
    for (size_t i = 0; i < MODEL_COUNT; i++)
        if (strcasecmp(named_models[i].name, text) == 0) {
            *out = named_models[i].layout;
            return MLAJIT_OK;
        }
    return parse_canonical(text, out);
}

int mlajit_model_layout(mlajit_model model, mlajit_layout *out)
{
    if (!out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "out: NULL");
    for (size_t i = 0; i < MODEL_COUNT; i++)
        if (named_models[i].model == model) {
            *out = named_models[i].layout;
            return MLAJIT_OK;
        }
    return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "model = %d has no layout of its own; allowed the named "
                       "models " MLAJIT_MODEL_NAMES "; a custom spec's layout is spec.layout", (int)model);
}

/* ---- descriptors ------------------------------------------------------------- */

static void describe_into(const mlajit_layout *l, mlajit_model model, const char *name, mlajit_model_desc *d)
{
    memset(d, 0, sizeof *d);
    d->struct_size = sizeof *d;
    d->model = model;
    d->name = name;
    d->d_qk = l->d_nope + l->d_rope;
    d->d_nope = l->d_nope;
    d->d_rope = l->d_rope;
    d->d_v = l->d_v;
    d->quant_tile = l->quant_tile;
    d->num_scales = num_scales(l);
    d->scale_format = l->scale_format;
    d->scale_place = l->scale_place;
    d->row_bytes = l->row_bytes;
    d->footer_bytes = l->footer_bytes;
    d->bytes_per_token = l->row_bytes + l->footer_bytes;
    int used;
    row_offsets(l, &d->scale_offset, &d->rope_offset, &used);
}

static mlajit_model_desc model_table[MODEL_COUNT];
static pthread_once_t model_table_once = PTHREAD_ONCE_INIT;

static void fill_model_table(void)
{
    for (size_t i = 0; i < MODEL_COUNT; i++)
        describe_into(&named_models[i].layout, named_models[i].model, named_models[i].name, &model_table[i]);
}

const mlajit_model_desc *mlajit_model_describe(mlajit_model model)
{
    pthread_once(&model_table_once, fill_model_table);
    for (size_t i = 0; i < MODEL_COUNT; i++)
        if (model_table[i].model == model)
            return &model_table[i];
    return NULL;
}

/* Custom layouts' descriptors, one per distinct layout for the life of the
 * process (callers keep the pointer, as they do a named model's): a list that
 * only grows, behind a lock; entries never change once published. */
typedef struct custom_desc {
    mlajit_layout layout;
    mlajit_model_desc desc;
    char name[MLAJIT_LAYOUT_STRING_LEN];
    struct custom_desc *next;
} custom_desc;

static pthread_mutex_t custom_lock = PTHREAD_MUTEX_INITIALIZER;
static custom_desc *custom_list;

const mlajit_model_desc *mlajit_layout_describe(const mlajit_layout *l)
{
    if (mlajit_layout_validate(l) != MLAJIT_OK)
        return NULL;
    for (size_t i = 0; i < MODEL_COUNT; i++)
        if (memcmp(&named_models[i].layout, l, sizeof *l) == 0)
            return mlajit_model_describe(named_models[i].model);
    pthread_mutex_lock(&custom_lock);
    custom_desc *e = custom_list;
    while (e && memcmp(&e->layout, l, sizeof *l) != 0)
        e = e->next;
    if (!e && (e = mlajit_calloc(1, sizeof *e)) != NULL) {
        e->layout = *l;
        mlajit_layout_string(l, e->name, sizeof e->name);
        describe_into(l, MLAJIT_MODEL_CUSTOM, e->name, &e->desc);
        e->next = custom_list;
        custom_list = e;
    }
    pthread_mutex_unlock(&custom_lock);
    if (!e)
        mlajit_fail_oom("a layout's descriptor");
    return e ? &e->desc : NULL;
}

int64_t mlajit_layout_min_page_stride(const mlajit_layout *l, int page_size)
{
    if (page_size < 1 || mlajit_layout_validate(l) != MLAJIT_OK) {
        mlajit_clear_error();
        return -1;
    }
    return (int64_t)page_size * (l->row_bytes + l->footer_bytes);
}

const mlajit_model_desc *mlajit_spec_desc(const mlajit_kernel_spec *spec)
{
    if (!spec)
        return NULL;
    if (spec->model == MLAJIT_MODEL_CUSTOM)
        return mlajit_layout_describe(&spec->layout);
    return mlajit_model_describe(spec->model);
}

int mlajit_spec_named_model(const mlajit_kernel_spec *spec, mlajit_kernel_spec *out)
{
    const mlajit_model_desc *d = mlajit_spec_desc(spec);
    *out = *spec;
    if (d && d->model != MLAJIT_MODEL_CUSTOM && spec->model == MLAJIT_MODEL_CUSTOM) {
        out->model = d->model;
        memset(&out->layout, 0, sizeof out->layout);
        return 1;
    }
    return 0;
}

int mlajit_model_from_name(const char *name, mlajit_model *out)
{
    if (!name || !out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "model name: NULL; allowed: " MLAJIT_MODEL_NAMES);
    for (size_t i = 0; i < MODEL_COUNT; i++) {
        if (strcasecmp(named_models[i].name, name) == 0) {
            *out = named_models[i].model;
            return MLAJIT_OK;
        }
    }
    return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "model '%s' is unknown; allowed: " MLAJIT_MODEL_NAMES, name);
}

static const struct {
    const char *name;
    unsigned bit;
} feature_table[] = {
    {"sink", MLAJIT_FEATURE_SINK},
    {"topk-length", MLAJIT_FEATURE_TOPK_LENGTH},
    {"extra-topk-length", MLAJIT_FEATURE_EXTRA_TOPK_LENGTH},
};

const char *mlajit_feature_name(int i, unsigned *bit)
{
    if (i < 0 || (size_t)i >= sizeof feature_table / sizeof feature_table[0])
        return NULL;
    if (bit)
        *bit = feature_table[i].bit;
    return feature_table[i].name;
}

int mlajit_feature_from_name(const char *name, unsigned *bit)
{
    for (size_t i = 0; name && i < sizeof feature_table / sizeof feature_table[0]; i++)
        if (strcmp(feature_table[i].name, name) == 0) {
            *bit = feature_table[i].bit;
            return MLAJIT_OK;
        }
    return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "feature '%s' is unknown; allowed sink, topk-length, "
                       "extra-topk-length", name ? name : "(null)");
}

int64_t mlajit_min_page_stride(mlajit_model model, int page_size)
{
    const mlajit_model_desc *d = mlajit_model_describe(model);
    if (!d || page_size < 1)
        return -1;
    return (int64_t)page_size * d->bytes_per_token;
}
