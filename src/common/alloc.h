/* Internal: the one allocator of the library and the harness. Every host
 * allocation goes through these, so a test can make the Nth one fail
 * (SQLite-style fault injection: tests/test_oom.c) and see every out-of-memory
 * path run. Memory from them is released with free() (or mlajit_free()).
 * Allocations made inside LMDB, NVRTC or the driver are theirs, not these. */
#ifndef MLAJIT_COMMON_ALLOC_H
#define MLAJIT_COMMON_ALLOC_H

#include <stddef.h>

#include "common/error.h"

void *mlajit_malloc(size_t size);
void *mlajit_calloc(size_t count, size_t size);
void *mlajit_realloc(void *ptr, size_t size);
char *mlajit_strdup(const char *s);

/* MLAJIT_ERR_OUT_OF_MEMORY with the message "out of host memory for <what>"
 * (what is a printf format). */
int mlajit_fail_oom(const char *what, ...) MLAJIT_PRINTF(1, 2);

/* ---- the test hook (tests only; not exported from the shared library) ------- */

typedef enum mlajit_alloc_fault_mode {
    MLAJIT_ALLOC_FAULT_ONCE = 0,  /* the Nth allocation fails, later ones succeed */
    MLAJIT_ALLOC_FAULT_FROM = 1   /* the Nth and every one after it fail */
} mlajit_alloc_fault_mode;

/* Fail the nth allocation counted from this call (1: the next one), the counts
 * starting again from 0; n = 0 turns injection off and keeps the counts.
 * Process-wide; the counters are atomic. MLAJIT_ALLOC_FAULT_TRACE=1 in the
 * environment prints the stack of the first injected failure on stderr. */
void mlajit_alloc_fault_set(long n, mlajit_alloc_fault_mode mode);
/* Allocations counted, and how many of them failed by injection, since
 * injection was last turned on. */
long mlajit_alloc_fault_count(void);
long mlajit_alloc_fault_failures(void);

#endif
