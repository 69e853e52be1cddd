/* The generator: a resolved spec -> CUDA C++ source. It writes one config block
 * (every constant the kernels are specialized on) and appends the embedded
 * templates, which read nothing but that block. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "codegen/codegen.h"
#include "codegen/families.h"
#include "codegen/kernel_abi.h"
#include "codegen/templates.h"
#include "common/alloc.h"
#include "common/error.h"
#include "common/strbuf.h"

/* kPvInFlight (sm90 CTA pair): the score group leaves a tile's P V in flight while
 * it issues the next tile's S, and frees the tile's buffer when P V completes. That
 * shortens the score group's chain and lengthens the loop the producer waits on
 * (its buffer-free waits grew 2.2-2.6x under ncu), so it pays only where the score
 * group alone bounds the kernel. On the H200 (bench/HISTORY.md, "P V in flight" and
 * "Why P V in flight loses") DSV4's pairs ran 5-6% faster; V3.2's pairs 0-13%
 * slower (the long walks most, whatever the loop's order or where the buffer was
 * freed), and DSV4 with one CTA per row 2-5% slower. So it is chosen for a pair
 * whose scales sit in a page footer: DSV4's lighter rows, where the producer is not
 * the critical role. The 16 registers it keeps live fit only the pair's score group. */
static int pv_in_flight(const mlajit_kernel_spec *r, const mlajit_model_desc *d)
{
    return mlajit_family_of(r->variant)->pairs && mlajit_family_cluster_ctas(r) == 2 &&
           d->scale_place == MLAJIT_SCALES_PAGE_FOOTER; /* a head-group pair: sm90's */
}

/* The config block: every constant the templates are specialized on, as code
 * only. The source is the cache key, so what the constants mean is said here, not
 * in the emitted text: a comment there would tie every key to its wording. */
static void emit_config(mlajit_strbuf *b, const mlajit_kernel_spec *r, const mlajit_model_desc *d,
                        const char *spec_string)
{
    const mlajit_family *f = mlajit_family_of(r->variant);
    mlajit_smem_map m;
    f->smem_map(r, d, &m);
    const int scale_offset = d->scale_offset, rope_offset = d->rope_offset; /* models.c's rule */
#define TF(x) ((x) ? "true" : "false")
    /* the spec the source was generated for, so that a content key names its spec
     * (a macro: a variable would be a device global, and the cubin would hold it) */
    mlajit_strbuf_printf(b, "#define MLAJIT_SPEC \"%s\"\n", spec_string);
    mlajit_strbuf_printf(b, "namespace cfg {\n");
    /* the model's KV-cache layout: query/key width, fp8-quantized dims, bf16 dims
     * stored verbatim, V = K[0 : kDV], NoPE dims per scale, the scale format (1
     * fp32 power of two, 2 fp32 arbitrary, 3 ue8m0), a token's row, per-token
     * bytes in the page footer, the inline scales' and the RoPE bytes' offsets in
     * the row */
    mlajit_strbuf_printf(b, "constexpr int kDQK = %d;\n", d->d_qk);
    mlajit_strbuf_printf(b, "constexpr int kDNope = %d;\n", d->d_nope);
    mlajit_strbuf_printf(b, "constexpr int kDRope = %d;\n", d->d_rope);
    mlajit_strbuf_printf(b, "constexpr int kDV = %d;\n", d->d_v);
    mlajit_strbuf_printf(b, "constexpr int kQuantTile = %d;\n", d->quant_tile);
    mlajit_strbuf_printf(b, "constexpr int kNumScales = %d;\n", d->num_scales);
    mlajit_strbuf_printf(b, "constexpr int kScaleFormat = %d;\n", (int)d->scale_format);
    mlajit_strbuf_printf(b, "constexpr bool kScalesInline = %s;\n", TF(d->scale_place == MLAJIT_SCALES_INLINE));
    mlajit_strbuf_printf(b, "constexpr int kRowBytes = %d;\n", d->row_bytes);
    mlajit_strbuf_printf(b, "constexpr int kFooterBytes = %d;\n", d->footer_bytes);
    mlajit_strbuf_printf(b, "constexpr int kScaleOffset = %d;\n", scale_offset);
    mlajit_strbuf_printf(b, "constexpr int kRopeOffset = %d;\n", rope_offset);
    /* the call shape and features; kStagedOutput: sm90's output rows through
     * shared memory (sm90-staged); kPvInFlight: the sm90 pair's P V in flight
     * behind the next S */
    mlajit_strbuf_printf(b, "constexpr int kHeads = %d;\n", r->h_q);
    mlajit_strbuf_printf(b, "constexpr int kPageSize = %d;\n", r->page_size);
    mlajit_strbuf_printf(b, "constexpr int kExtraPageSize = %d;\n", r->extra_page_size ? r->extra_page_size : 1);
    mlajit_strbuf_printf(b, "constexpr bool kHasExtra = %s;\n", TF(r->extra_page_size));
    mlajit_strbuf_printf(b, "constexpr bool kHasSink = %s;\n", TF(r->features & MLAJIT_FEATURE_SINK));
    mlajit_strbuf_printf(b, "constexpr bool kStagedOutput = %s;\n", TF(f->staged_output));
    mlajit_strbuf_printf(b, "constexpr bool kPvInFlight = %s;\n", TF(pv_in_flight(r, d)));
    mlajit_strbuf_printf(b, "constexpr bool kHasTopkLength = %s;\n", TF(r->features & MLAJIT_FEATURE_TOPK_LENGTH));
    mlajit_strbuf_printf(b, "constexpr bool kHasExtraTopkLength = %s;\n",
                         TF(r->features & MLAJIT_FEATURE_EXTRA_TOPK_LENGTH));
    /* tiles: kProducerGroups is sm90-narrow's producer warp groups (0 for the
     * others); kTile candidates per tile, kHeadsPerCta query heads per CTA;
     * kMinBlocksPerSM: one row tile of heads is bound by memory, so two CTAs per
     * SM keep twice the bytes in flight (registers capped at 128); kClusterCtas:
     * CTAs along the head groups that share tiles; kQKStride the shared-memory row
     * stride of Q and K tiles (bf16), kScoreStride (fp32) and kProbStride (bf16)
     * the score and P rows'; kCombineStagedSplits the split rows the combine
     * stages per round; kMaxSplits the split-KV splits a plan may use;
     * kDependentLaunch: each kernel may be launched before the grid ahead of it
     * ends (its launch hidden behind that grid), as it waits for that grid's
     * results itself */
    mlajit_strbuf_printf(b, "constexpr int kThreads = %d;\n", mlajit_family_threads(r, &m));
    mlajit_strbuf_printf(b, "constexpr int kProducerGroups = %d;\n", m.producer_groups);
    mlajit_strbuf_printf(b, "constexpr int kWarps = kThreads / 32;\n");
    mlajit_strbuf_printf(b, "constexpr int kTile = %d;\n", r->tile);
    mlajit_strbuf_printf(b, "constexpr int kHeadsPerCta = %d;\n", r->heads_per_cta);
    mlajit_strbuf_printf(b, "constexpr int kMinBlocksPerSM = %d;\n", mlajit_family_min_blocks_per_sm(r, &m));
    int cluster = mlajit_family_cluster_ctas(r);
    mlajit_strbuf_printf(b, "constexpr int kClusterCtas = %d;\n", cluster);
    mlajit_strbuf_printf(b, "constexpr int kQKStride = %d;\n", mlajit_family_qk_stride(d));
    mlajit_strbuf_printf(b, "constexpr int kScoreStride = %d;\n", mlajit_family_score_stride(r));
    mlajit_strbuf_printf(b, "constexpr int kProbStride = %d;\n", mlajit_family_prob_stride(r));
    mlajit_strbuf_printf(b, "constexpr int kCombineThreads = %d;\n", mlajit_combine_threads_of(d));
    mlajit_strbuf_printf(b, "constexpr int kCombineStagedSplits = %d;\n", mlajit_combine_staged_splits_of(d));
    mlajit_strbuf_printf(b, "constexpr int kMaxSplits = %d;\n", MLAJIT_MAX_SPLITS);
    mlajit_strbuf_printf(b, "constexpr bool kDependentLaunch = %s;\n", TF(mlajit_arch_has_grid_dependency(r->arch)));
    /* the shared-memory map (bytes); the staging area is the row rings of
     * sm90-narrow(-long) and sm90-narrow-scores. kStageRowBytes was the retired
     * sliced kernel's staged row stride: no template reads it, but every kernel's
     * source has it, and dropping it would change every cache key (and miss every
     * shipped pack); it goes with the next change that changes keys anyway */
    mlajit_strbuf_printf(b, "constexpr int kSmemQ = %d, kSmemK = %d, kSmemScores = %d, kSmemProbs = %d;\n", m.q, m.k,
                         m.scores, m.probs);
    mlajit_strbuf_printf(b, "constexpr int kSmemRowMax = %d, kSmemRowSum = %d, kSmemRowAlpha = %d;\n", m.row_max,
                         m.row_sum, m.row_alpha);
    mlajit_strbuf_printf(b, "constexpr int kSmemTokenRow = %d, kSmemTokenScale = %d, kSmemTokenValid = %d;\n",
                         m.token_row, m.token_scale, m.token_valid);
    mlajit_strbuf_printf(b, "constexpr int kSmemBarriers = %d;\n", m.barriers);
    mlajit_strbuf_printf(b, "constexpr int kSmemStaging = %d, kSmemStagingBytes = %d, kStagingStages = %d;\n",
                         m.staging, m.staging_bytes, m.stages);
    mlajit_strbuf_printf(b, "constexpr int kStageRowBytes = %d;\n", (d->row_bytes + 63) / 128 * 128 + 64);
    mlajit_strbuf_printf(b, "constexpr int kSmemBytes = %d;\n", m.total);
    mlajit_strbuf_printf(b, "}\n");
#undef TF
    /* a kernel attribute: the preprocessor, since attributes take no constexpr if */
    if (cluster > 1)
        mlajit_strbuf_printf(b, "#define MLAJIT_CLUSTER_DIMS __cluster_dims__(1, %d, 1)\n", cluster);
    else
        mlajit_strbuf_printf(b, "#define MLAJIT_CLUSTER_DIMS\n");
}

#define MLAJIT_STRINGIFY_(x) #x
#define MLAJIT_STRINGIFY(x) MLAJIT_STRINGIFY_(x)

/* The kernels' parameter block as CUDA, from kernel_abi.h's list: every field,
 * then the size and each field's offset checked against the list's, which
 * kernel_abi.h checks against this compiler's layout of the host struct. Text
 * made by the preprocessor, one string for every source. NVRTC's front end has
 * no __builtin_offsetof (nor a <cstddef> without an include path); __INTADDR__
 * is its built-in constant address, what its own offsetof is made of. */
#define PARAMS_FIELD(c_type, cuda_type, name, offset) "    " #cuda_type " " #name ";\n"
#define PARAMS_OFFSET_CHECK(c_type, cuda_type, name, offset)                                                     \
    "static_assert(__INTADDR__(&((DecodeParams*)0)->" #name ") == " #offset ", \"DecodeParams::" #name           \
    " is not at the host's byte " #offset "\");\n"
static const char params_block[] =
    "struct DecodeParams {\n" MLAJIT_DECODE_PARAMS_FIELDS(PARAMS_FIELD) "};\n"
    "static_assert(sizeof(DecodeParams) == " MLAJIT_STRINGIFY(MLAJIT_DECODE_PARAMS_BYTES)
    ", \"DecodeParams is not the host's " MLAJIT_STRINGIFY(MLAJIT_DECODE_PARAMS_BYTES) " bytes\");\n"
    MLAJIT_DECODE_PARAMS_FIELDS(PARAMS_OFFSET_CHECK);
#undef PARAMS_FIELD
#undef PARAMS_OFFSET_CHECK

uint64_t mlajit_decode_params_layout_hash(void)
{
#define DESCRIBE_FIELD(c_type, cuda_type, name, offset) #c_type "|" #cuda_type "|" #name "|" #offset ";"
    static const char layout[] =
        MLAJIT_DECODE_PARAMS_FIELDS(DESCRIBE_FIELD) "size " MLAJIT_STRINGIFY(MLAJIT_DECODE_PARAMS_BYTES);
#undef DESCRIBE_FIELD
    return XXH3_64bits(layout, sizeof layout - 1);
}

/* The templates' base text is what the keys of V3.2's and DSV4's kernels were
 * made from; their `#if MLAJIT_LAYOUTS` parts (resolved by the embedder,
 * tools/embed_templates.py) generalize them to no RoPE, to NoPE and value dims
 * past 512 (GLM53_NOPE, DOTS3_SWA) and to arbitrary fp32 scales (GLM_NSA too: the
 * exact dequantization's converted form), and their `#if MLAJIT_BF16` parts on
 * top of those read bf16 NoPE values (scales none). A layout takes the most
 * general edition it needs that a template has, falling back level by level
 * (bf16, layouts, the base text): the sources of the layouts an edition was
 * added after, hence every key and shipped pack, stay as they were. */
/* The editions, most general first; "" is the base text. */
static const char *const editions[] = {"bf16", "layouts", ""};
enum { kEditions = sizeof editions / sizeof editions[0] };

static const char *edition_of(const mlajit_model_desc *d)
{
    if (d->scale_format == MLAJIT_SCALE_NONE)
        return "bf16";
    return d->d_rope == 0 || d->d_nope > 512 || d->d_v > 512 || d->scale_format == MLAJIT_SCALE_FP32 ? "layouts" : "";
}

/* The edition of the family's own kernel template. decode_sm90_narrow.cu's
 * layouts blocks are its arbitrary-fp32-scale form (the register splits of the
 * exact dequantization; its base text refuses those scales), so the narrow
 * kernels of GLM_NSA, GLM53_NOPE and custom layouts of that kind take it, whatever
 * their shared templates take, and so do those with one K buffer (DOTS3_SWA: its
 * base text has two); every layout its base text served (V3.2, DSV4,
 * custom power-of-two ones with or without RoPE) keeps its source byte for byte;
 * bf16 rows take its bf16 edition (the producers copy by cp.async). */
static const char *kernel_edition_of(const mlajit_family *f, const mlajit_kernel_spec *r, const mlajit_model_desc *d)
{
    if (strcmp(f->kernel, "decode_sm90_narrow") == 0)
        return d->scale_format == MLAJIT_SCALE_NONE                                   ? "bf16"
               : d->scale_format == MLAJIT_SCALE_FP32 || mlajit_narrow_k_buffers(r) == 1 ? "layouts"
                                                                                      : "";
    return edition_of(d);
}

/* The template `name` in `edition` or, where it has none, the next lower one. */
static const mlajit_template *template_of(const char *name, const char *edition)
{
    int k = 0;
    while (k < kEditions - 1 && strcmp(editions[k], edition) != 0)
        k++;
    for (; k < kEditions; k++) {
        char wanted[64];
        snprintf(wanted, sizeof wanted, "%s%s%s", name, editions[k][0] ? ":" : "", editions[k]);
        for (size_t i = 0; i < mlajit_template_count; i++)
            if (strcmp(mlajit_templates[i].name, wanted) == 0)
                return &mlajit_templates[i];
    }
    return NULL;
}

int mlajit_generate_source(const mlajit_kernel_spec *spec, char **source)
{
    mlajit_kernel_spec r = MLAJIT_KERNEL_SPEC_INIT;
    if (!source)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "source: NULL");
    *source = NULL;
    int rc = mlajit_spec_resolve(spec, &r);
    if (rc)
        return rc;
    char spec_string[128];
    rc = mlajit_spec_string(&r, spec_string, sizeof spec_string);
    if (rc)
        return rc;
    /* the shared templates around the family's kernel (the wgmma kernels share
     * sm90_common) */
    const mlajit_family *f = mlajit_family_of(r.variant);
    const char *names[] = {"prelude", "gather", f->sm90_common ? "sm90_common" : "", f->kernel, "combine"};
    enum { kParts = sizeof names / sizeof names[0], kKernelPart = 3 };
    const mlajit_template *parts[kParts] = {0};
    const mlajit_model_desc *d = mlajit_spec_desc(&r);
    const char *edition = edition_of(d);
    size_t templates_bytes = 0;
    for (size_t k = 0; k < kParts; k++) {
        if (!names[k][0])
            continue;
        parts[k] = template_of(names[k], k == kKernelPart ? kernel_edition_of(f, &r, d) : edition);
        if (!parts[k])
            return mlajit_fail(MLAJIT_ERR_INTERNAL, "template '%s' is not embedded (build)", names[k]);
        templates_bytes += parts[k]->size;
    }
    mlajit_strbuf b = {0};
    /* one allocation (the config block is about 2 KB) */
    mlajit_strbuf_reserve(&b, sizeof params_block + templates_bytes + 4096);
    emit_config(&b, &r, d, spec_string);
    mlajit_strbuf_append(&b, params_block, sizeof params_block - 1);
    for (size_t k = 0; k < kParts; k++)
        if (parts[k])
            mlajit_strbuf_append(&b, parts[k]->text, parts[k]->size);
    if (b.failed) {
        free(b.data);
        return mlajit_fail_oom("the generated source of %s", spec_string);
    }
    *source = b.data;
    return MLAJIT_OK;
}
