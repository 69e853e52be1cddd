/* mlajit pack: build, list, verify, merge and time cubin packs (cache/pack.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/pack.h"
#include "cache/tactics.h"
#include "cli/cli.h"
#include "harness/harness.h"
#include "codegen/codegen.h"
#include "common/error.h"
#include "mlajit.h"
#include "runtime/runtime.h"

static const char pack_usage[] =
    "usage: mlajit pack <command>      (mlajit pack <command> --help: its usage)\n"
    "\n"
    "  build [--models LIST] [--layout L]... [--heads LIST] [--pages LIST] [--extra-pages LIST]\n"
    "        [--features SETS] [--archs LIST] [--spec SPEC]... [--specs FILE]\n"
    "        [--tactics-from DIR] [--tune SECONDS] [--out FILE] [--jobs N] [--no-cache]\n"
    "                             compile a grid and specs in parallel into one pack, with the\n"
    "                             tactic records of the cache DIR and the kernels they choose\n"
    "  ls FILE                    the manifest, every kernel and every tactic record\n"
    "  verify FILE                check the file, the manifest, every entry and tactic record\n"
    "  merge OUT IN...            one pack holding every kernel and tactic record of the inputs\n"
    "  bench FILE [--repeat N]    time a fresh process's open, lookup and (with a GPU)\n"
    "                             load of the pack's first kernel, and repeat lookups\n"
    "\n"
    "Packs are read at run time from MLAJIT_PACKS (':'-separated), before the cache (docs/packs.md).\n";

static const char build_usage[] =
    "usage: mlajit pack build [--models LIST] [--layout L]... [--heads LIST] [--pages LIST] [--extra-pages LIST]\n"
    "                         [--features SETS] [--archs LIST] [--spec SPEC]... [--specs FILE]\n"
    "                         [--tactics-from DIR] [--tune SECONDS] [--out FILE] [--jobs N] [--no-cache]\n"
    "  compile the grid (models x heads x pages x extra pages x feature sets x archs) and the\n"
    "  listed specs in parallel, and write one pack (default mlajit.pack). LISTs are\n"
    "  comma-separated; a feature set joins names with '+', e.g. --features none,sink+topk-length.\n"
    "  --layout L adds a custom layout to the models (inline keys, a JSON file or a canonical\n"
    "  string; docs/layouts.md), up to 8. FILE for --specs holds spec strings, one a line ('#'\n"
    "  starts a comment). Kernels already\n"
    "  in the cache are reused unless --no-cache. --jobs N: 1..256 workers (default: the cores).\n"
    "  --tactics-from DIR copies every usable tactic record of the cache DIR (measured choices,\n"
    "  used only on the GPU they were measured on) into the pack, and the kernels they choose.\n"
    "  --tune SECONDS first tunes the grid on this GPU (mlajit tune's production topk and row\n"
    "  buckets, within SECONDS) into the cache, then ships the cache's tactic records as\n"
    "  --tactics-from does (docs/tuning.md).\n";
static const char ls_usage[] =
    "usage: mlajit pack ls FILE\n  the pack's manifest, every kernel and every tactic record in it\n";
static const char verify_usage[] =
    "usage: mlajit pack verify FILE\n"
    "  check the file's checksum, trailer and manifest and every entry's checksums, and (with\n"
    "  this build's recipe) that every key matches its spec; exit 1 on any damage\n";
static const char merge_usage[] =
    "usage: mlajit pack merge OUT IN...\n"
    "  write OUT holding every kernel and tactic record of the packs IN (one recipe; of tactic\n"
    "  records for the same GPU, spec and bucket the first IN's is kept)\n";
static const char bench_usage[] =
    "usage: mlajit pack bench FILE [--repeat N]\n"
    "  time a fresh process's open, lookup and (with a GPU) load of the pack's first kernel,\n"
    "  and N repeat lookups (1..1000000000, default 100000)\n";

/* ---- list parsing: CLI_CUSTOM parsers of pack build's options ----------------- */
/* (the int, model and feature-set lists are args.c's, shared with tune) */


typedef struct string_list {
    char **items;
    int count, cap;
} string_list;

static int string_list_add(string_list *l, const char *s)
{
    if (l->count == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        char **p = realloc(l->items, (size_t)cap * sizeof *p);
        if (!p)
            return 0;
        l->items = p;
        l->cap = cap;
    }
    if (!(l->items[l->count] = strdup(s)))
        return 0;
    l->count++;
    return 1;
}

static void string_list_free(string_list *l)
{
    for (int i = 0; i < l->count; i++)
        free(l->items[i]);
    free(l->items);
    memset(l, 0, sizeof *l);
}

static int add_spec(const char *name, const char *value, void *target)
{
    if (string_list_add(target, value))
        return 1;
    fprintf(stderr, "mlajit pack build: %s: out of memory\n", name);
    return 0;
}

static int add_archs(const char *name, const char *value, void *target)
{
    return cli_each_item(name, value, ',', add_spec, target);
}

static int read_spec_file(const char *name, const char *path, void *target)
{
    string_list *specs = target;
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "mlajit pack build: %s %s: cannot open: %s\n", name, path, strerror(errno));
        return 0;
    }
    char line[512];
    int ok = 1;
    while (ok && fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        size_t n = strcspn(p, " \t\r\n");
        p[n] = '\0';
        if (*p)
            ok = add_spec(name, p, specs);
    }
    fclose(f);
    return ok;
}

/* ---- build ----------------------------------------------------------------- */

/* pack build --tune: tune the grid on this GPU into the cache (cli_tune_grid);
 * *info says where that cache is. */
static int tune_grid(const mlajit_model *models, int num_models, const cli_layout_list *layouts, const int *heads,
                     int num_heads, const int *pages, int num_pages, const unsigned *features, int num_features,
                     int seconds, int skip_check, mlajit_context_info *info)
{
    mlajit_context *ctx;
    int rc = mlajit_context_create(NULL, &ctx);
    if (rc)
        return cli_error(rc, "pack build --tune");
    mlajit_context_get_info(ctx, info);
    int status = CLI_FAIL;
    if (!info->has_device)
        fprintf(stderr, "mlajit pack build: --tune needs a GPU: %s\n", info->no_device_reason);
    else if (!info->cache_dir[0])
        fprintf(stderr, "mlajit pack build: --tune stores tactics in the cache, and this context has none\n");
    else {
        mlajit_tune_envelope grid = {
            .models = models, .num_models = num_models, .heads = heads, .num_heads = num_heads, .pages = pages,
            .num_pages = num_pages, .feature_sets = num_features ? features : NULL, .num_feature_sets = num_features,
            .layouts = layouts->count ? layouts->layouts : NULL, .num_layouts = layouts->count,
        };
        status = cli_tune_grid(ctx, &grid, seconds, skip_check);
    }
    mlajit_context_destroy(ctx);
    return status;
}

/* The usable tactic records of the cache at dir (malloc'd into *records), each
 * unusable one named on stderr; and the kernels they choose added to specs. */
static int read_tactics(const char *dir, string_list *specs, mlajit_tactic_record **records, size_t *count)
{
    *records = NULL;
    *count = 0;
    mlajit_store *store;
    int rc = mlajit_store_open_ex(dir, MLAJIT_STORE_READONLY | MLAJIT_STORE_KEEP_DAMAGED, &store);
    if (rc)
        return cli_error(rc, "pack build --tactics-from");
    cli_tactic_rows rows = {0};
    rc = mlajit_tactic_foreach(store, cli_tactic_collect, &rows);
    mlajit_store_close(store);
    if (rc || rows.status) {
        cli_tactic_rows_free(&rows);
        return cli_error(rc ? rc : rows.status, "pack build --tactics-from");
    }
    mlajit_tactic_record *out = calloc(rows.count ? rows.count : 1, sizeof *out);
    if (!out) {
        cli_tactic_rows_free(&rows);
        return cli_error(mlajit_fail(MLAJIT_ERR_OUT_OF_MEMORY, "%zu tactic records", rows.count),
                         "pack build --tactics-from");
    }
    size_t n = 0;
    int status = CLI_OK;
    for (size_t i = 0; i < rows.count && status == CLI_OK; i++) {
        if (rows.rows[i].status != MLAJIT_OK) {
            fprintf(stderr, "mlajit pack build: %s: a tactic record is %s and left out: %s\n", dir,
                    rows.rows[i].status == MLAJIT_CACHE_STALE ? "stale" : "damaged", rows.rows[i].why);
            continue;
        }
        out[n] = rows.rows[i].record;
        if (!add_spec("--tactics-from", out[n].kernel, specs))
            status = CLI_FAIL;
        n++;
    }
    cli_tactic_rows_free(&rows);
    if (status != CLI_OK) {
        free(out);
        return status;
    }
    *records = out;
    *count = n;
    return CLI_OK;
}

typedef struct progress_state {
    int tty;
    double t0;
} progress_state;

static void build_progress(void *arg, int done, int total, const mlajit_kernel_report *rep)
{
    progress_state *p = arg;
    if (!p->tty)
        return;
    double elapsed = (mlajit_now_ms() - p->t0) / 1000.0;
    double eta = done ? elapsed / done * (total - done) : 0;
    fprintf(stderr, "\r\033[K  [%*d/%d] %3d%%  %.1f s, ETA %.1f s  %s", (int)snprintf(NULL, 0, "%d", total), done,
            total, total ? 100 * done / total : 100, elapsed, eta, rep ? rep->spec : "(failed)");
    if (done == total)
        fputc('\n', stderr);
}

static int cmd_build(int argc, char **argv)
{
    cli_model_list model_set = {.count = 0};
    cli_feature_sets feature_set = {.count = 0};
    int jobs = 0, no_cache = 0;
    cli_int_list heads = {.lo = 1, .hi = MLAJIT_MAX_HEADS}, pages = {.lo = 1, .hi = MLAJIT_MAX_PAGE_SIZE},
             extra = {.lo = 0, .hi = MLAJIT_MAX_PAGE_SIZE};
    string_list archs = {0}, spec_strings = {0};
    cli_layout_list layout_set = {.count = 0}; /* custom layouts: the grid's model axis after the models */
    const char *out_path = "mlajit.pack", *tactics_from = NULL;
    int tune_seconds = -1, tune_no_check = 0;
    mlajit_context_info tuned_info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_tactic_record *tactics = NULL;
    size_t tactic_count = 0;
    const cli_option options[] = {
        {"--models", CLI_CUSTOM, &model_set, .parse = cli_parse_model_list},
        {"--layout", CLI_CUSTOM, &layout_set, .parse = cli_add_layout},
        {"--heads", CLI_CUSTOM, &heads, .parse = cli_parse_int_list},
        {"--pages", CLI_CUSTOM, &pages, .parse = cli_parse_int_list},
        {"--extra-pages", CLI_CUSTOM, &extra, .parse = cli_parse_int_list},
        {"--features", CLI_CUSTOM, &feature_set, .parse = cli_parse_feature_sets},
        {"--archs", CLI_CUSTOM, &archs, .parse = add_archs},
        {"--spec", CLI_CUSTOM, &spec_strings, .parse = add_spec},
        {"--specs", CLI_CUSTOM, &spec_strings, .parse = read_spec_file},
        {"--tactics-from", CLI_STRING, .target = &tactics_from},
        {"--tune", CLI_INT, &tune_seconds, .lo = 0, .hi = 7 * 24 * 3600},
        {"--tune-no-check", CLI_FLAG, .target = &tune_no_check}, /* testing only, as tune's --no-check */
        {"--out", CLI_STRING, .target = &out_path},
        {"--jobs", CLI_INT, &jobs, .lo = 1, .hi = 256},
        {"--no-cache", CLI_FLAG, .target = &no_cache},
    };
    const cli_command cmd = {"pack build", build_usage, options, sizeof options / sizeof options[0], 0, 0, NULL};
    int n_operands, status = cli_parse(&cmd, argc, argv, &n_operands);
    if (status != CLI_PARSED)
        goto done;
    status = CLI_USAGE;
    const mlajit_model *models = model_set.models;
    const int num_models = model_set.count, num_features = feature_set.count;
    const unsigned *features = feature_set.sets;
    int grid_given = num_models || layout_set.count || heads.count || pages.count;
    if (grid_given && !((num_models || layout_set.count) && heads.count && pages.count)) {
        status = cli_usage_error(&cmd, "a grid needs --models, --heads and --pages together (--layout counts as --models)");
        goto done;
    }
    if (!grid_given && spec_strings.count == 0 && !tactics_from) {
        status = cli_usage_error(&cmd, "give a grid (--models, --heads, --pages), --spec / --specs or --tactics-from");
        goto done;
    }
    if (tune_seconds >= 0) {
        if (!grid_given || tactics_from) {
            status = cli_usage_error(&cmd, "--tune tunes the grid: give --models, --heads and --pages, and no "
                                           "--tactics-from (it ships the cache it tunes into)");
            goto done;
        }
        if ((status = tune_grid(models, num_models, &layout_set, heads.values, heads.count, pages.values, pages.count, features,
                                num_features, tune_seconds, tune_no_check, &tuned_info)) != CLI_OK)
            goto done;
        tactics_from = tuned_info.cache_dir;
    }
    if (tactics_from && (status = read_tactics(tactics_from, &spec_strings, &tactics, &tactic_count)) != CLI_OK)
        goto done;
    if (!grid_given && spec_strings.count == 0) {
        fprintf(stderr, "mlajit pack build: %s holds no usable tactic records, and no grid or spec was given\n",
                tactics_from);
        status = CLI_FAIL;
        goto done;
    }

    /* pack build's job is to compile, whatever the environment says. */
    unsetenv("MLAJIT_DISABLE_JIT");
    mlajit_context_options opts = {
        .struct_size = sizeof opts,
        .flags = MLAJIT_CONTEXT_NO_DEVICE | (no_cache ? MLAJIT_CONTEXT_NO_DISK_CACHE : 0u), .packs = "",
    };
    mlajit_context *ctx = NULL;
    int rc = mlajit_context_create(&opts, &ctx);
    if (rc) {
        status = cli_error(rc, "pack build");
        goto done;
    }

    mlajit_kernel_spec *specs = NULL;
    int count = 0;
    if (grid_given) {
        const char *arch_ptrs[16];
        int num_archs = archs.count < 16 ? archs.count : 16;
        for (int i = 0; i < num_archs; i++)
            arch_ptrs[i] = archs.items[i];
        mlajit_kernel_grid grid = {
            .struct_size = sizeof grid,
            .models = models, .num_models = num_models, .head_counts = heads.values, .num_head_counts = heads.count,
            .page_sizes = pages.values, .num_page_sizes = pages.count,
            .extra_page_sizes = extra.count ? extra.values : NULL, .num_extra_page_sizes = extra.count,
            .feature_sets = num_features ? features : NULL, .num_feature_sets = num_features,
            .archs = num_archs ? arch_ptrs : NULL, .num_archs = num_archs,
            .layouts = layout_set.count ? layout_set.layouts : NULL, .num_layouts = layout_set.count,
        };
        if ((rc = mlajit_grid_expand(&grid, MLAJIT_DEFAULT_ARCH, &specs, &count))) {
            mlajit_context_destroy(ctx);
            status = cli_error(rc, "pack build");
            goto done;
        }
    }
    if (spec_strings.count) {
        mlajit_kernel_spec *grown = realloc(specs, (size_t)(count + spec_strings.count) * sizeof *grown);
        if (!grown) {
            free(specs);
            mlajit_context_destroy(ctx);
            status = cli_error(mlajit_fail(MLAJIT_ERR_OUT_OF_MEMORY, "spec list"), "pack build");
            goto done;
        }
        specs = grown;
        for (int i = 0; i < spec_strings.count; i++) {
            mlajit_kernel_spec *s = &specs[count];
            *s = (mlajit_kernel_spec)MLAJIT_KERNEL_SPEC_INIT;
            if ((rc = mlajit_spec_parse(spec_strings.items[i], s)) || (rc = mlajit_spec_validate(s))) {
                fprintf(stderr, "mlajit pack build: spec '%s': %s\n", spec_strings.items[i], mlajit_last_error());
                free(specs);
                mlajit_context_destroy(ctx);
                status = CLI_USAGE;
                goto done;
            }
            if (!s->arch[0])
                snprintf(s->arch, sizeof s->arch, "%s", MLAJIT_DEFAULT_ARCH);
            count++;
        }
    }

    const mlajit_kernel **kernels = calloc((size_t)count, sizeof *kernels);
    mlajit_pack_item *items = calloc((size_t)count, sizeof *items);
    mlajit_cache_entry *entries = calloc((size_t)count, sizeof *entries);
    if (!kernels || !items || !entries) {
        free(kernels);
        free(items);
        free(entries);
        free(specs);
        mlajit_context_destroy(ctx);
        status = cli_error(mlajit_fail(MLAJIT_ERR_OUT_OF_MEMORY, "%d kernels", count), "pack build");
        goto done;
    }
    progress_state progress = {.tty = isatty(STDERR_FILENO), .t0 = mlajit_now_ms()};
    int workers = jobs ? jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
    fprintf(stderr, "mlajit pack build: %d kernels on %d worker%s\n", count, workers, workers == 1 ? "" : "s");
    mlajit_warmup_report rep = MLAJIT_WARMUP_REPORT_INIT;
    rc = mlajit_acquire_batch(ctx, specs, count, jobs, build_progress, &progress, kernels, &rep);
    if (rc) {
        status = cli_error(rc, "pack build");
    } else {
        for (int i = 0; i < count; i++) {
            mlajit_kernel_entry_of(kernels[i], &entries[i]); /* the cubin borrowed from the context */
            items[i].key = kernels[i]->key;
            items[i].entry = &entries[i];
        }
        mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
        mlajit_context_get_info(ctx, &info);
        mlajit_pack_manifest recipe = {.key_recipe = MLAJIT_KEY_RECIPE,
                                       .nvrtc_major = info.nvrtc_major,
                                       .nvrtc_minor = info.nvrtc_minor};
        snprintf(recipe.tool, sizeof recipe.tool, "mlajit %s", MLAJIT_VERSION_STRING);
        rc = mlajit_pack_write(out_path, &recipe, items, (size_t)count, tactics, tactic_count);
        if (rc) {
            status = cli_error(rc, "pack build");
        } else {
            mlajit_pack *pack;
            int64_t bytes = 0;
            size_t distinct = 0, distinct_tactics = 0;
            if (mlajit_pack_open(out_path, &pack) == MLAJIT_OK) {
                bytes = mlajit_pack_file_bytes(pack);
                distinct = mlajit_pack_manifest_of(pack)->kernel_count;
                distinct_tactics = mlajit_pack_manifest_of(pack)->tactic_count;
                mlajit_pack_close(pack);
            }
            printf("pack %s: %zu kernels, %zu tactic records, %lld bytes; %d compiled (NVRTC %.1f s total), %d from "
                   "the cache; %.1f s wall\n",
                   out_path, distinct, distinct_tactics, (long long)bytes, rep.compiled, rep.compile_ms / 1000.0,
                   rep.from_disk + rep.from_memory + rep.from_packs, (mlajit_now_ms() - progress.t0) / 1000.0);
            status = CLI_OK;
        }
    }
    free(kernels);
    free(items);
    free(entries);
    free(specs);
    mlajit_context_destroy(ctx);
done:
    string_list_free(&archs);
    string_list_free(&spec_strings);
    free(tactics);
    return status;
}

/* ---- ls / verify ----------------------------------------------------------- */

static void print_manifest_header(const char *path, const mlajit_pack *pack)
{
    const mlajit_pack_manifest *m = mlajit_pack_manifest_of(pack);
    char date[32] = "?";
    time_t t = (time_t)m->created_unix;
    struct tm tm;
    if (gmtime_r(&t, &tm))
        strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", &tm);
    printf("pack          %s (%lld bytes, format %u)\n", path, (long long)mlajit_pack_file_bytes(pack),
           m->format_version);
    printf("tool          %s\n", m->tool);
    printf("key recipe    %s\n", m->key_recipe);
    printf("nvrtc         %d.%d\n", m->nvrtc_major, m->nvrtc_minor);
    printf("created       %s\n", date);
    printf("archs         %s\n", m->archs);
    printf("kernels       %zu\n", m->kernel_count);
    if (m->format_version < 3)
        printf("tactics       none (format %u packs carry none)\n", m->format_version);
}

typedef struct ls_state {
    size_t shown;
    int64_t cubin_bytes;
} ls_state;

static int ls_visit(const mlajit_cache_key *key, const void *value, size_t len, void *arg)
{
    ls_state *s = arg;
    char hex[33];
    mlajit_cache_key_hex(key, hex);
    mlajit_cache_entry e;
    if (!value || mlajit_cache_entry_decode(value, len, &e) != MLAJIT_OK) {
        printf("  %s  DAMAGED (%s)\n", hex, value ? mlajit_last_error() : "outside the file");
        return 0;
    }
    printf("  %s  %-44s %7zu B  %4d regs  %6.0f ms\n", hex, e.spec_string, e.cubin_size, e.registers, e.compile_ms);
    s->shown++;
    s->cubin_bytes += (int64_t)e.cubin_size;
    mlajit_cache_entry_clear(&e);
    return 0;
}

static int cmd_ls(int argc, char **argv)
{
    int parsed = cli_parse_operands("pack ls", ls_usage, 1, 1, "one pack FILE", argc, argv);
    if (parsed != CLI_PARSED)
        return parsed;
    mlajit_pack *pack;
    int rc = mlajit_pack_open(argv[1], &pack);
    if (rc)
        return cli_error(rc, "pack ls");
    print_manifest_header(argv[1], pack);
    printf("  %-32s  %-44s %9s  %9s  %9s\n", "key", "spec", "cubin", "registers", "compiled");
    ls_state s = {0, 0};
    rc = mlajit_pack_foreach(pack, ls_visit, &s);
    cli_tactic_rows t = {0};
    unsigned format = mlajit_pack_manifest_of(pack)->format_version;
    if (rc == MLAJIT_OK && (rc = mlajit_pack_tactic_foreach(pack, cli_tactic_collect, &t)) == MLAJIT_OK)
        rc = t.status;
    mlajit_pack_close(pack);
    if (rc) {
        cli_tactic_rows_free(&t);
        return cli_error(rc, "pack ls");
    }
    printf("total         %zu kernels, %lld cubin bytes\n", s.shown, (long long)s.cubin_bytes);
    if (format >= 3)
        cli_tactic_rows_print(&t);
    cli_tactic_rows_free(&t);
    return CLI_OK;
}

static int cmd_verify(int argc, char **argv)
{
    int parsed = cli_parse_operands("pack verify", verify_usage, 1, 1, "one pack FILE", argc, argv);
    if (parsed != CLI_PARSED)
        return parsed;
    const char *path = argv[1];
    mlajit_pack *pack;
    int rc = mlajit_pack_open(path, &pack);
    if (rc)
        return cli_error(rc, "pack verify");
    size_t checked = 0;
    rc = mlajit_pack_verify(pack, &checked);
    if (rc) {
        mlajit_pack_close(pack);
        return cli_error(rc, "pack verify");
    }
    printf("%s: file checksum, trailer and manifest ok; %zu entries decode with good header and cubin checksums; "
           "%zu tactic records decode with good checksums under their keys\n",
           path, checked, mlajit_pack_manifest_of(pack)->tactic_count);

    /* With this build's recipe the keys can be recomputed from the specs. */
    const mlajit_pack_manifest *m = mlajit_pack_manifest_of(pack);
    mlajit_context_options opts = {.struct_size = sizeof opts,
                                   .flags = MLAJIT_CONTEXT_NO_DEVICE | MLAJIT_CONTEXT_NO_DISK_CACHE, .packs = ""};
    mlajit_context *ctx;
    if ((rc = mlajit_context_create(&opts, &ctx))) {
        mlajit_pack_close(pack);
        return cli_error(rc, "pack verify");
    }
    int status = CLI_OK;
    if (strcmp(m->key_recipe, MLAJIT_KEY_RECIPE) != 0) {
        printf("%s: made by %s with key recipe %s; this mlajit cannot use it (key recipe %s), so its keys were not "
               "recomputed\n",
               path, m->tool, m->key_recipe, MLAJIT_KEY_RECIPE);
    } else {
        size_t bad = 0;
        for (size_t i = 0; i < m->kernel_count; i++) {
            mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, r = MLAJIT_KERNEL_SPEC_INIT;
            mlajit_cache_key key = {0, 0};
            char again[128], *source = NULL;
            /* the key as the pack's NVRTC made it (lookups use the same) */
            int keyed = mlajit_spec_parse(m->kernels[i].spec_string, &s) == MLAJIT_OK &&
                        mlajit_spec_resolve(&s, &r) == MLAJIT_OK &&
                        mlajit_kernel_key_and_source(ctx, &r, &key, again, sizeof again, &source) == MLAJIT_OK;
            if (keyed)
                key = mlajit_kernel_key_for_nvrtc(&r, source, m->nvrtc_major, m->nvrtc_minor);
            free(source);
            if (!keyed || key.hi != m->kernels[i].key.hi || key.lo != m->kernels[i].key.lo) {
                char hex[33];
                mlajit_cache_key_hex(&m->kernels[i].key, hex);
                /* a spec this mlajit refuses (a retired variant, say) says why */
                if (keyed)
                    fprintf(stderr, "mlajit pack verify: %s: key %s does not match its spec %s\n", path, hex,
                            m->kernels[i].spec_string);
                else
                    fprintf(stderr, "mlajit pack verify: %s: key %s: its spec does not key here: %s\n", path, hex,
                            mlajit_last_error());
                bad++;
                continue;
            }
            /* and what its launch needs is what this generator launches it with */
            mlajit_kernel_layout layout;
            mlajit_cache_entry e;
            if ((rc = mlajit_codegen_layout(&r, &layout)) || (rc = mlajit_pack_get(pack, &key, &e))) {
                fprintf(stderr, "mlajit pack verify: %s: %s\n", path, mlajit_last_error());
                bad++;
                continue;
            }
            if (mlajit_entry_launch_check(&e, &layout)) {
                fprintf(stderr, "mlajit pack verify: %s: the entry for %s is stale: %s\n", path,
                        m->kernels[i].spec_string, mlajit_last_error());
                bad++;
            }
            mlajit_cache_entry_clear(&e);
        }
        if (bad) {
            status = CLI_FAIL;
        } else {
            printf("%s: every key matches its spec and every launch record this generator's, under this mlajit "
                   "(usable here)\n", path);
        }
    }
    mlajit_context_destroy(ctx);
    mlajit_pack_close(pack);
    return status;
}

/* ---- merge ------------------------------------------------------------------ */

typedef struct merge_state {
    mlajit_pack_item *items;
    mlajit_cache_entry *entries;
    size_t count, cap;
    int status;
} merge_state;

static int merge_visit(const mlajit_cache_key *key, const void *value, size_t len, void *arg)
{
    merge_state *s = arg;
    if (s->count == s->cap) {
        /* Items point at entries, so both grow together and items are fixed up. */
        size_t cap = s->cap ? s->cap * 2 : 64;
        mlajit_cache_entry *e = realloc(s->entries, cap * sizeof *e);
        if (!e) {
            s->status = mlajit_fail(MLAJIT_ERR_OUT_OF_MEMORY, "merge: %zu entries", cap);
            return 1;
        }
        s->entries = e;
        mlajit_pack_item *it = realloc(s->items, cap * sizeof *it);
        if (!it) {
            s->status = mlajit_fail(MLAJIT_ERR_OUT_OF_MEMORY, "merge: %zu entries", cap);
            return 1;
        }
        s->items = it;
        for (size_t i = 0; i < s->count; i++)
            s->items[i].entry = &s->entries[i];
        s->cap = cap;
    }
    if (!value) {
        s->status = mlajit_fail(MLAJIT_ERR_CORRUPT, "an entry lies outside its file");
        return 1;
    }
    if ((s->status = mlajit_cache_entry_decode(value, len, &s->entries[s->count])) != MLAJIT_OK)
        return 1;
    s->items[s->count].key = *key;
    s->items[s->count].entry = &s->entries[s->count];
    s->count++;
    return 0;
}

static int cmd_merge(int argc, char **argv)
{
    const cli_command cmd = {"pack merge", merge_usage, NULL, 0, 2, -1, "OUT and at least one IN"};
    int n, parsed = cli_parse(&cmd, argc, argv, &n);
    if (parsed != CLI_PARSED)
        return parsed;
    argc = n + 1; /* the operands, OUT first */
    const char *out_path = argv[1];
    merge_state s = {0};
    cli_tactic_rows tactic_rows = {0};
    mlajit_pack_manifest recipe;
    memset(&recipe, 0, sizeof recipe);
    int status = CLI_OK;
    for (int i = 2; i < argc && status == CLI_OK; i++) {
        mlajit_pack *pack;
        int rc = mlajit_pack_open(argv[i], &pack);
        if (rc) {
            status = cli_error(rc, "pack merge");
            break;
        }
        const mlajit_pack_manifest *m = mlajit_pack_manifest_of(pack);
        if (i == 2) {
            recipe = *m;
            recipe.kernels = NULL;
            recipe.kernel_count = 0;
        } else if (!mlajit_pack_manifest_same_recipe(&recipe, m)) {
            fprintf(stderr,
                    "mlajit pack merge: %s was made with key recipe %s, NVRTC %d.%d but %s with key recipe %s, "
                    "NVRTC %d.%d; a pack holds one recipe: rebuild one of them\n",
                    argv[i], m->key_recipe, m->nvrtc_major, m->nvrtc_minor, argv[2], recipe.key_recipe,
                    recipe.nvrtc_major, recipe.nvrtc_minor);
            status = CLI_FAIL;
        }
        /* verify refuses a pack with a damaged tactic record, so every row collected is usable */
        if (status == CLI_OK && (mlajit_pack_verify(pack, NULL) != MLAJIT_OK ||
                                 mlajit_pack_foreach(pack, merge_visit, &s) != MLAJIT_OK || s.status != MLAJIT_OK ||
                                 mlajit_pack_tactic_foreach(pack, cli_tactic_collect, &tactic_rows) != MLAJIT_OK ||
                                 tactic_rows.status != MLAJIT_OK || tactic_rows.unusable))
            status = cli_error(s.status ? s.status : tactic_rows.status ? tactic_rows.status : MLAJIT_ERR_CORRUPT,
                               "pack merge");
        mlajit_pack_close(pack);
    }
    mlajit_tactic_record *tactics = calloc(tactic_rows.count ? tactic_rows.count : 1, sizeof *tactics);
    if (status == CLI_OK && !tactics)
        status = cli_error(mlajit_fail(MLAJIT_ERR_OUT_OF_MEMORY, "merge: tactic records"), "pack merge");
    for (size_t i = 0; tactics && i < tactic_rows.count; i++)
        tactics[i] = tactic_rows.rows[i].record; /* in the inputs' order: the first IN's wins */
    if (status == CLI_OK) {
        snprintf(recipe.tool, sizeof recipe.tool, "mlajit %s", MLAJIT_VERSION_STRING);
        recipe.created_unix = 0;
        int rc = mlajit_pack_write(out_path, &recipe, s.items, s.count, tactics, tactic_rows.count);
        if (rc) {
            status = cli_error(rc, "pack merge");
        } else {
            mlajit_pack *pack;
            if ((rc = mlajit_pack_open(out_path, &pack))) {
                status = cli_error(rc, "pack merge");
            } else {
                printf("pack %s: %zu kernels and %zu tactic records from %d packs, %lld bytes\n", out_path,
                       mlajit_pack_manifest_of(pack)->kernel_count, mlajit_pack_manifest_of(pack)->tactic_count,
                       argc - 2, (long long)mlajit_pack_file_bytes(pack));
                mlajit_pack_close(pack);
            }
        }
    }
    for (size_t i = 0; i < s.count; i++)
        mlajit_cache_entry_clear(&s.entries[i]);
    free(s.entries);
    free(s.items);
    free(tactics);
    cli_tactic_rows_free(&tactic_rows);
    return status;
}

/* ---- bench ------------------------------------------------------------------ */

static int cmd_bench(int argc, char **argv)
{
    int repeat = 100000;
    const cli_option options[] = {{"--repeat", CLI_INT, &repeat, .lo = 1, .hi = 1000000000}};
    const cli_command cmd = {"pack bench", bench_usage, options, 1, 1, 1, "one pack FILE"};
    int n, parsed = cli_parse(&cmd, argc, argv, &n);
    if (parsed != CLI_PARSED)
        return parsed;
    const char *path = argv[1];

    /* The context (device, driver) exists before serving starts, so it is not
     * part of a first launch; what is timed is what a first call adds. */
    double t = mlajit_now_ms();
    mlajit_context_options opts = {.struct_size = sizeof opts,
                                   .flags = MLAJIT_CONTEXT_NO_DISK_CACHE | MLAJIT_CONTEXT_NO_JIT, .packs = ""};
    mlajit_context *ctx;
    int rc = mlajit_context_create(&opts, &ctx);
    if (rc)
        return cli_error(rc, "pack bench");
    double context_ms = mlajit_now_ms() - t;
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    printf("device        %s\n", info.has_device ? info.device_name : "none (load is not timed)");
    printf("context       %9.3f ms  (device and driver set-up; before serving, not counted)\n", context_ms);

    t = mlajit_now_ms();
    rc = mlajit_context_attach_pack(ctx, path);
    double open_ms = mlajit_now_ms() - t;
    if (rc) {
        mlajit_context_destroy(ctx);
        return cli_error(rc ? rc : MLAJIT_ERR_UNSUPPORTED, "pack bench");
    }
    const mlajit_pack *pack = mlajit_context_pack(ctx, 0); /* the one just attached: the context had none */
    const mlajit_pack_manifest *m = mlajit_pack_manifest_of(pack);
    printf("pack open     %9.3f ms  (%zu kernels, %lld bytes: trailer, whole-file checksum, manifest)\n", open_ms,
           m->kernel_count, (long long)mlajit_pack_file_bytes(pack));

    /* The first kernel of the pack that this context targets. */
    mlajit_kernel_spec spec = MLAJIT_KERNEL_SPEC_INIT;
    int found = 0;
    for (size_t i = 0; i < m->kernel_count && !found; i++) {
        if (mlajit_spec_parse(m->kernels[i].spec_string, &spec) == MLAJIT_OK &&
            mlajit_arch_runs_on(spec.arch, info.device_arch))
            found = 1;
    }
    if (!found) {
        mlajit_context_destroy(ctx);
        fprintf(stderr, "mlajit pack bench: %s holds no kernel for %s\n", path, info.device_arch);
        return CLI_FAIL;
    }
    const mlajit_kernel *k;
    mlajit_kernel_report rep = MLAJIT_KERNEL_REPORT_INIT;
    t = mlajit_now_ms();
    rc = mlajit_kernel_acquire(ctx, &spec, 0, &k, &rep);
    double lookup_ms = mlajit_now_ms() - t;
    if (rc) {
        mlajit_context_destroy(ctx);
        return cli_error(rc, "pack bench");
    }
    printf("lookup        %9.3f ms  (%s: source generated and keyed, pack read, entry checksums and launch record, "
           "%zu-byte cubin copied)\n", lookup_ms,
           rep.spec, rep.cubin_bytes);
    double load_ms = 0;
    if (info.has_device) {
        t = mlajit_now_ms();
        rc = mlajit_kernel_acquire(ctx, &spec, 1, &k, &rep);
        load_ms = mlajit_now_ms() - t;
        if (rc) {
            mlajit_context_destroy(ctx);
            return cli_error(rc, "pack bench");
        }
        printf("load          %9.3f ms  (cuLibraryLoadData and the functions' attributes)\n", load_ms);
    } else {
        printf("load          (no GPU here: run `mlajit pack bench` on the GPU host to time it)\n");
    }
    printf("first launch  %9.3f ms  (open + lookup%s)\n", open_ms + lookup_ms + load_ms,
           info.has_device ? " + load" : "; load not timed");

    int load = info.has_device;
    t = mlajit_now_ms();
    for (int i = 0; i < repeat; i++)
        if (mlajit_kernel_acquire(ctx, &spec, load, &k, NULL) != MLAJIT_OK)
            break;
    double internal_ns = (mlajit_now_ms() - t) * 1e6 / repeat;
    t = mlajit_now_ms();
    for (int i = 0; i < repeat; i++)
        if (mlajit_kernel_prepare(ctx, &spec, NULL) != MLAJIT_OK)
            break;
    double public_ns = (mlajit_now_ms() - t) * 1e6 / repeat;
    printf("repeat lookup %9.1f ns  (mlajit_kernel_prepare, mean of %d; %.1f ns through the internal acquire)\n",
           public_ns, repeat, internal_ns);
    printf("decode        plans hold their kernel: mlajit_decode does no lookup at all\n");
    mlajit_context_destroy(ctx);
    return CLI_OK;
}

/* ---- the pack build line for a missing kernel -------------------------------- */

/* Feature names as `pack build --features` spells them, joined by '+'. */
static void feature_set_name(unsigned features, char *buf, size_t len)
{
    static const struct { unsigned bit; const char *name; } names[] = {
        {MLAJIT_FEATURE_SINK, "sink"},
        {MLAJIT_FEATURE_TOPK_LENGTH, "topk-length"},
        {MLAJIT_FEATURE_EXTRA_TOPK_LENGTH, "extra-topk-length"},
    };
    snprintf(buf, len, "%s", features ? "" : "none");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t used = strlen(buf);
        if (features & names[i].bit)
            snprintf(buf + used, len - used, "%s%s", used ? "+" : "", names[i].name);
    }
}

/* The grid form when the resolved spec is what the generator picks for its
 * shape, or one of the walk alternatives a grid brings along with it (so the
 * pack also serves the plans that switch kernels); else --spec. */
void cli_pack_build_line(const mlajit_kernel_spec *r, char *buf, size_t len)
{
    char spec_string[128] = "", auto_string[128], alt_string[128];
    mlajit_spec_string(r, spec_string, sizeof spec_string);
    mlajit_kernel_spec auto_spec = *r, auto_resolved = MLAJIT_KERNEL_SPEC_INIT, alts[MLAJIT_WALK_ALTERNATIVES];
    auto_spec.tile = 0;
    auto_spec.heads_per_cta = 0;
    auto_spec.variant = MLAJIT_VARIANT_AUTO;
    int by_grid = mlajit_spec_resolve(&auto_spec, &auto_resolved) == MLAJIT_OK &&
                  mlajit_spec_string(&auto_resolved, auto_string, sizeof auto_string) == MLAJIT_OK &&
                  strcmp(auto_string, spec_string) == 0;
    const int n_alts = by_grid ? 0 : mlajit_spec_walk_alternatives(&auto_spec, r->arch, alts);
    for (int i = 0; i < n_alts && !by_grid; i++)
        by_grid = mlajit_spec_string(&alts[i], alt_string, sizeof alt_string) == MLAJIT_OK &&
                  strcmp(alt_string, spec_string) == 0;
    /* a grid names models; a custom layout's kernel goes by its spec string */
    if (!by_grid || r->model == MLAJIT_MODEL_CUSTOM) {
        snprintf(buf, len, "mlajit pack build --spec %s --out FILE", spec_string);
        return;
    }
    const mlajit_model_desc *m = mlajit_model_describe(r->model);
    char extra[32] = "", features[64] = "";
    if (r->extra_page_size)
        snprintf(extra, sizeof extra, " --extra-pages %d", r->extra_page_size);
    if (r->features) {
        char names[48];
        feature_set_name(r->features, names, sizeof names);
        snprintf(features, sizeof features, " --features %s", names);
    }
    snprintf(buf, len, "mlajit pack build --models %s --heads %d --pages %d%s%s --archs %s --out FILE",
             m ? m->name : "?", r->h_q, r->page_size, extra, features, r->arch);
}

void cli_missing_kernel_hint(int status, mlajit_context *ctx, const mlajit_kernel_spec *spec)
{
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    if (status != MLAJIT_ERR_NOT_FOUND || !ctx || mlajit_context_get_info(ctx, &info) != MLAJIT_OK ||
        !info.jit_disabled)
        return;
    mlajit_kernel_spec with_arch = *spec, resolved = MLAJIT_KERNEL_SPEC_INIT;
    if (!with_arch.arch[0])
        snprintf(with_arch.arch, sizeof with_arch.arch, "%s", info.device_arch);
    char line[384];
    if (mlajit_spec_resolve(&with_arch, &resolved) != MLAJIT_OK)
        return;
    cli_pack_build_line(&resolved, line, sizeof line);
    fprintf(stderr, "mlajit: build a pack that holds it with `%s` and add FILE to MLAJIT_PACKS\n", line);
}

int cli_pack(int argc, char **argv)
{
    static const char *const names[] = {"build", "ls", "verify", "merge", "bench"};
    static int (*const run[])(int, char **) = {cmd_build, cmd_ls, cmd_verify, cmd_merge, cmd_bench};
    int status, k = cli_pick_subcommand("pack", pack_usage, names, 5, argc, argv, &status);
    return k < 0 ? status : run[k](argc - 1, argv + 1);
}
