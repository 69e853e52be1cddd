/* The SPEC.md decode operation on host memory in double precision: the oracle
 * every kernel is checked against. For each (batch row, query token) the valid
 * candidates of both scopes (main first, then extra) are dequantized once into a
 * float buffer (the dequantized values are bf16, so float holds them exactly) and
 * reused by every head; scores, the softmax and the output sum are in double. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "common/abi.h"
#include "common/alloc.h"
#include "common/error.h"
#include "mlajit.h"
#include "reference/quantize.h"

typedef struct scope_view {
    const mlajit_cache_view *cache;
    int page_size;
    int topk;
    const int32_t *indices;
    int64_t stride_b, stride_s;
    const int32_t *lengths; /* NULL: every position counts */
} scope_view;

static float bf16_value(uint16_t v)
{
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int check_cache(const mlajit_cache_view *cache, const mlajit_model_desc *model, int page_size, const char *name)
{
    if (!cache->data)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "reference: %s.data is NULL", name);
    int64_t min_stride = (int64_t)page_size * model->bytes_per_token;
    if (cache->page_stride < min_stride)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "reference: %s.page_stride is %lld bytes; allowed >= %lld (page size %d)", name,
                           (long long)cache->page_stride, (long long)min_stride, page_size);
    if (cache->num_pages < 0)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "reference: %s.num_pages is %lld; allowed >= 0", name,
                           (long long)cache->num_pages);
    return MLAJIT_OK;
}

static int check_stride(int64_t stride, const char *name)
{
    if (stride < 0)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "reference: %s is %lld; allowed >= 0 (0 = contiguous)", name,
                           (long long)stride);
    return MLAJIT_OK;
}

static int validate(const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape, const mlajit_decode_args *args,
                    const double *out_ref, const double *lse_ref)
{
    if (!spec || !shape || !args)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "reference: spec, shape and args must not be NULL");
    if (!mlajit_spec_desc(spec)) {
        if (spec->model == MLAJIT_MODEL_CUSTOM && mlajit_layout_validate(&spec->layout))
            return mlajit_fail_prefix(MLAJIT_ERR_INVALID_ARGUMENT, "reference: spec.");
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "reference: spec.model %d is unknown; allowed: v32, dsv4, "
                           "glm_nsa, glm53_nope, dots3_swa, or MLAJIT_MODEL_CUSTOM with spec.layout", (int)spec->model);
    }
    if (spec->h_q < 1 || spec->h_q > MLAJIT_MAX_HEADS)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "reference: spec.h_q is %d; allowed 1..%d", spec->h_q,
                           MLAJIT_MAX_HEADS);
    if (spec->page_size < 1 || spec->page_size > MLAJIT_MAX_PAGE_SIZE)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "reference: spec.page_size is %d; allowed 1..%d",
                           spec->page_size, MLAJIT_MAX_PAGE_SIZE);
    if (spec->extra_page_size < 0 || spec->extra_page_size > MLAJIT_MAX_PAGE_SIZE)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "reference: spec.extra_page_size is %d; allowed 0 (no extra cache) or 1..%d",
                           spec->extra_page_size, MLAJIT_MAX_PAGE_SIZE);
    if (spec->features & ~MLAJIT_FEATURE_ALL)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "reference: spec.features is 0x%x; allowed bits 0x%x",
                           spec->features, MLAJIT_FEATURE_ALL);
    int has_extra = spec->extra_page_size > 0;
    if ((spec->features & MLAJIT_FEATURE_EXTRA_TOPK_LENGTH) && !has_extra)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "reference: feature EXTRA_TOPK_LENGTH needs an extra cache (spec.extra_page_size > 0)");
    if (shape->batch < 0 || shape->batch > MLAJIT_MAX_BATCH)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "reference: shape.batch is %d; allowed 0..%d", shape->batch,
                           MLAJIT_MAX_BATCH);
    if (shape->s_q < 0 || shape->s_q > MLAJIT_MAX_SQ)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "reference: shape.s_q is %d; allowed 0..%d", shape->s_q,
                           MLAJIT_MAX_SQ);
    if ((int64_t)shape->batch * shape->s_q > MLAJIT_MAX_ROWS)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "reference: shape.batch x shape.s_q is %lld rows; allowed at most %d",
                           (long long)shape->batch * shape->s_q, MLAJIT_MAX_ROWS);
    if (shape->topk < 1 || shape->topk > MLAJIT_MAX_TOPK)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "reference: shape.topk is %d; allowed 1..%d", shape->topk,
                           MLAJIT_MAX_TOPK);
    if (shape->extra_topk < 0 || shape->extra_topk > MLAJIT_MAX_TOPK)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "reference: shape.extra_topk is %d; allowed 0..%d",
                           shape->extra_topk, MLAJIT_MAX_TOPK);
    if (shape->extra_topk > 0 && !has_extra)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "reference: shape.extra_topk is %d without an extra cache; allowed 0 when "
                           "spec.extra_page_size is 0",
                           shape->extra_topk);
    if (!(isfinite(args->sm_scale) && args->sm_scale > 0.0f))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "reference: sm_scale is %g; allowed finite and > 0",
                           (double)args->sm_scale);

    const int64_t strides[] = {args->q_stride_b, args->q_stride_s, args->q_stride_h, args->indices_stride_b,
                               args->indices_stride_s, args->extra_indices_stride_b, args->extra_indices_stride_s};
    const char *stride_names[] = {"q_stride_b", "q_stride_s", "q_stride_h", "indices_stride_b",
                                  "indices_stride_s", "extra_indices_stride_b", "extra_indices_stride_s"};
    for (size_t k = 0; k < sizeof strides / sizeof strides[0]; k++) {
        int st = check_stride(strides[k], stride_names[k]);
        if (st != MLAJIT_OK)
            return st;
    }

    if ((int64_t)shape->batch * shape->s_q == 0)
        return MLAJIT_OK; /* nothing is read or written */
    if (!out_ref || !lse_ref)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "reference: out_ref and lse_ref must not be NULL");
    if (!args->q)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "reference: args.q is NULL");
    if (!args->indices)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "reference: args.indices is NULL");
    int st = check_cache(&args->kv, mlajit_spec_desc(spec), spec->page_size, "kv");
    if (st != MLAJIT_OK)
        return st;
    if ((spec->features & MLAJIT_FEATURE_TOPK_LENGTH) && !args->topk_length)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "reference: args.topk_length is NULL but the spec has feature TOPK_LENGTH");
    if ((spec->features & MLAJIT_FEATURE_SINK) && !args->attn_sink)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "reference: args.attn_sink is NULL but the spec has feature SINK");
    if (has_extra && shape->extra_topk > 0) {
        st = check_cache(&args->extra_kv, mlajit_spec_desc(spec), spec->extra_page_size, "extra_kv");
        if (st != MLAJIT_OK)
            return st;
        if (!args->extra_indices)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "reference: args.extra_indices is NULL with extra_topk %d",
                               shape->extra_topk);
        if ((spec->features & MLAJIT_FEATURE_EXTRA_TOPK_LENGTH) && !args->extra_topk_length)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                               "reference: args.extra_topk_length is NULL but the spec has feature EXTRA_TOPK_LENGTH");
    }
    return MLAJIT_OK;
}

/* Dequantize the valid candidates of one scope for (row i, query token j) into
 * k_buf (d_qk floats each; dequantized values are bf16, so float is exact),
 * appending after the *count already there. */
static int gather_scope(const scope_view *sv, const mlajit_model_desc *model, int d_qk, int i, int j, float *k_buf, int *count)
{
    int limit = sv->topk;
    if (sv->lengths) {
        int32_t len = sv->lengths[i];
        limit = len < 0 ? 0 : (len > sv->topk ? sv->topk : len);
    }
    const int32_t *row = sv->indices + (int64_t)i * sv->stride_b + (int64_t)j * sv->stride_s;
    int64_t num_slots = sv->cache->num_pages * (int64_t)sv->page_size;
    const uint8_t *base = sv->cache->data;
    for (int p = 0; p < limit; p++) {
        int64_t slot = row[p];
        if (slot < 0 || slot >= num_slots)
            continue; /* -1 and out-of-range indices are skipped, never read */
        const uint8_t *page = base + (slot / sv->page_size) * sv->cache->page_stride;
        int st = mlajit_dequantize_token_desc(model, page, sv->page_size, (int)(slot % sv->page_size),
                                         k_buf + (size_t)*count * (size_t)d_qk);
        if (st != MLAJIT_OK)
            return st;
        (*count)++;
    }
    return MLAJIT_OK;
}

/* Heads are processed in groups whose q rows and output accumulators stay in
 * L1, so the dequantized candidates stream through the cache twice per group
 * rather than twice per head. */
#define HEAD_GROUP 8

typedef struct head_group {
    int group, n, d_qk, d_v;
    double sm_scale;
    const double *q; /* [group, d_qk] */
    const float *k;  /* [n, d_qk] dequantized candidates; V = K[:, 0:d_v] */
    double *scores;  /* [group, n] scratch */
    double *acc;     /* [group, d_v] out: the softmax-weighted sum of V */
} head_group;

/* Softmax attention of a group of heads over n >= 1 candidates: acc gets the
 * normalized output (before the sink), lse the natural-log sum of exp. */
static void attend_head_group(const head_group *hg, double *lse)
{
    const int group = hg->group, n = hg->n, d_qk = hg->d_qk, d_v = hg->d_v;
    for (int t = 0; t < n; t++) {
        const float *k = hg->k + (size_t)t * (size_t)d_qk;
        for (int g = 0; g < group; g++) {
            const double *qg = hg->q + (size_t)g * (size_t)d_qk;
            /* four partial sums break the add latency chain; in double the
             * order is irrelevant at the bar's precision */
            double dot[4] = {0.0, 0.0, 0.0, 0.0};
            int c = 0;
            for (; c + 4 <= d_qk; c += 4)
                for (int u = 0; u < 4; u++)
                    dot[u] += qg[c + u] * (double)k[c + u];
            for (; c < d_qk; c++)
                dot[0] += qg[c] * (double)k[c];
            hg->scores[(size_t)g * (size_t)n + (size_t)t] = hg->sm_scale * ((dot[0] + dot[1]) + (dot[2] + dot[3]));
        }
    }
    /* max-subtracted exponentials keep every weight in (0, 1] */
    double inv_sum[HEAD_GROUP];
    for (int g = 0; g < group; g++) {
        double *s = hg->scores + (size_t)g * (size_t)n;
        double max_score = -INFINITY;
        for (int t = 0; t < n; t++)
            max_score = s[t] > max_score ? s[t] : max_score;
        double sum = 0.0;
        for (int t = 0; t < n; t++) {
            s[t] = exp(s[t] - max_score);
            sum += s[t];
        }
        lse[g] = max_score + log(sum);
        inv_sum[g] = 1.0 / sum;
    }
    memset(hg->acc, 0, (size_t)group * (size_t)d_v * sizeof *hg->acc);
    for (int t = 0; t < n; t++) {
        const float *v = hg->k + (size_t)t * (size_t)d_qk;
        for (int g = 0; g < group; g++) {
            const double w = hg->scores[(size_t)g * (size_t)n + (size_t)t];
            double *a = hg->acc + (size_t)g * (size_t)d_v;
            for (int c = 0; c < d_v; c++)
                a[c] += w * (double)v[c];
        }
    }
    for (int g = 0; g < group; g++)
        for (int c = 0; c < d_v; c++)
            hg->acc[(size_t)g * (size_t)d_v + (size_t)c] *= inv_sum[g];
}

int mlajit_reference_decode(const mlajit_kernel_spec *caller_spec, const mlajit_decode_shape *caller_shape,
                            const mlajit_decode_args *caller_args, double *out_ref, double *lse_ref)
{
    if (!caller_spec || !caller_shape || !caller_args)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "reference: spec, shape and args must not be NULL");
    mlajit_kernel_spec spec_local;
    mlajit_decode_shape shape_local;
    mlajit_decode_args args_local;
    const mlajit_kernel_spec *spec = mlajit_abi_in(MLAJIT_ABI_KERNEL_SPEC, "spec", caller_spec, &spec_local);
    const mlajit_decode_shape *shape =
        spec ? mlajit_abi_in(MLAJIT_ABI_DECODE_SHAPE, "shape", caller_shape, &shape_local) : NULL;
    const mlajit_decode_args *args = shape ? mlajit_abi_in(MLAJIT_ABI_DECODE_ARGS, "args", caller_args, &args_local)
                                           : NULL;
    if (!args)
        return mlajit_fail_prefix(MLAJIT_ERR_INVALID_ARGUMENT, "reference: ");
    int st = validate(spec, shape, args, out_ref, lse_ref);
    if (st != MLAJIT_OK)
        return st;
    const mlajit_model_desc *d = mlajit_spec_desc(spec);
    const int b = shape->batch, s_q = shape->s_q, h_q = spec->h_q;
    const int d_qk = d->d_qk, d_v = d->d_v;
    if ((int64_t)b * s_q == 0)
        return MLAJIT_OK;

    const int has_extra = spec->extra_page_size > 0 && shape->extra_topk > 0;
    const int64_t q_sh = args->q_stride_h ? args->q_stride_h : d_qk;
    const int64_t q_ss = args->q_stride_s ? args->q_stride_s : (int64_t)h_q * d_qk;
    const int64_t q_sb = args->q_stride_b ? args->q_stride_b : (int64_t)s_q * h_q * d_qk;

    scope_view scopes[2];
    int num_scopes = 1;
    scopes[0] = (scope_view){
        .cache = &args->kv,
        .page_size = spec->page_size,
        .topk = shape->topk,
        .indices = args->indices,
        .stride_s = args->indices_stride_s ? args->indices_stride_s : shape->topk,
        .stride_b = args->indices_stride_b ? args->indices_stride_b : (int64_t)s_q * shape->topk,
        .lengths = (spec->features & MLAJIT_FEATURE_TOPK_LENGTH) ? args->topk_length : NULL,
    };
    if (has_extra) {
        scopes[num_scopes++] = (scope_view){
            .cache = &args->extra_kv,
            .page_size = spec->extra_page_size,
            .topk = shape->extra_topk,
            .indices = args->extra_indices,
            .stride_s = args->extra_indices_stride_s ? args->extra_indices_stride_s : shape->extra_topk,
            .stride_b = args->extra_indices_stride_b ? args->extra_indices_stride_b
                                                     : (int64_t)s_q * shape->extra_topk,
            .lengths = (spec->features & MLAJIT_FEATURE_EXTRA_TOPK_LENGTH) ? args->extra_topk_length : NULL,
        };
    }

    const size_t max_candidates = (size_t)shape->topk + (has_extra ? (size_t)shape->extra_topk : 0);
    float *k_buf = mlajit_malloc(max_candidates * (size_t)d_qk * sizeof *k_buf);
    double *scores = mlajit_malloc(HEAD_GROUP * max_candidates * sizeof *scores);
    double *q_group = mlajit_malloc(HEAD_GROUP * (size_t)d_qk * sizeof *q_group);
    double *acc = mlajit_malloc(HEAD_GROUP * (size_t)d_v * sizeof *acc);
    if (!k_buf || !scores || !q_group || !acc) {
        free(k_buf);
        free(scores);
        free(q_group);
        free(acc);
        return mlajit_fail_oom("the reference's %zu candidates", max_candidates);
    }

    const uint16_t *q = args->q;
    const double sm_scale = (double)args->sm_scale;
    for (int i = 0; i < b && st == MLAJIT_OK; i++) {
        for (int j = 0; j < s_q && st == MLAJIT_OK; j++) {
            /* every candidate of this (row, query token) is dequantized once */
            int n = 0;
            for (int s = 0; s < num_scopes && st == MLAJIT_OK; s++)
                st = gather_scope(&scopes[s], d, d_qk, i, j, k_buf, &n);
            if (st != MLAJIT_OK)
                break;

            for (int h0 = 0; h0 < h_q; h0 += HEAD_GROUP) {
                const int group = h_q - h0 < HEAD_GROUP ? h_q - h0 : HEAD_GROUP;
                const size_t row0 = ((size_t)i * (size_t)s_q + (size_t)j) * (size_t)h_q + (size_t)h0;
                if (n == 0) {
                    memset(out_ref + row0 * (size_t)d_v, 0, (size_t)group * (size_t)d_v * sizeof *out_ref);
                    for (int g = 0; g < group; g++)
                        lse_ref[row0 + (size_t)g] = INFINITY;
                    continue;
                }
                for (int g = 0; g < group; g++) {
                    const uint16_t *qh = q + (int64_t)i * q_sb + (int64_t)j * q_ss + (int64_t)(h0 + g) * q_sh;
                    for (int c = 0; c < d_qk; c++)
                        q_group[(size_t)g * (size_t)d_qk + (size_t)c] = bf16_value(qh[c]);
                }
                const head_group hg = {
                    .group = group, .n = n, .d_qk = d_qk, .d_v = d_v, .sm_scale = sm_scale,
                    .q = q_group, .k = k_buf, .scores = scores, .acc = acc,
                };
                attend_head_group(&hg, lse_ref + row0);
                for (int g = 0; g < group; g++) {
                    /* the sink scales out only; lse stays the candidates' */
                    double factor = 1.0;
                    if (spec->features & MLAJIT_FEATURE_SINK) {
                        const double sink = (double)args->attn_sink[h0 + g];
                        if (sink == INFINITY)
                            factor = 0.0;
                        else if (sink != -INFINITY)
                            factor = 1.0 / (1.0 + exp(sink - lse_ref[row0 + (size_t)g]));
                    }
                    double *out = out_ref + (row0 + (size_t)g) * (size_t)d_v;
                    const double *a = acc + (size_t)g * (size_t)d_v;
                    for (int c = 0; c < d_v; c++)
                        out[c] = a[c] * factor;
                }
            }
        }
    }
    free(k_buf);
    free(scores);
    free(q_group);
    free(acc);
    return st;
}
