/* Internal: subcommands of the mlajit CLI and the one option parser they share.
 * Exit status: CLI_OK, CLI_FAIL (ran and failed, or the answer is no), CLI_USAGE
 * (the command line cannot be acted on; nothing written); README's "The CLI"
 * states the rule and which faults are which. */
#ifndef MLAJIT_CLI_H
#define MLAJIT_CLI_H

#include <stddef.h>

#include "cache/tactics.h"
#include "mlajit.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2, CLI_PARSED = -1 /* cli_parse: go on and run */ };

int cli_bench(int argc, char **argv);    /* bench.c */
int cli_fuzz(int argc, char **argv);     /* fuzz.c */
int cli_envelope(int argc, char **argv); /* envelope.c */
int cli_pack(int argc, char **argv);     /* pack.c */
int cli_cache(int argc, char **argv);    /* cache_cmd.c */
int cli_case(int argc, char **argv);     /* case_cmd.c */
int cli_tune(int argc, char **argv);     /* tune.c */
/* Tune the production grid's topk and row buckets (128..2048, 1..4096) of a
 * grid of models, heads, pages and feature sets on ctx's GPU into its cache,
 * progress on stderr: `mlajit pack build --tune`. skip_check: testing only.
 * CLI_OK, or CLI_FAIL after saying why. */
struct mlajit_tune_envelope;
int cli_tune_grid(mlajit_context *ctx, const struct mlajit_tune_envelope *grid, int seconds, int skip_check);

/* Print "mlajit: <what>: <last error> (<status>)" and return CLI_FAIL: the
 * command ran and failed. */
int cli_error(int status, const char *what);

/* A default context on the machine's GPU for command `what` into *ctx, with its
 * info: CLI_OK; else CLI_FAIL after "mlajit: <what> needs a GPU<hint>: <why>"
 * (or the create error), *ctx NULL. hint may be NULL. */
int cli_gpu_context(const char *what, const char *hint, mlajit_context **ctx, mlajit_context_info *info);
/* The same message for an argument the library refused before any work (a spec
 * outside the envelope given to compile): CLI_USAGE. */
int cli_invalid(int status, const char *what);

/* ---- tactic records, as cache ls and pack ls list them (cache_cmd.c) ---------- */

typedef struct cli_tactic_row {
    uint8_t key[MLAJIT_TACTIC_KEY_BYTES]; /* the first key_len bytes of its key */
    size_t key_len;
    int status;                           /* MLAJIT_OK, or why it cannot be used: */
    char why[200];
    mlajit_tactic_record record;          /* when status is MLAJIT_OK */
} cli_tactic_row;

typedef struct cli_tactic_rows {
    cli_tactic_row *rows;
    size_t count, cap, unusable;
    int status;                           /* MLAJIT_ERR_OUT_OF_MEMORY when a row could not be kept */
} cli_tactic_rows;

/* A visitor (mlajit_tactic_visit_fn) that keeps every record in a cli_tactic_rows. */
int cli_tactic_collect(const uint8_t *key, size_t key_len, const mlajit_tactic_record *record, int status,
                       const char *why, void *arg);
/* "tactics  N records" and a table: GPU, spec as asked, bucket, kernel, splits, tuned vs rules, age. */
void cli_tactic_rows_print(const cli_tactic_rows *rows);
void cli_tactic_rows_free(cli_tactic_rows *rows);

/* The `mlajit pack build ... --out FILE` line whose pack holds the resolved
 * spec (pack.c): the grid form where the spec is auto's kernel for its shape or
 * one its grid brings along, else --spec. */
void cli_pack_build_line(const mlajit_kernel_spec *resolved, char *buf, size_t len);
/* After a call for spec failed with status: where that is a kernel missing with
 * JIT disabled (MLAJIT_ERR_NOT_FOUND), print on stderr the pack build line that
 * would serve it (spec's arch "" = the context's). */
void cli_missing_kernel_hint(int status, mlajit_context *ctx, const mlajit_kernel_spec *spec);

/* ---- the option parser ------------------------------------------------------ */

/* What an option's value is and where it goes. Numbers are decimal, checked for
 * overflow and against [lo, hi]; nothing may follow them. */
typedef enum cli_value_kind {
    CLI_FLAG,   /* no value; *(int *)target = 1 */
    CLI_INT,    /* int */
    CLI_INT64,  /* int64_t */
    CLI_UINT64, /* uint64_t, 0..2^64-1 (lo and hi unused) */
    CLI_SIZE,   /* int64_t bytes, 0..hi: N or N.F with an optional K, M, G or T (powers of 1024) */
    CLI_DOUBLE, /* double, finite, in [lo, hi] */
    CLI_STRING, /* const char *, not empty */
    CLI_CUSTOM, /* parse(name, value, target): 1 when good, else 0 after printing why */
} cli_value_kind;

typedef struct cli_option {
    const char *name; /* "--heads" */
    cli_value_kind kind;
    void *target;
    long long lo, hi;
    int (*parse)(const char *name, const char *value, void *target);
    int *given; /* when not NULL: set to 1 when the option is on the command line */
} cli_option;

/* One command's options, operands and usage. */
typedef struct cli_command {
    const char *name;     /* "compile", "cache gc": names it in messages */
    const char *usage;    /* the whole --help text */
    const cli_option *options;
    size_t num_options;
    int min_operands, max_operands; /* max -1: any number */
    const char *operands;           /* what they are, for "needs ...": "a case directory DIR" */
} cli_command;

/* Parse argv[1..argc) (argv[0] is the command's own name) against cmd: options
 * (`--name value` or `--name=value`, anywhere; `--` ends them) into their
 * targets, operands moved to argv[1..*num_operands] in order. Returns CLI_PARSED
 * when the command should run; CLI_OK after --help or -h (cmd->usage on stdout,
 * nothing else done); CLI_USAGE after a message on stderr that names the option
 * or argument ("mlajit compile: unknown option '--bogus'", "--heads = '0';
 * allowed 1..128", "extra argument 'x'") and where the usage is. */
int cli_parse(const cli_command *cmd, int argc, char **argv, int *num_operands);

/* cli_parse for a command that takes no options, only min..max operands
 * (described by `operands`, e.g. "one pack FILE"): the same returns. */
int cli_parse_operands(const char *name, const char *usage, int min, int max, const char *operands, int argc,
                       char **argv);

/* "mlajit CMD: <message>" and the pointer to CMD's --help on stderr: CLI_USAGE.
 * For checks after cli_parse (options that need each other, ...). */
int cli_usage_error(const cli_command *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A group of subcommands (pack, cache, case): argv[1] picks one of names[0..n).
 * Returns its index, or -1 with *status set: CLI_OK after --help (usage on
 * stdout), CLI_USAGE for a missing or unknown subcommand (message on stderr). */
int cli_pick_subcommand(const char *group, const char *usage, const char *const *names, int n, int argc,
                        char **argv, int *status);

/* A whole decimal integer (optionally negative; nothing else around it) in
 * [lo, hi], overflow checked: 1 and *out, else 0 (nothing printed). */
int cli_parse_integer(const char *s, long long lo, long long hi, long long *out);

/* Value parsers for CLI_CUSTOM options (target types in brackets). */
int cli_parse_variant(const char *name, const char *value, void *target);  /* [mlajit_variant] */
int cli_parse_model(const char *name, const char *value, void *target);    /* [mlajit_model] */
/* [mlajit_layout]: inline keys, a JSON file of them, a canonical layout string or a model name */
int cli_parse_layout(const char *name, const char *value, void *target);
int cli_parse_features(const char *name, const char *value, void *target); /* [unsigned]: sink,topk-length,... */

/* Call item(name, text, target) for each item of the list value, split at sep:
 * 1 when there is one at least and item took each, else 0 (after a message). */
int cli_each_item(const char *name, const char *value, char sep, int (*item)(const char *, const char *, void *),
                  void *target);
/* An item for cli_each_item: the feature called text ("none", "sink",
 * "topk-length", "extra-topk-length") or'd into *(unsigned *)target. */
int cli_add_feature(const char *name, const char *text, void *target);

/* A kernel spec as `mlajit envelope` and `case make` take it: the canonical
 * string or a short form (v32.h16.p64, dsv4.h64.p256.e64.fs), fields only, not
 * checked against the envelope. 1 when it parses; else 0 after printing why. */
int cli_parse_spec(const char *cmd, const char *text, mlajit_kernel_spec *spec);

/* ---- list values (args.c): pack build's and tune's grids ---------------------- */

/* 0 after "at most N values" when a list already holds max of them. */
int cli_room_for(const char *name, int count, int max);

typedef struct cli_int_list {
    int lo, hi; /* the values' range */
    int values[64];
    int count;
} cli_int_list;

typedef struct cli_model_list {
    mlajit_model models[8];
    int count;
} cli_model_list;

/* --layout, repeatable: each value appends one layout (cli_parse_layout's forms). */
typedef struct cli_layout_list {
    mlajit_layout layouts[8];
    int count;
} cli_layout_list;
int cli_add_layout(const char *name, const char *value, void *target); /* [cli_layout_list] */

/* Feature sets: each names features joined with '+' ("none" for the empty set). */
typedef struct cli_feature_sets {
    unsigned sets[16];
    int count;
} cli_feature_sets;

/* CLI_CUSTOM parsers of comma-separated lists into the types above (the list
 * is replaced, not appended to). */
int cli_parse_int_list(const char *name, const char *value, void *target);     /* [cli_int_list], in lo..hi */
int cli_parse_model_list(const char *name, const char *value, void *target);   /* [cli_model_list] */
int cli_parse_feature_sets(const char *name, const char *value, void *target); /* [cli_feature_sets] */

#endif
