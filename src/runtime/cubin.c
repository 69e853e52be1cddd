/* What a cubin says about its own kernels: the register count ptxas gave an entry,
 * read from the ELF (the EIATTR_REGCOUNT records of its .nv.info section), so it
 * does not depend on how ptxas orders the lines of its -v log. Pure C; every read
 * is bounds-checked, since a cubin may come from a file. */
#include <stdint.h>
#include <string.h>

#include "runtime/cubin.h"

enum {
    kElfHeaderBytes = 64,
    kSectionHeaderBytes = 64,
    kSymbolBytes = 24,
    kSymtabType = 2,
    kEiattrRegcount = 0x2f,
    kEifmtSval = 4, /* a record with a 16-bit size and that many bytes */
};

typedef struct elf_view {
    const uint8_t *data;
    size_t size;
    uint64_t shoff;
    unsigned shentsize, shnum, shstrndx;
} elf_view;

typedef struct section {
    uint32_t name, type, link;
    uint64_t offset, size;
} section;

static int in_bounds(const elf_view *e, uint64_t offset, uint64_t len)
{
    return offset <= e->size && len <= e->size - offset;
}

static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const uint8_t *p) { return (uint32_t)get16(p) | (uint32_t)get16(p + 2) << 16; }
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

static int section_at(const elf_view *e, unsigned i, section *s)
{
    uint64_t at = e->shoff + (uint64_t)i * e->shentsize;
    if (i >= e->shnum || !in_bounds(e, at, kSectionHeaderBytes))
        return 0;
    const uint8_t *h = e->data + at;
    s->name = get32(h);
    s->type = get32(h + 4);
    s->offset = get64(h + 24);
    s->size = get64(h + 32);
    s->link = get32(h + 40);
    return in_bounds(e, s->offset, s->size);
}

/* 1 when the NUL-terminated string at offset `at` of section `strtab` equals name. */
static int name_is(const elf_view *e, const section *strtab, uint64_t at, const char *name)
{
    size_t n = strlen(name);
    if (at > strtab->size || n + 1 > strtab->size - at)
        return 0;
    const uint8_t *p = e->data + strtab->offset + at;
    return memcmp(p, name, n) == 0 && p[n] == '\0';
}

int mlajit_cubin_register_count(const void *cubin, size_t size, const char *function)
{
    elf_view e = {cubin, size, 0, 0, 0, 0};
    if (!cubin || !function || size < kElfHeaderBytes || memcmp(e.data, "\x7f" "ELF", 4) != 0 ||
        e.data[4] != 2 /* 64-bit */ || e.data[5] != 1 /* little-endian */)
        return -1;
    e.shoff = get64(e.data + 0x28);
    e.shentsize = get16(e.data + 0x3a);
    e.shnum = get16(e.data + 0x3c);
    e.shstrndx = get16(e.data + 0x3e);
    section names, s;
    if (e.shentsize < kSectionHeaderBytes || !section_at(&e, e.shstrndx, &names))
        return -1;
    /* the function's symbol index, and the .nv.info section */
    long symbol = -1;
    section info = {0};
    int have_info = 0;
    for (unsigned i = 0; i < e.shnum; i++) {
        if (!section_at(&e, i, &s))
            continue;
        if (name_is(&e, &names, s.name, ".nv.info")) {
            info = s;
            have_info = 1;
        }
        section strtab;
        if (s.type != kSymtabType || symbol >= 0 || !section_at(&e, s.link, &strtab))
            continue;
        for (uint64_t k = 0; k + kSymbolBytes <= s.size; k += kSymbolBytes)
            if (name_is(&e, &strtab, get32(e.data + s.offset + k), function)) {
                symbol = (long)(k / kSymbolBytes);
                break;
            }
    }
    if (symbol < 0 || !have_info)
        return -1;
    /* records: format byte, attribute byte, then a 16-bit value, or (EIFMT_SVAL)
     * a 16-bit size and that many bytes; REGCOUNT's are (symbol, count) */
    for (uint64_t at = 0; at + 4 <= info.size;) {
        const uint8_t *r = e.data + info.offset + at;
        uint64_t len = 4;
        if (r[0] == kEifmtSval) {
            len += get16(r + 2);
            if (len > info.size - at)
                return -1;
            if (r[1] == kEiattrRegcount && len >= 12 && get32(r + 4) == (uint32_t)symbol)
                return (int)get32(r + 8);
        }
        at += len;
    }
    return -1;
}
