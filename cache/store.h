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

/* Everything a compiled kernel depends on. Changing any field changes the key;
 * nothing else (paths, time, host name) enters it. */
typedef struct mlajit_key_inputs {
    const char *generator_version; /* the codegen's version string */
    uint64_t templates_hash;       /* XXH3-64 over the embedded template texts */
    const char *spec_string;       /* canonical spec string */
    const char *arch;              /* "sm_90a" */
    int nvrtc_major, nvrtc_minor;
    const char *compile_options;   /* NVRTC options joined by spaces */
} mlajit_key_inputs;

mlajit_cache_key mlajit_cache_key_make(const mlajit_key_inputs *in);

/* 32 lowercase hex digits + NUL into buf[33]. */
void mlajit_cache_key_hex(const mlajit_cache_key *key, char buf[33]);

/* XXH3-64 of a buffer (exposed so the runtime hashes templates the same way). */
uint64_t mlajit_hash64(const void *data, size_t len);

/* One stored kernel. */
typedef struct mlajit_cache_entry {
    char spec_string[128];
    char entry_names[256];   /* kernel entry names, separated by ',' */
    double compile_ms;       /* NVRTC time when it was compiled */
    int registers;           /* ptxas report of the main entry */
    int shared_bytes;
    int spill_bytes;
    uint64_t created_unix;   /* seconds since the epoch */
    void *cubin;             /* owned by the entry after a get: free with mlajit_cache_entry_clear */
    size_t cubin_size;
} mlajit_cache_entry;

void mlajit_cache_entry_clear(mlajit_cache_entry *entry);

/* Serialize an entry into a malloc'd value (header + cubin) / parse one back.
 * Parsing checks the magic, the format version, the sizes and the checksum;
 * it never reads past len. Returns MLAJIT_OK or MLAJIT_ERR_CORRUPT (with a message). */
int mlajit_cache_entry_encode(const mlajit_cache_entry *entry, void **value, size_t *len);
int mlajit_cache_entry_decode(const void *value, size_t len, mlajit_cache_entry *entry);

/* Open (creating the directory and environment if needed) the store in dir.
 * readonly opens an existing store without writing. Returns MLAJIT_OK,
 * MLAJIT_ERR_IO or MLAJIT_ERR_CACHE with a message naming the directory. */
int mlajit_store_open(const char *dir, int readonly, mlajit_store **out);
void mlajit_store_close(mlajit_store *store);

/* Look a key up. MLAJIT_OK and a filled entry; MLAJIT_ERR_NOT_FOUND; or
 * MLAJIT_ERR_CORRUPT when the stored value fails its checks (the caller warns,
 * recompiles and overwrites it with put). Thread-safe. */
int mlajit_store_get(mlajit_store *store, const mlajit_cache_key *key, mlajit_cache_entry *entry);

/* Store an entry under key in one short write transaction (overwrites). */
int mlajit_store_put(mlajit_store *store, const mlajit_cache_key *key, const mlajit_cache_entry *entry);

/* Delete a key (MLAJIT_ERR_NOT_FOUND if absent). */
int mlajit_store_delete(mlajit_store *store, const mlajit_cache_key *key);

typedef struct mlajit_store_stats {
    int64_t entries;
    int64_t data_file_bytes; /* size of data.mdb on disk */
    int64_t value_bytes;     /* sum of stored values */
} mlajit_store_stats;

int mlajit_store_stats_get(mlajit_store *store, mlajit_store_stats *stats);

/* Test hook: overwrite the stored value of key with raw bytes (to plant corruption). */
int mlajit_store_put_raw(mlajit_store *store, const mlajit_cache_key *key, const void *value, size_t len);

/* The default cache directory: $MLAJIT_CACHE_DIR, else $XDG_CACHE_HOME/mlajit,
 * else $HOME/.cache/mlajit. Returns MLAJIT_ERR_NOT_FOUND when none can be formed. */
int mlajit_cache_default_dir(char *buf, size_t len);

#endif
