/* src/common: the growable text buffer and the log handler (the error channel
 * is exercised by every suite's message checks). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/strbuf.h"
#include "mlajit.h"

Test(strbuf, appends_and_formats_past_several_doublings)
{
    mlajit_strbuf b = {0};
    char want[20000] = "";
    size_t n = 0;
    for (int i = 0; i < 1000; i++) {
        mlajit_strbuf_printf(&b, "line %d;", i);
        n += (size_t)snprintf(want + n, sizeof want - n, "line %d;", i);
        mlajit_strbuf_append(&b, "xy", 1);
        want[n++] = 'x';
        want[n] = '\0';
    }
    cr_assert(!b.failed);
    cr_expect_eq(b.len, n);
    cr_expect_eq(strlen(b.data), b.len, "NUL-terminated at len");
    cr_expect_str_eq(b.data, want);
    cr_expect_geq(b.cap, b.len + 1);
    free(b.data);
}

Test(strbuf, empty_writes_still_give_a_string)
{
    mlajit_strbuf b = {0};
    mlajit_strbuf_append(&b, "", 0);
    mlajit_strbuf_printf(&b, "%s", "");
    cr_assert_not_null(b.data);
    cr_expect_eq(b.len, 0u);
    cr_expect_str_eq(b.data, "");
    free(b.data);
}

Test(strbuf, a_failed_buffer_ignores_later_writes)
{
    mlajit_strbuf b = {0};
    mlajit_strbuf_printf(&b, "kept");
    b.failed = 1; /* as after an allocation failure */
    mlajit_strbuf_append(&b, "lost", 4);
    mlajit_strbuf_printf(&b, "%d", 12345);
    cr_expect_eq(b.len, 4u);
    cr_expect_str_eq(b.data, "kept");
    free(b.data);
}

/* ---- the log handler ------------------------------------------------------- */

typedef struct log_record {
    int calls, last_level;
    char last[256];
    void *user;
} log_record;

static void record_line(void *user, int level, const char *message)
{
    log_record *r = user;
    r->calls++;
    r->last_level = level;
    r->user = user;
    snprintf(r->last, sizeof r->last, "%s", message);
}

/* A handler gets both levels whatever MLAJIT_LOG says (the suite runs with
 * MLAJIT_LOG=quiet), formatted, with its user pointer; NULL puts stderr back. */
Test(log, a_handler_gets_every_line_with_its_level_and_user)
{
    log_record r = {0};
    setenv("MLAJIT_LOG", "quiet", 1);
    mlajit_set_log_handler(record_line, &r);
    mlajit_warn("pack %s skipped (%d)", "a.pack", 7);
    cr_expect_eq(r.calls, 1);
    cr_expect_eq(r.last_level, MLAJIT_LOG_WARNING);
    cr_expect_str_eq(r.last, "pack a.pack skipped (7)");
    cr_expect_eq(r.user, &r);
    unsetenv("MLAJIT_LOG");
    mlajit_info("compiled %s in %.1f ms", "v32.h16", 12.5);
    cr_expect_eq(r.calls, 2, "info lines reach a handler without MLAJIT_LOG=info");
    cr_expect_eq(r.last_level, MLAJIT_LOG_INFO);
    cr_expect_str_eq(r.last, "compiled v32.h16 in 12.5 ms");
    mlajit_set_log_handler(NULL, &r);
    setenv("MLAJIT_LOG", "quiet", 1);
    mlajit_warn("to stderr now (and quiet)");
    mlajit_info("not delivered");
    cr_expect_eq(r.calls, 2, "after NULL nothing reaches the old handler");
}

/* A library path that warns reaches the handler: a cache directory that cannot
 * be made is one warning, never an error. */
Test(log, a_context_warning_reaches_the_handler)
{
    log_record r = {0};
    mlajit_set_log_handler(record_line, &r);
    mlajit_context_options o = {.struct_size = sizeof o,
                                .cache_dir = "/proc/mlajit-cannot-make-this", .flags = MLAJIT_CONTEXT_NO_DEVICE,
                                .packs = ""};
    mlajit_context *ctx = NULL;
    cr_assert_eq(mlajit_context_create(&o, &ctx), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_set_log_handler(NULL, NULL);
    cr_expect_geq(r.calls, 1);
    cr_expect_eq(r.last_level, MLAJIT_LOG_WARNING);
    cr_expect(strstr(r.last, "/proc/mlajit-cannot-make-this"), "%s", r.last);
    mlajit_context_destroy(ctx);
}
