/* Tactics at run time: the context's GPU identity, the look-up a plan makes
 * (the packs, then the cache, for the nearest measured bucket on this GPU) and
 * the store a tuner makes. The records, keys and buckets are cache/tactics.h's. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/alloc.h"
#include "common/error.h"
#include "runtime/runtime.h"

void mlajit_context_gpu_set(mlajit_context *ctx, int clock_khz)
{
    memset(&ctx->gpu, 0, sizeof ctx->gpu);
    snprintf(ctx->gpu.name, sizeof ctx->gpu.name, "%s", ctx->device_name);
    ctx->gpu.sm_count = ctx->sm_count;
    ctx->gpu.clock_class_mhz = mlajit_gpu_clock_class(clock_khz);
}

int mlajit_context_gpu(const mlajit_context *ctx, mlajit_gpu_identity *out)
{
    memset(out, 0, sizeof *out);
    if (!ctx->drv)
        return mlajit_fail(MLAJIT_ERR_NO_DEVICE, "tactics are measurements of a GPU, and this context has none: %s",
                           ctx->no_device_reason);
    *out = ctx->gpu;
    return MLAJIT_OK;
}

/* The key's spec string and the shape's bucket. */
static int tactic_key_parts(const mlajit_context *ctx, const mlajit_kernel_spec *spec,
                            const mlajit_decode_shape *shape, char spec_string[128], mlajit_tactic_bucket *bucket)
{
    int rc = mlajit_spec_string_as_asked(spec, ctx->arch, spec_string, 128);
    if (rc)
        return rc;
    rc = mlajit_tactic_bucket_of((long long)shape->batch * shape->s_q, shape->topk, shape->extra_topk, bucket);
    return rc ? mlajit_fail_prefix(rc, "shape: ") : MLAJIT_OK;
}

int mlajit_kernel_is_of_spec(const mlajit_kernel_spec *k, const mlajit_kernel_spec *asked)
{
    return mlajit_spec_desc(k) == mlajit_spec_desc(asked) && k->h_q == asked->h_q &&
           k->page_size == asked->page_size && k->extra_page_size == asked->extra_page_size &&
           k->features == asked->features && strcmp(k->arch, asked->arch) == 0;
}

/* MLAJIT_OK when kernel_string names a kernel of the spec asked (arch filled
 * in): mlajit_kernel_is_of_spec. */
static int kernel_of_spec(const char *kernel_string, const mlajit_kernel_spec *asked)
{
    mlajit_kernel_spec k = MLAJIT_KERNEL_SPEC_INIT;
    if (mlajit_spec_parse(kernel_string, &k) != MLAJIT_OK)
        return mlajit_fail_prefix(MLAJIT_ERR_INVALID_ARGUMENT, "kernel: ");
    if (!mlajit_kernel_is_of_spec(&k, asked))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "kernel %s is not a kernel of the spec (another model, head count, page size, extra page "
                           "size, feature set or arch)", kernel_string);
    return MLAJIT_OK;
}

/* The chooser's accept: the record's kernel must be one of the asked spec's. */
static int kernel_accept(const mlajit_tactic_record *r, void *asked)
{
    return kernel_of_spec(r->kernel, asked) != MLAJIT_OK;
}

/* One warning per context for records that cannot be used (they stay until
 * a repair or a collection of the cache removes them, so every look-up would
 * meet them again); they are counted once too. */
static void warn_skipped(mlajit_context *ctx, const char *where, const mlajit_tactic_skipped *skipped)
{
    int n = skipped->damaged + skipped->stale;
    if (!n || atomic_exchange(&ctx->warned_tactics, 1) != 0)
        return;
    atomic_fetch_add(&ctx->corrupt, (uint64_t)skipped->damaged);
    atomic_fetch_add(&ctx->stale, (uint64_t)skipped->stale);
    mlajit_warn("%s: %d tactic record%s failed %s checks and %s not used (%s); plans take the next nearest tactic "
                "or the default rule (a cache's repair, or a collection of damaged records, removes them)",
                where, n, n == 1 ? "" : "s", n == 1 ? "its" : "their", n == 1 ? "is" : "are", skipped->first);
}

/* One layer's answer, taken into *out when it serves better (ties keep the
 * earlier layer). A layer that cannot be read is a warning, not an error; out
 * of memory is the caller's (MLAJIT_ERR_OUT_OF_MEMORY, returned). */
static int consider(mlajit_context *ctx, const char *where, int rc, const mlajit_tactic_chooser *c, int source,
                    int pack_index, mlajit_tactic_match *out)
{
    if (rc == MLAJIT_ERR_OUT_OF_MEMORY)
        return rc;
    warn_skipped(ctx, where, c->skipped);
    if (rc != MLAJIT_OK && rc != MLAJIT_ERR_NOT_FOUND)
        mlajit_warn("%s: reading its tactics failed (%s); plans use the other layers' tactics or the default rule",
                    where, mlajit_last_error());
    if (rc != MLAJIT_OK || !c->found)
        return MLAJIT_OK;
    if (out->found && !mlajit_tactic_bucket_better(&out->shape_bucket, &c->best.bucket, &out->record.bucket))
        return MLAJIT_OK;
    out->found = 1;
    out->record = c->best;
    out->source = source;
    out->pack_index = pack_index;
    return MLAJIT_OK;
}

int mlajit_tactic_lookup(mlajit_context *ctx, const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape,
                         mlajit_tactic_match *out)
{
    if (!ctx || !spec || !shape || !out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "tactic lookup: ctx, spec, shape and out must not be NULL");
    memset(out, 0, sizeof *out);
    out->pack_index = -1;
    int rc = mlajit_spec_validate(spec);
    if (rc)
        return rc;
    if (shape->batch < 0 || shape->s_q < 0 || shape->topk < 1 || shape->extra_topk < 0)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "tactic lookup: shape batch %d, s_q %d, topk %d, extra_topk %d; allowed batch and s_q 0 "
                           "or more, topk 1 or more, extra_topk 0 or more",
                           shape->batch, shape->s_q, shape->topk, shape->extra_topk);
    if (!ctx->drv || (long long)shape->batch * shape->s_q == 0)
        return MLAJIT_OK; /* no GPU measured here, or nothing to plan */
    if ((rc = tactic_key_parts(ctx, spec, shape, out->spec, &out->shape_bucket)))
        return rc;
    mlajit_kernel_spec asked = *spec;
    if (!asked.arch[0])
        snprintf(asked.arch, sizeof asked.arch, "%s", ctx->arch);
    for (int i = 0; i <= ctx->pack_count; i++) {
        int in_pack = i < ctx->pack_count;
        if (!in_pack && !ctx->store)
            break;
        mlajit_tactic_skipped skipped = {0};
        mlajit_tactic_chooser c = {.gpu = &ctx->gpu, .spec = out->spec, .shape = &out->shape_bucket,
                                   .skipped = &skipped, .accept = kernel_accept, .accept_arg = &asked};
        char where[1100];
        if (in_pack) {
            rc = mlajit_pack_tactic_nearest(ctx->packs[i], &c);
            snprintf(where, sizeof where, "pack %s", mlajit_pack_path(ctx->packs[i]));
        } else {
            rc = mlajit_tactic_nearest(ctx->store, &c);
            snprintf(where, sizeof where, "cache %s", ctx->cache_dir);
        }
        if ((rc = consider(ctx, where, rc, &c, in_pack ? MLAJIT_SOURCE_PACK : MLAJIT_SOURCE_DISK, in_pack ? i : -1,
                           out))) {
            memset(out, 0, sizeof *out);
            return rc;
        }
    }
    out->exact = out->found && mlajit_tactic_bucket_distance(&out->shape_bucket, &out->record.bucket) == 0;
    mlajit_clear_error();
    return MLAJIT_OK;
}

/* ---- the memo of plans' look-ups ----------------------------------------------- */

enum { kMemoSlots = 64 };


typedef struct memo_slot {
    int used;
    mlajit_store_stamp stamp;
    mlajit_tactic_match match; /* its spec and shape_bucket are the slot's key */
} memo_slot;

struct mlajit_tactic_memo {
    pthread_mutex_t lock;
    uint64_t generation; /* bumped by each store through the context */
    memo_slot slots[kMemoSlots];
};

static pthread_mutex_t memo_create_lock = PTHREAD_MUTEX_INITIALIZER;

static struct mlajit_tactic_memo *memo_of(mlajit_context *ctx)
{
    struct mlajit_tactic_memo *m = atomic_load(&ctx->tactic_memo);
    if (m)
        return m;
    pthread_mutex_lock(&memo_create_lock);
    if (!(m = atomic_load(&ctx->tactic_memo)) && (m = mlajit_calloc(1, sizeof *m))) {
        pthread_mutex_init(&m->lock, NULL);
        atomic_store(&ctx->tactic_memo, m);
    }
    pthread_mutex_unlock(&memo_create_lock);
    return m;
}

void mlajit_tactic_memo_clear(mlajit_context *ctx)
{
    struct mlajit_tactic_memo *m = ctx ? atomic_load(&ctx->tactic_memo) : NULL;
    if (!m)
        return;
    pthread_mutex_lock(&m->lock);
    for (int i = 0; i < kMemoSlots; i++)
        m->slots[i].used = 0;
    m->generation++;
    pthread_mutex_unlock(&m->lock);
}

void mlajit_tactic_memo_free(mlajit_context *ctx)
{
    struct mlajit_tactic_memo *m = atomic_exchange(&ctx->tactic_memo, NULL);
    if (!m)
        return;
    pthread_mutex_destroy(&m->lock);
    free(m);
}


int mlajit_tactic_lookup_memo(mlajit_context *ctx, const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape,
                              mlajit_tactic_match *out)
{
    if (!ctx || !spec || !shape || !out || !ctx->drv || (long long)shape->batch * shape->s_q == 0)
        return mlajit_tactic_lookup(ctx, spec, shape, out);
    char key_spec[128];
    mlajit_tactic_bucket bucket;
    struct mlajit_tactic_memo *m = memo_of(ctx);
    if (!m || tactic_key_parts(ctx, spec, shape, key_spec, &bucket) != MLAJIT_OK) {
        mlajit_clear_error();
        return mlajit_tactic_lookup(ctx, spec, shape, out); /* says what is wrong */
    }
    uint64_t h = mlajit_hash64(key_spec, strlen(key_spec)) ^ ((uint64_t)bucket.rows * 0x9e3779b97f4a7c15ULL) ^
                 ((uint64_t)bucket.topk * 0xc2b2ae3d27d4eb4fULL) ^ ((uint64_t)bucket.extra_topk * 0x165667b19e3779f9ULL);
    memo_slot *slot = &m->slots[h % kMemoSlots];
    mlajit_store_stamp now;
    mlajit_store_file_stamp(ctx->store, &now);
    pthread_mutex_lock(&m->lock);
    const uint64_t generation = m->generation;
    if (slot->used && mlajit_store_stamp_equal(&slot->stamp, &now) && strcmp(slot->match.spec, key_spec) == 0 &&
        slot->match.shape_bucket.rows == bucket.rows && slot->match.shape_bucket.topk == bucket.topk &&
        slot->match.shape_bucket.extra_topk == bucket.extra_topk) {
        *out = slot->match;
        pthread_mutex_unlock(&m->lock);
        return MLAJIT_OK;
    }
    pthread_mutex_unlock(&m->lock);
    int rc = mlajit_tactic_lookup(ctx, spec, shape, out);
    if (rc != MLAJIT_OK || !mlajit_store_stamp_settled(&now))
        return rc;
    pthread_mutex_lock(&m->lock);
    if (m->generation == generation) { /* no store through the context meanwhile */
        slot->used = 1;
        slot->stamp = now;
        slot->match = *out;
    }
    pthread_mutex_unlock(&m->lock);
    return MLAJIT_OK;
}

int mlajit_tactic_record_make(const mlajit_context *ctx, const mlajit_kernel_spec *spec,
                              const mlajit_decode_shape *shape, const mlajit_tactic_choice *choice,
                              mlajit_tactic_record *out)
{
    if (!ctx || !spec || !shape || !choice || !out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "tactic record: ctx, spec, shape, choice and out must not be NULL");
    memset(out, 0, sizeof *out);
    int rc = mlajit_context_gpu(ctx, &out->gpu);
    if (rc)
        return rc;
    if ((rc = mlajit_spec_validate(spec)) || (rc = tactic_key_parts(ctx, spec, shape, out->spec, &out->bucket)))
        return rc;
    mlajit_kernel_spec asked = *spec, kernel = choice->kernel, resolved = MLAJIT_KERNEL_SPEC_INIT;
    if (!asked.arch[0])
        snprintf(asked.arch, sizeof asked.arch, "%s", ctx->arch);
    if (!kernel.arch[0])
        snprintf(kernel.arch, sizeof kernel.arch, "%s", asked.arch);
    if ((rc = mlajit_spec_resolve(&kernel, &resolved)) ||
        (rc = mlajit_spec_string(&resolved, out->kernel, sizeof out->kernel)))
        return mlajit_fail_prefix(rc, "choice.kernel: ");
    if ((rc = kernel_of_spec(out->kernel, &asked)))
        return mlajit_fail_prefix(rc, "choice.kernel for %s: ", out->spec);
    out->num_splits = choice->num_splits;
    out->follows_rules = choice->follows_rules;
    out->tuned_us = choice->tuned_us;
    out->rules_us = choice->rules_us;
    out->runner_up_us = choice->runner_up_us;
    out->candidates = choice->candidates;
    snprintf(out->version, sizeof out->version, "%s", MLAJIT_VERSION_STRING);
    snprintf(out->key_recipe, sizeof out->key_recipe, "%s", MLAJIT_TACTIC_KEY_RECIPE);
    out->created_unix = (uint64_t)time(NULL);
    return mlajit_tactic_record_check(out);
}

int mlajit_tactic_store(mlajit_context *ctx, const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape,
                        const mlajit_tactic_choice *choice)
{
    mlajit_tactic_record r;
    int rc = mlajit_tactic_record_make(ctx, spec, shape, choice, &r);
    if (rc)
        return rc;
    if (!ctx->store || !ctx->store_writable)
        return mlajit_fail(MLAJIT_ERR_CACHE, "no writable disk cache to store the tactic for %s in (%s)", r.spec,
                           ctx->cache_dir[0] ? ctx->cache_dir : "the cache is off");
    rc = mlajit_tactic_put(ctx->store, &r, 1);
    mlajit_tactic_memo_clear(ctx);
    return rc;
}
