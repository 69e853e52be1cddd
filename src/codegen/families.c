/* The kernel families: one row each (mlajit_families, at the end), holding what
 * is a fact about that family: its template, arch, threads, what it accepts and
 * chooses, its aliases, its shared-memory map, its CTA pairs and CTAs per SM,
 * and what it exposes to tuning and to auto's plans. The resolver (spec.c), the
 * generator (generate.c), the envelope and the planner read the rows; this file
 * reads only the model table and the targets below (families <- spec <-
 * generate). What each family is and when it wins: docs/kernels.md. */
#include <stdio.h>
#include <string.h>

#include "codegen/families.h"
#include "common/error.h"
#include "mlajit.h"

/* ---- targets ------------------------------------------------------------------ */

/* Targets the generator emits code for, with their opt-in shared memory per
 * block (bytes) and whether they have grid dependency control (sm_90 on:
 * griddepcontrol, programmatic dependent launch). The portable family needs
 * sm_80's mma.sync and cvt.bf16x2. */
static const struct arch_row {
    const char *name;
    int max_smem;
    int grid_dependency;
} arch_table[] = {
    {"sm_80", 166912, 0},   {"sm_86", 101376, 0},   {"sm_87", 166912, 0},   {"sm_89", 101376, 0},
    {"sm_90", 232448, 1},   {"sm_90a", 232448, 1},  {"sm_100", 232448, 1},  {"sm_100a", 232448, 1},
    {"sm_103", 232448, 1},  {"sm_103a", 232448, 1}, {"sm_120", 101376, 1},  {"sm_120a", 101376, 1},
};
#define ARCH_COUNT (sizeof arch_table / sizeof arch_table[0])

static const struct arch_row *arch_row_of(const char *arch)
{
    for (size_t i = 0; arch && i < ARCH_COUNT; i++)
        if (strcmp(arch_table[i].name, arch) == 0)
            return &arch_table[i];
    return NULL;
}

int mlajit_arch_max_smem(const char *arch)
{
    const struct arch_row *row = arch_row_of(arch);
    return row ? row->max_smem : 0;
}

int mlajit_arch_known(const char *arch) { return arch_row_of(arch) != NULL; }

int mlajit_arch_has_grid_dependency(const char *arch)
{
    const struct arch_row *row = arch_row_of(arch);
    return row ? row->grid_dependency : 0;
}

const char *mlajit_arch_list(void)
{
    return "sm_80, sm_86, sm_87, sm_89, sm_90, sm_90a, sm_100, sm_100a, sm_103, sm_103a, sm_120, sm_120a";
}

/* ---- shared-memory maps, strides --------------------------------------------- */

static int align16(int x) { return (x + 15) & ~15; }

/* Row strides (elements) in shared memory of Q and the portable kernel's K (bf16),
 * of the scores (fp32) and of P (bf16); the pads spread rows over banks. */
enum { kScorePad = 4 };
int mlajit_family_qk_stride(const mlajit_model_desc *d) { return d->d_qk + kRowPad; }
int mlajit_family_score_stride(const mlajit_kernel_spec *r) { return r->tile + kScorePad; }
int mlajit_family_prob_stride(const mlajit_kernel_spec *r) { return r->tile + kRowPad; }

/* Shared-memory map of the portable kernel, in bytes from the dynamic base. */
static void portable_smem_map(const mlajit_kernel_spec *r, const mlajit_model_desc *d, mlajit_smem_map *m)
{
    int tile = r->tile, heads = r->heads_per_cta;
    int qk_stride = mlajit_family_qk_stride(d);
    int off = 0;
    memset(m, 0, sizeof *m);
    m->q = off;           off += align16(heads * qk_stride * 2);
    m->k = off;           off += align16(tile * qk_stride * 2);
    m->scores = off;      off += align16(heads * mlajit_family_score_stride(r) * 4);
    m->probs = off;       off += align16(heads * mlajit_family_prob_stride(r) * 2);
    m->row_max = off;     off += align16(heads * 4);
    m->row_sum = off;     off += align16(heads * 4);
    m->row_alpha = off;   off += align16(heads * 4);
    m->token_row = off;   off += align16(2 * tile * 8); /* double-buffered: [2][tile] */
    m->token_scale = off; off += align16(2 * tile * 8);
    m->token_valid = off; off += align16(2 * tile * 4);
    m->total = off;
}

/* Shared-memory map of the sm90 kernels, in bytes from the 1024-aligned base (the
 * total reserves the alignment slack): Q and two K tile buffers, each
 * operand_dims / 64 swizzled blocks of 64 rows x 128 bytes; P (64 heads x one
 * 64-candidate block); the per-row rescale factors and final statistics; the
 * buffers' validity tables; `mbarriers` of 8 bytes. */
static void wgmma_smem_map(const mlajit_kernel_spec *r, int operand_dims, int mbarriers, mlajit_smem_map *m)
{
    int tile = r->tile, heads = r->heads_per_cta;
    int operand = operand_dims / 64 * 64 * 128;
    int off = 0;
    memset(m, 0, sizeof *m);
    m->q = off;           off += operand;
    m->k = off;           off += 2 * operand;
    m->probs = off;       off += heads * tile * 2;
    m->row_alpha = off;   off += align16(heads * 4);
    m->row_max = off;     off += align16(heads * 4);
    m->row_sum = off;     off += align16(heads * 4);
    m->token_valid = off; off += align16(2 * tile * 4);
    m->barriers = off;    off += align16(mbarriers * 8);
    m->total = off + 1024;
}

/* sm90's: operands of d_qk dims; the mbarriers of a CTA pair's exchange (two per
 * K buffer). */
static void sm90_smem_map(const mlajit_kernel_spec *r, const mlajit_model_desc *d, mlajit_smem_map *m)
{
    wgmma_smem_map(r, d->d_qk, 2 * 2, m);
}

/* sm90-split's: one CTA's dims, half the NoPE dims and the RoPE blocks (the rank
 * with fewer leaves its last blocks to the exchange of S), and five mbarriers
 * (decode_sm90_split.cu). */
static void split_smem_map(const mlajit_kernel_spec *r, const mlajit_model_desc *d, mlajit_smem_map *m)
{
    wgmma_smem_map(r, d->d_nope / 2 + d->d_rope, 5, m);
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
 * as sm90's, or one where two do not fit (DOTS3_SWA's 1088 dims: 139 KB a tile, Q
 * 35 KB at 16 heads; the template reads the count off the map, and its producers
 * then hold no whole round ahead); P (`heads` rows x one 64-candidate block); the
 * consumer's four warps' column maxima of a tile (at the end, their column sums);
 * the buffers' validity flags (bytes); with one K buffer past 8 heads, the rows'
 * heads' slots and their mbarriers (below); then, where it fits, the row ring: an
 * mbarrier per slot and the slots, kNarrowRingRounds rounds of rows per producer
 * group. The heads' final statistics have no place of their own: written after
 * the walk, they follow the output staged over the K buffers (the template places
 * them; the 128 bytes at 16 heads are what a third ring slot lacked). */
static void narrow_map_with_buffers(const mlajit_kernel_spec *r, const mlajit_model_desc *d, int k_buffers,
                                    mlajit_smem_map *m)
{
    int heads = r->heads_per_cta, tile = r->tile;
    int operand = d->d_qk / 64 * 64 * 128;
    int off = 0;
    memset(m, 0, sizeof *m);
    m->q = off;           off += d->d_qk / 64 * heads * 128;
    m->k = off;           off += k_buffers * operand;
    m->k_buffers = k_buffers;
    m->probs = off;       off += heads * tile * 2;
    m->scores = off;      off += align16(4 * heads * 4);
    m->token_valid = off; off += align16(2 * tile);
    m->producer_groups = 2;
    if (k_buffers == 1 && heads > 8 && d->d_rope > 0) {
        /* what is left takes the head of each round's rows by bulk copy, a round
         * ahead (an mbarrier per producer group): whole 64-byte steps of the
         * NoPE codes, as many as fit, for the 2 x 32 candidates of a tile (832
         * bytes a row at DOTS3_SWA's 16 heads: 5-7% faster there; at 8 heads,
         * where all 1024 fit and the tail is RoPE and scales alone, 9-10% slower
         * than the whole round in registers, so not taken: bench/NOTES.md 1d).
         * Only with RoPE, the kind run on the GPU: custom layouts without it
         * spilled 200-232 bytes in the producers this way (56-118 with the round
         * in registers; ptxas, CUDA 13.0), unmeasured */
        int rows = m->producer_groups * kNarrowTokensPerRound, bars = align16(m->producer_groups * 8);
        int left = mlajit_arch_max_smem(r->arch) - (off + bars + 1024);
        int per_row = left / rows / 64 * 64;
        if (per_row > d->d_nope)
            per_row = d->d_nope;
        if (per_row > 0) {
            m->barriers = off;    off += bars;
            m->staging = off;     m->staging_bytes = rows * per_row;
            off += m->staging_bytes;
        }
    }
    if (d->scale_place == MLAJIT_SCALES_INLINE) {
        /* the ring: sm90-narrow-long's third producer group where its slot fits
         * too (the K buffers' mbarriers come with it: the groups no longer take
         * every tile). With arbitrary fp32 scales at most 24 heads per CTA: their
         * producers need 104 registers, which leaves the consumer 200 of 512
         * threads' registers, and at 32 heads that spilled 160 bytes (a custom
         * layout of 528-byte rows, whose third slot fits there; ptxas, CUDA
         * 13.0; its power-of-two twin spills nothing at 216/96). No named
         * model's third slot fits at 32 heads. */
        int max_groups = r->variant == MLAJIT_VARIANT_SM90_NARROW_LONG &&
                                 (heads <= 24 || d->scale_format != MLAJIT_SCALE_FP32)
                             ? kNarrowMaxProducerGroups
                             : 2;
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

/* One K buffer only where it was run on the GPU: d_v past 512 with fp8 rows and
 * footer scales (DOTS3_SWA's kind: no row ring); elsewhere a map too large is
 * refused as it was. */
static void sm90_narrow_smem_map(const mlajit_kernel_spec *r, const mlajit_model_desc *d, mlajit_smem_map *m)
{
    narrow_map_with_buffers(r, d, 2, m);
    if (m->total > mlajit_arch_max_smem(r->arch) && d->d_v > 512 && d->scale_format != MLAJIT_SCALE_NONE &&
        d->scale_place == MLAJIT_SCALES_PAGE_FOOTER)
        narrow_map_with_buffers(r, d, 1, m);
}

/* Shared-memory map of sm90-narrow-scores, from the 1024-aligned base: two V
 * buffers (d_v / 64 swizzled blocks of 64 rows x 128 bytes: group x's tiles), Q
 * (d_qk / 64 blocks of `heads` rows, in the A fragments' k order), two P buffers
 * (`heads` rows x 64 candidates), the groups' column maxima, running maxima, column
 * sums and last maxima (20 x heads floats), the ring's mbarriers (full and empty
 * for each of a slot's two parts), then the ring: a tile of rows per score group. */
enum { kScoresGroups = 2 };
static void sm90_scores_smem_map(const mlajit_kernel_spec *r, const mlajit_model_desc *d, mlajit_smem_map *m)
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
    const mlajit_model_desc *d = mlajit_spec_desc(r);
    mlajit_smem_map m;
    if (!d || r->tile != 64 || (r->heads_per_cta != 8 && r->heads_per_cta != 16) ||
        d->scale_place != MLAJIT_SCALES_INLINE || d->scale_format == MLAJIT_SCALE_FP32 || d->quant_tile % 64 != 0)
        return 0;
    sm90_scores_smem_map(r, d, &m);
    return m.total <= mlajit_arch_max_smem(r->arch);
}

/* The narrow map of a spec of the narrow pair with its tile and head group set:
 * 1 and *m, else 0. */
static int narrow_map_of(const mlajit_kernel_spec *r, mlajit_smem_map *m)
{
    const mlajit_model_desc *d = mlajit_spec_desc(r);
    const mlajit_family *f = mlajit_family_of(r->variant);
    if (!d || !f || f->smem_map != sm90_narrow_smem_map || r->tile <= 0 || r->heads_per_cta <= 0)
        return 0;
    sm90_narrow_smem_map(r, d, m);
    return 1;
}

int mlajit_narrow_producer_groups(const mlajit_kernel_spec *r)
{
    mlajit_smem_map m;
    return narrow_map_of(r, &m) ? m.producer_groups : 2;
}

int mlajit_narrow_k_buffers(const mlajit_kernel_spec *r)
{
    mlajit_smem_map m;
    return narrow_map_of(r, &m) ? m.k_buffers : 2;
}

int mlajit_family_max_heads(const mlajit_family *f, const mlajit_model_desc *d)
{
    const int most = f ? f->max_heads_per_cta : 0;
    return d && d->d_v > 512 && most > MLAJIT_NARROW_WIDE_V_MAX_HEADS_PER_CTA ? MLAJIT_NARROW_WIDE_V_MAX_HEADS_PER_CTA
                                                                             : most;
}

int mlajit_head_groups_pair(int h_q, int heads_per_cta)
{
    return heads_per_cta > 0 && (h_q + heads_per_cta - 1) / heads_per_cta % 2 == 0;
}

/* ---- threads, CTAs per SM, pairs, the layout --------------------------------- */

int mlajit_family_threads(const mlajit_kernel_spec *r, const mlajit_smem_map *m)
{
    const mlajit_family *f = mlajit_family_of(r->variant);
    if (f->warp_groups_beside_producers)
        return 128 * (f->warp_groups_beside_producers + m->producer_groups);
    return f->threads_wide && r->heads_per_cta > 32 ? f->threads_wide : f->threads;
}

/* Two CTAs per SM double the bytes in flight of the memory-bound one-row-tile
 * kernel (portable) when its shared memory fits twice. The register cap that
 * implies (128) holds the tile prefetch of one warp's candidates: ptxas (CUDA
 * 13.0, sm_90a) spills nothing for V32, DSV4 and GLM_NSA at 16 heads per CTA. */
int mlajit_family_min_blocks_per_sm(const mlajit_kernel_spec *r, const mlajit_smem_map *m)
{
    const mlajit_family *f = mlajit_family_of(r->variant);
    int fits = 2 * m->total <= mlajit_arch_max_smem(r->arch);
    int scales_ok = (f->two_blocks_scales & MLAJIT_SCALES(mlajit_spec_desc(r)->scale_format)) != 0;
    return scales_ok && r->heads_per_cta == 16 && fits ? 2 : 1;
}

/* sm90 at two head groups: the pair of CTAs that share a (row, split) form a
 * cluster and each gathers and dequantizes half of every tile for both (FlashMLA's
 * h_q 128 design): the producer, which bounds the kernel, does half the work. */
int mlajit_family_cluster_ctas(const mlajit_kernel_spec *r)
{
    const mlajit_family *f = mlajit_family_of(r->variant);
    if (f->dim_halves)
        return f->dim_halves;
    return f->pairs && mlajit_head_groups_pair(r->h_q, r->heads_per_cta) ? 2 : 1;
}

int mlajit_codegen_layout(const mlajit_kernel_spec *r, mlajit_kernel_layout *layout)
{
    const mlajit_model_desc *d = mlajit_spec_desc(r);
    if (!d || !layout || r->tile <= 0 || r->heads_per_cta <= 0 || !mlajit_family_of(r->variant))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "layout needs a resolved spec (tile and heads_per_cta set)");
    const mlajit_family *f = mlajit_family_of(r->variant);
    mlajit_smem_map m;
    f->smem_map(r, d, &m);
    layout->threads = mlajit_family_threads(r, &m);
    layout->tile = r->tile;
    layout->heads_per_cta = r->heads_per_cta;
    layout->smem_bytes = m.total;
    layout->combine_threads = mlajit_combine_threads_of(d);
    layout->combine_staged_splits = mlajit_combine_staged_splits_of(d);
    layout->combine_bytes_per_split = d->d_v * (int)sizeof(float);
    layout->blocks_per_sm = mlajit_family_min_blocks_per_sm(r, &m);
    layout->cluster_ctas = mlajit_family_cluster_ctas(r);
    layout->dependent_launch = mlajit_arch_has_grid_dependency(r->arch);
    layout->single_split = f->single_split;
    layout->ctas_per_head_group = f->dim_halves ? f->dim_halves : 1;
    return MLAJIT_OK;
}

int mlajit_combine_threads_of(const mlajit_model_desc *d) { return kCombineThreads * d->d_v / 512; }
int mlajit_combine_staged_splits_of(const mlajit_model_desc *d) { return kCombineStagedSplits * 512 / d->d_v; }

int mlajit_combine_smem_bytes(const mlajit_kernel_layout *layout, int num_splits)
{
    int staged = num_splits < layout->combine_staged_splits ? num_splits : layout->combine_staged_splits;
    return staged * layout->combine_bytes_per_split;
}

/* ---- what each family accepts and chooses ------------------------------------ */

int mlajit_family_takes(unsigned sizes, int v) { return v > 0 && v % 8 == 0 && v <= 248 && (sizes & MLAJIT_SIZES(v)); }

/* ---- the layouts each family serves ------------------------------------------ */

/* Each row's layout_refusal says, for any layout (a named model's or one described
 * at run time), NULL where its templates are written for it, else why not: the
 * field and what the template allows. mlajit_family_check_layout asks it (after
 * the combine's, which every family shares), so the resolver, the envelope and
 * auto read one answer. */

/* combine.cu: a thread per 4 value dims (d_v / 4 threads, whole warps) and a
 * thread per split's lse (MLAJIT_MAX_SPLITS of them) */
static const char *combine_refusal(const mlajit_model_desc *d)
{
    if (d->d_v % 128 || d->d_v < 4 * MLAJIT_MAX_SPLITS)
        return "layout.d_v must be a multiple of 128 and at least 256: combine.cu merges the splits with a thread "
               "per 4 value dims, in whole warps, and a thread per split's lse (up to 64 splits)";
    return NULL;
}

/* decode_portable.cu: any scale format and place (its layouts edition reads either
 * place, its bf16 edition bf16 NoPE values); its limits are the mma fragments' and
 * the RoPE chunks' */
static const char *portable_layout(const mlajit_model_desc *d)
{
    if (d->d_qk % 32)
        return "layout.d_nope + d_rope must be a multiple of 32: decode_portable.cu loads K fragments two "
               "k-steps (32 dims) at a time";
    if (d->d_rope && 32 % (d->d_rope / 8))
        return "layout.d_rope must be 0, 8, 16, 32, 64, 128 or 256: decode_portable.cu's RoPE chunks of 8 dims "
               "tile a warp's 32 lanes";
    return NULL;
}

/* sm90_common.cu, which the wgmma rows share: its producers dequantize fp8 codes
 * into 64-dim swizzle blocks, each row's bytes over 4 lanes 64 bytes apart, a
 * token's scales in one load. NULL where it reads the layout. */
static const char *sm90_common_refusal(const mlajit_model_desc *d)
{
    if (d->scale_format == MLAJIT_SCALE_NONE)
        return "layout.scale_format is none (bf16 NoPE values), and this variant's producers dequantize fp8 "
               "codes: allowed pow2 or fp32 scales inline, or ue8m0 scales in a page footer; sm90 and sm90-narrow "
               "(their bf16 editions copy the rows as they are) and the portable family serve bf16";
    const int inline_fp32 = d->scale_place == MLAJIT_SCALES_INLINE && d->scale_format != MLAJIT_SCALE_UE8M0;
    const int footer_ue8m0 = d->scale_place == MLAJIT_SCALES_PAGE_FOOTER && d->scale_format == MLAJIT_SCALE_UE8M0;
    if (!inline_fp32 && !footer_ue8m0)
        return "layout.scale_format and scale_place: sm90_common.cu reads pow2 or fp32 scales inline, or ue8m0 "
               "scales in a page footer; the portable family serves the others";
    if (d->d_nope % 64 || d->d_rope % 64 || d->quant_tile % 64)
        return "layout.d_nope, d_rope and quant_tile must be multiples of 64: sm90_common.cu's producer splits a "
               "row over 4 lanes 64 bytes apart and its K tiles are 64-dim swizzle blocks";
    if (footer_ue8m0 && (d->footer_bytes != 8 || d->num_scales > 8))
        return "layout.footer_bytes must be 8, with at most 8 scales (d_nope / quant_tile): sm90_common.cu reads "
               "a token's ue8m0 scales in one 8-byte footer load";
    if (inline_fp32 && d->num_scales != 4)
        return "layout.quant_tile must be d_nope / 4 with fp32 scales inline: sm90_common.cu reads a token's 4 "
               "scales in one 16-byte load";
    return NULL;
}

/* Every wgmma row (sm90, sm90-staged, the narrow rows): P V in two wgmma N of 256
 * value dims, and sm90_common.cu's producer. Their Q and K tile buffers of d_qk / 64
 * swizzled blocks are the shared-memory map's to check (408 KB at DOTS3_SWA's d_qk
 * 1088 for sm90). GLM53_NOPE (d_rope 0) takes the templates' layouts edition
 * (generate.c). */
static const char *wgmma_layout(const mlajit_model_desc *d)
{
    if (d->d_v != 512)
        return "layout.d_v must be 512: the wgmma kernels' P V is two wgmma N of 256 value dims (static_assert "
               "kDV == 512 in sm90_common.cu); the portable family serves other widths on sm_90a";
    return sm90_common_refusal(d);
}

/* sm90 and the narrow rows: the wgmma rows' layouts, and bf16 rows (scales none),
 * which decode_sm90.cu's and decode_sm90_narrow.cu's bf16 editions copy into the K
 * tile by cp.async, 16 bytes (8 dims) at a time, no dequantization: their limits
 * are then the 64-dim swizzle blocks' and P V's. */
static const char *bf16_or_wgmma_layout(const mlajit_model_desc *d)
{
    if (d->scale_format != MLAJIT_SCALE_NONE)
        return wgmma_layout(d);
    if (d->d_v != 512)
        return "layout.d_v must be 512: the wgmma kernels' P V is two wgmma N of 256 value dims (static_assert "
               "kDV == 512 in sm90_common.cu); the portable family serves other widths on sm_90a";
    if (d->d_nope % 64 || d->d_rope % 64)
        return "layout.d_nope and d_rope must be multiples of 64 for bf16 rows in the sm90 and sm90-narrow "
               "variants: their K tiles are 64-dim swizzle blocks; the portable family serves the others";
    return NULL;
}

/* The narrow rows: bf16_or_wgmma_layout's layouts and, with fp8 rows, d_v 1024 too
 * (DOTS3_SWA): O^T is d_v / 64 wgmma M blocks of the heads, so its width is not tied
 * to sm90's two N of 256; there a CTA holds at most 16 heads (the accumulators) and
 * one K buffer where two do not fit (the map). */
static const char *narrow_layout(const mlajit_model_desc *d)
{
    if (d->d_v == 1024 && d->scale_format != MLAJIT_SCALE_NONE)
        return sm90_common_refusal(d);
    if (d->d_v != 512)
        return "layout.d_v must be 512, or 1024 with fp8 rows: sm90_common.cu's blocks (static_assert kDV == 512 "
               "|| kDV == 1024); the portable family serves other widths on sm_90a";
    return bf16_or_wgmma_layout(d);
}

/* sm90-split: decode_sm90_split.cu splits 2 x 512 NoPE dims (each half V's) over a
 * CTA pair, the 64 RoPE dims in the second, and reads ue8m0 footer scales. */
static const char *split_layout(const mlajit_model_desc *d)
{
    if (d->d_nope != 1024 || d->d_v != 1024 || d->d_rope != 64)
        return "layout.d_nope and d_v must be 1024 and d_rope 64: sm90-split gives each CTA of a pair 512 NoPE "
               "dims and their half of V (the RoPE dims to the second); sm90 and the narrow families serve d_v 512, "
               "portable the others";
    if (d->scale_format != MLAJIT_SCALE_UE8M0 || d->scale_place != MLAJIT_SCALES_PAGE_FOOTER || d->footer_bytes != 8 ||
        d->quant_tile % 128)
        return "layout.scale_format and scale_place: sm90-split reads ue8m0 scales in an 8-byte page footer, "
               "quant_tile a multiple of 128; the portable family serves the others";
    return NULL;
}

/* A row's scale formats (`.scales`), where its template reads fewer than its
 * layout_refusal allows (sm90-staged: power-of-two scales only). */
static const char *scales_refusal(const mlajit_family *f, const mlajit_model_desc *d)
{
    if (f->scales & MLAJIT_SCALES(d->scale_format))
        return NULL;
    if (d->scale_format == MLAJIT_SCALE_FP32)
        return "layout.scale_format is fp32 (arbitrary scales), and this variant needs power-of-two scales (pow2 "
               "inline, ue8m0 in a footer): use the sm90 variant (or sm90-narrow, at most 32 heads per CTA)";
    return "layout.scale_format: this variant does not read it (its row's scale formats: docs/kernels.md)";
}

const char *mlajit_family_layout_refusal(const mlajit_family *f, const mlajit_model_desc *d)
{
    const char *why = combine_refusal(d);
    if (!why)
        why = f->layout_refusal(d);
    return why ? why : scales_refusal(f, d);
}

int mlajit_family_check_layout(const mlajit_family *f, const mlajit_model_desc *d)
{
    if (!d)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "spec has no valid layout");
    const char *why = mlajit_family_layout_refusal(f, d);
    if (!why)
        return MLAJIT_OK;
    return mlajit_fail(MLAJIT_ERR_UNSUPPORTED, "variant %s does not serve %s %s (d_qk %d, d_nope %d, d_rope %d, "
                       "d_v %d): %s", f->name, d->model == MLAJIT_MODEL_CUSTOM ? "layout" : "model", d->name,
                       d->d_qk, d->d_nope, d->d_rope, d->d_v, why);
}

/* A row's 16-byte NoPE chunks in decode_portable.cu (bf16 values: twice fp8's). */
static int portable_nope_chunks(const mlajit_model_desc *d)
{
    return d->d_nope * (d->scale_format == MLAJIT_SCALE_NONE ? 2 : 1) / 16;
}

/* What decode_portable.cu's static_asserts need of a tile and head group beyond the
 * layout (NULL, or why not): 16 warps at 64 heads take the value dims in pairs of
 * 8-dim n-tiles each; a warp's tile loads (its candidates' NoPE chunks in passes of
 * 32 lanes, and their RoPE chunks) are marked in one 32-bit mask. */
static const char *portable_tile_refusal(const mlajit_kernel_spec *r, const mlajit_model_desc *d)
{
    const int warps = r->heads_per_cta > 32 ? 16 : 8, tokens_per_warp = r->tile / warps;
    if (warps == 16 && d->d_v % 256)
        return "64 heads per CTA need layout.d_v a multiple of 256 (16 warps, each a pair of 8-dim n-tiles)";
    const int nope_chunks = portable_nope_chunks(d);
    const int rope_chunks = d->d_rope * 2 / 16;
    const int slots = tokens_per_warp * ((nope_chunks + 31) / 32) +
                      (rope_chunks ? (tokens_per_warp + 32 / rope_chunks - 1) / (32 / rope_chunks) : 0);
    if (slots > 32)
        return "a warp's tile loads exceed its 32-bit presence mask at this tile (layout.d_nope's 16-byte chunks "
               "in passes of 32 lanes): use tile 32";
    return NULL;
}

/* The portable family: 16 heads fill one mma row tile; past that more row tiles
 * per CTA cut how often each K tile is gathered and dequantized: 64 heads (512
 * threads) when that pads no more heads than 32 would and a 64-candidate tile
 * fits. A 64-candidate tile when the arch has the shared memory for it. */
static int portable_resolve(const mlajit_family *f, mlajit_kernel_spec *r)
{
    const mlajit_model_desc *d = mlajit_spec_desc(r);
    /* 64 heads: 512 threads under the 128-register cap, each warp's O accumulators
     * 4 row tiles x d_v / 16 dims: DOTS3_SWA's d_v 1024 spilled 2 KB (ptxas, CUDA
     * 13.0, sm_90a); at 32 heads, 256 threads, it spills nothing */
    if (r->heads_per_cta == 64 && d->d_v > MLAJIT_PORTABLE_WIDE_MAX_DV)
        return mlajit_fail(MLAJIT_ERR_UNSUPPORTED, "variant %s holds 64 heads per CTA only at d_v <= %d (the O "
                           "accumulators of 512 threads spill at 128 registers); model %s has d_v %d: use 16 or "
                           "32, or 0", f->name, MLAJIT_PORTABLE_WIDE_MAX_DV, d->name, d->d_v);
    const int chose_both = r->heads_per_cta == 0 && r->tile == 0;
    if (r->heads_per_cta == 0) {
        r->heads_per_cta = r->h_q <= 16 ? 16 : 32;
        /* and a row's NoPE chunks in one pass of the lanes: in two (bf16 V3.2's 64
         * chunks) 64 heads spilled 112 bytes (ptxas, CUDA 13.0, sm_90a) */
        if (r->h_q > 32 && (r->h_q + 63) / 64 * 64 == (r->h_q + 31) / 32 * 32 && (r->tile == 0 || r->tile == 64) &&
            d->d_v <= MLAJIT_PORTABLE_WIDE_MAX_DV && portable_nope_chunks(d) <= 32) {
            mlajit_kernel_spec wide = *r;
            wide.heads_per_cta = 64;
            wide.tile = 64;
            mlajit_kernel_layout layout;
            if (mlajit_codegen_layout(&wide, &layout) == MLAJIT_OK &&
                layout.smem_bytes <= mlajit_arch_max_smem(r->arch) && !portable_tile_refusal(&wide, d))
                r->heads_per_cta = 64;
        }
    }
    if (r->tile == 0) {
        r->tile = 64;
        mlajit_kernel_layout layout;
        if ((mlajit_codegen_layout(r, &layout) == MLAJIT_OK && layout.smem_bytes > mlajit_arch_max_smem(r->arch)) ||
            portable_tile_refusal(r, d))
            r->tile = 32;
    }
    /* 32 heads that do not fit even at tile 32 (DOTS3_SWA's rows on the 99 KB archs):
     * 16, so that a refusal names the least there is (V3.2's rows fit at 32) */
    mlajit_kernel_layout layout;
    if (chose_both && r->heads_per_cta == 32 && mlajit_codegen_layout(r, &layout) == MLAJIT_OK &&
        layout.smem_bytes > mlajit_arch_max_smem(r->arch))
        r->heads_per_cta = 16;
    const char *why = portable_tile_refusal(r, d);
    if (why)
        return mlajit_fail(MLAJIT_ERR_UNSUPPORTED, "variant %s at tile %d and %d heads per CTA does not serve %s (d_nope "
                           "%d, d_rope %d, d_v %d): %s", f->name, r->tile, r->heads_per_cta, d->name, d->d_nope,
                           d->d_rope, d->d_v, why);
    return MLAJIT_OK;
}

/* The sm90 family: tile 64 with 64 heads per CTA. */
static int sm90_resolve(const mlajit_family *f, mlajit_kernel_spec *r)
{
    if ((r->tile && !mlajit_family_takes(f->tiles, r->tile)) ||
        (r->heads_per_cta && !mlajit_family_takes(f->heads_per_cta, r->heads_per_cta)))
        return mlajit_fail(MLAJIT_ERR_UNSUPPORTED, "variant %s runs tile 64 with 64 heads per CTA; spec has tile %d, "
                           "heads_per_cta %d: leave them 0", f->name, r->tile, r->heads_per_cta);
    r->tile = 64;
    r->heads_per_cta = 64;
    return MLAJIT_OK;
}

/* The narrow family: S^T and O^T, wgmma N is the heads (a multiple of 8, at most
 * 32 beside two gathering warp groups). It takes every scale format
 * sm90_common.cu reads: arbitrary fp32 scales (GLM_NSA, GLM53_NOPE) in
 * decode_sm90_narrow.cu's layouts edition, whose register splits give the exact
 * dequantization its producer registers (generate.c); sm90-narrow-scores, whose
 * template reads power-of-two scales only, is sm90-narrow for them (its alias).
 * Head groups of 8-32 heads (wgmma N); auto's
 * plans split the heads into groups where that fills SMs a call would leave idle
 * (plan.c). */
static int narrow_resolve(const mlajit_family *f, mlajit_kernel_spec *r)
{
    /* the most heads a CTA holds: h_q rounded up to 8, at most 32 (16 at d_v 1024) */
    const int max_n = mlajit_family_max_heads(f, mlajit_spec_desc(r));
    const int heads_n = r->h_q <= max_n ? (r->h_q + 7) / 8 * 8 : max_n;
    const char *sizes = max_n == 16 ? "8 or 16" : "8, 16, 24 or 32";
    if (r->h_q > max_n && r->heads_per_cta == 0)
        return mlajit_fail(MLAJIT_ERR_UNSUPPORTED, "variant %s holds at most %d heads per CTA%s; h_q = %d: set "
                           "heads_per_cta to %s (head groups), or use the %s variant", f->name, max_n,
                           max_n < f->max_heads_per_cta ? " at d_v past 512" : "", r->h_q, sizes,
                           max_n < f->max_heads_per_cta ? "sm90-split" : "sm90");
    if ((r->tile && !mlajit_family_takes(f->tiles, r->tile)) ||
        (r->heads_per_cta && !(mlajit_family_takes(f->heads_per_cta, r->heads_per_cta) && r->heads_per_cta <= heads_n)))
        return mlajit_fail(MLAJIT_ERR_UNSUPPORTED, "variant %s runs tile 64 with at most %d heads per CTA (h_q "
                           "rounded up to 8, at most %d); spec has tile %d, heads_per_cta %d: use %s up to %d%s",
                           f->name, heads_n, max_n, r->tile, r->heads_per_cta, sizes, heads_n,
                           r->h_q <= max_n ? ", or 0 (all of them)" : "");
    r->tile = 64;
    if (r->heads_per_cta == 0)
        r->heads_per_cta = heads_n;
    return MLAJIT_OK;
}

/* where the third producer group's ring slot does not fit, sm90-narrow-long is
 * sm90-narrow: one name per kernel; likewise sm90-narrow-scores where its layout
 * does not fit */
static int long_is_narrow(const mlajit_kernel_spec *r) { return mlajit_narrow_producer_groups(r) < 3; }
static int scores_is_narrow(const mlajit_kernel_spec *r) { return !mlajit_narrow_scores_fits(r); }

/* ---- the table ------------------------------------------------------------------ */

#define SM90_ROW(v, nm)                                                                                            \
    .variant = v, .name = nm, .kernel = "decode_sm90", .arch = "sm_90a", .sm90_common = 1,                         \
    .roles = "two consumer warp groups (S, P V) and one producer (gather, dequantize); setmaxnreg raises the "     \
             "score group, lowers the others",                                                                    \
    .threads = 384, .tiles = MLAJIT_SIZES(64), .heads_per_cta = MLAJIT_SIZES(64), .resolve = sm90_resolve,         \
    .smem_map = sm90_smem_map
#define NARROW_ROW(v, nm)                                                                                          \
    .variant = v, .name = nm, .arch = "sm_90a", .sm90_common = 1, .tiles = MLAJIT_SIZES(64),                       \
    .heads_per_cta = MLAJIT_SIZES(8) | MLAJIT_SIZES(16) | MLAJIT_SIZES(24) | MLAJIT_SIZES(32),                     \
    .max_heads_per_cta = MLAJIT_NARROW_MAX_HEADS_PER_CTA, .scales = MLAJIT_SCALES_ANY | MLAJIT_SCALES(MLAJIT_SCALE_NONE), \
    .resolve = narrow_resolve, .layout_refusal = narrow_layout,                                            \
    /* its bf16 edition passed the fp64 reference on an H100 (tools/device-run.sh narrow-bf16: 132 runs) and   \
     * tied sm90's at 16 heads (b 64 / 128: 93.9 / 178.5 against 94.1 / 175.6 us), both bound by the          \
     * producers' cp.async gather (bench/NOTES.md 1d); untimed at other head counts and in the plans' head     \
     * groups, so bf16 rows keep sm90, the kernel their rows were measured with */                            \
    .forced_only_scales = MLAJIT_SCALES(MLAJIT_SCALE_NONE)

/* In variant order; retired variants (MLAJIT_VARIANT_SLICED, _SM90_UNPAIRED) have no
 * row, only an entry in retired_variants below. */
const mlajit_family mlajit_families[] = {
    {
        .variant = MLAJIT_VARIANT_PORTABLE, .name = "portable", .kernel = "decode_portable",
        .roles = "eight warps (sixteen at 64 heads per CTA), each a share of the heads' rows of S and O",
        .threads = 256, .threads_wide = 512,
        .tiles = MLAJIT_SIZES(32) | MLAJIT_SIZES(64),
        .heads_per_cta = MLAJIT_SIZES(16) | MLAJIT_SIZES(32) | MLAJIT_SIZES(64),
        .scales = MLAJIT_SCALES_ANY | MLAJIT_SCALES(MLAJIT_SCALE_NONE),
        .models = "v32, dsv4, glm_nsa, glm53_nope, dots3_swa (at most 32 heads per CTA), v32_bf16, dsv4_bf16; "
                  "custom layouts (docs/layouts.md)",
        .resolve = portable_resolve,
        /* every named model (no RoPE slots without RoPE; NoPE chunks in passes of 32 lanes) */
        .layout_refusal = portable_layout,
        .smem_map = portable_smem_map,
        /* not bf16: its NoPE chunks (twice fp8's) under the 128-register cap are unmeasured */
        .two_blocks_scales = MLAJIT_SCALES_ANY,
        .knobs = MLAJIT_KNOB_TILE | MLAJIT_KNOB_HEADS_PER_CTA | MLAJIT_KNOB_SPLITS,
    },
    {
        SM90_ROW(MLAJIT_VARIANT_SM90, "sm90"), .layout_refusal = bf16_or_wgmma_layout,
        .scales = MLAJIT_SCALES_ANY | MLAJIT_SCALES(MLAJIT_SCALE_NONE),
        .models = "v32, dsv4, glm_nsa, glm53_nope, v32_bf16, dsv4_bf16",
        .pairs = 1,
        .knobs = MLAJIT_KNOB_SPLITS,
    },
    {
        SM90_ROW(MLAJIT_VARIANT_SM90_STAGED, "sm90-staged"), .layout_refusal = wgmma_layout,
        /* arbitrary scales with RoPE since the exact dequantization's converted form: the
         * longer one had spilled 116 bytes beside the staged epilogue (GLM_NSA, 64 heads,
         * the extra cache and every feature), the converted one spills none */
        .scales = MLAJIT_SCALES_ANY, .models = "v32, dsv4, glm_nsa, glm53_nope", .pairs = 1,
        .single_split = 1, .staged_output = 1, .walk = MLAJIT_WALK_SHORT, .walk_tiles = MLAJIT_STAGED_PAIR_BELOW_TILES,
    },
    {
        NARROW_ROW(MLAJIT_VARIANT_SM90_NARROW, "sm90-narrow"), .kernel = "decode_sm90_narrow",
        .models = "v32, dsv4, glm_nsa, glm53_nope, dots3_swa (at most 16 heads per CTA, one K buffer), v32_bf16, "
                  "dsv4_bf16 (bf16 rows: its bf16 edition, forced only: it ties sm90's, so auto and the plans pass "
                  "it over there)",
        .roles = "one consumer warp group (S^T, O^T) and two producers (gather, dequantize; the row ring)",
        .warp_groups_beside_producers = 1, .smem_map = sm90_narrow_smem_map,
        .knobs = MLAJIT_KNOB_HEADS_PER_CTA | MLAJIT_KNOB_SPLITS | MLAJIT_KNOB_PRODUCERS,
        .walk = MLAJIT_WALK_HEAD_GROUPS, .walk_tiles = MLAJIT_HEAD_GROUPS_MAX_TILES,
    },
    {
        NARROW_ROW(MLAJIT_VARIANT_SM90_NARROW_LONG, "sm90-narrow-long"), .kernel = "decode_sm90_narrow",
        .models = "v32, glm_nsa, glm53_nope (the third ring slot where it fits: inline scales, at most 24 heads "
                  "per CTA; V3.2 and GLM_NSA at 16 and fewer, GLM53_NOPE at 24)",
        .roles = "one consumer warp group and three producers where the third ring slot fits",
        .warp_groups_beside_producers = 1, .smem_map = sm90_narrow_smem_map,
        .alias = MLAJIT_VARIANT_SM90_NARROW, .alias_when = long_is_narrow,
        .knobs = MLAJIT_KNOB_HEADS_PER_CTA | MLAJIT_KNOB_SPLITS | MLAJIT_KNOB_PRODUCERS,
        .walk = MLAJIT_WALK_AT_LEAST, .walk_tiles = MLAJIT_NARROW_LONG_FROM_TILES,
    },
    {
        NARROW_ROW(MLAJIT_VARIANT_SM90_NARROW_SCORES, "sm90-narrow-scores"), .kernel = "decode_sm90_scores",
        /* its template reads inline power-of-two scales only: elsewhere (DSV4's
         * footer, GLM's arbitrary fp32 scales) it is sm90-narrow by its alias,
         * mlajit_narrow_scores_fits saying no */
        .models = "v32 (inline power-of-two scales, 8 heads per CTA; sm90-narrow elsewhere)",
        .roles = "a value warp group (O^T), two score groups (gather, S^T) and a copier",
        .warp_groups_beside_producers = 2, .smem_map = sm90_scores_smem_map,
        .alias = MLAJIT_VARIANT_SM90_NARROW, .alias_when = scores_is_narrow,
        .knobs = MLAJIT_KNOB_HEADS_PER_CTA | MLAJIT_KNOB_SPLITS,
        .walk = MLAJIT_WALK_AT_LEAST, .walk_tiles = MLAJIT_NARROW_SCORES_FROM_TILES,
    },
    {
        .variant = MLAJIT_VARIANT_SM90_SPLIT, .name = "sm90-split", .kernel = "decode_sm90_split", .arch = "sm_90a",
        .sm90_common = 1,
        .roles = "per CTA of a pair (each half of the dims and of V): a score group (its part of S; rank 0 adds "
                 "rank 1's, the softmax, P to both), a value group (P V) and a producer (gather, dequantize)",
        .threads = 384, .tiles = MLAJIT_SIZES(64), .heads_per_cta = MLAJIT_SIZES(64), .resolve = sm90_resolve,
        .smem_map = split_smem_map, .layout_refusal = split_layout, .scales = MLAJIT_SCALES(MLAJIT_SCALE_UE8M0),
        .models = "dots3_swa", .dim_halves = 2, .knobs = MLAJIT_KNOB_SPLITS,
    },
};
const int mlajit_family_count = (int)(sizeof mlajit_families / sizeof mlajit_families[0]);

const mlajit_family *mlajit_family_of(mlajit_variant v)
{
    for (int i = 0; i < mlajit_family_count; i++)
        if (mlajit_families[i].variant == v)
            return &mlajit_families[i];
    return NULL;
}

int mlajit_family_forced_only(const mlajit_family *f, const mlajit_model_desc *d)
{
    return f && d && (f->forced_only_scales & MLAJIT_SCALES(d->scale_format));
}

/* auto on sm_90a with tile 0 or 64: at most 32 heads (16 at d_v 1024) with the
 * head group left to it, sm90-narrow (no math padded to 64 heads; it beat sm90 on
 * every V3.2 and DSV4 row at 8, 16 and 32 heads measured on the H200, and for
 * GLM_NSA's and GLM53_NOPE's arbitrary scales on an H100: bench/NOTES.md 1d); else
 * the sm90 family where the head group is 0 or 64 (faster than the portable family
 * on every row measured, padded head counts included); else portable
 * (bench/NOTES.md); past 32 heads, sm90-split for the layouts only it serves
 * (DOTS3_SWA). A family whose template is not built for the model's layout is
 * passed over (DOTS3_SWA at 17-32 heads: portable). */
mlajit_variant mlajit_family_auto(const mlajit_kernel_spec *r)
{
    const mlajit_family *narrow = mlajit_family_of(MLAJIT_VARIANT_SM90_NARROW);
    const mlajit_family *sm90 = mlajit_family_of(MLAJIT_VARIANT_SM90);
    const int hopper = strcmp(r->arch, sm90->arch) == 0 && (r->tile == 0 || mlajit_family_takes(sm90->tiles, r->tile));
    const mlajit_model_desc *d = mlajit_spec_desc(r);
    /* a layout sm_90a's families are not written for (some custom ones) runs on the
     * portable family; bf16 rows on sm90 at every head count (1.2-1.5x faster than
     * portable at 64 heads; at 16, padded, it ties sm90-narrow's bf16 edition, which
     * is therefore forced only: mlajit_family_forced_only); d_v 1024
     * (DOTS3_SWA) on sm90-narrow at 16 heads and fewer (one K buffer; 17-19% faster
     * than portable at 16 heads, 19% at 8, on an H100), portable at 17-32
     * (sm90-narrow holds 16 there, and its head groups are unmeasured), sm90-split
     * from 33 heads (1.5-1.6x faster than portable there; at 16 heads, padded,
     * 1.4-1.5x slower): bench/NOTES.md 1d */
    if (hopper && r->heads_per_cta == 0 && r->h_q <= mlajit_family_max_heads(narrow, d) &&
        !mlajit_family_layout_refusal(narrow, d) && !mlajit_family_forced_only(narrow, d))
        return MLAJIT_VARIANT_SM90_NARROW;
    const int sm90_heads = r->heads_per_cta == 0 || mlajit_family_takes(sm90->heads_per_cta, r->heads_per_cta);
    if (hopper && sm90_heads && !mlajit_family_layout_refusal(sm90, d))
        return MLAJIT_VARIANT_SM90;
    const mlajit_family *split = mlajit_family_of(MLAJIT_VARIANT_SM90_SPLIT);
    if (hopper && sm90_heads && r->h_q > narrow->max_heads_per_cta && !mlajit_family_layout_refusal(split, d))
        return MLAJIT_VARIANT_SM90_SPLIT;
    return MLAJIT_VARIANT_PORTABLE;
}

/* ---- names ---------------------------------------------------------------------- */

/* Variants taken out of the table: mlajit.h keeps their numbers and names, never
 * reused, so a caller still naming one is told why and what to use (their
 * measurements: bench/NOTES.md, section 4). */
static const struct retired_variant {
    mlajit_variant variant;
    const char *name, *why, *instead;
} retired_variants[] = {
    {MLAJIT_VARIANT_SLICED, "sliced", "sm90-narrow beat it on every walk measured, so no plan took it",
     "auto, or force sm90 (sm_90a) or portable (any arch)"},
    {MLAJIT_VARIANT_SM90_UNPAIRED, "sm90-unpaired",
     "a tuning run over 298 buckets, every 128-head one a candidate for it, picked it for none",
     "auto, or force sm90 (it pairs the CTAs at 65-128 heads)"},
};

int mlajit_variant_refuse_retired(mlajit_variant v, const char *name)
{
    for (size_t i = 0; i < sizeof retired_variants / sizeof retired_variants[0]; i++) {
        const struct retired_variant *rv = &retired_variants[i];
        if (name ? strcmp(name, rv->name) == 0 : v == rv->variant)
            return mlajit_fail(MLAJIT_ERR_UNSUPPORTED, "variant %s was retired: %s (bench/NOTES.md); use %s",
                               rv->name, rv->why, rv->instead);
    }
    return MLAJIT_OK;
}

const char *mlajit_variant_name(mlajit_variant v)
{
    const mlajit_family *f = mlajit_family_of(v);
    return f ? f->name : "auto";
}

int mlajit_variant_from_name(const char *name, mlajit_variant *out)
{
    if (name && strcmp(name, "auto") == 0) {
        *out = MLAJIT_VARIANT_AUTO;
        return 1;
    }
    for (int i = 0; name && i < mlajit_family_count; i++)
        if (strcmp(mlajit_families[i].name, name) == 0) {
            *out = mlajit_families[i].variant;
            return 1;
        }
    return 0;
}

void mlajit_variant_values(char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "%d (auto)", (int)MLAJIT_VARIANT_AUTO);
    for (int i = 0; i < mlajit_family_count && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, ", %d (%s)", (int)mlajit_families[i].variant,
                                 mlajit_families[i].name);
}
