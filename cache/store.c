/* cache/store.c - the cubin store: content keys, the self-checking value format
 * and the LMDB environment that holds them. No CUDA here.
 *
 * Value format, version 2 (all integers little-endian, no padding):
 *
 *   offset  size  field
 *   0       8     magic "MLAJITC1"
 *   8       4     u32 format version (2)
 *   12      4     u32 header length H: bytes from offset 0 up to the cubin
 *   16      4+n   u32 n, spec_string bytes (no NUL; n < 128)
 *   ..      4+m   u32 m, entry_names bytes (no NUL; m < 256)
 *   ..      8     compile_ms as IEEE-754 double bits
 *   ..      4     registers     (i32)
 *   ..      4     shared_bytes  (i32)
 *   ..      4     spill_bytes   (i32)
 *   ..      4     launch: threads             (i32)
 *   ..      4     launch: smem_bytes          (i32)
 *   ..      4     launch: combine_threads     (i32)
 *   ..      4     launch: combine_smem_bytes  (i32)
 *   ..      12    launch: cluster_dims x, y, z (3 x i32)
 *   ..      8     launch: u64 params_layout_hash
 *   ..      8     u64 created_unix
 *   ..      8     u64 cubin_size (== total length - H)
 *   ..      8     u64 XXH3-64 of the cubin
 *   H-8     8     u64 XXH3-64 of bytes [0, H-8)  (the header checksum)
 *   H       ..    the cubin
 *
 * Every version keeps the first 16 bytes and the header checksum at H-8, so an
 * intact entry of another version (version 1 had no launch record) is told from
 * a damaged one: it is stale, not corrupt.
 */
#include "cache/store.h"

#include "cache/env_registry.h"
#include "common/error.h"
#include "mlajit.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <lmdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* The streaming XXH3 state is only declared (and stack-allocatable) with this. */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

/* ------------------------------------------------------------------------- */
/* Little-endian helpers                                                      */
/* ------------------------------------------------------------------------- */

static void store_u32le(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void store_u64le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t load_u32le(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t load_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* ------------------------------------------------------------------------- */
/* Keys                                                                       */
/* ------------------------------------------------------------------------- */

static void key_feed_u32(XXH3_state_t *state, uint32_t v)
{
    uint8_t bytes[4];
    store_u32le(bytes, v);
    XXH3_128bits_update(state, bytes, sizeof bytes);
}

static void key_feed_u64(XXH3_state_t *state, uint64_t v)
{
    uint8_t bytes[8];
    store_u64le(bytes, v);
    XXH3_128bits_update(state, bytes, sizeof bytes);
}

/* A presence byte then a u64 length then the bytes: NULL, "" and any split of
 * adjacent strings ("ab","c" vs "a","bc") all hash differently. */
static void key_feed_string(XXH3_state_t *state, const char *s)
{
    uint8_t present = s != NULL;
    XXH3_128bits_update(state, &present, 1);
    if (!s)
        return;
    size_t n = strlen(s);
    key_feed_u64(state, (uint64_t)n);
    XXH3_128bits_update(state, s, n);
}

mlajit_cache_key mlajit_cache_key_make(const mlajit_key_inputs *in)
{
    static const mlajit_key_inputs no_inputs = {0};
    if (!in)
        in = &no_inputs;

    XXH3_state_t state;
    XXH3_128bits_reset(&state);
    key_feed_string(&state, MLAJIT_KEY_RECIPE);
    key_feed_string(&state, in->source);
    key_feed_string(&state, in->arch);
    key_feed_u32(&state, (uint32_t)in->nvrtc_major);
    key_feed_u32(&state, (uint32_t)in->nvrtc_minor);
    key_feed_string(&state, in->compile_options);
    XXH128_hash_t h = XXH3_128bits_digest(&state);

    mlajit_cache_key key = {.hi = h.high64, .lo = h.low64};
    return key;
}

void mlajit_cache_key_hex(const mlajit_cache_key *key, char buf[33])
{
    if (!buf)
        return;
    if (!key) {
        buf[0] = '\0';
        return;
    }
    snprintf(buf, 33, "%016" PRIx64 "%016" PRIx64, key->hi, key->lo);
}

uint64_t mlajit_hash64(const void *data, size_t len)
{
    return XXH3_64bits(len ? data : NULL, len);
}

/* ------------------------------------------------------------------------- */
/* Entries: encode / decode                                                   */
/* ------------------------------------------------------------------------- */

static const char ENTRY_MAGIC[8] = {'M', 'L', 'A', 'J', 'I', 'T', 'C', '1'};
#define ENTRY_FORMAT_VERSION 2u
#define ENTRY_PREFIX_BYTES 16u /* magic + version + header length */
#define SPEC_MAX_LEN (sizeof(((mlajit_cache_entry *)0)->spec_string) - 1)
#define NAMES_MAX_LEN (sizeof(((mlajit_cache_entry *)0)->entry_names) - 1)
/* Everything in the header but the two strings' bytes. */
#define LAUNCH_RECORD_BYTES (4 + 4 + 4 + 4 + 3 * 4 + 8)
#define HEADER_FIXED_BYTES (ENTRY_PREFIX_BYTES + 4 + 4 + 8 + 4 + 4 + 4 + LAUNCH_RECORD_BYTES + 8 + 8 + 8 + 8)
#define HEADER_MAX_BYTES (HEADER_FIXED_BYTES + SPEC_MAX_LEN + NAMES_MAX_LEN)

void mlajit_cache_entry_clear(mlajit_cache_entry *entry)
{
    if (!entry)
        return;
    free(entry->cubin);
    memset(entry, 0, sizeof *entry);
}

int mlajit_cache_entry_encode(const mlajit_cache_entry *entry, void **value, size_t *len)
{
    if (!entry || !value || !len)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "cache entry encode: entry, value and len must not be NULL");
    *value = NULL;
    *len = 0;

    size_t spec_len = strnlen(entry->spec_string, sizeof entry->spec_string);
    size_t names_len = strnlen(entry->entry_names, sizeof entry->entry_names);
    if (spec_len > SPEC_MAX_LEN)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "cache entry encode: spec_string is not NUL-terminated within %zu bytes",
                           sizeof entry->spec_string);
    if (names_len > NAMES_MAX_LEN)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "cache entry encode: entry_names is not NUL-terminated within %zu bytes",
                           sizeof entry->entry_names);
    if (entry->cubin_size > 0 && !entry->cubin)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "cache entry encode: cubin is NULL but cubin_size is %zu", entry->cubin_size);

    size_t header_len = HEADER_FIXED_BYTES + spec_len + names_len;
    if (entry->cubin_size > SIZE_MAX - header_len)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "cache entry encode: cubin_size %zu is too large", entry->cubin_size);
    size_t total = header_len + entry->cubin_size;

    uint8_t *out = malloc(total);
    if (!out)
        return mlajit_fail(MLAJIT_ERR_OUT_OF_MEMORY,
                           "cache entry encode: could not allocate %zu bytes", total);

    uint8_t *p = out;
    memcpy(p, ENTRY_MAGIC, sizeof ENTRY_MAGIC);
    p += sizeof ENTRY_MAGIC;
    store_u32le(p, ENTRY_FORMAT_VERSION);
    p += 4;
    store_u32le(p, (uint32_t)header_len);
    p += 4;
    store_u32le(p, (uint32_t)spec_len);
    p += 4;
    memcpy(p, entry->spec_string, spec_len);
    p += spec_len;
    store_u32le(p, (uint32_t)names_len);
    p += 4;
    memcpy(p, entry->entry_names, names_len);
    p += names_len;
    uint64_t compile_ms_bits;
    memcpy(&compile_ms_bits, &entry->compile_ms, sizeof compile_ms_bits);
    store_u64le(p, compile_ms_bits);
    p += 8;
    store_u32le(p, (uint32_t)entry->registers);
    p += 4;
    store_u32le(p, (uint32_t)entry->shared_bytes);
    p += 4;
    store_u32le(p, (uint32_t)entry->spill_bytes);
    p += 4;
    const mlajit_launch_record *launch = &entry->launch;
    const int launch_ints[] = {launch->threads,         launch->smem_bytes,      launch->combine_threads,
                               launch->combine_smem_bytes, launch->cluster_dims[0], launch->cluster_dims[1],
                               launch->cluster_dims[2]};
    for (size_t i = 0; i < sizeof launch_ints / sizeof launch_ints[0]; i++, p += 4)
        store_u32le(p, (uint32_t)launch_ints[i]);
    store_u64le(p, launch->params_layout_hash);
    p += 8;
    store_u64le(p, entry->created_unix);
    p += 8;
    store_u64le(p, (uint64_t)entry->cubin_size);
    p += 8;
    store_u64le(p, mlajit_hash64(entry->cubin, entry->cubin_size));
    p += 8;
    store_u64le(p, mlajit_hash64(out, header_len - 8));
    p += 8;
    if (entry->cubin_size)
        memcpy(p, entry->cubin, entry->cubin_size);

    *value = out;
    *len = total;
    return MLAJIT_OK;
}

/* A bounds-checked cursor over the header: every read either fits or fails. */
typedef struct byte_reader {
    const uint8_t *bytes;
    size_t pos, end;
} byte_reader;

static bool reader_take(byte_reader *r, size_t n, const uint8_t **out)
{
    if (n > r->end - r->pos)
        return false;
    *out = r->bytes + r->pos;
    r->pos += n;
    return true;
}

static bool reader_u32(byte_reader *r, uint32_t *v)
{
    const uint8_t *p;
    if (!reader_take(r, 4, &p))
        return false;
    *v = load_u32le(p);
    return true;
}

static bool reader_u64(byte_reader *r, uint64_t *v)
{
    const uint8_t *p;
    if (!reader_take(r, 8, &p))
        return false;
    *v = load_u64le(p);
    return true;
}

/* Read a length-prefixed string of at most max_len bytes without NULs into dst. */
static int reader_string(byte_reader *r, const char *what, char *dst, size_t max_len)
{
    uint32_t n;
    const uint8_t *p;
    if (!reader_u32(r, &n))
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "header ends before the length of %s", what);
    if (n > max_len)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "%s length %" PRIu32 " exceeds the limit of %zu",
                           what, n, max_len);
    if (!reader_take(r, n, &p))
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "%s length %" PRIu32 " runs past the header", what, n);
    if (memchr(p, '\0', n))
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "%s contains a NUL byte", what);
    memcpy(dst, p, n);
    dst[n] = '\0';
    return MLAJIT_OK;
}

int mlajit_cache_entry_decode(const void *value, size_t len, mlajit_cache_entry *entry)
{
    if (!entry)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache entry decode: entry must not be NULL");
    memset(entry, 0, sizeof *entry);
    if (!value || len == 0)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "cache entry is empty (0 bytes)");
    if (len < ENTRY_PREFIX_BYTES)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "cache entry is %zu bytes, shorter than its %u-byte prefix",
                           len, ENTRY_PREFIX_BYTES);

    const uint8_t *bytes = value;
    if (memcmp(bytes, ENTRY_MAGIC, sizeof ENTRY_MAGIC) != 0)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "cache entry has a bad magic (expected \"MLAJITC1\")");
    uint32_t version = load_u32le(bytes + 8);
    uint32_t header_len = load_u32le(bytes + 12);
    if (version != ENTRY_FORMAT_VERSION) {
        /* Every version keeps the prefix and the header checksum's place: an
         * intact entry of another version is stale (another mlajit wrote it). */
        int intact = header_len >= ENTRY_PREFIX_BYTES + 8 && header_len <= len &&
                     load_u64le(bytes + header_len - 8) == mlajit_hash64(bytes, header_len - 8);
        if (intact)
            return mlajit_fail(MLAJIT_CACHE_STALE,
                               "cache entry has format version %" PRIu32 " (written by %s mlajit); this build reads "
                               "version %u",
                               version, version < ENTRY_FORMAT_VERSION ? "an older" : "a newer", ENTRY_FORMAT_VERSION);
        return mlajit_fail(MLAJIT_ERR_CORRUPT,
                           "cache entry has format version %" PRIu32 " and fails its header checksum; this build "
                           "reads version %u",
                           version, ENTRY_FORMAT_VERSION);
    }
    if (header_len < HEADER_FIXED_BYTES || header_len > HEADER_MAX_BYTES)
        return mlajit_fail(MLAJIT_ERR_CORRUPT,
                           "cache entry header length %" PRIu32 " is outside %zu..%zu",
                           header_len, (size_t)HEADER_FIXED_BYTES, (size_t)HEADER_MAX_BYTES);
    if (header_len > len)
        return mlajit_fail(MLAJIT_ERR_CORRUPT,
                           "cache entry header length %" PRIu32 " exceeds the value length %zu",
                           header_len, len);

    /* Check the header checksum before trusting any field behind it. */
    size_t checked_len = header_len - 8;
    uint64_t header_hash_stored = load_u64le(bytes + checked_len);
    uint64_t header_hash_actual = mlajit_hash64(bytes, checked_len);
    if (header_hash_stored != header_hash_actual)
        return mlajit_fail(MLAJIT_ERR_CORRUPT,
                           "cache entry header checksum mismatch (stored %016" PRIx64
                           ", computed %016" PRIx64 ")",
                           header_hash_stored, header_hash_actual);

    mlajit_cache_entry parsed;
    memset(&parsed, 0, sizeof parsed);
    byte_reader r = {.bytes = bytes, .pos = ENTRY_PREFIX_BYTES, .end = checked_len};
    int status = reader_string(&r, "spec_string", parsed.spec_string, SPEC_MAX_LEN);
    if (status == MLAJIT_OK)
        status = reader_string(&r, "entry_names", parsed.entry_names, NAMES_MAX_LEN);
    if (status != MLAJIT_OK)
        return mlajit_fail_prefix(status, "cache entry: ");

    uint64_t compile_ms_bits = 0, cubin_size = 0, cubin_hash = 0;
    uint32_t registers = 0, shared_bytes = 0, spill_bytes = 0, launch_ints[7] = {0};
    bool fixed_fields = reader_u64(&r, &compile_ms_bits) && reader_u32(&r, &registers) &&
                        reader_u32(&r, &shared_bytes) && reader_u32(&r, &spill_bytes);
    for (size_t i = 0; i < sizeof launch_ints / sizeof launch_ints[0]; i++)
        fixed_fields = fixed_fields && reader_u32(&r, &launch_ints[i]);
    fixed_fields = fixed_fields && reader_u64(&r, &parsed.launch.params_layout_hash) &&
                   reader_u64(&r, &parsed.created_unix) && reader_u64(&r, &cubin_size) && reader_u64(&r, &cubin_hash);
    if (!fixed_fields)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "cache entry header ends before its fixed fields");
    if (r.pos != r.end)
        return mlajit_fail(MLAJIT_ERR_CORRUPT,
                           "cache entry header has %zu unexpected trailing bytes", r.end - r.pos);

    size_t actual_cubin_size = len - header_len;
    if (cubin_size != (uint64_t)actual_cubin_size)
        return mlajit_fail(MLAJIT_ERR_CORRUPT,
                           "cache entry cubin size %" PRIu64 " does not match the %zu bytes stored",
                           cubin_size, actual_cubin_size);
    const uint8_t *cubin = bytes + header_len;
    uint64_t cubin_hash_actual = mlajit_hash64(cubin, actual_cubin_size);
    if (cubin_hash != cubin_hash_actual)
        return mlajit_fail(MLAJIT_ERR_CORRUPT,
                           "cache entry cubin checksum mismatch (stored %016" PRIx64
                           ", computed %016" PRIx64 ")",
                           cubin_hash, cubin_hash_actual);

    /* At least one byte so a successful get always hands back a non-NULL cubin. */
    parsed.cubin = malloc(actual_cubin_size ? actual_cubin_size : 1);
    if (!parsed.cubin)
        return mlajit_fail(MLAJIT_ERR_OUT_OF_MEMORY,
                           "cache entry decode: could not allocate %zu bytes for the cubin",
                           actual_cubin_size);
    if (actual_cubin_size)
        memcpy(parsed.cubin, cubin, actual_cubin_size);
    parsed.cubin_size = actual_cubin_size;
    memcpy(&parsed.compile_ms, &compile_ms_bits, sizeof parsed.compile_ms);
    parsed.registers = (int32_t)registers;
    parsed.shared_bytes = (int32_t)shared_bytes;
    parsed.spill_bytes = (int32_t)spill_bytes;
    parsed.launch.threads = (int32_t)launch_ints[0];
    parsed.launch.smem_bytes = (int32_t)launch_ints[1];
    parsed.launch.combine_threads = (int32_t)launch_ints[2];
    parsed.launch.combine_smem_bytes = (int32_t)launch_ints[3];
    for (int i = 0; i < 3; i++)
        parsed.launch.cluster_dims[i] = (int32_t)launch_ints[4 + i];

    *entry = parsed;
    return MLAJIT_OK;
}

/* ------------------------------------------------------------------------- */
/* The LMDB store                                                             */
/* ------------------------------------------------------------------------- */

/* The map is reserved address space, not disk: the data file grows as used. */
#if SIZE_MAX > 0xffffffffu
#define STORE_MAP_SIZE ((size_t)4 << 30)
#else
#define STORE_MAP_SIZE ((size_t)1 << 30)
#endif
/* MDB_NOTLS gives every live read transaction its own slot; leave headroom for
 * many threads (and processes) reading at once. */
#define STORE_MAX_READERS 512
/* Where a damaged data file is moved so the next open starts afresh. */
#define DAMAGED_DATA_NAME "data.mdb.damaged"
/* Metadata lives beside the entries under keys that are not 16 bytes long. */
static const char COUNTERS_KEY[] = "mlajit-counters-v1";
#define COUNTERS_FIELDS 8
#define COUNTERS_VALUE_BYTES (8 * COUNTERS_FIELDS + 8)

struct mlajit_store {
    mlajit_shared_env *shared; /* the process's one environment for this directory */
    MDB_env *env;
    MDB_dbi dbi;
    int readonly;
    char *dir;
};

void mlajit_cache_key_to_bytes(const mlajit_cache_key *key, uint8_t bytes[16])
{
    for (int i = 0; i < 8; i++) {
        bytes[i] = (uint8_t)(key->hi >> (56 - 8 * i));
        bytes[8 + i] = (uint8_t)(key->lo >> (56 - 8 * i));
    }
}

mlajit_cache_key mlajit_cache_key_from_bytes(const uint8_t bytes[16])
{
    mlajit_cache_key key = {0, 0};
    for (int i = 0; i < 8; i++) {
        key.hi = key.hi << 8 | bytes[i];
        key.lo = key.lo << 8 | bytes[8 + i];
    }
    return key;
}

/* LMDB's own ways of saying the file is not what it should be. */
int mlajit_lmdb_rc_is_damage(int rc)
{
    return rc == MDB_INVALID || rc == MDB_CORRUPTED || rc == MDB_PAGE_NOTFOUND || rc == MDB_VERSION_MISMATCH ||
           rc == MDB_BAD_TXN || rc == MDB_BAD_VALSIZE;
}

static int store_lmdb_fail(const mlajit_store *store, const char *what, int rc)
{
    if (rc == MDB_MAP_FULL)
        return mlajit_fail(MLAJIT_ERR_CACHE,
                           "cache %s: %s failed: the cache is full (%zu-byte map); run `mlajit cache gc` "
                           "to make room",
                           store->dir, what, (size_t)STORE_MAP_SIZE);
    if (mlajit_lmdb_rc_is_damage(rc))
        return mlajit_fail(MLAJIT_ERR_CORRUPT,
                           "cache %s: %s failed: %s (the data file is damaged; run `mlajit cache verify`)",
                           store->dir, what, mdb_strerror(rc));
    return mlajit_fail(MLAJIT_ERR_CACHE, "cache %s: %s failed: %s", store->dir, what, mdb_strerror(rc));
}

/* mkdir -p with mode 0755; an existing directory is fine. */
static int make_directories(const char *dir)
{
    size_t n = strlen(dir);
    char *path = malloc(n + 1);
    if (!path)
        return mlajit_fail(MLAJIT_ERR_OUT_OF_MEMORY, "cache %s: out of memory", dir);
    memcpy(path, dir, n + 1);

    int status = MLAJIT_OK;
    for (size_t i = 1; i <= n && status == MLAJIT_OK; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char saved = path[i];
        path[i] = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            status = mlajit_fail(MLAJIT_ERR_IO, "cache %s: cannot create directory %s: %s", dir, path,
                                 strerror(errno));
        path[i] = saved;
    }
    free(path);
    if (status != MLAJIT_OK)
        return status;

    struct stat st;
    if (stat(dir, &st) != 0)
        return mlajit_fail(MLAJIT_ERR_IO, "cache %s: cannot stat the directory: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return mlajit_fail(MLAJIT_ERR_IO, "cache %s: exists and is not a directory", dir);
    return MLAJIT_OK;
}

/* Bytes of the data file now (it only grows while open; other processes may
 * grow it too). -1 when it cannot be read. */
static int64_t env_data_file_bytes(MDB_env *env)
{
    int fd = -1;
    struct stat st;
    if (mdb_env_get_fd(env, &fd) != 0 || fd < 0 || fstat(fd, &st) != 0)
        return -1;
    return (int64_t)st.st_size;
}

int mlajit_lmdb_check_size(MDB_env *env, int64_t file_bytes, const char *what)
{
    MDB_envinfo info;
    MDB_stat st;
    if (mdb_env_info(env, &info) != 0 || mdb_env_stat(env, &st) != 0) {
        mlajit_fail(MLAJIT_ERR_CORRUPT, "%s: cannot read the LMDB meta pages", what);
        return MDB_INVALID;
    }
    /* The pages the meta page claims must all be in the file: reading a page
     * past the end of a mapped file is SIGBUS, not an error code. */
    uint64_t needed = ((uint64_t)info.me_last_pgno + 1) * st.ms_psize;
    if (file_bytes < 0 || (uint64_t)file_bytes < needed) {
        mlajit_fail(MLAJIT_ERR_CORRUPT, "%s: the data file is %lld bytes but its meta page needs %llu (truncated)",
                    what, (long long)file_bytes, (unsigned long long)needed);
        return MDB_CORRUPTED;
    }
    return 0;
}

static int store_env_init(mlajit_shared_env *shared, void *arg)
{
    (void)arg;
    int rc = mlajit_lmdb_check_size(shared->env, env_data_file_bytes(shared->env), shared->real_path);
    if (rc != 0)
        return rc;
    if (!(shared->env_flags & MDB_RDONLY)) {
        /* Free reader slots left behind by processes that died mid-read. */
        int dead_readers = 0;
        mdb_reader_check(shared->env, &dead_readers);
    }
    /* The unnamed database always exists, so a read transaction opens it and
     * opening never waits for another process's writer. */
    MDB_txn *txn;
    rc = mdb_txn_begin(shared->env, NULL, MDB_RDONLY, &txn);
    if (rc != 0)
        return rc;
    rc = mdb_dbi_open(txn, NULL, 0, &shared->dbi[0]);
    if (rc == 0)
        rc = mdb_txn_commit(txn); /* the dbi handle outlives only a committed txn */
    else
        mdb_txn_abort(txn);
    return rc;
}

/* Move a damaged data file aside so the next open starts a fresh one, but only
 * when no process has the cache open: LMDB's first opener holds an exclusive
 * fcntl lock on byte 0 of lock.mdb, and every later one a shared lock there. */
static int store_set_aside_damaged(const char *dir, const char *why)
{
    size_t n = strlen(dir) + sizeof "/" DAMAGED_DATA_NAME;
    char *lock_path = malloc(n), *data_path = malloc(n), *aside_path = malloc(n);
    int repaired = 0;
    if (!lock_path || !data_path || !aside_path)
        goto out;
    snprintf(lock_path, n, "%s/lock.mdb", dir);
    snprintf(data_path, n, "%s/data.mdb", dir);
    snprintf(aside_path, n, "%s/" DAMAGED_DATA_NAME, dir);
    int fd = open(lock_path, O_RDWR | O_CLOEXEC);
    if (fd < 0 && errno != ENOENT)
        goto out;
    if (fd >= 0) {
        struct flock exclusive = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
        if (fcntl(fd, F_SETLK, &exclusive) != 0) {
            close(fd); /* another process has it open: leave the file alone */
            goto out;
        }
    }
    if (rename(data_path, aside_path) == 0) {
        repaired = 1;
        mlajit_warn("cache %s: data.mdb was damaged (%s); moved it to %s and starting an empty cache", dir, why,
                    DAMAGED_DATA_NAME);
    }
    if (fd >= 0)
        close(fd); /* releases the lock; the next LMDB opener re-initializes lock.mdb */
out:
    free(lock_path);
    free(data_path);
    free(aside_path);
    return repaired;
}

int mlajit_store_open(const char *dir, int readonly, mlajit_store **out)
{
    if (!out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache open: out must not be NULL");
    *out = NULL;
    if (!dir || !dir[0])
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache open: dir must be a non-empty path");

    if (readonly) {
        struct stat st;
        if (stat(dir, &st) != 0)
            return mlajit_fail(MLAJIT_ERR_IO, "cache %s: cannot open read-only: %s", dir, strerror(errno));
        if (!S_ISDIR(st.st_mode))
            return mlajit_fail(MLAJIT_ERR_IO, "cache %s: is not a directory", dir);
    } else {
        int status = make_directories(dir);
        if (status != MLAJIT_OK)
            return status;
    }

    mlajit_store *store = calloc(1, sizeof *store);
    if (!store)
        return mlajit_fail(MLAJIT_ERR_OUT_OF_MEMORY, "cache %s: out of memory", dir);
    store->readonly = readonly != 0;
    store->dir = strdup(dir);
    if (!store->dir) {
        free(store);
        return mlajit_fail(MLAJIT_ERR_OUT_OF_MEMORY, "cache %s: out of memory", dir);
    }

    mlajit_env_request req = {
        .path = dir, .env_flags = store->readonly ? MDB_RDONLY : 0u, .map_size = STORE_MAP_SIZE,
        .max_readers = STORE_MAX_READERS, .init = store_env_init,
    };
    int lmdb_rc = 0;
    int status = mlajit_env_acquire(&req, &store->shared, &lmdb_rc);
    if (status != MLAJIT_OK && !store->readonly && mlajit_lmdb_rc_is_damage(lmdb_rc)) {
        char why[512];
        snprintf(why, sizeof why, "%s", mlajit_last_error());
        if (store_set_aside_damaged(dir, why))
            status = mlajit_env_acquire(&req, &store->shared, &lmdb_rc);
        else
            mlajit_fail(status, "%s", why); /* keep the reason for the message below */
    }
    if (status != MLAJIT_OK) {
        if (mlajit_lmdb_rc_is_damage(lmdb_rc))
            status = mlajit_fail_prefix(MLAJIT_ERR_CORRUPT, "%s", store->readonly
                                            ? "damaged cache (a writable open sets it aside): "
                                            : "damaged cache, in use by another process (it is set aside when "
                                              "no process has it open): ");
        mlajit_store_close(store);
        return status;
    }
    store->env = store->shared->env;
    store->dbi = store->shared->dbi[0];
    *out = store;
    return MLAJIT_OK;
}

void mlajit_store_close(mlajit_store *store)
{
    if (!store)
        return;
    mlajit_env_release(store->shared);
    free(store->dir);
    free(store);
}

int mlajit_store_is_readonly(const mlajit_store *store) { return store ? store->readonly : 1; }

const char *mlajit_store_dir(const mlajit_store *store) { return store ? store->dir : ""; }

int mlajit_store_get(mlajit_store *store, const mlajit_cache_key *key, mlajit_cache_entry *entry)
{
    if (!store || !key || !entry)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache get: store, key and entry must not be NULL");
    memset(entry, 0, sizeof *entry);

    uint8_t key_bytes[16];
    mlajit_cache_key_to_bytes(key, key_bytes);
    MDB_val k = {.mv_size = sizeof key_bytes, .mv_data = key_bytes};
    MDB_val v;

    MDB_txn *txn;
    int rc = mdb_txn_begin(store->env, NULL, MDB_RDONLY, &txn);
    if (rc != 0)
        return store_lmdb_fail(store, "beginning a read transaction", rc);
    rc = mdb_get(txn, store->dbi, &k, &v);
    if (rc != 0) {
        mdb_txn_abort(txn);
        char hex[33];
        mlajit_cache_key_hex(key, hex);
        if (rc == MDB_NOTFOUND)
            return mlajit_fail(MLAJIT_ERR_NOT_FOUND, "cache %s: no entry for key %s", store->dir, hex);
        return store_lmdb_fail(store, "mdb_get", rc);
    }
    int status;
    if (!mlajit_env_value_in_file(store->shared, &v, env_data_file_bytes(store->env)))
        status = mlajit_fail(MLAJIT_ERR_CORRUPT, "the stored value (%zu bytes) lies outside the data file",
                             v.mv_size);
    else /* decoding copies the cubin out of the map, so the transaction can end right after */
        status = mlajit_cache_entry_decode(v.mv_data, v.mv_size, entry);
    mdb_txn_abort(txn);
    if (status != MLAJIT_OK) {
        char hex[33];
        mlajit_cache_key_hex(key, hex);
        return mlajit_fail_prefix(status, "cache %s: key %s: ", store->dir, hex);
    }
    return MLAJIT_OK;
}

/* One short write transaction: put and commit. */
static int store_write(mlajit_store *store, const void *key_bytes, size_t key_len, const void *value, size_t len)
{
    if (store->readonly)
        return mlajit_fail(MLAJIT_ERR_CACHE, "cache %s: opened read-only; cannot write", store->dir);

    MDB_val k = {.mv_size = key_len, .mv_data = (void *)key_bytes};
    MDB_val v = {.mv_size = len, .mv_data = (void *)value};

    MDB_txn *txn;
    int rc = mdb_txn_begin(store->env, NULL, 0, &txn);
    if (rc != 0)
        return store_lmdb_fail(store, "beginning a write transaction", rc);
    rc = mdb_put(txn, store->dbi, &k, &v, 0);
    if (rc != 0) {
        mdb_txn_abort(txn);
        return store_lmdb_fail(store, "mdb_put", rc);
    }
    rc = mdb_txn_commit(txn); /* frees txn even on failure */
    if (rc != 0)
        return store_lmdb_fail(store, "committing a write", rc);
    return MLAJIT_OK;
}

int mlajit_store_put(mlajit_store *store, const mlajit_cache_key *key, const mlajit_cache_entry *entry)
{
    if (!store || !key || !entry)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache put: store, key and entry must not be NULL");
    void *value;
    size_t len;
    int status = mlajit_cache_entry_encode(entry, &value, &len);
    if (status != MLAJIT_OK)
        return status;
    uint8_t key_bytes[16];
    mlajit_cache_key_to_bytes(key, key_bytes);
    status = store_write(store, key_bytes, sizeof key_bytes, value, len);
    free(value);
    return status;
}

int mlajit_store_put_raw(mlajit_store *store, const mlajit_cache_key *key, const void *value, size_t len)
{
    if (!store || !key || (!value && len > 0))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "cache put_raw: store and key must not be NULL, nor value when len > 0");
    static const uint8_t nothing = 0;
    uint8_t key_bytes[16];
    mlajit_cache_key_to_bytes(key, key_bytes);
    return store_write(store, key_bytes, sizeof key_bytes, len ? value : &nothing, len);
}

int mlajit_store_delete_many(mlajit_store *store, const mlajit_cache_key *keys, size_t count, size_t *deleted)
{
    if (deleted)
        *deleted = 0;
    if (!store || (!keys && count > 0))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache delete: store and keys must not be NULL");
    if (store->readonly)
        return mlajit_fail(MLAJIT_ERR_CACHE, "cache %s: opened read-only; cannot delete", store->dir);

    MDB_txn *txn;
    int rc = mdb_txn_begin(store->env, NULL, 0, &txn);
    if (rc != 0)
        return store_lmdb_fail(store, "beginning a write transaction", rc);
    size_t gone = 0;
    for (size_t i = 0; i < count; i++) {
        uint8_t key_bytes[16];
        mlajit_cache_key_to_bytes(&keys[i], key_bytes);
        MDB_val k = {.mv_size = sizeof key_bytes, .mv_data = key_bytes};
        rc = mdb_del(txn, store->dbi, &k, NULL);
        if (rc == MDB_NOTFOUND)
            continue; /* another process removed it first */
        if (rc != 0) {
            mdb_txn_abort(txn);
            return store_lmdb_fail(store, "mdb_del", rc);
        }
        gone++;
    }
    rc = mdb_txn_commit(txn);
    if (rc != 0)
        return store_lmdb_fail(store, "committing a delete", rc);
    if (deleted)
        *deleted = gone;
    return MLAJIT_OK;
}

int mlajit_store_delete(mlajit_store *store, const mlajit_cache_key *key)
{
    if (!store || !key)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache delete: store and key must not be NULL");
    size_t deleted = 0;
    int status = mlajit_store_delete_many(store, key, 1, &deleted);
    if (status == MLAJIT_OK && deleted == 0) {
        char hex[33];
        mlajit_cache_key_hex(key, hex);
        return mlajit_fail(MLAJIT_ERR_NOT_FOUND, "cache %s: no entry for key %s", store->dir, hex);
    }
    return status;
}

int mlajit_store_foreach(mlajit_store *store, mlajit_store_visit_fn visit, void *arg)
{
    if (!store || !visit)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache foreach: store and visit must not be NULL");
    MDB_txn *txn;
    int rc = mdb_txn_begin(store->env, NULL, MDB_RDONLY, &txn);
    if (rc != 0)
        return store_lmdb_fail(store, "beginning a read transaction", rc);
    MDB_cursor *cursor;
    rc = mdb_cursor_open(txn, store->dbi, &cursor);
    if (rc != 0) {
        mdb_txn_abort(txn);
        return store_lmdb_fail(store, "mdb_cursor_open", rc);
    }
    int64_t file_bytes = env_data_file_bytes(store->env);
    int status = MLAJIT_OK;
    MDB_val k, v;
    for (rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)) {
        if (k.mv_size != 16)
            continue; /* metadata, not an entry */
        mlajit_cache_key key = mlajit_cache_key_from_bytes(k.mv_data);
        int inside = mlajit_env_value_in_file(store->shared, &v, file_bytes);
        if (visit(&key, inside ? v.mv_data : NULL, v.mv_size, arg) != 0) {
            rc = MDB_NOTFOUND;
            break;
        }
    }
    mdb_cursor_close(cursor);
    mdb_txn_abort(txn);
    if (rc != MDB_NOTFOUND)
        status = store_lmdb_fail(store, "iterating the entries", rc);
    return status;
}

typedef struct stats_sum {
    int64_t entries, value_bytes;
} stats_sum;

static int stats_visit(const mlajit_cache_key *key, const void *value, size_t len, void *arg)
{
    (void)key;
    (void)value;
    stats_sum *sum = arg;
    sum->entries++;
    sum->value_bytes += (int64_t)len;
    return 0;
}

int mlajit_store_stats_get(mlajit_store *store, mlajit_store_stats *stats)
{
    if (!store || !stats)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache stats: store and stats must not be NULL");
    memset(stats, 0, sizeof *stats);
    stats_sum sum = {0, 0};
    int status = mlajit_store_foreach(store, stats_visit, &sum);
    if (status != MLAJIT_OK)
        return status;
    int64_t file_bytes = env_data_file_bytes(store->env);
    if (file_bytes < 0)
        return mlajit_fail(MLAJIT_ERR_IO, "cache %s: cannot stat data.mdb: %s", store->dir, strerror(errno));
    stats->entries = sum.entries;
    stats->data_file_bytes = file_bytes;
    stats->value_bytes = sum.value_bytes;
    return MLAJIT_OK;
}

/* Counters: COUNTERS_FIELDS u64 little-endian, then the XXH3-64 of them. */
static void counters_to_array(const mlajit_store_counters *c, uint64_t a[COUNTERS_FIELDS])
{
    uint64_t v[COUNTERS_FIELDS] = {c->memory_hits, c->pack_hits, c->disk_hits, c->compiles,
                                   c->compile_us,  c->corrupt,   c->jit_refusals, c->contexts};
    memcpy(a, v, sizeof v);
}

static void counters_from_array(const uint64_t a[COUNTERS_FIELDS], mlajit_store_counters *c)
{
    c->memory_hits = a[0];
    c->pack_hits = a[1];
    c->disk_hits = a[2];
    c->compiles = a[3];
    c->compile_us = a[4];
    c->corrupt = a[5];
    c->jit_refusals = a[6];
    c->contexts = a[7];
}

/* 1 and the fields when v holds a well-formed counters value, else 0. */
static int counters_parse(const MDB_val *v, uint64_t a[COUNTERS_FIELDS])
{
    if (v->mv_size != COUNTERS_VALUE_BYTES)
        return 0;
    const uint8_t *p = v->mv_data;
    if (load_u64le(p + 8 * COUNTERS_FIELDS) != mlajit_hash64(p, 8 * COUNTERS_FIELDS))
        return 0;
    for (int i = 0; i < COUNTERS_FIELDS; i++)
        a[i] = load_u64le(p + 8 * i);
    return 1;
}

int mlajit_store_counters_get(mlajit_store *store, mlajit_store_counters *out)
{
    if (!store || !out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache counters: store and out must not be NULL");
    memset(out, 0, sizeof *out);
    MDB_txn *txn;
    int rc = mdb_txn_begin(store->env, NULL, MDB_RDONLY, &txn);
    if (rc != 0)
        return store_lmdb_fail(store, "beginning a read transaction", rc);
    MDB_val k = {.mv_size = sizeof COUNTERS_KEY - 1, .mv_data = (void *)COUNTERS_KEY}, v;
    uint64_t a[COUNTERS_FIELDS];
    rc = mdb_get(txn, store->dbi, &k, &v);
    if (rc == 0 && mlajit_env_value_in_file(store->shared, &v, env_data_file_bytes(store->env)) &&
        counters_parse(&v, a))
        counters_from_array(a, out);
    mdb_txn_abort(txn);
    return MLAJIT_OK; /* absent or damaged counters read as zero */
}

int mlajit_store_counters_add(mlajit_store *store, const mlajit_store_counters *delta)
{
    if (!store || !delta)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache counters: store and delta must not be NULL");
    if (store->readonly)
        return mlajit_fail(MLAJIT_ERR_CACHE, "cache %s: opened read-only; cannot write", store->dir);
    MDB_txn *txn;
    int rc = mdb_txn_begin(store->env, NULL, 0, &txn);
    if (rc != 0)
        return store_lmdb_fail(store, "beginning a write transaction", rc);
    MDB_val k = {.mv_size = sizeof COUNTERS_KEY - 1, .mv_data = (void *)COUNTERS_KEY}, v;
    uint64_t sum[COUNTERS_FIELDS] = {0}, add[COUNTERS_FIELDS];
    /* Read-add-write inside one write transaction: writers are serialized across
     * processes, so concurrent contexts never lose each other's counts. */
    if (mdb_get(txn, store->dbi, &k, &v) == 0 && mlajit_env_value_in_file(store->shared, &v, env_data_file_bytes(store->env)))
        counters_parse(&v, sum);
    counters_to_array(delta, add);
    uint8_t bytes[COUNTERS_VALUE_BYTES];
    for (int i = 0; i < COUNTERS_FIELDS; i++)
        store_u64le(bytes + 8 * i, sum[i] + add[i]);
    store_u64le(bytes + 8 * COUNTERS_FIELDS, mlajit_hash64(bytes, 8 * COUNTERS_FIELDS));
    v.mv_size = sizeof bytes;
    v.mv_data = bytes;
    rc = mdb_put(txn, store->dbi, &k, &v, 0);
    if (rc != 0) {
        mdb_txn_abort(txn);
        return store_lmdb_fail(store, "mdb_put of the counters", rc);
    }
    rc = mdb_txn_commit(txn);
    if (rc != 0)
        return store_lmdb_fail(store, "committing the counters", rc);
    return MLAJIT_OK;
}

/* ------------------------------------------------------------------------- */
/* Default directory                                                          */
/* ------------------------------------------------------------------------- */

static int format_dir(char *buf, size_t len, const char *base, const char *suffix)
{
    int n = snprintf(buf, len, "%s%s", base, suffix);
    if (n < 0 || (size_t)n >= len) {
        buf[0] = '\0';
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "cache default dir: \"%s%s\" needs %d bytes; the buffer holds %zu", base, suffix,
                           n + 1, len);
    }
    return MLAJIT_OK;
}

int mlajit_cache_default_dir(char *buf, size_t len)
{
    if (!buf || len == 0)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache default dir: buf must hold at least 1 byte");

    const char *explicit_dir = getenv("MLAJIT_CACHE_DIR");
    if (explicit_dir && explicit_dir[0])
        return format_dir(buf, len, explicit_dir, "");
    /* The XDG spec says relative values are invalid and must be ignored. */
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (xdg && xdg[0] == '/')
        return format_dir(buf, len, xdg, "/mlajit");
    const char *home = getenv("HOME");
    if (home && home[0])
        return format_dir(buf, len, home, "/.cache/mlajit");

    buf[0] = '\0';
    return mlajit_fail(MLAJIT_ERR_NOT_FOUND,
                       "cache default dir: none of MLAJIT_CACHE_DIR, XDG_CACHE_HOME or HOME is set");
}
