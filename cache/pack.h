/* cache/pack.h - cubin packs: read-only, single-file kernel sets for deployment.
 *
 * A pack is a compacted LMDB environment in one file (MDB_NOSUBDIR), read with
 * MDB_RDONLY | MDB_NOLOCK (no lock file, so it can sit on a read-only disk),
 * followed by a 64-byte trailer that checksums the whole LMDB part:
 *
 *   [0, L)      the LMDB file: database "kernels" maps a 16-byte content key
 *               (mlajit_cache_key_to_bytes) to a cache entry value (store.h's
 *               self-checking format); database "manifest" holds one value,
 *               under key "manifest": the text described below.
 *   [L, L+64)   trailer, integers little-endian:
 *               0  8  magic "MLAJITPK"
 *               8  4  u32 trailer format version (2)
 *               12 4  u32 trailer length (64)
 *               16 8  u64 L, the LMDB part's length
 *               24 8  u64 XXH3-64 of bytes [0, L)
 *               32 8  u64 number of kernels
 *               40 16 zero
 *               56 8  u64 XXH3-64 of trailer bytes [0, 56)
 *
 * The manifest (text, one field a line, "\n" endings, no NULs):
 *
 *   mlajit-pack 2
 *   tool mlajit 0.1.0                        the tool that wrote it
 *   key-recipe mlajit-key-2                  } how every key in the pack was made
 *   nvrtc 12.8                               } (MLAJIT_KEY_RECIPE over the generated
 *                                            } source, with this NVRTC): a runtime
 *                                            } with another cannot use the pack
 *   created 1764522000 2025-11-30T17:00:00Z
 *   archs sm_90a                             comma-separated, sorted
 *   kernels 2
 *   <32 hex key> <canonical spec string>     one line per kernel, in key order
 *   ...
 *   checksum <16 hex>                        XXH3-64 of every byte before this line
 *
 * Opening checks the trailer, the whole-file checksum (so LMDB never reads a
 * damaged byte), the LMDB meta pages and the manifest; every entry is checked
 * again (header and cubin checksums) when it is read. No CUDA here. */
#ifndef MLAJIT_CACHE_PACK_H
#define MLAJIT_CACHE_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "cache/store.h"

#define MLAJIT_PACK_FORMAT_VERSION 2u
#define MLAJIT_PACK_TRAILER_BYTES 64u
#define MLAJIT_PACK_MAX_KERNELS (1u << 20)

typedef struct mlajit_pack mlajit_pack;

/* One kernel a pack holds. */
typedef struct mlajit_pack_kernel {
    mlajit_cache_key key;
    char spec_string[128];
} mlajit_pack_kernel;

typedef struct mlajit_pack_manifest {
    unsigned format_version;     /* MLAJIT_PACK_FORMAT_VERSION */
    char tool[64];               /* "mlajit 0.1.0" */
    char key_recipe[64];         /* MLAJIT_KEY_RECIPE of the build that made the keys */
    int nvrtc_major, nvrtc_minor;
    uint64_t created_unix;
    char archs[256];             /* comma-separated, sorted, distinct */
    size_t kernel_count;
    mlajit_pack_kernel *kernels; /* malloc'd, kernel_count long, ascending keys */
} mlajit_pack_manifest;

/* Free the kernels array and zero the manifest. NULL is allowed. */
void mlajit_pack_manifest_clear(mlajit_pack_manifest *m);

/* The manifest's text (malloc'd, NUL-terminated; *len excludes the NUL). */
int mlajit_pack_manifest_format(const mlajit_pack_manifest *m, char **text, size_t *len);

/* Parse manifest text of len bytes (need not be NUL-terminated). Strict: every
 * line, limit and the checksum are checked; never reads past len. MLAJIT_OK or
 * MLAJIT_ERR_CORRUPT naming the line at fault. out is cleared first. */
int mlajit_pack_manifest_parse(const void *text, size_t len, mlajit_pack_manifest *out);

/* 1 when both manifests name the same key recipe and NVRTC version. */
int mlajit_pack_manifest_same_recipe(const mlajit_pack_manifest *a, const mlajit_pack_manifest *b);

/* One kernel to write. */
typedef struct mlajit_pack_item {
    mlajit_cache_key key;
    const mlajit_cache_entry *entry;
} mlajit_pack_item;

/* Write a pack to path atomically (a temporary file beside it, then rename).
 * recipe supplies tool, key_recipe and nvrtc; the kernel list,
 * archs and date are made from the items (duplicate keys are written once).
 * The arch of an item is the last '.'-separated part of its spec string. */
int mlajit_pack_write(const char *path, const mlajit_pack_manifest *recipe, const mlajit_pack_item *items,
                      size_t count);

/* Open and check a pack (see above). MLAJIT_ERR_IO when it cannot be read,
 * MLAJIT_ERR_CORRUPT when a check fails, MLAJIT_CACHE_STALE for an intact pack
 * of another format version (made by another mlajit); the message names the
 * file, the check and what to do. Packs opened twice in one process share one
 * MDB_env. */
int mlajit_pack_open(const char *path, mlajit_pack **out);
void mlajit_pack_close(mlajit_pack *pack);

const mlajit_pack_manifest *mlajit_pack_manifest_of(const mlajit_pack *pack);
const char *mlajit_pack_path(const mlajit_pack *pack);
int64_t mlajit_pack_file_bytes(const mlajit_pack *pack);

/* 1 when the pack holds a kernel for arch (exact match in its arch list). */
int mlajit_pack_has_arch(const mlajit_pack *pack, const char *arch);

/* Look a key up: MLAJIT_OK and a decoded entry (free with
 * mlajit_cache_entry_clear), MLAJIT_ERR_NOT_FOUND, MLAJIT_CACHE_STALE (an
 * entry of another format version) or MLAJIT_ERR_CORRUPT. Thread-safe. */
int mlajit_pack_get(mlajit_pack *pack, const mlajit_cache_key *key, mlajit_cache_entry *entry);

/* Visit every kernel entry (see mlajit_store_visit_fn). */
int mlajit_pack_foreach(mlajit_pack *pack, mlajit_store_visit_fn visit, void *arg);

/* Check every entry: it decodes (header, checksums), its spec string is the
 * manifest's for its key, and the manifest and the database list the same
 * keys. *checked (may be NULL) receives the entries checked. MLAJIT_OK or the
 * first failure (MLAJIT_ERR_CORRUPT) with a message naming the key. */
int mlajit_pack_verify(mlajit_pack *pack, size_t *checked);

#endif
