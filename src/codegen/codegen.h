/* Internal: what the runtime needs from the generator beyond the public API. */
#ifndef MLAJIT_CODEGEN_CODEGEN_H
#define MLAJIT_CODEGEN_CODEGEN_H
#include <stddef.h>
#include <stdint.h>

#include "mlajit.h"

#define MLAJIT_GENERATOR_VERSION "mlajit-codegen-1"
#define MLAJIT_ENTRY_MAIN "mlajit_decode_main"
#define MLAJIT_ENTRY_COMBINE "mlajit_decode_combine"

/* Launch geometry of a resolved spec's kernels. */
typedef struct mlajit_kernel_layout {
    int threads;            /* main kernel block size */
    int tile;               /* candidates per tile */
    int heads_per_cta;      /* query heads per CTA */
    int smem_bytes;         /* dynamic shared memory of the main kernel */
    int combine_threads;    /* combine kernel block size (one block per row and head) */
} mlajit_kernel_layout;

int mlajit_codegen_layout(const mlajit_kernel_spec *resolved, mlajit_kernel_layout *layout);

/* Largest opt-in dynamic shared memory of an arch ("sm_90a"), 0 if unknown. */
int mlajit_arch_max_smem(const char *arch);

/* 1 when arch is in the generator's table ("sm_80" ... "sm_120a"). */
int mlajit_arch_known(const char *arch);

/* The arch list, comma separated, for messages. */
const char *mlajit_arch_list(void);

/* XXH3-64 over the embedded templates, in table order;
 * enters every cache key so a template edit invalidates old cubins. */
uint64_t mlajit_templates_hash(void);

#endif
