/* Internal: the thread-local error message behind mlajit_last_error(). */
#ifndef MLAJIT_COMMON_ERROR_H
#define MLAJIT_COMMON_ERROR_H

#include "mlajit.h"

#if defined(__GNUC__)
#define MLAJIT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define MLAJIT_PRINTF(a, b)
#endif

/* Record a message for the calling thread and return status, so a failing path
 * reads: return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "h_q is %d; allowed 1..128", h); */
int mlajit_fail(int status, const char *fmt, ...) MLAJIT_PRINTF(2, 3);

/* Prepend context to the current message ("plan: " + old message) and return status. */
int mlajit_fail_prefix(int status, const char *fmt, ...) MLAJIT_PRINTF(2, 3);

/* Clear the calling thread's message (at the start of each public call). */
void mlajit_clear_error(void);

/* A one-line warning on stderr ("mlajit: warning: ..."), unless MLAJIT_LOG=quiet;
 * to the log handler instead where one is set (mlajit_set_log_handler). */
void mlajit_warn(const char *fmt, ...) MLAJIT_PRINTF(1, 2);

/* A one-line progress note on stderr ("mlajit: ...") when MLAJIT_LOG=info: one
 * per compile and per pack opened, so a first call never looks like a hang; to
 * the log handler instead (whatever MLAJIT_LOG says) where one is set. */
void mlajit_info(const char *fmt, ...) MLAJIT_PRINTF(1, 2);

/* Monotonic clock in milliseconds. */
double mlajit_now_ms(void);

#endif
