/* What a cache entry records of a kernel beside its cubin, and the check on load
 * that the record is what the current generator expects for the entry's spec. The
 * key covers the generated source, which holds the same numbers; the record keeps
 * a cubin from being launched with another geometry whatever put it under its
 * key (an older build's cache or pack, a forged or colliding entry). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/kernel_abi.h"
#include "common/error.h"
#include "common/strbuf.h"
#include "runtime/runtime.h"

void mlajit_launch_record_of(const mlajit_kernel_layout *layout, mlajit_launch_record *out)
{
    memset(out, 0, sizeof *out);
    out->threads = layout->threads;
    out->smem_bytes = layout->smem_bytes;
    out->combine_threads = layout->combine_threads;
    out->combine_smem_bytes = mlajit_combine_smem_bytes(layout, MLAJIT_MAX_SPLITS);
    out->cluster_dims[0] = 1;
    out->cluster_dims[1] = layout->cluster_ctas;
    out->cluster_dims[2] = 1;
    out->params_layout_hash = mlajit_decode_params_layout_hash();
}

int mlajit_spec_launch_record(const mlajit_kernel_spec *resolved, mlajit_launch_record *out)
{
    mlajit_kernel_layout layout;
    int rc = mlajit_codegen_layout(resolved, &layout);
    if (rc)
        return rc;
    mlajit_launch_record_of(&layout, out);
    return MLAJIT_OK;
}

int mlajit_entry_launch_check(const mlajit_cache_entry *e, const mlajit_kernel_layout *layout)
{
    mlajit_launch_record want;
    mlajit_launch_record_of(layout, &want);
    const mlajit_launch_record *got = &e->launch;
    mlajit_strbuf diffs = {0};
    int differs = 0;
#define DIFF(...)                                                                                                  \
    do {                                                                                                           \
        mlajit_strbuf_printf(&diffs, "%s", differs++ ? "; " : "");                                                 \
        mlajit_strbuf_printf(&diffs, __VA_ARGS__);                                                                 \
    } while (0)
    if (got->threads != want.threads)
        DIFF("%d threads, the generator's %d", got->threads, want.threads);
    if (got->smem_bytes != want.smem_bytes)
        DIFF("%d bytes of dynamic shared memory, the generator's %d", got->smem_bytes, want.smem_bytes);
    if (got->combine_threads != want.combine_threads)
        DIFF("%d combine threads, the generator's %d", got->combine_threads, want.combine_threads);
    if (got->combine_smem_bytes != want.combine_smem_bytes)
        DIFF("%d bytes of combine shared memory, the generator's %d", got->combine_smem_bytes,
             want.combine_smem_bytes);
    if (memcmp(got->cluster_dims, want.cluster_dims, sizeof want.cluster_dims) != 0)
        DIFF("cluster (%d, %d, %d), the generator's (%d, %d, %d)", got->cluster_dims[0], got->cluster_dims[1],
             got->cluster_dims[2], want.cluster_dims[0], want.cluster_dims[1], want.cluster_dims[2]);
    if (got->params_layout_hash != want.params_layout_hash)
        DIFF("parameter block %016llx, the generator's %016llx", (unsigned long long)got->params_layout_hash,
             (unsigned long long)want.params_layout_hash);
    if (strcmp(e->entry_names, MLAJIT_ENTRY_NAMES) != 0)
        DIFF("entries \"%s\", the generator's \"%s\"", e->entry_names, MLAJIT_ENTRY_NAMES);
#undef DIFF
    if (!differs)
        return MLAJIT_OK;
    int rc = mlajit_fail(MLAJIT_CACHE_STALE, "its launch record is not this generator's for %s: %s", e->spec_string,
                         diffs.failed || !diffs.data ? "(out of memory naming the differences)" : diffs.data);
    free(diffs.data);
    return rc;
}

void mlajit_kernel_entry_of(const mlajit_kernel *k, mlajit_cache_entry *e)
{
    memset(e, 0, sizeof *e);
    snprintf(e->spec_string, sizeof e->spec_string, "%s", k->report.spec);
    snprintf(e->entry_names, sizeof e->entry_names, "%s", MLAJIT_ENTRY_NAMES);
    e->compile_ms = k->report.compile_ms;
    e->registers = k->report.registers;
    e->shared_bytes = k->report.shared_bytes;
    e->spill_bytes = k->report.spill_bytes;
    mlajit_launch_record_of(&k->layout, &e->launch);
    e->created_unix = (uint64_t)time(NULL);
    e->cubin = k->cubin;
    e->cubin_size = k->cubin_size;
}
