/* One disk cache for a whole test run: Criterion runs every test in its own
 * process, so without it each test would compile its kernels again. Include once
 * per suite, after <criterion/hooks.h>: the runner makes the directory before the
 * first test (its path in the environment variable SHARED_CACHE_VAR) and removes it
 * after the last; shared_cache_dir() is NULL where it could not be made (the tests
 * then compile in memory). */
#ifndef MLAJIT_TESTS_SHARED_CACHE_H
#define MLAJIT_TESTS_SHARED_CACHE_H
#include <stdio.h>
#include <stdlib.h>

#define SHARED_CACHE_VAR "MLAJIT_TEST_SHARED_CACHE"

static char shared_cache[256];

ReportHook(PRE_ALL)(struct criterion_test_set *tests)
{
    snprintf(shared_cache, sizeof shared_cache, "/tmp/mlajit-test-XXXXXX");
    if (mkdtemp(shared_cache))
        setenv(SHARED_CACHE_VAR, shared_cache, 1);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    if (!shared_cache[0])
        return;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", shared_cache);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove the test run's cache %s\n", shared_cache);
}

static inline const char *shared_cache_dir(void) { return getenv(SHARED_CACHE_VAR); }

#endif
