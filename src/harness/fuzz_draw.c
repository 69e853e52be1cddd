/* Random decode calls over the whole envelope (see fuzz.h). Each call has its
 * own xoshiro256** stream seeded from (run seed, call number); values are drawn
 * in a fixed order, so a call is reproduced from those two numbers alone.
 *
 * Draws lean on the edges: head counts around the 16-head mma tiles, page sizes
 * around powers of two, topk at tile multiples and one off them. Budgets keep a
 * call's caches and its fp64 reference small (fuzz.h). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codegen/codegen.h"
#include "common/error.h"
#include "harness/fuzz.h"
#include "harness/rng.h"

typedef mlajit_rng rng;
#define rng_seed mlajit_rng_seed
#define rng_next mlajit_rng_next

/* Uniform in [0, n), n >= 1 (the modulo bias of 64-bit draws is irrelevant here). */
static int below(rng *r, int n) { return n <= 1 ? 0 : (int)(rng_next(r) % (uint64_t)n); }

static int chance(rng *r, int percent) { return below(r, 100) < percent; }

/* Log-uniform integer in [lo, hi]: small values as often as large ones. */
static int log_uniform(rng *r, int lo, int hi)
{
    if (hi <= lo)
        return lo;
    double u = (double)(rng_next(r) >> 11) * 0x1.0p-53;
    double v = exp(log((double)lo) + u * (log((double)hi + 1.0) - log((double)lo)));
    int x = (int)v;
    return x < lo ? lo : (x > hi ? hi : x);
}

static int pick(rng *r, const int *values, int count) { return values[below(r, count)]; }

#define PICK(r, array) pick(r, array, (int)(sizeof array / sizeof array[0]))

static int min_int(int a, int b) { return a < b ? a : b; }
static int max_int(int a, int b) { return a > b ? a : b; }

static int draw_heads(rng *r)
{
    static const int edges[] = {1, 2, 3, 8, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 96, 127, 128};
    return chance(r, 40) ? PICK(r, edges) : 1 + below(r, MLAJIT_MAX_HEADS);
}

static int draw_page(rng *r)
{
    static const int edges[] = {1, 2, 3, 7, 16, 32, 61, 63, 64, 65, 128, 256, 512, 1023, 1024};
    return chance(r, 40) ? PICK(r, edges) : log_uniform(r, 1, MLAJIT_MAX_PAGE_SIZE);
}

/* Half at tile multiples (32 .. 16384), one off them or not; half anywhere. */
static int draw_topk(rng *r)
{
    if (chance(r, 50)) {
        static const int deltas[] = {-1, 0, 0, 1};
        int t = (32 << below(r, 10)) + PICK(r, deltas);
        return max_int(1, min_int(t, MLAJIT_MAX_TOPK));
    }
    return log_uniform(r, 1, MLAJIT_MAX_TOPK);
}

/* Tokens per sequence: sometimes fewer than topk (the surplus indices are -1),
 * always within max_seq. */
static int draw_seqlen(rng *r, int topk, int max_seq)
{
    int knee = min_int(topk, max_seq);
    if (chance(r, 30))
        return log_uniform(r, 1, knee);
    return log_uniform(r, knee, min_int(max_seq, 4 * topk + 64));
}

/* The largest number of whole pages per sequence that keeps b sequences (plus
 * the unused page 0) within the token budget. */
static int pages_per_seq_max(int b, int page)
{
    int64_t per_seq = MLAJIT_FUZZ_MAX_TOKENS / ((int64_t)max_int(b, 1) * page);
    return (int)per_seq;
}

/* 1 when sm90-narrow runs this model, head count, page and head group on sm_90a
 * (its spec resolves there); no error is left set. */
static int narrow_resolves_on_sm90a(mlajit_model model, int h_q, int page, int heads_per_cta)
{
    mlajit_kernel_spec spec = MLAJIT_KERNEL_SPEC_INIT, resolved = MLAJIT_KERNEL_SPEC_INIT;
    if (mlajit_spec_init(&spec, model, h_q, page) != MLAJIT_OK) {
        mlajit_clear_error();
        return 0;
    }
    spec.heads_per_cta = heads_per_cta;
    spec.variant = MLAJIT_VARIANT_SM90_NARROW;
    snprintf(spec.arch, sizeof spec.arch, "sm_90a");
    const int ok = mlajit_spec_resolve(&spec, &resolved) == MLAJIT_OK;
    mlajit_clear_error();
    return ok;
}

uint64_t mlajit_fuzz_call_seed(uint64_t run_seed, int64_t call)
{
    uint64_t a = run_seed, b = (uint64_t)call ^ 0xA5A5A5A5DEADBEEFull;
    return mlajit_splitmix64(&a) ^ mlajit_rotl64(mlajit_splitmix64(&b), 17);
}

/* A layout from the valid space (random NoPE and RoPE widths, tiles, scale
 * formats and places, bf16 values (scales none), padding; d_v <= d_qk), kept only
 * where some family serves it (the envelope accepts a portable spec of it on
 * sm_80: where sm_90a's families are not written for it, auto runs portable there
 * too). A bf16 layout of V3.2's or V4's dims is that named model (v32_bf16,
 * dsv4_bf16). 1 and *out, or 0 after a few tries. */
static int draw_served_layout(rng *r, mlajit_layout *out)
{
    static const int nopes[] = {256, 384, 448, 512, 576, 1024}, ropes[] = {0, 64, 64, 128},
                     tiles[] = {16, 32, 64, 128, 256};
    static const char *const formats[] = {"pow2", "fp32", "ue8m0", "none"};
    for (int attempt = 0; attempt < 16; attempt++) {
        const int d_nope = PICK(r, nopes), d_rope = PICK(r, ropes), tile = PICK(r, tiles);
        const int d_qk = d_nope + d_rope;
        /* V: 512 where it fits, the NoPE dims, all of them, or 256 (the combine
         * takes multiples of 128 from 256; the others are refused and drawn again) */
        const int d_v = chance(r, 50) && d_qk >= 512 ? 512 : chance(r, 30) ? 256 : chance(r, 50) ? d_nope : d_qk;
        const int footer = chance(r, 50);
        const char *format = formats[below(r, 4)];
        char text[256];
        if (strcmp(format, "none") == 0) /* bf16 values: no tile, no place */
            snprintf(text, sizeof text, "d_nope=%d,d_rope=%d,d_v=%d,scales=none", d_nope, d_rope, d_v);
        else
            snprintf(text, sizeof text, "d_nope=%d,d_rope=%d,d_v=%d,tile=%d,scales=%s,place=%s", d_nope, d_rope,
                     d_v, tile, format, footer ? "footer" : "inline");
        mlajit_layout l;
        if (mlajit_layout_parse(text, &l) != MLAJIT_OK) {
            mlajit_clear_error();
            continue;
        }
        if (chance(r, 30))
            l.row_bytes += 16 * (1 + below(r, 4));
        if (footer && chance(r, 30))
            l.footer_bytes += 8;
        mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
        if (mlajit_spec_init_layout(&s, &l, 16, 64) != MLAJIT_OK) {
            mlajit_clear_error();
            continue;
        }
        s.variant = MLAJIT_VARIANT_PORTABLE;
        snprintf(s.arch, sizeof s.arch, "sm_80");
        if (mlajit_envelope_check(&s, NULL) == MLAJIT_OK) {
            *out = l;
            return 1;
        }
        mlajit_clear_error();
    }
    return 0;
}

/* The tuner's production grid's specs (mlajit_tune_envelope_defaults). */
static void draw_tuned_grid_spec(rng *r, mlajit_model *model, int *h_q, int *page)
{
    static const mlajit_model models[] = {MLAJIT_MODEL_V32, MLAJIT_MODEL_DSV4};
    static const int heads[] = {8, 16, 32, 64, 128}, pages[] = {64, 256};
    *model = models[below(r, 2)];
    *h_q = PICK(r, heads);
    *page = PICK(r, pages);
}

void mlajit_fuzz_draw(uint64_t run_seed, int64_t call, unsigned flags, mlajit_fuzz_call *out)
{
    const int allow_heavy = (flags & MLAJIT_FUZZ_ALLOW_HEAVY) != 0, tuned_grid = (flags & MLAJIT_FUZZ_TUNED_GRID) != 0;
    memset(out, 0, sizeof *out);
    out->run_seed = run_seed;
    out->number = call;
    out->seed = mlajit_fuzz_call_seed(run_seed, call);
    rng r;
    rng_seed(&r, out->seed);

    /* Every model of the table: a family serves each (families.c). A drawn spec a
     * family does not serve (DOTS3_SWA with a forced sm90 variant, or a layout
     * outside an arch's shared memory) is refused by the envelope like any other. */
    static const mlajit_model models[] = {MLAJIT_MODEL_V32, MLAJIT_MODEL_DSV4, MLAJIT_MODEL_GLM_NSA,
                                          MLAJIT_MODEL_GLM53_NOPE, MLAJIT_MODEL_DOTS3_SWA};
    mlajit_model model = models[below(&r, (int)(sizeof models / sizeof models[0]))];
    if (flags >> MLAJIT_FUZZ_MODEL_SHIFT) /* one model asked for */
        model = (mlajit_model)(flags >> MLAJIT_FUZZ_MODEL_SHIFT);
    int h_q = draw_heads(&r);
    int page = draw_page(&r);
    int has_extra = chance(&r, 40);
    int extra_page = has_extra ? draw_page(&r) : 0;
    unsigned features = 0;
    if (chance(&r, 40)) features |= MLAJIT_FEATURE_SINK;
    if (chance(&r, 40)) features |= MLAJIT_FEATURE_TOPK_LENGTH;
    if (has_extra && chance(&r, 50)) features |= MLAJIT_FEATURE_EXTRA_TOPK_LENGTH;
    static const int tiles[] = {0, 32, 64}, heads_per_cta[] = {0, 16, 32, 64};
    int tile = PICK(&r, tiles), hc = PICK(&r, heads_per_cta);
    if (hc == 64 && mlajit_model_describe(model)->d_v > MLAJIT_PORTABLE_WIDE_MAX_DV)
        hc = 32; /* no draw taken */
    if (tuned_grid) { /* the rest of the draw as ever */
        draw_tuned_grid_spec(&r, &model, &h_q, &page);
        has_extra = extra_page = 0;
        features = 0;
        tile = hc = 0;
    }
    int topk = draw_topk(&r);
    int extra_topk = has_extra ? draw_topk(&r) : 0;

    /* The reference budget: one row first (halving heads or candidates), then
     * as many rows as fit. */
    out->heavy = allow_heavy && chance(&r, 3);
    const int64_t budget = out->heavy ? MLAJIT_FUZZ_HEAVY_BUDGET : MLAJIT_FUZZ_REF_BUDGET;
    while ((int64_t)h_q * (topk + extra_topk) > budget) {
        if (h_q > 1 && chance(&r, 50)) {
            h_q = max_int(1, h_q / 2);
        } else {
            topk = max_int(1, topk / 2);
            extra_topk = has_extra ? max_int(1, extra_topk / 2) : 0;
        }
    }
    const int64_t rows_max = budget / ((int64_t)h_q * (topk + extra_topk));
    int s_q;
    if (chance(&r, 4)) s_q = 0;
    else if (chance(&r, 50)) s_q = 1;
    else s_q = 1 + below(&r, (int)(rows_max < MLAJIT_MAX_SQ ? rows_max : MLAJIT_MAX_SQ));
    int b;
    if (chance(&r, 3)) {
        b = 0;
    } else {
        int64_t b_max = rows_max / max_int(s_q, 1);
        b = log_uniform(&r, 1, (int)(b_max < 512 ? (b_max < 1 ? 1 : b_max) : 512));
    }
    /* The token budget: a sequence takes whole pages, so a large page limits b. */
    const int biggest_page = max_int(page, extra_page);
    if (pages_per_seq_max(b, biggest_page) < 1)
        b = MLAJIT_FUZZ_MAX_TOKENS / biggest_page - 1;
    int seqlen = draw_seqlen(&r, topk, pages_per_seq_max(b, page) * page);
    int extra_seqlen = has_extra ? draw_seqlen(&r, extra_topk, pages_per_seq_max(b, extra_page) * extra_page) : 0;

    int num_splits = 0;
    if (chance(&r, 50))
        num_splits = chance(&r, 50) ? 1 + below(&r, 4) : 1 + below(&r, MLAJIT_MAX_SPLITS);
    out->lse_head_major = chance(&r, 30);
    out->pad_strides = chance(&r, 30);
    const int64_t stride_pad = chance(&r, 30) ? 16 * (1 + below(&r, 16)) : 0;
    static const int invalid_percent[] = {0, 0, 5, 20, 50, 100};
    const int invalid = PICK(&r, invalid_percent);
    if (features & (MLAJIT_FEATURE_TOPK_LENGTH | MLAJIT_FEATURE_EXTRA_TOPK_LENGTH)) {
        out->zero_length_rows = chance(&r, 30) ? 25 : 0;
        out->huge_length_rows = chance(&r, 30) ? 50 : 0;
    }
    out->duplicate_percent = chance(&r, 20) ? 10 : 0;
    /* sm90-narrow where it resolves (its own tile; head groups of at most 32, 16
     * at DOTS3_SWA's d_v 1024), a quarter of those draws (drawn last: the draws
     * before it stay what they were), half of those as sm90-narrow-long (which is
     * sm90-narrow where its third producer group does not fit). */
    const int narrow_max =
        mlajit_family_max_heads(mlajit_family_of(MLAJIT_VARIANT_SM90_NARROW), mlajit_model_describe(model));
    const int narrow =
        !tuned_grid && narrow_resolves_on_sm90a(model, h_q, page, h_q > narrow_max ? narrow_max : 0) &&
        chance(&r, 25);
    const int narrow_long = narrow && chance(&r, 50);
    const int narrow_scores = narrow && !narrow_long && chance(&r, 50);  /* sm90-narrow where it does not fit */
    /* half the narrow draws at most narrow_max heads split the heads into groups
     * of 8 .. h_q rounded up to 8; past it every draw does, in groups of 8 ..
     * narrow_max */
    const int narrow_hc = !narrow             ? 0
                          : h_q > narrow_max  ? 8 * (1 + below(&r, narrow_max / 8))
                          : chance(&r, 50)    ? 8 * (1 + below(&r, (h_q + 7) / 8))
                                              : 0;

    /* A wide call (drawn last, so the other calls stay what they were): the
     * geometry engines send, a whole mixed batch as many rows (up to
     * MLAJIT_MAX_ROWS) or speculative decoding's long s_q (up to MLAJIT_MAX_SQ),
     * as many rows as the reference budget allows at this call's heads and
     * candidates, in the upper part of that range; the planner's splits (a forced
     * split's partials would be gigabytes). */
    out->wide = chance(&r, 5);
    if (out->wide) {
        const int64_t wide_budget = allow_heavy ? MLAJIT_FUZZ_HEAVY_BUDGET : MLAJIT_FUZZ_REF_BUDGET;
        /* fewer candidates (the spec does not depend on them) for a row count drawn
         * from the top sixteenth of the range */
        const int64_t target_rows = log_uniform(&r, MLAJIT_MAX_ROWS / 16, MLAJIT_MAX_ROWS);
        const int64_t candidates_cap = wide_budget / (target_rows * h_q);
        if (topk + extra_topk > candidates_cap) {
            topk = max_int(1, (int)(candidates_cap / (has_extra ? 2 : 1)));
            extra_topk = has_extra ? max_int(1, (int)(candidates_cap / 2)) : 0;
        }
        const int64_t per_row = (int64_t)h_q * (topk + extra_topk);
        const int64_t rows_cap = wide_budget / per_row < MLAJIT_MAX_ROWS ? wide_budget / per_row : MLAJIT_MAX_ROWS;
        /* s_q 1 (a batch as (T, 1)), past the old limit of 16, or the most */
        const int sq_cap = (int)(rows_cap < MLAJIT_MAX_SQ ? rows_cap : MLAJIT_MAX_SQ);
        const int sq_kind = below(&r, 3);
        s_q = sq_kind == 0 ? 1 : sq_kind == 1 ? log_uniform(&r, min_int(17, sq_cap), sq_cap) : sq_cap;
        int b_cap = (int)(rows_cap / s_q);
        const int seqs_cap = MLAJIT_FUZZ_MAX_TOKENS / biggest_page - 1; /* a page per sequence, and page 0 */
        if (b_cap > seqs_cap)
            b_cap = seqs_cap;
        b = log_uniform(&r, b_cap / 4 > 1 ? b_cap / 4 : 1, b_cap > 1 ? b_cap : 1);
        num_splits = 0;
        seqlen = draw_seqlen(&r, topk, pages_per_seq_max(b, page) * page);
        if (has_extra)
            extra_seqlen = draw_seqlen(&r, extra_topk, pages_per_seq_max(b, extra_page) * extra_page);
    }

    /* A custom layout (drawn last, so the other calls stay what they were), a fifth
     * of the draws: from the valid space, kept where some family serves it; never
     * where one model is asked for (mlajit fuzz --model) */
    mlajit_layout layout = {0};
    const int custom = !tuned_grid && !(flags >> MLAJIT_FUZZ_MODEL_SHIFT) && chance(&r, 20) &&
                       draw_served_layout(&r, &layout);

    mlajit_kernel_spec *sp = &out->spec;
    sp->struct_size = sizeof *sp;
    sp->model = model;
    if (custom) { /* a layout that is a named model's is that model (as its spec string and case.json say) */
        const mlajit_model_desc *d = mlajit_layout_describe(&layout);
        sp->model = d->model;
        if (d->model == MLAJIT_MODEL_CUSTOM)
            sp->layout = layout;
    }
    sp->h_q = h_q;
    sp->page_size = page;
    sp->extra_page_size = extra_page;
    sp->features = features;
    /* the kernel choices drawn for the named model */
    const int named_tile = narrow ? 0 : tile, named_hc = narrow ? narrow_hc : hc;
    const mlajit_variant named_variant = narrow_long     ? MLAJIT_VARIANT_SM90_NARROW_LONG
                                         : narrow_scores ? MLAJIT_VARIANT_SM90_NARROW_SCORES
                                         : narrow        ? MLAJIT_VARIANT_SM90_NARROW
                                                         : MLAJIT_VARIANT_AUTO;
    sp->tile = named_tile;
    sp->heads_per_cta = named_hc;
    sp->variant = named_variant;
    if (custom && narrow) { /* the narrow draw was for the named model: auto's choice for the layout */
        sp->variant = MLAJIT_VARIANT_AUTO;
        sp->heads_per_cta = hc;
        sp->tile = tile;
    }
    out->shape = (mlajit_decode_shape){.struct_size = sizeof(mlajit_decode_shape), .batch = b, .s_q = s_q,
                                       .topk = topk, .extra_topk = extra_topk, .num_splits = num_splits};
    if (sp->model == MLAJIT_MODEL_CUSTOM && mlajit_envelope_check(sp, &out->shape) != MLAJIT_OK) {
        /* a custom layout's rows may not fit the drawn tile or head group: the
         * generator's choices, else the named model drawn before it */
        sp->tile = sp->heads_per_cta = 0;
        if (mlajit_envelope_check(sp, &out->shape) != MLAJIT_OK) {
            sp->model = model;
            memset(&sp->layout, 0, sizeof sp->layout);
            sp->tile = named_tile;
            sp->heads_per_cta = named_hc;
            sp->variant = named_variant;
        }
        mlajit_clear_error();
    }
    out->synth = (mlajit_synth_params){
        .model = sp->model, .layout = sp->layout, .b = b, .s_q = s_q, .h_q = h_q, .topk = topk,
        .extra_topk = extra_topk,
        .page_size = page, .extra_page_size = extra_page,
        .seqlen = max_int(seqlen, 1), .extra_seqlen = has_extra ? max_int(extra_seqlen, 1) : 0,
        .page_stride_pad = stride_pad,
        .with_sink = (features & MLAJIT_FEATURE_SINK) != 0,
        .with_topk_length = (features & MLAJIT_FEATURE_TOPK_LENGTH) != 0,
        .with_extra_topk_length = (features & MLAJIT_FEATURE_EXTRA_TOPK_LENGTH) != 0,
        .invalid_fraction = invalid / 100.0,
        .seed = out->seed,
    };
}

/* ---- the case and its edits ---------------------------------------------------- */

static void edit_lengths(rng *r, int32_t *lengths, int b, int topk, int zero_percent, int huge_percent)
{
    if (!lengths)
        return;
    for (int i = 0; i < b; i++) {
        if (chance(r, zero_percent))
            lengths[i] = 0; /* fewer attended: the dropped slots stay quantized, unread */
        else if (lengths[i] >= topk && chance(r, huge_percent))
            lengths[i] = INT32_MAX; /* already past topk: the attended set is unchanged */
    }
}

/* Replace some attended indices by other attended, valid ones of the same row:
 * SPEC.md counts duplicates twice. Every valid attended slot is quantized. */
static void add_duplicates(rng *r, int32_t *indices, const int32_t *lengths, int b, int s_q, int topk,
                           int64_t num_slots, int percent)
{
    for (int i = 0; i < b; i++) {
        int attended = lengths ? (lengths[i] < 0 ? 0 : (lengths[i] < topk ? lengths[i] : topk)) : topk;
        for (int j = 0; j < s_q; j++) {
            int32_t *row = indices + ((int64_t)i * s_q + j) * topk;
            for (int k = 0; k < attended; k++) {
                if (!chance(r, percent))
                    continue;
                int from = below(r, attended);
                if (row[from] >= 0 && row[from] < num_slots)
                    row[k] = row[from];
            }
        }
    }
}

int mlajit_fuzz_make_case(const mlajit_fuzz_call *call, mlajit_case *c)
{
    int rc = mlajit_case_synthesize(&call->synth, c);
    if (rc)
        return mlajit_fail_prefix(rc, "fuzz call %lld: ", (long long)call->number);
    rng r;
    rng_seed(&r, call->seed ^ 0x5EED0F0ED175ull);
    if (call->duplicate_percent) {
        add_duplicates(&r, c->indices, c->topk_length, c->b, c->s_q, c->topk, c->kv.num_pages * c->kv.page_size,
                       call->duplicate_percent);
        if (c->has_extra)
            add_duplicates(&r, c->extra_indices, c->extra_topk_length, c->b, c->s_q, c->extra_topk,
                           c->extra_kv.num_pages * c->extra_kv.page_size, call->duplicate_percent);
    }
    edit_lengths(&r, c->topk_length, c->b, c->topk, call->zero_length_rows, call->huge_length_rows);
    edit_lengths(&r, c->extra_topk_length, c->b, c->extra_topk, call->zero_length_rows, call->huge_length_rows);
    return MLAJIT_OK;
}

void mlajit_fuzz_run_options(const mlajit_fuzz_call *call, mlajit_gpu_run_options *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->tile = call->spec.tile;
    opts->heads_per_cta = call->spec.heads_per_cta;
    opts->variant = call->spec.variant;
    opts->num_splits = call->shape.num_splits;
    opts->lse_head_major = call->lse_head_major;
    opts->pad_strides = call->pad_strides;
}

void mlajit_fuzz_describe(const mlajit_fuzz_call *call, char *buf, size_t len)
{
    const mlajit_kernel_spec *s = &call->spec;
    const mlajit_decode_shape *sh = &call->shape;
    const mlajit_synth_params *p = &call->synth;
    char extra[80] = "";
    if (s->extra_page_size)
        snprintf(extra, sizeof extra, "; extra: page %d topk %d seqlen %d", s->extra_page_size, sh->extra_topk,
                 p->extra_seqlen);
    const int named = s->variant != MLAJIT_VARIANT_AUTO;  /* a variant asked for by name */
    snprintf(buf, len,
             "%s h_q %d b %d s_q %d; main: page %d topk %d seqlen %d%s; features%s%s%s%s; tile %d hc %d%s%s splits %d; "
             "invalid %.0f%% page pad %lld%s%s%s%s%s%s",
             mlajit_spec_desc(s)->name, s->h_q, sh->batch, sh->s_q, s->page_size, sh->topk, p->seqlen,
             extra, s->features ? "" : " none", (s->features & MLAJIT_FEATURE_SINK) ? " sink" : "",
             (s->features & MLAJIT_FEATURE_TOPK_LENGTH) ? " topk-length" : "",
             (s->features & MLAJIT_FEATURE_EXTRA_TOPK_LENGTH) ? " extra-topk-length" : "", s->tile, s->heads_per_cta,
             named ? " " : "", named ? mlajit_variant_name(s->variant) : "",
             sh->num_splits, p->invalid_fraction * 100.0, (long long)p->page_stride_pad,
             call->pad_strides ? " padded-strides" : "", call->lse_head_major ? " lse-head-major" : "",
             call->zero_length_rows ? " zero-lengths" : "", call->huge_length_rows ? " huge-lengths" : "",
             call->duplicate_percent ? " duplicates" : "", call->wide ? " wide" : "");
}
