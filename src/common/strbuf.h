/* Internal: a growable, NUL-terminated text buffer. An allocation failure marks
 * it failed; later calls do nothing, so a writer checks once at the end. */
#ifndef MLAJIT_COMMON_STRBUF_H
#define MLAJIT_COMMON_STRBUF_H

#include <stddef.h>

#include "common/error.h"

typedef struct mlajit_strbuf {
    char *data; /* NULL until something is written; free() it */
    size_t len, cap;
    int failed;
} mlajit_strbuf;

/* Room for `more` bytes past the text in one allocation (a writer that knows its
 * size spares the doublings' copies and the pages they touch). */
void mlajit_strbuf_reserve(mlajit_strbuf *b, size_t more);
void mlajit_strbuf_append(mlajit_strbuf *b, const char *text, size_t len);
void mlajit_strbuf_printf(mlajit_strbuf *b, const char *fmt, ...) MLAJIT_PRINTF(2, 3);

#endif
