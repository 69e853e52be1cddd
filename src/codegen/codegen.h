/* Internal: what the runtime needs from the generator beyond the public API.
 * The kernel families' table, the targets and the layout: families.h. */
#ifndef MLAJIT_CODEGEN_CODEGEN_H
#define MLAJIT_CODEGEN_CODEGEN_H
#include <stddef.h>
#include <stdint.h>

#include "codegen/families.h"
#include "mlajit.h"

/* The named models, in models.c's table order: what every message listing the
 * allowed model names says (tests/test_layout.c checks it against the table). */
#define MLAJIT_MODEL_NAMES "v32, dsv4, glm_nsa, glm53_nope, dots3_swa, v32_bf16, dsv4_bf16"

#define MLAJIT_ENTRY_MAIN "mlajit_decode_main"
#define MLAJIT_ENTRY_COMBINE "mlajit_decode_combine"

/* The optional inputs' names, as the CLI and the sweep's shape lines write them:
 * sink, topk-length, extra-topk-length. mlajit_feature_name: the i-th name and
 * its MLAJIT_FEATURE_* bit (may be NULL), NULL past the last; from_name: the bit
 * of a name, else MLAJIT_ERR_INVALID_ARGUMENT listing the names. */
const char *mlajit_feature_name(int i, unsigned *bit);
int mlajit_feature_from_name(const char *name, unsigned *bit);

/* mlajit_spec_parse without the envelope check: the string's fields only (the
 * short forms too: v32.h16.p64 leaves tile, heads per CTA, variant and arch to
 * their defaults). MLAJIT_ERR_INVALID_ARGUMENT naming the form when malformed. */
int mlajit_spec_parse_fields(const char *str, mlajit_kernel_spec *out);

/* The kernel auto switches to for a short walk per CTA: for an auto spec on sm_90a
 * (arch "" means default_arch) with more than 32 heads and power-of-two scales,
 * the sm90-staged variant, which beat sm90 on the rows of bench/NOTES.md where a
 * plan does not split and, in a CTA pair (65-128 heads), each CTA walks fewer than
 * MLAJIT_STAGED_PAIR_BELOW_TILES tiles of 64: its output, 32-64 KB per CTA, costs
 * less, while in a pair its loop ran slower (at 32 tiles, 11% overall; at 18, 4%
 * faster overall); with one head group it won at every walk measured (2 to 32
 * tiles). At 32 heads and fewer it tied or lost 0.3-0.4 us. It never splits: its
 * staged epilogue writes only the bf16 result (with a split-partial path too,
 * ptxas spilled). 1 and *alt (arch set) when the spec has such an alternative,
 * else 0. */
int mlajit_spec_short_walk_alternative(const mlajit_kernel_spec *spec, const char *default_arch,
                                       mlajit_kernel_spec *alt);

/* The kernel auto switches to for a long walk per CTA: for an auto spec on sm_90a
 * (arch "" means default_arch) that resolves to sm90-narrow, sm90-narrow-long
 * where it resolves as itself (its third producer group's ring slot fits: v32 at
 * 16 heads and fewer). On the H200 it beat sm90-narrow by 8.6% at V3.2 h8 b128
 * and b256 topk 2048 (32 tiles per CTA) and 4% at b64 (16 tiles, two splits), and
 * lost 3-7% at 1-8 tiles per CTA (its 512 threads' start-up; bench/HISTORY.md, "A
 * third producer group"). 1 and *alt (arch set) when the spec has such an
 * alternative, else 0. */
int mlajit_spec_long_walk_alternative(const mlajit_kernel_spec *spec, const char *default_arch,
                                      mlajit_kernel_spec *alt);

/* The kernel auto switches to for a walk of a few tiles or more per CTA at 1-8 heads:
 * for an auto spec on sm_90a (arch "" means default_arch) with h_q <= 8 that resolves
 * to sm90-narrow-scores as itself (v32's inline scales), which plans take where each
 * CTA walks at least MLAJIT_NARROW_SCORES_FROM_TILES tiles. On the H200 (bench/HISTORY.md,
 * "sm90-narrow-scores"), against sm90-narrow(-long) in the same call: V3.2 h8 b 128
 * topk 512 20.3 -> 19.1 us, b 64 topk 512 (4 tiles per CTA) 14.0 -> 13.6, b 64 topk
 * 2048 38.1 -> 37.0, b 128 and 256 topk 2048 61.7 -> 61.2 and 119.9 -> 119.1; at 1-2
 * tiles per CTA 4-23% slower (one group takes a tile's work the other kernels share).
 * At 3, 4, 5 and 7 heads the same (bench/HISTORY.md, "sm90-narrow-scores at 1-7 heads"):
 * -5 to -9% at topk 512, -5% at b 64 topk 2048, -1 to -2% at b 128 and 256; slower at
 * one tile per CTA (1, 2 and 6 heads were not timed).
 * 1 and *alt (arch set) when the spec has such an alternative, else 0. */
int mlajit_spec_scores_alternative(const mlajit_kernel_spec *spec, const char *default_arch,
                                   mlajit_kernel_spec *alt);

/* The kernel auto switches to where its plan leaves at least half of the SMs idle
 * (one row, or a short walk of few rows: no split would pay for its combine): for
 * an auto spec on sm_90a (arch "" means default_arch) that resolves to sm90-narrow
 * with 9-32 heads, sm90-narrow with its head group halved (rounded up to 8: 16
 * heads by 8, 17-32 by 16), so twice the CTAs each do half the math and write half
 * the output, and gather the same rows (the second read mostly from L2); past 32
 * heads with power-of-two scales, the head groups' kernel (below) halved: groups
 * of 16. On the H200 (bench/HISTORY.md, "sm90-narrow's heads in groups"): V3.2 h32
 * b 1 9.5 -> 8.1 us, h32 b 64 topk 128 10.8 -> 9.0, h16 7.8 -> 7.3 and 8.7 -> 8.0,
 * DSV4 h32 b 2 10.0 -> 8.9; V3.2 h64 b 1 9.8 (groups of 32) -> 8.9; wherever the
 * grid already filled the SMs it lost (up to 2x). 1 and *alt (arch set) when the
 * spec has such an alternative, else 0. */
int mlajit_spec_head_split_alternative(const mlajit_kernel_spec *spec, const char *default_arch,
                                       mlajit_kernel_spec *alt);

/* The kernel auto switches to past 32 heads where the wide kernels' grid is small
 * (few rows, short walks): for an auto spec on sm_90a (arch "" means
 * default_arch) with more than 32 heads and power-of-two scales, sm90-narrow in
 * head groups of 32, which plans take where its grid fits one wave of CTAs and
 * a row-split's tiles, summed over its head groups (each group gathers them
 * again), are at most MLAJIT_HEAD_GROUPS_MAX_TILES. On the H200 (bench/HISTORY.md,
 * "sm90-narrow past 32 heads"): V3.2 h64 b 64 topk 512 33.3 -> 25.2 us, h64 b 64
 * topk 128 12.1 -> 11.3, h128 b 1 12.8 -> 11.4, DSV4 h64 b 2 12.5 -> 10.6; at 32
 * tile gathers (h128 b 8) or 64 (h64 b 64 topk 2048) it lost 5-8%, and 1.3-2.3x
 * where its grid took a second wave. 1 and *alt (arch set) when the spec has such
 * an alternative, else 0. */
int mlajit_spec_head_groups_alternative(const mlajit_kernel_spec *spec, const char *default_arch,
                                        mlajit_kernel_spec *alt);

/* Every kernel an auto plan of spec may switch to, whatever its shape: the scores
 * kernel's, the long-walk, the head-split, the head-groups and the short-walk
 * alternative (the order plans ask them in), where it has them, into alts (arch
 * set).
 * Returns how many (0..MLAJIT_WALK_ALTERNATIVES). The one list that plans (which
 * take the first that suits their walk), grids and pack hints use. (Retired: the
 * sliced family, the long-walk alternative at 9-16 heads until sm90-narrow's row
 * ring beat it there, bench/HISTORY.md "The row ring"; sm90-unpaired, the one-tile
 * alternative at 65-128 heads, which a tuning run picked for no bucket.) */
#define MLAJIT_WALK_ALTERNATIVES 5
int mlajit_spec_walk_alternatives(const mlajit_kernel_spec *spec, const char *default_arch,
                                  mlajit_kernel_spec alts[MLAJIT_WALK_ALTERNATIVES]);

/* The canonical string of a spec as it is asked for: its fields as given, the
 * generator's choices NOT resolved ("v32.h32.p64.t0.hc0.auto.sm_90a"), arch ""
 * replaced by default_arch (NULL: left as "any"). What a plan knows before it
 * has chosen its kernel: the key of its tactics (cache/tactics.h). */
int mlajit_spec_string_as_asked(const mlajit_kernel_spec *spec, const char *default_arch, char *buf, size_t len);

/* *out = *spec, with a custom layout that is a named model's replaced by that
 * model (layout zeroed): the one form a kernel has, so that its string, memo
 * entry and generated source are the named model's. 1 when it replaced. */
int mlajit_spec_named_model(const mlajit_kernel_spec *spec, mlajit_kernel_spec *out);

/* ---- the envelope (envelope.c) ---------------------------------------------- */

#define MLAJIT_DEFAULT_ARCH "sm_90a" /* the target without a device (spec.arch "") */
/* MLAJIT_MAX_SPLITS, the split-KV splits a plan may use: families.h (the combine
 * has a thread per split's lse) */

/* Check a call geometry against a spec: batch, s_q, topk, extra_topk (present
 * exactly when the spec has an extra cache) and num_splits. */
int mlajit_shape_validate(const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape);

/* What the compiler can target, asked by the envelope check. The generator does
 * not link a compiler: the runtime passes its NVRTC query here. */
typedef struct mlajit_target_probe {
    int (*supports)(const char *arch); /* 1 when a cubin for arch can be built */
    const char *compiler_name;         /* for messages, e.g. "NVRTC 13.0" */
} mlajit_target_probe;

/* mlajit_envelope_check with the compiler probe passed in (NULL: not asked).
 * Validates the spec, resolves the generator's choices for spec->arch ("" =
 * MLAJIT_DEFAULT_ARCH), checks they fit the arch's shared memory, asks the
 * probe, and checks shape when it is not NULL. */
int mlajit_envelope_check_with(const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape,
                               const mlajit_target_probe *probe);

#endif
