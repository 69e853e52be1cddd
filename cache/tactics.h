/* cache/tactics.h - tactic records: the measured choice of kernel and split
 * count for one (GPU, spec, geometry bucket), stored beside the kernels in the
 * writable cache and carried in packs. No CUDA here: the tuner measures and
 * the planner asks through src/runtime/ (mlajit_tactic_lookup, _store), which
 * fill in the context's GPU; this layer stores, checks and finds records.
 *
 * The key: what a plan knows before it has chosen a kernel.
 *  - The GPU identity: the device's name, its SM count and a clocks class,
 *    the device's maximum SM clock (CU_DEVICE_ATTRIBUTE_CLOCK_RATE) in MHz
 *    rounded to the nearest 100 (1980 MHz -> 2000; 0 where the driver does
 *    not say). A tactic is a measurement of one kind of GPU, so another name,
 *    SM count (a partitioned or cut-down part) or clocks class never uses it;
 *    the rounding keeps driver versions that report a few MHz apart together.
 *  - The spec as the caller asks it, in canonical form with the arch filled
 *    in and the generator's choices NOT resolved ("v32.h32.p64.t0.hc0.auto.
 *    sm_90a"; mlajit_spec_string_as_asked). The planner has this string before
 *    it chooses a kernel (choosing is what the tactic is for), and the choice
 *    among kernels is what was tuned, so the resolved kernel cannot be the
 *    key. A spec that pins its kernel (a variant, tile and heads per CTA by
 *    name) is a key of its own, whose tactic can only choose splits.
 *  - The geometry bucket: rows (batch x s_q), topk and extra_topk, each
 *    rounded DOWN to a power of two (rows 100 -> 64, topk 2048 -> 2048,
 *    topk 2047 -> 1024; extra_topk 0 stays 0: no extra candidates). A tactic
 *    measured at a bucket's lower edge stays valid across the bucket, as
 *    FlashInfer's extra_topk buckets do, and a shape between buckets never
 *    takes a tactic measured on larger shapes.
 *
 * The nearest bucket: a shape takes the record of its own bucket, else the
 * nearest one below it - every dimension at most the shape's, extra
 * candidates on both sides or on neither - nearest by the steps of two summed
 * over the three dimensions; ties go to the closer topk, then the closer
 * extra_topk (mlajit_tactic_bucket_better). So tactics measured on a grid of
 * buckets cover every larger shape, and a shape below the grid takes none.
 *
 * The stored key (27 bytes, not 16, so the store's entry listing, stats, gc
 * and entry checks never see it; cache/store.h, "records beside the
 * entries"):
 *   0  8   "MLAJITTK"
 *   8  16  XXH3-128 of MLAJIT_TACTIC_KEY_RECIPE, the GPU's name, SM count and
 *          clocks class, and the spec string (each string length-prefixed)
 *   24 1   log2 of the rows bucket
 *   25 1   log2 of the topk bucket
 *   26 1   0 without extra candidates, else 1 + log2 of the extra_topk bucket
 * so the buckets of one (GPU, spec) are adjacent and one prefix scan of 24
 * bytes finds them all (mlajit_tactic_nearest).
 *
 * The value (all integers little-endian, no padding), self-checking like a
 * cache entry:
 *   0   8    magic "MLAJITTR"
 *   8   4    u32 format version (2; 1 had no rules flag)
 *   12  4    u32 total length L
 *   16  ..   u32 n + n bytes: the GPU's name (n < 128)
 *   ..  4    u32 SM count
 *   ..  4    u32 clocks class (MHz)
 *   ..  ..   u32 n + n bytes: the spec as asked (n < 128)
 *   ..  12   u32 rows, topk, extra_topk buckets (the powers themselves)
 *   ..  ..   u32 n + n bytes: the chosen kernel, canonical and resolved (n < 128)
 *   ..  4    u32 split count (0: the planner's own choice)
 *   ..  4    u32 1: the rules' plan won (follows_rules), else 0
 *   ..  24   tuned_us, rules_us, runner_up_us as IEEE-754 double bits
 *   ..  4    u32 candidates measured
 *   ..  ..   u32 n + n bytes: the mlajit version that measured it (n < 32)
 *   ..  ..   u32 n + n bytes: the key recipe it was keyed with (n < 32)
 *   ..  8    u64 created (seconds since the epoch)
 *   L-8 8    u64 XXH3-64 of bytes [0, L-8)
 * Every version keeps the first 16 bytes and the checksum at L-8, so an intact
 * record of another version is stale (MLAJIT_CACHE_STALE), not damage. A
 * record is used only when it decodes, every field is in range, and it is the
 * record its key names (same GPU, spec and bucket: mlajit_tactic_decode_keyed);
 * anything else is skipped with a warning by the caller and never used. */
#ifndef MLAJIT_CACHE_TACTICS_H
#define MLAJIT_CACHE_TACTICS_H

#include <stddef.h>
#include <stdint.h>

#include "cache/store.h"

/* Names what the key hashes and how; change it whenever the key changes. */
#define MLAJIT_TACTIC_KEY_RECIPE "mlajit-tactic-key-1"
#define MLAJIT_TACTIC_FORMAT_VERSION 2u
#define MLAJIT_TACTIC_KEY_BYTES 27u
#define MLAJIT_TACTIC_PREFIX_BYTES 24u /* magic + identity: every bucket of one (GPU, spec) */
#define MLAJIT_TACTIC_MAGIC_BYTES 8u   /* every tactic record */
#define MLAJIT_TACTIC_MAX_SPLITS 64    /* the planner's limit (MLAJIT_MAX_SPLITS) */
#define MLAJIT_TACTIC_MAX_BUCKET_LOG2 30

extern const uint8_t mlajit_tactic_key_magic[MLAJIT_TACTIC_MAGIC_BYTES];

/* The GPU a tactic was measured on. */
typedef struct mlajit_gpu_identity {
    char name[128];      /* cuDeviceGetName */
    int sm_count;        /* 1.. */
    int clock_class_mhz; /* mlajit_gpu_clock_class of the max SM clock; 0: unknown */
} mlajit_gpu_identity;

/* The clocks class of a max SM clock of clock_khz kHz: MHz rounded to the
 * nearest 100 (0 for 0 or less: unknown). */
int mlajit_gpu_clock_class(int clock_khz);

/* 1 when both name the same GPU (name, SM count and clocks class). */
int mlajit_gpu_identity_equal(const mlajit_gpu_identity *a, const mlajit_gpu_identity *b);

/* "NVIDIA H200, 132 SMs, 2000 MHz class" into buf. */
void mlajit_gpu_identity_describe(const mlajit_gpu_identity *gpu, char *buf, size_t len);

/* A geometry bucket: each field a power of two (extra_topk also 0). */
typedef struct mlajit_tactic_bucket {
    int rows;       /* batch x s_q, rounded down: 1, 2, 4, ... */
    int topk;       /* rounded down */
    int extra_topk; /* 0: no extra candidates; else rounded down */
} mlajit_tactic_bucket;

/* The bucket of a shape of rows (batch x s_q), topk and extra_topk (0: none).
 * MLAJIT_ERR_INVALID_ARGUMENT naming the field when rows or topk is below 1,
 * extra_topk below 0, or any is past 2^30. */
int mlajit_tactic_bucket_of(long long rows, long long topk, long long extra_topk, mlajit_tactic_bucket *out);

/* 1 when every field is a power of two of at most 2^30 (extra_topk also 0). */
int mlajit_tactic_bucket_valid(const mlajit_tactic_bucket *b);

/* How far a record measured at bucket `measured` is from a shape of bucket
 * `shape`: -1 when it does not apply (a larger bucket in a dimension, or extra
 * candidates on one side only), else the steps of two summed over rows, topk
 * and extra_topk (0: the shape's own bucket). */
int mlajit_tactic_bucket_distance(const mlajit_tactic_bucket *shape, const mlajit_tactic_bucket *measured);

/* 1 when a applies to shape and serves it better than b (b NULL or not
 * applying: any a that applies): nearer, ties to the nearer topk, then the
 * nearer extra_topk. Distinct buckets are never tied. */
int mlajit_tactic_bucket_better(const mlajit_tactic_bucket *shape, const mlajit_tactic_bucket *a,
                                const mlajit_tactic_bucket *b);

/* One tuned choice. */
typedef struct mlajit_tactic_record {
    mlajit_gpu_identity gpu;
    char spec[128];              /* the spec as asked: canonical, arch filled in, choices unresolved */
    mlajit_tactic_bucket bucket; /* where it was measured (its lower edge) */
    char kernel[128];            /* the chosen kernel's canonical resolved spec string */
    int num_splits;              /* 0: the planner's own choice; else 1..MLAJIT_TACTIC_MAX_SPLITS */
    int follows_rules;           /* 1: the rules' plan won where measured (kernel is theirs there), so a plan
                                  * of any shape of the bucket follows the rules; 0: kernel and num_splits */
    double tuned_us;             /* the chosen candidate's time, > 0 */
    double rules_us;             /* the default rule's plan's time; 0: not measured */
    double runner_up_us;         /* the best other candidate's time; 0: none */
    int candidates;              /* candidates measured, 1.. */
    char version[32];            /* the mlajit that measured it ("0.1.0") */
    char key_recipe[32];         /* MLAJIT_TACTIC_KEY_RECIPE of that mlajit */
    uint64_t created_unix;
} mlajit_tactic_record;

/* MLAJIT_OK when every field of r is one a record may hold (strings are
 * printable tokens that fit, the GPU named, the bucket valid, times finite and
 * not negative with tuned_us > 0, splits and candidates in range); else
 * MLAJIT_ERR_INVALID_ARGUMENT naming the field. */
int mlajit_tactic_record_check(const mlajit_tactic_record *r);

/* The 27-byte key of (gpu, spec, bucket) / of a record. */
void mlajit_tactic_key(const mlajit_gpu_identity *gpu, const char *spec, const mlajit_tactic_bucket *bucket,
                       uint8_t key[MLAJIT_TACTIC_KEY_BYTES]);
void mlajit_tactic_key_of(const mlajit_tactic_record *r, uint8_t key[MLAJIT_TACTIC_KEY_BYTES]);

/* Serialize a checked record into a malloc'd value / parse one back. Decode
 * checks the magic, version, lengths, checksum and every field (as
 * mlajit_tactic_record_check), never reading past len: MLAJIT_OK,
 * MLAJIT_CACHE_STALE (an intact record of another format version), or
 * MLAJIT_ERR_CORRUPT, each with a message. */
int mlajit_tactic_encode(const mlajit_tactic_record *r, void **value, size_t *len);
int mlajit_tactic_decode(const void *value, size_t len, mlajit_tactic_record *out);

/* Decode, and check that the record is the one key names (its GPU, spec and
 * bucket make that key): a record under another record's key is damage; one
 * keyed by another MLAJIT_TACTIC_KEY_RECIPE is stale. */
int mlajit_tactic_decode_keyed(const void *key, size_t key_len, const void *value, size_t len,
                               mlajit_tactic_record *out);

/* The kind salvage recovers tactic records as (mlajit_store_salvage_ex). */
extern const mlajit_store_record_kind mlajit_tactic_record_kind;

/* What a scan met that it could not use: damaged (or misfiled) records and
 * stale ones (another format version). The caller warns, naming first. */
typedef struct mlajit_tactic_skipped {
    int damaged, stale;
    char first[256]; /* the first one's problem; "" when none */
} mlajit_tactic_skipped;

/* Count a record that failed its checks with status (the message is the
 * thread's current error, kept when it is the first). skipped may be NULL. */
void mlajit_tactic_skipped_note(mlajit_tactic_skipped *skipped, int status);

/* A look-up for one (gpu, spec) and shape bucket, and its answer: the nearest
 * of the records offered (the store's and a pack's look-ups offer each record
 * of their prefix scan). Records that fail their checks, that are another
 * GPU's or spec's (a digest collision, a misfiled record), or that accept
 * (may be NULL) refuses - returning nonzero with a message, as the runtime
 * does for a kernel that is not the spec's - are counted in skipped and never
 * chosen, so the next nearest serves. Set the fields up to accept_arg
 * (skipped may be NULL) and zero the rest. */
typedef struct mlajit_tactic_chooser {
    const mlajit_gpu_identity *gpu;
    const char *spec;
    const mlajit_tactic_bucket *shape;
    mlajit_tactic_skipped *skipped;
    int (*accept)(const mlajit_tactic_record *record, void *arg); /* 0: usable */
    void *accept_arg;
    int found;
    mlajit_tactic_record best;
} mlajit_tactic_chooser;

void mlajit_tactic_chooser_offer(mlajit_tactic_chooser *c, const void *key, size_t key_len, const void *value,
                                 size_t len);

/* Check a chooser's fields and clear its answer; key receives the key of its
 * (gpu, spec, shape), whose first MLAJIT_TACTIC_PREFIX_BYTES a scan offers. */
int mlajit_tactic_chooser_start(mlajit_tactic_chooser *c, uint8_t key[MLAJIT_TACTIC_KEY_BYTES]);

/* A look-up's status once its scan (status) ended: MLAJIT_OK when the chooser
 * found a record, MLAJIT_ERR_NOT_FOUND naming where (the layer) when not, or
 * the scan's error. */
int mlajit_tactic_chooser_end(const mlajit_tactic_chooser *c, int status, const char *where);

/* ---- the writable store ------------------------------------------------------ */

/* Put records (each checked first: nothing is written when one fails) in one
 * write transaction, overwriting those of the same key. */
int mlajit_tactic_put(mlajit_store *store, const mlajit_tactic_record *records, size_t count);

/* The record of exactly (gpu, spec, bucket): MLAJIT_OK, MLAJIT_ERR_NOT_FOUND,
 * MLAJIT_CACHE_STALE or MLAJIT_ERR_CORRUPT (the last two are never filled in). */
int mlajit_tactic_get(mlajit_store *store, const mlajit_gpu_identity *gpu, const char *spec,
                      const mlajit_tactic_bucket *bucket, mlajit_tactic_record *out);

/* The store's record for the chooser's shape: the nearest bucket measured
 * for its (gpu, spec) (see above). MLAJIT_OK with c->found and c->best;
 * MLAJIT_ERR_NOT_FOUND; or an error reading the store. Records that fail
 * their checks are skipped, counted in c->skipped and never used. */
int mlajit_tactic_nearest(mlajit_store *store, mlajit_tactic_chooser *c);

/* Called for each tactic record in key order: record is NULL when it fails
 * its checks (status MLAJIT_ERR_CORRUPT or MLAJIT_CACHE_STALE, why says what);
 * key is its 27 bytes (or whatever length a damaged key has). Nonzero stops. */
typedef int (*mlajit_tactic_visit_fn)(const uint8_t *key, size_t key_len, const mlajit_tactic_record *record,
                                      int status, const char *why, void *arg);

/* Visit every tactic record of the store (none: MLAJIT_OK). */
int mlajit_tactic_foreach(mlajit_store *store, mlajit_tactic_visit_fn visit, void *arg);

/* Delete the records of keys (count keys of key_lens[i] bytes each; NULL
 * key_lens: MLAJIT_TACTIC_KEY_BYTES each) in one write transaction. */
int mlajit_tactic_delete(mlajit_store *store, const uint8_t *const *keys, const size_t *key_lens, size_t count,
                         size_t *deleted);

#endif
