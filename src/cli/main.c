/* mlajit - the command-line tool: info, compile, run-case, demo, bench. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "codegen/codegen.h"
#include "common/error.h"
#include "harness/harness.h"
#include "mlajit.h"

static const char usage_text[] =
    "usage: mlajit <command> [options]\n"
    "\n"
    "commands:\n"
    "  info                          version, NVRTC, driver and GPU, cache directory and size\n"
    "  compile --model M --heads N --page P [--extra-page P2] [--features LIST]\n"
    "          [--tile T] [--heads-per-cta H] [--variant V] [--arch sm_XX]\n"
    "          [--emit-source]\n"
    "                                generate, compile and cache one kernel\n"
    "  run-case [--cpu] DIR          run a golden-format case directory and check it\n"
    "          [--variant V] [--tile T] [--heads-per-cta H] [--splits N] [--lse-head-major]\n"
    "          [--pad-strides]\n"
    "                                (kernel variant and argument layout of the GPU run)\n"
    "  demo                          V3.2 decode end to end (b 4, seqlen 4096, topk 2048, h_q 128)\n"
    "  bench [--json FILE] [--quick] the shared/BENCH.md protocol (needs a GPU)\n"
    "  pack build|ls|verify|merge|bench  cubin packs for deployment (`mlajit pack --help`)\n"
    "  cache ls|stats|gc|verify      the writable kernel cache (`mlajit cache --help`)\n"
    "  fuzz [--seconds N] [--seed S] [--cpu-only] [--call N] [--out DIR]\n"
    "                                random decode calls over the envelope against the reference;\n"
    "                                --cpu-only: generate + NVRTC for sm_80/90a/100a/120a, no launch\n"
    "  envelope [SPEC [--batch B] [--s-q S] [--topk K] [--extra-topk E] [--splits N]]\n"
    "                                the supported envelope as tables, or one spec checked against it\n"
    "                                (with a geometry: the kernel and grid its plan launches on 132 SMs)\n"
    "\n"
    "models: v32, dsv4, glm_nsa; features: sink, topk-length, extra-topk-length\n"
    "variants (V): " MLAJIT_VARIANT_NAMES "\n"
    "exit status: 0 ok, 1 failure, 2 usage or invalid arguments\n";

int cli_error(int status, const char *what)
{
    fprintf(stderr, "mlajit: %s: %s (%s)\n", what, mlajit_last_error(), mlajit_status_string(status));
    return status == MLAJIT_ERR_INVALID_ARGUMENT ? CLI_USAGE : CLI_FAIL;
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "mlajit: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n%s", usage_text);
    return CLI_USAGE;
}

int cli_parse_int(const char *s, const char *name, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) {
        fprintf(stderr, "mlajit: %s = '%s'; allowed %d..%d\n", name, s, lo, hi);
        return 0;
    }
    *out = (int)v;
    return 1;
}

int cli_match_int_option(int argc, char **argv, int *i, const cli_int_option *opts, size_t n, const char *cmd)
{
    for (size_t k = 0; k < n; k++) {
        if (strcmp(argv[*i], opts[k].name) != 0)
            continue;
        if (*i + 1 == argc) {
            fprintf(stderr, "mlajit: %s: %s needs a value\n", cmd, opts[k].name);
            return -1;
        }
        if (!cli_parse_int(argv[*i + 1], opts[k].name, opts[k].lo, opts[k].hi, opts[k].target))
            return -1;
        (*i)++;
        return 1;
    }
    return 0;
}

int cli_parse_variant(const char *s, mlajit_variant *out)
{
    if (mlajit_variant_from_name(s, out))
        return 1;
    fprintf(stderr, "mlajit: --variant = '%s'; allowed " MLAJIT_VARIANT_NAMES "\n", s);
    return 0;
}

static int cmd_info(void)
{
    mlajit_context *ctx;
    int rc = mlajit_context_create(NULL, &ctx);
    if (rc)
        return cli_error(rc, "info");
    mlajit_context_info info;
    mlajit_context_get_info(ctx, &info);
    printf("mlajit        %s\n", MLAJIT_VERSION_STRING);
    printf("nvrtc         %d.%d\n", info.nvrtc_major, info.nvrtc_minor);
    if (info.has_device) {
        printf("driver        %d.%d\n", info.driver_version / 1000, (info.driver_version % 1000) / 10);
        printf("gpu           %s (%s, %d SMs, %.0f MB L2)\n", info.device_name, info.device_arch, info.sm_count,
               (double)info.l2_bytes / (1 << 20));
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

static int parse_features(const char *list, unsigned *out)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    *out = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (strcmp(t, "sink") == 0) *out |= MLAJIT_FEATURE_SINK;
        else if (strcmp(t, "topk-length") == 0) *out |= MLAJIT_FEATURE_TOPK_LENGTH;
        else if (strcmp(t, "extra-topk-length") == 0) *out |= MLAJIT_FEATURE_EXTRA_TOPK_LENGTH;
        else {
            fprintf(stderr, "mlajit: --features: '%s' is unknown; allowed sink, topk-length, extra-topk-length\n", t);
            return 0;
        }
    }
    return 1;
}

static int cmd_compile(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"model", required_argument, 0, 'm'}, {"heads", required_argument, 0, 'h'},
        {"page", required_argument, 0, 'p'},  {"extra-page", required_argument, 0, 'e'},
        {"arch", required_argument, 0, 'a'},  {"emit-source", no_argument, 0, 's'},
        {"features", required_argument, 0, 'f'}, {"tile", required_argument, 0, 't'},
        {"heads-per-cta", required_argument, 0, 'c'}, {"variant", required_argument, 0, 'v'},
        {0, 0, 0, 0}};
    const char *model_name = NULL, *arch = "";
    int heads = 0, page = 0, extra_page = 0, tile = 0, heads_per_cta = 0, emit = 0;
    mlajit_variant variant = MLAJIT_VARIANT_AUTO;
    unsigned features = 0;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': model_name = optarg; break;
        case 'h': if (!cli_parse_int(optarg, "--heads", 1, MLAJIT_MAX_HEADS, &heads)) return CLI_USAGE; break;
        case 'p': if (!cli_parse_int(optarg, "--page", 1, MLAJIT_MAX_PAGE_SIZE, &page)) return CLI_USAGE; break;
        case 'e': if (!cli_parse_int(optarg, "--extra-page", 1, MLAJIT_MAX_PAGE_SIZE, &extra_page)) return CLI_USAGE; break;
        case 't': if (!cli_parse_int(optarg, "--tile", 0, 64, &tile)) return CLI_USAGE; break;
        case 'c': if (!cli_parse_int(optarg, "--heads-per-cta", 0, 64, &heads_per_cta)) return CLI_USAGE; break;
        case 'a': arch = optarg; break;
        case 'v': if (!cli_parse_variant(optarg, &variant)) return CLI_USAGE; break;
        case 's': emit = 1; break;
        case 'f': if (!parse_features(optarg, &features)) return CLI_USAGE; break;
        default: return usage_error("compile: unknown option%s", "");
        }
    }
    if (!model_name || !heads || !page)
        return usage_error("compile needs --model, --heads and --page%s", "");
    mlajit_model model;
    int rc = mlajit_model_from_name(model_name, &model);
    if (rc)
        return cli_error(rc, "--model");
    mlajit_kernel_spec spec;
    if ((rc = mlajit_spec_init(&spec, model, heads, page)))
        return cli_error(rc, "compile");
    spec.extra_page_size = extra_page;
    spec.features = features;
    spec.tile = tile;
    spec.heads_per_cta = heads_per_cta;
    spec.variant = variant;
    if (strlen(arch) >= sizeof spec.arch)
        return usage_error("--arch '%s' is too long", arch);
    strcpy(spec.arch, arch);
    if ((rc = mlajit_spec_validate(&spec)))
        return cli_error(rc, "compile");
    mlajit_context *ctx;
    if ((rc = mlajit_context_create(NULL, &ctx)))
        return cli_error(rc, "compile");
    if (!spec.arch[0]) {
        mlajit_context_info info;
        mlajit_context_get_info(ctx, &info);
        strcpy(spec.arch, info.device_arch);
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
    mlajit_kernel_report rep;
    rc = mlajit_kernel_prepare(ctx, &spec, &rep);
    mlajit_context_destroy(ctx);
    if (rc)
        return cli_error(rc, "compile");
    printf("spec          %s\n", rep.spec);
    printf("key           %s\n", rep.key);
    if (rep.cache_hit)
        printf("cache         hit (lookup %.3f ms; compiled earlier in %.0f ms)\n", rep.lookup_ms, rep.compile_ms);
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

static int cmd_run_case(int argc, char **argv)
{
    int cpu = 0;
    const char *dir = NULL;
    mlajit_gpu_run_options run = {0}; /* what `mlajit fuzz` prints for a failing call */
    const cli_int_option ints[] = {
        {"--tile", &run.tile, 0, 64},
        {"--heads-per-cta", &run.heads_per_cta, 0, 64},
        {"--splits", &run.num_splits, 0, MLAJIT_MAX_SPLITS},
    };
    for (int i = 1; i < argc; i++) {
        int matched = cli_match_int_option(argc, argv, &i, ints, sizeof ints / sizeof ints[0], "run-case");
        if (matched < 0) return CLI_USAGE;
        else if (matched) continue;
        else if (strcmp(argv[i], "--cpu") == 0) cpu = 1;
        else if (strcmp(argv[i], "--lse-head-major") == 0) run.lse_head_major = 1;
        else if (strcmp(argv[i], "--pad-strides") == 0) run.pad_strides = 1;
        else if (strcmp(argv[i], "--variant") == 0) {
            if (i + 1 == argc)
                return usage_error("run-case: %s needs a value", argv[i]);
            if (!cli_parse_variant(argv[++i], &run.variant))
                return CLI_USAGE;
        }
        else if (argv[i][0] == '-') return usage_error("run-case: unknown option '%s'", argv[i]);
        else if (!dir) dir = argv[i];
        else return usage_error("run-case takes one directory; extra argument '%s'", argv[i]);
    }
    if (!dir)
        return usage_error("run-case needs a case directory%s", "");
    mlajit_case c;
    int rc = mlajit_case_load(dir, &c);
    if (rc)
        return cli_error(rc, "run-case");
    const mlajit_model_desc *m = mlajit_model_describe(c.model);
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
            mlajit_context_destroy(ctx);
            mlajit_case_free(&c);
            return cli_error(rc, "run-case");
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

/* The main job on an embedded default: a V3.2 cache, JIT, decode, check. */
static int cmd_demo(void)
{
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
    mlajit_context_info info;
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

    mlajit_kernel_spec spec;
    mlajit_case_spec(&c, &spec);
    mlajit_kernel_report rep;
    t = mlajit_now_ms();
    if ((rc = mlajit_kernel_prepare(ctx, &spec, &rep))) {
        mlajit_case_free(&c);
        mlajit_context_destroy(ctx);
        return cli_error(rc, "demo: JIT");
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
    mlajit_compare(res.out, c.expected_out, n_lse * mlajit_model_describe(c.model)->d_v, res.lse, c.expected_lse,
                   n_lse, &r);
    print_compare("check vs reference", &r);
    mlajit_gpu_result_free(&res);
    mlajit_case_free(&c);
    mlajit_context_destroy(ctx);
    return r.pass ? CLI_OK : CLI_FAIL;
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(usage_text, argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "info") == 0) return cmd_info();
    if (strcmp(cmd, "compile") == 0) return cmd_compile(argc - 1, argv + 1);
    if (strcmp(cmd, "run-case") == 0) return cmd_run_case(argc - 1, argv + 1);
    if (strcmp(cmd, "demo") == 0) return cmd_demo();
    if (strcmp(cmd, "bench") == 0) return cli_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "fuzz") == 0) return cli_fuzz(argc - 1, argv + 1);
    if (strcmp(cmd, "envelope") == 0) return cli_envelope(argc - 1, argv + 1);
    if (strcmp(cmd, "pack") == 0) return cli_pack(argc - 1, argv + 1);
    if (strcmp(cmd, "cache") == 0) return cli_cache(argc - 1, argv + 1);
    if (strcmp(cmd, "--version") == 0) { printf("mlajit %s\n", MLAJIT_VERSION_STRING); return CLI_OK; }
    return usage_error("unknown command '%s'", cmd);
}
