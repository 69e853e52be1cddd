/* Internal: the CUDA templates embedded at build time (tools/embed_templates.py). */
#ifndef MLAJIT_CODEGEN_TEMPLATES_H
#define MLAJIT_CODEGEN_TEMPLATES_H
#include <stddef.h>

typedef struct mlajit_template {
    const char *name;
    const char *text;
    size_t size;
} mlajit_template;

extern const char mlajit_template_prelude[];
extern const char mlajit_template_decode_portable[];
extern const char mlajit_template_combine[];
extern const mlajit_template mlajit_templates[];
extern const size_t mlajit_template_count;

#endif
