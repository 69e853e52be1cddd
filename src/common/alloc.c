/* The library's allocator: malloc and friends, with the test hook's countdown
 * in front (one relaxed atomic load when injection is off). */
#include "common/alloc.h"

#include <execinfo.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"

static atomic_long fault_at;      /* 0: off; else the allocation number that fails */
static atomic_int fault_mode;
static atomic_long fault_count;   /* allocations since the hook was set */
static atomic_long fault_failures;

void mlajit_alloc_fault_set(long n, mlajit_alloc_fault_mode mode)
{
    atomic_store(&fault_at, 0);
    if (n <= 0)
        return; /* off; the counts stay for the caller to read */
    atomic_store(&fault_count, 0);
    atomic_store(&fault_failures, 0);
    atomic_store(&fault_mode, (int)mode);
    atomic_store(&fault_at, n);
}

long mlajit_alloc_fault_count(void) { return atomic_load(&fault_count); }

long mlajit_alloc_fault_failures(void) { return atomic_load(&fault_failures); }

/* 1 when this allocation is to fail. */
static int injected(void)
{
    long at = atomic_load_explicit(&fault_at, memory_order_relaxed);
    if (!at)
        return 0;
    long n = atomic_fetch_add(&fault_count, 1) + 1;
    int fail = atomic_load(&fault_mode) == MLAJIT_ALLOC_FAULT_FROM ? n >= at : n == at;
    if (fail && atomic_fetch_add(&fault_failures, 1) == 0 && getenv("MLAJIT_ALLOC_FAULT_TRACE")) {
        /* where the first injected failure struck, for whoever debugs a fault test */
        void *frames[32];
        int depth = backtrace(frames, 32);
        fprintf(stderr, "mlajit: injected allocation failure %ld:\n", n);
        backtrace_symbols_fd(frames, depth, STDERR_FILENO);
    }
    return fail;
}

void *mlajit_malloc(size_t size) { return injected() ? NULL : malloc(size); }

void *mlajit_calloc(size_t count, size_t size) { return injected() ? NULL : calloc(count, size); }

void *mlajit_realloc(void *ptr, size_t size) { return injected() ? NULL : realloc(ptr, size); }

char *mlajit_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *copy = mlajit_malloc(n);
    if (copy)
        memcpy(copy, s, n);
    return copy;
}

int mlajit_fail_oom(const char *what, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, what);
    vsnprintf(text, sizeof text, what, ap);
    va_end(ap);
    return mlajit_fail(MLAJIT_ERR_OUT_OF_MEMORY, "out of host memory for %s", text);
}
