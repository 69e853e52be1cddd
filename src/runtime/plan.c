/* Plans: a spec plus a batch geometry -> a loaded kernel, a grid, a split count
 * and a workspace size. Everything a decode call needs is decided here: by a
 * tuned tactic where one serves the shape on this GPU (tactics.c's look-up),
 * else by the rules below (walk_alternative_for, grid_for, choose_splits). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/abi.h"
#include "common/alloc.h"
#include "common/error.h"
#include "runtime/runtime.h"

enum { kMaxSplits = MLAJIT_MAX_SPLITS, kWorkspaceAlign = 256, kDependentCtasPerIdleSm = 4 };

/* The kernels index a split partial's row (split, batch row x token, head) with an
 * int (finish_row in templates/prelude.cu): the envelope keeps it below 2^31 (2^29
 * at 64 splits x 65536 rows x 128 heads). A row is blockIdx.x, whose limit is 2^31 - 1;
 * the head groups (y) and splits (z) stay far below their 65535. */
_Static_assert((long long)MLAJIT_MAX_SPLITS * MLAJIT_MAX_ROWS * MLAJIT_MAX_HEADS <= 0x7fffffffLL,
               "split-partial rows must fit an int");
_Static_assert(MLAJIT_MAX_ROWS <= 0x7fffffffLL && MLAJIT_MAX_HEADS <= 65535 && MLAJIT_MAX_SPLITS <= 65535,
               "the grid's dimensions must fit the launch limits");

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* Split-KV: pick the split count that finishes soonest, counting time in
 * tiles per CTA, plus what a CTA costs beyond its tiles, times waves of CTAs
 * (sm_count * blocks_per_sm resident at once), plus about one tile for the
 * combine kernel when split. A CTA's own cost is about a tile for its start
 * (the ring filling) and its end, and a quarter tile per 8 heads it holds for
 * reading their Q and writing their output or fp32 partial: at 64 heads a CTA
 * moves 200 KB that way, some 3 tiles' time (bench/NOTES.md 1c: v32 h49 b46
 * s_q 3 topk 1834 ran fastest at 2 splits, 11% ahead of the 5 that one tile
 * per CTA chose). Small batches thus still reach every SM, and a grid of 1.5
 * waves is evened out; from two waves on, the block scheduler evens out the
 * tail itself. Ties go to fewer splits (less workspace traffic). */
static int choose_splits(int ctas, int num_tiles, int heads_per_cta, int sm_count, int blocks_per_sm)
{
    if (ctas <= 0 || num_tiles <= 1)
        return 1;
    long slots = (long)sm_count * (blocks_per_sm > 0 ? blocks_per_sm : 1);
    if (ctas >= 2 * slots)
        return 1;
    const long cta_quarters = 4 + heads_per_cta / 8; /* a CTA's own cost, in quarter tiles */
    int best = 1;
    long best_cost = 0;
    for (int s = 1; s <= kMaxSplits && s <= num_tiles; s++) {
        long waves = ((long)ctas * s + slots - 1) / slots;
        long tiles = (num_tiles + s - 1) / s;
        long cost = waves * (4 * tiles + cta_quarters) + (s > 1 ? 4 : 0);
        if (s == 1 || cost < best_cost) {
            best = s;
            best_cost = cost;
        }
    }
    return best;
}

/* The block scheduler spreads a grid over the SMs before it doubles up, so a
 * main grid of fewer CTAs than SMs leaves sm_count - main_ctas of them idle. The
 * grid after it may wait on those from the start when they can hold it at a few
 * CTAs each (bench/NOTES.md: with 4 idle SMs for a 64-512 CTA combine it piled onto
 * them, +5 us at b 8). */
int mlajit_dependent_starts_early(long main_ctas, int sm_count, long dependent_ctas)
{
    if (main_ctas <= 0 || dependent_ctas <= 0 || main_ctas >= sm_count)
        return 0;
    return dependent_ctas <= (sm_count - main_ctas) * (long)kDependentCtasPerIdleSm;
}

int mlajit_prefetch_evict_last(int64_t gathered_bytes, int64_t l2_bytes)
{
    return l2_bytes > 0 && gathered_bytes >= l2_bytes + l2_bytes / 2;
}

/* A plan's grid with a kernel of this layout: head groups x rows CTAs per split,
 * the split count (1 for a single-split kernel, else the shape's, else the
 * planner's; no split is empty) and the tiles each split walks; and whether
 * the kernel pairs the CTAs of two head groups. */
typedef struct plan_grid {
    int head_groups, rows, num_tiles, num_splits, tiles_per_split, paired;
} plan_grid;

static plan_grid grid_for(const mlajit_kernel_layout *layout, int h_q, const mlajit_decode_shape *shape, int sm_count)
{
    plan_grid g;
    g.head_groups = (h_q + layout->heads_per_cta - 1) / layout->heads_per_cta * layout->ctas_per_head_group;
    g.paired = layout->cluster_ctas > 1;
    g.rows = shape->batch * shape->s_q;
    g.num_tiles = (shape->topk + shape->extra_topk + layout->tile - 1) / layout->tile;
    int splits = layout->single_split ? 1
                 : shape->num_splits  ? shape->num_splits
                                      : choose_splits(g.head_groups * g.rows, g.num_tiles, layout->heads_per_cta, sm_count,
                                                      layout->blocks_per_sm);
    if (splits > g.num_tiles)
        splits = g.num_tiles;
    g.tiles_per_split = (g.num_tiles + splits - 1) / splits;
    g.num_splits = (g.num_tiles + g.tiles_per_split - 1) / g.tiles_per_split;
    return g;
}

/* The grid of a plan of `shape` with kernel `spec`, as grid_for; with
 * `as_splitting` a single-split kernel's grid is taken as its splitting twin's
 * (sm90-staged as sm90: same tiles and head groups). 0 when the spec does not
 * resolve (no error left set). */
static int grid_of(const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape, int sm_count, int as_splitting,
                   plan_grid *g)
{
    mlajit_kernel_spec r = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_kernel_layout layout;
    if (mlajit_spec_resolve(spec, &r) != MLAJIT_OK || mlajit_codegen_layout(&r, &layout) != MLAJIT_OK) {
        mlajit_clear_error();
        return 0;
    }
    if (as_splitting)
        layout.single_split = 0;
    *g = grid_for(&layout, r.h_q, shape, sm_count);
    return 1;
}

/* Whether the plan of `shape` with the sm90 kernel that `alt` (its sm90-staged
 * twin) stands in for would not split, and, in a CTA pair, would walk fewer than
 * pair_below_tiles tiles per CTA. */
static int walk_is_short(const mlajit_kernel_spec *alt, const mlajit_decode_shape *shape, int sm_count,
                         int pair_below_tiles)
{
    plan_grid g;
    return shape->num_splits <= 1 && grid_of(alt, shape, sm_count, 1, &g) && g.rows > 0 && g.num_splits == 1 &&
           (!g.paired || g.tiles_per_split < pair_below_tiles);
}

/* Whether a plan of `shape` with kernel `alt` (sm90-narrow-long or
 * sm90-narrow-scores, whose grids are sm90-narrow's) walks at least `tiles` tiles
 * per CTA. */
static int walk_is_at_least(const mlajit_kernel_spec *alt, const mlajit_decode_shape *shape, int sm_count, int tiles)
{
    plan_grid g;
    return grid_of(alt, shape, sm_count, 0, &g) && g.rows > 0 && g.tiles_per_split >= tiles;
}

/* Whether a plan of `shape` with sm90-narrow in head groups of 32 (`alt`, past 32
 * heads) fits one wave of CTAs and walks few enough tiles per row-split, summed
 * over its head groups (each gathers them again), that the wide kernels' fewer
 * gathers would not pay for their longer tile: at most max_tiles. */
static int head_groups_walk_short(const mlajit_kernel_spec *alt, const mlajit_decode_shape *shape, int sm_count,
                                  int max_tiles)
{
    plan_grid g;
    return grid_of(alt, shape, sm_count, 0, &g) && g.rows > 0 &&
           (long)g.head_groups * g.rows * g.num_splits <= sm_count &&
           g.head_groups * g.tiles_per_split <= max_tiles;
}

/* Whether a plan of `shape` with the sm90-narrow kernel that `alt` halves (auto's,
 * every head in one CTA; past 32 heads the head groups' of 32, where a plan would
 * take them) would leave at least half of the SMs idle, so the halved groups' CTAs
 * run beside each other in the same wave. */
static int heads_split_fills_idle_sms(const mlajit_kernel_spec *alt, const mlajit_decode_shape *shape, int sm_count,
                                      const mlajit_family *f)
{
    mlajit_kernel_spec whole = *alt;
    whole.heads_per_cta = alt->h_q > f->max_heads_per_cta ? f->max_heads_per_cta : 0;
    plan_grid g;
    return grid_of(&whole, shape, sm_count, 0, &g) && g.rows > 0 &&
           2L * g.head_groups * g.rows * g.num_splits <= sm_count &&
           (alt->h_q <= f->max_heads_per_cta || head_groups_walk_short(&whole, shape, sm_count, f->walk_tiles));
}

/* Whether a plan of `shape` takes walk alternative `alt` (one of
 * mlajit_spec_walk_alternatives): its family's rule and threshold (families.c). */
static int walk_suits(const mlajit_kernel_spec *alt, const mlajit_decode_shape *shape, int sm_count)
{
    const mlajit_family *f = mlajit_family_of(alt->variant);
    switch (f ? f->walk : MLAJIT_WALK_NONE) {
    case MLAJIT_WALK_SHORT: return walk_is_short(alt, shape, sm_count, f->walk_tiles);
    case MLAJIT_WALK_AT_LEAST: return walk_is_at_least(alt, shape, sm_count, f->walk_tiles);
    /* past 32 heads in groups of the most heads a CTA holds, the head groups, else
     * the head split (at most 32 heads auto's own kernel is sm90-narrow) */
    case MLAJIT_WALK_HEAD_GROUPS: {
        const int groups_of_max = alt->h_q > f->max_heads_per_cta && alt->heads_per_cta == f->max_heads_per_cta;
        return groups_of_max ? head_groups_walk_short(alt, shape, sm_count, f->walk_tiles)
                             : heads_split_fills_idle_sms(alt, shape, sm_count, f);
    }
    case MLAJIT_WALK_NONE: break;
    }
    return 0;
}

/* The walk alternative auto's plan of `shape` takes (the first of
 * mlajit_spec_walk_alternatives that suits it) into *alt: 1, else 0. */
static int walk_alternative_for(const mlajit_kernel_spec *spec, const char *arch, const mlajit_decode_shape *shape,
                                int sm_count, mlajit_kernel_spec *alt)
{
    mlajit_kernel_spec alts[MLAJIT_WALK_ALTERNATIVES];
    const int n_alts = mlajit_spec_walk_alternatives(spec, arch, alts);
    for (int i = 0; i < n_alts; i++) {
        if (walk_suits(&alts[i], shape, sm_count)) {
            *alt = alts[i];
            return 1;
        }
    }
    return 0;
}

/* ---- tactics ---------------------------------------------------------------- */

void mlajit_context_set_tactics(mlajit_context *ctx, int on)
{
    if (ctx)
        atomic_store(&ctx->tactics_off, on ? 0 : 1);
}

int mlajit_context_tactics(const mlajit_context *ctx)
{
    return ctx && !atomic_load(&((mlajit_context *)ctx)->tactics_off);
}

/* What a tactic gives a plan, once checked: the kernel to acquire (resolved,
 * arch set), the split count to plan with (0: the planner's for that kernel),
 * and MLAJIT_TACTIC_TUNED or _TUNED_BELOW. */
typedef struct plan_tactic {
    mlajit_kernel_spec kernel;
    int num_splits;
    int tactic;
} plan_tactic;

/* One warning per context for a tactic a plan cannot take (the record stays,
 * so every plan of its spec would meet it again). */
static void warn_tactic_refused(mlajit_context *ctx, const mlajit_tactic_match *m, const char *why)
{
    if (atomic_exchange(&ctx->warned_tactic_plan, 1) != 0)
        return;
    mlajit_warn("plan of %s: the tactic measured at rows %d, topk %d, extra_topk %d (kernel %s, %d splits) is not "
                "taken: %s; such plans use the rules (said once per context)",
                m->spec, m->record.bucket.rows, m->record.bucket.topk, m->record.bucket.extra_topk, m->record.kernel,
                m->record.num_splits, why);
}

/* Whether a grid of few waves of CTAs ends in one less than half full (a tail
 * that costs a whole CTA's time for a few CTAs' work, 1/8 of the time or more
 * below THIN_TAIL_WAVES waves): a grid of one wave has none. */
#define THIN_TAIL_WAVES 8
static int grid_has_thin_tail(const plan_grid *g, int slots)
{
    const long ctas = (long)g->head_groups * g->rows * g->num_splits;
    const long tail = ctas % slots;
    return ctas > slots && ctas < (long)THIN_TAIL_WAVES * slots && tail != 0 && 2 * tail < slots;
}

/* The split count a tactic measured at its bucket's lower edge gives a shape of
 * that bucket (or one above it): a split count chosen at the edge keeps the
 * tiles per split it walked there (a topk past the edge walks more tiles, so
 * it takes more splits, not longer ones), lowered until the grid has no thin
 * last wave of CTAs; 0 (the planner's own) stays 0. -1 where the grid at the
 * shape ends in a thin wave at every split count the tactic allows though it
 * had none where it was measured (rows past a multiple of the SMs): the tactic
 * does not carry over, and the rules plan. */
static int tactic_splits_at(const mlajit_kernel_layout *layout, int h_q, const mlajit_tactic_bucket *edge_bucket,
                            int edge_splits, const mlajit_decode_shape *shape, int sm_count)
{
    mlajit_decode_shape edge = MLAJIT_DECODE_SHAPE_INIT, at = *shape;
    edge.batch = edge_bucket->rows;
    edge.s_q = 1;
    edge.topk = edge_bucket->topk;
    edge.extra_topk = edge_bucket->extra_topk;
    edge.num_splits = edge_splits;
    const plan_grid ge = grid_for(layout, h_q, &edge, sm_count);
    const int slots = sm_count * (layout->blocks_per_sm > 0 ? layout->blocks_per_sm : 1);
    const int num_tiles = (shape->topk + shape->extra_topk + layout->tile - 1) / layout->tile;
    int splits = edge_splits ? (num_tiles + ge.tiles_per_split - 1) / ge.tiles_per_split : 0;
    splits = splits > MLAJIT_MAX_SPLITS ? MLAJIT_MAX_SPLITS : splits;
    at.num_splits = splits;
    plan_grid g = grid_for(layout, h_q, &at, sm_count);
    if (grid_has_thin_tail(&ge, slots) || !grid_has_thin_tail(&g, slots))
        return splits;
    for (int s = g.num_splits - 1; edge_splits && s >= 1; s--) {
        at.num_splits = s;
        g = grid_for(layout, h_q, &at, sm_count);
        if (!grid_has_thin_tail(&g, slots))
            return s;
    }
    return -1;
}

/* Whether a record that follows the rules, whose kernel (layout) the rules leave
 * at `shape` though they took it at the bucket's edge (a rule's threshold lies
 * between the two), still gives that kernel here: the planner's split count for
 * it is the one measured at the edge, and its grid gains no thin last wave. The
 * thresholds were set on another GPU; the record was measured on this one, at a
 * grid like this (bench/NOTES.md 1c: V3.2 h93 b1 s_q 4 topk 5846, head groups of
 * 32 in 11 splits, 4.8% ahead of the sm90 plan the rules switched to). */
static int edge_kernel_carries(const mlajit_kernel_layout *layout, int h_q, const mlajit_tactic_bucket *edge_bucket,
                               const mlajit_decode_shape *shape, int sm_count)
{
    mlajit_decode_shape edge = MLAJIT_DECODE_SHAPE_INIT, at = *shape;
    edge.batch = edge_bucket->rows;
    edge.s_q = 1;
    edge.topk = edge_bucket->topk;
    edge.extra_topk = edge_bucket->extra_topk;
    at.num_splits = 0;
    const plan_grid ge = grid_for(layout, h_q, &edge, sm_count), g = grid_for(layout, h_q, &at, sm_count);
    const int slots = sm_count * (layout->blocks_per_sm > 0 ? layout->blocks_per_sm : 1);
    return g.num_splits == ge.num_splits && (grid_has_thin_tail(&ge, slots) || !grid_has_thin_tail(&g, slots));
}

/* Whether a tactic's choice fits a plan of spec (as asked, arch filled in) at
 * shape: 1 with *t filled; else 0 and why. Parses and resolves its kernel (no
 * compiling): it must be a kernel of the spec (model, heads, pages, features,
 * arch), the spec's own kernel where the spec names its variant, accept the
 * shape with its split count carried there (tactic_splits_at), and split only
 * where its layout splits. A record that follows the rules gives the rules'
 * kernel at this shape (or its own, where the rules leave it and it carries:
 * edge_kernel_carries), with the planner's split count. */
static int tactic_fits(const mlajit_kernel_spec *asked, const mlajit_decode_shape *shape, int sm_count,
                       const mlajit_tactic_match *m, plan_tactic *t, char *why, size_t why_len)
{
    const mlajit_tactic_record *r = &m->record;
    memset(t, 0, sizeof *t);
    mlajit_kernel_spec parsed = MLAJIT_KERNEL_SPEC_INIT, k = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_kernel_layout layout;
    if (mlajit_spec_parse(r->kernel, &parsed) != MLAJIT_OK || mlajit_spec_resolve(&parsed, &k) != MLAJIT_OK ||
        mlajit_codegen_layout(&k, &layout) != MLAJIT_OK) {
        snprintf(why, why_len, "its kernel does not resolve (%s)", mlajit_last_error());
        return 0;
    }
    if (!mlajit_kernel_is_of_spec(&k, asked)) {
        snprintf(why, why_len, "its kernel is not a kernel of the spec (another model, head count, page size, extra "
                               "page size, feature set or arch)");
        return 0;
    }
    if (asked->variant != MLAJIT_VARIANT_AUTO) {
        mlajit_kernel_spec own = MLAJIT_KERNEL_SPEC_INIT;
        char own_name[128] = "";
        if (mlajit_spec_resolve(asked, &own) != MLAJIT_OK ||
            mlajit_spec_string(&own, own_name, sizeof own_name) != MLAJIT_OK || strcmp(own_name, r->kernel) != 0) {
            mlajit_clear_error();
            snprintf(why, why_len, "the spec names its kernel (%s), and a tactic can only choose its split count",
                     own_name[0] ? own_name : "unresolved");
            return 0;
        }
    }
    t->tactic = m->exact ? MLAJIT_TACTIC_TUNED : MLAJIT_TACTIC_TUNED_BELOW;
    if (r->follows_rules) {
        /* the rules' plan won where it was measured (or came within the tuner's
         * margin of the best): the rules plan this shape too, with their split
         * count here; where they leave the recorded kernel, it stays while its
         * grid carries (edge_kernel_carries) */
        mlajit_kernel_spec chosen = *asked;
        walk_alternative_for(asked, asked->arch, shape, sm_count, &chosen);
        t->kernel = (mlajit_kernel_spec)MLAJIT_KERNEL_SPEC_INIT;
        char chosen_name[128];
        if (mlajit_spec_resolve(&chosen, &t->kernel) != MLAJIT_OK ||
            mlajit_spec_string(&t->kernel, chosen_name, sizeof chosen_name) != MLAJIT_OK) {
            snprintf(why, why_len, "the rules' kernel does not resolve (%s)", mlajit_last_error());
            return 0;
        }
        if (strcmp(chosen_name, r->kernel) != 0 && edge_kernel_carries(&layout, k.h_q, &r->bucket, shape, sm_count) &&
            mlajit_shape_validate(&k, shape) == MLAJIT_OK)
            t->kernel = k;
        mlajit_clear_error();
        t->num_splits = 0;
        return 1;
    }
    mlajit_decode_shape planned = *shape;
    planned.num_splits = tactic_splits_at(&layout, k.h_q, &r->bucket, r->num_splits, shape, sm_count);
    if (planned.num_splits < 0) {
        snprintf(why, why_len, "at this shape its grid would end in a wave of CTAs less than half full, where "
                               "it was measured with none (a wave's tail takes a whole CTA's time)");
        return 0;
    }
    if (mlajit_shape_validate(&k, &planned) != MLAJIT_OK) {
        snprintf(why, why_len, "its kernel does not take the shape (%s)", mlajit_last_error());
        return 0;
    }
    t->kernel = k;
    t->num_splits = planned.num_splits;
    return 1;
}

/* The tactic a plan of spec at shape takes, checked (tactic_fits): 1 with *t,
 * else 0 for the rules - no device, tactics not asked for (use_tactics 0),
 * splits fixed by the caller, no tactic, or one that does not fit (one warning
 * per context). *m (may be NULL) gets the look-up's answer. Compiles nothing. */
static int tactic_for(mlajit_context *ctx, const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape,
                      int sm_count, int use_tactics, plan_tactic *t, mlajit_tactic_match *m_out)
{
    mlajit_tactic_match local, *m = m_out ? m_out : &local;
    memset(m, 0, sizeof *m);
    if (!ctx->drv || shape->num_splits != 0 || !use_tactics)
        return 0;
    if (mlajit_tactic_lookup_memo(ctx, spec, shape, m) != MLAJIT_OK || !m->found) {
        mlajit_clear_error();
        memset(m, 0, sizeof *m);
        return 0;
    }
    mlajit_kernel_spec asked = *spec;
    if (!asked.arch[0])
        snprintf(asked.arch, sizeof asked.arch, "%s", ctx->arch);
    char why[512];
    if (!tactic_fits(&asked, shape, sm_count, m, t, why, sizeof why)) {
        mlajit_clear_error();
        warn_tactic_refused(ctx, m, why);
        m->found = 0;
        return 0;
    }
    return 1;
}

/* A public spec and shape as this library's (mlajit_abi_in): 0, or the status
 * after the message. */
static int take_spec_and_shape(const mlajit_kernel_spec **spec, mlajit_kernel_spec *spec_local,
                               const mlajit_decode_shape **shape, mlajit_decode_shape *shape_local)
{
    if (!(*spec = mlajit_abi_in(MLAJIT_ABI_KERNEL_SPEC, "spec", *spec, spec_local)) ||
        !(*shape = mlajit_abi_in(MLAJIT_ABI_DECODE_SHAPE, "shape", *shape, shape_local)))
        return MLAJIT_ERR_INVALID_ARGUMENT;
    return MLAJIT_OK;
}

/* The outline of a plan of kernel `resolved` with grid g, and where it came from. */
static int outline_of(const mlajit_kernel_spec *resolved, const plan_grid *g, int tactic, mlajit_plan_outline *o)
{
    *o = (mlajit_plan_outline)MLAJIT_PLAN_OUTLINE_INIT;
    int rc = mlajit_spec_string(resolved, o->kernel, sizeof o->kernel);
    if (rc)
        return rc;
    o->variant = resolved->variant;
    o->tile = resolved->tile;
    o->heads_per_cta = resolved->heads_per_cta;
    o->num_splits = g->num_splits;
    o->head_groups = g->head_groups;
    o->rows = g->rows;
    o->tiles_per_split = g->tiles_per_split;
    o->tactic = tactic;
    return MLAJIT_OK;
}

/* mlajit_plan_describe, with ctx's tactics (ctx NULL: the rules only). */
static int describe(mlajit_context *ctx, const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape,
                    int sm_count, const char *default_arch, mlajit_plan_outline *out, mlajit_tactic_match *m)
{
    if (m)
        memset(m, 0, sizeof *m);
    if (!spec || !shape || !out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "%s: NULL", !spec ? "spec" : !shape ? "shape" : "out");
    if (sm_count < 0)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "sm_count = %d; allowed 0 (%d) or more", sm_count,
                           MLAJIT_DEFAULT_SM_COUNT);
    mlajit_kernel_spec spec_local;
    mlajit_decode_shape shape_local;
    int rc = take_spec_and_shape(&spec, &spec_local, &shape, &shape_local);
    if (rc || (rc = mlajit_abi_check(MLAJIT_ABI_PLAN_OUTLINE, "out", out)))
        return rc;
    rc = mlajit_spec_validate(spec);
    if (rc || (rc = mlajit_shape_validate(spec, shape)))
        return rc;
    if (sm_count == 0)
        sm_count = MLAJIT_DEFAULT_SM_COUNT;
    mlajit_kernel_spec chosen = *spec, resolved = MLAJIT_KERNEL_SPEC_INIT;
    if (!chosen.arch[0])
        snprintf(chosen.arch, sizeof chosen.arch, "%s", default_arch);
    mlajit_decode_shape planned = *shape;
    plan_tactic t;
    int tactic = MLAJIT_TACTIC_RULES;
    if (ctx && tactic_for(ctx, spec, shape, sm_count, mlajit_context_tactics(ctx), &t, m)) {
        chosen = t.kernel;
        planned.num_splits = t.num_splits;
        tactic = t.tactic;
    } else {
        walk_alternative_for(spec, chosen.arch, shape, sm_count, &chosen);
    }
    mlajit_kernel_layout layout;
    if ((rc = mlajit_spec_resolve(&chosen, &resolved)) || (rc = mlajit_codegen_layout(&resolved, &layout)))
        return rc;
    const plan_grid g = grid_for(&layout, spec->h_q, &planned, sm_count);
    mlajit_plan_outline o;
    if ((rc = outline_of(&resolved, &g, tactic, &o)))
        return rc;
    mlajit_abi_out(MLAJIT_ABI_PLAN_OUTLINE, out, &o);
    return MLAJIT_OK;
}

int mlajit_plan_describe(const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape, int sm_count,
                         mlajit_plan_outline *out)
{
    mlajit_clear_error();
    return describe(NULL, spec, shape, sm_count, MLAJIT_DEFAULT_ARCH, out, NULL);
}

int mlajit_plan_describe_in(mlajit_context *ctx, const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape,
                            mlajit_plan_outline *out, mlajit_tactic_match *tactic_out)
{
    mlajit_clear_error();
    if (!ctx)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "ctx: NULL");
    return describe(ctx, spec, shape, ctx->sm_count > 0 ? ctx->sm_count : MLAJIT_DEFAULT_SM_COUNT, ctx->arch, out,
                    tactic_out);
}

int mlajit_plan_describe_in_context(mlajit_context *ctx, const mlajit_kernel_spec *spec,
                                    const mlajit_decode_shape *shape, mlajit_plan_outline *out)
{
    return mlajit_plan_describe_in(ctx, spec, shape, out, NULL);
}

int mlajit_plan_get_outline(const mlajit_plan *plan, mlajit_plan_outline *out)
{
    mlajit_clear_error();
    if (!plan || !out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "%s: NULL", !plan ? "plan" : "out");
    int rc = mlajit_abi_check(MLAJIT_ABI_PLAN_OUTLINE, "out", out);
    if (rc)
        return rc;
    const plan_grid g = {.head_groups = plan->head_groups, .rows = plan->rows, .num_tiles = plan->num_tiles,
                         .num_splits = plan->num_splits, .tiles_per_split = plan->tiles_per_split};
    mlajit_plan_outline o;
    if ((rc = outline_of(&plan->kernel->spec, &g, plan->tactic, &o)))
        return rc;
    mlajit_abi_out(MLAJIT_ABI_PLAN_OUTLINE, out, &o);
    return MLAJIT_OK;
}

int mlajit_plan_create(mlajit_context *ctx, const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape,
                       mlajit_plan **out)
{
    return mlajit_plan_create_tactics(ctx, spec, shape, mlajit_context_tactics(ctx), out);
}

int mlajit_plan_create_tactics(mlajit_context *ctx, const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape,
                               int use_tactics, mlajit_plan **out)
{
    mlajit_clear_error();
    if (!out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "out: NULL; pass the address of a mlajit_plan *");
    *out = NULL;
    if (!ctx || !spec || !shape)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "%s: NULL", !ctx ? "ctx" : !spec ? "spec" : "shape");
    mlajit_kernel_spec spec_local;
    mlajit_decode_shape shape_local;
    int rc = take_spec_and_shape(&spec, &spec_local, &shape, &shape_local);
    if (rc || (rc = mlajit_spec_validate(spec)))
        return rc;
    if ((rc = mlajit_shape_validate(spec, shape)))
        return rc;
    const mlajit_kernel *k = NULL;
    mlajit_kernel_report report = MLAJIT_KERNEL_REPORT_INIT;
    /* no device: plan for an H100/H200 (MLAJIT_DEFAULT_SM_COUNT SMs, 50 MB of L2) */
    int sm_count = ctx->sm_count > 0 ? ctx->sm_count : MLAJIT_DEFAULT_SM_COUNT;
    int64_t l2_bytes = ctx->l2_bytes > 0 ? ctx->l2_bytes : 50LL << 20;
    /* Without a device the plan still compiles (and validates decode args);
     * mlajit_decode then reports MLAJIT_ERR_NO_DEVICE. auto takes a walk
     * alternative (scores kernel, long walk, head split, head groups, short walk)
     * where it is faster and can be had (JIT, disk cache or pack); where it
     * cannot (no JIT and not packed, say), auto's own kernel, as without it. */
    /* A tuned tactic first (checked, its kernel acquired: a tactic whose kernel
     * cannot be had falls back to the rules, with one warning per context). */
    mlajit_decode_shape planned = *shape;
    int tactic = MLAJIT_TACTIC_RULES;
    plan_tactic t;
    mlajit_tactic_match m;
    if (tactic_for(ctx, spec, shape, sm_count, use_tactics, &t, &m)) {
        if (mlajit_kernel_acquire(ctx, &t.kernel, ctx->drv != NULL, &k, &report) == MLAJIT_OK) {
            planned.num_splits = t.num_splits;
            tactic = t.tactic;
        } else {
            char why[512];
            snprintf(why, sizeof why, "its kernel cannot be had (%s)", mlajit_last_error());
            mlajit_clear_error();
            warn_tactic_refused(ctx, &m, why);
            k = NULL;
        }
    }
    mlajit_kernel_spec alt;
    if (!k && walk_alternative_for(spec, ctx->arch, shape, sm_count, &alt) &&
        mlajit_kernel_acquire(ctx, &alt, ctx->drv != NULL, &k, &report) != MLAJIT_OK) {
        mlajit_clear_error();
        k = NULL;
    }
    if (!k && (rc = mlajit_kernel_acquire(ctx, spec, ctx->drv != NULL, &k, &report)))
        return mlajit_fail_prefix(rc, "plan: ");

    mlajit_plan *p = mlajit_calloc(1, sizeof *p);
    if (!p)
        return mlajit_fail_oom("the plan");
    p->ctx = ctx;
    p->kernel = k;
    p->shape = *shape;
    p->model = mlajit_spec_desc(spec);
    p->tactic = tactic;
    plan_grid g = grid_for(&k->layout, spec->h_q, &planned, sm_count);
    p->head_groups = g.head_groups;
    p->rows = g.rows;
    p->num_tiles = g.num_tiles;
    p->num_splits = g.num_splits;
    p->tiles_per_split = g.tiles_per_split;
    /* The grid after the main kernel: the combine where the plan splits; else the
     * stream's next kernel, which in a decode loop is the next call's main grid, so
     * it is taken to be this one's size (bench/HISTORY.md, "I, J, K and R timed":
     * -0.0 to -0.9% on the unsplit rows of 64 CTAs). */
    const long main_ctas = (long)g.head_groups * g.rows * g.num_splits;
    const long dependent_ctas = p->num_splits > 1 ? (long)g.rows * spec->h_q : main_ctas;
    p->release_dependent_early = k->layout.dependent_launch &&
                                 mlajit_dependent_starts_early(main_ctas, sm_count, dependent_ctas);
    const int64_t gathered_bytes = (int64_t)shape->batch * shape->s_q * (shape->topk + shape->extra_topk) *
                                   p->model->bytes_per_token;
    p->prefetch_evict_last = mlajit_prefetch_evict_last(gathered_bytes, l2_bytes);
    if (p->num_splits > 1)
        p->combine_smem_bytes = mlajit_combine_smem_bytes(&k->layout, p->num_splits);
    if (p->num_splits > 1 && p->rows > 0) {
        size_t partial_rows = (size_t)p->num_splits * p->rows * spec->h_q;
        p->partial_out_bytes = round_up(partial_rows * p->model->d_v * sizeof(float), kWorkspaceAlign);
        p->workspace_bytes = p->partial_out_bytes + round_up(partial_rows * sizeof(float), kWorkspaceAlign);
    }
    *out = p;
    return MLAJIT_OK;
}

void mlajit_plan_destroy(mlajit_plan *plan) { free(plan); }

size_t mlajit_plan_workspace_size(const mlajit_plan *plan) { return plan ? plan->workspace_bytes : 0; }

int mlajit_plan_num_splits(const mlajit_plan *plan) { return plan ? plan->num_splits : 0; }

const mlajit_kernel_report *mlajit_plan_report(const mlajit_plan *plan) { return plan ? &plan->kernel->report : NULL; }
