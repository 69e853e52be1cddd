/* Running a case through the library on the GPU: upload, plan, decode, download. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/error.h"
#include "harness/harness.h"
#include "runtime/runtime.h"

enum { kMaxBuffers = 16 };

/* MLAJIT_ERR_NO_DEVICE, with the context's reason, when it has no GPU. */
static int need_device(mlajit_context *ctx)
{
    if (mlajit_context_driver(ctx))
        return MLAJIT_OK;
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    return mlajit_fail(MLAJIT_ERR_NO_DEVICE, "no GPU: %s", info.no_device_reason);
}

static int device_alloc(mlajit_device_case *dc, size_t bytes, CUdeviceptr *out)
{
    const mlajit_driver *drv = mlajit_context_driver(dc->ctx);
    *out = 0;
    if (dc->count == kMaxBuffers)
        return mlajit_fail(MLAJIT_ERR_INTERNAL, "device case: too many buffers");
    CUresult r = drv->cuMemAlloc(out, bytes ? bytes : 16);
    if (r != MLAJIT_CU_SUCCESS)
        return mlajit_cuda_fail(drv, r, "cuMemAlloc");
    dc->ptrs[dc->count++] = *out;
    return MLAJIT_OK;
}

static int upload(mlajit_device_case *dc, const void *host, size_t bytes, CUdeviceptr *out)
{
    *out = 0;
    if (!host || bytes == 0)
        return MLAJIT_OK;
    int rc = device_alloc(dc, bytes, out);
    if (rc)
        return rc;
    const mlajit_driver *drv = mlajit_context_driver(dc->ctx);
    CUresult r = drv->cuMemcpyHtoD(*out, host, bytes);
    return r == MLAJIT_CU_SUCCESS ? MLAJIT_OK : mlajit_cuda_fail(drv, r, "cuMemcpyHtoD");
}

static int alloc_poisoned(mlajit_device_case *dc, size_t bytes, CUdeviceptr *out)
{
    int rc = device_alloc(dc, bytes, out);
    if (rc)
        return rc;
    const mlajit_driver *drv = mlajit_context_driver(dc->ctx);
    CUresult r = drv->cuMemsetD8(*out, 0xff, bytes ? bytes : 16); /* NaN in bf16 and fp32 */
    return r == MLAJIT_CU_SUCCESS ? MLAJIT_OK : mlajit_cuda_fail(drv, r, "cuMemsetD8");
}

int mlajit_device_case_alloc(mlajit_device_case *dc, size_t bytes, void **ptr)
{
    CUdeviceptr d = 0;
    int pushed = mlajit_context_enter(dc->ctx);
    int rc = alloc_poisoned(dc, bytes, &d);
    mlajit_context_leave(dc->ctx, pushed);
    *ptr = rc ? NULL : (void *)(uintptr_t)d;
    return rc;
}

/* Copy a [rows, cols] matrix into a wider row stride, filling the padding. */
static void *pad_rows(const void *src, size_t rows, int cols, int stride, size_t elem, uint32_t fill)
{
    char *dst = mlajit_malloc(rows * (size_t)stride * elem + 16);
    if (!dst)
        return NULL;
    for (size_t r = 0; r < rows; r++) {
        memcpy(dst + r * stride * elem, (const char *)src + r * cols * elem, cols * elem);
        for (int c = cols; c < stride; c++)
            memcpy(dst + (r * stride + c) * elem, &fill, elem);
    }
    return dst;
}

int mlajit_device_case_upload(mlajit_context *ctx, const mlajit_case *c, const mlajit_gpu_run_options *opts,
                              mlajit_device_case *dc)
{
    mlajit_gpu_run_options none = {0};
    if (!opts)
        opts = &none;
    memset(dc, 0, sizeof *dc);
    dc->ctx = ctx;
    dc->args.struct_size = sizeof dc->args;
    int rc = need_device(ctx);
    if (rc)
        return rc;
    const mlajit_model_desc *m = mlajit_case_desc(c);
    size_t rows = (size_t)c->b * c->s_q;
    int pad = opts->pad_strides ? 8 : 0;
    int q_row = m->d_qk + pad, idx_row = c->topk + pad, eidx_row = c->extra_topk + pad;
    dc->out_row = m->d_v + pad;
    /* Padding holds NaN (q) and -7777 (indices): reading it would show. */
    void *q_host = pad_rows(c->q, rows * c->h_q, m->d_qk, q_row, 2, 0x7fc1);
    void *idx_host = pad_rows(c->indices, rows, c->topk, idx_row, 4, (uint32_t)-7777);
    void *eidx_host = c->has_extra ? pad_rows(c->extra_indices, rows, c->extra_topk, eidx_row, 4, (uint32_t)-7777)
                                   : NULL;
    int pushed = mlajit_context_enter(ctx);
    CUdeviceptr d_q, d_kv, d_idx, d_len = 0, d_sink = 0, d_ekv = 0, d_eidx = 0, d_elen = 0, d_out, d_lse;
    if (!q_host || !idx_host || (c->has_extra && !eidx_host)) {
        rc = mlajit_fail_oom("the host staging buffers");
        goto done;
    }
    if ((rc = upload(dc, q_host, rows * c->h_q * q_row * 2, &d_q)) ||
        (rc = upload(dc, c->kv.bytes, (size_t)c->kv.num_pages * c->kv.page_stride, &d_kv)) ||
        (rc = upload(dc, idx_host, rows * idx_row * 4, &d_idx)) ||
        (rc = upload(dc, c->topk_length, (size_t)c->b * 4, &d_len)) ||
        (rc = upload(dc, c->attn_sink, (size_t)c->h_q * 4, &d_sink)))
        goto done;
    if (c->has_extra &&
        ((rc = upload(dc, c->extra_kv.bytes, (size_t)c->extra_kv.num_pages * c->extra_kv.page_stride, &d_ekv)) ||
         (rc = upload(dc, eidx_host, rows * eidx_row * 4, &d_eidx)) ||
         (rc = upload(dc, c->extra_topk_length, (size_t)c->b * 4, &d_elen))))
        goto done;
    if ((rc = alloc_poisoned(dc, rows * c->h_q * dc->out_row * 2, &d_out)) ||
        (rc = alloc_poisoned(dc, rows * c->h_q * 4, &d_lse)))
        goto done;

    mlajit_decode_args *a = &dc->args;
    a->q = (const void *)(uintptr_t)d_q;
    a->q_stride_h = q_row;
    a->q_stride_s = (int64_t)c->h_q * q_row;
    a->q_stride_b = (int64_t)c->s_q * c->h_q * q_row;
    a->kv = (mlajit_cache_view){(const void *)(uintptr_t)d_kv, c->kv.page_stride, c->kv.num_pages};
    a->indices = (const int32_t *)(uintptr_t)d_idx;
    a->indices_stride_s = idx_row;
    a->indices_stride_b = (int64_t)c->s_q * idx_row;
    a->topk_length = (const int32_t *)(uintptr_t)d_len;
    a->attn_sink = (const float *)(uintptr_t)d_sink;
    if (c->has_extra) {
        a->extra_kv = (mlajit_cache_view){(const void *)(uintptr_t)d_ekv, c->extra_kv.page_stride,
                                          c->extra_kv.num_pages};
        a->extra_indices = (const int32_t *)(uintptr_t)d_eidx;
        a->extra_indices_stride_s = eidx_row;
        a->extra_indices_stride_b = (int64_t)c->s_q * eidx_row;
        a->extra_topk_length = (const int32_t *)(uintptr_t)d_elen;
    }
    a->sm_scale = (float)c->sm_scale;
    a->out = (void *)(uintptr_t)d_out;
    a->out_stride_h = dc->out_row;
    a->out_stride_s = (int64_t)c->h_q * dc->out_row;
    a->out_stride_b = (int64_t)c->s_q * c->h_q * dc->out_row;
    a->lse = (float *)(uintptr_t)d_lse;
    if (opts->lse_head_major) { /* FlashMLA's [b, h_q, s_q] */
        a->lse_stride_s = 1;
        a->lse_stride_h = c->s_q;
        a->lse_stride_b = (int64_t)c->h_q * c->s_q;
    }
done:
    mlajit_context_leave(ctx, pushed);
    free(q_host);
    free(idx_host);
    free(eidx_host);
    if (rc)
        mlajit_device_case_free(dc);
    return rc;
}

int mlajit_device_case_download(mlajit_device_case *dc, const mlajit_case *c, const mlajit_gpu_run_options *opts,
                                size_t n_rows, float *out, float *lse)
{
    const mlajit_driver *drv = mlajit_context_driver(dc->ctx);
    const mlajit_model_desc *m = mlajit_case_desc(c);
    size_t rows = (size_t)c->b * c->s_q, out_bytes = n_rows * c->h_q * dc->out_row * 2;
    uint16_t *out_padded = mlajit_malloc(out_bytes + 16);
    float *lse_all = mlajit_malloc(rows * c->h_q * 4 + 16);
    if (!out_padded || !lse_all) {
        free(out_padded);
        free(lse_all);
        return mlajit_fail_oom("the download buffers");
    }
    int pushed = mlajit_context_enter(dc->ctx);
    int rc = MLAJIT_OK;
    CUresult r = drv->cuCtxSynchronize();
    if (r != MLAJIT_CU_SUCCESS)
        rc = mlajit_cuda_fail(drv, r, "kernel execution (cuCtxSynchronize)");
    else if ((r = drv->cuMemcpyDtoH(out_padded, (CUdeviceptr)(uintptr_t)dc->args.out, out_bytes)) !=
                 MLAJIT_CU_SUCCESS ||
             (r = drv->cuMemcpyDtoH(lse_all, (CUdeviceptr)(uintptr_t)dc->args.lse, rows * c->h_q * 4)) !=
                 MLAJIT_CU_SUCCESS)
        rc = mlajit_cuda_fail(drv, r, "cuMemcpyDtoH");
    mlajit_context_leave(dc->ctx, pushed);
    if (rc == MLAJIT_OK) {
        for (size_t i = 0; i < n_rows * c->h_q; i++)
            for (int d = 0; d < m->d_v; d++)
                out[i * m->d_v + d] = mlajit_bf16_to_float(out_padded[i * dc->out_row + d]);
        for (size_t row = 0; row < n_rows; row++) {
            size_t b = row / c->s_q, s = row % c->s_q;
            for (int h = 0; h < c->h_q; h++) {
                size_t src = (opts && opts->lse_head_major) ? (b * c->h_q + h) * c->s_q + s : row * c->h_q + h;
                lse[row * c->h_q + h] = lse_all[src];
            }
        }
    }
    free(out_padded);
    free(lse_all);
    return rc;
}

void mlajit_device_case_free(mlajit_device_case *dc)
{
    const mlajit_driver *drv = dc ? mlajit_context_driver(dc->ctx) : NULL;
    if (!drv)
        return;
    int pushed = mlajit_context_enter(dc->ctx);
    for (int i = 0; i < dc->count; i++)
        drv->cuMemFree(dc->ptrs[i]);
    mlajit_context_leave(dc->ctx, pushed);
    dc->count = 0;
}

void mlajit_gpu_run_spec(const mlajit_case *c, const mlajit_gpu_run_options *opts, mlajit_kernel_spec *spec)
{
    mlajit_case_spec(c, spec);
    if (!opts)
        return;
    if (opts->arch)
        snprintf(spec->arch, sizeof spec->arch, "%s", opts->arch);
    spec->tile = opts->tile;
    spec->heads_per_cta = opts->heads_per_cta;
    spec->variant = opts->variant;
}

int mlajit_case_run_gpu(mlajit_context *ctx, const mlajit_case *c, const mlajit_gpu_run_options *opts,
                        mlajit_gpu_result *res)
{
    mlajit_gpu_run_options none = {0};
    if (!opts)
        opts = &none;
    memset(res, 0, sizeof *res);
    mlajit_kernel_spec spec = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_decode_shape shape = MLAJIT_DECODE_SHAPE_INIT;
    mlajit_gpu_run_spec(c, opts, &spec);
    mlajit_case_shape(c, &shape);
    shape.num_splits = opts->num_splits;
    int rc = need_device(ctx);
    if (rc)
        return rc;

    mlajit_plan *plan = NULL;
    if ((rc = mlajit_plan_create(ctx, &spec, &shape, &plan)))
        return rc;
    res->report = *mlajit_plan_report(plan);
    res->num_splits = mlajit_plan_num_splits(plan);
    mlajit_device_case dc;
    if ((rc = mlajit_device_case_upload(ctx, c, opts, &dc))) {
        mlajit_plan_destroy(plan);
        return rc;
    }
    size_t ws = mlajit_plan_workspace_size(plan);
    if (ws && (rc = mlajit_device_case_alloc(&dc, ws, &dc.args.workspace)) == MLAJIT_OK)
        dc.args.workspace_size = ws;
    size_t rows = (size_t)c->b * c->s_q, n_lse = rows * c->h_q;
    if (rc == MLAJIT_OK)
        rc = mlajit_decode(plan, &dc.args, NULL);
    if (rc == MLAJIT_OK) {
        res->out = mlajit_malloc(n_lse * mlajit_case_desc(c)->d_v * sizeof(float) + 16);
        res->lse = mlajit_malloc(n_lse * sizeof(float) + 16);
        rc = (res->out && res->lse) ? mlajit_device_case_download(&dc, c, opts, rows, res->out, res->lse)
                                    : mlajit_fail_oom("the result buffers");
    }
    mlajit_device_case_free(&dc);
    mlajit_plan_destroy(plan);
    if (rc)
        mlajit_gpu_result_free(res);
    return rc;
}

void mlajit_gpu_result_free(mlajit_gpu_result *res)
{
    if (!res)
        return;
    free(res->out);
    free(res->lse);
    res->out = res->lse = NULL;
}
