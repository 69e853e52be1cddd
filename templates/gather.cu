// ---------------------------------------------------------------------------
// gather.cu: reading candidates out of the paged FP8 cache, shared by the kernel
// families: slot lookup (index -1, out of range and past-length candidates are
// skipped), row and scale addresses (a compile-time page size: no division), the
// dequantizers (exact fp32 product, and the power-of-two bf16x2 fast path), and
// the live-tile walk that skips tiles with nothing to attend.
// ---------------------------------------------------------------------------
namespace gather {

constexpr bool kExactScalesOnly = cfg::kScaleFormat == 2;  // arbitrary fp32 scales: exact dequantization only

// Where one candidate's bytes are; row == 0 marks it skipped.
struct Candidate {
    const u8* row;
    const u8* scales;
};

// The candidate range of one CTA: its row's scope lengths (clamped topk_length and
// extra_topk_length), and its split's tiles [begin, end).
struct TileRange {
    int main_len, extra_len, total, begin, end;
};

__device__ __forceinline__ TileRange tile_range(const DecodeParams& p, int b, int split)
{
    TileRange r;
    r.main_len = p.topk;
    r.extra_len = cfg::kHasExtra ? p.extra_topk : 0;
    if (cfg::kHasTopkLength) r.main_len = min(max(p.topk_length[b], 0), p.topk);
    if (cfg::kHasExtraTopkLength) r.extra_len = min(max(p.extra_topk_length[b], 0), p.extra_topk);
    r.total = p.topk + (cfg::kHasExtra ? p.extra_topk : 0);
    const int num_tiles = (r.total + cfg::kTile - 1) / cfg::kTile;
    r.begin = split * p.tiles_per_split;
    r.end = min(num_tiles, r.begin + p.tiles_per_split);
    return r;
}

// What one CTA of the main kernel works on: blockIdx = (batch row x query token,
// head group, split).
struct CtaWork {
    int row;         // b * s_q + s
    int b, s;        // batch row, query token
    int head0;       // its first query head
    int split;
    TileRange range; // the tiles it walks
};

template <int kHeadsPerCta>
__device__ __forceinline__ CtaWork cta_work(const DecodeParams& p)
{
    CtaWork w;
    w.row = blockIdx.x;
    w.head0 = blockIdx.y * kHeadsPerCta;
    w.b = w.row / p.s_q;
    w.s = w.row % p.s_q;
    w.split = blockIdx.z;
    w.range = tile_range(p, w.b, w.split);
    return w;
}

// Copy a CTA's Q rows (query heads head0 .. head0 + kRows - 1, dims [0, kDims))
// into shared memory with cp.async in kBytes chunks, every chunk in flight at once
// (one memory round trip); heads past h_q are zero-filled. kThreads threads copy,
// `thread` in [0, kThreads) being this one; chunk_address(h, c) is the shared
// address of head row h's chunk c. The copying threads wait for their copies
// before the barrier that publishes them.
template <int kRows, int kDims, int kBytes, int kThreads, typename ChunkAddress>
__device__ __forceinline__ void stage_q_rows(const DecodeParams& p, const CtaWork& w, int thread,
                                             ChunkAddress chunk_address)
{
    constexpr int kDimsPerChunk = kBytes / 2;  // bf16
    constexpr int kChunks = kDims / kDimsPerChunk;
    static_assert(kDims % kDimsPerChunk == 0, "Q rows copy in whole chunks");
    for (int i = thread; i < kRows * kChunks; i += kThreads) {
        const int h = i / kChunks, c = i % kChunks;
        const bool live = w.head0 + h < cfg::kHeads;
        copy_async<kBytes>(chunk_address(h, c),
                           p.q + w.b * p.q_stride_b + w.s * p.q_stride_s + (live ? w.head0 + h : 0) * p.q_stride_h +
                               c * kDimsPerChunk,
                           live);
    }
}

// A CTA's main index row (batch row b, query token s). A kernel with registers to
// spare addresses it once, before its loop, and a load ahead then adds only the
// position; the others pass it at each load (one more register spilled in GLM
// NSA's sm90 kernel when it was held).
__device__ __forceinline__ const int* main_index_row(const DecodeParams& p, int b, int s)
{
    return p.indices + b * p.indices_stride_b + s * p.indices_stride_s;
}

// The raw index at candidate position `pos`, or -1 when the position is past its
// scope's length (no load then). Checked against the cache by checked_slot at the
// use, so a prefetched index's latency is not waited for where it is loaded.
__device__ __forceinline__ int load_slot(const DecodeParams& p, const int* main_row, int b, int s, int pos,
                                         const TileRange& r)
{
    if (pos >= r.total) return -1;
    if (pos < p.topk) return pos < r.main_len ? main_row[pos] : -1;
    if (!cfg::kHasExtra) return -1;
    const int epos = pos - p.topk;
    return epos < r.extra_len
               ? p.extra_indices[b * p.extra_indices_stride_b + s * p.extra_indices_stride_s + epos]
               : -1;
}

// A loaded index as a slot, or -1 when it is skipped (-1, or outside its cache).
__device__ __forceinline__ int checked_slot(const DecodeParams& p, int pos, int raw)
{
    const i64 limit = (!cfg::kHasExtra || pos < p.topk) ? p.kv_num_slots : p.extra_num_slots;
    return (raw < 0 || (i64)raw >= limit) ? -1 : raw;
}

// The slot a candidate position refers to, or -1 when it is skipped (past its
// scope's length, index -1, or outside the cache).
__device__ __forceinline__ int fetch_slot(const DecodeParams& p, int b, int s, int pos, const TileRange& r)
{
    return checked_slot(p, pos, load_slot(p, main_index_row(p, b, s), b, s, pos, r));
}

template <int kPage>
__device__ __forceinline__ Candidate locate_in_cache(const u8* cache, i64 page_stride, int slot)
{
    int page = slot / kPage;  // a compile-time divisor: multiply-high, no division
    int off = slot - page * kPage;
    const u8* base = cache + (i64)page * page_stride;
    Candidate c;
    c.row = base + (i64)off * cfg::kRowBytes;
    c.scales = cfg::kScalesInline ? c.row + cfg::kScaleOffset
                                  : base + (i64)kPage * cfg::kRowBytes + (i64)off * cfg::kFooterBytes;
    return c;
}

__device__ __forceinline__ Candidate locate_candidate(const DecodeParams& p, int pos, int slot)
{
    if (slot < 0) return Candidate{nullptr, nullptr};
    if (!cfg::kHasExtra || pos < p.topk) return locate_in_cache<cfg::kPageSize>(p.kv, p.kv_page_stride, slot);
    return locate_in_cache<cfg::kExtraPageSize>(p.extra_kv, p.extra_page_stride, slot);
}

__device__ __forceinline__ u32 load_scale_bits(const u8* scales, int k)
{
    if (cfg::kScaleFormat == 3) return scales[k];
    return reinterpret_cast<const u32*>(scales)[k];
}

__device__ __forceinline__ float scale_value(u32 bits)
{
    return cfg::kScaleFormat == 3 ? ue8m0_to_float(bits) : bits_to_float(bits);
}

// 4 fp8 codes (one word) times a scale -> 4 bf16 (2 words), the exact way: the
// fp32 product rounded once to bf16 (what SPEC.md's dequantizer computes).
__device__ __forceinline__ void dequant4_exact(u32 codes, float scale, u32& lo, u32& hi)
{
    float v0 = fp8e4m3_to_float(codes & 0xffu) * scale;
    float v1 = fp8e4m3_to_float((codes >> 8) & 0xffu) * scale;
    float v2 = fp8e4m3_to_float((codes >> 16) & 0xffu) * scale;
    float v3 = fp8e4m3_to_float(codes >> 24) * scale;
    lo = pack_bf16x2(v0, v1);
    hi = pack_bf16x2(v2, v3);
}

#if MLAJIT_LAYOUTS
// The same products, bit for bit, in about 6 instructions a pair of values against
// the bit placement's 14: from sm_89 on, the hardware converts a pair of codes to
// f16x2 in one instruction (exact: every e4m3 value is an f16; a NaN code, which
// the quantizer never writes, stays NaN) and a half widens to fp32 in one more.
// The wide producer, one warp a scheduler, spent 12-18% of GLM53_NOPE's time on the
// longer form (bench/NOTES.md 1d). kConverted false: the longer form.
template <bool kConverted>
__device__ __forceinline__ void dequant4_exact_as(u32 codes, float scale, u32& lo, u32& hi)
{
#if __CUDA_ARCH__ >= 890
    if constexpr (kConverted) {
        float v[4];
        asm("{\n.reg .b16 c0, c1, h0, h1, h2, h3;\n.reg .b32 p0, p1;\n"
            "mov.b32 {c0, c1}, %4;\n"
            "cvt.rn.f16x2.e4m3x2 p0, c0;\ncvt.rn.f16x2.e4m3x2 p1, c1;\n"
            "mov.b32 {h0, h1}, p0;\nmov.b32 {h2, h3}, p1;\n"
            "cvt.f32.f16 %0, h0;\ncvt.f32.f16 %1, h1;\ncvt.f32.f16 %2, h2;\ncvt.f32.f16 %3, h3;\n}\n"
            : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3])
            : "r"(codes));
        lo = pack_bf16x2(v[0] * scale, v[1] * scale);
        hi = pack_bf16x2(v[2] * scale, v[3] * scale);
        return;
    }
#endif
    dequant4_exact(codes, scale, lo, hi);
}

// 16 fp8 codes times a scale -> 16 bf16 (8 words), the exact way.
template <bool kConverted = true>
__device__ __forceinline__ void dequant16_exact(const U32x4& codes, float scale, u32 (&out)[8])
{
    const u32 w[4] = {codes.x, codes.y, codes.z, codes.w};
#pragma unroll
    for (int i = 0; i < 4; i++) dequant4_exact_as<kConverted>(w[i], scale, out[2 * i], out[2 * i + 1]);
}
#else
// 16 fp8 codes times a scale -> 16 bf16 (8 words), the exact way.
__device__ __forceinline__ void dequant16_exact(const U32x4& codes, float scale, u32 (&out)[8])
{
    const u32 w[4] = {codes.x, codes.y, codes.z, codes.w};
#pragma unroll
    for (int i = 0; i < 4; i++) dequant4_exact(w[i], scale, out[2 * i], out[2 * i + 1]);
}
#endif

// The fast path's range: its bf16x2 factor is scale * 2^120, so the scale's biased
// exponent plus kFastFactorBias must stay a finite bf16 exponent (at most 254).
constexpr u32 kFastFactorBias = 120u;
constexpr u32 kFastMaxExponent = 254u - kFastFactorBias;  // 134: 2^7

// The bf16x2 factor scale * 2^120 for the fast path, or 0 when the scale is not a
// power of two in [2^-127, 2^7] (then the product is computed the exact way).
// kFolded: selects, not early returns, so a round's calls on the same scale word fold
// into one (with branches ptxas kept one per NoPE load, twice the checks at V32's
// layout). The wide sm90 producer keeps the branches: folded, its long walks ran 5-7%
// slower with the same loads and stores, cause not found (bench/HISTORY.md, "The
// producers' round, counted again, and run").
template <bool kFolded = true>
__device__ __forceinline__ u32 fast_scale_bf16x2(u32 bits)
{
    if (kExactScalesOnly) return 0u;  // always exact
    if (kFolded) {
        // the biased fp32 exponent of the scale (ue8m0: e itself; e = 0 is 2^-127)
        const u32 exp_field = cfg::kScaleFormat == 3 ? bits : bits >> 23;
        // fp32: positive powers of two only; a zero exponent field is zero or subnormal
        const bool power_of_two = cfg::kScaleFormat == 3 || ((bits & 0x807fffffu) == 0u && exp_field != 0u);
        const u32 bf = (exp_field + kFastFactorBias) << 7;  // ue8m0 e = 0 (2^-127) included
        return power_of_two && exp_field <= kFastMaxExponent ? bf | (bf << 16) : 0u;  // 2^7 * 2^120 is bf16's top
    }
    u32 exp_field = bits;
    if (cfg::kScaleFormat != 3) {
        if ((bits & 0x807fffffu) != 0u) return 0u;  // negative, or not a power of two
        exp_field = bits >> 23;
        if (exp_field == 0u) return 0u;  // zero
    }
    if (exp_field > kFastMaxExponent) return 0u;
    const u32 bf = (exp_field + kFastFactorBias) << 7;
    return bf | (bf << 16);
}

// Two e4m3 codes, each in the low byte of a 16-bit half whose high byte repeats the
// code's sign (prmt's sign-replicating selectors) -> bf16x2 of code * 2^-120,
// exactly: shifted up by 4, the 7 magnitude bits land on the low 4 exponent and top
// 3 mantissa bits of a bf16 (subnormal codes become subnormal bf16s) and a copy of
// the sign on bit 15; the mask drops the rest. Two instructions after the prmt.
__device__ __forceinline__ u32 e4m3x2_to_bf16x2_down120(u32 t)
{
    return (t << 4) & 0x87f087f0u;
}

// a * b per bf16 half, rounded to nearest even; fma with -0 (sm_80 has no
// mul.bf16x2) leaves every product, -0 included, as it is.
__device__ __forceinline__ u32 bf16x2_mul(u32 a, u32 b)
{
    u32 r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(0x80008000u));
    return r;
}

__device__ __forceinline__ u32 byte_perm(u32 a, u32 sel)
{
    u32 r;
    asm("prmt.b32 %0, %1, 0, %2;" : "=r"(r) : "r"(a), "r"(sel));
    return r;
}

// 4 fp8 codes times a power-of-two scale -> 4 bf16 (2 words): four integer/bf16x2
// instructions per pair instead of the exact path's fourteen (selectors 0x9180 and
// 0xb3a2: code bytes 0, 1 and 2, 3 each under a byte of its sign). Exact: the product of
// a 4-bit-significand code and a power of two rounds exactly as the fp32 product does.
__device__ __forceinline__ void dequant4_pow2(u32 codes, u32 scale2, u32& lo, u32& hi)
{
    lo = bf16x2_mul(e4m3x2_to_bf16x2_down120(byte_perm(codes, 0x9180u)), scale2);
    hi = bf16x2_mul(e4m3x2_to_bf16x2_down120(byte_perm(codes, 0xb3a2u)), scale2);
}

// 16 fp8 codes times a power-of-two scale -> 16 bf16 (8 words).
__device__ __forceinline__ void dequant16_pow2(const U32x4& codes, u32 scale2, u32 (&out)[8])
{
    const u32 w[4] = {codes.x, codes.y, codes.z, codes.w};
#pragma unroll
    for (int i = 0; i < 4; i++) dequant4_pow2(w[i], scale2, out[2 * i], out[2 * i + 1]);
}

// 16 fp8 codes times the scale with raw bits `scale_bits` -> 16 bf16 (8 words):
// the power-of-two fast path where it is exact, else the fp32 product.
__device__ __forceinline__ void dequant16(const U32x4& codes, u32 scale_bits, u32 (&out)[8])
{
    const u32 scale2 = fast_scale_bf16x2(scale_bits);
    if (scale2 != 0u)
        dequant16_pow2(codes, scale2, out);
    else
        dequant16_exact(codes, scale_value(scale_bits), out);
}

// Whether a tile holds a candidate that can be attended: one before the main scope's
// length, or one in the extra scope before its length. Dead tiles are skipped.
__device__ __forceinline__ bool tile_is_live(const TileRange& r, int tile, int topk)
{
    int start = tile * cfg::kTile, end = min(start + cfg::kTile, r.total);
    return start < r.main_len || (end > topk && start < topk + r.extra_len);
}

// The first live tile at or after `tile` in the range, or r.end.
__device__ __forceinline__ int next_live_tile(const TileRange& r, int tile, int topk)
{
    // Without an extra cache or a length, main_len == total: every tile of the range
    // is live, and the loop below (about 20 instructions a call) would find so. Not
    // with arbitrary fp32 scales: without the loop ptxas spilled their exact-path
    // kernels (GLM53_NOPE: sm90 24-48 bytes, sm90-staged 352, sm90-narrow 8; CUDA 13.0).
    if (!cfg::kHasExtra && !cfg::kHasTopkLength && !kExactScalesOnly) return tile;
    while (tile < r.end && !tile_is_live(r, tile, topk)) tile++;
    return tile;
}

}  // namespace gather
