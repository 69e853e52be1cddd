/* mlajit_decode: validate every argument against the plan, fill the kernels'
 * parameter block and enqueue them. No compile, no allocation, no sync. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "codegen/kernel_abi.h"
#include "common/abi.h"
#include "common/error.h"
#include "runtime/runtime.h"

#define INVALID(...) mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, __VA_ARGS__)

static int misaligned(const void *p, uintptr_t a) { return ((uintptr_t)p & (a - 1)) != 0; }

/* 1 when no two [b][s][h] rows of `row` elements at these strides overlap:
 * taken by stride, each dimension of more than one entry steps past the span of
 * the ones inside it. Any order of the dimensions passes (FlashMLA's head-major
 * lse is [b][h][s]). */
static int rows_apart(const int64_t size[3], const int64_t stride[3], int64_t row)
{
    if (size[0] <= 0 || size[1] <= 0 || size[2] <= 0)
        return 1; /* no rows */
    int order[3] = {0, 1, 2};
    for (int i = 1; i < 3; i++)
        for (int j = i; j > 0 && stride[order[j]] < stride[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int64_t span = row;
    for (int i = 0; i < 3; i++) {
        const int d = order[i];
        if (size[d] <= 1)
            continue;
        if (stride[d] < span)
            return 0;
        span += stride[d] * (size[d] - 1);
    }
    return 1;
}

/* Fill 0 strides, each as the dense step over the dimensions inside it (so a
 * padded stride_h with stride_s 0 gives stride_s = h_q * stride_h); check the
 * others. `written`: rows of an output must not overlap. */
static int check_strides3(const char *name, int64_t *sb, int64_t *ss, int64_t *sh, int batch, int s_q, int h_q,
                          int row, int multiple, int written)
{
    if (*sh == 0) *sh = row;
    if (*ss == 0) *ss = (int64_t)h_q * *sh;
    if (*sb == 0) *sb = (int64_t)s_q * *ss;
    if (*sh < row)
        return INVALID("args.%s_stride_h = %lld is smaller than a row (%d elements); allowed >= %d", name,
                       (long long)*sh, row, row);
    if (*ss < 0 || *sb < 0)
        return INVALID("args.%s strides must be >= 0 (got b %lld, s %lld)", name, (long long)*sb, (long long)*ss);
    if (multiple > 1 && (*sh % multiple || *ss % multiple || *sb % multiple))
        return INVALID("args.%s strides (b %lld, s %lld, h %lld) must be multiples of %d elements (16 bytes)", name,
                       (long long)*sb, (long long)*ss, (long long)*sh, multiple);
    const int64_t size[3] = {batch, s_q, h_q}, stride[3] = {*sb, *ss, *sh};
    if (written && !rows_apart(size, stride, row))
        return INVALID("args.%s strides (b %lld, s %lld, h %lld) overlap rows of [%d, %d, %d, %d]: two rows would be "
                       "written to the same memory; allowed: strides that, taken in increasing order, each step past "
                       "the rows inside them (0 = dense)",
                       name, (long long)*sb, (long long)*ss, (long long)*sh, batch, s_q, h_q, row);
    return MLAJIT_OK;
}

static int check_cache(const char *name, const mlajit_cache_view *v, const mlajit_model_desc *model, int page_size)
{
    int64_t min_stride = (int64_t)page_size * model->bytes_per_token;
    if (!v->data)
        return INVALID("args.%s.data: NULL; pass the device pointer of the cache", name);
    if (misaligned(v->data, 16))
        return INVALID("args.%s.data = %p is not 16-byte aligned", name, v->data);
    if (v->page_stride < min_stride || v->page_stride % 16)
        return INVALID("args.%s.page_stride = %lld; allowed: a multiple of 16 >= %lld (%s, page size %d)", name,
                       (long long)v->page_stride, (long long)min_stride, model->name,
                       page_size);
    if (v->num_pages < 0 || v->num_pages * (int64_t)page_size > INT32_MAX)
        return INVALID("args.%s.num_pages = %lld; allowed 0..%lld (slots are int32)", name, (long long)v->num_pages,
                       (long long)(INT32_MAX / page_size));
    return MLAJIT_OK;
}

static int check_indices(const char *name, const int32_t *idx, int64_t *sb, int64_t *ss, int s_q, int topk)
{
    if (!idx)
        return INVALID("args.%s: NULL; pass [b, s_q, %d] int32 slots", name, topk);
    if (misaligned(idx, 4))
        return INVALID("args.%s is not 4-byte aligned", name);
    if (*ss == 0) *ss = topk;
    if (*sb == 0) *sb = (int64_t)s_q * *ss;
    if (*ss < topk || *sb < 0)
        return INVALID("args.%s_stride_s = %lld is smaller than a row of %d candidates; allowed >= %d", name,
                       (long long)*ss, topk, topk);
    return MLAJIT_OK;
}

static int fill_params(const mlajit_plan *plan, const mlajit_decode_args *a, mlajit_decode_params *p)
{
    const mlajit_kernel_spec *spec = &plan->kernel->spec;
    const mlajit_decode_shape *sh = &plan->shape;
    const mlajit_model_desc *m = plan->model;
    int rc;
    memset(p, 0, sizeof *p);

    if (!a->q) return INVALID("args.q: NULL; pass bf16 [b, s_q, h_q, %d] device memory", m->d_qk);
    if (misaligned(a->q, 16)) return INVALID("args.q = %p is not 16-byte aligned", a->q);
    p->q = a->q;
    p->q_stride_b = a->q_stride_b; p->q_stride_s = a->q_stride_s; p->q_stride_h = a->q_stride_h;
    if ((rc = check_strides3("q", &p->q_stride_b, &p->q_stride_s, &p->q_stride_h, sh->batch, sh->s_q, spec->h_q,
                             m->d_qk, 8, 0)))
        return rc;

    if ((rc = check_cache("kv", &a->kv, m, spec->page_size))) return rc;
    p->kv = a->kv.data;
    p->kv_page_stride = a->kv.page_stride;
    p->kv_num_slots = a->kv.num_pages * spec->page_size;
    p->indices = a->indices;
    p->indices_stride_b = a->indices_stride_b; p->indices_stride_s = a->indices_stride_s;
    if ((rc = check_indices("indices", a->indices, &p->indices_stride_b, &p->indices_stride_s, sh->s_q, sh->topk)))
        return rc;
    if (spec->features & MLAJIT_FEATURE_TOPK_LENGTH) {
        if (!a->topk_length) return INVALID("args.topk_length: NULL but the spec has MLAJIT_FEATURE_TOPK_LENGTH; pass int32 [b]");
        if (misaligned(a->topk_length, 4)) return INVALID("args.topk_length is not 4-byte aligned");
        p->topk_length = a->topk_length;
    }
    if (spec->features & MLAJIT_FEATURE_SINK) {
        if (!a->attn_sink) return INVALID("args.attn_sink: NULL but the spec has MLAJIT_FEATURE_SINK; pass fp32 [h_q]");
        if (misaligned(a->attn_sink, 4)) return INVALID("args.attn_sink is not 4-byte aligned");
        p->attn_sink = a->attn_sink;
    }
    if (spec->extra_page_size) {
        if ((rc = check_cache("extra_kv", &a->extra_kv, m, spec->extra_page_size))) return rc;
        p->extra_kv = a->extra_kv.data;
        p->extra_page_stride = a->extra_kv.page_stride;
        p->extra_num_slots = a->extra_kv.num_pages * spec->extra_page_size;
        p->extra_indices = a->extra_indices;
        p->extra_indices_stride_b = a->extra_indices_stride_b;
        p->extra_indices_stride_s = a->extra_indices_stride_s;
        if ((rc = check_indices("extra_indices", a->extra_indices, &p->extra_indices_stride_b,
                                &p->extra_indices_stride_s, sh->s_q, sh->extra_topk)))
            return rc;
        if (spec->features & MLAJIT_FEATURE_EXTRA_TOPK_LENGTH) {
            if (!a->extra_topk_length)
                return INVALID("args.extra_topk_length: NULL but the spec has MLAJIT_FEATURE_EXTRA_TOPK_LENGTH; pass int32 [b]");
            if (misaligned(a->extra_topk_length, 4)) return INVALID("args.extra_topk_length is not 4-byte aligned");
            p->extra_topk_length = a->extra_topk_length;
        }
    }
    if (!isfinite(a->sm_scale) || a->sm_scale <= 0.0f)
        return INVALID("args.sm_scale = %g; allowed: finite and > 0 (usually d_qk^-0.5)", (double)a->sm_scale);
    p->sm_scale_log2 = a->sm_scale * 1.4426950408889634f;

    if (!a->out) return INVALID("args.out: NULL; pass bf16 [b, s_q, h_q, %d] device memory", m->d_v);
    if (misaligned(a->out, 16)) return INVALID("args.out = %p is not 16-byte aligned", a->out);
    p->out = a->out;
    p->out_stride_b = a->out_stride_b; p->out_stride_s = a->out_stride_s; p->out_stride_h = a->out_stride_h;
    if ((rc = check_strides3("out", &p->out_stride_b, &p->out_stride_s, &p->out_stride_h, sh->batch, sh->s_q,
                             spec->h_q, m->d_v, 8, 1)))
        return rc;
    if (a->lse) {
        if (misaligned(a->lse, 4)) return INVALID("args.lse is not 4-byte aligned");
        p->lse = a->lse;
        p->lse_stride_b = a->lse_stride_b; p->lse_stride_s = a->lse_stride_s; p->lse_stride_h = a->lse_stride_h;
        if ((rc = check_strides3("lse", &p->lse_stride_b, &p->lse_stride_s, &p->lse_stride_h, sh->batch, sh->s_q,
                                 spec->h_q, 1, 1, 1)))
            return rc;
    }
    if (plan->workspace_bytes) {
        if (!a->workspace || a->workspace_size < plan->workspace_bytes)
            return INVALID("args.workspace: %zu bytes at %p; this plan needs %zu bytes (mlajit_plan_workspace_size)",
                           a->workspace_size, a->workspace, plan->workspace_bytes);
        if (misaligned(a->workspace, 16)) return INVALID("args.workspace = %p is not 16-byte aligned", a->workspace);
        p->partial_out = (float *)a->workspace;
        p->partial_lse = (float *)((char *)a->workspace + plan->partial_out_bytes);
    }
    p->batch = sh->batch;
    p->s_q = sh->s_q;
    p->topk = sh->topk;
    p->extra_topk = sh->extra_topk;
    p->num_splits = plan->num_splits;
    p->tiles_per_split = plan->tiles_per_split;
    p->release_dependent_early = plan->release_dependent_early;
    p->prefetch_evict_last = plan->prefetch_evict_last;
    return MLAJIT_OK;
}

/* Launch one of the plan's two kernels. Where the kernels wait on the device for
 * the grid before them (layout.dependent_launch, sm_90 on), each is launched as a
 * programmatic dependent: the driver starts it as the CTAs of the kernel before it
 * on the stream exit (or release it), not after that grid's completion and memory
 * flush, so part of its launch latency is hidden. The main kernel's wait is its
 * first act, the combine's comes before it reads the partials. A driver without
 * cuLaunchKernelEx gets the plain launch (the waits are then no-ops); so does one
 * that refuses the attribute, and the context remembers the refusal, so later
 * launches do not ask again. */
static CUresult launch_kernel(mlajit_context *ctx, const mlajit_kernel *k, CUfunction fn, unsigned grid_x,
                              unsigned grid_y, unsigned grid_z, unsigned threads, unsigned smem_bytes, CUstream stream,
                              void **params)
{
    const mlajit_driver *drv = ctx->drv;
    if (!k->layout.dependent_launch || !drv->cuLaunchKernelEx ||
        atomic_load_explicit(&ctx->programmatic_refused, memory_order_relaxed))
        return drv->cuLaunchKernel(fn, grid_x, grid_y, grid_z, threads, 1, 1, smem_bytes, stream, params, NULL);
    mlajit_cu_launch_attribute attr;
    memset(&attr, 0, sizeof attr);
    attr.id = MLAJIT_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmatic_stream_serialization_allowed = 1;
    const mlajit_cu_launch_config cfg = {
        .grid_x = grid_x, .grid_y = grid_y, .grid_z = grid_z, .block_x = threads, .block_y = 1, .block_z = 1,
        .shared_bytes = smem_bytes, .stream = stream, .attrs = &attr, .num_attrs = 1,
    };
    CUresult refused = drv->cuLaunchKernelEx(&cfg, fn, params, NULL);
    if (refused == MLAJIT_CU_SUCCESS)
        return refused;
    CUresult r = drv->cuLaunchKernel(fn, grid_x, grid_y, grid_z, threads, 1, 1, smem_bytes, stream, params, NULL);
    /* Only a refusal that the plain launch then gets past is about the attribute. */
    if (r == MLAJIT_CU_SUCCESS && !atomic_exchange(&ctx->programmatic_refused, 1))
        mlajit_info("the driver refused programmatic dependent launches (CUDA error %d); launching plainly from now on",
                    refused);
    return r;
}

int mlajit_decode(const mlajit_plan *plan, const mlajit_decode_args *caller_args, void *stream)
{
    mlajit_clear_error();
    if (!plan || !caller_args)
        return INVALID("%s: NULL", !plan ? "plan" : "args");
    mlajit_decode_args local;
    const mlajit_decode_args *args = mlajit_abi_in(MLAJIT_ABI_DECODE_ARGS, "args", caller_args, &local);
    if (!args)
        return MLAJIT_ERR_INVALID_ARGUMENT;
    if (plan->rows == 0 && plan->kernel->loaded)
        return MLAJIT_OK; /* b = 0 or s_q = 0: nothing to read or write */
    mlajit_decode_params p;
    int rc = fill_params(plan, args, &p);
    if (rc)
        return rc;
    mlajit_context *ctx = plan->ctx;
    const mlajit_driver *drv = ctx->drv;
    const mlajit_kernel *k = plan->kernel;
    if (!k->loaded)
        return mlajit_fail(MLAJIT_ERR_NO_DEVICE, "plan's kernel %s is not loaded: the context has no GPU (%s)",
                           k->report.spec, ctx->no_device_reason);
    void *params[] = {&p};
    int pushed = mlajit_context_enter(ctx);
    CUresult r = launch_kernel(ctx, k, k->main_fn, (unsigned)plan->rows, (unsigned)plan->head_groups,
                               (unsigned)plan->num_splits, (unsigned)k->layout.threads, (unsigned)k->layout.smem_bytes,
                               (CUstream)stream, params);
    if (r == MLAJIT_CU_SUCCESS && plan->num_splits > 1)
        r = launch_kernel(ctx, k, k->combine_fn, (unsigned)plan->rows, (unsigned)k->spec.h_q, 1,
                          (unsigned)k->layout.combine_threads, (unsigned)plan->combine_smem_bytes, (CUstream)stream,
                          params);
    mlajit_context_leave(ctx, pushed);
    if (r != MLAJIT_CU_SUCCESS)
        return mlajit_cuda_fail(drv, r, "cuLaunchKernel");
    return MLAJIT_OK;
}
