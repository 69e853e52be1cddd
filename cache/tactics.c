/* cache/tactics.c - tactic records: buckets, keys, the self-checking value
 * format and their place in the writable store (cache/tactics.h). */
#include "cache/tactics.h"

#include "cache/codec.h"
#include "common/alloc.h"
#include "common/error.h"
#include "mlajit.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The streaming XXH3 state is only declared (and stack-allocatable) with this. */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

const uint8_t mlajit_tactic_key_magic[MLAJIT_TACTIC_MAGIC_BYTES] = {'M', 'L', 'A', 'J', 'I', 'T', 'T', 'K'};
static const char RECORD_MAGIC[8] = {'M', 'L', 'A', 'J', 'I', 'T', 'T', 'R'};
#define PREFIX_BYTES 16u /* magic + version + length: the same in every version */
#define NAME_MAX_LEN (sizeof(((mlajit_gpu_identity *)0)->name) - 1)
#define SPEC_MAX_LEN (sizeof(((mlajit_tactic_record *)0)->spec) - 1)
#define KERNEL_MAX_LEN (sizeof(((mlajit_tactic_record *)0)->kernel) - 1)
#define VERSION_MAX_LEN (sizeof(((mlajit_tactic_record *)0)->version) - 1)
#define RECIPE_MAX_LEN (sizeof(((mlajit_tactic_record *)0)->key_recipe) - 1)
/* Everything but the five strings' bytes. */
#define FIXED_BYTES (PREFIX_BYTES + 5 * 4 + 4 + 4 + 3 * 4 + 4 + 4 + 3 * 8 + 4 + 8 + 8)
#define MAX_BYTES (FIXED_BYTES + NAME_MAX_LEN + SPEC_MAX_LEN + KERNEL_MAX_LEN + VERSION_MAX_LEN + RECIPE_MAX_LEN)
#define MAX_CANDIDATES 1000000

/* ---- the GPU ----------------------------------------------------------------------- */

int mlajit_gpu_clock_class(int clock_khz)
{
    if (clock_khz <= 0)
        return 0;
    return (int)(((long long)clock_khz + 50000) / 100000 * 100);
}

int mlajit_gpu_identity_equal(const mlajit_gpu_identity *a, const mlajit_gpu_identity *b)
{
    return a && b && strcmp(a->name, b->name) == 0 && a->sm_count == b->sm_count &&
           a->clock_class_mhz == b->clock_class_mhz;
}

void mlajit_gpu_identity_describe(const mlajit_gpu_identity *gpu, char *buf, size_t len)
{
    if (gpu->clock_class_mhz)
        snprintf(buf, len, "%s, %d SMs, %d MHz class", gpu->name, gpu->sm_count, gpu->clock_class_mhz);
    else
        snprintf(buf, len, "%s, %d SMs, clocks unknown", gpu->name, gpu->sm_count);
}

/* ---- buckets ------------------------------------------------------------------------ */

static int log2_floor(long long v)
{
    int n = 0;
    while (v > 1) {
        v >>= 1;
        n++;
    }
    return n;
}

static int is_bucket_value(int v) { return v >= 1 && v <= (1 << MLAJIT_TACTIC_MAX_BUCKET_LOG2) && !(v & (v - 1)); }

int mlajit_tactic_bucket_valid(const mlajit_tactic_bucket *b)
{
    return b && is_bucket_value(b->rows) && is_bucket_value(b->topk) &&
           (b->extra_topk == 0 || is_bucket_value(b->extra_topk));
}

int mlajit_tactic_bucket_of(long long rows, long long topk, long long extra_topk, mlajit_tactic_bucket *out)
{
    const long long max = 1ll << MLAJIT_TACTIC_MAX_BUCKET_LOG2;
    if (!out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "tactic bucket: out must not be NULL");
    if (rows < 1 || rows > max)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "tactic bucket: rows (batch x s_q) = %lld; allowed 1..%lld",
                           rows, max);
    if (topk < 1 || topk > max)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "tactic bucket: topk = %lld; allowed 1..%lld", topk, max);
    if (extra_topk < 0 || extra_topk > max)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "tactic bucket: extra_topk = %lld; allowed 0..%lld",
                           extra_topk, max);
    out->rows = 1 << log2_floor(rows);
    out->topk = 1 << log2_floor(topk);
    out->extra_topk = extra_topk ? 1 << log2_floor(extra_topk) : 0;
    return MLAJIT_OK;
}

int mlajit_tactic_bucket_distance(const mlajit_tactic_bucket *shape, const mlajit_tactic_bucket *measured)
{
    if (!mlajit_tactic_bucket_valid(shape) || !mlajit_tactic_bucket_valid(measured))
        return -1;
    if (measured->rows > shape->rows || measured->topk > shape->topk || measured->extra_topk > shape->extra_topk ||
        (measured->extra_topk == 0) != (shape->extra_topk == 0))
        return -1;
    int extra = shape->extra_topk ? log2_floor(shape->extra_topk) - log2_floor(measured->extra_topk) : 0;
    return log2_floor(shape->rows) - log2_floor(measured->rows) + log2_floor(shape->topk) -
           log2_floor(measured->topk) + extra;
}

int mlajit_tactic_bucket_better(const mlajit_tactic_bucket *shape, const mlajit_tactic_bucket *a,
                                const mlajit_tactic_bucket *b)
{
    int da = mlajit_tactic_bucket_distance(shape, a);
    if (da < 0)
        return 0;
    int db = b ? mlajit_tactic_bucket_distance(shape, b) : -1;
    if (db < 0 || da != db)
        return db < 0 || da < db;
    if (a->topk != b->topk)
        return a->topk > b->topk; /* both at most the shape's: the larger is the nearer */
    return a->extra_topk > b->extra_topk;
}

/* ---- records --------------------------------------------------------------------- */

/* Printable ASCII without spaces, 1..max bytes, NUL-terminated within cap. */
static int is_token_field(const char *s, size_t cap, size_t max)
{
    size_t n = strnlen(s, cap);
    if (n == 0 || n > max || n == cap)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~')
            return 0;
    return 1;
}

/* Printable ASCII (spaces allowed: GPU names have them), 1..max bytes. */
static int is_text_field(const char *s, size_t cap, size_t max)
{
    size_t n = strnlen(s, cap);
    if (n == 0 || n > max || n == cap)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < ' ' || s[i] > '~')
            return 0;
    return 1;
}

static int time_ok(double us) { return isfinite(us) && us >= 0 && us < 1e12; }

/* The check behind record_check and decode: status is the code a failure gets. */
static int record_fields_check(const mlajit_tactic_record *r, int status)
{
    const char *bad = NULL;
    if (!is_text_field(r->gpu.name, sizeof r->gpu.name, NAME_MAX_LEN))
        bad = "gpu.name must be 1..127 printable characters";
    else if (r->gpu.sm_count < 1 || r->gpu.sm_count > 65535)
        bad = "gpu.sm_count must be 1..65535";
    else if (r->gpu.clock_class_mhz < 0 || r->gpu.clock_class_mhz > 100000 || r->gpu.clock_class_mhz % 100)
        bad = "gpu.clock_class_mhz must be 0 (unknown) or a multiple of 100 up to 100000";
    else if (!is_token_field(r->spec, sizeof r->spec, SPEC_MAX_LEN))
        bad = "spec must be a spec string of 1..127 characters without spaces";
    else if (!mlajit_tactic_bucket_valid(&r->bucket))
        bad = "bucket must hold powers of two up to 2^30 (extra_topk also 0)";
    else if (!is_token_field(r->kernel, sizeof r->kernel, KERNEL_MAX_LEN))
        bad = "kernel must be a spec string of 1..127 characters without spaces";
    else if (r->num_splits < 0 || r->num_splits > MLAJIT_TACTIC_MAX_SPLITS)
        bad = "num_splits must be 0 (the planner's choice) .. 64";
    else if (r->follows_rules != 0 && r->follows_rules != 1)
        bad = "follows_rules must be 0 or 1";
    else if (r->follows_rules && r->num_splits)
        bad = "a record that follows the rules has num_splits 0 (the planner's)";
    else if (!time_ok(r->tuned_us) || r->tuned_us <= 0)
        bad = "tuned_us must be a finite time above 0";
    else if (!time_ok(r->rules_us) || !time_ok(r->runner_up_us))
        bad = "rules_us and runner_up_us must be finite times, 0 or more";
    else if (r->candidates < 1 || r->candidates > MAX_CANDIDATES)
        bad = "candidates must be 1..1000000";
    else if (!is_token_field(r->version, sizeof r->version, VERSION_MAX_LEN))
        bad = "version must be 1..31 characters without spaces";
    else if (!is_token_field(r->key_recipe, sizeof r->key_recipe, RECIPE_MAX_LEN))
        bad = "key_recipe must be 1..31 characters without spaces";
    if (bad)
        return mlajit_fail(status, "tactic record: %s", bad);
    return MLAJIT_OK;
}

int mlajit_tactic_record_check(const mlajit_tactic_record *r)
{
    if (!r)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "tactic record: NULL");
    return record_fields_check(r, MLAJIT_ERR_INVALID_ARGUMENT);
}

/* ---- keys ------------------------------------------------------------------------- */

static void feed_u32(XXH3_state_t *state, uint32_t v)
{
    uint8_t b[4];
    mlajit_put_u32le(b, v);
    XXH3_128bits_update(state, b, sizeof b);
}

static void feed_string(XXH3_state_t *state, const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    feed_u32(state, (uint32_t)n);
    XXH3_128bits_update(state, s, n);
}

static uint8_t log2_byte(int v) { return (uint8_t)log2_floor(v); }

void mlajit_tactic_key(const mlajit_gpu_identity *gpu, const char *spec, const mlajit_tactic_bucket *bucket,
                       uint8_t key[MLAJIT_TACTIC_KEY_BYTES])
{
    XXH3_state_t state;
    XXH3_128bits_reset(&state);
    feed_string(&state, MLAJIT_TACTIC_KEY_RECIPE, sizeof MLAJIT_TACTIC_KEY_RECIPE);
    feed_string(&state, gpu->name, sizeof gpu->name);
    feed_u32(&state, (uint32_t)gpu->sm_count);
    feed_u32(&state, (uint32_t)gpu->clock_class_mhz);
    feed_string(&state, spec, SPEC_MAX_LEN + 1);
    XXH128_hash_t h = XXH3_128bits_digest(&state);
    mlajit_cache_key digest = {.hi = h.high64, .lo = h.low64};
    memcpy(key, mlajit_tactic_key_magic, MLAJIT_TACTIC_MAGIC_BYTES);
    mlajit_cache_key_to_bytes(&digest, key + MLAJIT_TACTIC_MAGIC_BYTES);
    key[24] = log2_byte(bucket->rows);
    key[25] = log2_byte(bucket->topk);
    key[26] = bucket->extra_topk ? (uint8_t)(1 + log2_byte(bucket->extra_topk)) : 0;
}

void mlajit_tactic_key_of(const mlajit_tactic_record *r, uint8_t key[MLAJIT_TACTIC_KEY_BYTES])
{
    mlajit_tactic_key(&r->gpu, r->spec, &r->bucket, key);
}

/* ---- the value ----------------------------------------------------------------------- */

static void put_double(uint8_t **p, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    mlajit_put_u64le(*p, bits);
    *p += 8;
}

static void put_u32(uint8_t **p, uint32_t v)
{
    mlajit_put_u32le(*p, v);
    *p += 4;
}

int mlajit_tactic_encode(const mlajit_tactic_record *r, void **value, size_t *len)
{
    if (!r || !value || !len)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "tactic encode: record, value and len must not be NULL");
    *value = NULL;
    *len = 0;
    int status = mlajit_tactic_record_check(r);
    if (status != MLAJIT_OK)
        return status;
    const char *strings[] = {r->gpu.name, r->spec, r->kernel, r->version, r->key_recipe};
    size_t total = FIXED_BYTES;
    for (size_t i = 0; i < 5; i++)
        total += strlen(strings[i]);
    uint8_t *out = mlajit_malloc(total);
    if (!out)
        return mlajit_fail_oom("a %zu-byte tactic record", total);
    uint8_t *p = out;
    memcpy(p, RECORD_MAGIC, sizeof RECORD_MAGIC);
    p += sizeof RECORD_MAGIC;
    put_u32(&p, MLAJIT_TACTIC_FORMAT_VERSION);
    put_u32(&p, (uint32_t)total);
    mlajit_put_string(&p, r->gpu.name, strlen(r->gpu.name));
    put_u32(&p, (uint32_t)r->gpu.sm_count);
    put_u32(&p, (uint32_t)r->gpu.clock_class_mhz);
    mlajit_put_string(&p, r->spec, strlen(r->spec));
    put_u32(&p, (uint32_t)r->bucket.rows);
    put_u32(&p, (uint32_t)r->bucket.topk);
    put_u32(&p, (uint32_t)r->bucket.extra_topk);
    mlajit_put_string(&p, r->kernel, strlen(r->kernel));
    put_u32(&p, (uint32_t)r->num_splits);
    put_u32(&p, (uint32_t)r->follows_rules);
    put_double(&p, r->tuned_us);
    put_double(&p, r->rules_us);
    put_double(&p, r->runner_up_us);
    put_u32(&p, (uint32_t)r->candidates);
    mlajit_put_string(&p, r->version, strlen(r->version));
    mlajit_put_string(&p, r->key_recipe, strlen(r->key_recipe));
    mlajit_put_u64le(p, r->created_unix);
    p += 8;
    mlajit_put_u64le(p, mlajit_hash64(out, total - 8));
    *value = out;
    *len = total;
    return MLAJIT_OK;
}

/* A u32 field that must fit an int (a larger one fails the field checks). */
static int as_int(uint32_t v) { return v > (uint32_t)INT32_MAX ? -1 : (int)v; }

int mlajit_tactic_decode(const void *value, size_t len, mlajit_tactic_record *out)
{
    if (!out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "tactic decode: out must not be NULL");
    memset(out, 0, sizeof *out);
    if (!value || len < PREFIX_BYTES)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "tactic record is %zu bytes, shorter than its %u-byte prefix",
                           value ? len : 0, PREFIX_BYTES);
    const uint8_t *bytes = value;
    if (memcmp(bytes, RECORD_MAGIC, sizeof RECORD_MAGIC) != 0)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "tactic record has a bad magic (expected \"MLAJITTR\")");
    uint32_t version = mlajit_get_u32le(bytes + 8), total = mlajit_get_u32le(bytes + 12);
    if (total != len)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "tactic record says it is %" PRIu32 " bytes but %zu are stored "
                           "(truncated or extended)", total, len);
    uint64_t stored = mlajit_get_u64le(bytes + len - 8), actual = mlajit_hash64(bytes, len - 8);
    if (len < PREFIX_BYTES + 8 || stored != actual)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "tactic record checksum mismatch (stored %016" PRIx64
                           ", computed %016" PRIx64 ")", stored, actual);
    if (version != MLAJIT_TACTIC_FORMAT_VERSION)
        return mlajit_fail(MLAJIT_CACHE_STALE, "tactic record has format version %" PRIu32 " (written by %s mlajit); "
                           "this build reads version %u",
                           version, version < MLAJIT_TACTIC_FORMAT_VERSION ? "an older" : "a newer",
                           MLAJIT_TACTIC_FORMAT_VERSION);
    if (len < FIXED_BYTES || len > MAX_BYTES)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "tactic record is %zu bytes; a version-%u record is %zu..%zu", len,
                           MLAJIT_TACTIC_FORMAT_VERSION, (size_t)FIXED_BYTES, (size_t)MAX_BYTES);

    mlajit_tactic_record r;
    memset(&r, 0, sizeof r);
    mlajit_byte_reader rd = {.bytes = bytes, .pos = PREFIX_BYTES, .end = len - 8};
    uint32_t u[9] = {0};
    uint64_t bits[3] = {0};
    int status = mlajit_reader_string(&rd, "gpu name", r.gpu.name, NAME_MAX_LEN);
    int fixed = status == MLAJIT_OK && mlajit_reader_u32(&rd, &u[0]) && mlajit_reader_u32(&rd, &u[1]);
    if (fixed)
        status = mlajit_reader_string(&rd, "spec", r.spec, SPEC_MAX_LEN);
    fixed = fixed && status == MLAJIT_OK && mlajit_reader_u32(&rd, &u[2]) && mlajit_reader_u32(&rd, &u[3]) &&
            mlajit_reader_u32(&rd, &u[4]);
    if (fixed)
        status = mlajit_reader_string(&rd, "kernel", r.kernel, KERNEL_MAX_LEN);
    fixed = fixed && status == MLAJIT_OK && mlajit_reader_u32(&rd, &u[5]) && mlajit_reader_u32(&rd, &u[7]) &&
            mlajit_reader_u64(&rd, &bits[0]) &&
            mlajit_reader_u64(&rd, &bits[1]) && mlajit_reader_u64(&rd, &bits[2]) && mlajit_reader_u32(&rd, &u[6]);
    if (fixed)
        status = mlajit_reader_string(&rd, "version", r.version, VERSION_MAX_LEN);
    if (fixed && status == MLAJIT_OK)
        status = mlajit_reader_string(&rd, "key recipe", r.key_recipe, RECIPE_MAX_LEN);
    fixed = fixed && status == MLAJIT_OK && mlajit_reader_u64(&rd, &r.created_unix);
    if (status != MLAJIT_OK)
        return mlajit_fail_prefix(MLAJIT_ERR_CORRUPT, "tactic record: ");
    if (!fixed)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "tactic record ends before its fixed fields");
    if (rd.pos != rd.end)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "tactic record has %zu unexpected bytes before its checksum",
                           rd.end - rd.pos);
    r.gpu.sm_count = as_int(u[0]);
    r.gpu.clock_class_mhz = as_int(u[1]);
    r.bucket.rows = as_int(u[2]);
    r.bucket.topk = as_int(u[3]);
    r.bucket.extra_topk = as_int(u[4]);
    r.num_splits = as_int(u[5]);
    r.follows_rules = as_int(u[7]);
    r.candidates = as_int(u[6]);
    memcpy(&r.tuned_us, &bits[0], sizeof r.tuned_us);
    memcpy(&r.rules_us, &bits[1], sizeof r.rules_us);
    memcpy(&r.runner_up_us, &bits[2], sizeof r.runner_up_us);
    if ((status = record_fields_check(&r, MLAJIT_ERR_CORRUPT)) != MLAJIT_OK)
        return status;
    *out = r;
    return MLAJIT_OK;
}

int mlajit_tactic_decode_keyed(const void *key, size_t key_len, const void *value, size_t len,
                               mlajit_tactic_record *out)
{
    int status = mlajit_tactic_decode(value, len, out);
    if (status != MLAJIT_OK)
        return status;
    if (strcmp(out->key_recipe, MLAJIT_TACTIC_KEY_RECIPE) != 0) {
        char recipe[sizeof out->key_recipe];
        snprintf(recipe, sizeof recipe, "%s", out->key_recipe);
        memset(out, 0, sizeof *out);
        return mlajit_fail(MLAJIT_CACHE_STALE, "tactic record was keyed by %s; this build keys tactics by %s", recipe,
                           MLAJIT_TACTIC_KEY_RECIPE);
    }
    uint8_t want[MLAJIT_TACTIC_KEY_BYTES];
    mlajit_tactic_key_of(out, want);
    if (!key || key_len != sizeof want || memcmp(key, want, sizeof want) != 0) {
        memset(out, 0, sizeof *out);
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "tactic record is filed under another record's key (%zu-byte key)",
                           key ? key_len : 0);
    }
    return MLAJIT_OK;
}

static int record_intact(const void *key, size_t key_len, const void *value, size_t len)
{
    mlajit_tactic_record r;
    return mlajit_tactic_decode_keyed(key, key_len, value, len, &r) == MLAJIT_OK;
}

const mlajit_store_record_kind mlajit_tactic_record_kind = {
    .name = "tactic record", .prefix = mlajit_tactic_key_magic, .prefix_len = MLAJIT_TACTIC_MAGIC_BYTES,
    .key_len = MLAJIT_TACTIC_KEY_BYTES, .intact = record_intact,
};

/* ---- the store ------------------------------------------------------------------ */

int mlajit_tactic_put(mlajit_store *store, const mlajit_tactic_record *records, size_t count)
{
    if (!store || (!records && count))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "tactic put: store and records must not be NULL");
    mlajit_store_record *rows = mlajit_calloc(count ? count : 1, sizeof *rows);
    uint8_t(*keys)[MLAJIT_TACTIC_KEY_BYTES] = mlajit_calloc(count ? count : 1, sizeof *keys);
    int status = rows && keys ? MLAJIT_OK : mlajit_fail_oom("putting %zu tactic records", count);
    for (size_t i = 0; i < count && status == MLAJIT_OK; i++) {
        void *value;
        size_t len;
        if ((status = mlajit_tactic_encode(&records[i], &value, &len)) != MLAJIT_OK) {
            mlajit_fail_prefix(status, "tactic put: record %zu: ", i);
            break;
        }
        mlajit_tactic_key_of(&records[i], keys[i]);
        rows[i] = (mlajit_store_record){.key = keys[i], .key_len = MLAJIT_TACTIC_KEY_BYTES, .value = value,
                                        .len = len};
    }
    if (status == MLAJIT_OK)
        status = mlajit_store_record_put(store, rows, count);
    for (size_t i = 0; rows && i < count; i++)
        free((void *)rows[i].value);
    free(rows);
    free(keys);
    return status;
}

int mlajit_tactic_get(mlajit_store *store, const mlajit_gpu_identity *gpu, const char *spec,
                      const mlajit_tactic_bucket *bucket, mlajit_tactic_record *out)
{
    if (!store || !gpu || !spec || !bucket || !out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "tactic get: store, gpu, spec, bucket and out must be given");
    memset(out, 0, sizeof *out);
    if (!mlajit_tactic_bucket_valid(bucket))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "tactic get: the bucket is not powers of two");
    uint8_t key[MLAJIT_TACTIC_KEY_BYTES];
    mlajit_tactic_key(gpu, spec, bucket, key);
    void *value;
    size_t len;
    int status = mlajit_store_record_get(store, key, sizeof key, &value, &len);
    if (status == MLAJIT_ERR_NOT_FOUND)
        return mlajit_fail(MLAJIT_ERR_NOT_FOUND, "cache %s: no tactic for %s at rows %d, topk %d, extra_topk %d",
                           mlajit_store_dir(store), spec, bucket->rows, bucket->topk, bucket->extra_topk);
    if (status != MLAJIT_OK)
        return status;
    status = mlajit_tactic_decode_keyed(key, sizeof key, value, len, out);
    free(value);
    if (status != MLAJIT_OK)
        return mlajit_fail_prefix(status, "cache %s: ", mlajit_store_dir(store));
    return MLAJIT_OK;
}

void mlajit_tactic_skipped_note(mlajit_tactic_skipped *skipped, int status)
{
    if (!skipped)
        return;
    if (!skipped->damaged && !skipped->stale)
        snprintf(skipped->first, sizeof skipped->first, "%s", mlajit_last_error());
    (*(status == MLAJIT_CACHE_STALE ? &skipped->stale : &skipped->damaged))++;
}

void mlajit_tactic_chooser_offer(mlajit_tactic_chooser *c, const void *key, size_t key_len, const void *value,
                                 size_t len)
{
    mlajit_tactic_record r;
    int status = mlajit_tactic_decode_keyed(key, key_len, value, len, &r);
    if (status == MLAJIT_OK && (!mlajit_gpu_identity_equal(&r.gpu, c->gpu) || strcmp(r.spec, c->spec) != 0))
        status = mlajit_fail(MLAJIT_ERR_CORRUPT, "tactic record for %s on %s sits among another GPU's or spec's "
                             "(a digest collision or a misfiled record)", r.spec, r.gpu.name);
    if (status == MLAJIT_OK && c->accept && c->accept(&r, c->accept_arg) != 0)
        status = mlajit_fail_prefix(MLAJIT_ERR_CORRUPT, "tactic record at rows %d, topk %d, extra_topk %d: ",
                                    r.bucket.rows, r.bucket.topk, r.bucket.extra_topk);
    if (status != MLAJIT_OK) {
        mlajit_tactic_skipped_note(c->skipped, status);
        return;
    }
    if (mlajit_tactic_bucket_better(c->shape, &r.bucket, c->found ? &c->best.bucket : NULL)) {
        c->best = r;
        c->found = 1;
    }
}

static int nearest_visit(const void *key, size_t key_len, const void *value, size_t len, void *arg)
{
    mlajit_tactic_chooser_offer(arg, key, key_len, value, len);
    return 0;
}

/* The chooser's arguments, checked, and the key whose first bytes are the scan's prefix. */
int mlajit_tactic_chooser_start(mlajit_tactic_chooser *c, uint8_t key[MLAJIT_TACTIC_KEY_BYTES])
{
    if (!c || !c->gpu || !c->spec || !c->shape)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "tactic look-up: gpu, spec and shape must be given");
    c->found = 0;
    memset(&c->best, 0, sizeof c->best);
    if (!mlajit_tactic_bucket_valid(c->shape))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "tactic look-up: the shape's bucket is not powers of two");
    mlajit_tactic_key(c->gpu, c->spec, c->shape, key);
    return MLAJIT_OK;
}

int mlajit_tactic_chooser_end(const mlajit_tactic_chooser *c, int status, const char *where)
{
    if (status != MLAJIT_OK)
        return status;
    if (!c->found)
        return mlajit_fail(MLAJIT_ERR_NOT_FOUND, "%s: no tactic for %s on %s at or below rows %d, topk %d, "
                           "extra_topk %d", where, c->spec, c->gpu->name, c->shape->rows, c->shape->topk,
                           c->shape->extra_topk);
    mlajit_clear_error();
    return MLAJIT_OK;
}

int mlajit_tactic_nearest(mlajit_store *store, mlajit_tactic_chooser *c)
{
    uint8_t key[MLAJIT_TACTIC_KEY_BYTES];
    int status = store ? mlajit_tactic_chooser_start(c, key)
                       : mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "tactic look-up: store must not be NULL");
    if (status == MLAJIT_OK)
        status = mlajit_store_record_scan(store, key, MLAJIT_TACTIC_PREFIX_BYTES, nearest_visit, c);
    char where[1100];
    snprintf(where, sizeof where, "cache %s", store ? mlajit_store_dir(store) : "");
    return mlajit_tactic_chooser_end(c, status, where);
}

typedef struct foreach_job {
    mlajit_tactic_visit_fn visit;
    void *arg;
} foreach_job;

static int foreach_visit(const void *key, size_t key_len, const void *value, size_t len, void *arg)
{
    foreach_job *j = arg;
    mlajit_tactic_record r;
    int status = mlajit_tactic_decode_keyed(key, key_len, value, len, &r);
    char why[256] = "";
    if (status != MLAJIT_OK)
        snprintf(why, sizeof why, "%s", mlajit_last_error());
    return j->visit(key, key_len, status == MLAJIT_OK ? &r : NULL, status, why, j->arg);
}

int mlajit_tactic_foreach(mlajit_store *store, mlajit_tactic_visit_fn visit, void *arg)
{
    if (!store || !visit)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "tactic foreach: store and visit must not be NULL");
    foreach_job j = {.visit = visit, .arg = arg};
    return mlajit_store_record_scan(store, mlajit_tactic_key_magic, MLAJIT_TACTIC_MAGIC_BYTES, foreach_visit, &j);
}

int mlajit_tactic_delete(mlajit_store *store, const uint8_t *const *keys, const size_t *key_lens, size_t count,
                         size_t *deleted)
{
    if (deleted)
        *deleted = 0;
    if (!store || (!keys && count))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "tactic delete: store and keys must not be NULL");
    mlajit_store_record *rows = mlajit_calloc(count ? count : 1, sizeof *rows);
    if (!rows)
        return mlajit_fail_oom("deleting %zu tactic records", count);
    for (size_t i = 0; i < count; i++)
        rows[i] = (mlajit_store_record){.key = keys[i], .key_len = key_lens ? key_lens[i] : MLAJIT_TACTIC_KEY_BYTES};
    int status = mlajit_store_record_delete(store, rows, count, deleted);
    free(rows);
    return status;
}
