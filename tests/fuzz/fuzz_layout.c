/* libFuzzer harness: the layout parser (mlajit_layout_parse) and spec strings
 * whose first field is a layout (mlajit_spec_parse). Any text must be accepted
 * or refused with a message, never crash or read past it; what is accepted must
 * be valid, have a descriptor, and round-trip: its canonical string parses back
 * to the same layout (and spec), and writes the same string again.
 *
 * The first input byte picks the mode (its low bit): 0 the rest is layout text,
 * 1 the rest is a spec string. The corpus (corpus/fuzz_layout) holds inline
 * keys, canonical strings, model names and spec strings of each. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mlajit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_layout(const mlajit_layout *l)
{
    char text[MLAJIT_LAYOUT_STRING_LEN], again[MLAJIT_LAYOUT_STRING_LEN];
    mlajit_layout back;
    if (mlajit_layout_validate(l) != MLAJIT_OK)
        abort(); /* what parses is valid */
    if (!mlajit_layout_describe(l) || mlajit_layout_min_page_stride(l, 1) <= 0)
        abort();
    if (mlajit_layout_string(l, text, sizeof text) != MLAJIT_OK || strchr(text, '.'))
        abort(); /* a string always fits, and has no '.' (a spec string's separator) */
    if (mlajit_layout_parse(text, &back) != MLAJIT_OK || memcmp(&back, l, sizeof back) != 0)
        abort(); /* the canonical string reads back to the same layout */
    if (mlajit_layout_string(&back, again, sizeof again) != MLAJIT_OK || strcmp(again, text) != 0)
        abort();
}

static void check_spec(const mlajit_kernel_spec *s)
{
    char text[256], again[256];
    mlajit_kernel_spec back = MLAJIT_KERNEL_SPEC_INIT;
    if (s->model == MLAJIT_MODEL_CUSTOM)
        check_layout(&s->layout);
    if (mlajit_spec_string(s, text, sizeof text) != MLAJIT_OK)
        return; /* a spec its arch cannot resolve has no string: refused with a message */
    if (mlajit_spec_parse(text, &back) != MLAJIT_OK || mlajit_spec_string(&back, again, sizeof again) != MLAJIT_OK ||
        strcmp(text, again) != 0)
        abort(); /* a spec's string reads back to a spec of the same string */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 4096)
        return 0;
    char *text = malloc(size);
    if (!text)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0'; /* text past an embedded NUL is not seen, as in C */
    if ((data[0] & 1) == 0) {
        mlajit_layout l;
        memset(&l, 0x5A, sizeof l);
        const mlajit_layout before = l;
        if (mlajit_layout_parse(text, &l) == MLAJIT_OK)
            check_layout(&l);
        else if (!mlajit_last_error()[0] || memcmp(&l, &before, sizeof l) != 0)
            abort(); /* a refusal says why, and leaves out as it was */
    } else {
        mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
        if (mlajit_spec_parse(text, &s) == MLAJIT_OK)
            check_spec(&s);
        else if (!mlajit_last_error()[0])
            abort();
    }
    free(text);
    return 0;
}
