/* NVRTC: generated kernels compile for every target family with no spills, and
 * the context's prepare path goes process map -> disk cache -> NVRTC. No GPU. */
#include <criterion/criterion.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/store.h"
#include "codegen/codegen.h"
#include "mlajit.h"
#include "runtime/cubin.h"
#include "runtime/driver.h"
#include "runtime/nvrtc.h"

/* Generate and compile one kernel; it must be a real cubin with a parsed ptxas
 * report, no spills and no wgmma that ptxas had to serialize. 64 heads per CTA in
 * the portable family run 512 threads at the 128-register cap with a 64-register
 * output accumulator: with every feature on, ptxas may put a few words on the
 * (L1-resident) stack. Anything more, or any spill elsewhere (the sm90 family
 * included), is a failure. */
static void compile_spec_ok(mlajit_kernel_spec s, const char *arch)
{
    const mlajit_variant variant = s.variant;
    char name[256];
    cr_assert_eq(mlajit_spec_string(&s, name, sizeof name), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_kernel_spec r = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
    char *src;
    cr_assert_eq(mlajit_generate_source(&s, &src), MLAJIT_OK, "%s", mlajit_last_error());
    if (variant == MLAJIT_VARIANT_SM90) {
        cr_expect(strstr(name, ".t64.hc64.sm90.sm_90a") != NULL, "%s", name);
        cr_expect(strstr(src, "wgmma.mma_async") != NULL, "%s: the wgmma kernel, not the portable one", name);
    }
    if (variant == MLAJIT_VARIANT_SM90_STAGED)
        cr_expect(strstr(src, "wgmma.mma_async") && strstr(src, "kStagedOutput = true"), "%s: sm90, staged", name);
    if (variant == MLAJIT_VARIANT_SM90_NARROW)
        cr_expect(strstr(src, "kBarRingRead") && strstr(name, ".sm90-narrow.sm_90a"), "%s: the narrow kernel", name);
    if (variant == MLAJIT_VARIANT_SM90_NARROW_SCORES)
        cr_expect(strstr(src, "kBarScalesChecked") && strstr(name, ".sm90-narrow-scores.sm_90a"),
                  "%s: the scores kernel (it fits here, so it is not sm90-narrow)", name);
    if (variant == MLAJIT_VARIANT_SM90_NARROW_LONG)
        cr_expect(strstr(src, "kBarRingRead") && strstr(src, "kProducerGroups = 3") &&
                      strstr(name, ".sm90-narrow-long.sm_90a"),
                  "%s: the narrow kernel with three producer groups", name);
    /* bf16 NoPE values (scales none) take the templates' bf16 edition, and only they */
    const int bf16 = mlajit_spec_desc(&r)->scale_format == MLAJIT_SCALE_NONE;
    cr_expect_eq(strstr(src, "the bf16 edition reads bf16 NoPE values") != NULL, bf16, "%s: bf16 edition %s", name,
                 bf16 ? "missing" : "taken");
    mlajit_compiled c;
    int rc = mlajit_nvrtc_compile(src, name, arch, &c);
    mlajit_free(src);
    cr_assert_eq(rc, MLAJIT_OK, "%s: %s", name, mlajit_last_error());
    cr_expect_gt(c.cubin_size, 1000u, "%s: a real cubin", name);
    int allowed = r.variant == MLAJIT_VARIANT_PORTABLE && r.heads_per_cta == 64 ? 64 : 0;
    /* sm90 and sm90-staged at GLM53_NOPE with one CTA per row: the exact
     * dequantization's converted form keeps a word across each round (8 bytes),
     * the sink's epilogue a few more (no register split of 504 spilled less;
     * decode_sm90.cu) */
    if ((r.variant == MLAJIT_VARIANT_SM90 || r.variant == MLAJIT_VARIANT_SM90_STAGED) &&
        r.model == MLAJIT_MODEL_GLM53_NOPE && r.h_q <= 64)
        allowed = 64;
    /* sm90-split (CUDA 13.0): 16 bytes in the producer's exact dequantization (ue8m0
     * scales past 2^7, which the quantizer never writes), and with the extra cache or
     * a length two words of the score group's, reloaded once a tile */
    if (r.variant == MLAJIT_VARIANT_SM90_SPLIT)
        allowed = 48;
    /* sm90-narrow with one K buffer (DOTS3_SWA) at 16 heads, the rows' heads through
     * the slot: with the extra cache or a length, 24 bytes of the producers' index
     * bookkeeping (CUDA 13.0); none at 8 heads or without them */
    if (r.variant == MLAJIT_VARIANT_SM90_NARROW && r.model == MLAJIT_MODEL_DOTS3_SWA && r.heads_per_cta > 8)
        allowed = 32;
    cr_expect_leq(c.spill_bytes, allowed, "%s spills %d bytes (allowed %d)", name, c.spill_bytes, allowed);
    cr_expect_eq(c.wgmma_serialized, 0, "%s: ptxas serialized wgmma; log:\n%s", name, c.log ? c.log : "(none)");
    cr_expect_gt(c.registers, 0, "%s: the register count was found; log:\n%s", name, c.log ? c.log : "(none)");
    cr_expect_leq(c.registers, 255);
    /* the cubin's record and the log's line agree wherever the log has one */
    mlajit_compiled from_log;
    memset(&from_log, 0, sizeof from_log);
    mlajit_ptxas_log_parse(c.log ? c.log : "", &from_log);
    cr_expect_eq(mlajit_cubin_register_count(c.cubin, c.cubin_size, "mlajit_decode_main"), c.registers, "%s", name);
    if (from_log.registers > 0)
        cr_expect_eq(from_log.registers, c.registers, "%s: log %d, cubin %d", name, from_log.registers, c.registers);
    mlajit_compiled_free(&c);
}

static void compile_variant_ok(mlajit_model model, int h, int page, int extra_page, unsigned features,
                               const char *arch, mlajit_variant variant)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init(&s, model, h, page), MLAJIT_OK);
    s.extra_page_size = extra_page;
    s.features = features;
    s.variant = variant;
    strcpy(s.arch, arch);
    compile_spec_ok(s, arch);
}

/* The cubin reader on a real image, every truncation of it and damaged copies:
 * a count or -1, never a read past the end (ASan runs this too). */
Test(cubin, register_count_from_the_image_and_no_read_past_a_damaged_one, .timeout = 300)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_spec_init(&s, MLAJIT_MODEL_V32, 16, 64);
    strcpy(s.arch, "sm_80");
    char *src;
    cr_assert_eq(mlajit_generate_source(&s, &src), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_compiled c;
    int rc = mlajit_nvrtc_compile(src, "cubin_test", "sm_80", &c);
    mlajit_free(src);
    cr_assert_eq(rc, MLAJIT_OK, "%s", mlajit_last_error());
    int regs = mlajit_cubin_register_count(c.cubin, c.cubin_size, "mlajit_decode_main");
    cr_expect_gt(regs, 0);
    cr_expect_gt(mlajit_cubin_register_count(c.cubin, c.cubin_size, "mlajit_decode_combine"), 0);
    cr_expect_eq(mlajit_cubin_register_count(c.cubin, c.cubin_size, "mlajit_decode"), -1, "a prefix is not the name");
    cr_expect_eq(mlajit_cubin_register_count(c.cubin, c.cubin_size, "no_such_kernel"), -1);
    cr_expect_eq(mlajit_cubin_register_count(NULL, c.cubin_size, "mlajit_decode_main"), -1);
    cr_expect_eq(mlajit_cubin_register_count("\x7f" "ELF", 4, "mlajit_decode_main"), -1);
    /* every prefix: exact-size copies, so a read past the end is a heap overflow */
    for (size_t n = 0; n < c.cubin_size; n += n < 4096 ? 1 : 61) {
        unsigned char *cut = malloc(n ? n : 1);
        cr_assert_not_null(cut);
        memcpy(cut, c.cubin, n);
        int got = mlajit_cubin_register_count(cut, n, "mlajit_decode_main");
        cr_expect(got == -1 || got == regs, "prefix %zu: %d", n, got);
        free(cut);
    }
    /* each header byte flipped in turn */
    unsigned char *copy = malloc(c.cubin_size);
    cr_assert_not_null(copy);
    for (size_t i = 0; i < 64 && i < c.cubin_size; i++) {
        memcpy(copy, c.cubin, c.cubin_size);
        copy[i] ^= 0xff;
        (void)mlajit_cubin_register_count(copy, c.cubin_size, "mlajit_decode_main");
    }
    free(copy);
    mlajit_compiled_free(&c);
}

static void compile_ok(mlajit_model model, int h, int page, int extra_page, unsigned features, const char *arch)
{
    compile_variant_ok(model, h, page, extra_page, features, arch, MLAJIT_VARIANT_AUTO);
}

/* cuLaunchKernelEx reads these as CUlaunchConfig / CUlaunchAttribute: the byte
 * layout of cuda.h (CUDA 12.0 on; checked against CUDA 13.0's header), which the
 * project does not include. */
Test(driver, launch_structs_have_the_cuda_h_layout)
{
    cr_expect_eq(offsetof(mlajit_cu_launch_attribute, value), 8u);
    cr_expect_eq(sizeof(mlajit_cu_launch_attribute), 72u);
    cr_expect_eq(offsetof(mlajit_cu_launch_config, shared_bytes), 24u);
    cr_expect_eq(offsetof(mlajit_cu_launch_config, stream), 32u);
    cr_expect_eq(offsetof(mlajit_cu_launch_config, attrs), 40u);
    cr_expect_eq(offsetof(mlajit_cu_launch_config, num_attrs), 48u);
    cr_expect_eq(sizeof(mlajit_cu_launch_config), 56u);
}

/* The register count belongs to the main entry even when a callee's properties
 * block sits between the entry's line and its "Used" line, spills add up over
 * every function, and ptxas's wgmma serialization notes are counted. */
Test(nvrtc, ptxas_log_parse)
{
    const char *log =
        "ptxas info    : 0 bytes gmem\n"
        "ptxas info    : Compiling entry function 'mlajit_decode_combine' for 'sm_90a'\n"
        "ptxas info    : Function properties for mlajit_decode_combine\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 32 registers, used 0 barriers, 384 bytes cumulative stack size\n"
        "ptxas info    : Compiling entry function 'mlajit_decode_main' for 'sm_90a'\n"
        "ptxas info    : Function properties for __internal_callee\n"
        "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Function properties for mlajit_decode_main\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Function properties for __internal_other\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 168 registers, used 16 barriers, 1024 bytes smem\n";
    mlajit_compiled c;
    memset(&c, 0, sizeof c);
    mlajit_ptxas_log_parse(log, &c);
    cr_expect_eq(c.registers, 168);
    cr_expect_eq(c.shared_bytes, 1024);
    cr_expect_eq(c.spill_bytes, 8);
    cr_expect_eq(c.wgmma_serialized, 0);
    /* ptxas's notes when it serializes wgmma (as NVRTC 13.0 logs them for a kernel
     * that writes an accumulator between two wgmma of one stage) */
    mlajit_ptxas_log_parse(
        "ptxas info    : (C7519) warpgroup.arrive is injected in around line 82 by compiler to allow use of "
        "registers in GMMA in function 'mlajit_decode_main'\n"
        "ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
        "insufficient register resources for the wgmma pipeline in the function 'mlajit_decode_main'\n"
        "ptxas info    : Compiling entry function 'mlajit_decode_main' for 'sm_90a'\n"
        "ptxas info    : Used 90 registers, used 0 barriers\n",
        &c);
    cr_expect_eq(c.wgmma_serialized, 1);
    cr_expect_eq(c.registers, 90);
    mlajit_ptxas_log_parse("ptxas info    : Used 40 registers\n", &c);
    cr_expect_eq(c.registers, -1, "no entry line: not the main entry's count");
    mlajit_ptxas_log_parse("", &c);
    cr_expect_eq(c.registers, -1);
    cr_expect_eq(c.spill_bytes, 0);
}

static const char *arches[] = {"sm_80", "sm_90a", "sm_100a", "sm_120a"};

Test(nvrtc, v32_spread, .timeout = 600)
{
    for (int a = 0; a < 4; a++) {
        compile_ok(MLAJIT_MODEL_V32, 128, 64, 0, 0, arches[a]);
        compile_ok(MLAJIT_MODEL_V32, 3, 61, 0, MLAJIT_FEATURE_SINK | MLAJIT_FEATURE_TOPK_LENGTH, arches[a]);
    }
}

Test(nvrtc, dsv4_spread, .timeout = 600)
{
    for (int a = 0; a < 4; a++) {
        compile_ok(MLAJIT_MODEL_DSV4, 64, 256, 64, MLAJIT_FEATURE_ALL, arches[a]);
        compile_ok(MLAJIT_MODEL_DSV4, 17, 1, 0, 0, arches[a]);
    }
}

Test(nvrtc, glm_nsa_and_odd_shapes, .timeout = 600)
{
    compile_ok(MLAJIT_MODEL_GLM_NSA, 128, 1024, 7, MLAJIT_FEATURE_ALL, "sm_90a");
    compile_ok(MLAJIT_MODEL_V32, 1, 1, 1023, MLAJIT_FEATURE_EXTRA_TOPK_LENGTH, "sm_86");
    compile_ok(MLAJIT_MODEL_V32, 80, 2, 0, 0, "sm_89");
}

/* The wgmma family (sm_90a only; auto picks it there) compiles for every model and feature set
 * with no spills under its register split (setmaxnreg, per scale format). */
Test(nvrtc, sm90_family, .timeout = 600)
{
    const mlajit_variant sm90 = MLAJIT_VARIANT_SM90;
    compile_variant_ok(MLAJIT_MODEL_V32, 128, 64, 0, 0, "sm_90a", sm90);
    compile_variant_ok(MLAJIT_MODEL_V32, 3, 61, 0, MLAJIT_FEATURE_SINK | MLAJIT_FEATURE_TOPK_LENGTH, "sm_90a", sm90);
    compile_variant_ok(MLAJIT_MODEL_DSV4, 128, 256, 64, MLAJIT_FEATURE_ALL, "sm_90a", sm90);
    compile_variant_ok(MLAJIT_MODEL_GLM_NSA, 64, 1024, 7, MLAJIT_FEATURE_ALL, "sm_90a", sm90);
}

/* GLM53_NOPE and DOTS3_SWA (the layouts edition of the templates): the portable
 * family on sm_80 and sm_90a and sm90's pair with no spills; sm90 with one CTA per
 * row within its allowance (compile_variant_ok). */
Test(nvrtc, new_layouts, .timeout = 600)
{
    const mlajit_variant portable = MLAJIT_VARIANT_PORTABLE, sm90 = MLAJIT_VARIANT_SM90;
    compile_variant_ok(MLAJIT_MODEL_GLM53_NOPE, 128, 64, 64, MLAJIT_FEATURE_ALL, "sm_90a", sm90);
    compile_variant_ok(MLAJIT_MODEL_GLM53_NOPE, 33, 1, 64, MLAJIT_FEATURE_ALL, "sm_90a", sm90);
    compile_variant_ok(MLAJIT_MODEL_GLM53_NOPE, 64, 256, 0, 0, "sm_90a", sm90);
    compile_variant_ok(MLAJIT_MODEL_GLM53_NOPE, 16, 64, 64, MLAJIT_FEATURE_ALL, "sm_80", portable);
    compile_variant_ok(MLAJIT_MODEL_DOTS3_SWA, 16, 64, 64, MLAJIT_FEATURE_ALL, "sm_90a", portable);
    compile_variant_ok(MLAJIT_MODEL_DOTS3_SWA, 128, 256, 0, MLAJIT_FEATURE_SINK, "sm_90a", portable);
    compile_variant_ok(MLAJIT_MODEL_DOTS3_SWA, 33, 1, 64, MLAJIT_FEATURE_ALL, "sm_80", portable);
}

/* bf16 (scales none: the templates' bf16 edition) and the custom layouts issue 49
 * names (d_nope 256 with ue8m0 scales inline; no RoPE with fp32 scales in a page
 * footer; d_v 256): the portable family, auto's kernel on sm_90a for the custom
 * ones, with and without the extra cache and every feature, one to four row tiles
 * of heads; bf16 by sm90's bf16 edition too (auto's kernel for bf16 on sm_90a), and
 * by sm90-narrow's at 8-32 heads per CTA (forced only: it ties sm90's). */
Test(nvrtc, bf16_and_custom_layouts, .timeout = 900)
{
    const mlajit_variant portable = MLAJIT_VARIANT_PORTABLE;
    compile_variant_ok(MLAJIT_MODEL_V32_BF16, 16, 64, 0, 0, "sm_80", portable);
    compile_variant_ok(MLAJIT_MODEL_V32_BF16, 128, 1, 64, MLAJIT_FEATURE_ALL, "sm_90a", portable);
    compile_variant_ok(MLAJIT_MODEL_DSV4_BF16, 7, 256, 64, MLAJIT_FEATURE_ALL, "sm_90a", portable);
    compile_variant_ok(MLAJIT_MODEL_DSV4_BF16, 64, 64, 0, MLAJIT_FEATURE_SINK, "sm_80", portable);
    /* sm90's bf16 edition: one CTA per row and the pair, every feature */
    const mlajit_variant sm90 = MLAJIT_VARIANT_SM90;
    compile_variant_ok(MLAJIT_MODEL_V32_BF16, 64, 64, 64, MLAJIT_FEATURE_ALL, "sm_90a", sm90);
    compile_variant_ok(MLAJIT_MODEL_V32_BF16, 128, 1, 0, 0, "sm_90a", sm90);
    compile_variant_ok(MLAJIT_MODEL_DSV4_BF16, 128, 256, 64, MLAJIT_FEATURE_ALL, "sm_90a", sm90);
    compile_variant_ok(MLAJIT_MODEL_DSV4_BF16, 33, 64, 0, MLAJIT_FEATURE_SINK, "sm_90a", sm90);
    const mlajit_variant narrow = MLAJIT_VARIANT_SM90_NARROW;
    compile_variant_ok(MLAJIT_MODEL_DSV4_BF16, 8, 256, 64, MLAJIT_FEATURE_ALL, "sm_90a", narrow);
    compile_variant_ok(MLAJIT_MODEL_V32_BF16, 16, 64, 0, 0, "sm_90a", narrow);
    compile_variant_ok(MLAJIT_MODEL_DSV4_BF16, 24, 1, 0, MLAJIT_FEATURE_SINK, "sm_90a", narrow);
    compile_variant_ok(MLAJIT_MODEL_V32_BF16, 32, 64, 64, MLAJIT_FEATURE_ALL, "sm_90a", narrow);
    static const char *const layouts[] = {"d_nope=256,d_rope=64,d_v=256,tile=32,scales=ue8m0,place=inline",
                                          "d_nope=512,tile=128,scales=fp32,place=footer",
                                          "d_nope=512,d_rope=64,d_v=256,tile=128,scales=pow2,place=inline"};
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        mlajit_layout l;
        cr_assert_eq(mlajit_layout_parse(layouts[i], &l), MLAJIT_OK, "%s", mlajit_last_error());
        static const struct { int h, page, extra; unsigned features; const char *arch; } calls[] = {
            {16, 64, 0, 0, "sm_80"}, {33, 1, 64, MLAJIT_FEATURE_ALL, "sm_90a"}, {128, 256, 0, 0, "sm_90a"}};
        for (size_t k = 0; k < sizeof calls / sizeof calls[0]; k++) {
            mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
            cr_assert_eq(mlajit_spec_init_layout(&s, &l, calls[k].h, calls[k].page), MLAJIT_OK);
            s.extra_page_size = calls[k].extra;
            s.features = calls[k].features;
            s.variant = portable;
            strcpy(s.arch, calls[k].arch);
            compile_spec_ok(s, calls[k].arch);
        }
    }
}

/* sm90-narrow with one K buffer (DOTS3_SWA's d_v 1024: the template's layouts
 * edition) at 8 and 16 heads per CTA, every page size shape and feature set */
Test(nvrtc, narrow_one_k_buffer, .timeout = 600)
{
    const mlajit_variant narrow = MLAJIT_VARIANT_SM90_NARROW;
    compile_variant_ok(MLAJIT_MODEL_DOTS3_SWA, 16, 64, 0, 0, "sm_90a", narrow);
    compile_variant_ok(MLAJIT_MODEL_DOTS3_SWA, 8, 1, 0, MLAJIT_FEATURE_SINK, "sm_90a", narrow);
    compile_variant_ok(MLAJIT_MODEL_DOTS3_SWA, 13, 256, 64, MLAJIT_FEATURE_ALL, "sm_90a", narrow);
    compile_variant_ok(MLAJIT_MODEL_DOTS3_SWA, 5, 64, 1024, MLAJIT_FEATURE_ALL, "sm_90a", narrow);
}

/* sm90-split (DOTS3_SWA's CTA pair splitting the dims) at one and two head groups,
 * every page size shape and feature set */
Test(nvrtc, sm90_split_family, .timeout = 600)
{
    const mlajit_variant split = MLAJIT_VARIANT_SM90_SPLIT;
    compile_variant_ok(MLAJIT_MODEL_DOTS3_SWA, 64, 64, 0, 0, "sm_90a", split);
    compile_variant_ok(MLAJIT_MODEL_DOTS3_SWA, 128, 1, 0, MLAJIT_FEATURE_TOPK_LENGTH, "sm_90a", split);
    compile_variant_ok(MLAJIT_MODEL_DOTS3_SWA, 64, 256, 64, MLAJIT_FEATURE_ALL, "sm_90a", split);
    compile_variant_ok(MLAJIT_MODEL_DOTS3_SWA, 33, 64, 1024, MLAJIT_FEATURE_SINK, "sm_90a", split);
}

/* sm90-staged compiles with no spills for the power-of-two models with every
 * feature, one head group and a CTA pair (its split-partial path is left out for
 * this); arbitrary scales: sm90_staged_exact_scales below. */
Test(nvrtc, sm90_staged_family, .timeout = 600)
{
    const mlajit_variant staged = MLAJIT_VARIANT_SM90_STAGED;
    compile_variant_ok(MLAJIT_MODEL_V32, 64, 64, 0, MLAJIT_FEATURE_SINK | MLAJIT_FEATURE_TOPK_LENGTH, "sm_90a", staged);
    compile_variant_ok(MLAJIT_MODEL_V32, 128, 61, 0, 0, "sm_90a", staged);
    compile_variant_ok(MLAJIT_MODEL_DSV4, 64, 256, 64, MLAJIT_FEATURE_ALL, "sm_90a", staged);
    compile_variant_ok(MLAJIT_MODEL_DSV4, 128, 256, 64, MLAJIT_FEATURE_ALL, "sm_90a", staged);
    compile_variant_ok(MLAJIT_MODEL_DSV4, 128, 1, 1024, MLAJIT_FEATURE_SINK, "sm_90a", staged);
}

/* sm90-narrow compiles with no spills (and no serialized wgmma) at each wgmma N it
 * takes (8, 16, 24, 32 heads), for both power-of-two formats, with every feature,
 * and sm90-narrow-long where it is itself (V3.2 at 16 heads and fewer);
 * and it refuses what it cannot run, saying what to use instead. */
Test(nvrtc, sm90_narrow_family, .timeout = 600)
{
    const mlajit_variant narrow = MLAJIT_VARIANT_SM90_NARROW;
    compile_variant_ok(MLAJIT_MODEL_V32, 32, 64, 0, 0, "sm_90a", narrow);
    compile_variant_ok(MLAJIT_MODEL_V32, 32, 1, 0, MLAJIT_FEATURE_SINK | MLAJIT_FEATURE_TOPK_LENGTH, "sm_90a", narrow);
    compile_variant_ok(MLAJIT_MODEL_V32, 8, 61, 64, MLAJIT_FEATURE_ALL, "sm_90a", narrow);
    compile_variant_ok(MLAJIT_MODEL_V32, 1, 64, 0, 0, "sm_90a", narrow);
    compile_variant_ok(MLAJIT_MODEL_DSV4, 20, 256, 64, MLAJIT_FEATURE_ALL, "sm_90a", narrow);
    compile_variant_ok(MLAJIT_MODEL_DSV4, 16, 7, 2, MLAJIT_FEATURE_ALL, "sm_90a", narrow);
    compile_variant_ok(MLAJIT_MODEL_DSV4, 32, 64, 0, 0, "sm_90a", narrow);
    /* sm90-narrow-long: 512 threads, the producers at 96 registers */
    const mlajit_variant narrow_long = MLAJIT_VARIANT_SM90_NARROW_LONG;
    compile_variant_ok(MLAJIT_MODEL_V32, 8, 64, 0, 0, "sm_90a", narrow_long);
    compile_variant_ok(MLAJIT_MODEL_V32, 16, 64, 0, 0, "sm_90a", narrow_long);
    compile_variant_ok(MLAJIT_MODEL_V32, 12, 2, 256, MLAJIT_FEATURE_ALL, "sm_90a", narrow_long);
    compile_variant_ok(MLAJIT_MODEL_V32, 8, 61, 64, MLAJIT_FEATURE_ALL, "sm_90a", narrow_long);
    compile_variant_ok(MLAJIT_MODEL_V32, 3, 1, 0, MLAJIT_FEATURE_SINK | MLAJIT_FEATURE_TOPK_LENGTH, "sm_90a",
                       narrow_long);
}

/* sm90-narrow-scores compiles with no spills at 8 heads per CTA for every head
 * count it runs (1-8; 3, 5, 6 and 7 spilled 60 bytes while the split partials' row
 * index was 64-bit), with every feature V3.2's rows take. */
Test(nvrtc, sm90_narrow_scores_family, .timeout = 600)
{
    const mlajit_variant scores = MLAJIT_VARIANT_SM90_NARROW_SCORES;
    compile_variant_ok(MLAJIT_MODEL_V32, 8, 64, 0, 0, "sm_90a", scores);
    compile_variant_ok(MLAJIT_MODEL_V32, 5, 64, 0, 0, "sm_90a", scores);
    compile_variant_ok(MLAJIT_MODEL_V32, 3, 61, 64, MLAJIT_FEATURE_ALL, "sm_90a", scores);
    compile_variant_ok(MLAJIT_MODEL_V32, 7, 1, 0, MLAJIT_FEATURE_SINK | MLAJIT_FEATURE_TOPK_LENGTH, "sm_90a", scores);
    compile_variant_ok(MLAJIT_MODEL_V32, 1, 64, 0, 0, "sm_90a", scores);
}

/* Arbitrary fp32 scales (the narrow template's layouts edition: the exact
 * dequantization's register splits) compile with no spills for GLM_NSA and
 * GLM53_NOPE at each head group (1, 8, 16, 24 and 32 heads), with and without the
 * extra cache and every feature; sm90-narrow-long where it is itself (its third
 * ring slot: GLM_NSA at 16 heads and fewer, GLM53_NOPE at 24). */
Test(nvrtc, sm90_narrow_exact_scales, .timeout = 900)
{
    const mlajit_model models[] = {MLAJIT_MODEL_GLM_NSA, MLAJIT_MODEL_GLM53_NOPE};
    const int heads[] = {1, 8, 16, 24, 32};
    for (int m = 0; m < 2; m++)
        for (int i = 0; i < 5; i++) {
            compile_variant_ok(models[m], heads[i], 64, 0, 0, "sm_90a", MLAJIT_VARIANT_SM90_NARROW);
            compile_variant_ok(models[m], heads[i], 1, 64, MLAJIT_FEATURE_ALL, "sm_90a", MLAJIT_VARIANT_SM90_NARROW);
        }
    const struct { mlajit_model model; int h; } longs[] = {
        {MLAJIT_MODEL_GLM_NSA, 1}, {MLAJIT_MODEL_GLM_NSA, 16}, {MLAJIT_MODEL_GLM53_NOPE, 8},
        {MLAJIT_MODEL_GLM53_NOPE, 16}, {MLAJIT_MODEL_GLM53_NOPE, 24}};
    for (size_t i = 0; i < sizeof longs / sizeof longs[0]; i++) {
        compile_variant_ok(longs[i].model, longs[i].h, 256, 0, 0, "sm_90a", MLAJIT_VARIANT_SM90_NARROW_LONG);
        compile_variant_ok(longs[i].model, longs[i].h, 64, 64, MLAJIT_FEATURE_ALL, "sm_90a",
                           MLAJIT_VARIANT_SM90_NARROW_LONG);
    }
}

/* sm90-staged with arbitrary fp32 scales (the exact dequantization's converted
 * form), with and without RoPE, one CTA per row and the CTA pair, with and without
 * the extra cache and every feature: no spills with RoPE (GLM_NSA: the longer form
 * had spilled 116 bytes beside the staged epilogue, and the family refused it),
 * GLM53_NOPE's few words with one CTA per row (compile_spec_ok). */
Test(nvrtc, sm90_staged_exact_scales, .timeout = 900)
{
    const mlajit_model models[] = {MLAJIT_MODEL_GLM_NSA, MLAJIT_MODEL_GLM53_NOPE};
    const int heads[] = {48, 64, 128};
    for (int m = 0; m < 2; m++)
        for (int i = 0; i < 3; i++) {
            compile_variant_ok(models[m], heads[i], 64, 0, 0, "sm_90a", MLAJIT_VARIANT_SM90_STAGED);
            compile_variant_ok(models[m], heads[i], 1, 64, MLAJIT_FEATURE_ALL, "sm_90a", MLAJIT_VARIANT_SM90_STAGED);
        }
}

Test(nvrtc, sm90_narrow_refuses_what_it_cannot_run)
{
    static const struct { mlajit_model model; int h_q; const char *arch; int heads_per_cta; const char *words; } rows[] = {
        {MLAJIT_MODEL_V32, 33, "sm_90a", 0, "at most 32 heads per CTA; h_q = 33: set heads_per_cta"},
        {MLAJIT_MODEL_V32, 64, "sm_90a", 64, "at most 32 heads per CTA"},
        {MLAJIT_MODEL_V32, 16, "sm_80", 0, "needs spec.arch = sm_90a"},
        {MLAJIT_MODEL_V32, 16, "sm_90a", 32, "at most 16 heads per CTA"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, r = MLAJIT_KERNEL_SPEC_INIT;
        cr_assert_eq(mlajit_spec_init(&s, rows[i].model, rows[i].h_q, 64), MLAJIT_OK);
        s.variant = MLAJIT_VARIANT_SM90_NARROW;
        s.heads_per_cta = rows[i].heads_per_cta;
        strcpy(s.arch, rows[i].arch);
        cr_expect_eq(mlajit_spec_resolve(&s, &r), MLAJIT_ERR_UNSUPPORTED, "row %zu", i);
        cr_expect(strstr(mlajit_last_error(), "sm90-narrow") && strstr(mlajit_last_error(), rows[i].words),
                  "row %zu: %s", i, mlajit_last_error());
    }
    /* 8 and 24 heads per CTA are sm90-narrow's only */
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init(&s, MLAJIT_MODEL_V32, 8, 64), MLAJIT_OK);
    s.heads_per_cta = 8;
    cr_expect_eq(mlajit_spec_validate(&s), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "8, 24 with variant sm90-narrow") != NULL, "%s", mlajit_last_error());
    s.variant = MLAJIT_VARIANT_SM90_NARROW;
    cr_expect_eq(mlajit_spec_validate(&s), MLAJIT_OK, "%s", mlajit_last_error());
}

Test(nvrtc, rejects_an_arch_it_cannot_target)
{
    mlajit_compiled c;
    cr_expect_neq(mlajit_nvrtc_compile("extern \"C\" __global__ void k() {}", "k", "sm_10", &c), MLAJIT_OK);
    cr_expect(strstr(mlajit_last_error(), "sm_10") != NULL);
    cr_expect_eq(mlajit_nvrtc_compile("this is not C++", "bad", "sm_90a", &c), MLAJIT_ERR_COMPILE);
    cr_expect(strstr(mlajit_last_error(), "bad") != NULL, "the message names the program");
}

/* NVRTC is opened at run time (nvrtc.c's search): where it came from and its
 * version agree with what compiles. The search itself, without the loader's
 * configuration, is tests/install.sh's. */
Test(nvrtc, is_found_at_run_time_and_names_its_file)
{
    char where[1200];
    cr_assert_eq(mlajit_nvrtc_where(where, sizeof where), MLAJIT_OK, "%s", where);
    cr_expect(strstr(where, "libnvrtc.so.") != NULL, "%s", where);
    int major, minor;
    mlajit_nvrtc_version(&major, &minor);
    cr_expect_geq(major, 11, "NVRTC %d.%d from %s", major, minor, where);
    cr_expect(mlajit_nvrtc_supports("sm_80"), "NVRTC %d.%d from %s cannot target sm_80", major, minor, where);
    char small[8];
    cr_expect_eq(mlajit_nvrtc_where(small, sizeof small), MLAJIT_OK, "a short buffer is cut, not overrun");
    cr_expect_eq(strlen(small), sizeof small - 1);
}

static char cache_dir[256];

static void make_cache_dir(void)
{
    snprintf(cache_dir, sizeof cache_dir, "/tmp/mlajit-nvrtc-XXXXXX");
    cr_assert_not_null(mkdtemp(cache_dir));
}

static void remove_cache_dir(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache_dir);
    cr_expect_eq(system(cmd), 0);
}

/* get_info's cache counts are remembered while the data file is unchanged
 * (a walk of every entry costs ~10 ms on 1 GB), and a write is seen at once. */
Test(prepare, info_counts_follow_every_write_of_the_cache, .init = make_cache_dir, .fini = remove_cache_dir,
     .timeout = 300)
{
    mlajit_context_options o = {.struct_size = sizeof o, .cache_dir = cache_dir, .flags = MLAJIT_CONTEXT_NO_DEVICE};
    mlajit_kernel_spec a = MLAJIT_KERNEL_SPEC_INIT, b = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_spec_init(&a, MLAJIT_MODEL_V32, 8, 64);
    mlajit_spec_init(&b, MLAJIT_MODEL_V32, 16, 64);
    mlajit_context *ctx, *other;
    cr_assert_eq(mlajit_context_create(&o, &ctx), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_context_create(&o, &other), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_kernel_prepare(ctx, &a, NULL), MLAJIT_OK, "%s", mlajit_last_error());
    struct timespec settle = {0, 120 * 1000 * 1000}; /* past the 50 ms a stamp needs to key the memo */
    nanosleep(&settle, NULL);
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    for (int i = 0; i < 3; i++) { /* the first walks and remembers, the others reuse */
        cr_assert_eq(mlajit_context_get_info(ctx, &info), MLAJIT_OK);
        cr_expect_eq(info.cache_entries, 1, "call %d", i);
    }
    int64_t bytes = info.cache_bytes;
    /* another context's write (as another process's) moves the file's stamp */
    cr_assert_eq(mlajit_kernel_prepare(other, &b, NULL), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_context_get_info(ctx, &info), MLAJIT_OK);
    cr_expect_eq(info.cache_entries, 2, "the write is seen at once, not the remembered count");
    cr_expect_geq(info.cache_bytes, bytes);
    mlajit_context_destroy(other);
    mlajit_context_destroy(ctx);
}

Test(prepare, miss_then_hit_across_contexts_and_corruption_recompiles, .init = make_cache_dir,
     .fini = remove_cache_dir, .timeout = 300)
{
    mlajit_context_options o = {.struct_size = sizeof o, .cache_dir = cache_dir, .flags = MLAJIT_CONTEXT_NO_DEVICE};
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_spec_init(&s, MLAJIT_MODEL_V32, 24, 64);
    mlajit_kernel_report r1 = MLAJIT_KERNEL_REPORT_INIT;
    mlajit_kernel_report r2 = MLAJIT_KERNEL_REPORT_INIT;
    mlajit_kernel_report r3 = MLAJIT_KERNEL_REPORT_INIT;
    mlajit_kernel_report r4 = MLAJIT_KERNEL_REPORT_INIT;

    mlajit_context *ctx;
    cr_assert_eq(mlajit_context_create(&o, &ctx), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_kernel_prepare(ctx, &s, &r1), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r1.cache_hit, 0);
    cr_expect_eq(r1.loaded, 0, "no device: compiled and cached only");
    cr_expect(strstr(r1.spec, "sm_90a") != NULL, "without a device the target is sm_90a: %s", r1.spec);
    cr_expect_gt(r1.compile_ms, 0.0);
    cr_assert_eq(mlajit_kernel_prepare(ctx, &s, &r2), MLAJIT_OK);
    cr_expect_eq(r2.cache_hit, 1, "the process map serves a repeat");
    cr_expect_str_eq(r1.key, r2.key);
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    cr_assert_eq(mlajit_context_get_info(ctx, &info), MLAJIT_OK);
    cr_expect_eq(info.cache_entries, 1);
    mlajit_context_destroy(ctx);

    /* a fresh context (as a fresh process would) finds it on disk */
    cr_assert_eq(mlajit_context_create(&o, &ctx), MLAJIT_OK);
    cr_assert_eq(mlajit_kernel_prepare(ctx, &s, &r3), MLAJIT_OK);
    cr_expect_eq(r3.cache_hit, 1);
    cr_expect_str_eq(r3.key, r1.key);
    cr_expect_eq(r3.registers, r1.registers, "the stored report comes back");
    mlajit_context_destroy(ctx);

    /* flip a byte of the stored cubin: detected, recompiled, repaired */
    mlajit_store *st;
    cr_assert_eq(mlajit_store_open(cache_dir, 0, &st), MLAJIT_OK);
    mlajit_cache_key key;
    cr_assert_eq(sscanf(r1.key, "%16llx%16llx", (unsigned long long *)&key.hi, (unsigned long long *)&key.lo), 2);
    mlajit_cache_entry e;
    cr_assert_eq(mlajit_store_get(st, &key, &e), MLAJIT_OK);
    void *value;
    size_t len;
    cr_assert_eq(mlajit_cache_entry_encode(&e, &value, &len), MLAJIT_OK);
    ((unsigned char *)value)[len - 100] ^= 0x40;
    cr_assert_eq(mlajit_store_put_raw(st, &key, value, len), MLAJIT_OK);
    free(value);
    mlajit_cache_entry_clear(&e);
    mlajit_store_close(st);

    cr_assert_eq(mlajit_context_create(&o, &ctx), MLAJIT_OK);
    cr_assert_eq(mlajit_kernel_prepare(ctx, &s, &r4), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r4.cache_hit, 0, "a corrupt entry is a miss");
    mlajit_context_destroy(ctx);
    cr_assert_eq(mlajit_store_open(cache_dir, 1, &st), MLAJIT_OK);
    cr_expect_eq(mlajit_store_get(st, &key, &e), MLAJIT_OK, "the recompile repaired the entry");
    mlajit_cache_entry_clear(&e);
    mlajit_store_close(st);
}

Test(prepare, key_changes_with_the_spec, .init = make_cache_dir, .fini = remove_cache_dir, .timeout = 300)
{
    mlajit_context_options o = {.struct_size = sizeof o, .cache_dir = cache_dir, .flags = MLAJIT_CONTEXT_NO_DEVICE};
    mlajit_context *ctx;
    cr_assert_eq(mlajit_context_create(&o, &ctx), MLAJIT_OK);
    mlajit_kernel_spec a = MLAJIT_KERNEL_SPEC_INIT, b = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_spec_init(&a, MLAJIT_MODEL_V32, 16, 64);
    b = a;
    b.features = MLAJIT_FEATURE_SINK;
    mlajit_kernel_report ra = MLAJIT_KERNEL_REPORT_INIT, rb = MLAJIT_KERNEL_REPORT_INIT;
    cr_assert_eq(mlajit_kernel_prepare(ctx, &a, &ra), MLAJIT_OK);
    cr_assert_eq(mlajit_kernel_prepare(ctx, &b, &rb), MLAJIT_OK);
    cr_expect_str_neq(ra.key, rb.key);
    cr_expect_eq(rb.cache_hit, 0);
    mlajit_context_destroy(ctx);
}

Test(prepare, unwritable_cache_dir_still_compiles, .timeout = 300)
{
    mlajit_context_options o = {.struct_size = sizeof o,
                                .cache_dir = "/proc/mlajit-cannot-exist", .flags = MLAJIT_CONTEXT_NO_DEVICE};
    mlajit_context *ctx;
    cr_assert_eq(mlajit_context_create(&o, &ctx), MLAJIT_OK, "an unusable cache is a warning, not an error");
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    cr_expect_str_eq(info.cache_dir, "");
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_spec_init(&s, MLAJIT_MODEL_DSV4, 8, 64);
    mlajit_kernel_report r = MLAJIT_KERNEL_REPORT_INIT;
    cr_expect_eq(mlajit_kernel_prepare(ctx, &s, &r), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_context_destroy(ctx);
}

/* One list makes both parameter structs (src/codegen/kernel_abi.h), and the
 * emitted one checks every field's offset against the host's. Simulating the
 * drift that list rules out - the CUDA struct with two fields of one type
 * swapped, which the old size-only check let through - NVRTC refuses the source,
 * naming the field; the source as generated compiles (the tests above). The C
 * side's checks get the same test from tests/test_params_abi.py. */
static void expect_swap_refused(const char *first, const char *second, const char *named)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_spec_init(&s, MLAJIT_MODEL_V32, 16, 64);
    strcpy(s.arch, "sm_90a");
    char *src;
    cr_assert_eq(mlajit_generate_source(&s, &src), MLAJIT_OK, "%s", mlajit_last_error());
    char *a = strstr(src, first), *b = strstr(src, second);
    const char *block = strstr(src, "struct DecodeParams {\n");
    cr_assert(block && a && b && a > block && b > a, "the emitted struct declares %s then %s", first, second);
    size_t la = strlen(first), lb = strlen(second);
    cr_assert(a + la <= b, "the two lines do not overlap");
    /* rebuild the text with the two lines exchanged */
    size_t n = strlen(src);
    char *swapped = malloc(n + 1);
    cr_assert_not_null(swapped);
    size_t pa = (size_t)(a - src), pb = (size_t)(b - src);
    memcpy(swapped, src, pa);
    memcpy(swapped + pa, second, lb);
    memcpy(swapped + pa + lb, a + la, pb - pa - la);
    memcpy(swapped + pb - la + lb, first, la);
    memcpy(swapped + pb + lb, b + lb, n - pb - lb + 1);
    cr_assert_eq(strlen(swapped), n);
    mlajit_compiled c;
    int rc = mlajit_nvrtc_compile(swapped, "swapped_params", "sm_90a", &c);
    cr_expect_eq(rc, MLAJIT_ERR_COMPILE, "%s swapped with %s must not compile", first, second);
    cr_expect(strstr(mlajit_last_error(), named) != NULL, "the error names the field (%s): %s", named,
              mlajit_last_error());
    if (rc == MLAJIT_OK)
        mlajit_compiled_free(&c);
    free(swapped);
    mlajit_free(src);
}

Test(params, a_cuda_struct_with_two_fields_swapped_does_not_compile, .timeout = 120)
{
    expect_swap_refused("    long long q_stride_b;\n", "    long long q_stride_s;\n",
                        "DecodeParams::q_stride_b is not at the host's byte 8");
    expect_swap_refused("    int batch;\n", "    int s_q;\n", "DecodeParams::batch is not at the host's byte 236");
    expect_swap_refused("    const unsigned char * kv;\n", "    long long kv_page_stride;\n",
                        "DecodeParams::kv is not at the host's byte 32");
}

/* Each wgmma kernel's named barriers end with kBarEnd, checked against the 16 a
 * CTA has: an id moved past them does not compile. */
static void expect_barrier_overflow_refused(mlajit_variant variant, int h_q, const char *from, const char *to)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_spec_init(&s, MLAJIT_MODEL_V32, h_q, 64);
    s.variant = variant;
    strcpy(s.arch, "sm_90a");
    char *src;
    cr_assert_eq(mlajit_generate_source(&s, &src), MLAJIT_OK, "%s", mlajit_last_error());
    char *at = strstr(src, from);
    cr_assert_not_null(at, "%s: the enum has %s", mlajit_variant_name(variant), from);
    size_t n = strlen(src), lf = strlen(from), lt = strlen(to);
    char *moved = malloc(n - lf + lt + 1);
    cr_assert_not_null(moved);
    memcpy(moved, src, (size_t)(at - src));
    memcpy(moved + (at - src), to, lt);
    strcpy(moved + (at - src) + lt, at + lf);
    mlajit_compiled c;
    int rc = mlajit_nvrtc_compile(moved, "barriers", "sm_90a", &c);
    cr_expect_eq(rc, MLAJIT_ERR_COMPILE, "%s with %s must not compile", mlajit_variant_name(variant), to);
    cr_expect(strstr(mlajit_last_error(), "more named barriers than a CTA has") != NULL, "%s", mlajit_last_error());
    if (rc == MLAJIT_OK)
        mlajit_compiled_free(&c);
    free(moved);
    mlajit_free(src);
}

Test(params, named_barriers_past_the_sixteen_do_not_compile, .timeout = 120)
{
    expect_barrier_overflow_refused(MLAJIT_VARIANT_SM90, 128, "kBarQReady = 9,", "kBarQReady = 16,");
    expect_barrier_overflow_refused(MLAJIT_VARIANT_SM90_NARROW, 16, "kBarRingRead = 9,", "kBarRingRead = 15,");
    expect_barrier_overflow_refused(MLAJIT_VARIANT_SM90_NARROW_SCORES, 8, "kBarScalesChecked = 12,",
                                    "kBarScalesChecked = 15,");
}
