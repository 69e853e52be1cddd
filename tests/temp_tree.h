/* tests/temp_tree.h - a test's own temporary directory tree, and whole-file
 * reads, for the suites that work on files. Include after <criterion/criterion.h>. */
#ifndef MLAJIT_TESTS_TEMP_TREE_H
#define MLAJIT_TESTS_TEMP_TREE_H

#include <errno.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int temp_tree_remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* root (at least 64 bytes) becomes a fresh directory /tmp/PREFIX-XXXXXX. */
static inline void temp_tree_make(char *root, size_t len, const char *prefix)
{
    snprintf(root, len, "/tmp/%s-XXXXXX", prefix);
    cr_assert_not_null(mkdtemp(root), "mkdtemp %s: %s", root, strerror(errno));
}

/* Remove the tree (not following links) and forget it. */
static inline void temp_tree_remove(char *root)
{
    if (root[0])
        nftw(root, temp_tree_remove_one, 16, FTW_DEPTH | FTW_PHYS);
    root[0] = '\0';
}

/* The whole file, malloc'd with a NUL after it. */
static inline uint8_t *read_whole_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *bytes = malloc((size_t)n + 1);
    cr_assert_not_null(bytes);
    cr_assert_eq(fread(bytes, 1, (size_t)n, f), (size_t)n, "%s: short read", path);
    bytes[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return bytes;
}

static inline void write_whole_file(const char *path, const uint8_t *bytes, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(bytes, 1, len, f), len, "%s: short write", path);
    fclose(f);
}

static inline int path_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

#endif
