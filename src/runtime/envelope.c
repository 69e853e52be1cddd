/* mlajit_envelope_check: the generator's envelope (codegen/envelope.c) plus
 * whether this process's NVRTC can target the arch. No CUDA, no compiling. */
#include <stdio.h>

#include "codegen/codegen.h"
#include "common/error.h"
#include "mlajit.h"
#include "runtime/nvrtc.h"

int mlajit_envelope_check(const mlajit_kernel_spec *spec, const mlajit_decode_shape *shape)
{
    mlajit_clear_error();
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
