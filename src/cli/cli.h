/* Internal: subcommands of the mlajit CLI. Exit codes: 0 ok, 1 failure, 2 usage. */
#ifndef MLAJIT_CLI_H
#define MLAJIT_CLI_H

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

int cli_bench(int argc, char **argv);

/* Print "mlajit: <what>: <last error>" and return the exit code for status. */
int cli_error(int status, const char *what);

#endif
