/* Internal: the context, its kernel map and plans. */
#ifndef MLAJIT_RUNTIME_RUNTIME_H
#define MLAJIT_RUNTIME_RUNTIME_H
#include <pthread.h>
#include <stdatomic.h>

#include "cache/pack.h"
#include "cache/store.h"
#include "cache/tactics.h"
#include "codegen/codegen.h"
#include "mlajit.h"
#include "runtime/driver.h"

/* A kernel the context has seen: its cubin, and once loaded its functions. */
typedef struct mlajit_kernel {
    mlajit_cache_key key;
    mlajit_kernel_spec spec;     /* resolved */
    mlajit_kernel_layout layout;
    mlajit_kernel_report report; /* as first prepared */
    void *cubin;
    size_t cubin_size;
    int loaded;
    CUlibrary library;           /* one of library / module is set once loaded */
    CUmodule module;
    CUfunction main_fn, combine_fn;
} mlajit_kernel;

struct mlajit_context {
    int device_ordinal;
    unsigned flags;
    const mlajit_driver *drv;    /* NULL without a device */
    CUdevice device;
    CUcontext primary;
    char arch[MLAJIT_ARCH_LEN];  /* default target: the device's, else sm_90a */
    char device_name[128];
    char no_device_reason[256]; /* why drv is NULL, for the errors of calls that need the GPU */
    int sm_count;
    mlajit_gpu_identity gpu;     /* what its tactics are keyed by (with a device; tactics.c) */
    int l2_bytes;                /* the device's L2 in bytes (the plans' prefetch hint) */
    int max_smem_optin;
    int driver_version;
    int nvrtc_major, nvrtc_minor;
    mlajit_store *store;         /* NULL when the disk cache is off or unusable */
    int store_writable;          /* 0: read-only fallback, compiled kernels stay in memory */
    char cache_dir[1024];
    mlajit_pack **packs;         /* looked up in order, before the disk cache */
    int pack_count;
    int jit_disabled;            /* MLAJIT_CONTEXT_NO_JIT or MLAJIT_DISABLE_JIT=1 */
    pthread_mutex_t lock;        /* serializes loads onto the device */
    /* The kernel map: open addressing on the 128-bit key, so a repeat lookup is
     * one probe under a read lock (plans hold their kernel: decode looks up nothing). */
    pthread_rwlock_t map_lock;
    mlajit_kernel **map_slots;   /* map_cap slots, NULL = empty; map_cap is a power of two */
    size_t map_cap, map_count;
    /* Repeat lookups skip resolving, naming and hashing the spec: the spec as
     * asked (arch filled in) maps straight to its kernel. Also under map_lock. */
    struct mlajit_spec_memo *memo_slots;
    size_t memo_cap, memo_count;
    /* Lookups per layer (atomics: bumped outside the locks); stale: entries refused
     * as another format version or for a launch record this generator does not
     * expect (not damage: corrupt counts that). */
    atomic_uint_fast64_t memory_hits, pack_hits, disk_hits, compiles, compile_us, corrupt, stale, jit_refusals;
    atomic_int warned_store_write; /* one warning when the cache cannot be written */
    /* The counts already added to the cache's (by the writes the context made
     * anyway, or mlajit_context_flush_counters). */
    pthread_mutex_t counters_lock;
    mlajit_store_counters recorded;
    atomic_int programmatic_refused; /* the driver refused a programmatic dependent launch: launch plainly */
    atomic_int warned_tactics;   /* one warning for tactic records that fail their checks */
    atomic_int warned_tactic_plan; /* one warning for a tactic a plan could not take (plan.c) */
    atomic_int tactics_off;      /* plans ignore tactics: MLAJIT_TACTICS=0 or mlajit_context_set_tactics */
    struct mlajit_tactic_memo *_Atomic tactic_memo; /* plans' recent look-ups (tactics.c); NULL until the first */
    /* mlajit_context_get_info's cache counts (a walk of every entry) and the data
     * file they were read from, reused while it is unchanged; under `lock`. */
    int stats_memo_valid;
    mlajit_store_stamp stats_memo_stamp;
    int64_t stats_memo_bytes, stats_memo_entries;
};

struct mlajit_plan {
    mlajit_context *ctx;
    const mlajit_kernel *kernel;
    mlajit_decode_shape shape;
    const mlajit_model_desc *model;
    int head_groups, rows, num_tiles, num_splits, tiles_per_split;
    int release_dependent_early; /* the main kernel releases the grid after it at its start */
    int prefetch_evict_last;     /* the sm90 family's L2 prefetches are evict-last (mlajit_prefetch_evict_last) */
    int combine_smem_bytes;      /* the combine's dynamic shared memory: its staged split rows */
    size_t partial_out_bytes, workspace_bytes;
    int tactic;                  /* MLAJIT_TACTIC_*: the rules' choice, or a tactic of this or a lower bucket */
};

/* Whether a main grid of main_ctas CTAs leaves enough of sm_count SMs idle for the
 * grid after it, of dependent_ctas CTAs, to launch at the main kernel's start and
 * wait there (at most a few per idle SM); the plan asks it where its kernels are
 * programmatic dependents, with the combine's size where it splits and its own
 * (the next call's) where it does not. */
int mlajit_dependent_starts_early(long main_ctas, int sm_count, long dependent_ctas);

/* Whether a decode that gathers gathered_bytes of cache rows should mark the rows
 * it prefetches into L2 evict-last (sm90 family), on a GPU with l2_bytes of L2:
 * where the rows come to at least 1.5 times the L2, so that a prefetched line
 * would otherwise be pushed out before its load. bench/NOTES.md: evict-last was
 * 1-2.4% faster on the calls of 86 MB and more (10 to 32 tiles per CTA) and
 * 1.5-3.4% slower on the calls of 43-48 MB (8 to 10 tiles), whose rows partly
 * stay in the 50 MB L2 from one call to the next; the plain prefetch there. */
int mlajit_prefetch_evict_last(int64_t gathered_bytes, int64_t l2_bytes);

/* Look up or build the kernel for spec (arch "" = the context's). With load,
 * also load it onto the device (needs a device whose arch matches). */
int mlajit_kernel_acquire(mlajit_context *ctx, const mlajit_kernel_spec *spec, int load,
                          const mlajit_kernel **out, mlajit_kernel_report *report);

/* The same, and *loaded_here (may be NULL) = 1 when this call loaded the kernel
 * (report->loaded says whether it is loaded, by this call or an earlier one). */
int mlajit_kernel_acquire_ex(mlajit_context *ctx, const mlajit_kernel_spec *spec, int load,
                             const mlajit_kernel **out, mlajit_kernel_report *report, int *loaded_here);

/* The content key of a resolved spec (arch set) in this context, and its
 * canonical string (spec_string[128]): XXH3-128 over the key recipe, the source
 * the generator writes for it, the arch, NVRTC's version and options
 * (store.h's mlajit_cache_key_make), so it generates the source (about 10 us;
 * repeat lookups skip it: the spec memo). */
int mlajit_kernel_key(const mlajit_context *ctx, const mlajit_kernel_spec *resolved, mlajit_cache_key *key,
                      char *spec_string, size_t spec_string_len);

/* The same, and the generated source, malloc'd into *source (free it). */
int mlajit_kernel_key_and_source(const mlajit_context *ctx, const mlajit_kernel_spec *resolved,
                                 mlajit_cache_key *key, char *spec_string, size_t spec_string_len, char **source);

/* The key of a resolved spec's generated source as compiled by NVRTC
 * nvrtc_major.nvrtc_minor: a pack's kernels are looked up with the NVRTC that
 * built the pack (its manifest's), which need not be this process's. */
mlajit_cache_key mlajit_kernel_key_for_nvrtc(const mlajit_kernel_spec *resolved, const char *source, int nvrtc_major,
                                             int nvrtc_minor);

/* ---- what an entry records (entry.c) ---------------------------------------- */

/* The kernel entry names an entry lists, as the runtime looks them up. */
#define MLAJIT_ENTRY_NAMES MLAJIT_ENTRY_MAIN "," MLAJIT_ENTRY_COMBINE

/* What a launch of a kernel of this layout needs, as an entry records it: the
 * layout's threads, dynamic shared memory (the combine's at MLAJIT_MAX_SPLITS),
 * cluster shape and the parameter block's layout hash. */
void mlajit_launch_record_of(const mlajit_kernel_layout *layout, mlajit_launch_record *out);

/* The launch record the current generator expects for a resolved spec. */
int mlajit_spec_launch_record(const mlajit_kernel_spec *resolved, mlajit_launch_record *out);

/* MLAJIT_OK when an entry's launch record and entry names are what the current
 * generator expects for layout; else MLAJIT_CACHE_STALE with a message naming
 * each difference (the entry is refused and its kernel recompiled). */
int mlajit_entry_launch_check(const mlajit_cache_entry *entry, const mlajit_kernel_layout *layout);

/* The entry that stores kernel k: its report, launch record and cubin (borrowed
 * from k: do not clear the entry). */
void mlajit_kernel_entry_of(const mlajit_kernel *k, mlajit_cache_entry *entry);

/* Open a pack and add it after the context's packs, as if it were listed in
 * MLAJIT_PACKS (same checks; a pack that cannot serve the context is skipped
 * with a warning and its status returned). Not thread-safe: call it before the
 * context is shared (the CLI's pack bench times it). */
int mlajit_context_attach_pack(mlajit_context *ctx, const char *path);

/* MLAJIT_OK when the generator has a target for the context's device (its arch,
 * or sm_90a without a device); else MLAJIT_ERR_UNSUPPORTED, naming the device
 * and the targets. A spec or grid that leaves the arch to the device asks it
 * first: the context of an older GPU still compiles for named archs. */
int mlajit_device_arch_check(const mlajit_context *ctx);

/* 1 when a cubin for arch runs on a device of device_arch. */
int mlajit_arch_runs_on(const char *arch, const char *device_arch);

/* ---- many kernels at once (warmup.c) -------------------------------------- */

/* Called after each kernel of a batch, serialized (never from two threads at
 * once): done of total finished; report is that kernel's (NULL when it failed). */
typedef void (*mlajit_batch_progress_fn)(void *arg, int done, int total, const mlajit_kernel_report *report);

/* Acquire count kernels on threads workers (0 = one per online CPU), loading
 * each one that can run on the context's device. kernels (may be NULL) gets
 * each kernel, NULL where it failed. Counts go to report (may be NULL). The
 * first failure is returned, with its spec in the message, after all finish. */
int mlajit_acquire_batch(mlajit_context *ctx, const mlajit_kernel_spec *specs, int count, int threads,
                         mlajit_batch_progress_fn progress, void *progress_arg, const mlajit_kernel **kernels,
                         mlajit_warmup_report *report);

/* The specs of a grid (malloc'd into *specs), arch "" replaced by default_arch,
 * each validated: the first invalid one fails with its place in the grid. Each
 * spec is followed by its walk alternatives where it has them
 * (mlajit_spec_walk_alternatives). */
int mlajit_grid_expand(const mlajit_kernel_grid *grid, const char *default_arch, mlajit_kernel_spec **specs,
                       int *count);

/* ---- tactics: measured choices per (GPU, spec, bucket) (tactics.c) -------------- */

/* Fill ctx->gpu from the opened device (its name and SM count, read already)
 * and its max SM clock in kHz (0: unknown). */
void mlajit_context_gpu_set(mlajit_context *ctx, int clock_khz);

/* The context's GPU identity: MLAJIT_OK, or MLAJIT_ERR_NO_DEVICE (tactics are
 * measurements of a GPU: without one there are none). */
int mlajit_context_gpu(const mlajit_context *ctx, mlajit_gpu_identity *out);

/* What mlajit_tactic_lookup found for a shape. */
typedef struct mlajit_tactic_match {
    int found;                          /* 1: record holds the tactic to use */
    int exact;                          /* it was measured at the shape's own bucket */
    int source;                         /* MLAJIT_SOURCE_PACK or MLAJIT_SOURCE_DISK */
    int pack_index;                     /* the pack it came from (ctx's order); -1: the cache */
    char spec[128];                     /* the key's spec string: the spec as asked, arch filled in */
    mlajit_tactic_bucket shape_bucket;  /* the shape's bucket */
    mlajit_tactic_record record;        /* record.bucket: where it was measured */
} mlajit_tactic_match;

/* The tactic for a plan of spec (as the caller asks it; arch "" is the
 * context's) at shape on this context's GPU: the nearest bucket
 * (cache/tactics.h) among the packs' records and the cache's, ties to the
 * earlier layer (the packs in order, then the cache). MLAJIT_OK with found 0
 * when there is none - also without a device (nothing is measured without a
 * GPU), for a shape of no rows, or when the layers cannot be read (a warning
 * says why). A record that fails its checks, or whose kernel is not a kernel
 * of spec, is never used: one warning per context names the first.
 * MLAJIT_ERR_INVALID_ARGUMENT for a NULL argument or an invalid spec or shape;
 * MLAJIT_ERR_OUT_OF_MEMORY (found 0). */
int mlajit_tactic_lookup(mlajit_context *ctx, const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape,
                         mlajit_tactic_match *out);

/* mlajit_tactic_lookup through the context's memo of recent answers (what
 * plans call: a look-up is a scan of the cache, about 10 us; a memo hit about
 * 1 us). An answer is kept per (spec as asked, shape bucket) and used while the
 * cache's data file is unchanged (its inode, size and change times, read with
 * one stat; answers read within 50 ms of the file's last change are not kept,
 * as a file time may not move for writes that close together) and the context
 * stored no tactic since; the packs do not change under a context. */
int mlajit_tactic_lookup_memo(mlajit_context *ctx, const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape,
                              mlajit_tactic_match *out);

/* Forget the memo's answers (mlajit_tactic_store does); free it on destroy. */
void mlajit_tactic_memo_clear(mlajit_context *ctx);
void mlajit_tactic_memo_free(mlajit_context *ctx);

/* What a tuner measured for one (spec, shape). */
/* 1 when kernel k is a kernel of the spec asked (arch filled in): the same
 * layout, heads, pages, features and arch, whatever it chose; the one test a
 * tactic's kernel meets when stored and when planned. */
int mlajit_kernel_is_of_spec(const mlajit_kernel_spec *k, const mlajit_kernel_spec *asked);

typedef struct mlajit_tactic_choice {
    mlajit_kernel_spec kernel; /* the winner: a kernel of the spec (same model, heads, pages, features, arch) */
    int num_splits;            /* 0: the planner's own; else 1..MLAJIT_MAX_SPLITS */
    int follows_rules;         /* 1: the winner is the rules' plan (kernel: theirs here; num_splits 0) */
    double tuned_us;           /* the winner's time */
    double rules_us;           /* the default rule's plan's (0: not measured) */
    double runner_up_us;       /* the best other candidate's (0: none) */
    int candidates;            /* candidates measured */
} mlajit_tactic_choice;

/* The record of a choice measured on this context's GPU for spec at shape
 * (its bucket: a tuner measures at a bucket's lower edge): checked and ready
 * for mlajit_tactic_put or mlajit_pack_write. MLAJIT_ERR_NO_DEVICE without a
 * device; MLAJIT_ERR_INVALID_ARGUMENT naming what is wrong. */
int mlajit_tactic_record_make(const mlajit_context *ctx, const mlajit_kernel_spec *spec,
                              const mlajit_decode_shape *shape, const mlajit_tactic_choice *choice,
                              mlajit_tactic_record *out);

/* mlajit_tactic_record_make, then put it into the context's writable cache
 * (MLAJIT_ERR_CACHE when there is none). */
int mlajit_tactic_store(mlajit_context *ctx, const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape,
                        const mlajit_tactic_choice *choice);

/* Whether plans of this context take tactics (on: 1, the default unless
 * MLAJIT_TACTICS=0 was set when it was created). Benchmarks of the rules turn
 * them off; a plan keeps the choice it was made with. Thread-safe. */
void mlajit_context_set_tactics(mlajit_context *ctx, int on);
int mlajit_context_tactics(const mlajit_context *ctx);

/* mlajit_plan_create taking tactics or not as asked (use_tactics 1 or 0)
 * instead of as the context says: the tuner times the rules with 0 while plans
 * made by other threads keep the context's setting. */
int mlajit_plan_create_tactics(mlajit_context *ctx, const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape,
                               int use_tactics, mlajit_plan **out);

/* mlajit_plan_describe in a context: the context's SM count and arch, and its
 * tactics (outline.tactic says whether one serves), without compiling; what
 * mlajit_plan_create would launch when the chosen kernel can be had. With
 * tactic_out (may be NULL) also the record that serves (found 0 for the rules). */
int mlajit_plan_describe_in(mlajit_context *ctx, const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape,
                            mlajit_plan_outline *out, mlajit_tactic_match *tactic_out);

/* Internal accessors for the CLI and the harness, which never read a
 * context's fields (mlajit_context_get_info says the rest). */
/* The driver table of a context with a device; NULL without one. */
const mlajit_driver *mlajit_context_driver(const mlajit_context *ctx);
/* The context's pack i (0 .. pack_count - 1, in look-up order), else NULL. */
const mlajit_pack *mlajit_context_pack(const mlajit_context *ctx, int i);
/* The context's default target arch (the device's, else sm_90a): what
 * mlajit_context_get_info's device_arch says, without its walk of the cache
 * (which a 1 GB cache makes ~10 ms). */
const char *mlajit_context_arch(const mlajit_context *ctx);

/* Make the context's primary CUDA context current on this thread if no context
 * is; returns 1 when it pushed one (pop it with mlajit_context_leave). */
int mlajit_context_enter(mlajit_context *ctx);
void mlajit_context_leave(mlajit_context *ctx, int pushed);

#endif
