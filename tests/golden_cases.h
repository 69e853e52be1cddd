/* Tests' view of the golden cases: the case directories (those holding a
 * case.json) under $MLAJIT_GOLDEN_DIR (tests/meson.build sets it; default
 * ../shared/golden), sorted by name. */
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

typedef struct case_list {
    char dir[1024];
    int count;
    char names[MAX_CASES][NAME_LEN];
} case_list;

static inline int golden_compare_names(const void *a, const void *b) { return strcmp(a, b); }

/* Fill l; skips the calling test, saying why, when the golden dir is missing or empty. */
static inline void list_golden_cases(case_list *l)
{
    const char *env = getenv("MLAJIT_GOLDEN_DIR");
    snprintf(l->dir, sizeof l->dir, "%s", env && *env ? env : "../shared/golden");
    l->count = 0;
    DIR *dir = opendir(l->dir);
    if (!dir)
        cr_skip_test("golden directory '%s' not found (set MLAJIT_GOLDEN_DIR)", l->dir);
    struct dirent *e;
    while ((e = readdir(dir)) != NULL && l->count < MAX_CASES) {
        if (e->d_name[0] == '.')
            continue;
        char path[2048];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s/case.json", l->dir, e->d_name);
        if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode))
            snprintf(l->names[l->count++], NAME_LEN, "%s", e->d_name);
    }
    closedir(dir);
    qsort(l->names, (size_t)l->count, NAME_LEN, golden_compare_names);
    if (l->count == 0)
        cr_skip_test("golden directory '%s' holds no case directories", l->dir);
}

#endif
