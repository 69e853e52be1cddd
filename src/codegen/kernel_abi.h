/* The kernels' parameter block, as the host fills it. The template declares the
 * same struct field for field; the generator emits sizeof() of this one into
 * the config block and the template static_asserts it, so a drift fails the
 * compile instead of corrupting a launch. Fixed-width fields only. */
#ifndef MLAJIT_CODEGEN_KERNEL_ABI_H
#define MLAJIT_CODEGEN_KERNEL_ABI_H
#include <stdint.h>

typedef struct mlajit_decode_params {
    const void *q;            /* bf16 */
    int64_t q_stride_b, q_stride_s, q_stride_h;
    const void *kv;
    int64_t kv_page_stride;
    int64_t kv_num_slots;     /* num_pages * page_size */
    const int32_t *indices;
    int64_t indices_stride_b, indices_stride_s;
    const int32_t *topk_length;
    const float *attn_sink;
    const void *extra_kv;
    int64_t extra_page_stride;
    int64_t extra_num_slots;
    const int32_t *extra_indices;
    int64_t extra_indices_stride_b, extra_indices_stride_s;
    const int32_t *extra_topk_length;
    void *out;                /* bf16 */
    int64_t out_stride_b, out_stride_s, out_stride_h;
    float *lse;               /* may be NULL */
    int64_t lse_stride_b, lse_stride_s, lse_stride_h;
    float *partial_out;       /* [splits][b*s_q][h_q][d_v], split-KV only */
    float *partial_lse;       /* [splits][b*s_q][h_q] */
    float sm_scale_log2;      /* sm_scale * log2(e) */
    int32_t batch, s_q, topk, extra_topk;
    int32_t num_splits, tiles_per_split;
    int32_t release_dependent_early; /* 1: the main kernel releases the grid after it at its start (the plan's choice) */
    int32_t prefetch_evict_last;     /* 1: the sm90 family's L2 prefetches mark rows evict-last (the plan's choice: rows >= 1.5 L2) */
} mlajit_decode_params;

#endif
