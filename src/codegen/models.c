/* The model descriptor table: the one place a model type's numbers live. */
#include <strings.h>

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
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "model name: NULL; allowed: v32, dsv4, glm_nsa");
    for (size_t i = 0; i < MODEL_COUNT; i++) {
        if (strcasecmp(model_table[i].name, name) == 0) {
            *out = model_table[i].model;
            return MLAJIT_OK;
        }
    }
    return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "model '%s' is unknown; allowed: v32, dsv4, glm_nsa", name);
}

int64_t mlajit_min_page_stride(mlajit_model model, int page_size)
{
    const mlajit_model_desc *d = mlajit_model_describe(model);
    if (!d || page_size < 1)
        return -1;
    return (int64_t)page_size * d->bytes_per_token;
}
