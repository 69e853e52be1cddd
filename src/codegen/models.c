/* The model descriptor table: the one place a model type's numbers live. */
#include <string.h>
#include <strings.h>

#include "codegen/codegen.h"
#include "common/error.h"
#include "mlajit.h"

static const mlajit_model_desc model_table[] = {
    {
        .struct_size = sizeof(mlajit_model_desc), .model = MLAJIT_MODEL_V32, .name = "v32",
        .d_qk = 576, .d_nope = 512, .d_rope = 64, .d_v = 512,
        .quant_tile = 128, .num_scales = 4,
        .scale_format = MLAJIT_SCALE_FP32_POW2, .scale_place = MLAJIT_SCALES_INLINE,
        .row_bytes = 656, .footer_bytes = 0, .bytes_per_token = 656,
    },
    {
        .struct_size = sizeof(mlajit_model_desc), .model = MLAJIT_MODEL_DSV4, .name = "dsv4",
        .d_qk = 512, .d_nope = 448, .d_rope = 64, .d_v = 512,
        .quant_tile = 64, .num_scales = 7,
        .scale_format = MLAJIT_SCALE_UE8M0, .scale_place = MLAJIT_SCALES_PAGE_FOOTER,
        .row_bytes = 576, .footer_bytes = 8, .bytes_per_token = 584,
    },
    {
        .struct_size = sizeof(mlajit_model_desc), .model = MLAJIT_MODEL_GLM_NSA, .name = "glm_nsa",
        .d_qk = 576, .d_nope = 512, .d_rope = 64, .d_v = 512,
        .quant_tile = 128, .num_scales = 4,
        .scale_format = MLAJIT_SCALE_FP32, .scale_place = MLAJIT_SCALES_INLINE,
        .row_bytes = 656, .footer_bytes = 0, .bytes_per_token = 656,
    },
    {
        /* no RoPE: V is all 512 dims; the record keeps V3.2's 656 bytes, of which
         * [528, 656) is padding (the quantizer writes it zero) */
        .struct_size = sizeof(mlajit_model_desc), .model = MLAJIT_MODEL_GLM53_NOPE, .name = "glm53_nope",
        .d_qk = 512, .d_nope = 512, .d_rope = 0, .d_v = 512,
        .quant_tile = 128, .num_scales = 4,
        .scale_format = MLAJIT_SCALE_FP32, .scale_place = MLAJIT_SCALES_INLINE,
        .row_bytes = 656, .footer_bytes = 0, .bytes_per_token = 656,
    },
    {
        /* DSV4's page shape at twice the width: data rows of 1024 fp8 + 128 bytes of
         * RoPE, then a footer of 8 ue8m0 scales a token; V is the 1024 NoPE dims */
        .struct_size = sizeof(mlajit_model_desc), .model = MLAJIT_MODEL_DOTS3_SWA, .name = "dots3_swa",
        .d_qk = 1088, .d_nope = 1024, .d_rope = 64, .d_v = 1024,
        .quant_tile = 128, .num_scales = 8,
        .scale_format = MLAJIT_SCALE_UE8M0, .scale_place = MLAJIT_SCALES_PAGE_FOOTER,
        .row_bytes = 1152, .footer_bytes = 8, .bytes_per_token = 1160,
    },
};

#define MODEL_COUNT (sizeof model_table / sizeof model_table[0])

const mlajit_model_desc *mlajit_model_describe(mlajit_model model)
{
    for (size_t i = 0; i < MODEL_COUNT; i++)
        if (model_table[i].model == model)
            return &model_table[i];
    return NULL;
}

int mlajit_model_from_name(const char *name, mlajit_model *out)
{
    if (!name || !out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "model name: NULL; allowed: v32, dsv4, glm_nsa, glm53_nope, dots3_swa");
    for (size_t i = 0; i < MODEL_COUNT; i++) {
        if (strcasecmp(model_table[i].name, name) == 0) {
            *out = model_table[i].model;
            return MLAJIT_OK;
        }
    }
    return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "model '%s' is unknown; allowed: v32, dsv4, glm_nsa, glm53_nope, dots3_swa", name);
}

static const struct {
    const char *name;
    unsigned bit;
} feature_table[] = {
    {"sink", MLAJIT_FEATURE_SINK},
    {"topk-length", MLAJIT_FEATURE_TOPK_LENGTH},
    {"extra-topk-length", MLAJIT_FEATURE_EXTRA_TOPK_LENGTH},
};

const char *mlajit_feature_name(int i, unsigned *bit)
{
    if (i < 0 || (size_t)i >= sizeof feature_table / sizeof feature_table[0])
        return NULL;
    if (bit)
        *bit = feature_table[i].bit;
    return feature_table[i].name;
}

int mlajit_feature_from_name(const char *name, unsigned *bit)
{
    for (size_t i = 0; name && i < sizeof feature_table / sizeof feature_table[0]; i++)
        if (strcmp(feature_table[i].name, name) == 0) {
            *bit = feature_table[i].bit;
            return MLAJIT_OK;
        }
    return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "feature '%s' is unknown; allowed sink, topk-length, "
                       "extra-topk-length", name ? name : "(null)");
}

int64_t mlajit_min_page_stride(mlajit_model model, int page_size)
{
    const mlajit_model_desc *d = mlajit_model_describe(model);
    if (!d || page_size < 1)
        return -1;
    return (int64_t)page_size * d->bytes_per_token;
}
