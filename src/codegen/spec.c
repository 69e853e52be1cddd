/* Kernel specs: validation against the envelope, the generator's choices, and
 * the canonical spec string that names every kernel. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "codegen/families.h"
#include "common/abi.h"
#include "common/alloc.h"
#include "common/error.h"
#include "mlajit.h"

int mlajit_spec_init(mlajit_kernel_spec *spec, mlajit_model model, int h_q, int page_size)
{
    int rc = mlajit_abi_check(MLAJIT_ABI_KERNEL_SPEC, "spec", spec);
    if (rc)
        return rc;
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    s.model = model;
    s.h_q = h_q;
    s.page_size = page_size;
    mlajit_abi_out(MLAJIT_ABI_KERNEL_SPEC, spec, &s);
    return mlajit_spec_validate(&s);
}

int mlajit_spec_init_layout(mlajit_kernel_spec *spec, const mlajit_layout *layout, int h_q, int page_size)
{
    int rc = mlajit_abi_check(MLAJIT_ABI_KERNEL_SPEC, "spec", spec);
    if (rc || (rc = mlajit_layout_validate(layout)))
        return rc;
    if (spec->struct_size < offsetof(mlajit_kernel_spec, layout) + sizeof(mlajit_layout))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "spec.struct_size = %zu has no room for spec.layout; build with mlajit.h 1.1 or newer "
                           "(MLAJIT_KERNEL_SPEC_INIT)", spec->struct_size);
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    s.model = MLAJIT_MODEL_CUSTOM;
    s.layout = *layout;
    s.h_q = h_q;
    s.page_size = page_size;
    mlajit_abi_out(MLAJIT_ABI_KERNEL_SPEC, spec, &s);
    return mlajit_spec_validate(&s);
}

static int page_size_ok(int p) { return p >= 1 && p <= MLAJIT_MAX_PAGE_SIZE; }

int mlajit_spec_validate(const mlajit_kernel_spec *caller_spec)
{
    mlajit_kernel_spec local;
    const mlajit_kernel_spec *spec = mlajit_abi_in(MLAJIT_ABI_KERNEL_SPEC, "spec", caller_spec, &local);
    if (!spec)
        return MLAJIT_ERR_INVALID_ARGUMENT;
    static const mlajit_layout no_layout;
    if (spec->model == MLAJIT_MODEL_CUSTOM) {
        int rc = mlajit_layout_validate(&spec->layout);
        if (rc)
            return mlajit_fail_prefix(rc, "spec.");
        if (!mlajit_spec_desc(spec))
            return mlajit_fail_oom("a layout's descriptor");
    } else if (!mlajit_model_describe(spec->model)) {
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "spec.model = %d is unknown; allowed: MLAJIT_MODEL_V32 (1), MLAJIT_MODEL_DSV4 (2), MLAJIT_MODEL_GLM_NSA (3), "
                           "MLAJIT_MODEL_GLM53_NOPE (4), MLAJIT_MODEL_DOTS3_SWA (5), MLAJIT_MODEL_V32_BF16 (6), "
                           "MLAJIT_MODEL_DSV4_BF16 (7), MLAJIT_MODEL_CUSTOM (100, with spec.layout)",
                           (int)spec->model);
    } else if (memcmp(&spec->layout, &no_layout, sizeof no_layout) != 0) {
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "spec.layout is set with spec.model = %d (a named model has its own layout); "
                           "set spec.model = MLAJIT_MODEL_CUSTOM (100) or leave spec.layout zero", (int)spec->model);
    }
    if (spec->h_q < 1 || spec->h_q > MLAJIT_MAX_HEADS)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "spec.h_q = %d; allowed 1..%d", spec->h_q, MLAJIT_MAX_HEADS);
    if (!page_size_ok(spec->page_size))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "spec.page_size = %d; allowed 1..%d",
                           spec->page_size, MLAJIT_MAX_PAGE_SIZE);
    if (spec->extra_page_size != 0 && !page_size_ok(spec->extra_page_size))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "spec.extra_page_size = %d; allowed 0 (no extra cache) or 1..%d",
                           spec->extra_page_size, MLAJIT_MAX_PAGE_SIZE);
    if (spec->features & ~MLAJIT_FEATURE_ALL)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "spec.features = 0x%x has unknown bits; allowed: MLAJIT_FEATURE_SINK | "
                           "MLAJIT_FEATURE_TOPK_LENGTH | MLAJIT_FEATURE_EXTRA_TOPK_LENGTH (0x7)",
                           spec->features);
    if ((spec->features & MLAJIT_FEATURE_EXTRA_TOPK_LENGTH) && spec->extra_page_size == 0)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "spec.features has MLAJIT_FEATURE_EXTRA_TOPK_LENGTH but extra_page_size is 0; "
                           "set extra_page_size to the extra cache's page size");
    if (spec->tile != 0 && spec->tile != 32 && spec->tile != 64)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "spec.tile = %d; allowed 0 (auto), 32, 64", spec->tile);
    /* 8 and 24 are h_q rounded up to 8, which only sm90-narrow's wgmma N takes */
    const int narrow_only = spec->heads_per_cta == 8 || spec->heads_per_cta == 24;
    const mlajit_family *family = mlajit_family_of(spec->variant);
    /* a retired variant before the head group, whose check depends on the family */
    int rc = family ? MLAJIT_OK : mlajit_variant_refuse_retired(spec->variant, NULL);
    if (rc)
        return mlajit_fail_prefix(rc, "spec.variant = %d: ", (int)spec->variant);
    if ((spec->heads_per_cta != 0 && spec->heads_per_cta != 16 && spec->heads_per_cta != 32 &&
         spec->heads_per_cta != 64 && !narrow_only) ||
        (narrow_only && !(family && mlajit_family_takes(family->heads_per_cta, spec->heads_per_cta))))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "spec.heads_per_cta = %d; allowed 0 (auto), 16, 32, 64 (and 8, 24 with variant sm90-narrow "
                           "or sm90-narrow-long)",
                           spec->heads_per_cta);
    if (spec->variant != MLAJIT_VARIANT_AUTO && !family) {
        char allowed[256];
        mlajit_variant_values(allowed, sizeof allowed);
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "spec.variant = %d; allowed %s", (int)spec->variant, allowed);
    }
    if (memchr(spec->arch, '\0', sizeof spec->arch) == NULL)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "spec.arch is not NUL-terminated");
    if (spec->arch[0] && !mlajit_arch_known(spec->arch))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "spec.arch = '%s'; allowed: \"\" (the device's), %s",
                           spec->arch, mlajit_arch_list());
    return MLAJIT_OK;
}

int mlajit_spec_resolve(const mlajit_kernel_spec *caller_spec, mlajit_kernel_spec *resolved)
{
    mlajit_kernel_spec local;
    const mlajit_kernel_spec *spec = mlajit_abi_in(MLAJIT_ABI_KERNEL_SPEC, "spec", caller_spec, &local);
    if (!spec)
        return MLAJIT_ERR_INVALID_ARGUMENT;
    int rc = mlajit_spec_validate(spec);
    if (rc || (rc = mlajit_abi_check(MLAJIT_ABI_KERNEL_SPEC, "resolved", resolved)))
        return rc;
    if (!spec->arch[0])
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "spec.arch is empty; resolve needs a target arch (%s)",
                           mlajit_arch_list());
    mlajit_kernel_spec r;
    mlajit_spec_named_model(spec, &r);
    r.struct_size = sizeof r;
    /* auto's kernel (families.c), then the family's row: its arch, its choices and
     * refusals, the sibling it is where it has nothing to add */
    if (r.variant == MLAJIT_VARIANT_AUTO)
        r.variant = mlajit_family_auto(&r);
    const mlajit_family *f = mlajit_family_of(r.variant);
    if ((rc = mlajit_family_check_layout(f, mlajit_spec_desc(&r))))
        return rc;
    if (f->arch && strcmp(r.arch, f->arch) != 0)
        return mlajit_fail(MLAJIT_ERR_UNSUPPORTED, "variant %s needs spec.arch = %s (wgmma); spec.arch = '%s': "
                           "use the portable variant", f->name, f->arch, r.arch);
    if ((rc = f->resolve(f, &r)))
        return rc;
    if (f->alias_when && f->alias_when(&r))
        r.variant = f->alias;
    mlajit_kernel_layout layout;
    rc = mlajit_codegen_layout(&r, &layout);
    if (rc)
        return rc;
    /* the portable family's smallest tile and head group (DOTS3_SWA's 1088-dim rows on
     * the 99 KB archs) leave nothing to lower */
    if (layout.smem_bytes > mlajit_arch_max_smem(r.arch) && r.tile == 32 && r.heads_per_cta <= 16)
        return mlajit_fail(MLAJIT_ERR_UNSUPPORTED,
                           "spec needs %d bytes of shared memory per block at tile 32 and %d heads per CTA, the "
                           "least there is (model %s's rows of %d dims); %s allows %d: use an arch with more "
                           "(sm_80, sm_90a, sm_100a)", layout.smem_bytes, r.heads_per_cta,
                           mlajit_spec_desc(&r)->name, mlajit_spec_desc(&r)->d_qk, r.arch,
                           mlajit_arch_max_smem(r.arch));
    /* only the portable family lowers its tile and head group; a wgmma row's are its own */
    if (layout.smem_bytes > mlajit_arch_max_smem(r.arch))
        return mlajit_fail(MLAJIT_ERR_UNSUPPORTED,
                           "spec needs %d bytes of shared memory per block at tile %d and %d heads per CTA; %s "
                           "allows %d: %s", layout.smem_bytes, r.tile, r.heads_per_cta, r.arch,
                           mlajit_arch_max_smem(r.arch),
                           r.variant == MLAJIT_VARIANT_PORTABLE ? "use tile 32 or fewer heads_per_cta"
                                                                : "its tile and head group are fixed; use the "
                                                                  "portable variant");
    mlajit_abi_out(MLAJIT_ABI_KERNEL_SPEC, resolved, &r);
    return MLAJIT_OK;
}

/* The alternatives auto's plans may switch to: only for an auto spec (variant,
 * tile and head group left to the generator) on sm_90a, the arch they were
 * measured on. 1 and *alt (arch set) when the spec with `variant` and head group
 * `heads_per_cta` (0: the generator's) resolves there (with `as_itself`, only
 * where it resolves to `variant` itself, not to a kernel it stands for
 * elsewhere), else 0, leaving no error set. */
static int auto_alternative(const mlajit_kernel_spec *spec, const char *default_arch, mlajit_variant variant,
                            int heads_per_cta, int as_itself, mlajit_kernel_spec *alt)
{
    if (!spec || !alt || mlajit_spec_validate(spec) != MLAJIT_OK)
        return 0;
    const char *arch = spec->arch[0] ? spec->arch : default_arch;
    if (spec->variant != MLAJIT_VARIANT_AUTO || spec->tile || spec->heads_per_cta || !arch ||
        strcmp(arch, "sm_90a") != 0)
        return 0;
    mlajit_kernel_spec s = *spec, r = MLAJIT_KERNEL_SPEC_INIT;
    s.variant = variant;
    s.heads_per_cta = heads_per_cta;
    snprintf(s.arch, sizeof s.arch, "%s", arch);
    if (mlajit_spec_resolve(&s, &r) != MLAJIT_OK) {
        mlajit_clear_error();
        return 0;
    }
    /* a kernel forced only for this layout (families.c: timed no faster) is not one */
    if ((as_itself && r.variant != variant) || mlajit_family_forced_only(mlajit_family_of(r.variant), mlajit_spec_desc(&r)))
        return 0;
    *alt = s;
    return 1;
}

int mlajit_spec_short_walk_alternative(const mlajit_kernel_spec *spec, const char *default_arch,
                                       mlajit_kernel_spec *alt)
{
    /* at most 32 heads auto's kernel is sm90-narrow, not the sm90 this stages */
    if (!spec || spec->h_q <= MLAJIT_NARROW_MAX_HEADS_PER_CTA)
        return 0;
    return auto_alternative(spec, default_arch, MLAJIT_VARIANT_SM90_STAGED, 0, 0, alt);
}

int mlajit_spec_long_walk_alternative(const mlajit_kernel_spec *spec, const char *default_arch,
                                      mlajit_kernel_spec *alt)
{
    /* only where it resolves as itself (V3.2's rows, few enough heads for the third
     * slot), which is where auto runs sm90-narrow */
    return auto_alternative(spec, default_arch, MLAJIT_VARIANT_SM90_NARROW_LONG, 0, 1, alt);
}

int mlajit_spec_scores_alternative(const mlajit_kernel_spec *spec, const char *default_arch,
                                   mlajit_kernel_spec *alt)
{
    /* timed at 3, 4, 5, 7 and 8 heads (codegen.h), 1, 2 and 6 taken on the same
     * count; past 8 heads per CTA it does not fit */
    if (!spec || spec->h_q > 8)
        return 0;
    return auto_alternative(spec, default_arch, MLAJIT_VARIANT_SM90_NARROW_SCORES, 0, 1, alt);
}

/* Past 32 heads auto runs sm90 (64 heads per CTA) for arbitrary fp32 scales
 * (GLM_NSA, GLM53_NOPE) and keeps it: the head-group rules' thresholds were
 * measured against V3.2's sm90, and the narrow CTAs of a row each gather and
 * dequantize its rows again, which costs more with the exact products (more
 * producer instructions a value) than with V3.2's power-of-two path. Unmeasured,
 * so not taken; at most 32 heads they are sm90-narrow's as V3.2's are. */
static int exact_scales_past_narrow(const mlajit_kernel_spec *spec)
{
    const mlajit_model_desc *d = spec ? mlajit_spec_desc(spec) : NULL;
    return d && d->scale_format == MLAJIT_SCALE_FP32 && spec->h_q > MLAJIT_NARROW_MAX_HEADS_PER_CTA;
}

int mlajit_spec_head_split_alternative(const mlajit_kernel_spec *spec, const char *default_arch,
                                       mlajit_kernel_spec *alt)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, r = MLAJIT_KERNEL_SPEC_INIT;
    /* the group it halves into groups of 8 or more: where auto runs sm90-narrow,
     * the resolved one (h_q rounded up to 8); past 32 heads, the head groups' 32 */
    const int whole = spec && spec->h_q > MLAJIT_NARROW_MAX_HEADS_PER_CTA ? MLAJIT_NARROW_MAX_HEADS_PER_CTA : 0;
    if (!spec || exact_scales_past_narrow(spec) ||
        !auto_alternative(spec, default_arch, MLAJIT_VARIANT_SM90_NARROW, whole, 1, &s) ||
        mlajit_spec_resolve(&s, &r) != MLAJIT_OK || r.heads_per_cta < 16) {
        mlajit_clear_error();
        return 0;
    }
    s.heads_per_cta = (r.heads_per_cta / 2 + 7) / 8 * 8;
    if (mlajit_spec_resolve(&s, &r) != MLAJIT_OK) {
        mlajit_clear_error();
        return 0;
    }
    *alt = s;
    return 1;
}

int mlajit_spec_head_groups_alternative(const mlajit_kernel_spec *spec, const char *default_arch,
                                        mlajit_kernel_spec *alt)
{
    /* past 32 heads (at most 32, auto runs sm90-narrow itself) */
    if (!spec || spec->h_q <= MLAJIT_NARROW_MAX_HEADS_PER_CTA || exact_scales_past_narrow(spec))
        return 0;
    return auto_alternative(spec, default_arch, MLAJIT_VARIANT_SM90_NARROW, MLAJIT_NARROW_MAX_HEADS_PER_CTA, 1, alt);
}

int mlajit_spec_walk_alternatives(const mlajit_kernel_spec *spec, const char *default_arch,
                                  mlajit_kernel_spec alts[MLAJIT_WALK_ALTERNATIVES])
{
    int n = 0;
    /* in the order plans ask them: at most 32 heads the scores kernel (from 4
     * tiles per CTA, 1-8 heads) and the long walk (from 16) before the head split;
     * past 32 the head split (groups of 16) and the head groups (of 32) before the
     * wide kernels' short walk */
    n += mlajit_spec_scores_alternative(spec, default_arch, &alts[n]);
    n += mlajit_spec_long_walk_alternative(spec, default_arch, &alts[n]);
    n += mlajit_spec_head_split_alternative(spec, default_arch, &alts[n]);
    n += mlajit_spec_head_groups_alternative(spec, default_arch, &alts[n]);
    n += mlajit_spec_short_walk_alternative(spec, default_arch, &alts[n]);
    return n;
}

static void feature_letters(unsigned f, char *buf)
{
    int n = 0;
    if (f & MLAJIT_FEATURE_SINK) buf[n++] = 's';
    if (f & MLAJIT_FEATURE_TOPK_LENGTH) buf[n++] = 'l';
    if (f & MLAJIT_FEATURE_EXTRA_TOPK_LENGTH) buf[n++] = 'x';
    buf[n] = '\0';
}

/* The string of a spec's fields as they are (nothing resolved). */
static int spec_fields_string(const mlajit_kernel_spec *r, char *buf, size_t len)
{
    char extra[16] = "", feats[8], fpart[16] = "";
    if (r->extra_page_size)
        snprintf(extra, sizeof extra, ".e%d", r->extra_page_size);
    feature_letters(r->features, feats);
    if (feats[0])
        snprintf(fpart, sizeof fpart, ".f%s", feats);
    int n = snprintf(buf, len, "%s.h%d.p%d%s%s.t%d.hc%d.%s.%s", mlajit_spec_desc(r)->name, r->h_q,
                     r->page_size, extra, fpart, r->tile, r->heads_per_cta, mlajit_variant_name(r->variant),
                     r->arch[0] ? r->arch : "any");
    if (n < 0 || (size_t)n >= len)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "buf: %zu bytes is too short for the spec string (needs %d)",
                           len, n + 1);
    return MLAJIT_OK;
}

int mlajit_spec_string(const mlajit_kernel_spec *caller_spec, char *buf, size_t len)
{
    mlajit_kernel_spec local, r = MLAJIT_KERNEL_SPEC_INIT;
    const mlajit_kernel_spec *spec = mlajit_abi_in(MLAJIT_ABI_KERNEL_SPEC, "spec", caller_spec, &local);
    if (!spec)
        return MLAJIT_ERR_INVALID_ARGUMENT;
    int rc = mlajit_spec_validate(spec);
    if (rc)
        return rc;
    if (!buf)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "buf: NULL");
    if (spec->arch[0]) {
        rc = mlajit_spec_resolve(spec, &r);
        if (rc)
            return rc;
    } else {
        r = *spec; /* no arch: the choices that depend on it stay "auto" */
    }
    return spec_fields_string(&r, buf, len);
}

int mlajit_spec_string_as_asked(const mlajit_kernel_spec *spec, const char *default_arch, char *buf, size_t len)
{
    int rc = mlajit_spec_validate(spec);
    if (rc)
        return rc;
    if (!buf)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "buf: NULL");
    mlajit_kernel_spec asked = *spec;
    if (!asked.arch[0] && default_arch)
        snprintf(asked.arch, sizeof asked.arch, "%s", default_arch);
    return spec_fields_string(&asked, buf, len);
}

/* Parse "<prefix><int>" into *out; returns 1 on success. */
static int parse_field(const char *tok, const char *prefix, int *out)
{
    size_t pl = strlen(prefix);
    if (strncmp(tok, prefix, pl) != 0)
        return 0;
    char *end;
    long v = strtol(tok + pl, &end, 10);
    if (end == tok + pl || *end != '\0' || v < 0 || v > 1 << 20)
        return 0;
    *out = (int)v;
    return 1;
}

/* The spec string's grammar; the fields after the page (and the extra page and
 * features) may be left off from the right or singly: they default to t0, hc0,
 * auto, any (the generator's choices, the device's arch). */
#define SPEC_FORM                                                                                                  \
    "<model|layout>.h<heads>.p<page>[.e<extra page>][.f<s|l|x>][.t<tile>][.hc<heads per cta>][.<variant>][.<arch|any>]"

int mlajit_spec_parse_fields(const char *str, mlajit_kernel_spec *out)
{
    if (!str || !out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "spec string or out: NULL");
    char copy[256];
    if (strlen(str) >= sizeof copy)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "spec string is longer than %zu characters", sizeof copy - 1);
    strcpy(copy, str);
    char *toks[10];
    int nt = 0;
    for (char *save = NULL, *t = strtok_r(copy, ".", &save); t; t = strtok_r(NULL, ".", &save)) {
        if (nt == 10)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "spec string '%s' has too many fields; form: %s", str,
                               SPEC_FORM);
        toks[nt++] = t;
    }
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    int i = 0;
    /* the first field: a model's name, or a layout's canonical string (a named
     * model's layout stands for the model) */
    if (nt >= 1 && mlajit_model_from_name(toks[0], &s.model) != MLAJIT_OK) {
        mlajit_clear_error();
        if (strchr(toks[0], '-') || strchr(toks[0], '=')) {
            int rc = mlajit_layout_parse(toks[0], &s.layout);
            if (rc)
                return mlajit_fail_prefix(rc, "spec string '%s': ", str);
            s.model = MLAJIT_MODEL_CUSTOM;
            mlajit_kernel_spec named;
            if (mlajit_spec_named_model(&s, &named))
                s = named;
        }
    }
    if (nt < 3 || !s.model || !parse_field(toks[++i], "h", &s.h_q) || !parse_field(toks[++i], "p", &s.page_size))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "spec string '%s' is malformed; form: %s", str, SPEC_FORM);
    i++;
    if (i < nt && parse_field(toks[i], "e", &s.extra_page_size))
        i++;
    if (i < nt && toks[i][0] == 'f') {
        for (const char *c = toks[i] + 1; *c; c++) {
            if (*c == 's') s.features |= MLAJIT_FEATURE_SINK;
            else if (*c == 'l') s.features |= MLAJIT_FEATURE_TOPK_LENGTH;
            else if (*c == 'x') s.features |= MLAJIT_FEATURE_EXTRA_TOPK_LENGTH;
            else return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "spec string '%s': unknown feature '%c'; allowed s, l, x", str, *c);
        }
        i++;
    }
    if (i < nt && parse_field(toks[i], "t", &s.tile))
        i++;
    if (i < nt && parse_field(toks[i], "hc", &s.heads_per_cta))
        i++;
    if (i < nt && mlajit_variant_from_name(toks[i], &s.variant))
        i++;
    int arch_given = 0;
    if (i < nt && (strcmp(toks[i], "any") == 0 || strncmp(toks[i], "sm_", 3) == 0)) {
        if (strcmp(toks[i], "any") != 0) {
            if (strlen(toks[i]) >= sizeof s.arch)
                return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "spec string '%s': arch too long", str);
            strcpy(s.arch, toks[i]);
        }
        arch_given = 1;
        i++;
    }
    if (i < nt) {
        const char *t = toks[i];
        int rc = mlajit_variant_refuse_retired(MLAJIT_VARIANT_AUTO, t);
        if (rc)
            return mlajit_fail_prefix(rc, "spec string '%s': ", str);
        mlajit_variant v;
        int x;
        int field_like = parse_field(t, "t", &x) || parse_field(t, "e", &x) || parse_field(t, "hc", &x) ||
                         (t[0] == 'f' && t[1] && strspn(t + 1, "slx") == strlen(t + 1)) ||
                         strncmp(t, "sm_", 3) == 0 || strcmp(t, "any") == 0 || mlajit_variant_from_name(t, &v);
        if (field_like || arch_given)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "spec string '%s': field '%s' is out of place; form: %s",
                               str, t, SPEC_FORM);
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "spec string '%s': variant '%s' is unknown; allowed " MLAJIT_VARIANT_NAMES
                           " (or an arch: sm_XX, any)",
                           str, t);
    }
    *out = s;
    return MLAJIT_OK;
}

int mlajit_spec_parse(const char *str, mlajit_kernel_spec *out)
{
    if (!str)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "spec string: NULL");
    int rc = mlajit_abi_check(MLAJIT_ABI_KERNEL_SPEC, "out", out);
    if (rc)
        return rc;
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    if ((rc = mlajit_spec_parse_fields(str, &s)))
        return rc;
    if ((rc = mlajit_spec_validate(&s)))
        return mlajit_fail_prefix(rc, "spec string '%s': ", str);
    mlajit_abi_out(MLAJIT_ABI_KERNEL_SPEC, out, &s);
    return MLAJIT_OK;
}
