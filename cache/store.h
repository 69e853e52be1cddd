/* cache/ - the cubin store: an LMDB environment keyed by XXH3-128 content keys.
 * No CUDA here. Entries are self-checking: a versioned header plus an XXH3-64 of
 * the cubin, so a damaged entry is detected, reported and treated as a miss. */
#ifndef MLAJIT_CACHE_STORE_H
#define MLAJIT_CACHE_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

typedef struct mlajit_store mlajit_store;

/* A 128-bit content key. */
typedef struct mlajit_cache_key {
    uint64_t hi, lo;
} mlajit_cache_key;

/* The key recipe: the name of what mlajit_cache_key_make hashes and how. Packs
 * record it, and a runtime uses a pack only when the pack's recipe and NVRTC are
 * its own. Change it whenever mlajit_cache_key_make changes. */
#define MLAJIT_KEY_RECIPE "mlajit-key-2"

/* Everything a compiled kernel depends on: the source NVRTC compiles (it holds
 * every constant the kernel is specialized on, its spec string included, and
 * no comment), the arch, the compiler and its options. Changing any of them
 * changes the key; nothing else (paths, time, host name, the wording of a
 * template's comments) enters it. */
typedef struct mlajit_key_inputs {
    const char *source;            /* the generated CUDA source, NUL-terminated */
    const char *arch;              /* "sm_90a" */
    int nvrtc_major, nvrtc_minor;
    const char *compile_options;   /* NVRTC options joined by spaces */
} mlajit_key_inputs;

mlajit_cache_key mlajit_cache_key_make(const mlajit_key_inputs *in);

/* 32 lowercase hex digits + NUL into buf[33]. */
void mlajit_cache_key_hex(const mlajit_cache_key *key, char buf[33]);

/* XXH3-64 of a buffer (the checksum of entries and packs; the runtime hashes with it too). */
uint64_t mlajit_hash64(const void *data, size_t len);

/* What a launch of a stored kernel needs, recorded when it was compiled. The
 * runtime compares it on load with what the current generator expects for the
 * entry's spec, so a cubin made for another launch geometry or parameter block
 * is refused (and recompiled), never launched. */
typedef struct mlajit_launch_record {
    int threads;                 /* the main kernel's block size */
    int smem_bytes;              /* its dynamic shared memory */
    int combine_threads;         /* the combine's block size */
    int combine_smem_bytes;      /* the combine's largest dynamic shared memory */
    int cluster_dims[3];         /* the main kernel's cluster shape; {1, 1, 1}: none */
    uint64_t params_layout_hash; /* of the parameter block it was compiled with */
} mlajit_launch_record;

/* One stored kernel. */
typedef struct mlajit_cache_entry {
    char spec_string[128];
    char entry_names[256];   /* kernel entry names, separated by ',' */
    double compile_ms;       /* NVRTC time when it was compiled */
    int registers;           /* ptxas report of the main entry */
    int shared_bytes;
    int spill_bytes;
    mlajit_launch_record launch;
    uint64_t created_unix;   /* seconds since the epoch */
    void *cubin;             /* owned by the entry after a get: free with mlajit_cache_entry_clear */
    size_t cubin_size;
} mlajit_cache_entry;

void mlajit_cache_entry_clear(mlajit_cache_entry *entry);

/* A stored value that is intact but not for this build to use: an entry of
 * another format version (store.c), or one whose launch record the current
 * generator does not expect (the runtime's check). Not damage: the caller warns,
 * counts it as stale, recompiles and overwrites it. */
#define MLAJIT_CACHE_STALE MLAJIT_ERR_UNSUPPORTED

/* Serialize an entry into a malloc'd value (header + cubin) / parse one back.
 * Parsing checks the magic, the format version, the sizes and the checksums;
 * it never reads past len. Returns MLAJIT_OK, MLAJIT_CACHE_STALE for an intact
 * entry of another format version (its header checksum holds), or
 * MLAJIT_ERR_CORRUPT, each with a message. */
int mlajit_cache_entry_encode(const mlajit_cache_entry *entry, void **value, size_t *len);
int mlajit_cache_entry_decode(const void *value, size_t len, mlajit_cache_entry *entry);

/* Open the store in dir (creating the directory unless read-only).
 *
 * A store holds no LMDB environment and no lock between calls. Reads (get,
 * foreach, stats, counters) go through mlajit's own checked reader of the data
 * file (cache/lmdb_check.h): pread, never a map, every page checked before
 * use, so a hit runs no LMDB code, takes no lock and writes nothing, and a
 * read-only directory or file serves as well as a writable one. Each write
 * opens the process's one environment for the directory (env_registry.h),
 * checks the whole file's structure inside its write transaction (where no
 * other writer can change it) before LMDB touches a page, and closes it again.
 *
 * At a writable open, a data file that changed since it was last checked (its
 * size, modification time or meta pages differ from the stamp data.mdb.verified
 * beside it) is checked whole; a clean one is stamped once it is a second old
 * (a change within the file system's time granularity could hide behind a
 * fresher stamp). A damaged data file is moved aside to data.mdb.damaged.N (a
 * new N each time, never overwriting one) with one warning, and the store goes
 * on empty - when no process holds an LMDB environment on it (LMDB's lock on
 * lock.mdb says; two data files under one lock file would corrupt both);
 * otherwise MLAJIT_ERR_CORRUPT naming the damage. With
 * MLAJIT_STORE_KEEP_DAMAGED damage is reported and the file left in place (the
 * CLI, so `mlajit cache verify --repair` can recover from it).
 *
 * Returns MLAJIT_OK, MLAJIT_ERR_IO (cannot create or write the directory, or
 * data.mdb / lock.mdb is not a regular file), MLAJIT_ERR_CORRUPT or
 * MLAJIT_ERR_CACHE, with a message naming the directory. */
enum {
    MLAJIT_STORE_READONLY = 1,     /* never write; the directory must exist */
    MLAJIT_STORE_KEEP_DAMAGED = 2, /* report damage; do not set the file aside */
};
int mlajit_store_open_ex(const char *dir, unsigned flags, mlajit_store **out);
/* mlajit_store_open_ex(dir, readonly ? MLAJIT_STORE_READONLY : 0, out). */
int mlajit_store_open(const char *dir, int readonly, mlajit_store **out);
void mlajit_store_close(mlajit_store *store);

/* The key as stored: 16 bytes, hi then lo, big-endian (the hex string's order). */
void mlajit_cache_key_to_bytes(const mlajit_cache_key *key, uint8_t bytes[16]);
mlajit_cache_key mlajit_cache_key_from_bytes(const uint8_t bytes[16]);

/* 1 when the store was opened read-only (or store is NULL). */
int mlajit_store_is_readonly(const mlajit_store *store);

/* The directory the store was opened with. */
const char *mlajit_store_dir(const mlajit_store *store);

/* The data file as one stat sees it (all zero with no store or no file): what
 * was read from the file (get_info's counts, plans' tactic look-ups) may be
 * remembered while its stamp is unchanged. */
typedef struct mlajit_store_stamp {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
} mlajit_store_stamp;
void mlajit_store_file_stamp(const mlajit_store *store, mlajit_store_stamp *st);
int mlajit_store_stamp_equal(const mlajit_store_stamp *a, const mlajit_store_stamp *b);
/* Whether the file has not changed for 50 ms, so that a later write moves its
 * times however coarse the file system's clock: only such a stamp may key a memo. */
int mlajit_store_stamp_settled(const mlajit_store_stamp *st);

/* Look a key up. MLAJIT_OK and a filled entry; MLAJIT_ERR_NOT_FOUND;
 * MLAJIT_CACHE_STALE for an entry of another format version; or
 * MLAJIT_ERR_CORRUPT when the stored value fails its checks (for the last two
 * the caller warns, recompiles and overwrites it with put). A damaged page on
 * the way to it is handled by the store (one warning; the file is set aside
 * where it can be) and the look-up is a miss: MLAJIT_ERR_NOT_FOUND. Thread-safe. */
int mlajit_store_get(mlajit_store *store, const mlajit_cache_key *key, mlajit_cache_entry *entry);

/* Store an entry under key in one short write transaction (overwrites). */
int mlajit_store_put(mlajit_store *store, const mlajit_cache_key *key, const mlajit_cache_entry *entry);

/* The same, adding delta (may be NULL) to the stored counters in the same
 * transaction: how a context records its counts without a write of its own. */
typedef struct mlajit_store_counters mlajit_store_counters;
int mlajit_store_put_counted(mlajit_store *store, const mlajit_cache_key *key, const mlajit_cache_entry *entry,
                             const mlajit_store_counters *delta);

/* Delete a key (MLAJIT_ERR_NOT_FOUND if absent). */
int mlajit_store_delete(mlajit_store *store, const mlajit_cache_key *key);

/* Delete keys in one write transaction; absent keys are skipped. *deleted (may
 * be NULL) receives how many were removed. */
int mlajit_store_delete_many(mlajit_store *store, const mlajit_cache_key *keys, size_t count, size_t *deleted);

/* Called for each entry in key order. value (valid during the call only) is
 * NULL when the entry's bytes cannot be read back intact (a damaged overflow
 * run). Return nonzero to stop. The keys come from one checked walk of the
 * file and each value from its own checked read, so a writer in another
 * process never makes a value read torn. */
typedef int (*mlajit_store_visit_fn)(const mlajit_cache_key *key, const void *value, size_t len, void *arg);

/* Visit every entry (metadata records are skipped). */
int mlajit_store_foreach(mlajit_store *store, mlajit_store_visit_fn visit, void *arg);

/* Lookup counters accumulated by the contexts that used a store. Kept in the
 * store (under a metadata key) so `mlajit cache stats` can report them. A
 * context adds its counts in the transactions it makes anyway (its compiles'
 * puts) or when asked (mlajit_context_flush_counters): never at the end of a
 * process that only read. */
struct mlajit_store_counters {
    uint64_t memory_hits;  /* served from a context's own map */
    uint64_t pack_hits;    /* served from a pack */
    uint64_t disk_hits;    /* served from this store */
    uint64_t compiles;     /* missed every layer: NVRTC ran */
    uint64_t compile_us;   /* NVRTC time of those compiles */
    uint64_t corrupt;      /* entries or packs rejected by their checks */
    uint64_t jit_refusals; /* misses refused with MLAJIT_DISABLE_JIT */
    uint64_t contexts;     /* contexts that added their counts */
};

/* Add delta to the stored counters in one write transaction (atomic across
 * processes). MLAJIT_ERR_CACHE on a read-only store. */
int mlajit_store_counters_add(mlajit_store *store, const mlajit_store_counters *delta);

/* The stored counters (all zero when none were stored or they are damaged). */
int mlajit_store_counters_get(mlajit_store *store, mlajit_store_counters *out);

typedef struct mlajit_store_stats {
    int64_t entries;
    int64_t data_file_bytes; /* size of data.mdb on disk */
    int64_t value_bytes;     /* sum of stored values */
} mlajit_store_stats;

int mlajit_store_stats_get(mlajit_store *store, mlajit_store_stats *stats);

/* Test hook: overwrite the stored value of key with raw bytes (to plant corruption). */
int mlajit_store_put_raw(mlajit_store *store, const mlajit_cache_key *key, const void *value, size_t len);

/* ---- records beside the entries ------------------------------------------------- */
/* The data file's one database holds the kernel entries under 16-byte keys and,
 * under keys of any other length, records of other kinds, each self-checking
 * in its own way and each kind under its own key prefix: the counters (above)
 * and tactic records (cache/tactics.h, prefix "MLAJITTK"). Entry listing,
 * stats, foreach, delete and gc see only the 16-byte keys, so records never
 * count as entries; these calls reach the records. Keys are 1..511 bytes and
 * never 16. */

typedef struct mlajit_store_record {
    const void *key;
    size_t key_len;
    const void *value; /* put only */
    size_t len;
} mlajit_store_record;

/* The stored bytes of one record (malloc'd into *value; free it):
 * MLAJIT_OK; MLAJIT_ERR_NOT_FOUND (also when a damaged page on the way was
 * dealt with as mlajit_store_get does); or an error. */
int mlajit_store_record_get(mlajit_store *store, const void *key, size_t key_len, void **value, size_t *len);

/* Called for each record whose key starts with the scan's prefix, in key
 * order; key and value are valid during the call only. Nonzero stops. */
typedef int (*mlajit_store_record_fn)(const void *key, size_t key_len, const void *value, size_t len, void *arg);

/* Visit the records whose keys start with prefix (prefix_len 1..511 bytes),
 * from one consistent snapshot, reading only the pages that can hold them
 * (mlajit_lmdb_scan_prefix). MLAJIT_OK (also for no data file); a damaged page
 * on the way is handled as a get's is, and the scan is MLAJIT_ERR_CORRUPT. */
int mlajit_store_record_scan(mlajit_store *store, const void *prefix, size_t prefix_len,
                             mlajit_store_record_fn visit, void *arg);

/* Put count records (overwriting) in one write transaction. */
int mlajit_store_record_put(mlajit_store *store, const mlajit_store_record *records, size_t count);

/* Delete the records named by records[i].key in one write transaction; absent
 * keys are skipped. *deleted (may be NULL) receives how many were removed. */
int mlajit_store_record_delete(mlajit_store *store, const mlajit_store_record *records, size_t count,
                               size_t *deleted);

/* ---- checking and repairing the data file ---------------------------------- */

typedef struct mlajit_store_check_report {
    int64_t data_file_bytes;
    uint64_t pages, tree_pages, free_pages, entries;
    int damaged;          /* the structure failed its check: problem says where */
    char problem[256];
} mlajit_store_check_report;

/* The structural check of the whole data file (mlajit_lmdb_check), without
 * setting anything aside: MLAJIT_OK (report->damaged 0), MLAJIT_ERR_CORRUPT
 * (report->damaged 1, the problem as the message), MLAJIT_ERR_NOT_FOUND when
 * there is no data file, or an I/O error. A clean file is stamped (when the
 * directory can be written), so the next open does not check it again. */
int mlajit_store_check(mlajit_store *store, mlajit_store_check_report *report);

typedef struct mlajit_store_salvage_report {
    uint64_t recovered;   /* entries put into the store */
    uint64_t present;     /* readable, but the store already held the key */
    uint64_t unreadable;  /* found, but the bytes failed their checks */
    char set_aside[64];   /* the name the damaged file was moved to ("" if none) */
    /* the same for the records of the kinds asked for (mlajit_store_salvage_ex) */
    uint64_t records_recovered, records_present, records_unreadable;
} mlajit_store_salvage_report;

/* A kind of record salvage recovers beside the entries: its keys are key_len
 * bytes starting with the prefix, and intact says whether a value found under
 * such a key passes the kind's own checks for that key (1) or not (0). */
typedef struct mlajit_store_record_kind {
    const char *name; /* "tactic record", for messages */
    const void *prefix;
    size_t prefix_len;
    size_t key_len;   /* 1..511, never 16 */
    int (*intact)(const void *key, size_t key_len, const void *value, size_t len);
} mlajit_store_record_kind;

/* Recover every entry that can still be read from the data file at from
 * (NULL: the store's own damaged data.mdb, which is first moved aside to a new
 * data.mdb.damaged.N, so nothing is lost if this is interrupted) into the
 * store. Entries are found by walking the trees as far as they read, then by
 * reading every page that checks as a leaf; each value must pass the entry
 * checks (mlajit_cache_entry_decode) and the first intact copy of a key wins.
 * MLAJIT_ERR_CACHE when from is NULL and another process holds the cache open. */
int mlajit_store_salvage(mlajit_store *store, const char *from, mlajit_store_salvage_report *report);

/* The same, also recovering the records of kind_count kinds (the first intact
 * copy of each key wins, as for entries; records of other kinds, such as the
 * counters, are left behind). */
int mlajit_store_salvage_ex(mlajit_store *store, const char *from, const mlajit_store_record_kind *kinds,
                            size_t kind_count, mlajit_store_salvage_report *report);

/* ---- one compile per kernel across processes -------------------------------- */

/* A per-key lock that processes (and threads) compiling the same new kernel
 * take around NVRTC: an OFD byte-range lock on compile.lock in the cache
 * directory, at an offset derived from the key. The kernel drops it when its
 * holder exits or dies, so it never outlives a crashed compile. */
typedef struct mlajit_compile_lock mlajit_compile_lock;

/* Take key's lock, waiting at most timeout_ms (0: do not wait). *waited is 1
 * when another holder had it (look the key up again before compiling).
 * MLAJIT_OK and *lock (release it with mlajit_compile_lock_release);
 * MLAJIT_ERR_CACHE with *lock NULL when the wait timed out or no lock can be
 * taken here (a read-only cache, or a file system without OFD locks): the
 * caller compiles without it. */
int mlajit_compile_lock_take(mlajit_store *store, const mlajit_cache_key *key, int timeout_ms,
                             mlajit_compile_lock **lock, int *waited);
void mlajit_compile_lock_release(mlajit_compile_lock *lock);

/* LMDB checks shared with the pack reader (the structs are only declared here,
 * so this header does not need lmdb.h). */
struct MDB_env;
/* 0 when every page the meta page claims lies within file_bytes; else
 * MDB_CORRUPTED with a message naming what (reading past the end is SIGBUS). */
int mlajit_lmdb_check_size(struct MDB_env *env, int64_t file_bytes, const char *what);
/* 1 for LMDB codes that mean the file is damaged (MDB_INVALID, MDB_CORRUPTED, ...). */
int mlajit_lmdb_rc_is_damage(int rc);

/* The default cache directory: $MLAJIT_CACHE_DIR, else $XDG_CACHE_HOME/mlajit,
 * else $HOME/.cache/mlajit. Returns MLAJIT_ERR_NOT_FOUND when none can be formed. */
int mlajit_cache_default_dir(char *buf, size_t len);

#endif
