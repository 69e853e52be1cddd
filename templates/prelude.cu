// ---------------------------------------------------------------------------
// prelude.cu: types and device helpers shared by the mlajit kernels.
// No toolkit headers: NVRTC compiles this with no include path. Conversions and
// matrix instructions are inline PTX (sm_80 and newer).
// ---------------------------------------------------------------------------
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

struct __align__(16) U32x4 { u32 x, y, z, w; };
struct __align__(8) U32x2 { u32 x, y; };
struct __align__(16) F32x4 { float x, y, z, w; };

// DecodeParams, the kernels' parameter block, comes before this file: the
// generator writes it from src/codegen/kernel_abi.h's list of fields, each
// offset checked against the host's struct.

__device__ __forceinline__ float bits_to_float(u32 b) { float f; asm("mov.b32 %0, %1;" : "=f"(f) : "r"(b)); return f; }
__device__ __forceinline__ u32 float_to_bits(float f) { u32 b; asm("mov.b32 %0, %1;" : "=r"(b) : "f"(f)); return b; }

__device__ __forceinline__ float neg_inf() { return bits_to_float(0xff800000u); }
__device__ __forceinline__ float pos_inf() { return bits_to_float(0x7f800000u); }

__device__ __forceinline__ float fast_exp2(float x) { float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
__device__ __forceinline__ float fast_log2(float x) { float y; asm("lg2.approx.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }

constexpr float kLn2 = 0.693147180559945309f;
constexpr float kLog2e = 1.442695040888963407f;

// Two floats -> packed bf16x2 (round to nearest even); lo in the low half.
__device__ __forceinline__ u32 pack_bf16x2(float lo, float hi)
{
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}


// fp8 e4m3fn code -> its exact float value. Placing the 7 magnitude bits at the
// top of an fp32 mantissa/exponent gives value * 2^-120 for normals and
// subnormals alike (no flush: these kernels compile without -ftz).
__device__ __forceinline__ float fp8e4m3_to_float(u32 code)
{
    u32 bits = ((code & 0x80u) << 24) | ((code & 0x7fu) << 20);
    return bits_to_float(bits) * bits_to_float(0x7b800000u);  // * 2^120
}

// ue8m0 scale byte -> 2^(e-127) (e = 0 is the subnormal 2^-127).
__device__ __forceinline__ float ue8m0_to_float(u32 e)
{
    return e == 0 ? bits_to_float(0x00400000u) : bits_to_float(e << 23);
}

// Shared-memory address of a generic pointer, for ldmatrix.
__device__ __forceinline__ u32 smem_address(const void* p)
{
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// Asynchronous global -> shared copies (cp.async, sm_80 and newer): a thread keeps
// any number in flight without holding registers, so a block's Q rows arrive in
// one memory round trip (a load-then-store loop waits a round trip per iteration).
// kBytes 16 bypasses L1, 8 goes through it (the sizes cp.async allows for each).
// A copy with valid false reads nothing and fills the destination with zeros.
template <int kBytes>
__device__ __forceinline__ void copy_async(u32 dst, const void* src, bool valid = true)
{
    static_assert(kBytes == 16 || kBytes == 8, "cp.async copies 16 bytes (cg) or 8 (ca) here");
    const u32 src_bytes = valid ? kBytes : 0u;
    if (kBytes == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// Closes the copies issued since the last commit into a group. This and
// copy_async_wait had one user, the retired sliced kernel; every kernel's source
// still carries them, as removing them would change every cache key.
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most kPending of this thread's newest groups are still in flight.
template <int kPending>
__device__ __forceinline__ void copy_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(kPending) : "memory"); }
// Waits for all of this thread's copies (committed or not).
__device__ __forceinline__ void copy_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Four 8x8 b16 matrices; lanes 8j..8j+7 give the row addresses of matrix j.
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// The same, transposed: what a row-major [k][n] tile gives as an mma B operand.
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// D = A(16x16, row) * B(16x8, col) + D; bf16 inputs, fp32 accumulate.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1)
{
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The max (sum) over the lanes whose ids differ only in bits [from, width) (powers
// of two): from 1, each group of `width` neighbouring lanes; from 4 and width 32, the
// lanes 4 apart (a wgmma fragment's column over a warp's rows).
__device__ __forceinline__ float warp_max_xor(float v, int width, int from = 1)
{
    for (int o = width / 2; o >= from; o /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum_xor(float v, int width, int from = 1)
{
    for (int o = width / 2; o >= from; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Grid dependency control (sm_90 on). The runtime launches both kernels as
// programmatic dependents: the main kernel of whatever kernel precedes it on the
// stream (the last call's combine, or an engine's kernel that writes q or the
// indices), the combine of the main kernel. So each one's launch overlaps the end
// of the grid before it, and each waits for that grid's completion and writes
// (griddepcontrol.wait) before it reads an argument or writes an output. By
// default a dependent's launch starts as the CTAs before it exit. Where the main
// grid leaves SMs idle (the plan decides: release_dependent_early), the main kernel
// releases the grid after it (the combine; unsplit, the stream's next kernel) at its
// start, so that grid's CTAs are already resident on the idle SMs when the main
// kernel ends; where few SMs are idle they would pile onto those few and run there
// (+5 us on 128-CTA grids at b 8), so the release then waits for the exits. The
// combine keeps the default (releasing the next call at its start ran up to 1.3%
// slower: bench/HISTORY.md, "I, J, K and R timed").
#if __CUDA_ARCH__ >= 900
__device__ __forceinline__ void wait_for_prerequisite_grid()
{
    if (cfg::kDependentLaunch) asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

__device__ __forceinline__ void release_dependent_grid_early(const DecodeParams& p)
{
    if (cfg::kDependentLaunch && p.release_dependent_early) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
#else
static_assert(!cfg::kDependentLaunch, "grid dependency control needs sm_90 or later");
__device__ __forceinline__ void wait_for_prerequisite_grid() {}
__device__ __forceinline__ void release_dependent_grid_early(const DecodeParams&) {}
#endif

// Output scale from the attention sink: 1 / (1 + exp(sink - lse)).
__device__ __forceinline__ float sink_factor(float sink, float lse)
{
    if (sink == neg_inf()) return 1.0f;
    if (sink == pos_inf()) return 0.0f;
    return 1.0f / (1.0f + fast_exp2((sink - lse) * kLog2e));
}

// The mma.sync kernel's steps (portable; the register-statistics form below was the
// retired sliced kernel's).

// The CTA's head rows start with nothing attended: max -inf, sum 0.
__device__ __forceinline__ void init_row_statistics(float* row_max, float* row_sum)
{
    for (int h = threadIdx.x; h < cfg::kHeadsPerCta; h += cfg::kThreads) {
        row_max[h] = neg_inf();
        row_sum[h] = 0.0f;
    }
}

// mma C fragments (row tiles x n-tiles x 4) set to zero.
template <int kM, int kN>
__device__ __forceinline__ void zero_fragments(float (&acc)[kM][kN][4])
{
#pragma unroll
    for (int m = 0; m < kM; m++)
#pragma unroll
        for (int n = 0; n < kN; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[m][n][i] = 0.0f;
}

// The part of a tile's online softmax that the two forms below share: kThreadsPerRow
// neighbouring lanes hold kCands scores each of one head row (log2 domain, -inf
// where skipped). The row's max is reduced over those lanes, then old_max_of()
// gives the running max; writes the thread's P (bf16) at prow and returns its sum of
// them (fp32, not the bf16 P V uses: lse must be exact to ~1e-6), with the row's new
// max and the output's rescale factor.
template <int kCands, int kThreadsPerRow, class OldMax>
__device__ __forceinline__ float softmax_tile(const float (&sc)[kCands], u16* prow, OldMax old_max_of, float& new_max,
                                              float& alpha)
{
    float tile_max = neg_inf();
#pragma unroll
    for (int i = 0; i < kCands; i++) tile_max = fmaxf(tile_max, sc[i]);
    tile_max = warp_max_xor(tile_max, kThreadsPerRow);
    const float old_max = old_max_of();
    new_max = fmaxf(old_max, tile_max);
    const bool empty = new_max == neg_inf();  // nothing valid yet: keep exp() away from -inf - -inf
    alpha = empty ? 1.0f : fast_exp2(old_max - new_max);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kCands; i += 2) {
        const float p0 = empty ? 0.0f : fast_exp2(sc[i] - new_max);
        const float p1 = empty ? 0.0f : fast_exp2(sc[i + 1] - new_max);
        sum += p0 + p1;
        *reinterpret_cast<u32*>(prow + i) = pack_bf16x2(p0, p1);
    }
    return sum;
}

// One thread's share of a head row's online softmax over a tile, the row's running
// max and sum in shared memory: the row's first lane (`first`) updates them and
// stores the rescale factor of the output. The portable kernel's form: with the
// statistics in registers (RowState, below) it spills at its 128-register cap
// (V3.2 sm_100a: 112 bytes at 64 heads per CTA, 24 at 16 heads and two CTAs per SM).
template <int kCands, int kThreadsPerRow>
__device__ __forceinline__ void softmax_row_share(const float (&sc)[kCands], bool first, u16* prow, float* row_max,
                                                  float* row_sum, float* row_alpha)
{
    float new_max, alpha;
    float sum = softmax_tile<kCands, kThreadsPerRow>(sc, prow, [row_max] { return *row_max; }, new_max, alpha);
    sum = warp_sum_xor(sum, kThreadsPerRow);
    if (first) {
        *row_max = new_max;
        *row_sum = *row_sum * alpha + sum;
        *row_alpha = alpha;
    }
}

// A head row's online-softmax statistics held in registers by each of the
// kThreadsPerRow threads that share the row: the running max (the same in all of
// them: it is reduced across them every tile, exp needs it) and the thread's own
// share of the running sum, reduced once when the walk ends. Nothing on a tile's
// path then waits for a shared-memory read of the statistics or for the sum's
// shuffles (2-3% for the retired sliced kernel, bench/NOTES.md). No kernel uses
// this form now (nor softmax_row_step, finish_row_statistics); it stays because
// every kernel's source carries it and removing it would change every cache key.
struct RowState {
    float max = neg_inf();
    float sum = 0.0f;
};

// One tile of the online softmax, the row's statistics in registers (RowState);
// `first` (one thread of the row) writes the rescale factor for this tile's P V.
template <int kCands, int kThreadsPerRow>
__device__ __forceinline__ void softmax_row_step(const float (&sc)[kCands], bool first, u16* prow, RowState& st,
                                                 float* row_alpha)
{
    float new_max, alpha;
    const float sum = softmax_tile<kCands, kThreadsPerRow>(sc, prow, [&st] { return st.max; }, new_max, alpha);
    st.sum = st.sum * alpha + sum;
    st.max = new_max;
    if (first) *row_alpha = alpha;
}

// The walk's end: the row's sum reduced over its threads; `first` writes the row's
// statistics for the epilogue (finish_row).
template <int kThreadsPerRow>
__device__ __forceinline__ void finish_row_statistics(const RowState& st, bool first, float* row_max, float* row_sum)
{
    const float sum = warp_sum_xor(st.sum, kThreadsPerRow);
    if (first) {
        *row_max = st.max;
        *row_sum = sum;
    }
}

// The end of head h's walk for this thread's value dims from dim0: normalized,
// as this split's partial (fp32, with the split's lse) when the call is split,
// else as the result (bf16, times the sink's share) with its lse where asked
// (+inf when nothing was attended). store_partial(float* dst, inv) and
// store_output(u16* dst, scale) write the thread's dims; writes_lse: the one
// thread of the row that writes its lse.
template <class StorePartial, class StoreOutput>
__device__ __forceinline__ void finish_row(const DecodeParams& p, int split, int row, int b, int s, int h, int dim0,
                                           float row_max, float row_sum, bool writes_lse, StorePartial store_partial,
                                           StoreOutput store_output)
{
    const bool empty = row_sum == 0.0f;
    const float inv = empty ? 0.0f : 1.0f / row_sum;
    const float lse = empty ? neg_inf() : (row_max + fast_log2(row_sum)) * kLn2;
    if (p.num_splits > 1) {
        // An int: the envelope bounds it below 2^29 (plan.c asserts it). As an i64
        // its multiply by a head count that is not a power of two cost
        // sm90-narrow-scores a 60-byte spill at 3, 5, 6 and 7 heads.
        const int prow = (split * p.batch * p.s_q + row) * cfg::kHeads + h;
        store_partial(p.partial_out + (i64)prow * cfg::kDV + dim0, inv);
        if (writes_lse) p.partial_lse[prow] = lse;
    } else {
        float scale = inv;
        if (cfg::kHasSink && !empty) scale *= sink_factor(p.attn_sink[h], lse);
        store_output(p.out + b * p.out_stride_b + s * p.out_stride_s + h * p.out_stride_h + dim0, scale);
        if (p.lse && writes_lse)
            p.lse[b * p.lse_stride_b + s * p.lse_stride_s + h * p.lse_stride_h] = empty ? pos_inf() : lse;
    }
}
