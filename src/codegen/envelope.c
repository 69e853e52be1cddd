/* The envelope: which specs and call geometries the generator can serve, decided
 * without CUDA and without compiling. One place holds the rules, so the query
 * (mlajit_envelope_check), the planner and `mlajit envelope` cannot disagree.
 *
 * The generator never links against a compiler: whether the installed NVRTC
 * can target an arch is asked through the probe the caller passes (the runtime
 * passes its NVRTC check), keeping the layers one-way: codegen <- runtime <- CLI. */
#include <string.h>

#include "codegen/codegen.h"
#include "common/error.h"
#include "mlajit.h"

int mlajit_shape_validate(const mlajit_kernel_spec *spec, const mlajit_decode_shape *s)
{
    if (!spec || !s)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "%s: NULL", !spec ? "spec" : "shape");
    if (s->batch < 0 || s->batch > MLAJIT_MAX_BATCH)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "shape.batch = %d; allowed 0..%d", s->batch, MLAJIT_MAX_BATCH);
    if (s->s_q < 0 || s->s_q > MLAJIT_MAX_SQ)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "shape.s_q = %d; allowed 0..%d", s->s_q, MLAJIT_MAX_SQ);
    if ((int64_t)s->batch * s->s_q > MLAJIT_MAX_ROWS)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "shape.batch x shape.s_q = %d x %d = %lld rows; allowed at most %d (MLAJIT_MAX_ROWS)",
                           s->batch, s->s_q, (long long)s->batch * s->s_q, MLAJIT_MAX_ROWS);
    if (s->topk < 1 || s->topk > MLAJIT_MAX_TOPK)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "shape.topk = %d; allowed 1..%d", s->topk, MLAJIT_MAX_TOPK);
    if (spec->extra_page_size) {
        if (s->extra_topk < 1 || s->extra_topk > MLAJIT_MAX_TOPK)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                               "shape.extra_topk = %d; allowed 1..%d with an extra cache (spec.extra_page_size = %d)",
                               s->extra_topk, MLAJIT_MAX_TOPK, spec->extra_page_size);
    } else if (s->extra_topk != 0) {
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "shape.extra_topk = %d but the spec has no extra cache; set it to 0 or set spec.extra_page_size",
                           s->extra_topk);
    }
    if (s->num_splits < 0 || s->num_splits > MLAJIT_MAX_SPLITS)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "shape.num_splits = %d; allowed 0 (auto) or 1..%d",
                           s->num_splits, MLAJIT_MAX_SPLITS);
    /* a single-split family (sm90-staged) is refused before anything is compiled; auto never
     * resolves to one, so only a spec that names it can ask */
    const mlajit_family *family = mlajit_family_of(spec->variant);
    if (family && family->single_split && s->num_splits > 1)
        return mlajit_fail(MLAJIT_ERR_UNSUPPORTED,
                           "shape.num_splits = %d but variant %s does not split (it writes no split partials); "
                           "allowed 0 or 1, or use variant sm90",
                           s->num_splits, mlajit_variant_name(spec->variant));
    return MLAJIT_OK;
}

int mlajit_envelope_check_with(const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape,
                               const mlajit_target_probe *probe)
{
    int rc = mlajit_spec_validate(spec);
    if (rc)
        return rc;
    mlajit_kernel_spec with_arch = *spec, resolved = MLAJIT_KERNEL_SPEC_INIT;
    if (!with_arch.arch[0])
        strcpy(with_arch.arch, MLAJIT_DEFAULT_ARCH); /* what a context without a device targets */
    /* Resolving checks the generator's choices and the shared memory they need. */
    if ((rc = mlajit_spec_resolve(&with_arch, &resolved)))
        return rc;
    if (probe && probe->supports && !probe->supports(resolved.arch))
        return mlajit_fail(MLAJIT_ERR_UNSUPPORTED, "spec.arch = %s: %s cannot target it", resolved.arch,
                           probe->compiler_name ? probe->compiler_name : "the compiler");
    if (shape && (rc = mlajit_shape_validate(spec, shape)))
        return rc;
    return MLAJIT_OK;
}
