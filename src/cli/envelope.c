/* mlajit envelope: the supported envelope as tables, or one spec (and call
 * geometry) checked against it. Every "ok" or "no" printed here is the answer
 * of mlajit_envelope_check itself, so the table and the API cannot disagree.
 * Nothing here compiles; with a geometry a context is opened (the GPU, if any,
 * and the cache and packs) to say which tactic a plan of it takes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "codegen/codegen.h"
#include "common/error.h"
#include "mlajit.h"
#include "runtime/nvrtc.h"
#include "runtime/runtime.h"

static const mlajit_model all_models[] = {MLAJIT_MODEL_V32,       MLAJIT_MODEL_DSV4,      MLAJIT_MODEL_GLM_NSA,
                                          MLAJIT_MODEL_GLM53_NOPE, MLAJIT_MODEL_DOTS3_SWA, MLAJIT_MODEL_V32_BF16,
                                          MLAJIT_MODEL_DSV4_BF16};

static const char *scale_text(const mlajit_model_desc *d)
{
    switch (d->scale_format) {
    case MLAJIT_SCALE_FP32_POW2: return "fp32 pow2";
    case MLAJIT_SCALE_FP32: return "fp32";
    case MLAJIT_SCALE_UE8M0: return "ue8m0";
    case MLAJIT_SCALE_NONE: return "none (bf16)";
    }
    return "?";
}

/* The shared memory the portable kernel needs, or 0 when it cannot be laid out. */
static int variant_smem(mlajit_model model, int tile, int heads_per_cta)
{
    mlajit_kernel_spec r = {.struct_size = sizeof r, .model = model, .h_q = 128, .page_size = 64, .tile = tile,
                            .heads_per_cta = heads_per_cta, .variant = MLAJIT_VARIANT_PORTABLE};
    mlajit_kernel_layout layout;
    return mlajit_codegen_layout(&r, &layout) == MLAJIT_OK ? layout.smem_bytes : 0;
}

/* "16, 32, 64": a set of sizes (MLAJIT_SIZES). */
static void sizes_text(unsigned sizes, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int v = 8; v <= 64 && used < len; v += 8)
        if (mlajit_family_takes(sizes, v))
            used += (size_t)snprintf(buf + used, len - used, "%s%d", used ? ", " : "", v);
}

/* One family's row: its arch, tiles, heads per CTA, models and what sets it apart. */
static void print_family(const mlajit_family *f)
{
    char tiles[32], heads[32];
    sizes_text(f->tiles, tiles, sizeof tiles);
    sizes_text(f->heads_per_cta, heads, sizeof heads);
    const char *alias = f->alias_when ? mlajit_variant_name(f->alias) : NULL;
    printf("  %-14s   %-18s %-7s tile %-7s heads per CTA %-15s models %s%s%s%s%s%s%s\n", "", f->name,
           f->arch ? f->arch : "sm_80+", tiles, heads, f->models, f->pairs ? "; CTA pairs at 65-128 heads" : "",
           f->single_split ? "; never splits" : "", f->staged_output ? "; output staged" : "",
           alias ? "; " : "", alias ? alias : "", alias ? " where it adds nothing" : "");
}

/* The generator's choice for h_q on arch, as "t64.hc32", or "-" when none fits. */
static void auto_choice(mlajit_model model, int h_q, const char *arch, char *buf, size_t len)
{
    mlajit_kernel_spec s = {.struct_size = sizeof s, .model = model, .h_q = h_q, .page_size = 64},
                       r = MLAJIT_KERNEL_SPEC_INIT;
    snprintf(s.arch, sizeof s.arch, "%s", arch);
    if (mlajit_envelope_check(&s, NULL) == MLAJIT_OK && mlajit_spec_resolve(&s, &r) == MLAJIT_OK)
        snprintf(buf, len, "t%d.hc%d", r.tile, r.heads_per_cta);
    else
        snprintf(buf, len, "-");
}

static void print_tables(void)
{
    int major, minor;
    printf("mlajit envelope: what mlajit_envelope_check accepts (answered without CUDA or compiling)\n\n");

    printf("call geometry (mlajit_decode_shape; the planner checks the same)\n");
    printf("  %-14s 0..%d\n", "batch", MLAJIT_MAX_BATCH);
    printf("  %-14s 0..%d (b = 0 and s_q = 0 are no-ops)\n", "s_q", MLAJIT_MAX_SQ);
    printf("  %-14s at most %d (a mixed batch of T tokens as (T, 1) or (T / s_q, s_q))\n", "batch x s_q",
           MLAJIT_MAX_ROWS);
    printf("  %-14s 1..%d, any value (tile multiple or not)\n", "topk", MLAJIT_MAX_TOPK);
    printf("  %-14s 0 without an extra cache; 1..%d with one\n", "extra_topk", MLAJIT_MAX_TOPK);
    printf("  %-14s 0 (planner's choice) or 1..%d (lowered so no split is empty)\n", "num_splits", MLAJIT_MAX_SPLITS);
    printf("  %-14s -1 and any slot outside [0, pages * page size) are skipped; topk lengths may be 0 or past topk\n\n",
           "indices");

    printf("kernel spec (mlajit_kernel_spec)\n");
    printf("  %-14s " MLAJIT_MODEL_NAMES "\n", "model");
    printf("  %-14s 1..%d\n", "h_q", MLAJIT_MAX_HEADS);
    printf("  %-14s 1..%d tokens\n", "page_size", MLAJIT_MAX_PAGE_SIZE);
    printf("  %-14s 0 (no extra cache) or 1..%d\n", "extra_page_size", MLAJIT_MAX_PAGE_SIZE);
    printf("  %-14s sink, topk-length, extra-topk-length (needs an extra cache)\n", "features");
    printf("  %-14s 0 (auto), 32, 64 candidates\n", "tile");
    printf("  %-14s 0 (auto), 16, 32, 64 (and 8, 24 with variant sm90-narrow or sm90-narrow-long)\n"
           "  %-14s (the narrow pair: at most h_q rounded up to 8 and 32; fewer split the heads into groups)\n",
           "heads_per_cta", "");
    printf("  %-14s auto (on sm_90a where tile and heads_per_cta allow: sm90-narrow at 32 heads and fewer\n"
           "  %-14s with power-of-two scales, else sm90; elsewhere portable; a plan may switch to sm90-staged,\n"
           "  %-14s sm90-narrow-scores, sm90-narrow-long or sm90-narrow in head groups by its walk and\n"
           "  %-14s grid), or a family by name (its row in src/codegen/families.c):\n",
           "variant", "", "", "");
    for (int i = 0; i < mlajit_family_count; i++)
        print_family(&mlajit_families[i]);
    printf("  %-14s retired (refused; bench/NOTES.md): " MLAJIT_VARIANT_RETIRED_NAMES "\n", "");
    printf("  %-14s \"\" (the device's; %s without one), %s\n\n", "arch", MLAJIT_DEFAULT_ARCH, mlajit_arch_list());

    printf("models (KV-cache layouts, SPEC.md)\n");
    printf("  %-10s %5s %6s %6s %4s %11s  %s\n", "model", "d_qk", "d_nope", "d_rope", "d_v", "bytes/token",
           "scales");
    for (size_t m = 0; m < sizeof all_models / sizeof all_models[0]; m++) {
        const mlajit_model_desc *d = mlajit_model_describe(all_models[m]);
        if (d->scale_format == MLAJIT_SCALE_NONE)
            printf("  %-10s %5d %6d %6d %4d %11d  none: bf16 values\n", d->name, d->d_qk, d->d_nope, d->d_rope,
                   d->d_v, d->bytes_per_token);
        else
            printf("  %-10s %5d %6d %6d %4d %11d  %d x %s per %d dims, %s\n", d->name, d->d_qk, d->d_nope,
                   d->d_rope, d->d_v, d->bytes_per_token, d->num_scales, scale_text(d), d->quant_tile,
                   d->scale_place == MLAJIT_SCALES_INLINE ? "inline" : "page footer");
    }

    mlajit_nvrtc_version(&major, &minor);
    char where[1200];
    if (mlajit_nvrtc_where(where, sizeof where) == MLAJIT_OK)
        printf("\narch targets: NVRTC %d.%d, and each kernel variant's shared memory per block\n", major, minor);
    else
        printf("\narch targets: no NVRTC (%s), and each kernel variant's shared memory per block\n", where);
    printf("(tile x heads per CTA; 'no' = over the arch's limit, or 64 heads at d_v 1024 (their registers); auto = "
           "the generator's choice for h_q 16 / 128)\n");
    static const int variants[][2] = {{32, 16}, {32, 32}, {32, 64}, {64, 16}, {64, 32}, {64, 64}};
    const int nvariants = (int)(sizeof variants / sizeof variants[0]);
    printf("  %-8s %-6s %9s  %-10s", "arch", "nvrtc", "smem max", "model");
    for (int v = 0; v < nvariants; v++) {
        char head[24];
        snprintf(head, sizeof head, "t%d.hc%d", variants[v][0], variants[v][1]);
        printf(" %-12s", head);
    }
    printf(" auto\n");
    char list[256];
    snprintf(list, sizeof list, "%s", mlajit_arch_list());
    for (char *save = NULL, *arch = strtok_r(list, ", ", &save); arch; arch = strtok_r(NULL, ", ", &save)) {
        int targetable = mlajit_nvrtc_supports(arch);
        for (size_t m = 0; m < sizeof all_models / sizeof all_models[0]; m++) {
            if (m == 0)
                printf("  %-8s %-6s %9d  ", arch, targetable ? "yes" : "no", mlajit_arch_max_smem(arch));
            else
                printf("  %-8s %-6s %9s  ", "", "", "");
            printf("%-10s", mlajit_model_describe(all_models[m])->name);
            for (int v = 0; v < nvariants; v++) {
                mlajit_kernel_spec s = {.struct_size = sizeof s, .model = all_models[m], .h_q = 128, .page_size = 64,
                                        .tile = variants[v][0], .heads_per_cta = variants[v][1]};
                snprintf(s.arch, sizeof s.arch, "%s", arch);
                int ok = mlajit_envelope_check(&s, NULL) == MLAJIT_OK;
                char cell[24];
                snprintf(cell, sizeof cell, "%s %dK", ok ? "ok" : "no", (variant_smem(all_models[m], variants[v][0],
                                                                                       variants[v][1]) + 1023) / 1024);
                printf(" %-12s", cell);
            }
            char small[16], large[16];
            auto_choice(all_models[m], 16, arch, small, sizeof small);
            auto_choice(all_models[m], 128, arch, large, sizeof large);
            printf(" %s / %s\n", small, large);
        }
    }
    printf("\ncheck one: mlajit envelope SPEC [--batch B] [--s-q S] [--topk K] [--extra-topk E] [--splits N]\n");
    printf("           (SPEC as printed by mlajit compile, e.g. v32.h128.p64.t64.hc32.portable.sm_86, or a\n"
           "           short form such as v32.h16.p64: fields left off take their defaults)\n");
}

static const char envelope_usage[] =
    "usage: mlajit envelope [SPEC [--batch B] [--s-q S] [--topk K] [--extra-topk E] [--splits N]]\n"
    "  without SPEC: the supported envelope as tables (what mlajit_envelope_check accepts)\n"
    "  with SPEC: whether that kernel spec (and, with a geometry, that call) is accepted, the\n"
    "  reason when not, and with a geometry the kernel and grid its plan launches (on this\n"
    "  machine's GPU with its tactics, else on an H100 / H200 by the rules) and whether a\n"
    "  measured tactic chose them\n"
    "  SPEC: model.hN.pN[.eN][.f<s|l|x>][.tN][.hcN][.variant][.arch]; fields left off take\n"
    "        their defaults (e.g. v32.h16.p64, dsv4.h64.p256.e64.fs, v32.h128.p64.t64.hc64.sm90.sm_90a)\n"
    "  --batch B, --s-q S, --topk K, --extra-topk E, --splits N   the call's geometry (defaults:\n"
    "        batch 1, s_q 1, topk 2048, extra_topk 64 with an extra cache, the planner's splits)\n"
    "exit status: 0 accepted, 1 rejected (the reason is printed), 2 usage or a SPEC that does not parse\n";

/* What a plan of this geometry launches (no compiling): on this machine's GPU
 * with its tactics where it has one, else on an H100 / H200 by the rules; and
 * which tactic chose it, and whether it was measured. */
static void describe_plan(const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape)
{
    mlajit_context *ctx = NULL;
    if (mlajit_context_create(NULL, &ctx) != MLAJIT_OK)
        ctx = NULL; /* the rules, as without a GPU */
    mlajit_plan_outline o = MLAJIT_PLAN_OUTLINE_INIT;
    mlajit_tactic_match m;
    memset(&m, 0, sizeof m);
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    int sm_count = MLAJIT_DEFAULT_SM_COUNT;
    if (ctx && mlajit_context_get_info(ctx, &info) == MLAJIT_OK && info.has_device && info.sm_count > 0)
        sm_count = info.sm_count;
    int rc = ctx ? mlajit_plan_describe_in(ctx, spec, shape, &o, &m) : mlajit_plan_describe(spec, shape, 0, &o);
    if (rc == MLAJIT_OK) {
        printf("plan on %d SMs: %s, %d head groups%s x %d rows x %d splits = %ld CTAs; a CTA walks at most %d "
               "tile%s of %d candidates\n", sm_count, o.kernel, o.head_groups,
               mlajit_family_of(o.variant) && mlajit_family_of(o.variant)->dim_halves
                   ? " (each half of the dims of one group of heads)"
                   : "",
               o.rows, o.num_splits, (long)o.head_groups * o.rows * o.num_splits, o.tiles_per_split,
               o.tiles_per_split == 1 ? "" : "s", o.tile);
        if (o.tactic != MLAJIT_TACTIC_RULES && m.found) {
            const mlajit_tactic_record *r = &m.record;
            const mlajit_pack *pack = m.pack_index >= 0 ? mlajit_context_pack(ctx, m.pack_index) : NULL;
            char choice[64];
            if (r->follows_rules)
                snprintf(choice, sizeof choice, "the rules' plan won there, so the rules plan here");
            else
                snprintf(choice, sizeof choice, "%d splits%s", r->num_splits, r->num_splits ? "" : " (the planner's)");
            printf("tactic: tuned (measured) at %s rows %d, topk %d, extra_topk %d on %s: %s, %.2f us "
                   "(rules %.2f us); from %s %s\n",
                   o.tactic == MLAJIT_TACTIC_TUNED ? "this shape's bucket," : "the nearest bucket below,",
                   r->bucket.rows, r->bucket.topk, r->bucket.extra_topk, r->gpu.name, choice, r->tuned_us,
                   r->rules_us, pack ? "pack" : "cache", pack ? mlajit_pack_path(pack) : info.cache_dir);
        } else {
            const char *why = !ctx || !info.has_device     ? "no GPU here: tactics are measured per GPU"
                              : shape->num_splits          ? "--splits fixes the split count"
                              : !mlajit_context_tactics(ctx) ? "tactics are off: MLAJIT_TACTICS=0"
                                                           : "no tactic measured for this GPU, spec and bucket";
            printf("tactic: the rules (not measured; %s)\n", why);
        }
    }
    mlajit_context_destroy(ctx);
}

int cli_envelope(int argc, char **argv)
{
    mlajit_decode_shape shape = {.struct_size = sizeof shape, .batch = 1, .s_q = 1, .topk = 2048, .extra_topk = -1};
    int with_shape = 0;
    /* wide ranges: the envelope check itself says what is allowed, as the API would */
    const cli_option options[] = {
        {"--batch", CLI_INT, &shape.batch, -1000000, 1000000, .given = &with_shape},
        {"--s-q", CLI_INT, &shape.s_q, -1000000, 1000000, .given = &with_shape},
        {"--topk", CLI_INT, &shape.topk, -1000000, 1000000, .given = &with_shape},
        {"--extra-topk", CLI_INT, &shape.extra_topk, -1000000, 1000000, .given = &with_shape},
        {"--splits", CLI_INT, &shape.num_splits, -1000000, 1000000, .given = &with_shape},
    };
    const cli_command cmd = {"envelope", envelope_usage, options, sizeof options / sizeof options[0], 0, 1,
                             "one SPEC at most"};
    int n, rc = cli_parse(&cmd, argc, argv, &n);
    if (rc != CLI_PARSED)
        return rc;
    if (n == 0) {
        if (with_shape)
            return cli_usage_error(&cmd, "--batch, --s-q, --topk, --extra-topk and --splits need a SPEC");
        print_tables();
        return CLI_OK;
    }
    mlajit_kernel_spec spec = MLAJIT_KERNEL_SPEC_INIT;
    if (!cli_parse_spec("envelope", argv[1], &spec))
        return CLI_USAGE;
    if (shape.extra_topk < 0)
        shape.extra_topk = spec.extra_page_size ? 64 : 0;
    rc = mlajit_envelope_check(&spec, with_shape ? &shape : NULL);
    if (rc) {
        printf("rejected (%s): %s\n", mlajit_status_string(rc), mlajit_last_error());
        return CLI_FAIL;
    }
    mlajit_kernel_spec resolved = MLAJIT_KERNEL_SPEC_INIT;
    if (!spec.arch[0])
        snprintf(spec.arch, sizeof spec.arch, "%s", MLAJIT_DEFAULT_ARCH);
    char name[128] = "";
    if (mlajit_spec_resolve(&spec, &resolved) == MLAJIT_OK)
        mlajit_spec_string(&resolved, name, sizeof name);
    if (with_shape) {
        printf("accepted: %s with batch %d, s_q %d, topk %d, extra_topk %d, splits %d\n", name, shape.batch,
               shape.s_q, shape.topk, shape.extra_topk, shape.num_splits);
        describe_plan(&spec, &shape);
    } else
        printf("accepted: %s\n", name);
    return CLI_OK;
}
