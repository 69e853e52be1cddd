/* The struct_size rule (include/mlajit.h): one table of the public structs,
 * their 1.0 fields' extent, this build's size and their initialisers. */
#include "common/abi.h"

#include <stdint.h>
#include <string.h>

#include "common/error.h"

/* The bytes up to the end of `last`, the struct's last 1.0 field. A minor
 * version that adds fields leaves these entries as they are, and makes sizeof
 * grow (padding a new field out if need be): struct_size can tell versions
 * apart only by size, so a field must never land in 1.0's trailing padding. */
#define END_OF(type, last) (offsetof(type, last) + sizeof(((type *)0)->last))

/* Fields added after 1.0 start past 1.0's sizeof (its last field's end rounded
 * up to the struct's alignment). */
_Static_assert(offsetof(mlajit_plan_outline, tactic) >=
                   (END_OF(mlajit_plan_outline, tiles_per_split) + _Alignof(mlajit_plan_outline) - 1) /
                       _Alignof(mlajit_plan_outline) * _Alignof(mlajit_plan_outline),
               "mlajit_plan_outline.tactic must not land in 1.0's trailing padding");
_Static_assert(offsetof(mlajit_kernel_spec, layout) >=
                   (END_OF(mlajit_kernel_spec, arch) + _Alignof(mlajit_kernel_spec) - 1) /
                       _Alignof(mlajit_kernel_spec) * _Alignof(mlajit_kernel_spec),
               "mlajit_kernel_spec.layout must not land in 1.0's trailing padding");
_Static_assert(offsetof(mlajit_kernel_grid, layouts) >=
                   (END_OF(mlajit_kernel_grid, num_archs) + _Alignof(mlajit_kernel_grid) - 1) /
                       _Alignof(mlajit_kernel_grid) * _Alignof(mlajit_kernel_grid),
               "mlajit_kernel_grid.layouts must not land in 1.0's trailing padding");

static const struct {
    const char *type, *init;
    size_t min_size, size;
} structs[MLAJIT_ABI_STRUCTS] = {
    [MLAJIT_ABI_KERNEL_SPEC] = {"mlajit_kernel_spec", "MLAJIT_KERNEL_SPEC_INIT", END_OF(mlajit_kernel_spec, arch),
                                sizeof(mlajit_kernel_spec)},
    [MLAJIT_ABI_CONTEXT_OPTIONS] = {"mlajit_context_options", "MLAJIT_CONTEXT_OPTIONS_INIT",
                                    END_OF(mlajit_context_options, packs), sizeof(mlajit_context_options)},
    [MLAJIT_ABI_CONTEXT_INFO] = {"mlajit_context_info", "MLAJIT_CONTEXT_INFO_INIT",
                                 END_OF(mlajit_context_info, stale), sizeof(mlajit_context_info)},
    [MLAJIT_ABI_KERNEL_REPORT] = {"mlajit_kernel_report", "MLAJIT_KERNEL_REPORT_INIT",
                                  END_OF(mlajit_kernel_report, source), sizeof(mlajit_kernel_report)},
    [MLAJIT_ABI_KERNEL_GRID] = {"mlajit_kernel_grid", "MLAJIT_KERNEL_GRID_INIT", END_OF(mlajit_kernel_grid, num_archs),
                                sizeof(mlajit_kernel_grid)},
    [MLAJIT_ABI_WARMUP_REPORT] = {"mlajit_warmup_report", "MLAJIT_WARMUP_REPORT_INIT",
                                  END_OF(mlajit_warmup_report, compile_ms), sizeof(mlajit_warmup_report)},
    [MLAJIT_ABI_DECODE_SHAPE] = {"mlajit_decode_shape", "MLAJIT_DECODE_SHAPE_INIT",
                                 END_OF(mlajit_decode_shape, num_splits), sizeof(mlajit_decode_shape)},
    [MLAJIT_ABI_PLAN_OUTLINE] = {"mlajit_plan_outline", "MLAJIT_PLAN_OUTLINE_INIT",
                                 END_OF(mlajit_plan_outline, tiles_per_split), sizeof(mlajit_plan_outline)},
    [MLAJIT_ABI_DECODE_ARGS] = {"mlajit_decode_args", "MLAJIT_DECODE_ARGS_INIT",
                                END_OF(mlajit_decode_args, workspace_size), sizeof(mlajit_decode_args)},
    [MLAJIT_ABI_TUNE_GRID] = {"mlajit_tune_grid", "MLAJIT_TUNE_GRID_INIT", END_OF(mlajit_tune_grid, extra_page_size),
                              sizeof(mlajit_tune_grid)},
    [MLAJIT_ABI_TUNE_REPORT] = {"mlajit_tune_report", "MLAJIT_TUNE_REPORT_INIT", END_OF(mlajit_tune_report, seconds),
                                sizeof(mlajit_tune_report)},
};

size_t mlajit_abi_min_size(mlajit_abi_struct which) { return structs[which].min_size; }

size_t mlajit_abi_size(mlajit_abi_struct which) { return structs[which].size; }

int mlajit_abi_check(mlajit_abi_struct which, const char *arg, const void *caller)
{
    if (!caller)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "%s: NULL; pass a %s", arg, structs[which].type);
    size_t declared;
    memcpy(&declared, caller, sizeof declared);
    if (declared >= structs[which].min_size)
        return MLAJIT_OK;
    return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                       "%s.struct_size = %zu; a %s holds at least %zu bytes: set struct_size to sizeof(%s) before the "
                       "call (initialise it with %s)",
                       arg, declared, structs[which].type, structs[which].min_size, structs[which].type,
                       structs[which].init);
}

const void *mlajit_abi_in(mlajit_abi_struct which, const char *arg, const void *caller, void *local)
{
    if (mlajit_abi_check(which, arg, caller) != MLAJIT_OK)
        return NULL;
    size_t declared;
    memcpy(&declared, caller, sizeof declared);
    const size_t size = structs[which].size;
    if (declared >= size)
        return caller;
    memset(local, 0, size);
    memcpy(local, caller, declared);
    memcpy(local, &size, sizeof size);
    return local;
}

void mlajit_abi_out(mlajit_abi_struct which, void *caller, const void *full)
{
    size_t declared;
    memcpy(&declared, caller, sizeof declared);
    const size_t n = declared < structs[which].size ? declared : structs[which].size;
    if (n > sizeof(size_t))
        memcpy((char *)caller + sizeof(size_t), (const char *)full + sizeof(size_t), n - sizeof(size_t));
}
