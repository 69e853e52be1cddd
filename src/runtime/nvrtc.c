/* NVRTC: generated source -> cubin, with the ptxas resource report parsed out
 * of the program log (registers, shared memory, spills).
 *
 * libnvrtc is opened with dlopen at first use, like the driver (driver.c), not
 * linked: the library and the CLI then load and start on a machine without the
 * CUDA toolkit (a compile fails saying what to install), and NVRTC is found by
 * this search, whatever the loader's configuration lists:
 *   1. $MLAJIT_NVRTC, a library file (only it, when set)
 *   2. $CUDA_HOME/lib64, $CUDA_HOME/lib
 *   3. the pip wheels' folders beside this library (site-packages/nvidia/
 *      cuda_nvrtc/lib, nvidia/cu13/lib), for a Python install
 *   4. the loader's own search (LD_LIBRARY_PATH, ld.so.conf, the system folders)
 *   5. the toolkit this library was built against (MLAJIT_CUDA_ROOT: meson's
 *      cudatoolkit option), lib64 and lib
 * In each folder the sonames of CUDA 13, 12 and 11.2 are tried, newest first;
 * the functions used are the same in all of them. <nvrtc.h> gives their types. */
#include "runtime/nvrtc.h"

#include <dlfcn.h>
#include <link.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "common/alloc.h"
#include "common/error.h"
#include "runtime/cubin.h"

#ifndef MLAJIT_CUDA_ROOT
#define MLAJIT_CUDA_ROOT "/usr/local/cuda"
#endif

static const char *const nvrtc_sonames[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"};

/* The entry points, typed by <nvrtc.h>'s own declarations. */
static struct nvrtc_table {
    __typeof__(nvrtcVersion) *Version;
    __typeof__(nvrtcGetNumSupportedArchs) *GetNumSupportedArchs;
    __typeof__(nvrtcGetSupportedArchs) *GetSupportedArchs;
    __typeof__(nvrtcCreateProgram) *CreateProgram;
    __typeof__(nvrtcCompileProgram) *CompileProgram;
    __typeof__(nvrtcGetProgramLogSize) *GetProgramLogSize;
    __typeof__(nvrtcGetProgramLog) *GetProgramLog;
    __typeof__(nvrtcGetCUBINSize) *GetCUBINSize;
    __typeof__(nvrtcGetCUBIN) *GetCUBIN;
    __typeof__(nvrtcDestroyProgram) *DestroyProgram;
    __typeof__(nvrtcGetErrorString) *GetErrorString;
} nvrtc;

static pthread_once_t nvrtc_once = PTHREAD_ONCE_INIT;
static int nvrtc_loaded;
static char nvrtc_path[1024];     /* the file opened */
static char nvrtc_tried[4096];    /* the places looked in, for the message */
static char nvrtc_message[4608];  /* why none was found */

static void note_tried(const char *what)
{
    size_t used = strlen(nvrtc_tried);
    snprintf(nvrtc_tried + used, sizeof nvrtc_tried - used, "%s%s", used ? ", " : "", what);
}

/* NVRTC opens its builtins library (libnvrtc-builtins.so.MAJOR.MINOR) by soname
 * at its first compile, which the loader finds only where its configuration
 * lists CUDA. Opening it first from the folder NVRTC was found in makes that
 * later open a hit on the loaded object (the loader matches sonames), so a
 * compile works wherever NVRTC was found. Where it is missing NVRTC's own
 * search still applies and a compile says what failed. */
static void preload_builtins(void)
{
    int major = 0, minor = 0;
    const char *slash = strrchr(nvrtc_path, '/');
    if (!slash || nvrtc.Version(&major, &minor) != NVRTC_SUCCESS)
        return;
    char file[1100];
    snprintf(file, sizeof file, "%.*s/libnvrtc-builtins.so.%d.%d", (int)(slash - nvrtc_path), nvrtc_path, major,
             minor);
    dlopen(file, RTLD_NOW | RTLD_LOCAL); /* kept open for the process, as NVRTC keeps it */
}

/* dlopen one candidate and take its entry points: 1 when every one is there. */
static int try_open(const char *file)
{
    void *lib = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return 0;
    const struct { void **slot; const char *name; } symbols[] = {
        {(void **)&nvrtc.Version, "nvrtcVersion"},
        {(void **)&nvrtc.GetNumSupportedArchs, "nvrtcGetNumSupportedArchs"},
        {(void **)&nvrtc.GetSupportedArchs, "nvrtcGetSupportedArchs"},
        {(void **)&nvrtc.CreateProgram, "nvrtcCreateProgram"},
        {(void **)&nvrtc.CompileProgram, "nvrtcCompileProgram"},
        {(void **)&nvrtc.GetProgramLogSize, "nvrtcGetProgramLogSize"},
        {(void **)&nvrtc.GetProgramLog, "nvrtcGetProgramLog"},
        {(void **)&nvrtc.GetCUBINSize, "nvrtcGetCUBINSize"},
        {(void **)&nvrtc.GetCUBIN, "nvrtcGetCUBIN"},
        {(void **)&nvrtc.DestroyProgram, "nvrtcDestroyProgram"},
        {(void **)&nvrtc.GetErrorString, "nvrtcGetErrorString"},
    };
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        if (!(*symbols[i].slot = dlsym(lib, symbols[i].name))) {
            char what[1200];
            snprintf(what, sizeof what, "%s (no %s: too old)", file, symbols[i].name);
            note_tried(what);
            memset(&nvrtc, 0, sizeof nvrtc);
            dlclose(lib);
            return 0;
        }
    }
    struct link_map *map = NULL;
    snprintf(nvrtc_path, sizeof nvrtc_path, "%s",
             dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && map->l_name[0] ? map->l_name : file);
    preload_builtins();
    nvrtc_loaded = 1;
    return 1;
}

/* Each soname in folder dir (a prefix of it: "" for the loader's search). */
static int try_folder(const char *dir)
{
    for (size_t i = 0; i < sizeof nvrtc_sonames / sizeof nvrtc_sonames[0]; i++) {
        char file[1024];
        if (snprintf(file, sizeof file, "%s%s%s", dir, dir[0] ? "/" : "", nvrtc_sonames[i]) >= (int)sizeof file)
            continue;
        if (try_open(file))
            return 1;
    }
    char what[1100];
    snprintf(what, sizeof what, "%s", dir[0] ? dir : "the loader's path");
    note_tried(what);
    return 0;
}

/* The pip wheels' folders (nvidia-cuda-nvrtc) in up to three folders above the
 * file holding this library: site-packages/<package>[/lib]/libmlajit.so. */
static int try_wheels(void)
{
    Dl_info self;
    if (!dladdr((void *)try_wheels, &self) || !self.dli_fname || !strchr(self.dli_fname, '/'))
        return 0;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", self.dli_fname);
    for (int up = 0; up < 3; up++) {
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir)
            return 0;
        *slash = '\0';
        static const char *const wheel_dirs[] = {"nvidia/cuda_nvrtc/lib", "nvidia/cu13/lib"};
        for (size_t w = 0; w < sizeof wheel_dirs / sizeof wheel_dirs[0]; w++) {
            char candidate[1100];
            snprintf(candidate, sizeof candidate, "%s/%s", dir, wheel_dirs[w]);
            for (size_t i = 0; i < sizeof nvrtc_sonames / sizeof nvrtc_sonames[0]; i++) {
                char file[1200];
                snprintf(file, sizeof file, "%s/%s", candidate, nvrtc_sonames[i]);
                if (try_open(file))
                    return 1;
            }
        }
    }
    note_tried("the pip wheels' nvidia/cuda_nvrtc/lib beside this library");
    return 0;
}

static void nvrtc_open(void)
{
    const char *explicit_file = getenv("MLAJIT_NVRTC");
    if (explicit_file && explicit_file[0]) {
        if (!try_open(explicit_file)) {
            const char *err = dlerror();
            snprintf(nvrtc_message, sizeof nvrtc_message, "MLAJIT_NVRTC=%s is not a usable NVRTC: %s", explicit_file,
                     nvrtc_tried[0] ? nvrtc_tried : err ? err : "it cannot be opened");
        }
        return;
    }
    const char *home = getenv("CUDA_HOME");
    char dir[1024];
    if (home && home[0]) {
        snprintf(dir, sizeof dir, "%s/lib64", home);
        if (try_folder(dir))
            return;
        snprintf(dir, sizeof dir, "%s/lib", home);
        if (try_folder(dir))
            return;
    }
    if (try_wheels() || try_folder("") || try_folder(MLAJIT_CUDA_ROOT "/lib64") || try_folder(MLAJIT_CUDA_ROOT "/lib"))
        return;
    snprintf(nvrtc_message, sizeof nvrtc_message,
             "NVRTC (libnvrtc.so.13, .12 or .11.2) not found; tried %s. Install the CUDA toolkit's NVRTC (or pip "
             "nvidia-cuda-nvrtc) and set CUDA_HOME to the toolkit, or MLAJIT_NVRTC to the library file",
             nvrtc_tried);
}

/* The table when NVRTC is there; else NULL. */
static const struct nvrtc_table *nvrtc_get(void)
{
    pthread_once(&nvrtc_once, nvrtc_open);
    return nvrtc_loaded ? &nvrtc : NULL;
}

int mlajit_nvrtc_where(char *buf, size_t len)
{
    int found = nvrtc_get() != NULL;
    snprintf(buf, len, "%s", found ? nvrtc_path : nvrtc_message);
    return found ? MLAJIT_OK : MLAJIT_ERR_NOT_FOUND;
}

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
    const struct nvrtc_table *t = nvrtc_get();
    if (!t || t->Version(&a, &b) != NVRTC_SUCCESS)
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
    const struct nvrtc_table *t = nvrtc_get();
    if (!t)
        return 0;
    int want = atoi(arch + 3);
    int n = 0;
    if (t->GetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0 || n > 256)
        return 0;
    int archs[256];
    if (t->GetSupportedArchs(archs) != NVRTC_SUCCESS)
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
    const struct nvrtc_table *t = nvrtc_get();
    if (!t)
        return mlajit_fail(MLAJIT_ERR_COMPILE, "cannot compile for %.32s: %s", arch, nvrtc_message);
    if (!mlajit_nvrtc_supports(arch)) {
        int ma, mi;
        mlajit_nvrtc_version(&ma, &mi);
        return mlajit_fail(MLAJIT_ERR_UNSUPPORTED, "arch %s: NVRTC %d.%d cannot target it", arch, ma, mi);
    }
    double t0 = mlajit_now_ms();
    nvrtcProgram prog;
    nvrtcResult r = t->CreateProgram(&prog, source, program_name, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS)
        return mlajit_fail(MLAJIT_ERR_COMPILE, "nvrtcCreateProgram: %s", t->GetErrorString(r));
    char arch_opt[64];
    snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", arch);
    const char *opts[] = {arch_opt, MLAJIT_NVRTC_FIXED_OPTIONS};
    nvrtcResult cr = t->CompileProgram(prog, (int)(sizeof opts / sizeof opts[0]), opts);
    size_t log_size = 0;
    t->GetProgramLogSize(prog, &log_size);
    out->log = mlajit_malloc(log_size + 1);
    if (!out->log) { /* the log holds the spills the report gives: no guessing them */
        t->DestroyProgram(&prog);
        return mlajit_fail_oom("NVRTC's log of %s (%zu bytes)", program_name, log_size + 1);
    }
    out->log[0] = '\0';
    if (log_size)
        t->GetProgramLog(prog, out->log);
    out->log[log_size] = '\0';
    if (cr != NVRTC_SUCCESS) {
        char head[700];
        snprintf(head, sizeof head, "%s", out->log);
        t->DestroyProgram(&prog);
        int rc = mlajit_fail(MLAJIT_ERR_COMPILE, "NVRTC rejected %s for %s (%s): %s", program_name, arch,
                             t->GetErrorString(cr), head);
        mlajit_compiled_free(out);
        return rc;
    }
    size_t size = 0;
    r = t->GetCUBINSize(prog, &size);
    if (r != NVRTC_SUCCESS || size == 0) {
        t->DestroyProgram(&prog);
        mlajit_compiled_free(out);
        return mlajit_fail(MLAJIT_ERR_COMPILE, "NVRTC produced no cubin for %s (%s)", arch, t->GetErrorString(r));
    }
    out->cubin = mlajit_malloc(size);
    if (!out->cubin) {
        t->DestroyProgram(&prog);
        mlajit_compiled_free(out);
        return mlajit_fail_oom("a cubin of %zu bytes", size);
    }
    t->GetCUBIN(prog, out->cubin);
    out->cubin_size = size;
    t->DestroyProgram(&prog);
    out->compile_ms = mlajit_now_ms() - t0;
    mlajit_ptxas_log_parse(out->log, out);
    /* the cubin's own record first: the log's line order is ptxas's to change */
    int registers = mlajit_cubin_register_count(out->cubin, out->cubin_size, MLAJIT_ENTRY_MAIN);
    if (registers > 0)
        out->registers = registers;
    return MLAJIT_OK;
}
