/* Writes the seed inputs of the fuzz_pack and fuzz_cache_entry corpora with the
 * library's own writers, so the seeds follow the formats when they change:
 *
 *   make_corpus PACK_CORPUS_DIR ENTRY_CORPUS_DIR
 *
 * (built with -Dfuzzers=true; docs/fuzzing.md). Each file starts with the
 * harness's mode byte. fuzz_pack: manifests of each shape (mode 1 recomputes the
 * checksum line, so mutations reach the fields), a small pack of made-up kernels
 * as it is (mode 2) and with its trailer re-sealed (mode 3). fuzz_cache_entry:
 * entries of each shape (odd: as they are; even: checksums recomputed), and an
 * intact entry of the older format (version 1), which decodes as stale. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/pack.h"
#include "cache/store.h"
#include "mlajit.h"

static int write_seed(const char *dir, const char *name, uint8_t mode, const void *bytes, size_t len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fputc(mode, f) == EOF || fwrite(bytes, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "make_corpus: %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

static int read_all(const char *path, uint8_t **bytes, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *bytes = malloc(n > 0 ? (size_t)n : 1);
    int rc = !*bytes || fread(*bytes, 1, (size_t)n, f) != (size_t)n;
    fclose(f);
    *len = (size_t)n;
    return rc;
}

static mlajit_cache_entry made_up_entry(const char *spec, unsigned seed, size_t cubin_size)
{
    mlajit_cache_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.spec_string, sizeof e.spec_string, "%s", spec);
    snprintf(e.entry_names, sizeof e.entry_names, "mlajit_decode_main,mlajit_decode_combine");
    e.compile_ms = 512.25 + seed;
    e.registers = 168;
    e.shared_bytes = 1024;
    e.launch = (mlajit_launch_record){.threads = 384, .smem_bytes = 201040, .combine_threads = 128,
                                      .combine_smem_bytes = 65536, .cluster_dims = {1, 1 + (int)seed % 2, 1},
                                      .params_layout_hash = 0x5eed5eed5eed5eedull + seed};
    e.created_unix = 1764522000u + seed;
    e.cubin_size = cubin_size;
    e.cubin = malloc(cubin_size ? cubin_size : 1);
    for (size_t i = 0; e.cubin && i < cubin_size; i++)
        ((uint8_t *)e.cubin)[i] = (uint8_t)(i * 37u + seed);
    return e;
}

static int manifests(const char *dir)
{
    mlajit_pack_kernel kernels[2] = {{{0x0123456789abcdefull, 0x1111111111111111ull},
                                      "v32.h8.p64.t64.hc8.sm90-narrow.sm_90a"},
                                     {{0x2222222222222222ull, 0x3333333333333333ull},
                                      "dsv4.h16.p64.e64.fsl.t64.hc16.portable.sm_100a"}};
    mlajit_pack_manifest m = {.format_version = MLAJIT_PACK_FORMAT_VERSION, .tool = "mlajit 0.1.0",
                              .key_recipe = MLAJIT_KEY_RECIPE, .nvrtc_major = 13, .nvrtc_minor = 0,
                              .created_unix = 1764522000u, .archs = "sm_100a,sm_90a"};
    static const struct { const char *name; uint8_t mode; size_t kernels; uint64_t created; } shapes[] = {
        {"manifest-empty", 0, 0, 1764522000u},
        {"manifest-two-kernels", 1, 2, 1764522000u},
        {"manifest-date-past-gmtime", 1, 2, 17690440011111111200ull},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        m.kernel_count = shapes[i].kernels;
        m.kernels = shapes[i].kernels ? kernels : NULL;
        m.created_unix = shapes[i].created;
        char *text;
        size_t len;
        if (mlajit_pack_manifest_format(&m, &text, &len) != MLAJIT_OK) {
            fprintf(stderr, "make_corpus: %s\n", mlajit_last_error());
            return 1;
        }
        failed |= write_seed(dir, shapes[i].name, shapes[i].mode, text, len);
        free(text);
    }
    return failed;
}

static int pack(const char *dir)
{
    mlajit_cache_entry entries[2] = {made_up_entry("v32.h8.p64.t64.hc8.sm90-narrow.sm_90a", 1, 3000),
                                     made_up_entry("dsv4.h16.p64.e64.fsl.t64.hc16.portable.sm_100a", 2, 5000)};
    mlajit_pack_item items[2] = {{{0x0123456789abcdefull, 0x1111111111111111ull}, &entries[0]},
                                 {{0x2222222222222222ull, 0x3333333333333333ull}, &entries[1]}};
    mlajit_pack_manifest recipe = {.tool = "mlajit 0.1.0", .key_recipe = MLAJIT_KEY_RECIPE, .nvrtc_major = 13,
                                   .created_unix = 1764522000u};
    char path[64];
    snprintf(path, sizeof path, "/tmp/mlajit-corpus-%ld.pack", (long)getpid());
    int failed = mlajit_pack_write(path, &recipe, items, 2) != MLAJIT_OK;
    uint8_t *bytes = NULL;
    size_t len = 0;
    if (failed || read_all(path, &bytes, &len)) {
        fprintf(stderr, "make_corpus: pack: %s\n", mlajit_last_error());
        failed = 1;
    } else {
        failed |= write_seed(dir, "pack-two-kernels", 2, bytes, len);
        failed |= write_seed(dir, "pack-two-kernels-sealed", 3, bytes, len);
    }
    free(bytes);
    unlink(path);
    for (int i = 0; i < 2; i++)
        mlajit_cache_entry_clear(&entries[i]);
    return failed;
}

static int entries(const char *dir)
{
    static const struct { const char *name; const char *spec; size_t cubin; uint8_t mode; } shapes[] = {
        {"entry-narrow", "v32.h8.p64.t64.hc8.sm90-narrow.sm_90a", 64, 1},
        {"entry-pair-fixed", "v32.h128.p64.t64.hc64.sm90.sm_90a", 40, 0},
        {"entry-no-cubin", "dsv4.h16.p64.e64.fslx.t64.hc16.portable.sm_80", 0, 1},
        {"entry-no-spec", "", 8, 0},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        mlajit_cache_entry e = made_up_entry(shapes[i].spec, (unsigned)i, shapes[i].cubin);
        void *value;
        size_t len;
        if (!e.cubin || mlajit_cache_entry_encode(&e, &value, &len) != MLAJIT_OK) {
            fprintf(stderr, "make_corpus: %s: %s\n", shapes[i].name, mlajit_last_error());
            mlajit_cache_entry_clear(&e);
            return 1;
        }
        failed |= write_seed(dir, shapes[i].name, shapes[i].mode, value, len);
        /* the same bytes as version 1 wrote them (no launch record), checksums intact */
        if (i == 0) {
            uint8_t *v = value;
            size_t record = 4 * 7 + 8;
            size_t spec_len = strlen(e.spec_string), names_len = strlen(e.entry_names);
            size_t record_at = 16 + 4 + spec_len + 4 + names_len + 8 + 4 + 4 + 4;
            memmove(v + record_at, v + record_at + record, len - record_at - record);
            len -= record;
            size_t header = len - e.cubin_size;
            v[8] = 1;
            for (int k = 0; k < 4; k++)
                v[12 + k] = (uint8_t)(header >> (8 * k));
            uint64_t h = mlajit_hash64(v, header - 8);
            for (int k = 0; k < 8; k++)
                v[header - 8 + k] = (uint8_t)(h >> (8 * k));
            failed |= write_seed(dir, "entry-version-1", 1, v, len);
        }
        free(value);
        mlajit_cache_entry_clear(&e);
    }
    return failed;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: make_corpus PACK_CORPUS_DIR ENTRY_CORPUS_DIR\n");
        return 2;
    }
    return manifests(argv[1]) | pack(argv[1]) | entries(argv[2]);
}
