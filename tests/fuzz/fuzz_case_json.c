/* libFuzzer harness: case directories (harness/case.c: case.json and the arrays
 * it names). Loading must accept or refuse any directory, with a message, never
 * crash; a case it accepts must run through the reference and survive save +
 * load.
 *
 * One input is a whole directory:
 *   input  := case.json text, then optionally a 0 byte and file records
 *   record := name length (1 byte) | name | size (2 bytes, little-endian) | fill byte
 * Each record becomes a file of `size` bytes (byte k = fill + 31 k) beside
 * case.json, so mutations reach the sizes the loader compares with the shapes.
 * tests/fuzz/pack_case.py turns a saved case directory into such an input. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/harness.h"
#include "mlajit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { kMaxRecords = 32, kReferenceBudget = 1 << 14 };

static char dir[256], saved[300];

/* Empty the scratch directory (one level of plain files). */
static void clear_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *e;
    char file[600];
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' || (e->d_name[1] && strcmp(e->d_name, "..") != 0)) {
            snprintf(file, sizeof file, "%s/%s", path, e->d_name);
            unlink(file);
        }
    closedir(d);
}

static void write_file(const char *name, const uint8_t *bytes, size_t len, int fill)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    for (size_t k = 0; k < len; k++)
        fputc(bytes ? bytes[k] : (uint8_t)(fill + 31 * k), f);
    fclose(f);
}

/* The scratch directories go when the fuzzer exits. */
static void remove_scratch(void)
{
    clear_dir(dir);
    clear_dir(saved);
    rmdir(dir);
    rmdir(saved);
}

static int plain_name(const char *name)
{
    return name[0] && strcmp(name, ".") && strcmp(name, "..") && !strchr(name, '/') && strcmp(name, "case.json");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/mlajit-fuzz-case-XXXXXX");
        if (!mkdtemp(dir))
            abort();
        snprintf(saved, sizeof saved, "%s-saved", dir);
        atexit(remove_scratch);
    }
    clear_dir(dir);
    const uint8_t *end = memchr(data, 0, size);
    size_t json_len = end ? (size_t)(end - data) : size;
    write_file("case.json", data, json_len, 0);
    size_t pos = json_len + 1;
    for (int r = 0; r < kMaxRecords && end && pos < size; r++) {
        size_t name_len = data[pos++];
        if (name_len == 0 || name_len > 64 || pos + name_len + 3 > size)
            break;
        char name[65];
        memcpy(name, data + pos, name_len);
        name[name_len] = '\0';
        pos += name_len;
        size_t file_len = data[pos] | (size_t)data[pos + 1] << 8;
        int fill = data[pos + 2];
        pos += 3;
        if (strlen(name) == name_len && plain_name(name))
            write_file(name, NULL, file_len, fill);
    }

    mlajit_case c;
    memset(&c, 0x5A, sizeof c);
    if (mlajit_case_load(dir, &c) != MLAJIT_OK) {
        if (mlajit_last_error()[0] == '\0')
            abort(); /* a refusal must say why */
        return 0;
    }
    /* Whatever the loader accepts, the reference must take (small ones only). */
    int64_t cost = (int64_t)c.b * c.s_q * c.h_q * (c.topk + c.extra_topk);
    if (cost <= kReferenceBudget && mlajit_case_compute_expected(&c) != MLAJIT_OK)
        abort();
    /* ... and save + load must keep it. */
    clear_dir(saved);
    mlajit_case back;
    if (mlajit_case_save(saved, &c) != MLAJIT_OK || mlajit_case_load(saved, &back) != MLAJIT_OK)
        abort();
    size_t rows = (size_t)c.b * c.s_q;
    if (back.b != c.b || back.s_q != c.s_q || back.h_q != c.h_q || back.topk != c.topk ||
        back.extra_topk != c.extra_topk || back.model != c.model || back.sm_scale != c.sm_scale ||
        memcmp(back.indices, c.indices, rows * c.topk * 4) != 0 ||
        (c.has_extra && memcmp(back.extra_indices, c.extra_indices, rows * c.extra_topk * 4) != 0))
        abort();
    mlajit_case_free(&back);
    mlajit_case_free(&c);
    return 0;
}
