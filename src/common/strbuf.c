/* The growable text buffer shared by the generator, the pack manifest writer and
 * the JSON writer. */
#include "common/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"

static int grow_to(mlajit_strbuf *b, size_t cap)
{
    char *p = mlajit_realloc(b->data, cap);
    if (!p) {
        b->failed = 1;
        return 0;
    }
    b->data = p;
    b->cap = cap;
    return 1;
}

/* Room for `more` bytes plus the NUL; capacity doubles (from 256). */
static int reserve(mlajit_strbuf *b, size_t more)
{
    if (b->failed)
        return 0;
    if (b->data && b->len + more + 1 <= b->cap)
        return 1;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more + 1)
        cap *= 2;
    return grow_to(b, cap);
}

void mlajit_strbuf_reserve(mlajit_strbuf *b, size_t more)
{
    if (!b->failed && !(b->data && b->len + more + 1 <= b->cap))
        grow_to(b, b->len + more + 1);
}

void mlajit_strbuf_append(mlajit_strbuf *b, const char *text, size_t len)
{
    if (!reserve(b, len))
        return;
    memcpy(b->data + b->len, text, len);
    b->len += len;
    b->data[b->len] = '\0';
}

void mlajit_strbuf_printf(mlajit_strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = 1;
        return;
    }
    if (!reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}
