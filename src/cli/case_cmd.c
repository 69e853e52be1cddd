/* mlajit case make: a case directory for any spec and geometry, in the format
 * of the golden cases (harness.h): inputs synthesized by docs/BENCH.md's recipe
 * and quantized by the project's quantizer, the expected output from the fp64
 * reference. `mlajit run-case` reads it; so does every test that takes cases. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "codegen/codegen.h"
#include "common/error.h"
#include "harness/harness.h"
#include "mlajit.h"

static const char case_usage[] =
    "usage: mlajit case <command>      (mlajit case <command> --help: its usage)\n"
    "\n"
    "  make SPEC --out DIR [--batch B] [--s-q S] [--topk K] [--extra-topk E] [--seqlen N]\n"
    "       [--extra-seqlen N] [--seed S] [--invalid F] [--page-pad BYTES]\n"
    "                             write a synthetic case directory with its fp64 expected output\n";

static const char make_usage[] =
    "usage: mlajit case make SPEC --out DIR [--batch B] [--s-q S] [--topk K] [--extra-topk E]\n"
    "                        [--seqlen N] [--extra-seqlen N] [--seed S] [--invalid F] [--page-pad BYTES]\n"
    "  write DIR, a case directory in the golden cases' format (tests/golden/README.md): a\n"
    "  cache of B sequences of N tokens on randomly assigned pages, K values normal(0,1)/10\n"
    "  quantized by the project's quantizer (docs/SPEC.md), q, indices, the features the SPEC\n"
    "  names, and the expected out and lse from the fp64 reference. Replay: mlajit run-case DIR.\n"
    "  SPEC          model.hN.pN[.eN][.f<s|l|x>]... as mlajit envelope takes it: the model, heads,\n"
    "                page size, extra cache and features (s sink, l topk-length, x extra-topk-length)\n"
    "  --out DIR     the directory to create (it must not exist)\n"
    "  --batch B     batch rows, 0..4096 (default 2)\n"
    "  --s-q S       query tokens per row, 0..8 (default 1)\n"
    "  --topk K      candidates per query token, 1..16384 (default 128)\n"
    "  --extra-topk E  candidates in the extra cache, 1..16384 (default 64; only with .eN)\n"
    "  --seqlen N    tokens per sequence, 1..2^24 (default 2 K: half the slots never attended)\n"
    "  --extra-seqlen N  the same for the extra cache (default 2 E)\n"
    "  --seed S      the generator's seed, 0..2^64-1 (default 1): the same seed, the same case\n"
    "  --invalid F   the share of indices made invalid (-1 or out of range), 0..1 (default 0)\n"
    "  --page-pad BYTES  extra bytes per page past the minimum stride, a multiple of 16 (default 0)\n"
    "exit status: 0 written, 1 it could not be written, 2 bad arguments or a geometry outside the envelope\n";

static int cmd_make(int argc, char **argv)
{
    const char *out_dir = NULL;
    int batch = 2, s_q = 1, topk = 128, extra_topk = -1, seqlen = 0, extra_seqlen = 0;
    uint64_t seed = 1;
    double invalid = 0;
    int64_t page_pad = 0;
    const cli_option options[] = {
        {"--out", CLI_STRING, .target = &out_dir},
        {"--batch", CLI_INT, &batch, .lo = 0, .hi = MLAJIT_MAX_BATCH},
        {"--s-q", CLI_INT, &s_q, .lo = 0, .hi = MLAJIT_MAX_SQ},
        {"--topk", CLI_INT, &topk, .lo = 1, .hi = MLAJIT_MAX_TOPK},
        {"--extra-topk", CLI_INT, &extra_topk, .lo = 1, .hi = MLAJIT_MAX_TOPK},
        {"--seqlen", CLI_INT, &seqlen, .lo = 1, .hi = 1 << 24},
        {"--extra-seqlen", CLI_INT, &extra_seqlen, .lo = 1, .hi = 1 << 24},
        {"--seed", CLI_UINT64, .target = &seed},
        {"--invalid", CLI_DOUBLE, &invalid, .lo = 0, .hi = 1},
        {"--page-pad", CLI_INT64, &page_pad, .lo = 0, .hi = (long long)1 << 24},
    };
    const cli_command cmd = {"case make", make_usage, options, sizeof options / sizeof options[0], 1, 1,
                             "one SPEC"};
    int n, rc = cli_parse(&cmd, argc, argv, &n);
    if (rc != CLI_PARSED)
        return rc;
    if (!out_dir)
        return cli_usage_error(&cmd, "needs --out DIR");
    if (page_pad % 16)
        return cli_usage_error(&cmd, "--page-pad = %lld; allowed a multiple of 16", (long long)page_pad);
    mlajit_kernel_spec spec = MLAJIT_KERNEL_SPEC_INIT;
    if (!cli_parse_spec("case make", argv[1], &spec))
        return CLI_USAGE;
    if (extra_topk < 0)
        extra_topk = spec.extra_page_size ? 64 : 0;
    else if (!spec.extra_page_size)
        return cli_usage_error(&cmd, "--extra-topk needs an extra cache: a SPEC with .eN");
    if (extra_seqlen && !spec.extra_page_size)
        return cli_usage_error(&cmd, "--extra-seqlen needs an extra cache: a SPEC with .eN");
    /* the call as the library would be asked for it (no compiler asked: the case is data) */
    const mlajit_decode_shape shape = {.struct_size = sizeof shape, .batch = batch, .s_q = s_q, .topk = topk,
                                       .extra_topk = extra_topk};
    /* A spec no kernel family serves (DOTS3_SWA on the 99 KB archs, a family forced
     * that refuses the model: families.c) still makes a case: the case is data, inputs and the fp64 expected output, for
     * the kernel that comes to serve it. Its spec and shape must still be valid. */
    char no_kernel[512] = "";
    if ((rc = mlajit_envelope_check_with(&spec, &shape, NULL))) {
        if (rc != MLAJIT_ERR_UNSUPPORTED)
            return cli_invalid(rc, "case make");
        snprintf(no_kernel, sizeof no_kernel, "%s", mlajit_last_error());
        if ((rc = mlajit_shape_validate(&spec, &shape)))
            return cli_invalid(rc, "case make");
    }

    struct stat st;
    if (stat(out_dir, &st) == 0) {
        fprintf(stderr, "mlajit case make: %s exists; give a new directory (nothing was written)\n", out_dir);
        return CLI_FAIL;
    }
    const mlajit_synth_params params = {
        .model = spec.model, .layout = spec.layout, .b = batch, .s_q = s_q, .h_q = spec.h_q, .topk = topk, .extra_topk = extra_topk,
        .page_size = spec.page_size, .extra_page_size = spec.extra_page_size,
        .seqlen = seqlen ? seqlen : 2 * topk,
        .extra_seqlen = spec.extra_page_size ? (extra_seqlen ? extra_seqlen : 2 * extra_topk) : 0,
        .page_stride_pad = page_pad,
        .with_sink = !!(spec.features & MLAJIT_FEATURE_SINK),
        .with_topk_length = !!(spec.features & MLAJIT_FEATURE_TOPK_LENGTH),
        .with_extra_topk_length = !!(spec.features & MLAJIT_FEATURE_EXTRA_TOPK_LENGTH),
        .invalid_fraction = invalid, .seed = seed,
    };
    mlajit_case c;
    if ((rc = mlajit_case_synthesize(&params, &c)))
        return cli_invalid(rc, "case make");
    double t = mlajit_now_ms();
    if ((rc = mlajit_case_compute_expected(&c)) || (rc = mlajit_case_save(out_dir, &c))) {
        mlajit_case_free(&c);
        return cli_error(rc, "case make");
    }
    const mlajit_model_desc *m = mlajit_case_desc(&c);
    printf("case %s: %s b %d s_q %d h_q %d topk %d extra_topk %d, page %d%s, seed %llu; reference %.0f ms\n",
           out_dir, m->name, c.b, c.s_q, c.h_q, c.topk, c.extra_topk, c.kv.page_size,
           c.has_extra ? " + extra cache" : "", (unsigned long long)c.seed, mlajit_now_ms() - t);
    if (no_kernel[0])
        printf("no kernel runs it yet (%s): replay with mlajit run-case --cpu %s\n", no_kernel, out_dir);
    else
        printf("replay: mlajit run-case %s   (or --cpu for the reference alone)\n", out_dir);
    mlajit_case_free(&c);
    return CLI_OK;
}

int cli_case(int argc, char **argv)
{
    static const char *const names[] = {"make"};
    int status, k = cli_pick_subcommand("case", case_usage, names, 1, argc, argv, &status);
    return k < 0 ? status : cmd_make(argc - 1, argv + 1);
}
