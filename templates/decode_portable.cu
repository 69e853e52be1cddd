// ---------------------------------------------------------------------------
// decode_portable.cu: the portable sparse-MLA decode kernel (sm_80 and newer).
//
// One CTA = one (batch row x query token, head group of kHeadsPerCta, split):
// blockIdx = (row, head group, split).
// It walks its share of the candidate list (main cache, then extra cache) in
// tiles of kTile candidates, software-pipelined: while the math of tile i runs,
// the 16-byte loads of tile i+1 are in flight into registers and the indices of
// tile i+2 are being read.
// Per tile, all kWarps warps:
//   1. token table:  resolve the NEXT tile's row addresses and validity
//   2. dequantize:   this tile's prefetched fp8 rows -> bf16 (times the scale) into sK
//   3. prefetch:     issue the next tile's 16-byte loads (registers)
//   4. scores:       S = Q K^T with mma.sync m16n8k16 (warp w: candidates w*8..)
//   5. softmax:      online softmax in the log2 domain, P (bf16) into sP
//   6. output:       O = O * alpha + P V (warp w: value dims w*kDV/kWarps..)
// Operands reach the tensor cores through ldmatrix (V transposed on the way).
// Invalid candidates (index -1, out of range, past topk_length) are never read;
// their K rows are zero and their scores -inf, so NaN in unreferenced slots can't
// reach the result. With split-KV the CTA writes a normalized partial output and
// its lse to the workspace and mlajit_decode_combine merges the splits.
// ---------------------------------------------------------------------------
namespace portable {
using namespace gather;

constexpr int kMTiles = cfg::kHeadsPerCta / 16;   // mma row tiles of heads
// Scores: a work unit is kSNPerUnit n-tiles of 8 candidates times kSMTilesPerUnit
// row tiles. Two n-tiles per unit halve the Q fragment loads per mma (waiting on
// shared-memory operands is the mma.sync kernel's main stall); row tiles are split
// over warps only when there are more warps than n-tile groups.
constexpr int kSNTiles = cfg::kTile / 8;
constexpr int kSNPerUnit = kSNTiles >= 2 && cfg::kThreads <= 256 ? 2 : 1;  // 512 threads: register cap
constexpr int kSNGroups = kSNTiles / kSNPerUnit;
constexpr int kSMSplitMax = cfg::kWarps / kSNGroups > 0 ? cfg::kWarps / kSNGroups : 1;
constexpr int kSMSplit = kSMSplitMax < kMTiles ? kSMSplitMax : kMTiles;
constexpr int kSMTilesPerUnit = kMTiles / kSMSplit;
constexpr int kSUnits = kSNGroups * kSMSplit;
// k-step pairs unrolled in the score loop: all of them (loads hoisted over the
// mma chains) unless a 128-register cap (512 threads, or two CTAs per SM) forbids it.
constexpr int kSKUnroll = cfg::kThreads > 256 ? 2 : cfg::kMinBlocksPerSM > 1 ? 6 : cfg::kDQK / 32;
constexpr int kVDimsPerWarp = cfg::kDV / cfg::kWarps;
constexpr int kVNTiles = kVDimsPerWarp / 8;
#if MLAJIT_BF16
// The bf16 edition (scales none, the generator's choice for those layouts only):
// the NoPE dims are bf16 values, 8 to a 16-byte chunk, copied into sK as they are.
static_assert(cfg::kScaleFormat == 4, "the bf16 edition reads bf16 NoPE values (scales none)");
constexpr int kNopeChunks = cfg::kDNope * 2 / 16; // 8 bf16 per chunk
#else
constexpr int kNopeChunks = cfg::kDNope / 16;     // 16 fp8 codes per chunk
#endif
constexpr int kRopeChunks = cfg::kDRope * 2 / 16; // 8 bf16 per chunk
constexpr int kTokensPerSoftmaxThread = cfg::kTile * cfg::kHeadsPerCta / cfg::kThreads;
constexpr int kSoftmaxThreadsPerRow = cfg::kThreads / cfg::kHeadsPerCta;

static_assert(cfg::kHeadsPerCta % 16 == 0, "heads per CTA must fill mma row tiles");
static_assert(cfg::kDV % (cfg::kWarps * 8) == 0, "value dims must split over warps in n-tiles of 8");
static_assert(cfg::kDQK % 16 == 0 && cfg::kDNope % 16 == 0, "dims must be multiples of 16");
static_assert(cfg::kTile % 16 == 0 && cfg::kTile / 8 <= cfg::kWarps * 8, "tile must be a multiple of 16");
static_assert(kTokensPerSoftmaxThread >= 1, "softmax needs at least one token per thread");
static_assert(cfg::kRopeOffset % 16 == 0, "RoPE bytes must start 16-byte aligned in a row");
static_assert((cfg::kDQK / 16) % 2 == 0, "K fragments are loaded two k-steps at a time");
static_assert(kVNTiles % 2 == 0, "V fragments are loaded two n-tiles at a time");
static_assert(kMTiles % kSMSplit == 0, "score row tiles must split evenly over warps");

#if MLAJIT_LAYOUTS
// Who loads what (the layouts edition, tools/embed_templates.py): warp w owns
// candidates [w * kTokensPerWarp, (w + 1) * kTokensPerWarp) of a tile. A row's
// NoPE chunks take kNopePasses passes of the warp's lanes (two at DOTS3_SWA's 64
// chunks): NoPE slot j is pass j % kNopePasses of candidate j / kNopePasses, lane
// l loading chunk l + 32 * pass (lanes past kNopeChunks idle), so a slot's scale
// index is the same in every tile. RoPE slot j: lane l loads chunk l % kRopeChunks
// of candidate j * (32 / kRopeChunks) + l / kRopeChunks; without RoPE (GLM53_NOPE)
// there is no RoPE slot.
constexpr int kTokensPerWarp = cfg::kTile / cfg::kWarps;
constexpr int kNopePasses = (kNopeChunks + 31) / 32;
constexpr int kNopeSlots = kTokensPerWarp * kNopePasses;
constexpr int kRopeLanes = kRopeChunks > 0 ? kRopeChunks : 1;  // a divisor even without RoPE
constexpr int kRopeTokensPerSlot = 32 / kRopeLanes;
constexpr int kRopeSlots = kRopeChunks > 0 ? (kTokensPerWarp + kRopeTokensPerSlot - 1) / kRopeTokensPerSlot : 0;
static_assert(cfg::kTile % cfg::kWarps == 0, "candidates must split evenly over warps");
static_assert(32 % kRopeLanes == 0, "RoPE chunks must tile a warp");
static_assert(kNopeSlots + kRopeSlots <= 32, "slot presence is a 32-bit mask");
static_assert(cfg::kQuantTile % 16 == 0, "a 16-code chunk has one scale");

// One tile's bytes in flight: this lane's 16-byte chunks and, when scales live in a
// page footer (another cache line), the scales of its NoPE chunks (ue8m0 bytes
// packed four to a register). Inline scales share a line with the row's last NoPE
// chunk, so they are read (from L1) when the tile is stored: fewer registers.
constexpr bool kPackedScales = cfg::kScaleFormat == 3;
constexpr int kScaleRegs = cfg::kScalesInline ? 1 : kPackedScales ? (kNopeSlots + 3) / 4 : kNopeSlots;
struct TilePrefetch {
    U32x4 nope[kNopeSlots];
    U32x4 rope[kRopeSlots > 0 ? kRopeSlots : 1];  // NVRTC has no arrays of size 0
    u32 scale_bits[kScaleRegs];
    u32 present;  // bit j: NoPE slot j valid; bit kNopeSlots + j: RoPE slot j valid
};
#else
// Who loads what: warp w owns candidates [w * kTokensPerWarp, (w + 1) * kTokensPerWarp)
// of a tile. NoPE slot j: lane l loads 16-byte chunk l of candidate j (lanes past
// kNopeChunks idle), so a lane's quantization block, hence its scale index, is the
// same for every slot and every tile. RoPE slot j: lane l loads chunk l % kRopeChunks
// of candidate j * (32 / kRopeChunks) + l / kRopeChunks.
constexpr int kTokensPerWarp = cfg::kTile / cfg::kWarps;
constexpr int kNopeSlots = kTokensPerWarp;
constexpr int kRopeTokensPerSlot = 32 / kRopeChunks;
constexpr int kRopeSlots = (kTokensPerWarp + kRopeTokensPerSlot - 1) / kRopeTokensPerSlot;
static_assert(cfg::kTile % cfg::kWarps == 0, "candidates must split evenly over warps");
static_assert(kNopeChunks <= 32, "one lane per NoPE chunk");
static_assert(32 % kRopeChunks == 0, "RoPE chunks must tile a warp");
static_assert(kNopeSlots + kRopeSlots <= 32, "slot presence is a 32-bit mask");
static_assert(cfg::kQuantTile % 16 == 0, "a 16-code chunk has one scale");

// One tile's bytes in flight: this lane's 16-byte chunks and, when scales live in a
// page footer (another cache line), the scales of its NoPE chunks (ue8m0 bytes
// packed four to a register). Inline scales share a line with the row's last NoPE
// chunk, so they are read (from L1) when the tile is stored: fewer registers.
constexpr bool kPackedScales = cfg::kScaleFormat == 3;
constexpr int kScaleRegs = cfg::kScalesInline ? 1 : kPackedScales ? (kNopeSlots + 3) / 4 : kNopeSlots;
struct TilePrefetch {
    U32x4 nope[kNopeSlots];
    U32x4 rope[kRopeSlots];
    u32 scale_bits[kScaleRegs];
    u32 present;  // bit j: NoPE slot j valid; bit kNopeSlots + j: RoPE slot j valid
};
#endif

__device__ __forceinline__ u32 prefetched_scale(const TilePrefetch& f, int j)
{
    if (kPackedScales) return (f.scale_bits[j / 4] >> (8 * (j % 4))) & 0xffu;
    return f.scale_bits[j];
}

// Threads 0..kTile-1 resolve one candidate each (its slot fetched earlier).
__device__ __forceinline__ void build_token_table(const DecodeParams& p, int tile, int slot, const u8** rows,
                                                  const u8** scales, int* valid)
{
    int t = threadIdx.x;
    if (t >= cfg::kTile) return;
    Candidate c = locate_candidate(p, tile * cfg::kTile + t, slot);
    rows[t] = c.row;
    scales[t] = c.scales;
    valid[t] = c.row != nullptr;
}

#if MLAJIT_LAYOUTS
// Issue this lane's 16-byte loads of one tile (see "Who loads what").
__device__ __forceinline__ void issue_tile_loads(TilePrefetch& f, const u8* const* rows, const u8* const* scales)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tok0 = warp * kTokensPerWarp;
    f.present = 0u;
#pragma unroll
    for (int i = 0; i < kScaleRegs; i++) f.scale_bits[i] = 0u;
#pragma unroll
    for (int j = 0; j < kNopeSlots; j++) {
        const int t = tok0 + j / kNopePasses, chunk = lane + 32 * (j % kNopePasses);
        const u8* src = rows[t];
        f.nope[j] = U32x4{0u, 0u, 0u, 0u};
        if (src && chunk < kNopeChunks) {
            f.present |= 1u << j;
            f.nope[j] = *reinterpret_cast<const U32x4*>(src + chunk * 16);
#if MLAJIT_BF16
            // no scales to load
#else
            if (!cfg::kScalesInline) {
                u32 bits = load_scale_bits(scales[t], chunk * 16 / cfg::kQuantTile);
                if (kPackedScales) f.scale_bits[j / 4] |= bits << (8 * (j % 4));
                else f.scale_bits[j] = bits;
            }
#endif
        }
    }
#pragma unroll
    for (int j = 0; j < kRopeSlots; j++) {
        const int t = j * kRopeTokensPerSlot + lane / kRopeLanes;
        const u8* src = t < kTokensPerWarp ? rows[tok0 + t] : nullptr;
        f.rope[j] = U32x4{0u, 0u, 0u, 0u};
        if (src) {
            f.present |= 1u << (kNopeSlots + j);
            f.rope[j] = *reinterpret_cast<const U32x4*>(src + cfg::kRopeOffset + (lane % kRopeLanes) * 16);
        }
    }
}

// Dequantize the prefetched chunks into sK; absent candidates become zero rows.
__device__ __forceinline__ void store_tile(const TilePrefetch& f, const u8* const* scales, u16* sK)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tok0 = warp * kTokensPerWarp;
#pragma unroll
    for (int j = 0; j < kNopeSlots; j++) {
        const int t = tok0 + j / kNopePasses, chunk = lane + 32 * (j % kNopePasses);
        if (chunk >= kNopeChunks) continue;
#if MLAJIT_BF16
        // bf16 values: the chunk's 8 dims as loaded (zero for an absent candidate)
        *reinterpret_cast<U32x4*>(sK + t * cfg::kQKStride + chunk * 8) =
            ((f.present >> j) & 1u) ? f.nope[j] : U32x4{0u, 0u, 0u, 0u};
#else
        u32 words[8] = {0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u};
        if ((f.present >> j) & 1u) {
            const u32 bits = cfg::kScalesInline ? load_scale_bits(scales[t], chunk * 16 / cfg::kQuantTile)
                                                 : prefetched_scale(f, j);
            dequant16(f.nope[j], bits, words);
        }
        U32x4* dst = reinterpret_cast<U32x4*>(sK + t * cfg::kQKStride + chunk * 16);
        dst[0] = U32x4{words[0], words[1], words[2], words[3]};
        dst[1] = U32x4{words[4], words[5], words[6], words[7]};
#endif
    }
#pragma unroll
    for (int j = 0; j < kRopeSlots; j++) {
        int t = j * kRopeTokensPerSlot + lane / kRopeLanes;
        if (t >= kTokensPerWarp) break;
        t += tok0;
        *reinterpret_cast<U32x4*>(sK + t * cfg::kQKStride + cfg::kDNope + (lane % kRopeLanes) * 8) =
            ((f.present >> (kNopeSlots + j)) & 1u) ? f.rope[j] : U32x4{0u, 0u, 0u, 0u};
    }
}
#else
// Issue this lane's 16-byte loads of one tile (see "Who loads what").
__device__ __forceinline__ void issue_tile_loads(TilePrefetch& f, const u8* const* rows, const u8* const* scales)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tok0 = warp * kTokensPerWarp;
    f.present = 0u;
#pragma unroll
    for (int i = 0; i < kScaleRegs; i++) f.scale_bits[i] = 0u;
#pragma unroll
    for (int j = 0; j < kNopeSlots; j++) {
        const u8* src = rows[tok0 + j];
        f.nope[j] = U32x4{0u, 0u, 0u, 0u};
        if (src && lane < kNopeChunks) {
            f.present |= 1u << j;
            f.nope[j] = *reinterpret_cast<const U32x4*>(src + lane * 16);
            if (!cfg::kScalesInline) {
                u32 bits = load_scale_bits(scales[tok0 + j], lane * 16 / cfg::kQuantTile);
                if (kPackedScales) f.scale_bits[j / 4] |= bits << (8 * (j % 4));
                else f.scale_bits[j] = bits;
            }
        }
    }
#pragma unroll
    for (int j = 0; j < kRopeSlots; j++) {
        const int t = j * kRopeTokensPerSlot + lane / kRopeChunks;
        const u8* src = t < kTokensPerWarp ? rows[tok0 + t] : nullptr;
        f.rope[j] = U32x4{0u, 0u, 0u, 0u};
        if (src) {
            f.present |= 1u << (kNopeSlots + j);
            f.rope[j] = *reinterpret_cast<const U32x4*>(src + cfg::kRopeOffset + (lane % kRopeChunks) * 16);
        }
    }
}

// Dequantize the prefetched chunks into sK; absent candidates become zero rows.
__device__ __forceinline__ void store_tile(const TilePrefetch& f, const u8* const* scales, u16* sK)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tok0 = warp * kTokensPerWarp;
#pragma unroll
    for (int j = 0; j < kNopeSlots; j++) {
        if (lane >= kNopeChunks) break;
        u32 words[8] = {0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u};
        if ((f.present >> j) & 1u) {
            const u32 bits = cfg::kScalesInline ? load_scale_bits(scales[tok0 + j], lane * 16 / cfg::kQuantTile)
                                                 : prefetched_scale(f, j);
            dequant16(f.nope[j], bits, words);
        }
        U32x4* dst = reinterpret_cast<U32x4*>(sK + (tok0 + j) * cfg::kQKStride + lane * 16);
        dst[0] = U32x4{words[0], words[1], words[2], words[3]};
        dst[1] = U32x4{words[4], words[5], words[6], words[7]};
    }
#pragma unroll
    for (int j = 0; j < kRopeSlots; j++) {
        int t = j * kRopeTokensPerSlot + lane / kRopeChunks;
        if (t >= kTokensPerWarp) break;
        t += tok0;
        *reinterpret_cast<U32x4*>(sK + t * cfg::kQKStride + cfg::kDNope + (lane % kRopeChunks) * 8) =
            ((f.present >> (kNopeSlots + j)) & 1u) ? f.rope[j] : U32x4{0u, 0u, 0u, 0u};
    }
}
#endif

}  // namespace portable

extern "C" __global__ void __launch_bounds__(cfg::kThreads, cfg::kMinBlocksPerSM) mlajit_decode_main(const DecodeParams p)
{
    using namespace portable;
    wait_for_prerequisite_grid();     // nothing before it reads an argument
    release_dependent_grid_early(p);  // where the plan lets the combine start now
    extern __shared__ __align__(16) u8 smem[];
    u16* sQ = reinterpret_cast<u16*>(smem + cfg::kSmemQ);
    u16* sK = reinterpret_cast<u16*>(smem + cfg::kSmemK);
    float* sScores = reinterpret_cast<float*>(smem + cfg::kSmemScores);
    u16* sProbs = reinterpret_cast<u16*>(smem + cfg::kSmemProbs);
    float* sRowMax = reinterpret_cast<float*>(smem + cfg::kSmemRowMax);
    float* sRowSum = reinterpret_cast<float*>(smem + cfg::kSmemRowSum);
    float* sRowAlpha = reinterpret_cast<float*>(smem + cfg::kSmemRowAlpha);
    // token tables, double-buffered: [buffer][candidate]
    const u8** sTokenRow = reinterpret_cast<const u8**>(smem + cfg::kSmemTokenRow);
    const u8** sTokenScale = reinterpret_cast<const u8**>(smem + cfg::kSmemTokenScale);
    int* sTokenValid = reinterpret_cast<int*>(smem + cfg::kSmemTokenValid);

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    const int group = lane / 4, quad = lane % 4;  // mma fragment coordinates
    const CtaWork work = cta_work<cfg::kHeadsPerCta>(p);  // blockIdx.x: up to 2^31 - 1 rows
    const int row = work.row, head0 = work.head0, b = work.b, s = work.s, split = work.split;
    const TileRange range = work.range;
    const int tile_end = range.end;

    // Q rows of this head group (heads past h_q are zero; waited for before the
    // first barrier).
    stage_q_rows<cfg::kHeadsPerCta, cfg::kDQK, 16, cfg::kThreads>(
        p, work, tid, [sQ](int h, int c) { return smem_address(sQ + h * cfg::kQKStride + c * 8); });
    init_row_statistics(sRowMax, sRowSum);

    float acc_o[kMTiles][kVNTiles][4];
    zero_fragments(acc_o);


    // ldmatrix lane roles (see prelude.cu): A operands (Q, P) take rows lane % 16
    // at column half lane / 16; K (B of S) takes token lane % 8 at k-offset
    // 8 * (lane / 8); V (B of P V, transposed) takes token (lane & 7) + 8 * ((lane >> 3) & 1)
    // at dim offset 8 * (lane >> 4).
    const int a_row = lane % 16, a_col = (lane / 16) * 8;
    const int k_tok = lane % 8, k_col = (lane / 8) * 8;
    const int v_tok = (lane & 7) + ((lane >> 3) & 1) * 8, v_col = (lane >> 4) * 8;

    // The pipeline: slots are fetched two tiles ahead, bytes one tile ahead.
    auto live_after = [&](int t) { return next_live_tile(range, t + 1, p.topk); };
    auto slot_of = [&](int t) {
        return (t < tile_end && tid < cfg::kTile)
                   ? fetch_slot(p, b, s, t * cfg::kTile + tid, range)
                   : -1;
    };
    int tile = next_live_tile(range, range.begin, p.topk);
    int next = live_after(tile);
    int buf = 0;
    if (tile < tile_end) build_token_table(p, tile, slot_of(tile), sTokenRow, sTokenScale, sTokenValid);
    int next_slot = slot_of(next);
    copy_async_wait_all();  // Q's copies
    __syncthreads();  // barrier: Q, row statistics and the first token table ready
    TilePrefetch f;
    if (tile < tile_end) issue_tile_loads(f, sTokenRow, sTokenScale);

    while (tile < tile_end) {
        const int after_next = live_after(next);
        const int nbuf = buf ^ 1;
        // 1. the next tile's token table (its buffer's readers finished last iteration),
        //    and the slots of the tile after it
        if (next < tile_end)
            build_token_table(p, next, next_slot, sTokenRow + nbuf * cfg::kTile, sTokenScale + nbuf * cfg::kTile,
                              sTokenValid + nbuf * cfg::kTile);
        next_slot = slot_of(after_next);
        // 2. this tile's rows into sK (the previous tile's P V finished at the last barrier)
        store_tile(f, sTokenScale + buf * cfg::kTile, sK);
        __syncthreads();  // barrier: K tile and the next token table ready
        // 3. the next tile's loads fly while this tile's math runs (the rows of the
        //    tile after next prefetched into L2 as well gave DOTS3_SWA at 16 heads
        //    nothing: this loop, not the loads' latency, bounds it; bench/NOTES.md 1d)
        if (next < tile_end) issue_tile_loads(f, sTokenRow + nbuf * cfg::kTile, sTokenScale + nbuf * cfg::kTile);

        // 4. scores S = Q K^T, scaled to the log2 domain, -inf where skipped.
        const int* valid = sTokenValid + buf * cfg::kTile;
        for (int unit = warp; unit < kSUnits; unit += cfg::kWarps) {
            const int nt0 = (unit % kSNGroups) * kSNPerUnit, m0 = (unit / kSNGroups) * kSMTilesPerUnit;
            float acc_s[kSMTilesPerUnit][kSNPerUnit][4];  // independent mma chains
            zero_fragments(acc_s);
            const u32 k_addr = smem_address(sK + (nt0 * 8 + k_tok) * cfg::kQKStride + k_col);
            const u32 q_addr = smem_address(sQ + (m0 * 16 + a_row) * cfg::kQKStride + a_col);
#pragma unroll(kSKUnroll)
            for (int k = 0; k < cfg::kDQK / 16; k += 2) {
                u32 kf[kSNPerUnit][4];  // per n-tile: b0, b1 of k-step k, then of k + 1
#pragma unroll
                for (int n = 0; n < kSNPerUnit; n++)
                    ldmatrix_x4(kf[n], k_addr + (n * 8 * cfg::kQKStride + k * 16) * 2);
#pragma unroll
                for (int e = 0; e < 2; e++)
#pragma unroll
                    for (int m = 0; m < kSMTilesPerUnit; m++) {
                        u32 a[4];
                        ldmatrix_x4(a, q_addr + (m * 16 * cfg::kQKStride + (k + e) * 16) * 2);
#pragma unroll
                        for (int n = 0; n < kSNPerUnit; n++)
                            mma_bf16_16816(acc_s[m][n], a, kf[n][2 * e], kf[n][2 * e + 1]);
                    }
            }
#pragma unroll
            for (int n = 0; n < kSNPerUnit; n++) {
                const int t0 = (nt0 + n) * 8 + quad * 2;
                const bool v0 = valid[t0], v1 = valid[t0 + 1];
#pragma unroll
                for (int m = 0; m < kSMTilesPerUnit; m++) {
                    float* r0 = sScores + ((m0 + m) * 16 + group) * cfg::kScoreStride + t0;
                    float* r1 = r0 + 8 * cfg::kScoreStride;
                    r0[0] = v0 ? acc_s[m][n][0] * p.sm_scale_log2 : neg_inf();
                    r0[1] = v1 ? acc_s[m][n][1] * p.sm_scale_log2 : neg_inf();
                    r1[0] = v0 ? acc_s[m][n][2] * p.sm_scale_log2 : neg_inf();
                    r1[1] = v1 ? acc_s[m][n][3] * p.sm_scale_log2 : neg_inf();
                }
            }
        }
        __syncthreads();  // barrier: scores ready

        // 5. online softmax: kSoftmaxThreadsPerRow neighbouring lanes share a row.
        {
            int h = tid / kSoftmaxThreadsPerRow, part = tid % kSoftmaxThreadsPerRow;
            const float* srow = sScores + h * cfg::kScoreStride + part * kTokensPerSoftmaxThread;
            float sc[kTokensPerSoftmaxThread];
#pragma unroll
            for (int i = 0; i < kTokensPerSoftmaxThread; i++) sc[i] = srow[i];
            softmax_row_share<kTokensPerSoftmaxThread, kSoftmaxThreadsPerRow>(
                sc, part == 0, sProbs + h * cfg::kProbStride + part * kTokensPerSoftmaxThread, sRowMax + h,
                sRowSum + h, sRowAlpha + h);
        }
        __syncthreads();  // barrier: probabilities and row rescales ready

        // 6. O = O * alpha + P V over this warp's value dims.
#pragma unroll
        for (int m = 0; m < kMTiles; m++) {
            float a_lo = sRowAlpha[m * 16 + group], a_hi = sRowAlpha[m * 16 + group + 8];
#pragma unroll
            for (int n = 0; n < kVNTiles; n++) {
                acc_o[m][n][0] *= a_lo;
                acc_o[m][n][1] *= a_lo;
                acc_o[m][n][2] *= a_hi;
                acc_o[m][n][3] *= a_hi;
            }
        }
        const u32 p_addr = smem_address(sProbs + a_row * cfg::kProbStride + a_col);
        const u32 v_addr = smem_address(sK + v_tok * cfg::kQKStride + warp * kVDimsPerWarp + v_col);
#pragma unroll
        for (int kk = 0; kk < cfg::kTile / 16; kk++) {
            u32 a[kMTiles][4];
#pragma unroll
            for (int m = 0; m < kMTiles; m++)
                ldmatrix_x4(a[m], p_addr + (m * 16 * cfg::kProbStride + kk * 16) * 2);
#pragma unroll
            for (int n = 0; n < kVNTiles; n += 2) {
                u32 vf[4];  // b0, b1 of n-tile n, then of n + 1
                ldmatrix_x4_trans(vf, v_addr + (kk * 16 * cfg::kQKStride + n * 8) * 2);
#pragma unroll
                for (int m = 0; m < kMTiles; m++) {
                    mma_bf16_16816(acc_o[m][n], a[m], vf[0], vf[1]);
                    mma_bf16_16816(acc_o[m][n + 1], a[m], vf[2], vf[3]);
                }
            }
        }
        __syncthreads();  // barrier: sK, sProbs and this token table consumed
        tile = next;
        next = after_next;
        buf = nbuf;
    }

    // Epilogue: normalize; write the result, or this split's partial.
#pragma unroll
    for (int m = 0; m < kMTiles; m++) {
#pragma unroll
        for (int half = 0; half < 2; half++) {
            int hl = m * 16 + group + half * 8;
            int h = head0 + hl;
            if (h >= cfg::kHeads) continue;
            finish_row(
                p, split, row, b, s, h, warp * kVDimsPerWarp + quad * 2, sRowMax[hl], sRowSum[hl],
                warp == 0 && quad == 0,
                [&](float* dst, float inv) {
#pragma unroll
                    for (int n = 0; n < kVNTiles; n++) {
                        dst[n * 8] = acc_o[m][n][half * 2] * inv;
                        dst[n * 8 + 1] = acc_o[m][n][half * 2 + 1] * inv;
                    }
                },
                [&](u16* dst, float scale) {
#pragma unroll
                    for (int n = 0; n < kVNTiles; n++)
                        *reinterpret_cast<u32*>(dst + n * 8) =
                            pack_bf16x2(acc_o[m][n][half * 2] * scale, acc_o[m][n][half * 2 + 1] * scale);
                });
        }
    }
}
