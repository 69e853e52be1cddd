/* mlajit cache: list, count, collect and check the writable kernel cache. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/store.h"
#include "cache/tactics.h"
#include "cli/cli.h"
#include "common/error.h"
#include "mlajit.h"

static const char cache_usage[] =
    "usage: mlajit cache <command> [--dir DIR]      (mlajit cache <command> --help: its usage)\n"
    "\n"
    "  ls                          every entry: key, spec, cubin size, compile time, age; and every\n"
    "                              tactic record: GPU, spec, bucket, kernel, splits, tuned vs rules\n"
    "  stats                       entries, sizes, total compile time, tactic records, and the hits\n"
    "                              and misses per layer that contexts using this cache recorded\n"
    "  gc [--older-than DAYS] [--max-bytes SIZE] [--all] [--tactics] [--dry-run]\n"
    "                              remove entries compiled more than DAYS ago, then the oldest\n"
    "                              until the entries hold at most SIZE bytes (K, M, G suffixes);\n"
    "                              tactic records stay unless --tactics (then DAYS and --all apply\n"
    "                              to them too); the data file keeps its size and reuses the pages\n"
    "  verify [--repair [--from FILE]]\n"
    "                              check the data file's structure, every entry and every tactic\n"
    "                              record; --repair deletes damaged ones, or, when the structure is\n"
    "                              damaged, moves data.mdb aside (data.mdb.damaged.N) and recovers\n"
    "                              every entry and tactic record that can still be read into a\n"
    "                              fresh one; --from FILE recovers those of a set-aside FILE\n"
    "\n"
    "DIR defaults to $MLAJIT_CACHE_DIR, else $XDG_CACHE_HOME/mlajit, else ~/.cache/mlajit.\n";

static const char ls_usage[] =
    "usage: mlajit cache ls [--dir DIR]\n"
    "  every entry of the cache: key, spec, cubin size, compile time, age; then every tactic\n"
    "  record: the GPU it was measured on, the spec as asked, its bucket (rows, topk and extra\n"
    "  topk at least), the kernel and split count chosen, its time against the default rule's\n";
static const char stats_usage[] =
    "usage: mlajit cache stats [--dir DIR]\n"
    "  entries, sizes, total compile time, tactic records, and the hits and misses per layer\n"
    "  that contexts using this cache recorded\n";
static const char gc_usage[] =
    "usage: mlajit cache gc [--dir DIR] [--older-than DAYS] [--max-bytes SIZE] [--all] [--tactics] [--dry-run]\n"
    "  remove damaged entries, entries compiled more than DAYS ago (0..36500, fractions allowed),\n"
    "  then the oldest until the entries hold at most SIZE bytes (N or N.F with an optional K, M,\n"
    "  G or T: powers of 1024), or --all; --dry-run says what would go. One rule at least.\n"
    "  Tactic records (measured choices) stay, but for damaged or stale ones, which are never\n"
    "  used; with --tactics, --older-than and --all remove them too (--max-bytes counts entries).\n"
    "  The data file keeps its size and reuses the freed pages.\n";
static const char verify_usage[] =
    "usage: mlajit cache verify [--dir DIR] [--repair [--from FILE]]\n"
    "  check the data file's structure (as a write does), every entry's header and checksums and\n"
    "  every tactic record's; exit 1 when anything is damaged; a clean file is stamped when DIR\n"
    "  can be written. --repair deletes the damaged entries (they are recompiled when next used)\n"
    "  and tactic records, or, when the structure is damaged, moves data.mdb aside to a new\n"
    "  data.mdb.damaged.N and recovers every entry and tactic record that can still be read into\n"
    "  a fresh data.mdb; exits 0 when it could.\n"
    "  --repair --from FILE recovers the readable entries and tactic records of FILE (a set-aside\n"
    "  data file).\n";

/* The CLI opens with MLAJIT_STORE_KEEP_DAMAGED: a damaged file is reported by
 * the command and left for `verify --repair`, never set aside under it. A
 * read-only open falls back from a writable one where it may (verify stamps a
 * clean file when it can write, and reads it otherwise). */
static int open_cache(const char *dir, int writes, int may_write, int need_data, mlajit_store **store, char *dir_out,
                      size_t dir_len)
{
    if (dir)
        snprintf(dir_out, dir_len, "%s", dir);
    else if (mlajit_cache_default_dir(dir_out, dir_len) != MLAJIT_OK)
        return cli_error(MLAJIT_ERR_NOT_FOUND, "cache");
    char data_path[1100];
    snprintf(data_path, sizeof data_path, "%s/data.mdb", dir_out);
    struct stat st;
    if (need_data && stat(data_path, &st) != 0) {
        fprintf(stderr, "mlajit cache: %s holds no cache (no data.mdb)\n", dir_out);
        return CLI_FAIL;
    }
    int rc = mlajit_store_open_ex(dir_out, MLAJIT_STORE_KEEP_DAMAGED | (writes || may_write ? 0u : MLAJIT_STORE_READONLY),
                                  store);
    if (rc == MLAJIT_ERR_IO && !writes && may_write)
        rc = mlajit_store_open_ex(dir_out, MLAJIT_STORE_KEEP_DAMAGED | MLAJIT_STORE_READONLY, store);
    if (rc)
        return cli_error(rc, "cache");
    return CLI_OK;
}

/* A command that met a damaged data file says how to recover. */
static int cache_error(int rc, const char *what)
{
    int code = cli_error(rc, what);
    if (rc == MLAJIT_ERR_CORRUPT)
        fprintf(stderr, "mlajit: %s: `mlajit cache verify --repair` recovers the entries that can still be read\n",
                what);
    return code;
}

static void format_age(uint64_t created, char *buf, size_t len)
{
    time_t now = time(NULL);
    double age = (double)now - (double)created;
    if (created == 0 || age < 0)
        snprintf(buf, len, "?");
    else if (age < 120)
        snprintf(buf, len, "%.0f s", age);
    else if (age < 7200)
        snprintf(buf, len, "%.0f min", age / 60);
    else if (age < 172800)
        snprintf(buf, len, "%.0f h", age / 3600);
    else
        snprintf(buf, len, "%.0f d", age / 86400);
}

/* ---- tactic records ---------------------------------------------------------- */

/* Room for one more row of size bytes in *rows (count used of *cap): 1, or 0
 * with *status set when out of memory. */
static int room_for_row(void **rows, size_t count, size_t *cap, size_t size, int *status, const char *what)
{
    if (count < *cap)
        return 1;
    size_t grown = *cap ? *cap * 2 : 64;
    void *p = realloc(*rows, grown * size);
    if (!p) {
        *status = mlajit_fail(MLAJIT_ERR_OUT_OF_MEMORY, "cache: %zu %s", grown, what);
        return 0;
    }
    *rows = p;
    *cap = grown;
    return 1;
}

int cli_tactic_collect(const uint8_t *key, size_t key_len, const mlajit_tactic_record *record, int status,
                       const char *why, void *arg)
{
    cli_tactic_rows *l = arg;
    if (!room_for_row((void **)&l->rows, l->count, &l->cap, sizeof *l->rows, &l->status, "tactic records"))
        return 1;
    cli_tactic_row *r = &l->rows[l->count++];
    memset(r, 0, sizeof *r);
    r->key_len = key_len < sizeof r->key ? key_len : sizeof r->key;
    memcpy(r->key, key, r->key_len);
    r->status = record ? MLAJIT_OK : status;
    snprintf(r->why, sizeof r->why, "%s", record ? "" : why);
    if (record)
        r->record = *record;
    else
        l->unusable++;
    return 0;
}

void cli_tactic_rows_free(cli_tactic_rows *l)
{
    free(l->rows);
    memset(l, 0, sizeof *l);
}

void cli_tactic_rows_print(const cli_tactic_rows *l)
{
    printf("tactics       %zu records (%zu damaged or stale)\n", l->count, l->unusable);
    if (!l->count)
        return;
    printf("  %-34s  %-34s %6s %5s %5s  %-42s %6s %9s %9s %6s %6s\n", "gpu (SMs, clocks class)", "spec as asked",
           "rows", "topk", "extra", "kernel chosen", "splits", "tuned", "rules", "gain", "age");
    for (size_t i = 0; i < l->count; i++) {
        const cli_tactic_row *row = &l->rows[i];
        if (row->status != MLAJIT_OK) {
            char hex[2 * MLAJIT_TACTIC_KEY_BYTES + 1] = "";
            for (size_t k = 0; k < row->key_len; k++)
                snprintf(hex + 2 * k, 3, "%02x", row->key[k]);
            printf("  %s  %s: %s\n", hex, row->status == MLAJIT_CACHE_STALE ? "STALE" : "DAMAGED", row->why);
            continue;
        }
        const mlajit_tactic_record *r = &row->record;
        char gpu[200], splits[16], rules[24] = "-", gain[16] = "-", age[32];
        snprintf(gpu, sizeof gpu, "%s (%d, %d MHz)", r->gpu.name, r->gpu.sm_count, r->gpu.clock_class_mhz);
        snprintf(splits, sizeof splits, r->follows_rules ? "rules" : r->num_splits ? "%d" : "planner", r->num_splits);
        if (r->rules_us > 0) {
            snprintf(rules, sizeof rules, "%.2f us", r->rules_us);
            snprintf(gain, sizeof gain, "%.1f%%", 100.0 * (r->rules_us - r->tuned_us) / r->rules_us);
        }
        format_age(r->created_unix, age, sizeof age);
        printf("  %-34s  %-34s %6d %5d %5d  %-42s %6s %6.2f us %9s %6s %6s\n", gpu, r->spec, r->bucket.rows,
               r->bucket.topk, r->bucket.extra_topk, r->kernel, splits, r->tuned_us, rules, gain, age);
    }
}

static int collect_tactics(mlajit_store *store, cli_tactic_rows *l)
{
    memset(l, 0, sizeof *l);
    int rc = mlajit_tactic_foreach(store, cli_tactic_collect, l);
    return rc ? rc : l->status;
}

/* ---- collecting the entries ------------------------------------------------- */

typedef struct entry_row {
    mlajit_cache_key key;
    char spec[128];
    size_t value_bytes, cubin_bytes;
    double compile_ms;
    int registers;
    uint64_t created_unix;
    int damaged;
    char why[160];
} entry_row;

typedef struct row_list {
    entry_row *rows;
    size_t count, cap;
    int status;
} row_list;

static int collect_visit(const mlajit_cache_key *key, const void *value, size_t len, void *arg)
{
    row_list *l = arg;
    if (!room_for_row((void **)&l->rows, l->count, &l->cap, sizeof *l->rows, &l->status, "entries"))
        return 1;
    entry_row *r = &l->rows[l->count++];
    memset(r, 0, sizeof *r);
    r->key = *key;
    r->value_bytes = len;
    mlajit_cache_entry e;
    if (!value) {
        r->damaged = 1;
        snprintf(r->why, sizeof r->why, "the value lies outside the data file");
    } else if (mlajit_cache_entry_decode(value, len, &e) != MLAJIT_OK) {
        r->damaged = 1;
        snprintf(r->why, sizeof r->why, "%s", mlajit_last_error());
    } else {
        snprintf(r->spec, sizeof r->spec, "%s", e.spec_string);
        r->cubin_bytes = e.cubin_size;
        r->compile_ms = e.compile_ms;
        r->registers = e.registers;
        r->created_unix = e.created_unix;
        mlajit_cache_entry_clear(&e);
    }
    return 0;
}

static int collect(mlajit_store *store, row_list *l)
{
    memset(l, 0, sizeof *l);
    int rc = mlajit_store_foreach(store, collect_visit, l);
    return rc ? rc : l->status;
}

/* ---- commands --------------------------------------------------------------- */

static int cmd_ls(mlajit_store *store, const char *dir)
{
    row_list l;
    int rc = collect(store, &l);
    if (rc) {
        free(l.rows);
        return cache_error(rc, "cache ls");
    }
    printf("cache %s: %zu entries\n", dir, l.count);
    printf("  %-32s  %-44s %9s  %9s  %6s\n", "key", "spec", "cubin", "compiled", "age");
    for (size_t i = 0; i < l.count; i++) {
        char hex[33], age[32];
        mlajit_cache_key_hex(&l.rows[i].key, hex);
        if (l.rows[i].damaged) {
            printf("  %s  DAMAGED: %s\n", hex, l.rows[i].why);
            continue;
        }
        format_age(l.rows[i].created_unix, age, sizeof age);
        printf("  %s  %-44s %7zu B  %6.0f ms  %6s\n", hex, l.rows[i].spec, l.rows[i].cubin_bytes,
               l.rows[i].compile_ms, age);
    }
    free(l.rows);
    cli_tactic_rows t;
    if ((rc = collect_tactics(store, &t))) {
        cli_tactic_rows_free(&t);
        return cache_error(rc, "cache ls");
    }
    cli_tactic_rows_print(&t);
    cli_tactic_rows_free(&t);
    return CLI_OK;
}

static int cmd_stats(mlajit_store *store, const char *dir)
{
    row_list l;
    int rc = collect(store, &l);
    mlajit_store_stats st;
    mlajit_store_counters c;
    cli_tactic_rows t = {0};
    if (rc || (rc = mlajit_store_stats_get(store, &st)) || (rc = mlajit_store_counters_get(store, &c)) ||
        (rc = collect_tactics(store, &t))) {
        free(l.rows);
        cli_tactic_rows_free(&t);
        return cache_error(rc, "cache stats");
    }
    double compile_ms = 0;
    size_t damaged = 0, cubin_bytes = 0;
    for (size_t i = 0; i < l.count; i++) {
        damaged += (size_t)l.rows[i].damaged;
        compile_ms += l.rows[i].compile_ms;
        cubin_bytes += l.rows[i].cubin_bytes;
    }
    printf("cache          %s\n", dir);
    printf("entries        %lld (%zu damaged)\n", (long long)st.entries, damaged);
    printf("bytes          %lld in entries (%zu of cubins), %lld in data.mdb\n", (long long)st.value_bytes,
           cubin_bytes, (long long)st.data_file_bytes);
    printf("compile time   %.1f s to compile what is stored\n", compile_ms / 1000.0);
    printf("tactics        %zu records (%zu damaged or stale): measured choices of kernel and splits\n", t.count,
           t.unusable);
    cli_tactic_rows_free(&t);
    uint64_t lookups = c.memory_hits + c.pack_hits + c.disk_hits + c.compiles + c.jit_refusals;
    printf("recorded by    %" PRIu64 " contexts (a context adds its counts with each kernel it stores, or with\n"
           "               mlajit_context_flush_counters; one that only hit writes nothing)\n", c.contexts);
    printf("  memory hits  %" PRIu64 "\n", c.memory_hits);
    printf("  pack hits    %" PRIu64 "\n", c.pack_hits);
    printf("  disk hits    %" PRIu64 "\n", c.disk_hits);
    printf("  compiles     %" PRIu64 " (missed every layer; NVRTC %.1f s)\n", c.compiles, (double)c.compile_us / 1e6);
    printf("  JIT refused  %" PRIu64 " (misses with MLAJIT_DISABLE_JIT)\n", c.jit_refusals);
    printf("  rejected     %" PRIu64 " (damaged entries or packs)\n", c.corrupt);
    if (lookups)
        printf("  hit rate     %.1f%% of %" PRIu64 " lookups\n",
               100.0 * (double)(c.memory_hits + c.pack_hits + c.disk_hits) / (double)lookups, lookups);
    free(l.rows);
    return CLI_OK;
}

static int oldest_first(const void *a, const void *b)
{
    const entry_row *x = a, *y = b;
    return x->created_unix < y->created_unix ? -1 : x->created_unix > y->created_unix;
}

/* Delete the rows' records that pick(row) says go; prints what went. */
static int delete_tactics(mlajit_store *store, const char *dir, const cli_tactic_rows *t, const char *what,
                          int (*pick)(const cli_tactic_row *row, const void *arg), const void *arg, int dry_run,
                          size_t *gone)
{
    const uint8_t **keys = malloc((t->count ? t->count : 1) * sizeof *keys);
    size_t *lens = malloc((t->count ? t->count : 1) * sizeof *lens);
    if (!keys || !lens) {
        free(keys);
        free(lens);
        return mlajit_fail(MLAJIT_ERR_OUT_OF_MEMORY, "%zu tactic records", t->count);
    }
    size_t n = 0;
    for (size_t i = 0; i < t->count; i++) {
        if (!pick(&t->rows[i], arg))
            continue;
        keys[n] = t->rows[i].key;
        lens[n++] = t->rows[i].key_len;
    }
    size_t deleted = n;
    int rc = !dry_run && n ? mlajit_tactic_delete(store, keys, lens, n, &deleted) : MLAJIT_OK;
    if (rc == MLAJIT_OK)
        printf("cache %s: %s %zu of %zu tactic records (%s); %zu remain\n", dir, dry_run ? "would remove" : "removed",
               deleted, t->count, what, t->count - n);
    if (gone)
        *gone = deleted;
    free(keys);
    free(lens);
    return rc;
}

typedef struct tactic_rule {
    int tactics; /* --tactics: the rules apply to usable records too */
    int all;
    double older_than_days, now;
} tactic_rule;

static int tactic_doomed(const cli_tactic_row *row, const void *arg)
{
    const tactic_rule *rule = arg;
    if (row->status != MLAJIT_OK)
        return 1; /* damaged or stale: never used */
    int old = rule->older_than_days >= 0 &&
              (rule->now - (double)row->record.created_unix) > rule->older_than_days * 86400.0;
    return rule->tactics && (rule->all || old);
}

static int cmd_gc(mlajit_store *store, const char *dir, double older_than_days, int64_t max_bytes, int all,
                  int tactics, int dry_run)
{
    row_list l;
    int rc = collect(store, &l);
    if (rc) {
        free(l.rows);
        return cache_error(rc, "cache gc");
    }
    if (l.count) /* no entries: no array (qsort wants one) */
        qsort(l.rows, l.count, sizeof *l.rows, oldest_first);
    mlajit_cache_key *doomed = malloc((l.count ? l.count : 1) * sizeof *doomed);
    if (!doomed) {
        free(l.rows);
        return cli_error(mlajit_fail(MLAJIT_ERR_OUT_OF_MEMORY, "gc"), "cache gc");
    }
    size_t n = 0;
    int64_t kept_bytes = 0, freed_bytes = 0;
    for (size_t i = 0; i < l.count; i++)
        kept_bytes += (int64_t)l.rows[i].value_bytes;
    double now = (double)time(NULL);
    for (size_t i = 0; i < l.count; i++) {
        const entry_row *r = &l.rows[i];
        int old = older_than_days >= 0 && (now - (double)r->created_unix) > older_than_days * 86400.0;
        int over = max_bytes >= 0 && kept_bytes > max_bytes;
        if (all || old || over || r->damaged) {
            doomed[n++] = r->key;
            kept_bytes -= (int64_t)r->value_bytes;
            freed_bytes += (int64_t)r->value_bytes;
        }
    }
    size_t deleted = n;
    if (!dry_run && n && (rc = mlajit_store_delete_many(store, doomed, n, &deleted))) {
        free(doomed);
        free(l.rows);
        return cache_error(rc, "cache gc");
    }
    printf("cache %s: %s %zu of %zu entries (%lld bytes); %zu remain (%lld bytes)\n", dir,
           dry_run ? "would remove" : "removed", deleted, l.count, (long long)freed_bytes, l.count - n,
           (long long)kept_bytes);
    free(doomed);
    free(l.rows);
    cli_tactic_rows t;
    tactic_rule rule = {.tactics = tactics, .all = all, .older_than_days = older_than_days, .now = now};
    if ((rc = collect_tactics(store, &t)) == MLAJIT_OK)
        rc = delete_tactics(store, dir, &t,
                            tactics ? "damaged, stale, and by the rules" : "damaged or stale; --tactics for the rules",
                            tactic_doomed, &rule, dry_run, NULL);
    cli_tactic_rows_free(&t);
    return rc ? cache_error(rc, "cache gc") : CLI_OK;
}

static int cmd_salvage(mlajit_store *store, const char *dir, const char *from)
{
    mlajit_store_salvage_report rep;
    int rc = mlajit_store_salvage_ex(store, from, &mlajit_tactic_record_kind, 1, &rep);
    if (rc)
        return cli_error(rc, "cache verify --repair");
    if (rep.set_aside[0])
        printf("cache %s: moved the damaged data.mdb to %s (kept: nothing is lost)\n", dir, rep.set_aside);
    printf("cache %s: recovered %" PRIu64 " entries from %s (%" PRIu64 " already present, %" PRIu64
           " unreadable: they are recompiled when next used)\n",
           dir, rep.recovered, from ? from : rep.set_aside, rep.present, rep.unreadable);
    printf("cache %s: recovered %" PRIu64 " tactic records (%" PRIu64 " already present, %" PRIu64
           " unreadable: those buckets take the default rule until tuned again)\n",
           dir, rep.records_recovered, rep.records_present, rep.records_unreadable);
    return CLI_OK;
}

static int tactic_unusable(const cli_tactic_row *row, const void *arg)
{
    (void)arg;
    return row->status != MLAJIT_OK;
}

static int cmd_verify(mlajit_store *store, const char *dir, int repair, const char *from)
{
    if (from) /* recover a set-aside file's entries; the cache's own file is checked by its writes */
        return cmd_salvage(store, dir, from);
    mlajit_store_check_report check;
    int rc = mlajit_store_check(store, &check);
    if (rc == MLAJIT_ERR_CORRUPT) {
        printf("  data.mdb  DAMAGED: %s\n", check.problem);
        printf("cache %s: the data file's structure is damaged\n", dir);
        if (!repair) {
            printf("cache %s: `mlajit cache verify --repair` recovers the entries that can still be read\n", dir);
            return CLI_FAIL;
        }
        return cmd_salvage(store, dir, NULL);
    }
    if (rc)
        return cli_error(rc, "cache verify");
    row_list l;
    rc = collect(store, &l);
    if (rc) {
        free(l.rows);
        return cache_error(rc, "cache verify");
    }
    size_t damaged = 0;
    mlajit_cache_key *bad = malloc((l.count ? l.count : 1) * sizeof *bad);
    for (size_t i = 0; i < l.count; i++) {
        if (!l.rows[i].damaged)
            continue;
        char hex[33];
        mlajit_cache_key_hex(&l.rows[i].key, hex);
        printf("  %s  DAMAGED: %s\n", hex, l.rows[i].why);
        if (bad)
            bad[damaged] = l.rows[i].key;
        damaged++;
    }
    int status = damaged ? CLI_FAIL : CLI_OK;
    if (damaged && repair && bad) {
        size_t deleted = 0;
        if ((rc = mlajit_store_delete_many(store, bad, damaged, &deleted))) {
            status = cli_error(rc, "cache verify --repair");
        } else {
            printf("cache %s: deleted %zu damaged entries; they are recompiled when next used\n", dir, deleted);
            status = CLI_OK;
        }
    }
    printf("cache %s: structure checked (%" PRIu64 " pages: %" PRIu64 " in use, %" PRIu64
           " free); %zu entries checked, %zu damaged\n",
           dir, check.pages, check.tree_pages, check.free_pages, l.count, damaged);
    free(bad);
    free(l.rows);

    cli_tactic_rows t;
    if ((rc = collect_tactics(store, &t))) {
        cli_tactic_rows_free(&t);
        return cache_error(rc, "cache verify");
    }
    for (size_t i = 0; i < t.count; i++)
        if (t.rows[i].status != MLAJIT_OK)
            printf("  tactic record %zu  %s: %s\n", i, t.rows[i].status == MLAJIT_CACHE_STALE ? "STALE" : "DAMAGED",
                   t.rows[i].why);
    printf("cache %s: %zu tactic records checked, %zu damaged or stale\n", dir, t.count, t.unusable);
    if (t.unusable && !repair)
        status = CLI_FAIL;
    if (t.unusable && repair) {
        if ((rc = delete_tactics(store, dir, &t, "damaged or stale", tactic_unusable, NULL, 0, NULL)))
            status = cli_error(rc, "cache verify --repair");
    }
    cli_tactic_rows_free(&t);
    return status;
}

int cli_cache(int argc, char **argv)
{
    static const char *const names[] = {"ls", "stats", "gc", "verify"};
    static const char *const usages[] = {ls_usage, stats_usage, gc_usage, verify_usage};
    enum { LS, STATS, GC, VERIFY };
    int status, which = cli_pick_subcommand("cache", cache_usage, names, 4, argc, argv, &status);
    if (which < 0)
        return status;
    const char *dir = NULL, *from = NULL;
    double older_than = -1;
    int64_t max_bytes = -1;
    int all = 0, dry_run = 0, repair = 0, tactics = 0;
    /* each subcommand's options; --dir first in every one */
    const cli_option ls_options[] = {{"--dir", CLI_STRING, .target = &dir}};
    const cli_option gc_options[] = {
        {"--dir", CLI_STRING, .target = &dir},
        {"--older-than", CLI_DOUBLE, &older_than, .lo = 0, .hi = 36500},
        {"--max-bytes", CLI_SIZE, &max_bytes, .lo = 0, .hi = INT64_MAX},
        {"--all", CLI_FLAG, .target = &all},
        {"--tactics", CLI_FLAG, .target = &tactics},
        {"--dry-run", CLI_FLAG, .target = &dry_run},
    };
    const cli_option verify_options[] = {{"--dir", CLI_STRING, .target = &dir},
                                         {"--repair", CLI_FLAG, .target = &repair},
                                         {"--from", CLI_STRING, .target = &from}};
    const struct { const cli_option *options; size_t count; } by_command[] = {
        {ls_options, 1}, {ls_options, 1}, {gc_options, 6}, {verify_options, 3}};
    char name[32];
    snprintf(name, sizeof name, "cache %s", names[which]);
    const cli_command cmd = {name, usages[which], by_command[which].options, by_command[which].count, 0, 0, NULL};
    int n;
    if ((status = cli_parse(&cmd, argc - 1, argv + 1, &n)) != CLI_PARSED)
        return status;
    if (which == GC && older_than < 0 && max_bytes < 0 && !all)
        return cli_usage_error(&cmd, "needs --older-than, --max-bytes or --all");
    if (from && !repair)
        return cli_usage_error(&cmd, "--from FILE goes with --repair");

    int writes = (which == GC && !dry_run) || (which == VERIFY && repair);
    char path[1024];
    mlajit_store *store = NULL;
    status = open_cache(dir, writes, which == VERIFY, !from, &store, path, sizeof path);
    if (status != CLI_OK)
        return status;
    switch (which) {
    case LS: status = cmd_ls(store, path); break;
    case STATS: status = cmd_stats(store, path); break;
    case GC: status = cmd_gc(store, path, older_than, max_bytes, all, tactics, dry_run); break;
    default: status = cmd_verify(store, path, repair, from); break;
    }
    mlajit_store_close(store);
    return status;
}
