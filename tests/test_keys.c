/* tests/test_keys.c - a cache that can never hand out the wrong kernel: the key
 * is the generated source (with the arch, NVRTC and its options), so it changes
 * exactly when what NVRTC compiles changes; every entry records what its launch
 * needs, and an entry whose record the current generator does not expect, or
 * of another entry format, is refused as stale (not damage), counted, warned
 * about once and recompiled over, from the disk cache and from packs alike.
 * (That a template's comments do not reach the source is tests/
 * test_embed_templates.py's part: it shows the embedded bytes do not change.)
 *
 * The stale-entry tests forge entries under the real key of a spec, as an older
 * build would have written them, and run NVRTC for the recompile (about half a
 * second per spec) in a context without a device. */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/pack.h"
#include "cache/store.h"
#include "common/error.h"
#include "mlajit.h"
#include "runtime/nvrtc.h"
#include "runtime/runtime.h"

#define LOOKUP_FIXTURE_ROOT "/tmp/mlajit-test-keys-XXXXXX"
#include "lookup_fixture.h"

static int keys_equal(mlajit_cache_key a, mlajit_cache_key b) { return a.hi == b.hi && a.lo == b.lo; }

static mlajit_kernel_spec parsed(const char *spec_string)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_parse(spec_string, &s), MLAJIT_OK, "%s: %s", spec_string, mlajit_last_error());
    cr_assert_eq(mlajit_spec_validate(&s), MLAJIT_OK, "%s: %s", spec_string, mlajit_last_error());
    return s;
}

/* ------------------------------------------------------------------------- */
/* The key is the generated source                                            */
/* ------------------------------------------------------------------------- */

TestSuite(key, .init = make_root, .fini = remove_root);

/* Every family, several models, feature sets, page sizes and archs; and specs
 * asked another way that resolve to the same kernel (auto; sm90-narrow-long where
 * its third ring slot does not fit). */
static const char *const family_specs[] = {
    "v32.h16.p64.t64.hc16.portable.sm_90a",
    "v32.h16.p64.t64.hc16.portable.sm_80",
    "v32.h16.p64.t64.hc16.portable.sm_100a",
    "dsv4.h64.p256.e64.fslx.t64.hc64.portable.sm_90a",
    "glm_nsa.h16.p1024.t32.hc16.portable.sm_80",
    "v32.h128.p64.t64.hc64.sm90.sm_90a",
    "v32.h64.p64.t64.hc64.sm90.sm_90a",
    "dsv4.h128.p256.e64.fslx.t64.hc64.sm90.sm_90a",
    "glm_nsa.h64.p1024.e7.fslx.t64.hc64.sm90.sm_90a",
    "v32.h64.p64.t64.hc64.sm90-staged.sm_90a",
    "dsv4.h128.p256.e64.fs.t64.hc64.sm90-staged.sm_90a",
    "v32.h32.p64.t64.hc32.sm90-narrow.sm_90a",
    "v32.h32.p64.t64.hc16.sm90-narrow.sm_90a",
    "dsv4.h16.p64.e64.fsl.t64.hc16.sm90-narrow.sm_90a",
    "v32.h8.p64.t64.hc8.sm90-narrow-long.sm_90a",
    "v32.h12.p2.e256.fslx.t64.hc16.sm90-narrow-long.sm_90a",
    "v32.h4.p64.t64.hc8.sm90-narrow-scores.sm_90a",
    "v32.h7.p1.fsl.t64.hc8.sm90-narrow-scores.sm_90a",
    "dots3_swa.h64.p64.t64.hc64.sm90-split.sm_90a",
    "dots3_swa.h128.p256.e64.fsl.t64.hc64.sm90-split.sm_90a",
    "v32.h16.p64.t0.hc0.auto.sm_90a",             /* auto: sm90-narrow at 16 heads */
    "v32.h16.p64.t64.hc16.sm90-narrow.sm_90a",
    "v32.h16.p64.t64.hc16.sm90-narrow.sm_90a",    /* the same, asked twice */
    "v32.h16.p64.t64.hc16.sm90-narrow.sm_90",     /* ...for sm_90, which has no narrow: refused below */
};

Test(key, changes_if_and_only_if_the_generated_source_changes)
{
    enum { N = sizeof family_specs / sizeof family_specs[0] };
    mlajit_context *ctx = context_on(NULL, "", 0);
    mlajit_cache_key keys[N];
    char *sources[N];
    char options[N][256];
    mlajit_kernel_spec resolved[N];
    int n = 0, families_seen[16] = {0};
    for (int i = 0; i < N; i++) {
        mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
        cr_assert_eq(mlajit_spec_parse(family_specs[i], &s), MLAJIT_OK, "%s: %s", family_specs[i],
                     mlajit_last_error());
        resolved[n] = (mlajit_kernel_spec)MLAJIT_KERNEL_SPEC_INIT;
        if (mlajit_spec_resolve(&s, &resolved[n]) != MLAJIT_OK) {
            cr_expect(strstr(family_specs[i], ".sm_90") && !strstr(family_specs[i], ".sm_90a"),
                      "%s: only the sm_90 row is refused: %s", family_specs[i], mlajit_last_error());
            continue;
        }
        char spec_string[128];
        cr_assert_eq(mlajit_kernel_key_and_source(ctx, &resolved[n], &keys[n], spec_string, sizeof spec_string,
                                                  &sources[n]),
                     MLAJIT_OK, "%s: %s", family_specs[i], mlajit_last_error());
        families_seen[resolved[n].variant] = 1;
        /* the key is made of the source, the arch, NVRTC and its options: nothing else */
        mlajit_nvrtc_options_string(resolved[n].arch, options[n], sizeof options[n]);
        mlajit_key_inputs in = {.source = sources[n], .arch = resolved[n].arch, .nvrtc_major = ctx->nvrtc_major,
                                .nvrtc_minor = ctx->nvrtc_minor, .compile_options = options[n]};
        cr_expect(keys_equal(keys[n], mlajit_cache_key_make(&in)), "%s: the key is not the source's", spec_string);
        mlajit_cache_key again;
        char again_string[128];
        cr_assert_eq(mlajit_kernel_key(ctx, &resolved[n], &again, again_string, sizeof again_string), MLAJIT_OK);
        cr_expect(keys_equal(keys[n], again) && strcmp(again_string, spec_string) == 0, "%s: repeatable",
                  spec_string);
        cr_expect(strstr(sources[n], spec_string) != NULL, "%s: the source names its spec", spec_string);
        n++;
    }
    for (int f = 0; f < mlajit_family_count; f++)
        cr_expect(families_seen[mlajit_families[f].variant], "family %s is in the list", mlajit_families[f].name);

    /* over every pair: equal keys exactly where the sources are equal */
    int equal_pairs = 0, distinct_pairs = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            int same_source = strcmp(sources[i], sources[j]) == 0;
            cr_expect_eq(keys_equal(keys[i], keys[j]), same_source, "rows %d and %d: sources %s, keys %s", i, j,
                         same_source ? "equal" : "differ", keys_equal(keys[i], keys[j]) ? "equal" : "differ");
            equal_pairs += same_source;
            distinct_pairs += !same_source;
        }
    cr_expect_geq(equal_pairs, 3, "the list asks some kernels twice (auto, a repeat)");
    cr_expect_gt(distinct_pairs, 200);

    /* any one-byte change of the source, or another arch, NVRTC or option, is another key */
    for (int i = 0; i < n; i++) {
        mlajit_key_inputs in = {.source = sources[i], .arch = resolved[i].arch, .nvrtc_major = ctx->nvrtc_major,
                                .nvrtc_minor = ctx->nvrtc_minor, .compile_options = options[i]};
        size_t len = strlen(sources[i]);
        for (size_t at = 0; at < len; at += len / 7 + 1) {
            char saved = sources[i][at];
            sources[i][at] = saved == ' ' ? '\t' : ' ';
            cr_expect(!keys_equal(mlajit_cache_key_make(&in), keys[i]), "row %d: byte %zu changed, same key", i, at);
            sources[i][at] = saved;
        }
        mlajit_key_inputs other = in;
        other.nvrtc_minor++;
        cr_expect(!keys_equal(mlajit_cache_key_make(&other), keys[i]), "row %d: NVRTC", i);
        other = in;
        other.nvrtc_major++;
        cr_expect(!keys_equal(mlajit_cache_key_make(&other), keys[i]), "row %d: NVRTC major", i);
        other = in;
        other.arch = "sm_100a";
        cr_expect(strcmp(in.arch, "sm_100a") == 0 || !keys_equal(mlajit_cache_key_make(&other), keys[i]),
                  "row %d: arch", i);
        other = in;
        other.compile_options = "-lineinfo";
        cr_expect(!keys_equal(mlajit_cache_key_make(&other), keys[i]), "row %d: options", i);
        cr_expect(keys_equal(mlajit_cache_key_make(&in), keys[i]), "row %d: restored", i);
    }
    for (int i = 0; i < n; i++)
        free(sources[i]);
    mlajit_context_destroy(ctx);
}

/* The source holds what NVRTC compiles and nothing that is prose: no comment
 * (the embedder stripped the templates', the generator writes none), and the
 * spec it was generated for as a macro, which no kernel reads. */
Test(key, the_source_carries_no_comment)
{
    for (size_t i = 0; i < sizeof family_specs / sizeof family_specs[0]; i++) {
        mlajit_kernel_spec s = parsed(family_specs[i]);
        char *src;
        if (mlajit_generate_source(&s, &src) != MLAJIT_OK)
            continue; /* the refused sm_90 row */
        /* no template holds a // or a slash-star inside a string literal, so any is a comment */
        cr_expect(strstr(src, "//") == NULL, "%s: a // comment: %.80s", family_specs[i], strstr(src, "//"));
        cr_expect(strstr(src, "/*") == NULL, "%s: a block comment: %.80s", family_specs[i], strstr(src, "/*"));
        cr_expect(strncmp(src, "#define MLAJIT_SPEC \"", 21) == 0, "%s: %.60s", family_specs[i], src);
        free(src);
    }
}

/* ------------------------------------------------------------------------- */
/* Stale entries: refused, counted, recompiled                                */
/* ------------------------------------------------------------------------- */

TestSuite(stale, .init = make_root, .fini = remove_root);

/* The spec of issue 45's example: between two commits its kernel went from 512
 * threads and 222,064 bytes of shared memory to 384 threads and 201,040, under
 * one key. */
#define STALE_SPEC "v32.h8.p64.t64.hc8.sm90-narrow.sm_90a"

static mlajit_cache_key key_of(mlajit_context *ctx, const char *spec_string)
{
    mlajit_kernel_spec s = parsed(spec_string), r = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_cache_key key;
    char again[128];
    cr_assert_eq(mlajit_kernel_key(ctx, &r, &key, again, sizeof again), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_str_eq(again, spec_string);
    return key;
}

static mlajit_launch_record expected_launch(const char *spec_string)
{
    mlajit_kernel_spec s = parsed(spec_string), r = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK);
    mlajit_launch_record want;
    cr_assert_eq(mlajit_spec_launch_record(&r, &want), MLAJIT_OK, "%s", mlajit_last_error());
    return want;
}

/* An entry for spec_string with a made-up cubin and the current launch record. */
static mlajit_cache_entry forged_entry(const char *spec_string, size_t cubin_size)
{
    mlajit_cache_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.spec_string, sizeof e.spec_string, "%s", spec_string);
    snprintf(e.entry_names, sizeof e.entry_names, "%s", MLAJIT_ENTRY_NAMES);
    e.launch = expected_launch(spec_string);
    e.compile_ms = 1;
    e.registers = 168;
    e.created_unix = 1700000000u;
    e.cubin_size = cubin_size;
    e.cubin = malloc(cubin_size);
    cr_assert_not_null(e.cubin);
    memset(e.cubin, 0x5A, cubin_size);
    return e;
}

static void put_entry(const char *dir, const mlajit_cache_key *key, const mlajit_cache_entry *e)
{
    mlajit_store *st;
    cr_assert_eq(mlajit_store_open(dir, 0, &st), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_store_put(st, key, e), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_store_close(st);
}

/* STALE_SPEC prepared in a new context on dir and packs (flags added), stderr
 * captured: the status, with the report (may be NULL) and the warnings. */
static int prepare_captured(mlajit_context **ctx, const char *dir, const char *packs, unsigned flags,
                            mlajit_kernel_report *r, const char **err)
{
    mlajit_kernel_spec s = parsed(STALE_SPEC);
    capture_begin();
    *ctx = context_on(dir, packs, flags);
    int rc = mlajit_kernel_prepare(*ctx, &s, r);
    *err = capture_end();
    return rc;
}

/* After the recompile, the cache holds a real cubin with the current record. */
static void expect_repaired(const char *dir, const mlajit_cache_key *key, size_t forged_cubin_size)
{
    mlajit_store *st;
    cr_assert_eq(mlajit_store_open(dir, 1, &st), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_cache_entry e;
    cr_assert_eq(mlajit_store_get(st, key, &e), MLAJIT_OK, "the entry was overwritten: %s", mlajit_last_error());
    mlajit_launch_record want = expected_launch(STALE_SPEC);
    cr_expect_eq(memcmp(&e.launch, &want, sizeof want), 0, "the stored record is the generator's");
    cr_expect_neq(e.cubin_size, forged_cubin_size, "the stored cubin is the compiled one");
    cr_expect_eq(memcmp(e.cubin, "\x7f" "ELF", 4), 0, "a real cubin");
    mlajit_cache_entry_clear(&e);
    mlajit_store_close(st);
    /* and a fresh context (a fresh process) takes it from the disk without a word */
    mlajit_context *ctx;
    mlajit_kernel_report r = MLAJIT_KERNEL_REPORT_INIT;
    const char *err;
    int rc = prepare_captured(&ctx, dir, "", MLAJIT_CONTEXT_NO_JIT, &r, &err);
    cr_expect_eq(rc, MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.source, MLAJIT_SOURCE_DISK);
    cr_expect_eq(count_of(err, "warning:"), 0, "%s", err);
    mlajit_context_destroy(ctx);
}

Test(stale, an_entry_with_an_older_launch_record_is_refused_and_recompiled, .timeout = 120)
{
    const char *dir = path_in_root("cache");
    mlajit_context *keyer = context_on(NULL, "", 0);
    mlajit_cache_key key = key_of(keyer, STALE_SPEC);
    mlajit_context_destroy(keyer);
    /* what the commit before would have stored under the same key */
    mlajit_cache_entry old = forged_entry(STALE_SPEC, 4096);
    mlajit_launch_record want = old.launch;
    old.launch.threads = want.threads + 128;
    old.launch.smem_bytes = want.smem_bytes + 21024;
    put_entry(dir, &key, &old);
    mlajit_cache_entry_clear(&old);

    mlajit_context *ctx;
    mlajit_kernel_report r = MLAJIT_KERNEL_REPORT_INIT;
    const char *err;
    int rc = prepare_captured(&ctx, dir, "", 0, &r, &err);
    cr_assert_eq(rc, MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.source, MLAJIT_SOURCE_COMPILED, "the stale entry was not used");
    cr_expect_eq(count_of(err, "warning:"), 1, "one warning:\n%s", err);
    char threads[96];
    snprintf(threads, sizeof threads, "%d threads, the generator's %d", want.threads + 128, want.threads);
    cr_expect(strstr(err, "is stale") && strstr(err, threads) && strstr(err, "dynamic shared memory") &&
                  strstr(err, "recompiling"),
              "the warning names the entry, each difference and what happens: %s", err);
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    cr_expect_eq(info.stale, 1);
    cr_expect_eq(info.corrupt, 0, "stale is not damage");
    cr_expect_eq(info.compiles, 1);
    mlajit_context_destroy(ctx);
    expect_repaired(dir, &key, 4096);
}

/* Each field of the record, and the entry names, are checked on their own. */
Test(stale, every_field_of_the_launch_record_is_checked)
{
    mlajit_kernel_spec s = parsed("v32.h128.p64.t64.hc64.sm90.sm_90a"), r = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK);
    mlajit_kernel_layout layout;
    cr_assert_eq(mlajit_codegen_layout(&r, &layout), MLAJIT_OK);
    cr_expect_eq(layout.cluster_ctas, 2, "a CTA pair: the cluster enters the record");
    mlajit_cache_entry e = forged_entry("v32.h128.p64.t64.hc64.sm90.sm_90a", 64);
    cr_expect_eq(mlajit_entry_launch_check(&e, &layout), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(e.launch.cluster_dims[1], 2);
    const struct { const char *words; int *field; } fields[] = {
        {"threads", &e.launch.threads},
        {"bytes of dynamic shared memory", &e.launch.smem_bytes},
        {"combine threads", &e.launch.combine_threads},
        {"bytes of combine shared memory", &e.launch.combine_smem_bytes},
        {"cluster (1, 1, 1)", &e.launch.cluster_dims[1]},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        int saved = *fields[i].field;
        *fields[i].field = saved == 2 ? 1 : saved + 32;
        cr_expect_eq(mlajit_entry_launch_check(&e, &layout), MLAJIT_CACHE_STALE, "%s", fields[i].words);
        cr_expect(strstr(mlajit_last_error(), fields[i].words) != NULL, "%s: %s", fields[i].words,
                  mlajit_last_error());
        *fields[i].field = saved;
    }
    e.launch.params_layout_hash ^= 1;
    cr_expect_eq(mlajit_entry_launch_check(&e, &layout), MLAJIT_CACHE_STALE);
    cr_expect(strstr(mlajit_last_error(), "parameter block") != NULL, "%s", mlajit_last_error());
    e.launch.params_layout_hash ^= 1;
    snprintf(e.entry_names, sizeof e.entry_names, "mlajit_decode_main");
    cr_expect_eq(mlajit_entry_launch_check(&e, &layout), MLAJIT_CACHE_STALE);
    cr_expect(strstr(mlajit_last_error(), "entries") != NULL, "%s", mlajit_last_error());
    mlajit_cache_entry_clear(&e);
}

/* The value format before launch records (version 1), as the previous build
 * wrote it: 16-byte prefix, spec, names, compile_ms, registers, shared, spill,
 * created, cubin size, cubin hash, header hash, cubin. */
static uint8_t *version1_value(const char *spec_string, size_t cubin_size, size_t *len)
{
    const char *names = MLAJIT_ENTRY_NAMES;
    size_t spec_len = strlen(spec_string), names_len = strlen(names);
    size_t header = 16 + 4 + spec_len + 4 + names_len + 8 + 4 + 4 + 4 + 8 + 8 + 8 + 8;
    uint8_t *v = calloc(1, header + cubin_size);
    cr_assert_not_null(v);
    size_t p = 0;
#define PUT(bytes, n) (memcpy(v + p, (bytes), (n)), p += (n))
#define PUT_LE(value, n)                                                                                           \
    do {                                                                                                           \
        uint64_t x_ = (uint64_t)(value);                                                                           \
        for (int k_ = 0; k_ < (n); k_++)                                                                           \
            v[p++] = (uint8_t)(x_ >> (8 * k_));                                                                    \
    } while (0)
    PUT("MLAJITC1", 8);
    PUT_LE(1, 4);
    PUT_LE(header, 4);
    PUT_LE(spec_len, 4);
    PUT(spec_string, spec_len);
    PUT_LE(names_len, 4);
    PUT(names, names_len);
    PUT_LE(0, 8);    /* compile_ms */
    PUT_LE(168, 4);  /* registers */
    PUT_LE(0, 4);    /* shared */
    PUT_LE(0, 4);    /* spill */
    PUT_LE(1700000000u, 8);
    PUT_LE(cubin_size, 8);
    memset(v + header, 0x5A, cubin_size);
    PUT_LE(mlajit_hash64(v + header, cubin_size), 8);
    PUT_LE(mlajit_hash64(v, header - 8), 8);
#undef PUT
#undef PUT_LE
    cr_assert_eq(p, header);
    *len = header + cubin_size;
    return v;
}

Test(stale, an_entry_of_the_older_format_is_stale_not_damage, .timeout = 120)
{
    size_t len;
    uint8_t *v1 = version1_value(STALE_SPEC, 2048, &len);
    mlajit_cache_entry e;
    cr_expect_eq(mlajit_cache_entry_decode(v1, len, &e), MLAJIT_CACHE_STALE);
    cr_expect(strstr(mlajit_last_error(), "format version 1 (written by an older mlajit)") != NULL, "%s",
              mlajit_last_error());
    v1[len - 1] ^= 1; /* its cubin's checksum is not read: the header says what it is */
    cr_expect_eq(mlajit_cache_entry_decode(v1, len, &e), MLAJIT_CACHE_STALE);
    v1[len - 1] ^= 1;
    v1[20] ^= 1; /* but a damaged header is damage */
    cr_expect_eq(mlajit_cache_entry_decode(v1, len, &e), MLAJIT_ERR_CORRUPT);
    cr_expect(strstr(mlajit_last_error(), "fails its header checksum") != NULL, "%s", mlajit_last_error());
    v1[20] ^= 1;
    v1[8] = 3; /* and an intact entry of a newer format says so */
    uint64_t h = mlajit_hash64(v1, len - 2048 - 8);
    for (int k = 0; k < 8; k++)
        v1[len - 2048 - 8 + k] = (uint8_t)(h >> (8 * k));
    cr_expect_eq(mlajit_cache_entry_decode(v1, len, &e), MLAJIT_CACHE_STALE);
    cr_expect(strstr(mlajit_last_error(), "a newer mlajit") != NULL, "%s", mlajit_last_error());
    free(v1);

    /* in the cache, under the kernel's key: JIT disabled, it is refused, counted and named */
    const char *dir = path_in_root("cache");
    mlajit_context *keyer = context_on(NULL, "", 0);
    mlajit_cache_key key = key_of(keyer, STALE_SPEC);
    mlajit_context_destroy(keyer);
    v1 = version1_value(STALE_SPEC, 2048, &len);
    mlajit_store *st;
    cr_assert_eq(mlajit_store_open(dir, 0, &st), MLAJIT_OK);
    cr_assert_eq(mlajit_store_put_raw(st, &key, v1, len), MLAJIT_OK);
    mlajit_store_close(st);
    free(v1);

    mlajit_context *ctx;
    const char *err;
    int rc = prepare_captured(&ctx, dir, "", MLAJIT_CONTEXT_NO_JIT, NULL, &err);
    cr_expect_eq(rc, MLAJIT_ERR_NOT_FOUND, "never launched: a miss");
    cr_expect_eq(count_of(err, "warning:"), 1, "%s", err);
    cr_expect(strstr(err, "is stale") && strstr(err, "format version 1"), "%s", err);
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    cr_expect(info.stale == 1 && info.corrupt == 0, "stale %lld, corrupt %lld", (long long)info.stale,
              (long long)info.corrupt);
    mlajit_context_destroy(ctx);

    /* with JIT: recompiled over it */
    mlajit_kernel_report r = MLAJIT_KERNEL_REPORT_INIT;
    rc = prepare_captured(&ctx, dir, "", 0, &r, &err);
    cr_assert_eq(rc, MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.source, MLAJIT_SOURCE_COMPILED);
    cr_expect_eq(count_of(err, "warning:"), 1, "%s", err);
    mlajit_context_destroy(ctx);
    expect_repaired(dir, &key, 2048);
}

/* A pack's entry with another record is skipped for the next layer; a pack of
 * the older format is skipped whole, with one warning, and is not damage. */
Test(stale, in_a_pack_a_stale_entry_falls_through_and_an_older_pack_is_skipped)
{
    mlajit_context *keyer = context_on(NULL, "", 0);
    mlajit_cache_key key = key_of(keyer, STALE_SPEC);
    mlajit_pack_manifest recipe;
    memset(&recipe, 0, sizeof recipe);
    snprintf(recipe.tool, sizeof recipe.tool, "mlajit test");
    snprintf(recipe.key_recipe, sizeof recipe.key_recipe, "%s", MLAJIT_KEY_RECIPE);
    recipe.nvrtc_major = keyer->nvrtc_major;
    recipe.nvrtc_minor = keyer->nvrtc_minor;
    mlajit_context_destroy(keyer);
    mlajit_cache_entry old = forged_entry(STALE_SPEC, 3000);
    old.launch.threads += 128;
    mlajit_pack_item item = {.key = key, .entry = &old};
    const char *pack = path_in_root("stale.pack");
    cr_assert_eq(mlajit_pack_write(pack, &recipe, &item, 1, NULL, 0), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_cache_entry_clear(&old);
    const char *dir = path_in_root("cache");
    mlajit_cache_entry good = forged_entry(STALE_SPEC, 5000);
    put_entry(dir, &key, &good);
    mlajit_cache_entry_clear(&good);

    mlajit_context *ctx;
    mlajit_kernel_report r = MLAJIT_KERNEL_REPORT_INIT;
    const char *err;
    int rc = prepare_captured(&ctx, dir, pack, MLAJIT_CONTEXT_NO_JIT, &r, &err);
    cr_assert_eq(rc, MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.source, MLAJIT_SOURCE_DISK, "the pack's stale entry was passed over");
    cr_expect_eq(r.cubin_bytes, 5000u);
    cr_expect_eq(count_of(err, "warning:"), 1, "%s", err);
    cr_expect(strstr(err, "stale.pack") && strstr(err, "is stale") && strstr(err, "threads"), "%s", err);
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    cr_expect(info.stale == 1 && info.corrupt == 0 && info.pack_hits == 0 && info.disk_hits == 1, "%lld %lld",
              (long long)info.stale, (long long)info.corrupt);
    mlajit_context_destroy(ctx);

    /* the pack as an older mlajit wrote it: trailer version 1, its checksum intact */
    FILE *f = fopen(pack, "r+b");
    cr_assert_not_null(f);
    cr_assert_eq(fseek(f, -(long)MLAJIT_PACK_TRAILER_BYTES, SEEK_END), 0);
    uint8_t t[MLAJIT_PACK_TRAILER_BYTES];
    cr_assert_eq(fread(t, 1, sizeof t, f), sizeof t);
    t[8] = 1;
    uint64_t h = mlajit_hash64(t, 56);
    for (int k = 0; k < 8; k++)
        t[56 + k] = (uint8_t)(h >> (8 * k));
    cr_assert_eq(fseek(f, -(long)MLAJIT_PACK_TRAILER_BYTES, SEEK_END), 0);
    cr_assert_eq(fwrite(t, 1, sizeof t, f), sizeof t);
    fclose(f);
    mlajit_pack *p;
    cr_expect_eq(mlajit_pack_open(pack, &p), MLAJIT_CACHE_STALE);
    cr_expect(strstr(mlajit_last_error(), "format version 1") && strstr(mlajit_last_error(), "rebuild"), "%s",
              mlajit_last_error());
    capture_begin();
    ctx = context_on(dir, pack, MLAJIT_CONTEXT_NO_JIT);
    err = capture_end();
    mlajit_context_get_info(ctx, &info);
    cr_expect(info.pack_count == 0 && info.corrupt == 0, "skipped, not counted as damage");
    cr_expect_eq(count_of(err, "warning:"), 1, "%s", err);
    mlajit_context_destroy(ctx);
}
