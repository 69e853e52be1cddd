// ---------------------------------------------------------------------------
// decode_sm90_scores.cu: sm90-narrow-scores, the narrow kernel (S^T = K Q^T and
// O^T = V^T P^T, the candidates wgmma's M, at most kHeadsN heads its N) with the
// scores computed by the warp groups that gather. sm90-narrow's producers
// dequantize a tile into a bf16 K buffer that its consumer then reads back as S^T's
// A operand: per 64-candidate tile 74 KB stored and 74 KB read again, on the
// shared-memory path that bounds that kernel at 8-32 heads (bench/HISTORY.md, "The
// ring kernel taken apart"). Here a gathering group keeps its dequantized rows in
// registers and issues S^T's wgmmas with A from registers; only V (the first kDV
// dims) is stored, for P V. Per tile that moves ~225 KB through shared memory
// instead of ~312 (at 8 heads).
//
// One CTA = one (batch row x query token, head group, split): 512 threads.
//   value group (warp group 0): per tile, O^T = O^T * alpha + V^T P^T (wgmma
//     m64nNk16, A: the tile's V buffer, MN-major; B: P), then the epilogue as
//     sm90-narrow's (O^T staged as head rows over the V buffers).
//   score groups (warp groups 1 and 2): the walk's tiles alternately (tile w of the
//     walk is group w % 2's, in its ring slot and V and P buffers). Per 64-dim
//     block (in block_taken's order), it reads its two candidates' codes one block ahead,
//     dequantizes them into the A fragments of four k-steps, stores the V part and
//     issues the k-steps' wgmmas (kBlocksInFlight blocks in flight). Then the
//     tile's column maxima, the running maximum handed on from the group that took
//     the tile before, P to shared memory, and its share of the column sums.
//   copier (warp group 3, 40 registers): warps 0-1 fill group 0's ring slot, warps
//     2-3 group 1's, a row per lane, with the rows' flags. Each row comes in two
//     bulk copies, the slot's two parts (below), each copied as soon as the group
//     has read that part of its tile before. Issuing the copies took 14-17% of the
//     score groups' samples when they issued their own, and the value group was too
//     late to refill the slots (bench/HISTORY.md, "sm90-narrow-scores").
// The ring slot's parts: part 0 is a row's bytes from kPart1Bytes on (the RoPE
//   block, the scales and the codes of the blocks from kPart1Blocks on), part 1 its
//   first kPart1Bytes (the codes of the first kPart1Blocks blocks). A group takes
//   the blocks in that order, so part 0 of its next tile is on its way while it
//   still works on part 1: with one slot per group, a whole-slot refill started
//   only after a tile's last read, and the groups waited for the rows 32% of their
//   time (bench/HISTORY.md, "What bounds sm90-narrow-scores"). Measured: 1-1.6%
//   on the longest walks, a tie elsewhere (HISTORY, "the ring slot in two parts"):
//   the bound is the bytes in flight, which only more slots raise.
// A-fragment layout: lane (g, q) of warp w holds rows (candidates) 16 w + g and
// 16 w + g + 8, k-indices 2q, 2q + 1, 2q + 8, 2q + 9 of each k-step. The k order
// is a permutation of the block's 64 dims chosen so that a lane's four dims of
// k-step s are dims 16 q + 4 s .. + 3 of the block: its 16 contiguous codes per
// block and candidate dequantize into exactly its fragments, and Q is staged in
// the same order (the contraction does not care about the order of its dims).
// The running maximum: tile w's group reads the maximum through tile w - 1 (the
// other group's), takes the max with its tile's and publishes it (two slots by
// the walk's parity); the value group rescales O^T by the change. Each score group
// keeps its column sums in the frame of its own last maximum; the value group
// brings both to the final maximum at the end.
//
// Named barriers (ids past 0, which __syncthreads uses):
//   kBarColumns + x      group x's four warps' column maxima of its tile are in
//                        shared memory (group x only)
//   kBarMaxPublished + x group x published the running maximum through its tile
//                        (x arrives; the other group waits)
//   kBarPReady + x       group x's P and V of its tile are in shared memory and
//                        fenced (x arrives; the value group waits)
//   kBarVEmpty + x       the value group has finished reading group x's V and P
//                        (it arrives; x waits before it stores its next tile)
//   kBarQReady           Q is staged and fenced (the value group arrives)
//   kBarStats            the score groups' column sums and last maxima are in
//                        shared memory (they arrive; the value group waits)
//   kBarStaged           O^T is staged as head rows (value group only)
//   kBarScalesChecked + x  group x's tile takes the fast path for every candidate
//                        (a barrier reduction: one path for the whole group)
// mbarriers, per score group x and slot part: full (the part of the group's tile has
// landed: 64 arrivals, one per row, with the bytes of its copy) and empty (group x's
// 128 threads have read the part: the copier may refill it).
// ---------------------------------------------------------------------------
namespace sm90 {

// ---- tile configuration ----
constexpr int kHeadsN = cfg::kHeadsPerCta;            // wgmma N of S^T and O^T
constexpr int kQBlockBytes = kHeadsN * 128;           // Q: a 64-dim block of kHeadsN rows
constexpr int kVBlocks = cfg::kDV / 64;               // wgmma M blocks of O^T; V's blocks
constexpr int kNopeBlocks = cfg::kDNope / 64;         // blocks of fp8 codes (the rest is RoPE, bf16)
constexpr int kAccS = kHeadsN / 2;                    // S^T (64 x kHeadsN) fp32 per thread
constexpr int kColsPerThread = kHeadsN / 4;           // heads (columns) a thread's fragments hold
constexpr int kScoreGroups = 2;
constexpr int kCtaThreads = (2 + kScoreGroups) * kWarpGroupThreads;  // value, score groups, copier
constexpr int kRoleThreads = (1 + kScoreGroups) * kWarpGroupThreads;  // the value and score groups
constexpr int kPairThreads = 2 * kWarpGroupThreads;   // barriers between two groups
constexpr int kVBufferBytes = kVBlocks * kBlockBytes;
constexpr int kPBytes = kHeadsN * 128;                // P: kHeadsN rows of 64 candidates (bf16)
constexpr int kSlotBytes = kTile * cfg::kRowBytes;    // a group's ring slot: its tile's rows
// S^T's wgmma groups (one block's k-steps each) in flight: three, with each block's
// codes read one block ahead, were 7% faster than two; four lost 5% (bench/NOTES.md).
constexpr int kBlocksInFlight = 3;
// setmaxnreg: 512 threads start at 128. The value group holds O^T (kVBlocks x
// kHeadsN / 2) and little else; a score group kBlocksInFlight blocks of A fragments
// (16 registers each), two blocks' codes, S^T and its sums; the copier an index and
// an address per lane.
constexpr int kValueRegisters = 104, kScoreRegisters = 184, kCopierRegisters = 40;
constexpr int kLaunchRegisters = (65536 / kCtaThreads) & ~7;
static_assert(kValueRegisters + kScoreGroups * kScoreRegisters + kCopierRegisters <= (2 + kScoreGroups) * kLaunchRegisters,
              "setmaxnreg: the increase must be covered by the decreases");
enum Role { kValueGroup = 0, kFirstScoreGroup = 1, kCopierGroup = 1 + kScoreGroups };
enum NamedBarrier {
    kBarColumns = 1, kBarMaxPublished = 3, kBarPReady = 5, kBarVEmpty = 7, kBarQReady = 9, kBarStats = 10,
    kBarStaged = 11, kBarScalesChecked = 12, kBarEnd = kBarScalesChecked + kScoreGroups
};
static_assert(kBarColumns + kScoreGroups <= kBarMaxPublished && kBarMaxPublished + kScoreGroups <= kBarPReady &&
                  kBarPReady + kScoreGroups <= kBarVEmpty && kBarVEmpty + kScoreGroups <= kBarQReady,
              "an id per score group");
static_assert(kBarEnd <= kHardwareNamedBarriers, "more named barriers than a CTA has");
// The ring slot's two parts (see the top): part 1 holds the codes of the first
// kPart1Blocks blocks, the row's first bytes; part 0 the rest of the row.
constexpr int kRingParts = 2;
constexpr int kRopeBlocks = kKBlocks - kNopeBlocks;
constexpr int kPart1Blocks = kNopeBlocks / 2;
constexpr int kPart1Bytes = 64 * kPart1Blocks;
constexpr int kPart0Steps = kKBlocks - kPart1Blocks;  // the blocks taken from part 0
// The block a group takes i-th: the RoPE blocks, part 0's NoPE blocks, then part 1's.
__host__ __device__ constexpr int block_taken(int i)
{
    return i < kRopeBlocks ? kNopeBlocks + i : i < kPart0Steps ? kPart1Blocks + i - kRopeBlocks : i - kPart0Steps;
}
// The first step that stores V: where a group waits for its V buffer.
__host__ __device__ constexpr int first_value_step()
{
    int i = 0;
    while (i < kKBlocks && block_taken(i) >= kVBlocks) i++;
    return i;
}
static_assert(first_value_step() < kKBlocks, "a tile stores V");

static_assert(cfg::kThreads == kCtaThreads, "the generator's thread count must match the roles");
static_assert(kHeadsN == 8 || kHeadsN == 16, "wgmma N: a head group of 8 or 16 heads");
static_assert(cfg::kScalesInline && cfg::kScaleFormat != 2 && cfg::kQuantTile % 64 == 0,
              "inline power-of-two scales (V32's rows): the ring, one scale per 64-dim block");
static_assert(cfg::kClusterCtas == 1, "no CTA pair");
static_assert(cfg::kScaleOffset >= kPart1Bytes && cfg::kRopeOffset >= kPart1Bytes && kPart1Bytes % 16 == 0 &&
                  kPart1Blocks >= 1,
              "the ring's parts: part 1 is codes only, both parts 16-byte multiples");
static_assert(cfg::kSmemStagingBytes == kScoreGroups * kSlotBytes && cfg::kSmemStaging % 16 == 0 &&
                  cfg::kRowBytes % 16 == 0,
              "the ring: a tile of whole rows per score group, bulk copies 16-byte aligned");
static_assert(cfg::kSmemK % 1024 == 0 && cfg::kSmemQ % 1024 == 0 && cfg::kSmemProbs % 1024 == 0,
              "swizzled operands start on 1024-byte boundaries");
static_assert(kHeadsN * kHeadRowStride * 4 + 2 * kHeadsN * 4 <= kScoreGroups * kVBufferBytes,
              "the staged output and the statistics fit in the V buffers");

// ---- wgmma with N = kHeadsN ----

// S^T: D(64 x kHeadsN) (+)= A(64 x 16, registers) * B(16 x kHeadsN, shared memory,
// K-major); bf16 in, fp32 accumulate; scale_d = 0 overwrites D.
__device__ __forceinline__ void wgmma_scores(float (&d)[kAccS], const u32 (&a)[4], u64 desc_b, int scale_d)
{
    if constexpr (kHeadsN == 8) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"
                     : MLAJIT_ACC4(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
    } else {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
                     : MLAJIT_ACC8(d, 0)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
    }
}

// Where dims (d, d + 1) of a 64-dim block go in Q's row (bytes): the k order of
// the A fragments (d = 16 q + 4 s + j: k-step s, k-index 2 q + j, or 2 q + 8 + j - 2).
__device__ __forceinline__ u32 q_pair_column(int d)
{
    const int q = d / 16, s = (d % 16) / 4, j = d % 4;
    return (u32)(16 * s + 2 * q + (j >= 2 ? 8 : 0));  // an even column: (d, d + 1) stay together
}

// The ring row of tile row r (warp w's rows 16 w + g and + 8): rows g and g + 1 of
// a quarter-warp's 16-byte reads sit 4 rows (64 bytes mod 128) apart, so the eight
// lanes of each phase hit distinct banks (rows are 656 = 16 mod 128 bytes apart).
__device__ __forceinline__ int ring_row(int r)
{
    const int g = r % 8;
    return (r & ~7) + (g >> 1) + 4 * (g & 1);
}

}  // namespace sm90

extern "C" __global__ void __launch_bounds__(sm90::kCtaThreads, 1) mlajit_decode_main(const DecodeParams p)
{
    using namespace sm90;
    wait_for_prerequisite_grid();
    release_dependent_grid_early(p);
    extern __shared__ __align__(1024) u8 smem_raw[];
    u8* smem = reinterpret_cast<u8*>((reinterpret_cast<u64>(smem_raw) + 1023) & ~(u64)1023);
    const u32 sQ = smem_address(smem + cfg::kSmemQ);      // kKBlocks blocks of kHeadsN rows x 128 bytes, k-permuted
    const u32 sV = smem_address(smem + cfg::kSmemK);      // group x's V buffer at sV + x * kVBufferBytes
    const u32 sP = smem_address(smem + cfg::kSmemProbs);  // group x's P at sP + x * kPBytes
    // floats: [2 groups][4 warps][kHeadsN] column maxima; [2 parities][kHeadsN] running
    // maxima; [2 groups][4 warps][kHeadsN] column sums; [2 groups][kHeadsN] last maxima
    const u32 sColumns = smem_address(smem + cfg::kSmemScores);
    const u32 sMax = sColumns + 4 * (2 * 4 * kHeadsN);
    const u32 sSums = sMax + 4 * (2 * kHeadsN);
    const u32 sLast = sSums + 4 * (2 * 4 * kHeadsN);
    const u32 sRing = smem_address(smem + cfg::kSmemStaging);       // [2 groups][64 rows]
    // mbarriers [2 groups][2 parts]: the parts' full barriers, then their empty ones
    const u32 sRingFull = smem_address(smem + cfg::kSmemBarriers);
    const u32 sRingEmpty = sRingFull + 8 * kScoreGroups * kRingParts;
    auto ring_full = [&](int x, int part) { return sRingFull + 8 * (u32)(x * kRingParts + part); };
    auto ring_empty = [&](int x, int part) { return sRingEmpty + 8 * (u32)(x * kRingParts + part); };
    u8* const sValid = smem + cfg::kSmemTokenValid;                 // [2 slots][kTile] flags: the row is live
    const u32 sRowMax = sV + kHeadsN * kHeadRowStride * 4, sRowSum = sRowMax + 4 * kHeadsN;  // after the walk

    const int tid = threadIdx.x;
    const int group = tid / kWarpGroupThreads;
    const int warp = (tid / 32) % 4, lane = tid % 32;
    const int g = lane / 4, q = lane % 4;
    auto head_of = [&](int c) { return narrow_head_of(c, q); };
    const CtaWork work = cta_work<kHeadsN>(p);
    const int row = work.row, b = work.b, s = work.s, split = work.split;
    const TileRange range = work.range;
    auto live_after = [&](int t) { return next_live_tile(range, t + 1, p.topk); };
    const int first = next_live_tile(range, range.begin, p.topk);
    if (tid == 0)
        for (int x = 0; x < kScoreGroups; x++)
            for (int part = 0; part < kRingParts; part++) {
                mbarrier_init(ring_full(x, part), kTile);
                mbarrier_init(ring_empty(x, part), kWarpGroupThreads);
            }
    fence_mbarrier_init();
    __syncthreads();

    if (group == kCopierGroup) {
        // The copier: warps 2 x and 2 x + 1 fill group x's slot, lane l row 32 (warp % 2)
        // + l of each tile, each part as soon as the group has read it.
        registers_set<kCopierRegisters, kLaunchRegisters>();
        const int x = warp / 2;
        const int copy_row = 32 * (warp % 2) + lane;
        const u32 dst = sRing + (u32)(x * kSlotBytes + ring_row(copy_row) * cfg::kRowBytes);
        const int* const indices = main_index_row(p, b, s);
        auto index_of = [&](int tile) {
            return tile < range.end ? load_slot(p, indices, b, s, tile * kTile + copy_row, range) : -1;
        };
        int tile = x == 0 ? first : live_after(first);  // the group's tiles: every other one of the walk
        int raw = index_of(tile);
        for (int k = 0; tile < range.end; k++) {
            const int next = live_after(live_after(tile));
            const int raw_next = index_of(next);  // a tile ahead: its latency hides behind this tile's waits
            const int pos = tile * kTile + copy_row;
            const Candidate c = locate_candidate(p, pos, checked_slot(p, pos, raw));
            if (k >= 1) mbarrier_wait(ring_empty(x, 0), (u32)(k - 1) & 1u);
            sValid[x * kTile + copy_row] = c.row != nullptr;  // read after part 0's full barrier
            if (c.row) {
                mbarrier_arrive_expect_tx(ring_full(x, 0), cfg::kRowBytes - kPart1Bytes);
                copy_global_to_shared(dst + kPart1Bytes, c.row + kPart1Bytes, cfg::kRowBytes - kPart1Bytes, ring_full(x, 0));
            } else {
                mbarrier_arrive(ring_full(x, 0));
            }
            if (k >= 1) mbarrier_wait(ring_empty(x, 1), (u32)(k - 1) & 1u);
            if (c.row) {
                mbarrier_arrive_expect_tx(ring_full(x, 1), kPart1Bytes);
                copy_global_to_shared(dst, c.row, kPart1Bytes, ring_full(x, 1));
            } else {
                mbarrier_arrive(ring_full(x, 1));
            }
            tile = next;
            raw = raw_next;
        }
        return;
    }

    if (group >= kFirstScoreGroup) {
        registers_set<kScoreRegisters, kLaunchRegisters>();
        const int x = group - kFirstScoreGroup, other = x ^ 1;
        const int row_a = 16 * warp + g, row_b = row_a + 8;  // this thread's candidates (S^T rows)
        const u32 slot = sRing + (u32)(x * kSlotBytes);
        const u32 vbuf = sV + (u32)(x * kVBufferBytes), pbuf = sP + (u32)(x * kPBytes);
        const u32 cand_a = slot + (u32)(ring_row(row_a) * cfg::kRowBytes);
        const u32 cand_b = slot + (u32)(ring_row(row_b) * cfg::kRowBytes);
        const u8* const valid = sValid + x * kTile;  // the copier's flags for the slot's tile
        int t = x == 0 ? first : live_after(first);        // the group's tile (walk index w)
        int t_next = live_after(live_after(t));            // its next one (w + 2)
        float col_sum[kColsPerThread], last_max[kColsPerThread];  // in the frame of the group's last maximum
#pragma unroll
        for (int c = 0; c < kColsPerThread; c++) {
            col_sum[c] = 0.0f;
            last_max[c] = neg_inf();
        }
        const u64 q_desc = smem_descriptor(sQ, 0, 1024);
        named_barrier_sync(kBarQReady, kRoleThreads);
        for (int w = x, k = 0; t < range.end; w += 2, k++) {
            const bool has_after = live_after(t) < range.end;  // walk index w + 1 exists
            mbarrier_wait(ring_full(x, 0), (u32)k & 1u);
            const bool live_a = valid[row_a] != 0, live_b = valid[row_b] != 0;
            // The candidates' scales: the fast path's factors (0 for a skipped
            // candidate: its stale codes become zeros), or the exact product.
            const U32x4 sa4 = load_shared16(cand_a + cfg::kScaleOffset), sb4 = load_shared16(cand_b + cfg::kScaleOffset);
            const u32 sa[4] = {sa4.x, sa4.y, sa4.z, sa4.w}, sb[4] = {sb4.x, sb4.y, sb4.z, sb4.w};
            u32 fa[4], fb[4];
            bool fast_a = true, fast_b = true;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                fa[i] = live_a ? fast_scale_bf16x2(sa[i]) : 0u;
                fb[i] = live_b ? fast_scale_bf16x2(sb[i]) : 0u;
                fast_a = fast_a && (fa[i] != 0u || !live_a);
                fast_b = fast_b && (fb[i] != 0u || !live_b);
            }
            // One path for the whole group's tile: a branch per block (taken per
            // lane) cost 14% (bench/NOTES.md); the exact product only where a
            // candidate of the tile has a scale the fast path cannot take.
            const bool tile_fast = named_barrier_and(kBarScalesChecked + x, kWarpGroupThreads, fast_a && fast_b);
            float acc_s[kAccS];
#pragma unroll
            for (int i = 0; i < kAccS; i++) acc_s[i] = 0.0f;
            fence_operands(acc_s);
            // A block's codes (NoPE: 16 bytes per candidate; RoPE: 32, bf16), read one
            // block ahead of their dequantization, in block_taken's order: the RoPE
            // block first (its products need no V store, so the wait for the V buffer
            // comes a block later), then part 0's NoPE blocks, then part 1's.
            struct BlockCodes {
                U32x4 a0, a1, b0, b1;
            };
            auto read_block = [&](int kb, BlockCodes& c) {
                if (kb < kNopeBlocks) {
                    c.a0 = load_shared16(cand_a + (u32)(64 * kb + 16 * q));
                    c.b0 = load_shared16(cand_b + (u32)(64 * kb + 16 * q));
                } else {
                    const u32 at = (u32)(cfg::kRopeOffset + 2 * (64 * (kb - kNopeBlocks) + 16 * q));
                    c.a0 = load_shared16(cand_a + at);
                    c.a1 = load_shared16(cand_a + at + 16);
                    c.b0 = load_shared16(cand_b + at);
                    c.b1 = load_shared16(cand_b + at + 16);
                }
            };
            auto products = [&](auto dequant) {
                BlockCodes codes[2];
                read_block(block_taken(0), codes[0]);
#pragma unroll
                for (int i = 0; i < kKBlocks; i++) {
                    const int kb = block_taken(i);
                    const BlockCodes& now = codes[i & 1];
                    if (i + 1 == kPart0Steps) mbarrier_wait(ring_full(x, 1), (u32)k & 1u);
                    if (i + 1 < kKBlocks) read_block(block_taken(i + 1), codes[(i + 1) & 1]);
                    if ((i + 1 == kPart0Steps - 1 || i + 1 == kKBlocks - 1) && t_next < range.end) {
                        // A part's last reads are issued: the copier may refill it.
                        fence_smem_for_async_proxy();
                        mbarrier_arrive(ring_empty(x, i + 1 == kKBlocks - 1 ? 1 : 0));
                    }
                    u32 wa[8], wb[8];  // dims 16 q .. 16 q + 15 of block kb, candidates a and b
                    if (kb < kNopeBlocks) {
                        const int scale = 64 * kb / cfg::kQuantTile;
                        dequant(now.a0, fast_a, fa[scale], sa[scale], wa);
                        dequant(now.b0, fast_b, fb[scale], sb[scale], wb);
                        if (kb < kVBlocks) {
                            if (i == first_value_step() && w >= 2) named_barrier_sync(kBarVEmpty + x, kPairThreads);  // V, P of tile w - 2 read
                            const u32 block = vbuf + (u32)(kb * kBlockBytes);
                            store_shared16(block + swizzled(row_a, 2 * q), U32x4{wa[0], wa[1], wa[2], wa[3]});
                            store_shared16(block + swizzled(row_a, 2 * q + 1), U32x4{wa[4], wa[5], wa[6], wa[7]});
                            store_shared16(block + swizzled(row_b, 2 * q), U32x4{wb[0], wb[1], wb[2], wb[3]});
                            store_shared16(block + swizzled(row_b, 2 * q + 1), U32x4{wb[4], wb[5], wb[6], wb[7]});
                        }
                    } else {
                        const U32x4 a0 = now.a0, a1 = now.a1, b0 = now.b0, b1 = now.b1;
                        wa[0] = a0.x; wa[1] = a0.y; wa[2] = a0.z; wa[3] = a0.w; wa[4] = a1.x; wa[5] = a1.y; wa[6] = a1.z; wa[7] = a1.w;
                        wb[0] = b0.x; wb[1] = b0.y; wb[2] = b0.z; wb[3] = b0.w; wb[4] = b1.x; wb[5] = b1.y; wb[6] = b1.z; wb[7] = b1.w;
                    }
                    wgmma_fence();
#pragma unroll
                    for (int st = 0; st < kKSteps; st++) {
                        const u32 a[4] = {wa[2 * st], wb[2 * st], wa[2 * st + 1], wb[2 * st + 1]};
                        wgmma_scores(acc_s, a, descriptor_plus(q_desc, (u32)(kb * kQBlockBytes + st * 32)), i | st);
                    }
                    wgmma_commit();
                    if (i < kKBlocks - 1) wgmma_wait<kBlocksInFlight - 1>();
                }
            };
            if (tile_fast)
                products([](const U32x4& c, bool, u32 factor, u32, u32 (&out)[8]) { dequant16_pow2(c, factor, out); });
            else
                products([](const U32x4& c, bool fast, u32 factor, u32 bits, u32 (&out)[8]) {
                    if (fast)
                        dequant16_pow2(c, factor, out);
                    else
                        dequant16_exact(c, scale_value(bits), out);
                });
            fence_smem_for_async_proxy();  // the V stores, for the value group's wgmma
            wgmma_wait<0>();
            fence_operands(acc_s);

            // log2 domain, -inf where the candidate is skipped; each column's maximum
            // over the thread's two rows, the warp's eight row groups, then the warps.
            const u32 columns = sColumns + 4 * (u32)(x * 4 * kHeadsN);
            scale_scores_and_store_column_maxima<kHeadsN>(acc_s, live_a, live_b, p.sm_scale_log2, columns, warp, lane);
            named_barrier_sync(kBarColumns + x, kWarpGroupThreads);
            float tile_max[kColsPerThread];
#pragma unroll
            for (int c = 0; c < kColsPerThread; c++) {
                tile_max[c] = tile_column_max<kHeadsN>(columns, head_of(c));
            }
            // The running maximum through tile w - 1 (the other group's), then through w.
            if (w >= 1) named_barrier_sync(kBarMaxPublished + other, kPairThreads);
            const u32 max_prev = sMax + 4 * (u32)(((w + 1) & 1) * kHeadsN), max_now = sMax + 4 * (u32)((w & 1) * kHeadsN);
#pragma unroll
            for (int c = 0; c < kColsPerThread; c++) {
                const float prev = w >= 1 ? load_shared_f32(max_prev + 4 * head_of(c)) : neg_inf();
                const float new_max = fmaxf(prev, tile_max[c]);
                if (warp == 0 && g == 0) st_shared_f32(max_now + 4 * head_of(c), new_max);
                const bool empty = new_max == neg_inf();  // nothing valid yet: no -inf - -inf
                float& x0 = acc_s[4 * (c / 2) + c % 2];
                float& x1 = acc_s[4 * (c / 2) + 2 + c % 2];
                x0 = empty ? 0.0f : fast_exp2(x0 - new_max);
                x1 = empty ? 0.0f : fast_exp2(x1 - new_max);
                col_sum[c] = col_sum[c] * (empty ? 1.0f : fast_exp2(last_max[c] - new_max)) + (x0 + x1);
                last_max[c] = new_max;
            }
            if (has_after) named_barrier_arrive(kBarMaxPublished + x, kPairThreads);
            store_probabilities<kHeadsN>(pbuf, acc_s, row_a, lane);
            fence_smem_for_async_proxy();
            named_barrier_arrive(kBarPReady + x, kPairThreads);

            t = t_next;
            t_next = live_after(live_after(t));
        }
        // The group's column sums over its rows, then its warps, with its last maxima.
#pragma unroll
        for (int c = 0; c < kColsPerThread; c++) {
            const float sum = warp_sum_xor(col_sum[c], 32, 4);
            if (g == 0) st_shared_f32(sSums + 4 * (u32)((x * 4 + warp) * kHeadsN + head_of(c)), sum);
            if (warp == 0 && g == 0) st_shared_f32(sLast + 4 * (u32)(x * kHeadsN + head_of(c)), last_max[c]);
        }
        named_barrier_arrive(kBarStats, kRoleThreads);
        return;
    }

    // The value group.
    registers_set<kValueRegisters, kLaunchRegisters>();
    // Q: dims in the A fragments' k order, heads past h_q zero.
    {
        // Every load first (one memory round trip), then the stores.
        constexpr int kPairs = cfg::kDQK / 2, kPerThread = kHeadsN * kPairs / kWarpGroupThreads;
        static_assert(kHeadsN * kPairs % kWarpGroupThreads == 0, "Q's pairs split evenly");
        u32 v[kPerThread];
#pragma unroll
        for (int k = 0; k < kPerThread; k++) {
            const int i = tid + k * kWarpGroupThreads, h = i / kPairs, d = 2 * (i % kPairs), head = work.head0 + h;
            v[k] = head < cfg::kHeads
                       ? *reinterpret_cast<const u32*>(p.q + b * p.q_stride_b + s * p.q_stride_s + head * p.q_stride_h + d)
                       : 0u;
        }
#pragma unroll
        for (int k = 0; k < kPerThread; k++) {
            const int i = tid + k * kWarpGroupThreads, h = i / kPairs, d = 2 * (i % kPairs);
            const u32 col = q_pair_column(d % 64);
            store_shared32(sQ + (u32)(d / 64) * kQBlockBytes + swizzled(h, (int)(col / 8)) + 2 * (col % 8), v[k]);
        }
        fence_smem_for_async_proxy();
        named_barrier_arrive(kBarQReady, kRoleThreads);
    }
    float acc_o[kVBlocks][kAccS];
#pragma unroll
    for (int m = 0; m < kVBlocks; m++)
#pragma unroll
        for (int i = 0; i < kAccS; i++) acc_o[m][i] = 0.0f;
    float col_max[kColsPerThread];
#pragma unroll
    for (int c = 0; c < kColsPerThread; c++) col_max[c] = neg_inf();
    int w = 0;
    for (int tile = first; tile < range.end; tile = live_after(tile), w++) {
        const int x = w & 1;
        const bool refilled = live_after(live_after(tile)) < range.end;  // group x takes tile w + 2
        named_barrier_sync(kBarPReady + x, kPairThreads);
        const u32 max_now = sMax + 4 * (u32)(x * kHeadsN);
        float alpha[kColsPerThread];
#pragma unroll
        for (int c = 0; c < kColsPerThread; c++) {
            const float new_max = load_shared_f32(max_now + 4 * head_of(c));
            alpha[c] = new_max == neg_inf() ? 1.0f : fast_exp2(col_max[c] - new_max);
            col_max[c] = new_max;
        }
        add_values<kHeadsN>(acc_o, alpha, sV + (u32)(x * kVBufferBytes), sP + (u32)(x * kPBytes));
        if (refilled) named_barrier_arrive(kBarVEmpty + x, kPairThreads);
    }

    // The heads' final statistics: both score groups' sums in the final maximum's frame.
    named_barrier_sync(kBarStats, kRoleThreads);
    if (warp == 0 && g == 0)
#pragma unroll
        for (int c = 0; c < kColsPerThread; c++) {
            const int h = head_of(c);
            float sum = 0.0f;
#pragma unroll
            for (int x = 0; x < kScoreGroups; x++) {
                const float last = load_shared_f32(sLast + 4 * (u32)(x * kHeadsN + h));
                float part = 0.0f;
#pragma unroll
                for (int v = 0; v < 4; v++) part += load_shared_f32(sSums + 4 * (u32)((x * 4 + v) * kHeadsN + h));
                if (last != neg_inf()) sum += part * fast_exp2(last - col_max[c]);
            }
            st_shared_f32(sRowMax + 4 * h, col_max[c]);
            st_shared_f32(sRowSum + 4 * h, sum);
        }

    // Epilogue: O^T staged as fp32 head rows over the V buffers (every P V is done).
    write_head_rows<kHeadsN>(p, work, sV, sRowMax, sRowSum, acc_o, kBarStaged, warp, lane);
}
