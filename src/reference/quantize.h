/* Internal: the quantizer and dequantizer on a layout's descriptor (the public
 * functions take a model or an mlajit_layout and come here). */
#ifndef MLAJIT_REFERENCE_QUANTIZE_H
#define MLAJIT_REFERENCE_QUANTIZE_H
#include <stdint.h>

#include "mlajit.h"

int mlajit_quantize_token_desc(const mlajit_model_desc *d, const uint16_t *values_bf16, void *page_base,
                               int page_size, int token_in_page);
int mlajit_dequantize_token_desc(const mlajit_model_desc *d, const void *page_base, int page_size, int token_in_page,
                                 float *out);
#endif
