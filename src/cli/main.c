/* mlajit - the command-line tool: info, compile, run-case, demo, and the
 * commands of the other files (cli.h). Every command parses its arguments with
 * cli_parse (args.c), so --help, bad options and exit codes behave alike. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "codegen/codegen.h"
#include "common/error.h"
#include "harness/harness.h"
#include "mlajit.h"
#include "runtime/nvrtc.h"
#include "runtime/runtime.h"

static const char usage_text[] =
    "usage: mlajit <command> [options]     (mlajit <command> --help: that command's usage)\n"
    "\n"
    "commands:\n"
    "  info                          version, NVRTC, driver and GPU, cache directory and size\n"
    "  compile --model M|--layout L --heads N --page P [--extra-page P2] [--features LIST]\n"
    "          [--tile T] [--heads-per-cta H] [--variant V] [--arch sm_XX]\n"
    "          [--emit-source]\n"
    "                                generate, compile and cache one kernel\n"
    "  run-case [--cpu] DIR          run a case directory (tests/golden's format) and check it\n"
    "          [--variant V] [--tile T] [--heads-per-cta H] [--splits N] [--lse-head-major]\n"
    "          [--pad-strides]\n"
    "                                (kernel variant and argument layout of the GPU run)\n"
    "  case make SPEC --out DIR [--batch B] [--s-q S] [--topk K] ...\n"
    "                                write a synthetic case directory with its fp64 expected output\n"
    "  demo                          V3.2 decode end to end (b 4, seqlen 4096, topk 2048, h_q 128)\n"
    "  bench [--json FILE] [--quick] docs/BENCH.md's protocol (needs a GPU)\n"
    "  tune [--models M] [--heads H] [--pages P] [--topk K] [--rows R] [--seconds N] [--dry-run]\n"
    "                                measure each bucket's kernel and splits; store tactics (GPU)\n"
    "  pack build|ls|verify|merge|bench  cubin packs for deployment\n"
    "  cache ls|stats|gc|verify      the writable kernel cache\n"
    "  fuzz [--seconds N] [--seed S] [--cpu-only] [--call N] [--out DIR]\n"
    "                                random decode calls over the envelope against the reference;\n"
    "                                --cpu-only: generate + NVRTC for sm_80/90a/100a/120a, no launch\n"
    "  envelope [SPEC [--batch B] [--s-q S] [--topk K] [--extra-topk E] [--splits N]]\n"
    "                                the supported envelope as tables, or one spec checked against it\n"
    "                                (with a geometry: the kernel and grid its plan launches on 132 SMs)\n"
    "\n"
    "models: " MLAJIT_MODEL_NAMES "; features: sink, topk-length, extra-topk-length\n"
    "variants (V): " MLAJIT_VARIANT_NAMES "\n"
    "SPEC: model.hN.pN[.eN][.f<s|l|x>][.tN][.hcN][.variant][.arch], e.g. v32.h16.p64 or\n"
    "      v32.h128.p64.t64.hc64.sm90.sm_90a (as mlajit compile prints it); model may be a layout:\n"
    "      its inline keys or canonical string, e.g. d_nope=256,d_rope=64,tile=32,scales=ue8m0,place=inline.h16.p64\n"
    "exit status: 0 ok, 1 failure (or the answer no), 2 usage or invalid arguments\n";

static const char info_usage[] =
    "usage: mlajit info\n"
    "  the version, NVRTC (its version and the library file in use), the driver and GPU\n"
    "  found or not, the cache directory and its size, the packs in use, whether JIT is on\n";

static int cmd_info(int argc, char **argv)
{
    int rc = cli_parse_operands("info", info_usage, 0, 0, NULL, argc, argv);
    if (rc != CLI_PARSED)
        return rc;
    mlajit_context *ctx;
    if ((rc = mlajit_context_create(NULL, &ctx)))
        return cli_error(rc, "info");
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    printf("mlajit        %s\n", MLAJIT_VERSION_STRING);
    char nvrtc_where[1200];
    if (mlajit_nvrtc_where(nvrtc_where, sizeof nvrtc_where) == MLAJIT_OK)
        printf("nvrtc         %d.%d (%s)\n", info.nvrtc_major, info.nvrtc_minor, nvrtc_where);
    else
        printf("nvrtc         none: %s\n", nvrtc_where);
    if (info.has_device) {
        printf("driver        %d.%d\n", info.driver_version / 1000, (info.driver_version % 1000) / 10);
        printf("gpu           %s (%s, %d SMs, %.0f MB L2)\n", info.device_name, info.device_arch, info.sm_count,
               (double)info.l2_bytes / (1 << 20));
        mlajit_gpu_identity gpu;
        char identity[200];
        if (mlajit_context_gpu(ctx, &gpu) == MLAJIT_OK) {
            mlajit_gpu_identity_describe(&gpu, identity, sizeof identity);
            printf("tactics for   %s (what tactic records are keyed by)\n", identity);
        }
    } else {
        printf("driver        none usable (generate, compile and cache still work; target %s)\n", info.device_arch);
        printf("gpu           none: %s\n", info.no_device_reason);
    }
    if (info.cache_dir[0])
        printf("cache         %s (%lld entries, %lld bytes)\n", info.cache_dir, (long long)info.cache_entries,
               (long long)info.cache_bytes);
    else
        printf("cache         off (memory only)\n");
    if (info.cache_dir[0] && !info.cache_writable)
        printf("              read-only: new kernels stay in memory\n");
    const char *packs = getenv("MLAJIT_PACKS");
    printf("packs         %d in use%s%s%s\n", info.pack_count, packs && packs[0] ? " (MLAJIT_PACKS=" : "",
           packs && packs[0] ? packs : "", packs && packs[0] ? ")" : "");
    printf("jit           %s\n", info.jit_disabled ? "disabled (MLAJIT_DISABLE_JIT): a kernel missing from the "
                                                      "packs and the cache is an error"
                                                    : "on (NVRTC compiles what the packs and the cache lack)");
    mlajit_context_destroy(ctx);
    return CLI_OK;
}

static const char compile_usage[] =
    "usage: mlajit compile --model M|--layout L --heads N --page P [--extra-page P2] [--features LIST]\n"
    "                      [--tile T] [--heads-per-cta H] [--variant V] [--arch sm_XX] [--emit-source]\n"
    "  generate, compile (NVRTC) and cache one kernel; prints its key, compile time, registers,\n"
    "  shared memory, spills and whether it was a cache hit\n"
    "  --model M          " MLAJIT_MODEL_NAMES "\n"
    "  --layout L         instead of --model: a layout described at run time, as inline keys\n"
    "                     (d_nope=256,d_rope=64,d_v=256,tile=32,scales=ue8m0,place=inline; also\n"
    "                     row_bytes=, footer_bytes=, v=nope|all; docs/layouts.md), a JSON file of\n"
    "                     those keys, or a layout's canonical string\n"
    "  --heads N          query heads, 1..128\n"
    "  --page P           tokens per page of the main cache, 1..1024\n"
    "  --extra-page P2    tokens per page of the extra cache (DeepSeek-V4's dual cache), 1..1024\n"
    "  --features LIST    comma-separated: sink, topk-length, extra-topk-length\n"
    "  --tile T           0 (auto), 32 or 64 candidates per tile\n"
    "  --heads-per-cta H  0 (auto), 8, 16, 24, 32, 64 (mlajit envelope says which fit)\n"
    "  --variant V        " MLAJIT_VARIANT_NAMES "\n"
    "  --arch sm_XX       the target (default: the GPU's, sm_90a without one)\n"
    "  --emit-source      print the generated CUDA source instead of compiling\n"
    "exit status: 0 compiled or found, 1 the compile failed, 2 bad arguments or a spec outside the envelope\n";

static int cmd_compile(int argc, char **argv)
{
    const char *arch = "";
    int heads = 0, page = 0, extra_page = 0, tile = 0, heads_per_cta = 0, emit = 0;
    mlajit_model model = MLAJIT_MODEL_V32;
    mlajit_layout layout = {0};
    int have_model = 0, have_layout = 0;
    mlajit_variant variant = MLAJIT_VARIANT_AUTO;
    unsigned features = 0;
    const cli_option options[] = {
        {"--model", CLI_CUSTOM, &model, .parse = cli_parse_model, .given = &have_model},
        {"--layout", CLI_CUSTOM, &layout, .parse = cli_parse_layout, .given = &have_layout},
        {"--heads", CLI_INT, &heads, .lo = 1, .hi = MLAJIT_MAX_HEADS},
        {"--page", CLI_INT, &page, .lo = 1, .hi = MLAJIT_MAX_PAGE_SIZE},
        {"--extra-page", CLI_INT, &extra_page, .lo = 1, .hi = MLAJIT_MAX_PAGE_SIZE},
        {"--features", CLI_CUSTOM, &features, .parse = cli_parse_features},
        {"--tile", CLI_INT, &tile, .lo = 0, .hi = 64},
        {"--heads-per-cta", CLI_INT, &heads_per_cta, .lo = 0, .hi = 64},
        {"--variant", CLI_CUSTOM, &variant, .parse = cli_parse_variant},
        {"--arch", CLI_STRING, .target = &arch},
        {"--emit-source", CLI_FLAG, .target = &emit},
    };
    const cli_command cmd = {"compile", compile_usage, options, sizeof options / sizeof options[0], 0, 0, NULL};
    int n, rc = cli_parse(&cmd, argc, argv, &n);
    if (rc != CLI_PARSED)
        return rc;
    if (have_model && have_layout)
        return cli_usage_error(&cmd, "give --model or --layout, not both");
    if ((!have_model && !have_layout) || !heads || !page)
        return cli_usage_error(&cmd, "needs --model (or --layout), --heads and --page");
    mlajit_kernel_spec spec = MLAJIT_KERNEL_SPEC_INIT;
    if ((rc = have_layout ? mlajit_spec_init_layout(&spec, &layout, heads, page)
                          : mlajit_spec_init(&spec, model, heads, page)))
        return cli_invalid(rc, "compile");
    spec.extra_page_size = extra_page;
    spec.features = features;
    spec.tile = tile;
    spec.heads_per_cta = heads_per_cta;
    spec.variant = variant;
    if (strlen(arch) >= sizeof spec.arch)
        return cli_usage_error(&cmd, "--arch = '%s' is too long; allowed an arch such as sm_90a (mlajit envelope lists them)", arch);
    strcpy(spec.arch, arch);
    if ((rc = mlajit_spec_validate(&spec)))
        return cli_invalid(rc, "compile");
    mlajit_context *ctx;
    if ((rc = mlajit_context_create(NULL, &ctx)))
        return cli_error(rc, "compile");
    if (!spec.arch[0])
        snprintf(spec.arch, sizeof spec.arch, "%s", mlajit_context_arch(ctx));
    /* a spec outside the envelope for its arch is a bad argument (2); whether this
     * NVRTC can target the arch is the machine's (prepare's failure: 1) */
    if ((rc = mlajit_envelope_check_with(&spec, NULL, NULL))) {
        mlajit_context_destroy(ctx);
        return cli_invalid(rc, "compile");
    }
    if (emit) {
        char *src;
        if ((rc = mlajit_generate_source(&spec, &src))) {
            mlajit_context_destroy(ctx);
            return cli_error(rc, "compile --emit-source");
        }
        fputs(src, stdout);
        mlajit_free(src);
        mlajit_context_destroy(ctx);
        return CLI_OK;
    }
    mlajit_kernel_report rep = MLAJIT_KERNEL_REPORT_INIT;
    rc = mlajit_kernel_prepare(ctx, &spec, &rep);
    if (rc) {
        cli_error(rc, "compile");
        cli_missing_kernel_hint(rc, ctx, &spec);
        mlajit_context_destroy(ctx);
        return CLI_FAIL;
    }
    mlajit_context_destroy(ctx);
    printf("spec          %s\n", rep.spec);
    printf("key           %s\n", rep.key);
    if (rep.cache_hit)
        printf("cache         hit in %s (lookup %.3f ms; compiled earlier in %.0f ms)\n",
               rep.source == MLAJIT_SOURCE_PACK ? "a pack" : rep.source == MLAJIT_SOURCE_MEMORY ? "memory" : "the disk cache",
               rep.lookup_ms, rep.compile_ms);
    else
        printf("cache         miss: compiled in %.0f ms (generate %.2f ms)\n", rep.compile_ms, rep.generate_ms);
    printf("registers     %d\n", rep.registers);
    printf("shared memory %d bytes\n", rep.shared_bytes);
    printf("spills        %d bytes\n", rep.spill_bytes);
    printf("cubin         %zu bytes%s\n", rep.cubin_bytes, rep.loaded ? ", loaded on the GPU" : "");
    return CLI_OK;
}

static void print_compare(const char *label, const mlajit_compare_result *r)
{
    printf("%-22s max|err| %.3e  cosine %.8f  out violations %lld  lse max|err| %.3e  lse violations %lld  %s\n",
           label, r->out_max_abs_err, r->out_cosine, (long long)r->out_violations, r->lse_max_abs_err,
           (long long)r->lse_violations, r->pass ? "PASS" : "FAIL");
}

static const char run_case_usage[] =
    "usage: mlajit run-case [--cpu] [--variant V] [--tile T] [--heads-per-cta H] [--splits N]\n"
    "                       [--lse-head-major] [--pad-strides] DIR\n"
    "  run the case directory DIR (tests/golden's format; mlajit case make writes one) through\n"
    "  the library on the GPU, or with --cpu through the fp64 CPU reference, and print the\n"
    "  errors against its expected output and FlashMLA's where the case has it\n"
    "  --variant V        " MLAJIT_VARIANT_NAMES "\n"
    "  --tile T, --heads-per-cta H   force the kernel's tile (0, 32, 64) and heads per CTA (0..64)\n"
    "  --splits N         force N split-KV splits (0: the planner's choice; at most 64)\n"
    "  --lse-head-major   lse laid out [b, h_q, s_q] (FlashMLA's order) through its strides\n"
    "  --pad-strides      q, out and indices with padded row strides\n"
    "exit status: 0 within SPEC's bar, 1 outside it or the run failed, 2 bad arguments\n";

static int cmd_run_case(int argc, char **argv)
{
    int cpu = 0;
    mlajit_gpu_run_options run = {0}; /* what `mlajit fuzz` prints for a failing call */
    const cli_option options[] = {
        {"--cpu", CLI_FLAG, .target = &cpu},
        {"--variant", CLI_CUSTOM, &run.variant, .parse = cli_parse_variant},
        {"--tile", CLI_INT, &run.tile, .lo = 0, .hi = 64},
        {"--heads-per-cta", CLI_INT, &run.heads_per_cta, .lo = 0, .hi = 64},
        {"--splits", CLI_INT, &run.num_splits, .lo = 0, .hi = MLAJIT_MAX_SPLITS},
        {"--lse-head-major", CLI_FLAG, .target = &run.lse_head_major},
        {"--pad-strides", CLI_FLAG, .target = &run.pad_strides},
    };
    const cli_command cmd = {"run-case", run_case_usage, options, sizeof options / sizeof options[0], 1, 1,
                             "one case directory DIR"};
    int n, rc = cli_parse(&cmd, argc, argv, &n);
    if (rc != CLI_PARSED)
        return rc;
    const char *dir = argv[1];
    mlajit_case c;
    if ((rc = mlajit_case_load(dir, &c)))
        return cli_error(rc, "run-case");
    const mlajit_model_desc *m = mlajit_case_desc(&c);
    size_t n_lse = (size_t)c.b * c.s_q * c.h_q, n_out = n_lse * m->d_v;
    printf("case %s: %s b %d s_q %d h_q %d topk %d extra_topk %d\n", dir, m->name, c.b, c.s_q, c.h_q, c.topk,
           c.extra_topk);
    if (!c.expected_out || !c.expected_lse) {
        mlajit_case_free(&c);
        fprintf(stderr, "mlajit: run-case: %s has no expected out/lse to check against\n", dir);
        return CLI_FAIL;
    }
    float *out = NULL, *lse = NULL;
    mlajit_gpu_result res = {0};
    mlajit_context *ctx = NULL;
    if (cpu) {
        if ((rc = mlajit_case_reference(&c, c.b, &out, &lse))) {
            mlajit_case_free(&c);
            return cli_error(rc, "run-case --cpu");
        }
    } else {
        if ((rc = mlajit_context_create(NULL, &ctx)) || (rc = mlajit_case_run_gpu(ctx, &c, &run, &res))) {
            cli_error(rc, "run-case");
            mlajit_kernel_spec spec = MLAJIT_KERNEL_SPEC_INIT;
            mlajit_gpu_run_spec(&c, &run, &spec);
            cli_missing_kernel_hint(rc, ctx, &spec);
            mlajit_context_destroy(ctx);
            mlajit_case_free(&c);
            return CLI_FAIL;
        }
        out = res.out;
        lse = res.lse;
        printf("kernel %s (%s, %d split%s)\n", res.report.spec, res.report.cache_hit ? "cache hit" : "compiled",
               res.num_splits, res.num_splits == 1 ? "" : "s");
    }
    mlajit_compare_result r;
    mlajit_compare(out, c.expected_out, n_out, lse, c.expected_lse, n_lse, &r);
    print_compare(cpu ? "cpu reference vs ref" : "mlajit vs ref", &r);
    if (c.flashmla_out) {
        float *fo = malloc(n_out * sizeof *fo + 8);
        if (fo) {
            for (size_t i = 0; i < n_out; i++) fo[i] = mlajit_bf16_to_float(c.flashmla_out[i]);
            mlajit_compare_result f;
            mlajit_compare(fo, c.expected_out, n_out, c.flashmla_lse, c.expected_lse, n_lse, &f);
            print_compare("flashmla vs ref", &f);
            mlajit_compare_result g;
            mlajit_compare(out, fo, n_out, lse, c.flashmla_lse, n_lse, &g);
            printf("%-22s max|diff| %.3e  cosine %.8f\n", "mlajit vs flashmla", g.out_max_abs_err, g.out_cosine);
            free(fo);
        }
    }
    if (cpu) {
        free(out);
        free(lse);
    }
    mlajit_gpu_result_free(&res);
    mlajit_context_destroy(ctx);
    mlajit_case_free(&c);
    return r.pass ? CLI_OK : CLI_FAIL;
}

static const char demo_usage[] =
    "usage: mlajit demo\n"
    "  the main job end to end on a V3.2 cache (b 4, seqlen 4096, topk 2048, h_q 128, page 64):\n"
    "  build and quantize the cache, plan, JIT (a second run is a cache hit), decode on the GPU\n"
    "  and check against the fp64 CPU reference, with each stage's time. Without a GPU it\n"
    "  generates, compiles and caches the kernel for sm_90a and says so.\n";

/* The main job on an embedded default: a V3.2 cache, JIT, decode, check. */
static int cmd_demo(int argc, char **argv)
{
    int parsed = cli_parse_operands("demo", demo_usage, 0, 0, NULL, argc, argv);
    if (parsed != CLI_PARSED)
        return parsed;
    const mlajit_synth_params params = {
        .model = MLAJIT_MODEL_V32, .b = 4, .s_q = 1, .h_q = 128, .topk = 2048,
        .page_size = 64, .seqlen = 4096, .seed = 20261130,
    };
    printf("demo: V3.2 sparse decode, b %d, seqlen %d, topk %d, h_q %d, page %d\n", params.b, params.seqlen,
           params.topk, params.h_q, params.page_size);
    double t = mlajit_now_ms();
    mlajit_context *ctx;
    int rc = mlajit_context_create(NULL, &ctx);
    if (rc)
        return cli_error(rc, "demo");
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    printf("  %-28s %9.2f ms  (%s; cache %s)\n", "context", mlajit_now_ms() - t,
           info.has_device ? info.device_name : "no GPU", info.cache_dir[0] ? info.cache_dir : "off");

    t = mlajit_now_ms();
    mlajit_case c;
    if ((rc = mlajit_case_synthesize(&params, &c))) {
        mlajit_context_destroy(ctx);
        return cli_error(rc, "demo: building the cache");
    }
    printf("  %-28s %9.2f ms  (%lld pages, quantized per SPEC.md)\n", "build + quantize cache", mlajit_now_ms() - t,
           (long long)c.kv.num_pages);

    mlajit_kernel_spec spec = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_case_spec(&c, &spec);
    mlajit_kernel_report rep = MLAJIT_KERNEL_REPORT_INIT;
    t = mlajit_now_ms();
    if ((rc = mlajit_kernel_prepare(ctx, &spec, &rep))) {
        cli_error(rc, "demo: JIT");
        cli_missing_kernel_hint(rc, ctx, &spec);
        mlajit_case_free(&c);
        mlajit_context_destroy(ctx);
        return CLI_FAIL;
    }
    printf("  %-28s %9.2f ms  (%s: %s; %d registers, %d spill bytes)\n", "JIT (generate, NVRTC, cache)",
           mlajit_now_ms() - t, rep.cache_hit ? "cache hit" : "compiled and cached", rep.spec, rep.registers,
           rep.spill_bytes);
    if (!info.has_device) {
        printf("no GPU found: the kernel was generated, compiled for %s and cached; nothing to launch here.\n",
               info.device_arch);
        mlajit_case_free(&c);
        mlajit_context_destroy(ctx);
        return CLI_OK;
    }
    t = mlajit_now_ms();
    mlajit_gpu_result res;
    if ((rc = mlajit_case_run_gpu(ctx, &c, NULL, &res))) {
        mlajit_case_free(&c);
        mlajit_context_destroy(ctx);
        return cli_error(rc, "demo: decode");
    }
    printf("  %-28s %9.2f ms  (plan, upload, decode with %d split%s, download)\n", "GPU decode", mlajit_now_ms() - t,
           res.num_splits, res.num_splits == 1 ? "" : "s");
    t = mlajit_now_ms();
    if ((rc = mlajit_case_compute_expected(&c))) {
        mlajit_gpu_result_free(&res);
        mlajit_case_free(&c);
        mlajit_context_destroy(ctx);
        return cli_error(rc, "demo: reference");
    }
    printf("  %-28s %9.2f ms\n", "CPU reference (fp64)", mlajit_now_ms() - t);
    size_t n_lse = (size_t)c.b * c.s_q * c.h_q;
    mlajit_compare_result r;
    mlajit_compare(res.out, c.expected_out, n_lse * mlajit_case_desc(&c)->d_v, res.lse, c.expected_lse,
                   n_lse, &r);
    print_compare("check vs reference", &r);
    mlajit_gpu_result_free(&res);
    mlajit_case_free(&c);
    mlajit_context_destroy(ctx);
    return r.pass ? CLI_OK : CLI_FAIL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage_text, stderr);
        return CLI_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        fputs(usage_text, stdout);
        return CLI_OK;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("mlajit %s\n", MLAJIT_VERSION_STRING);
        return CLI_OK;
    }
    static const struct {
        const char *name;
        int (*run)(int argc, char **argv);
    } commands[] = {
        {"info", cmd_info},         {"compile", cmd_compile},   {"run-case", cmd_run_case}, {"case", cli_case},
        {"demo", cmd_demo},         {"bench", cli_bench},       {"fuzz", cli_fuzz},         {"envelope", cli_envelope},
        {"pack", cli_pack},         {"cache", cli_cache},       {"tune", cli_tune},
    };
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(cmd, commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "mlajit: unknown %s '%s'; allowed info, compile, run-case, case, demo, bench, fuzz, envelope, "
                    "pack, cache, tune\n(mlajit --help prints the usage)\n",
            cmd[0] == '-' ? "option" : "command", cmd);
    return CLI_USAGE;
}
