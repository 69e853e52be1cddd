/* mlajit_version: the numbers of the library that was built, from the header it
 * was built with (meson.build's project version agrees: tests/abi_exports.py). */
#include "mlajit.h"

const char *mlajit_version(int *major, int *minor, int *patch)
{
    if (major)
        *major = MLAJIT_VERSION_MAJOR;
    if (minor)
        *minor = MLAJIT_VERSION_MINOR;
    if (patch)
        *patch = MLAJIT_VERSION_PATCH;
    return MLAJIT_VERSION_STRING;
}
