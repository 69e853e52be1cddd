/* The tuner (src/harness/tune.c): the candidates of a bucket, exactly; the
 * budget; and, on the fake driver (tests/fake_cuda: kernels launch and run
 * nothing), the timing loop end to end: with the reference check skipped it
 * stores one record per bucket that mlajit_tactic_lookup finds, with the check
 * on (which nothing the fake driver "computes" passes) it stores none. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "common/error.h"
#include "harness/harness.h"
#include "mlajit.h"
#include "runtime/runtime.h"
#include "temp_tree.h"

static char root[64];

static void make_root(void)
{
    strcpy(root, "/tmp/mlajit-tune-XXXXXX");
    cr_assert_not_null(mkdtemp(root));
    unsetenv("MLAJIT_PACKS");
    unsetenv("MLAJIT_DISABLE_JIT");
}

static void remove_root(void) { temp_tree_remove(root); }

TestSuite(candidates);
TestSuite(tune, .init = make_root, .fini = remove_root, .timeout = 240);

typedef struct expected {
    const char *kernel;
    int num_splits, grid_splits, is_rules;
} expected;

static void check_candidates(mlajit_model model, int h_q, int rows, int topk, const expected *want, int n_want)
{
    mlajit_kernel_spec spec = MLAJIT_KERNEL_SPEC_INIT;
    spec.model = model;
    spec.h_q = h_q;
    spec.page_size = 64;
    strcpy(spec.arch, "sm_90a");
    mlajit_decode_shape shape = MLAJIT_DECODE_SHAPE_INIT;
    shape.batch = rows;
    shape.s_q = 1;
    shape.topk = topk;
    mlajit_tune_candidate c[MLAJIT_TUNE_MAX_CANDIDATES];
    int n = -1;
    cr_assert_eq(mlajit_tune_candidates(&spec, &shape, 132, c, MLAJIT_TUNE_MAX_CANDIDATES, &n), MLAJIT_OK, "%s",
                 mlajit_last_error());
    for (int i = 0; i < n && i < n_want; i++) {
        cr_expect_str_eq(c[i].kernel, want[i].kernel, "candidate %d", i);
        cr_expect_eq(c[i].num_splits, want[i].num_splits, "candidate %d (%s): splits %d", i, c[i].kernel,
                     c[i].num_splits);
        cr_expect_eq(c[i].grid_splits, want[i].grid_splits, "candidate %d (%s): grid splits %d", i, c[i].kernel,
                     c[i].grid_splits);
        cr_expect_eq(c[i].is_rules, want[i].is_rules, "candidate %d", i);
    }
    cr_assert_eq(n, n_want, "%d candidates, expected %d", n, n_want);
}

#define N16 "v32.h16.p64.t64.hc16.sm90-narrow.sm_90a"
#define L16 "v32.h16.p64.t64.hc16.sm90-narrow-long.sm_90a"
#define S8 "v32.h16.p64.t64.hc8.sm90-narrow.sm_90a"

/* V3.2 h16, 64 rows, topk 512 (8 tiles): the rules' sm90-narrow at its planner's
 * 2 splits; auto's own kernel is the rules'; the long walk and the head split
 * at their own and 1, 2, 4, 8 splits, each grid once. */
Test(candidates, v32_h16_rows64_topk512)
{
    static const expected want[] = {
        {N16, 0, 2, 1}, {N16, 1, 1, 0}, {N16, 4, 4, 0}, {N16, 8, 8, 0},
        {L16, 0, 2, 0}, {L16, 1, 1, 0}, {L16, 4, 4, 0}, {L16, 8, 8, 0},
        {S8, 0, 1, 0},  {S8, 2, 2, 0},  {S8, 4, 4, 0},  {S8, 8, 8, 0},
    };
    check_candidates(MLAJIT_MODEL_V32, 16, 64, 512, want, sizeof want / sizeof want[0]);
}

#define STAGED "v32.h128.p64.t64.hc64.sm90-staged.sm_90a"
#define SM90 "v32.h128.p64.t64.hc64.sm90.sm_90a"
#define N128_16 "v32.h128.p64.t64.hc16.sm90-narrow.sm_90a"
#define N128_32 "v32.h128.p64.t64.hc32.sm90-narrow.sm_90a"

/* V3.2 h128, 64 rows, topk 512: the rules take sm90-staged, which never splits,
 * so it is one candidate; sm90 (auto's own), the head split and the head groups
 * each at their own and 2, 4, 8 splits. */
Test(candidates, v32_h128_rows64_topk512_staged_gets_no_splits)
{
    static const expected want[] = {
        {STAGED, 0, 1, 1},
        {SM90, 0, 1, 0},     {SM90, 2, 2, 0},     {SM90, 4, 4, 0},     {SM90, 8, 8, 0},
        {N128_16, 0, 1, 0},  {N128_16, 2, 2, 0},  {N128_16, 4, 4, 0},  {N128_16, 8, 8, 0},
        {N128_32, 0, 1, 0},  {N128_32, 2, 2, 0},  {N128_32, 4, 4, 0},  {N128_32, 8, 8, 0},
    };
    check_candidates(MLAJIT_MODEL_V32, 128, 64, 512, want, sizeof want / sizeof want[0]);
}

/* Splits stop at the kernel's tiles: topk 128 is 2 tiles of 64. */
Test(candidates, splits_stop_at_the_tiles)
{
    mlajit_kernel_spec spec = MLAJIT_KERNEL_SPEC_INIT;
    spec.model = MLAJIT_MODEL_V32;
    spec.h_q = 64;
    spec.page_size = 64;
    strcpy(spec.arch, "sm_90a");
    mlajit_decode_shape shape = MLAJIT_DECODE_SHAPE_INIT;
    shape.batch = 1;
    shape.s_q = 1;
    shape.topk = 128;
    mlajit_tune_candidate c[MLAJIT_TUNE_MAX_CANDIDATES];
    int n = 0;
    cr_assert_eq(mlajit_tune_candidates(&spec, &shape, 132, c, MLAJIT_TUNE_MAX_CANDIDATES, &n), MLAJIT_OK);
    cr_assert_gt(n, 1);
    for (int i = 0; i < n; i++) {
        cr_expect_leq(c[i].num_splits, 2, "%s asks %d splits of 2 tiles", c[i].kernel, c[i].num_splits);
        cr_expect_leq(c[i].grid_splits, 2, "%s", c[i].kernel);
        if (strstr(c[i].kernel, "sm90-staged"))
            cr_expect_eq(c[i].num_splits, 0, "sm90-staged never splits");
    }
}

/* ---- the loop on the fake driver ---------------------------------------------- */

static const mlajit_model models[] = {MLAJIT_MODEL_V32};
static const int heads[] = {16}, pages[] = {64}, topks[] = {128, 256}, rows_[] = {1, 2};

static mlajit_tune_envelope small_envelope(void)
{
    return (mlajit_tune_envelope){.models = models, .num_models = 1, .heads = heads, .num_heads = 1,
                                  .pages = pages, .num_pages = 1, .topks = topks, .num_topks = 2,
                                  .rows = rows_, .num_rows = 2};
}

static mlajit_context *gpu_context(void)
{
    mlajit_context_options o = MLAJIT_CONTEXT_OPTIONS_INIT;
    o.cache_dir = root;
    o.packs = "";
    mlajit_context *ctx = NULL;
    cr_assert_eq(mlajit_context_create(&o, &ctx), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    cr_assert(info.has_device, "the fake driver gives a device: %s", info.no_device_reason);
    return ctx;
}

static int records_found_for(mlajit_context *ctx, const mlajit_kernel_spec *spec)
{
    int found = 0;
    for (int t = 0; t < 2; t++)
        for (int r = 0; r < 2; r++) {
            mlajit_decode_shape shape = MLAJIT_DECODE_SHAPE_INIT;
            shape.batch = rows_[r];
            shape.s_q = 1;
            shape.topk = topks[t];
            mlajit_tactic_match m;
            cr_assert_eq(mlajit_tactic_lookup(ctx, spec, &shape, &m), MLAJIT_OK, "%s", mlajit_last_error());
            if (m.found && m.exact)
                found++;
        }
    return found;
}

static int records_found(mlajit_context *ctx)
{
    mlajit_kernel_spec spec = MLAJIT_KERNEL_SPEC_INIT;
    spec.model = MLAJIT_MODEL_V32;
    spec.h_q = 16;
    spec.page_size = 64;
    return records_found_for(ctx, &spec);
}

static mlajit_tune_options fake_options(double seconds, int skip_check)
{
    /* the pool copied twice: rows draw from both copies */
    return (mlajit_tune_options){.seconds = seconds, .skip_check = skip_check, .pool_bytes = 8 << 20,
                                 .spread_bytes = 20 << 20, .replays = 3};
}

Test(tune, unchecked_winners_are_stored_one_per_bucket_and_found)
{
    mlajit_context *ctx = gpu_context();
    mlajit_tune_envelope env = small_envelope();
    mlajit_tune_options o = fake_options(600, 1);
    mlajit_tune_summary s;
    cr_assert_eq(mlajit_tune_run(ctx, &env, &o, &s), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(s.buckets, 4);
    cr_expect_eq(s.buckets_done, 4);
    cr_expect_eq(s.stored, 4);
    cr_expect_eq(s.deadline_hit, 0);
    cr_expect_geq(s.timed, 4);
    cr_expect_eq(records_found(ctx), 4);
    /* every kernel was compiled up front, in parallel: the timing loop compiled none */
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    cr_expect_gt(s.compiled, 1);
    cr_expect_eq(info.compiles, s.compiled, "%lld compiles, %d acquired up front", (long long)info.compiles,
                 s.compiled);
    mlajit_context_destroy(ctx);
}

/* A second run over a cache that holds the first one's records still times the
 * rules as its rules' candidate (the tuner plans its candidates without tactics,
 * and leaves the context's setting as it was). */
static double json_number(const char *line, const char *key)
{
    const char *p = strstr(line, key);
    cr_assert_not_null(p, "no %s in %s", key, line);
    return strtod(p + strlen(key), NULL);
}

/* Each bucket's JSON line: tuned_us is the time of the plan the record gives
 * (the rules' where it follows them), best_us the fastest candidate's; with the
 * check skipped every candidate passes, so the fastest is fastest_us. The fake
 * driver's times are host noise, so which buckets the rules keep varies (a
 * run may have none): the relations hold on every line, and the choice itself
 * is pinned by the scripted test above. */
Test(tune, the_json_line_gives_the_records_time_and_the_fastest_apart)
{
    mlajit_context *ctx = gpu_context();
    mlajit_tune_envelope env = small_envelope();
    mlajit_tune_options o = fake_options(600, 1);
    FILE *json = tmpfile();
    o.json = json;
    mlajit_tune_summary s;
    cr_assert_eq(mlajit_tune_run(ctx, &env, &o, &s), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(s.stored, 4);
    rewind(json);
    char line[2048];
    int lines = 0;
    while (fgets(line, sizeof line, json)) {
        lines++;
        double tuned = json_number(line, "\"tuned_us\": "), best = json_number(line, "\"best_us\": ");
        double rules = json_number(line, "\"rules_us\": "), fastest = json_number(line, "\"fastest_us\": ");
        cr_expect_eq(best, fastest, "line %d: best_us is the fastest candidate: %s", lines, line);
        cr_expect_leq(best, tuned, "line %d: %s", lines, line);
        if (strstr(line, "\"follows_rules\": true"))
            cr_expect_eq(tuned, rules, "line %d: a record of the rules gives the rules' time: %s", lines, line);
        else
            cr_expect_eq(tuned, best, "line %d: a record of another plan gives the winner's time: %s", lines, line);
    }
    cr_expect_eq(lines, 4);
    fclose(json);
    mlajit_context_destroy(ctx);
}

/* A custom layout of arbitrary fp32 scales and padded 672-byte rows (the canonical
 * string nope512-rope64-v512-tile128-fp32-inline-row672), no named model's. */
static const char kCustomLayout[] = "d_nope=512,d_rope=64,tile=128,scales=fp32,place=inline,row_bytes=672";

/* Custom layouts are a model axis of their own: with layouts and no models only
 * they are tuned, their records are found under the layout's spec, and a layout
 * equal to a named model's is tuned (and found) as that model. */
Test(tune, custom_layouts_are_tuned_and_found_like_named_models)
{
    mlajit_context *ctx = gpu_context();
    mlajit_layout lay[2];
    cr_assert_eq(mlajit_layout_parse(kCustomLayout, &lay[0]),
                 MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_layout_parse("v32", &lay[1]), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_tune_envelope env = small_envelope();
    env.models = NULL;
    env.num_models = 0;
    env.layouts = lay;
    env.num_layouts = 2;
    mlajit_tune_options o = fake_options(600, 1);
    FILE *json = tmpfile();
    o.json = json;
    mlajit_tune_summary s;
    cr_assert_eq(mlajit_tune_run(ctx, &env, &o, &s), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(s.buckets, 8, "2 layouts x 2 topks x 2 rows");
    cr_expect_eq(s.stored, 8);
    cr_expect_eq(records_found(ctx), 4, "v32's layout tunes as v32: its records are v32's");
    mlajit_kernel_spec custom = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init_layout(&custom, &lay[0], 16, 64), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(records_found_for(ctx, &custom), 4, "the custom layout's 4 buckets have records");
    rewind(json);
    char line[2048];
    int custom_lines = 0, v32_lines = 0;
    while (fgets(line, sizeof line, json)) {
        custom_lines += strstr(line, "\"model\": \"nope512-rope64-v512-tile128-fp32-inline-row672\"") != NULL;
        v32_lines += strstr(line, "\"model\": \"v32\"") != NULL;
    }
    cr_expect_eq(custom_lines, 4, "the JSON names a custom layout by its canonical string");
    cr_expect_eq(v32_lines, 4);
    fclose(json);
    mlajit_context_destroy(ctx);
}

Test(tune, a_bad_layout_in_the_envelope_is_refused_naming_it)
{
    mlajit_layout bad = {0};
    mlajit_tune_envelope env = small_envelope();
    env.layouts = &bad;
    env.num_layouts = 1;
    FILE *list = tmpfile();
    mlajit_tune_options o = {.dry_run = 1, .list = list};
    mlajit_tune_summary s;
    cr_expect_neq(mlajit_tune_run(NULL, &env, &o, &s), MLAJIT_OK);
    cr_expect(strstr(mlajit_last_error(), "layouts[0]") != NULL, "%s", mlajit_last_error());
    fclose(list);
}

Test(tune, a_second_run_times_the_rules_not_the_first_runs_records)
{
    mlajit_context *ctx = gpu_context();
    mlajit_tune_envelope env = small_envelope();
    mlajit_tune_options o = fake_options(600, 1);
    mlajit_tune_summary s;
    cr_assert_eq(mlajit_tune_run(ctx, &env, &o, &s), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(s.stored, 4);
    cr_assert_eq(mlajit_tune_run(ctx, &env, &o, &s), MLAJIT_OK, "second run: %s", mlajit_last_error());
    cr_expect_eq(s.stored, 4);
    cr_expect_eq(mlajit_context_tactics(ctx), 1, "tactics are on again after the run");
    mlajit_context_destroy(ctx);
}

Test(tune, with_the_check_on_nothing_the_fake_driver_runs_is_stored)
{
    mlajit_context *ctx = gpu_context();
    mlajit_tune_envelope env = small_envelope();
    mlajit_tune_options o = fake_options(600, 0);
    mlajit_tune_summary s;
    cr_assert_eq(mlajit_tune_run(ctx, &env, &o, &s), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(s.buckets_done, 4);
    cr_expect_eq(s.stored, 0);
    cr_expect_gt(s.failed_checks, 0);
    cr_expect_eq(records_found(ctx), 0);
    mlajit_context_destroy(ctx);
}

Test(tune, a_zero_second_budget_stores_nothing_and_says_so)
{
    mlajit_context *ctx = gpu_context();
    mlajit_tune_envelope env = small_envelope();
    mlajit_tune_options o = fake_options(0, 1);
    mlajit_tune_summary s;
    cr_assert_eq(mlajit_tune_run(ctx, &env, &o, &s), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(s.buckets, 4);
    cr_expect_eq(s.buckets_done, 0);
    cr_expect_eq(s.stored, 0);
    cr_expect_eq(s.timed, 0);
    cr_expect_eq(s.deadline_hit, 1);
    cr_expect_eq(records_found(ctx), 0);
    mlajit_context_destroy(ctx);
}

Test(tune, a_dry_run_needs_no_device_and_counts_the_candidates)
{
    mlajit_tune_envelope env = small_envelope();
    FILE *list = tmpfile();
    mlajit_tune_options o = {.dry_run = 1, .list = list};
    mlajit_tune_summary s;
    cr_assert_eq(mlajit_tune_run(NULL, &env, &o, &s), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(s.buckets, 4);
    cr_expect_gt(s.candidates, 4);
    cr_expect_eq(s.stored, 0);
    long size = ftell(list);
    cr_expect_gt(size, 0, "the dry run lists the buckets");
    fclose(list);
}

static mlajit_tune_candidate rung(const char *kernel, int splits, int is_rules)
{
    mlajit_tune_candidate c = {.num_splits = splits, .is_rules = is_rules};
    snprintf(c.kernel, sizeof c.kernel, "%s", kernel);
    return c;
}

/* The split ladder: counts are timed until one is slower than the one before
 * by more than 3%; then that kernel's larger counts are skipped, and the next
 * kernel climbs its own. */
/* ---- a bucket's winner, and the times its JSON line reports ------------------- */

typedef struct scripted_checks {
    const int *pass; /* per candidate */
    int asked[8];    /* how often each was checked */
} scripted_checks;

static int scripted_check(void *user, int ci, int *pass)
{
    scripted_checks *s = user;
    s->asked[ci]++;
    *pass = s->pass[ci];
    return MLAJIT_OK;
}

Test(candidates, the_winner_and_its_times_are_the_plan_the_record_gives)
{
    /* candidate 0 is the rules' own plan, as the tuner orders them; -1: not timed in full */
    const struct {
        const char *what;
        double us[4];
        int pass[4], rules_ci;
        int winner;
        double tuned, best, runner_up;
    } cases[] = {
        {"the rules within 1% of a faster one keep the bucket at their own time",
         {10.05, 10.0, 12.0, -1}, {1, 1, 1, 1}, 0, 0, 10.05, 10.0, 10.0},
        {"the rules past 1% lose to the fastest", {10.5, 10.0, 12.0, -1}, {1, 1, 1, 1}, 0, 1, 10.0, 10.0, 10.5},
        {"the fastest failing its check: the next one is the best, the rules within 1% of it win",
         {10.05, 9.0, 10.02, -1}, {1, 0, 1, 1}, 0, 0, 10.05, 10.02, 10.02},
        {"the rules failing their check leave the fastest", {10.05, 10.0, 12.0, -1}, {0, 1, 1, 1}, 0, 1, 10.0, 10.0,
         10.05},
        {"the rules the fastest: tuned and best alike", {9.0, 10.0, -1, 12.0}, {1, 1, 1, 1}, 0, 0, 9.0, 9.0, 10.0},
        {"the rules dropped early (not timed in full)", {-1, 10.0, 10.01, -1}, {1, 1, 1, 1}, -1, 1, 10.0, 10.0, 10.01},
        {"none passes: no winner", {10.0, 11.0, -1, -1}, {0, 0, 1, 1}, 0, -1, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        scripted_checks sc = {.pass = cases[i].pass};
        mlajit_tune_settled st;
        cr_assert_eq(mlajit_tune_settle(cases[i].us, 4, cases[i].rules_ci, scripted_check, &sc, &st), MLAJIT_OK);
        cr_expect_eq(st.winner, cases[i].winner, "%s: winner %d", cases[i].what, st.winner);
        cr_expect_eq(st.tuned_us, cases[i].tuned, "%s: tuned_us %g", cases[i].what, st.tuned_us);
        cr_expect_eq(st.best_us, cases[i].best, "%s: best_us %g", cases[i].what, st.best_us);
        cr_expect_eq(st.runner_up_us, cases[i].runner_up, "%s: runner_up_us %g", cases[i].what, st.runner_up_us);
        for (int c = 0; c < 4; c++)
            cr_expect_leq(sc.asked[c], 1, "%s: candidate %d checked %d times", cases[i].what, c, sc.asked[c]);
    }
}

Test(candidates, a_kernels_split_ladder_stops_at_its_turn)
{
    mlajit_tune_ladder l = {.kernel = ""};
    const struct { mlajit_tune_candidate c; double us; int skipped; } steps[] = {
        {rung(N16, 0, 1), 9.0, 0},  /* the rules' own: off the ladder */
        {rung(N16, 0, 0), 99.0, 0}, /* the planner's own count: off the ladder */
        {rung(N16, 1, 0), 10.0, 0},
        {rung(N16, 2, 0), 8.0, 0},
        {rung(N16, 4, 0), 7.0, 0},
        {rung(N16, 8, 0), 7.2, 0},  /* within 3% of 7.0: noise, not the turn */
        {rung(N16, 16, 0), 7.5, 0}, /* 4% slower than 7.2: the turn */
        {rung(N16, 32, 0), 1.0, 1}, /* past the turn: skipped, whatever it would give */
        {rung(N16, 64, 0), 1.0, 1},
        {rung(L16, 1, 0), 20.0, 0}, /* the next kernel climbs its own */
        {rung(L16, 2, 0), 30.0, 0},
        {rung(L16, 4, 0), 1.0, 1},
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        int skipped = mlajit_tune_ladder_skips(&l, &steps[i].c);
        cr_expect_eq(skipped, steps[i].skipped, "step %zu (%s splits %d): skipped %d", i, steps[i].c.kernel,
                     steps[i].c.num_splits, skipped);
        if (!skipped)
            mlajit_tune_ladder_note(&l, &steps[i].c, steps[i].us);
    }
}

/* ---- the sweep -------------------------------------------------------------- */

static int same_shape(const mlajit_sweep_shape *a, const mlajit_sweep_shape *b)
{
    return a->spec.model == b->spec.model && !memcmp(&a->spec.layout, &b->spec.layout, sizeof a->spec.layout) &&
           a->spec.h_q == b->spec.h_q && a->spec.page_size == b->spec.page_size &&
           a->spec.extra_page_size == b->spec.extra_page_size && a->spec.features == b->spec.features &&
           a->shape.batch == b->shape.batch && a->shape.s_q == b->shape.s_q && a->shape.topk == b->shape.topk &&
           a->shape.extra_topk == b->shape.extra_topk;
}

/* The off-grid draw covers what issue 47 asks for, stays inside its bounds and
 * the envelope, is the same for a seed, and reads back through the parser. */
Test(sweep, the_off_grid_draw_keeps_its_bounds_and_reads_back)
{
    int dsv4 = 0, ragged = 0, s_q_seen[5] = {0}, big_rows = 0, big_topk = 0;
    for (int i = 0; i < 400; i++) {
        mlajit_sweep_shape s, again, back;
        mlajit_sweep_draw(47, i, "sm_90a", &s);
        mlajit_sweep_draw(47, i, "sm_90a", &again);
        cr_assert(same_shape(&s, &again), "draw %d differs between two calls", i);
        const int rows = s.shape.batch * s.shape.s_q;
        cr_assert(s.spec.h_q % 2 == 1 && s.spec.h_q >= 1 && s.spec.h_q <= 127, "draw %d: h_q %d", i, s.spec.h_q);
        cr_assert(s.spec.page_size >= 1 && s.spec.page_size <= 256, "draw %d: page %d", i, s.spec.page_size);
        cr_assert(s.shape.topk >= 1 && s.shape.topk <= 8192, "draw %d: topk %d", i, s.shape.topk);
        cr_assert(s.shape.s_q >= 1 && s.shape.s_q <= 4, "draw %d: s_q %d", i, s.shape.s_q);
        cr_assert(rows >= 1 && rows <= 32768, "draw %d: rows %d", i, rows);
        cr_assert((long long)rows * (s.shape.topk + s.shape.extra_topk) <= (1 << 22) || s.shape.batch == 1,
                  "draw %d: %d rows x %d", i, rows, s.shape.topk + s.shape.extra_topk);
        cr_assert_eq(mlajit_envelope_check_with(&s.spec, &s.shape, NULL), MLAJIT_OK, "draw %d: %s", i,
                     mlajit_last_error());
        if (s.spec.model == MLAJIT_MODEL_DSV4) {
            dsv4++;
            cr_assert(s.shape.extra_topk >= 1 && s.spec.extra_page_size == 64 && (s.spec.features & MLAJIT_FEATURE_SINK),
                      "draw %d: DSV4 without its extra cache or sink", i);
        }
        ragged += s.shape.topk % 64 != 0;
        s_q_seen[s.shape.s_q]++;
        big_rows += rows >= 4096;
        big_topk += s.shape.topk >= 2048;
        char line[256];
        cr_assert_eq(mlajit_sweep_shape_format(&s, line, sizeof line), MLAJIT_OK);
        cr_assert_eq(mlajit_sweep_shape_parse(line, "sm_90a", &back), MLAJIT_OK, "'%s': %s", line,
                     mlajit_last_error());
        cr_assert(same_shape(&s, &back), "'%s' reads back as another shape", line);
    }
    cr_expect(dsv4 > 50 && dsv4 < 150, "%d DSV4 draws of 400", dsv4);
    cr_expect(ragged > 200, "%d ragged topks of 400", ragged);
    cr_expect(s_q_seen[1] && s_q_seen[2] && s_q_seen[3] && s_q_seen[4]);
    cr_expect(big_rows > 10 && big_topk > 10, "%d draws of 4096 rows or more, %d of topk 2048 or more", big_rows,
              big_topk);
    mlajit_sweep_shape other;
    int differ = 0;
    for (int i = 0; i < 10; i++) {
        mlajit_sweep_shape s;
        mlajit_sweep_draw(47, i, "sm_90a", &s);
        mlajit_sweep_draw(48, i, "sm_90a", &other);
        differ += !same_shape(&s, &other);
    }
    cr_expect_gt(differ, 5, "another seed draws other shapes");
}

Test(sweep, a_bad_shape_line_is_refused_naming_what_is_wrong)
{
    mlajit_sweep_shape s;
    const struct { const char *line, *says; } bad[] = {
        {"model=v32 h_q=16 page=64 b=1 topk=128 colour=red", "key 'colour' is unknown"},
        {"model=v32 h_q=16 page=64 b=one topk=128", "b = 'one'"},
        {"model=v32 h_q=16 page=64 topk=128", "model, h_q, page, b and topk are required"},
        {"model=v99 h_q=16 page=64 b=1 topk=128", "v99"},
        {"model=v32 h_q=16 page=64 b=1 topk=128 features=sink+glow", "'glow' is unknown"},
        {"model=v32 h_q=16 page=64 b=1 topk=128 s_q", "'s_q' is not key=value"},
        {"model=v32 h_q=200 page=64 b=1 topk=128", "200"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_neq(mlajit_sweep_shape_parse(bad[i].line, "sm_90a", &s), MLAJIT_OK, "'%s' was taken", bad[i].line);
        cr_expect(strstr(mlajit_last_error(), bad[i].says) != NULL, "'%s': the message '%s' does not say '%s'",
                  bad[i].line, mlajit_last_error(), bad[i].says);
    }
    cr_expect_neq(mlajit_sweep_shape_parse("model=nope512-rope64-v512-tile100-fp32-inline-row672 h_q=16 page=64 "
                                           "b=1 topk=128", "sm_90a", &s), MLAJIT_OK);
    cr_expect(strstr(mlajit_last_error(), "allowed a model's name") != NULL, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_sweep_shape_parse("model=dsv4 h_q=64 page=256 b=2 s_q=2 topk=128 extra_topk=512 "
                                          "features=sink", "sm_90a", &s),
                 MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(s.spec.extra_page_size, 64, "an extra topk without extra_page takes pages of 64");
    cr_expect_eq(s.shape.s_q, 2);
}

/* A shape line's model may be a layout: format writes a custom layout's
 * canonical string and parse reads it (or inline keys) back; v32's own layout
 * reads as v32. */
Test(sweep, a_custom_layouts_shape_line_reads_back)
{
    mlajit_sweep_shape s, back;
    cr_assert_eq(mlajit_sweep_shape_parse("model=d_nope=512,d_rope=64,tile=128,scales=fp32,place=inline,row_bytes=672 "
                                          "h_q=16 page=64 b=2 topk=128", "sm_90a", &s),
                 MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(s.spec.model, MLAJIT_MODEL_CUSTOM);
    cr_expect_eq(s.spec.layout.row_bytes, 672);
    char line[256];
    cr_assert_eq(mlajit_sweep_shape_format(&s, line, sizeof line), MLAJIT_OK);
    cr_expect_str_eq(line, "model=nope512-rope64-v512-tile128-fp32-inline-row672 h_q=16 page=64 b=2 s_q=1 topk=128");
    cr_assert_eq(mlajit_sweep_shape_parse(line, "sm_90a", &back), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect(same_shape(&s, &back), "'%s' reads back as another shape", line);
    cr_assert_eq(mlajit_sweep_shape_parse("model=nope512-rope64-v512-tile128-pow2-inline-row656 h_q=16 page=64 b=2 "
                                          "topk=128", "sm_90a", &s),
                 MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(s.spec.model, MLAJIT_MODEL_V32, "v32's layout is v32");
}

TestSuite(sweep_gpu, .init = make_root, .fini = remove_root, .timeout = 240);

/* End to end on the fake driver: each shape's bucket tuned first, then one JSON
 * line per shape with the record's keys. */
Test(sweep_gpu, tunes_each_shapes_bucket_then_writes_a_line_per_shape)
{
    mlajit_context *ctx = gpu_context();
    mlajit_sweep_shape shapes[2];
    cr_assert_eq(mlajit_sweep_shape_parse("model=v32 h_q=16 page=64 b=2 s_q=1 topk=128", "sm_90a", &shapes[0]),
                 MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_sweep_shape_parse("model=v32 h_q=7 page=13 b=3 s_q=2 topk=100", "sm_90a", &shapes[1]),
                 MLAJIT_OK, "%s", mlajit_last_error());
    FILE *json = tmpfile();
    mlajit_sweep_options o = {.tune = fake_options(600, 1), .tune_first = 1, .repeats = 2};
    o.tune.json = json;
    mlajit_sweep_summary sum;
    cr_assert_eq(mlajit_sweep(ctx, shapes, 2, &o, &sum), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(sum.done, 2);
    cr_expect_eq(sum.tune.stored, 2, "one bucket each: rows 2 topk 128, rows 4 (3 x 2 rounded down) topk 64");
    cr_expect_eq(mlajit_context_tactics(ctx), 1, "tactics are on again after the sweep");
    rewind(json);
    char line[2048];
    int lines = 0;
    const char *keys[] = {"\"model\"", "\"h_q\"", "\"b\"", "\"s_q\"", "\"topk\"", "\"extra_topk\"", "\"page_size\"",
                          "\"tactic\"", "\"tuned_us\"", "\"best_us\"", "\"rules_us\"", "\"commit\""};
    while (fgets(line, sizeof line, json)) {
        lines++;
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            cr_expect(strstr(line, keys[k]) != NULL, "line %d lacks %s: %s", lines, keys[k], line);
        cr_expect(strstr(line, "\"source\": \"tuned\"") != NULL, "line %d: the plan took the record tuned first: %s",
                  lines, line);
    }
    cr_expect_eq(lines, 2);
    fclose(json);
    mlajit_context_destroy(ctx);
}

/* ---- the public entry point ---------------------------------------------------- */

Test(tune, the_public_entry_point_tunes_a_grid_and_reports)
{
    mlajit_context *ctx = gpu_context();
    const mlajit_model models[] = {MLAJIT_MODEL_V32};
    const int heads[] = {16}, pages[] = {64}, topks[] = {128, 256}, rows[] = {1, 2};
    mlajit_tune_grid g = MLAJIT_TUNE_GRID_INIT;
    g.models = models, g.num_models = 1, g.head_counts = heads, g.num_head_counts = 1;
    g.page_sizes = pages, g.num_page_sizes = 1, g.topks = topks, g.num_topks = 2, g.rows = rows, g.num_rows = 2;
    mlajit_tune_report r = MLAJIT_TUNE_REPORT_INIT;
    cr_assert_eq(mlajit_tune(ctx, &g, 600, &r), MLAJIT_OK, "%s", mlajit_last_error());
    /* the fake driver computes nothing, so nothing passes the check and nothing is stored */
    cr_expect_eq(r.buckets, 4);
    cr_expect_eq(r.buckets_done, 4);
    cr_expect_eq(r.stored, 0);
    cr_expect_gt(r.failed_checks, 0);
    cr_expect_eq(r.deadline_hit, 0);
    cr_expect_eq(mlajit_context_tactics(ctx), 1);
    /* the default grid: its bucket count, with no time to tune */
    cr_assert_eq(mlajit_tune(ctx, NULL, 0, &r), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.buckets, 1300);
    cr_expect_eq(r.buckets_done, 0);
    cr_expect_eq(r.deadline_hit, 1);
    mlajit_context_destroy(ctx);
}

/* The public grid's layouts (added after 1.0): alone they are the model axis,
 * beside models they follow them; a bad one is refused naming it. */
Test(tune, the_public_entry_point_takes_custom_layouts)
{
    mlajit_context *ctx = gpu_context();
    mlajit_layout lay[2];
    cr_assert_eq(mlajit_layout_parse(kCustomLayout, &lay[0]),
                 MLAJIT_OK, "%s", mlajit_last_error());
    const mlajit_model models[] = {MLAJIT_MODEL_V32};
    const int heads[] = {16}, pages[] = {64}, topks[] = {128}, rows[] = {1, 2};
    mlajit_tune_grid g = MLAJIT_TUNE_GRID_INIT;
    g.head_counts = heads, g.num_head_counts = 1, g.page_sizes = pages, g.num_page_sizes = 1;
    g.topks = topks, g.num_topks = 1, g.rows = rows, g.num_rows = 2;
    g.layouts = lay, g.num_layouts = 1;
    mlajit_tune_report r = MLAJIT_TUNE_REPORT_INIT;
    cr_assert_eq(mlajit_tune(ctx, &g, 0, &r), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.buckets, 2, "the layout alone: no default models beside it");
    g.models = models, g.num_models = 1;
    cr_assert_eq(mlajit_tune(ctx, &g, 0, &r), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.buckets, 4);
    memset(&lay[1], 0, sizeof lay[1]);
    g.layouts = &lay[1];
    cr_expect_neq(mlajit_tune(ctx, &g, 0, &r), MLAJIT_OK);
    cr_expect(strstr(mlajit_last_error(), "grid.layouts[0]") != NULL, "%s", mlajit_last_error());
    g.layouts = NULL;
    cr_expect_neq(mlajit_tune(ctx, &g, 0, &r), MLAJIT_OK, "a count without a list");
    cr_expect(strstr(mlajit_last_error(), "grid.layouts") != NULL, "%s", mlajit_last_error());
    mlajit_context_destroy(ctx);
}

Test(tune, the_public_entry_point_refuses_bad_input_naming_it)
{
    mlajit_context *ctx = gpu_context();
    const int zero[] = {0}, huge[] = {1 << 20};
    const struct { const char *says; mlajit_tune_grid g; double seconds; } bad[] = {
        {"grid.head_counts[0] = 0; allowed 1..128", {.struct_size = sizeof(mlajit_tune_grid), .head_counts = zero,
                                                     .num_head_counts = 1}, 10},
        {"grid.topks[0] = 1048576", {.struct_size = sizeof(mlajit_tune_grid), .topks = huge, .num_topks = 1}, 10},
        {"grid.rows: 2 values at", {.struct_size = sizeof(mlajit_tune_grid), .num_rows = 2}, 10},
        {"seconds = -1", {.struct_size = sizeof(mlajit_tune_grid)}, -1},
        {"MLAJIT_TUNE_GRID_INIT", {.struct_size = 3}, 10},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mlajit_tune_report r = MLAJIT_TUNE_REPORT_INIT;
        cr_expect_eq(mlajit_tune(ctx, &bad[i].g, bad[i].seconds, &r), MLAJIT_ERR_INVALID_ARGUMENT, "case %zu", i);
        cr_expect(strstr(mlajit_last_error(), bad[i].says) != NULL, "case %zu: '%s' does not say '%s'", i,
                  mlajit_last_error(), bad[i].says);
        cr_expect_eq(r.buckets, 0, "case %zu: nothing ran", i);
    }
    cr_expect_eq(mlajit_tune(NULL, NULL, 10, NULL), MLAJIT_ERR_INVALID_ARGUMENT);
    mlajit_tune_report small = {.struct_size = 4};
    cr_expect_eq(mlajit_tune(ctx, NULL, 0, &small), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "MLAJIT_TUNE_REPORT_INIT") != NULL, "%s", mlajit_last_error());
    mlajit_context_destroy(ctx);

    /* no writable cache: refused before any timing */
    mlajit_context_options o = MLAJIT_CONTEXT_OPTIONS_INIT;
    o.flags = MLAJIT_CONTEXT_NO_DISK_CACHE;
    o.packs = "";
    cr_assert_eq(mlajit_context_create(&o, &ctx), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(mlajit_tune(ctx, NULL, 10, NULL), MLAJIT_ERR_CACHE);
    cr_expect(strstr(mlajit_last_error(), "writable cache") != NULL, "%s", mlajit_last_error());
    mlajit_context_destroy(ctx);
}
