/* cache/codec.h - the byte-level pieces of mlajit's stored formats (cache
 * entries, pack trailers, tactic records): little-endian integers, and a
 * bounded reader whose every read either fits or fails. Internal to cache/. */
#ifndef MLAJIT_CACHE_CODEC_H
#define MLAJIT_CACHE_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline void mlajit_put_u32le(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void mlajit_put_u64le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t mlajit_get_u32le(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static inline uint64_t mlajit_get_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* A cursor over bytes [pos, end) of a buffer. */
typedef struct mlajit_byte_reader {
    const uint8_t *bytes;
    size_t pos, end;
} mlajit_byte_reader;

/* The next n bytes (*out points at them): true, or false when fewer are left. */
bool mlajit_reader_take(mlajit_byte_reader *r, size_t n, const uint8_t **out);
bool mlajit_reader_u32(mlajit_byte_reader *r, uint32_t *v);
bool mlajit_reader_u64(mlajit_byte_reader *r, uint64_t *v);

/* A u32 length then that many bytes, at most max_len and without a NUL, into
 * dst (max_len + 1 bytes, NUL-terminated): MLAJIT_OK, or MLAJIT_ERR_CORRUPT
 * with a message naming what. */
int mlajit_reader_string(mlajit_byte_reader *r, const char *what, char *dst, size_t max_len);

/* Writes a u32 length and the n bytes of s at *p, and moves *p past them. */
void mlajit_put_string(uint8_t **p, const char *s, size_t n);

#endif
