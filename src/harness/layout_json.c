/* Layouts in JSON: case.json's "layout" and the CLI's --layout FILE. The JSON
 * form is the inline keys' (mlajit_layout_parse) as an object, so the two never
 * drift apart: the object is turned into key=value text and parsed as such. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/error.h"
#include "harness/json.h"
#include "mlajit.h"

int mlajit_layout_from_json(const mlajit_json *v, mlajit_layout *out)
{
    if (!v)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "layout: missing");
    if (v->type == MLAJIT_JSON_STRING)
        return mlajit_layout_parse(v->text, out);
    if (v->type != MLAJIT_JSON_OBJECT)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "layout: expected an object of the keys d_nope, d_rope, d_v, tile, scales, place, row_bytes, "
                           "footer_bytes, v (or a string mlajit_layout_parse reads)");
    char text[512];
    size_t n = 0;
    for (size_t i = 0; i < v->count; i++) {
        const mlajit_json *item = &v->items[i];
        const char *key = v->keys[i];
        if (item->type != MLAJIT_JSON_NUMBER && item->type != MLAJIT_JSON_STRING)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                               "layout key %s: expected a number or a string (scales, place, v)", key);
        if (strchr(key, ',') || strchr(key, '=') || strchr(item->text, ',') || strchr(item->text, '='))
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "layout key '%s': ',' and '=' are not allowed in keys "
                               "or values", key);
        int w = snprintf(text + n, sizeof text - n, "%s%s=%s", n ? "," : "", key, item->text);
        if (w < 0 || (size_t)w >= sizeof text - n)
            return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "layout: the object is too long (at most %zu bytes of "
                               "keys and values)", sizeof text - 1);
        n += (size_t)w;
    }
    return mlajit_layout_parse(text, out);
}

int mlajit_layout_read_json_file(const char *path, mlajit_layout *out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return mlajit_fail(MLAJIT_ERR_IO, "layout file %s cannot be read", path);
    char *text = mlajit_malloc(65536);
    if (!text) {
        fclose(f);
        return mlajit_fail_oom("the layout file %s", path);
    }
    size_t len = fread(text, 1, 65535, f);
    int too_long = !feof(f);
    fclose(f);
    if (too_long) {
        free(text);
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "layout file %s is longer than 64 KiB", path);
    }
    mlajit_json *root = NULL;
    char err[256];
    int jr = mlajit_json_parse(text, len, &root, err, sizeof err);
    free(text);
    if (jr == -2)
        return mlajit_fail_oom("the layout file %s", path);
    if (jr)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "layout file %s is not JSON: %s", path, err);
    int rc = mlajit_layout_from_json(root, out);
    mlajit_json_free(root);
    return rc ? mlajit_fail_prefix(rc, "layout file %s: ", path) : MLAJIT_OK;
}
