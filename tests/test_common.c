/* src/common: the growable text buffer (the error channel is exercised by every
 * suite's message checks). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"

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
