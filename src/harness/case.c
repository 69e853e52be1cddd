/* Decode cases on disk: a directory with case.json and raw little-endian arrays,
 * the golden cases' format (tests/golden/README.md).
 *
 * Loading treats the directory as untrusted: every number is range-checked,
 * every file name must be a plain name inside the directory, and every file's
 * size is compared with what its shape implies before anything is allocated, so
 * a damaged case gives an error that names the file and the sizes, never a crash
 * or a huge allocation. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <fcntl.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/error.h"
#include "common/file.h"
#include "harness/harness.h"
#include "codegen/codegen.h"
#include "harness/json.h"

#define CASE_JSON_NAME "case.json"
#define CASE_JSON_MAX_BYTES (1 << 20)
#define MAX_FILE_NAME 255
#define MAX_PATH_BYTES 4096
#define MAX_ARRAY_BYTES ((int64_t)1 << 40) /* sanity bound before any size product overflows */
#define MAX_NUM_PAGES ((int64_t)1 << 31)

/* ---- small helpers ---------------------------------------------------------- */

/* malloc that returns a valid pointer for zero bytes too, so "present but
 * empty" (b = 0) stays distinguishable from "absent" (NULL). */
static void *alloc_bytes(size_t bytes) { return mlajit_malloc(bytes ? bytes : 1); }

static int join_path(char *buf, size_t len, const char *dir, const char *name)
{
    int n = snprintf(buf, len, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= len)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "path '%s/%s' is longer than %zu bytes", dir, name, len - 1);
    return MLAJIT_OK;
}

/* Multiply non-negative sizes, failing instead of overflowing. */
static int checked_mul(int64_t a, int64_t b, int64_t *out)
{
    if (a < 0 || b < 0 || (a != 0 && b > MAX_ARRAY_BYTES / a))
        return -1;
    *out = a * b;
    return 0;
}

/* A file name from case.json must name a file inside the case directory. */
static int check_file_name(const char *name, const char *where)
{
    size_t n = strlen(name);
    if (n == 0 || n > MAX_FILE_NAME)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: %s: file name must have 1..%d characters", where,
                           MAX_FILE_NAME);
    if (strchr(name, '/') || strchr(name, '\\') || strstr(name, ".."))
        return mlajit_fail(MLAJIT_ERR_CORRUPT,
                           "case.json: %s: file name '%s' is not allowed; it must be a plain name in the case "
                           "directory (no '/', '\\' or '..')",
                           where, name);
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        if (*c < 0x20 || *c == 0x7F)
            return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: %s: file name has a control character", where);
    return MLAJIT_OK;
}

/* Open a case file for reading: a FIFO or a device is refused at once (open
 * with O_NONBLOCK, then fstat), never waited on. NULL with a message. */
static FILE *open_case_file(const char *path, const char *label, struct stat *sb)
{
    int fd;
    if (mlajit_open_regular(path, O_RDONLY, 0, label, &fd, sb) != MLAJIT_OK)
        return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        mlajit_fail(MLAJIT_ERR_IO, "%s: cannot read: %s", label, strerror(errno));
        close(fd);
    }
    return f;
}

/* Read a whole file of exactly `bytes` bytes (checked before allocating). */
static int read_exact(const char *dir, const char *name, int64_t bytes, const char *what, void **out)
{
    char path[MAX_PATH_BYTES];
    int st = join_path(path, sizeof path, dir, name);
    if (st != MLAJIT_OK)
        return st;
    char label[320];
    snprintf(label, sizeof label, "%s (%s)", name, what);
    struct stat sb;
    FILE *f = open_case_file(path, label, &sb);
    if (!f)
        return MLAJIT_ERR_IO;
    if ((int64_t)sb.st_size != bytes) {
        fclose(f);
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "%s (%s) has %lld bytes; expected %lld", name, what,
                           (long long)sb.st_size, (long long)bytes);
    }
    void *data = alloc_bytes((size_t)bytes);
    if (!data) {
        fclose(f);
        return mlajit_fail_oom("%s (%lld bytes)", name, (long long)bytes);
    }
    size_t got = bytes ? fread(data, 1, (size_t)bytes, f) : 0;
    int err = ferror(f);
    fclose(f);
    if (got != (size_t)bytes || err) {
        free(data);
        return mlajit_fail(MLAJIT_ERR_IO, "reading %s (%s): got %zu of %lld bytes", name, what, got,
                           (long long)bytes);
    }
    *out = data;
    return MLAJIT_OK;
}

static const char *json_type_name(const mlajit_json *v)
{
    if (!v)
        return "missing";
    switch (v->type) {
    case MLAJIT_JSON_NULL: return "null";
    case MLAJIT_JSON_BOOL: return "a boolean";
    case MLAJIT_JSON_NUMBER: return "a number";
    case MLAJIT_JSON_STRING: return "a string";
    case MLAJIT_JSON_ARRAY: return "an array";
    case MLAJIT_JSON_OBJECT: return "an object";
    }
    return "?";
}

/* An integer member in [lo, hi]; `where` names it in messages ("kv.num_blocks"). */
static int get_int(const mlajit_json *obj, const char *key, int64_t lo, int64_t hi, const char *where, int64_t *out)
{
    const mlajit_json *v = mlajit_json_get(obj, key);
    int64_t x;
    if (!v || v->type != MLAJIT_JSON_NUMBER || mlajit_json_int64(v, &x) != 0)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: %s must be an integer in %lld..%lld; it is %s%s%s",
                           where, (long long)lo, (long long)hi, json_type_name(v),
                           v && v->type == MLAJIT_JSON_NUMBER ? " " : "",
                           v && v->type == MLAJIT_JSON_NUMBER ? v->text : "");
    if (x < lo || x > hi)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: %s is %lld; allowed %lld..%lld", where, (long long)x,
                           (long long)lo, (long long)hi);
    *out = x;
    return MLAJIT_OK;
}

static int get_file(const mlajit_json *obj, const char *key, const char *where, const char **out)
{
    const mlajit_json *v = mlajit_json_get(obj, key);
    if (!v || v->type != MLAJIT_JSON_STRING)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: %s must be a file name (a string); it is %s", where,
                           json_type_name(v));
    int st = check_file_name(v->text, where);
    if (st != MLAJIT_OK)
        return st;
    *out = v->text;
    return MLAJIT_OK;
}

/* A shape member: an array of n integers. expect[k] >= 0 demands that value;
 * expect[k] < 0 accepts any value in 0..INT32_MAX. */
static int get_shape(const mlajit_json *obj, const char *key, const char *where, int n, const int64_t *expect,
                     int64_t *dims)
{
    const mlajit_json *v = mlajit_json_get(obj, key);
    if (!v || v->type != MLAJIT_JSON_ARRAY || v->count != (size_t)n)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: %s must be an array of %d integers", where, n);
    for (int k = 0; k < n; k++) {
        int64_t x;
        if (mlajit_json_int64(&v->items[k], &x) != 0 || x < 0 || x > INT32_MAX)
            return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: %s[%d] must be an integer in 0..%d", where, k,
                               INT32_MAX);
        if (expect[k] >= 0 && x != expect[k])
            return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: %s[%d] is %lld; expected %lld", where, k,
                               (long long)x, (long long)expect[k]);
        dims[k] = x;
    }
    return MLAJIT_OK;
}

static int64_t shape_elements(const int64_t *dims, int n)
{
    int64_t count = 1;
    for (int k = 0; k < n; k++)
        if (checked_mul(count, dims[k], &count) != 0)
            return -1;
    return count;
}

/* An optional member: absent and null mean "not there". Anything else must be an
 * object. Returns MLAJIT_OK with *out NULL when absent. */
static int get_optional_object(const mlajit_json *root, const char *key, const mlajit_json **out)
{
    const mlajit_json *v = mlajit_json_get(root, key);
    *out = NULL;
    if (mlajit_json_is_null(v))
        return MLAJIT_OK;
    if (v->type != MLAJIT_JSON_OBJECT)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: %s must be an object or null; it is %s", key,
                           json_type_name(v));
    *out = v;
    return MLAJIT_OK;
}

/* An array member {file, shape}: checks the shape against expect, then reads the
 * file, whose size must be elements * elem_bytes. dims may be NULL. */
static int load_array(const char *dir, const mlajit_json *obj, const char *where, int n, const int64_t *expect,
                      int64_t elem_bytes, int64_t *dims, void **out)
{
    int64_t local_dims[4];
    if (!dims)
        dims = local_dims;
    char field[64];
    const char *file;
    snprintf(field, sizeof field, "%s.file", where);
    int st = get_file(obj, "file", field, &file);
    if (st != MLAJIT_OK)
        return st;
    snprintf(field, sizeof field, "%s.shape", where);
    st = get_shape(obj, "shape", field, n, expect, dims);
    if (st != MLAJIT_OK)
        return st;
    int64_t bytes;
    int64_t elements = shape_elements(dims, n);
    if (elements < 0 || checked_mul(elements, elem_bytes, &bytes) != 0)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: %s.shape is too large", where);
    return read_exact(dir, file, bytes, where, out);
}

static int load_cache(const char *dir, const mlajit_json *obj, const char *where, const mlajit_model_desc *d,
                      mlajit_case_cache *cache)
{
    char field[64];
    int64_t page_size, num_pages, stride;
    snprintf(field, sizeof field, "%s.page_block_size", where);
    int st = get_int(obj, "page_block_size", 1, MLAJIT_MAX_PAGE_SIZE, field, &page_size);
    if (st != MLAJIT_OK)
        return st;
    snprintf(field, sizeof field, "%s.num_blocks", where);
    st = get_int(obj, "num_blocks", 1, MAX_NUM_PAGES / page_size, field, &num_pages);
    if (st != MLAJIT_OK)
        return st;
    const int64_t min_stride = page_size * d->bytes_per_token;
    snprintf(field, sizeof field, "%s.block_stride_bytes", where);
    st = get_int(obj, "block_stride_bytes", min_stride, MAX_ARRAY_BYTES, field, &stride);
    if (st != MLAJIT_OK)
        return st;
    int64_t bytes;
    if (checked_mul(num_pages, stride, &bytes) != 0)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: %s: num_blocks %lld x block_stride_bytes %lld is too large",
                           where, (long long)num_pages, (long long)stride);

    cache->page_size = (int)page_size;
    cache->num_pages = num_pages;
    cache->page_stride = stride;

    const char *file;
    snprintf(field, sizeof field, "%s.file", where);
    st = get_file(obj, "file", field, &file);
    if (st != MLAJIT_OK)
        return st;
    char what[128];
    snprintf(what, sizeof what, "%s: num_blocks %lld x block_stride_bytes %lld", where, (long long)num_pages,
             (long long)stride);
    st = read_exact(dir, file, bytes, what, (void **)&cache->bytes);
    if (st != MLAJIT_OK)
        return st;

    const mlajit_json *src = mlajit_json_get(obj, "source_bf16");
    if (mlajit_json_is_null(src))
        return MLAJIT_OK;
    snprintf(field, sizeof field, "%s.source_bf16", where);
    st = get_file(obj, "source_bf16", field, &file);
    if (st != MLAJIT_OK)
        return st;
    int64_t src_bytes;
    if (checked_mul(num_pages * page_size, (int64_t)d->d_qk * 2, &src_bytes) != 0)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: %s is too large", field);
    snprintf(what, sizeof what, "%s: bf16 [%lld, %lld, %d]", field, (long long)num_pages, (long long)page_size,
             d->d_qk);
    return read_exact(dir, file, src_bytes, what, (void **)&cache->source_bf16);
}

static int read_case_json(const char *dir, mlajit_json **root)
{
    char path[MAX_PATH_BYTES];
    int st = join_path(path, sizeof path, dir, CASE_JSON_NAME);
    if (st != MLAJIT_OK)
        return st;
    struct stat sb;
    FILE *f = open_case_file(path, path, &sb);
    if (!f)
        return MLAJIT_ERR_IO;
    char *text = mlajit_malloc(CASE_JSON_MAX_BYTES + 1);
    if (!text) {
        fclose(f);
        return mlajit_fail_oom("reading %s", path);
    }
    size_t len = fread(text, 1, CASE_JSON_MAX_BYTES + 1, f);
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(text);
        return mlajit_fail(MLAJIT_ERR_IO, "reading %s failed", path);
    }
    if (len > CASE_JSON_MAX_BYTES) {
        free(text);
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "%s is larger than %d bytes", path, CASE_JSON_MAX_BYTES);
    }
    char msg[256];
    int parsed = mlajit_json_parse(text, len, root, msg, sizeof msg);
    free(text);
    if (parsed == -2)
        return mlajit_fail_oom("parsing %s", path);
    if (parsed != 0)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json is not valid JSON: %s", msg);
    if ((*root)->type != MLAJIT_JSON_OBJECT) {
        mlajit_json_free(*root);
        *root = NULL;
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json must hold an object; it holds %s", json_type_name(*root));
    }
    return MLAJIT_OK;
}

/* ---- load ------------------------------------------------------------------- */

static int load_from_json(const char *dir, const mlajit_json *root, mlajit_case *c)
{
    const mlajit_json *model = mlajit_json_get(root, "model");
    if (!model || model->type != MLAJIT_JSON_STRING)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: model must be a string (" MLAJIT_MODEL_NAMES ", custom); it is %s",
                           json_type_name(model));
    if (strcmp(model->text, "custom") == 0) {
        /* a layout described at run time: "layout" holds it (its canonical string, or an object of its keys) */
        c->model = MLAJIT_MODEL_CUSTOM;
        int rc = mlajit_layout_from_json(mlajit_json_get(root, "layout"), &c->layout);
        if (rc)
            return mlajit_fail_prefix(MLAJIT_ERR_CORRUPT, "case.json: model custom: ");
    } else if (mlajit_model_from_name(model->text, &c->model) != MLAJIT_OK) {
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: model '%s' is unknown; allowed: " MLAJIT_MODEL_NAMES ", custom (with a layout)",
                           model->text);
    }
    const mlajit_model_desc *d = mlajit_case_desc(c);
    if (!d)
        return mlajit_fail_oom("the case's layout");

    /* The geometry stated in the file must be the model's. */
    const struct {
        const char *key;
        int value;
    } fixed[] = {{"d_qk", d->d_qk}, {"d_v", d->d_v}, {"bytes_per_token", d->bytes_per_token}};
    int64_t x;
    int st;
    for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; k++) {
        if (get_int(root, fixed[k].key, fixed[k].value, fixed[k].value, fixed[k].key, &x) != MLAJIT_OK)
            return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: %s must be %d for model %s", fixed[k].key,
                               fixed[k].value, d->name);
    }

    if ((st = get_int(root, "b", 0, MLAJIT_MAX_BATCH, "b", &x)) != MLAJIT_OK)
        return st;
    c->b = (int)x;
    if ((st = get_int(root, "s_q", 0, MLAJIT_MAX_SQ, "s_q", &x)) != MLAJIT_OK)
        return st;
    c->s_q = (int)x;
    if ((int64_t)c->b * c->s_q > MLAJIT_MAX_ROWS)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: b x s_q = %d x %d rows; allowed at most %d", c->b, c->s_q,
                           MLAJIT_MAX_ROWS);
    if ((st = get_int(root, "h_q", 1, MLAJIT_MAX_HEADS, "h_q", &x)) != MLAJIT_OK)
        return st;
    c->h_q = (int)x;

    const mlajit_json *scale = mlajit_json_get(root, "sm_scale");
    if (!scale || scale->type != MLAJIT_JSON_NUMBER || !isfinite(scale->number) || scale->number <= 0.0)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: sm_scale must be a finite number > 0");
    c->sm_scale = scale->number;

    const mlajit_json *seed = mlajit_json_get(root, "seed");
    if (!mlajit_json_is_null(seed) && mlajit_json_uint64(seed, &c->seed) != 0)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: seed must be an integer in 0..2^64-1 or null");

    const int64_t b = c->b, s_q = c->s_q, h_q = c->h_q;

    /* main cache, indices, topk_length */
    const mlajit_json *kv, *obj;
    if ((st = get_optional_object(root, "kv", &kv)) != MLAJIT_OK)
        return st;
    if (!kv)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: kv is missing");
    if ((st = load_cache(dir, kv, "kv", d, &c->kv)) != MLAJIT_OK)
        return st;

    int64_t dims[4];
    if ((st = get_optional_object(root, "indices", &obj)) != MLAJIT_OK)
        return st;
    if (!obj)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: indices is missing");
    const int64_t idx_expect[3] = {b, s_q, -1};
    /* topk is read from the shape first so its range is checked before any read */
    if ((st = get_shape(obj, "shape", "indices.shape", 3, idx_expect, dims)) != MLAJIT_OK)
        return st;
    if (dims[2] < 1 || dims[2] > MLAJIT_MAX_TOPK)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: indices.shape[2] (topk) is %lld; allowed 1..%d",
                           (long long)dims[2], MLAJIT_MAX_TOPK);
    c->topk = (int)dims[2];
    if ((st = load_array(dir, obj, "indices", 3, idx_expect, 4, NULL, (void **)&c->indices)) != MLAJIT_OK)
        return st;

    const int64_t per_row[1] = {b};
    if ((st = get_optional_object(root, "topk_length", &obj)) != MLAJIT_OK)
        return st;
    if (obj && (st = load_array(dir, obj, "topk_length", 1, per_row, 4, NULL, (void **)&c->topk_length)) != MLAJIT_OK)
        return st;

    /* extra cache */
    const mlajit_json *extra_kv, *extra_indices, *extra_len;
    if ((st = get_optional_object(root, "extra_kv", &extra_kv)) != MLAJIT_OK ||
        (st = get_optional_object(root, "extra_indices", &extra_indices)) != MLAJIT_OK ||
        (st = get_optional_object(root, "extra_topk_length", &extra_len)) != MLAJIT_OK)
        return st;
    if (!extra_kv != !extra_indices)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: extra_kv and extra_indices must be given together");
    if (extra_len && !extra_kv)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: extra_topk_length needs extra_kv");
    if (extra_kv) {
        c->has_extra = 1;
        if ((st = load_cache(dir, extra_kv, "extra_kv", d, &c->extra_kv)) != MLAJIT_OK)
            return st;
        if ((st = get_shape(extra_indices, "shape", "extra_indices.shape", 3, idx_expect, dims)) != MLAJIT_OK)
            return st;
        if (dims[2] < 1 || dims[2] > MLAJIT_MAX_TOPK)
            return mlajit_fail(MLAJIT_ERR_CORRUPT,
                               "case.json: extra_indices.shape[2] (extra topk) is %lld; allowed 1..%d",
                               (long long)dims[2], MLAJIT_MAX_TOPK);
        c->extra_topk = (int)dims[2];
        if ((st = load_array(dir, extra_indices, "extra_indices", 3, idx_expect, 4, NULL,
                             (void **)&c->extra_indices)) != MLAJIT_OK)
            return st;
        if (extra_len && (st = load_array(dir, extra_len, "extra_topk_length", 1, per_row, 4, NULL,
                                          (void **)&c->extra_topk_length)) != MLAJIT_OK)
            return st;
    }

    /* q and the sink */
    if ((st = get_optional_object(root, "q", &obj)) != MLAJIT_OK)
        return st;
    if (!obj)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: q is missing");
    const int64_t q_expect[4] = {b, s_q, h_q, d->d_qk};
    if ((st = load_array(dir, obj, "q", 4, q_expect, 2, NULL, (void **)&c->q)) != MLAJIT_OK)
        return st;

    const int64_t per_head[1] = {h_q};
    if ((st = get_optional_object(root, "attn_sink", &obj)) != MLAJIT_OK)
        return st;
    if (obj && (st = load_array(dir, obj, "attn_sink", 1, per_head, 4, NULL, (void **)&c->attn_sink)) != MLAJIT_OK)
        return st;

    /* expected result and FlashMLA's own output */
    const int64_t out_expect[4] = {b, s_q, h_q, d->d_v};
    const int64_t lse_expect[3] = {b, s_q, h_q};
    const int64_t out_count = b * s_q * h_q * d->d_v, lse_count = b * s_q * h_q;
    const char *file;
    if ((st = get_optional_object(root, "expected", &obj)) != MLAJIT_OK)
        return st;
    if (obj) {
        const mlajit_json *base = mlajit_json_get(obj, "lse_base");
        if (!mlajit_json_is_null(base) && (base->type != MLAJIT_JSON_STRING || strcmp(base->text, "e") != 0))
            return mlajit_fail(MLAJIT_ERR_CORRUPT, "case.json: expected.lse_base must be \"e\" (natural log)");
        if ((st = get_shape(obj, "out_shape", "expected.out_shape", 4, out_expect, dims)) != MLAJIT_OK ||
            (st = get_shape(obj, "lse_shape", "expected.lse_shape", 3, lse_expect, dims)) != MLAJIT_OK ||
            (st = get_file(obj, "out", "expected.out", &file)) != MLAJIT_OK ||
            (st = read_exact(dir, file, out_count * 4, "expected.out: fp32 [b, s_q, h_q, d_v]",
                             (void **)&c->expected_out)) != MLAJIT_OK ||
            (st = get_file(obj, "lse", "expected.lse", &file)) != MLAJIT_OK ||
            (st = read_exact(dir, file, lse_count * 4, "expected.lse: fp32 [b, s_q, h_q]",
                             (void **)&c->expected_lse)) != MLAJIT_OK)
            return st;
    }
    if ((st = get_optional_object(root, "flashmla", &obj)) != MLAJIT_OK)
        return st;
    if (obj) {
        if ((st = get_file(obj, "out", "flashmla.out", &file)) != MLAJIT_OK ||
            (st = read_exact(dir, file, out_count * 2, "flashmla.out: bf16 [b, s_q, h_q, d_v]",
                             (void **)&c->flashmla_out)) != MLAJIT_OK ||
            (st = get_file(obj, "lse", "flashmla.lse", &file)) != MLAJIT_OK ||
            (st = read_exact(dir, file, lse_count * 4, "flashmla.lse: fp32 [b, s_q, h_q]",
                             (void **)&c->flashmla_lse)) != MLAJIT_OK)
            return st;
    }
    return MLAJIT_OK;
}

int mlajit_case_load(const char *dir, mlajit_case *c)
{
    if (!c)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "case load: the case pointer is NULL");
    memset(c, 0, sizeof *c);
    if (!dir || !*dir)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "case load: the directory is NULL or empty");
    mlajit_json *root = NULL;
    int st = read_case_json(dir, &root);
    if (st == MLAJIT_OK)
        st = load_from_json(dir, root, c);
    mlajit_json_free(root);
    if (st != MLAJIT_OK) {
        mlajit_case_free(c);
        return mlajit_fail_prefix(st, "case %s: ", dir);
    }
    return MLAJIT_OK;
}

void mlajit_case_free(mlajit_case *c)
{
    if (!c)
        return;
    free(c->q);
    free(c->kv.bytes);
    free(c->kv.source_bf16);
    free(c->indices);
    free(c->topk_length);
    free(c->attn_sink);
    free(c->extra_kv.bytes);
    free(c->extra_kv.source_bf16);
    free(c->extra_indices);
    free(c->extra_topk_length);
    free(c->expected_out);
    free(c->expected_lse);
    free(c->flashmla_out);
    free(c->flashmla_lse);
    memset(c, 0, sizeof *c);
}

/* ---- save ------------------------------------------------------------------- */

static int make_dirs(const char *dir)
{
    char path[MAX_PATH_BYTES];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "case save: directory name is empty or too long");
    memcpy(path, dir, n + 1);
    /* create each parent in turn, then the directory itself */
    for (size_t k = 1; k <= n; k++) {
        if (path[k] != '/' && path[k] != '\0')
            continue;
        char saved = path[k];
        path[k] = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return mlajit_fail(MLAJIT_ERR_IO, "case save: cannot create directory %s: %s", path, strerror(errno));
        path[k] = saved;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return mlajit_fail(MLAJIT_ERR_IO, "case save: %s is not a directory", dir);
    return MLAJIT_OK;
}

static int write_file(const char *dir, const char *name, const void *data, size_t bytes)
{
    char path[MAX_PATH_BYTES];
    int st = join_path(path, sizeof path, dir, name);
    if (st != MLAJIT_OK)
        return st;
    FILE *f = fopen(path, "wb");
    if (!f)
        return mlajit_fail(MLAJIT_ERR_IO, "case save: cannot create %s: %s", path, strerror(errno));
    size_t put = bytes ? fwrite(data, 1, bytes, f) : 0;
    int err = ferror(f);
    if (fclose(f) != 0 || err || put != bytes)
        return mlajit_fail(MLAJIT_ERR_IO, "case save: writing %s failed", path);
    return MLAJIT_OK;
}

static int check_savable(const mlajit_case *c, const mlajit_model_desc *d)
{
    if (!d)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "case save: model %d is unknown (or its layout is invalid)",
                           (int)c->model);
    if (c->b < 0 || c->b > MLAJIT_MAX_BATCH || c->s_q < 0 || c->s_q > MLAJIT_MAX_SQ ||
        (int64_t)c->b * c->s_q > MLAJIT_MAX_ROWS || c->h_q < 1 || c->h_q > MLAJIT_MAX_HEADS)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "case save: b %d, s_q %d or h_q %d out of range", c->b, c->s_q,
                           c->h_q);
    if (c->topk < 1 || c->topk > MLAJIT_MAX_TOPK || !c->indices || !c->q)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "case save: topk %d out of range, or q / indices missing",
                           c->topk);
    if (!c->kv.bytes || c->kv.num_pages < 1 || c->kv.page_size < 1 ||
        c->kv.page_stride < (int64_t)c->kv.page_size * d->bytes_per_token)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "case save: the kv cache is missing or malformed");
    if (c->has_extra &&
        (c->extra_topk < 1 || c->extra_topk > MLAJIT_MAX_TOPK || !c->extra_indices || !c->extra_kv.bytes ||
         c->extra_kv.num_pages < 1 || c->extra_kv.page_size < 1 ||
         c->extra_kv.page_stride < (int64_t)c->extra_kv.page_size * d->bytes_per_token))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "case save: the extra cache is missing or malformed");
    if (!isfinite(c->sm_scale) || c->sm_scale <= 0.0)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "case save: sm_scale %g must be finite and > 0", c->sm_scale);
    return MLAJIT_OK;
}

static void write_array_ref(mlajit_json_writer *w, const char *key, const char *file, const int64_t *dims, int n)
{
    mlajit_json_begin_object(w, key);
    mlajit_json_write_string(w, "file", file);
    mlajit_json_write_shape(w, "shape", dims, n);
    mlajit_json_end(w);
}

static void write_cache_ref(mlajit_json_writer *w, const char *key, const char *file, const char *source_file,
                            const mlajit_case_cache *cache)
{
    mlajit_json_begin_object(w, key);
    mlajit_json_write_string(w, "file", file);
    if (cache->source_bf16)
        mlajit_json_write_string(w, "source_bf16", source_file);
    else
        mlajit_json_write_null(w, "source_bf16");
    mlajit_json_write_int(w, "num_blocks", cache->num_pages);
    mlajit_json_write_int(w, "page_block_size", cache->page_size);
    mlajit_json_write_int(w, "block_stride_bytes", cache->page_stride);
    mlajit_json_end(w);
}

static int write_cache_files(const char *dir, const mlajit_case_cache *cache, const char *file,
                             const char *source_file, int d_qk)
{
    int st = write_file(dir, file, cache->bytes, (size_t)(cache->num_pages * cache->page_stride));
    if (st == MLAJIT_OK && cache->source_bf16)
        st = write_file(dir, source_file, cache->source_bf16,
                        (size_t)cache->num_pages * (size_t)cache->page_size * (size_t)d_qk * 2);
    return st;
}

int mlajit_case_save(const char *dir, const mlajit_case *c)
{
    if (!dir || !c)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "case save: dir and case must not be NULL");
    const mlajit_model_desc *d = mlajit_case_desc(c);
    int st = check_savable(c, d);
    if (st != MLAJIT_OK)
        return st;
    if ((st = make_dirs(dir)) != MLAJIT_OK)
        return st;

    const int64_t b = c->b, s_q = c->s_q, h_q = c->h_q;
    const size_t rows = (size_t)(b * s_q);
    const int has_expected = c->expected_out && c->expected_lse;
    const int64_t idx_dims[3] = {b, s_q, c->topk}, extra_dims[3] = {b, s_q, c->extra_topk};
    const int64_t row_dims[1] = {b}, head_dims[1] = {h_q};
    const int64_t q_dims[4] = {b, s_q, h_q, d->d_qk};
    const int64_t out_dims[4] = {b, s_q, h_q, d->d_v}, lse_dims[3] = {b, s_q, h_q};

    /* the arrays */
    if ((st = write_cache_files(dir, &c->kv, "kv.u8", "k_src.bf16", d->d_qk)) != MLAJIT_OK ||
        (st = write_file(dir, "indices.i32", c->indices, rows * (size_t)c->topk * 4)) != MLAJIT_OK ||
        (st = write_file(dir, "q.bf16", c->q, rows * (size_t)h_q * (size_t)d->d_qk * 2)) != MLAJIT_OK)
        return st;
    if (c->topk_length && (st = write_file(dir, "topk_length.i32", c->topk_length, (size_t)b * 4)) != MLAJIT_OK)
        return st;
    if (c->has_extra) {
        if ((st = write_cache_files(dir, &c->extra_kv, "extra_kv.u8", "extra_k_src.bf16", d->d_qk)) != MLAJIT_OK ||
            (st = write_file(dir, "extra_indices.i32", c->extra_indices, rows * (size_t)c->extra_topk * 4)) !=
                MLAJIT_OK)
            return st;
        if (c->extra_topk_length &&
            (st = write_file(dir, "extra_topk_length.i32", c->extra_topk_length, (size_t)b * 4)) != MLAJIT_OK)
            return st;
    }
    if (c->attn_sink && (st = write_file(dir, "attn_sink.f32", c->attn_sink, (size_t)h_q * 4)) != MLAJIT_OK)
        return st;
    if (has_expected &&
        ((st = write_file(dir, "out_ref.f32", c->expected_out, rows * (size_t)h_q * (size_t)d->d_v * 4)) != MLAJIT_OK ||
         (st = write_file(dir, "lse_ref.f32", c->expected_lse, rows * (size_t)h_q * 4)) != MLAJIT_OK))
        return st;

    /* case.json, in the golden files' key order */
    mlajit_json_writer w;
    mlajit_json_writer_init(&w);
    mlajit_json_begin_object(&w, NULL);
    if (d->model == MLAJIT_MODEL_CUSTOM) {
        mlajit_json_write_string(&w, "model", "custom");
        mlajit_json_write_string(&w, "layout", d->name); /* the canonical string */
    } else {
        mlajit_json_write_string(&w, "model", d->name);
    }
    mlajit_json_write_int(&w, "d_qk", d->d_qk);
    mlajit_json_write_int(&w, "d_v", d->d_v);
    mlajit_json_write_int(&w, "bytes_per_token", d->bytes_per_token);
    mlajit_json_write_int(&w, "b", b);
    mlajit_json_write_int(&w, "s_q", s_q);
    mlajit_json_write_int(&w, "h_q", h_q);
    mlajit_json_write_double(&w, "sm_scale", c->sm_scale);
    mlajit_json_write_uint(&w, "seed", c->seed);
    write_cache_ref(&w, "kv", "kv.u8", "k_src.bf16", &c->kv);
    write_array_ref(&w, "indices", "indices.i32", idx_dims, 3);
    if (c->topk_length)
        write_array_ref(&w, "topk_length", "topk_length.i32", row_dims, 1);
    else
        mlajit_json_write_null(&w, "topk_length");
    if (c->has_extra) {
        write_cache_ref(&w, "extra_kv", "extra_kv.u8", "extra_k_src.bf16", &c->extra_kv);
        write_array_ref(&w, "extra_indices", "extra_indices.i32", extra_dims, 3);
        if (c->extra_topk_length)
            write_array_ref(&w, "extra_topk_length", "extra_topk_length.i32", row_dims, 1);
        else
            mlajit_json_write_null(&w, "extra_topk_length");
    }
    write_array_ref(&w, "q", "q.bf16", q_dims, 4);
    if (c->attn_sink)
        write_array_ref(&w, "attn_sink", "attn_sink.f32", head_dims, 1);
    if (has_expected) {
        mlajit_json_begin_object(&w, "expected");
        mlajit_json_write_string(&w, "out", "out_ref.f32");
        mlajit_json_write_shape(&w, "out_shape", out_dims, 4);
        mlajit_json_write_string(&w, "lse", "lse_ref.f32");
        mlajit_json_write_shape(&w, "lse_shape", lse_dims, 3);
        mlajit_json_write_string(&w, "lse_base", "e");
        mlajit_json_write_string(&w, "note",
                                 "fp64 reference over the dequantized cache; lse excludes the sink; rows with "
                                 "nothing to attend: out 0, lse +inf");
        mlajit_json_end(&w);
    } else {
        mlajit_json_write_null(&w, "expected");
    }
    mlajit_json_write_null(&w, "flashmla");
    mlajit_json_end(&w);
    if (mlajit_json_writer_ok(&w) != 0) {
        mlajit_json_writer_free(&w);
        return mlajit_fail_oom("case save: case.json");
    }
    st = write_file(dir, CASE_JSON_NAME, w.out.data, w.out.len);
    mlajit_json_writer_free(&w);
    return st;
}

/* ---- the case as a decode call ---------------------------------------------- */

void mlajit_case_spec(const mlajit_case *c, mlajit_kernel_spec *spec)
{
    memset(spec, 0, sizeof *spec);
    spec->struct_size = sizeof *spec;
    spec->model = c->model;
    if (c->model == MLAJIT_MODEL_CUSTOM)
        spec->layout = c->layout;
    spec->h_q = c->h_q;
    spec->page_size = c->kv.page_size;
    spec->extra_page_size = c->has_extra ? c->extra_kv.page_size : 0;
    if (c->attn_sink)
        spec->features |= MLAJIT_FEATURE_SINK;
    if (c->topk_length)
        spec->features |= MLAJIT_FEATURE_TOPK_LENGTH;
    if (c->has_extra && c->extra_topk_length)
        spec->features |= MLAJIT_FEATURE_EXTRA_TOPK_LENGTH;
    spec->tile = 0;
    spec->heads_per_cta = 0;
    spec->variant = MLAJIT_VARIANT_AUTO;
    spec->arch[0] = '\0';
}

void mlajit_case_shape(const mlajit_case *c, mlajit_decode_shape *shape)
{
    memset(shape, 0, sizeof *shape);
    shape->struct_size = sizeof *shape;
    shape->batch = c->b;
    shape->s_q = c->s_q;
    shape->topk = c->topk;
    shape->extra_topk = c->has_extra ? c->extra_topk : 0;
    shape->num_splits = 0;
}

void mlajit_case_host_args(const mlajit_case *c, mlajit_decode_args *args)
{
    memset(args, 0, sizeof *args);
    args->struct_size = sizeof *args;
    const mlajit_model_desc *d = mlajit_case_desc(c);
    const int64_t d_qk = d ? d->d_qk : 0, d_v = d ? d->d_v : 0;
    const int64_t h_q = c->h_q, s_q = c->s_q;

    args->q = c->q;
    args->q_stride_h = d_qk;
    args->q_stride_s = h_q * d_qk;
    args->q_stride_b = s_q * h_q * d_qk;

    args->kv = (mlajit_cache_view){c->kv.bytes, c->kv.page_stride, c->kv.num_pages};
    args->indices = c->indices;
    args->indices_stride_s = c->topk;
    args->indices_stride_b = s_q * c->topk;
    args->topk_length = c->topk_length;
    args->attn_sink = c->attn_sink;

    if (c->has_extra) {
        args->extra_kv = (mlajit_cache_view){c->extra_kv.bytes, c->extra_kv.page_stride, c->extra_kv.num_pages};
        args->extra_indices = c->extra_indices;
        args->extra_indices_stride_s = c->extra_topk;
        args->extra_indices_stride_b = s_q * c->extra_topk;
        args->extra_topk_length = c->extra_topk_length;
    }
    args->sm_scale = (float)c->sm_scale;

    /* out / lse are the caller's: only their contiguous strides are set here */
    args->out_stride_h = d_v;
    args->out_stride_s = h_q * d_v;
    args->out_stride_b = s_q * h_q * d_v;
    args->lse_stride_h = 1;
    args->lse_stride_s = h_q;
    args->lse_stride_b = s_q * h_q;
}

int mlajit_case_reference(const mlajit_case *c, int batch, float **out_f, float **lse_f)
{
    if (!c || !out_f || !lse_f)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "case reference: case, out and lse must not be NULL");
    *out_f = NULL;
    *lse_f = NULL;
    const mlajit_model_desc *d = mlajit_case_desc(c);
    if (!d)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "case: model %d is unknown", (int)c->model);
    if (batch < 0 || batch > c->b)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "case reference: batch = %d; allowed 0..%d", batch, c->b);
    mlajit_kernel_spec spec = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_decode_shape shape = MLAJIT_DECODE_SHAPE_INIT;
    mlajit_decode_args args = MLAJIT_DECODE_ARGS_INIT;
    mlajit_case_spec(c, &spec);
    mlajit_case_shape(c, &shape);
    mlajit_case_host_args(c, &args);
    shape.batch = batch; /* the reference reads rows 0..batch-1 only */

    const size_t n_lse = (size_t)batch * (size_t)c->s_q * (size_t)c->h_q;
    const size_t n_out = n_lse * (size_t)d->d_v;
    double *out = alloc_bytes(n_out * sizeof *out);
    double *lse = alloc_bytes(n_lse * sizeof *lse);
    float *of = alloc_bytes(n_out * sizeof *of);
    float *lf = alloc_bytes(n_lse * sizeof *lf);
    int st = (out && lse && of && lf) ? MLAJIT_OK
                                      : mlajit_fail_oom("the case's reference");
    if (st == MLAJIT_OK)
        st = mlajit_reference_decode(&spec, &shape, &args, out, lse);
    if (st == MLAJIT_OK) {
        for (size_t k = 0; k < n_out; k++)
            of[k] = (float)out[k];
        for (size_t k = 0; k < n_lse; k++)
            lf[k] = (float)lse[k];
        *out_f = of;
        *lse_f = lf;
        of = NULL;
        lf = NULL;
    }
    free(out);
    free(lse);
    free(of);
    free(lf);
    return st;
}

int mlajit_case_compute_expected(mlajit_case *c)
{
    if (!c)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "case: the case pointer is NULL");
    float *out, *lse;
    int st = mlajit_case_reference(c, c->b, &out, &lse);
    if (st == MLAJIT_OK) {
        free(c->expected_out);
        free(c->expected_lse);
        c->expected_out = out;
        c->expected_lse = lse;
    }
    return st;
}

const mlajit_model_desc *mlajit_case_desc(const mlajit_case *c)
{
    if (!c)
        return NULL;
    return c->model == MLAJIT_MODEL_CUSTOM ? mlajit_layout_describe(&c->layout) : mlajit_model_describe(c->model);
}
