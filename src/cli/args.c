/* The CLI's one option parser (cli.h): every command's options, operands,
 * --help and usage errors, so they behave alike. Numbers are parsed by hand
 * from their digits with overflow checks: strtol's silent clamping and atoi's
 * undefined overflow never see a command line. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "codegen/codegen.h"
#include "common/error.h"
#include "harness/json.h"

int cli_error(int status, const char *what)
{
    fprintf(stderr, "mlajit: %s: %s (%s)\n", what, mlajit_last_error(), mlajit_status_string(status));
    return CLI_FAIL;
}

int cli_gpu_context(const char *what, const char *hint, mlajit_context **ctx, mlajit_context_info *info)
{
    *ctx = NULL;
    int rc = mlajit_context_create(NULL, ctx);
    if (rc)
        return cli_error(rc, what);
    *info = (mlajit_context_info)MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(*ctx, info);
    if (info->has_device)
        return CLI_OK;
    fprintf(stderr, "mlajit: %s needs a GPU%s: %s\n", what, hint ? hint : "", info->no_device_reason);
    mlajit_context_destroy(*ctx);
    *ctx = NULL;
    return CLI_FAIL;
}

int cli_invalid(int status, const char *what)
{
    fprintf(stderr, "mlajit: %s: %s (%s)\n", what, mlajit_last_error(), mlajit_status_string(status));
    return CLI_USAGE;
}

static void vusage_error(const char *cmd, const char *fmt, va_list ap)
{
    fprintf(stderr, "mlajit %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n(mlajit %s --help prints its usage)\n", cmd);
}

int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vusage_error(cmd->name, fmt, ap);
    va_end(ap);
    return CLI_USAGE;
}

/* ---- numbers ------------------------------------------------------------------ */

/* Decimal digits at *s into *v (at least one; no sign, no space): 1, or 0 when
 * there are none or the value passes UINT64_MAX. *s is moved past them. */
static int read_digits(const char **s, uint64_t *v)
{
    const char *p = *s;
    uint64_t x = 0;
    if (*p < '0' || *p > '9')
        return 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (x > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            return 0;
        x = x * 10 + (uint64_t)(*p - '0');
    }
    *s = p;
    *v = x;
    return 1;
}

int cli_parse_integer(const char *s, long long lo, long long hi, long long *out)
{
    int negative = *s == '-';
    const char *p = s + negative;
    uint64_t mag;
    if (!read_digits(&p, &mag) || *p)
        return 0;
    long long v;
    if (negative) {
        if (mag > (uint64_t)INT64_MAX + 1)
            return 0;
        v = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(long long)mag;
    } else {
        if (mag > (uint64_t)INT64_MAX)
            return 0;
        v = (long long)mag;
    }
    if (v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

/* How many decimal digits start at *s; *s is moved past them. */
static size_t skip_digits(const char **s)
{
    const char *p = *s;
    while (*p >= '0' && *p <= '9')
        p++;
    size_t n = (size_t)(p - *s);
    *s = p;
    return n;
}

/* N or N.F, then an optional K, M, G or T (x 1024^k): bytes in [0, hi]. */
static int parse_size(const char *s, long long hi, int64_t *out)
{
    const char *p = s;
    uint64_t whole, unit = 1;
    if (!read_digits(&p, &whole))
        return 0;
    const char *fraction_at = NULL;
    if (*p == '.') {
        fraction_at = p;
        p++;
        if (!skip_digits(&p))
            return 0;
    }
    switch (*p) {
    case 'K': case 'k': unit = (uint64_t)1 << 10; p++; break;
    case 'M': case 'm': unit = (uint64_t)1 << 20; p++; break;
    case 'G': case 'g': unit = (uint64_t)1 << 30; p++; break;
    case 'T': case 't': unit = (uint64_t)1 << 40; p++; break;
    default: break;
    }
    if (*p)
        return 0;
    uint64_t bytes;
    if (__builtin_mul_overflow(whole, unit, &bytes))
        return 0;
    if (fraction_at) { /* the fraction of a unit, rounded down: less than one unit */
        double fraction = strtod(fraction_at, NULL); /* ".F" alone: in [0, 1) */
        uint64_t part = (uint64_t)(fraction * (double)unit);
        if (part >= unit)
            part = unit - 1;
        if (__builtin_add_overflow(bytes, part, &bytes))
            return 0;
    }
    if (bytes > (uint64_t)hi)
        return 0;
    *out = (int64_t)bytes;
    return 1;
}

/* A plain decimal number (digits with an optional fraction, optionally
 * negative; no exponent, inf or nan), in [lo, hi]. */
static int parse_decimal(const char *s, long long lo, long long hi, double *out)
{
    const char *p = s + (*s == '-');
    if (!skip_digits(&p))
        return 0;
    if (*p == '.') {
        p++;
        if (!skip_digits(&p))
            return 0;
    }
    if (*p)
        return 0;
    double v = strtod(s, NULL);
    if (!isfinite(v) || v < (double)lo || v > (double)hi)
        return 0;
    *out = v;
    return 1;
}

/* ---- options -------------------------------------------------------------------- */

static int set_value(const cli_command *cmd, const cli_option *o, const char *value)
{
    long long v;
    switch (o->kind) {
    case CLI_FLAG:
        *(int *)o->target = 1;
        return 1;
    case CLI_INT:
        if (!cli_parse_integer(value, o->lo, o->hi, &v))
            break;
        *(int *)o->target = (int)v;
        return 1;
    case CLI_INT64:
        if (!cli_parse_integer(value, o->lo, o->hi, &v))
            break;
        *(int64_t *)o->target = (int64_t)v;
        return 1;
    case CLI_UINT64: {
        const char *p = value;
        uint64_t u;
        if (!read_digits(&p, &u) || *p) {
            fprintf(stderr, "mlajit %s: %s = '%s'; allowed an integer 0..%" PRIu64 "\n", cmd->name, o->name, value,
                    UINT64_MAX);
            return 0;
        }
        *(uint64_t *)o->target = u;
        return 1;
    }
    case CLI_SIZE:
        if (parse_size(value, o->hi, (int64_t *)o->target))
            return 1;
        fprintf(stderr,
                "mlajit %s: %s = '%s'; allowed a size of 0..%lld bytes: N or N.F with an optional K, M, G or T "
                "(powers of 1024), e.g. 500M\n",
                cmd->name, o->name, value, o->hi);
        return 0;
    case CLI_DOUBLE:
        if (parse_decimal(value, o->lo, o->hi, (double *)o->target))
            return 1;
        fprintf(stderr, "mlajit %s: %s = '%s'; allowed a number %lld..%lld\n", cmd->name, o->name, value, o->lo,
                o->hi);
        return 0;
    case CLI_STRING:
        if (!value[0]) {
            fprintf(stderr, "mlajit %s: %s = ''; allowed a non-empty value\n", cmd->name, o->name);
            return 0;
        }
        *(const char **)o->target = value;
        return 1;
    case CLI_CUSTOM:
        return o->parse(o->name, value, o->target);
    }
    fprintf(stderr, "mlajit %s: %s = '%s'; allowed %lld..%lld\n", cmd->name, o->name, value, o->lo, o->hi);
    return 0;
}

/* The option argument a names ("--name" or "--name=value"), or NULL. */
static const cli_option *find_option(const cli_command *cmd, const char *a, size_t *name_len)
{
    const char *eq = strchr(a, '=');
    *name_len = eq ? (size_t)(eq - a) : strlen(a);
    for (size_t k = 0; k < cmd->num_options; k++)
        if (strlen(cmd->options[k].name) == *name_len && strncmp(cmd->options[k].name, a, *name_len) == 0)
            return &cmd->options[k];
    return NULL;
}

/* Whether --help or -h stands among the options (not as an option's value, not
 * after --): it wins over every other argument, good or bad. */
static int asks_for_help(const cli_command *cmd, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0)
            return 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            return 1;
        size_t len;
        const cli_option *o = a[0] == '-' ? find_option(cmd, a, &len) : NULL;
        if (o && o->kind != CLI_FLAG && !strchr(a, '='))
            i++; /* its value */
    }
    return 0;
}

int cli_parse(const cli_command *cmd, int argc, char **argv, int *num_operands)
{
    if (asks_for_help(cmd, argc, argv)) {
        fputs(cmd->usage, stdout);
        return CLI_OK;
    }
    int n = 0, options_done = 0;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (options_done || a[0] != '-' || a[1] == '\0') { /* an operand ("-" alone is one too) */
            argv[1 + n++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            options_done = 1;
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t name_len;
        const cli_option *o = find_option(cmd, a, &name_len);
        if (!o)
            return cli_usage_error(cmd, "unknown option '%.*s'", (int)name_len, a);
        const char *value = NULL;
        if (o->kind == CLI_FLAG) {
            if (eq)
                return cli_usage_error(cmd, "%s takes no value (given '%s')", o->name, eq + 1);
        } else if (eq) {
            value = eq + 1;
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            return cli_usage_error(cmd, "%s needs a value", o->name);
        }
        if (!set_value(cmd, o, value))
            return CLI_USAGE; /* set_value said which value and what is allowed */
        if (o->given)
            *o->given = 1;
    }
    if (n < cmd->min_operands)
        return cli_usage_error(cmd, "needs %s", cmd->operands ? cmd->operands : "more arguments");
    if (cmd->max_operands >= 0 && n > cmd->max_operands) {
        if (cmd->max_operands == 0)
            return cli_usage_error(cmd, "takes no arguments; extra argument '%s'", argv[1 + cmd->max_operands]);
        return cli_usage_error(cmd, "takes %s; extra argument '%s'", cmd->operands ? cmd->operands : "fewer arguments",
                               argv[1 + cmd->max_operands]);
    }
    *num_operands = n;
    return CLI_PARSED;
}

int cli_parse_operands(const char *name, const char *usage, int min, int max, const char *operands, int argc,
                       char **argv)
{
    const cli_command cmd = {name, usage, NULL, 0, min, max, operands};
    int n;
    return cli_parse(&cmd, argc, argv, &n);
}

int cli_pick_subcommand(const char *group, const char *usage, const char *const *names, int n, int argc,
                        char **argv, int *status)
{
    char list[256] = "";
    for (int k = 0; k < n; k++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "", names[k]);
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(usage, stdout);
        *status = CLI_OK;
        return -1;
    }
    *status = CLI_USAGE;
    if (argc < 2) {
        fprintf(stderr, "mlajit %s: needs a command: %s\n\n%s", group, list, usage);
        return -1;
    }
    for (int k = 0; k < n; k++)
        if (strcmp(argv[1], names[k]) == 0)
            return k;
    fprintf(stderr, "mlajit %s: unknown %s '%s'; allowed %s\n(mlajit %s --help prints its usage)\n", group,
            argv[1][0] == '-' ? "option" : "command", argv[1], list, group);
    return -1;
}

/* ---- values ----------------------------------------------------------------------- */

int cli_parse_variant(const char *name, const char *value, void *target)
{
    if (mlajit_variant_from_name(value, target))
        return 1;
    int rc = mlajit_variant_refuse_retired(MLAJIT_VARIANT_AUTO, value);
    if (rc)
        fprintf(stderr, "mlajit: %s = '%s': %s (%s)\n", name, value, mlajit_last_error(), mlajit_status_string(rc));
    else
        fprintf(stderr, "mlajit: %s = '%s'; allowed " MLAJIT_VARIANT_NAMES "\n", name, value);
    return 0;
}

int cli_parse_model(const char *name, const char *value, void *target)
{
    if (mlajit_model_from_name(value, target) == MLAJIT_OK)
        return 1;
    fprintf(stderr, "mlajit: %s = '%s': model '%s' is unknown; allowed " MLAJIT_MODEL_NAMES "\n", name, value, value);
    return 0;
}

int cli_parse_layout(const char *name, const char *value, void *target)
{
    struct stat st;
    int rc;
    /* a file when one is there (or the name says JSON), else text the library reads */
    if (!strchr(value, '=') && (stat(value, &st) == 0 || strstr(value, ".json")))
        rc = mlajit_layout_read_json_file(value, target);
    else
        rc = mlajit_layout_parse(value, target);
    if (rc == MLAJIT_OK)
        return 1;
    fprintf(stderr, "mlajit: %s = '%s': %s\n  (inline keys: d_nope=,d_rope=,d_v=,tile=,scales=pow2|fp32|ue8m0|none,"
            "place=inline|footer[,row_bytes=][,footer_bytes=][,v=nope|all]; or a JSON file of those keys)\n",
            name, value, mlajit_last_error());
    return 0;
}

int cli_each_item(const char *name, const char *value, char sep, int (*item)(const char *, const char *, void *),
                  void *target)
{
    char buf[512], seps[2] = {sep, '\0'};
    if (strlen(value) >= sizeof buf) {
        fprintf(stderr, "mlajit: %s: the list is longer than %zu characters\n", name, sizeof buf - 1);
        return 0;
    }
    snprintf(buf, sizeof buf, "%s", value);
    int n = 0;
    for (char *save = NULL, *t = strtok_r(buf, seps, &save); t; t = strtok_r(NULL, seps, &save), n++)
        if (!item(name, t, target))
            return 0;
    if (n == 0)
        fprintf(stderr, "mlajit: %s: empty list\n", name);
    return n > 0;
}

int cli_add_feature(const char *name, const char *text, void *target)
{
    unsigned *features = target, bit;
    if (strcmp(text, "none") == 0)
        return 1;
    if (mlajit_feature_from_name(text, &bit) != MLAJIT_OK) {
        mlajit_clear_error();
        fprintf(stderr, "mlajit: %s: '%s' is unknown; allowed none, sink, topk-length, extra-topk-length\n", name,
                text);
        return 0;
    }
    *features |= bit;
    return 1;
}

int cli_parse_features(const char *name, const char *value, void *target)
{
    *(unsigned *)target = 0;
    return cli_each_item(name, value, ',', cli_add_feature, target);
}

int cli_parse_spec(const char *cmd, const char *text, mlajit_kernel_spec *spec)
{
    int rc = mlajit_spec_parse_fields(text, spec);
    if (rc == MLAJIT_OK)
        return 1;
    fprintf(stderr, "mlajit %s: %s (%s)\n(mlajit %s --help prints its usage)\n", cmd, mlajit_last_error(),
            mlajit_status_string(rc), cmd);
    return 0;
}

/* ---- list values: pack build's and tune's grids --------------------------------- */

/* 0 after "at most N values" when a list already holds max of them. */
int cli_room_for(const char *name, int count, int max)
{
    if (count < max)
        return 1;
    fprintf(stderr, "mlajit: %s: at most %d values\n", name, max);
    return 0;
}

int cli_add_layout(const char *name, const char *value, void *target)
{
    cli_layout_list *l = target;
    const int max = (int)(sizeof l->layouts / sizeof l->layouts[0]);
    if (!cli_room_for(name, l->count, max) || !cli_parse_layout(name, value, &l->layouts[l->count]))
        return 0;
    l->count++;
    return 1;
}

static int add_int(const char *name, const char *text, void *target)
{
    cli_int_list *l = target;
    long long v;
    if (!cli_parse_integer(text, l->lo, l->hi, &v)) {
        fprintf(stderr, "mlajit: %s: '%s' is not a number in %d..%d\n", name, text, l->lo, l->hi);
        return 0;
    }
    if (!cli_room_for(name, l->count, 64))
        return 0;
    l->values[l->count++] = (int)v;
    return 1;
}

int cli_parse_int_list(const char *name, const char *value, void *target)
{
    ((cli_int_list *)target)->count = 0;
    return cli_each_item(name, value, ',', add_int, target);
}

static int add_model(const char *name, const char *text, void *target)
{
    cli_model_list *l = target;
    if (!cli_room_for(name, l->count, 8))
        return 0;
    if (mlajit_model_from_name(text, &l->models[l->count]) != MLAJIT_OK) {
        fprintf(stderr, "mlajit: %s: '%s' is unknown; allowed " MLAJIT_MODEL_NAMES "\n", name, text);
        return 0;
    }
    l->count++;
    return 1;
}

int cli_parse_model_list(const char *name, const char *value, void *target)
{
    ((cli_model_list *)target)->count = 0;
    return cli_each_item(name, value, ',', add_model, target);
}

/* One set: feature names joined with '+' ("none" for the empty set). */
static int add_feature_set(const char *name, const char *text, void *target)
{
    cli_feature_sets *l = target;
    unsigned features = 0;
    if (!cli_room_for(name, l->count, 16) || !cli_each_item(name, text, '+', cli_add_feature, &features))
        return 0;
    l->sets[l->count++] = features;
    return 1;
}

int cli_parse_feature_sets(const char *name, const char *value, void *target)
{
    ((cli_feature_sets *)target)->count = 0;
    return cli_each_item(name, value, ',', add_feature_set, target);
}

