/* Case directories: loading the golden cases, save / load round trips, hostile
 * or damaged inputs (which must give errors, never crashes), the JSON reader and
 * writer underneath, and synthetic cases. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mkdtemp, nftw, truncate */
#endif
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness/harness.h"
#include "harness/json.h"
#include "mlajit.h"

/* ---- helpers ------------------------------------------------------------------- */

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* A fresh temporary directory, removed by remove_tree. */
static void make_temp_dir(char *dir, size_t len)
{
    snprintf(dir, len, "/tmp/mlajit_test_case_XXXXXX");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp failed");
}

static void remove_tree(const char *dir) { nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    cr_assert_not_null(text);
    cr_assert_eq(fread(text, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    text[n] = '\0';
    if (len)
        *len = (size_t)n;
    return text;
}

static void write_text(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot create %s", path);
    cr_assert_eq(fwrite(text, 1, len, f), len);
    fclose(f);
}

static void case_json_path(char *buf, size_t len, const char *dir) { snprintf(buf, len, "%s/case.json", dir); }

/* Replace the first occurrence of `from` in dir/case.json with `to`. */
static void edit_case_json(const char *dir, const char *from, const char *to)
{
    char path[512];
    case_json_path(path, sizeof path, dir);
    char *text = read_text(path, NULL);
    char *at = strstr(text, from);
    cr_assert_not_null(at, "'%s' not found in case.json", from);
    size_t head = (size_t)(at - text), from_len = strlen(from), to_len = strlen(to), tail = strlen(at + from_len);
    char *edited = malloc(head + to_len + tail + 1);
    memcpy(edited, text, head);
    memcpy(edited + head, to, to_len);
    memcpy(edited + head + to_len, at + from_len, tail + 1);
    write_text(path, edited, strlen(edited));
    free(text);
    free(edited);
}

static size_t file_size(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0, "stat %s", path);
    return (size_t)sb.st_size;
}

/* A small synthetic case with every optional part: extra cache, sink, both
 * lengths, invalid indices, stride padding. */
static mlajit_synth_params small_params(mlajit_model model, uint64_t seed)
{
    mlajit_synth_params p;
    memset(&p, 0, sizeof p);
    p.model = model;
    p.b = 3;
    p.s_q = 2;
    p.h_q = 4;
    p.topk = 24;
    p.extra_topk = 9;
    p.page_size = 8;
    p.extra_page_size = 3;
    p.seqlen = 40;
    p.extra_seqlen = 7; /* fewer tokens than extra_topk: the rest is -1 */
    p.page_stride_pad = 32;
    p.with_sink = 1;
    p.with_topk_length = 1;
    p.with_extra_topk_length = 1;
    p.invalid_fraction = 0.1;
    p.seed = seed;
    return p;
}

static void synth_small(mlajit_case *c, mlajit_model model, uint64_t seed)
{
    mlajit_synth_params p = small_params(model, seed);
    int st = mlajit_case_synthesize(&p, c);
    cr_assert_eq(st, MLAJIT_OK, "synthesize: %s", mlajit_last_error());
}

/* Save a small synthetic case (with expected output) into a fresh temp dir. */
static void make_base_case(char *dir, size_t len)
{
    mlajit_case c;
    synth_small(&c, MLAJIT_MODEL_DSV4, 11);
    cr_assert_eq(mlajit_case_compute_expected(&c), MLAJIT_OK, "%s", mlajit_last_error());
    make_temp_dir(dir, len);
    cr_assert_eq(mlajit_case_save(dir, &c), MLAJIT_OK, "save: %s", mlajit_last_error());
    mlajit_case_free(&c);
}

/* Loading dir must fail with a message (and leave the case empty). */
static void expect_load_error(const char *dir, const char *needle)
{
    mlajit_case c;
    int st = mlajit_case_load(dir, &c);
    cr_expect_neq(st, MLAJIT_OK, "loading a damaged case succeeded (expected an error naming '%s')",
                  needle ? needle : "");
    cr_expect(strlen(mlajit_last_error()) > 0, "no error message");
    if (needle)
        cr_expect(strstr(mlajit_last_error(), needle) != NULL, "message '%s' does not mention '%s'",
                  mlajit_last_error(), needle);
    cr_expect_null(c.q);
    cr_expect_null(c.kv.bytes);
    mlajit_case_free(&c);
}

static int arrays_equal(const void *a, const void *b, size_t bytes)
{
    if (!a || !b)
        return a == b;
    return memcmp(a, b, bytes) == 0;
}

static void expect_cache_equal(const mlajit_case_cache *a, const mlajit_case_cache *b, int d_qk, const char *what)
{
    cr_expect_eq(a->page_size, b->page_size, "%s page size", what);
    cr_expect_eq(a->num_pages, b->num_pages, "%s pages", what);
    cr_expect_eq(a->page_stride, b->page_stride, "%s stride", what);
    if (a->num_pages == b->num_pages && a->page_stride == b->page_stride)
        cr_expect(arrays_equal(a->bytes, b->bytes, (size_t)(a->num_pages * a->page_stride)), "%s bytes", what);
    cr_expect(arrays_equal(a->source_bf16, b->source_bf16, (size_t)(a->num_pages * a->page_size) * (size_t)d_qk * 2),
              "%s source_bf16", what);
}

/* Every field equal; flashmla output is not saved, so it is not compared. */
static void expect_cases_equal(const mlajit_case *a, const mlajit_case *b)
{
    cr_assert_eq(a->model, b->model);
    cr_assert_eq(a->b, b->b);
    cr_assert_eq(a->s_q, b->s_q);
    cr_assert_eq(a->h_q, b->h_q);
    cr_assert_eq(a->topk, b->topk);
    cr_assert_eq(a->has_extra, b->has_extra);
    cr_assert_eq(a->extra_topk, b->extra_topk);
    cr_expect_eq(a->sm_scale, b->sm_scale);
    cr_expect_eq(a->seed, b->seed);
    const mlajit_model_desc *d = mlajit_model_describe(a->model);
    const size_t rows = (size_t)a->b * (size_t)a->s_q, heads = rows * (size_t)a->h_q;
    cr_expect(arrays_equal(a->q, b->q, heads * (size_t)d->d_qk * 2), "q");
    expect_cache_equal(&a->kv, &b->kv, d->d_qk, "kv");
    cr_expect(arrays_equal(a->indices, b->indices, rows * (size_t)a->topk * 4), "indices");
    cr_expect(arrays_equal(a->topk_length, b->topk_length, (size_t)a->b * 4), "topk_length");
    cr_expect(arrays_equal(a->attn_sink, b->attn_sink, (size_t)a->h_q * 4), "attn_sink");
    if (a->has_extra) {
        expect_cache_equal(&a->extra_kv, &b->extra_kv, d->d_qk, "extra_kv");
        cr_expect(arrays_equal(a->extra_indices, b->extra_indices, rows * (size_t)a->extra_topk * 4),
                  "extra_indices");
        cr_expect(arrays_equal(a->extra_topk_length, b->extra_topk_length, (size_t)a->b * 4), "extra_topk_length");
    }
    cr_expect(arrays_equal(a->expected_out, b->expected_out, heads * (size_t)d->d_v * 4), "expected_out");
    cr_expect(arrays_equal(a->expected_lse, b->expected_lse, heads * 4), "expected_lse");
}

static void save_and_reload(const mlajit_case *c, mlajit_case *back)
{
    char dir[64];
    make_temp_dir(dir, sizeof dir);
    char sub[128];
    snprintf(sub, sizeof sub, "%s/nested/case", dir); /* save creates missing parents */
    cr_assert_eq(mlajit_case_save(sub, c), MLAJIT_OK, "save: %s", mlajit_last_error());
    cr_assert_eq(mlajit_case_load(sub, back), MLAJIT_OK, "reload: %s", mlajit_last_error());
    remove_tree(dir);
}

/* ---- golden cases --------------------------------------------------------------- */

#include "golden_cases.h"

Test(golden, every_case_loads, .timeout = 60)
{
    case_list l;
    list_golden_cases(&l);
    for (int k = 0; k < l.count; k++) {
        char path[2048];
        snprintf(path, sizeof path, "%s", l.cases[k].path);
        mlajit_case c;
        int st = mlajit_case_load(path, &c);
        cr_expect_eq(st, MLAJIT_OK, "%s: %s", l.cases[k].name, mlajit_last_error());
        if (st != MLAJIT_OK)
            continue;
        cr_expect_not_null(c.q, "%s", l.cases[k].name);
        cr_expect_not_null(c.indices, "%s", l.cases[k].name);
        cr_expect_not_null(c.expected_out, "%s", l.cases[k].name);
        cr_expect_not_null(c.expected_lse, "%s", l.cases[k].name);
        cr_expect_gt(c.kv.num_pages, 0);
        cr_expect_geq(c.kv.page_stride, mlajit_min_page_stride(c.model, c.kv.page_size));
        cr_expect(c.sm_scale > 0.0 && isfinite(c.sm_scale));
        if (strstr(l.cases[k].name, "sink"))
            cr_expect_not_null(c.attn_sink, "%s should have a sink", l.cases[k].name);
        if (strstr(l.cases[k].name, "_len"))
            cr_expect_not_null(c.topk_length, "%s should have topk_length", l.cases[k].name);

        mlajit_kernel_spec spec = MLAJIT_KERNEL_SPEC_INIT;
        mlajit_decode_shape shape = MLAJIT_DECODE_SHAPE_INIT;
        mlajit_case_spec(&c, &spec);
        mlajit_case_shape(&c, &shape);
        cr_expect_eq(spec.h_q, c.h_q);
        cr_expect_eq(spec.page_size, c.kv.page_size);
        cr_expect_eq(spec.extra_page_size, c.has_extra ? c.extra_kv.page_size : 0);
        cr_expect_eq(!!(spec.features & MLAJIT_FEATURE_SINK), c.attn_sink != NULL);
        cr_expect_eq(!!(spec.features & MLAJIT_FEATURE_TOPK_LENGTH), c.topk_length != NULL);
        cr_expect_eq(!!(spec.features & MLAJIT_FEATURE_EXTRA_TOPK_LENGTH), c.extra_topk_length != NULL);
        cr_expect_eq(shape.topk, c.topk);
        cr_expect_eq(shape.extra_topk, c.extra_topk);
        cr_log_info("%s: %s b %d s_q %d h_q %d topk %d extra %d page %d stride %lld", l.cases[k].name,
                    mlajit_model_describe(c.model)->name, c.b, c.s_q, c.h_q, c.topk, c.extra_topk, c.kv.page_size,
                    (long long)c.kv.page_stride);
        mlajit_case_free(&c);
    }
}

/* The full set (its README's seven cases) where it is found; else skipped saying
 * where it was looked for (the subset alone still runs every golden test). A
 * MLAJIT_GOLDEN_DIR that holds no cases is a mistake, not a skip. */
Test(golden, full_set_is_found)
{
    case_list l;
    find_golden_cases(&l);
    cr_assert(!l.explicit_dir_bad, "%s", l.why_no_full);
    if (!l.full_dir[0])
        cr_skip_test("%s", l.why_no_full);
    int in_full = 0;
    for (int k = 0; k < l.count; k++)
        in_full += !l.cases[k].from_subset;
    cr_expect_eq(in_full, GOLDEN_FULL_SET_CASES, "%s holds %d cases, the full set %d", l.full_dir, in_full,
                 GOLDEN_FULL_SET_CASES);
}

/* tests/golden's subset holds two of the full set's cases, each with FlashMLA's
 * output or the quantizer's source, and, where the full set is here too, the same
 * bytes as its copy (they are to be used as they are). */
static int files_equal(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        same = ca == cb;
        if (ca == EOF || cb == EOF)
            break;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return same;
}

Test(golden, subset_is_the_full_sets_bytes)
{
    case_list l;
    list_golden_cases(&l);
    case_list subset = {.count = 0};
    cr_assert_gt(golden_add_dir(&subset, l.subset_dir, 1), 0, "no case in the subset dir '%s'", l.subset_dir);
    cr_expect_eq(subset.count, 2, "tests/golden should hold 2 cases, has %d", subset.count);
    int with_flashmla = 0, with_source = 0;
    for (int k = 0; k < subset.count; k++) {
        mlajit_case c;
        cr_assert_eq(mlajit_case_load(subset.cases[k].path, &c), MLAJIT_OK, "%s", mlajit_last_error());
        with_flashmla += c.flashmla_out != NULL;
        with_source += c.kv.source_bf16 != NULL;
        mlajit_case_free(&c);
    }
    cr_expect(with_flashmla && with_source, "the subset keeps FlashMLA's output (%d) and a quantizer source (%d)",
              with_flashmla, with_source);
    if (!l.full_dir[0])
        cr_skip_test("%s", l.why_no_full); /* the subset's sums were checked when it was unpacked */
    for (int k = 0; k < subset.count; k++) {
        char full_case[1400];
        snprintf(full_case, sizeof full_case, "%s/%s", l.full_dir, subset.cases[k].name);
        DIR *d = opendir(subset.cases[k].path);
        cr_assert_not_null(d);
        int files = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            char a[2100], b[2100];
            snprintf(a, sizeof a, "%s/%s", subset.cases[k].path, e->d_name);
            snprintf(b, sizeof b, "%s/%s", full_case, e->d_name);
            cr_expect(files_equal(a, b), "%s differs from %s", a, b);
            files++;
        }
        closedir(d);
        cr_expect_gt(files, 3, "%s", subset.cases[k].path);
    }
}

Test(golden, save_and_reload_round_trip, .timeout = 60)
{
    case_list l;
    list_golden_cases(&l);
    for (int k = 0; k < l.count; k++) {
        char path[2048];
        snprintf(path, sizeof path, "%s", l.cases[k].path);
        mlajit_case c, back;
        cr_assert_eq(mlajit_case_load(path, &c), MLAJIT_OK, "%s", mlajit_last_error());
        save_and_reload(&c, &back);
        expect_cases_equal(&c, &back);
        cr_expect_null(back.flashmla_out, "save writes flashmla as null");
        mlajit_case_free(&c);
        mlajit_case_free(&back);
    }
}

/* ---- damaged and hostile inputs ----------------------------------------------------- */

Test(bad_input, missing_directory_or_case_json)
{
    expect_load_error("/nonexistent/mlajit/case", "case.json");
    char dir[64];
    make_temp_dir(dir, sizeof dir);
    expect_load_error(dir, "case.json");
    mlajit_case c;
    cr_expect_eq(mlajit_case_load(NULL, &c), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect_eq(mlajit_case_load(dir, NULL), MLAJIT_ERR_INVALID_ARGUMENT);
    char path[512];
    case_json_path(path, sizeof path, dir);
    cr_assert_eq(mkdir(path, 0700), 0); /* case.json that is a directory */
    expect_load_error(dir, "case.json");
    remove_tree(dir);
}

Test(bad_input, truncated_case_json)
{
    char dir[64], path[512];
    make_base_case(dir, sizeof dir);
    case_json_path(path, sizeof path, dir);
    size_t len;
    char *text = read_text(path, &len);
    /* every prefix is invalid JSON or an incomplete case */
    for (size_t cut = 0; cut < len; cut += (cut < 64 ? 1 : 37)) {
        write_text(path, text, cut);
        expect_load_error(dir, NULL);
    }
    free(text);
    remove_tree(dir);
}

Test(bad_input, invalid_json)
{
    char dir[64], path[512];
    make_base_case(dir, sizeof dir);
    case_json_path(path, sizeof path, dir);
    const char *texts[] = {
        "",          "   ",        "{",           "{,}",          "{\"a\":}",       "{\"a\" 1}",   "[1,]",
        "{\"a\":1,}", "nul",       "tru",         "01",           "1.",             "-",           "1e",
        "\"abc",     "\"\\x\"",    "\"\\u12G4\"", "\"\\ud800\"",  "\"\\udc00x\"",   "{\"a\":1} x", "\"\x01\"",
        "{\"a\":\"\\u0000\"}",     "\xff\xfe",    "[1 2]",        "{\"model\":\"v32\"}} ",
    };
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        write_text(path, texts[k], strlen(texts[k]));
        expect_load_error(dir, NULL);
    }
    /* valid JSON that is not an object */
    write_text(path, "[1, 2, 3]", 9);
    expect_load_error(dir, "object");
    remove_tree(dir);
}

/* Each edit {old text, new text, what the error names} of the base case's case.json,
 * on a fresh copy: the load fails and its message names the field. */
static void expect_edits_rejected(const char *const (*edits)[3], size_t count)
{
    for (size_t k = 0; k < count; k++) {
        char dir[64];
        make_base_case(dir, sizeof dir);
        edit_case_json(dir, edits[k][0], edits[k][1]);
        expect_load_error(dir, edits[k][2]);
        remove_tree(dir);
    }
}

Test(bad_input, wrong_types)
{
    static const char *const edits[][3] = {
        {"\"b\": 3", "\"b\": \"3\"", "b"},
        {"\"b\": 3", "\"b\": 3.0", "b"},
        {"\"b\": 3", "\"b\": true", "b"},
        {"\"h_q\": 4", "\"h_q\": null", "h_q"},
        {"\"model\": \"dsv4\"", "\"model\": 2", "model"},
        {"\"sm_scale\": ", "\"sm_scale\": \"x\", \"old\": ", "sm_scale"},
        {"\"kv\": {", "\"kv\": [], \"old\": {", "kv"},
        {"\"q\": {", "\"q\": 7, \"old\": {", "q"},
        {"\"shape\": [3, 2, 24]", "\"shape\": \"3,2,24\"", "indices.shape"},
        {"\"shape\": [3, 2, 24]", "\"shape\": [3, 2]", "indices.shape"},
        {"\"shape\": [3, 2, 24]", "\"shape\": [3, 2, 24.5]", "indices.shape"},
        {"\"file\": \"kv.u8\"", "\"file\": 5", "kv.file"},
        {"\"file\": \"kv.u8\"", "\"file\": null", "kv.file"},
        {"\"seed\": 11", "\"seed\": -1", "seed"},
        {"\"topk_length\": {", "\"topk_length\": 3, \"old\": {", "topk_length"},
        {"\"lse_base\": \"e\"", "\"lse_base\": \"2\"", "lse_base"},
    };
    expect_edits_rejected(edits, sizeof edits / sizeof edits[0]);
}

static void resize_file(const char *dir, const char *name, long delta)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0);
    cr_assert_eq(truncate(path, sb.st_size + delta), 0);
}

Test(bad_input, data_files_of_the_wrong_size)
{
    const char *files[] = {"kv.u8", "indices.i32", "q.bf16", "topk_length.i32", "attn_sink.f32", "extra_kv.u8",
                           "extra_indices.i32", "extra_topk_length.i32", "out_ref.f32", "lse_ref.f32"};
    char dir[64];
    make_base_case(dir, sizeof dir);
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        const size_t size = file_size(dir, files[k]);
        char expected[64];
        snprintf(expected, sizeof expected, "expected %zu", size);
        resize_file(dir, files[k], -1); /* truncated */
        expect_load_error(dir, files[k]);
        expect_load_error(dir, expected);
        resize_file(dir, files[k], 2); /* oversized */
        expect_load_error(dir, files[k]);
        resize_file(dir, files[k], -1);
        mlajit_case c;
        cr_assert_eq(mlajit_case_load(dir, &c), MLAJIT_OK, "%s", mlajit_last_error());
        mlajit_case_free(&c);
    }
    /* a data file that is missing, or a directory */
    char path[512];
    snprintf(path, sizeof path, "%s/q.bf16", dir);
    cr_assert_eq(remove(path), 0);
    expect_load_error(dir, "q.bf16");
    cr_assert_eq(mkdir(path, 0700), 0);
    expect_load_error(dir, "q.bf16");
    remove_tree(dir);
}

/* A FIFO (or a device) where a case file should be is refused at once: an
 * open that waited for a writer would hang the caller. */
Test(bad_input, fifos_and_devices_are_refused_not_waited_on)
{
    char dir[64], path[512];
    make_base_case(dir, sizeof dir);
    alarm(30); /* a blocking open would hang: the alarm fails the test instead */
    snprintf(path, sizeof path, "%s/q.bf16", dir);
    cr_assert_eq(remove(path), 0);
    cr_assert_eq(mkfifo(path, 0644), 0);
    expect_load_error(dir, "is a FIFO, not a regular file");
    cr_assert_eq(remove(path), 0);
    cr_assert_eq(symlink("/dev/zero", path), 0);
    expect_load_error(dir, "is a character device");
    case_json_path(path, sizeof path, dir);
    cr_assert_eq(remove(path), 0);
    cr_assert_eq(mkfifo(path, 0644), 0);
    expect_load_error(dir, "is a FIFO");
    alarm(0);
    remove_tree(dir);
}

Test(bad_input, negative_and_huge_sizes)
{
    static const char *const edits[][3] = {
        {"\"b\": 3", "\"b\": -1", "b"},
        {"\"b\": 3", "\"b\": 65537", "b"},
        {"\"b\": 3", "\"b\": 65536", "b x s_q"},
        {"\"b\": 3", "\"b\": 99999999999999999999999", "b"},
        {"\"b\": 3", "\"b\": 1e400", "b"},
        {"\"s_q\": 2", "\"s_q\": 65", "s_q"},
        {"\"h_q\": 4", "\"h_q\": 0", "h_q"},
        {"\"h_q\": 4", "\"h_q\": 129", "h_q"},
        {"\"sm_scale\": ", "\"sm_scale\": -1, \"old\": ", "sm_scale"},
        {"\"sm_scale\": ", "\"sm_scale\": 0, \"old\": ", "sm_scale"},
        {"\"num_blocks\": ", "\"num_blocks\": 0, \"old\": ", "num_blocks"},
        {"\"num_blocks\": ", "\"num_blocks\": -5, \"old\": ", "num_blocks"},
        {"\"num_blocks\": ", "\"num_blocks\": 1000000000000, \"old\": ", "num_blocks"},
        {"\"num_blocks\": ", "\"num_blocks\": 2000000, \"old\": ", "kv.u8"}, /* plausible, but not the file */
        {"\"page_block_size\": 8", "\"page_block_size\": 0", "page_block_size"},
        {"\"page_block_size\": 8", "\"page_block_size\": 1025", "page_block_size"},
        {"\"block_stride_bytes\": ", "\"block_stride_bytes\": 16, \"old\": ", "block_stride_bytes"},
        {"\"block_stride_bytes\": ", "\"block_stride_bytes\": -4672, \"old\": ", "block_stride_bytes"},
        {"\"block_stride_bytes\": ", "\"block_stride_bytes\": 9223372036854775807, \"old\": ", "block_stride_bytes"},
        {"\"shape\": [3, 2, 24]", "\"shape\": [3, 2, 0]", "topk"},
        {"\"shape\": [3, 2, 24]", "\"shape\": [3, 2, 16385]", "topk"},
        {"\"shape\": [3, 2, 24]", "\"shape\": [3, 2, -24]", "indices.shape"},
        {"\"shape\": [3, 2, 24]", "\"shape\": [3, 2, 4294967296]", "indices.shape"},
        {"\"shape\": [3, 2, 24]", "\"shape\": [4, 2, 24]", "indices.shape"},
        {"\"shape\": [3, 2, 24]", "\"shape\": [3, 2, 25]", "indices.i32"},
        {"\"d_qk\": 512", "\"d_qk\": 576", "d_qk"},
        {"\"d_v\": 512", "\"d_v\": 448", "d_v"},
        {"\"bytes_per_token\": 584", "\"bytes_per_token\": 656", "bytes_per_token"},
    };
    expect_edits_rejected(edits, sizeof edits / sizeof edits[0]);
}

Test(bad_input, unknown_model)
{
    char dir[64];
    make_base_case(dir, sizeof dir);
    edit_case_json(dir, "\"model\": \"dsv4\"", "\"model\": \"llama\"");
    expect_load_error(dir, "llama");
    edit_case_json(dir, "\"model\": \"llama\"", "\"model\": \"\"");
    expect_load_error(dir, "model");
    remove_tree(dir);
}

Test(bad_input, file_names_outside_the_directory)
{
    const char *names[] = {"../kv.u8", "..", "/etc/passwd", "sub/kv.u8", "kv..u8", "", "a\\\\b", "kv\\nu8"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char dir[64], edit[300];
        make_base_case(dir, sizeof dir);
        snprintf(edit, sizeof edit, "\"file\": \"%s\"", names[k]);
        edit_case_json(dir, "\"file\": \"kv.u8\"", edit);
        expect_load_error(dir, "kv.file");
        remove_tree(dir);
    }
    char dir[64];
    make_base_case(dir, sizeof dir);
    edit_case_json(dir, "\"out\": \"out_ref.f32\"", "\"out\": \"../../out_ref.f32\"");
    expect_load_error(dir, "expected.out");
    remove_tree(dir);
}

Test(bad_input, deeply_nested_json)
{
    char dir[64], path[512];
    make_temp_dir(dir, sizeof dir);
    case_json_path(path, sizeof path, dir);
    const size_t depth = 200000;
    char *text = malloc(2 * depth + 1);
    memset(text, '[', depth);
    memset(text + depth, ']', depth);
    text[2 * depth] = '\0';
    write_text(path, text, 2 * depth);
    expect_load_error(dir, "nesting");
    /* unterminated too */
    write_text(path, text, depth);
    expect_load_error(dir, NULL);
    /* just under the limit is fine JSON, but not a case */
    const size_t ok_depth = MLAJIT_JSON_MAX_DEPTH;
    memset(text, '[', ok_depth);
    memset(text + ok_depth, ']', ok_depth);
    write_text(path, text, 2 * ok_depth);
    expect_load_error(dir, "object");
    free(text);
    remove_tree(dir);
}

Test(bad_input, oversized_case_json)
{
    char dir[64], path[512];
    make_temp_dir(dir, sizeof dir);
    case_json_path(path, sizeof path, dir);
    const size_t n = (2u << 20);
    char *text = malloc(n);
    memset(text, ' ', n);
    text[0] = '{';
    text[n - 1] = '}';
    write_text(path, text, n);
    expect_load_error(dir, "larger");
    free(text);
    remove_tree(dir);
}

Test(bad_input, inconsistent_optional_parts)
{
    char dir[64];
    make_base_case(dir, sizeof dir);
    edit_case_json(dir, "\"extra_kv\": {", "\"extra_kv\": null, \"old\": {");
    expect_load_error(dir, "extra");
    remove_tree(dir);
    make_base_case(dir, sizeof dir);
    edit_case_json(dir, "\"extra_indices\": {", "\"extra_indices\": null, \"old\": {");
    expect_load_error(dir, "extra");
    remove_tree(dir);
}

/* Random byte edits of a valid case.json: load must answer, never crash. */
Test(bad_input, random_mutations_never_crash, .timeout = 60)
{
    char dir[64], path[512];
    make_base_case(dir, sizeof dir);
    case_json_path(path, sizeof path, dir);
    size_t len;
    char *original = read_text(path, &len);
    char *text = malloc(len + 16);
    uint64_t state = 0x12345678u;
    int loaded = 0, rejected = 0;
    const char alphabet[] = "{}[]\",:0123456789-.eE \\nulltruefalse";
    for (int round = 0; round < 400; round++) {
        memcpy(text, original, len);
        size_t n = len;
        int edits = 1 + round % 4;
        for (int e = 0; e < edits; e++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(state >> 33) % n;
            char c = alphabet[(state >> 20) % (sizeof alphabet - 1)];
            switch ((state >> 10) % 3) {
            case 0: text[at] = c; break;                             /* replace */
            case 1: memmove(text + at, text + at + 1, n - at - 1); n--; break; /* delete */
            default: text[at] = (char)(state >> 40); break;          /* any byte */
            }
        }
        write_text(path, text, n);
        mlajit_case c;
        if (mlajit_case_load(dir, &c) == MLAJIT_OK)
            loaded++;
        else
            rejected++;
        mlajit_case_free(&c);
    }
    cr_log_info("mutations: %d loaded, %d rejected", loaded, rejected);
    cr_expect_gt(rejected, 0);
    free(text);
    free(original);
    remove_tree(dir);
}

Test(bad_input, save_rejects_malformed_cases)
{
    mlajit_case c;
    memset(&c, 0, sizeof c);
    cr_expect_eq(mlajit_case_save("/tmp/mlajit_never_written", &c), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect_eq(mlajit_case_save(NULL, &c), MLAJIT_ERR_INVALID_ARGUMENT);
    synth_small(&c, MLAJIT_MODEL_V32, 1);
    cr_expect_eq(mlajit_case_save("/proc/mlajit_cannot_create/x", &c), MLAJIT_ERR_IO);
    mlajit_case_free(&c);
}

/* ---- JSON reader and writer ------------------------------------------------------------ */

Test(json, parses_values_and_escapes)
{
    const char *text = "{\"s\": \"a\\\"b\\\\c\\/\\n\\u00e9\\ud83d\\ude00\", \"n\": -12.5e1, \"i\": 9007199254740993,"
                       " \"t\": true, \"f\": false, \"z\": null, \"a\": [1, [2, {}], []], \"s\": \"dup\"}";
    mlajit_json *root;
    char err[200];
    cr_assert_eq(mlajit_json_parse(text, strlen(text), &root, err, sizeof err), 0, "%s", err);
    const mlajit_json *s = mlajit_json_get(root, "s");
    cr_assert_not_null(s);
    cr_expect_str_eq(s->text, "dup", "the last of repeated members wins");
    cr_expect_str_eq(root->items[0].text, "a\"b\\c/\n\xc3\xa9\xf0\x9f\x98\x80");
    cr_expect_eq(mlajit_json_get(root, "n")->number, -125.0);
    int64_t i;
    cr_expect_eq(mlajit_json_int64(mlajit_json_get(root, "i"), &i), 0);
    cr_expect_eq(i, 9007199254740993LL, "integers keep every digit");
    cr_expect_neq(mlajit_json_int64(mlajit_json_get(root, "n"), &i), 0, "-12.5e1 is not an integer literal");
    cr_expect_eq(mlajit_json_get(root, "t")->boolean, 1);
    cr_expect_eq(mlajit_json_get(root, "f")->type, MLAJIT_JSON_BOOL);
    cr_expect(mlajit_json_is_null(mlajit_json_get(root, "z")));
    cr_expect(mlajit_json_is_null(mlajit_json_get(root, "missing")));
    const mlajit_json *a = mlajit_json_get(root, "a");
    cr_expect_eq(a->count, 3);
    cr_expect_eq(a->items[1].items[1].type, MLAJIT_JSON_OBJECT);
    cr_expect_eq(a->items[2].count, 0);
    uint64_t u;
    cr_expect_eq(mlajit_json_uint64(&a->items[0], &u), 0);
    cr_expect_eq(u, 1);
    mlajit_json_free(root);
}

Test(json, reports_errors_with_offsets)
{
    mlajit_json *root = (mlajit_json *)0x1;
    char err[200];
    cr_expect_neq(mlajit_json_parse("{\"a\": [1, 2,]}", 14, &root, err, sizeof err), 0);
    cr_expect_null(root);
    cr_expect(strstr(err, "byte 12") != NULL, "message: %s", err);
    cr_expect_neq(mlajit_json_parse("[1]", 3 + 1, &root, err, sizeof err), 0, "an embedded NUL is not JSON");
    cr_expect_neq(mlajit_json_parse(NULL, 0, &root, err, sizeof err), 0);
    cr_expect_neq(mlajit_json_parse("[", 1, &root, NULL, 0), 0, "no message buffer is fine");
    cr_assert_eq(mlajit_json_parse("123", 3, &root, NULL, 0), 0);
    cr_expect_eq(root->number, 123.0);
    mlajit_json_free(root);
}

Test(json, writer_output_reads_back)
{
    mlajit_json_writer w;
    mlajit_json_writer_init(&w);
    mlajit_json_begin_object(&w, NULL);
    mlajit_json_write_string(&w, "name", "q\"uote\\ \x01 ok");
    mlajit_json_write_int(&w, "neg", -42);
    mlajit_json_write_uint(&w, "big", UINT64_MAX);
    mlajit_json_write_double(&w, "pi", 3.141592653589793);
    mlajit_json_write_double(&w, "whole", 2.0);
    mlajit_json_write_double(&w, "inf", INFINITY);
    mlajit_json_write_null(&w, "nothing");
    const int64_t dims[3] = {1, 2, 3};
    mlajit_json_write_shape(&w, "shape", dims, 3);
    mlajit_json_begin_array(&w, "list");
    mlajit_json_begin_object(&w, NULL);
    mlajit_json_end(&w);
    mlajit_json_write_int(&w, NULL, 5);
    mlajit_json_end(&w);
    mlajit_json_end(&w);
    cr_assert_eq(mlajit_json_writer_ok(&w), 0);

    mlajit_json *root;
    char err[200];
    cr_assert_eq(mlajit_json_parse(w.out.data, w.out.len, &root, err, sizeof err), 0, "%s in:\n%s", err, w.out.data);
    cr_expect_str_eq(mlajit_json_get(root, "name")->text, "q\"uote\\ \x01 ok");
    int64_t i;
    uint64_t u;
    cr_expect_eq(mlajit_json_int64(mlajit_json_get(root, "neg"), &i), 0);
    cr_expect_eq(i, -42);
    cr_expect_eq(mlajit_json_uint64(mlajit_json_get(root, "big"), &u), 0);
    cr_expect_eq(u, UINT64_MAX);
    cr_expect_eq(mlajit_json_get(root, "pi")->number, 3.141592653589793);
    cr_expect_eq(mlajit_json_get(root, "whole")->number, 2.0);
    cr_expect(mlajit_json_is_null(mlajit_json_get(root, "inf")));
    cr_expect_eq(mlajit_json_get(root, "shape")->count, 3);
    cr_expect_eq(mlajit_json_get(root, "list")->count, 2);
    mlajit_json_free(root);
    mlajit_json_writer_free(&w);

    /* unbalanced use is reported */
    mlajit_json_writer_init(&w);
    mlajit_json_begin_object(&w, NULL);
    cr_expect_neq(mlajit_json_writer_ok(&w), 0);
    mlajit_json_end(&w);
    mlajit_json_end(&w);
    cr_expect_neq(mlajit_json_writer_ok(&w), 0);
    mlajit_json_writer_free(&w);
}

/* ---- synthetic cases --------------------------------------------------------------------- */

Test(synth, round_trip_with_expected_for_every_model, .timeout = 60)
{
    const mlajit_model models[] = {MLAJIT_MODEL_V32, MLAJIT_MODEL_DSV4, MLAJIT_MODEL_GLM_NSA};
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        for (uint64_t seed = 1; seed <= 3; seed++) {
            mlajit_case c, back;
            synth_small(&c, models[m], seed);
            cr_assert_eq(mlajit_case_compute_expected(&c), MLAJIT_OK, "%s", mlajit_last_error());
            const mlajit_model_desc *d = mlajit_model_describe(c.model);
            const size_t n_lse = (size_t)c.b * c.s_q * c.h_q;
            int64_t finite_rows = 0;
            for (size_t k = 0; k < n_lse; k++) {
                cr_expect(!isnan(c.expected_lse[k]));
                finite_rows += isfinite(c.expected_lse[k]);
                for (int x = 0; x < d->d_v; x++)
                    cr_assert(isfinite(c.expected_out[k * d->d_v + x]), "%s seed %d: out[%zu][%d] is not finite",
                              d->name, (int)seed, k, x);
                /* head 0 has a +inf sink: out is 0 */
                if (k % (size_t)c.h_q == 0)
                    cr_expect_eq(c.expected_out[k * d->d_v], 0.0f);
            }
            cr_expect_gt(finite_rows, 0);
            save_and_reload(&c, &back);
            expect_cases_equal(&c, &back);
            mlajit_case_free(&c);
            mlajit_case_free(&back);
        }
    }
}

Test(synth, case_without_options_round_trips)
{
    mlajit_synth_params p = small_params(MLAJIT_MODEL_V32, 5);
    p.extra_topk = 0;
    p.with_sink = p.with_topk_length = p.with_extra_topk_length = 0;
    p.invalid_fraction = 0.0;
    mlajit_case c, back;
    cr_assert_eq(mlajit_case_synthesize(&p, &c), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(c.has_extra, 0);
    cr_expect_null(c.attn_sink);
    cr_expect_null(c.topk_length);
    save_and_reload(&c, &back); /* no expected: saved as null */
    expect_cases_equal(&c, &back);
    cr_expect_null(back.expected_out);
    mlajit_kernel_spec spec = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_case_spec(&c, &spec);
    cr_expect_eq(spec.features, 0u);
    cr_expect_eq(spec.extra_page_size, 0);
    mlajit_case_free(&c);
    mlajit_case_free(&back);
}

Test(synth, empty_batch_is_legal)
{
    mlajit_synth_params p = small_params(MLAJIT_MODEL_DSV4, 5);
    p.b = 0;
    mlajit_case c, back;
    cr_assert_eq(mlajit_case_synthesize(&p, &c), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_case_compute_expected(&c), MLAJIT_OK, "%s", mlajit_last_error());
    save_and_reload(&c, &back);
    expect_cases_equal(&c, &back);
    mlajit_case_free(&c);
    mlajit_case_free(&back);
}

/* Slots that no attended index refers to are entirely 0xFF (row and footer,
 * padding included); attended slots dequantize to finite values. */
static void check_poisoning(mlajit_model model, const mlajit_case_cache *cache, const int32_t *indices,
                            const int32_t *lengths, int b, int s_q, int topk)
{
    const mlajit_model_desc *d = mlajit_model_describe(model);
    const int64_t num_slots = cache->num_pages * cache->page_size;
    uint8_t *attended = calloc((size_t)num_slots, 1);
    for (int i = 0; i < b; i++) {
        int limit = lengths ? (lengths[i] < 0 ? 0 : (lengths[i] > topk ? topk : lengths[i])) : topk;
        for (int j = 0; j < s_q; j++)
            for (int p = 0; p < limit; p++) {
                int32_t slot = indices[((int64_t)i * s_q + j) * topk + p];
                if (slot >= 0 && slot < num_slots)
                    attended[slot] = 1;
            }
    }
    float values[1024];
    int64_t n_attended = 0;
    for (int64_t slot = 0; slot < num_slots; slot++) {
        const int64_t page = slot / cache->page_size;
        const int token = (int)(slot % cache->page_size);
        const uint8_t *base = cache->bytes + page * cache->page_stride;
        if (attended[slot]) {
            n_attended++;
            cr_assert_neq(page, 0, "page 0 must never be used");
            cr_assert_eq(mlajit_dequantize_token(model, base, cache->page_size, token, values), MLAJIT_OK);
            for (int x = 0; x < d->d_qk; x++)
                cr_assert(isfinite(values[x]) && fabsf(values[x]) <= 1.0f, "slot %lld dim %d: %g", (long long)slot, x,
                          (double)values[x]);
            continue;
        }
        const uint8_t *row = base + (size_t)token * d->row_bytes;
        for (int x = 0; x < d->row_bytes; x++)
            cr_assert_eq(row[x], 0xFF, "unattended slot %lld row byte %d is 0x%02x", (long long)slot, x, row[x]);
        const uint8_t *footer = base + (size_t)cache->page_size * d->row_bytes + (size_t)token * d->footer_bytes;
        for (int x = 0; x < d->footer_bytes; x++)
            cr_assert_eq(footer[x], 0xFF, "unattended slot %lld footer byte %d", (long long)slot, x);
    }
    cr_expect_gt(n_attended, 0);
    free(attended);
}

Test(synth, poisons_every_unattended_slot)
{
    const mlajit_model models[] = {MLAJIT_MODEL_V32, MLAJIT_MODEL_DSV4, MLAJIT_MODEL_GLM_NSA};
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        mlajit_case c;
        synth_small(&c, models[m], 7);
        check_poisoning(c.model, &c.kv, c.indices, c.topk_length, c.b, c.s_q, c.topk);
        check_poisoning(c.model, &c.extra_kv, c.extra_indices, c.extra_topk_length, c.b, c.s_q, c.extra_topk);
        /* the padding after each page's rows and footers stays poisoned too */
        const mlajit_model_desc *d = mlajit_model_describe(c.model);
        const int64_t used = (int64_t)c.kv.page_size * d->bytes_per_token;
        for (int64_t page = 0; page < c.kv.num_pages; page++)
            for (int64_t x = used; x < c.kv.page_stride; x++)
                cr_assert_eq(c.kv.bytes[page * c.kv.page_stride + x], 0xFF);
        cr_expect_eq(c.kv.page_stride % 16, 0);
        cr_expect_eq(c.kv.page_stride, (mlajit_min_page_stride(c.model, c.kv.page_size) + 15) / 16 * 16 + 32);
        mlajit_case_free(&c);
    }
}

Test(synth, indices_follow_the_recipe)
{
    mlajit_case c;
    synth_small(&c, MLAJIT_MODEL_DSV4, 3);
    const mlajit_synth_params p = small_params(MLAJIT_MODEL_DSV4, 3);
    cr_expect_eq(c.kv.num_pages, (int64_t)p.b * ((p.seqlen + p.page_size - 1) / p.page_size) + 1);
    cr_expect_eq(c.extra_kv.num_pages, (int64_t)p.b * ((p.extra_seqlen + p.extra_page_size - 1) / p.extra_page_size) + 1);
    cr_expect_eq(c.sm_scale, pow(512.0, -0.55));
    const int64_t num_slots = c.kv.num_pages * c.kv.page_size;
    int64_t invalid = 0, total = 0;
    for (int r = 0; r < c.b * c.s_q; r++) {
        const int32_t *row = c.indices + (size_t)r * c.topk;
        for (int k = 0; k < c.topk; k++) {
            total++;
            if (row[k] < 0 || row[k] >= num_slots) {
                invalid++;
                continue;
            }
            cr_expect_geq(row[k], c.kv.page_size, "page 0 is never used");
            for (int k2 = 0; k2 < k; k2++)
                cr_expect_neq(row[k], row[k2], "row %d holds slot %d twice", r, row[k]);
        }
    }
    cr_expect(invalid > 0 && invalid < total / 3, "%lld of %lld invalid (asked 10%%)", (long long)invalid,
              (long long)total);
    /* extra cache: 7 tokens per sequence but 9 candidates, so at least 2 are -1 */
    for (int r = 0; r < c.b * c.s_q; r++) {
        int minus_one = 0;
        for (int k = 0; k < c.extra_topk; k++)
            minus_one += c.extra_indices[(size_t)r * c.extra_topk + k] == -1;
        cr_expect_geq(minus_one, 2, "row %d", r);
        cr_expect_eq(c.extra_indices[(size_t)r * c.extra_topk + c.extra_topk - 1], -1);
    }
    for (int i = 0; i < c.b; i++) {
        cr_expect(c.topk_length[i] >= 0 && c.topk_length[i] <= c.topk + 3);
        cr_expect(c.extra_topk_length[i] >= 0 && c.extra_topk_length[i] <= c.extra_topk + 3);
    }
    cr_expect(isinf(c.attn_sink[0]) && c.attn_sink[0] > 0);
    cr_expect(isinf(c.attn_sink[1]) && c.attn_sink[1] < 0);
    cr_expect(isfinite(c.attn_sink[2]) && isfinite(c.attn_sink[3]));
    const mlajit_model_desc *d = mlajit_model_describe(c.model);
    for (size_t k = 0; k < (size_t)c.b * c.s_q * c.h_q * d->d_qk; k++)
        cr_assert(fabsf(mlajit_bf16_to_float(c.q[k])) <= 1.0f);
    mlajit_case_free(&c);
}

Test(synth, is_deterministic_in_the_seed)
{
    mlajit_case a, b, other;
    synth_small(&a, MLAJIT_MODEL_V32, 42);
    synth_small(&b, MLAJIT_MODEL_V32, 42);
    synth_small(&other, MLAJIT_MODEL_V32, 43);
    expect_cases_equal(&a, &b);
    cr_expect_neq(memcmp(a.indices, other.indices, (size_t)a.b * a.s_q * a.topk * 4), 0);
    cr_expect_neq(memcmp(a.q, other.q, 1024), 0);
    mlajit_case_free(&a);
    mlajit_case_free(&b);
    mlajit_case_free(&other);
}

Test(synth, rejects_bad_parameters)
{
    const mlajit_synth_params base = small_params(MLAJIT_MODEL_V32, 1);
    mlajit_synth_params p;
    mlajit_case c;
#define EXPECT_BAD(field, value, needle)                                                                   \
    do {                                                                                                   \
        p = base;                                                                                          \
        p.field = value;                                                                                   \
        cr_expect_eq(mlajit_case_synthesize(&p, &c), MLAJIT_ERR_INVALID_ARGUMENT, #field " = " #value);   \
        cr_expect(strstr(mlajit_last_error(), needle) != NULL, "message '%s'", mlajit_last_error());       \
    } while (0)
    EXPECT_BAD(model, (mlajit_model)0, "model");
    EXPECT_BAD(b, -1, "b is");
    EXPECT_BAD(h_q, 0, "h_q");
    EXPECT_BAD(topk, 0, "topk");
    EXPECT_BAD(page_size, 2048, "page_size");
    EXPECT_BAD(seqlen, 0, "seqlen");
    EXPECT_BAD(extra_page_size, 0, "extra_page_size");
    EXPECT_BAD(page_stride_pad, 8, "page_stride_pad");
    EXPECT_BAD(invalid_fraction, 1.5, "invalid_fraction");
    EXPECT_BAD(invalid_fraction, NAN, "invalid_fraction");
#undef EXPECT_BAD
    cr_expect_eq(mlajit_case_synthesize(NULL, &c), MLAJIT_ERR_INVALID_ARGUMENT);
}

/* Large caches must be cheap: only attended tokens are generated. */
Test(synth, large_cache_is_fast, .timeout = 60)
{
    mlajit_synth_params p;
    memset(&p, 0, sizeof p);
    p.model = MLAJIT_MODEL_DSV4;
    p.b = 16;
    p.s_q = 1;
    p.h_q = 8;
    p.topk = 128;
    p.page_size = 64;
    p.seqlen = 32768; /* 512K tokens, 300 MB */
    p.seed = 9;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    mlajit_case c;
    cr_assert_eq(mlajit_case_synthesize(&p, &c), MLAJIT_OK, "%s", mlajit_last_error());
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    cr_log_info("synthesized %d x %d tokens in %.2f s", p.b, p.seqlen, seconds);
    cr_expect_lt(seconds, 20.0);
    cr_expect_eq(c.kv.num_pages, 16 * 512 + 1);
    mlajit_case_free(&c);
}

/* ---- the benchmark's work and ceilings (src/harness/work.c) --------------------- */

/* Hand-computed from docs/SPEC.md's table of layouts, not from the descriptors:
 * d_qk / d_v / bytes per token are v32 576 / 512 / 656, glm_nsa the same,
 * glm53_nope 512 / 512 / 656 (its 656-byte row, 528 used, is what a token
 * reads), dsv4 512 / 512 / 584 (576-byte row + 8-byte footer), dots3_swa
 * 1088 / 1024 / 1160 (1152 + 8). At h_q 16, b 64, s_q 1, topk 2048 a call has
 * 64 x 2048 = 131072 candidates, and:
 *   flop = 2 x 16 x 131072 x (d_qk + d_v): v32 2 x 16 x 131072 x 1088 = 4563402752,
 *          glm53_nope and dsv4 x 1024 = 4294967296, dots3_swa x 2112 = 8858370048;
 *   kv   = 131072 x bytes per token: 656 -> 85983232, 584 -> 76546048, 1160 -> 152043520;
 *   q    = 64 x 16 x d_qk x 2 (bf16): 576 -> 1179648, 512 -> 1048576, 1088 -> 2228224;
 *   out  = 64 x 16 x (2 d_v + 4) (bf16 out, fp32 lse): 512 -> 1052672, 1024 -> 2101248. */
Test(work, each_named_layouts_flops_and_bytes)
{
    const struct { const char *name; double flop, kv, q, out; } want[] = {
        {"v32", 4563402752.0, 85983232.0, 1179648.0, 1052672.0},
        {"glm_nsa", 4563402752.0, 85983232.0, 1179648.0, 1052672.0},
        {"glm53_nope", 4294967296.0, 85983232.0, 1048576.0, 1052672.0},
        {"dsv4", 4294967296.0, 76546048.0, 1048576.0, 1052672.0},
        {"dots3_swa", 8858370048.0, 152043520.0, 2228224.0, 2101248.0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        mlajit_model model;
        cr_assert_eq(mlajit_model_from_name(want[i].name, &model), MLAJIT_OK);
        mlajit_work w;
        cr_assert_eq(mlajit_work_count(mlajit_model_describe(model), 16, 64, 1, 2048, 0, &w), MLAJIT_OK);
        cr_expect_eq(w.flop, want[i].flop, "%s: flop %.0f", want[i].name, w.flop);
        cr_expect_eq(w.kv_bytes, want[i].kv, "%s: kv bytes %.0f", want[i].name, w.kv_bytes);
        cr_expect_eq(w.q_bytes, want[i].q, "%s: q bytes %.0f", want[i].name, w.q_bytes);
        cr_expect_eq(w.out_bytes, want[i].out, "%s: out bytes %.0f", want[i].name, w.out_bytes);
        cr_expect_eq(mlajit_work_bytes(&w), want[i].kv + want[i].q + want[i].out, "%s", want[i].name);
    }
    /* the extra cache's candidates count like the main's: DSV4 h 64, b 2, s_q 2,
     * topk 128 + extra 512: 4 rows x 640 = 2560 candidates; flop 2 x 64 x 2560 x
     * 1024 = 335544320; kv 2560 x 584 = 1495040; q 4 x 64 x 512 x 2 = 262144;
     * out 4 x 64 x 1028 = 263168 */
    mlajit_work w;
    cr_assert_eq(mlajit_work_count(mlajit_model_describe(MLAJIT_MODEL_DSV4), 64, 2, 2, 128, 512, &w), MLAJIT_OK);
    cr_expect_eq(w.flop, 335544320.0);
    cr_expect_eq(w.kv_bytes, 1495040.0);
    cr_expect_eq(w.q_bytes, 262144.0);
    cr_expect_eq(w.out_bytes, 263168.0);
}

/* A custom layout counts by its own numbers: the keys d_nope=512,d_rope=64,
 * tile=128,scales=fp32,place=inline,row_bytes=672 are V3.2's sizes with a
 * 672-byte row, so only the kv bytes move: 131072 x 672 = 88080384. */
Test(work, a_custom_layout_counts_its_own_row)
{
    mlajit_layout l;
    cr_assert_eq(mlajit_layout_parse("d_nope=512,d_rope=64,tile=128,scales=fp32,place=inline,row_bytes=672", &l),
                 MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_work w;
    cr_assert_eq(mlajit_work_count(mlajit_layout_describe(&l), 16, 64, 1, 2048, 0, &w), MLAJIT_OK);
    cr_expect_eq(w.flop, 4563402752.0);
    cr_expect_eq(w.kv_bytes, 88080384.0);
    cr_expect_eq(w.q_bytes, 1179648.0);
    cr_expect_eq(w.out_bytes, 1052672.0);
}

/* The ceilings (BENCH.md: HBM 4.25 TB/s, bf16 786 TFLOP/s): V3.2 h16 b64 topk
 * 2048 moves 85983232 + 1179648 + 1052672 = 88215552 bytes, 20.7566 µs at
 * 4.25 TB/s, against 4563402752 / 786e12 = 5.806 µs of products: memory-bound.
 * V3.2 h128 b128 topk 2048: 2 x 128 x 262144 x 1088 = 73014444032 FLOP, 92.894 µs,
 * past its 207683584 bytes' 48.87 µs: compute-bound. */
Test(work, the_ceiling_is_the_larger_of_the_two_times)
{
    int memory_bound = -1;
    cr_expect_float_eq(mlajit_ceiling_us(4563402752.0, 88215552.0, &memory_bound), 20.7566, 1e-4);
    cr_expect_eq(memory_bound, 1);
    mlajit_work w;
    cr_assert_eq(mlajit_work_count(mlajit_model_describe(MLAJIT_MODEL_V32), 128, 128, 1, 2048, 0, &w), MLAJIT_OK);
    cr_expect_eq(w.flop, 73014444032.0);
    cr_expect_eq(mlajit_work_bytes(&w), 207683584.0);
    cr_expect_float_eq(mlajit_ceiling_us(w.flop, mlajit_work_bytes(&w), &memory_bound), 92.894, 1e-3);
    cr_expect_eq(memory_bound, 0);
    cr_expect_float_eq(mlajit_ceiling_us(0, 0, NULL), 0.0, 1e-12, "no work, no time; NULL is fine");
}

Test(work, bad_arguments_are_refused_not_counted)
{
    mlajit_work w = {.flop = 7};
    cr_expect_neq(mlajit_work_count(NULL, 16, 64, 1, 2048, 0, &w), MLAJIT_OK);
    cr_expect_eq(w.flop, 0, "the counts are zeroed on failure");
    cr_expect_neq(mlajit_work_count(mlajit_model_describe(MLAJIT_MODEL_V32), 0, 64, 1, 2048, 0, &w), MLAJIT_OK);
    cr_expect(strstr(mlajit_last_error(), "h_q") != NULL, "%s", mlajit_last_error());
    cr_expect_neq(mlajit_work_count(mlajit_model_describe(MLAJIT_MODEL_V32), 16, 64, 1, -1, 0, &w), MLAJIT_OK);
    cr_expect_neq(mlajit_work_count(mlajit_model_describe(MLAJIT_MODEL_V32), 16, 64, 1, 2048, 0, NULL), MLAJIT_OK);
}
