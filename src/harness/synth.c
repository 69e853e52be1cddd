/* Synthetic decode cases by BENCH.md's recipe (see harness.h). Deterministic in
 * the seed: one xoshiro256** stream, seeded through splitmix64, is drawn in a
 * fixed order (main cache, extra cache, q, sink).
 *
 * Like the golden cases, every slot that no attended index refers to is poisoned
 * with 0xFF (NaN in every format), and only attended tokens are generated and
 * quantized, so caches of millions of tokens are built in the time it takes to
 * quantize the b * s_q * topk tokens that are actually read. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/error.h"
#include "harness/harness.h"
#include "reference/quantize.h"
#include "harness/rng.h"

#define MAX_CACHE_BYTES ((int64_t)1 << 36)

typedef mlajit_rng rng;
#define rng_seed mlajit_rng_seed
#define rng_next mlajit_rng_next

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

/* Uniform integer in [0, n), n >= 1, without modulo bias (rejection). */
static uint64_t rng_below(rng *r, uint64_t n)
{
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
        x = rng_next(r);
    while (x >= limit);
    return x % n;
}

/* Standard normal by the polar form of Box-Muller (Marsaglia): no sin / cos,
 * which matters when millions of tokens are generated. The second value of each
 * pair is kept for the next call. */
static double rng_normal(rng *r)
{
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare_normal;
    }
    double u, v, s;
    do {
        u = 2.0 * rng_uniform(r) - 1.0;
        v = 2.0 * rng_uniform(r) - 1.0;
        s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    const double factor = sqrt(-2.0 * log(s) / s);
    r->spare_normal = v * factor;
    r->has_spare = 1;
    return u * factor;
}

static double clamp_unit(double x) { return x < -1.0 ? -1.0 : (x > 1.0 ? 1.0 : x); }

static void *alloc_array(size_t count, size_t size) { return mlajit_malloc(count ? count * size : 1); }

/* One cache and its indices. */
typedef struct scope_params {
    const char *name; /* "main" or "extra", for messages */
    int topk, page_size, seqlen;
    int with_length;
} scope_params;

/* Per-row lengths in [0, topk + 3]: values past topk are legal, consumers clamp. */
static int32_t *make_lengths(rng *r, int b, int topk)
{
    int32_t *len = alloc_array((size_t)b, sizeof *len);
    if (!len)
        return NULL;
    for (int i = 0; i < b; i++)
        len[i] = (int32_t)rng_below(r, (uint64_t)topk + 4);
    return len;
}

/* An index that must be skipped: -1, another negative value, or one past the end. */
static int32_t invalid_index(rng *r, int64_t num_slots)
{
    uint64_t kind = rng_below(r, 4);
    if (kind < 2)
        return -1;
    if (kind == 2)
        return (int32_t)(-2 - (int64_t)rng_below(r, 1000));
    int64_t room = (int64_t)INT32_MAX - num_slots + 1;
    return (int32_t)(num_slots + (int64_t)rng_below(r, (uint64_t)(room < 1024 ? room : 1024)));
}

static int build_scope(rng *r, const mlajit_synth_params *p, const mlajit_model_desc *d, const scope_params *sp,
                       mlajit_case_cache *cache, int32_t **indices_out, int32_t **lengths_out)
{
    const int b = p->b, s_q = p->s_q, topk = sp->topk, page_size = sp->page_size, seqlen = sp->seqlen;
    const int64_t blocks_per_seq = (seqlen + page_size - 1) / page_size;
    const int64_t num_pages = (int64_t)b * blocks_per_seq + 1; /* page 0 is never used */
    const int64_t num_slots = num_pages * page_size;
    if (num_slots > INT32_MAX)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "synth: %s cache of %lld slots does not fit int32 indices; lower b or seqlen", sp->name,
                           (long long)num_slots);
    const int64_t page_stride = ((int64_t)page_size * d->bytes_per_token + 15) / 16 * 16 + p->page_stride_pad;
    if (num_pages > MAX_CACHE_BYTES / page_stride)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "synth: %s cache of %lld pages x %lld bytes is too large",
                           sp->name, (long long)num_pages, (long long)page_stride);

    cache->page_size = page_size;
    cache->num_pages = num_pages;
    cache->page_stride = page_stride;
    cache->source_bf16 = NULL;
    cache->bytes = mlajit_malloc((size_t)(num_pages * page_stride));
    const size_t n_idx = (size_t)b * (size_t)s_q * (size_t)topk;
    int32_t *indices = alloc_array(n_idx, sizeof *indices);
    int64_t *table = alloc_array((size_t)(num_pages - 1), sizeof *table);
    int32_t *positions = alloc_array((size_t)seqlen, sizeof *positions);
    int32_t *swaps = alloc_array((size_t)topk, sizeof *swaps);
    uint8_t *done = mlajit_calloc((size_t)(num_slots + 7) / 8, 1); /* slots already quantized */
    uint16_t *values = alloc_array((size_t)d->d_qk, sizeof *values);
    int32_t *lengths = NULL;
    int st = MLAJIT_OK;
    if (!cache->bytes || !indices || !table || !positions || !swaps || !done || !values) {
        st = mlajit_fail_oom("synth: the %s cache (%lld bytes)", sp->name,
                         (long long)(num_pages * page_stride));
        goto out;
    }
    memset(cache->bytes, 0xFF, (size_t)(num_pages * page_stride));

    /* random block table: a shuffle of pages 1..num_pages-1 */
    for (int64_t k = 0; k < num_pages - 1; k++)
        table[k] = k + 1;
    for (int64_t k = num_pages - 2; k > 0; k--) {
        int64_t other = (int64_t)rng_below(r, (uint64_t)k + 1);
        int64_t t = table[k];
        table[k] = table[other];
        table[other] = t;
    }

    if (sp->with_length) {
        lengths = make_lengths(r, b, topk);
        if (!lengths) {
            st = mlajit_fail_oom("synth: the topk lengths");
            goto out;
        }
    }

    for (int k = 0; k < seqlen; k++)
        positions[k] = k;
    const int distinct = topk < seqlen ? topk : seqlen;
    for (int i = 0; i < b; i++) {
        const int attended = lengths ? (lengths[i] < topk ? lengths[i] : topk) : topk;
        for (int j = 0; j < s_q; j++) {
            int32_t *row = indices + ((size_t)i * (size_t)s_q + (size_t)j) * (size_t)topk;
            /* distinct positions by a partial Fisher-Yates shuffle, undone after
             * so the next row starts from the identity again: O(topk) a row */
            for (int k = 0; k < distinct; k++) {
                int other = k + (int)rng_below(r, (uint64_t)(seqlen - k));
                swaps[k] = other;
                int32_t t = positions[k];
                positions[k] = positions[other];
                positions[other] = t;
                const int32_t pos = positions[k];
                row[k] = (int32_t)(table[(int64_t)i * blocks_per_seq + pos / page_size] * page_size + pos % page_size);
            }
            for (int k = distinct; k < topk; k++)
                row[k] = -1;
            for (int k = distinct; k-- > 0;) {
                int32_t t = positions[k];
                positions[k] = positions[swaps[k]];
                positions[swaps[k]] = t;
            }

            for (int k = 0; k < topk; k++) {
                if (row[k] < 0)
                    continue;
                if (p->invalid_fraction > 0.0 && rng_uniform(r) < p->invalid_fraction) {
                    row[k] = invalid_index(r, num_slots);
                    continue;
                }
                if (k >= attended)
                    continue; /* past topk_length: never attended, stays poisoned */
                const int32_t slot = row[k];
                if (done[slot / 8] & (1u << (slot % 8)))
                    continue;
                done[slot / 8] |= (uint8_t)(1u << (slot % 8));
                for (int c = 0; c < d->d_qk; c++)
                    values[c] = mlajit_float_to_bf16((float)clamp_unit(rng_normal(r) / 10.0));
                st = mlajit_quantize_token_desc(d, values, cache->bytes + (int64_t)(slot / page_size) * page_stride,
                                           page_size, slot % page_size);
                if (st != MLAJIT_OK)
                    goto out;
            }
        }
    }
    *indices_out = indices;
    *lengths_out = lengths;
    indices = NULL;
    lengths = NULL;
out:
    free(indices);
    free(lengths);
    free(table);
    free(positions);
    free(swaps);
    free(done);
    free(values);
    return st;
}

static int check_params(const mlajit_synth_params *p)
{
    if (!mlajit_synth_desc(p)) {
        if (p->model == MLAJIT_MODEL_CUSTOM && mlajit_layout_validate(&p->layout))
            return mlajit_fail_prefix(MLAJIT_ERR_INVALID_ARGUMENT, "synth: ");
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "synth: model %d is unknown; allowed: v32, dsv4, glm_nsa, "
                           "glm53_nope, dots3_swa, or MLAJIT_MODEL_CUSTOM with a layout", (int)p->model);
    }
    if (p->b < 0 || p->b > MLAJIT_MAX_BATCH)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "synth: b is %d; allowed 0..%d", p->b, MLAJIT_MAX_BATCH);
    if (p->s_q < 0 || p->s_q > MLAJIT_MAX_SQ)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "synth: s_q is %d; allowed 0..%d", p->s_q, MLAJIT_MAX_SQ);
    if ((int64_t)p->b * p->s_q > MLAJIT_MAX_ROWS)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "synth: b x s_q is %lld rows; allowed at most %d",
                           (long long)p->b * p->s_q, MLAJIT_MAX_ROWS);
    if (p->h_q < 1 || p->h_q > MLAJIT_MAX_HEADS)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "synth: h_q is %d; allowed 1..%d", p->h_q, MLAJIT_MAX_HEADS);
    if (p->topk < 1 || p->topk > MLAJIT_MAX_TOPK)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "synth: topk is %d; allowed 1..%d", p->topk, MLAJIT_MAX_TOPK);
    if (p->extra_topk < 0 || p->extra_topk > MLAJIT_MAX_TOPK)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "synth: extra_topk is %d; allowed 0 (no extra cache) or 1..%d",
                           p->extra_topk, MLAJIT_MAX_TOPK);
    if (p->page_size < 1 || p->page_size > MLAJIT_MAX_PAGE_SIZE)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "synth: page_size is %d; allowed 1..%d", p->page_size,
                           MLAJIT_MAX_PAGE_SIZE);
    if (p->seqlen < 1)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "synth: seqlen is %d; allowed >= 1", p->seqlen);
    if (p->extra_topk > 0) {
        if (p->extra_page_size < 1 || p->extra_page_size > MLAJIT_MAX_PAGE_SIZE)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "synth: extra_page_size is %d; allowed 1..%d",
                               p->extra_page_size, MLAJIT_MAX_PAGE_SIZE);
        if (p->extra_seqlen < 1)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "synth: extra_seqlen is %d; allowed >= 1 with an extra cache",
                               p->extra_seqlen);
    } else if (p->with_extra_topk_length) {
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "synth: with_extra_topk_length needs extra_topk > 0");
    }
    if (p->page_stride_pad < 0 || p->page_stride_pad % 16 != 0 || p->page_stride_pad > ((int64_t)1 << 24))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "synth: page_stride_pad is %lld; allowed a multiple of 16 in 0..2^24",
                           (long long)p->page_stride_pad);
    if (!(p->invalid_fraction >= 0.0 && p->invalid_fraction <= 1.0))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "synth: invalid_fraction is %g; allowed 0..1",
                           p->invalid_fraction);
    return MLAJIT_OK;
}

int mlajit_case_synthesize(const mlajit_synth_params *p, mlajit_case *c)
{
    if (!p || !c)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "synth: params and case must not be NULL");
    memset(c, 0, sizeof *c);
    int st = check_params(p);
    if (st != MLAJIT_OK)
        return st;
    const mlajit_model_desc *d = mlajit_synth_desc(p);
    rng r;
    rng_seed(&r, p->seed);

    c->model = d->model; /* a custom layout that is a named model's is that model */
    if (d->model == MLAJIT_MODEL_CUSTOM)
        c->layout = p->layout;
    c->b = p->b;
    c->s_q = p->s_q;
    c->h_q = p->h_q;
    c->topk = p->topk;
    c->seed = p->seed;
    c->sm_scale = pow((double)d->d_qk, -0.55);

    const scope_params main_scope = {"main", p->topk, p->page_size, p->seqlen, p->with_topk_length};
    st = build_scope(&r, p, d, &main_scope, &c->kv, &c->indices, &c->topk_length);
    if (st == MLAJIT_OK && p->extra_topk > 0) {
        const scope_params extra_scope = {"extra", p->extra_topk, p->extra_page_size, p->extra_seqlen,
                                          p->with_extra_topk_length};
        c->has_extra = 1;
        c->extra_topk = p->extra_topk;
        st = build_scope(&r, p, d, &extra_scope, &c->extra_kv, &c->extra_indices, &c->extra_topk_length);
    }
    if (st != MLAJIT_OK) {
        mlajit_case_free(c);
        return st;
    }

    const size_t n_q = (size_t)p->b * (size_t)p->s_q * (size_t)p->h_q * (size_t)d->d_qk;
    c->q = alloc_array(n_q, sizeof *c->q);
    if (p->with_sink)
        c->attn_sink = alloc_array((size_t)p->h_q, sizeof *c->attn_sink);
    if (!c->q || (p->with_sink && !c->attn_sink)) {
        mlajit_case_free(c);
        return mlajit_fail_oom("synth: q");
    }
    for (size_t k = 0; k < n_q; k++)
        c->q[k] = mlajit_float_to_bf16((float)clamp_unit(rng_normal(&r)));

    if (c->attn_sink) {
        /* Heads 0 and 1 carry the special values (+inf: out = 0; -inf: no effect).
         * The others sit near the lse (about ln of the candidate count, as the
         * scores are small) so the sink changes the output by tens of percent: a
         * sink of N(0,1) alone would change it by ~1/topk, below the bar. */
        const double typical_lse = log((double)p->topk + (double)p->extra_topk);
        for (int h = 0; h < p->h_q; h++)
            c->attn_sink[h] = (float)(typical_lse + rng_normal(&r));
        c->attn_sink[0] = INFINITY;
        if (p->h_q >= 2)
            c->attn_sink[1] = -INFINITY;
    }
    return MLAJIT_OK;
}

const mlajit_model_desc *mlajit_synth_desc(const mlajit_synth_params *p)
{
    if (!p)
        return NULL;
    return p->model == MLAJIT_MODEL_CUSTOM ? mlajit_layout_describe(&p->layout) : mlajit_model_describe(p->model);
}
