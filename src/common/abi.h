/* Internal: the struct_size rule of include/mlajit.h, for the entry points.
 * Inside the library every public struct is whole (this build's sizeof): an
 * entry point takes a caller's struct in through mlajit_abi_in and gives one
 * back through mlajit_abi_out, and nothing else reads or writes a caller's
 * struct, so nothing touches bytes past the struct_size it declared. */
#ifndef MLAJIT_COMMON_ABI_H
#define MLAJIT_COMMON_ABI_H

#include <stddef.h>

#include "mlajit.h"

typedef enum mlajit_abi_struct {
    MLAJIT_ABI_KERNEL_SPEC,
    MLAJIT_ABI_CONTEXT_OPTIONS,
    MLAJIT_ABI_CONTEXT_INFO,
    MLAJIT_ABI_KERNEL_REPORT,
    MLAJIT_ABI_KERNEL_GRID,
    MLAJIT_ABI_WARMUP_REPORT,
    MLAJIT_ABI_DECODE_SHAPE,
    MLAJIT_ABI_PLAN_OUTLINE,
    MLAJIT_ABI_DECODE_ARGS,
    MLAJIT_ABI_TUNE_GRID,
    MLAJIT_ABI_TUNE_REPORT,
    MLAJIT_ABI_STRUCTS
} mlajit_abi_struct;

/* The bytes of a struct's 1.0 fields: the smallest struct_size accepted. */
size_t mlajit_abi_min_size(mlajit_abi_struct which);
/* This build's sizeof. */
size_t mlajit_abi_size(mlajit_abi_struct which);

/* MLAJIT_OK when the caller's struct (arg names it in the message: "spec",
 * "options", ...) is not NULL and declares at least its 1.0 fields; else
 * MLAJIT_ERR_INVALID_ARGUMENT saying how to set struct_size. For output structs,
 * before anything is written. */
int mlajit_abi_check(mlajit_abi_struct which, const char *arg, const void *caller);

/* An input struct as this library's: the caller's own pointer when it holds
 * every field this build has (no copy: the common case), else *local (this
 * build's struct) filled with the caller's first struct_size bytes and the
 * defaults (0) past them, its struct_size this build's. NULL after
 * mlajit_abi_check's message when the struct cannot be read. */
const void *mlajit_abi_in(mlajit_abi_struct which, const char *arg, const void *caller, void *local);

/* Copy this library's struct `full` into the caller's (checked with
 * mlajit_abi_check), up to its struct_size and no further, leaving its
 * struct_size as the caller set it. */
void mlajit_abi_out(mlajit_abi_struct which, void *caller, const void *full);

#endif
