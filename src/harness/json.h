/* Internal: a small JSON reader and writer for case.json files.
 *
 * The reader builds a tree from untrusted text with limits on size and nesting
 * depth, so a hostile or damaged file gives an error message, never a crash. The
 * writer emits indented JSON into a growing buffer. */
#ifndef MLAJIT_HARNESS_JSON_H
#define MLAJIT_HARNESS_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "common/strbuf.h"

#define MLAJIT_JSON_MAX_DEPTH 64
#define MLAJIT_JSON_MAX_TEXT (16u << 20) /* bytes of input text accepted */

typedef enum mlajit_json_type {
    MLAJIT_JSON_NULL,
    MLAJIT_JSON_BOOL,
    MLAJIT_JSON_NUMBER,
    MLAJIT_JSON_STRING,
    MLAJIT_JSON_ARRAY,
    MLAJIT_JSON_OBJECT
} mlajit_json_type;

typedef struct mlajit_json mlajit_json;
struct mlajit_json {
    mlajit_json_type type;
    int boolean;         /* BOOL */
    double number;       /* NUMBER (strtod of the literal) */
    char *text;          /* STRING: the decoded UTF-8 (NUL-free); NUMBER: the literal */
    size_t count;        /* ARRAY / OBJECT: number of children */
    char **keys;         /* OBJECT: keys[i] names items[i] */
    mlajit_json *items;  /* ARRAY / OBJECT children */
};

/* Parse len bytes of text. On success (0) *out is a tree to release with
 * mlajit_json_free. On failure returns -1 (the text is not JSON the reader
 * takes) or -2 (out of host memory) and writes a message with the byte offset
 * into err (errlen bytes). */
int mlajit_json_parse(const char *text, size_t len, mlajit_json **out, char *err, size_t errlen);
void mlajit_json_free(mlajit_json *root);

/* The member of an object named key (the last one if repeated), or NULL when v
 * is not an object or has no such member. */
const mlajit_json *mlajit_json_get(const mlajit_json *v, const char *key);

/* 1 when v is absent (NULL) or JSON null. */
int mlajit_json_is_null(const mlajit_json *v);

/* Read an integer literal (no fraction or exponent) that fits int64. 0 on
 * success, nonzero when v is not such a number. */
int mlajit_json_int64(const mlajit_json *v, int64_t *out);
int mlajit_json_uint64(const mlajit_json *v, uint64_t *out);

/* ---- writer ------------------------------------------------------------- */

typedef struct mlajit_json_writer {
    mlajit_strbuf out;                        /* the text: out.data, out.len */
    int depth;
    int failed;                               /* a nesting error (allocation failures: out.failed) */
    unsigned char first[MLAJIT_JSON_MAX_DEPTH]; /* no member written yet at this depth */
    unsigned char is_array[MLAJIT_JSON_MAX_DEPTH]; /* the container at this depth is an array */
    int after_key;                            /* a key was just written */
} mlajit_json_writer;

void mlajit_json_writer_init(mlajit_json_writer *w);
void mlajit_json_writer_free(mlajit_json_writer *w);

/* Containers; key is the member name inside an object, NULL inside an array or
 * at the top. */
void mlajit_json_begin_object(mlajit_json_writer *w, const char *key);
void mlajit_json_begin_array(mlajit_json_writer *w, const char *key);
void mlajit_json_end(mlajit_json_writer *w);

void mlajit_json_write_string(mlajit_json_writer *w, const char *key, const char *value);
void mlajit_json_write_int(mlajit_json_writer *w, const char *key, int64_t value);
void mlajit_json_write_uint(mlajit_json_writer *w, const char *key, uint64_t value);
void mlajit_json_write_double(mlajit_json_writer *w, const char *key, double value); /* non-finite: null */
void mlajit_json_write_null(mlajit_json_writer *w, const char *key);

/* Write an array of n int64 values (a shape) on one line. */
void mlajit_json_write_shape(mlajit_json_writer *w, const char *key, const int64_t *dims, int n);

/* 0 when everything was written (w->buf holds len bytes, NUL-terminated). */
int mlajit_json_writer_ok(const mlajit_json_writer *w);

/* ---- layouts (layout_json.c) --------------------------------------------- */

struct mlajit_layout;
/* A layout from JSON: an object of mlajit_layout_parse's inline keys (numbers;
 * strings for scales, place and v), e.g. {"d_nope": 256, "d_rope": 64, "tile":
 * 32, "scales": "ue8m0", "place": "inline"}, or a string that function reads.
 * MLAJIT_OK, or MLAJIT_ERR_INVALID_ARGUMENT naming the key. */
int mlajit_layout_from_json(const mlajit_json *v, struct mlajit_layout *out);
/* The same from a file holding that JSON (MLAJIT_ERR_IO when unreadable). */
int mlajit_layout_read_json_file(const char *path, struct mlajit_layout *out);

#endif
