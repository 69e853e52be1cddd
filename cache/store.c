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

#include "cache/codec.h"
#include "cache/env_registry.h"
#include "cache/lmdb_check.h"
#include "common/alloc.h"
#include "common/error.h"
#include "common/file.h"
#include "mlajit.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <lmdb.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* The streaming XXH3 state is only declared (and stack-allocatable) with this. */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

/* ------------------------------------------------------------------------- */
/* Keys                                                                       */
/* ------------------------------------------------------------------------- */

static void key_feed_u32(XXH3_state_t *state, uint32_t v)
{
    uint8_t bytes[4];
    mlajit_put_u32le(bytes, v);
    XXH3_128bits_update(state, bytes, sizeof bytes);
}

static void key_feed_u64(XXH3_state_t *state, uint64_t v)
{
    uint8_t bytes[8];
    mlajit_put_u64le(bytes, v);
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

    uint8_t *out = mlajit_malloc(total);
    if (!out)
        return mlajit_fail_oom("encoding a cache entry of %zu bytes", total);

    uint8_t *p = out;
    memcpy(p, ENTRY_MAGIC, sizeof ENTRY_MAGIC);
    p += sizeof ENTRY_MAGIC;
    mlajit_put_u32le(p, ENTRY_FORMAT_VERSION);
    p += 4;
    mlajit_put_u32le(p, (uint32_t)header_len);
    p += 4;
    mlajit_put_string(&p, entry->spec_string, spec_len);
    mlajit_put_string(&p, entry->entry_names, names_len);
    uint64_t compile_ms_bits;
    memcpy(&compile_ms_bits, &entry->compile_ms, sizeof compile_ms_bits);
    mlajit_put_u64le(p, compile_ms_bits);
    p += 8;
    mlajit_put_u32le(p, (uint32_t)entry->registers);
    p += 4;
    mlajit_put_u32le(p, (uint32_t)entry->shared_bytes);
    p += 4;
    mlajit_put_u32le(p, (uint32_t)entry->spill_bytes);
    p += 4;
    const mlajit_launch_record *launch = &entry->launch;
    const int launch_ints[] = {launch->threads,         launch->smem_bytes,      launch->combine_threads,
                               launch->combine_smem_bytes, launch->cluster_dims[0], launch->cluster_dims[1],
                               launch->cluster_dims[2]};
    for (size_t i = 0; i < sizeof launch_ints / sizeof launch_ints[0]; i++, p += 4)
        mlajit_put_u32le(p, (uint32_t)launch_ints[i]);
    mlajit_put_u64le(p, launch->params_layout_hash);
    p += 8;
    mlajit_put_u64le(p, entry->created_unix);
    p += 8;
    mlajit_put_u64le(p, (uint64_t)entry->cubin_size);
    p += 8;
    mlajit_put_u64le(p, mlajit_hash64(entry->cubin, entry->cubin_size));
    p += 8;
    mlajit_put_u64le(p, mlajit_hash64(out, header_len - 8));
    p += 8;
    if (entry->cubin_size)
        memcpy(p, entry->cubin, entry->cubin_size);

    *value = out;
    *len = total;
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
    uint32_t version = mlajit_get_u32le(bytes + 8);
    uint32_t header_len = mlajit_get_u32le(bytes + 12);
    if (version != ENTRY_FORMAT_VERSION) {
        /* Every version keeps the prefix and the header checksum's place: an
         * intact entry of another version is stale (another mlajit wrote it). */
        int intact = header_len >= ENTRY_PREFIX_BYTES + 8 && header_len <= len &&
                     mlajit_get_u64le(bytes + header_len - 8) == mlajit_hash64(bytes, header_len - 8);
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
    uint64_t header_hash_stored = mlajit_get_u64le(bytes + checked_len);
    uint64_t header_hash_actual = mlajit_hash64(bytes, checked_len);
    if (header_hash_stored != header_hash_actual)
        return mlajit_fail(MLAJIT_ERR_CORRUPT,
                           "cache entry header checksum mismatch (stored %016" PRIx64
                           ", computed %016" PRIx64 ")",
                           header_hash_stored, header_hash_actual);

    mlajit_cache_entry parsed;
    memset(&parsed, 0, sizeof parsed);
    mlajit_byte_reader r = {.bytes = bytes, .pos = ENTRY_PREFIX_BYTES, .end = checked_len};
    int status = mlajit_reader_string(&r, "spec_string", parsed.spec_string, SPEC_MAX_LEN);
    if (status == MLAJIT_OK)
        status = mlajit_reader_string(&r, "entry_names", parsed.entry_names, NAMES_MAX_LEN);
    if (status != MLAJIT_OK)
        return mlajit_fail_prefix(status, "cache entry: ");

    uint64_t compile_ms_bits = 0, cubin_size = 0, cubin_hash = 0;
    uint32_t registers = 0, shared_bytes = 0, spill_bytes = 0, launch_ints[7] = {0};
    bool fixed_fields = mlajit_reader_u64(&r, &compile_ms_bits) && mlajit_reader_u32(&r, &registers) &&
                        mlajit_reader_u32(&r, &shared_bytes) && mlajit_reader_u32(&r, &spill_bytes);
    for (size_t i = 0; i < sizeof launch_ints / sizeof launch_ints[0]; i++)
        fixed_fields = fixed_fields && mlajit_reader_u32(&r, &launch_ints[i]);
    fixed_fields = fixed_fields && mlajit_reader_u64(&r, &parsed.launch.params_layout_hash) &&
                   mlajit_reader_u64(&r, &parsed.created_unix) && mlajit_reader_u64(&r, &cubin_size) && mlajit_reader_u64(&r, &cubin_hash);
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
    parsed.cubin = mlajit_malloc(actual_cubin_size ? actual_cubin_size : 1);
    if (!parsed.cubin)
        return mlajit_fail_oom("a %zu-byte cubin of a cache entry", actual_cubin_size);
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
/*
 * Why the store reads with its own code and checks before LMDB writes:
 * LMDB 0.9 does not check its pages, so a damaged page (a flipped bit, a
 * partial copy, a stray write) makes it read or write out of bounds inside
 * the process that embeds mlajit. Three designs were weighed: a whole-file
 * checksum (a hit in a fresh process would read the whole file, and every
 * commit would rewrite it), a structural check in a child process (a fork or
 * exec per open), and the one here: reads never run LMDB - mlajit's reader
 * (lmdb_check.c) walks the pages with pread and checks each before use, so a
 * hit costs a few small reads, takes no lock, maps nothing (no SIGBUS when a
 * file shrinks) and serves from read-only files; writes run LMDB only on a
 * file that passed the whole structural check inside the same write
 * transaction, where LMDB's writer lock keeps every other writer out and
 * the snapshot's pages cannot be reused, so nothing changes between the check
 * and LMDB's use. The open-time check (stamp-gated, see mlajit_store_open_ex)
 * finds damage a hit would not touch, so it is set aside early. */

/* The map is reserved address space, not disk: the data file grows as used. */
#if SIZE_MAX > 0xffffffffu
#define STORE_MAP_SIZE ((size_t)4 << 30)
#else
#define STORE_MAP_SIZE ((size_t)1 << 30)
#endif
#define STORE_MAX_READERS 512
#define DATA_NAME "data.mdb"
#define LOCK_NAME "lock.mdb"
/* The stamp of the last clean check: see stamp_* below. */
#define STAMP_NAME "data.mdb.verified"
/* Damaged data files are moved to DAMAGED_PREFIX N, N = 1, 2, ... */
#define DAMAGED_PREFIX "data.mdb.damaged."
#define COMPILE_LOCK_NAME "compile.lock"
/* Reads of a snapshot a writer may have reused meanwhile are done again. */
#define SNAPSHOT_TRIES 8
/* A stamp vouches for a file only once the file is this old: a change made
 * within the file system's timestamp granularity of the last one would leave
 * the modification time as it was (the "racy clean" problem of git's index). */
#define STAMP_SETTLED_NS 1000000000LL
#define STAMP_BYTES 64u
static const char STAMP_MAGIC[8] = {'M', 'L', 'A', 'J', 'I', 'T', 'V', 'S'};
#define STAMP_VERSION 1u
/* Salvage writes what it recovered in transactions of at most this much. */
#define SALVAGE_BATCH_BYTES ((size_t)64 << 20)
/* Metadata lives beside the entries under keys that are not 16 bytes long. */
static const char COUNTERS_KEY[] = "mlajit-counters-v1";
#define COUNTERS_FIELDS 8
#define COUNTERS_VALUE_BYTES (8 * COUNTERS_FIELDS + 8)

struct mlajit_store {
    char *dir;
    char *data_path;
    int readonly;
    int keep_damaged;
    atomic_int warned_damage; /* one warning per store for damage it cannot set aside */
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
                           "cache %s: %s failed: the cache is full (%zu-byte map); remove entries (a garbage "
                           "collection of the cache) to make room",
                           store->dir, what, (size_t)STORE_MAP_SIZE);
    if (mlajit_lmdb_rc_is_damage(rc))
        return mlajit_fail(MLAJIT_ERR_CORRUPT,
                           "cache %s: %s failed: %s (the data file is damaged; a verify of the cache says where)",
                           store->dir, what, mdb_strerror(rc));
    return mlajit_fail(MLAJIT_ERR_CACHE, "cache %s: %s failed: %s", store->dir, what, mdb_strerror(rc));
}

/* dir + "/" + name, malloc'd (NULL when out of memory). */
static char *path_in(const char *dir, const char *name)
{
    size_t n = strlen(dir) + 1 + strlen(name) + 1;
    char *p = mlajit_malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* mkdir -p with mode 0755; an existing directory is fine. */
static int make_directories(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        return MLAJIT_OK;
    size_t n = strlen(dir);
    char *path = mlajit_malloc(n + 1);
    if (!path)
        return mlajit_fail_oom("cache %s", dir);
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

    if (stat(dir, &st) != 0)
        return mlajit_fail(MLAJIT_ERR_IO, "cache %s: cannot stat the directory: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return mlajit_fail(MLAJIT_ERR_IO, "cache %s: exists and is not a directory", dir);
    return MLAJIT_OK;
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

/* ---- the data file ------------------------------------------------------------ */

/* Open data.mdb for reading. MLAJIT_OK and *fd, *st; MLAJIT_ERR_NOT_FOUND when
 * there is none (or it is empty: LMDB starts an empty file afresh); else an
 * error (MLAJIT_ERR_IO for a FIFO, a device, a directory, ...). */
static int data_open(const mlajit_store *s, int *fd, struct stat *st)
{
    char what[64 + 16];
    snprintf(what, sizeof what, "cache %.60s: data.mdb", s->dir);
    int status = mlajit_open_regular(s->data_path, O_RDONLY, 0, what, fd, st);
    if (status != MLAJIT_OK) {
        if (errno == ENOENT)
            return mlajit_fail(MLAJIT_ERR_NOT_FOUND, "cache %s: no data file yet", s->dir);
        return status;
    }
    if (st->st_size == 0) {
        close(*fd);
        *fd = -1;
        return mlajit_fail(MLAJIT_ERR_NOT_FOUND, "cache %s: the data file is empty", s->dir);
    }
    return MLAJIT_OK;
}

/* ---- the stamp of the last clean check ------------------------------------------ */
/*
 * data.mdb.verified, 64 bytes, little-endian: magic "MLAJITVS", u32 version 1,
 * u32 page size, u64 file size, i64 mtime seconds, i64 mtime nanoseconds, u64
 * snapshot transaction id, u64 XXH3-64 of both meta records, u64 XXH3-64 of the
 * 56 bytes before it. It says: a file of this size, modification time and meta
 * pages passed the structural check. The file's identity (device, inode) is
 * left out so a copy made with its times kept (cp -a, rsync -a, an image
 * layer) needs no new check. Written only by a clean check of a file at least
 * STAMP_SETTLED_NS old, replaced atomically (rename); a missing, damaged or
 * stale stamp only costs a check. */

static void stamp_encode(const struct stat *st, const mlajit_lmdb_meta *m, uint8_t out[STAMP_BYTES])
{
    memcpy(out, STAMP_MAGIC, sizeof STAMP_MAGIC);
    mlajit_put_u32le(out + 8, STAMP_VERSION);
    mlajit_put_u32le(out + 12, m->psize);
    mlajit_put_u64le(out + 16, (uint64_t)st->st_size);
    mlajit_put_u64le(out + 24, (uint64_t)st->st_mtim.tv_sec);
    mlajit_put_u64le(out + 32, (uint64_t)st->st_mtim.tv_nsec);
    mlajit_put_u64le(out + 40, m->txnid);
    mlajit_put_u64le(out + 48, m->hash);
    mlajit_put_u64le(out + 56, mlajit_hash64(out, 56));
}

/* The stamp's path in buf (PATH_MAX bytes: the open checked that the directory
 * fits), made without allocating, so the stamp's reads and writes cannot run
 * out of memory and quietly stand for "no stamp". */
static const char *stamp_path(const mlajit_store *s, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", s->dir, STAMP_NAME);
    return buf;
}

static int stamp_matches(const mlajit_store *s, const struct stat *st, const mlajit_lmdb_meta *m)
{
    char buf[PATH_MAX];
    const char *path = stamp_path(s, buf, sizeof buf);
    int fd = -1, match = 0;
    if (mlajit_open_regular(path, O_RDONLY, 0, "stamp", &fd, NULL) == MLAJIT_OK) {
        uint8_t have[STAMP_BYTES], want[STAMP_BYTES];
        stamp_encode(st, m, want);
        match = pread(fd, have, sizeof have, 0) == (ssize_t)sizeof have && memcmp(have, want, sizeof have) == 0;
        close(fd);
    }
    mlajit_clear_error();
    return match;
}

static void stamp_write(const mlajit_store *s, const struct stat *st, const mlajit_lmdb_meta *m)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t age = ((int64_t)now.tv_sec - (int64_t)st->st_mtim.tv_sec) * 1000000000LL +
                  ((int64_t)now.tv_nsec - (int64_t)st->st_mtim.tv_nsec);
    if (age < STAMP_SETTLED_NS || s->readonly)
        return;
    char buf[PATH_MAX], tmp[PATH_MAX + 32];
    const char *path = stamp_path(s, buf, sizeof buf);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    uint8_t bytes[STAMP_BYTES];
    stamp_encode(st, m, bytes);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd >= 0) {
        int ok = write(fd, bytes, sizeof bytes) == (ssize_t)sizeof bytes;
        close(fd);
        if (!ok || rename(tmp, path) != 0)
            unlink(tmp);
    }
}

static void stamp_remove(const mlajit_store *s)
{
    char buf[PATH_MAX];
    unlink(stamp_path(s, buf, sizeof buf));
}

/* ---- damage: moving a data file aside ---------------------------------------- */

typedef struct set_aside_job {
    const mlajit_store *s;
    dev_t dev;    /* the damaged file: another process may have replaced it already */
    ino_t ino;
    char name[64];
    int in_use;
} set_aside_job;

/* Move data.mdb to the first free DAMAGED_PREFIX N, never replacing a file:
 * link() fails on an existing name; renameat2(RENAME_NOREPLACE) where the
 * file system has no hard links. 1 when moved. */
static int move_to_new_name(const char *dir, const char *data_path, char *name, size_t name_len)
{
    for (unsigned n = 1; n < 100000; n++) {
        snprintf(name, name_len, DAMAGED_PREFIX "%u", n);
        char *aside = path_in(dir, name);
        if (!aside)
            return 0;
        int rc = link(data_path, aside), err = errno;
        if (rc == 0) {
            rc = unlink(data_path);
            if (rc != 0)
                unlink(aside);
        } else if (err != EEXIST) {
            rc = (int)syscall(SYS_renameat2, AT_FDCWD, data_path, AT_FDCWD, aside, 1 /* RENAME_NOREPLACE */);
            err = errno;
        }
        free(aside);
        if (rc == 0)
            return 1;
        if (err != EEXIST)
            return 0;
    }
    return 0;
}

/* Runs with no LMDB environment of this process on the directory (and none
 * can be opened meanwhile): so opening lock.mdb here drops no lock of ours.
 * 1: moved; 2: data.mdb is no longer the damaged file; 0: not moved (in_use
 * when another process holds the environment). */
static int set_aside_unused(void *arg)
{
    set_aside_job *job = arg;
    const mlajit_store *s = job->s;
    char *lock_path = path_in(s->dir, LOCK_NAME);
    if (!lock_path)
        return 0;
    /* LMDB's first opener holds a write lock on byte 0 of lock.mdb and every
     * process with the environment open a read lock there: taking a write lock
     * says no process has it open, and holding it keeps new openers waiting
     * until the file has moved. An OFD lock conflicts with those POSIX locks. */
    int fd = open(lock_path, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
    free(lock_path);
    if (fd < 0 && errno != ENOENT)
        return 0;
    if (fd >= 0) {
        struct stat ls;
        struct flock excl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1, .l_pid = 0};
        int locked = fstat(fd, &ls) == 0 && S_ISREG(ls.st_mode) &&
                     (fcntl(fd, F_OFD_SETLK, &excl) == 0 || (errno == EINVAL && fcntl(fd, F_SETLK, &excl) == 0));
        if (!locked) {
            job->in_use = 1;
            close(fd);
            return 0;
        }
    }
    int moved = 0;
    struct stat ds;
    if (stat(s->data_path, &ds) != 0 || ds.st_dev != job->dev || ds.st_ino != job->ino)
        moved = 2; /* already moved or replaced by another process: nothing to do */
    else if (move_to_new_name(s->dir, s->data_path, job->name, sizeof job->name))
        moved = 1;
    if (moved == 1)
        stamp_remove(s);
    if (fd >= 0)
        close(fd); /* releases the lock; the next LMDB opener initializes lock.mdb afresh */
    return moved;
}

/* Structural damage (why) in the data file with device dev, inode ino. Sets
 * it aside (one warning) where this store may and no process holds it open;
 * else warns once per store that only what is intact is served. Returns 1 when
 * the file is gone from data.mdb (moved now, or already by another process). */
static int store_damaged(mlajit_store *s, const char *why, dev_t dev, ino_t ino)
{
    char reason[300];
    snprintf(reason, sizeof reason, "%s", why);
    if (!s->readonly && !s->keep_damaged) {
        set_aside_job job = {.s = s, .dev = dev, .ino = ino};
        int moved = mlajit_env_run_if_unused(s->dir, set_aside_unused, &job);
        if (moved == 1)
            mlajit_warn("cache %s: data.mdb is damaged (%s); moved it to %s and starting an empty cache "
                        "(a repair of the cache from %s/%s recovers its intact entries)",
                        s->dir, reason, job.name, s->dir, job.name);
        if (moved == 1 || moved == 2)
            return 1;
        if (atomic_exchange(&s->warned_damage, 1) == 0)
            mlajit_warn("cache %s: data.mdb is damaged (%s) and in use by %s, so it stays; serving the entries "
                        "that can still be read and storing nothing (it is set aside when no process has it "
                        "open)",
                        s->dir, reason, moved == -1 ? "this process" : "another process");
        return 0;
    }
    if (!s->keep_damaged && atomic_exchange(&s->warned_damage, 1) == 0)
        mlajit_warn("cache %s: data.mdb is damaged (%s); serving the entries that can still be read (a writable "
                    "open or a repair of the cache sets it aside)",
                    s->dir, reason);
    return 0;
}

/* ---- reading: mlajit's checked reader ----------------------------------------- */

typedef int (*snapshot_fn)(int fd, const mlajit_lmdb_meta *m, void *arg);

/* Run fn on a consistent snapshot of the data file: again when a writer may
 * have reused its pages meanwhile. fn's MLAJIT_ERR_CORRUPT on a held snapshot
 * (or damaged meta pages) is damage: handed to store_damaged, and returned as
 * MLAJIT_ERR_CORRUPT with the message (*damaged set to 1; 2 when the file was
 * set aside). */
static int store_read(mlajit_store *s, snapshot_fn fn, void *arg, int *damaged)
{
    *damaged = 0;
    int meta_failures = 0;
    for (int attempt = 0; attempt < SNAPSHOT_TRIES; attempt++) {
        int fd;
        struct stat st;
        int status = data_open(s, &fd, &st);
        if (status != MLAJIT_OK)
            return status;
        mlajit_lmdb_meta m;
        status = mlajit_lmdb_read_meta(fd, (int64_t)st.st_size, &m);
        int held = 1;
        if (status == MLAJIT_OK) {
            status = fn(fd, &m, arg);
            held = mlajit_lmdb_snapshot_held(fd, &m);
        } else if (status == MLAJIT_ERR_CORRUPT && meta_failures++ == 0) {
            held = 0; /* a meta page read while a writer wrote it: read once more */
            struct timespec pause = {0, 2000000};
            nanosleep(&pause, NULL);
        }
        close(fd);
        if (!held)
            continue;
        if (status == MLAJIT_ERR_CORRUPT) {
            char why[512];
            snprintf(why, sizeof why, "%s", mlajit_last_error());
            *damaged = 1 + store_damaged(s, why, st.st_dev, st.st_ino);
            return mlajit_fail(MLAJIT_ERR_CORRUPT, "cache %s: data.mdb is damaged: %s", s->dir, why);
        }
        return status;
    }
    return mlajit_fail(MLAJIT_ERR_CACHE, "cache %s: the data file changed under each of %d reads; try again",
                       s->dir, SNAPSHOT_TRIES);
}

typedef struct value_read {
    const void *key;
    size_t key_len;
    void *value;
    size_t len;
} value_read;

static int value_read_fn(int fd, const mlajit_lmdb_meta *m, void *arg)
{
    value_read *r = arg;
    free(r->value);
    r->value = NULL;
    return mlajit_lmdb_lookup(fd, m, r->key, r->key_len, &r->value, &r->len);
}

/* The stored bytes of key (malloc'd), or NOT_FOUND / an error. A damaged
 * file is a miss once store_damaged has dealt with it. */
static int store_read_value(mlajit_store *s, const void *key, size_t key_len, void **value, size_t *len,
                            int *damaged)
{
    value_read r = {.key = key, .key_len = key_len};
    int status = store_read(s, value_read_fn, &r, damaged);
    if (status != MLAJIT_OK) {
        free(r.value);
        if (*damaged)
            return MLAJIT_ERR_NOT_FOUND; /* a miss; the message says why */
        return status;
    }
    *value = r.value;
    *len = r.len;
    return MLAJIT_OK;
}

/* ---- writing: LMDB, on a checked file ---------------------------------------- */

static int store_env_init(mlajit_shared_env *shared, void *arg)
{
    (void)arg;
    /* Free reader slots left behind by processes that died mid-read (mlajit
     * itself holds none; older versions and other tools may). */
    int dead_readers = 0;
    mdb_reader_check(shared->env, &dead_readers);
    /* The unnamed database needs no page read to open. */
    MDB_txn *txn;
    int rc = mdb_txn_begin(shared->env, NULL, MDB_RDONLY, &txn);
    if (rc != 0)
        return rc;
    rc = mdb_dbi_open(txn, NULL, 0, &shared->dbi[0]);
    if (rc == 0)
        rc = mdb_txn_commit(txn); /* the dbi handle outlives only a committed txn */
    else
        mdb_txn_abort(txn);
    return rc;
}

/* What LMDB reads when it opens the file, before any transaction of ours
 * could check it: the meta pages (a page size of 0 would divide by zero in
 * LMDB), and that data.mdb and lock.mdb are regular files. */
static int store_precheck(mlajit_store *s, int *damaged)
{
    *damaged = 0;
    char *lock_path = path_in(s->dir, LOCK_NAME);
    struct stat st;
    if (!lock_path)
        return mlajit_fail_oom("cache %s", s->dir);
    int lock_ok = stat(lock_path, &st) != 0 || S_ISREG(st.st_mode);
    free(lock_path);
    if (!lock_ok)
        return mlajit_fail(MLAJIT_ERR_IO, "cache %s: lock.mdb is %s, not a regular file; remove it", s->dir,
                           mlajit_file_kind(st.st_mode));
    int fd;
    int status = data_open(s, &fd, &st);
    if (status == MLAJIT_ERR_NOT_FOUND)
        return MLAJIT_OK; /* LMDB creates it */
    if (status != MLAJIT_OK)
        return status;
    mlajit_lmdb_meta m;
    status = mlajit_lmdb_read_meta(fd, (int64_t)st.st_size, &m);
    close(fd);
    if (status == MLAJIT_ERR_CORRUPT) {
        char why[512];
        snprintf(why, sizeof why, "%s", mlajit_last_error());
        *damaged = 1 + store_damaged(s, why, st.st_dev, st.st_ino);
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "cache %s: data.mdb is damaged: %s", s->dir, why);
    }
    return status;
}

typedef int (*txn_fn)(mlajit_store *s, MDB_txn *txn, MDB_dbi dbi, void *arg);

/* One write transaction: LMDB runs fn only after the whole snapshot passed
 * the structural check inside the transaction. Damage found there sets the
 * file aside (where this store may) and the write is made again, once, on the
 * fresh file. */
static int store_write_txn(mlajit_store *s, txn_fn fn, void *arg)
{
    if (s->readonly)
        return mlajit_fail(MLAJIT_ERR_CACHE, "cache %s: opened read-only; cannot write", s->dir);
    mlajit_env_request req = {
        .path = s->dir, .env_flags = 0, .map_size = STORE_MAP_SIZE, .max_readers = STORE_MAX_READERS,
        .trusted_bytes = 1, /* every read of it is checked here first */
        .init = store_env_init,
    };
    int status = MLAJIT_OK;
    for (int attempt = 0; attempt < 2; attempt++) {
        int damaged;
        status = store_precheck(s, &damaged);
        if (status != MLAJIT_OK) {
            if (damaged == 2)
                continue;
            return status;
        }
        mlajit_shared_env *shared = NULL;
        int lmdb_rc = 0;
        status = mlajit_env_acquire(&req, &shared, &lmdb_rc);
        if (status != MLAJIT_OK)
            return status;
        MDB_txn *txn;
        int rc = mdb_txn_begin(shared->env, NULL, 0, &txn);
        if (rc != 0) {
            mlajit_env_release(shared);
            return store_lmdb_fail(s, "beginning a write transaction", rc);
        }
        /* The snapshot this transaction starts from, read as LMDB will. */
        int fd = -1;
        struct stat st;
        mlajit_lmdb_meta m;
        uint64_t snapshot = (uint64_t)mdb_txn_id(txn) - 1;
        if (mdb_env_get_fd(shared->env, &fd) != 0 || fstat(fd, &st) != 0)
            status = mlajit_fail(MLAJIT_ERR_IO, "cache %s: cannot stat data.mdb: %s", s->dir, strerror(errno));
        else if ((status = mlajit_lmdb_read_meta_of(fd, (int64_t)st.st_size, snapshot, &m)) == MLAJIT_OK)
            status = mlajit_lmdb_check(fd, &m, 0, NULL, NULL, NULL);
        if (status != MLAJIT_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", mlajit_last_error());
            mdb_txn_abort(txn);
            mlajit_env_release(shared); /* before setting it aside: see set_aside_unused */
            if (status == MLAJIT_ERR_CORRUPT && store_damaged(s, why, st.st_dev, st.st_ino))
                continue;
            return mlajit_fail(status, "cache %s: data.mdb %s: %s", s->dir,
                               status == MLAJIT_ERR_CORRUPT ? "is damaged" : "cannot be checked", why);
        }
        status = fn(s, txn, shared->dbi[0], arg);
        if (status != MLAJIT_OK) {
            mdb_txn_abort(txn);
            mlajit_env_release(shared);
            return status;
        }
        rc = mdb_txn_commit(txn); /* frees txn even on failure */
        mlajit_env_release(shared);
        if (rc != 0)
            return store_lmdb_fail(s, "committing a write", rc);
        return MLAJIT_OK;
    }
    return status;
}

/* ---- opening ------------------------------------------------------------------------ */

/* A file that is there must be writable for a writable store. */
static int check_writable(const char *dir, const char *name)
{
    char *path = path_in(dir, name);
    if (!path)
        return mlajit_fail_oom("cache %s", dir);
    struct stat st;
    int status = MLAJIT_OK;
    if (stat(path, &st) == 0) {
        if (!S_ISREG(st.st_mode))
            status = mlajit_fail(MLAJIT_ERR_IO, "cache %s: %s is %s, not a regular file; remove it", dir, name,
                                 mlajit_file_kind(st.st_mode));
        else if (faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) != 0)
            status = mlajit_fail(MLAJIT_ERR_IO, "cache %s: cannot write %s: %s", dir, name, strerror(errno));
    }
    free(path);
    return status;
}

/* The open-time check: the whole file, unless the stamp says it is unchanged
 * since a clean check. Damage goes to store_damaged. */
static int open_check_fn(int fd, const mlajit_lmdb_meta *m, void *arg)
{
    mlajit_store_check_report *rep = arg;
    mlajit_lmdb_report lr;
    int status = mlajit_lmdb_check(fd, m, 0, NULL, NULL, &lr);
    rep->pages = lr.pages;
    rep->tree_pages = lr.tree_pages;
    rep->free_pages = lr.free_pages;
    rep->entries = lr.entries;
    return status;
}

typedef struct check_job {
    const mlajit_store *s;
    mlajit_store_check_report *rep;
    int use_stamp;
    int stamped_ok; /* the stamp matched: nothing was walked */
    struct stat st;
    mlajit_lmdb_meta m;
} check_job;

static int check_job_fn(int fd, const mlajit_lmdb_meta *m, void *arg)
{
    check_job *job = arg;
    struct stat st;
    if (fstat(fd, &st) != 0)
        return mlajit_fail(MLAJIT_ERR_IO, "cannot stat data.mdb: %s", strerror(errno));
    job->st = st;
    job->m = *m;
    job->rep->data_file_bytes = (int64_t)st.st_size;
    if (job->use_stamp && stamp_matches(job->s, &st, m)) {
        job->stamped_ok = 1;
        return MLAJIT_OK;
    }
    int status = open_check_fn(fd, m, job->rep);
    if (status == MLAJIT_ERR_CORRUPT)
        snprintf(job->rep->problem, sizeof job->rep->problem, "%s", mlajit_last_error());
    return status;
}

static int store_check_whole(mlajit_store *s, int use_stamp, mlajit_store_check_report *rep)
{
    memset(rep, 0, sizeof *rep);
    check_job job = {.s = s, .rep = rep, .use_stamp = use_stamp};
    int damaged;
    int status = store_read(s, check_job_fn, &job, &damaged);
    if (status == MLAJIT_ERR_CORRUPT) {
        rep->damaged = 1;
        if (!rep->problem[0]) /* damaged meta pages: the message says */
            snprintf(rep->problem, sizeof rep->problem, "%s", mlajit_last_error());
    } else if (status == MLAJIT_OK && !job.stamped_ok) {
        stamp_write(s, &job.st, &job.m);
    }
    return status;
}

int mlajit_store_open_ex(const char *dir, unsigned flags, mlajit_store **out)
{
    if (!out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache open: out must not be NULL");
    *out = NULL;
    if (!dir || !dir[0])
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache open: dir must be a non-empty path");
    if (flags & ~(unsigned)(MLAJIT_STORE_READONLY | MLAJIT_STORE_KEEP_DAMAGED))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache open: flags 0x%x has unknown bits", flags);
    size_t dir_len = strlen(dir);
    if (dir_len + sizeof "/" DAMAGED_PREFIX "99999" > PATH_MAX)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "cache open: the directory path is %zu characters; with the cache's file names it "
                           "must fit PATH_MAX (%d)", dir_len, PATH_MAX);
    int readonly = (flags & MLAJIT_STORE_READONLY) != 0;
    if (readonly) {
        struct stat st;
        if (stat(dir, &st) != 0)
            return mlajit_fail(MLAJIT_ERR_IO, "cache %s: cannot open read-only: %s", dir, strerror(errno));
        if (!S_ISDIR(st.st_mode))
            return mlajit_fail(MLAJIT_ERR_IO, "cache %s: is not a directory", dir);
    } else {
        int status = make_directories(dir);
        if (status == MLAJIT_OK && faccessat(AT_FDCWD, dir, W_OK | X_OK, AT_EACCESS) != 0)
            status = mlajit_fail(MLAJIT_ERR_IO, "cache %s: cannot write the directory: %s", dir, strerror(errno));
        if (status == MLAJIT_OK)
            status = check_writable(dir, DATA_NAME);
        if (status == MLAJIT_OK)
            status = check_writable(dir, LOCK_NAME);
        if (status != MLAJIT_OK)
            return status;
    }

    mlajit_store *store = mlajit_calloc(1, sizeof *store);
    if (!store)
        return mlajit_fail_oom("cache %s", dir);
    store->readonly = readonly;
    store->keep_damaged = (flags & MLAJIT_STORE_KEEP_DAMAGED) != 0;
    store->dir = mlajit_strdup(dir);
    store->data_path = path_in(dir, DATA_NAME);
    if (!store->dir || !store->data_path) {
        mlajit_store_close(store);
        return mlajit_fail_oom("cache %s", dir);
    }
    /* A data file that is not a regular file is refused here, never opened by LMDB. */
    int fd;
    struct stat st;
    int status = data_open(store, &fd, &st);
    if (status == MLAJIT_OK)
        close(fd);
    else if (status != MLAJIT_ERR_NOT_FOUND) {
        mlajit_store_close(store);
        return status;
    }
    /* Reads are checked page by page whatever the file holds; the whole-file
     * check finds damage a hit would not touch, so it is set aside before a
     * write or a later look-up meets it. A read-only store cannot set a file
     * aside, so it leaves the file to its checked reads; the CLI
     * (MLAJIT_STORE_KEEP_DAMAGED) checks in each command. */
    if (status == MLAJIT_OK && !readonly && !store->keep_damaged) {
        mlajit_store_check_report rep;
        atomic_store(&store->warned_damage, 1); /* a file in use elsewhere fails the open: the caller says */
        status = store_check_whole(store, 1, &rep);
        atomic_store(&store->warned_damage, 0);
        if (status == MLAJIT_ERR_CORRUPT) {
            /* store_damaged set it aside (the store goes on empty), or it is in use elsewhere */
            struct stat now;
            if (stat(store->data_path, &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev) {
                char why[512];
                snprintf(why, sizeof why, "%s", mlajit_last_error());
                mlajit_store_close(store);
                return mlajit_fail(MLAJIT_ERR_CORRUPT,
                                   "%s (damaged, and in use by another process: it is set aside when no process "
                                   "has it open)", why);
            }
        } else if (status != MLAJIT_OK && status != MLAJIT_ERR_NOT_FOUND) {
            mlajit_store_close(store);
            return status;
        }
    }
    mlajit_clear_error();
    *out = store;
    return MLAJIT_OK;
}

int mlajit_store_open(const char *dir, int readonly, mlajit_store **out)
{
    return mlajit_store_open_ex(dir, readonly ? MLAJIT_STORE_READONLY : 0u, out);
}

void mlajit_store_close(mlajit_store *store)
{
    if (!store)
        return;
    free(store->data_path);
    free(store->dir);
    free(store);
}

int mlajit_store_is_readonly(const mlajit_store *store) { return store ? store->readonly : 1; }

const char *mlajit_store_dir(const mlajit_store *store) { return store ? store->dir : ""; }

int mlajit_store_check(mlajit_store *store, mlajit_store_check_report *report)
{
    mlajit_store_check_report mine;
    if (!report)
        report = &mine;
    memset(report, 0, sizeof *report);
    if (!store)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache check: store must not be NULL");
    return store_check_whole(store, 0, report);
}

/* ---- entries --------------------------------------------------------------------- */

int mlajit_store_get(mlajit_store *store, const mlajit_cache_key *key, mlajit_cache_entry *entry)
{
    if (!store || !key || !entry)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache get: store, key and entry must not be NULL");
    memset(entry, 0, sizeof *entry);
    uint8_t key_bytes[16];
    mlajit_cache_key_to_bytes(key, key_bytes);
    char hex[33];
    mlajit_cache_key_hex(key, hex);
    void *value;
    size_t len;
    int damaged;
    int status = store_read_value(store, key_bytes, sizeof key_bytes, &value, &len, &damaged);
    if (status == MLAJIT_ERR_NOT_FOUND && damaged)
        return mlajit_fail_prefix(MLAJIT_ERR_NOT_FOUND, "key %s: a miss: ", hex);
    if (status == MLAJIT_ERR_NOT_FOUND)
        return mlajit_fail(MLAJIT_ERR_NOT_FOUND, "cache %s: no entry for key %s", store->dir, hex);
    if (status != MLAJIT_OK)
        return status;
    status = mlajit_cache_entry_decode(value, len, entry);
    free(value);
    if (status != MLAJIT_OK)
        return mlajit_fail_prefix(status, "cache %s: key %s: ", store->dir, hex);
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

/* 1 and the fields when bytes hold a well-formed counters value, else 0. */
static int counters_parse(const void *bytes, size_t len, uint64_t a[COUNTERS_FIELDS])
{
    if (len != COUNTERS_VALUE_BYTES)
        return 0;
    const uint8_t *p = bytes;
    if (mlajit_get_u64le(p + 8 * COUNTERS_FIELDS) != mlajit_hash64(p, 8 * COUNTERS_FIELDS))
        return 0;
    for (int i = 0; i < COUNTERS_FIELDS; i++)
        a[i] = mlajit_get_u64le(p + 8 * i);
    return 1;
}

/* Read-add-write of the counters inside a write transaction (writers are
 * serialized across processes, so concurrent contexts never lose counts). */
static int counters_add_in(mlajit_store *s, MDB_txn *txn, MDB_dbi dbi, const mlajit_store_counters *delta)
{
    MDB_val k = {.mv_size = sizeof COUNTERS_KEY - 1, .mv_data = (void *)COUNTERS_KEY}, v;
    uint64_t sum[COUNTERS_FIELDS] = {0}, add[COUNTERS_FIELDS];
    if (mdb_get(txn, dbi, &k, &v) == 0) /* a checked snapshot: the value lies within its page */
        counters_parse(v.mv_data, v.mv_size, sum);
    counters_to_array(delta, add);
    uint8_t bytes[COUNTERS_VALUE_BYTES];
    for (int i = 0; i < COUNTERS_FIELDS; i++)
        mlajit_put_u64le(bytes + 8 * i, sum[i] + add[i]);
    mlajit_put_u64le(bytes + 8 * COUNTERS_FIELDS, mlajit_hash64(bytes, 8 * COUNTERS_FIELDS));
    v.mv_size = sizeof bytes;
    v.mv_data = bytes;
    int rc = mdb_put(txn, dbi, &k, &v, 0);
    return rc ? store_lmdb_fail(s, "mdb_put of the counters", rc) : MLAJIT_OK;
}

typedef struct put_job {
    const uint8_t *key;
    size_t key_len;
    const void *value;
    size_t len;
    const mlajit_store_counters *delta;
} put_job;

static int put_fn(mlajit_store *s, MDB_txn *txn, MDB_dbi dbi, void *arg)
{
    put_job *job = arg;
    MDB_val k = {.mv_size = job->key_len, .mv_data = (void *)job->key};
    MDB_val v = {.mv_size = job->len, .mv_data = (void *)job->value};
    int rc = mdb_put(txn, dbi, &k, &v, 0);
    if (rc != 0)
        return store_lmdb_fail(s, "mdb_put", rc);
    return job->delta ? counters_add_in(s, txn, dbi, job->delta) : MLAJIT_OK;
}

int mlajit_store_put_counted(mlajit_store *store, const mlajit_cache_key *key, const mlajit_cache_entry *entry,
                             const mlajit_store_counters *delta)
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
    put_job job = {.key = key_bytes, .key_len = sizeof key_bytes, .value = value, .len = len, .delta = delta};
    status = store_write_txn(store, put_fn, &job);
    free(value);
    return status;
}

int mlajit_store_put(mlajit_store *store, const mlajit_cache_key *key, const mlajit_cache_entry *entry)
{
    return mlajit_store_put_counted(store, key, entry, NULL);
}

int mlajit_store_put_raw(mlajit_store *store, const mlajit_cache_key *key, const void *value, size_t len)
{
    if (!store || !key || (!value && len > 0))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "cache put_raw: store and key must not be NULL, nor value when len > 0");
    static const uint8_t nothing = 0;
    uint8_t key_bytes[16];
    mlajit_cache_key_to_bytes(key, key_bytes);
    put_job job = {.key = key_bytes, .key_len = sizeof key_bytes, .value = len ? value : &nothing, .len = len};
    return store_write_txn(store, put_fn, &job);
}

/* ---- records beside the entries ---------------------------------------------------- */

#define RECORD_KEY_MAX 511u /* LMDB's key limit */

static int record_key_ok(const char *what, const void *key, size_t key_len)
{
    if (!key || key_len == 0 || key_len > RECORD_KEY_MAX || key_len == 16)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "cache %s: a record key of %zu bytes; allowed 1..%u bytes, but not 16 (the entries' keys)",
                           what, key ? key_len : 0, RECORD_KEY_MAX);
    return MLAJIT_OK;
}

int mlajit_store_record_get(mlajit_store *store, const void *key, size_t key_len, void **value, size_t *len)
{
    if (!store || !value || !len)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache record get: store, value and len must not be NULL");
    *value = NULL;
    *len = 0;
    int status = record_key_ok("record get", key, key_len);
    if (status != MLAJIT_OK)
        return status;
    int damaged;
    status = store_read_value(store, key, key_len, value, len, &damaged);
    if (status == MLAJIT_ERR_NOT_FOUND && !damaged)
        return mlajit_fail(MLAJIT_ERR_NOT_FOUND, "cache %s: no such record", store->dir);
    return status;
}

typedef struct record_copy {
    uint8_t *key;
    size_t key_len;
    uint8_t *value;
    size_t len;
} record_copy;

typedef struct record_scan_job {
    const void *prefix;
    size_t prefix_len;
    record_copy *found;
    size_t count, cap;
    int oom;
} record_scan_job;

static void record_scan_reset(record_scan_job *j)
{
    for (size_t i = 0; i < j->count; i++)
        free(j->found[i].key); /* the value shares its allocation */
    j->count = 0;
    j->oom = 0;
}

static int record_scan_visit(const void *key, size_t key_len, const void *value, size_t len, int value_ok, void *arg)
{
    record_scan_job *j = arg;
    if (key_len == 16 || !value_ok)
        return 0;
    if (j->count == j->cap) {
        size_t cap = j->cap ? 2 * j->cap : 16;
        record_copy *grown = mlajit_realloc(j->found, cap * sizeof *grown);
        if (!grown) {
            j->oom = 1;
            return 1;
        }
        j->found = grown;
        j->cap = cap;
    }
    uint8_t *bytes = mlajit_malloc(key_len + (len ? len : 1));
    if (!bytes) {
        j->oom = 1;
        return 1;
    }
    memcpy(bytes, key, key_len);
    if (len)
        memcpy(bytes + key_len, value, len);
    j->found[j->count++] = (record_copy){.key = bytes, .key_len = key_len, .value = bytes + key_len, .len = len};
    return 0;
}

/* Collected first and visited after: a snapshot read again after a writer
 * raced it must not show the visitor a record twice. */
static int record_scan_fn(int fd, const mlajit_lmdb_meta *m, void *arg)
{
    record_scan_job *j = arg;
    record_scan_reset(j);
    int status = mlajit_lmdb_scan_prefix(fd, m, j->prefix, j->prefix_len, record_scan_visit, j);
    if (status == MLAJIT_OK && j->oom)
        status = mlajit_fail_oom("a scan of %zu records", j->cap);
    return status;
}

int mlajit_store_record_scan(mlajit_store *store, const void *prefix, size_t prefix_len,
                             mlajit_store_record_fn visit, void *arg)
{
    if (!store || !visit || !prefix || prefix_len == 0 || prefix_len > RECORD_KEY_MAX)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "cache record scan: store, visit and a prefix of 1..%u bytes must be given", RECORD_KEY_MAX);
    record_scan_job j = {.prefix = prefix, .prefix_len = prefix_len};
    int damaged;
    int status = store_read(store, record_scan_fn, &j, &damaged);
    if (status == MLAJIT_ERR_NOT_FOUND && !damaged)
        status = MLAJIT_OK; /* no data file: no records */
    for (size_t i = 0; i < j.count && status == MLAJIT_OK; i++)
        if (visit(j.found[i].key, j.found[i].key_len, j.found[i].value, j.found[i].len, arg))
            break;
    record_scan_reset(&j);
    free(j.found);
    if (status == MLAJIT_OK)
        mlajit_clear_error();
    return status;
}

typedef struct record_job {
    const mlajit_store_record *records;
    size_t count, gone;
} record_job;

static int record_put_fn(mlajit_store *s, MDB_txn *txn, MDB_dbi dbi, void *arg)
{
    record_job *job = arg;
    static const uint8_t nothing = 0;
    for (size_t i = 0; i < job->count; i++) {
        const mlajit_store_record *r = &job->records[i];
        MDB_val k = {.mv_size = r->key_len, .mv_data = (void *)r->key};
        MDB_val v = {.mv_size = r->len, .mv_data = r->len ? (void *)r->value : (void *)&nothing};
        int rc = mdb_put(txn, dbi, &k, &v, 0);
        if (rc != 0)
            return store_lmdb_fail(s, "mdb_put of a record", rc);
    }
    return MLAJIT_OK;
}

/* Deletes the records' keys (entries' too: mlajit_store_delete_many); an
 * absent key was removed by another process first. */
static int record_delete_fn(mlajit_store *s, MDB_txn *txn, MDB_dbi dbi, void *arg)
{
    record_job *job = arg;
    job->gone = 0;
    for (size_t i = 0; i < job->count; i++) {
        MDB_val k = {.mv_size = job->records[i].key_len, .mv_data = (void *)job->records[i].key};
        int rc = mdb_del(txn, dbi, &k, NULL);
        if (rc == MDB_NOTFOUND)
            continue;
        if (rc != 0)
            return store_lmdb_fail(s, "mdb_del", rc);
        job->gone++;
    }
    return MLAJIT_OK;
}

static int records_ok(const char *what, const mlajit_store_record *records, size_t count, int with_values)
{
    if (!records && count)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache %s: records must not be NULL", what);
    for (size_t i = 0; i < count; i++) {
        int status = record_key_ok(what, records[i].key, records[i].key_len);
        if (status != MLAJIT_OK)
            return status;
        if (with_values && !records[i].value && records[i].len)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache %s: record %zu has no value but %zu bytes", what,
                               i, records[i].len);
    }
    return MLAJIT_OK;
}

int mlajit_store_record_put(mlajit_store *store, const mlajit_store_record *records, size_t count)
{
    if (!store)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache record put: store must not be NULL");
    int status = records_ok("record put", records, count, 1);
    if (status != MLAJIT_OK || count == 0)
        return status;
    record_job job = {.records = records, .count = count};
    return store_write_txn(store, record_put_fn, &job);
}

int mlajit_store_record_delete(mlajit_store *store, const mlajit_store_record *records, size_t count,
                               size_t *deleted)
{
    if (deleted)
        *deleted = 0;
    if (!store)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache record delete: store must not be NULL");
    int status = records_ok("record delete", records, count, 0);
    if (status != MLAJIT_OK || count == 0)
        return status;
    if (store->readonly)
        return mlajit_fail(MLAJIT_ERR_CACHE, "cache %s: opened read-only; cannot delete", store->dir);
    record_job job = {.records = records, .count = count};
    status = store_write_txn(store, record_delete_fn, &job);
    if (status == MLAJIT_OK && deleted)
        *deleted = job.gone;
    return status;
}

int mlajit_store_delete_many(mlajit_store *store, const mlajit_cache_key *keys, size_t count, size_t *deleted)
{
    if (deleted)
        *deleted = 0;
    if (!store || (!keys && count > 0))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache delete: store and keys must not be NULL");
    if (store->readonly)
        return mlajit_fail(MLAJIT_ERR_CACHE, "cache %s: opened read-only; cannot delete", store->dir);
    /* The keys as stored, deleted as records of 16 bytes are. */
    uint8_t(*bytes)[16] = mlajit_malloc((count ? count : 1) * sizeof *bytes);
    mlajit_store_record *rows = mlajit_malloc((count ? count : 1) * sizeof *rows);
    int status = bytes && rows ? MLAJIT_OK : mlajit_fail_oom("deleting %zu keys", count);
    for (size_t i = 0; i < count && status == MLAJIT_OK; i++) {
        mlajit_cache_key_to_bytes(&keys[i], bytes[i]);
        rows[i] = (mlajit_store_record){.key = bytes[i], .key_len = sizeof bytes[i]};
    }
    record_job job = {.records = rows, .count = count};
    if (status == MLAJIT_OK)
        status = store_write_txn(store, record_delete_fn, &job);
    if (status == MLAJIT_OK && deleted)
        *deleted = job.gone;
    free(bytes);
    free(rows);
    return status;
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

/* ---- walking every entry ----------------------------------------------------------- */

typedef struct key_list {
    uint8_t (*keys)[16];
    uint64_t *sizes;
    size_t count, cap;
    int oom;
} key_list;

static int key_list_visit(const void *key, size_t key_len, const void *value, size_t len, int value_ok, void *arg)
{
    (void)value;
    (void)value_ok;
    key_list *l = arg;
    if (key_len != 16)
        return 0; /* metadata, not an entry */
    if (l->count == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        uint8_t(*keys)[16] = mlajit_realloc(l->keys, cap * sizeof *keys);
        if (keys)
            l->keys = keys;
        uint64_t *sizes = keys ? mlajit_realloc(l->sizes, cap * sizeof *sizes) : NULL;
        if (!sizes) {
            l->oom = 1;
            return 1;
        }
        l->sizes = sizes;
        l->cap = cap;
    }
    memcpy(l->keys[l->count], key, 16);
    l->sizes[l->count++] = len;
    return 0;
}

static int key_list_fn(int fd, const mlajit_lmdb_meta *m, void *arg)
{
    key_list *l = arg;
    l->count = 0;
    l->oom = 0;
    int status = mlajit_lmdb_check(fd, m, 0, key_list_visit, l, NULL);
    if (status == MLAJIT_OK && l->oom)
        status = mlajit_fail_oom("a list of %zu cache keys", l->cap);
    return status;
}

/* The entries' keys and value sizes, from one checked walk of the whole file. */
static int store_keys(mlajit_store *s, key_list *l)
{
    memset(l, 0, sizeof *l);
    int damaged;
    int status = store_read(s, key_list_fn, l, &damaged);
    if (status == MLAJIT_ERR_NOT_FOUND) {
        l->count = 0;
        return MLAJIT_OK; /* no data file: no entries */
    }
    return status;
}

int mlajit_store_foreach(mlajit_store *store, mlajit_store_visit_fn visit, void *arg)
{
    if (!store || !visit)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache foreach: store and visit must not be NULL");
    key_list l;
    int status = store_keys(store, &l);
    for (size_t i = 0; i < l.count && status == MLAJIT_OK; i++) {
        void *value = NULL;
        size_t len = (size_t)l.sizes[i];
        int damaged;
        int rc = store_read_value(store, l.keys[i], 16, &value, &len, &damaged);
        if (rc == MLAJIT_ERR_NOT_FOUND)
            continue; /* deleted (or its file set aside) since the walk */
        if (rc != MLAJIT_OK) {
            status = rc;
            break;
        }
        mlajit_cache_key key = mlajit_cache_key_from_bytes(l.keys[i]);
        int stop = visit(&key, value, len, arg);
        free(value);
        if (stop)
            break;
    }
    free(l.keys);
    free(l.sizes);
    return status;
}

int mlajit_store_stats_get(mlajit_store *store, mlajit_store_stats *stats)
{
    if (!store || !stats)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache stats: store and stats must not be NULL");
    memset(stats, 0, sizeof *stats);
    key_list l;
    int status = store_keys(store, &l);
    if (status == MLAJIT_OK) {
        stats->entries = (int64_t)l.count;
        for (size_t i = 0; i < l.count; i++)
            stats->value_bytes += (int64_t)l.sizes[i];
        struct stat st;
        stats->data_file_bytes = stat(store->data_path, &st) == 0 ? (int64_t)st.st_size : 0;
    }
    free(l.keys);
    free(l.sizes);
    return status;
}

int mlajit_store_counters_get(mlajit_store *store, mlajit_store_counters *out)
{
    if (!store || !out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache counters: store and out must not be NULL");
    memset(out, 0, sizeof *out);
    void *value;
    size_t len;
    uint64_t a[COUNTERS_FIELDS];
    int damaged;
    if (store_read_value(store, COUNTERS_KEY, sizeof COUNTERS_KEY - 1, &value, &len, &damaged) == MLAJIT_OK) {
        if (counters_parse(value, len, a))
            counters_from_array(a, out);
        free(value);
    }
    mlajit_clear_error();
    return MLAJIT_OK; /* absent or damaged counters read as zero */
}

typedef struct counters_job {
    const mlajit_store_counters *delta;
} counters_job;

static int counters_fn(mlajit_store *s, MDB_txn *txn, MDB_dbi dbi, void *arg)
{
    return counters_add_in(s, txn, dbi, ((counters_job *)arg)->delta);
}

int mlajit_store_counters_add(mlajit_store *store, const mlajit_store_counters *delta)
{
    if (!store || !delta)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache counters: store and delta must not be NULL");
    counters_job job = {.delta = delta};
    return store_write_txn(store, counters_fn, &job);
}

/* ---- salvage --------------------------------------------------------------------- */

typedef struct salvaged {
    uint8_t *key; /* key_len bytes, then the value, in one allocation */
    size_t key_len;
    void *value;
    size_t len;
} salvaged;

/* A set of 16-byte keys (open addressing on their low bytes, which are
 * uniform: keys are digests). */
typedef struct key_set {
    uint8_t (*keys)[16];
    uint8_t *used;
    size_t cap, count;
} key_set;

static size_t key_slot(const uint8_t key[16], size_t cap) { return (size_t)mlajit_get_u64le(key + 8) & (cap - 1); }

static int key_set_has(const key_set *set, const uint8_t key[16])
{
    if (!set->cap)
        return 0;
    for (size_t at = key_slot(key, set->cap); set->used[at]; at = (at + 1) & (set->cap - 1))
        if (memcmp(set->keys[at], key, 16) == 0)
            return 1;
    return 0;
}

/* 1 when key is new (and now in the set), 0 when present, -1 out of memory. */
static int key_set_add(key_set *set, const uint8_t key[16])
{
    if (key_set_has(set, key))
        return 0;
    if (2 * (set->count + 1) > set->cap) {
        size_t cap = set->cap ? 2 * set->cap : 256;
        uint8_t(*keys)[16] = mlajit_calloc(cap, sizeof *keys);
        uint8_t *used = mlajit_calloc(cap, 1);
        if (!keys || !used) {
            free(keys);
            free(used);
            return -1;
        }
        for (size_t i = 0; i < set->cap; i++) {
            if (!set->used[i])
                continue;
            size_t at = key_slot(set->keys[i], cap);
            while (used[at])
                at = (at + 1) & (cap - 1);
            memcpy(keys[at], set->keys[i], 16);
            used[at] = 1;
        }
        free(set->keys);
        free(set->used);
        set->keys = keys;
        set->used = used;
        set->cap = cap;
    }
    size_t at = key_slot(key, set->cap);
    while (set->used[at])
        at = (at + 1) & (set->cap - 1);
    memcpy(set->keys[at], key, 16);
    set->used[at] = 1;
    set->count++;
    return 1;
}

static void key_set_free(key_set *set)
{
    free(set->keys);
    free(set->used);
}

typedef struct salvage_job {
    mlajit_store *s;
    mlajit_store_salvage_report *rep;
    key_set taken; /* the first intact copy of a key wins over stale ones in older leaves */
    key_set bad;   /* keys met with bytes that failed their checks */
    const mlajit_store_record_kind *kinds;
    size_t kind_count;
    key_set records_taken, records_bad; /* the same for records, by a digest of their keys */
    salvaged *batch;
    size_t batch_count, batch_cap, batch_bytes;
    int status;
} salvage_job;

static int salvage_put_fn(mlajit_store *s, MDB_txn *txn, MDB_dbi dbi, void *arg)
{
    salvage_job *j = arg;
    for (size_t i = 0; i < j->batch_count; i++) {
        int entry = j->batch[i].key_len == 16;
        MDB_val k = {.mv_size = j->batch[i].key_len, .mv_data = j->batch[i].key};
        MDB_val v = {.mv_size = j->batch[i].len, .mv_data = j->batch[i].value};
        int rc = mdb_put(txn, dbi, &k, &v, MDB_NOOVERWRITE);
        if (rc == MDB_KEYEXIST) {
            (*(entry ? &j->rep->present : &j->rep->records_present))++;
            continue;
        }
        if (rc != 0)
            return store_lmdb_fail(s, entry ? "mdb_put of a recovered entry" : "mdb_put of a recovered record", rc);
        (*(entry ? &j->rep->recovered : &j->rep->records_recovered))++;
    }
    return MLAJIT_OK;
}

static void salvage_flush(salvage_job *j)
{
    if (j->batch_count && j->status == MLAJIT_OK) {
        mlajit_store_salvage_report before = *j->rep;
        j->status = store_write_txn(j->s, salvage_put_fn, j);
        if (j->status != MLAJIT_OK) /* the transaction did not commit: its counts do not stand */
            *j->rep = before;
    }
    for (size_t i = 0; i < j->batch_count; i++)
        free(j->batch[i].key);
    j->batch_count = 0;
    j->batch_bytes = 0;
}

/* The kind of record a key of key_len bytes is, or NULL. */
static const mlajit_store_record_kind *record_kind_of(const salvage_job *j, const void *key, size_t key_len)
{
    for (size_t i = 0; i < j->kind_count; i++) {
        const mlajit_store_record_kind *k = &j->kinds[i];
        if (key_len == k->key_len && key_len >= k->prefix_len && memcmp(key, k->prefix, k->prefix_len) == 0)
            return k;
    }
    return NULL;
}

/* A record's key as a set member: its XXH3-128 (the sets hold 16 bytes). */
static void record_digest(const void *key, size_t key_len, uint8_t out[16])
{
    XXH128_hash_t h = XXH3_128bits(key, key_len);
    mlajit_cache_key k = {.hi = h.high64, .lo = h.low64};
    mlajit_cache_key_to_bytes(&k, out);
}

static int salvage_visit(const void *key, size_t key_len, const void *value, size_t len, int value_ok, void *arg)
{
    salvage_job *j = arg;
    const mlajit_store_record_kind *kind = key_len == 16 ? NULL : record_kind_of(j, key, key_len);
    if (key_len != 16 && !kind)
        return 0; /* the counters, or a kind not asked for */
    uint8_t digest[16];
    const uint8_t *member = key;
    key_set *taken = &j->taken, *bad = &j->bad;
    if (kind) {
        record_digest(key, key_len, digest);
        member = digest;
        taken = &j->records_taken;
        bad = &j->records_bad;
    }
    int intact = value_ok && value;
    if (intact && kind) {
        intact = kind->intact(key, key_len, value, len);
    } else if (intact) {
        mlajit_cache_entry e;
        int decoded = mlajit_cache_entry_decode(value, len, &e);
        if (decoded == MLAJIT_ERR_OUT_OF_MEMORY) { /* not the entry's damage */
            j->status = decoded;
            return 1;
        }
        intact = decoded == MLAJIT_OK;
        mlajit_cache_entry_clear(&e);
    }
    if (!intact) {
        mlajit_clear_error(); /* damage is counted, not an error of the salvage */
        if (key_set_add(bad, member) < 0) {
            j->status = mlajit_fail_oom("the salvage's set of damaged keys");
            return 1;
        }
        return 0;
    }
    int fresh = key_set_add(taken, member);
    if (fresh < 0)
        j->status = mlajit_fail_oom("the salvage's set of recovered keys");
    if (fresh <= 0)
        return fresh < 0;
    if (j->batch_count == j->batch_cap) {
        size_t cap = j->batch_cap ? 2 * j->batch_cap : 64;
        salvaged *b = mlajit_realloc(j->batch, cap * sizeof *b);
        if (!b) {
            j->status = mlajit_fail_oom("the salvage's batch of entries");
            return 1;
        }
        j->batch = b;
        j->batch_cap = cap;
    }
    salvaged *it = &j->batch[j->batch_count];
    if (!(it->key = mlajit_malloc(key_len + (len ? len : 1)))) {
        j->status = mlajit_fail_oom("a %zu-byte value the salvage found", len);
        return 1;
    }
    memcpy(it->key, key, key_len);
    it->key_len = key_len;
    it->value = it->key + key_len;
    memcpy(it->value, value, len);
    it->len = len;
    j->batch_count++;
    j->batch_bytes += len;
    if (j->batch_bytes >= SALVAGE_BATCH_BYTES)
        salvage_flush(j);
    return j->status != MLAJIT_OK;
}

/* Keys found only damaged: no intact copy was taken. */
static uint64_t unreadable_keys(const key_set *bad, const key_set *taken)
{
    uint64_t n = 0;
    for (size_t i = 0; i < bad->cap; i++)
        n += bad->used[i] && !key_set_has(taken, bad->keys[i]);
    return n;
}

int mlajit_store_salvage(mlajit_store *store, const char *from, mlajit_store_salvage_report *report)
{
    return mlajit_store_salvage_ex(store, from, NULL, 0, report);
}

int mlajit_store_salvage_ex(mlajit_store *store, const char *from, const mlajit_store_record_kind *kinds,
                            size_t kind_count, mlajit_store_salvage_report *report)
{
    mlajit_store_salvage_report mine;
    if (!report)
        report = &mine;
    memset(report, 0, sizeof *report);
    if (!store || (!kinds && kind_count))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache salvage: store (and kinds, with a count) must be given");
    for (size_t i = 0; i < kind_count; i++)
        if (!kinds[i].intact || kinds[i].key_len == 16 || kinds[i].key_len == 0 || kinds[i].key_len > RECORD_KEY_MAX ||
            kinds[i].prefix_len > kinds[i].key_len || (!kinds[i].prefix && kinds[i].prefix_len))
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                               "cache salvage: record kind %zu needs a check and keys of 1..%u bytes, not 16, that "
                               "hold its prefix", i, RECORD_KEY_MAX);
    if (store->readonly)
        return mlajit_fail(MLAJIT_ERR_CACHE, "cache %s: opened read-only; cannot recover entries into it",
                           store->dir);
    char *source = NULL;
    if (!from) {
        /* Move the damaged file aside first: the fresh data.mdb receives what it held. */
        int fd;
        struct stat st;
        int status = data_open(store, &fd, &st);
        if (status != MLAJIT_OK)
            return status;
        close(fd);
        set_aside_job job = {.s = store, .dev = st.st_dev, .ino = st.st_ino};
        int moved = mlajit_env_run_if_unused(store->dir, set_aside_unused, &job);
        if (moved != 1)
            return mlajit_fail(MLAJIT_ERR_CACHE, "cache %s: data.mdb %s; try again", store->dir,
                               moved == 2    ? "was just replaced by another process"
                               : moved == -1 ? "is in use by this process"
                                             : "is in use by another process: close it first");
        snprintf(report->set_aside, sizeof report->set_aside, "%s", job.name);
        source = path_in(store->dir, job.name);
    } else {
        source = mlajit_strdup(from);
    }
    if (!source)
        return mlajit_fail_oom("the salvage of cache %s", store->dir);
    int fd;
    struct stat st;
    int status = mlajit_open_regular(source, O_RDONLY, 0, source, &fd, &st);
    if (status != MLAJIT_OK) {
        free(source);
        return status;
    }
    salvage_job j = {.s = store, .rep = report, .kinds = kinds, .kind_count = kind_count, .status = MLAJIT_OK};
    mlajit_lmdb_meta m;
    uint32_t psize = 4096;
    if (mlajit_lmdb_read_meta(fd, (int64_t)st.st_size, &m) == MLAJIT_OK) {
        psize = m.psize;
        /* The current tree first: its entries win over stale copies. Damage in
         * it is what the leaf scan below is for; no memory is not. */
        if (mlajit_lmdb_check(fd, &m, MLAJIT_LMDB_VALUES | MLAJIT_LMDB_SALVAGE, salvage_visit, &j, NULL) ==
                MLAJIT_ERR_OUT_OF_MEMORY &&
            j.status == MLAJIT_OK)
            j.status = MLAJIT_ERR_OUT_OF_MEMORY;
    }
    if (j.status == MLAJIT_OK &&
        mlajit_lmdb_scan_leaves(fd, (int64_t)st.st_size, psize, 16, salvage_visit, &j) == MLAJIT_ERR_OUT_OF_MEMORY)
        j.status = MLAJIT_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; i < kind_count && j.status == MLAJIT_OK; i++) {
        int scanned = 0; /* one scan per key length */
        for (size_t k = 0; k < i; k++)
            scanned |= kinds[k].key_len == kinds[i].key_len;
        if (!scanned && mlajit_lmdb_scan_leaves(fd, (int64_t)st.st_size, psize, kinds[i].key_len, salvage_visit,
                                                &j) == MLAJIT_ERR_OUT_OF_MEMORY)
            j.status = MLAJIT_ERR_OUT_OF_MEMORY;
    }
    /* Unreadable: keys no intact copy was found for. */
    report->unreadable = unreadable_keys(&j.bad, &j.taken);
    report->records_unreadable = unreadable_keys(&j.records_bad, &j.records_taken);
    salvage_flush(&j);
    close(fd);
    free(source);
    for (size_t i = 0; i < j.batch_count; i++)
        free(j.batch[i].key);
    free(j.batch);
    key_set_free(&j.taken);
    key_set_free(&j.bad);
    key_set_free(&j.records_taken);
    key_set_free(&j.records_bad);
    if (j.status != MLAJIT_OK)
        return mlajit_fail_prefix(j.status, "cache %s: recovering entries: ", store->dir);
    mlajit_clear_error();
    return MLAJIT_OK;
}

/* ---- one compile per kernel across processes ----------------------------------- */

struct mlajit_compile_lock {
    int fd;
};

int mlajit_compile_lock_take(mlajit_store *store, const mlajit_cache_key *key, int timeout_ms,
                             mlajit_compile_lock **lock, int *waited)
{
    *lock = NULL;
    *waited = 0;
    if (!store || !key)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "compile lock: store and key must not be NULL");
    if (store->readonly)
        return mlajit_fail(MLAJIT_ERR_CACHE, "cache %s: read-only, so no compile lock", store->dir);
    char *path = path_in(store->dir, COMPILE_LOCK_NAME);
    if (!path)
        return mlajit_fail_oom("the compile lock of cache %s", store->dir);
    int fd;
    int status = mlajit_open_regular(path, O_RDWR | O_CREAT, 0644, path, &fd, NULL);
    free(path);
    if (status != MLAJIT_OK)
        return MLAJIT_ERR_CACHE; /* the message names the file */
    /* One byte per key, at an offset from the key's low bits: distinct new
     * kernels never wait for each other (the file stays empty; locks need no data). */
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET,
                       .l_start = (off_t)(key->lo & ((uint64_t)INT64_MAX >> 1)), .l_len = 1, .l_pid = 0};
    double deadline = mlajit_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    long pause_us = 1000;
    for (;;) {
        if (fcntl(fd, F_OFD_SETLK, &fl) == 0)
            break;
        int err = errno;
        if (err != EAGAIN && err != EACCES) {
            close(fd);
            return mlajit_fail(MLAJIT_ERR_CACHE, "cache %s: no compile lock here: %s", store->dir, strerror(err));
        }
        *waited = 1;
        double left = deadline - mlajit_now_ms();
        if (left <= 0) {
            close(fd);
            return mlajit_fail(MLAJIT_ERR_CACHE,
                               "cache %s: another process has compiled this kernel for more than %d ms; "
                               "compiling it here too (MLAJIT_COMPILE_WAIT_MS sets the wait)",
                               store->dir, timeout_ms);
        }
        long us = pause_us < (long)(left * 1000.0) ? pause_us : (long)(left * 1000.0) + 1;
        struct timespec pause = {us / 1000000, (us % 1000000) * 1000};
        nanosleep(&pause, NULL);
        if (pause_us < 50000)
            pause_us *= 2;
    }
    mlajit_compile_lock *l = mlajit_malloc(sizeof *l);
    if (!l) {
        close(fd);
        return mlajit_fail_oom("the compile lock of cache %s", store->dir);
    }
    l->fd = fd;
    *lock = l;
    return MLAJIT_OK;
}

void mlajit_compile_lock_release(mlajit_compile_lock *lock)
{
    if (!lock)
        return;
    close(lock->fd); /* drops the OFD lock */
    free(lock);
}

/* ------------------------------------------------------------------------- */
/* Default directory                                                          */
/* ------------------------------------------------------------------------- */

/* base + suffix into buf; a path that does not fit is refused with a message
 * naming where it came from (source) and the limit, not reported as unset. */
static int format_dir(char *buf, size_t len, const char *base, const char *suffix, const char *source)
{
    int n = snprintf(buf, len, "%s%s", base, suffix);
    if (n < 0 || (size_t)n >= len) {
        buf[0] = '\0';
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "%s is %zu characters (\"%.40s...\"), too long for the cache directory%s%s%s: at most "
                           "%zu characters fit; use a shorter path",
                           source, strlen(base), base, suffix[0] ? " (with \"" : "", suffix,
                           suffix[0] ? "\" appended)" : "", len - 1);
    }
    return MLAJIT_OK;
}

int mlajit_cache_default_dir(char *buf, size_t len)
{
    if (!buf || len == 0)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "cache default dir: buf must hold at least 1 byte");

    const char *explicit_dir = getenv("MLAJIT_CACHE_DIR");
    if (explicit_dir && explicit_dir[0])
        return format_dir(buf, len, explicit_dir, "", "MLAJIT_CACHE_DIR");
    /* The XDG spec says relative values are invalid and must be ignored. */
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (xdg && xdg[0] == '/')
        return format_dir(buf, len, xdg, "/mlajit", "XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (home && home[0])
        return format_dir(buf, len, home, "/.cache/mlajit", "HOME");

    buf[0] = '\0';
    return mlajit_fail(MLAJIT_ERR_NOT_FOUND,
                       "cache default dir: none of MLAJIT_CACHE_DIR, XDG_CACHE_HOME or HOME is set");
}

/* ---- the data file's stamp, for memos of what was read from it ------------------ */

enum { kStampSettleNs = 50 * 1000 * 1000 };

void mlajit_store_file_stamp(const mlajit_store *store, mlajit_store_stamp *st)
{
    memset(st, 0, sizeof *st);
    if (!store)
        return;
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/data.mdb", store->dir);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return;
    st->dev = sb.st_dev;
    st->ino = sb.st_ino;
    st->size = sb.st_size;
    st->mtime = sb.st_mtim;
    st->ctime = sb.st_ctim;
}

int mlajit_store_stamp_equal(const mlajit_store_stamp *a, const mlajit_store_stamp *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime.tv_sec == b->mtime.tv_sec &&
           a->mtime.tv_nsec == b->mtime.tv_nsec && a->ctime.tv_sec == b->ctime.tv_sec &&
           a->ctime.tv_nsec == b->ctime.tv_nsec;
}

int mlajit_store_stamp_settled(const mlajit_store_stamp *st)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    const struct timespec *last = st->ctime.tv_sec > st->mtime.tv_sec ||
                                          (st->ctime.tv_sec == st->mtime.tv_sec && st->ctime.tv_nsec > st->mtime.tv_nsec)
                                      ? &st->ctime
                                      : &st->mtime;
    long long age = (long long)(now.tv_sec - last->tv_sec) * 1000000000LL + (now.tv_nsec - last->tv_nsec);
    return age >= kStampSettleNs;
}
