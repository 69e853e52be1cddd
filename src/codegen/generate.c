/* The generator: a resolved spec -> CUDA C++ source. It writes one config block
 * (every constant the kernels are specialized on) and appends the embedded
 * templates, which read nothing but that block. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "codegen/codegen.h"
#include "codegen/kernel_abi.h"
#include "codegen/templates.h"
#include "common/alloc.h"
#include "common/error.h"
#include "common/strbuf.h"

/* kCombineStagedSplits: the split rows the combine copies into shared memory per
 * round (d_v fp32 each: 64 KB for 32 splits of 512 dims). */
enum { kCombineThreads = 128, kCombineStagedSplits = 32, kRowPad = 8 };

/* sm90-staged is the sm90 kernel with its output staged (kStagedOutput);
 * sm90-unpaired, the sm90 kernel without the CTA pair */
static int is_sm90(const mlajit_kernel_spec *r) { return mlajit_variant_is_sm90(r->variant); }
static int is_sliced(const mlajit_kernel_spec *r) { return r->variant == MLAJIT_VARIANT_SLICED; }
static int is_narrow(const mlajit_kernel_spec *r) { return mlajit_variant_is_narrow(r->variant); }
static int is_scores(const mlajit_kernel_spec *r) { return r->variant == MLAJIT_VARIANT_SM90_NARROW_SCORES; }
static int is_wgmma(const mlajit_kernel_spec *r) { return mlajit_variant_is_wgmma(r->variant); }

/* Row strides (elements) of the score/partial-score and P buffers. The sliced
 * kernel's partial rows are 8 mod 32 floats apart: its 8-byte fragment stores of
 * rows g = 0..3 (one half-warp) then fill 32 distinct banks. */
static int score_stride(const mlajit_kernel_spec *r) { return r->tile + (is_sliced(r) ? 8 : 4); }
static int prob_stride(const mlajit_kernel_spec *r) { return r->tile + kRowPad; }

/* Row stride (bf16) of Q (and the portable kernel's K) in shared memory. The
 * sliced kernel keeps only the NoPE dims there, rows 4 mod 16 elements apart: a
 * half-warp's 8-byte fragment reads (rows g = 0..3, pairs q = 0..3) then hit 32
 * distinct banks. */
static int qk_stride(const mlajit_kernel_spec *r, const mlajit_model_desc *d)
{
    return is_sliced(r) ? d->d_nope + 4 : d->d_qk + kRowPad;
}

static int align16(int x) { return (x + 15) & ~15; }

/* Shared-memory map of the portable kernel, in bytes from the dynamic base. */
typedef struct smem_map {
    int q, k, scores, probs, row_max, row_sum, row_alpha, token_row, token_scale, token_valid, barriers;
    int staging, staging_bytes, stages, total;
    int producer_groups; /* sm90-narrow: its producer warp groups */
} smem_map;

static void portable_smem_map(const mlajit_model_desc *d, int tile, int heads, smem_map *m)
{
    int qk_stride = d->d_qk + kRowPad; /* bf16 elements; the pad spreads rows over banks */
    int off = 0;
    memset(m, 0, sizeof *m);
    m->q = off;           off += align16(heads * qk_stride * 2);
    m->k = off;           off += align16(tile * qk_stride * 2);
    m->scores = off;      off += align16(heads * (tile + 4) * 4);
    m->probs = off;       off += align16(heads * (tile + kRowPad) * 2);
    m->row_max = off;     off += align16(heads * 4);
    m->row_sum = off;     off += align16(heads * 4);
    m->row_alpha = off;   off += align16(heads * 4);
    m->token_row = off;   off += align16(2 * tile * 8); /* double-buffered: [2][tile] */
    m->token_scale = off; off += align16(2 * tile * 8);
    m->token_valid = off; off += align16(2 * tile * 4);
    m->total = off;
}

/* Shared-memory map of the sm90 kernel, in bytes from the 1024-aligned base (the
 * total reserves the alignment slack): Q and two K tile buffers, each d_qk / 64
 * swizzled blocks of 64 rows x 128 bytes; P (64 heads x one 64-candidate block);
 * the per-row rescale factors and final statistics; the buffers' validity tables;
 * the mbarriers of a CTA pair's exchange (two per K buffer, 8 bytes each). */
static void sm90_smem_map(const mlajit_model_desc *d, int tile, int heads, smem_map *m)
{
    int operand = d->d_qk / 64 * 64 * 128;
    int off = 0;
    memset(m, 0, sizeof *m);
    m->q = off;           off += operand;
    m->k = off;           off += 2 * operand;
    m->probs = off;       off += heads * tile * 2;
    m->row_alpha = off;   off += align16(heads * 4);
    m->row_max = off;     off += align16(heads * 4);
    m->row_sum = off;     off += align16(heads * 4);
    m->token_valid = off; off += align16(2 * tile * 4);
    m->barriers = off;    off += 2 * 2 * 8;
    m->total = off + 1024;
}

/* sm90-narrow's row ring: where the rows hold their scales (V32's layout), each
 * producer group's round arrives by bulk copy (the TMA engine) into shared memory
 * instead of into registers: neither the registers nor the LSU hold or move the
 * bytes in flight. One round per group where it fits beside Q and the two K tile
 * buffers (at V32's 656-byte rows, h_q <= 32); more never fit there, and a single
 * K buffer that made room for three lost. Measured with its reads fenced: 4-6%
 * faster at 16 and 32 heads on the long walks, a tie at 8 heads with the registers
 * two tiles ahead. sm90-narrow-long's third producer group brings a third slot,
 * which fits at 16 heads and fewer (232,368 bytes at 16; 242,736 at 24). DSV4's rows
 * (scales in the page footer, 8 bytes, which no bulk copy moves) stay in
 * registers: in the ring, with the footer words loaded beside each copy, they were
 * 10-12% slower at 8 and 16 heads (bench/HISTORY.md, "The row ring" and "The ring's
 * fence"). */
enum { kNarrowTokensPerRound = 32, kNarrowRingRounds = 1, kNarrowMaxProducerGroups = 3 };

/* Shared-memory map of the sm90-narrow kernel, from the 1024-aligned base: Q
 * (d_qk / 64 swizzled blocks of `heads` rows x 128 bytes) and two K tile buffers
 * as sm90's; P (`heads` rows x one 64-candidate block); the consumer's four warps'
 * column maxima of a tile (at the end, their column sums); the buffers' validity
 * flags (bytes); then, where it fits, the row ring: an mbarrier per slot and the
 * slots, kNarrowRingRounds rounds of rows per producer group. The heads' final
 * statistics have no place of their own: written after the walk, they follow the
 * output staged over the K buffers (the template places them; the 128 bytes at 16
 * heads are what a third ring slot lacked). */
static void sm90_narrow_smem_map(const mlajit_kernel_spec *r, const mlajit_model_desc *d, smem_map *m)
{
    int heads = r->heads_per_cta, tile = r->tile;
    int operand = d->d_qk / 64 * 64 * 128;
    int off = 0;
    memset(m, 0, sizeof *m);
    m->q = off;           off += d->d_qk / 64 * heads * 128;
    m->k = off;           off += 2 * operand;
    m->probs = off;       off += heads * tile * 2;
    m->scores = off;      off += align16(4 * heads * 4);
    m->token_valid = off; off += align16(2 * tile);
    m->producer_groups = 2;
    if (d->scale_place == MLAJIT_SCALES_INLINE) {
        /* the ring: sm90-narrow-long's third producer group where its slot fits
         * too (the K buffers' mbarriers come with it: the groups no longer take
         * every tile) */
        int max_groups = r->variant == MLAJIT_VARIANT_SM90_NARROW_LONG ? kNarrowMaxProducerGroups : 2;
        for (int groups = max_groups; groups >= 2; groups--) {
            int slots = groups * kNarrowRingRounds, buffer_bars = groups > 2 ? 2 : 0;
            int ring = slots * kNarrowTokensPerRound * d->row_bytes;
            if (off + (slots + buffer_bars) * 8 + ring + 1024 > mlajit_arch_max_smem(r->arch))
                continue;
            m->producer_groups = groups;
            m->barriers = off;    off += align16((slots + buffer_bars) * 8);
            m->staging = off;     m->staging_bytes = ring;
            m->stages = kNarrowRingRounds;
            off += ring;
            break;
        }
    }
    m->total = off + 1024;
}

/* Shared-memory map of sm90-narrow-scores, from the 1024-aligned base: two V
 * buffers (d_v / 64 swizzled blocks of 64 rows x 128 bytes: group x's tiles), Q
 * (d_qk / 64 blocks of `heads` rows, in the A fragments' k order), two P buffers
 * (`heads` rows x 64 candidates), the groups' column maxima, running maxima, column
 * sums and last maxima (20 x heads floats), the ring's mbarriers (full and empty
 * for each of a slot's two parts), then the ring: a tile of rows per score group. */
enum { kScoresGroups = 2 };
static void sm90_scores_smem_map(const mlajit_kernel_spec *r, const mlajit_model_desc *d, smem_map *m)
{
    int heads = r->heads_per_cta, tile = r->tile;
    int off = 0;
    memset(m, 0, sizeof *m);
    m->k = off;           off += kScoresGroups * d->d_v / 64 * 64 * 128;
    m->q = off;           off += d->d_qk / 64 * heads * 128;
    m->probs = off;       off += kScoresGroups * heads * tile * 2;
    m->scores = off;      off += align16(20 * heads * 4);
    m->barriers = off;    off += align16(kScoresGroups * 2 * 2 * 8);
    m->token_valid = off; off += align16(kScoresGroups * tile);
    m->staging = off;     m->staging_bytes = kScoresGroups * tile * d->row_bytes;
    m->stages = 1;
    off += m->staging_bytes;
    m->producer_groups = kScoresGroups;
    m->total = off + 1024;
}

int mlajit_narrow_scores_fits(const mlajit_kernel_spec *r)
{
    const mlajit_model_desc *d = mlajit_model_describe(r->model);
    smem_map m;
    if (!d || r->tile != 64 || (r->heads_per_cta != 8 && r->heads_per_cta != 16) ||
        d->scale_place != MLAJIT_SCALES_INLINE || d->scale_format == MLAJIT_SCALE_FP32 || d->quant_tile % 64 != 0)
        return 0;
    sm90_scores_smem_map(r, d, &m);
    return m.total <= mlajit_arch_max_smem(r->arch);
}

/* The sliced kernel's copy ring: three stages (tiles t .. t + 2) of the tile's
 * rows as they are in the cache, rows 64 mod 128 bytes apart (bank-conflict-free
 * 16-byte reads of rows g, g + 1). */
enum { kSlicedStages = 3 };
static int sliced_stage_row_bytes(const mlajit_model_desc *d) { return (d->row_bytes + 63) / 128 * 128 + 64; }
static int sliced_stage_bytes(const mlajit_kernel_spec *r, const mlajit_model_desc *d)
{
    return r->tile * sliced_stage_row_bytes(d);
}

/* Shared-memory map of the sliced kernel: no K tile (each warp keeps its slice of
 * the candidates in registers): Q's NoPE dims, the eight warps' partial scores, P, the row
 * statistics, three token tables (tiles t, t + 1, t + 2) with their live-candidate
 * masks, and the copy ring. */
static void sliced_smem_map(const mlajit_kernel_spec *r, const mlajit_model_desc *d, smem_map *m)
{
    int heads = r->heads_per_cta, tile = r->tile;
    int off = 0;
    memset(m, 0, sizeof *m);
    m->q = off;         off += align16(heads * qk_stride(r, d) * 2);
    m->scores = off;    off += align16(8 * heads * score_stride(r) * 4);
    m->probs = off;     off += align16(heads * prob_stride(r) * 2);
    m->row_max = off;   off += align16(heads * 4);
    m->row_sum = off;   off += align16(heads * 4);
    m->row_alpha = off; off += align16(heads * 4);
    m->token_row = off; off += align16(3 * tile * 8);
    m->token_valid = off; off += align16(3 * 4); /* per table: bit c = candidate c has a row */
    m->staging = off;   m->staging_bytes = kSlicedStages * sliced_stage_bytes(r, d);
    m->stages = kSlicedStages;
    off += m->staging_bytes;
    m->total = off;
}

static void kernel_smem_map(const mlajit_kernel_spec *r, const mlajit_model_desc *d, smem_map *m)
{
    if (is_sm90(r))
        sm90_smem_map(d, r->tile, r->heads_per_cta, m);
    else if (is_scores(r))
        sm90_scores_smem_map(r, d, m);
    else if (is_narrow(r))
        sm90_narrow_smem_map(r, d, m);
    else if (is_sliced(r))
        sliced_smem_map(r, d, m);
    else
        portable_smem_map(d, r->tile, r->heads_per_cta, m);
}

int mlajit_head_groups_pair(int h_q, int heads_per_cta)
{
    return heads_per_cta > 0 && (h_q + heads_per_cta - 1) / heads_per_cta % 2 == 0;
}

/* sm90 at two head groups: the pair of CTAs that share a (row, split) form a
 * cluster and each gathers and dequantizes half of every tile for both (FlashMLA's
 * h_q 128 design): the producer, which bounds the kernel, does half the work.
 * sm90-unpaired leaves the pair out (its start-up costs more than half a tile's
 * gather saves where a CTA walks one tile). */
static int cluster_ctas(const mlajit_kernel_spec *r)
{
    return is_sm90(r) && r->variant != MLAJIT_VARIANT_SM90_UNPAIRED &&
                   mlajit_head_groups_pair(r->h_q, r->heads_per_cta)
               ? 2
               : 1;
}

int mlajit_narrow_producer_groups(const mlajit_kernel_spec *r)
{
    const mlajit_model_desc *d = mlajit_model_describe(r->model);
    smem_map m;
    if (!d || !is_narrow(r) || r->tile <= 0 || r->heads_per_cta <= 0)
        return 2;
    sm90_narrow_smem_map(r, d, &m);
    return m.producer_groups;
}

/* Portable: eight warps up to 32 heads per CTA; sixteen at 64, so each warp's share
 * of the output accumulator (64 heads x 32 value dims) stays in 64 registers.
 * sm90: three warp groups (two consumers, one producer); sm90-narrow one consumer
 * and the map's producer groups (two, or three where a third ring slot fits);
 * sm90-narrow-scores a value group, the map's two score groups and a copier.
 * sliced: eight warps, one 64-dim slice of V each. */
static int threads_for(const mlajit_kernel_spec *r, const smem_map *m)
{
    if (is_scores(r))
        return 128 * (2 + m->producer_groups);
    if (is_narrow(r))
        return 128 * (1 + m->producer_groups);
    if (is_wgmma(r))
        return 384;
    if (is_sliced(r))
        return 256;
    return r->heads_per_cta > 32 ? 512 : 256;
}

/* Two CTAs per SM double the bytes in flight of the memory-bound one-row-tile
 * kernels when their shared memory fits twice. The register cap that implies
 * (128) holds the tile prefetch of one warp's candidates: ptxas (CUDA 13.0,
 * sm_90a) spills nothing for V32, DSV4 and GLM_NSA at 16 heads per CTA (portable)
 * nor for the power-of-two scales of V32 (sliced: arbitrary fp32 scales take the
 * exact dequantization at every use, which does not fit). */
static int min_blocks_per_sm(const mlajit_kernel_spec *r, const smem_map *m)
{
    int fits = 2 * m->total <= mlajit_arch_max_smem(r->arch);
    if (is_sliced(r) && mlajit_model_describe(r->model)->scale_format == MLAJIT_SCALE_FP32)
        return 1;
    return !is_wgmma(r) && r->heads_per_cta == 16 && fits ? 2 : 1;
}

int mlajit_codegen_layout(const mlajit_kernel_spec *r, mlajit_kernel_layout *layout)
{
    const mlajit_model_desc *d = mlajit_model_describe(r->model);
    if (!d || !layout || r->tile <= 0 || r->heads_per_cta <= 0)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "layout needs a resolved spec (tile and heads_per_cta set)");
    smem_map m;
    kernel_smem_map(r, d, &m);
    layout->threads = threads_for(r, &m);
    layout->tile = r->tile;
    layout->heads_per_cta = r->heads_per_cta;
    layout->smem_bytes = m.total;
    layout->combine_threads = kCombineThreads;
    layout->combine_staged_splits = kCombineStagedSplits;
    layout->combine_bytes_per_split = d->d_v * (int)sizeof(float);
    layout->blocks_per_sm = min_blocks_per_sm(r, &m);
    layout->cluster_ctas = cluster_ctas(r);
    layout->dependent_launch = mlajit_arch_has_grid_dependency(r->arch);
    layout->single_split = r->variant == MLAJIT_VARIANT_SM90_STAGED;
    return MLAJIT_OK;
}

int mlajit_combine_smem_bytes(const mlajit_kernel_layout *layout, int num_splits)
{
    int staged = num_splits < layout->combine_staged_splits ? num_splits : layout->combine_staged_splits;
    return staged * layout->combine_bytes_per_split;
}

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
    return cluster_ctas(r) == 2 && d->scale_place == MLAJIT_SCALES_PAGE_FOOTER; /* a pair is sm90's */
}

/* The config block: every constant the templates are specialized on, as code
 * only. The source is the cache key, so what the constants mean is said here, not
 * in the emitted text: a comment there would tie every key to its wording. */
static void emit_config(mlajit_strbuf *b, const mlajit_kernel_spec *r, const mlajit_model_desc *d,
                        const char *spec_string)
{
    smem_map m;
    kernel_smem_map(r, d, &m);
    int scale_offset = d->scale_place == MLAJIT_SCALES_INLINE ? d->d_nope : 0;
    int rope_offset = d->d_nope + (d->scale_place == MLAJIT_SCALES_INLINE ? d->num_scales * 4 : 0);
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
    mlajit_strbuf_printf(b, "constexpr bool kStagedOutput = %s;\n", TF(r->variant == MLAJIT_VARIANT_SM90_STAGED));
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
    mlajit_strbuf_printf(b, "constexpr int kThreads = %d;\n", threads_for(r, &m));
    mlajit_strbuf_printf(b, "constexpr int kProducerGroups = %d;\n", m.producer_groups);
    mlajit_strbuf_printf(b, "constexpr int kWarps = kThreads / 32;\n");
    mlajit_strbuf_printf(b, "constexpr int kTile = %d;\n", r->tile);
    mlajit_strbuf_printf(b, "constexpr int kHeadsPerCta = %d;\n", r->heads_per_cta);
    mlajit_strbuf_printf(b, "constexpr int kMinBlocksPerSM = %d;\n", min_blocks_per_sm(r, &m));
    int cluster = cluster_ctas(r);
    mlajit_strbuf_printf(b, "constexpr int kClusterCtas = %d;\n", cluster);
    mlajit_strbuf_printf(b, "constexpr int kQKStride = %d;\n", qk_stride(r, d));
    mlajit_strbuf_printf(b, "constexpr int kScoreStride = %d;\n", score_stride(r));
    mlajit_strbuf_printf(b, "constexpr int kProbStride = %d;\n", prob_stride(r));
    mlajit_strbuf_printf(b, "constexpr int kCombineThreads = %d;\n", kCombineThreads);
    mlajit_strbuf_printf(b, "constexpr int kCombineStagedSplits = %d;\n", kCombineStagedSplits);
    mlajit_strbuf_printf(b, "constexpr int kMaxSplits = %d;\n", MLAJIT_MAX_SPLITS);
    mlajit_strbuf_printf(b, "constexpr bool kDependentLaunch = %s;\n", TF(mlajit_arch_has_grid_dependency(r->arch)));
    /* the shared-memory map (bytes); the staging area is the sliced kernel's
     * tiles and sm90-narrow's rounds per producer; kStageRowBytes a staged row's
     * stride (sliced) */
    mlajit_strbuf_printf(b, "constexpr int kSmemQ = %d, kSmemK = %d, kSmemScores = %d, kSmemProbs = %d;\n", m.q, m.k,
                         m.scores, m.probs);
    mlajit_strbuf_printf(b, "constexpr int kSmemRowMax = %d, kSmemRowSum = %d, kSmemRowAlpha = %d;\n", m.row_max,
                         m.row_sum, m.row_alpha);
    mlajit_strbuf_printf(b, "constexpr int kSmemTokenRow = %d, kSmemTokenScale = %d, kSmemTokenValid = %d;\n",
                         m.token_row, m.token_scale, m.token_valid);
    mlajit_strbuf_printf(b, "constexpr int kSmemBarriers = %d;\n", m.barriers);
    mlajit_strbuf_printf(b, "constexpr int kSmemStaging = %d, kSmemStagingBytes = %d, kStagingStages = %d;\n",
                         m.staging, m.staging_bytes, m.stages);
    mlajit_strbuf_printf(b, "constexpr int kStageRowBytes = %d;\n", sliced_stage_row_bytes(d));
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
    /* the shared templates around the variant's kernel (the sm90 family's kernels
     * share sm90_common) */
    const char *kernel = is_sm90(&r)     ? "decode_sm90"
                         : is_scores(&r) ? "decode_sm90_scores"
                         : is_narrow(&r) ? "decode_sm90_narrow"
                         : is_sliced(&r) ? "decode_sliced"
                                         : "decode_portable";
    const char *names[] = {"prelude", "gather", is_wgmma(&r) ? "sm90_common" : "", kernel, "combine"};
    enum { kParts = sizeof names / sizeof names[0] };
    const mlajit_template *parts[kParts] = {0};
    size_t templates_bytes = 0;
    for (size_t k = 0; k < kParts; k++) {
        if (!names[k][0])
            continue;
        for (size_t i = 0; i < mlajit_template_count && !parts[k]; i++)
            if (strcmp(mlajit_templates[i].name, names[k]) == 0)
                parts[k] = &mlajit_templates[i];
        if (!parts[k])
            return mlajit_fail(MLAJIT_ERR_INTERNAL, "template '%s' is not embedded (build)", names[k]);
        templates_bytes += parts[k]->size;
    }
    const mlajit_model_desc *d = mlajit_model_describe(r.model);
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
