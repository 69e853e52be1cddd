/* A small JSON reader and writer (see json.h). The reader is a recursive-descent
 * parser over untrusted text: every read is bounds-checked, nesting is limited to
 * MLAJIT_JSON_MAX_DEPTH so hostile input cannot exhaust the stack, and every
 * failure frees what was built and reports the byte offset. */
#include "harness/json.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"

#define MAX_NUMBER_LITERAL 128

typedef struct json_parser {
    const char *start, *p, *end;
    int depth;
    char *err;
    size_t errlen;
    int failed;
    int out_of_memory; /* the failure is the machine's, not the text's */
} json_parser;

static void parse_error(json_parser *ps, const char *fmt, ...)
{
    if (ps->failed)
        return; /* keep the first, most specific message */
    ps->failed = 1;
    if (!ps->err || ps->errlen == 0)
        return;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(ps->err, ps->errlen, "%s at byte %zu", msg, (size_t)(ps->p - ps->start));
}

static void parse_out_of_memory(json_parser *ps)
{
    if (!ps->failed)
        ps->out_of_memory = 1;
    parse_error(ps, "out of host memory");
}

static void free_contents(mlajit_json *v)
{
    if (!v)
        return;
    free(v->text);
    for (size_t i = 0; i < v->count; i++) {
        free_contents(&v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    memset(v, 0, sizeof *v);
}

void mlajit_json_free(mlajit_json *root)
{
    free_contents(root);
    free(root);
}

static void skip_whitespace(json_parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Four hex digits at ps->p (after "\u"); -1 when malformed. */
static long read_hex4(json_parser *ps)
{
    if (ps->end - ps->p < 4)
        return -1;
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hex_value(ps->p[i]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    ps->p += 4;
    return v;
}

static size_t utf8_encode(unsigned long cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string literal at ps->p (which is at the opening quote). The decoded text
 * is never longer than the literal, so one allocation of the literal's size is
 * enough. */
static char *parse_string(json_parser *ps)
{
    ps->p++; /* opening quote */
    const char *scan = ps->p;
    while (scan < ps->end && *scan != '"') {
        if (*scan == '\\')
            scan++;
        scan++;
    }
    if (scan >= ps->end) {
        parse_error(ps, "unterminated string");
        return NULL;
    }
    char *out = mlajit_malloc((size_t)(scan - ps->p) + 1);
    if (!out) {
        parse_out_of_memory(ps);
        return NULL;
    }
    size_t n = 0;
    while (*ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p;
        if (c < 0x20) {
            parse_error(ps, "control character in string");
            goto fail;
        }
        if (c != '\\') {
            out[n++] = (char)c;
            ps->p++;
            continue;
        }
        ps->p++;
        char e = *ps->p++;
        switch (e) {
        case '"': out[n++] = '"'; break;
        case '\\': out[n++] = '\\'; break;
        case '/': out[n++] = '/'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'n': out[n++] = '\n'; break;
        case 'r': out[n++] = '\r'; break;
        case 't': out[n++] = '\t'; break;
        case 'u': {
            long cp = read_hex4(ps);
            if (cp < 0) {
                parse_error(ps, "bad \\u escape");
                goto fail;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                /* A high surrogate must be followed by an escaped low surrogate. */
                long low = -1;
                if (ps->end - ps->p >= 2 && ps->p[0] == '\\' && ps->p[1] == 'u') {
                    ps->p += 2;
                    low = read_hex4(ps);
                }
                if (low < 0xDC00 || low > 0xDFFF) {
                    parse_error(ps, "unpaired surrogate in \\u escape");
                    goto fail;
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                parse_error(ps, "unpaired surrogate in \\u escape");
                goto fail;
            } else if (cp == 0) {
                parse_error(ps, "\\u0000 in string is not accepted");
                goto fail;
            }
            n += utf8_encode((unsigned long)cp, out + n);
            break;
        }
        default:
            ps->p--;
            parse_error(ps, "bad escape '\\%c'", e >= 0x20 && e < 0x7F ? e : '?');
            goto fail;
        }
    }
    ps->p++; /* closing quote */
    out[n] = '\0';
    return out;
fail:
    free(out);
    return NULL;
}

static int is_digit(const json_parser *ps)
{
    return ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9';
}

static int parse_number(json_parser *ps, mlajit_json *v)
{
    const char *begin = ps->p;
    if (ps->p < ps->end && *ps->p == '-')
        ps->p++;
    if (!is_digit(ps)) {
        parse_error(ps, "bad number");
        return -1;
    }
    if (*ps->p == '0') {
        ps->p++;
    } else {
        while (is_digit(ps))
            ps->p++;
    }
    if (ps->p < ps->end && *ps->p == '.') {
        ps->p++;
        if (!is_digit(ps)) {
            parse_error(ps, "bad number: no digits after '.'");
            return -1;
        }
        while (is_digit(ps))
            ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
            ps->p++;
        if (!is_digit(ps)) {
            parse_error(ps, "bad number: no digits in exponent");
            return -1;
        }
        while (is_digit(ps))
            ps->p++;
    }
    size_t n = (size_t)(ps->p - begin);
    if (n > MAX_NUMBER_LITERAL) {
        parse_error(ps, "number literal longer than %d characters", MAX_NUMBER_LITERAL);
        return -1;
    }
    v->text = mlajit_malloc(n + 1);
    if (!v->text) {
        parse_out_of_memory(ps);
        return -1;
    }
    memcpy(v->text, begin, n);
    v->text[n] = '\0';
    v->type = MLAJIT_JSON_NUMBER;
    v->number = strtod(v->text, NULL); /* overflow gives +-inf, which callers reject */
    return 0;
}

static int match_literal(json_parser *ps, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return 0;
    ps->p += n;
    return 1;
}

static int parse_value(json_parser *ps, mlajit_json *v);

/* Append a zeroed child (and a key slot for objects), growing geometrically. */
static mlajit_json *append_child(json_parser *ps, mlajit_json *v, size_t *cap, int with_key)
{
    if (v->count == *cap) {
        size_t new_cap = *cap ? *cap * 2 : 4;
        mlajit_json *items = mlajit_realloc(v->items, new_cap * sizeof *items);
        if (!items) {
            parse_out_of_memory(ps);
            return NULL;
        }
        v->items = items;
        if (with_key) {
            char **keys = mlajit_realloc(v->keys, new_cap * sizeof *keys);
            if (!keys) {
                parse_out_of_memory(ps);
                return NULL;
            }
            v->keys = keys;
        }
        *cap = new_cap;
    }
    mlajit_json *child = &v->items[v->count];
    memset(child, 0, sizeof *child);
    if (with_key)
        v->keys[v->count] = NULL;
    v->count++;
    return child;
}

static int parse_container(json_parser *ps, mlajit_json *v, int is_object)
{
    char close = is_object ? '}' : ']';
    v->type = is_object ? MLAJIT_JSON_OBJECT : MLAJIT_JSON_ARRAY;
    if (++ps->depth > MLAJIT_JSON_MAX_DEPTH) {
        parse_error(ps, "nesting deeper than %d levels", MLAJIT_JSON_MAX_DEPTH);
        return -1;
    }
    ps->p++; /* opening bracket */
    size_t cap = 0;
    skip_whitespace(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        ps->depth--;
        return 0;
    }
    for (;;) {
        skip_whitespace(ps);
        if (ps->p >= ps->end) {
            parse_error(ps, "unexpected end of text inside %s", is_object ? "an object" : "an array");
            return -1;
        }
        char *key = NULL;
        if (is_object) {
            if (ps->p >= ps->end || *ps->p != '"') {
                parse_error(ps, "expected a member name in quotes");
                return -1;
            }
            key = parse_string(ps);
            if (!key)
                return -1;
            skip_whitespace(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                free(key);
                parse_error(ps, "expected ':' after member name");
                return -1;
            }
            ps->p++;
        }
        mlajit_json *child = append_child(ps, v, &cap, is_object);
        if (!child) {
            free(key);
            return -1;
        }
        if (is_object)
            v->keys[v->count - 1] = key;
        if (parse_value(ps, child) != 0)
            return -1;
        skip_whitespace(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            ps->depth--;
            return 0;
        }
        if (ps->p >= ps->end)
            parse_error(ps, "unexpected end of text inside %s", is_object ? "an object" : "an array");
        else
            parse_error(ps, "expected ',' or '%c'", close);
        return -1;
    }
}

static int parse_value(json_parser *ps, mlajit_json *v)
{
    skip_whitespace(ps);
    if (ps->p >= ps->end) {
        parse_error(ps, "unexpected end of text");
        return -1;
    }
    switch (*ps->p) {
    case '{':
        return parse_container(ps, v, 1);
    case '[':
        return parse_container(ps, v, 0);
    case '"':
        v->type = MLAJIT_JSON_STRING;
        v->text = parse_string(ps);
        return v->text ? 0 : -1;
    case 't':
    case 'f':
    case 'n':
        if (match_literal(ps, "true")) {
            v->type = MLAJIT_JSON_BOOL;
            v->boolean = 1;
            return 0;
        }
        if (match_literal(ps, "false")) {
            v->type = MLAJIT_JSON_BOOL;
            return 0;
        }
        if (match_literal(ps, "null")) {
            v->type = MLAJIT_JSON_NULL;
            return 0;
        }
        parse_error(ps, "unknown literal");
        return -1;
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))
            return parse_number(ps, v);
        parse_error(ps, "unexpected character 0x%02x", (unsigned char)*ps->p);
        return -1;
    }
}

int mlajit_json_parse(const char *text, size_t len, mlajit_json **out, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    *out = NULL;
    json_parser ps = {.start = text, .p = text, .end = text ? text + len : NULL, .err = err, .errlen = errlen};
    if (!text) {
        parse_error(&ps, "no text");
        return -1;
    }
    if (len > MLAJIT_JSON_MAX_TEXT) {
        parse_error(&ps, "text of %zu bytes is larger than the limit of %u", len, MLAJIT_JSON_MAX_TEXT);
        return -1;
    }
    mlajit_json *root = mlajit_calloc(1, sizeof *root);
    if (!root) {
        parse_out_of_memory(&ps);
        return -2;
    }
    if (parse_value(&ps, root) == 0) {
        skip_whitespace(&ps);
        if (ps.p != ps.end)
            parse_error(&ps, "unexpected text after the value");
    }
    if (ps.failed) {
        mlajit_json_free(root);
        return ps.out_of_memory ? -2 : -1;
    }
    *out = root;
    return 0;
}

const mlajit_json *mlajit_json_get(const mlajit_json *v, const char *key)
{
    if (!v || v->type != MLAJIT_JSON_OBJECT || !key)
        return NULL;
    for (size_t i = v->count; i-- > 0;)
        if (strcmp(v->keys[i], key) == 0)
            return &v->items[i];
    return NULL;
}

int mlajit_json_is_null(const mlajit_json *v) { return !v || v->type == MLAJIT_JSON_NULL; }

/* An integer literal: digits with an optional minus sign, nothing else. */
static int is_integer_literal(const mlajit_json *v)
{
    if (!v || v->type != MLAJIT_JSON_NUMBER || !v->text)
        return 0;
    return strpbrk(v->text, ".eE") == NULL;
}

int mlajit_json_int64(const mlajit_json *v, int64_t *out)
{
    if (!is_integer_literal(v))
        return -1;
    errno = 0;
    char *end = NULL;
    long long x = strtoll(v->text, &end, 10);
    if (errno == ERANGE || !end || *end != '\0')
        return -1;
    *out = (int64_t)x;
    return 0;
}

int mlajit_json_uint64(const mlajit_json *v, uint64_t *out)
{
    if (!is_integer_literal(v) || v->text[0] == '-')
        return -1;
    errno = 0;
    char *end = NULL;
    unsigned long long x = strtoull(v->text, &end, 10);
    if (errno == ERANGE || !end || *end != '\0')
        return -1;
    *out = (uint64_t)x;
    return 0;
}

/* ---- writer ------------------------------------------------------------- */

void mlajit_json_writer_init(mlajit_json_writer *w) { memset(w, 0, sizeof *w); }

void mlajit_json_writer_free(mlajit_json_writer *w)
{
    free(w->out.data);
    memset(w, 0, sizeof *w);
}

static void put_bytes(mlajit_json_writer *w, const char *s, size_t n)
{
    if (!w->failed)
        mlajit_strbuf_append(&w->out, s, n);
}

static void put_text(mlajit_json_writer *w, const char *s) { put_bytes(w, s, strlen(s)); }

static void put_quoted(mlajit_json_writer *w, const char *s)
{
    put_bytes(w, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        char esc[8];
        if (*c == '"' || *c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*c;
            put_bytes(w, esc, 2);
        } else if (*c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *c);
            put_text(w, esc);
        } else {
            put_bytes(w, (const char *)c, 1);
        }
    }
    put_bytes(w, "\"", 1);
}

static void put_indent(mlajit_json_writer *w)
{
    put_bytes(w, "\n", 1);
    for (int i = 0; i < w->depth; i++)
        put_bytes(w, " ", 1);
}

/* Separator, newline and indentation, then the member name, before a value. */
static void begin_value(mlajit_json_writer *w, const char *key)
{
    if (w->depth > 0) {
        if (!w->first[w->depth - 1])
            put_bytes(w, ",", 1);
        w->first[w->depth - 1] = 0;
        put_indent(w);
    }
    if (key) {
        put_quoted(w, key);
        put_bytes(w, ": ", 2);
    }
}

static void begin_container(mlajit_json_writer *w, const char *key, int is_array)
{
    begin_value(w, key);
    put_text(w, is_array ? "[" : "{");
    if (w->depth >= MLAJIT_JSON_MAX_DEPTH) {
        w->failed = 1;
        return;
    }
    w->first[w->depth] = 1;
    w->is_array[w->depth] = (unsigned char)is_array;
    w->depth++;
}

void mlajit_json_begin_object(mlajit_json_writer *w, const char *key) { begin_container(w, key, 0); }
void mlajit_json_begin_array(mlajit_json_writer *w, const char *key) { begin_container(w, key, 1); }

void mlajit_json_end(mlajit_json_writer *w)
{
    if (w->depth <= 0 || w->failed) {
        w->failed = 1;
        return;
    }
    w->depth--;
    int empty = w->first[w->depth];
    if (!empty)
        put_indent(w);
    char close = w->is_array[w->depth] ? ']' : '}';
    put_bytes(w, &close, 1);
}

void mlajit_json_write_string(mlajit_json_writer *w, const char *key, const char *value)
{
    begin_value(w, key);
    put_quoted(w, value ? value : "");
}

void mlajit_json_write_int(mlajit_json_writer *w, const char *key, int64_t value)
{
    char num[32];
    snprintf(num, sizeof num, "%" PRId64, value);
    begin_value(w, key);
    put_text(w, num);
}

void mlajit_json_write_uint(mlajit_json_writer *w, const char *key, uint64_t value)
{
    char num[32];
    snprintf(num, sizeof num, "%" PRIu64, value);
    begin_value(w, key);
    put_text(w, num);
}

void mlajit_json_write_double(mlajit_json_writer *w, const char *key, double value)
{
    if (!isfinite(value)) {
        mlajit_json_write_null(w, key);
        return;
    }
    char num[40];
    snprintf(num, sizeof num, "%.17g", value); /* 17 digits: reads back to the same double */
    if (!strpbrk(num, ".eE"))
        strcat(num, ".0"); /* stays a float literal, like Python writes it */
    begin_value(w, key);
    put_text(w, num);
}

void mlajit_json_write_null(mlajit_json_writer *w, const char *key)
{
    begin_value(w, key);
    put_text(w, "null");
}

void mlajit_json_write_shape(mlajit_json_writer *w, const char *key, const int64_t *dims, int n)
{
    begin_value(w, key);
    put_bytes(w, "[", 1);
    for (int i = 0; i < n; i++) {
        char num[32];
        snprintf(num, sizeof num, i ? ", %" PRId64 : "%" PRId64, dims[i]);
        put_text(w, num);
    }
    put_bytes(w, "]", 1);
}

int mlajit_json_writer_ok(const mlajit_json_writer *w)
{
    return !w->failed && !w->out.failed && w->depth == 0 && w->out.data ? 0 : -1;
}
