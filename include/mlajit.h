/*
 * mlajit.h - run-time generated sparse-MLA attention decode kernels.
 *
 * mlajit takes a decode call on an FP8 KV cache (DeepSeek-V3.2, DeepSeek-V4 and
 * related layouts, see docs/SPEC.md), generates CUDA source specialized for its shape
 * (model, head count, page size, features, target arch), compiles it with NVRTC,
 * keeps the cubin in an on-disk LMDB cache under a content key, and launches it
 * through the CUDA Driver API on the caller's stream.
 *
 * Conventions:
 *  - A function that can fail returns an int status (MLAJIT_OK == 0, else one of
 *    enum mlajit_status). On a failure mlajit_last_error() returns a message for
 *    the calling thread that names the argument at fault and what is allowed.
 *    The functions that cannot fail return their answer instead and say, where
 *    they are declared, what a bad argument gives (NULL, 0 or -1): the version,
 *    status and model look-ups, mlajit_min_page_stride, the plan's accessors, and
 *    the destroy and free functions (void; NULL is allowed).
 *  - Handles are opaque. A context is created once and may be used from many
 *    threads at once; a plan is read-only after creation and may be shared too.
 *  - Process-wide state: the thread-local error message; the driver library
 *    (libcuda.so.1) and NVRTC, each opened with dlopen at its first use, so the
 *    library loads, generates and caches on machines without a GPU or toolkit;
 *    one LMDB environment per cache directory or pack file, shared by the
 *    contexts that open it (LMDB allows one per process); and the log handler
 *    (mlajit_set_log_handler).
 *  - Memory returned by the library is released with mlajit_free().
 *
 * What is stable: this header is the whole ABI (libmlajit.so exports its
 * MLAJIT_API functions and nothing else). Within a major version (the SONAME),
 *  - functions are only added; a function's documented behaviour is kept (what
 *    it accepts may widen: a value that was an error may become valid);
 *  - status codes, enum values and flag bits keep their numbers; new ones may
 *    be added, so treat an unknown status as a failure and pass through what
 *    you do not know;
 *  - structs grow only at their end, by the struct_size rule below; the two
 *    structs embedded by value in others, mlajit_cache_view and mlajit_layout,
 *    never change size (mlajit_layout's reserved fields may gain a meaning, 0
 *    keeping today's);
 *  - MLAJIT_MAX_* limits may grow;
 *  - spec strings (mlajit_spec_string) stay parseable;
 *  - which kernel auto picks, and its speed, is not part of the ABI.
 */
#ifndef MLAJIT_H
#define MLAJIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* MLAJIT_API marks the library's public functions, the only symbols
 * libmlajit.so exports (it is built with hidden visibility; tests/abi_exports.py
 * checks that its exports are exactly the functions declared here). */
#if defined(__GNUC__)
#define MLAJIT_API __attribute__((visibility("default")))
#else
#define MLAJIT_API
#endif

/* ------------------------------------------------------------------------- */
/* Versions                                                                   */
/* ------------------------------------------------------------------------- */

/* The version of this header. The major number is the shared library's SONAME
 * (libmlajit.so.1). 1.0 is the first version with a stable ABI: 0.1
 * (libmlajit.so.0) had no struct_size in its structs, so its programs must be
 * rebuilt, and the SONAME changed with them. */
#define MLAJIT_VERSION_MAJOR 1
#define MLAJIT_VERSION_MINOR 0
#define MLAJIT_VERSION_PATCH 0
#define MLAJIT_VERSION_STRING "1.0.0"

/* The version of the library loaded, which may be newer than the header a
 * program was built with: its numbers through major, minor and patch (each may
 * be NULL), and the string, e.g. "1.0.0". Never NULL. */
MLAJIT_API const char *mlajit_version(int *major, int *minor, int *patch);

/* ------------------------------------------------------------------------- */
/* Structs that can grow: struct_size                                         */
/* ------------------------------------------------------------------------- */

/* Every struct a caller hands the library (options, specs, shapes, grids,
 * decode arguments, and the reports and infos it fills) starts with
 * `size_t struct_size`: the caller sets it to sizeof the struct in the header
 * it was built with, before any call, in or out (the MLAJIT_*_INIT initialisers
 * below do, or `{.struct_size = sizeof(T), ...}`; the library never writes it).
 * A later minor version adds fields only at the end, so
 *  - a struct_size of 0, or smaller than the struct's 1.0 fields, is
 *    MLAJIT_ERR_INVALID_ARGUMENT naming the struct and how to set it, and
 *    nothing is read or written;
 *  - the library reads and writes only the first struct_size bytes: a program
 *    built with an older header gets the fields it knows filled and nothing
 *    past them touched, and its structs' later fields read as their defaults
 *    (every field added after 1.0 defaults to 0, 1.0's behaviour);
 *  - a program built with a newer header may pass its larger structs: the
 *    fields this library does not have are ignored on input and left as they
 *    were on output (mlajit_version says which version is loaded).
 * The structs the library returns by pointer (mlajit_model_describe,
 * mlajit_plan_report) carry the library's own struct_size: read a field only
 * where struct_size covers it.
 * Why sizes and not setters on opaque objects (LMDB's way): these are plain
 * per-call values (a spec is a value that names a kernel, decode arguments
 * change every call), filled with designated initialisers, copied, compared and
 * mapped field for field by other languages' bindings; setters would cost a call
 * per field and an allocation on mlajit_decode's path, which must not allocate.
 * Only the context and the plan, which own resources, are opaque. */
#if defined(__cplusplus)
#define MLAJIT_STRUCT_INIT(type) {sizeof(type)}
#else
#define MLAJIT_STRUCT_INIT(type) {.struct_size = sizeof(type)}
#endif
#define MLAJIT_KERNEL_SPEC_INIT MLAJIT_STRUCT_INIT(mlajit_kernel_spec)
#define MLAJIT_CONTEXT_OPTIONS_INIT MLAJIT_STRUCT_INIT(mlajit_context_options)
#define MLAJIT_CONTEXT_INFO_INIT MLAJIT_STRUCT_INIT(mlajit_context_info)
#define MLAJIT_KERNEL_REPORT_INIT MLAJIT_STRUCT_INIT(mlajit_kernel_report)
#define MLAJIT_KERNEL_GRID_INIT MLAJIT_STRUCT_INIT(mlajit_kernel_grid)
#define MLAJIT_WARMUP_REPORT_INIT MLAJIT_STRUCT_INIT(mlajit_warmup_report)
#define MLAJIT_DECODE_SHAPE_INIT MLAJIT_STRUCT_INIT(mlajit_decode_shape)
#define MLAJIT_PLAN_OUTLINE_INIT MLAJIT_STRUCT_INIT(mlajit_plan_outline)
#define MLAJIT_DECODE_ARGS_INIT MLAJIT_STRUCT_INIT(mlajit_decode_args)
#define MLAJIT_TUNE_GRID_INIT MLAJIT_STRUCT_INIT(mlajit_tune_grid)
#define MLAJIT_TUNE_REPORT_INIT MLAJIT_STRUCT_INIT(mlajit_tune_report)

/* ------------------------------------------------------------------------- */
/* Status codes                                                               */
/* ------------------------------------------------------------------------- */

enum mlajit_status {
    MLAJIT_OK = 0,
    MLAJIT_ERR_INVALID_ARGUMENT = 1, /* an argument is outside what is allowed */
    MLAJIT_ERR_UNSUPPORTED = 2,      /* valid request outside the supported envelope */
    MLAJIT_ERR_OUT_OF_MEMORY = 3,    /* host allocation failed; the call left nothing half made */
    MLAJIT_ERR_NO_DEVICE = 4,        /* no CUDA driver or no GPU at that ordinal */
    MLAJIT_ERR_COMPILE = 5,          /* NVRTC rejected the generated source */
    MLAJIT_ERR_CACHE = 6,            /* the on-disk cache failed (the call may still work) */
    MLAJIT_ERR_CUDA = 7,             /* a Driver API call failed */
    MLAJIT_ERR_IO = 8,               /* a file could not be read or written */
    MLAJIT_ERR_NOT_FOUND = 9,        /* a looked-up entry does not exist */
    MLAJIT_ERR_CORRUPT = 10,         /* stored bytes failed their checks */
    MLAJIT_ERR_INTERNAL = 11         /* a bug in mlajit; please report it */
};

/* The fixed description of a status code ("invalid argument", ...). Never NULL. */
MLAJIT_API const char *mlajit_status_string(int status);

/* The message of the last failure in the calling thread, naming the argument and
 * the allowed values ("" when none). Valid until the thread's next mlajit call. */
MLAJIT_API const char *mlajit_last_error(void);

/* Release memory the library returned (generated source, reports' strings). */
MLAJIT_API void mlajit_free(void *ptr);

/* ------------------------------------------------------------------------- */
/* Log lines                                                                  */
/* ------------------------------------------------------------------------- */

typedef enum mlajit_log_level {
    MLAJIT_LOG_WARNING = 1, /* something was skipped or fell back (a damaged pack, an unwritable cache) */
    MLAJIT_LOG_INFO = 2     /* progress: a line per compile and per pack opened */
} mlajit_log_level;

/* Receives one log line: level (mlajit_log_level) and the message, without the
 * "mlajit: " prefix or a newline, valid during the call. Called from whichever
 * thread logs (warmup's compile workers too), possibly from several at once. */
typedef void (*mlajit_log_handler)(void *user, int level, const char *message);

/* Send the library's log lines to handler (with user) instead of stderr; NULL
 * restores stderr. Without a handler, warnings go to stderr unless MLAJIT_LOG=quiet
 * and info lines only with MLAJIT_LOG=info. A handler gets every line of both
 * levels whatever MLAJIT_LOG says, and filters them itself (the Python package
 * passes them to its `logging` logger). Process-wide and thread-safe; a line
 * already being delivered may still reach the handler it replaced, so keep user
 * valid while the library may log. */
MLAJIT_API void mlajit_set_log_handler(mlajit_log_handler handler, void *user);

/* ------------------------------------------------------------------------- */
/* Model types: KV-cache layouts (the numbers live in one descriptor table)    */
/* ------------------------------------------------------------------------- */

typedef enum mlajit_model {
    MLAJIT_MODEL_V32 = 1,    /* DeepSeek-V3.2: 576 = 512 fp8 + 64 bf16 RoPE, fp32 pow2 scales inline */
    MLAJIT_MODEL_DSV4 = 2,   /* DeepSeek-V4: 512 = 448 fp8 + 64 bf16 RoPE, ue8m0 scales in page footer */
    MLAJIT_MODEL_GLM_NSA = 3,    /* V3.2 layout with arbitrary fp32 scales (amax / 448) */
    MLAJIT_MODEL_GLM53_NOPE = 4, /* 512 fp8 NoPE, no RoPE, arbitrary fp32 scales inline, 656-byte rows (528 used) */
    MLAJIT_MODEL_DOTS3_SWA = 5,  /* 1088 = 1024 fp8 + 64 bf16 RoPE, d_v 1024, ue8m0 scales in page footer */
    MLAJIT_MODEL_V32_BF16 = 6,   /* V3.2's dims as bf16 values (scales none): 576 bf16 a token, d_v 512 */
    MLAJIT_MODEL_DSV4_BF16 = 7,  /* V4's dims as bf16 values (scales none): 512 bf16 a token, d_v 512 */
    MLAJIT_MODEL_CUSTOM = 100    /* the layout a spec describes itself (mlajit_kernel_spec.layout) */
} mlajit_model;

typedef enum mlajit_scale_format {
    MLAJIT_SCALE_FP32_POW2 = 1, /* fp32 scales that are powers of two */
    MLAJIT_SCALE_FP32 = 2,      /* arbitrary fp32 scales: product rounded to bf16 */
    MLAJIT_SCALE_UE8M0 = 3,     /* one byte e, value 2^(e-127) */
    MLAJIT_SCALE_NONE = 4       /* no scales: the NoPE dims are stored as bf16 values (the bf16 layout) */
} mlajit_scale_format;

typedef enum mlajit_scale_place {
    MLAJIT_SCALES_INLINE = 1,     /* in each token's record after the fp8 values */
    MLAJIT_SCALES_PAGE_FOOTER = 2 /* after all of a page's token rows, 8 bytes a token */
} mlajit_scale_place;

typedef struct mlajit_model_desc {
    size_t struct_size;     /* the library's sizeof (the descriptor is the library's) */
    mlajit_model model;
    const char *name;       /* "v32", "dsv4", "glm_nsa", "glm53_nope", "dots3_swa", "v32_bf16", "dsv4_bf16":
                               what the CLI and spec strings use */
    int d_qk;               /* query/key width */
    int d_nope;             /* fp8-quantized dims */
    int d_rope;             /* bf16 dims stored verbatim after the NoPE dims */
    int d_v;                /* value width: V = K[0 : d_v] */
    int quant_tile;         /* NoPE dims per scale */
    int num_scales;         /* d_nope / quant_tile */
    mlajit_scale_format scale_format;
    mlajit_scale_place scale_place;
    int row_bytes;          /* bytes of one token's row (inline: the whole record) */
    int footer_bytes;       /* bytes per token in the page footer (0 when inline) */
    int bytes_per_token;    /* row_bytes + footer_bytes: what one attended token reads */
    /* Added after 1.0 (read them only where struct_size covers them): */
    int scale_offset;       /* inline: the scales' byte offset in a row; in a page footer: 0 (the
                               footer's token t starts at page_size * row_bytes + t * footer_bytes) */
    int rope_offset;        /* the RoPE values' byte offset in a row */
} mlajit_model_desc;

/* The descriptor of a model (read-only, the library's), or NULL for an unknown
 * value (MLAJIT_MODEL_CUSTOM included: its descriptor is mlajit_layout_describe's). */
MLAJIT_API const mlajit_model_desc *mlajit_model_describe(mlajit_model model);

/* Find a model by name ("v32", "dsv4", "glm_nsa", "glm53_nope", "dots3_swa",
 * "v32_bf16", "dsv4_bf16"; case-insensitive). */
MLAJIT_API int mlajit_model_from_name(const char *name, mlajit_model *out);

/* ------------------------------------------------------------------------- */
/* Layouts described at run time                                              */
/* ------------------------------------------------------------------------- */

/* A KV-cache layout, described by its numbers instead of a model's name
 * (docs/layouts.md). A token's row holds, in order: d_nope NoPE values (fp8, or
 * bf16 with MLAJIT_SCALE_NONE); with inline scales, num_scales = d_nope /
 * quant_tile scales (fp32: 4 bytes each, ue8m0: 1), padded to 16 bytes; then
 * d_rope bf16 RoPE values; then padding up to row_bytes. With scales in a page
 * footer, token t's scales start at page_size * row_bytes + t * footer_bytes.
 * V is K[0 : d_v]. The five named models are layouts too (mlajit_model_layout).
 *
 * Embedded by value in mlajit_kernel_spec, so it has no struct_size and its
 * sizeof never changes: later versions give meaning to the reserved fields, 0
 * keeping today's behaviour. Bounds and combinations: mlajit_layout_validate. */
typedef struct mlajit_layout {
    int d_nope;          /* quantized dims: 16..2048, a multiple of 16 */
    int d_rope;          /* bf16 dims stored verbatim after them: 0..512, a multiple of 8; d_nope + d_rope <= 2048 */
    int d_v;             /* value width, V = K[0 : d_v]: 16..d_nope + d_rope, a multiple of 16 */
    int quant_tile;      /* NoPE dims per scale: a multiple of 16 dividing d_nope; 0 with MLAJIT_SCALE_NONE */
    mlajit_scale_format scale_format; /* MLAJIT_SCALE_* */
    mlajit_scale_place scale_place;   /* MLAJIT_SCALES_*; 0 with MLAJIT_SCALE_NONE */
    int row_bytes;       /* bytes of one token's row: at least what it holds, a multiple of 16, <= 16384 */
    int footer_bytes;    /* page-footer bytes a token: with MLAJIT_SCALES_PAGE_FOOTER at least its scales'
                            bytes, a multiple of 8, <= 1024; else 0 */
    int reserved[8];     /* 0 */
} mlajit_layout;

/* Check a layout: every field's bounds, then the combinations (the tile against
 * d_nope, the row against what it holds, the footer against the place...).
 * MLAJIT_OK, or MLAJIT_ERR_INVALID_ARGUMENT whose message names the field
 * ("layout.quant_tile = 48 does not divide d_nope 512; ...") and what is
 * allowed. Valid is not served: which kernels run a layout, mlajit_envelope_check
 * says. */
MLAJIT_API int mlajit_layout_validate(const mlajit_layout *layout);

/* Parse a layout from text into *out (checked with mlajit_layout_validate; *out
 * is unchanged on a failure). The text is one of
 *  - inline keys, comma-separated, in any order:
 *      d_nope=<n>,d_rope=<n>,d_v=<n>,tile=<n>,scales=pow2|fp32|ue8m0|none,
 *      place=inline|footer[,row_bytes=<n>][,footer_bytes=<n>][,v=nope|all]
 *    d_nope and scales are required; tile too unless scales=none; place unless
 *    scales=none (which takes none); d_rope defaults to 0; d_v to v's choice (nope:
 *    d_nope, the default; all: d_nope + d_rope); row_bytes to what the row holds
 *    rounded up to 16 bytes; footer_bytes to the scales' bytes rounded up to 8;
 *  - the canonical string mlajit_layout_string writes;
 *  - a model's name ("v32", ...): its layout.
 * e.g. "d_nope=256,d_rope=64,d_v=256,tile=32,scales=ue8m0,place=inline". A bad
 * text is MLAJIT_ERR_INVALID_ARGUMENT naming the key and what it allows. */
MLAJIT_API int mlajit_layout_parse(const char *text, mlajit_layout *out);

/* The canonical string of a valid layout: every field, '-'-separated, e.g.
 * "nope512-rope64-v512-tile128-pow2-inline-row656" (V3.2),
 * "nope448-rope64-v512-tile64-ue8m0-footer8-row576" (V4) or
 * "nope512-rope64-v576-none-row1152" (bf16). Stable across versions, no '.'
 * (it is a spec string's first field) and mlajit_layout_parse reads it back.
 * Writes at most len bytes including the NUL; MLAJIT_ERR_INVALID_ARGUMENT for an
 * invalid layout or a short buffer (64 bytes always suffice). */
#define MLAJIT_LAYOUT_STRING_LEN 64
MLAJIT_API int mlajit_layout_string(const mlajit_layout *layout, char *buf, size_t len);

/* The layout of a named model into *out; MLAJIT_ERR_INVALID_ARGUMENT for an
 * unknown model (MLAJIT_MODEL_CUSTOM included) or a NULL out. */
MLAJIT_API int mlajit_model_layout(mlajit_model model, mlajit_layout *out);

/* The descriptor of a valid layout (read-only, the library's, kept for the
 * life of the process, one per distinct layout): a named model's own where the
 * layout is one (model and name are then the model's), else model
 * MLAJIT_MODEL_CUSTOM and name the canonical string. NULL for an invalid layout
 * (mlajit_layout_validate says why) or when memory ran out. */
MLAJIT_API const mlajit_model_desc *mlajit_layout_describe(const mlajit_layout *layout);

/* mlajit_min_page_stride for a layout: page_size * (row_bytes + footer_bytes);
 * -1 for an invalid layout or a page size below 1. */
MLAJIT_API int64_t mlajit_layout_min_page_stride(const mlajit_layout *layout, int page_size);

/* Minimum page stride in bytes for a model and page size (what the layout needs;
 * larger strides are allowed and must be multiples of 16); -1 for an unknown
 * model or a page size below 1. */
MLAJIT_API int64_t mlajit_min_page_stride(mlajit_model model, int page_size);

/* ------------------------------------------------------------------------- */
/* Kernel specs: everything a generated kernel is specialized on               */
/* ------------------------------------------------------------------------- */

/* Optional inputs, compiled in only when asked for. */
#define MLAJIT_FEATURE_SINK              0x1u /* attn_sink[h_q] */
#define MLAJIT_FEATURE_TOPK_LENGTH       0x2u /* topk_length[b] */
#define MLAJIT_FEATURE_EXTRA_TOPK_LENGTH 0x4u /* extra_topk_length[b] (needs an extra cache) */
#define MLAJIT_FEATURE_ALL               0x7u

#define MLAJIT_MAX_HEADS 128
#define MLAJIT_MAX_PAGE_SIZE 1024
#define MLAJIT_MAX_TOPK 16384
#define MLAJIT_MAX_SQ 64       /* query tokens per row (speculative decoding) */
#define MLAJIT_MAX_BATCH 65536
#define MLAJIT_MAX_ROWS 65536  /* batch x s_q: a whole mixed batch as (T, 1) or (T / s_q, s_q) */
#define MLAJIT_ARCH_LEN 16

/* The kernel family. Leave it at MLAJIT_VARIANT_AUTO: the generator and the
 * planner choose per arch and call shape (docs/kernels.md says what they choose
 * and why). The other values are benchmarking overrides (mlajit bench --variant,
 * tests) that force one kernel; which kernel is fastest where is measured on the
 * H200, not promised, and changes with the kernels. A forced variant the arch,
 * model or head count cannot run is MLAJIT_ERR_UNSUPPORTED, saying why; a few
 * resolve to a sibling where theirs has nothing to add (docs/kernels.md).
 * Retired variants keep their names and numbers, which are never reused: a spec
 * naming one is MLAJIT_ERR_UNSUPPORTED, saying what to use instead. */
typedef enum mlajit_variant {
    MLAJIT_VARIANT_AUTO = 0,               /* the generator's and the planner's choice */
    MLAJIT_VARIANT_PORTABLE = 1,           /* mma.sync bf16, sm_80 and newer */
    MLAJIT_VARIANT_SM90 = 2,               /* wgmma, warp-specialized; sm_90a, 64 heads per CTA, tile 64 */
    MLAJIT_VARIANT_SLICED = 3,             /* retired ("sliced"): refused; use auto, sm90 or portable */
    MLAJIT_VARIANT_SM90_STAGED = 4,        /* sm90, output rows staged through shared memory; never splits;
                                            * power-of-two scales (v32, dsv4) */
    MLAJIT_VARIANT_SM90_UNPAIRED = 5,      /* retired ("sm90-unpaired"): refused; use auto or sm90 */
    MLAJIT_VARIANT_SM90_NARROW = 6,        /* wgmma with heads as N: at most 32 heads per CTA (8, 16, 24
                                            * or 32; required past 32 heads); sm_90a, power-of-two
                                            * scales (v32, dsv4), tile 64 */
    MLAJIT_VARIANT_SM90_NARROW_LONG = 7,   /* sm90-narrow with three gathering warp groups */
    MLAJIT_VARIANT_SM90_NARROW_SCORES = 8, /* sm90-narrow whose gathering groups compute the scores; v32,
                                            * 8 heads per CTA */
    MLAJIT_VARIANT_SM90_SPLIT = 9          /* wgmma, a CTA pair per 64 heads splitting the dims (each half
                                            * of V): d_v 1024 (dots3_swa); sm_90a, tile 64 */
} mlajit_variant;

/* A kernel spec. Specs will grow (a run-time layout description is planned),
 * so it carries struct_size like every struct here. */
typedef struct mlajit_kernel_spec {
    size_t struct_size;  /* sizeof(mlajit_kernel_spec): MLAJIT_KERNEL_SPEC_INIT */
    mlajit_model model;
    int h_q;             /* query heads, 1..128 */
    int page_size;       /* tokens per page of the main cache, 1..1024 */
    int extra_page_size; /* tokens per page of the extra cache; 0 = no extra cache */
    unsigned features;   /* MLAJIT_FEATURE_* */
    int tile;            /* candidates per tile: 0 = generator's choice, else 32 or 64 */
    int heads_per_cta;   /* 0 = generator's choice, else 16, 32 or 64 (8 and 24 too with sm90-narrow;
                          * sm90-narrow takes at most h_q rounded up to 8 and at most 32) */
    mlajit_variant variant;
    char arch[MLAJIT_ARCH_LEN]; /* "sm_80", "sm_90a", ...; "" = the context's device (sm_90a without one) */
    /* Added after 1.0: */
    mlajit_layout layout; /* with model MLAJIT_MODEL_CUSTOM, the cache's layout (mlajit_spec_init_layout);
                             else all zero. A custom layout equal to a named model's is that model. */
} mlajit_kernel_spec;

/* Fill a spec (its struct_size set: MLAJIT_KERNEL_SPEC_INIT) with a model, head
 * count and page size and the defaults: no extra cache, no features, the
 * generator's choices, arch "" (the device's). Then validates it:
 * MLAJIT_ERR_INVALID_ARGUMENT for bad values (the spec is filled even so). */
MLAJIT_API int mlajit_spec_init(mlajit_kernel_spec *spec, mlajit_model model, int h_q, int page_size);

/* mlajit_spec_init for a layout described at run time: model
 * MLAJIT_MODEL_CUSTOM and spec->layout = *layout (checked with
 * mlajit_layout_validate, then the spec with mlajit_spec_validate). */
MLAJIT_API int mlajit_spec_init_layout(mlajit_kernel_spec *spec, const mlajit_layout *layout, int h_q,
                                       int page_size);

/* Check a spec against the envelope without CUDA or compiling. MLAJIT_OK, or a
 * status whose message (mlajit_last_error) says which field and what is allowed. */
MLAJIT_API int mlajit_spec_validate(const mlajit_kernel_spec *spec);

/* The canonical, stable, human-readable name of a resolved spec, e.g.
 * "v32.h128.p64.t64.hc64.sm90.sm_90a"; a custom layout's spec starts with the
 * layout's canonical string instead of a model's name
 * ("nope256-rope64-v256-tile32-ue8m0-inline-row400.h16.p64..."). Generator choices (tile = 0, ...) are
 * resolved first, so equal kernels have equal strings. Writes at most len bytes
 * including the terminating NUL; returns MLAJIT_ERR_INVALID_ARGUMENT if too short. */
MLAJIT_API int mlajit_spec_string(const mlajit_kernel_spec *spec, char *buf, size_t len);

/* Parse a spec string into *out (its struct_size set) and check it
 * (mlajit_spec_validate); *out is unchanged on a failure. The string is the
 * canonical form mlajit_spec_string writes, or a short form that leaves fields
 * off from the right, e.g. "v32.h16.p64" or "dsv4.h64.p256.e64.fs" (tile, heads
 * per CTA, variant and arch then take their defaults: t0, hc0, auto, any). The
 * first field is a model's name or a layout: its canonical string or its
 * inline keys (mlajit_layout_parse), e.g.
 * "d_nope=256,d_rope=64,tile=32,scales=ue8m0,place=inline.h16.p64". */
MLAJIT_API int mlajit_spec_parse(const char *str, mlajit_kernel_spec *out);

/* Resolve the generator's choices (tile, heads per CTA, variant) for spec->arch,
 * which must be set, into *resolved (its struct_size set; it may be spec). The
 * result has no zero "auto" fields. */
MLAJIT_API int mlajit_spec_resolve(const mlajit_kernel_spec *spec, mlajit_kernel_spec *resolved);

/* Generate the CUDA source for a spec (arch must be set). *source is released
 * with mlajit_free(). Pure: no CUDA, no compiler. */
MLAJIT_API int mlajit_generate_source(const mlajit_kernel_spec *spec, char **source);

/* The envelope query: would this spec (and, when shape is not NULL, this
 * geometry) compile and run? Answered without CUDA and without compiling: checks
 * the ranges, the generator's choices for spec->arch ("" = sm_90a) and that this
 * NVRTC can target the arch. MLAJIT_OK, or a status whose message says why not. */
struct mlajit_decode_shape;
MLAJIT_API int mlajit_envelope_check(const mlajit_kernel_spec *spec, const struct mlajit_decode_shape *shape);

/* ------------------------------------------------------------------------- */
/* Context                                                                    */
/* ------------------------------------------------------------------------- */

typedef struct mlajit_context mlajit_context;

/* Context flags. */
#define MLAJIT_CONTEXT_NO_DEVICE  0x1u /* never touch the driver: generate/compile/cache only */
#define MLAJIT_CONTEXT_NO_DISK_CACHE 0x2u /* keep compiled kernels in memory only */
#define MLAJIT_CONTEXT_NO_JIT     0x4u /* never compile: a kernel missing from the packs and the
                                           cache is an error (as is MLAJIT_DISABLE_JIT=1) */

typedef struct mlajit_context_options {
    size_t struct_size;    /* sizeof(mlajit_context_options): MLAJIT_CONTEXT_OPTIONS_INIT */
    int device;            /* CUDA device ordinal (default 0) */
    const char *cache_dir; /* NULL: $MLAJIT_CACHE_DIR, else $XDG_CACHE_HOME/mlajit, else ~/.cache/mlajit */
    unsigned flags;        /* MLAJIT_CONTEXT_* */
    const char *packs;     /* read-only cubin packs (`mlajit pack build`), ':'-separated, looked up
                              in order before the disk cache; NULL: $MLAJIT_PACKS; "": none */
} mlajit_context_options;

/* Create a context. opts may be NULL (defaults). Without a driver or GPU the
 * context still works for generating, compiling and caching (for sm_90a unless a
 * spec names another arch); mlajit_decode then fails with MLAJIT_ERR_NO_DEVICE,
 * and its message says why there is no GPU. On a machine with GPUs, an
 * options.device past them is MLAJIT_ERR_INVALID_ARGUMENT. A GPU older than every
 * target the generator has (sm_80) gets a context too, for compiling named archs;
 * a spec that leaves the arch to it is MLAJIT_ERR_UNSUPPORTED.
 *
 * Kernels are looked up in this order: the context's own map, the packs (each
 * checked when opened: a damaged pack, or one made for another arch or with a
 * key recipe / NVRTC other than this one's, is skipped with a warning), the
 * writable disk cache, then NVRTC. A stored kernel whose recorded launch
 * geometry is not what this build launches it with is stale: refused with a
 * warning and recompiled, never launched. A cache directory that cannot be
 * written is read (its kernels still hit; no lock file is needed and nothing is
 * written) and new kernels stay in memory; one that cannot be created (or no
 * HOME) leaves the packs and in-memory compiles: either is one warning, never an
 * error. A damaged cache file is set aside with one warning (docs/packs.md).
 * Environment: MLAJIT_PACKS, MLAJIT_CACHE_DIR, MLAJIT_DISABLE_JIT=1 (as
 * MLAJIT_CONTEXT_NO_JIT), MLAJIT_COMPILE_WAIT_MS (how long a compile waits for
 * another process compiling the same kernel; default 120000), MLAJIT_LOG=info (a
 * line per compile and per pack opened) or quiet. */
MLAJIT_API int mlajit_context_create(const mlajit_context_options *opts, mlajit_context **out);

/* Destroy a context (NULL is allowed). Plans made from it must be destroyed first. */
MLAJIT_API void mlajit_context_destroy(mlajit_context *ctx);

typedef struct mlajit_context_info {
    size_t struct_size;      /* sizeof(mlajit_context_info), set by the caller: MLAJIT_CONTEXT_INFO_INIT */
    int has_device;          /* 1 when a GPU was opened */
    char device_name[128];
    char device_arch[MLAJIT_ARCH_LEN]; /* e.g. "sm_90a"; the default target */
    int sm_count;
    int driver_version;      /* e.g. 13000; 0 without a driver */
    int nvrtc_major, nvrtc_minor;
    char cache_dir[1024];    /* "" when the disk cache is off */
    int64_t cache_bytes;     /* bytes in the cache's data file */
    int64_t cache_entries;
    /* What the context found where, since it was made. */
    int cache_writable;      /* 1 when compiled kernels are stored on disk */
    int pack_count;          /* packs in use (those that passed their checks) */
    int jit_disabled;        /* 1 with MLAJIT_CONTEXT_NO_JIT or MLAJIT_DISABLE_JIT=1 */
    int64_t memory_hits;     /* lookups served by the context's own map */
    int64_t pack_hits;       /* kernels served by a pack */
    int64_t disk_hits;       /* kernels served by the disk cache */
    int64_t compiles;        /* kernels that missed every layer and were compiled */
    int64_t corrupt;         /* stored entries or packs rejected by their checks */
    int64_t jit_refusals;    /* misses refused because JIT is disabled */
    double compile_ms;       /* NVRTC time of those compiles */
    int64_t l2_bytes;        /* the device's L2 in bytes, 0 without a device (plans weigh the rows a
                                decode gathers against it: 1.5x or more, the L2 prefetches are evict-last) */
    char no_device_reason[256]; /* without a device, why: no driver, cuInit's error, no device, or
                                   MLAJIT_CONTEXT_NO_DEVICE; "" with one */
    int64_t stale;           /* stored entries refused as stale (another format version, or a launch
                                record this generator does not expect), each recompiled */
} mlajit_context_info;

/* Describe a context: the GPU, the compiler, the cache, the packs, and the hit
 * and miss counts per layer, into *info up to its struct_size. The cache's
 * size and entry count come from a walk of its entries, remembered while its
 * data file is unchanged: a repeat call costs a stat, not a walk. */
MLAJIT_API int mlajit_context_get_info(mlajit_context *ctx, mlajit_context_info *info);

/* Add the context's lookup counts not yet recorded to the disk cache's (what
 * `mlajit cache stats` reports) in one write transaction. A context records its
 * counts in the writes it makes anyway (the store of each kernel it compiles)
 * and never when destroyed, so a process that only hits never writes the
 * cache; call this (at shutdown, say) to have a reading process's hits counted
 * too. MLAJIT_OK (also when nothing is pending); MLAJIT_ERR_CACHE when the disk
 * cache is off, read-only or cannot be written. */
MLAJIT_API int mlajit_context_flush_counters(mlajit_context *ctx);

/* ------------------------------------------------------------------------- */
/* Kernels: generate, compile, cache                                           */
/* ------------------------------------------------------------------------- */

typedef struct mlajit_kernel_report {
    size_t struct_size;   /* sizeof(mlajit_kernel_report), set by the caller: MLAJIT_KERNEL_REPORT_INIT */
    char spec[128];       /* canonical spec string */
    char key[33];         /* the cache key, 32 hex digits */
    int cache_hit;        /* 1: from the process map or the disk cache; 0: compiled now */
    int loaded;           /* 1: loaded onto the device */
    double generate_ms;   /* source generation and its key (0 when the spec was asked before) */
    double compile_ms;    /* NVRTC, when compiled now; else the stored compile time */
    double lookup_ms;     /* cache lookup (and load onto the device when loaded) */
    int registers;        /* per thread, main kernel (from the ptxas log) */
    int shared_bytes;     /* static + dynamic shared memory of the main kernel */
    int spill_bytes;      /* spill stores + loads of the main kernel */
    size_t cubin_bytes;
    int source;           /* where the kernel came from (mlajit_kernel_source) */
} mlajit_kernel_report;

typedef enum mlajit_kernel_source {
    MLAJIT_SOURCE_COMPILED = 0, /* NVRTC, now */
    MLAJIT_SOURCE_MEMORY = 1,   /* the context's own map */
    MLAJIT_SOURCE_PACK = 2,     /* a read-only pack */
    MLAJIT_SOURCE_DISK = 3      /* the writable disk cache */
} mlajit_kernel_source;

/* Make the kernel for a spec available: look it up in the context's map, the
 * packs and the disk cache, else generate and compile it with NVRTC and store
 * it. With a device (and an arch that is the device's), the kernel is also
 * loaded. report (its struct_size set) may be NULL. Thread-safe; no lock is held while compiling, so
 * threads (and processes) asking for the same new kernel may each compile it.
 * With JIT disabled a miss is MLAJIT_ERR_NOT_FOUND, and the message names the
 * spec and where it was looked for (`mlajit compile` adds the `mlajit pack
 * build` line whose pack would hold it). */
MLAJIT_API int mlajit_kernel_prepare(mlajit_context *ctx, const mlajit_kernel_spec *spec,
                                     mlajit_kernel_report *report);

/* A set of kernels: the product of its lists ((models and layouts) x head counts x
 * page sizes x extra page sizes x feature sets x archs), plus, for each spec whose plans
 * switch kernels by their walk or heads (docs/kernels.md), those kernels too. A
 * NULL list or a count of 0 takes the default named on the field. */
typedef struct mlajit_kernel_grid {
    size_t struct_size;             /* sizeof(mlajit_kernel_grid): MLAJIT_KERNEL_GRID_INIT */
    const mlajit_model *models;     int num_models;           /* required (or layouts) */
    const int *head_counts;         int num_head_counts;      /* required */
    const int *page_sizes;          int num_page_sizes;       /* required */
    const int *extra_page_sizes;    int num_extra_page_sizes; /* default {0}: no extra cache */
    const unsigned *feature_sets;   int num_feature_sets;     /* default {0}: no features */
    const char *const *archs;       int num_archs;            /* default {""}: the context's */
    /* Added after 1.0: */
    const mlajit_layout *layouts;   int num_layouts;          /* custom layouts, beside the models
                                                                 (default none) */
} mlajit_kernel_grid;

typedef struct mlajit_warmup_report {
    size_t struct_size;   /* sizeof(mlajit_warmup_report), set by the caller: MLAJIT_WARMUP_REPORT_INIT */
    int kernels;          /* kernels in the grid */
    int from_memory;      /* already in the context */
    int from_packs;       /* read from a pack */
    int from_disk;        /* read from the disk cache */
    int compiled;         /* compiled by NVRTC now */
    int loaded;           /* loaded onto the device by this call (0 without a device) */
    double wall_ms;       /* the whole call */
    double compile_ms;    /* NVRTC time, summed over the kernels compiled */
} mlajit_warmup_report;

/* Make every kernel of a grid ready before serving (and before CUDA graph
 * capture, since a first use would otherwise compile and load): each is looked
 * up (map, packs, disk cache) or compiled, and loaded when the context has a
 * device whose arch runs it. threads: compile workers, 0 = one per online CPU.
 * Every spec is validated first; an invalid one fails the call before any
 * work, naming the spec. A kernel that fails to compile (or is missing with JIT
 * disabled) fails the call after the others finish; report (may be NULL) then
 * still counts what was done. Thread-safe. */
MLAJIT_API int mlajit_warmup(mlajit_context *ctx, const mlajit_kernel_grid *grid, int threads,
                             mlajit_warmup_report *report);

/* ------------------------------------------------------------------------- */
/* Plans                                                                      */
/* ------------------------------------------------------------------------- */

typedef struct mlajit_plan mlajit_plan;

typedef struct mlajit_decode_shape {
    size_t struct_size; /* sizeof(mlajit_decode_shape): MLAJIT_DECODE_SHAPE_INIT */
    int batch;       /* b, 0..MLAJIT_MAX_BATCH (65536) */
    int s_q;         /* query tokens per row, 0..MLAJIT_MAX_SQ (64); batch x s_q at most MLAJIT_MAX_ROWS */
    int topk;        /* main candidates per (row, query token), 1..16384 */
    int extra_topk;  /* extra-cache candidates (0 without an extra cache), 0..16384 */
    int num_splits;  /* split-KV factor: 0 = planner's choice, else 1..64 (lowered
                        so that no split is empty; see mlajit_plan_num_splits) */
} mlajit_decode_shape;

/* Plan a decode geometry: prepares (JIT-compiles if needed) and loads the kernel,
 * chooses the split count and computes the workspace size. The kernel and split
 * count are a tuned tactic's where one serves the shape on this GPU (see
 * mlajit_plan_tactic; the look-up reads the packs and the cache, compiles
 * nothing but the chosen kernel and never tunes), else the rules'; a tactic
 * that cannot be taken falls back to the rules with one warning per context.
 * mlajit_plan_get_outline says which. Without a device the
 * plan is made (kernel compiled, not loaded) and mlajit_decode validates its
 * arguments, then returns MLAJIT_ERR_NO_DEVICE. After
 * this, mlajit_decode compiles nothing, allocates nothing and never synchronizes,
 * so it can be captured in a CUDA graph. */
MLAJIT_API int mlajit_plan_create(mlajit_context *ctx, const mlajit_kernel_spec *spec,
                                  const mlajit_decode_shape *shape, mlajit_plan **out);

/* Destroy a plan (NULL is allowed). It holds no device memory; its kernel
 * belongs to the context, so destroying the plan does not wait for decodes
 * enqueued with it (the context must outlive those). */
MLAJIT_API void mlajit_plan_destroy(mlajit_plan *plan);

/* Device workspace bytes mlajit_decode needs with this plan (0 is possible; 0
 * for a NULL plan). */
MLAJIT_API size_t mlajit_plan_workspace_size(const mlajit_plan *plan);

/* The split count the plan chose (0 for a NULL plan). */
MLAJIT_API int mlajit_plan_num_splits(const mlajit_plan *plan);

/* The report of the plan's kernel (spec string, key, cache hit, compile time...),
 * owned by the context and valid while it lives; NULL for a NULL plan. */
MLAJIT_API const mlajit_kernel_report *mlajit_plan_report(const mlajit_plan *plan);

/* What a plan of a geometry would launch (mlajit_plan_describe). The kernel is
 * named by its string and its resolved choices, not held as a spec: a spec
 * embedded by value would fix the spec's size inside the outline, and neither
 * could grow. */
typedef struct mlajit_plan_outline {
    size_t struct_size;        /* sizeof(mlajit_plan_outline), set by the caller: MLAJIT_PLAN_OUTLINE_INIT */
    char kernel[128];          /* the kernel's canonical spec string (mlajit_spec_parse reads it) */
    mlajit_variant variant;    /* the kernel's resolved variant, tile and heads per CTA */
    int tile;
    int heads_per_cta;
    int num_splits;            /* split-KV splits (1: no combine) */
    int head_groups;           /* CTAs per (row, split): h_q over the kernel's heads per CTA (twice that
                                  for sm90-split, two CTAs per head group) */
    int rows;                  /* batch x s_q */
    int tiles_per_split;       /* candidate tiles each CTA walks, at most */
    /* Added after 1.0, past 1.0's sizeof (168 on LP64), so a 1.0 caller's struct_size ends above
     * them and they are never written for it: */
    int reserved_1_0;          /* 1.0's trailing padding, kept unused: always 0 */
    int tactic;                /* where the kernel and split count come from (mlajit_plan_tactic) */
} mlajit_plan_outline;

/* Where a plan's choice of kernel and split count comes from. Tactics are
 * choices measured on a GPU by the tuner and kept in the disk cache or a pack
 * (docs/packs.md, "Tactics"), keyed by the GPU, the spec as asked and a bucket
 * of rows (batch x s_q), topk and extra_topk, each rounded down to a power of
 * two. A plan takes the tactic of its own bucket, else of the nearest bucket
 * below it, when the context has a device, tactics are on (MLAJIT_TACTICS=0
 * turns them off), the shape leaves num_splits to the planner (0) and the
 * tactic's kernel can run the spec and be had; else the rules (a spec that
 * names its variant takes only a tactic's split count, for its own kernel). */
typedef enum mlajit_plan_tactic {
    MLAJIT_TACTIC_RULES = 0,      /* the planner's built-in rules (docs/kernels.md) */
    MLAJIT_TACTIC_TUNED = 1,      /* a tactic measured at the shape's own bucket */
    MLAJIT_TACTIC_TUNED_BELOW = 2 /* a tactic measured at the nearest bucket below the shape's */
} mlajit_plan_tactic;

/* The SMs a plan is made for without a device, and mlajit_plan_describe's
 * default: an H100's or H200's. */
#define MLAJIT_DEFAULT_SM_COUNT 132

/* What mlajit_plan_create would launch for this spec and geometry on a device of
 * sm_count SMs (0: MLAJIT_DEFAULT_SM_COUNT, an H100 or H200) and spec->arch ("" =
 * sm_90a), answered without CUDA and without compiling: for an auto spec the
 * kernel its plan switches to where the shape suits one (a short or long walk,
 * one tile per CTA, heads in groups; docs/kernels.md), else the spec's own, with
 * the split count and grid, into *out up to its struct_size. mlajit_plan_create
 * runs the spec's own kernel instead where the other cannot be had (no JIT, and
 * neither a pack nor the cache holds it). Without a context this answers by the
 * rules (outline.tactic is MLAJIT_TACTIC_RULES): a plan on a GPU with tactics
 * may choose otherwise, which mlajit_plan_get_outline says. On an invalid spec or shape, a status
 * naming the field; *out is then unchanged. */
MLAJIT_API int mlajit_plan_describe(const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape, int sm_count,
                                    mlajit_plan_outline *out);

/* mlajit_plan_describe as mlajit_plan_create in ctx would choose: on its device's
 * SMs and arch (spec->arch "" = the context's), with its tactics (outline.tactic
 * says whether one chose; see mlajit_plan_tactic), without compiling; the kernel
 * named is the one the plan runs when it can be had. Reads the packs and the
 * cache (no CUDA call), so it may be called during stream capture. */
MLAJIT_API int mlajit_plan_describe_in_context(mlajit_context *ctx, const mlajit_kernel_spec *spec,
                                               const mlajit_decode_shape *shape, mlajit_plan_outline *out);

/* What a plan launches: its kernel, split count and grid, and whether a tactic
 * chose them (outline.tactic), into *out up to its struct_size. A NULL plan or
 * out, or a struct_size below 1.0's, is MLAJIT_ERR_INVALID_ARGUMENT. */
MLAJIT_API int mlajit_plan_get_outline(const mlajit_plan *plan, mlajit_plan_outline *out);

/* ------------------------------------------------------------------------- */
/* Tuning: measured choices (docs/tuning.md)                                   */
/* ------------------------------------------------------------------------- */

/* The buckets to tune: the product of its lists. A topk or row value is a
 * bucket's lower edge, rounded down to a power of two (rows: batch x s_q). Every
 * list may be left NULL / 0 for the production grid's. */
typedef struct mlajit_tune_grid {
    size_t struct_size;             /* sizeof(mlajit_tune_grid): MLAJIT_TUNE_GRID_INIT */
    const mlajit_model *models;     int num_models;       /* default V3.2, DSV4 (none with layouts) */
    const int *head_counts;         int num_head_counts;  /* default 8, 16, 32, 64, 128 */
    const int *page_sizes;          int num_page_sizes;   /* default 64, 256 */
    const unsigned *feature_sets;   int num_feature_sets; /* default {0}: no features */
    const int *topks;               int num_topks;        /* default 128, 256, ..., 2048 */
    const int *rows;                int num_rows;         /* default 1, 2, 4, ..., 4096 */
    const int *extra_topks;         int num_extra_topks;  /* default {0}: no extra cache */
    int extra_page_size;            /* the extra cache's page size with extra topks; 0: 64 */
    /* Added after 1.0: */
    const mlajit_layout *layouts;   int num_layouts;      /* custom layouts, after the models (default none;
                                                             a named model's layout tunes as that model) */
} mlajit_tune_grid;

typedef struct mlajit_tune_report {
    size_t struct_size; /* sizeof(mlajit_tune_report), set by the caller: MLAJIT_TUNE_REPORT_INIT */
    int buckets;        /* in the grid (inside the envelope) */
    int buckets_done;   /* tuned to the end */
    int stored;         /* tactic records written */
    int timed;          /* candidates timed */
    int dropped;        /* of those, stopped after a short look (1.2x the best so far) */
    int pruned;         /* split counts past their kernel's turn, not timed */
    int failed_checks;  /* (kernel, split count) pairs that failed the reference check */
    int deadline_hit;   /* 1: the budget ran out before the last bucket */
    double seconds;     /* the whole call */
} mlajit_tune_report;

/* Measure, on ctx's GPU, which kernel and split count serve each bucket of grid
 * fastest (docs/tuning.md: every candidate timed by CUDA-graph replay on caches
 * in HBM with fresh indices, the winner checked against the fp64 reference) and
 * store each winner as a tactic record in ctx's writable cache, where plans of
 * this GPU take it (mlajit_plan_tactic). No candidate starts after `seconds`; a
 * bucket cut short keeps the rules (0: nothing is tuned). Progress goes to the
 * log's info level (mlajit_set_log_handler). report (may be NULL) gets the
 * counts, also on failure. Needs a device (MLAJIT_ERR_NO_DEVICE) and a writable
 * cache (MLAJIT_ERR_CACHE); never call it under stream capture. Plans made on
 * ctx by other threads meanwhile take tactics as before (the tuner plans its
 * rules' candidates without them). Takes minutes for the default grid. */
MLAJIT_API int mlajit_tune(mlajit_context *ctx, const mlajit_tune_grid *grid, double seconds,
                           mlajit_tune_report *report);

/* ------------------------------------------------------------------------- */
/* Decode                                                                     */
/* ------------------------------------------------------------------------- */

/* One KV cache: pages of page_size tokens, page p at data + p * page_stride.
 * Embedded by value in mlajit_decode_args, so it has no struct_size and never
 * changes. */
typedef struct mlajit_cache_view {
    const void *data;     /* device pointer, 16-byte aligned */
    int64_t page_stride;  /* bytes; >= mlajit_min_page_stride(), multiple of 16 */
    int64_t num_pages;    /* indices at or past num_pages * page_size are skipped */
} mlajit_cache_view;

/* Strides are in elements. A stride of 0 means dense over the dimensions inside
 * it: stride_h 0 is one row (d_qk or d_v; 1 for lse), stride_s 0 is h_q x
 * stride_h, stride_b 0 is s_q x stride_s (so all zeros is the packed layout).
 * Any order of the dimensions is allowed, but the rows of out and of lse must
 * not overlap: taken by increasing stride, each dimension of more than one
 * entry steps past the rows inside it. */
typedef struct mlajit_decode_args {
    size_t struct_size;          /* sizeof(mlajit_decode_args): MLAJIT_DECODE_ARGS_INIT */
    const void *q;               /* bf16 [b, s_q, h_q, d_qk], last dim contiguous, 16-byte aligned */
    int64_t q_stride_b, q_stride_s, q_stride_h;

    mlajit_cache_view kv;
    const int32_t *indices;      /* [b, s_q, topk] slots, -1 = skip */
    int64_t indices_stride_b, indices_stride_s;
    const int32_t *topk_length;  /* [b], with MLAJIT_FEATURE_TOPK_LENGTH (else ignored) */

    const float *attn_sink;      /* [h_q], with MLAJIT_FEATURE_SINK (else ignored) */

    mlajit_cache_view extra_kv;  /* with an extra cache (spec.extra_page_size > 0) */
    const int32_t *extra_indices; /* [b, s_q, extra_topk] */
    int64_t extra_indices_stride_b, extra_indices_stride_s;
    const int32_t *extra_topk_length; /* [b], with MLAJIT_FEATURE_EXTRA_TOPK_LENGTH */

    float sm_scale;              /* softmax scale (natural-log units), finite and > 0 */

    void *out;                   /* bf16 [b, s_q, h_q, d_v], last dim contiguous, 16-byte aligned */
    int64_t out_stride_b, out_stride_s, out_stride_h;
    float *lse;                  /* fp32 [b, s_q, h_q] natural log; NULL = not written */
    int64_t lse_stride_b, lse_stride_s, lse_stride_h;

    void *workspace;             /* device memory, >= mlajit_plan_workspace_size() */
    size_t workspace_size;
} mlajit_decode_args;

/* Validate the arguments, then enqueue the decode on stream (a CUstream; NULL =
 * the legacy default stream). On any validation failure nothing is launched and
 * out is not written. A split plan enqueues two kernels, the main kernel and the
 * combine. From sm_90 each is launched as a programmatic dependent of the kernel
 * before it on the stream (the main kernel of whatever the caller enqueued last,
 * the combine of the main kernel): its launch overlaps that kernel's end, and it
 * waits on the device for that kernel's completion and writes before it reads
 * any argument, so inputs written by the previous kernel are safe. Stream capture
 * records programmatic graph edges. */
MLAJIT_API int mlajit_decode(const mlajit_plan *plan, const mlajit_decode_args *args, void *stream);

/* ------------------------------------------------------------------------- */
/* Host-side reference and quantizer (no GPU)                                  */
/* ------------------------------------------------------------------------- */

/* Quantize one token's d_qk bf16 values (raw 16-bit patterns) into its slot of a
 * page (page_base = start of the page, host memory) per SPEC.md's rule. */
MLAJIT_API int mlajit_quantize_token(mlajit_model model, const uint16_t *values_bf16,
                                     void *page_base, int page_size, int token_in_page);

/* Dequantize one token of a page into d_qk floats (the exact values the kernels
 * use: bf16(fp8 * scale) for the NoPE dims, the stored bf16 for RoPE). */
MLAJIT_API int mlajit_dequantize_token(mlajit_model model, const void *page_base, int page_size,
                                       int token_in_page, float *out);

/* mlajit_quantize_token and mlajit_dequantize_token for a layout described at run
 * time (checked with mlajit_layout_validate). With MLAJIT_SCALE_NONE the NoPE
 * values are stored as the bf16 they are. */
MLAJIT_API int mlajit_quantize_token_layout(const mlajit_layout *layout, const uint16_t *values_bf16,
                                            void *page_base, int page_size, int token_in_page);
MLAJIT_API int mlajit_dequantize_token_layout(const mlajit_layout *layout, const void *page_base, int page_size,
                                              int token_in_page, float *out);

/* The SPEC.md operation in double precision on host memory. args holds host
 * pointers (its out, lse and workspace fields are ignored); writes out_ref
 * [b, s_q, h_q, d_v] and lse_ref [b, s_q, h_q] contiguous. */
MLAJIT_API int mlajit_reference_decode(const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape,
                                       const mlajit_decode_args *args, double *out_ref, double *lse_ref);

#ifdef __cplusplus
}
#endif
#endif /* MLAJIT_H */
