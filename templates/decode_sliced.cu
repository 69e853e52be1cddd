// ---------------------------------------------------------------------------
// decode_sliced.cu: the dim-sliced sparse-MLA decode kernel (sm_80 and newer),
// for 16 or 32 heads per CTA, where reading the FP8 rows bounds the time.
//
// One CTA = (batch row x query token, head group of kHeadsPerCta, split), eight
// warps and no roles: every warp copies rows and does math. Warp w owns the 64-dim
// slice [64w, 64w + 64) of every candidate: a slice of the NoPE part, which is
// also V's slice w, plus 8 of the RoPE dims (S only). A lane takes its 16 bytes of
// the slice per candidate from the staged row into registers and dequantizes them
// there, and those registers are the B operand of both products:
//   S = Q K^T   mma m16n8k16 (heads x 8 candidates), the k order within the slice
//               permuted so that a lane's 16 contiguous dims are its B fragments
//               (Q's A fragments are read from shared memory in the same order);
//   O = P V     mma m16n8k16 (heads x 8 value dims), the same registers
//               transposed with movmatrix.
// No bf16 K or V tile goes through shared memory (the wgmma kernels move ~5 KB of
// operands per candidate through it); what does is the raw rows (~0.8 KB per
// candidate, written and read once), each warp's partial scores over its slice,
// P and the row statistics.
// Per tile of kTile candidates, two barriers:
//   A. partial scores: each warp's S over its slice -> sPart[warp]
//   B. softmax: thread (head, part) sums the slices; online softmax in the log2
//      domain, the row statistics in registers (RowState); P (bf16) -> sP, the
//      row rescale factors -> sRowAlpha
//   C. output: O = O * alpha + P V over the warp's own 64 value dims
// Pipeline: a tile's indices are read three tiles ahead, its rows located (token
// table) two tiles ahead and copied whole (cp.async) into a three-stage ring right
// after; no register holds a load in flight. Skipped candidates (index -1, out of
// range, past a length) are never read: zero operands and a -inf score.
// ---------------------------------------------------------------------------
namespace sliced {
using namespace gather;

constexpr int kSliceDims = 64;                                  // dims per warp
constexpr int kMTiles = cfg::kHeadsPerCta / 16;                 // mma row tiles of heads
constexpr int kGroups = cfg::kTile / 8;                         // mma n-tiles of 8 candidates
constexpr int kKSteps = kSliceDims / 16;                        // m16n8k16 steps over a slice
constexpr int kRopeDimsPerWarp = cfg::kDRope / cfg::kWarps;     // one m16n8k8 step
constexpr int kVNTiles = kSliceDims / 8;                        // output n-tiles per warp
constexpr int kPartStride = cfg::kScoreStride;                  // fp32, per head row of sPart
constexpr int kProbStride = cfg::kProbStride;                   // bf16, per head row of sP
constexpr int kQStride = cfg::kQKStride;                        // bf16, per head row of sQ
constexpr int kSoftmaxThreadsPerRow = cfg::kThreads / cfg::kHeadsPerCta;
constexpr int kCandsPerSoftmaxThread = cfg::kTile / kSoftmaxThreadsPerRow;
constexpr int kTableBuffers = 3;                                // tiles t, t + 1, t + 2
constexpr int kStages = cfg::kStagingStages;                    // tiles in the copy ring: t .. t + kStages - 1

static_assert(cfg::kThreads == 256 && cfg::kWarps == 8, "eight warps, one 64-dim slice each");
static_assert(cfg::kDV == cfg::kDNope && cfg::kDV == cfg::kWarps * kSliceDims,
              "V must be the NoPE part, one 64-dim slice per warp");
static_assert(cfg::kDQK - cfg::kDV == cfg::kDRope && kRopeDimsPerWarp == 8, "8 RoPE dims per warp (m16n8k8)");
static_assert(cfg::kScalesInline && cfg::kQuantTile % kSliceDims == 0 && cfg::kScaleFormat != 3,
              "one inline fp32 scale per slice");
static_assert(kStages == kTableBuffers, "tile t + 2's copies go to the stage of its token table");
static_assert(cfg::kHeadsPerCta == 16 || cfg::kHeadsPerCta == 32, "one or two mma row tiles");
static_assert(cfg::kTile % 16 == 0 && cfg::kTile <= 32, "tile: pairs of n-tiles, one token-table warp");
static_assert(kCandsPerSoftmaxThread % 2 == 0 && kSoftmaxThreadsPerRow <= 32, "softmax: pairs, one warp per row");
static_assert(kPartStride % 32 == 8 && kProbStride % 8 == 0, "conflict-free partial rows, 16-byte P rows");
static_assert(kQStride % 16 == 4, "Q rows 2 mod 8 words apart: a half-warp's 8-byte fragment reads hit 32 banks");
static_assert(cfg::kRopeOffset % 4 == 0 && cfg::kScaleOffset % 4 == 0, "aligned RoPE pairs and scales");

struct __align__(8) F32x2 { float x, y; };

// This lane's bytes of one candidate, read back from the staging ring.
struct LaneBytes {
    U32x4 nope;
    u32 rope;
    u32 scale_bits;
};

__device__ __forceinline__ u32 word_of(const U32x4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// 8x8 b16 transpose across the warp: lane (g, q) holds row g, columns 2q and 2q + 1.
__device__ __forceinline__ u32 transpose8x8(u32 a)
{
    u32 d;
    asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(a));
    return d;
}

// D = A(16x8, row) * B(8x8, col) + D; bf16 inputs, fp32 accumulate.
__device__ __forceinline__ void mma_bf16_1688(float (&d)[4], const u32 (&a)[2], u32 b)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b));
}

// Token table: warp 0's lane c locates candidate c from its raw index, loaded a
// tile earlier and checked only here, so the load's latency is not waited for
// where it is issued (one warp does the index loads and the address arithmetic:
// spread over all warps, each would issue the same instructions for a few lanes).
// Its mask (bit c: candidate c has a row) lets the softmax tell skipped candidates
// with one shared word instead of a pointer per candidate.
__device__ __forceinline__ void build_token_table(const DecodeParams& p, int tile, int raw_slot, const u8** table,
                                                  u32* live_mask)
{
    const int c = threadIdx.x, pos = tile * cfg::kTile + c;
    if (c < 32) {
        const u8* row = c < cfg::kTile ? locate_candidate(p, pos, checked_slot(p, pos, raw_slot)).row : nullptr;
        if (c < cfg::kTile) table[c] = row;
        const u32 live = __ballot_sync(0xffffffffu, row != nullptr);
        if (c == 0) *live_mask = live;
    }
}

// How a tile's codes become bf16 operands: the power-of-two fast path when every
// scale of the warp's tile allows it (one warp-uniform choice per tile, so the
// dequantization inside the math is straight-line code), else the fp32 product.
struct FastDequant { static constexpr bool value = true; };
struct ExactDequant { static constexpr bool value = false; };

// The staging ring: per stage, the tile's candidate rows as they are in the cache,
// kStageRowBytes apart (16 words mod 32: a quarter-warp's 16-byte reads of rows g,
// g + 1 at q = 0..3 hit 32 distinct banks). Warp w copies whole rows with cp.async
// (each instruction 512 contiguous bytes of one row: the fewest memory requests per
// byte), so a lane reads bytes other lanes copied: they wait for their copies
// before barrier B of the tile before, which publishes them.
constexpr int kStageRowBytes = cfg::kStageRowBytes;
constexpr int kRowsPerWarp = cfg::kTile / cfg::kWarps;
constexpr int kChunksPerRow = cfg::kRowBytes / 16;
static_assert(kStageRowBytes >= cfg::kRowBytes && kStageRowBytes % 128 == 64, "staged rows 16 words mod 32 apart");
static_assert(cfg::kRowBytes % 16 == 0 && cfg::kTile % cfg::kWarps == 0, "whole 16-byte chunks, rows split over warps");
static_assert(kStageRowBytes * cfg::kTile * kStages == cfg::kSmemStagingBytes, "the generator's staging size");

// Start warp w's copies of one tile into a stage (its shared address): rows
// kRowsPerWarp * w onwards, lane l taking 16-byte chunks l, l + 32, ... A skipped
// candidate is never read: the copy zero-fills its row (source size 0; `any_row`,
// a valid address, stands in for its own), whose zero scale then gives zero
// operands (see scale_factor). Shared addresses stay 32-bit and the global one is
// formed once per row: with generic pointers and a branch per chunk, the copies
// were a quarter of the loop's instructions (bench/NOTES.md).
__device__ __forceinline__ void issue_copies(u32 stage, const u8* const* table, const u8* any_row, int warp, int lane)
{
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; i++) {
        const int r = warp * kRowsPerWarp + i;
        const u8* row = table[r];
        const bool live = row != nullptr;
        const u8* src = (live ? row : any_row) + lane * 16;
        const u32 dst = stage + (u32)(r * kStageRowBytes + lane * 16);
#pragma unroll
        for (int k = 0; k * 32 < kChunksPerRow; k++)
            if (lane + 32 * k < kChunksPerRow) copy_async<16>(dst + (u32)(512 * k), src + 512 * k, live);
    }
}

// The fast path's bf16x2 factor of a slice's scale, 0 where it needs the exact
// product. A zero scale (a skipped candidate's zero-filled row; a row of zeros)
// takes the fast path too, with factor -0: every operand is then a zero, as the
// exact product gives (NaN codes stay NaN either way).
// fast_scale_bf16x2's rule for inline fp32 scales as selects, no jumps (the jumps
// were ~50 instructions per warp and tile): 2^-126 .. 2^7 take the fast path.
__device__ __forceinline__ u32 scale_factor(u32 scale_bits)
{
    static_assert(cfg::kScaleFormat == 1 || cfg::kScaleFormat == 2, "inline fp32 scales");
    const u32 exp_field = scale_bits >> 23;
    const bool fast = cfg::kScaleFormat == 1 && (scale_bits & 0x807fffffu) == 0u && exp_field - 1u < kFastMaxExponent;
    const u32 factor = ((exp_field + kFastFactorBias) << 7) * 0x10001u;
    return scale_bits == 0u ? 0x80008000u : fast ? factor : 0u;
}

}  // namespace sliced

extern "C" __global__ void __launch_bounds__(cfg::kThreads, cfg::kMinBlocksPerSM) mlajit_decode_main(const DecodeParams p)
{
    using namespace sliced;
    wait_for_prerequisite_grid();     // nothing before it reads an argument
    release_dependent_grid_early(p);  // where the plan lets the combine start now
    extern __shared__ __align__(16) u8 smem[];
    u16* sQ = reinterpret_cast<u16*>(smem + cfg::kSmemQ);                // [head][kQStride]
    float* sPart = reinterpret_cast<float*>(smem + cfg::kSmemScores);   // [warp][head][candidate]
    u16* sP = reinterpret_cast<u16*>(smem + cfg::kSmemProbs);            // [head][candidate]
    float* sRowMax = reinterpret_cast<float*>(smem + cfg::kSmemRowMax);
    float* sRowSum = reinterpret_cast<float*>(smem + cfg::kSmemRowSum);
    float* sRowAlpha = reinterpret_cast<float*>(smem + cfg::kSmemRowAlpha);
    const u8** sTable = reinterpret_cast<const u8**>(smem + cfg::kSmemTokenRow);  // [kTableBuffers][kTile]
    u32* sLiveMask = reinterpret_cast<u32*>(smem + cfg::kSmemTokenValid);          // [kTableBuffers]
    u8* sStages = smem + cfg::kSmemStaging;  // [kStages][kTile][kStageRowBytes]
    auto stage = [&](int buffer) { return sStages + buffer * cfg::kTile * kStageRowBytes; };
    const u32 stages_addr = smem_address(sStages);
    auto stage_addr = [&](int buffer) { return stages_addr + (u32)(buffer * cfg::kTile * kStageRowBytes); };
    const u8* any_row = p.kv;  // the zero-filled copies' stand-in source

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, q = lane % 4;  // mma fragment coordinates: row/candidate g, pair q
    const CtaWork work = cta_work<cfg::kHeadsPerCta>(p);
    const int row = work.row, head0 = work.head0, b = work.b, s = work.s, split = work.split;
    const TileRange range = work.range;
    const int tile_end = range.end;

    // Q's NoPE dims into shared memory (heads past h_q are zero; the copies join
    // the first tile's commit group, waited for before its barrier), and each
    // lane's RoPE A fragments, which stay in registers. The NoPE fragments are read
    // per tile (registers: 16 heads per CTA fit 128 with them in shared memory).
    stage_q_rows<cfg::kHeadsPerCta, cfg::kDV, 8, cfg::kThreads>(
        p, work, tid, [sQ](int h, int c) { return smem_address(sQ + h * kQStride + c * 4); });
    u32 qr[kMTiles][2];
#pragma unroll
    for (int m = 0; m < kMTiles; m++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int h = head0 + m * 16 + g + half * 8;
            qr[m][half] = h < cfg::kHeads ? *reinterpret_cast<const u32*>(p.q + b * p.q_stride_b + s * p.q_stride_s +
                                                                          h * p.q_stride_h + cfg::kDV +
                                                                          warp * kRopeDimsPerWarp + 2 * q)
                                          : 0u;
        }
    RowState row_state;  // the softmax thread's head row: running max, its share of the sum

    // O: n-tile n holds dims 64w + 16q + 2n, +1 (rows g and g + 8 of each row tile).
    float acc_o[kMTiles][kVNTiles][4];
    zero_fragments(acc_o);

    auto live_after = [&](int t) { return next_live_tile(range, t + 1, p.topk); };
    auto slot_of = [&](int t) {
        return t < tile_end && tid < cfg::kTile
                   ? load_slot(p, main_index_row(p, b, s), b, s, t * cfg::kTile + tid, range)
                   : -1;
    };
    auto table = [&](int buffer) { return sTable + buffer * cfg::kTile; };

    int tile = next_live_tile(range, range.begin, p.topk);
    int t1 = live_after(tile), t2 = live_after(t1), t3 = live_after(t2);
    if (tile < tile_end) build_token_table(p, tile, slot_of(tile), table(0), sLiveMask);
    if (t1 < tile_end) build_token_table(p, t1, slot_of(t1), table(1), sLiveMask + 1);
    int slot_t2 = slot_of(t2);  // raw index, checked when t2's table is built
    __syncthreads();  // barrier: the first two token tables and their masks ready
    // the copies of the first two tiles (a commit group per tile, empty or not, so
    // that "all but the newest group" is always the tile about to be used)
    if (tile < tile_end) issue_copies(stage_addr(0), table(0), any_row, warp, lane);
    copy_async_commit();
    if (t1 < tile_end) issue_copies(stage_addr(1), table(1), any_row, warp, lane);
    copy_async_commit();
    copy_async_wait<1>();  // Q's and the first tile's copies (t1's may still fly) ...
    __syncthreads();       // ... published

    const u32 p_addr = smem_address(sP + (lane % 16) * kProbStride + (lane / 16) * 8);
    int buf = 0;
    while (tile < tile_end) {
        const int t4 = live_after(t3);
        const int next_buf = buf + 1 == kTableBuffers ? 0 : buf + 1;
        const int last_buf = next_buf + 1 == kTableBuffers ? 0 : next_buf + 1;  // t2's table and stage
        // 1. the token table of t2 (its buffer's last reader was the previous tile's
        //    softmax, before its barrier B), and the slots of t3
        if (t2 < tile_end) build_token_table(p, t2, slot_t2, table(last_buf), sLiveMask + last_buf);
        slot_t2 = slot_of(t3);

        // 2. this tile's bytes, copied two tiles ago, into registers. Word i of the
        //    lane's 16 codes is the candidate's slice dims 16q + 4i .. 16q + 4i + 3;
        //    the scores dequantize it into kv[j][2i] and kv[j][2i + 1], which P V
        //    then reuses.
        LaneBytes cur[kGroups];
#pragma unroll
        for (int j = 0; j < kGroups; j++)
        {
            const u8* staged = stage(buf) + (8 * j + g) * kStageRowBytes;
            cur[j] = LaneBytes{*reinterpret_cast<const U32x4*>(staged + warp * kSliceDims + q * 16),
                               *reinterpret_cast<const u32*>(staged + cfg::kRopeOffset +
                                                             (warp * kRopeDimsPerWarp + 2 * q) * 2),
                               *reinterpret_cast<const u32*>(staged + cfg::kScaleOffset +
                                                             4 * (warp * kSliceDims / cfg::kQuantTile))};
        }
        u32 scale2[kGroups];  // fast-path factors, 0 where a scale needs the exact product
        bool lane_fast = true;
#pragma unroll
        for (int j = 0; j < kGroups; j++) {
            scale2[j] = scale_factor(cur[j].scale_bits);
            lane_fast = lane_fast && scale2[j] != 0u;
        }
        const bool fast = cfg::kScaleFormat != 2 && __all_sync(0xffffffffu, lane_fast);
        // code word t of n-tile j -> bf16 words (lo: dims 4t, 4t + 1 of the lane's 16; hi: 4t + 2, 4t + 3)
        u32 kv[kGroups][8];
        auto dequant_word = [&](auto how, int j, int t, u32& lo, u32& hi) {
            if constexpr (decltype(how)::value)
                dequant4_pow2(word_of(cur[j].nope, t), scale2[j], lo, hi);
            else
                dequant4_exact(word_of(cur[j].nope, t), scale_value(cur[j].scale_bits), lo, hi);
        };

        // A. this warp's partial scores over its slice. k-step t covers, for lane
        //    pair q, slice dims 16q + 4t .. 16q + 4t + 3: Q's words there (a0/a2 of
        //    row g, a1/a3 of row g + 8) and the candidate's code word t (b0, b1).
        auto partial_scores = [&](auto how) {
            float acc_s[kGroups][kMTiles][4];
#pragma unroll
            for (int j = 0; j < kGroups; j++)
#pragma unroll
                for (int m = 0; m < kMTiles; m++) {
#pragma unroll
                    for (int i = 0; i < 4; i++) acc_s[j][m][i] = 0.0f;
                    mma_bf16_1688(acc_s[j][m], qr[m], cur[j].rope);
                }
            const u16* q_lane = sQ + g * kQStride + warp * kSliceDims + q * 16;
#pragma unroll
            for (int t = 0; t < kKSteps; t++) {
                u32 a[kMTiles][4];
#pragma unroll
                for (int m = 0; m < kMTiles; m++) {
                    const U32x2 lo = *reinterpret_cast<const U32x2*>(q_lane + m * 16 * kQStride + 4 * t);
                    const U32x2 hi = *reinterpret_cast<const U32x2*>(q_lane + (m * 16 + 8) * kQStride + 4 * t);
                    a[m][0] = lo.x; a[m][1] = hi.x; a[m][2] = lo.y; a[m][3] = hi.y;
                }
#pragma unroll
                for (int j = 0; j < kGroups; j++) {
                    dequant_word(how, j, t, kv[j][2 * t], kv[j][2 * t + 1]);
#pragma unroll
                    for (int m = 0; m < kMTiles; m++) mma_bf16_16816(acc_s[j][m], a[m], kv[j][2 * t], kv[j][2 * t + 1]);
                }
            }
#pragma unroll
            for (int j = 0; j < kGroups; j++)
#pragma unroll
                for (int m = 0; m < kMTiles; m++) {
                    float* dst = sPart + (warp * cfg::kHeadsPerCta + m * 16 + g) * kPartStride + 8 * j + 2 * q;
                    *reinterpret_cast<F32x2*>(dst) = F32x2{acc_s[j][m][0], acc_s[j][m][1]};
                    *reinterpret_cast<F32x2*>(dst + 8 * kPartStride) = F32x2{acc_s[j][m][2], acc_s[j][m][3]};
                }
        };
        if (fast)
            partial_scores(FastDequant{});
        else
            partial_scores(ExactDequant{});
        __syncthreads();  // barrier A: every slice's partial scores and t2's token table ready
        // B. online softmax: kSoftmaxThreadsPerRow neighbouring lanes share a head row.
        {
            const int h = tid / kSoftmaxThreadsPerRow, c0 = (tid % kSoftmaxThreadsPerRow) * kCandsPerSoftmaxThread;
            const u32 live = sLiveMask[buf];
            float sc[kCandsPerSoftmaxThread];
#pragma unroll
            for (int i = 0; i < kCandsPerSoftmaxThread; i++) sc[i] = 0.0f;
#pragma unroll
            for (int w = 0; w < cfg::kWarps; w++)
#pragma unroll
                for (int i = 0; i < kCandsPerSoftmaxThread; i += 2) {
                    const F32x2 v = *reinterpret_cast<const F32x2*>(
                        sPart + (w * cfg::kHeadsPerCta + h) * kPartStride + c0 + i);
                    sc[i] += v.x;
                    sc[i + 1] += v.y;
                }
#pragma unroll
            for (int i = 0; i < kCandsPerSoftmaxThread; i++)
                sc[i] = (live >> (c0 + i)) & 1u ? sc[i] * p.sm_scale_log2 : neg_inf();
            softmax_row_step<kCandsPerSoftmaxThread, kSoftmaxThreadsPerRow>(
                sc, tid % kSoftmaxThreadsPerRow == 0, sP + h * kProbStride + c0, row_state, sRowAlpha + h);
        }
        // 3. the copies of t2 (its table published by barrier A), into the stage tile
        //    t - 1 used (read into registers by every warp before that barrier); after
        //    the softmax, whose chain then starts at the barrier
        if (t2 < tile_end) issue_copies(stage_addr(last_buf), table(last_buf), any_row, warp, lane);
        copy_async_commit();
        copy_async_wait<1>();  // this thread's copies of t1 (t2's may still fly) ...
        __syncthreads();       // barrier B: P, the row rescale factors and t1's staged rows ready

        // C. O = O * alpha + P V over this warp's slice. Word n of n-tile j is an 8x8
        //    block (candidate g, slice dims 16q + 2n, +1); its transpose gives lane
        //    (g, q) candidates 2q, 2q + 1 at dim 16(g/2) + 2n + g%2: the B fragment of
        //    output n-tile n, whose C fragment is then dims 16q + 2n, +1. The rescale
        //    is skipped while no row of the warp's heads has a new maximum.
#pragma unroll
        for (int m = 0; m < kMTiles; m++) {
            const float a_lo = sRowAlpha[m * 16 + g], a_hi = sRowAlpha[m * 16 + g + 8];
            if (__any_sync(0xffffffffu, a_lo != 1.0f || a_hi != 1.0f)) {
#pragma unroll
                for (int n = 0; n < kVNTiles; n++) {
                    acc_o[m][n][0] *= a_lo;
                    acc_o[m][n][1] *= a_lo;
                    acc_o[m][n][2] *= a_hi;
                    acc_o[m][n][3] *= a_hi;
                }
            }
        }
#pragma unroll
        for (int kk = 0; kk < kGroups / 2; kk++) {
            u32 pa[kMTiles][4];
#pragma unroll
            for (int m = 0; m < kMTiles; m++) ldmatrix_x4(pa[m], p_addr + (m * 16 * kProbStride + kk * 16) * 2);
#pragma unroll
            for (int n = 0; n < kVNTiles; n++) {
                const u32 b0 = transpose8x8(kv[2 * kk][n]), b1 = transpose8x8(kv[2 * kk + 1][n]);
#pragma unroll
                for (int m = 0; m < kMTiles; m++) mma_bf16_16816(acc_o[m][n], pa[m], b0, b1);
            }
        }
        // sP, sPart and this tile's token table are next written after the next
        // tile's barrier A, which every warp reaches only after this P V.
        tile = t1;
        t1 = t2;
        t2 = t3;
        t3 = t4;
        buf = next_buf;
    }
    finish_row_statistics<kSoftmaxThreadsPerRow>(row_state, tid % kSoftmaxThreadsPerRow == 0,
                                                 sRowMax + tid / kSoftmaxThreadsPerRow,
                                                 sRowSum + tid / kSoftmaxThreadsPerRow);
    __syncthreads();  // the row statistics ready for every warp's epilogue

    // Epilogue: normalize; write the result, or this split's partial. Lane (g, q)
    // holds dims 64w + 16q .. 64w + 16q + 15 of heads g and g + 8 of each row tile.
#pragma unroll
    for (int m = 0; m < kMTiles; m++) {
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int hl = m * 16 + g + half * 8;
            const int h = head0 + hl;
            if (h >= cfg::kHeads) continue;
            finish_row(
                p, split, row, b, s, h, warp * kSliceDims + q * 16, sRowMax[hl], sRowSum[hl], warp == 0 && q == 0,
                [&](float* dst, float inv) {
#pragma unroll
                    for (int n = 0; n < kVNTiles; n += 2)
                        *reinterpret_cast<F32x4*>(dst + 2 * n) =
                            F32x4{acc_o[m][n][half * 2] * inv, acc_o[m][n][half * 2 + 1] * inv,
                                  acc_o[m][n + 1][half * 2] * inv, acc_o[m][n + 1][half * 2 + 1] * inv};
                },
                [&](u16* dst, float scale) {
#pragma unroll
                    for (int n = 0; n < kVNTiles; n++)
                        *reinterpret_cast<u32*>(dst + 2 * n) =
                            pack_bf16x2(acc_o[m][n][half * 2] * scale, acc_o[m][n][half * 2 + 1] * scale);
                });
        }
    }
}
