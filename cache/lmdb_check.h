/* cache/lmdb_check.h - mlajit's own bounds-checked reader of an LMDB data file.
 *
 * LMDB trusts every byte of its file: a damaged page makes it read or write
 * out of bounds (SIGSEGV, SIGBUS, heap damage written back into the file).
 * This module reads the same on-disk format (LMDB 0.9, data version 1, 64-bit
 * little-endian) with pread into its own buffers - it never maps the file and
 * never calls LMDB - and checks each page before it uses a byte of it. It
 * serves three things:
 *  - look-ups (mlajit_lmdb_lookup): the path from the root to one key, each
 *    page checked on the way, so a cache hit never runs LMDB on the file;
 *  - the structural check (mlajit_lmdb_check): every tree and the freelist,
 *    which the store runs before LMDB itself may touch the file (in each write
 *    transaction, and at open when the file changed since it was last checked);
 *  - salvage (MLAJIT_LMDB_SALVAGE, mlajit_lmdb_scan_leaves): the entries that
 *    can still be read from a damaged file, for `mlajit cache verify --repair`.
 *
 * A reader that holds no LMDB reader slot can race a writer that reuses the
 * snapshot's pages; mlajit_lmdb_snapshot_held says whether that could have
 * happened during a read (LMDB reuses a page of snapshot t only from
 * transaction t+3 on), and the caller then reads again.
 * Internal to cache/. No CUDA, no LMDB calls. */
#ifndef MLAJIT_CACHE_LMDB_CHECK_H
#define MLAJIT_CACHE_LMDB_CHECK_H

#include <stddef.h>
#include <stdint.h>

/* One database record (MDB_db) as stored in a meta page or a named-DB node. */
typedef struct mlajit_lmdb_db {
    uint32_t pad;   /* the free DB's holds the page size */
    uint16_t flags; /* MDB_INTEGERKEY, ... */
    uint16_t depth;
    uint64_t branch_pages, leaf_pages, overflow_pages, entries;
    uint64_t root; /* UINT64_MAX: empty */
} mlajit_lmdb_db;

/* The meta page a snapshot starts from. */
typedef struct mlajit_lmdb_meta {
    uint32_t psize;
    int slot;          /* 0 or 1: which meta page */
    uint64_t last_pg;  /* the highest page number in use (free pages may lie past the file's end) */
    uint64_t mapsize;  /* the map size LMDB recorded: (last_pg + 1) pages fit in it */
    uint64_t txnid;
    mlajit_lmdb_db free_db, main_db;
    uint64_t hash;     /* XXH3-64 of both meta records: a cheap identity of the file's state */
} mlajit_lmdb_meta;

/* The bytes of one meta page that hold its header and record. */
#define MLAJIT_LMDB_META_BYTES 152u

/* Read and check both meta pages of the file open on fd (file_bytes long)
 * and pick the newest, as LMDB does. Checks: page numbers and flags, magic,
 * data version, page size (a power of two, 512..32768, the same in both),
 * database flags, depths, roots and last page within the map, and that each
 * transaction id sits in its slot (LMDB picks the slot by the id's parity).
 * MLAJIT_OK; MLAJIT_ERR_NOT_FOUND for an empty file (LMDB starts it afresh);
 * MLAJIT_ERR_CORRUPT or MLAJIT_ERR_IO with a message. */
int mlajit_lmdb_read_meta(int fd, int64_t file_bytes, mlajit_lmdb_meta *out);

/* The meta of transaction txnid (in slot txnid & 1), checked as above; for a
 * write transaction that starts from snapshot txnid. MLAJIT_ERR_CORRUPT when
 * that slot holds another transaction. */
int mlajit_lmdb_read_meta_of(int fd, int64_t file_bytes, uint64_t txnid, mlajit_lmdb_meta *out);

/* 1 when a read of snapshot m that has just ended could not have been
 * disturbed by a writer (no transaction past m->txnid + 1 has committed and m's
 * slot is unchanged), else 0: read again from fresh metas. */
int mlajit_lmdb_snapshot_held(int fd, const mlajit_lmdb_meta *m);

/* Find key in the main database of snapshot m. MLAJIT_OK and a malloc'd copy
 * of the value (*value, *len; free it); MLAJIT_ERR_NOT_FOUND; or
 * MLAJIT_ERR_CORRUPT (a page on the path fails its checks) with a message. */
int mlajit_lmdb_lookup(int fd, const mlajit_lmdb_meta *m, const void *key, size_t key_len, void **value,
                       size_t *len);

/* Called for each entry of the main database, in key order. value is NULL
 * unless MLAJIT_LMDB_VALUES was asked for, and also NULL (value_ok 0) when the
 * value's overflow pages fail their checks. Return nonzero to stop. */
typedef int (*mlajit_lmdb_entry_fn)(const void *key, size_t key_len, const void *value, size_t len, int value_ok,
                                    void *arg);

enum {
    MLAJIT_LMDB_VALUES = 1,  /* read every main-database value and pass it to the visitor */
    MLAJIT_LMDB_SALVAGE = 2, /* go on past damage: skip what fails, visit what can be read */
};

typedef struct mlajit_lmdb_report {
    uint64_t pages;           /* last_pg + 1 */
    uint64_t tree_pages;      /* branch + leaf + overflow pages of every database */
    uint64_t free_pages;      /* pages the freelist lists */
    uint64_t entries;         /* main database entries (named-database records included) */
    uint64_t named_dbs;
    unsigned problems;        /* damage found (more than one only with MLAJIT_LMDB_SALVAGE) */
    char first_problem[256];  /* "" when none */
} mlajit_lmdb_report;

/* The structural check of snapshot m: every page of the main, free and named
 * databases is read once and checked - page number, flags, lower/upper and
 * node offsets within the page, nodes tiling the used space, key sizes, keys
 * in order and within their parent's bounds, child page numbers within the
 * file, every leaf at the recorded depth, overflow runs within the file with
 * a matching header, the freelist's page lists sorted and within the file, no
 * page reached twice across all trees and the freelist, and each database's
 * page and entry counts equal to its record. MLAJIT_OK (also when the visitor
 * stopped the walk: what was walked checked); MLAJIT_ERR_CORRUPT with the first
 * problem as the message (and in report); MLAJIT_ERR_IO; MLAJIT_ERR_OUT_OF_MEMORY.
 * report may be NULL. */
int mlajit_lmdb_check(int fd, const mlajit_lmdb_meta *m, unsigned flags, mlajit_lmdb_entry_fn visit, void *arg,
                      mlajit_lmdb_report *report);

/* Salvage: read every page of the file (of page size psize) and visit each
 * node with a key_len-byte key of each page that checks as a leaf, with its
 * value when the value's bytes check (value_ok). Stale leaves of older
 * snapshots are visited too: callers check each value themselves. */
int mlajit_lmdb_scan_leaves(int fd, int64_t file_bytes, uint32_t psize, size_t key_len, mlajit_lmdb_entry_fn visit,
                            void *arg);

#endif
