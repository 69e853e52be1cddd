/* cache/pack.c - cubin packs: the manifest, the writer and the checked reader.
 * The file format is described in pack.h. */
#include "cache/pack.h"

#include "cache/codec.h"
#include "cache/env_registry.h"
#include "common/alloc.h"
#include "common/error.h"
#include "common/file.h"
#include "common/strbuf.h"
#include "mlajit.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <lmdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char TRAILER_MAGIC[8] = {'M', 'L', 'A', 'J', 'I', 'T', 'P', 'K'};
static const char MANIFEST_KEY[] = "manifest";
static const char KERNELS_DB[] = "kernels";
static const char MANIFEST_DB[] = "manifest";
static const char TACTICS_DB[] = "tactics";
#define MANIFEST_FIRST_LINE "mlajit-pack"
#define MANIFEST_MAX_BYTES ((size_t)MLAJIT_PACK_MAX_KERNELS * 180u + 4096u)

/* ------------------------------------------------------------------------- */
/* The manifest                                                               */
/* ------------------------------------------------------------------------- */

void mlajit_pack_manifest_clear(mlajit_pack_manifest *m)
{
    if (!m)
        return;
    free(m->kernels);
    memset(m, 0, sizeof *m);
}

int mlajit_pack_manifest_same_recipe(const mlajit_pack_manifest *a, const mlajit_pack_manifest *b)
{
    return a && b && strcmp(a->key_recipe, b->key_recipe) == 0 && a->nvrtc_major == b->nvrtc_major &&
           a->nvrtc_minor == b->nvrtc_minor;
}

/* Printable ASCII without spaces (a token) or with them (a value). */
static bool is_token(const char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~')
            return false;
    return true;
}

static bool is_printable(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] < ' ' || s[i] > '~')
            return false;
    return true;
}

int mlajit_pack_manifest_format(const mlajit_pack_manifest *m, char **text, size_t *len)
{
    if (!m || !text || !len || (m->kernel_count && !m->kernels))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "pack manifest: m, text and len must not be NULL");
    *text = NULL;
    *len = 0;
    if (!is_printable(m->tool, strlen(m->tool)) || !is_token(m->key_recipe, strlen(m->key_recipe)) ||
        !is_token(m->archs, strlen(m->archs)))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "pack manifest: tool must be printable, key_recipe and archs non-empty tokens");
    if (m->kernel_count > MLAJIT_PACK_MAX_KERNELS)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "pack manifest: %zu kernels; at most %u", m->kernel_count,
                           MLAJIT_PACK_MAX_KERNELS);
    unsigned version = m->format_version == MLAJIT_PACK_OLDEST_FORMAT ? m->format_version : MLAJIT_PACK_FORMAT_VERSION;
    if (m->tactic_count > (version >= 3 ? MLAJIT_PACK_MAX_TACTICS : 0u))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "pack manifest: %zu tactic records; at most %u in format %u",
                           m->tactic_count, version >= 3 ? MLAJIT_PACK_MAX_TACTICS : 0u, version);

    mlajit_strbuf b = {0};
    char date[32] = "";
    time_t t = (time_t)m->created_unix;
    struct tm tm;
    if (gmtime_r(&t, &tm))
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    mlajit_strbuf_printf(&b, "%s %u\n", MANIFEST_FIRST_LINE, version);
    mlajit_strbuf_printf(&b, "tool %s\n", m->tool);
    mlajit_strbuf_printf(&b, "key-recipe %s\n", m->key_recipe);
    mlajit_strbuf_printf(&b, "nvrtc %d.%d\n", m->nvrtc_major, m->nvrtc_minor);
    mlajit_strbuf_printf(&b, "created %" PRIu64 "%s%s\n", m->created_unix, date[0] ? " " : "", date);
    mlajit_strbuf_printf(&b, "archs %s\n", m->archs);
    mlajit_strbuf_printf(&b, "kernels %zu\n", m->kernel_count);
    for (size_t i = 0; i < m->kernel_count; i++) {
        const char *spec = m->kernels[i].spec_string;
        if (!is_token(spec, strnlen(spec, sizeof m->kernels[i].spec_string))) {
            free(b.data);
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "pack manifest: kernel %zu's spec string is not a token",
                               i);
        }
        char hex[33];
        mlajit_cache_key_hex(&m->kernels[i].key, hex);
        mlajit_strbuf_printf(&b, "%s %s\n", hex, spec);
    }
    if (version >= 3)
        mlajit_strbuf_printf(&b, "tactics %zu\n", m->tactic_count);
    if (!b.failed) {
        uint64_t sum = mlajit_hash64(b.data, b.len);
        mlajit_strbuf_printf(&b, "checksum %016" PRIx64 "\n", sum);
    }
    if (b.failed) {
        free(b.data);
        return mlajit_fail_oom("a pack manifest");
    }
    *text = b.data;
    *len = b.len;
    return MLAJIT_OK;
}

/* A cursor over the manifest's lines: every line ends with '\n' within len. */
typedef struct line_reader {
    const char *text;
    size_t pos, len;
    unsigned line_no;
    const char *line; /* the current line, without its '\n' */
    size_t line_len;
} line_reader;

static bool next_line(line_reader *r)
{
    if (r->pos >= r->len)
        return false;
    const char *start = r->text + r->pos;
    const char *nl = memchr(start, '\n', r->len - r->pos);
    if (!nl)
        return false;
    r->line = start;
    r->line_len = (size_t)(nl - start);
    r->pos += r->line_len + 1;
    r->line_no++;
    return true;
}

/* The line is "<name> <value>": the value's bytes, else NULL. */
static const char *field_value(const line_reader *r, const char *name, size_t *value_len)
{
    size_t n = strlen(name);
    if (r->line_len < n + 2 || memcmp(r->line, name, n) != 0 || r->line[n] != ' ')
        return NULL;
    *value_len = r->line_len - n - 1;
    return r->line + n + 1;
}

static bool parse_hex_u64(const char *s, size_t n, uint64_t *out)
{
    if (n != 16)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return false;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return true;
}

static bool parse_dec_u64(const char *s, size_t n, uint64_t max, uint64_t *out)
{
    if (n == 0 || n > 20)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (max - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

static int manifest_fail(const line_reader *r, const char *what)
{
    return mlajit_fail(MLAJIT_ERR_CORRUPT, "pack manifest line %u: %s", r->line_no, what);
}

/* Copy a value of n bytes into dst[cap] when it fits and passes ok(). */
static bool copy_value(char *dst, size_t cap, const char *s, size_t n, bool (*ok)(const char *, size_t))
{
    if (n >= cap || !ok(s, n))
        return false;
    memcpy(dst, s, n);
    dst[n] = '\0';
    return true;
}

int mlajit_pack_manifest_parse(const void *text, size_t len, mlajit_pack_manifest *out)
{
    if (!out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "pack manifest parse: out must not be NULL");
    memset(out, 0, sizeof *out);
    if (!text || len == 0)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "pack manifest is empty");
    if (len > MANIFEST_MAX_BYTES)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "pack manifest is %zu bytes; at most %zu", len,
                           (size_t)MANIFEST_MAX_BYTES);
    if (memchr(text, '\0', len))
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "pack manifest contains a NUL byte");

    mlajit_pack_manifest m;
    memset(&m, 0, sizeof m);
    line_reader r = {.text = text, .len = len};
    const char *v;
    size_t n;
    uint64_t u;
    int status = MLAJIT_OK;
#define EXPECT_LINE(name)                                                                                          \
    do {                                                                                                           \
        if (!next_line(&r)) {                                                                                      \
            status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack manifest ends before its \"%s\" line", name);           \
            goto fail;                                                                                             \
        }                                                                                                          \
        if (!(v = field_value(&r, name, &n))) {                                                                    \
            status = manifest_fail(&r, "expected a \"" name " <value>\" line");                                    \
            goto fail;                                                                                             \
        }                                                                                                          \
    } while (0)

    EXPECT_LINE(MANIFEST_FIRST_LINE);
    if (!parse_dec_u64(v, n, UINT32_MAX, &u)) {
        status = manifest_fail(&r, "the format version is not a number");
        goto fail;
    }
    if (u < MLAJIT_PACK_OLDEST_FORMAT || u > MLAJIT_PACK_FORMAT_VERSION) {
        status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack manifest has format version %" PRIu64
                             "; this build reads versions %u..%u (rebuild the pack with this mlajit)",
                             u, MLAJIT_PACK_OLDEST_FORMAT, MLAJIT_PACK_FORMAT_VERSION);
        goto fail;
    }
    m.format_version = (unsigned)u;

    EXPECT_LINE("tool");
    if (!copy_value(m.tool, sizeof m.tool, v, n, is_printable)) {
        status = manifest_fail(&r, "the tool is not printable text of at most 63 bytes");
        goto fail;
    }
    EXPECT_LINE("key-recipe");
    if (!copy_value(m.key_recipe, sizeof m.key_recipe, v, n, is_token)) {
        status = manifest_fail(&r, "the key recipe is not a token of at most 63 bytes");
        goto fail;
    }
    EXPECT_LINE("nvrtc");
    {
        const char *dot = memchr(v, '.', n);
        uint64_t major, minor;
        if (!dot || !parse_dec_u64(v, (size_t)(dot - v), 999, &major) ||
            !parse_dec_u64(dot + 1, n - (size_t)(dot - v) - 1, 999, &minor)) {
            status = manifest_fail(&r, "the NVRTC version is not <major>.<minor>");
            goto fail;
        }
        m.nvrtc_major = (int)major;
        m.nvrtc_minor = (int)minor;
    }
    EXPECT_LINE("created");
    {
        const char *space = memchr(v, ' ', n);
        size_t digits = space ? (size_t)(space - v) : n;
        if (!parse_dec_u64(v, digits, UINT64_MAX, &m.created_unix) ||
            (space && !is_token(space + 1, n - digits - 1))) {
            status = manifest_fail(&r, "the date is not \"<unix seconds> [<ISO date>]\"");
            goto fail;
        }
    }
    EXPECT_LINE("archs");
    if (!copy_value(m.archs, sizeof m.archs, v, n, is_token)) {
        status = manifest_fail(&r, "the arch list is not a token of at most 255 bytes");
        goto fail;
    }
    EXPECT_LINE("kernels");
    /* Each kernel line takes at least 34 bytes: bound the allocation by the text. */
    if (!parse_dec_u64(v, n, MLAJIT_PACK_MAX_KERNELS, &u) || u > len / 34) {
        status = manifest_fail(&r, "the kernel count is not a number the manifest can hold");
        goto fail;
    }
    m.kernel_count = (size_t)u;
    if (m.kernel_count) {
        m.kernels = mlajit_calloc(m.kernel_count, sizeof *m.kernels);
        if (!m.kernels) {
            status = mlajit_fail_oom("a pack manifest of %zu kernels", m.kernel_count);
            goto fail;
        }
    }
    for (size_t i = 0; i < m.kernel_count; i++) {
        if (!next_line(&r)) {
            status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack manifest ends after %zu of its %zu kernel lines", i,
                                 m.kernel_count);
            goto fail;
        }
        uint64_t hi, lo;
        if (r.line_len < 34 || r.line[32] != ' ' || !parse_hex_u64(r.line, 16, &hi) ||
            !parse_hex_u64(r.line + 16, 16, &lo) ||
            !copy_value(m.kernels[i].spec_string, sizeof m.kernels[i].spec_string, r.line + 33, r.line_len - 33,
                        is_token)) {
            status = manifest_fail(&r, "expected \"<32 hex digits> <spec string>\"");
            goto fail;
        }
        m.kernels[i].key.hi = hi;
        m.kernels[i].key.lo = lo;
        if (i > 0) {
            const mlajit_cache_key *a = &m.kernels[i - 1].key, *b = &m.kernels[i].key;
            if (a->hi > b->hi || (a->hi == b->hi && a->lo >= b->lo)) {
                status = manifest_fail(&r, "kernel keys are not in ascending order");
                goto fail;
            }
        }
    }
    if (m.format_version >= 3) {
        EXPECT_LINE("tactics");
        if (!parse_dec_u64(v, n, MLAJIT_PACK_MAX_TACTICS, &u)) {
            status = manifest_fail(&r, "the tactic count is not a number up to 1048576");
            goto fail;
        }
        m.tactic_count = (size_t)u;
    }
    size_t checksum_at = r.pos;
    EXPECT_LINE("checksum");
    if (!parse_hex_u64(v, n, &u)) {
        status = manifest_fail(&r, "the checksum is not 16 lowercase hex digits");
        goto fail;
    }
    if (u != mlajit_hash64(text, checksum_at)) {
        status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack manifest checksum mismatch (stored %016" PRIx64
                             ", computed %016" PRIx64 ")",
                             u, mlajit_hash64(text, checksum_at));
        goto fail;
    }
    if (r.pos != len) {
        status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack manifest has %zu bytes after its checksum line", len - r.pos);
        goto fail;
    }
#undef EXPECT_LINE
    *out = m;
    return MLAJIT_OK;
fail:
    mlajit_pack_manifest_clear(&m);
    return status;
}

/* ------------------------------------------------------------------------- */
/* Writing                                                                    */
/* ------------------------------------------------------------------------- */

static int key_compare(const void *a, const void *b)
{
    const mlajit_cache_key *x = a, *y = b;
    if (x->hi != y->hi)
        return x->hi < y->hi ? -1 : 1;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static int item_compare(const void *a, const void *b)
{
    return key_compare(&((const mlajit_pack_item *)a)->key, &((const mlajit_pack_item *)b)->key);
}

static int string_compare(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The sorted, distinct archs of the items (the last '.' part of each spec). */
static int collect_archs(const mlajit_pack_item *items, size_t count, char *out, size_t cap)
{
    const char **archs = mlajit_malloc((count ? count : 1) * sizeof *archs);
    if (!archs)
        return mlajit_fail_oom("the pack's arch list");
    for (size_t i = 0; i < count; i++) {
        const char *dot = strrchr(items[i].entry->spec_string, '.');
        archs[i] = dot ? dot + 1 : items[i].entry->spec_string;
    }
    qsort(archs, count, sizeof *archs, string_compare);
    out[0] = '\0';
    size_t used = 0;
    int status = MLAJIT_OK;
    for (size_t i = 0; i < count && status == MLAJIT_OK; i++) {
        if (i > 0 && strcmp(archs[i], archs[i - 1]) == 0)
            continue;
        int n = snprintf(out + used, cap - used, "%s%s", used ? "," : "", archs[i]);
        if (n < 0 || (size_t)n >= cap - used)
            status = mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "pack write: the arch list exceeds %zu bytes", cap - 1);
        else
            used += (size_t)n;
    }
    if (status == MLAJIT_OK && used == 0)
        snprintf(out, cap, "none");
    free(archs);
    return status;
}

/* One tactic record to write: its key and encoded value. */
typedef struct tactic_item {
    uint8_t key[MLAJIT_TACTIC_KEY_BYTES];
    void *value;
    size_t len;
} tactic_item;

/* Write the LMDB contents into a scratch environment at build_path. */
static int write_scratch_env(const char *build_path, const mlajit_pack_item *items, size_t count,
                             const tactic_item *tactics, size_t tactic_count, const char *manifest,
                             size_t manifest_len, MDB_env **env_out)
{
    size_t value_bytes = manifest_len;
    for (size_t i = 0; i < tactic_count; i++)
        value_bytes += tactics[i].len + 64;
    for (size_t i = 0; i < count; i++)
        value_bytes += items[i].entry->cubin_size + 512;
    /* Room for the values, their overflow-page rounding and the tree. */
    size_t map_size = value_bytes * 2 + (count + 16) * 8192 + ((size_t)16 << 20);

    MDB_env *env = NULL;
    const char *step = "mdb_env_create";
    int rc = mdb_env_create(&env);
    if (rc == 0) {
        step = "mdb_env_set_mapsize";
        rc = mdb_env_set_mapsize(env, map_size);
    }
    if (rc == 0) {
        step = "mdb_env_set_maxdbs";
        rc = mdb_env_set_maxdbs(env, 3);
    }
    if (rc == 0) {
        step = "mdb_env_open";
        /* A private scratch file: no lock, no syncs (the copy is synced). */
        rc = mdb_env_open(env, build_path, MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOSYNC, 0644);
    }
    MDB_txn *txn = NULL;
    MDB_dbi kernels_dbi, manifest_dbi, tactics_dbi;
    if (rc == 0) {
        step = "beginning the write transaction";
        rc = mdb_txn_begin(env, NULL, 0, &txn);
    }
    if (rc == 0) {
        step = "creating the databases";
        rc = mdb_dbi_open(txn, KERNELS_DB, MDB_CREATE, &kernels_dbi);
        if (rc == 0)
            rc = mdb_dbi_open(txn, MANIFEST_DB, MDB_CREATE, &manifest_dbi);
        if (rc == 0)
            rc = mdb_dbi_open(txn, TACTICS_DB, MDB_CREATE, &tactics_dbi);
    }
    int status = MLAJIT_OK;
    for (size_t i = 0; rc == 0 && status == MLAJIT_OK && i < count; i++) {
        void *value;
        size_t len;
        status = mlajit_cache_entry_encode(items[i].entry, &value, &len);
        if (status != MLAJIT_OK)
            break;
        uint8_t key_bytes[16];
        mlajit_cache_key_to_bytes(&items[i].key, key_bytes);
        MDB_val k = {.mv_size = sizeof key_bytes, .mv_data = key_bytes}, v = {.mv_size = len, .mv_data = value};
        step = "storing a kernel";
        rc = mdb_put(txn, kernels_dbi, &k, &v, 0);
        free(value);
    }
    for (size_t i = 0; rc == 0 && status == MLAJIT_OK && i < tactic_count; i++) {
        MDB_val k = {.mv_size = sizeof tactics[i].key, .mv_data = (void *)tactics[i].key},
                v = {.mv_size = tactics[i].len, .mv_data = tactics[i].value};
        step = "storing a tactic record";
        rc = mdb_put(txn, tactics_dbi, &k, &v, 0);
    }
    if (rc == 0 && status == MLAJIT_OK) {
        MDB_val k = {.mv_size = sizeof MANIFEST_KEY - 1, .mv_data = (void *)MANIFEST_KEY},
                v = {.mv_size = manifest_len, .mv_data = (void *)manifest};
        step = "storing the manifest";
        rc = mdb_put(txn, manifest_dbi, &k, &v, 0);
    }
    if (txn) {
        if (rc == 0 && status == MLAJIT_OK) {
            step = "committing";
            rc = mdb_txn_commit(txn);
        } else {
            mdb_txn_abort(txn);
        }
    }
    if (rc != 0 && status == MLAJIT_OK)
        status = mlajit_fail(MLAJIT_ERR_IO, "pack %s: %s failed: %s", build_path, step, mdb_strerror(rc));
    if (status != MLAJIT_OK) {
        if (env)
            mdb_env_close(env);
        return status;
    }
    *env_out = env;
    return MLAJIT_OK;
}

/* XXH3-64 of the first len bytes of fd. */
static int hash_file_prefix(int fd, uint64_t len, uint64_t *out)
{
    if (len == 0) {
        *out = mlajit_hash64(NULL, 0);
        return 0;
    }
    void *map = mmap(NULL, (size_t)len, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED)
        return errno;
    *out = mlajit_hash64(map, (size_t)len);
    munmap(map, (size_t)len);
    return 0;
}

static void trailer_encode(uint8_t t[MLAJIT_PACK_TRAILER_BYTES], uint64_t lmdb_bytes, uint64_t lmdb_hash,
                           uint64_t kernels, uint64_t tactics)
{
    memset(t, 0, MLAJIT_PACK_TRAILER_BYTES);
    memcpy(t, TRAILER_MAGIC, sizeof TRAILER_MAGIC);
    mlajit_put_u32le(t + 8, MLAJIT_PACK_FORMAT_VERSION);
    mlajit_put_u32le(t + 12, MLAJIT_PACK_TRAILER_BYTES);
    mlajit_put_u64le(t + 16, lmdb_bytes);
    mlajit_put_u64le(t + 24, lmdb_hash);
    mlajit_put_u64le(t + 32, kernels);
    mlajit_put_u64le(t + 40, tactics);
    mlajit_put_u64le(t + 56, mlajit_hash64(t, 56));
}

/* By key, then by place in the caller's list: the first of equal keys leads. */
static int tactic_item_compare(const void *a, const void *b)
{
    const tactic_item *x = a, *y = b;
    int d = memcmp(x->key, y->key, sizeof x->key);
    if (d)
        return d;
    return x->len < y->len ? -1 : x->len > y->len; /* len holds the place until the values are made */
}

/* The tactic records to write: checked, encoded, sorted and distinct by key
 * (the first of the caller's list wins). *out is malloc'd; free each value. */
static int tactic_items_make(const mlajit_tactic_record *tactics, size_t count, tactic_item **out, size_t *distinct)
{
    *out = NULL;
    *distinct = 0;
    if (count > MLAJIT_PACK_MAX_TACTICS)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "pack write: %zu tactic records; at most %u", count,
                           MLAJIT_PACK_MAX_TACTICS);
    tactic_item *t = mlajit_calloc(count ? count : 1, sizeof *t);
    if (!t)
        return mlajit_fail_oom("writing a pack of %zu tactic records", count);
    for (size_t i = 0; i < count; i++) {
        int status = mlajit_tactic_record_check(&tactics[i]);
        if (status != MLAJIT_OK) {
            free(t);
            return mlajit_fail_prefix(status, "pack write: tactic record %zu: ", i);
        }
        mlajit_tactic_key_of(&tactics[i], t[i].key);
        t[i].len = i;
    }
    qsort(t, count, sizeof *t, tactic_item_compare);
    size_t n = 0;
    for (size_t i = 0; i < count; i++)
        if (n == 0 || memcmp(t[n - 1].key, t[i].key, sizeof t[i].key) != 0)
            t[n++] = t[i];
    for (size_t i = 0; i < n; i++) {
        size_t place = t[i].len;
        int status = mlajit_tactic_encode(&tactics[place], &t[i].value, &t[i].len);
        if (status != MLAJIT_OK) {
            for (size_t k = 0; k < i; k++)
                free(t[k].value);
            free(t);
            return status;
        }
    }
    *out = t;
    *distinct = n;
    return MLAJIT_OK;
}

int mlajit_pack_write(const char *path, const mlajit_pack_manifest *recipe, const mlajit_pack_item *items,
                      size_t count, const mlajit_tactic_record *tactics, size_t tactic_count)
{
    if (!path || !path[0] || !recipe || (count && !items) || (tactic_count && !tactics))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "pack write: path, recipe, items and tactics must be given");
    for (size_t i = 0; i < count; i++)
        if (!items[i].entry)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "pack write: item %zu has no entry", i);
    if (count > MLAJIT_PACK_MAX_KERNELS)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "pack write: %zu kernels; at most %u", count,
                           MLAJIT_PACK_MAX_KERNELS);

    /* Sorted, distinct items: the manifest lists keys in ascending order. */
    tactic_item *tactic_items = NULL;
    size_t tactics_distinct = 0;
    int status = tactic_items_make(tactics, tactic_count, &tactic_items, &tactics_distinct);
    if (status != MLAJIT_OK)
        return status;
    mlajit_pack_item *sorted = mlajit_malloc((count ? count : 1) * sizeof *sorted);
    mlajit_pack_manifest m = *recipe;
    m.kernels = mlajit_calloc(count ? count : 1, sizeof *m.kernels);
    char *manifest = NULL, *build_path = NULL, *part_path = NULL;
    MDB_env *env = NULL;
    int fd = -1;
    if (!sorted || !m.kernels) {
        status = mlajit_fail_oom("writing a pack of %zu kernels", count);
        goto out;
    }
    if (count)
        memcpy(sorted, items, count * sizeof *sorted);
    qsort(sorted, count, sizeof *sorted, item_compare);
    size_t distinct = 0;
    for (size_t i = 0; i < count; i++)
        if (distinct == 0 || key_compare(&sorted[distinct - 1].key, &sorted[i].key) != 0)
            sorted[distinct++] = sorted[i];
    for (size_t i = 0; i < distinct; i++) {
        m.kernels[i].key = sorted[i].key;
        snprintf(m.kernels[i].spec_string, sizeof m.kernels[i].spec_string, "%s", sorted[i].entry->spec_string);
    }
    m.kernel_count = distinct;
    m.tactic_count = tactics_distinct;
    m.format_version = MLAJIT_PACK_FORMAT_VERSION;
    if (!m.created_unix)
        m.created_unix = (uint64_t)time(NULL);
    if ((status = collect_archs(sorted, distinct, m.archs, sizeof m.archs)) != MLAJIT_OK)
        goto out;
    size_t manifest_len;
    if ((status = mlajit_pack_manifest_format(&m, &manifest, &manifest_len)) != MLAJIT_OK)
        goto out;

    size_t n = strlen(path) + 64;
    build_path = mlajit_malloc(n);
    part_path = mlajit_malloc(n);
    if (!build_path || !part_path) {
        status = mlajit_fail_oom("the pack's paths");
        goto out;
    }
    snprintf(build_path, n, "%s.build-%ld", path, (long)getpid());
    snprintf(part_path, n, "%s.part-%ld", path, (long)getpid());
    unlink(build_path);
    if ((status = write_scratch_env(build_path, sorted, distinct, tactic_items, tactics_distinct, manifest,
                                    manifest_len, &env)) != MLAJIT_OK)
        goto out;

    fd = open(part_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        status = mlajit_fail(MLAJIT_ERR_IO, "pack %s: cannot create %s: %s", path, part_path, strerror(errno));
        goto out;
    }
    int rc = mdb_env_copyfd2(env, fd, MDB_CP_COMPACT);
    if (rc != 0) {
        status = mlajit_fail(MLAJIT_ERR_IO, "pack %s: compacting into %s failed: %s", path, part_path,
                             mdb_strerror(rc));
        goto out;
    }
    struct stat st;
    uint64_t lmdb_hash = 0;
    if (fstat(fd, &st) != 0 || (rc = hash_file_prefix(fd, (uint64_t)st.st_size, &lmdb_hash)) != 0) {
        status = mlajit_fail(MLAJIT_ERR_IO, "pack %s: reading back %s failed: %s", path, part_path,
                             strerror(rc ? rc : errno));
        goto out;
    }
    uint8_t trailer[MLAJIT_PACK_TRAILER_BYTES];
    trailer_encode(trailer, (uint64_t)st.st_size, lmdb_hash, distinct, tactics_distinct);
    if (pwrite(fd, trailer, sizeof trailer, st.st_size) != (ssize_t)sizeof trailer || fsync(fd) != 0) {
        status = mlajit_fail(MLAJIT_ERR_IO, "pack %s: writing the trailer to %s failed: %s", path, part_path,
                             strerror(errno));
        goto out;
    }
    close(fd);
    fd = -1;
    if (rename(part_path, path) != 0) {
        status = mlajit_fail(MLAJIT_ERR_IO, "pack %s: renaming %s into place failed: %s", path, part_path,
                             strerror(errno));
        goto out;
    }
out:
    if (fd >= 0)
        close(fd);
    if (env)
        mdb_env_close(env);
    if (build_path)
        unlink(build_path);
    if (part_path && status != MLAJIT_OK)
        unlink(part_path);
    free(build_path);
    free(part_path);
    free(manifest);
    free(sorted);
    free(m.kernels);
    for (size_t i = 0; i < tactics_distinct; i++)
        free(tactic_items[i].value);
    free(tactic_items);
    return status;
}

/* ------------------------------------------------------------------------- */
/* Reading                                                                    */
/* ------------------------------------------------------------------------- */

enum { PACK_DBI_KERNELS = 0, PACK_DBI_MANIFEST = 1, PACK_DBI_TACTICS = 2 };

struct mlajit_pack {
    mlajit_shared_env *shared;
    char *path;
    int64_t file_bytes;  /* the whole file */
    int64_t lmdb_bytes;  /* the LMDB part: every value must lie within it */
    unsigned format;     /* the trailer's format version */
    mlajit_pack_manifest manifest;
};

typedef struct pack_init_args {
    dev_t dev;
    ino_t ino;
    int64_t lmdb_bytes;
    unsigned format;     /* 3: a tactics database is required; 2: none may be there */
} pack_init_args;

static int pack_env_init(mlajit_shared_env *shared, void *arg)
{
    const pack_init_args *expect = arg;
    int fd = -1;
    struct stat st;
    /* The file LMDB opened must be the one whose checksum was verified. */
    if (mdb_env_get_fd(shared->env, &fd) != 0 || fstat(fd, &st) != 0 || st.st_dev != expect->dev ||
        st.st_ino != expect->ino) {
        mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s was replaced while it was being opened; open it again",
                    shared->real_path);
        return MDB_INVALID;
    }
    int rc = mlajit_lmdb_check_size(shared->env, expect->lmdb_bytes, shared->real_path);
    if (rc != 0)
        return rc;
    MDB_txn *txn;
    if ((rc = mdb_txn_begin(shared->env, NULL, MDB_RDONLY, &txn)) != 0)
        return rc;
    rc = mdb_dbi_open(txn, KERNELS_DB, 0, &shared->dbi[PACK_DBI_KERNELS]);
    if (rc == 0)
        rc = mdb_dbi_open(txn, MANIFEST_DB, 0, &shared->dbi[PACK_DBI_MANIFEST]);
    int tactics_rc = rc == 0 ? mdb_dbi_open(txn, TACTICS_DB, 0, &shared->dbi[PACK_DBI_TACTICS]) : 0;
    if (rc == 0 && expect->format >= 3)
        rc = tactics_rc;
    if (rc == 0 && expect->format < 3 && tactics_rc != MDB_NOTFOUND) {
        mdb_txn_abort(txn);
        mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s is format %u but has a \"%s\" database", shared->real_path,
                    expect->format, TACTICS_DB);
        return MDB_INVALID;
    }
    if (rc == 0)
        rc = mdb_txn_commit(txn);
    else
        mdb_txn_abort(txn);
    if (rc == MDB_NOTFOUND) {
        mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s has no \"%s\", \"%s\"%s database (not an mlajit pack of format %u)",
                    shared->real_path, KERNELS_DB, MANIFEST_DB, expect->format >= 3 ? " or \"tactics\"" : "",
                    expect->format);
        return MDB_INVALID;
    }
    return rc;
}

/* Check the trailer and the checksum of the LMDB part; fills *args. */
static int pack_check_file(const char *path, pack_init_args *args, int64_t *file_bytes, uint64_t *kernels,
                           uint64_t *tactics)
{
    /* A FIFO or a device is refused here, never waited on (a pack list comes
     * from the environment at start-up). */
    char what[64];
    snprintf(what, sizeof what, "pack %.58s", path);
    int fd;
    struct stat st;
    int status = mlajit_open_regular(path, O_RDONLY, 0, what, &fd, &st);
    if (status != MLAJIT_OK)
        return status;
    /* At least LMDB's two meta pages and the trailer. */
    if (st.st_size < (off_t)(2 * 4096 + MLAJIT_PACK_TRAILER_BYTES)) {
        status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: %lld bytes is too small to be a pack (truncated?)", path,
                             (long long)st.st_size);
        goto out;
    }
    uint8_t t[MLAJIT_PACK_TRAILER_BYTES];
    off_t lmdb_len = st.st_size - (off_t)MLAJIT_PACK_TRAILER_BYTES;
    if (pread(fd, t, sizeof t, lmdb_len) != (ssize_t)sizeof t) {
        status = mlajit_fail(MLAJIT_ERR_IO, "pack %s: cannot read the trailer: %s", path, strerror(errno));
        goto out;
    }
    if (memcmp(t, TRAILER_MAGIC, sizeof TRAILER_MAGIC) != 0) {
        status = mlajit_fail(MLAJIT_ERR_CORRUPT,
                             "pack %s: no pack trailer at the end (truncated, overwritten, or not written as an "
                             "mlajit pack)",
                             path);
        goto out;
    }
    if (mlajit_get_u64le(t + 56) != mlajit_hash64(t, 56)) {
        status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: the trailer fails its checksum (damaged file)", path);
        goto out;
    }
    uint32_t format = mlajit_get_u32le(t + 8);
    if (format < MLAJIT_PACK_OLDEST_FORMAT || format > MLAJIT_PACK_FORMAT_VERSION) {
        /* intact (its trailer checks), made by another mlajit */
        status = mlajit_fail(MLAJIT_CACHE_STALE,
                             "pack %s: format version %" PRIu32 "; this build reads versions %u..%u (rebuild the "
                             "pack with this mlajit)",
                             path, format, MLAJIT_PACK_OLDEST_FORMAT, MLAJIT_PACK_FORMAT_VERSION);
        goto out;
    }
    /* Format 2 left bytes 40..56 zero; format 3 counts the tactics at 40. */
    static const uint8_t zero[16] = {0};
    size_t zero_from = format >= 3 ? 48 : 40;
    if (memcmp(t + zero_from, zero, 56 - zero_from) != 0) {
        status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: the trailer's reserved bytes %zu..55 are not zero", path,
                             zero_from);
        goto out;
    }
    if (mlajit_get_u32le(t + 12) != MLAJIT_PACK_TRAILER_BYTES || mlajit_get_u64le(t + 16) != (uint64_t)lmdb_len) {
        status = mlajit_fail(MLAJIT_ERR_CORRUPT,
                             "pack %s: the trailer says %" PRIu64 " bytes of data but the file holds %lld (truncated "
                             "or extended)",
                             path, mlajit_get_u64le(t + 16), (long long)lmdb_len);
        goto out;
    }
    uint64_t hash = 0;
    int rc = hash_file_prefix(fd, (uint64_t)lmdb_len, &hash);
    if (rc != 0) {
        status = mlajit_fail(MLAJIT_ERR_IO, "pack %s: cannot map it: %s", path, strerror(rc));
        goto out;
    }
    if (hash != mlajit_get_u64le(t + 24)) {
        status = mlajit_fail(MLAJIT_ERR_CORRUPT,
                             "pack %s: checksum mismatch (stored %016" PRIx64 ", computed %016" PRIx64
                             "): the file is damaged; rebuild or copy it again",
                             path, mlajit_get_u64le(t + 24), hash);
        goto out;
    }
    args->dev = st.st_dev;
    args->ino = st.st_ino;
    args->lmdb_bytes = (int64_t)lmdb_len;
    args->format = format;
    *file_bytes = (int64_t)st.st_size;
    *kernels = mlajit_get_u64le(t + 32);
    *tactics = format >= 3 ? mlajit_get_u64le(t + 40) : 0;
out:
    close(fd);
    return status;
}

static int pack_read_manifest(mlajit_pack *pack)
{
    MDB_env *env = pack->shared->env;
    MDB_txn *txn;
    int rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
    if (rc != 0)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: cannot begin a read: %s", pack->path, mdb_strerror(rc));
    MDB_val k = {.mv_size = sizeof MANIFEST_KEY - 1, .mv_data = (void *)MANIFEST_KEY}, v;
    int status = MLAJIT_OK;
    rc = mdb_get(txn, pack->shared->dbi[PACK_DBI_MANIFEST], &k, &v);
    if (rc != 0)
        status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: no manifest: %s", pack->path, mdb_strerror(rc));
    else if (!mlajit_env_value_in_file(pack->shared, &v, pack->lmdb_bytes))
        status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: the manifest lies outside the file", pack->path);
    else if ((status = mlajit_pack_manifest_parse(v.mv_data, v.mv_size, &pack->manifest)) != MLAJIT_OK)
        mlajit_fail_prefix(status, "pack %s: ", pack->path);
    MDB_stat st;
    if (status == MLAJIT_OK && (rc = mdb_stat(txn, pack->shared->dbi[PACK_DBI_KERNELS], &st)) != 0)
        status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: cannot count its kernels: %s", pack->path, mdb_strerror(rc));
    else if (status == MLAJIT_OK && st.ms_entries != pack->manifest.kernel_count)
        status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: the manifest lists %zu kernels but the file holds %zu",
                             pack->path, pack->manifest.kernel_count, (size_t)st.ms_entries);
    if (status == MLAJIT_OK && pack->manifest.format_version != pack->format)
        status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: the trailer says format %u, the manifest %u", pack->path,
                             pack->format, pack->manifest.format_version);
    if (status == MLAJIT_OK && pack->format >= 3) {
        if ((rc = mdb_stat(txn, pack->shared->dbi[PACK_DBI_TACTICS], &st)) != 0)
            status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: cannot count its tactic records: %s", pack->path,
                                 mdb_strerror(rc));
        else if (st.ms_entries != pack->manifest.tactic_count)
            status = mlajit_fail(MLAJIT_ERR_CORRUPT,
                                 "pack %s: the manifest counts %zu tactic records but the file holds %zu", pack->path,
                                 pack->manifest.tactic_count, (size_t)st.ms_entries);
    }
    mdb_txn_abort(txn);
    return status;
}

int mlajit_pack_open(const char *path, mlajit_pack **out)
{
    if (!out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "pack open: out must not be NULL");
    *out = NULL;
    if (!path || !path[0])
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "pack open: path must be a non-empty file name");

    mlajit_pack *pack = mlajit_calloc(1, sizeof *pack);
    if (!pack || !(pack->path = mlajit_strdup(path))) {
        free(pack);
        return mlajit_fail_oom("pack %s", path);
    }
    pack_init_args args;
    uint64_t trailer_kernels = 0, trailer_tactics = 0;
    int status = pack_check_file(path, &args, &pack->file_bytes, &trailer_kernels, &trailer_tactics);
    if (status == MLAJIT_OK) {
        pack->lmdb_bytes = args.lmdb_bytes;
        pack->format = args.format;
        long page = sysconf(_SC_PAGESIZE);
        size_t map_size = (size_t)args.lmdb_bytes;
        if (page > 0)
            map_size = (map_size + (size_t)page - 1) / (size_t)page * (size_t)page;
        mlajit_env_request req = {
            .path = path, .env_flags = MDB_RDONLY | MDB_NOLOCK | MDB_NOSUBDIR, .map_size = map_size,
            .max_dbs = 3, .init = pack_env_init, .init_arg = &args, .trusted_bytes = 1,
        };
        status = mlajit_env_acquire(&req, &pack->shared, NULL);
        if (status == MLAJIT_ERR_CACHE) /* its LMDB part does not open: the message names the file */
            status = MLAJIT_ERR_CORRUPT;
    }
    if (status == MLAJIT_OK)
        status = pack_read_manifest(pack);
    if (status == MLAJIT_OK && trailer_kernels != pack->manifest.kernel_count)
        status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: the trailer counts %" PRIu64 " kernels, the manifest %zu",
                             path, trailer_kernels, pack->manifest.kernel_count);
    if (status == MLAJIT_OK && trailer_tactics != pack->manifest.tactic_count)
        status = mlajit_fail(MLAJIT_ERR_CORRUPT,
                             "pack %s: the trailer counts %" PRIu64 " tactic records, the manifest %zu", path,
                             trailer_tactics, pack->manifest.tactic_count);
    if (status != MLAJIT_OK) {
        mlajit_pack_close(pack);
        return status;
    }
    *out = pack;
    return MLAJIT_OK;
}

void mlajit_pack_close(mlajit_pack *pack)
{
    if (!pack)
        return;
    mlajit_env_release(pack->shared);
    mlajit_pack_manifest_clear(&pack->manifest);
    free(pack->path);
    free(pack);
}

const mlajit_pack_manifest *mlajit_pack_manifest_of(const mlajit_pack *pack) { return pack ? &pack->manifest : NULL; }

const char *mlajit_pack_path(const mlajit_pack *pack) { return pack ? pack->path : ""; }

int64_t mlajit_pack_file_bytes(const mlajit_pack *pack) { return pack ? pack->file_bytes : 0; }

int mlajit_pack_has_arch(const mlajit_pack *pack, const char *arch)
{
    if (!pack || !arch || !arch[0])
        return 0;
    size_t n = strlen(arch);
    for (const char *p = pack->manifest.archs; *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == n && memcmp(p, arch, n) == 0)
            return 1;
        if (!comma)
            break;
        p = comma + 1;
    }
    return 0;
}

int mlajit_pack_get(mlajit_pack *pack, const mlajit_cache_key *key, mlajit_cache_entry *entry)
{
    if (!pack || !key || !entry)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "pack get: pack, key and entry must not be NULL");
    memset(entry, 0, sizeof *entry);
    uint8_t key_bytes[16];
    mlajit_cache_key_to_bytes(key, key_bytes);
    MDB_val k = {.mv_size = sizeof key_bytes, .mv_data = key_bytes}, v;
    MDB_txn *txn;
    int rc = mdb_txn_begin(pack->shared->env, NULL, MDB_RDONLY, &txn);
    if (rc != 0)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: cannot begin a read: %s", pack->path, mdb_strerror(rc));
    rc = mdb_get(txn, pack->shared->dbi[PACK_DBI_KERNELS], &k, &v);
    char hex[33];
    mlajit_cache_key_hex(key, hex);
    int status;
    if (rc == MDB_NOTFOUND)
        status = mlajit_fail(MLAJIT_ERR_NOT_FOUND, "pack %s: no entry for key %s", pack->path, hex);
    else if (rc != 0)
        status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: key %s: %s", pack->path, hex, mdb_strerror(rc));
    else if (!mlajit_env_value_in_file(pack->shared, &v, pack->lmdb_bytes))
        status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: key %s: the value lies outside the file", pack->path, hex);
    else if ((status = mlajit_cache_entry_decode(v.mv_data, v.mv_size, entry)) != MLAJIT_OK)
        mlajit_fail_prefix(status, "pack %s: key %s: ", pack->path, hex);
    mdb_txn_abort(txn);
    return status;
}

int mlajit_pack_foreach(mlajit_pack *pack, mlajit_store_visit_fn visit, void *arg)
{
    if (!pack || !visit)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "pack foreach: pack and visit must not be NULL");
    MDB_txn *txn;
    int rc = mdb_txn_begin(pack->shared->env, NULL, MDB_RDONLY, &txn);
    if (rc != 0)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: cannot begin a read: %s", pack->path, mdb_strerror(rc));
    MDB_cursor *cursor;
    rc = mdb_cursor_open(txn, pack->shared->dbi[PACK_DBI_KERNELS], &cursor);
    if (rc != 0) {
        mdb_txn_abort(txn);
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: cannot iterate: %s", pack->path, mdb_strerror(rc));
    }
    MDB_val k, v;
    int status = MLAJIT_OK;
    for (rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)) {
        if (k.mv_size != 16) {
            status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: a key of %zu bytes (keys are 16)", pack->path,
                                 k.mv_size);
            break;
        }
        mlajit_cache_key key = mlajit_cache_key_from_bytes(k.mv_data);
        int inside = mlajit_env_value_in_file(pack->shared, &v, pack->lmdb_bytes);
        if (visit(&key, inside ? v.mv_data : NULL, v.mv_size, arg) != 0) {
            rc = MDB_NOTFOUND;
            break;
        }
    }
    mdb_cursor_close(cursor);
    mdb_txn_abort(txn);
    if (status == MLAJIT_OK && rc != MDB_NOTFOUND)
        status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: iterating failed: %s", pack->path, mdb_strerror(rc));
    return status;
}

typedef struct verify_state {
    mlajit_pack *pack;
    size_t checked;
    int status;
} verify_state;

static int verify_visit(const mlajit_cache_key *key, const void *value, size_t len, void *arg)
{
    verify_state *s = arg;
    char hex[33];
    mlajit_cache_key_hex(key, hex);
    const mlajit_pack_manifest *m = &s->pack->manifest;
    const mlajit_pack_kernel *listed = bsearch(key, m->kernels, m->kernel_count, sizeof *m->kernels, key_compare);
    if (!listed) {
        s->status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: key %s is not in the manifest", s->pack->path, hex);
        return 1;
    }
    if (!value) {
        s->status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: key %s: the value lies outside the file",
                                s->pack->path, hex);
        return 1;
    }
    mlajit_cache_entry e;
    s->status = mlajit_cache_entry_decode(value, len, &e);
    if (s->status != MLAJIT_OK) {
        mlajit_fail_prefix(s->status, "pack %s: key %s (%s): ", s->pack->path, hex, listed->spec_string);
        return 1;
    }
    if (strcmp(e.spec_string, listed->spec_string) != 0)
        s->status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: key %s holds %s but the manifest says %s",
                                s->pack->path, hex, e.spec_string, listed->spec_string);
    mlajit_cache_entry_clear(&e);
    s->checked++;
    return s->status != MLAJIT_OK;
}

static int verify_tactics(mlajit_pack *pack);

int mlajit_pack_verify(mlajit_pack *pack, size_t *checked)
{
    if (checked)
        *checked = 0;
    if (!pack)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "pack verify: pack must not be NULL");
    verify_state s = {.pack = pack};
    int status = mlajit_pack_foreach(pack, verify_visit, &s);
    if (status == MLAJIT_OK)
        status = s.status;
    /* Keys are distinct and each is in the manifest, so equal counts mean
     * the database and the manifest list the same keys. */
    if (status == MLAJIT_OK && s.checked != pack->manifest.kernel_count)
        status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: %zu entries but the manifest lists %zu", pack->path,
                             s.checked, pack->manifest.kernel_count);
    if (status == MLAJIT_OK)
        status = verify_tactics(pack);
    if (checked)
        *checked = s.checked;
    return status;
}

/* ---- tactics ------------------------------------------------------------------ */

/* Called with each record of the tactics database whose key starts with
 * prefix (prefix_len 0: every record), in key order; nonzero stops. */
typedef int (*pack_record_fn)(const MDB_val *key, const MDB_val *value, int inside, void *arg);

static int pack_tactics_scan(mlajit_pack *pack, const uint8_t *prefix, size_t prefix_len, pack_record_fn fn,
                             void *arg)
{
    if (pack->format < 3)
        return MLAJIT_OK;
    MDB_txn *txn;
    int rc = mdb_txn_begin(pack->shared->env, NULL, MDB_RDONLY, &txn);
    if (rc != 0)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: cannot begin a read: %s", pack->path, mdb_strerror(rc));
    MDB_cursor *cursor;
    if ((rc = mdb_cursor_open(txn, pack->shared->dbi[PACK_DBI_TACTICS], &cursor)) != 0) {
        mdb_txn_abort(txn);
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: cannot read its tactics: %s", pack->path, mdb_strerror(rc));
    }
    MDB_val k = {.mv_size = prefix_len, .mv_data = (void *)prefix}, v = {0};
    for (rc = mdb_cursor_get(cursor, &k, &v, prefix_len ? MDB_SET_RANGE : MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)) {
        if (prefix_len && (k.mv_size < prefix_len || memcmp(k.mv_data, prefix, prefix_len) != 0))
            break;
        if (fn(&k, &v, mlajit_env_value_in_file(pack->shared, &v, pack->lmdb_bytes), arg))
            break;
    }
    mdb_cursor_close(cursor);
    mdb_txn_abort(txn);
    if (rc != 0 && rc != MDB_NOTFOUND)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: reading its tactics failed: %s", pack->path,
                           mdb_strerror(rc));
    return MLAJIT_OK;
}

static int nearest_fn(const MDB_val *key, const MDB_val *value, int inside, void *arg)
{
    mlajit_tactic_chooser *c = arg;
    if (!inside) {
        mlajit_fail(MLAJIT_ERR_CORRUPT, "a tactic record lies outside the pack");
        mlajit_tactic_skipped_note(c->skipped, MLAJIT_ERR_CORRUPT);
        return 0;
    }
    mlajit_tactic_chooser_offer(c, key->mv_data, key->mv_size, value->mv_data, value->mv_size);
    return 0;
}

int mlajit_pack_tactic_nearest(mlajit_pack *pack, mlajit_tactic_chooser *c)
{
    uint8_t key[MLAJIT_TACTIC_KEY_BYTES];
    int status = pack ? mlajit_tactic_chooser_start(c, key)
                      : mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "pack tactic look-up: pack must not be NULL");
    if (status == MLAJIT_OK)
        status = pack_tactics_scan(pack, key, MLAJIT_TACTIC_PREFIX_BYTES, nearest_fn, c);
    char where[600];
    snprintf(where, sizeof where, "pack %s", pack ? pack->path : "");
    return mlajit_tactic_chooser_end(c, status, where);
}

typedef struct tactic_foreach_job {
    mlajit_tactic_visit_fn visit;
    void *arg;
    size_t seen;
} tactic_foreach_job;

static int foreach_fn(const MDB_val *key, const MDB_val *value, int inside, void *arg)
{
    tactic_foreach_job *j = arg;
    mlajit_tactic_record r;
    int status = inside ? mlajit_tactic_decode_keyed(key->mv_data, key->mv_size, value->mv_data, value->mv_size, &r)
                        : mlajit_fail(MLAJIT_ERR_CORRUPT, "the record lies outside the pack");
    char why[256] = "";
    if (status != MLAJIT_OK)
        snprintf(why, sizeof why, "%s", mlajit_last_error());
    j->seen++;
    return j->visit(key->mv_data, key->mv_size, status == MLAJIT_OK ? &r : NULL, status, why, j->arg);
}

int mlajit_pack_tactic_foreach(mlajit_pack *pack, mlajit_tactic_visit_fn visit, void *arg)
{
    if (!pack || !visit)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "pack tactic foreach: pack and visit must not be NULL");
    tactic_foreach_job j = {.visit = visit, .arg = arg};
    return pack_tactics_scan(pack, NULL, 0, foreach_fn, &j);
}

typedef struct tactic_verify_job {
    mlajit_pack *pack;
    size_t checked;
    int status;
} tactic_verify_job;

static int verify_tactic_visit(const uint8_t *key, size_t key_len, const mlajit_tactic_record *record, int status,
                               const char *why, void *arg)
{
    (void)key;
    (void)key_len;
    tactic_verify_job *j = arg;
    if (!record) {
        j->status = mlajit_fail(status, "pack %s: tactic record %zu: %s", j->pack->path, j->checked, why);
        return 1;
    }
    j->checked++;
    return 0;
}

/* Every tactic record decodes and is its key's, and the manifest counts them. */
static int verify_tactics(mlajit_pack *pack)
{
    tactic_verify_job j = {.pack = pack, .status = MLAJIT_OK};
    int status = mlajit_pack_tactic_foreach(pack, verify_tactic_visit, &j);
    if (status == MLAJIT_OK)
        status = j.status;
    if (status == MLAJIT_OK && j.checked != pack->manifest.tactic_count)
        status = mlajit_fail(MLAJIT_ERR_CORRUPT, "pack %s: %zu tactic records but the manifest counts %zu", pack->path,
                             j.checked, pack->manifest.tactic_count);
    return status;
}
