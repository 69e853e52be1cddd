/* mlajit bench: docs/BENCH.md's protocol. Per configuration: synthesize the
 * cache (b sequences of seqlen tokens on randomly assigned pages), check the
 * first rows against the fp64 reference, time 100 eager calls (CUDA events
 * around each host call; the host call alone on the host's clock) and 20
 * replays of a CUDA graph of 10 calls. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "codegen/codegen.h"
#include "common/error.h"
#include "harness/harness.h"
#include "runtime/runtime.h"

typedef struct bench_config {
    mlajit_model model;
    int h_q, b, s_q, seqlen, topk;
    int extra_topk, extra_seqlen, page, extra_page, sink;
    double flashmla_us; /* FlashMLA on the same H200 (BENCH.md); at h_q < 64 its padded h_q 64 figure; 0 = none */
    mlajit_layout layout; /* with model MLAJIT_MODEL_CUSTOM: the cache's layout (else zero) */
} bench_config;

/* BENCH.md's FlashMLA figures: V3.2 page 64, s_q 1, by (b, seqlen, topk). */
static const struct { int b, seqlen, topk; double h128, h64; } v32_rows[] = {
    {1, 32768, 2048, 17.4, 17.2},  {8, 32768, 2048, 25.4, 19.7},   {64, 8192, 128, 12.4, 11.4},
    {128, 8192, 128, 23.7, 13.1},  {64, 16384, 512, 29.0, 37.9},   {128, 16384, 512, 59.9, 38.3},
    {64, 32768, 2048, 96.6, 79.0}, {128, 32768, 2048, 188.7, 120.3}, {256, 16384, 2048, 366.1, 235.1},
};
static const struct { int b; double us; } mtp_rows[] = {{2, 19.1}, {64, 184.9}, {128, 365.0}};
static const struct { int h_q, extra_topk; double b2, b64, b128; } dsv4_rows[] = {
    {64, 512, 13.7, 48.2, 93.0}, {128, 1024, 15.8, 103.2, 206.6}};

static int build_configs(bench_config *out, int max, int quick)
{
    int n = 0;
    static const int heads_all[] = {8, 16, 32, 64, 128}, heads_quick[] = {16, 64, 128};
    const int *heads = quick ? heads_quick : heads_all;
    int nheads = quick ? 3 : 5;
    for (size_t r = 0; r < sizeof v32_rows / sizeof v32_rows[0]; r++) {
        if (quick && (v32_rows[r].b == 256 || v32_rows[r].seqlen == 8192))
            continue;
        for (int i = 0; i < nheads && n < max; i++) {
            int h = heads[i];
            out[n++] = (bench_config){MLAJIT_MODEL_V32, h, v32_rows[r].b, 1, v32_rows[r].seqlen, v32_rows[r].topk,
                                      0, 0, 64, 0, 0, h == 128 ? v32_rows[r].h128 : v32_rows[r].h64, {0}};
        }
    }
    for (size_t r = 0; r < sizeof mtp_rows / sizeof mtp_rows[0] && n < max; r++)
        out[n++] = (bench_config){MLAJIT_MODEL_V32, 128, mtp_rows[r].b, 2, 32768, 2048, 0, 0, 64, 0, 0, mtp_rows[r].us, {0}};
    /* DSV4's 64-head rows also at the shards' 8, 16 and 32 heads, against the
     * 64-head figure (what an engine pays after padding), as V3.2's rows are */
    for (size_t r = 0; r < sizeof dsv4_rows / sizeof dsv4_rows[0]; r++) {
        const int bs[] = {2, 64, 128};
        const double us[] = {dsv4_rows[r].b2, dsv4_rows[r].b64, dsv4_rows[r].b128};
        int row_heads[4], nh = 0;
        if (dsv4_rows[r].h_q == 64 && !quick)
            for (int k = 0; k < 3; k++)
                row_heads[nh++] = heads_all[k]; /* 8, 16, 32 */
        row_heads[nh++] = dsv4_rows[r].h_q;
        for (int i = 0; i < 3; i++)
            for (int k = 0; k < nh && n < max; k++)
                out[n++] = (bench_config){MLAJIT_MODEL_DSV4, row_heads[k], bs[i], 2, 16384, 128,
                                          dsv4_rows[r].extra_topk, 16384, 256, 64, 1, us[i], {0}};
    }
    return n;
}

/* Rows as the sweep's shape lines (mlajit tune --sweep); a custom layout's
 * model is its canonical string. */
static int print_shape_lines(const bench_config *cfgs, int n)
{
    for (int i = 0; i < n; i++) {
        mlajit_sweep_shape s = {.spec = MLAJIT_KERNEL_SPEC_INIT, .shape = MLAJIT_DECODE_SHAPE_INIT};
        s.spec.model = cfgs[i].model;
        s.spec.layout = cfgs[i].layout;
        s.spec.h_q = cfgs[i].h_q;
        s.spec.page_size = cfgs[i].page;
        s.spec.extra_page_size = cfgs[i].extra_page;
        s.spec.features = cfgs[i].sink ? MLAJIT_FEATURE_SINK : 0;
        s.shape.batch = cfgs[i].b;
        s.shape.s_q = cfgs[i].s_q;
        s.shape.topk = cfgs[i].topk;
        s.shape.extra_topk = cfgs[i].extra_topk;
        char line[256];
        if (mlajit_sweep_shape_format(&s, line, sizeof line) != MLAJIT_OK)
            return cli_error(MLAJIT_ERR_INTERNAL, "bench --shapes");
        printf("%s\n", line);
    }
    return CLI_OK;
}

static int print_bench_shapes(int quick)
{
    bench_config cfgs[96];
    return print_shape_lines(cfgs, build_configs(cfgs, 96, quick));
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static float median(float *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

/* Check the first rows against the fp64 reference (the whole batch would take
 * minutes of CPU at b 256; the kernel treats every row alike). */
static int check_rows(mlajit_device_case *dc, mlajit_case *c, int *pass, double *max_err)
{
    int check_b = c->b < 2 ? c->b : 2;
    size_t rows = (size_t)check_b * c->s_q, n_lse = rows * c->h_q;
    int d_v = mlajit_case_desc(c)->d_v;
    float *out = malloc(n_lse * d_v * sizeof *out + 16), *lse = malloc(n_lse * sizeof *lse + 16);
    float *ref_out = NULL, *ref_lse = NULL;
    int rc = (out && lse) ? MLAJIT_OK : mlajit_fail(MLAJIT_ERR_OUT_OF_MEMORY, "check");
    if (rc == MLAJIT_OK)
        rc = mlajit_device_case_download(dc, c, NULL, rows, out, lse);
    if (rc == MLAJIT_OK)
        rc = mlajit_case_reference(c, check_b, &ref_out, &ref_lse);
    if (rc == MLAJIT_OK) {
        mlajit_compare_result r;
        mlajit_compare(out, ref_out, n_lse * d_v, lse, ref_lse, n_lse, &r);
        *pass = r.pass;
        *max_err = r.out_max_abs_err;
    }
    free(out); free(lse); free(ref_out); free(ref_lse);
    return rc;
}

typedef struct bench_result {
    double gpu_us, eager_us, tflops, gbps;
    double host_us; /* the mlajit_decode call itself on the host, the driver's launches included */
    int splits, pass;
    int tactic; /* MLAJIT_TACTIC_*: the rules' choice, or a tuned tactic's */
    double max_err;
    mlajit_kernel_report kernel; /* the plan's kernel: spec, cold compile time, hit */
    mlajit_work work;            /* the row's work (work.c) */
} bench_result;

/* Kernel variant overrides for every row (0 = the generator's choice). */
typedef struct bench_variant {
    int tile, heads_per_cta, splits;
    mlajit_variant variant;
} bench_variant;

static int run_config(mlajit_context *ctx, const bench_config *cfg, const bench_variant *variant, bench_result *out)
{
    mlajit_synth_params sp = {
        .model = cfg->model, .layout = cfg->layout, .b = cfg->b, .s_q = cfg->s_q, .h_q = cfg->h_q, .topk = cfg->topk,
        .extra_topk = cfg->extra_topk, .page_size = cfg->page, .extra_page_size = cfg->extra_page,
        .seqlen = cfg->seqlen, .extra_seqlen = cfg->extra_seqlen, .with_sink = cfg->sink,
        .seed = 1000 + (uint64_t)cfg->b * 7 + (uint64_t)cfg->h_q,
    };
    const mlajit_model_desc *m = mlajit_synth_desc(&sp);
    if (!m)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "bench: the row's layout is not valid");
    mlajit_case c;
    int rc = mlajit_case_synthesize(&sp, &c);
    if (rc)
        return rc;
    mlajit_kernel_spec spec = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_decode_shape shape = MLAJIT_DECODE_SHAPE_INIT;
    mlajit_case_spec(&c, &spec);
    spec.tile = variant->tile;
    spec.heads_per_cta = variant->heads_per_cta;
    spec.variant = variant->variant;
    mlajit_case_shape(&c, &shape);
    if (variant->splits)
        shape.num_splits = variant->splits;
    mlajit_plan *plan = NULL;
    mlajit_device_case dc = {0};
    const mlajit_driver *drv = mlajit_context_driver(ctx);
    CUstream stream = NULL;
    CUevent ev0 = NULL, ev1 = NULL;
    int pushed = mlajit_context_enter(ctx);
    float samples[100];
    if ((rc = mlajit_plan_create(ctx, &spec, &shape, &plan)) || (rc = mlajit_device_case_upload(ctx, &c, NULL, &dc)))
        goto done;
    size_t ws = mlajit_plan_workspace_size(plan);
    if (ws && (rc = mlajit_device_case_alloc(&dc, ws, &dc.args.workspace)))
        goto done;
    dc.args.workspace_size = ws;
    out->splits = mlajit_plan_num_splits(plan);
    out->kernel = *mlajit_plan_report(plan);
    mlajit_plan_outline outline = MLAJIT_PLAN_OUTLINE_INIT;
    out->tactic = mlajit_plan_get_outline(plan, &outline) == MLAJIT_OK ? outline.tactic : MLAJIT_TACTIC_RULES;
    CUresult r;
    if ((r = drv->cuStreamCreate(&stream, MLAJIT_CU_STREAM_NON_BLOCKING)) || (r = drv->cuEventCreate(&ev0, 0)) ||
        (r = drv->cuEventCreate(&ev1, 0))) {
        rc = mlajit_cuda_fail(drv, r, "stream/event create");
        goto done;
    }
    /* correctness first */
    if ((rc = mlajit_decode(plan, &dc.args, stream)) || (rc = check_rows(&dc, &c, &out->pass, &out->max_err)))
        goto done;
    /* eager: 20 warm-up calls, then 100 timed one by one */
    for (int i = 0; i < 20; i++)
        if ((rc = mlajit_decode(plan, &dc.args, stream)))
            goto done;
    float host_samples[100];
    for (int i = 0; i < 100; i++) {
        drv->cuEventRecord(ev0, stream);
        double t0 = mlajit_now_ms();
        if ((rc = mlajit_decode(plan, &dc.args, stream)))
            goto done;
        host_samples[i] = (float)(mlajit_now_ms() - t0);
        drv->cuEventRecord(ev1, stream);
        drv->cuEventSynchronize(ev1);
        drv->cuEventElapsedTime(&samples[i], ev0, ev1);
    }
    out->eager_us = median(samples, 100) * 1e3;
    out->host_us = median(host_samples, 100) * 1e3;
    /* graph: 10 calls captured, 20 replays timed (timing.c) */
    if ((rc = mlajit_time_plan_graph(ctx, plan, &dc.args, 1, 10, 20, stream, &out->gpu_us)))
        goto done;
    /* BENCH.md's columns: GB/s of the cache bytes gathered (the layouts table adds q and out) */
    mlajit_work_count(m, cfg->h_q, cfg->b, cfg->s_q, cfg->topk, cfg->extra_topk, &out->work);
    out->tflops = out->work.flop / (out->gpu_us * 1e-6) / 1e12;
    out->gbps = out->work.kv_bytes / (out->gpu_us * 1e-6) / 1e9;
done:
    if (ev0) drv->cuEventDestroy(ev0);
    if (ev1) drv->cuEventDestroy(ev1);
    if (stream) drv->cuStreamDestroy(stream);
    mlajit_context_leave(ctx, pushed);
    mlajit_device_case_free(&dc);
    mlajit_plan_destroy(plan);
    mlajit_case_free(&c);
    return rc;
}

/* ---- issue 49: the new layouts beside V3.2 (bench --layouts) --------------------- */

#define LAYOUTS_GOAL 0.85 /* a layout's fraction of the ceiling over V3.2's, at the same heads and b */
#define LAYOUTS_MAX_ROWS (3 * 2 * (1 + 8)) /* heads x b x (V3.2 + at most 8 layouts) */

/* The layouts table's axes and layouts (0: the default axis). */
typedef struct layouts_setup {
    cli_layout_list layouts; /* empty: glm53_nope and dots3_swa */
    int heads, batch, topk, seqlen;
} layouts_setup;

/* What a bench run holds: the GPU's context, the JSON file (NULL without --json),
 * and the commit and date every JSON line carries. */
typedef struct bench_session {
    mlajit_context *ctx;
    FILE *json;
    const char *commit;
    char date[32];
} bench_session;

static int bench_session_open(const char *json_path, bench_session *bs)
{
    mlajit_context_info info;
    memset(bs, 0, sizeof *bs);
    int rc = cli_gpu_context("bench", NULL, &bs->ctx, &info);
    if (rc != CLI_OK)
        return rc;
    if (json_path && !(bs->json = fopen(json_path, "w"))) {
        fprintf(stderr, "mlajit: bench: cannot write %s\n", json_path);
        mlajit_context_destroy(bs->ctx);
        return CLI_FAIL;
    }
    bs->commit = getenv("MLAJIT_COMMIT") ? getenv("MLAJIT_COMMIT") : "unknown";
    time_t now = time(NULL);
    strftime(bs->date, sizeof bs->date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    return CLI_OK;
}

static void bench_session_close(bench_session *bs)
{
    if (bs->json)
        fclose(bs->json);
    mlajit_context_destroy(bs->ctx);
}

static const mlajit_model_desc *config_desc(const bench_config *cf)
{
    return cf->model == MLAJIT_MODEL_CUSTOM ? mlajit_layout_describe(&cf->layout) : mlajit_model_describe(cf->model);
}

/* A row's layout as the table names it: the model's name, else the canonical string. */
static void config_layout_name(const bench_config *cf, char *buf, size_t len)
{
    if (cf->model != MLAJIT_MODEL_CUSTOM || mlajit_layout_string(&cf->layout, buf, len) != MLAJIT_OK)
        snprintf(buf, len, "%s", config_desc(cf)->name);
}

/* Per (heads, b): the V3.2 row, then each layout's. A layout equal to a named
 * model's runs as that model (the same spec, kernel and cache key). */
static int layouts_rows(const layouts_setup *ls, bench_config *out, int max, int *group)
{
    static const int heads_def[] = {16, 64, 128}, batch_def[] = {64, 128};
    mlajit_layout defaults[2];
    const mlajit_layout *lays = ls->layouts.layouts;
    int n_lays = ls->layouts.count;
    if (!n_lays) {
        if (mlajit_layout_parse("glm53_nope", &defaults[0]) || mlajit_layout_parse("dots3_swa", &defaults[1]))
            return -1;
        lays = defaults;
        n_lays = 2;
    }
    const int *heads = ls->heads ? &ls->heads : heads_def, *batch = ls->batch ? &ls->batch : batch_def;
    const int nh = ls->heads ? 1 : 3, nb = ls->batch ? 1 : 2;
    const int topk = ls->topk ? ls->topk : 2048, seqlen = ls->seqlen ? ls->seqlen : 32768;
    int n = 0;
    *group = 1 + n_lays; /* row i is its group's V3.2 row where i % group == 0 */
    for (int i = 0; i < nh; i++)
        for (int j = 0; j < nb; j++)
            for (int k = -1; k < n_lays && n < max; k++) {
                bench_config c = {MLAJIT_MODEL_V32, heads[i], batch[j], 1, seqlen, topk, 0, 0, 64, 0, 0, 0, {0}};
                if (k >= 0) {
                    const mlajit_model_desc *d = mlajit_layout_describe(&lays[k]);
                    c.model = d ? d->model : MLAJIT_MODEL_CUSTOM;
                    if (c.model == MLAJIT_MODEL_CUSTOM)
                        c.layout = lays[k];
                }
                out[n++] = c;
            }
    return n;
}

/* The columns every row of the table computes: throughput over every byte the
 * call moves (the rows gathered, q, out and lse) and the fraction of the
 * H200's ceiling (work.c). */
typedef struct layouts_figures {
    mlajit_work work;
    double bytes, ceiling_us, fraction, tflops, gbps;
    int memory_bound;
} layouts_figures;

static void layouts_figure(const bench_config *cf, double gpu_us, layouts_figures *f)
{
    *f = (layouts_figures){0};
    mlajit_work_count(config_desc(cf), cf->h_q, cf->b, cf->s_q, cf->topk, cf->extra_topk, &f->work);
    f->bytes = mlajit_work_bytes(&f->work);
    f->ceiling_us = mlajit_ceiling_us(f->work.flop, f->bytes, &f->memory_bound);
    if (gpu_us > 0) {
        f->fraction = f->ceiling_us / gpu_us;
        f->tflops = f->work.flop / (gpu_us * 1e-6) / 1e12;
        f->gbps = f->bytes / (gpu_us * 1e-6) / 1e9;
    }
}

/* The layout column's width: the longest name (a custom layout's canonical string) */
static int layouts_name_width(const bench_config *cfgs, int n)
{
    int w = 12;
    for (int i = 0; i < n; i++) {
        char name[160];
        config_layout_name(&cfgs[i], name, sizeof name);
        w = (int)strlen(name) > w ? (int)strlen(name) : w;
    }
    return w;
}

/* --dry-run: the rows and their work, no GPU */
static int print_layouts_work(const bench_config *cfgs, int n)
{
    const int nw = layouts_name_width(cfgs, n);
    printf("%-*s %4s %4s %5s %6s %9s %9s %9s %7s %10s\n", nw, "layout", "h_q", "b", "topk", "seqlen", "GFLOP", "kv_MB",
           "q+out_MB", "bound", "ceiling_us");
    for (int i = 0; i < n; i++) {
        char name[160];
        layouts_figures f;
        config_layout_name(&cfgs[i], name, sizeof name);
        layouts_figure(&cfgs[i], 0, &f);
        printf("%-*s %4d %4d %5d %6d %9.3f %9.3f %9.3f %7s %10.2f\n", nw, name, cfgs[i].h_q, cfgs[i].b, cfgs[i].topk,
               cfgs[i].seqlen, f.work.flop / 1e9, f.work.kv_bytes / 1e6, (f.work.q_bytes + f.work.out_bytes) / 1e6,
               f.memory_bound ? "memory" : "compute", f.ceiling_us);
    }
    printf("ceilings (docs/BENCH.md, H200): HBM %.2f TB/s, bf16 %.0f TFLOP/s; goal: a layout's fraction >= %.2f "
           "of V3.2's at the same heads and b\n", MLAJIT_H200_HBM_BYTES_PER_S / 1e12, MLAJIT_H200_BF16_FLOPS / 1e12,
           LAYOUTS_GOAL);
    return CLI_OK;
}

static int bench_layouts(const layouts_setup *ls, const bench_variant *variant, int dry_run, int shapes,
                         const char *json_path)
{
    bench_config cfgs[LAYOUTS_MAX_ROWS];
    int group = 1, n = layouts_rows(ls, cfgs, LAYOUTS_MAX_ROWS, &group);
    if (n < 0)
        return cli_error(MLAJIT_ERR_INTERNAL, "bench --layouts");
    if (shapes)
        return print_shape_lines(cfgs, n);
    if (dry_run)
        return print_layouts_work(cfgs, n);
    bench_session bs;
    int rc = bench_session_open(json_path, &bs);
    if (rc != CLI_OK)
        return rc;
    const int nw = layouts_name_width(cfgs, n);
    printf("%-*s %4s %4s %5s %9s %9s %8s %8s %7s %8s %8s %6s %5s %6s %s\n", nw, "layout", "h_q", "b", "topk", "gpu_us",
           "eager_us", "TFLOP/s", "GB/s", "bound", "of_ceil", "v32_ceil", "ratio", "goal", "splits", "check");
    int failures = 0, goal_rows = 0, goal_met = 0;
    double v32_fraction = 0, v32_us = 0; /* the current group's V3.2 row (0: none, or it failed) */
    for (int i = 0; i < n; i++) {
        const bench_config *cf = &cfgs[i];
        const int is_v32 = i % group == 0; /* the baseline (by place: --layout v32 is a layout row too) */
        char name[160];
        config_layout_name(cf, name, sizeof name);
        bench_result r = {0};
        rc = run_config(bs.ctx, cf, variant, &r);
        if (rc == MLAJIT_ERR_UNSUPPORTED && is_v32 && variant->variant != MLAJIT_VARIANT_AUTO) {
            /* a forced variant written for the compared layouts only (sm90-split): the
             * baseline keeps auto's kernel, as its JSON line's kernel says */
            printf("%-*s %4d %4d %5d  (variant %s does not serve it: auto's kernel)\n", nw, name, cf->h_q, cf->b,
                   cf->topk, mlajit_variant_name(variant->variant));
            const bench_variant as_auto = {0, 0, variant->splits, MLAJIT_VARIANT_AUTO};
            rc = run_config(bs.ctx, cf, &as_auto, &r);
        }
        if (is_v32)
            v32_fraction = v32_us = 0;
        goal_rows += !is_v32;
        if (rc) {
            failures++;
            printf("%-*s %4d %4d %5d  error: %s\n", nw, name, cf->h_q, cf->b, cf->topk, mlajit_last_error());
            fflush(stdout);
            continue;
        }
        failures += !r.pass;
        layouts_figures f;
        layouts_figure(cf, r.gpu_us, &f);
        if (is_v32 && r.pass) {
            v32_fraction = f.fraction;
            v32_us = r.gpu_us;
        }
        /* the goal is judged only between rows that both passed their check */
        const int judged = !is_v32 && r.pass && v32_fraction > 0;
        const double ratio = judged ? f.fraction / v32_fraction : 0;
        goal_met += judged && ratio >= LAYOUTS_GOAL;
        char v32_col[16] = "-", ratio_col[16] = "-";
        if (judged) {
            snprintf(v32_col, sizeof v32_col, "%.3f", v32_fraction);
            snprintf(ratio_col, sizeof ratio_col, "%.3f", ratio);
        }
        printf("%-*s %4d %4d %5d %9.2f %9.2f %8.1f %8.0f %7s %8.3f %8s %6s %5s %6d %s (%.1e)\n", nw, name, cf->h_q, cf->b,
               cf->topk, r.gpu_us, r.eager_us, f.tflops, f.gbps, f.memory_bound ? "memory" : "compute", f.fraction,
               v32_col, ratio_col, is_v32 ? "-" : !judged ? "?" : ratio >= LAYOUTS_GOAL ? "met" : "MISS", r.splits,
               r.pass ? "ok" : "FAIL", r.max_err);
        fflush(stdout);
        if (bs.json) { /* flushed per row: a run cut short keeps every row it finished */
            const mlajit_model_desc *d = config_desc(cf);
            char canon[160] = "", base[96] = "null";
            mlajit_layout lay = cf->layout;
            if (cf->model != MLAJIT_MODEL_CUSTOM)
                mlajit_model_layout(cf->model, &lay);
            mlajit_layout_string(&lay, canon, sizeof canon);
            if (judged)
                snprintf(base, sizeof base,
                         "{\"gpu_us\": %.2f, \"ceiling_fraction\": %.4f, \"fraction_ratio\": %.4f, \"meets_goal\": %s}",
                         v32_us, v32_fraction, ratio, ratio >= LAYOUTS_GOAL ? "true" : "false");
            fprintf(bs.json,
                    "{\"table\": \"layouts\", \"role\": \"%s\", \"layout\": \"%s\", \"layout_string\": \"%s\", "
                    "\"d_qk\": %d, "
                    "\"d_v\": %d, \"bytes_per_token\": %d, \"h_q\": %d, \"b\": %d, \"s_q\": %d, \"seqlen\": %d, "
                    "\"topk\": %d, \"page_size\": %d, \"gpu_us\": %.2f, \"eager_us\": %.2f, \"host_us\": %.2f, "
                    "\"gflop\": %.4f, \"mbytes\": %.4f, \"kv_mbytes\": %.4f, \"tflops\": %.2f, \"gbps\": %.1f, "
                    "\"bound\": \"%s\", \"ceiling_us\": %.3f, \"ceiling_fraction\": %.4f, \"v32\": %s, "
                    "\"goal\": %.2f, \"splits\": %d, \"kernel\": \"%s\", \"tactic\": \"%s\", \"check\": \"%s\", "
                    "\"commit\": \"%s\", \"date\": \"%s\"}\n",
                    is_v32 ? "baseline" : "layout", name, canon, d->d_qk, d->d_v, d->bytes_per_token, cf->h_q, cf->b, cf->s_q, cf->seqlen, cf->topk,
                    cf->page, r.gpu_us, r.eager_us, r.host_us, f.work.flop / 1e9, f.bytes / 1e6,
                    f.work.kv_bytes / 1e6, f.tflops, f.gbps, f.memory_bound ? "memory" : "compute", f.ceiling_us,
                    f.fraction, base, LAYOUTS_GOAL, r.splits, r.kernel.spec, mlajit_tactic_source_name(r.tactic),
                    r.pass ? "pass" : "fail", bs.commit, bs.date);
            fflush(bs.json);
        }
    }
    bench_session_close(&bs);
    printf("%d configurations, %d failed; goal (a layout's fraction of the ceiling >= %.2f x V3.2's): met by %d of %d "
           "layout rows\n", n, failures, LAYOUTS_GOAL, goal_met, goal_rows);
    return failures ? CLI_FAIL : CLI_OK;
}

int cli_bench(int argc, char **argv)
{
    const char *json_path = NULL;
    int quick = 0, print_shapes = 0, only_heads = 0, only_batch = 0, only_topk = 0;
    int only_model = -1; /* -1: every model's rows */
    bench_variant variant = {0, 0, 0, MLAJIT_VARIANT_AUTO};
    static const char usage[] =
        "usage: mlajit bench [--json FILE] [--quick] [--model M] [--heads N] [--batch N] [--topk N]\n"
        "                    [--tile T] [--heads-per-cta H] [--splits S] [--variant V]\n"
        "       mlajit bench --layouts [--layout L]... [--heads N] [--batch N] [--topk N] [--seqlen N]\n"
        "                    [--dry-run] [--json FILE] [--tile T] [--heads-per-cta H] [--splits S] [--variant V]\n"
        "  docs/BENCH.md's protocol on the GPU: per row, GPU time (CUDA-graph replay), eager time,\n"
        "  the host's time in the call, TFLOP/s, GB/s, FlashMLA's figure and the ratio; every row\n"
        "  checked against the fp64 reference (exit 1 when one fails)\n"
        "  --json FILE  the rows as JSON lines too, with the commit (MLAJIT_COMMIT) and date\n"
        "  --variant V  " MLAJIT_VARIANT_NAMES "\n"
        "               (with --layouts, a V3.2 baseline row that V does not serve runs auto's kernel)\n"
        "  --quick      h_q 16/64/128 and the larger V3.2 rows only\n"
        "  --model M    only model M's rows: v32 or dsv4 (for profilers)\n"
        "  --heads/--batch/--topk N   only the rows with that value (for profilers); a head count\n"
        "               BENCH.md has no row for runs the next larger one's rows at N heads\n"
        "  --tile/--heads-per-cta N   force a kernel variant on every row (compare variants)\n"
        "  --splits S   force S split-KV splits on every row (at most the row's tiles)\n"
        "  --shapes     print the rows (with --quick, the quick ones; with --layouts, those) as\n"
        "               `mlajit tune --sweep` shape lines and stop; needs no GPU\n"
        "  --layouts    issue 49's table: glm53_nope and dots3_swa beside V3.2 at heads 16/64/128,\n"
        "               b 64/128, topk 2048 (seqlen 32768, page 64); per row TFLOP/s and GB/s over\n"
        "               every byte moved (rows gathered + q + out), the fraction of the H200's\n"
        "               ceiling (HBM 4.25 TB/s or bf16 786 TFLOP/s, whichever bounds the row) and\n"
        "               its ratio to V3.2's fraction, against the goal >= 0.85\n"
        "  --layout L   with --layouts (implied): compare L instead of the two named layouts;\n"
        "               repeatable, up to 8 (a model name, inline keys, a JSON file or a canonical\n"
        "               string: docs/layouts.md)\n"
        "  --heads/--batch/--topk N   with --layouts: that value instead of the axis\n"
        "  --seqlen N   with --layouts: tokens per sequence (default 32768; at least topk)\n"
        "  --dry-run    with --layouts: print the rows' FLOPs, bytes, bound and the ceiling's\n"
        "               time and stop; needs no GPU\n";
    mlajit_model model = MLAJIT_MODEL_V32;
    int model_given = 0, layouts = 0, dry_run = 0, seqlen = 0, quick_given = 0;
    layouts_setup ls = {.layouts.count = 0};
    const cli_option options[] = {
        {"--json", CLI_STRING, .target = &json_path},
        {"--quick", CLI_FLAG, .target = &quick, .given = &quick_given},
        {"--layouts", CLI_FLAG, .target = &layouts},
        {"--layout", CLI_CUSTOM, &ls.layouts, .parse = cli_add_layout},
        {"--seqlen", CLI_INT, &seqlen, .lo = 1, .hi = 1 << 24},
        {"--dry-run", CLI_FLAG, .target = &dry_run},
        {"--shapes", CLI_FLAG, .target = &print_shapes},
        {"--model", CLI_CUSTOM, &model, .parse = cli_parse_model, .given = &model_given},
        {"--heads", CLI_INT, &only_heads, .lo = 1, .hi = MLAJIT_MAX_HEADS},
        {"--batch", CLI_INT, &only_batch, .lo = 1, .hi = MLAJIT_MAX_BATCH},
        {"--topk", CLI_INT, &only_topk, .lo = 1, .hi = MLAJIT_MAX_TOPK},
        {"--tile", CLI_INT, &variant.tile, .lo = 0, .hi = 64},
        {"--heads-per-cta", CLI_INT, &variant.heads_per_cta, .lo = 0, .hi = 64},
        {"--splits", CLI_INT, &variant.splits, .lo = 0, .hi = MLAJIT_MAX_SPLITS},
        {"--variant", CLI_CUSTOM, &variant.variant, .parse = cli_parse_variant},
    };
    const cli_command cmd = {"bench", usage, options, sizeof options / sizeof options[0], 0, 0, NULL};
    int n_operands, parsed = cli_parse(&cmd, argc, argv, &n_operands);
    if (parsed != CLI_PARSED)
        return parsed;
    layouts |= ls.layouts.count > 0; /* --layout implies the layouts table */
    if (layouts) {
        if (model_given || quick_given || (print_shapes && dry_run))
            return cli_usage_error(&cmd, "%s does not go with --layouts (its rows are issue 49's; --dry-run lists "
                                   "their work, --shapes their shape lines)",
                                   model_given ? "--model" : quick_given ? "--quick" : "--shapes with --dry-run");
        const int topk = only_topk ? only_topk : 2048, len = seqlen ? seqlen : 32768;
        if (len < topk)
            return cli_usage_error(&cmd, "--seqlen = %d; allowed at least the rows' topk (%d)", len, topk);
        ls.heads = only_heads;
        ls.batch = only_batch;
        ls.topk = only_topk;
        ls.seqlen = seqlen;
        return bench_layouts(&ls, &variant, dry_run, print_shapes, json_path);
    }
    if (seqlen || dry_run)
        return cli_usage_error(&cmd, "%s goes with --layouts only", seqlen ? "--seqlen" : "--dry-run");
    if (model_given) {
        if (model != MLAJIT_MODEL_V32 && model != MLAJIT_MODEL_DSV4)
            return cli_usage_error(&cmd, "--model = '%s'; allowed: v32, dsv4 (the models BENCH.md has rows for)",
                                   mlajit_model_describe(model)->name);
        only_model = (int)model;
    }
    if (print_shapes)
        return print_bench_shapes(quick);
    bench_session bs;
    int rc = bench_session_open(json_path, &bs);
    if (rc != CLI_OK)
        return rc;
    bench_config cfgs[96];
    int all = build_configs(cfgs, 96, quick), n = 0;
    /* --heads N where BENCH.md has no row: the rows of the next head count it has
     * (8 for 1-7, ...) run at N heads, against that row's figure (what an engine
     * pays after padding N up) */
    int row_heads = 0;
    if (only_heads)
        for (int i = 0; i < all; i++)
            if (cfgs[i].h_q >= only_heads && (!row_heads || cfgs[i].h_q < row_heads))
                row_heads = cfgs[i].h_q;
    for (int i = 0; i < all; i++)
        if ((only_model < 0 || (int)cfgs[i].model == only_model) && (!only_heads || cfgs[i].h_q == row_heads) &&
            (!only_batch || cfgs[i].b == only_batch) && (!only_topk || cfgs[i].topk == only_topk)) {
            cfgs[n] = cfgs[i];
            if (only_heads)
                cfgs[n].h_q = only_heads;
            n++;
        }
    printf("%-5s %4s %4s %3s %6s %5s %6s %9s %9s %8s %8s %8s %6s %9s %6s %s\n", "model", "h_q", "b", "s_q", "seqlen",
           "topk", "extra", "gpu_us", "eager_us", "host_us", "TFLOP/s", "GB/s", "splits", "flashmla", "ratio", "check");
    int failures = 0;
    char compiled[96][128]; /* kernels compiled cold during this run, for the summary */
    double compile_ms[96];
    int n_compiled = 0;
    for (int i = 0; i < n; i++) {
        bench_config *cf = &cfgs[i];
        bench_result r = {0};
        rc = run_config(bs.ctx, cf, &variant, &r);
        const char *name = mlajit_model_describe(cf->model)->name;
        if (rc) {
            failures++;
            printf("%-5s %4d %4d %3d %6d %5d %6d  error: %s\n", name, cf->h_q, cf->b, cf->s_q, cf->seqlen, cf->topk,
                   cf->extra_topk, mlajit_last_error());
            continue;
        }
        failures += !r.pass;
        int seen = 0;
        for (int k = 0; k < n_compiled; k++)
            seen |= strcmp(compiled[k], r.kernel.spec) == 0;
        if (!r.kernel.cache_hit && !seen && n_compiled < 96) {
            snprintf(compiled[n_compiled], sizeof compiled[0], "%s", r.kernel.spec);
            compile_ms[n_compiled++] = r.kernel.compile_ms;
        }
        printf("%-5s %4d %4d %3d %6d %5d %6d %9.1f %9.1f %8.2f %8.1f %8.0f %6d %9.1f %6.2f %s (%.1e)\n", name, cf->h_q,
               cf->b, cf->s_q, cf->seqlen, cf->topk, cf->extra_topk, r.gpu_us, r.eager_us, r.host_us, r.tflops, r.gbps,
               r.splits,
               cf->flashmla_us, cf->flashmla_us > 0 ? r.gpu_us / cf->flashmla_us : 0.0, r.pass ? "ok" : "FAIL",
               r.max_err);
        fflush(stdout);
        if (bs.json) { /* flushed per row: a run cut short keeps every row it finished */
            fprintf(bs.json,
                    "{\"model\": \"%s\", \"h_q\": %d, \"b\": %d, \"s_q\": %d, \"seqlen\": %d, \"topk\": %d, "
                    "\"extra_topk\": %d, \"gpu_us\": %.2f, \"eager_us\": %.2f, \"host_us\": %.2f, \"tflops\": %.2f, "
                    "\"gbps\": %.1f, "
                    "\"splits\": %d, \"kernel\": \"%s\", \"tactic\": \"%s\", \"flashmla_us\": %.1f, "
                    "\"ratio\": %.3f, \"check\": \"%s\", \"commit\": \"%s\", \"date\": \"%s\"}\n",
                    name, cf->h_q, cf->b, cf->s_q, cf->seqlen, cf->topk, cf->extra_topk, r.gpu_us, r.eager_us,
                    r.host_us, r.tflops, r.gbps, r.splits, r.kernel.spec, mlajit_tactic_source_name(r.tactic),
                    cf->flashmla_us,
                    cf->flashmla_us > 0 ? r.gpu_us / cf->flashmla_us : 0.0, r.pass ? "pass" : "fail", bs.commit, bs.date);
            fflush(bs.json);
        }
    }
    bench_session_close(&bs);
    if (n_compiled) {
        printf("\nkernels compiled cold by NVRTC during this run:\n");
        for (int i = 0; i < n_compiled; i++)
            printf("  %-52s %7.0f ms\n", compiled[i], compile_ms[i]);
    }
    printf("%d configurations, %d failed\n", n, failures);
    return failures ? CLI_FAIL : CLI_OK;
}
