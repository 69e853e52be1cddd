/* The tuner (harness.h, "the tuner"): per bucket of an envelope, time the
 * rules' choice, every walk alternative and the split counts by
 * docs/BENCH.md's graph protocol on caches in HBM, check the winner against
 * the fp64 reference, and store it as a tactic record (cache/tactics.h). */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/tactics.h"
#include "codegen/codegen.h"
#include "common/abi.h"
#include "common/alloc.h"
#include "common/error.h"
#include "harness/harness.h"
#include "harness/rng.h"
#include "runtime/runtime.h"

#define DROP_RATIO 1.2     /* a candidate this much slower than the best after a short timing is dropped */
#define SHORT_REPLAYS 3    /* the short timing */
#define MIN_REPLAYS 5      /* the full timing: at least this many replays, */
#define FULL_TIMED_MS 40.0 /* and replays until this much GPU time, up to the options' replays */
#define POOL_SEQLEN 8192   /* tokens per pool sequence (every one quantized) */
#define POOL_BYTES (24LL << 20) /* the base pool: 5-6 sequences (pool_sizes) */
#define MIN_CALLS 2        /* a call never rereads, from the L2, what it read the replay before */
#define MAX_CALLS 1024     /* small shapes: enough calls that a replay reads 2x the L2, */
#define MIN_REPLAY_MB 512  /* and at least this much, so a replay is long against the events' grain */
#define RULES_MARGIN 0.01  /* the rules' plan keeps a bucket unless another candidate beats it by more: the
                            * spread of three repeats was 0.4% at the median and 1.7% at the 90th percentile
                            * of the sweep's shapes (bench/NOTES.md 1c) */
#define LADDER_TURN 1.03   /* a split count this much slower than the one before it ends its kernel's ladder */

/* A progress line: to o->progress when set, else to the log's info level when
 * o->log_progress (the public mlajit_tune), else nowhere. */
static void say(const mlajit_tune_options *o, const char *fmt, ...) MLAJIT_PRINTF(2, 3);
static void say(const mlajit_tune_options *o, const char *fmt, ...)
{
    if (!o->progress && !o->log_progress)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (o->progress) {
        fprintf(o->progress, "%s\n", line);
        fflush(o->progress);
    } else {
        mlajit_info("%s", line);
    }
}

/* ---- candidates ----------------------------------------------------------- */

static int add_candidate(mlajit_tune_candidate *out, int max, int *n, const mlajit_tune_candidate *c)
{
    for (int i = 0; i < *n; i++)
        if (strcmp(out[i].kernel, c->kernel) == 0 && out[i].grid_splits == c->grid_splits &&
            out[i].head_groups == c->head_groups && out[i].tiles_per_split == c->tiles_per_split)
            return MLAJIT_OK; /* the same kernel on the same grid */
    if (*n >= max)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "tune: more than %d candidates", max);
    out[(*n)++] = *c;
    return MLAJIT_OK;
}

/* The forced spec of a resolved kernel string. */
static int forced_spec(const char *kernel, mlajit_kernel_spec *out)
{
    *out = (mlajit_kernel_spec)MLAJIT_KERNEL_SPEC_INIT;
    return mlajit_spec_parse_fields(kernel, out);
}

int mlajit_tune_candidates(const mlajit_kernel_spec *asked, const mlajit_decode_shape *shape, int sm_count,
                           mlajit_tune_candidate *out, int max, int *count)
{
    if (!asked || !shape || !out || !count || !asked->arch[0])
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "tune candidates: NULL argument or spec without arch");
    *count = 0;
    int n = 0, rc;
    mlajit_plan_outline o = MLAJIT_PLAN_OUTLINE_INIT;
    mlajit_decode_shape own = *shape;
    own.num_splits = 0;
    if ((rc = mlajit_plan_describe(asked, &own, sm_count, &o)))
        return rc;
    mlajit_tune_candidate rules = {.spec = *asked, .num_splits = 0, .grid_splits = o.num_splits,
                                   .head_groups = o.head_groups, .tiles_per_split = o.tiles_per_split, .is_rules = 1};
    snprintf(rules.kernel, sizeof rules.kernel, "%s", o.kernel);
    if ((rc = add_candidate(out, max, &n, &rules)))
        return rc;
    /* the kernels: the rules' own for this shape, auto's own (the rules' where
     * no walk alternative suits), then every walk alternative */
    char kernels[2 + MLAJIT_WALK_ALTERNATIVES][sizeof o.kernel];
    int n_kernels = 0;
    snprintf(kernels[n_kernels++], sizeof kernels[0], "%s", o.kernel);
    mlajit_kernel_spec alts[1 + MLAJIT_WALK_ALTERNATIVES];
    alts[0] = *asked;
    const int n_alts = 1 + mlajit_spec_walk_alternatives(asked, asked->arch, alts + 1);
    for (int i = 0; i < n_alts; i++) {
        mlajit_kernel_spec r = MLAJIT_KERNEL_SPEC_INIT;
        char name[128];
        if (mlajit_spec_resolve(&alts[i], &r) != MLAJIT_OK || mlajit_spec_string(&r, name, sizeof name) != MLAJIT_OK) {
            mlajit_clear_error();
            continue;
        }
        int seen = 0;
        for (int k = 0; k < n_kernels; k++)
            seen |= strcmp(kernels[k], name) == 0;
        if (!seen)
            snprintf(kernels[n_kernels++], sizeof kernels[0], "%s", name);
    }
    for (int k = 0; k < n_kernels; k++) {
        mlajit_kernel_spec forced, r = MLAJIT_KERNEL_SPEC_INIT;
        if ((rc = forced_spec(kernels[k], &forced)) || (rc = mlajit_spec_resolve(&forced, &r)))
            return rc;
        const int tiles = (shape->topk + shape->extra_topk + r.tile - 1) / r.tile;
        for (int splits = 0; splits <= MLAJIT_MAX_SPLITS && splits <= tiles; splits = splits ? splits * 2 : 1) {
            mlajit_decode_shape s = *shape;
            s.num_splits = splits;
            if (mlajit_shape_validate(&forced, &s) != MLAJIT_OK ||
                mlajit_plan_describe(&forced, &s, sm_count, &o) != MLAJIT_OK) {
                mlajit_clear_error(); /* not a shape this kernel takes (sm90-staged never splits) */
                continue;
            }
            mlajit_tune_candidate c = {.spec = forced, .num_splits = splits, .grid_splits = o.num_splits,
                                       .head_groups = o.head_groups, .tiles_per_split = o.tiles_per_split};
            snprintf(c.kernel, sizeof c.kernel, "%.127s", kernels[k]);
            if ((rc = add_candidate(out, max, &n, &c)))
                return rc;
        }
    }
    *count = n;
    return MLAJIT_OK;
}

/* A kernel's split counts come in rising order (mlajit_tune_candidates); its
 * time is taken to fall to one minimum and rise after it, so once a count is
 * slower than the one before it by more than noise, larger ones are not timed. */
int mlajit_tune_ladder_skips(const mlajit_tune_ladder *l, const mlajit_tune_candidate *c)
{
    return !c->is_rules && c->num_splits > 0 && l->turned && strcmp(l->kernel, c->kernel) == 0;
}

void mlajit_tune_ladder_note(mlajit_tune_ladder *l, const mlajit_tune_candidate *c, double us)
{
    if (c->is_rules || c->num_splits <= 0) /* the planner's own count is off the ladder */
        return;
    if (strcmp(l->kernel, c->kernel) != 0) {
        snprintf(l->kernel, sizeof l->kernel, "%s", c->kernel);
        l->turned = 0;
    } else if (us > LADDER_TURN * l->last_us) {
        l->turned = 1;
    }
    l->last_us = us;
}

/* ---- the buckets ------------------------------------------------------------ */

typedef struct tune_bucket {
    mlajit_kernel_spec spec; /* as asked: auto, arch set */
    mlajit_decode_shape shape;
} tune_bucket;

/* Every bucket of env inside the envelope, in pool order (model, page, extra
 * topk outermost) and head counts innermost (one geometry's buckets share their
 * indices: tune_inputs), into *out (malloc'd). */
static int expand_buckets(const mlajit_tune_envelope *env, const char *arch, tune_bucket **out, int *count)
{
    static const unsigned no_features = 0;
    static const int no_extra = 0;
    const unsigned *fsets = env->num_feature_sets ? env->feature_sets : &no_features;
    const int n_f = env->num_feature_sets ? env->num_feature_sets : 1;
    const int *extras = env->num_extra_topks ? env->extra_topks : &no_extra;
    const int n_e = env->num_extra_topks ? env->num_extra_topks : 1;
    const int n_m = (env->num_models > 0 ? env->num_models : 0) + (env->num_layouts > 0 ? env->num_layouts : 0);
    if (n_m < 1 || env->num_heads < 1 || env->num_pages < 1 || env->num_topks < 1 || env->num_rows < 1)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "tune: the envelope needs models (or layouts), heads, pages, topks and rows");
    for (int l = 0; l < env->num_layouts; l++)
        if (mlajit_layout_validate(&env->layouts[l]) != MLAJIT_OK)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "tune: layouts[%d]: %s", l, mlajit_last_error());
    size_t cap = (size_t)n_m * env->num_pages * n_e * n_f * env->num_heads * env->num_topks * env->num_rows;
    tune_bucket *b = mlajit_calloc(cap ? cap : 1, sizeof *b);
    if (!b)
        return mlajit_fail_oom("tune: the buckets");
    int n = 0;
    for (int m = 0; m < n_m; m++)
        for (int p = 0; p < env->num_pages; p++)
            for (int e = 0; e < n_e; e++)
                for (int f = 0; f < n_f; f++)
                    for (int t = 0; t < env->num_topks; t++)
                        for (int r = 0; r < env->num_rows; r++)
                            for (int h = 0; h < env->num_heads; h++) {
                                tune_bucket x = {.spec = MLAJIT_KERNEL_SPEC_INIT, .shape = MLAJIT_DECODE_SHAPE_INIT};
                                if (m < env->num_models) {
                                    x.spec.model = env->models[m];
                                } else { /* a named model's layout is that model: one spec, one record */
                                    mlajit_kernel_spec custom = x.spec;
                                    custom.model = MLAJIT_MODEL_CUSTOM;
                                    custom.layout = env->layouts[m - env->num_models];
                                    mlajit_spec_named_model(&custom, &x.spec);
                                }
                                x.spec.h_q = env->heads[h];
                                x.spec.page_size = env->pages[p];
                                x.spec.extra_page_size =
                                    extras[e] > 0 ? (env->extra_page_size ? env->extra_page_size : 64) : 0;
                                x.spec.features = fsets[f];
                                snprintf(x.spec.arch, sizeof x.spec.arch, "%s", arch);
                                /* timed at the lower edge of the tactic records' own bucket */
                                mlajit_tactic_bucket edge;
                                if (mlajit_tactic_bucket_of(env->rows[r], env->topks[t], extras[e], &edge) !=
                                    MLAJIT_OK) {
                                    mlajit_clear_error();
                                    continue;
                                }
                                x.shape.batch = edge.rows;
                                x.shape.s_q = 1;
                                x.shape.topk = edge.topk;
                                x.shape.extra_topk = edge.extra_topk;
                                if (mlajit_envelope_check_with(&x.spec, &x.shape, NULL) != MLAJIT_OK) {
                                    mlajit_clear_error();
                                    continue;
                                }
                                int dup = 0;
                                for (int i = n - 1; i >= 0 && !dup; i--)
                                    dup = memcmp(&b[i].shape, &x.shape, sizeof x.shape) == 0 &&
                                          memcmp(&b[i].spec, &x.spec, sizeof x.spec) == 0;
                                if (!dup)
                                    b[n++] = x;
                            }
    *out = b;
    *count = n;
    return MLAJIT_OK;
}

void mlajit_tune_envelope_defaults(mlajit_tune_envelope *env)
{
    static const mlajit_model models[] = {MLAJIT_MODEL_V32, MLAJIT_MODEL_DSV4};
    static const int heads[] = {8, 16, 32, 64, 128}, pages[] = {64, 256}, topks[] = {128, 256, 512, 1024, 2048};
    static const int rows[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
#define DEFAULT_LIST(list, count, values)                                                                              \
    if (env->count <= 0) {                                                                                             \
        env->list = values;                                                                                            \
        env->count = (int)(sizeof values / sizeof values[0]);                                                          \
    }
    if (env->num_layouts <= 0) { /* layouts alone are a model axis of their own */
        DEFAULT_LIST(models, num_models, models)
    }
    DEFAULT_LIST(heads, num_heads, heads)
    DEFAULT_LIST(pages, num_pages, pages)
    DEFAULT_LIST(topks, num_topks, topks)
    DEFAULT_LIST(rows, num_rows, rows)
#undef DEFAULT_LIST
}

static void bucket_name(const tune_bucket *b, char *buf, size_t len)
{
    char spec[128] = "?";
    mlajit_spec_string_as_asked(&b->spec, b->spec.arch, spec, sizeof spec);
    mlajit_clear_error();
    if (b->shape.extra_topk)
        snprintf(buf, len, "%s rows %d topk %d extra %d", spec, b->shape.batch, b->shape.topk, b->shape.extra_topk);
    else
        snprintf(buf, len, "%s rows %d topk %d", spec, b->shape.batch, b->shape.topk);
}

static void candidate_name(const mlajit_tune_candidate *c, char *buf, size_t len)
{
    if (c->is_rules)
        snprintf(buf, len, "rules: %s splits %d", c->kernel, c->grid_splits);
    else if (c->num_splits == 0)
        snprintf(buf, len, "%s splits own (%d)", c->kernel, c->grid_splits);
    else
        snprintf(buf, len, "%s splits %d (%d)", c->kernel, c->num_splits, c->grid_splits);
}

/* ---- device inputs ------------------------------------------------------------- */

/* A device buffer through the runtime's driver table. */
typedef struct devbuf {
    CUdeviceptr ptr;
    size_t bytes;
} devbuf;

static void devbuf_free(const mlajit_driver *drv, devbuf *b)
{
    if (b->ptr)
        drv->cuMemFree(b->ptr);
    b->ptr = 0;
    b->bytes = 0;
}

/* At least bytes (grown, contents lost); host: copied in when not NULL. */
static int devbuf_fill(const mlajit_driver *drv, devbuf *b, size_t bytes, const void *host)
{
    if (bytes == 0)
        bytes = 16;
    if (b->bytes < bytes) {
        devbuf_free(drv, b);
        CUresult r = drv->cuMemAlloc(&b->ptr, bytes);
        if (r) {
            b->ptr = 0;
            return mlajit_cuda_fail(drv, r, "tune: cuMemAlloc");
        }
        b->bytes = bytes;
    }
    if (host) {
        CUresult r = drv->cuMemcpyHtoD(b->ptr, host, bytes);
        if (r)
            return mlajit_cuda_fail(drv, r, "tune: cuMemcpyHtoD");
    }
    return MLAJIT_OK;
}

/* The cache pool of one (model, page size, extra page size): sequences of
 * POOL_SEQLEN tokens, every token quantized, together pool_bytes or more, with
 * the slots of each sequence (the synthetic case's indices); on the device,
 * that cache copied `replicas` times over spread_bytes (page for page: copy r's
 * slots are the base's + r * base_slots). Production rows each read their own
 * sequence out of gigabytes; rows drawn from a pool of a few times the L2 would
 * share sequences and hit in L2 across rows, which favours other kernels. */
typedef struct tune_view {
    devbuf buf;
    mlajit_cache_view view; /* over buf: replicas x the base's pages */
    int64_t base_slots;     /* the base cache's pages x page size */
} tune_view;

typedef struct tune_pool {
    int live;
    mlajit_model model;
    mlajit_layout layout; /* with model MLAJIT_MODEL_CUSTOM */
    int page_size, extra_page_size, replicas;
    mlajit_case c;
    mlajit_device_case dc;
    tune_view kv, extra_kv;
} tune_pool;

/* The base cache of view `from` copied into v->buf `replicas` times. */
static int view_replicate(const mlajit_driver *drv, const mlajit_cache_view *from, int page_size, int replicas,
                          tune_view *v)
{
    const size_t base = (size_t)from->num_pages * (size_t)from->page_stride;
    v->base_slots = from->num_pages * page_size;
    v->view = *from;
    v->view.num_pages = from->num_pages * replicas;
    int rc = devbuf_fill(drv, &v->buf, base * replicas, NULL);
    for (int i = 0; i < replicas && rc == MLAJIT_OK; i++) {
        CUresult r = drv->cuMemcpyDtoD(v->buf.ptr + i * base, (CUdeviceptr)(uintptr_t)from->data, base);
        if (r)
            rc = mlajit_cuda_fail(drv, r, "tune: cuMemcpyDtoD");
    }
    v->view.data = (const void *)(uintptr_t)v->buf.ptr;
    return rc;
}

/* The pool's bytes (the options', else POOL_BYTES) and the device memory it is
 * copied over (the options', else 4 GiB). The copies give every row addresses
 * of its own, which is all the L2 sees; the base pool only supplies values, so
 * a few sequences do: building 4x the L2 of them on the host took seconds per
 * pool, most of the sweep's time where its shapes' page sizes all differ. */
static void pool_sizes(const mlajit_tune_options *o, int64_t *pool_bytes, int64_t *spread_bytes)
{
    *pool_bytes = o->pool_bytes > 0 ? o->pool_bytes : POOL_BYTES;
    *spread_bytes = o->spread_bytes > 0 ? o->spread_bytes : 4LL << 30;
}

static void pool_free(const mlajit_driver *drv, tune_pool *p)
{
    devbuf_free(drv, &p->kv.buf);
    devbuf_free(drv, &p->extra_kv.buf);
    if (!p->live)
        return;
    mlajit_device_case_free(&p->dc);
    mlajit_case_free(&p->c);
    memset(p, 0, sizeof *p);
}

static int pool_get(mlajit_context *ctx, const tune_bucket *b, int64_t pool_bytes, int64_t spread_bytes,
                    tune_pool *p, const mlajit_tune_options *o)
{
    if (p->live && p->model == b->spec.model && !memcmp(&p->layout, &b->spec.layout, sizeof p->layout) &&
        p->page_size == b->spec.page_size &&
        p->extra_page_size == b->spec.extra_page_size)
        return MLAJIT_OK;
    const mlajit_driver *drv = mlajit_context_driver(ctx);
    pool_free(drv, p);
    const mlajit_model_desc *m = mlajit_spec_desc(&b->spec);
    int64_t tokens = pool_bytes / m->bytes_per_token;
    int seqs = (int)((tokens + POOL_SEQLEN - 1) / POOL_SEQLEN);
    if (seqs < 1)
        seqs = 1;
    mlajit_synth_params sp = {.model = b->spec.model, .layout = b->spec.layout, .b = seqs, .s_q = 1, .h_q = 1, .topk = POOL_SEQLEN,
                              .page_size = b->spec.page_size, .seqlen = POOL_SEQLEN, .seed = 4700 + (uint64_t)seqs};
    if (b->spec.extra_page_size) {
        sp.extra_topk = POOL_SEQLEN;
        sp.extra_page_size = b->spec.extra_page_size;
        sp.extra_seqlen = POOL_SEQLEN;
    }
    const double base_bytes = (double)seqs * POOL_SEQLEN * m->bytes_per_token;
    int replicas = (int)(spread_bytes / base_bytes);
    p->replicas = replicas < 1 ? 1 : replicas;
    say(o, "tune: building a cache pool of %d x %d tokens (%.0f MB) for %s page %d, copied %d times",
                seqs, POOL_SEQLEN, base_bytes / 1e6, m->name, b->spec.page_size, p->replicas);
    int rc = mlajit_case_synthesize(&sp, &p->c);
    if (rc)
        return rc;
    if ((rc = mlajit_device_case_upload(ctx, &p->c, NULL, &p->dc))) {
        mlajit_case_free(&p->c);
        return rc;
    }
    p->live = 1;
    if ((rc = view_replicate(drv, &p->dc.args.kv, b->spec.page_size, p->replicas, &p->kv)) ||
        (b->spec.extra_page_size &&
         (rc = view_replicate(drv, &p->dc.args.extra_kv, b->spec.extra_page_size, p->replicas, &p->extra_kv)))) {
        pool_free(drv, p);
        return rc;
    }
    p->model = b->spec.model;
    p->layout = b->spec.layout;
    p->page_size = b->spec.page_size;
    p->extra_page_size = b->spec.extra_page_size;
    return MLAJIT_OK;
}

/* topk distinct slots of a random pool sequence (of seqs x replicas) into row
 * (partial Fisher-Yates, undone after so the pool's rows stay as they were). */
static void draw_row(mlajit_rng *r, int32_t *pool_rows, int seqs, int replicas, int64_t base_slots, int topk,
                     int32_t *row, int32_t *swaps)
{
    const uint64_t pick = mlajit_rng_next(r) % ((uint64_t)seqs * (uint64_t)replicas);
    const int32_t shift = (int32_t)((int64_t)(pick / (uint64_t)seqs) * base_slots);
    int32_t *seq = pool_rows + (size_t)(pick % (uint64_t)seqs) * POOL_SEQLEN;
    const int n = topk < POOL_SEQLEN ? topk : POOL_SEQLEN;
    for (int k = 0; k < n; k++) {
        int other = k + (int)(mlajit_rng_next(r) % (uint64_t)(POOL_SEQLEN - k));
        swaps[k] = other;
        int32_t t = seq[k];
        seq[k] = seq[other];
        seq[other] = t;
        row[k] = seq[k] + shift;
    }
    for (int k = n; k < topk; k++)
        row[k] = -1;
    for (int k = n; k-- > 0;) {
        int32_t t = seq[k];
        seq[k] = seq[swaps[k]];
        seq[swaps[k]] = t;
    }
}

/* One bucket's timing inputs: n_args argument blocks over the pool, each with
 * its own fresh indices; q, the lengths, the sink, out and lse shared. The
 * indices are kept for the next bucket that reads the same pool at the same
 * rows and topks (the buckets of one geometry, head counts innermost): drawing
 * and uploading them was most of a bucket's host time on long shapes. */
typedef struct draw_key { /* what indices are drawn for */
    mlajit_model model;
    mlajit_layout layout; /* a pool's slots depend on its bytes per token */
    int page_size, extra_page_size, batch, s_q, topk, extra_topk, calls;
} draw_key;

typedef struct tune_inputs {
    devbuf q, idx, eidx, len, elen, sink, out, lse, ws;
    mlajit_decode_args *args;
    int n_args, calls;
    draw_key drawn; /* the indices on the device (all 0: none) */
} tune_inputs;

static void inputs_free(const mlajit_driver *drv, tune_inputs *in)
{
    devbuf *all[] = {&in->q, &in->idx, &in->eidx, &in->len, &in->elen, &in->sink, &in->out, &in->lse, &in->ws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        devbuf_free(drv, all[i]);
    free(in->args);
    in->args = NULL;
    memset(&in->drawn, 0, sizeof in->drawn);
}

/* calls x rows rows of fresh indices (and extra indices) and every row's
 * length, onto the device. */
static int inputs_draw(const mlajit_driver *drv, const tune_bucket *b, const tune_pool *pool, int calls,
                       uint64_t seed, tune_inputs *in)
{
    const int rows = b->shape.batch * (b->shape.s_q > 0 ? b->shape.s_q : 1);
    const int topk = b->shape.topk, etopk = b->shape.extra_topk;
    size_t n_idx = (size_t)calls * rows * topk, n_eidx = (size_t)calls * rows * etopk;
    int32_t *idx = mlajit_malloc(n_idx * 4 + 16), *eidx = mlajit_malloc(n_eidx * 4 + 16);
    int32_t *swaps = mlajit_malloc((size_t)(topk > etopk ? topk : etopk) * 4 + 16);
    int32_t *lens = mlajit_malloc((size_t)rows * 4 + 16);
    int rc = (idx && eidx && swaps && lens) ? MLAJIT_OK : mlajit_fail_oom("tune: the indices");
    if (rc == MLAJIT_OK) {
        mlajit_rng r;
        mlajit_rng_seed(&r, seed);
        for (size_t i = 0; i < (size_t)calls * rows; i++) {
            draw_row(&r, pool->c.indices, pool->c.b, pool->replicas, pool->kv.base_slots, topk, idx + i * topk,
                     swaps);
            if (etopk)
                draw_row(&r, pool->c.extra_indices, pool->c.b, pool->replicas, pool->extra_kv.base_slots, etopk,
                         eidx + i * etopk, swaps);
        }
        for (int i = 0; i < rows; i++)
            lens[i] = topk < etopk ? etopk : topk; /* every candidate attended */
        if (!(rc = devbuf_fill(drv, &in->idx, n_idx * 4, idx)) &&
            !(rc = etopk ? devbuf_fill(drv, &in->eidx, n_eidx * 4, eidx) : MLAJIT_OK) &&
            !(rc = devbuf_fill(drv, &in->len, (size_t)rows * 4, lens)))
            rc = devbuf_fill(drv, &in->elen, (size_t)rows * 4, lens);
    }
    free(idx);
    free(eidx);
    free(swaps);
    free(lens);
    return rc;
}

/* n_q bf16 values of q, uniform in [-1, 1) (never zeros): a random block of
 * Q_BLOCK values repeated, since values do not change a kernel's time and
 * drawing every one of a long shape's hundreds of millions took seconds. Any
 * prefix is as good, so a bucket whose q fits the buffer keeps it. */
#define Q_BLOCK 65521 /* prime: a row of q does not repeat the one before it */
static int q_fill(const mlajit_driver *drv, devbuf *q, size_t n_q, uint64_t seed)
{
    uint16_t *host = mlajit_malloc(n_q * 2 + 16);
    if (!host)
        return mlajit_fail_oom("tune: q");
    mlajit_rng r;
    mlajit_rng_seed(&r, seed ^ 0x9e3779b97f4a7c15ULL);
    const size_t block = n_q < Q_BLOCK ? n_q : Q_BLOCK;
    for (size_t i = 0; i < block; i++)
        host[i] = mlajit_float_to_bf16((float)((double)(mlajit_rng_next(&r) >> 11) * 0x1.0p-52 - 1.0));
    for (size_t i = block; i < n_q; i += block)
        memcpy(host + i, host, (n_q - i < block ? n_q - i : block) * 2);
    int rc = devbuf_fill(drv, q, n_q * 2, host);
    free(host);
    return rc;
}

static int inputs_make(mlajit_context *ctx, const tune_bucket *b, tune_pool *pool, tune_inputs *in, uint64_t seed)
{
    const mlajit_driver *drv = mlajit_context_driver(ctx);
    const mlajit_model_desc *m = mlajit_spec_desc(&b->spec);
    /* rows = batch x s_q query tokens, each with its own indices; the lengths per batch entry */
    const int batch = b->shape.batch, s_q = b->shape.s_q > 0 ? b->shape.s_q : 1, rows = batch * s_q;
    const int topk = b->shape.topk, etopk = b->shape.extra_topk, h = b->spec.h_q;
    const int64_t l2 = ctx->l2_bytes > 0 ? ctx->l2_bytes : 50LL << 20;
    const double per_call = (double)rows * (topk + etopk) * m->bytes_per_token;
    /* A replay reads 2x the L2 and MIN_REPLAY_MB: the call's data is out of the L2
     * when the next replay comes back to it, and the replay lasts long enough to
     * time. BENCH.md's fixed 10 calls cost a long shape (rows 4096, topk 2048: GBs
     * a call) 5x the GPU time for nothing more. */
    const double replay_bytes = fmax(2.0 * (double)l2, MIN_REPLAY_MB * 1e6);
    int calls = (int)fmin(ceil(replay_bytes / per_call), MAX_CALLS);
    calls = calls < MIN_CALLS ? MIN_CALLS : calls;
    in->calls = calls;
    in->n_args = calls;
    free(in->args);
    in->args = mlajit_calloc((size_t)calls, sizeof *in->args);
    const size_t n_q = (size_t)rows * h * m->d_qk;
    float *sink = mlajit_malloc((size_t)h * 4 + 16);
    int rc = (in->args && sink) ? MLAJIT_OK : mlajit_fail_oom("tune: the inputs");
    const draw_key key = {.model = b->spec.model, .layout = b->spec.layout, .page_size = b->spec.page_size,
                          .extra_page_size = b->spec.extra_page_size, .batch = batch, .s_q = s_q, .topk = topk,
                          .extra_topk = etopk, .calls = calls};
    if (rc == MLAJIT_OK && memcmp(&key, &in->drawn, sizeof key) != 0) {
        memset(&in->drawn, 0, sizeof in->drawn);
        if ((rc = inputs_draw(drv, b, pool, calls, seed, in)) == MLAJIT_OK)
            in->drawn = key;
    }
    if (rc == MLAJIT_OK && in->q.bytes < n_q * 2)
        rc = q_fill(drv, &in->q, n_q, seed);
    if (rc == MLAJIT_OK) {
        for (int i = 0; i < h; i++)
            sink[i] = 0.5f;
        if (!(rc = devbuf_fill(drv, &in->sink, (size_t)h * 4, sink)) &&
            !(rc = devbuf_fill(drv, &in->out, (size_t)rows * h * m->d_v * 2, NULL)))
            rc = devbuf_fill(drv, &in->lse, (size_t)rows * h * 4, NULL);
    }
    if (rc == MLAJIT_OK) {
        for (int i = 0; i < calls; i++) {
            mlajit_decode_args a = MLAJIT_DECODE_ARGS_INIT;
            a.q = (const void *)(uintptr_t)in->q.ptr;
            a.q_stride_h = m->d_qk;
            a.q_stride_s = (int64_t)h * m->d_qk;
            a.q_stride_b = a.q_stride_s * s_q;
            a.kv = pool->kv.view;
            a.indices = (const int32_t *)(uintptr_t)in->idx.ptr + (size_t)i * rows * topk;
            a.indices_stride_s = topk;
            a.indices_stride_b = (int64_t)topk * s_q;
            a.topk_length = (const int32_t *)(uintptr_t)in->len.ptr;
            a.attn_sink = (const float *)(uintptr_t)in->sink.ptr;
            if (etopk) {
                a.extra_kv = pool->extra_kv.view;
                a.extra_indices = (const int32_t *)(uintptr_t)in->eidx.ptr + (size_t)i * rows * etopk;
                a.extra_indices_stride_s = etopk;
                a.extra_indices_stride_b = (int64_t)etopk * s_q;
                a.extra_topk_length = (const int32_t *)(uintptr_t)in->elen.ptr;
            }
            a.sm_scale = (float)pow((double)m->d_qk, -0.55);
            a.out = (void *)(uintptr_t)in->out.ptr;
            a.out_stride_h = m->d_v;
            a.out_stride_s = (int64_t)h * m->d_v;
            a.out_stride_b = a.out_stride_s * s_q;
            a.lse = (float *)(uintptr_t)in->lse.ptr;
            in->args[i] = a;
        }
    }
    free(sink);
    return rc;
}

/* ---- the reference check ------------------------------------------------------- */

typedef struct check_entry {
    char kernel[128];
    int splits, pass;
} check_entry;

/* A small case of the bucket (b = min(rows, 2), the bucket's topk), planned with
 * the candidate's kernel forced and its effective split count, against the fp64
 * reference: *pass. */
static int check_candidate(mlajit_context *ctx, const tune_bucket *b, const mlajit_tune_candidate *cand, int *pass,
                           char *why, size_t why_len)
{
    *pass = 0;
    mlajit_synth_params sp = {
        .model = b->spec.model, .layout = b->spec.layout, .b = b->shape.batch < 2 ? b->shape.batch : 2,
        .s_q = b->shape.s_q > 0 ? b->shape.s_q : 1, .h_q = b->spec.h_q,
        .topk = b->shape.topk, .extra_topk = b->shape.extra_topk, .page_size = b->spec.page_size,
        .extra_page_size = b->spec.extra_page_size, .seqlen = b->shape.topk * 2 + 64,
        .extra_seqlen = b->shape.extra_topk * 2 + 64, .with_sink = (b->spec.features & MLAJIT_FEATURE_SINK) != 0,
        .with_topk_length = (b->spec.features & MLAJIT_FEATURE_TOPK_LENGTH) != 0,
        .with_extra_topk_length = (b->spec.features & MLAJIT_FEATURE_EXTRA_TOPK_LENGTH) != 0, .seed = 47,
    };
    mlajit_case c;
    int rc = mlajit_case_synthesize(&sp, &c);
    if (rc)
        return rc;
    mlajit_kernel_spec spec;
    forced_spec(cand->kernel, &spec);
    mlajit_decode_shape shape = MLAJIT_DECODE_SHAPE_INIT;
    mlajit_case_shape(&c, &shape);
    shape.num_splits = cand->grid_splits;
    mlajit_plan *plan = NULL;
    mlajit_device_case dc = {0};
    size_t rows = (size_t)c.b * c.s_q, n_lse = rows * c.h_q;
    int d_v = mlajit_case_desc(&c)->d_v;
    float *out = mlajit_malloc(n_lse * d_v * sizeof *out + 16), *lse = mlajit_malloc(n_lse * sizeof *lse + 16);
    float *ref_out = NULL, *ref_lse = NULL;
    if (!out || !lse)
        rc = mlajit_fail_oom("tune: the check");
    if (!rc && !(rc = mlajit_plan_create_tactics(ctx, &spec, &shape, 0, &plan)) &&
        !(rc = mlajit_device_case_upload(ctx, &c, NULL, &dc))) {
        size_t ws = mlajit_plan_workspace_size(plan);
        if (ws && !(rc = mlajit_device_case_alloc(&dc, ws, &dc.args.workspace)))
            dc.args.workspace_size = ws;
        if (!rc && !(rc = mlajit_decode(plan, &dc.args, NULL)) &&
            !(rc = mlajit_device_case_download(&dc, &c, NULL, rows, out, lse)) &&
            !(rc = mlajit_case_reference(&c, c.b, &ref_out, &ref_lse))) {
            mlajit_compare_result r;
            mlajit_compare(out, ref_out, n_lse * d_v, lse, ref_lse, n_lse, &r);
            *pass = r.pass;
            snprintf(why, why_len, "max abs err %.3g, %lld out and %lld lse values outside SPEC.md's bar",
                     r.out_max_abs_err, (long long)r.out_violations, (long long)r.lse_violations);
        }
    }
    free(out);
    free(lse);
    free(ref_out);
    free(ref_lse);
    mlajit_device_case_free(&dc);
    mlajit_plan_destroy(plan);
    mlajit_case_free(&c);
    return rc;
}

/* Whether candidate c passes its reference check (*pass), checked once per
 * (kernel, split count) over the run: the list *checks remembers. */
static int check_once(mlajit_context *ctx, const tune_bucket *b, const mlajit_tune_candidate *c,
                      const mlajit_tune_options *opts, mlajit_tune_summary *sum, check_entry **checks, int *n_checks,
                      int *cap_checks, int *pass)
{
    for (int k = 0; k < *n_checks; k++)
        if ((*checks)[k].splits == c->grid_splits && strcmp((*checks)[k].kernel, c->kernel) == 0) {
            *pass = (*checks)[k].pass;
            return MLAJIT_OK;
        }
    char why[200] = "";
    *pass = 1;
    if (!opts->skip_check) {
        const double t_check = mlajit_now_ms();
        int rc = check_candidate(ctx, b, c, pass, why, sizeof why);
        sum->s_checks += (mlajit_now_ms() - t_check) / 1e3;
        if (rc)
            return rc;
    }
    if (*n_checks == *cap_checks) {
        int cap = *cap_checks ? *cap_checks * 2 : 32;
        check_entry *g = mlajit_realloc(*checks, (size_t)cap * sizeof *g);
        if (!g)
            return mlajit_fail_oom("tune: the checks");
        *checks = g;
        *cap_checks = cap;
    }
    check_entry *e = &(*checks)[(*n_checks)++];
    *e = (check_entry){.splits = c->grid_splits, .pass = *pass};
    snprintf(e->kernel, sizeof e->kernel, "%s", c->kernel);
    if (!*pass) {
        sum->failed_checks++;
        say(opts, "tune: %s splits %d FAILED the reference check (%s): excluded", c->kernel, c->grid_splits, why);
    }
    return MLAJIT_OK;
}

/* ---- choosing a bucket's winner ------------------------------------------------ */

int mlajit_tune_settle(const double *full_us, int n, int rules_ci, mlajit_tune_check_fn check, void *user,
                       mlajit_tune_settled *out)
{
    *out = (mlajit_tune_settled){.winner = -1};
    double *left = mlajit_malloc((size_t)(n > 0 ? n : 1) * sizeof *left);
    if (!left)
        return mlajit_fail_oom("tune: the winner's order");
    for (int i = 0; i < n; i++)
        left[i] = full_us[i];
    int rc = MLAJIT_OK;
    /* the fastest that passes its reference check wins (checked once per
     * kernel and split count over the run; checking only the final order's
     * head checks far fewer than checking each new best as it came) */
    for (;;) {
        int next = -1;
        for (int ci = 0; ci < n; ci++)
            if (left[ci] >= 0 && (next < 0 || left[ci] < left[next]))
                next = ci;
        if (next < 0)
            break;
        if (out->winner >= 0) { /* the runner-up: the next fastest, checked or not */
            out->runner_up_us = left[next];
            break;
        }
        int pass;
        if ((rc = check(user, next, &pass)))
            break;
        if (pass) {
            out->winner = next;
            out->best_us = out->tuned_us = left[next];
        }
        left[next] = -1;
    }
    free(left);
    /* the rules' plan, timed in full and within RULES_MARGIN of the winner,
     * wins instead where it passes its check: a tactic leaves the rules only
     * for a win past noise, and a record of the rules follows them to the
     * bucket's other shapes; the record then gives the rules' time, while
     * best_us stays the fastest candidate's */
    if (rc == MLAJIT_OK && out->winner >= 0 && out->winner != rules_ci && rules_ci >= 0 && rules_ci < n &&
        full_us[rules_ci] >= 0 && full_us[rules_ci] <= out->best_us * (1 + RULES_MARGIN)) {
        int pass;
        if ((rc = check(user, rules_ci, &pass)) == MLAJIT_OK && pass) {
            out->runner_up_us = out->best_us;
            out->tuned_us = full_us[rules_ci];
            out->winner = rules_ci;
        }
    }
    return rc;
}

typedef struct settle_ctx {
    mlajit_context *ctx;
    const tune_bucket *b;
    const mlajit_tune_candidate *cands;
    const mlajit_tune_options *opts;
    mlajit_tune_summary *sum;
    check_entry **checks;
    int *n_checks, *cap_checks;
} settle_ctx;

static int settle_check(void *user, int ci, int *pass)
{
    settle_ctx *s = user;
    return check_once(s->ctx, s->b, &s->cands[ci], s->opts, s->sum, s->checks, s->n_checks, s->cap_checks, pass);
}

/* ---- the loop ------------------------------------------------------------------ */

static void fmt_seconds(double s, char *buf, size_t len)
{
    if (s < 0)
        s = 0;
    if (s >= 60)
        snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else
        snprintf(buf, len, "%.0fs", s);
}

/* The replays of a full look at a plan whose calls take us_per_call each: a
 * replay of many calls (1024 on a small shape) is already a mean over them, so
 * replays past FULL_TIMED_MS of GPU time add nothing to the median but time;
 * MIN_REPLAYS at least, cap (the options' replays) at most. */
static int full_replays(double us_per_call, int calls, int cap)
{
    const double replay_ms = us_per_call * calls / 1e3;
    int full = replay_ms > 0 ? (int)ceil(FULL_TIMED_MS / replay_ms) : cap;
    full = full < MIN_REPLAYS ? MIN_REPLAYS : full;
    return full > cap ? cap : full; /* the caller's cap wins */
}

/* One candidate's plan and time: MLAJIT_OK with *us. One capture serves both
 * looks: SHORT_REPLAYS first, and a candidate past DROP_RATIO x the best so far
 * stops there (*dropped, *us the short look's time); the rest get replays
 * enough for FULL_TIMED_MS of GPU time, MIN_REPLAYS to `replays`. The time
 * split goes to sum (NULL: nowhere). */
static int time_candidate(mlajit_context *ctx, const tune_bucket *b, const mlajit_tune_candidate *cand,
                          tune_inputs *in, double best, int replays, double *us, int *dropped,
                          mlajit_tune_summary *sum)
{
    const double t0 = mlajit_now_ms();
    double t_timed = t0;
    const mlajit_driver *drv = mlajit_context_driver(ctx);
    mlajit_decode_shape shape = b->shape;
    shape.num_splits = cand->num_splits;
    mlajit_plan *plan = NULL;
    mlajit_graph_timer *timer = NULL;
    int rc = mlajit_plan_create_tactics(ctx, &cand->spec, &shape, 0, &plan); /* the rules: not a record tuned before */
    *us = 0;
    *dropped = 0;
    if (rc)
        return rc;
    mlajit_plan_outline o = MLAJIT_PLAN_OUTLINE_INIT;
    if (cand->is_rules && (mlajit_plan_get_outline(plan, &o) || o.tactic != MLAJIT_TACTIC_RULES)) {
        rc = mlajit_fail(MLAJIT_ERR_INTERNAL, "tune: the rules' candidate of %s was planned by a tactic", cand->kernel);
        goto done;
    }
    size_t ws = mlajit_plan_workspace_size(plan);
    if (ws && (rc = devbuf_fill(drv, &in->ws, ws, NULL)))
        goto done;
    for (int i = 0; i < in->n_args; i++) {
        in->args[i].workspace = ws ? (void *)(uintptr_t)in->ws.ptr : NULL;
        in->args[i].workspace_size = ws;
    }
    double t;
    if ((rc = mlajit_graph_timer_create(ctx, plan, in->args, in->n_args, in->calls, NULL, &timer)))
        goto done;
    t_timed = mlajit_now_ms();
    if ((rc = mlajit_graph_timer_time(timer, SHORT_REPLAYS, &t)))
        goto done;
    if (best > 0 && t > DROP_RATIO * best) {
        *dropped = 1;
        *us = t;
        goto done;
    }
    rc = mlajit_graph_timer_time(timer, full_replays(t, in->calls, replays), us);
done:
    if (sum && timer) /* timed from the first timed replay; the rest is the capture's */
        sum->s_replays += (mlajit_now_ms() - t_timed) / 1e3;
    mlajit_graph_timer_free(timer);
    mlajit_plan_destroy(plan);
    if (sum)
        sum->s_captures += (t_timed - t0) / 1e3;
    return rc;
}

/* Every kernel any bucket's candidates run, acquired up front on one worker per
 * CPU (NVRTC compiles in parallel: the candidate loop then finds each kernel in
 * memory instead of compiling them one by one, seconds each). */
static int acquire_all(mlajit_context *ctx, const tune_bucket *buckets, int n_buckets, int sm_count,
                       mlajit_tune_summary *sum, const mlajit_tune_options *o)
{
    mlajit_tune_candidate cands[MLAJIT_TUNE_MAX_CANDIDATES];
    mlajit_kernel_spec *specs = NULL;
    char (*names)[sizeof cands[0].kernel] = NULL;
    int n = 0, cap = 0, rc = MLAJIT_OK;
    for (int bi = 0; bi < n_buckets && rc == MLAJIT_OK; bi++) {
        int n_c = 0;
        if ((rc = mlajit_tune_candidates(&buckets[bi].spec, &buckets[bi].shape, sm_count, cands,
                                         MLAJIT_TUNE_MAX_CANDIDATES, &n_c)))
            break;
        for (int ci = 0; ci < n_c && rc == MLAJIT_OK; ci++) {
            int seen = 0;
            for (int k = n; k-- > 0 && !seen;) /* the newest first: neighbours share kernels */
                seen = strcmp(names[k], cands[ci].kernel) == 0;
            if (seen)
                continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                mlajit_kernel_spec *gs = mlajit_realloc(specs, (size_t)cap * sizeof *gs);
                if (gs)
                    specs = gs;
                void *gn = gs ? mlajit_realloc(names, (size_t)cap * sizeof *names) : NULL;
                if (!gn) {
                    rc = mlajit_fail_oom("tune: the kernel list");
                    break;
                }
                names = gn;
            }
            memcpy(names[n], cands[ci].kernel, sizeof names[n]);
            rc = forced_spec(cands[ci].kernel, &specs[n++]);
        }
    }
    if (rc == MLAJIT_OK && n > 0) {
        mlajit_warmup_report rep = MLAJIT_WARMUP_REPORT_INIT;
        say(o, "tune: acquiring the %d kernels the candidates run (compiled in parallel)", n);
        const double t0 = mlajit_now_ms();
        rc = mlajit_acquire_batch(ctx, specs, n, 0, NULL, NULL, NULL, &rep);
        sum->compiled = n;
        sum->s_acquire += (mlajit_now_ms() - t0) / 1e3;
        if (rc == MLAJIT_OK)
            say(o, "tune: %d kernels in %.1f s: %d compiled, %d from the cache, %d from packs", n,
                    rep.wall_ms / 1e3, rep.compiled, rep.from_disk + rep.from_memory, rep.from_packs);
    }
    free(specs);
    free(names);
    return rc;
}

/* The tuner's loop over a list of buckets (mlajit_tune's, or the sweep's own):
 * summary counts go to sum, t0 is when the budget started. */
static int tune_buckets(mlajit_context *ctx, const tune_bucket *buckets, int n_buckets,
                        const mlajit_tune_options *opts, mlajit_tune_summary *sum, double t0)
{
    const mlajit_driver *drv = ctx ? mlajit_context_driver(ctx) : NULL;
    int sm_count = opts->sm_count ? opts->sm_count
                   : ctx && ctx->sm_count > 0 ? ctx->sm_count
                                              : MLAJIT_DEFAULT_SM_COUNT;
    int rc = MLAJIT_OK;
    sum->buckets = n_buckets;
    FILE *list = opts->list ? opts->list : stdout;
    const int replays = opts->replays > 0 ? opts->replays : 20;
    int64_t pool_bytes, spread_bytes;
    pool_sizes(opts, &pool_bytes, &spread_bytes);
    tune_pool pool = {0};
    tune_inputs in = {0};
    check_entry *checks = NULL;
    int n_checks = 0, cap_checks = 0;
    mlajit_tune_candidate cands[MLAJIT_TUNE_MAX_CANDIDATES];
    if (!opts->dry_run && opts->seconds > 0 && (rc = acquire_all(ctx, buckets, n_buckets, sm_count, sum, opts)))
        return rc;
    const int pushed = drv ? mlajit_context_enter(ctx) : 0; /* the inputs' driver calls */
    for (int bi = 0; bi < n_buckets && rc == MLAJIT_OK; bi++) {
        const tune_bucket *b = &buckets[bi];
        char bname[200];
        bucket_name(b, bname, sizeof bname);
        int n_c = 0;
        if ((rc = mlajit_tune_candidates(&b->spec, &b->shape, sm_count, cands, MLAJIT_TUNE_MAX_CANDIDATES, &n_c)))
            break;
        sum->candidates += n_c;
        if (opts->dry_run) {
            fprintf(list, "bucket %d/%d: %s: %d candidates\n", bi + 1, n_buckets, bname, n_c);
            for (int i = 0; i < n_c; i++) {
                char cn[200];
                candidate_name(&cands[i], cn, sizeof cn);
                fprintf(list, "  %s\n", cn);
            }
            continue;
        }
        if (mlajit_now_ms() - t0 >= opts->seconds * 1e3) {
            sum->deadline_hit = 1;
            break;
        }
        double t_in = mlajit_now_ms();
        if ((rc = pool_get(ctx, b, pool_bytes, spread_bytes, &pool, opts)))
            break;
        sum->s_pools += (mlajit_now_ms() - t_in) / 1e3;
        t_in = mlajit_now_ms();
        if ((rc = inputs_make(ctx, b, &pool, &in, 1000 + (uint64_t)bi)))
            break;
        sum->s_inputs += (mlajit_now_ms() - t_in) / 1e3;
        double best = 0, runner_up = 0, rules_us = 0, fastest = 0;
        double full_us[MLAJIT_TUNE_MAX_CANDIDATES];
        int winner = -1, measured = 0, rules_ci = -1;
        mlajit_tune_ladder ladder = {.kernel = ""};
        for (int ci = 0; ci < n_c && rc == MLAJIT_OK; ci++) {
            full_us[ci] = -1; /* not timed in full */
            if (mlajit_now_ms() - t0 >= opts->seconds * 1e3) {
                sum->deadline_hit = 1;
                break;
            }
            const mlajit_tune_candidate *c = &cands[ci];
            if (mlajit_tune_ladder_skips(&ladder, c)) {
                sum->pruned++;
                continue;
            }
            double us;
            int dropped;
            if ((rc = time_candidate(ctx, b, c, &in, fastest, replays, &us, &dropped, sum)))
                break;
            sum->timed++;
            measured++;
            if (c->is_rules)
                rules_us = us;
            mlajit_tune_ladder_note(&ladder, c, us);
            if (dropped) {
                sum->dropped++;
                continue;
            }
            full_us[ci] = us;
            if (c->is_rules)
                rules_ci = ci;
            if (fastest == 0 || us < fastest)
                fastest = us;
        }
        /* the winner among those timed in full (mlajit_tune_settle) */
        mlajit_tune_settled st = {.winner = -1};
        if (rc == MLAJIT_OK && !sum->deadline_hit) {
            settle_ctx sc = {ctx, b, cands, opts, sum, &checks, &n_checks, &cap_checks};
            rc = mlajit_tune_settle(full_us, n_c, rules_ci, settle_check, &sc, &st);
        }
        winner = st.winner;
        best = st.tuned_us;
        runner_up = st.runner_up_us;
        if (rc || sum->deadline_hit)
            break;
        sum->buckets_done++;
        if (winner >= 0) {
            const mlajit_tune_candidate *w = &cands[winner];
            /* a record's time is > 0; a timer that says 0 (the fake driver runs nothing) gets 1 ns */
            mlajit_tactic_choice choice = {.num_splits = w->is_rules ? 0 : w->num_splits, .follows_rules = w->is_rules,
                                           .tuned_us = best > 0 ? best : 1e-3,
                                           .rules_us = rules_us, .runner_up_us = runner_up, .candidates = measured};
            choice.kernel = (mlajit_kernel_spec)MLAJIT_KERNEL_SPEC_INIT;
            forced_spec(w->kernel, &choice.kernel);
            if ((rc = mlajit_tactic_store(ctx, &b->spec, &b->shape, &choice)))
                break;
            sum->stored++;
            if (opts->json) {
                fprintf(opts->json,
                        "{\"model\": \"%s\", \"h_q\": %d, \"b\": %d, \"s_q\": %d, \"topk\": %d, \"extra_topk\": %d, "
                        "\"page_size\": %d, \"tactic\": {\"kernel\": \"%s\", \"splits\": %d, \"follows_rules\": %s}, "
                        "\"tuned_us\": %.3f, \"rules_us\": %.3f, \"best_us\": %.3f, \"fastest_us\": %.3f, "
                        "\"runner_up_us\": %.3f, \"candidates\": %d, \"commit\": \"%s\"}\n",
                        mlajit_spec_desc(&b->spec)->name, b->spec.h_q, b->shape.batch, b->shape.s_q,
                        b->shape.topk, b->shape.extra_topk, b->spec.page_size, w->kernel, choice.num_splits,
                        choice.follows_rules ? "true" : "false", best, rules_us, st.best_us, fastest, runner_up,
                        measured,
                        opts->commit ? opts->commit : "unknown");
                fflush(opts->json);
            }
        }
        if (opts->progress || opts->log_progress) {
            double el = (mlajit_now_ms() - t0) / 1e3;
            char eta[32], cn[200] = "none passed its check";
            fmt_seconds(el / sum->buckets_done * (n_buckets - sum->buckets_done), eta, sizeof eta);
            if (winner >= 0)
                candidate_name(&cands[winner], cn, sizeof cn);
            say(opts, "tune: %d/%d %s: best %.2f us (%s) vs rules %.2f us (%.3fx); ETA %s", sum->buckets_done,
                n_buckets, bname, best, cn, rules_us, rules_us > 0 ? best / rules_us : 0.0, eta);
        }
    }
    if (drv) {
        inputs_free(drv, &in);
        pool_free(drv, &pool);
        mlajit_context_leave(ctx, pushed);
    }
    free(checks);
    return rc;
}

int mlajit_tune_run(mlajit_context *ctx, const mlajit_tune_envelope *env, const mlajit_tune_options *opts,
                mlajit_tune_summary *sum)
{
    if (!env || !opts || !sum)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "tune: env, opts and summary must not be NULL");
    memset(sum, 0, sizeof *sum);
    const double t0 = mlajit_now_ms();
    const mlajit_driver *drv = ctx ? mlajit_context_driver(ctx) : NULL;
    if (!opts->dry_run && !drv)
        return mlajit_fail(MLAJIT_ERR_NO_DEVICE, "tune needs a GPU (or a dry run)");
    tune_bucket *buckets = NULL;
    int n_buckets = 0;
    int rc = expand_buckets(env, ctx ? ctx->arch : MLAJIT_DEFAULT_ARCH, &buckets, &n_buckets);
    if (rc)
        return rc;
    rc = tune_buckets(ctx, buckets, n_buckets, opts, sum, t0);
    free(buckets);
    sum->seconds = (mlajit_now_ms() - t0) / 1e3;
    return rc;
}

/* ---- the sweep: the tuner checked against every candidate --------------------- */

/* "none", or feature names joined by '+' (mlajit_feature_from_name). */
static int parse_features(const char *text, unsigned *out)
{
    *out = 0;
    if (strcmp(text, "none") == 0)
        return MLAJIT_OK;
    char buf[96];
    snprintf(buf, sizeof buf, "%s", text);
    for (char *save = NULL, *t = strtok_r(buf, "+", &save); t; t = strtok_r(NULL, "+", &save)) {
        unsigned bit;
        if (mlajit_feature_from_name(t, &bit) != MLAJIT_OK)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                               "features = '%s': '%s' is unknown; allowed none, or sink, topk-length and "
                               "extra-topk-length joined by '+'", text, t);
        *out |= bit;
    }
    return MLAJIT_OK;
}

int mlajit_sweep_shape_parse(const char *line, const char *arch, mlajit_sweep_shape *out)
{
    mlajit_sweep_shape s = {.spec = MLAJIT_KERNEL_SPEC_INIT, .shape = MLAJIT_DECODE_SHAPE_INIT};
    s.shape.s_q = 1;
    snprintf(s.spec.arch, sizeof s.spec.arch, "%s", arch);
    char buf[512];
    if (strlen(line) >= sizeof buf)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "shape line longer than %zu characters", sizeof buf - 1);
    snprintf(buf, sizeof buf, "%s", line);
    int have_model = 0, have_h = 0, have_page = 0, have_b = 0, have_topk = 0;
    for (char *save = NULL, *t = strtok_r(buf, " \t\r\n", &save); t; t = strtok_r(NULL, " \t\r\n", &save)) {
        char *eq = strchr(t, '=');
        if (!eq)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "shape '%s': '%s' is not key=value", line, t);
        *eq = '\0';
        const char *key = t, *val = eq + 1;
        int rc = MLAJIT_OK;
        char *end = NULL;
        long v = strtol(val, &end, 10);
        const int is_int = *val && end && *end == '\0';
        int *field = !strcmp(key, "h_q") ? (have_h = 1, &s.spec.h_q)
                     : !strcmp(key, "page") ? (have_page = 1, &s.spec.page_size)
                     : !strcmp(key, "extra_page") ? &s.spec.extra_page_size
                     : !strcmp(key, "b") ? (have_b = 1, &s.shape.batch)
                     : !strcmp(key, "s_q") ? &s.shape.s_q
                     : !strcmp(key, "topk") ? (have_topk = 1, &s.shape.topk)
                     : !strcmp(key, "extra_topk") ? &s.shape.extra_topk
                                                  : NULL;
        if (!strcmp(key, "model")) {
            have_model = 1;
            /* a model's name, else a layout (canonical string or inline keys), as
             * format writes a custom layout's; a named model's layout is that model */
            if ((rc = mlajit_model_from_name(val, &s.spec.model)) != MLAJIT_OK &&
                mlajit_layout_parse(val, &s.spec.layout) == MLAJIT_OK) {
                s.spec.model = MLAJIT_MODEL_CUSTOM;
                mlajit_spec_named_model(&s.spec, &s.spec);
                mlajit_clear_error();
                rc = MLAJIT_OK;
            } else if (rc != MLAJIT_OK) {
                return mlajit_fail(rc, "shape '%s': model = '%s'; allowed a model's name (" MLAJIT_MODEL_NAMES
                                   ") or a layout (docs/layouts.md)", line, val);
            }
        } else if (!strcmp(key, "features")) {
            rc = parse_features(val, &s.spec.features);
        } else if (!field) {
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                               "shape '%s': key '%s' is unknown; allowed model, h_q, page, b, s_q, topk, extra_topk, "
                               "extra_page, features", line, key);
        } else if (!is_int || v < 0 || v > INT32_MAX) {
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "shape '%s': %s = '%s'; allowed a whole number >= 0", line,
                               key, val);
        } else {
            *field = (int)v;
        }
        if (rc)
            return rc;
    }
    if (!have_model || !have_h || !have_page || !have_b || !have_topk)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "shape '%s': model, h_q, page, b and topk are required", line);
    if (s.shape.extra_topk && !s.spec.extra_page_size)
        s.spec.extra_page_size = 64;
    int rc = mlajit_envelope_check_with(&s.spec, &s.shape, NULL);
    if (rc)
        return rc;
    *out = s;
    return MLAJIT_OK;
}

int mlajit_sweep_shape_format(const mlajit_sweep_shape *s, char *buf, size_t len)
{
    char feats[96] = "";
    unsigned bit;
    for (int i = 0; mlajit_feature_name(i, &bit); i++)
        if (s->spec.features & bit)
            snprintf(feats + strlen(feats), sizeof feats - strlen(feats), "%s%s", feats[0] ? "+" : "",
                     mlajit_feature_name(i, NULL));
    int n = snprintf(buf, len, "model=%s h_q=%d page=%d b=%d s_q=%d topk=%d",
                     mlajit_spec_desc(&s->spec)->name, s->spec.h_q, s->spec.page_size, s->shape.batch,
                     s->shape.s_q, s->shape.topk);
    if (n >= 0 && (size_t)n < len && s->shape.extra_topk)
        n += snprintf(buf + n, len - (size_t)n, " extra_topk=%d extra_page=%d", s->shape.extra_topk,
                      s->spec.extra_page_size);
    if (n >= 0 && (size_t)n < len && feats[0])
        n += snprintf(buf + n, len - (size_t)n, " features=%s", feats);
    return n >= 0 && (size_t)n < len ? MLAJIT_OK : mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "shape: buffer too small");
}

static int log_uniform_int(mlajit_rng *r, int lo, int hi)
{
    double u = (double)(mlajit_rng_next(r) >> 11) * 0x1.0p-53;
    int x = (int)exp(log((double)lo) + u * (log((double)hi + 1.0) - log((double)lo)));
    return x < lo ? lo : x > hi ? hi : x;
}

void mlajit_sweep_draw(uint64_t seed, int i, const char *arch, mlajit_sweep_shape *out)
{
    mlajit_rng r;
    mlajit_rng_seed(&r, seed * 1000003u + (uint64_t)i);
    for (;;) { /* until a draw is inside the envelope (most are) */
        mlajit_sweep_shape s = {.spec = MLAJIT_KERNEL_SPEC_INIT, .shape = MLAJIT_DECODE_SHAPE_INIT};
        snprintf(s.spec.arch, sizeof s.spec.arch, "%s", arch);
        const int dsv4 = mlajit_rng_next(&r) % 4 == 0;
        s.spec.model = dsv4 ? MLAJIT_MODEL_DSV4 : MLAJIT_MODEL_V32;
        s.spec.h_q = 1 + 2 * (int)(mlajit_rng_next(&r) % 64); /* odd, 1..127 */
        s.spec.page_size = log_uniform_int(&r, 1, 256);
        s.shape.topk = log_uniform_int(&r, 1, 8192);
        if (s.shape.topk > 64 && mlajit_rng_next(&r) % 4 == 0)
            s.shape.topk = s.shape.topk / 64 * 64; /* a quarter on tile multiples, the rest ragged */
        s.shape.s_q = 1 + (int)(mlajit_rng_next(&r) % 4);
        if (dsv4) {
            s.spec.extra_page_size = 64;
            s.spec.features = MLAJIT_FEATURE_SINK;
            s.shape.extra_topk = log_uniform_int(&r, 1, 1024);
        }
        /* rows x (topk + extra topk) at most 2^22: a call's indices stay small */
        const int per_row = s.shape.topk + s.shape.extra_topk;
        int max_rows = (1 << 22) / per_row;
        max_rows = max_rows > 32768 ? 32768 : max_rows < 1 ? 1 : max_rows;
        const int rows = log_uniform_int(&r, 1, max_rows);
        s.shape.batch = rows / s.shape.s_q > 0 ? rows / s.shape.s_q : 1;
        if (mlajit_envelope_check_with(&s.spec, &s.shape, NULL) == MLAJIT_OK) {
            *out = s;
            return;
        }
        mlajit_clear_error();
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

const char *mlajit_tactic_source_name(int tactic)
{
    return tactic == MLAJIT_TACTIC_TUNED ? "tuned" : tactic == MLAJIT_TACTIC_TUNED_BELOW ? "tuned-below" : "rules";
}

/* Whether a's cache pool sorts before b's (model, layout, page size, extra page size). */
static int pool_key_less(const mlajit_kernel_spec *a, const mlajit_kernel_spec *b)
{
    if (a->model != b->model)
        return a->model < b->model;
    int by_layout = memcmp(&a->layout, &b->layout, sizeof a->layout);
    if (by_layout)
        return by_layout < 0;
    if (a->page_size != b->page_size)
        return a->page_size < b->page_size;
    return a->extra_page_size < b->extra_page_size;
}

/* A plan of spec at shape (tactics on or off), its outline and a timer over in. */
static int sweep_plan(mlajit_context *ctx, const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape,
                      int tactics, tune_inputs *in, mlajit_plan **plan, mlajit_plan_outline *o,
                      mlajit_graph_timer **timer, devbuf *ws)
{
    const mlajit_driver *drv = mlajit_context_driver(ctx);
    int rc = mlajit_plan_create_tactics(ctx, spec, shape, tactics, plan);
    if (rc)
        return rc;
    *o = (mlajit_plan_outline)MLAJIT_PLAN_OUTLINE_INIT;
    if ((rc = mlajit_plan_get_outline(*plan, o)))
        return rc;
    size_t need = mlajit_plan_workspace_size(*plan);
    if (need && (rc = devbuf_fill(drv, ws, need, NULL)))
        return rc;
    for (int i = 0; i < in->n_args; i++) {
        in->args[i].workspace = need ? (void *)(uintptr_t)ws->ptr : NULL;
        in->args[i].workspace_size = need;
    }
    return mlajit_graph_timer_create(ctx, *plan, in->args, in->n_args, in->calls, NULL, timer);
}

/* Every candidate of bucket b timed in full (no early drop, no ladder); the
 * fastest that passes the reference check is *best, with its time. */
static int sweep_best(mlajit_context *ctx, const tune_bucket *b, const mlajit_tune_candidate *cands, int n_c,
                      tune_inputs *in, int replays, const mlajit_tune_options *o, int *best, double *best_time)
{
    double times[MLAJIT_TUNE_MAX_CANDIDATES];
    int order[MLAJIT_TUNE_MAX_CANDIDATES], rc = MLAJIT_OK;
    *best = -1;
    for (int ci = 0; ci < n_c && rc == MLAJIT_OK; ci++) {
        int dropped;
        rc = time_candidate(ctx, b, &cands[ci], in, 0, replays, &times[ci], &dropped, NULL);
        int k = ci; /* order: the candidates by time */
        for (; k > 0 && times[ci] < times[order[k - 1]]; k--)
            order[k] = order[k - 1];
        order[k] = ci;
    }
    for (int k = 0; k < n_c && *best < 0 && rc == MLAJIT_OK; k++) {
        int pass = 1;
        char why[200] = "";
        if (!o->skip_check && (rc = check_candidate(ctx, b, &cands[order[k]], &pass, why, sizeof why)))
            break;
        if (pass) {
            *best = order[k];
            *best_time = times[order[k]];
        } else {
            say(o, "sweep: %s splits %d failed the reference check (%s)", cands[order[k]].kernel,
                cands[order[k]].grid_splits, why);
        }
    }
    if (rc == MLAJIT_OK && *best < 0)
        rc = mlajit_fail(MLAJIT_ERR_INTERNAL, "sweep: no candidate passed the reference check");
    return rc;
}

/* The rules' plan (tactics off), the tuned plan (tactics on) and the best
 * candidate's, each captured once and timed `repeats` times in turn (`replays`
 * replays a time): outl, the medians med (in that order) and the largest
 * max / min - 1 of the three, *spread. ws: a workspace per plan (each graph's
 * pointers are fixed at its capture). */
static int sweep_repeats(mlajit_context *ctx, const tune_bucket *b, const mlajit_tune_candidate *best,
                         tune_inputs *in, devbuf ws[3], int replays, int repeats, mlajit_plan_outline outl[3],
                         double med[3], double *spread)
{
    mlajit_plan *plans[3] = {NULL, NULL, NULL};
    mlajit_graph_timer *timers[3] = {NULL, NULL, NULL};
    mlajit_decode_shape best_shape = b->shape;
    best_shape.num_splits = best->num_splits;
    double reps[3][16];
    int rc;
    if (!(rc = sweep_plan(ctx, &b->spec, &b->shape, 0, in, &plans[0], &outl[0], &timers[0], &ws[0])) &&
        !(rc = sweep_plan(ctx, &b->spec, &b->shape, 1, in, &plans[1], &outl[1], &timers[1], &ws[1])) &&
        !(rc = sweep_plan(ctx, &best->spec, &best_shape, 0, in, &plans[2], &outl[2], &timers[2], &ws[2])))
        for (int r = 0; r < repeats && rc == MLAJIT_OK; r++)
            for (int k = 0; k < 3 && rc == MLAJIT_OK; k++)
                rc = mlajit_graph_timer_time(timers[(k + r) % 3], replays, &reps[(k + r) % 3][r]);
    for (int k = 0; k < 3; k++) {
        mlajit_graph_timer_free(timers[k]);
        mlajit_plan_destroy(plans[k]);
    }
    *spread = 0;
    for (int k = 0; k < 3 && rc == MLAJIT_OK; k++) {
        qsort(reps[k], (size_t)repeats, sizeof reps[k][0], cmp_double);
        med[k] = repeats % 2 ? reps[k][repeats / 2] : 0.5 * (reps[k][repeats / 2 - 1] + reps[k][repeats / 2]);
        const double s = reps[k][repeats - 1] / reps[k][0] - 1;
        *spread = s > *spread ? s : *spread;
    }
    return rc;
}

int mlajit_sweep(mlajit_context *ctx, const mlajit_sweep_shape *shapes, int n, const mlajit_sweep_options *o,
                 mlajit_sweep_summary *sum)
{
    if (!ctx || !shapes || n < 1 || !o || !sum)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "sweep: ctx, shapes (n >= 1), options and summary required");
    memset(sum, 0, sizeof *sum);
    sum->shapes = n;
    const double t0 = mlajit_now_ms();
    const mlajit_driver *drv = mlajit_context_driver(ctx);
    if (!drv)
        return mlajit_fail(MLAJIT_ERR_NO_DEVICE, "the sweep needs a GPU");
    int rc = MLAJIT_OK;
    /* the shapes in pool order (model, page, extra page), so each pool is built once */
    int *order_of = mlajit_malloc((size_t)n * sizeof *order_of);
    tune_bucket *buckets = mlajit_calloc((size_t)n, sizeof *buckets);
    if (!buckets || !order_of) {
        free(buckets);
        free(order_of);
        return mlajit_fail_oom("sweep: the buckets");
    }
    for (int i = 0; i < n; i++) {
        int k = i;
        for (; k > 0 && pool_key_less(&shapes[i].spec, &shapes[order_of[k - 1]].spec); k--)
            order_of[k] = order_of[k - 1];
        order_of[k] = i;
    }
    /* 1. each shape's bucket tuned, as a deployment would tune them */
    int n_buckets = 0;
    for (int oi = 0; oi < n; oi++) {
        const int i = order_of[oi];
        mlajit_tactic_bucket edge;
        const mlajit_decode_shape *sh = &shapes[i].shape;
        if ((rc = mlajit_tactic_bucket_of((long long)sh->batch * sh->s_q, sh->topk, sh->extra_topk, &edge)))
            break;
        tune_bucket x = {.spec = shapes[i].spec, .shape = MLAJIT_DECODE_SHAPE_INIT};
        x.shape.batch = edge.rows;
        x.shape.s_q = 1;
        x.shape.topk = edge.topk;
        x.shape.extra_topk = edge.extra_topk;
        int dup = 0;
        for (int k = 0; k < n_buckets && !dup; k++)
            dup = !memcmp(&buckets[k].spec, &x.spec, sizeof x.spec) &&
                  !memcmp(&buckets[k].shape, &x.shape, sizeof x.shape);
        if (!dup)
            buckets[n_buckets++] = x;
    }
    if (rc == MLAJIT_OK && o->tune_first) {
        mlajit_tune_options tune = o->tune;
        tune.json = NULL; /* the JSON lines are the sweep's, one per shape */
        rc = tune_buckets(ctx, buckets, n_buckets, &tune, &sum->tune, t0);
        sum->tune.seconds = (mlajit_now_ms() - t0) / 1e3;
    }
    free(buckets);
    if (rc) {
        free(order_of);
        return rc;
    }

    /* 2. per shape: every candidate, the rules' plan and the tuned plan, timed on
     * the tuner's inputs at the shape itself; then the three again, interleaved */
    const int repeats = o->repeats > 0 ? o->repeats : 3;
    const int replays = o->tune.replays > 0 ? o->tune.replays : 20;
    int64_t pool_bytes, spread_bytes;
    pool_sizes(&o->tune, &pool_bytes, &spread_bytes);
    tune_pool pool = {0};
    tune_inputs in = {0};
    devbuf ws[3] = {{0}};
    mlajit_tune_candidate cands[MLAJIT_TUNE_MAX_CANDIDATES];
    const int pushed = mlajit_context_enter(ctx);
    sum->worst_pick_error = 0;
    for (int oi = 0; oi < n && rc == MLAJIT_OK; oi++) {
        if (mlajit_now_ms() - t0 >= o->tune.seconds * 1e3) /* the budget covers the tuning step too */
            break;
        const int si = order_of[oi];
        const tune_bucket b = {.spec = shapes[si].spec, .shape = shapes[si].shape};
        int n_c = 0;
        if ((rc = pool_get(ctx, &b, pool_bytes, spread_bytes, &pool, &o->tune)) ||
            (rc = inputs_make(ctx, &b, &pool, &in, 5000 + (uint64_t)si)) ||
            (rc = mlajit_tune_candidates(&b.spec, &b.shape, ctx->sm_count > 0 ? ctx->sm_count : MLAJIT_DEFAULT_SM_COUNT,
                                         cands, MLAJIT_TUNE_MAX_CANDIDATES, &n_c)))
            break;
        int best;
        double best_time = 0, med[3], spread;
        mlajit_plan_outline outl[3];
        if ((rc = sweep_best(ctx, &b, cands, n_c, &in, replays, &o->tune, &best, &best_time)) ||
            (rc = sweep_repeats(ctx, &b, &cands[best], &in, ws, full_replays(best_time, in.calls, replays),
                                repeats > 16 ? 16 : repeats, outl, med, &spread)))
            break;
        /* the tuned plan as carried to the shape (its kernel and split count),
         * checked on a small case at the shape's topk, unless it is the best
         * candidate's, which sweep_best checked there already */
        mlajit_tune_candidate tuned = {.grid_splits = outl[1].num_splits};
        snprintf(tuned.kernel, sizeof tuned.kernel, "%s", outl[1].kernel);
        const int checked = tuned.grid_splits == cands[best].grid_splits && !strcmp(tuned.kernel, cands[best].kernel);
        int tuned_pass = 1;
        char why[200] = "";
        if (!o->tune.skip_check && !checked &&
            (rc = check_candidate(ctx, &b, &tuned, &tuned_pass, why, sizeof why)))
            break;
        if (!tuned_pass) {
            sum->tuned_failed++;
            say(&o->tune, "sweep: the tuned plan %s in %d splits FAILED the reference check (%s)", outl[1].kernel,
                outl[1].num_splits, why);
        }
        /* the best of the sweep is the fastest of everything timed: a tuned or
         * rules plan that beats the candidate on the repeats counts as the best */
        double best_us = med[2] < med[0] ? med[2] : med[0];
        best_us = med[1] < best_us ? med[1] : best_us;
        const double pick_error = best_us > 0 ? med[1] / best_us - 1 : 0; /* 0: a timer that saw nothing */
        sum->done++;
        sum->within_3pct += pick_error <= 0.03;
        /* the same kernel and split count as the rules' is the rules' plan: two
         * captures of one plan differ by noise alone, however small the spread */
        const int rules_plan = outl[1].num_splits == outl[0].num_splits && !strcmp(outl[1].kernel, outl[0].kernel);
        sum->slower_than_rules += !rules_plan && med[1] > med[0] * (1 + spread);
        if (pick_error > sum->worst_pick_error)
            sum->worst_pick_error = pick_error;
        char line[256];
        mlajit_sweep_shape_format(&shapes[si], line, sizeof line);
        const char *source = mlajit_tactic_source_name(outl[1].tactic);
        say(&o->tune, "sweep: %d/%d %s: tuned %.2f us (%s %s) best %.2f rules %.2f: pick error %+.1f%%, "
            "spread %.1f%%", oi + 1, n, line, med[1], source, outl[1].kernel, best_us, med[0], pick_error * 100,
            spread * 100);
        if (o->tune.json) {
            fprintf(o->tune.json,
                    "{\"model\": \"%s\", \"h_q\": %d, \"b\": %d, \"s_q\": %d, \"topk\": %d, \"extra_topk\": %d, "
                    "\"page_size\": %d, \"extra_page_size\": %d, \"features\": %u, "
                    "\"tactic\": {\"source\": \"%s\", \"kernel\": \"%s\", \"splits\": %d}, "
                    "\"tuned_us\": %.3f, \"best_us\": %.3f, \"rules_us\": %.3f, "
                    "\"best\": {\"kernel\": \"%s\", \"splits\": %d}, \"rules\": {\"kernel\": \"%s\", \"splits\": %d}, "
                    "\"pick_error\": %.4f, \"spread\": %.4f, \"candidates\": %d, \"repeats\": %d, "
                    "\"tuned_check\": \"%s\", \"commit\": \"%s\"}\n",
                    mlajit_spec_desc(&b.spec)->name, b.spec.h_q, b.shape.batch, b.shape.s_q, b.shape.topk,
                    b.shape.extra_topk, b.spec.page_size, b.spec.extra_page_size, b.spec.features, source,
                    outl[1].kernel, outl[1].num_splits, med[1], best_us, med[0], cands[best].kernel,
                    outl[2].num_splits, outl[0].kernel, outl[0].num_splits, pick_error, spread, n_c,
                    repeats > 16 ? 16 : repeats, o->tune.skip_check ? "skipped" : tuned_pass ? "pass" : "fail",
                    o->tune.commit ? o->tune.commit : "unknown");
            fflush(o->tune.json);
        }
    }
    for (int k = 0; k < 3; k++)
        devbuf_free(drv, &ws[k]);
    inputs_free(drv, &in);
    pool_free(drv, &pool);
    mlajit_context_leave(ctx, pushed);
    free(order_of);
    sum->seconds = (mlajit_now_ms() - t0) / 1e3;
    return rc;
}

/* ---- the public entry point ------------------------------------------------------ */

/* A grid list is NULL and 0 (the default) or a list and its count. */
static int check_list(const char *name, const void *values, int count)
{
    if (count < 0 || (count > 0 && !values))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "grid.%s: %d values at %p; allowed a list and its count, or "
                           "NULL and 0 for the default", name, count, values);
    return MLAJIT_OK;
}

/* ... of ints in [lo, hi]. */
static int check_ints(const char *name, const int *values, int count, int lo, int hi)
{
    int rc = check_list(name, values, count);
    for (int i = 0; rc == MLAJIT_OK && i < count; i++)
        if (values[i] < lo || values[i] > hi)
            rc = mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "grid.%s[%d] = %d; allowed %d..%d", name, i, values[i], lo,
                             hi);
    return rc;
}

static int tune_public(mlajit_context *ctx, const mlajit_tune_grid *caller_grid, double seconds,
                       mlajit_tune_summary *sum)
{
    if (!ctx)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "ctx: NULL");
    mlajit_tune_grid local;
    const mlajit_tune_grid *g = caller_grid ? mlajit_abi_in(MLAJIT_ABI_TUNE_GRID, "grid", caller_grid, &local) : NULL;
    if (caller_grid && !g)
        return MLAJIT_ERR_INVALID_ARGUMENT;
    static const mlajit_tune_grid defaults = MLAJIT_TUNE_GRID_INIT;
    if (!g)
        g = &defaults;
    if (!(seconds >= 0 && seconds <= 1e9))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "seconds = %g; allowed 0 (tune nothing) or more", seconds);
    int rc;
    if ((rc = check_ints("head_counts", g->head_counts, g->num_head_counts, 1, MLAJIT_MAX_HEADS)) ||
        (rc = check_ints("page_sizes", g->page_sizes, g->num_page_sizes, 1, MLAJIT_MAX_PAGE_SIZE)) ||
        (rc = check_ints("topks", g->topks, g->num_topks, 1, MLAJIT_MAX_TOPK)) ||
        (rc = check_ints("rows", g->rows, g->num_rows, 1, MLAJIT_MAX_ROWS)) ||
        (rc = check_ints("extra_topks", g->extra_topks, g->num_extra_topks, 0, MLAJIT_MAX_TOPK)) ||
        (rc = check_list("models", g->models, g->num_models)) ||
        (rc = check_list("layouts", g->layouts, g->num_layouts)) ||
        (rc = check_list("feature_sets", g->feature_sets, g->num_feature_sets)))
        return rc;
    for (int i = 0; i < g->num_models; i++)
        if (!mlajit_model_describe(g->models[i]))
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "grid.models[%d] = %d; allowed the mlajit_model values",
                               i, (int)g->models[i]);
    for (int i = 0; i < g->num_layouts; i++)
        if (mlajit_layout_validate(&g->layouts[i]) != MLAJIT_OK)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "grid.layouts[%d]: %s", i, mlajit_last_error());
    for (int i = 0; i < g->num_feature_sets; i++)
        if (g->feature_sets[i] & ~MLAJIT_FEATURE_ALL)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "grid.feature_sets[%d] = %#x; allowed MLAJIT_FEATURE_* "
                               "bits (%#x)", i, g->feature_sets[i], MLAJIT_FEATURE_ALL);
    if (g->extra_page_size < 0 || g->extra_page_size > MLAJIT_MAX_PAGE_SIZE)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "grid.extra_page_size = %d; allowed 0 (64) or 1..%d",
                           g->extra_page_size, MLAJIT_MAX_PAGE_SIZE);
    if (!mlajit_context_driver(ctx))
        return mlajit_fail(MLAJIT_ERR_NO_DEVICE, "mlajit_tune needs a GPU: %s", ctx->no_device_reason);
    if (!ctx->store || !ctx->store_writable)
        return mlajit_fail(MLAJIT_ERR_CACHE, "mlajit_tune stores tactics in the context's writable cache, and this "
                           "context has none (its options' cache_dir, or MLAJIT_CACHE_DIR)");
    mlajit_tune_envelope env = {
        .models = g->models, .num_models = g->num_models, .heads = g->head_counts, .num_heads = g->num_head_counts,
        .pages = g->page_sizes, .num_pages = g->num_page_sizes, .feature_sets = g->feature_sets,
        .num_feature_sets = g->num_feature_sets, .topks = g->topks, .num_topks = g->num_topks, .rows = g->rows,
        .num_rows = g->num_rows, .extra_topks = g->extra_topks, .num_extra_topks = g->num_extra_topks,
        .layouts = g->layouts, .num_layouts = g->num_layouts,
        .extra_page_size = g->extra_page_size,
    };
    mlajit_tune_envelope_defaults(&env);
    const mlajit_tune_options opts = {.seconds = seconds, .log_progress = 1};
    return mlajit_tune_run(ctx, &env, &opts, sum);
}

int mlajit_tune(mlajit_context *ctx, const mlajit_tune_grid *grid, double seconds, mlajit_tune_report *caller_report)
{
    mlajit_clear_error();
    if (caller_report && mlajit_abi_check(MLAJIT_ABI_TUNE_REPORT, "report", caller_report))
        return MLAJIT_ERR_INVALID_ARGUMENT;
    mlajit_tune_summary sum;
    memset(&sum, 0, sizeof sum);
    const int rc = tune_public(ctx, grid, seconds, &sum);
    if (caller_report) {
        mlajit_tune_report r = MLAJIT_TUNE_REPORT_INIT;
        r.buckets = sum.buckets;
        r.buckets_done = sum.buckets_done;
        r.stored = sum.stored;
        r.timed = sum.timed;
        r.dropped = sum.dropped;
        r.pruned = sum.pruned;
        r.failed_checks = sum.failed_checks;
        r.deadline_hit = sum.deadline_hit;
        r.seconds = sum.seconds;
        mlajit_abi_out(MLAJIT_ABI_TUNE_REPORT, caller_report, &r);
    }
    return rc;
}
