// ---------------------------------------------------------------------------
// decode_sm90_narrow.cu: the Hopper kernel for at most 32 heads per CTA (sm_90a). The
// products are transposed, so the 64 candidates of a tile, not the heads, fill
// wgmma's M of 64, and the heads are its N: kHeadsN = the CTA's head group (8-32;
// h_q rounded up to 8 unless the plan splits the heads), no math padded to 64
// heads. The output accumulators shrink with it (d_v x kHeadsN), so two warp
// groups gather instead of one. Two K tile buffers, or one where two do not fit
// beside Q (DOTS3_SWA's 1088 dims at 8-16 heads: the layouts edition's kKBuffers,
// read off the map; its producers then hold no whole round ahead, and at 16 heads
// the head of each row comes by bulk copy into a slot of what is left, the rest in
// registers: kStagedRowBytes).
//
// One CTA = one (batch row x query token, head group, split): 384 or 512 threads
// in three or four warp groups with fixed roles.
//   consumer (warp group 0): S^T = K Q^T with wgmma m64nNk16 (A: the K tile, B: Q,
//     both K-major in shared memory); the online softmax per head, i.e. per column
//     of S^T (its 64 rows span the group's four warps: the tile's column maxima
//     meet in shared memory); P (bf16, [head][candidate], swizzled) to shared
//     memory; then O^T += V^T P^T with wgmma m64nNk16 per 64 value dims (A: V^T, the
//     K tile's first kDV dims, MN-major; B: P, K-major): eight accumulators of
//     kHeadsN / 2 fp32. At 32 heads a tile's math is 68 m64n32k16 steps, far
//     below the time its 42 KB take to gather, so one group does it all.
//   producers (warp groups 1 .. kProducerGroups): the tiles' rounds (32
//     candidates, four lanes each) in turn: round g of the walk (tile g / 2, its
//     round g % 2) is producer g % kProducerGroups's; with two groups, producer r
//     takes round r of every tile. Each dequantizes its rounds into the shared K
//     buffer (sm90_common.cu's rounds). sm90-narrow-long has a third group where
//     its ring slot fits (V32 at 16 heads and fewer): more producer warps per
//     scheduler to issue the dequantization, which bounds the kernel (8.6% on
//     walks of 32 tiles per CTA, 3-7% lost on 1-8: auto's plans take it from 16).
//     Where the rows hold their scales (V32), a round
//     arrives by bulk copy in the producer's slot of the row ring, one tile ahead;
//     elsewhere (DSV4's footer scales) its loads run kLoadsAhead tiles ahead in
//     registers (two at 8 heads, and at 16 where a round allows), with one ahead
//     its rows of the tile after next prefetched into L2.
// Epilogue: the consumer stages O^T as fp32 head rows over the spent K buffers, then
// each warp normalizes and writes whole head rows, a contiguous run per store (the
// result, or the split's partial for the combine).
//
// Named barriers (ids past 0, which __syncthreads uses):
//   kBarKFull + b   buffer b holds both rounds of a tile and its validity table
//                   (the tile's two producers arrive; the consumer waits)
//   kBarKEmpty + b  the consumer has finished reading buffer b
//                   (the consumer arrives; the producers wait before refilling it;
//                   with three groups an mbarrier instead: a named barrier's
//                   count would take a group that arrives for the tile after,
//                   as the groups do not take every tile)
//   kBarColumns     the consumer's four warps' column maxima of this tile (at the
//                   end, their column sums) are in shared memory
//   kBarPReady      P is in shared memory and fenced for wgmma
//   kBarStaged      O^T is staged as head rows
//   kBarQReady      Q is in shared memory and fenced
//   kBarRingRead + r   producer r's lanes have read their chunks of its ring slot,
//                   each read fenced against the async proxy (the slot may be refilled)
// mbarriers (the ring): one per slot, complete when the slot's 32 rows have landed
// (32 arrivals, one per candidate, with the bytes of its copy); with three
// producer groups, buffer_empty[b] (kBarKEmpty's role: 128 consumer arrivals).
// ---------------------------------------------------------------------------
namespace sm90 {

// ---- tile configuration (every constant this kernel's shape depends on; the
// operand blocks and the producer's rounds are in sm90_common.cu) ----
constexpr int kHeadsN = cfg::kHeadsPerCta;            // the head group: wgmma N of S^T and of O^T
constexpr int kQBlockBytes = kHeadsN * 128;           // Q: a 64-dim block of kHeadsN rows
constexpr int kVBlocks = cfg::kDV / 64;               // wgmma M blocks of O^T
constexpr int kAccS = kHeadsN / 2;                    // S^T (64 x kHeadsN) fp32 per thread
constexpr int kColsPerThread = kHeadsN / 4;           // heads (columns) a thread's fragments hold
constexpr int kProducerGroups = cfg::kProducerGroups;  // 2; 3 in sm90-narrow-long (its ring's third slot)
constexpr int kCtaThreads = (1 + kProducerGroups) * kWarpGroupThreads;
constexpr int kTileThreads = (1 + kRoundsPerTile) * kWarpGroupThreads;  // a tile's barriers: the consumer, two producers
constexpr bool kBufferMbarriers = kProducerGroups > kRoundsPerTile;    // groups skip tiles: kBarKEmpty by mbarrier
enum Role { kConsumerGroup = 0, kFirstProducerGroup = 1 };
// How many tiles ahead a producer's loads run in registers (the rows that do not
// hold their scales, DSV4's; V32's go through the row ring below). The producers
// bound this kernel:
// alone (no consumer math) they took 92% of its time at 16 heads, gathering ~2 TB/s
// with one round per warp in flight (bench/HISTORY.md, "sm90-narrow's producers").
// A second round in flight takes three rounds of registers, which only a consumer
// of at most 16 heads can give up: measured, it gained 12-20% on long walks at 8
// heads and at DSV4's 16, and lost 2-5% at V3.2's 16 with either split of the
// registers (136/184 or 152/176; the cause is not found). Only those two layouts
// were measured at 16 heads; the rule tells them apart by a round's registers (V3.2
// 45, DSV4 39), not by a measured threshold. With two rounds ahead the rows are not
// also prefetched into L2 (worth 10% with one round ahead, it cost 3-8% with two).
// The row ring (cfg::kStagingStages rounds per producer group, where the rows hold
// their scales): a round arrives by bulk copy (the TMA engine) in shared memory, so
// neither registers nor the LSU hold or move it in flight. One round per group in
// flight, each lane's reads fenced against the async proxy before the refill: on the
// long walks 4-6% faster at 16 and 32 heads than in registers, and at 8 heads a tie
// with two tiles ahead there, timed in one call (-1.3 to +0.9%; the fence costs 1-3%,
// and releasing a slot by mbarrier without it raced; bench/HISTORY.md, "The row ring"
// and "The ring's fence"; 24 heads were not measured: BENCH.md has no such rows).
// Alternating the ring's tiles with tiles loaded into registers, for two rounds per
// group in flight, was 34-42% slower on the long walks (HISTORY, "Ring and registers").
// The ring's copies are not what bounds it: with neither the consumer's math nor the
// K stores it ran b128 topk 2048 in 51-53 us at 8-32 heads, against 85-97 whole; the
// K stores beside the consumer's operand reads and the dequantization make up the
// rest (HISTORY, "The ring kernel taken apart"). The producers are issue-bound: one
// instruction fewer per dequantized pair made it 75-86 (HISTORY, "The fp8 pairs in
// four instructions"), a round's checks and index addressing trimmed 68-80 (HISTORY,
// "The producers' round, counted again, and run").
constexpr int kRingRounds = cfg::kStagingStages;
constexpr int kRoundBytes = kTokensPerRound * cfg::kRowBytes;
constexpr int kRoundRegisters = 4 * (kNopeLoads + kRopeLoads) + kScaleWords + 1;  // RoundLoads
#if MLAJIT_LAYOUTS
// The K tile buffers: two, or one where two do not fit beside Q (DOTS3_SWA's 1088
// dims: a 139 KB tile, Q 35 KB at 16 heads; the map, families.c, places them and
// this reads their count off it). With one the producers hold no whole round ahead
// (such a round is 75 registers a lane): at 8 heads each loads its next round once
// it has stored this one, so those loads fly while the consumer works on the tile,
// and the round after is prefetched into L2; at 16 the rows' heads come through a
// slot (kStagedRowBytes, below).
constexpr int kKBuffers = (cfg::kSmemProbs - cfg::kSmemK) / kOperandBytes;
static_assert(kKBuffers == 1 || kKBuffers == 2, "one or two K buffers");
constexpr int kLoadsAhead = kKBuffers == 1 ? 0 : kHeadsN <= 8 || (kHeadsN <= 16 && kRoundRegisters <= 40) ? 2 : 1;
// With one K buffer, the head of each candidate's row (kStagedRowBytes of NoPE
// codes: what shared memory has left, the map's staging) arrives by bulk copy in
// its producer group's slot, the rest (its tail: NoPE loads kStagedLoads on, RoPE,
// scales) in registers, both issued a round ahead, while the round before is
// stored: with the whole round in registers, loaded once the round before was
// stored, the producers waited on those loads (bench/NOTES.md 1d).
constexpr int kStagedRowBytes = kKBuffers == 1 ? cfg::kSmemStagingBytes / (kProducerGroups * kTokensPerRound) : 0;
constexpr int kStagedLoads = kStagedRowBytes / 64;  // a lane's NoPE loads that come from the slot
static_assert(kStagedRowBytes % 64 == 0 && kStagedLoads <= kNopeLoads, "the slot holds whole 64-byte steps of NoPE");
#else
constexpr int kLoadsAhead = kHeadsN <= 8 || (kHeadsN <= 16 && kRoundRegisters <= 40) ? 2 : 1;  // without the ring
#endif
constexpr bool kPrefetchRows = kLoadsAhead == 1;
// How many rounds before its rows' copy or loads a round's indices are loaded (a
// register per round and lane). 4 and 8 ran flat to 9% slower than 2 (bench/HISTORY.md,
// "I, J, K and R timed").
constexpr int kIndexRoundsAhead = 2;
// setmaxnreg: every warp starts at 65536 / 384 rounded down to 8 = 168. The
// consumer holds O^T (8 x kHeadsN / 2), S^T (kHeadsN / 2), the columns' running
// max and sum and the tile's factors; each producer kLoadsAhead rounds in flight
// and one being stored (with the ring, only the one being stored). The splits are
// the ones ptxas (CUDA 13.0) compiles without spills: with the ring at 32 heads the
// consumer spilled at 216 and 224, and at 16 and 24 heads the producers at 136.
struct RegisterSplit {
    int consumer, producer;
};
#if MLAJIT_LAYOUTS
// Arbitrary fp32 scales (GLM_NSA, GLM53_NOPE: the exact dequantization in its
// converted form, inline scales, so the ring; ptxas, CUDA 13.0, every page size,
// with and without an extra cache and every feature): three producer groups at 96
// registers spilled at 8 heads, and at 104 beside a consumer of 200 GLM_NSA's 16
// heads 4 bytes (the extra cache and features); 192 / 104 spill none (1-24 heads,
// both models). Two groups at 32 heads: without RoPE (GLM53_NOPE) 240/128 spill
// none (232/136 had spilled 56 bytes in the longer form); with RoPE (GLM_NSA)
// 232/136 spilled 8 bytes and 240/128 32, 224/136 none. At 8-24 heads V3.2's
// 216/144 spills none for either.
constexpr RegisterSplit register_split()
{
#if MLAJIT_BF16
    // bf16 rows: the producers copy by cp.async and hold no round in registers
    return kHeadsN > 24 ? RegisterSplit{232, 136} : RegisterSplit{216, 144};
#endif
    if (kProducerGroups == 3) return kExactScalesOnly ? RegisterSplit{192, 104} : RegisterSplit{216, 96};
    if (kRingRounds > 0 && kHeadsN > 24) {
        if (!kExactScalesOnly) return {232, 136};
        return kRopeLoads == 0 ? RegisterSplit{240, 128} : RegisterSplit{224, 136};
    }
    if (kRingRounds > 0) return {216, 144};
    if (kLoadsAhead == 1) return {216, 144};
    // none ahead (one K buffer: DOTS3_SWA at 8-16 heads, O^T 128 registers at 16
    // heads, a round 75): 208/144 spilled 148 bytes in the producers, 200/152 none
    // (24 with the extra cache and every feature; ptxas, CUDA 13.0)
    if (kLoadsAhead == 0) return {200, 152};
    return kHeadsN <= 8 ? RegisterSplit{136, 184} : RegisterSplit{152, 176};
}
#else
constexpr RegisterSplit register_split()
{
    if (kProducerGroups == 3) return {216, 96};  // 512 threads start at 128
    if (kRingRounds > 0) return kHeadsN > 24 ? RegisterSplit{232, 136} : RegisterSplit{216, 144};
    if (kLoadsAhead == 1) return {216, 144};
    return kHeadsN <= 8 ? RegisterSplit{136, 184} : RegisterSplit{152, 176};
}
#endif
constexpr int kConsumerRegisters = register_split().consumer;
constexpr int kProducerRegisters = register_split().producer;
constexpr int kLaunchRegisters = (65536 / kCtaThreads) & ~7;
static_assert(kConsumerRegisters + kProducerGroups * kProducerRegisters <= (1 + kProducerGroups) * kLaunchRegisters,
              "setmaxnreg: the increase must be covered by the decreases");

enum NamedBarrier {
    kBarKFull = 1, kBarKEmpty = 3, kBarColumns = 5, kBarPReady = 6, kBarStaged = 7, kBarQReady = 8, kBarRingRead = 9,
    kBarEnd = kBarRingRead + kProducerGroups
};
static_assert(kBarKFull + 2 <= kBarKEmpty && kBarKEmpty + 2 <= kBarColumns, "an id per K buffer (two)");
static_assert(kBarEnd <= kHardwareNamedBarriers, "more named barriers than a CTA has");

static_assert(cfg::kThreads == kCtaThreads, "the generator's thread count must match the roles");
static_assert(kHeadsN % 8 == 0 && kHeadsN >= 8 && kHeadsN <= 32, "wgmma N: a head group of 8-32 heads");
static_assert(kRoundsPerTile == 2, "one producer group per round of a tile");
#if MLAJIT_LAYOUTS
// (the layouts edition takes arbitrary fp32 scales: the exact dequantization, above)
#else
static_assert(!kExactScalesOnly, "arbitrary fp32 scales: the exact dequantization only (sm90 takes them)");
#endif
static_assert(cfg::kClusterCtas == 1, "no CTA pair: each head group's CTA gathers its rows itself");
constexpr u32 kStagedBytes = kHeadsN * kHeadRowStride * 4;  // the epilogue's O^T rows over the K buffers
#if MLAJIT_LAYOUTS
static_assert(kStagedBytes + 2 * kHeadsN * 4 <= kKBuffers * kOperandBytes,
              "the staged output and the statistics fit in the K buffers");
#else
static_assert(kStagedBytes + 2 * kHeadsN * 4 <= 2 * kOperandBytes, "the staged output and the statistics fit in the K buffers");
#endif
static_assert(kProducerGroups == 2 || (kProducerGroups == 3 && kRingRounds > 0), "a third producer group: the ring only");
static_assert(kRingRounds == 0 || (cfg::kScalesInline && cfg::kSmemStagingBytes == kProducerGroups * kRingRounds * kRoundBytes &&
                                   cfg::kSmemStaging % 16 == 0 && cfg::kRowBytes % 16 == 0),
              "the ring: whole rows (scales inline), bulk copies 16-byte aligned");
static_assert(cfg::kDV % 128 == 0, "the epilogue's chunks of 128 dims");

}  // namespace sm90

extern "C" __global__ void __launch_bounds__(sm90::kCtaThreads, 1) mlajit_decode_main(const DecodeParams p)
{
    using namespace sm90;
    wait_for_prerequisite_grid();     // nothing before it reads an argument
    release_dependent_grid_early(p);  // where the plan lets the combine start now
    extern __shared__ __align__(1024) u8 smem_raw[];
    u8* smem = reinterpret_cast<u8*>((reinterpret_cast<u64>(smem_raw) + 1023) & ~(u64)1023);
    const u32 sQ = smem_address(smem + cfg::kSmemQ);             // kKBlocks blocks of kHeadsN rows x 128 bytes
    const u32 sK = smem_address(smem + cfg::kSmemK);             // buffer b at sK + b * kOperandBytes
    const u32 sP = smem_address(smem + cfg::kSmemProbs);         // P, bf16 kHeadsN x 64, swizzled like Q
    // [kHeadsN] final, log2 domain, and [kHeadsN] final: written after the walk, after the output staged over the K buffers
    const u32 sRowMax = sK + kStagedBytes, sRowSum = sRowMax + 4 * kHeadsN;
    const u32 sColumns = smem_address(smem + cfg::kSmemScores);  // [4 warps][kHeadsN] column maxima, then sums
    u8* sTokenValid = smem + cfg::kSmemTokenValid;  // [2][kTile] flags
    const u32 sRing = smem_address(smem + cfg::kSmemStaging);        // [kProducerGroups][kRingRounds][32 rows]
    const u32 sRingFull = smem_address(smem + cfg::kSmemBarriers);   // [kProducerGroups][kRingRounds] mbarriers
    const u32 sBufferEmpty = sRingFull + 8 * kProducerGroups * kRingRounds;  // [2] mbarriers (kBufferMbarriers)

    const int tid = threadIdx.x;
    const int group = tid / kWarpGroupThreads;
    const int warp = (tid / 32) % 4, lane = tid % 32;  // warp within its group
    const CtaWork work = cta_work<kHeadsN>(p);
    const int row = work.row, b = work.b, s = work.s, split = work.split;
    const TileRange range = work.range;
    auto live_after = [&](int t) { return next_live_tile(range, t + 1, p.topk); };
    const int first = next_live_tile(range, range.begin, p.topk);
#if MLAJIT_LAYOUTS
    if constexpr (kStagedLoads > 0) {
        // a slot's row heads are all there when its 32 copiers have arrived and their bytes landed
        if (tid == 0)
            for (int i = 0; i < kProducerGroups; i++) mbarrier_init(sRingFull + 8 * i, kTokensPerRound);
        fence_mbarrier_init();
        __syncthreads();
    }
#endif
    if constexpr (kRingRounds > 0) {
        // A slot's rows are all there when its 32 copiers have arrived and their bytes landed.
        if (tid == 0) {
            for (int i = 0; i < kProducerGroups * kRingRounds; i++) mbarrier_init(sRingFull + 8 * i, kTokensPerRound);
            if (kBufferMbarriers)
                for (int b = 0; b < 2; b++) mbarrier_init(sBufferEmpty + 8 * b, kWarpGroupThreads);
        }
        fence_mbarrier_init();
        __syncthreads();
    }

    if (group >= kFirstProducerGroup) {
        registers_set<kProducerRegisters, kLaunchRegisters>();
        // Producer x takes rounds x, x + kProducerGroups, ... of the walk (round g:
        // round g % 2 of the walk's tile g / 2); lane l of warp w handles candidate
        // 8 w + l % 8 of a round, its quarter l / 8 of the row.
        const int producer = group - kFirstProducerGroup;
        const int token = warp * 8 + lane % 8, quarter = lane / 8;
        const int* const indices = main_index_row(p, b, s);  // once: the loop's index loads add only pos
        auto dest_of = [&](int buf) { return RoundDestOf<u8>{sK + (u32)buf * kOperandBytes, sTokenValid + buf * kTile}; };
        // The producer's rounds ahead: its round k + i (k counts the rounds it has
        // stored) is round g = x + kProducerGroups (k + i) of the walk, in tile t[i].
        // Round k is stored now, rounds k + 1 .. k + kAhead are on the way (in the
        // ring's slots, or loads in registers), round k + kIndexLead's slots are
        // read; raw[i] is this lane's slot in round k + i.
        constexpr int kAhead = kRingRounds > 0 ? kRingRounds : kLoadsAhead;
        constexpr int kIndexLead = kAhead + kIndexRoundsAhead;
        constexpr bool kEveryTile = kProducerGroups == kRoundsPerTile;  // producer x: round x of every tile
        int k = 0, t[kIndexLead + 1], raw[kIndexLead + 1];
        auto walk_round = [&](int i) { return producer + kProducerGroups * (k + i); };
        auto round_in_tile = [&](int i) { return kEveryTile ? producer : walk_round(i) % kRoundsPerTile; };
        auto tile_seq = [&](int i) { return kEveryTile ? k + i : walk_round(i) / kRoundsPerTile; };  // the walk's tile
        auto pos_of = [&](int i) { return t[i] * kTile + round_in_tile(i) * kTokensPerRound + token; };
        auto slot_of = [&](int i) { return t[i] < range.end ? load_slot(p, indices, b, s, pos_of(i), range) : -1; };
        auto next_tile = [&](int i) {  // t[i] from t[i - 1]: one tile on, two where round i - 1 was a tile's last
            const int next = live_after(t[i - 1]);
            return kEveryTile || round_in_tile(i - 1) + 1 < kRoundsPerTile ? next : live_after(next);
        };
        t[0] = tile_seq(0) == 0 ? first : live_after(first);
#pragma unroll
        for (int i = 1; i < kIndexLead + 1; i++) t[i] = next_tile(i);
#pragma unroll
        for (int i = 0; i < kIndexLead; i++) raw[i] = slot_of(i);
        // Round k into K buffer tile_seq(0) & 1 once the consumer has left it, for
        // the consumer; then the window moves on a round. False when the walk is done.
        auto store_and_advance = [&](RoundLoads& now, bool hold) {
#if MLAJIT_LAYOUTS
            // (kKBuffers - 1 as a mask and a shift: with two, the base text's & 1 and >> 1)
            const int seq = tile_seq(0), buf = seq & (kKBuffers - 1);
            if (seq >= kKBuffers) {
                if (kBufferMbarriers)
                    mbarrier_wait(sBufferEmpty + 8 * buf, (u32)((seq >> (kKBuffers - 1)) & 1) ^ 1u);
#else
            const int seq = tile_seq(0), buf = seq & 1;
            if (seq >= 2) {
                if (kBufferMbarriers)
                    mbarrier_wait(sBufferEmpty + 8 * buf, (u32)((seq >> 1) & 1) ^ 1u);
#endif
                else
                    named_barrier_sync(kBarKEmpty + buf, kTileThreads);
            }
#if MLAJIT_BF16
            // bf16 rows: the round by cp.async into its place (copy_round_bf16), waited for
            copy_round_bf16(p, pos_of(0), checked_slot(p, pos_of(0), raw[0]), dest_of(buf),
                            round_in_tile(0) * kTokensPerRound + token, quarter);
            copy_async_wait_all();
#else
            if (hold) hold_until_here(now);
            store_round<true>(dest_of(buf), round_in_tile(0) * kTokensPerRound + token, quarter, now);
#endif
            fence_smem_for_async_proxy();
            named_barrier_arrive(kBarKFull + buf, kTileThreads);
#pragma unroll
            for (int i = 0; i < kIndexLead; i++) {
                t[i] = t[i + 1];
                raw[i] = raw[i + 1];
            }
            k++;
            t[kIndexLead] = next_tile(kIndexLead);
            return t[0] < range.end;
        };
#if MLAJIT_LAYOUTS
#if MLAJIT_BF16
#else
        if constexpr (kStagedLoads > 0) {
            // One K buffer, round k + 1 in flight while round k is stored: its row
            // heads by bulk copy into the group's slot (the quarter-0 lane of each
            // candidate, once the group has read round k's out of it), its tails
            // by loads into registers.
            const u32 heads = sRing + (u32)((producer * kTokensPerRound + token) * kStagedRowBytes);
            const u32 full = sRingFull + 8 * (u32)producer;
            auto copy_head = [&](int i) {
                const Candidate c = locate_candidate(p, pos_of(i), checked_slot(p, pos_of(i), raw[i]));
                if (c.row) {
                    mbarrier_arrive_expect_tx(full, kStagedRowBytes);
                    copy_global_to_shared(heads, c.row, kStagedRowBytes, full);
                } else {
                    mbarrier_arrive(full);
                }
            };
            auto load_tail = [&](int i, RoundLoads& d) {  // (one K buffer: footer ue8m0 scales, two words)
                const Candidate c = locate_candidate(p, pos_of(i), checked_slot(p, pos_of(i), raw[i]));
                d.live = c.row != nullptr;
                if (d.live) {
#pragma unroll
                    for (int j = kStagedLoads; j < kNopeLoads; j++) d.nope[j] = load_row16(c.row + 64 * j + 16 * quarter);
#pragma unroll
                    for (int j = 0; j < kRopeLoads; j++)
                        d.rope[j] = load_row16(c.row + cfg::kRopeOffset + 16 * (quarter + kLanesPerToken * j));
                    const U32x2 v = load_row8(c.scales);
                    d.scales[0] = v.x;
                    d.scales[1] = v.y;
                } else {
                    skipped_round(d);
                }
            };
            RoundLoads tail;  // the next round: its tail loaded ahead, its heads read in from the slot
            if (t[0] < range.end) {
                if (quarter == 0) copy_head(0);
                load_tail(0, tail);
            }
            while (t[0] < range.end) {
                raw[kIndexLead] = slot_of(kIndexLead);
                mbarrier_wait(full, (u32)k & 1u);
#pragma unroll
                for (int j = 0; j < kStagedLoads; j++) tail.nope[j] = load_shared16(heads + 64 * j + 16 * quarter);
                fence_smem_for_async_proxy();  // the reads done before the slot is refilled
                named_barrier_sync(kBarRingRead + producer, kWarpGroupThreads);
                if (quarter == 0 && t[1] < range.end) copy_head(1);
                RoundLoads now = tail;  // the round whole: its heads from the slot, its tail
                if (t[1] < range.end) load_tail(1, tail);
                store_and_advance(now, true);
            }
            return;
        }
        if constexpr (kRingRounds == 0 && kLoadsAhead == 0) {
            // One K buffer: round k + 1 is loaded once round k is stored (its loads
            // fly while the consumer works on the tile), round k + 2's rows
            // prefetched into L2 meanwhile. Loading each chunk of round k + 1 into
            // its registers as soon as round k's chunk was stored ran 4-9% slower
            // (bench/NOTES.md, section 4).
            RoundLoads now;
            if (t[0] < range.end) load_round(p, pos_of(0), checked_slot(p, pos_of(0), raw[0]), quarter, now);
            prefetch_row<kLanesPerToken>(p, pos_of(1), raw[1], quarter);
            while (t[0] < range.end) {
                raw[kIndexLead] = slot_of(kIndexLead);
                if (!store_and_advance(now, true)) break;
                load_round(p, pos_of(0), checked_slot(p, pos_of(0), raw[0]), quarter, now);
                prefetch_row<kLanesPerToken>(p, pos_of(1), raw[1], quarter);
            }
            return;
        }
#endif
#endif
#if MLAJIT_BF16
        // bf16 rows (no ring, no round in registers: a round is 18 chunks a lane at
        // V3.2's dims): each round copied into its K buffer once the consumer has left
        // it, the group's round two on prefetched into L2 meanwhile, so the copies
        // read from L2 (as sm90's bf16 edition, whose rows of the tile after next are
        // in L2 by then).
        static_assert(kIndexLead >= 3, "the round two on has its slot");
        RoundLoads none;  // store_and_advance's operand; the bf16 path does not read it
        while (t[0] < range.end) {
            raw[kIndexLead] = slot_of(kIndexLead);
            prefetch_row<kLanesPerToken>(p, pos_of(2), raw[2], quarter);
            store_and_advance(none, false);
        }
#else
        if constexpr (kRingRounds > 0) {
            // Through the ring: the group's kAhead slots, its round k's rows in slot
            // k % kAhead. The quarter-0 lane copies its candidate's row (or only
            // arrives, where it is skipped); once every lane has read its chunks of
            // the slot (as load_round reads the cache), the slot takes the round
            // kAhead on, and the round is dequantized into the K buffer.
            const u32 rows = sRing + (u32)((producer * kAhead * 32 + token) * cfg::kRowBytes);
            const u32 full = sRingFull + (u32)(producer * kAhead * 8);
            auto copy_row = [&](int i, int slot) {
                const Candidate c = locate_candidate(p, pos_of(i), checked_slot(p, pos_of(i), raw[i]));
                const u32 bar = full + 8 * (u32)slot;
                if (c.row) {
                    mbarrier_arrive_expect_tx(bar, cfg::kRowBytes);
                    copy_global_to_shared(rows + (u32)(slot * kRoundBytes), c.row, cfg::kRowBytes, bar);
                } else {
                    mbarrier_arrive(bar);
                }
            };
            if (quarter == 0)
#pragma unroll
                for (int i = 0; i < kAhead; i++)
                    if (t[i] < range.end) copy_row(i, i);
            RoundLoads now;
            while (t[0] < range.end) {
                const int slot = k % kAhead;
                raw[kIndexLead] = slot_of(kIndexLead);
                mbarrier_wait(full + 8 * (u32)slot, (u32)(k / kAhead) & 1u);
                load_round_staged(rows + (u32)(slot * kRoundBytes), checked_slot(p, pos_of(0), raw[0]) >= 0,
                                  quarter, now);
                fence_smem_for_async_proxy();  // without it, the bench's checks failed on 5 of 30 rows
                named_barrier_sync(kBarRingRead + producer, kWarpGroupThreads);
                if (quarter == 0 && t[kAhead] < range.end) copy_row(kAhead, slot);
                store_and_advance(now, false);
            }
        } else {
            // In registers: round kAhead + 1's rows are also prefetched into L2
            // (kPrefetchRows).
            if (kPrefetchRows) prefetch_row<kLanesPerToken>(p, pos_of(kAhead), raw[kAhead], quarter);
            RoundLoads rounds[kAhead + 1];
#pragma unroll
            for (int i = 0; i < kAhead; i++)
                if (t[i] < range.end) load_round(p, pos_of(i), checked_slot(p, pos_of(i), raw[i]), quarter, rounds[i]);
            // One round: `now` holds round 0's loads, `next` takes round kAhead's.
            auto one_round = [&](RoundLoads& now, RoundLoads& next) {
                raw[kIndexLead] = slot_of(kIndexLead);
                if (kPrefetchRows) prefetch_row<kLanesPerToken>(p, pos_of(kAhead + 1), raw[kAhead + 1], quarter);
                if (t[kAhead] < range.end)
                    load_round(p, pos_of(kAhead), checked_slot(p, pos_of(kAhead), raw[kAhead]), quarter, next);
                return store_and_advance(now, true);
            };
            // The round registers rotate: a round's `next` is the set whose round was
            // just stored, so each stays in registers (no copies between the sets).
            if constexpr (kAhead == 1) {
                while (t[0] < range.end)
                    if (one_round(rounds[0], rounds[1])) one_round(rounds[1], rounds[0]);
            } else {
                while (t[0] < range.end)
                    if (one_round(rounds[0], rounds[2]) && one_round(rounds[1], rounds[0]))
                        one_round(rounds[2], rounds[1]);
            }
        }
#endif
        return;
    }

    // The consumer. Fragment coordinates: rows g and g + 8 of the warp's 16,
    // columns 8 j + 2 q (+ 1); the thread's column c (j = c / 2, e = c % 2) is head 8 j + 2 q + e.
    const int g = lane / 4, q = lane % 4;
    auto head_of = [&](int c) { return narrow_head_of(c, q); };
    // A decrease first: the producers' increase waits for it. An increase waits
    // for the producers' decreases, so Q's copies are issued before it.
    if constexpr (kConsumerRegisters < kLaunchRegisters) registers_set<kConsumerRegisters, kLaunchRegisters>();
    stage_q_rows<kHeadsN, cfg::kDQK, 16, kWarpGroupThreads>(
        p, work, tid, [sQ](int h, int c8) { return sQ + (u32)(c8 / 8) * kQBlockBytes + swizzled(h, c8 % 8); });
    if constexpr (kConsumerRegisters > kLaunchRegisters) registers_set<kConsumerRegisters, kLaunchRegisters>();
    float acc_o[kVBlocks][kAccS];  // O^T: per 64 value dims, 64 dims x kHeadsN heads
#pragma unroll
    for (int m = 0; m < kVBlocks; m++)
#pragma unroll
        for (int i = 0; i < kAccS; i++) acc_o[m][i] = 0.0f;
    float col_max[kColsPerThread], col_sum[kColsPerThread];  // running, per column (sum: this thread's rows)
#pragma unroll
    for (int c = 0; c < kColsPerThread; c++) {
        col_max[c] = neg_inf();
        col_sum[c] = 0.0f;
    }
    copy_async_wait_all();
    fence_smem_for_async_proxy();
    named_barrier_sync(kBarQReady, kWarpGroupThreads);
    int tiles = 0;
    for (int tile = first; tile < range.end; tile = live_after(tile), tiles++) {
#if MLAJIT_LAYOUTS
        const int buf = tiles & (kKBuffers - 1);
        const bool refilled = (kKBuffers == 1 ? live_after(tile) : live_after(live_after(tile))) < range.end;
#else
        const int buf = tiles & 1;
        const bool refilled = live_after(live_after(tile)) < range.end;  // the producers refill buf
#endif
        named_barrier_sync(kBarKFull + buf, kTileThreads);
        const u32 k_tile = sK + (u32)buf * kOperandBytes;

        // S^T = K Q^T: rows are the tile's candidates, columns the heads.
        float acc_s[kAccS];
#pragma unroll
        for (int i = 0; i < kAccS; i++) acc_s[i] = 0.0f;
        fence_operands(acc_s);
        wgmma_fence();
        const u64 k_desc = smem_descriptor(k_tile, 0, 1024), q_desc = smem_descriptor(sQ, 0, 1024);
#pragma unroll
        for (int kb = 0; kb < kKBlocks; kb++)
#pragma unroll
            for (int kk = 0; kk < kKSteps; kk++)
                wgmma_narrow<kHeadsN, 0>(acc_s, descriptor_plus(k_desc, kb * kBlockBytes + kk * 32),
                                descriptor_plus(q_desc, kb * kQBlockBytes + kk * 32), kb | kk);
        wgmma_commit();
        wgmma_wait_all();
        fence_operands(acc_s);

        // log2 domain, -inf where the candidate is skipped; each column's maximum
        // over the thread's two rows, the warp's eight row groups, then the warps.
        const u8* valid = sTokenValid + buf * kTile;
        const int c0 = 16 * warp + g;  // the thread's rows: candidates c0 and c0 + 8
        const bool v0 = valid[c0] != 0, v1 = valid[c0 + 8] != 0;
        scale_scores_and_store_column_maxima<kHeadsN>(acc_s, v0, v1, p.sm_scale_log2, sColumns, warp, lane);
        // P's previous readers (the last tile's P V) are done: this thread waited for them.
        named_barrier_sync(kBarColumns, kWarpGroupThreads);
        float alpha[kColsPerThread];
#pragma unroll
        for (int c = 0; c < kColsPerThread; c++) {
            const float m = tile_column_max<kHeadsN>(sColumns, head_of(c));
            const float new_max = fmaxf(col_max[c], m);
            const bool empty = new_max == neg_inf();  // nothing valid yet: no -inf - -inf
            alpha[c] = empty ? 1.0f : fast_exp2(col_max[c] - new_max);
            col_max[c] = new_max;
            float& x0 = acc_s[4 * (c / 2) + c % 2];
            float& x1 = acc_s[4 * (c / 2) + 2 + c % 2];
            x0 = empty ? 0.0f : fast_exp2(x0 - new_max);
            x1 = empty ? 0.0f : fast_exp2(x1 - new_max);
            col_sum[c] = col_sum[c] * alpha[c] + (x0 + x1);
        }
        store_probabilities<kHeadsN>(sP, acc_s, c0, lane);
        fence_smem_for_async_proxy();
        // Also orders this tile's reads of the column maxima before the next tile's writes.
        named_barrier_sync(kBarPReady, kWarpGroupThreads);

        // O^T = O^T * alpha + V^T P^T, per 64 value dims.
        add_values<kHeadsN>(acc_o, alpha, k_tile, sP);
        if (refilled) {
            if (kBufferMbarriers)
                mbarrier_arrive(sBufferEmpty + 8 * buf);  // after its wgmma reads: this thread waited for them
            else
                named_barrier_arrive(kBarKEmpty + buf, kTileThreads);
        }
    }

    // The heads' final statistics: the column sums over the warp's rows, then the warps.
#pragma unroll
    for (int c = 0; c < kColsPerThread; c++) {
        const float sum = warp_sum_xor(col_sum[c], 32, 4);
        if (g == 0) st_shared_f32(sColumns + 4 * (warp * kHeadsN + head_of(c)), sum);
    }
    named_barrier_sync(kBarColumns, kWarpGroupThreads);
    if (warp == 0 && g == 0)
#pragma unroll
        for (int c = 0; c < kColsPerThread; c++) {
            const int h = head_of(c);
            float sum = 0.0f;
#pragma unroll
            for (int w = 0; w < 4; w++) sum += load_shared_f32(sColumns + 4 * (w * kHeadsN + h));
            st_shared_f32(sRowMax + 4 * h, col_max[c]);
            st_shared_f32(sRowSum + 4 * h, sum);
        }

    // Epilogue: O^T staged as fp32 head rows over the K buffers (the producers are
    // done, and every consumer warp passed its last wgmma wait before kBarColumns).
    write_head_rows<kHeadsN>(p, work, sK, sRowMax, sRowSum, acc_o, kBarStaged, warp, lane);
}
