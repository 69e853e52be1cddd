/* Tests' view of the golden cases, found when the tests run (not when meson is
 * set up), so a full set added later is used at once:
 *   the full set: $MLAJIT_GOLDEN_DIR if set, else ../shared/golden beside the
 *   checkout, else .golden in it ($MLAJIT_SOURCE_ROOT: tests/meson.build sets it);
 *   plus always tests/golden's subset, unpacked into the build directory
 *   ($MLAJIT_GOLDEN_SUBSET).
 * A case in both (by name) is the full set's. The list is sorted by name. */
#ifndef MLAJIT_TESTS_GOLDEN_CASES_H
#define MLAJIT_TESTS_GOLDEN_CASES_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_CASES 64
#define NAME_LEN 256
#define GOLDEN_FULL_SET_CASES 7 /* the full set's cases (their README lists them) */

typedef struct golden_case {
    char name[NAME_LEN];
    char path[1400]; /* the case directory */
    int from_subset; /* 1: tests/golden's copy */
} golden_case;

typedef struct case_list {
    char full_dir[1024]; /* where the full set was found; "" when it was not */
    char why_no_full[2400]; /* when it was not: where it was looked for */
    int explicit_dir_bad;   /* MLAJIT_GOLDEN_DIR is set but holds no cases */
    char subset_dir[1024];
    int count;
    golden_case cases[MAX_CASES];
} case_list;

static inline int golden_is_dir(const char *path)
{
    struct stat st;
    return path && path[0] && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static inline int golden_compare_cases(const void *a, const void *b)
{
    return strcmp(((const golden_case *)a)->name, ((const golden_case *)b)->name);
}

/* Add the case directories (those holding a case.json) under dir; 0 when none. */
static inline int golden_add_dir(case_list *l, const char *dir, int from_subset)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int added = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && l->count < MAX_CASES) {
        if (e->d_name[0] == '.' || strlen(e->d_name) >= NAME_LEN)
            continue;
        char path[2048];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s/case.json", dir, e->d_name);
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;
        int known = 0;
        for (int i = 0; i < l->count && !known; i++)
            known = strcmp(l->cases[i].name, e->d_name) == 0;
        added++;
        if (known)
            continue;
        golden_case *c = &l->cases[l->count++];
        snprintf(c->name, sizeof c->name, "%s", e->d_name);
        snprintf(c->path, sizeof c->path, "%s/%s", dir, e->d_name);
        c->from_subset = from_subset;
    }
    closedir(d);
    return added;
}

/* Find the full set and the subset (no skipping, no asserting). */
static inline void find_golden_cases(case_list *l)
{
    memset(l, 0, sizeof *l);
    const char *env = getenv("MLAJIT_GOLDEN_DIR"), *root = getenv("MLAJIT_SOURCE_ROOT");
    if (!root || !root[0])
        root = ".";
    char beside[1024], inside[1024];
    snprintf(beside, sizeof beside, "%s/../shared/golden", root);
    snprintf(inside, sizeof inside, "%s/.golden", root);
    if (env && env[0]) {
        if (golden_add_dir(l, env, 0))
            snprintf(l->full_dir, sizeof l->full_dir, "%s", env);
        else {
            l->explicit_dir_bad = 1;
            snprintf(l->why_no_full, sizeof l->why_no_full, "MLAJIT_GOLDEN_DIR=%s holds no case directories", env);
        }
    } else if (golden_is_dir(beside) && golden_add_dir(l, beside, 0)) {
        snprintf(l->full_dir, sizeof l->full_dir, "%s", beside);
    } else if (golden_is_dir(inside) && golden_add_dir(l, inside, 0)) {
        snprintf(l->full_dir, sizeof l->full_dir, "%s", inside);
    } else {
        snprintf(l->why_no_full, sizeof l->why_no_full,
                 "the full golden set is not here (MLAJIT_GOLDEN_DIR unset, no %s, no %s): tests/golden's subset "
                 "only",
                 beside, inside);
    }
    const char *subset = getenv("MLAJIT_GOLDEN_SUBSET");
    snprintf(l->subset_dir, sizeof l->subset_dir, "%s", subset ? subset : "");
    if (subset && subset[0])
        golden_add_dir(l, subset, 1);
    qsort(l->cases, (size_t)l->count, sizeof l->cases[0], golden_compare_cases);
}

/* Fill l for a test that runs every case found: the subset is always there, so a
 * list without it is a broken build (the test fails, saying so). */
static inline void list_golden_cases(case_list *l)
{
    find_golden_cases(l);
    cr_assert(!l->explicit_dir_bad, "%s", l->why_no_full);
    cr_assert_gt(l->count, 0, "no golden case at all: tests/golden's subset is not unpacked in '%s' (meson builds "
                              "it: golden-subset.stamp)", l->subset_dir);
}

/* How many of the full set's cases pass a filter: `full` when the full set is
 * here, else at least one of the subset's. */
static inline int golden_expected(const case_list *l, int full)
{
    return l->full_dir[0] ? full : 1;
}

#endif
