/* Internal: subcommands of the mlajit CLI. Exit codes: 0 ok, 1 failure, 2 usage. */
#ifndef MLAJIT_CLI_H
#define MLAJIT_CLI_H

#include "mlajit.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

int cli_bench(int argc, char **argv);
int cli_fuzz(int argc, char **argv);     /* fuzz.c */
int cli_envelope(int argc, char **argv); /* envelope.c */
int cli_pack(int argc, char **argv);     /* pack.c */
int cli_cache(int argc, char **argv);    /* cache_cmd.c */

/* Print "mlajit: <what>: <last error>" and return the exit code for status. */
int cli_error(int status, const char *what);
/* --variant (MLAJIT_VARIANT_NAMES); prints the allowed values and returns 0 when bad. */
int cli_parse_variant(const char *s, mlajit_variant *out);
/* Parse option `name`'s decimal value s into *out if it lies in lo..hi; else print
 * "mlajit: NAME = 'S'; allowed LO..HI" and return 0. */
int cli_parse_int(const char *s, const char *name, int lo, int hi, int *out);

/* A numeric option of a command: its name, where its value goes, its range. */
typedef struct cli_int_option {
    const char *name;
    int *target;
    int lo, hi;
} cli_int_option;
/* When argv[*i] names one of the n options, parse its value (argv[*i + 1]) into its
 * target and step *i past it: 1. A missing or bad value prints
 * "mlajit: CMD: NAME needs a value" or cli_parse_int's message: -1. Another
 * argument: 0, nothing printed. */
int cli_match_int_option(int argc, char **argv, int *i, const cli_int_option *opts, size_t n, const char *cmd);

#endif
