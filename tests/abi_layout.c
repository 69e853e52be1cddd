/* The public ABI as the compiler lays it out, for the Python package's ctypes
 * mirror (python/mlajit/_capi.py; python/tests/test_abi.py compares the two):
 * one JSON line per public struct (its size, alignment and each field's offset
 * and size, in declaration order), then one line of the constants the binding
 * uses. A field added to a struct and not here still shows, as a size that no
 * longer matches. */
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>

#include "mlajit.h"

static int first_field;

#define BEGIN(S)                                                                                                       \
    do {                                                                                                               \
        printf("{\"struct\": \"%s\", \"size\": %zu, \"align\": %zu, \"fields\": [", #S, sizeof(S), alignof(S));        \
        first_field = 1;                                                                                               \
    } while (0)
#define FIELD(S, F)                                                                                                    \
    do {                                                                                                               \
        printf("%s[\"%s\", %zu, %zu]", first_field ? "" : ", ", #F, offsetof(S, F), sizeof(((S *)0)->F));             \
        first_field = 0;                                                                                               \
    } while (0)
#define END() printf("]}\n")

int main(void)
{
    BEGIN(mlajit_model_desc);
    FIELD(mlajit_model_desc, struct_size);
    FIELD(mlajit_model_desc, model); FIELD(mlajit_model_desc, name); FIELD(mlajit_model_desc, d_qk);
    FIELD(mlajit_model_desc, d_nope); FIELD(mlajit_model_desc, d_rope); FIELD(mlajit_model_desc, d_v);
    FIELD(mlajit_model_desc, quant_tile); FIELD(mlajit_model_desc, num_scales); FIELD(mlajit_model_desc, scale_format);
    FIELD(mlajit_model_desc, scale_place); FIELD(mlajit_model_desc, row_bytes); FIELD(mlajit_model_desc, footer_bytes);
    FIELD(mlajit_model_desc, bytes_per_token); FIELD(mlajit_model_desc, scale_offset);
    FIELD(mlajit_model_desc, rope_offset);
    END();

    BEGIN(mlajit_layout);
    FIELD(mlajit_layout, d_nope); FIELD(mlajit_layout, d_rope); FIELD(mlajit_layout, d_v);
    FIELD(mlajit_layout, quant_tile); FIELD(mlajit_layout, scale_format); FIELD(mlajit_layout, scale_place);
    FIELD(mlajit_layout, row_bytes); FIELD(mlajit_layout, footer_bytes); FIELD(mlajit_layout, reserved);
    END();

    BEGIN(mlajit_kernel_spec);
    FIELD(mlajit_kernel_spec, struct_size);
    FIELD(mlajit_kernel_spec, model); FIELD(mlajit_kernel_spec, h_q); FIELD(mlajit_kernel_spec, page_size);
    FIELD(mlajit_kernel_spec, extra_page_size); FIELD(mlajit_kernel_spec, features); FIELD(mlajit_kernel_spec, tile);
    FIELD(mlajit_kernel_spec, heads_per_cta); FIELD(mlajit_kernel_spec, variant); FIELD(mlajit_kernel_spec, arch);
    FIELD(mlajit_kernel_spec, layout);
    END();

    BEGIN(mlajit_context_options);
    FIELD(mlajit_context_options, struct_size);
    FIELD(mlajit_context_options, device); FIELD(mlajit_context_options, cache_dir);
    FIELD(mlajit_context_options, flags); FIELD(mlajit_context_options, packs);
    END();

    BEGIN(mlajit_context_info);
    FIELD(mlajit_context_info, struct_size);
    FIELD(mlajit_context_info, has_device); FIELD(mlajit_context_info, device_name);
    FIELD(mlajit_context_info, device_arch); FIELD(mlajit_context_info, sm_count);
    FIELD(mlajit_context_info, driver_version); FIELD(mlajit_context_info, nvrtc_major);
    FIELD(mlajit_context_info, nvrtc_minor); FIELD(mlajit_context_info, cache_dir);
    FIELD(mlajit_context_info, cache_bytes); FIELD(mlajit_context_info, cache_entries);
    FIELD(mlajit_context_info, cache_writable); FIELD(mlajit_context_info, pack_count);
    FIELD(mlajit_context_info, jit_disabled); FIELD(mlajit_context_info, memory_hits);
    FIELD(mlajit_context_info, pack_hits); FIELD(mlajit_context_info, disk_hits); FIELD(mlajit_context_info, compiles);
    FIELD(mlajit_context_info, corrupt); FIELD(mlajit_context_info, jit_refusals);
    FIELD(mlajit_context_info, compile_ms); FIELD(mlajit_context_info, l2_bytes);
    FIELD(mlajit_context_info, no_device_reason); FIELD(mlajit_context_info, stale);
    END();

    BEGIN(mlajit_kernel_report);
    FIELD(mlajit_kernel_report, struct_size);
    FIELD(mlajit_kernel_report, spec); FIELD(mlajit_kernel_report, key); FIELD(mlajit_kernel_report, cache_hit);
    FIELD(mlajit_kernel_report, loaded); FIELD(mlajit_kernel_report, generate_ms);
    FIELD(mlajit_kernel_report, compile_ms); FIELD(mlajit_kernel_report, lookup_ms);
    FIELD(mlajit_kernel_report, registers); FIELD(mlajit_kernel_report, shared_bytes);
    FIELD(mlajit_kernel_report, spill_bytes); FIELD(mlajit_kernel_report, cubin_bytes);
    FIELD(mlajit_kernel_report, source);
    END();

    BEGIN(mlajit_kernel_grid);
    FIELD(mlajit_kernel_grid, struct_size);
    FIELD(mlajit_kernel_grid, models); FIELD(mlajit_kernel_grid, num_models); FIELD(mlajit_kernel_grid, head_counts);
    FIELD(mlajit_kernel_grid, num_head_counts); FIELD(mlajit_kernel_grid, page_sizes);
    FIELD(mlajit_kernel_grid, num_page_sizes); FIELD(mlajit_kernel_grid, extra_page_sizes);
    FIELD(mlajit_kernel_grid, num_extra_page_sizes); FIELD(mlajit_kernel_grid, feature_sets);
    FIELD(mlajit_kernel_grid, num_feature_sets); FIELD(mlajit_kernel_grid, archs); FIELD(mlajit_kernel_grid, num_archs);
    FIELD(mlajit_kernel_grid, layouts); FIELD(mlajit_kernel_grid, num_layouts);
    END();

    BEGIN(mlajit_warmup_report);
    FIELD(mlajit_warmup_report, struct_size);
    FIELD(mlajit_warmup_report, kernels); FIELD(mlajit_warmup_report, from_memory);
    FIELD(mlajit_warmup_report, from_packs); FIELD(mlajit_warmup_report, from_disk);
    FIELD(mlajit_warmup_report, compiled); FIELD(mlajit_warmup_report, loaded); FIELD(mlajit_warmup_report, wall_ms);
    FIELD(mlajit_warmup_report, compile_ms);
    END();

    BEGIN(mlajit_decode_shape);
    FIELD(mlajit_decode_shape, struct_size);
    FIELD(mlajit_decode_shape, batch); FIELD(mlajit_decode_shape, s_q); FIELD(mlajit_decode_shape, topk);
    FIELD(mlajit_decode_shape, extra_topk); FIELD(mlajit_decode_shape, num_splits);
    END();

    BEGIN(mlajit_plan_outline);
    FIELD(mlajit_plan_outline, struct_size);
    FIELD(mlajit_plan_outline, kernel); FIELD(mlajit_plan_outline, variant); FIELD(mlajit_plan_outline, tile);
    FIELD(mlajit_plan_outline, heads_per_cta); FIELD(mlajit_plan_outline, num_splits);
    FIELD(mlajit_plan_outline, head_groups);
    FIELD(mlajit_plan_outline, rows); FIELD(mlajit_plan_outline, tiles_per_split);
    FIELD(mlajit_plan_outline, reserved_1_0); FIELD(mlajit_plan_outline, tactic);
    END();

    BEGIN(mlajit_cache_view);
    FIELD(mlajit_cache_view, data); FIELD(mlajit_cache_view, page_stride); FIELD(mlajit_cache_view, num_pages);
    END();

    BEGIN(mlajit_decode_args);
    FIELD(mlajit_decode_args, struct_size);
    FIELD(mlajit_decode_args, q); FIELD(mlajit_decode_args, q_stride_b); FIELD(mlajit_decode_args, q_stride_s);
    FIELD(mlajit_decode_args, q_stride_h); FIELD(mlajit_decode_args, kv); FIELD(mlajit_decode_args, indices);
    FIELD(mlajit_decode_args, indices_stride_b); FIELD(mlajit_decode_args, indices_stride_s);
    FIELD(mlajit_decode_args, topk_length); FIELD(mlajit_decode_args, attn_sink); FIELD(mlajit_decode_args, extra_kv);
    FIELD(mlajit_decode_args, extra_indices); FIELD(mlajit_decode_args, extra_indices_stride_b);
    FIELD(mlajit_decode_args, extra_indices_stride_s); FIELD(mlajit_decode_args, extra_topk_length);
    FIELD(mlajit_decode_args, sm_scale); FIELD(mlajit_decode_args, out); FIELD(mlajit_decode_args, out_stride_b);
    FIELD(mlajit_decode_args, out_stride_s); FIELD(mlajit_decode_args, out_stride_h); FIELD(mlajit_decode_args, lse);
    FIELD(mlajit_decode_args, lse_stride_b); FIELD(mlajit_decode_args, lse_stride_s);
    FIELD(mlajit_decode_args, lse_stride_h); FIELD(mlajit_decode_args, workspace);
    FIELD(mlajit_decode_args, workspace_size);
    END();

    BEGIN(mlajit_tune_grid);
    FIELD(mlajit_tune_grid, struct_size);
    FIELD(mlajit_tune_grid, models); FIELD(mlajit_tune_grid, num_models); FIELD(mlajit_tune_grid, head_counts);
    FIELD(mlajit_tune_grid, num_head_counts); FIELD(mlajit_tune_grid, page_sizes);
    FIELD(mlajit_tune_grid, num_page_sizes); FIELD(mlajit_tune_grid, feature_sets);
    FIELD(mlajit_tune_grid, num_feature_sets); FIELD(mlajit_tune_grid, topks); FIELD(mlajit_tune_grid, num_topks);
    FIELD(mlajit_tune_grid, rows); FIELD(mlajit_tune_grid, num_rows); FIELD(mlajit_tune_grid, extra_topks);
    FIELD(mlajit_tune_grid, num_extra_topks); FIELD(mlajit_tune_grid, extra_page_size);
    FIELD(mlajit_tune_grid, layouts); FIELD(mlajit_tune_grid, num_layouts);
    END();

    BEGIN(mlajit_tune_report);
    FIELD(mlajit_tune_report, struct_size);
    FIELD(mlajit_tune_report, buckets); FIELD(mlajit_tune_report, buckets_done); FIELD(mlajit_tune_report, stored);
    FIELD(mlajit_tune_report, timed); FIELD(mlajit_tune_report, dropped); FIELD(mlajit_tune_report, pruned);
    FIELD(mlajit_tune_report, failed_checks); FIELD(mlajit_tune_report, deadline_hit);
    FIELD(mlajit_tune_report, seconds);
    END();

    /* the constants the binding names (_capi.py: the same name without MLAJIT_) */
    static const struct { const char *name; long long value; } constants[] = {
#define C(x) {#x, (long long)(x)}
        C(MLAJIT_OK), C(MLAJIT_ERR_INVALID_ARGUMENT), C(MLAJIT_ERR_UNSUPPORTED), C(MLAJIT_ERR_OUT_OF_MEMORY),
        C(MLAJIT_ERR_NO_DEVICE), C(MLAJIT_ERR_COMPILE), C(MLAJIT_ERR_CACHE), C(MLAJIT_ERR_CUDA), C(MLAJIT_ERR_IO),
        C(MLAJIT_ERR_NOT_FOUND), C(MLAJIT_ERR_CORRUPT), C(MLAJIT_ERR_INTERNAL),
        C(MLAJIT_MODEL_V32), C(MLAJIT_MODEL_DSV4), C(MLAJIT_MODEL_GLM_NSA), C(MLAJIT_MODEL_GLM53_NOPE),
        C(MLAJIT_MODEL_DOTS3_SWA), C(MLAJIT_MODEL_V32_BF16), C(MLAJIT_MODEL_DSV4_BF16), C(MLAJIT_MODEL_CUSTOM),
        C(MLAJIT_SCALE_FP32_POW2), C(MLAJIT_SCALE_FP32), C(MLAJIT_SCALE_UE8M0), C(MLAJIT_SCALE_NONE),
        C(MLAJIT_LAYOUT_STRING_LEN),
        C(MLAJIT_SCALES_INLINE), C(MLAJIT_SCALES_PAGE_FOOTER),
        C(MLAJIT_FEATURE_SINK), C(MLAJIT_FEATURE_TOPK_LENGTH), C(MLAJIT_FEATURE_EXTRA_TOPK_LENGTH),
        C(MLAJIT_FEATURE_ALL), C(MLAJIT_MAX_HEADS), C(MLAJIT_MAX_PAGE_SIZE), C(MLAJIT_MAX_TOPK), C(MLAJIT_MAX_SQ),
        C(MLAJIT_MAX_BATCH), C(MLAJIT_MAX_ROWS), C(MLAJIT_ARCH_LEN), C(MLAJIT_VARIANT_AUTO),
        C(MLAJIT_CONTEXT_NO_DEVICE), C(MLAJIT_CONTEXT_NO_DISK_CACHE), C(MLAJIT_CONTEXT_NO_JIT),
        C(MLAJIT_LOG_WARNING), C(MLAJIT_LOG_INFO), C(MLAJIT_SOURCE_COMPILED), C(MLAJIT_SOURCE_MEMORY),
        C(MLAJIT_SOURCE_PACK), C(MLAJIT_SOURCE_DISK), C(MLAJIT_DEFAULT_SM_COUNT),
        C(MLAJIT_TACTIC_RULES), C(MLAJIT_TACTIC_TUNED), C(MLAJIT_TACTIC_TUNED_BELOW),
#undef C
    };
    printf("{\"constants\": {");
    for (size_t i = 0; i < sizeof constants / sizeof constants[0]; i++)
        printf("%s\"%s\": %lld", i ? ", " : "", constants[i].name, constants[i].value);
    printf("}}\n");
    return 0;
}
