/* cache/codec.c - the bounded reader of cache/codec.h. */
#include "cache/codec.h"

#include "common/error.h"
#include "mlajit.h"

#include <inttypes.h>
#include <string.h>

bool mlajit_reader_take(mlajit_byte_reader *r, size_t n, const uint8_t **out)
{
    if (r->pos > r->end || n > r->end - r->pos)
        return false;
    *out = r->bytes + r->pos;
    r->pos += n;
    return true;
}

bool mlajit_reader_u32(mlajit_byte_reader *r, uint32_t *v)
{
    const uint8_t *p;
    if (!mlajit_reader_take(r, 4, &p))
        return false;
    *v = mlajit_get_u32le(p);
    return true;
}

bool mlajit_reader_u64(mlajit_byte_reader *r, uint64_t *v)
{
    const uint8_t *p;
    if (!mlajit_reader_take(r, 8, &p))
        return false;
    *v = mlajit_get_u64le(p);
    return true;
}

int mlajit_reader_string(mlajit_byte_reader *r, const char *what, char *dst, size_t max_len)
{
    uint32_t n;
    const uint8_t *p;
    if (!mlajit_reader_u32(r, &n))
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "header ends before the length of %s", what);
    if (n > max_len)
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "%s length %" PRIu32 " exceeds the limit of %zu", what, n, max_len);
    if (!mlajit_reader_take(r, n, &p))
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "%s length %" PRIu32 " runs past the header", what, n);
    if (memchr(p, '\0', n))
        return mlajit_fail(MLAJIT_ERR_CORRUPT, "%s contains a NUL byte", what);
    memcpy(dst, p, n);
    dst[n] = '\0';
    return MLAJIT_OK;
}

void mlajit_put_string(uint8_t **p, const char *s, size_t n)
{
    mlajit_put_u32le(*p, (uint32_t)n);
    if (n)
        memcpy(*p + 4, s, n);
    *p += 4 + n;
}
