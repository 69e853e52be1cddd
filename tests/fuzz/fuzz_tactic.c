/* libFuzzer harness: tactic records (cache/tactics.h) - the value decoder, the
 * check that a record is its key's, and the nearest-bucket chooser. Decoding
 * must accept or refuse any bytes, with a message, without reading past them;
 * what it accepts must encode back to the very same bytes (the format has one
 * encoding), make its own key, be found by a chooser asking for its own
 * (GPU, spec, bucket), and be refused by one asking for another GPU.
 *
 * The first input byte picks the mode (its low two bits):
 *   0  the rest is a value, decoded as it is;
 *   1  the same, with the length field (bytes 12..15) and the checksum (the
 *      last 8 bytes) recomputed first, so mutations reach the fields;
 *   2  the first 27 bytes are a key, the rest a value: decoded for that key;
 *   3  the same, with the value's length and checksum recomputed.
 * The corpus (corpus/fuzz_tactic) holds records of each shape in each mode,
 * written by make_corpus.c with mlajit_tactic_encode. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache/tactics.h"
#include "mlajit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void store_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int k = 0; k < bytes; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

static void reseal(uint8_t *value, size_t len)
{
    if (len < 24 || len > UINT32_MAX)
        return;
    store_le(value + 12, (uint64_t)len, 4);
    store_le(value + len - 8, mlajit_hash64(value, len - 8), 8);
}

static void check_accepted(const mlajit_tactic_record *r, const uint8_t *value, size_t len, const uint8_t *key)
{
    void *again = NULL;
    size_t again_len = 0;
    if (mlajit_tactic_encode(r, &again, &again_len) != MLAJIT_OK)
        abort(); /* a record that decodes must encode */
    if (again_len != len || memcmp(again, value, len) != 0)
        abort(); /* and to the same bytes */
    free(again);
    uint8_t own[MLAJIT_TACTIC_KEY_BYTES];
    mlajit_tactic_key_of(r, own);
    if (key && memcmp(own, key, sizeof own) != 0)
        abort(); /* decode_keyed accepted a record under another key */
    if (!mlajit_tactic_bucket_valid(&r->bucket) || mlajit_tactic_bucket_distance(&r->bucket, &r->bucket) != 0)
        abort();

    if (strcmp(r->key_recipe, MLAJIT_TACTIC_KEY_RECIPE) != 0)
        return; /* another mlajit's key: its look-ups call it stale (decode_keyed) */
    /* A chooser for its own (GPU, spec, bucket) takes it; one for another GPU does not. */
    mlajit_tactic_skipped skipped = {0};
    mlajit_tactic_chooser c = {.gpu = &r->gpu, .spec = r->spec, .shape = &r->bucket, .skipped = &skipped};
    mlajit_tactic_chooser_offer(&c, own, sizeof own, value, len);
    if (!c.found || skipped.damaged || skipped.stale || memcmp(&c.best.bucket, &r->bucket, sizeof r->bucket) != 0)
        abort();
    mlajit_gpu_identity other = r->gpu;
    other.sm_count = other.sm_count == 1 ? 2 : 1;
    mlajit_tactic_chooser o = {.gpu = &other, .spec = r->spec, .shape = &r->bucket, .skipped = &skipped};
    mlajit_tactic_chooser_offer(&o, own, sizeof own, value, len);
    if (o.found || !skipped.damaged || !skipped.first[0])
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const int mode = data[0] & 3;
    const int keyed = mode >= 2;
    size--;
    if (keyed && size < MLAJIT_TACTIC_KEY_BYTES)
        return 0;
    /* Private copies of exactly their sizes, so any over-read is out of bounds. */
    size_t key_len = keyed ? MLAJIT_TACTIC_KEY_BYTES : 0, len = size - key_len;
    uint8_t *key = keyed ? malloc(key_len) : NULL, *value = malloc(len ? len : 1);
    if ((keyed && !key) || !value) {
        free(key);
        free(value);
        return 0;
    }
    if (keyed)
        memcpy(key, data + 1, key_len);
    memcpy(value, data + 1 + key_len, len);
    if (mode & 1)
        reseal(value, len);
    mlajit_tactic_record r;
    memset(&r, 0xA5, sizeof r);
    int rc = keyed ? mlajit_tactic_decode_keyed(key, key_len, value, len, &r) : mlajit_tactic_decode(value, len, &r);
    if (rc != MLAJIT_OK) {
        if (mlajit_last_error()[0] == '\0')
            abort(); /* a refusal must say why */
        if (rc != MLAJIT_ERR_CORRUPT && rc != MLAJIT_CACHE_STALE)
            abort();
        if (r.spec[0] || r.gpu.name[0] || r.kernel[0])
            abort(); /* nothing of a refused record is handed out */
    } else {
        check_accepted(&r, value, len, key);
    }
    free(key);
    free(value);
    return 0;
}
