/* Internal: NVRTC compilation of generated source to a cubin. */
#ifndef MLAJIT_RUNTIME_NVRTC_H
#define MLAJIT_RUNTIME_NVRTC_H
#include <stddef.h>

typedef struct mlajit_compiled {
    void *cubin;        /* malloc'd */
    size_t cubin_size;
    double compile_ms;
    int registers;      /* of the main entry: the cubin's record, else the ptxas log; -1 if neither */
    int shared_bytes;   /* static shared memory of the main entry */
    int spill_bytes;    /* spill stores + loads, all entries */
    int wgmma_serialized; /* ptxas's "Potential Performance Loss" notes (C751x: it serialized wgmma), all entries */
    char *log;          /* malloc'd program log (may be empty) */
} mlajit_compiled;

void mlajit_compiled_free(mlajit_compiled *c);

/* Fill out's registers, shared_bytes, spill_bytes and wgmma_serialized from a
 * ptxas -v log: the main entry's "Used N registers, ... M bytes smem" line (the
 * entry being the last "Compiling entry function" line before it), every
 * function's spill lines, and every "Potential Performance Loss" note (ptxas
 * serialized a function's wgmma: on sm90 kernels a silent slowdown). */
void mlajit_ptxas_log_parse(const char *log, mlajit_compiled *out);

/* The NVRTC in use (nvrtc.c's search, run once per process): MLAJIT_OK and
 * the library file's path in buf, or MLAJIT_ERR_NOT_FOUND and why none was
 * found (what was tried, what to install or set). */
int mlajit_nvrtc_where(char *buf, size_t len);

/* NVRTC's version; 0.0 without one. */
void mlajit_nvrtc_version(int *major, int *minor);

/* The NVRTC options for an arch, joined by spaces (for the cache key); buf >= 256. */
void mlajit_nvrtc_options_string(const char *arch, char *buf, size_t len);

/* 1 when this NVRTC can emit a cubin for arch ("sm_90a" -> 90 in its list). */
int mlajit_nvrtc_supports(const char *arch);

/* Compile source for arch to a cubin. MLAJIT_ERR_COMPILE with the first lines of
 * the log in the message when NVRTC rejects it. Thread-safe. */
int mlajit_nvrtc_compile(const char *source, const char *program_name, const char *arch, mlajit_compiled *out);

#endif
