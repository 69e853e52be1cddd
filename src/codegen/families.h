/* Internal: the kernel families, one row each (families.c), and the targets
 * they compile for. The bottom of the generator's modules: the spec resolver
 * (spec.c) reads the rows, the source generator (generate.c) reads the rows and
 * the resolver, the envelope and the planner read both; families.c calls
 * neither of them (families <- spec <- generate). */
#ifndef MLAJIT_CODEGEN_FAMILIES_H
#define MLAJIT_CODEGEN_FAMILIES_H
#include <stddef.h>

#include "mlajit.h"

/* ---- targets ------------------------------------------------------------------ */

/* Largest opt-in dynamic shared memory of an arch ("sm_90a"), 0 if unknown. */
int mlajit_arch_max_smem(const char *arch);

/* 1 when arch is in the generator's table ("sm_80" ... "sm_120a"). */
int mlajit_arch_known(const char *arch);

/* 1 when arch has grid dependency control (sm_90 and later): a kernel can wait
 * for the grid it depends on (griddepcontrol.wait), so it may be launched early,
 * as a programmatic dependent. 0 for older or unknown archs. */
int mlajit_arch_has_grid_dependency(const char *arch);

/* The arch list, comma separated, for messages. */
const char *mlajit_arch_list(void);

/* ---- layout ------------------------------------------------------------------- */

/* The combine kernel's block size at d_v 512 and the split rows it copies into
 * shared memory per round (d_v fp32 each: 64 KB for 32 splits of 512 dims); the
 * pad of shared-memory rows (bf16 elements) that spreads them over banks. A wider
 * V keeps a thread's 4 dims and the 64 KB (mlajit_combine_threads_of). */
enum { kCombineThreads = 128, kCombineStagedSplits = 32, kRowPad = 8 };

/* The split-KV splits a plan may use: the combine holds each split's lse in a
 * thread, so d_v / 4 threads must cover them (d_v at least 256). */
#define MLAJIT_MAX_SPLITS 64

/* The combine's block size and staged split rows for model d: a thread per 4 value
 * dims (combine.cu: one 16-byte group per split), 64 KB of staged rows (256 threads
 * and 16 rows at DOTS3_SWA's d_v 1024; sm_86's 99 KB holds them). */
int mlajit_combine_threads_of(const mlajit_model_desc *d);
int mlajit_combine_staged_splits_of(const mlajit_model_desc *d);

/* Launch geometry of a resolved spec's kernels. */
typedef struct mlajit_kernel_layout {
    int threads;            /* main kernel block size */
    int tile;               /* candidates per tile */
    int heads_per_cta;      /* query heads per CTA */
    int smem_bytes;         /* dynamic shared memory of the main kernel */
    int combine_threads;    /* combine kernel block size (one block per row and head) */
    int combine_staged_splits;   /* split rows the combine stages in shared memory per round */
    int combine_bytes_per_split; /* its dynamic shared memory per staged split (a d_v fp32 row) */
    int blocks_per_sm;      /* CTAs of the main kernel resident per SM (the planner's wave size) */
    int cluster_ctas;       /* CTAs per cluster along the head groups (1: no cluster); divides their count by construction */
    int dependent_launch;   /* 1: each kernel waits on the device for the grid before it (griddepcontrol.wait) before
                               it reads an argument: the main kernel for the stream's previous kernel, the combine
                               for the main kernel; so both may be launched as programmatic dependents. 0: plain
                               stream order only */
    int single_split;       /* 1: the kernel writes no split partials, so its plans never split (sm90-staged) */
    int ctas_per_head_group; /* CTAs along the grid's y per head group: 2 where a pair splits the dims
                                (sm90-split; blockIdx.y = head group x 2 + rank), else 1 */
} mlajit_kernel_layout;

/* The combine's dynamic shared memory at num_splits splits: the split rows it
 * stages per round, at most layout->combine_staged_splits of them. */
int mlajit_combine_smem_bytes(const mlajit_kernel_layout *layout, int num_splits);

/* A kernel's shared-memory map, in bytes from its dynamic base (the wgmma
 * kernels': from the 1024-aligned base, the total reserving the slack). A field
 * the kernel does not use is 0. */
typedef struct mlajit_smem_map {
    int q, k, scores, probs, row_max, row_sum, row_alpha, token_row, token_scale, token_valid, barriers;
    int staging, staging_bytes, stages, total;
    int producer_groups; /* sm90-narrow(-long, -scores): its producer warp groups */
    int k_buffers;       /* sm90-narrow(-long): its K tile buffers (2, or 1: d_v past 512, footer scales) */
} mlajit_smem_map;

/* ---- the families ------------------------------------------------------------- */

/* Sets of heads per CTA or tiles, as bits: value v (a multiple of 8) is bit v / 8. */
#define MLAJIT_SIZES(v) (1u << ((v) / 8))
/* Sets of scale formats, as bits: format f is bit f. */
#define MLAJIT_SCALES(f) (1u << (f))
#define MLAJIT_SCALES_ANY (MLAJIT_SCALES(MLAJIT_SCALE_FP32_POW2) | MLAJIT_SCALES(MLAJIT_SCALE_FP32) | \
                           MLAJIT_SCALES(MLAJIT_SCALE_UE8M0))
#define MLAJIT_SCALES_POW2 (MLAJIT_SCALES(MLAJIT_SCALE_FP32_POW2) | MLAJIT_SCALES(MLAJIT_SCALE_UE8M0))

/* The most heads an sm90-narrow CTA holds (wgmma N beside two gathering warp
 * groups): auto's kernel up to this many heads, head groups of at most this many
 * past it. */
#define MLAJIT_NARROW_MAX_HEADS_PER_CTA 32
/* ... at d_v past 512 (DOTS3_SWA's 1024): O^T is d_v / 64 x heads / 2 fp32 registers
 * a consumer thread, 128 at 16 heads; at 24 it would be 192 of 255 */
#define MLAJIT_NARROW_WIDE_V_MAX_HEADS_PER_CTA 16

/* Knobs a family exposes to tuning (the tuner's candidates: docs/tuning.md). */
enum {
    MLAJIT_KNOB_TILE = 1u << 0,          /* 32 or 64 candidates per tile */
    MLAJIT_KNOB_HEADS_PER_CTA = 1u << 1, /* the head group */
    MLAJIT_KNOB_SPLITS = 1u << 2,        /* split-KV split count */
    MLAJIT_KNOB_PRODUCERS = 1u << 3,     /* producer warp groups (sm90-narrow / sm90-narrow-long) */
};

/* How auto's plans decide, from a shape's grid, that this family beats auto's own
 * kernel (plan.c's walk_suits; the rows' walk_tiles is the threshold). Only the
 * families auto may switch to have one (mlajit_spec_walk_alternatives lists them
 * per spec). */
/* The rules' thresholds, in tiles per CTA, each measured on the H200 (codegen.h's
 * walk alternatives say where). */
#define MLAJIT_STAGED_PAIR_BELOW_TILES 20
#define MLAJIT_NARROW_LONG_FROM_TILES 16
#define MLAJIT_NARROW_SCORES_FROM_TILES 4
/* head groups of 32: won at 16 summed tiles (H200) and 24 (the H100 sweep's v32
 * h125 b 17 topk 333, 4.6%), lost 5-8% at 32 */
#define MLAJIT_HEAD_GROUPS_MAX_TILES 24
typedef enum mlajit_walk_rule {
    MLAJIT_WALK_NONE = 0,
    MLAJIT_WALK_SHORT,       /* no split and, in a CTA pair, fewer than walk_tiles tiles per CTA (sm90-staged) */
    MLAJIT_WALK_AT_LEAST,    /* at least walk_tiles tiles per CTA (sm90-narrow-long, -scores) */
    MLAJIT_WALK_HEAD_GROUPS, /* its head groups of the most heads fill one wave with at most walk_tiles tile
                                gathers per row-split, or its halved head groups fill SMs left idle (sm90-narrow) */
} mlajit_walk_rule;

typedef struct mlajit_family mlajit_family;
struct mlajit_family {
    mlajit_variant variant;
    const char *name;         /* the variant's name in spec strings and the CLI */
    const char *kernel;       /* its template (templates/<kernel>.cu), between gather and combine */
    const char *arch;         /* the one arch it compiles for (wgmma, setmaxnreg: sm_90a), NULL: any in the table */
    int sm90_common;          /* 1: sm90_common.cu's parts go before its template */
    const char *roles;        /* its warps' roles and register split (the setmaxnreg numbers live in its template) */
    /* threads: fixed, else past 32 heads per CTA threads_wide, or 128 x (warp groups beside
     * the producers + the map's producer groups) where that is set */
    int threads, threads_wide, warp_groups_beside_producers;
    /* what it accepts */
    unsigned tiles;           /* tiles it runs (MLAJIT_SIZES) */
    unsigned heads_per_cta;   /* heads per CTA it runs (MLAJIT_SIZES); 8 and 24 only where it takes h_q rounded up */
    int max_heads_per_cta;    /* the most heads a CTA holds without head groups (0: no limit but its sizes) */
    unsigned scales;          /* scale formats it runs (MLAJIT_SCALES); mlajit_family_layout_refusal refuses the others */
    unsigned forced_only_scales; /* of those, the ones auto and the plans pass over, where its kernel was
                                  * timed no faster than auto's (mlajit_family_forced_only) */
    const char *models;       /* the models it runs, in words (its resolve checks them) */
    /* the layouts its templates are written for, named or custom: NULL, or why not
     * (the field and what it allows; checked by the resolver before the arch and
     * resolve, through mlajit_family_check_layout, which asks the combine's first) */
    const char *(*layout_refusal)(const mlajit_model_desc *d);
    /* its choices and refusals for a spec of it, in the resolver's order: tile and head
     * group set, the model checked (0, or an error set) */
    int (*resolve)(const mlajit_family *f, mlajit_kernel_spec *r);
    /* the kernel it is where it has nothing to add (the alias has the same name for one kernel) */
    mlajit_variant alias;
    int (*alias_when)(const mlajit_kernel_spec *r);
    /* its shared-memory map (r resolved) */
    void (*smem_map)(const mlajit_kernel_spec *r, const mlajit_model_desc *d, mlajit_smem_map *m);
    /* two CTAs per SM at 16 heads per CTA where the map fits twice, for these scale formats */
    unsigned two_blocks_scales;
    int pairs;                /* 1: the CTAs of a (row, split) in head-group pairs share a cluster */
    int dim_halves;           /* 2: each head group is a cluster of two CTAs, each half of the dims (sm90-split) */
    int single_split;         /* 1: writes no split partials, so never splits */
    int staged_output;        /* 1: output rows staged through shared memory (kStagedOutput) */
    unsigned knobs;           /* MLAJIT_KNOB_* */
    mlajit_walk_rule walk;    /* auto's plans' rule for it */
    int walk_tiles;
};

/* The descriptor of a spec's layout: its named model's, or for MLAJIT_MODEL_CUSTOM
 * its layout's (mlajit_layout_describe: the named model's where the layout is
 * one). NULL for an unknown model or an invalid layout. The one way the library
 * reads a spec's layout. */
const mlajit_model_desc *mlajit_spec_desc(const mlajit_kernel_spec *spec);

/* The portable family holds 64 heads per CTA only up to this d_v: past it the O
 * accumulators of its 512 threads spill at 128 registers (portable_resolve). */
#define MLAJIT_PORTABLE_WIDE_MAX_DV 512


/* The row of variant v; NULL for auto and unknown values. */
const mlajit_family *mlajit_family_of(mlajit_variant v);
/* The rows, in variant order (retired variants leave gaps). */
extern const mlajit_family mlajit_families[];
extern const int mlajit_family_count;
/* 1 when f takes heads-per-CTA (or tile) size v (a multiple of 8). */
int mlajit_family_takes(unsigned sizes, int v);

/* The variants' names, as spec strings and the CLI spell them. */
#define MLAJIT_VARIANT_NAMES "auto, portable, sm90, sm90-staged, sm90-narrow, sm90-narrow-long, sm90-narrow-scores, sm90-split"
/* The retired variants' names (refused: mlajit_variant_refuse_retired). */
#define MLAJIT_VARIANT_RETIRED_NAMES "sliced, sm90-unpaired"
/* The name of variant v ("auto" for an unknown value). */
const char *mlajit_variant_name(mlajit_variant v);
/* The variant called `name`: 1 and *out, else 0 (no error is set; a retired name is 0). */
int mlajit_variant_from_name(const char *name, mlajit_variant *out);
/* A retired variant (mlajit.h keeps its number and name reserved), by number v or,
 * where name is not NULL, by name: MLAJIT_ERR_UNSUPPORTED with a message naming it
 * and what to use instead; MLAJIT_OK (nothing set) for any other. */
int mlajit_variant_refuse_retired(mlajit_variant v, const char *name);
/* "0 (auto), 1 (portable), ...": the allowed values, for messages. */
void mlajit_variant_values(char *buf, size_t len);

/* The kernel auto runs before its plans' walk alternatives: its variant for a
 * spec (arch set) whose variant is auto. */
mlajit_variant mlajit_family_auto(const mlajit_kernel_spec *r);
/* 1 where family f's kernel for layout d runs only when forced (its row's
 * forced_only_scales: sm90-narrow's bf16 edition, which passed the fp64 reference
 * and tied the kernel auto runs): auto and the plans' walk alternatives pass it
 * over. 0 elsewhere. */
int mlajit_family_forced_only(const mlajit_family *f, const mlajit_model_desc *d);

/* Whether family f's templates are written for layout d (a named model's or a
 * custom one): NULL, or why not, naming the layout's field and what is allowed
 * (the combine's limit, then the row's layout_refusal). No error is set. */
const char *mlajit_family_layout_refusal(const mlajit_family *f, const mlajit_model_desc *d);
/* The same as a status: 0, or MLAJIT_ERR_UNSUPPORTED with a message naming the
 * family, the layout and the reason (MLAJIT_ERR_INVALID_ARGUMENT for a NULL d). */
int mlajit_family_check_layout(const mlajit_family *f, const mlajit_model_desc *d);

/* The layout of a resolved spec (tile and heads per CTA set). */
int mlajit_codegen_layout(const mlajit_kernel_spec *resolved, mlajit_kernel_layout *layout);
/* Its block size and CTAs per SM, with its map m. */
int mlajit_family_threads(const mlajit_kernel_spec *r, const mlajit_smem_map *m);
int mlajit_family_min_blocks_per_sm(const mlajit_kernel_spec *r, const mlajit_smem_map *m);
/* Its CTAs per cluster (2: a CTA pair). */
int mlajit_family_cluster_ctas(const mlajit_kernel_spec *r);
/* Its shared-memory rows: Q's (and the portable kernel's K, bf16), the scores'
 * (fp32) and P's (bf16). */
int mlajit_family_qk_stride(const mlajit_model_desc *d);
int mlajit_family_score_stride(const mlajit_kernel_spec *r);
int mlajit_family_prob_stride(const mlajit_kernel_spec *r);

/* Whether the sm90 family pairs the CTAs of a (row, split) in a cluster at h_q
 * heads, heads_per_cta per CTA: where the head groups come in pairs (65-128 heads
 * at 64 per CTA). */
int mlajit_head_groups_pair(int h_q, int heads_per_cta);

/* sm90-narrow's producer warp groups for a spec of the narrow pair with its tile
 * and head group set: 3 for sm90-narrow-long where the third group's ring slot
 * fits in shared memory, else 2. */
int mlajit_narrow_producer_groups(const mlajit_kernel_spec *r);
/* Whether sm90-narrow-scores's layout fits a spec of the narrow family with its
 * tile and head group set: inline power-of-two scales (V32's rows), 8 or 16 heads
 * per CTA (the template's wgmma N), and its two ring slots of a tile each beside
 * two V buffers, Q and P in shared memory: 8 heads at V32's rows (at 16, 7 KB too
 * many). */
int mlajit_narrow_scores_fits(const mlajit_kernel_spec *r);
/* sm90-narrow's K tile buffers for a spec of the narrow pair with its tile and
 * head group set: 2, or 1 where two do not fit beside Q and d_v passes 512 with
 * fp8 rows and footer scales (DOTS3_SWA's 1088 dims; the kind run on the GPU);
 * a kernel with one takes decode_sm90_narrow.cu's layouts edition (generate.c). */
int mlajit_narrow_k_buffers(const mlajit_kernel_spec *r);
/* The most heads a CTA of family f holds without head groups for a layout: the
 * row's max_heads_per_cta, at most MLAJIT_NARROW_WIDE_V_MAX_HEADS_PER_CTA where d_v
 * passes 512 (0: no limit but its sizes). */
int mlajit_family_max_heads(const mlajit_family *f, const mlajit_model_desc *d);

#endif
