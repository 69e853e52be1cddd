/* mlajit tune: the tuner (src/harness/tune.c) over an envelope of buckets,
 * storing each bucket's measured winner as a tactic record in the cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "codegen/codegen.h"
#include "common/error.h"
#include "harness/harness.h"

/* "LO..HI" (the powers of two from LO rounded down to HI) or a list. */
static int parse_pow2_range(const char *name, const char *value, void *target)
{
    cli_int_list *l = target;
    const char *dots = strstr(value, "..");
    if (!dots)
        return cli_parse_int_list(name, value, target);
    char lo_text[32];
    size_t n = (size_t)(dots - value);
    long long lo, hi;
    if (n >= sizeof lo_text) {
        fprintf(stderr, "mlajit: %s: '%s' is not LO..HI\n", name, value);
        return 0;
    }
    memcpy(lo_text, value, n);
    lo_text[n] = 0;
    if (!cli_parse_integer(lo_text, l->lo, l->hi, &lo) || !cli_parse_integer(dots + 2, l->lo, l->hi, &hi) || lo > hi) {
        fprintf(stderr, "mlajit: %s: '%s' is not LO..HI with %d <= LO <= HI <= %d\n", name, value, l->lo, l->hi);
        return 0;
    }
    long long p = 1;
    while (p * 2 <= lo)
        p *= 2;
    l->count = 0;
    for (; p <= hi; p *= 2) {
        if (!cli_room_for(name, l->count, 64))
            return 0;
        l->values[l->count++] = (int)p;
    }
    return 1;
}

static void print_summary(const mlajit_tune_summary *sum, FILE *to)
{
    fprintf(to,
            "tuned %d of %d buckets in %.1f s%s: %d tactics stored, %d candidates timed (%d dropped early, "
            "%d split counts past their kernel's turn not timed), %d failed the reference check\n",
            sum->buckets_done, sum->buckets, sum->seconds,
            sum->deadline_hit ? " (the budget ran out; the rest keep the rules)" : "", sum->stored, sum->timed,
            sum->dropped, sum->pruned, sum->failed_checks);
    if (sum->seconds > 0 && sum->timed > 0)
        fprintf(to, "  time: kernels %.1f s, cache pools %.1f s, inputs %.1f s, plans and captures %.1f s, "
                "timed replays %.1f s, reference checks %.1f s\n", sum->s_acquire, sum->s_pools, sum->s_inputs,
                sum->s_captures, sum->s_replays, sum->s_checks);
}

/* The shapes of a --sweep file: one a line, blank lines and '#' comments skipped;
 * the first bad line is named. *out malloc'd. */
static int read_shapes(const char *path, const char *arch, mlajit_sweep_shape **out, int *count)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (!f) {
        fprintf(stderr, "mlajit: tune --sweep: cannot read %s\n", path);
        return 0;
    }
    mlajit_sweep_shape *shapes = NULL;
    int n = 0, cap = 0, lineno = 0, ok = 1;
    char line[600];
    while (ok && fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "#\r\n")] = '\0'; /* the comment and the line's end */
        if (strspn(line, " \t") == strlen(line))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            mlajit_sweep_shape *g = realloc(shapes, (size_t)cap * sizeof *g);
            if (!g) {
                fprintf(stderr, "mlajit: tune --sweep: out of memory\n");
                ok = 0;
                break;
            }
            shapes = g;
        }
        int rc = mlajit_sweep_shape_parse(line, arch, &shapes[n]);
        if (rc) {
            fprintf(stderr, "mlajit: tune --sweep: %s line %d: %s (%s)\n", path, lineno, mlajit_last_error(),
                    mlajit_status_string(rc));
            ok = 0;
        } else {
            n++;
        }
    }
    if (f != stdin)
        fclose(f);
    if (ok && n == 0) {
        fprintf(stderr, "mlajit: tune --sweep: %s holds no shapes\n", path);
        ok = 0;
    }
    if (!ok) {
        free(shapes);
        return 0;
    }
    *out = shapes;
    *count = n;
    return 1;
}

static int run_sweep(const char *path, int seconds, int repeats, int tune_first, int no_check, int pool_mb,
                     int spread_mb, const char *json_path)
{
    mlajit_context *ctx;
    mlajit_context_info info;
    int status = cli_gpu_context("tune --sweep", NULL, &ctx, &info);
    if (status != CLI_OK)
        return status;
    status = CLI_FAIL;
    mlajit_sweep_shape *shapes = NULL;
    int n = 0;
    FILE *json = NULL;
    if (!read_shapes(path, info.device_arch, &shapes, &n))
        ;
    else if (json_path && !(json = fopen(json_path, "w")))
        fprintf(stderr, "mlajit: tune: cannot write %s\n", json_path);
    else {
        mlajit_sweep_options o = {
            .tune = {.seconds = seconds, .skip_check = no_check, .pool_bytes = (int64_t)pool_mb << 20,
                     .spread_bytes = (int64_t)spread_mb << 20, .progress = stderr, .json = json,
                     .commit = getenv("MLAJIT_COMMIT") ? getenv("MLAJIT_COMMIT") : "unknown"},
            .tune_first = tune_first,
            .repeats = repeats,
        };
        mlajit_sweep_summary sum;
        const int rc = mlajit_sweep(ctx, shapes, n, &o, &sum);
        if (rc) {
            status = cli_error(rc, "tune --sweep");
        } else {
            if (tune_first)
                print_summary(&sum.tune, stdout);
            printf("swept %d of %d shapes in %.1f s: the tuned plan within 3%% of the best on %d, slower than the "
                   "rules past the repeats' spread on %d; worst pick error %.1f%%; %d tuned plans failed the "
                   "reference check at their shape\n",
                   sum.done, sum.shapes, sum.seconds, sum.within_3pct, sum.slower_than_rules,
                   sum.worst_pick_error * 100, sum.tuned_failed);
            status = sum.tuned_failed ? CLI_FAIL : CLI_OK;
        }
    }
    if (json)
        fclose(json);
    free(shapes);
    mlajit_context_destroy(ctx);
    return status;
}

int cli_tune_grid(mlajit_context *ctx, const mlajit_tune_envelope *grid, int seconds, int skip_check)
{
    mlajit_tune_envelope env = *grid;
    env.num_topks = 0; /* the production grid's topk and row buckets */
    env.num_rows = 0;
    mlajit_tune_envelope_defaults(&env);
    mlajit_tune_options opts = {
        .seconds = seconds, .skip_check = skip_check, .progress = stderr,
        .commit = getenv("MLAJIT_COMMIT") ? getenv("MLAJIT_COMMIT") : "unknown",
    };
    mlajit_tune_summary sum;
    int rc = mlajit_tune_run(ctx, &env, &opts, &sum);
    if (rc)
        return cli_error(rc, "pack build --tune");
    print_summary(&sum, stderr);
    return CLI_OK;
}

int cli_tune(int argc, char **argv)
{
    static const char usage[] =
        "usage: mlajit tune [--models v32,dsv4] [--layout L]... [--heads 8,16,32,64,128] [--pages 64,256]\n"
        "                   [--topk 128..2048|LIST] [--rows 1..4096|LIST] [--features SETS]\n"
        "                   [--extra-topk LIST] [--seconds N] [--dry-run] [--json FILE]\n"
        "  measure, per bucket (models x heads x pages x features x extra topks x topk buckets x\n"
        "  row buckets, each timed at its lower edge: b = rows, s_q 1), the rules' kernel, every\n"
        "  walk alternative and split counts 1, 2, 4, ... 64 by docs/BENCH.md's graph protocol on\n"
        "  caches in HBM with fresh indices per call; the fastest that passes the fp64 reference\n"
        "  check is stored in the cache as this GPU's tactic (docs/tuning.md)\n"
        "  --layout L     a custom layout on the model axis, after --models (repeatable, up to 8;\n"
        "                 inline keys, a JSON file or a canonical string: docs/layouts.md); with\n"
        "                 --layout and no --models only the layouts are tuned\n"
        "  --topk/--rows  LO..HI: the powers of two from LO rounded down to HI; or a list\n"
        "  --features S   feature sets, e.g. none,sink+topk-length (default none)\n"
        "  --extra-topk L extra-cache topk buckets (0: none, the default; pages of 64)\n"
        "  --seconds N    the budget: no candidate starts after N seconds (default 600)\n"
        "  --dry-run      list the buckets and their candidates; needs no GPU\n"
        "  --json FILE    one JSON line per stored bucket, with the commit (MLAJIT_COMMIT)\n"
        "  --sm-count N   the dry run's SM count (default: the GPU's, else 132)\n"
        "  --pool-mb N    the timing cache pool in MB before its copies (default 24)\n"
        "  --spread-mb N  the pool copied over N MB, so rows read sequences of their own (default 4096)\n"
        "  --no-check     testing only: store winners without the reference check\n"
        "usage: mlajit tune --sweep FILE [--repeats N] [--no-tune-first] [--seconds N] [--json FILE]\n"
        "  issue 47's check of the tuner: tune each shape's bucket, then per shape time every\n"
        "  candidate at the shape itself, the rules' plan and the tuned plan (docs/tuning.md, \"The\n"
        "  sweep\"); FILE: one shape a line (model=v32 h_q=16 page=64 b=128 s_q=1 topk=2048\n"
        "  [extra_topk=N extra_page=N] [features=sink+topk-length]; model may be a layout's\n"
        "  canonical string or inline keys; '#' starts a comment)\n"
        "  --repeats N    the rules', tuned and best plans timed again N times in turn (default 3)\n"
        "usage: mlajit tune --draw-shapes N [--seed S]\n"
        "  print N shapes off the production grid, drawn with seed S (default 47), in --sweep's\n"
        "  format; needs no GPU (`mlajit bench --shapes` prints the bench rows the same way)\n";
    cli_model_list models = {.count = 0};
    cli_layout_list layouts = {.count = 0};
    cli_int_list heads = {.lo = 1, .hi = MLAJIT_MAX_HEADS}, pages = {.lo = 1, .hi = MLAJIT_MAX_PAGE_SIZE},
                 topks = {.lo = 1, .hi = MLAJIT_MAX_TOPK}, rows = {.lo = 1, .hi = MLAJIT_MAX_ROWS},
                 extra = {.lo = 0, .hi = MLAJIT_MAX_TOPK};
    cli_feature_sets features = {.count = 0};
    int seconds = 600, dry_run = 0, no_check = 0, sm_count = 0, pool_mb = 0, spread_mb = 0;
    int draw_shapes = 0, repeats = 3, no_tune_first = 0;
    uint64_t seed = 47;
    const char *json_path = NULL, *sweep_path = NULL;
    const cli_option options[] = {
        {"--models", CLI_CUSTOM, &models, .parse = cli_parse_model_list},
        {"--layout", CLI_CUSTOM, &layouts, .parse = cli_add_layout},
        {"--heads", CLI_CUSTOM, &heads, .parse = cli_parse_int_list},
        {"--pages", CLI_CUSTOM, &pages, .parse = cli_parse_int_list},
        {"--topk", CLI_CUSTOM, &topks, .parse = parse_pow2_range},
        {"--rows", CLI_CUSTOM, &rows, .parse = parse_pow2_range},
        {"--features", CLI_CUSTOM, &features, .parse = cli_parse_feature_sets},
        {"--extra-topk", CLI_CUSTOM, &extra, .parse = cli_parse_int_list},
        {"--seconds", CLI_INT, &seconds, .lo = 0, .hi = 7 * 24 * 3600},
        {"--dry-run", CLI_FLAG, .target = &dry_run},
        {"--json", CLI_STRING, .target = &json_path},
        {"--sm-count", CLI_INT, &sm_count, .lo = 1, .hi = 1024},
        {"--pool-mb", CLI_INT, &pool_mb, .lo = 1, .hi = 1 << 20},
        {"--spread-mb", CLI_INT, &spread_mb, .lo = 1, .hi = 1 << 22},
        {"--no-check", CLI_FLAG, .target = &no_check},
        {"--sweep", CLI_STRING, .target = &sweep_path},
        {"--repeats", CLI_INT, &repeats, .lo = 1, .hi = 16},
        {"--no-tune-first", CLI_FLAG, .target = &no_tune_first},
        {"--draw-shapes", CLI_INT, &draw_shapes, .lo = 1, .hi = 100000},
        {"--seed", CLI_UINT64, .target = &seed},
    };
    const cli_command cmd = {"tune", usage, options, sizeof options / sizeof options[0], 0, 0, NULL};
    int n_operands, parsed = cli_parse(&cmd, argc, argv, &n_operands);
    if (parsed != CLI_PARSED)
        return parsed;
    if (layouts.count && (draw_shapes || sweep_path))
        return cli_usage_error(&cmd, "--layout goes with the grid, not %s (a shape line names its own model or "
                               "layout: model=LAYOUT)", draw_shapes ? "--draw-shapes" : "--sweep");
    if (draw_shapes) {
        for (int i = 0; i < draw_shapes; i++) {
            mlajit_sweep_shape shape;
            char line[256];
            mlajit_sweep_draw(seed, i, MLAJIT_DEFAULT_ARCH, &shape);
            mlajit_sweep_shape_format(&shape, line, sizeof line);
            printf("%s\n", line);
        }
        return CLI_OK;
    }
    if (sweep_path)
        return run_sweep(sweep_path, seconds, repeats, !no_tune_first, no_check, pool_mb, spread_mb, json_path);
    mlajit_tune_envelope env = {
        .models = models.models, .num_models = models.count, .heads = heads.values, .num_heads = heads.count,
        .pages = pages.values, .num_pages = pages.count, .feature_sets = features.count ? features.sets : NULL,
        .num_feature_sets = features.count, .topks = topks.values, .num_topks = topks.count, .rows = rows.values,
        .num_rows = rows.count, .extra_topks = extra.count ? extra.values : NULL, .num_extra_topks = extra.count,
        .layouts = layouts.count ? layouts.layouts : NULL, .num_layouts = layouts.count,
    };
    mlajit_tune_envelope_defaults(&env); /* the lists not given: the production grid's */
    mlajit_context *ctx = NULL;
    int rc;
    if (!dry_run) {
        mlajit_context_info info;
        if ((rc = cli_gpu_context("tune", " (--dry-run lists the candidates without one)", &ctx, &info)) != CLI_OK)
            return rc;
    }
    FILE *json = NULL;
    if (json_path && !(json = fopen(json_path, "w"))) {
        fprintf(stderr, "mlajit: tune: cannot write %s\n", json_path);
        mlajit_context_destroy(ctx);
        return CLI_FAIL;
    }
    mlajit_tune_options opts = {
        .seconds = seconds, .dry_run = dry_run, .skip_check = no_check, .pool_bytes = (int64_t)pool_mb << 20,
        .spread_bytes = (int64_t)spread_mb << 20,
        .sm_count = sm_count, .list = stdout, .progress = stderr, .json = json,
        .commit = getenv("MLAJIT_COMMIT") ? getenv("MLAJIT_COMMIT") : "unknown",
    };
    mlajit_tune_summary sum;
    rc = mlajit_tune_run(ctx, &env, &opts, &sum);
    if (json)
        fclose(json);
    mlajit_context_destroy(ctx);
    if (rc)
        return cli_error(rc, "tune");
    if (dry_run) {
        printf("%d buckets, %d candidates\n", sum.buckets, sum.candidates);
        return CLI_OK;
    }
    print_summary(&sum, stdout);
    return sum.deadline_hit || sum.stored == sum.buckets ? CLI_OK : CLI_FAIL;
}
