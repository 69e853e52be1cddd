/* mlajit_envelope_check: the generator's envelope (codegen/envelope.c) plus
 * whether this process's NVRTC can target the arch. No CUDA, no compiling. */
#include <stdio.h>

#include "codegen/codegen.h"
#include "common/abi.h"
#include "common/error.h"
#include "mlajit.h"
#include "runtime/nvrtc.h"

int mlajit_envelope_check(const mlajit_kernel_spec *caller_spec, const mlajit_decode_shape *caller_shape)
{
    mlajit_clear_error();
    mlajit_kernel_spec spec_local;
    mlajit_decode_shape shape_local;
    const mlajit_kernel_spec *spec = mlajit_abi_in(MLAJIT_ABI_KERNEL_SPEC, "spec", caller_spec, &spec_local);
    const mlajit_decode_shape *shape = NULL;
    if (!spec ||
        (caller_shape && !(shape = mlajit_abi_in(MLAJIT_ABI_DECODE_SHAPE, "shape", caller_shape, &shape_local))))
        return MLAJIT_ERR_INVALID_ARGUMENT;
    int major = 0, minor = 0;
    mlajit_nvrtc_version(&major, &minor);
    char name[64], where[8];
    if (mlajit_nvrtc_where(where, sizeof where) == MLAJIT_OK)
        snprintf(name, sizeof name, "NVRTC %d.%d", major, minor);
    else
        snprintf(name, sizeof name, "NVRTC (not found: mlajit info says why)");
    const mlajit_target_probe nvrtc = {.supports = mlajit_nvrtc_supports, .compiler_name = name};
    return mlajit_envelope_check_with(spec, shape, &nvrtc);
}
