/* NVRTC: generated source -> cubin, with the ptxas resource report parsed out
 * of the program log (registers, shared memory, spills). */
#include "runtime/nvrtc.h"

#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "common/error.h"
#include "runtime/cubin.h"

void mlajit_compiled_free(mlajit_compiled *c)
{
    if (!c)
        return;
    free(c->cubin);
    free(c->log);
    memset(c, 0, sizeof *c);
}

void mlajit_nvrtc_version(int *major, int *minor)
{
    int a = 0, b = 0;
    if (nvrtcVersion(&a, &b) != NVRTC_SUCCESS)
        a = b = 0;
    if (major) *major = a;
    if (minor) *minor = b;
}

/* The options every kernel is compiled with. No -use_fast_math: the fp8
 * conversion relies on fp32 subnormals being kept. */
#define MLAJIT_NVRTC_FIXED_OPTIONS "-std=c++17", "-default-device", "--ptxas-options=-v", "-DNDEBUG"

void mlajit_nvrtc_options_string(const char *arch, char *buf, size_t len)
{
    snprintf(buf, len, "--gpu-architecture=%s -std=c++17 -default-device --ptxas-options=-v -DNDEBUG", arch);
}

int mlajit_nvrtc_supports(const char *arch)
{
    if (!arch || strncmp(arch, "sm_", 3) != 0)
        return 0;
    int want = atoi(arch + 3);
    int n = 0;
    if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0 || n > 256)
        return 0;
    int archs[256];
    if (nvrtcGetSupportedArchs(archs) != NVRTC_SUCCESS)
        return 0;
    for (int i = 0; i < n; i++)
        if (archs[i] == want)
            return 1;
    return 0;
}

void mlajit_ptxas_log_parse(const char *log, mlajit_compiled *out)
{
    out->registers = -1;
    out->shared_bytes = 0;
    out->spill_bytes = 0;
    out->wgmma_serialized = 0;
    int in_main = 0;
    for (const char *line = log; line && *line;) {
        const char *eol = strchr(line, '\n');
        size_t n = eol ? (size_t)(eol - line) : strlen(line);
        char buf[512];
        if (n >= sizeof buf)
            n = sizeof buf - 1;
        memcpy(buf, line, n);
        buf[n] = '\0';
        /* Only entry lines switch function: a callee's "Function properties for"
         * block may sit between an entry's line and its "Used N registers". */
        if (strstr(buf, "Compiling entry function"))
            in_main = strstr(buf, MLAJIT_ENTRY_MAIN) != NULL;
        const char *used = strstr(buf, "Used ");
        if (used && in_main) {
            int regs = 0;
            if (sscanf(used, "Used %d registers", &regs) == 1)
                out->registers = regs;
            const char *smem = strstr(buf, "bytes smem");
            if (smem) {
                const char *p = smem;
                while (p > buf && p[-1] == ' ') p--;
                while (p > buf && p[-1] >= '0' && p[-1] <= '9') p--;
                out->shared_bytes = atoi(p);
            }
        }
        if (strstr(buf, "Potential Performance Loss"))
            out->wgmma_serialized++;
        int st = 0, ld = 0;
        const char *spill = strstr(buf, "bytes spill stores");
        if (spill) {
            const char *p = strstr(buf, "stack frame,");
            if (p && sscanf(p, "stack frame, %d bytes spill stores, %d bytes spill loads", &st, &ld) == 2)
                out->spill_bytes += st + ld;
        }
        line = eol ? eol + 1 : NULL;
    }
}

int mlajit_nvrtc_compile(const char *source, const char *program_name, const char *arch, mlajit_compiled *out)
{
    memset(out, 0, sizeof *out);
    if (!mlajit_nvrtc_supports(arch)) {
        int ma, mi;
        mlajit_nvrtc_version(&ma, &mi);
        return mlajit_fail(MLAJIT_ERR_UNSUPPORTED, "arch %s: NVRTC %d.%d cannot target it", arch, ma, mi);
    }
    double t0 = mlajit_now_ms();
    nvrtcProgram prog;
    nvrtcResult r = nvrtcCreateProgram(&prog, source, program_name, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS)
        return mlajit_fail(MLAJIT_ERR_COMPILE, "nvrtcCreateProgram: %s", nvrtcGetErrorString(r));
    char arch_opt[64];
    snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", arch);
    const char *opts[] = {arch_opt, MLAJIT_NVRTC_FIXED_OPTIONS};
    nvrtcResult cr = nvrtcCompileProgram(prog, (int)(sizeof opts / sizeof opts[0]), opts);
    size_t log_size = 0;
    nvrtcGetProgramLogSize(prog, &log_size);
    out->log = malloc(log_size + 1);
    if (out->log) {
        out->log[0] = '\0';
        if (log_size)
            nvrtcGetProgramLog(prog, out->log);
        out->log[log_size] = '\0';
    }
    if (cr != NVRTC_SUCCESS) {
        char head[700];
        snprintf(head, sizeof head, "%s", out->log ? out->log : "");
        nvrtcDestroyProgram(&prog);
        int rc = mlajit_fail(MLAJIT_ERR_COMPILE, "NVRTC rejected %s for %s (%s): %s", program_name, arch,
                             nvrtcGetErrorString(cr), head);
        mlajit_compiled_free(out);
        return rc;
    }
    size_t size = 0;
    r = nvrtcGetCUBINSize(prog, &size);
    if (r != NVRTC_SUCCESS || size == 0) {
        nvrtcDestroyProgram(&prog);
        mlajit_compiled_free(out);
        return mlajit_fail(MLAJIT_ERR_COMPILE, "NVRTC produced no cubin for %s (%s)", arch, nvrtcGetErrorString(r));
    }
    out->cubin = malloc(size);
    if (!out->cubin) {
        nvrtcDestroyProgram(&prog);
        mlajit_compiled_free(out);
        return mlajit_fail(MLAJIT_ERR_OUT_OF_MEMORY, "cubin of %zu bytes", size);
    }
    nvrtcGetCUBIN(prog, out->cubin);
    out->cubin_size = size;
    nvrtcDestroyProgram(&prog);
    out->compile_ms = mlajit_now_ms() - t0;
    mlajit_ptxas_log_parse(out->log ? out->log : "", out);
    /* the cubin's own record first: the log's line order is ptxas's to change */
    int registers = mlajit_cubin_register_count(out->cubin, out->cubin_size, MLAJIT_ENTRY_MAIN);
    if (registers > 0)
        out->registers = registers;
    return MLAJIT_OK;
}
