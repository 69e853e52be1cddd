/* libFuzzer harness: a cache entry's stored bytes (cache/store.h). Decoding must
 * accept or refuse any bytes, with a message, without reading past them; what it
 * accepts must encode back to bytes that decode to the same entry.
 *
 * The first input byte picks the mode. Odd: the rest is decoded as it is. Even:
 * the two XXH3 checksums are recomputed first (header length at byte 12, the
 * cubin's hash 16 bytes and the header's hash 8 bytes before the header's end,
 * as store.c lays them out), so mutations reach the fields behind the checks.
 * The corpus's seeds are written by make_corpus.c. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache/store.h"
#include "mlajit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint32_t load_u32le(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

static void store_u64le(uint8_t *p, uint64_t v)
{
    for (int k = 0; k < 8; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

static void fix_checksums(uint8_t *value, size_t len)
{
    if (len < 16)
        return;
    uint32_t header_len = load_u32le(value + 12);
    if (header_len < 32 || header_len > len)
        return;
    store_u64le(value + header_len - 16, mlajit_hash64(value + header_len, len - header_len));
    store_u64le(value + header_len - 8, mlajit_hash64(value, header_len - 8));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const int raw = data[0] & 1;
    size--;
    /* A private copy of exactly size bytes, so any over-read is out of bounds. */
    uint8_t *value = malloc(size ? size : 1);
    if (!value)
        return 0;
    memcpy(value, data + 1, size);
    if (!raw)
        fix_checksums(value, size);
    mlajit_cache_entry entry;
    memset(&entry, 0xA5, sizeof entry);
    int rc = mlajit_cache_entry_decode(value, size, &entry);
    free(value);
    if (rc != MLAJIT_OK) {
        if (mlajit_last_error()[0] == '\0')
            abort(); /* a refusal must say why */
        return 0;
    }
    void *again = NULL;
    size_t again_len = 0;
    if (mlajit_cache_entry_encode(&entry, &again, &again_len) != MLAJIT_OK)
        abort(); /* an entry that decodes must encode */
    mlajit_cache_entry back;
    if (mlajit_cache_entry_decode(again, again_len, &back) != MLAJIT_OK || back.cubin_size != entry.cubin_size ||
        memcmp(back.cubin, entry.cubin, entry.cubin_size) != 0 || strcmp(back.spec_string, entry.spec_string) != 0 ||
        strcmp(back.entry_names, entry.entry_names) != 0 || back.registers != entry.registers ||
        back.shared_bytes != entry.shared_bytes || back.spill_bytes != entry.spill_bytes ||
        memcmp(&back.launch, &entry.launch, sizeof entry.launch) != 0 || back.created_unix != entry.created_unix)
        abort();
    mlajit_cache_entry_clear(&back);
    mlajit_cache_entry_clear(&entry);
    free(again);
    return 0;
}
