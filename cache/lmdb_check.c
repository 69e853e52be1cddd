/* cache/lmdb_check.c - reading and checking an LMDB 0.9 data file with pread.
 *
 * The layout below is LMDB 0.9's (libraries/liblmdb/mdb.c, MDB_DATA_VERSION 1)
 * on a 64-bit little-endian host, where a page number is 8 bytes:
 *
 *   page header (16 bytes): u64 pgno, u16 pad, u16 flags, then u16 lower and
 *     u16 upper (branch and leaf pages) or u32 page count (the first page of
 *     an overflow run); then lower-16 bytes of u16 node offsets.
 *   meta page (pages 0 and 1): the header, then u32 magic 0xBEEFC0DE, u32
 *     version, u64 address, u64 map size, the free and main database records
 *     (48 bytes each), u64 last page, u64 transaction id.
 *   database record: u32 pad (the page size, in the free DB's), u16 flags, u16
 *     depth, u64 branch, leaf and overflow page counts, u64 entries, u64 root.
 *   node (at an even offset): u16 lo, u16 hi, u16 flags, u16 key size, key,
 *     data. A branch node's child page is lo | hi << 16 | flags << 32; a leaf
 *     node's data size is lo | hi << 16, and with F_BIGDATA its data is the u64
 *     number of the overflow run that holds the value.
 *   freelist (the free DB, integer keys): transaction id -> u64 count n, then n
 *     page numbers in descending order (the record may be longer than that).
 *
 * Every offset, size and page number is checked before it is used; nothing is
 * read except with pread into buffers of known size. */
#include "cache/lmdb_check.h"

#include "cache/store.h"
#include "common/alloc.h"
#include "common/error.h"
#include "mlajit.h"

#include <errno.h>
#include <lmdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What this file knows is LMDB 0.9's format; a build against another LMDB
 * must look at its mdb.c first (1.0 changes the file format). */
#if MDB_VERSION_MAJOR != 0 || MDB_VERSION_MINOR != 9
#error "cache/lmdb_check.c reads LMDB 0.9's data file format; check it against this LMDB's mdb.c"
#endif
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "cache/lmdb_check.c reads the little-endian layout LMDB writes on this host"
#endif
_Static_assert(sizeof(size_t) == 8, "LMDB's page numbers are 8 bytes on the hosts this reader knows");

#define PAGE_HEADER 16u
#define NODE_HEADER 8u
#define P_BRANCH 0x01u
#define P_LEAF 0x02u
#define P_OVERFLOW 0x04u
#define P_META 0x08u
#define F_BIGDATA 0x01u
#define F_SUBDATA 0x02u
#define DB_INTEGERKEY 0x08u
#define DB_PERSISTENT_FLAGS 0x7eu /* REVERSEKEY DUPSORT INTEGERKEY DUPFIXED INTEGERDUP REVERSEDUP */
#define ENV_FLAGS_IN_META 0x4001u /* MDB_NOSUBDIR, MDB_FIXEDMAP: kept in the free DB's flags */
#define META_MAGIC 0xBEEFC0DEu
#define DATA_VERSION 1u
#define MAX_KEY 511u
#define MAX_DEPTH 32 /* LMDB's cursor stack */
#define NO_PAGE UINT64_MAX
#define DB_RECORD 48u
#define MIN_PSIZE 512u
#define MAX_PSIZE 32768u
#define FIRST_DATA_PAGE 2u
/* A bound on free pages past the end of the file (the map's own bound comes
 * from the meta, which may be damaged): it sizes the check's page map. */
#define MAX_PAGES_PAST_END ((uint64_t)1 << 24)
#define MAX_TXNID ((uint64_t)1 << 62)

#define META_MAGIC_AT 16u
#define META_VERSION_AT 20u
#define META_MAPSIZE_AT 32u
#define META_FREE_DB_AT 40u
#define META_MAIN_DB_AT 88u
#define META_LAST_PG_AT 136u
#define META_TXNID_AT 144u
_Static_assert(META_TXNID_AT + 8 == MLAJIT_LMDB_META_BYTES, "the meta record ends at its transaction id");

/* ---- little-endian loads ---------------------------------------------------- */

static uint16_t ld16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint32_t ld32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t ld64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Pages of an overflow run holding size bytes (LMDB's OVPAGES). */
static uint64_t overflow_pages_for(uint64_t size, uint32_t psize) { return (PAGE_HEADER - 1 + size) / psize + 1; }

/* 0 when len bytes were read; 1 at the end of the file; -1 with errno. */
static int read_at(int fd, void *buf, size_t len, uint64_t off)
{
    uint8_t *p = buf;
    while (len) {
        ssize_t n = pread(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            return 1;
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

static int key_compare(const uint8_t *a, size_t a_len, const uint8_t *b, size_t b_len, int intkey)
{
    if (intkey) { /* both are 8 bytes: checked where the keys are read */
        uint64_t x = ld64(a), y = ld64(b);
        return x < y ? -1 : x > y;
    }
    int d = memcmp(a, b, a_len < b_len ? a_len : b_len);
    if (d)
        return d;
    return a_len < b_len ? -1 : a_len > b_len;
}

/* ---- meta pages ------------------------------------------------------------- */

static void parse_db(const uint8_t *p, mlajit_lmdb_db *db)
{
    db->pad = ld32(p);
    db->flags = ld16(p + 4);
    db->depth = ld16(p + 6);
    db->branch_pages = ld64(p + 8);
    db->leaf_pages = ld64(p + 16);
    db->overflow_pages = ld64(p + 24);
    db->entries = ld64(p + 32);
    db->root = ld64(p + 40);
}

/* A database record's own fields: an empty tree has no pages; a tree's root
 * is a data page within last_pg and its depth fits LMDB's cursor stack. */
static int db_record_check(const mlajit_lmdb_db *db, uint64_t last_pg, const char *name, char *why, size_t n)
{
    if (db->root == NO_PAGE) {
        if (db->depth || db->branch_pages || db->leaf_pages || db->overflow_pages || db->entries) {
            snprintf(why, n, "the %s database is empty but its record counts %u levels and %llu entries", name,
                     db->depth, (unsigned long long)db->entries);
            return -1;
        }
        return 0;
    }
    if (db->root < FIRST_DATA_PAGE || db->root > last_pg) {
        snprintf(why, n, "the %s database's root page %llu is outside pages 2..%llu", name,
                 (unsigned long long)db->root, (unsigned long long)last_pg);
        return -1;
    }
    if (db->depth < 1 || db->depth > MAX_DEPTH) {
        snprintf(why, n, "the %s database is %u levels deep; allowed 1..%d", name, db->depth, MAX_DEPTH);
        return -1;
    }
    return 0;
}

/* The fields of one meta page that LMDB uses before it reads another page. */
static int meta_parse(const uint8_t *p, int slot, mlajit_lmdb_meta *m, char *why, size_t n)
{
    memset(m, 0, sizeof *m);
    m->slot = slot;
    if (ld64(p) != (uint64_t)slot || ld16(p + 10) != P_META) {
        snprintf(why, n, "page %d is not a meta page (header: page %llu, flags 0x%x)", slot,
                 (unsigned long long)ld64(p), ld16(p + 10));
        return -1;
    }
    if (ld32(p + META_MAGIC_AT) != META_MAGIC) {
        snprintf(why, n, "meta page %d has magic 0x%08x, not LMDB's 0x%08x", slot, ld32(p + META_MAGIC_AT),
                 META_MAGIC);
        return -1;
    }
    if (ld32(p + META_VERSION_AT) != DATA_VERSION) {
        snprintf(why, n, "meta page %d is LMDB data version %u; this build reads version %u", slot,
                 ld32(p + META_VERSION_AT), DATA_VERSION);
        return -1;
    }
    parse_db(p + META_FREE_DB_AT, &m->free_db);
    parse_db(p + META_MAIN_DB_AT, &m->main_db);
    m->psize = m->free_db.pad;
    m->mapsize = ld64(p + META_MAPSIZE_AT);
    m->last_pg = ld64(p + META_LAST_PG_AT);
    m->txnid = ld64(p + META_TXNID_AT);
    if (m->psize < MIN_PSIZE || m->psize > MAX_PSIZE || (m->psize & (m->psize - 1))) {
        snprintf(why, n, "meta page %d gives a page size of %u; allowed a power of two in %u..%u", slot, m->psize,
                 MIN_PSIZE, MAX_PSIZE);
        return -1;
    }
    /* Ids count commits from 0: one near the top would wrap in the next write. */
    if (m->txnid > MAX_TXNID) {
        snprintf(why, n, "meta page %d holds transaction %llu, past any count of commits", slot,
                 (unsigned long long)m->txnid);
        return -1;
    }
    /* LMDB picks the meta of a transaction by the id's parity (slot = id & 1). */
    if (m->txnid != 0 && (m->txnid & 1u) != (uint64_t)slot) {
        snprintf(why, n, "meta page %d holds transaction %llu, which belongs in meta page %d", slot,
                 (unsigned long long)m->txnid, (int)(m->txnid & 1u));
        return -1;
    }
    return 0;
}

/* Everything the picked meta claims about the rest of the file. The last page
 * may lie past the end of the file (LMDB does not write pages a transaction
 * allocated and freed again), but never past the map LMDB grew to, which the
 * meta records; the trees' own pages are read, so one past the end is damage. */
static int meta_check_picked(const mlajit_lmdb_meta *m, int64_t file_bytes, char *why, size_t n)
{
    uint64_t pages = (uint64_t)file_bytes / m->psize;
    if (m->last_pg < 1 || m->last_pg >= m->mapsize / m->psize || m->last_pg >= pages + MAX_PAGES_PAST_END) {
        snprintf(why, n, "meta page %d says the last page is %llu, which a %llu-byte map or the %lld-byte file "
                 "(%llu pages) cannot hold", m->slot, (unsigned long long)m->last_pg,
                 (unsigned long long)m->mapsize, (long long)file_bytes, (unsigned long long)pages);
        return -1;
    }
    if ((m->free_db.flags & DB_PERSISTENT_FLAGS) != DB_INTEGERKEY ||
        (m->free_db.flags & ~(DB_PERSISTENT_FLAGS | ENV_FLAGS_IN_META))) {
        snprintf(why, n, "meta page %d gives the freelist the flags 0x%x (it has integer keys, 0x%x)", m->slot,
                 m->free_db.flags, DB_INTEGERKEY);
        return -1;
    }
    if (m->main_db.flags != 0) {
        snprintf(why, n, "meta page %d gives the main database the flags 0x%x; mlajit's files have none", m->slot,
                 m->main_db.flags);
        return -1;
    }
    if (db_record_check(&m->free_db, m->last_pg, "free", why, n) ||
        db_record_check(&m->main_db, m->last_pg, "main", why, n))
        return -1;
    return 0;
}

static int read_metas(int fd, int64_t file_bytes, uint8_t metas[2][MLAJIT_LMDB_META_BYTES], char *why, size_t n)
{
    if (file_bytes < (int64_t)MLAJIT_LMDB_META_BYTES) {
        snprintf(why, n, "the file is %lld bytes, shorter than a meta page", (long long)file_bytes);
        return MLAJIT_ERR_CORRUPT;
    }
    int r = read_at(fd, metas[0], MLAJIT_LMDB_META_BYTES, 0);
    if (r < 0) {
        snprintf(why, n, "reading meta page 0: %s", strerror(errno));
        return MLAJIT_ERR_IO;
    }
    /* LMDB reads meta page 1 at the page size meta page 0 gives. */
    uint32_t psize0 = ld32(metas[0] + META_FREE_DB_AT);
    if (r == 0 && psize0 >= MIN_PSIZE && psize0 <= MAX_PSIZE)
        r = read_at(fd, metas[1], MLAJIT_LMDB_META_BYTES, psize0);
    else if (r == 0)
        memset(metas[1], 0, MLAJIT_LMDB_META_BYTES); /* meta_parse of page 0 names the page size */
    if (r < 0) {
        snprintf(why, n, "reading meta page 1: %s", strerror(errno));
        return MLAJIT_ERR_IO;
    }
    if (r > 0) {
        snprintf(why, n, "the %lld-byte file ends inside its meta pages (truncated)", (long long)file_bytes);
        return MLAJIT_ERR_CORRUPT;
    }
    return MLAJIT_OK;
}

/* want_txnid: UINT64_MAX for the newest meta (as LMDB picks: the higher id,
 * meta 0 on a tie), else the meta of that transaction. */
static int meta_read(int fd, int64_t file_bytes, uint64_t want_txnid, mlajit_lmdb_meta *out)
{
    memset(out, 0, sizeof *out);
    if (file_bytes == 0)
        return mlajit_fail(MLAJIT_ERR_NOT_FOUND, "the data file is empty (LMDB starts it afresh)");
    uint8_t metas[2][MLAJIT_LMDB_META_BYTES];
    char why[256];
    int status = read_metas(fd, file_bytes, metas, why, sizeof why);
    if (status != MLAJIT_OK)
        return mlajit_fail(status, "%s", why);
    mlajit_lmdb_meta m[2];
    for (int slot = 0; slot < 2; slot++)
        if (meta_parse(metas[slot], slot, &m[slot], why, sizeof why))
            return mlajit_fail(MLAJIT_ERR_CORRUPT, "%s", why);
    if (m[0].psize != m[1].psize)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "the meta pages give page sizes %u and %u", m[0].psize, m[1].psize);
    int pick;
    if (want_txnid == UINT64_MAX) {
        pick = m[0].txnid < m[1].txnid;
    } else {
        pick = (int)(want_txnid & 1u);
        if (m[pick].txnid != want_txnid)
            return mlajit_fail(MLAJIT_ERR_CORRUPT, "meta page %d holds transaction %llu, not %llu", pick,
                               (unsigned long long)m[pick].txnid, (unsigned long long)want_txnid);
    }
    if (m[!pick].txnid > m[pick].txnid)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "meta page %d (transaction %llu) is newer than the snapshot's",
                           !pick, (unsigned long long)m[!pick].txnid);
    if (meta_check_picked(&m[pick], file_bytes, why, sizeof why))
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "%s", why);
    *out = m[pick];
    out->hash = mlajit_hash64(metas, sizeof metas);
    return MLAJIT_OK;
}

int mlajit_lmdb_read_meta(int fd, int64_t file_bytes, mlajit_lmdb_meta *out)
{
    return meta_read(fd, file_bytes, UINT64_MAX, out);
}

int mlajit_lmdb_read_meta_of(int fd, int64_t file_bytes, uint64_t txnid, mlajit_lmdb_meta *out)
{
    return meta_read(fd, file_bytes, txnid, out);
}

int mlajit_lmdb_snapshot_held(int fd, const mlajit_lmdb_meta *m)
{
    uint8_t a[MLAJIT_LMDB_META_BYTES], b[MLAJIT_LMDB_META_BYTES];
    if (read_at(fd, a, sizeof a, 0) != 0 || read_at(fd, b, sizeof b, m->psize) != 0)
        return 0;
    const uint8_t *mine = m->slot ? b : a, *other = m->slot ? a : b;
    /* A page of snapshot t is reused no earlier than by transaction t+3, which
     * begins only after t+2 has committed (into t's slot). */
    return ld64(mine + META_TXNID_AT) == m->txnid && ld64(other + META_TXNID_AT) <= m->txnid + 1;
}

/* ---- one branch or leaf page ------------------------------------------------ */

typedef struct page_node {
    const uint8_t *key;
    unsigned key_len;
    unsigned flags;
    uint64_t child;     /* branch */
    uint64_t data_size; /* leaf */
    const uint8_t *data;
} page_node;

static unsigned page_keys(const uint8_t *p) { return (ld16(p + 12) - PAGE_HEADER) / 2; }

/* Node i of a page that passed page_check. */
static page_node node_at(const uint8_t *p, unsigned i)
{
    const uint8_t *node = p + ld16(p + PAGE_HEADER + 2 * i);
    page_node nd;
    nd.flags = ld16(node + 4);
    nd.key_len = ld16(node + 6);
    nd.key = node + NODE_HEADER;
    nd.data = nd.key + nd.key_len;
    nd.child = (uint64_t)ld16(node) | (uint64_t)ld16(node + 2) << 16 | (uint64_t)nd.flags << 32;
    nd.data_size = (uint64_t)ld16(node) | (uint64_t)ld16(node + 2) << 16;
    return nd;
}

/* Everything about one branch or leaf page that can be checked without the
 * rest of the tree: its number, flags, free-space bounds, and every node
 * within the page, not overlapping another (LMDB moves nodes by these sizes),
 * with valid flags and key sizes. cover: scratch of psize bytes. */
static int page_check(const uint8_t *p, uint64_t pgno, uint32_t psize, uint8_t *cover, char *why, size_t n)
{
    if (ld64(p) != pgno) {
        snprintf(why, n, "page %llu holds the header of page %llu", (unsigned long long)pgno,
                 (unsigned long long)ld64(p));
        return -1;
    }
    unsigned flags = ld16(p + 10), lower = ld16(p + 12), upper = ld16(p + 14);
    if (flags != P_BRANCH && flags != P_LEAF) {
        snprintf(why, n, "page %llu has flags 0x%x, not a branch (0x1) or leaf (0x2) page", (unsigned long long)pgno,
                 flags);
        return -1;
    }
    if (lower < PAGE_HEADER + 2 || (lower - PAGE_HEADER) % 2 || upper > psize || lower > upper) {
        snprintf(why, n, "page %llu: its free space runs from %u to %u, which does not fit a %u-byte page with "
                 "a node", (unsigned long long)pgno, lower, upper, psize);
        return -1;
    }
    int leaf = flags == P_LEAF;
    unsigned count = (lower - PAGE_HEADER) / 2;
    memset(cover + upper, 0, psize - upper);
    for (unsigned i = 0; i < count; i++) {
        unsigned at = ld16(p + PAGE_HEADER + 2 * i);
        if (at < upper || at > psize - NODE_HEADER || (at & 1u)) {
            snprintf(why, n, "page %llu: node %u is at offset %u, outside the page's used space %u..%u",
                     (unsigned long long)pgno, i, at, upper, psize);
            return -1;
        }
        page_node nd = node_at(p, i);
        uint64_t size = NODE_HEADER + (uint64_t)nd.key_len;
        if (nd.key_len > MAX_KEY || (nd.key_len == 0 && (leaf || i > 0))) {
            snprintf(why, n, "page %llu: node %u has a %u-byte key; allowed 1..%u", (unsigned long long)pgno, i,
                     nd.key_len, MAX_KEY);
            return -1;
        }
        if (leaf) {
            if (nd.flags & ~(F_BIGDATA | F_SUBDATA) || nd.flags == (F_BIGDATA | F_SUBDATA)) {
                snprintf(why, n, "page %llu: node %u has flags 0x%x (duplicate-key data is not used here)",
                         (unsigned long long)pgno, i, nd.flags);
                return -1;
            }
            if ((nd.flags & F_SUBDATA) && nd.data_size != DB_RECORD) {
                snprintf(why, n, "page %llu: node %u names a database with a %llu-byte record, not %u",
                         (unsigned long long)pgno, i, (unsigned long long)nd.data_size, DB_RECORD);
                return -1;
            }
            size += (nd.flags & F_BIGDATA) ? 8u : nd.data_size;
        }
        if (size > psize - at) {
            snprintf(why, n, "page %llu: node %u (%llu bytes at offset %u) runs past the end of the page",
                     (unsigned long long)pgno, i, (unsigned long long)size, at);
            return -1;
        }
        for (unsigned b = at; b < at + (unsigned)size; b++) {
            if (cover[b]) {
                snprintf(why, n, "page %llu: node %u overlaps another node", (unsigned long long)pgno, i);
                return -1;
            }
            cover[b] = 1;
        }
    }
    return 0;
}

/* The overflow run that holds a value of size bytes: its first page's header
 * names it, says overflow, and counts enough pages, all within last_pg.
 * *pages receives its length. */
static int overflow_check(int fd, uint64_t pgno, uint64_t size, uint32_t psize, uint64_t last_pg, uint64_t *pages,
                          char *why, size_t n)
{
    if (pgno < FIRST_DATA_PAGE || pgno > last_pg) {
        snprintf(why, n, "a %llu-byte value's overflow page %llu is outside pages 2..%llu", (unsigned long long)size,
                 (unsigned long long)pgno, (unsigned long long)last_pg);
        return -1;
    }
    uint8_t h[PAGE_HEADER];
    int r = read_at(fd, h, sizeof h, pgno * psize);
    if (r != 0) {
        snprintf(why, n, "cannot read overflow page %llu: %s", (unsigned long long)pgno,
                 r < 0 ? strerror(errno) : "past the end of the file (truncated?)");
        return -1;
    }
    uint64_t need = overflow_pages_for(size, psize), have = ld32(h + 12);
    if (ld64(h) != pgno || ld16(h + 10) != P_OVERFLOW || have < need || have > last_pg - pgno + 1) {
        snprintf(why, n, "overflow page %llu of a %llu-byte value: header page %llu, flags 0x%x, %llu pages "
                 "(needs %llu, within %llu)", (unsigned long long)pgno, (unsigned long long)size,
                 (unsigned long long)ld64(h), ld16(h + 10), (unsigned long long)have, (unsigned long long)need,
                 (unsigned long long)last_pg);
        return -1;
    }
    *pages = have;
    return 0;
}

/* Read a checked overflow run's value into *buf (grown as needed). */
static int overflow_read(int fd, uint64_t pgno, uint64_t size, uint32_t psize, uint8_t **buf, size_t *cap,
                         char *why, size_t n)
{
    if (size > *cap) {
        uint8_t *grown = mlajit_realloc(*buf, size);
        if (!grown) {
            snprintf(why, n, "out of host memory for a %llu-byte value", (unsigned long long)size);
            return -2;
        }
        *buf = grown;
        *cap = size;
    }
    int r = read_at(fd, *buf, size, pgno * psize + PAGE_HEADER);
    if (r != 0) {
        snprintf(why, n, "cannot read the value on overflow page %llu: %s", (unsigned long long)pgno,
                 r < 0 ? strerror(errno) : "past the end of the file (truncated?)");
        return -1;
    }
    return 0;
}

/* ---- look-up ------------------------------------------------------------------ */

/* The branch child to follow for key: the last node whose key is <= key
 * (node 0's key is the page's lower bound and not compared). */
static unsigned branch_search(const uint8_t *p, const void *key, size_t key_len)
{
    unsigned lo = 1, hi = page_keys(p); /* answer in [lo-1, hi-1] */
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        page_node nd = node_at(p, mid);
        if (key_compare(nd.key, nd.key_len, key, key_len, 0) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo - 1;
}

static int leaf_search(const uint8_t *p, const void *key, size_t key_len, unsigned *index)
{
    unsigned lo = 0, hi = page_keys(p);
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        page_node nd = node_at(p, mid);
        int c = key_compare(nd.key, nd.key_len, key, key_len, 0);
        if (c == 0) {
            *index = mid;
            return 1;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

int mlajit_lmdb_lookup(int fd, const mlajit_lmdb_meta *m, const void *key, size_t key_len, void **value,
                       size_t *len)
{
    *value = NULL;
    *len = 0;
    if (!key || key_len == 0 || key_len > MAX_KEY)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "lmdb look-up: a key of %zu bytes; allowed 1..%u", key_len,
                           MAX_KEY);
    const mlajit_lmdb_db *db = &m->main_db;
    if (db->root == NO_PAGE)
        return mlajit_fail(MLAJIT_ERR_NOT_FOUND, "the cache is empty");
    uint8_t *page = mlajit_malloc(2 * (size_t)m->psize);
    if (!page)
        return mlajit_fail_oom("an LMDB look-up's page buffer");
    uint8_t *cover = page + m->psize;
    char why[256];
    int status = MLAJIT_OK;
    uint64_t pgno = db->root;
    for (unsigned depth = 1;; depth++) {
        int r = read_at(fd, page, m->psize, pgno * m->psize);
        if (r != 0) {
            status = r < 0 ? mlajit_fail(MLAJIT_ERR_IO, "reading page %llu: %s", (unsigned long long)pgno,
                                         strerror(errno))
                           : mlajit_fail(MLAJIT_ERR_CORRUPT, "page %llu lies past the end of the file",
                                         (unsigned long long)pgno);
            break;
        }
        if (page_check(page, pgno, m->psize, cover, why, sizeof why)) {
            status = mlajit_fail(MLAJIT_ERR_CORRUPT, "%s", why);
            break;
        }
        int is_leaf = ld16(page + 10) == P_LEAF;
        if (is_leaf != (depth == db->depth)) {
            status = mlajit_fail(MLAJIT_ERR_CORRUPT, "page %llu is a %s at level %u of a %u-level tree",
                                 (unsigned long long)pgno, is_leaf ? "leaf" : "branch", depth, db->depth);
            break;
        }
        if (!is_leaf) {
            page_node nd = node_at(page, branch_search(page, key, key_len));
            if (nd.child < FIRST_DATA_PAGE || nd.child > m->last_pg) {
                status = mlajit_fail(MLAJIT_ERR_CORRUPT, "page %llu points to page %llu, outside pages 2..%llu",
                                     (unsigned long long)pgno, (unsigned long long)nd.child,
                                     (unsigned long long)m->last_pg);
                break;
            }
            pgno = nd.child;
            continue;
        }
        unsigned index;
        if (!leaf_search(page, key, key_len, &index)) {
            status = mlajit_fail(MLAJIT_ERR_NOT_FOUND, "no such key");
            break;
        }
        page_node nd = node_at(page, index);
        if (nd.flags & F_SUBDATA) {
            status = mlajit_fail(MLAJIT_ERR_CORRUPT, "the key names a database, not a value");
            break;
        }
        uint8_t *copy = NULL;
        size_t cap = 0;
        if (nd.flags & F_BIGDATA) {
            uint64_t ov = ld64(nd.data), pages;
            r = overflow_check(fd, ov, nd.data_size, m->psize, m->last_pg, &pages, why, sizeof why);
            if (r == 0)
                r = overflow_read(fd, ov, nd.data_size, m->psize, &copy, &cap, why, sizeof why);
            if (r != 0) {
                free(copy);
                status = mlajit_fail(r == -2 ? MLAJIT_ERR_OUT_OF_MEMORY : MLAJIT_ERR_CORRUPT, "%s", why);
                break;
            }
        } else {
            copy = mlajit_malloc(nd.data_size ? nd.data_size : 1);
            if (!copy) {
                status = mlajit_fail_oom("an LMDB look-up's %llu-byte value",
                                     (unsigned long long)nd.data_size);
                break;
            }
            memcpy(copy, nd.data, nd.data_size);
        }
        *value = copy;
        *len = nd.data_size;
        break;
    }
    free(page);
    return status;
}

/* ---- prefix scans --------------------------------------------------------------- */

typedef struct prefix_scan {
    int fd;
    const mlajit_lmdb_meta *m;
    const uint8_t *prefix;
    size_t prefix_len;
    mlajit_lmdb_entry_fn visit;
    void *arg;
    uint8_t *level[MAX_DEPTH + 1]; /* one page buffer per level */
    uint8_t *cover;
    uint8_t *value;
    size_t value_cap;
    uint64_t pages_read; /* at most the file's pages: a damaged tree cannot loop */
    int stop;
} prefix_scan;

static int has_prefix(const page_node *nd, const uint8_t *prefix, size_t prefix_len)
{
    return nd->key_len >= prefix_len && memcmp(nd->key, prefix, prefix_len) == 0;
}

/* The subtree at pgno, level depth: MLAJIT_OK or the error that ends the scan. */
static int scan_page(prefix_scan *s, uint64_t pgno, unsigned depth)
{
    const mlajit_lmdb_db *db = &s->m->main_db;
    uint32_t psize = s->m->psize;
    if (pgno < FIRST_DATA_PAGE || pgno > s->m->last_pg)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "page %llu at level %u is outside pages 2..%llu",
                           (unsigned long long)pgno, depth, (unsigned long long)s->m->last_pg);
    if (depth > db->depth || depth > MAX_DEPTH)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "the main database is deeper than its %u levels", db->depth);
    if (++s->pages_read > s->m->last_pg + 1)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "the main database reaches more pages than the file has (a page is "
                           "reached twice)");
    if (!s->level[depth] && !(s->level[depth] = mlajit_malloc(psize)))
        return mlajit_fail_oom("a page buffer of a prefix scan");
    uint8_t *page = s->level[depth];
    int r = read_at(s->fd, page, psize, pgno * psize);
    if (r != 0)
        return r < 0 ? mlajit_fail(MLAJIT_ERR_IO, "reading page %llu: %s", (unsigned long long)pgno, strerror(errno))
                     : mlajit_fail(MLAJIT_ERR_CORRUPT, "page %llu lies past the end of the file",
                                   (unsigned long long)pgno);
    char why[256];
    if (page_check(page, pgno, psize, s->cover, why, sizeof why))
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "%s", why);
    int is_leaf = ld16(page + 10) == P_LEAF;
    if (is_leaf != (depth == db->depth))
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "page %llu is a %s at level %u of a %u-level tree",
                           (unsigned long long)pgno, is_leaf ? "leaf" : "branch", depth, db->depth);
    unsigned count = page_keys(page);
    if (!is_leaf) {
        /* Child i holds the keys from node i's key up to node i + 1's: the
         * first that can hold the prefix, then those whose bound has it. */
        unsigned first = branch_search(page, s->prefix, s->prefix_len);
        for (unsigned i = first; i < count && !s->stop; i++) {
            page_node nd = node_at(page, i);
            if (i > first && !has_prefix(&nd, s->prefix, s->prefix_len))
                break;
            int status = scan_page(s, nd.child, depth + 1);
            if (status != MLAJIT_OK)
                return status;
        }
        return MLAJIT_OK;
    }
    for (unsigned i = 0; i < count && !s->stop; i++) {
        page_node nd = node_at(page, i);
        if (!has_prefix(&nd, s->prefix, s->prefix_len) || (nd.flags & F_SUBDATA))
            continue;
        const uint8_t *value = nd.data;
        if (nd.flags & F_BIGDATA) {
            uint64_t ov = ld64(nd.data), pages;
            r = overflow_check(s->fd, ov, nd.data_size, psize, s->m->last_pg, &pages, why, sizeof why);
            if (r == 0)
                r = overflow_read(s->fd, ov, nd.data_size, psize, &s->value, &s->value_cap, why, sizeof why);
            if (r != 0)
                return mlajit_fail(r == -2 ? MLAJIT_ERR_OUT_OF_MEMORY : MLAJIT_ERR_CORRUPT, "%s", why);
            value = s->value;
        }
        if (s->visit(nd.key, nd.key_len, value, (size_t)nd.data_size, 1, s->arg))
            s->stop = 1;
    }
    return MLAJIT_OK;
}

int mlajit_lmdb_scan_prefix(int fd, const mlajit_lmdb_meta *m, const void *prefix, size_t prefix_len,
                            mlajit_lmdb_entry_fn visit, void *arg)
{
    if (!m || !visit || !prefix || prefix_len == 0 || prefix_len > MAX_KEY)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "lmdb scan: a prefix of %zu bytes and a visitor; allowed "
                           "1..%u bytes", prefix_len, MAX_KEY);
    if (m->main_db.root == NO_PAGE)
        return MLAJIT_OK;
    prefix_scan s = {.fd = fd, .m = m, .prefix = prefix, .prefix_len = prefix_len, .visit = visit, .arg = arg};
    int status = (s.cover = mlajit_malloc(m->psize)) ? scan_page(&s, m->main_db.root, 1)
                                                     : mlajit_fail_oom("a page buffer of a prefix scan");
    for (int d = 0; d <= MAX_DEPTH; d++)
        free(s.level[d]);
    free(s.cover);
    free(s.value);
    return status;
}

/* ---- the structural check ----------------------------------------------------- */

enum { DB_FREE, DB_MAIN, DB_NAMED };

typedef struct named_db {
    mlajit_lmdb_db db;
    char name[64];
} named_db;

typedef struct walker {
    int fd;
    const mlajit_lmdb_meta *m;
    uint32_t psize;
    uint64_t last_pg;
    unsigned flags;
    mlajit_lmdb_entry_fn visit;
    void *arg;
    int stop;   /* strict damage, I/O error, out of memory, or the visitor said stop */
    int status; /* MLAJIT_OK, or the error that stopped the walk */
    uint8_t *seen;
    uint8_t *level[MAX_DEPTH + 1];
    uint8_t *cover;
    uint8_t *value;
    size_t value_cap;
    mlajit_lmdb_report rep;
    /* the database being walked */
    int kind;
    const char *name;
    uint16_t depth;
    uint64_t branch, leaf, overflow, entries;
    named_db *named;
    size_t named_count, named_cap;
} walker;

/* Damage: the first problem is kept; a strict walk stops at it. */
static void problem(walker *w, const char *fmt, ...) MLAJIT_PRINTF(2, 3);
static void problem(walker *w, const char *fmt, ...)
{
    if (w->rep.problems++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->rep.first_problem, sizeof w->rep.first_problem, fmt, ap);
        va_end(ap);
    }
    if (!(w->flags & MLAJIT_LMDB_SALVAGE)) {
        w->stop = 1;
        if (w->status == MLAJIT_OK)
            w->status = MLAJIT_ERR_CORRUPT;
    }
}

static void walk_fail(walker *w, int status, const char *fmt, ...) MLAJIT_PRINTF(3, 4);
static void walk_fail(walker *w, int status, const char *fmt, ...)
{
    if (w->status == MLAJIT_OK || w->status == MLAJIT_ERR_CORRUPT) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->rep.first_problem, sizeof w->rep.first_problem, fmt, ap);
        va_end(ap);
        w->status = status;
    }
    w->stop = 1;
}

static int seen_test_and_set(walker *w, uint64_t pgno)
{
    uint8_t bit = (uint8_t)(1u << (pgno & 7));
    int was = (w->seen[pgno >> 3] & bit) != 0;
    w->seen[pgno >> 3] |= bit;
    return was;
}

/* Mark pages [first, first + count) in use; 0, or -1 when one already was. */
static int mark_run(walker *w, uint64_t first, uint64_t count, const char *what)
{
    for (uint64_t i = 0; i < count; i++) {
        if (seen_test_and_set(w, first + i)) {
            problem(w, "%s database: page %llu (%s) is also used elsewhere in the file", w->name,
                    (unsigned long long)(first + i), what);
            return -1;
        }
    }
    return 0;
}

/* The pages one freelist record lists: descending, within the file, each
 * used once. */
static void check_free_list(walker *w, const uint8_t *data, uint64_t size, uint64_t txnid)
{
    if (size < 8 || size % 8) {
        problem(w, "free database: the record of transaction %llu is %llu bytes, not a list of page numbers",
                (unsigned long long)txnid, (unsigned long long)size);
        return;
    }
    uint64_t count = ld64(data);
    if (count > size / 8 - 1) {
        problem(w, "free database: the record of transaction %llu lists %llu pages in %llu bytes",
                (unsigned long long)txnid, (unsigned long long)count, (unsigned long long)size);
        return;
    }
    uint64_t prev = UINT64_MAX;
    for (uint64_t j = 1; j <= count; j++) {
        uint64_t pg = ld64(data + 8 * j);
        if (pg >= prev || pg < FIRST_DATA_PAGE || pg > w->last_pg) {
            problem(w, "free database: the record of transaction %llu lists page %llu %s",
                    (unsigned long long)txnid, (unsigned long long)pg,
                    pg >= prev ? "out of descending order" : "outside the file's pages");
            return;
        }
        prev = pg;
        if (seen_test_and_set(w, pg)) {
            problem(w, "free database: page %llu is listed free but is also in use or listed before",
                    (unsigned long long)pg);
            return;
        }
        w->rep.free_pages++;
    }
}

static void queue_named(walker *w, const page_node *nd)
{
    if (w->kind != DB_MAIN) {
        problem(w, "%s database: a node names a database (only the main database holds those)", w->name);
        return;
    }
    if (w->named_count == w->named_cap) {
        size_t cap = w->named_cap ? 2 * w->named_cap : 4;
        named_db *grown = mlajit_realloc(w->named, cap * sizeof *grown);
        if (!grown) {
            walk_fail(w, MLAJIT_ERR_OUT_OF_MEMORY, "out of host memory for the list of named databases");
            return;
        }
        w->named = grown;
        w->named_cap = cap;
    }
    named_db *d = &w->named[w->named_count++];
    parse_db(nd->data, &d->db);
    size_t n = nd->key_len < sizeof d->name - 1 ? nd->key_len : sizeof d->name - 1;
    for (size_t i = 0; i < n; i++)
        d->name[i] = (nd->key[i] >= 0x20 && nd->key[i] < 0x7f) ? (char)nd->key[i] : '?';
    d->name[n] = '\0';
}

static void walk_leaf_node(walker *w, const uint8_t *page, uint64_t pgno, unsigned i)
{
    page_node nd = node_at(page, i);
    w->entries++;
    if (nd.flags & F_SUBDATA) {
        queue_named(w, &nd);
        return;
    }
    int intkey = w->kind == DB_FREE;
    if (intkey && nd.key_len != 8) {
        problem(w, "free database: page %llu node %u has a %u-byte key, not a transaction id",
                (unsigned long long)pgno, i, nd.key_len);
        return;
    }
    if (intkey && ld64(nd.key) > w->m->txnid) {
        problem(w, "free database: a record of transaction %llu, newer than the snapshot's %llu",
                (unsigned long long)ld64(nd.key), (unsigned long long)w->m->txnid);
        return;
    }
    int want_value = intkey || (w->kind == DB_MAIN && (w->flags & MLAJIT_LMDB_VALUES));
    const uint8_t *value = nd.data;
    int value_ok = 1;
    char why[256];
    if (nd.flags & F_BIGDATA) {
        uint64_t ov = ld64(nd.data), pages = 0;
        if (overflow_check(w->fd, ov, nd.data_size, w->psize, w->last_pg, &pages, why, sizeof why)) {
            problem(w, "%s database: page %llu node %u: %s", w->name, (unsigned long long)pgno, i, why);
            value_ok = 0;
        } else if (mark_run(w, ov, pages, "an overflow page") == 0) {
            w->overflow += pages;
            if (want_value) {
                int r = overflow_read(w->fd, ov, nd.data_size, w->psize, &w->value, &w->value_cap, why, sizeof why);
                if (r == -2)
                    walk_fail(w, MLAJIT_ERR_OUT_OF_MEMORY, "%s", why);
                else if (r)
                    problem(w, "%s database: %s", w->name, why);
                value_ok = r == 0;
                value = w->value;
            }
        } else {
            value_ok = 0;
        }
    }
    if (w->stop)
        return;
    if (intkey) {
        if (value_ok)
            check_free_list(w, value, nd.data_size, ld64(nd.key));
        return;
    }
    if (w->kind == DB_MAIN && w->visit) {
        int pass = value_ok && want_value;
        if (w->visit(nd.key, nd.key_len, pass ? value : NULL, (size_t)nd.data_size, value_ok, w->arg))
            w->stop = 1;
    }
}

/* Keys in order within the page and within [lo, hi) from the parent. */
static int keys_in_order(walker *w, const uint8_t *page, uint64_t pgno, const page_node *lo, const page_node *hi)
{
    int leaf = ld16(page + 10) == P_LEAF, intkey = w->kind == DB_FREE;
    unsigned count = page_keys(page), first = leaf ? 0 : 1;
    page_node prev = {0};
    for (unsigned i = first; i < count; i++) {
        page_node nd = node_at(page, i);
        if (intkey && nd.key_len != 8) {
            problem(w, "free database: page %llu node %u has a %u-byte key", (unsigned long long)pgno, i,
                    nd.key_len);
            return -1;
        }
        int bad = (i > first && key_compare(prev.key, prev.key_len, nd.key, nd.key_len, intkey) >= 0) ||
                  (lo && key_compare(nd.key, nd.key_len, lo->key, lo->key_len, intkey) < 0) ||
                  (hi && key_compare(nd.key, nd.key_len, hi->key, hi->key_len, intkey) >= 0);
        if (bad) {
            problem(w, "%s database: page %llu: node %u's key is out of order", w->name, (unsigned long long)pgno, i);
            return -1;
        }
        prev = nd;
    }
    return 0;
}

static void walk_page(walker *w, uint64_t pgno, unsigned depth, const page_node *lo, const page_node *hi)
{
    if (pgno < FIRST_DATA_PAGE || pgno > w->last_pg) {
        problem(w, "%s database: page %llu at level %u is outside pages 2..%llu", w->name, (unsigned long long)pgno,
                depth, (unsigned long long)w->last_pg);
        return;
    }
    if (depth > w->depth) { /* a branch at the last level is refused below, so only a guard for level[] */
        problem(w, "%s database: deeper than its %u levels", w->name, w->depth);
        return;
    }
    if (seen_test_and_set(w, pgno)) {
        problem(w, "%s database: page %llu is reached twice (a loop, or a page shared with another tree)", w->name,
                (unsigned long long)pgno);
        return;
    }
    if (!w->level[depth] && !(w->level[depth] = mlajit_malloc(w->psize))) {
        walk_fail(w, MLAJIT_ERR_OUT_OF_MEMORY, "out of host memory for a page buffer");
        return;
    }
    uint8_t *page = w->level[depth];
    int r = read_at(w->fd, page, w->psize, pgno * w->psize);
    if (r < 0) {
        walk_fail(w, MLAJIT_ERR_IO, "reading page %llu: %s", (unsigned long long)pgno, strerror(errno));
        return;
    }
    if (r > 0) {
        problem(w, "%s database: page %llu lies past the end of the file (truncated?)", w->name,
                (unsigned long long)pgno);
        return;
    }
    char why[256];
    if (page_check(page, pgno, w->psize, w->cover, why, sizeof why)) {
        problem(w, "%s database: %s", w->name, why);
        return;
    }
    int leaf = ld16(page + 10) == P_LEAF;
    if (leaf != (depth == w->depth)) {
        problem(w, "%s database: page %llu is a %s at level %u of a %u-level tree", w->name, (unsigned long long)pgno,
                leaf ? "leaf" : "branch", depth, w->depth);
        return;
    }
    if (keys_in_order(w, page, pgno, lo, hi))
        return;
    unsigned count = page_keys(page);
    if (leaf) {
        w->leaf++;
        for (unsigned i = 0; i < count && !w->stop; i++)
            walk_leaf_node(w, page, pgno, i);
        return;
    }
    w->branch++;
    for (unsigned i = 0; i < count && !w->stop; i++) {
        page_node nd = node_at(page, i), next;
        if (i + 1 < count)
            next = node_at(page, i + 1);
        walk_page(w, nd.child, depth + 1, i == 0 ? lo : &nd, i + 1 < count ? &next : hi);
    }
}

static void walk_db(walker *w, const mlajit_lmdb_db *db, int kind, const char *name)
{
    w->kind = kind;
    w->name = name;
    w->depth = db->depth;
    w->branch = w->leaf = w->overflow = w->entries = 0;
    char why[256];
    if (kind == DB_NAMED) {
        if (db_record_check(db, w->last_pg, name, why, sizeof why)) {
            problem(w, "%s", why);
            return;
        }
        if (db->flags != 0) {
            problem(w, "the %s database has flags 0x%x; mlajit's files use none", name, db->flags);
            return;
        }
    }
    if (db->root == NO_PAGE)
        return;
    unsigned problems = w->rep.problems;
    walk_page(w, db->root, 1, NULL, NULL);
    w->rep.tree_pages += w->branch + w->leaf + w->overflow;
    if (kind != DB_FREE)
        w->rep.entries += kind == DB_MAIN ? w->entries : 0;
    /* The counts are only comparable for a tree walked whole. */
    if (w->stop || w->rep.problems != problems)
        return;
    if (w->branch != db->branch_pages || w->leaf != db->leaf_pages || w->overflow != db->overflow_pages ||
        w->entries != db->entries)
        problem(w, "the %s database's record counts %llu branch, %llu leaf and %llu overflow pages and %llu "
                "entries; its tree has %llu, %llu, %llu and %llu", name, (unsigned long long)db->branch_pages,
                (unsigned long long)db->leaf_pages, (unsigned long long)db->overflow_pages,
                (unsigned long long)db->entries, (unsigned long long)w->branch, (unsigned long long)w->leaf,
                (unsigned long long)w->overflow, (unsigned long long)w->entries);
}

int mlajit_lmdb_check(int fd, const mlajit_lmdb_meta *m, unsigned flags, mlajit_lmdb_entry_fn visit, void *arg,
                      mlajit_lmdb_report *report)
{
    walker w;
    memset(&w, 0, sizeof w);
    w.fd = fd;
    w.m = m;
    w.psize = m->psize;
    w.last_pg = m->last_pg;
    w.flags = flags;
    w.visit = visit;
    w.arg = arg;
    w.rep.pages = m->last_pg + 1;
    w.seen = mlajit_calloc((size_t)(m->last_pg / 8 + 1), 1);
    w.cover = mlajit_malloc(m->psize);
    if (!w.seen || !w.cover) {
        free(w.seen);
        free(w.cover);
        return mlajit_fail_oom("the LMDB check's map of %llu pages", (unsigned long long)m->last_pg + 1);
    }
    seen_test_and_set(&w, 0); /* the meta pages */
    seen_test_and_set(&w, 1);
    /* Salvage reads the trees only: a damaged freelist must not hide their pages. */
    if (!(flags & MLAJIT_LMDB_SALVAGE))
        walk_db(&w, &m->free_db, DB_FREE, "free");
    if (!w.stop)
        walk_db(&w, &m->main_db, DB_MAIN, "main");
    for (size_t i = 0; i < w.named_count && !w.stop; i++) {
        w.rep.named_dbs++;
        walk_db(&w, &w.named[i].db, DB_NAMED, w.named[i].name);
    }
    for (int d = 0; d <= MAX_DEPTH; d++)
        free(w.level[d]);
    free(w.named);
    free(w.value);
    free(w.cover);
    free(w.seen);
    if (report)
        *report = w.rep;
    if (w.status != MLAJIT_OK)
        return mlajit_fail(w.status, "%s", w.rep.first_problem);
    if (w.rep.problems && !(flags & MLAJIT_LMDB_SALVAGE))
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "%s", w.rep.first_problem);
    return MLAJIT_OK;
}

/* ---- salvage: every page that reads as a leaf ----------------------------------- */

/* The value of a leaf node on a page of a file of `pages` pages: 1 and *v when
 * its bytes can be read (an overflow run's header checked), 0 when not, -1 out
 * of memory. */
static int salvage_value(int fd, const page_node *nd, uint32_t psize, uint64_t pages, uint8_t **buf, size_t *cap,
                         const uint8_t **v)
{
    char why[256];
    *v = nd->data;
    if (!(nd->flags & F_BIGDATA))
        return 1;
    uint64_t ov = ld64(nd->data), run;
    if (overflow_check(fd, ov, nd->data_size, psize, pages - 1, &run, why, sizeof why))
        return 0;
    int r = overflow_read(fd, ov, nd->data_size, psize, buf, cap, why, sizeof why);
    if (r == -2)
        return mlajit_fail(MLAJIT_ERR_OUT_OF_MEMORY, "%s", why), -1;
    *v = *buf;
    return r == 0;
}

/* A leaf whose header names it but whose bounds are damaged (lower, upper):
 * each slot of its offset array that points at a node which fits the page,
 * with a key_len-byte key and plain or overflow data. The values are not
 * trusted (the caller checks each); only those that read are passed on. */
static int scan_damaged_leaf(int fd, const uint8_t *page, uint32_t psize, uint64_t pages, size_t key_len,
                             mlajit_lmdb_entry_fn visit, void *arg, uint8_t **buf, size_t *cap)
{
    unsigned slots = (psize - PAGE_HEADER) / 2;
    for (unsigned i = 0; i < slots; i++) {
        unsigned at = ld16(page + PAGE_HEADER + 2 * i);
        if (at < PAGE_HEADER + 2 * (i + 1) || at > psize - NODE_HEADER || (at & 1u))
            continue;
        const uint8_t *node = page + at;
        unsigned flags = ld16(node + 4), klen = ld16(node + 6);
        uint64_t dsize = (uint64_t)ld16(node) | (uint64_t)ld16(node + 2) << 16;
        if (klen != key_len || (flags & ~F_BIGDATA) ||
            NODE_HEADER + klen + ((flags & F_BIGDATA) ? 8u : dsize) > psize - at)
            continue;
        page_node nd = {.key = node + NODE_HEADER, .key_len = klen, .flags = flags, .data_size = dsize,
                        .data = node + NODE_HEADER + klen};
        const uint8_t *v;
        int ok = salvage_value(fd, &nd, psize, pages, buf, cap, &v);
        if (ok < 0)
            return -1;
        if (ok && visit(nd.key, nd.key_len, v, (size_t)dsize, 1, arg))
            return 1;
    }
    return 0;
}

int mlajit_lmdb_scan_leaves(int fd, int64_t file_bytes, uint32_t psize, size_t key_len, mlajit_lmdb_entry_fn visit,
                            void *arg)
{
    if (psize < MIN_PSIZE || psize > MAX_PSIZE || (psize & (psize - 1)))
        psize = 4096; /* the meta pages are gone: LMDB's usual page size */
    uint64_t pages = (uint64_t)(file_bytes > 0 ? file_bytes : 0) / psize;
    if (pages < FIRST_DATA_PAGE + 1)
        return MLAJIT_OK;
    uint8_t *page = mlajit_malloc(2 * (size_t)psize), *value = NULL;
    size_t cap = 0;
    if (!page)
        return mlajit_fail_oom("an LMDB scan's page buffer");
    uint8_t *cover = page + psize;
    char why[256];
    int status = MLAJIT_OK, stop = 0;
    for (uint64_t pgno = FIRST_DATA_PAGE; pgno < pages && !stop; pgno++) {
        if (read_at(fd, page, psize, pgno * psize) != 0)
            break;
        if (ld64(page) != pgno || ld16(page + 10) != P_LEAF)
            continue;
        if (page_check(page, pgno, psize, cover, why, sizeof why)) {
            int r = scan_damaged_leaf(fd, page, psize, pages, key_len, visit, arg, &value, &cap);
            if (r < 0)
                status = MLAJIT_ERR_OUT_OF_MEMORY;
            stop = r != 0;
            continue;
        }
        for (unsigned i = 0; i < page_keys(page) && !stop; i++) {
            page_node nd = node_at(page, i);
            if (nd.key_len != key_len || (nd.flags & F_SUBDATA))
                continue;
            const uint8_t *v;
            int ok = salvage_value(fd, &nd, psize, pages, &value, &cap, &v);
            if (ok < 0) { /* the whole scan stops: no visitor may clear the message */
                status = MLAJIT_ERR_OUT_OF_MEMORY;
                stop = 1;
                break;
            }
            if (visit(nd.key, nd.key_len, ok ? v : NULL, (size_t)nd.data_size, ok, arg))
                stop = 1;
        }
    }
    free(value);
    free(page);
    return status;
}
