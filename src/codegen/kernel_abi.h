/* The kernels' parameter block: one list of its fields, from which come both the
 * host's struct (below) and the CUDA struct the generator emits into every
 * source (generate.c: DecodeParams). Each field names its C type, its CUDA type
 * and its byte offset; the offsets are checked at compile time on both sides
 * (here by _Static_assert against this compiler's layout, in every generated
 * source by static_assert against NVRTC's), so a field moved, resized or swapped
 * on one side fails a build instead of corrupting a launch. A layout hash of the list enters every
 * cache entry's launch record (mlajit_decode_params_layout_hash).
 *
 * To change the block: edit the list, offsets included (fixed-width types, each
 * at a multiple of its size). Keep the CUDA types the templates expect: u16 and
 * u8 are unsigned short and unsigned char there. */
#ifndef MLAJIT_CODEGEN_KERNEL_ABI_H
#define MLAJIT_CODEGEN_KERNEL_ABI_H
#include <stddef.h>
#include <stdint.h>

/* X(C type, CUDA type, name, byte offset), in order. */
#define MLAJIT_DECODE_PARAMS_FIELDS(X)                                                                   \
    X(const void *, const unsigned short *, q, 0) /* bf16 */                                             \
    X(int64_t, long long, q_stride_b, 8)                                                                 \
    X(int64_t, long long, q_stride_s, 16)                                                                \
    X(int64_t, long long, q_stride_h, 24)                                                                \
    X(const void *, const unsigned char *, kv, 32)                                                       \
    X(int64_t, long long, kv_page_stride, 40)                                                            \
    X(int64_t, long long, kv_num_slots, 48) /* num_pages * page_size */                                  \
    X(const int32_t *, const int *, indices, 56)                                                         \
    X(int64_t, long long, indices_stride_b, 64)                                                          \
    X(int64_t, long long, indices_stride_s, 72)                                                          \
    X(const int32_t *, const int *, topk_length, 80)                                                     \
    X(const float *, const float *, attn_sink, 88)                                                       \
    X(const void *, const unsigned char *, extra_kv, 96)                                                 \
    X(int64_t, long long, extra_page_stride, 104)                                                        \
    X(int64_t, long long, extra_num_slots, 112)                                                          \
    X(const int32_t *, const int *, extra_indices, 120)                                                  \
    X(int64_t, long long, extra_indices_stride_b, 128)                                                   \
    X(int64_t, long long, extra_indices_stride_s, 136)                                                   \
    X(const int32_t *, const int *, extra_topk_length, 144)                                              \
    X(void *, unsigned short *, out, 152) /* bf16 */                                                     \
    X(int64_t, long long, out_stride_b, 160)                                                             \
    X(int64_t, long long, out_stride_s, 168)                                                             \
    X(int64_t, long long, out_stride_h, 176)                                                             \
    X(float *, float *, lse, 184) /* may be NULL */                                                      \
    X(int64_t, long long, lse_stride_b, 192)                                                             \
    X(int64_t, long long, lse_stride_s, 200)                                                             \
    X(int64_t, long long, lse_stride_h, 208)                                                             \
    X(float *, float *, partial_out, 216) /* [splits][b*s_q][h_q][d_v], split-KV only */                 \
    X(float *, float *, partial_lse, 224) /* [splits][b*s_q][h_q] */                                     \
    X(float, float, sm_scale_log2, 232)   /* sm_scale * log2(e) */                                       \
    X(int32_t, int, batch, 236)                                                                          \
    X(int32_t, int, s_q, 240)                                                                            \
    X(int32_t, int, topk, 244)                                                                           \
    X(int32_t, int, extra_topk, 248)                                                                     \
    X(int32_t, int, num_splits, 252)                                                                     \
    X(int32_t, int, tiles_per_split, 256)                                                                \
    X(int32_t, int, release_dependent_early, 260) /* 1: the main kernel releases the grid after it at    \
                                                     its start (the plan's choice) */                    \
    X(int32_t, int, prefetch_evict_last, 264)     /* 1: the sm90 family's L2 prefetches mark rows        \
                                                     evict-last (the plan's choice: rows >= 1.5 L2) */

/* sizeof the block on both sides (the last field's end, rounded up to 8). */
#define MLAJIT_DECODE_PARAMS_BYTES 272

#define MLAJIT_DECODE_PARAMS_C_FIELD(c_type, cuda_type, name, offset) c_type name;
typedef struct mlajit_decode_params {
    MLAJIT_DECODE_PARAMS_FIELDS(MLAJIT_DECODE_PARAMS_C_FIELD)
} mlajit_decode_params;
#undef MLAJIT_DECODE_PARAMS_C_FIELD

#define MLAJIT_DECODE_PARAMS_C_OFFSET_CHECK(c_type, cuda_type, name, offset)                             \
    _Static_assert(offsetof(mlajit_decode_params, name) == (offset),                                     \
                   "mlajit_decode_params." #name " is not at byte " #offset " (kernel_abi.h's list)");
MLAJIT_DECODE_PARAMS_FIELDS(MLAJIT_DECODE_PARAMS_C_OFFSET_CHECK)
#undef MLAJIT_DECODE_PARAMS_C_OFFSET_CHECK
_Static_assert(sizeof(mlajit_decode_params) == MLAJIT_DECODE_PARAMS_BYTES,
               "mlajit_decode_params is not MLAJIT_DECODE_PARAMS_BYTES long");

/* XXH3-64 of the list as written (every field's types, name and offset, and the
 * size): an entry's launch record carries it, so a cubin built for another
 * parameter block is refused at load. */
uint64_t mlajit_decode_params_layout_hash(void);

#endif
