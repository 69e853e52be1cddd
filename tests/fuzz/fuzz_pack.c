/* libFuzzer harness: cubin packs (cache/pack.h) - the manifest parser and the
 * pack file reader. Parsing and opening must accept or refuse any bytes, with
 * a message, without reading past them; what they accept must hold together
 * (a manifest formats back to text that parses to the same manifest; an open
 * pack verifies or refuses, and every kernel its manifest lists can be looked
 * up or is refused with a message).
 *
 * The first input byte picks the mode (its low two bits):
 *   0  the rest is manifest text, parsed as it is;
 *   1  the same, with the "checksum" line recomputed first, so mutations reach
 *      the fields behind it;
 *   2  the rest is a pack file, written to a scratch file and opened;
 *   3  the same, with the trailer's own checksum recomputed first, so its
 *      fields (version, lengths, kernel count) are reached.
 * The whole-file checksum is never recomputed: it is what keeps damaged bytes
 * away from LMDB, which trusts its pages (re-sealed mutants crash inside
 * liblmdb within seconds). An intact pack is trusted as a shared library is:
 * it is GPU code.
 *
 * The corpus (corpus/fuzz_pack) holds a manifest of each shape and a small
 * pack of made-up kernels in modes 2 and 3, written by make_corpus.c with
 * mlajit_pack_manifest_format and mlajit_pack_write. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/pack.h"
#include "mlajit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void store_u64le(uint8_t *p, uint64_t v)
{
    for (int k = 0; k < 8; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

/* Rewrite the 16 hex digits after the last "\nchecksum " to the XXH3-64 of the
 * bytes before that line, as the manifest writer does. */
static void fix_manifest_checksum(uint8_t *text, size_t len)
{
    static const char tag[] = "\nchecksum ";
    const size_t tag_len = sizeof tag - 1;
    for (size_t i = len; i-- > 0;) {
        if (i + tag_len + 16 > len || memcmp(text + i, tag, tag_len) != 0)
            continue;
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)mlajit_hash64(text, i + 1));
        memcpy(text + i + tag_len, hex, 16);
        return;
    }
}

/* Recompute the trailer's own checksum, as mlajit_pack_write does. */
static void fix_trailer_checksum(uint8_t *file, size_t len)
{
    if (len < MLAJIT_PACK_TRAILER_BYTES)
        return;
    uint8_t *t = file + len - MLAJIT_PACK_TRAILER_BYTES;
    store_u64le(t + 56, mlajit_hash64(t, 56));
}

static void fuzz_manifest(const uint8_t *text, size_t len)
{
    mlajit_pack_manifest m;
    if (mlajit_pack_manifest_parse(text, len, &m) != MLAJIT_OK) {
        if (mlajit_last_error()[0] == '\0')
            abort(); /* a refusal must say why */
        return;
    }
    char *again = NULL;
    size_t again_len = 0;
    if (mlajit_pack_manifest_format(&m, &again, &again_len) != MLAJIT_OK)
        abort(); /* a manifest that parses must format */
    mlajit_pack_manifest back;
    if (mlajit_pack_manifest_parse(again, again_len, &back) != MLAJIT_OK || !mlajit_pack_manifest_same_recipe(&m, &back) ||
        back.kernel_count != m.kernel_count || back.created_unix != m.created_unix || strcmp(back.tool, m.tool) != 0 ||
        strcmp(back.archs, m.archs) != 0)
        abort();
    for (size_t i = 0; i < m.kernel_count; i++)
        if (back.kernels[i].key.hi != m.kernels[i].key.hi || back.kernels[i].key.lo != m.kernels[i].key.lo ||
            strcmp(back.kernels[i].spec_string, m.kernels[i].spec_string) != 0)
            abort();
    mlajit_pack_manifest_clear(&back);
    mlajit_pack_manifest_clear(&m);
    free(again);
}

static void fuzz_pack_file(const uint8_t *bytes, size_t len)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/mlajit-fuzz-pack-%ld.pack", (long)getpid());
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    ssize_t written = write(fd, bytes, len);
    close(fd);
    if (written != (ssize_t)len) {
        unlink(path);
        return;
    }
    mlajit_pack *pack = NULL;
    int rc = mlajit_pack_open(path, &pack);
    if (rc != MLAJIT_OK) {
        unlink(path);
        if (mlajit_last_error()[0] == '\0')
            abort();
        return;
    }
    size_t checked = 0;
    rc = mlajit_pack_verify(pack, &checked);
    if (rc != MLAJIT_OK && mlajit_last_error()[0] == '\0')
        abort();
    const mlajit_pack_manifest *m = mlajit_pack_manifest_of(pack);
    for (size_t i = 0; i < m->kernel_count; i++) {
        mlajit_cache_entry e;
        rc = mlajit_pack_get(pack, &m->kernels[i].key, &e);
        if (rc == MLAJIT_OK)
            mlajit_cache_entry_clear(&e);
        else if (mlajit_last_error()[0] == '\0')
            abort();
    }
    (void)mlajit_pack_has_arch(pack, "sm_90a");
    mlajit_pack_close(pack);
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const int mode = data[0] & 3;
    size--;
    /* A private copy of exactly size bytes, so any over-read is out of bounds. */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data + 1, size);
    if (mode == 1)
        fix_manifest_checksum(copy, size);
    if (mode == 3)
        fix_trailer_checksum(copy, size);
    if (mode <= 1)
        fuzz_manifest(copy, size);
    else
        fuzz_pack_file(copy, size);
    free(copy);
    return 0;
}
