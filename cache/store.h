/* cache/ - the cubin store: an LMDB environment keyed by XXH3-128 content keys.
 * No CUDA here. Entries are self-checking: a versioned header plus an XXH3-64 of
 * the cubin, so a damaged entry is detected, reported and treated as a miss. */
#ifndef MLAJIT_CACHE_STORE_H
#define MLAJIT_CACHE_STORE_H

#include <stddef.h>
#include <stdint.h>

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

/* Open (creating the directory and environment if needed) the store in dir.
 * readonly opens an existing store without writing. Returns MLAJIT_OK,
 * MLAJIT_ERR_IO or MLAJIT_ERR_CACHE with a message naming the directory.
 *
 * Handles on the same directory within one process share one MDB_env (LMDB
 * allows one per process; see env_registry.h): opening it twice is fine, but a
 * writable open while it is open read-only in this process is refused.
 *
 * A damaged data file (bad meta pages, or shorter than its meta page says) is
 * moved aside to data.mdb.damaged with a warning and a fresh store is started,
 * when no other process has the cache open; otherwise MLAJIT_ERR_CORRUPT. */
int mlajit_store_open(const char *dir, int readonly, mlajit_store **out);
void mlajit_store_close(mlajit_store *store);

/* The key as stored: 16 bytes, hi then lo, big-endian (the hex string's order). */
void mlajit_cache_key_to_bytes(const mlajit_cache_key *key, uint8_t bytes[16]);
mlajit_cache_key mlajit_cache_key_from_bytes(const uint8_t bytes[16]);

/* 1 when the store was opened read-only (or store is NULL). */
int mlajit_store_is_readonly(const mlajit_store *store);

/* The directory the store was opened with. */
const char *mlajit_store_dir(const mlajit_store *store);

/* Look a key up. MLAJIT_OK and a filled entry; MLAJIT_ERR_NOT_FOUND;
 * MLAJIT_CACHE_STALE for an entry of another format version; or
 * MLAJIT_ERR_CORRUPT when the stored value fails its checks (for the last two
 * the caller warns, recompiles and overwrites it with put). Thread-safe. */
int mlajit_store_get(mlajit_store *store, const mlajit_cache_key *key, mlajit_cache_entry *entry);

/* Store an entry under key in one short write transaction (overwrites). */
int mlajit_store_put(mlajit_store *store, const mlajit_cache_key *key, const mlajit_cache_entry *entry);

/* Delete a key (MLAJIT_ERR_NOT_FOUND if absent). */
int mlajit_store_delete(mlajit_store *store, const mlajit_cache_key *key);

/* Delete keys in one write transaction; absent keys are skipped. *deleted (may
 * be NULL) receives how many were removed. */
int mlajit_store_delete_many(mlajit_store *store, const mlajit_cache_key *keys, size_t count, size_t *deleted);

/* Called for each entry in key order inside one read transaction. value points
 * into the map (valid during the call only) and is NULL when the stored bytes
 * lie outside the data file (damaged). Return nonzero to stop. */
typedef int (*mlajit_store_visit_fn)(const mlajit_cache_key *key, const void *value, size_t len, void *arg);

/* Visit every entry (metadata records are skipped). */
int mlajit_store_foreach(mlajit_store *store, mlajit_store_visit_fn visit, void *arg);

/* Lookup counters accumulated by the contexts that used a store. Kept in the
 * store (under a metadata key) so `mlajit cache stats` can report them. */
typedef struct mlajit_store_counters {
    uint64_t memory_hits;  /* served from a context's own map */
    uint64_t pack_hits;    /* served from a pack */
    uint64_t disk_hits;    /* served from this store */
    uint64_t compiles;     /* missed every layer: NVRTC ran */
    uint64_t compile_us;   /* NVRTC time of those compiles */
    uint64_t corrupt;      /* entries or packs rejected by their checks */
    uint64_t jit_refusals; /* misses refused with MLAJIT_DISABLE_JIT */
    uint64_t contexts;     /* contexts that added their counts */
} mlajit_store_counters;

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
