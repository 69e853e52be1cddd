/* Internal: facts a cubin (an sm_XX ELF image) records about its kernels. */
#ifndef MLAJIT_RUNTIME_CUBIN_H
#define MLAJIT_RUNTIME_CUBIN_H
#include <stddef.h>

/* The register count of `function` (an entry's symbol name) as ptxas recorded it
 * in the cubin's .nv.info section; -1 when the image is not a well-formed ELF
 * that records one. Never reads past `size`. */
int mlajit_cubin_register_count(const void *cubin, size_t size, const char *function);

#endif
