#include "error.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char last_message[1024];

int mlajit_fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_message, sizeof last_message, fmt, ap);
    va_end(ap);
    return status;
}

int mlajit_fail_prefix(int status, const char *fmt, ...)
{
    char prefix[256], old[sizeof last_message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_message, sizeof old);
    size_t n = strlen(prefix);
    if (n >= sizeof last_message)
        n = sizeof last_message - 1;
    memcpy(last_message, prefix, n);
    size_t rest = strnlen(old, sizeof old - 1);
    if (rest > sizeof last_message - 1 - n)
        rest = sizeof last_message - 1 - n;
    memcpy(last_message + n, old, rest);
    last_message[n + rest] = '\0';
    return status;
}

void mlajit_clear_error(void) { last_message[0] = '\0'; }

const char *mlajit_last_error(void) { return last_message; }

/* The handler mlajit_set_log_handler installed (NULL: stderr), read as a pair
 * under the lock and called outside it. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static mlajit_log_handler log_handler;
static void *log_user;

void mlajit_set_log_handler(mlajit_log_handler handler, void *user)
{
    pthread_mutex_lock(&log_lock);
    log_handler = handler;
    log_user = handler ? user : NULL;
    pthread_mutex_unlock(&log_lock);
}

/* Deliver a formatted line: to the handler if one is set (1), else the caller
 * writes it to stderr (0). */
static int log_to_handler(int level, const char *fmt, va_list ap)
{
    pthread_mutex_lock(&log_lock);
    mlajit_log_handler handler = log_handler;
    void *user = log_user;
    pthread_mutex_unlock(&log_lock);
    if (!handler)
        return 0;
    char line[1024];
    vsnprintf(line, sizeof line, fmt, ap);
    handler(user, level, line);
    return 1;
}

void mlajit_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int handled = log_to_handler(MLAJIT_LOG_WARNING, fmt, ap);
    va_end(ap);
    const char *log = getenv("MLAJIT_LOG");
    if (handled || (log && strcmp(log, "quiet") == 0))
        return;
    char line[1024];
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "mlajit: warning: %s\n", line); /* one write, as mlajit_info's */
}

void mlajit_info(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int handled = log_to_handler(MLAJIT_LOG_INFO, fmt, ap);
    va_end(ap);
    const char *log = getenv("MLAJIT_LOG");
    if (handled || !log || strcmp(log, "info") != 0)
        return;
    char line[1024];
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "mlajit: %s\n", line); /* one write, so lines from threads do not interleave */
}

double mlajit_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

const char *mlajit_status_string(int status)
{
    switch (status) {
    case MLAJIT_OK: return "success";
    case MLAJIT_ERR_INVALID_ARGUMENT: return "invalid argument";
    case MLAJIT_ERR_UNSUPPORTED: return "outside the supported envelope";
    case MLAJIT_ERR_OUT_OF_MEMORY: return "out of host memory";
    case MLAJIT_ERR_NO_DEVICE: return "no CUDA driver or GPU";
    case MLAJIT_ERR_COMPILE: return "kernel compilation failed";
    case MLAJIT_ERR_CACHE: return "kernel cache failure";
    case MLAJIT_ERR_CUDA: return "CUDA driver call failed";
    case MLAJIT_ERR_IO: return "file input/output failed";
    case MLAJIT_ERR_NOT_FOUND: return "not found";
    case MLAJIT_ERR_CORRUPT: return "stored data is corrupt";
    case MLAJIT_ERR_INTERNAL: return "internal error";
    default: return "unknown status code";
    }
}

void mlajit_free(void *ptr) { free(ptr); }
