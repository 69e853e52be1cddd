/* embed.c - how an engine embeds mlajit: build a small V3.2 FP8 cache with the
 * public quantizer, plan a decode, run it on the GPU through the CUDA runtime,
 * and check it against the library's fp64 reference. Public API only.
 *
 *   cuda=${CUDA_HOME:-/usr/local/cuda}
 *   cc embed.c $(pkg-config --cflags --libs mlajit) -I$cuda/include -L$cuda/lib64 -Wl,-rpath,$cuda/lib64 \
 *      -lcudart -lm -o embed && ./embed
 *
 * -lcudart and -lm are this program's own: mlajit needs no CUDA library at link
 * time (it opens libcuda and NVRTC at run time). To link libmlajit.a instead, take
 * `pkg-config --static --libs mlajit` with -lmlajit spelled -l:libmlajit.a.
 * Without a GPU the program compiles and caches the kernel and says so.
 * tests/install.sh runs the two lines above against an installed mlajit. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlajit.h"

enum { H_Q = 16, PAGE = 64, PAGES = 8, TOPK = 200 };

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static float from_bf16(uint16_t v)
{
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float uniform(unsigned *state)
{
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / 16777216.0f * 2.0f - 1.0f;
}

#define CHECK(call)                                                                                    \
    do {                                                                                               \
        int rc_ = (call);                                                                              \
        if (rc_) {                                                                                     \
            fprintf(stderr, "%s: %s (%s)\n", #call, mlajit_last_error(), mlajit_status_string(rc_));  \
            return 1;                                                                                  \
        }                                                                                              \
    } while (0)

int main(void)
{
    const mlajit_model_desc *m = mlajit_model_describe(MLAJIT_MODEL_V32);
    int64_t page_stride = mlajit_min_page_stride(MLAJIT_MODEL_V32, PAGE);
    unsigned rng = 12345;

    /* 1. the cache, quantized the way an engine writes it */
    uint8_t *cache = calloc(PAGES, (size_t)page_stride);
    uint16_t *token = malloc(sizeof(uint16_t) * m->d_qk);
    for (int p = 0; p < PAGES; p++)
        for (int t = 0; t < PAGE; t++) {
            for (int d = 0; d < m->d_qk; d++) token[d] = to_bf16(uniform(&rng) * 0.1f);
            CHECK(mlajit_quantize_token(MLAJIT_MODEL_V32, token, cache + p * page_stride, PAGE, t));
        }
    uint16_t *q = malloc(sizeof(uint16_t) * H_Q * m->d_qk);
    for (int i = 0; i < H_Q * m->d_qk; i++) q[i] = to_bf16(uniform(&rng));
    int32_t indices[TOPK];
    for (int i = 0; i < TOPK; i++) indices[i] = (i * 7) % (PAGES * PAGE);
    indices[5] = -1; /* skipped */

    /* 2. a context, a spec and a plan (the plan JIT-compiles or hits the cache) */
    mlajit_context *ctx;
    CHECK(mlajit_context_create(NULL, &ctx));
    mlajit_kernel_spec spec = MLAJIT_KERNEL_SPEC_INIT;
    CHECK(mlajit_spec_init(&spec, MLAJIT_MODEL_V32, H_Q, PAGE));
    mlajit_decode_shape shape = {.struct_size = sizeof shape, .batch = 1, .s_q = 1, .topk = TOPK};
    mlajit_plan *plan;
    int rc = mlajit_plan_create(ctx, &spec, &shape, &plan);
    if (rc) {
        printf("no plan: %s\n", mlajit_last_error());
        mlajit_context_destroy(ctx);
        return 1;
    }
    printf("kernel %s (%s)\n", mlajit_plan_report(plan)->spec,
           mlajit_plan_report(plan)->cache_hit ? "cache hit" : "compiled now");

    /* 3. device buffers through the CUDA runtime, as an engine has them */
    void *d_q, *d_cache, *d_idx, *d_out, *d_lse, *d_ws = NULL;
    size_t ws = mlajit_plan_workspace_size(plan);
    if (cudaMalloc(&d_q, sizeof(uint16_t) * H_Q * m->d_qk) != cudaSuccess) {
        printf("no GPU to run on; the kernel is compiled and cached.\n");
        mlajit_plan_destroy(plan);
        mlajit_context_destroy(ctx);
        return 0;
    }
    cudaMalloc(&d_cache, PAGES * (size_t)page_stride);
    cudaMalloc(&d_idx, sizeof indices);
    cudaMalloc(&d_out, sizeof(uint16_t) * H_Q * m->d_v);
    cudaMalloc(&d_lse, sizeof(float) * H_Q);
    if (ws) cudaMalloc(&d_ws, ws);
    cudaMemcpy(d_q, q, sizeof(uint16_t) * H_Q * m->d_qk, cudaMemcpyHostToDevice);
    cudaMemcpy(d_cache, cache, PAGES * (size_t)page_stride, cudaMemcpyHostToDevice);
    cudaMemcpy(d_idx, indices, sizeof indices, cudaMemcpyHostToDevice);

    /* 4. decode on a stream; strides 0 = contiguous */
    mlajit_decode_args a = MLAJIT_DECODE_ARGS_INIT;
    a.q = d_q;
    a.kv = (mlajit_cache_view){d_cache, page_stride, PAGES};
    a.indices = d_idx;
    a.sm_scale = 1.0f / sqrtf((float)m->d_qk);
    a.out = d_out;
    a.lse = d_lse;
    a.workspace = d_ws;
    a.workspace_size = ws;
    CHECK(mlajit_decode(plan, &a, NULL));
    uint16_t *out = malloc(sizeof(uint16_t) * H_Q * m->d_v);
    float lse[H_Q];
    cudaMemcpy(out, d_out, sizeof(uint16_t) * H_Q * m->d_v, cudaMemcpyDeviceToHost);
    cudaMemcpy(lse, d_lse, sizeof lse, cudaMemcpyDeviceToHost);

    /* 5. check against the fp64 reference on the host copy */
    mlajit_decode_args host = a;
    host.q = q;
    host.kv.data = cache;
    host.indices = indices;
    double *ref = malloc(sizeof(double) * H_Q * m->d_v), ref_lse[H_Q];
    CHECK(mlajit_reference_decode(&spec, &shape, &host, ref, ref_lse));
    double max_err = 0;
    for (int i = 0; i < H_Q * m->d_v; i++) max_err = fmax(max_err, fabs(from_bf16(out[i]) - ref[i]));
    double max_lse_err = 0;
    for (int h = 0; h < H_Q; h++) max_lse_err = fmax(max_lse_err, fabs(lse[h] - ref_lse[h]));
    printf("max |out - ref| %.2e, max |lse - ref| %.2e: %s\n", max_err, max_lse_err,
           max_err < 2e-3 && max_lse_err < 1e-3 ? "ok" : "MISMATCH");

    cudaFree(d_q); cudaFree(d_cache); cudaFree(d_idx); cudaFree(d_out); cudaFree(d_lse); cudaFree(d_ws);
    free(cache); free(token); free(q); free(out); free(ref);
    mlajit_plan_destroy(plan);
    mlajit_context_destroy(ctx);
    return max_err < 2e-3 ? 0 : 1;
}
