// ---------------------------------------------------------------------------
// decode_sm90.cu: the Hopper sparse-MLA decode kernel (sm_90a): wgmma with warp
// specialization.
//
// One CTA = one (batch row x query token, 64 heads, split): 384 threads in three
// warp groups with fixed roles.
//   score group (warp group 0): S = Q K^T with wgmma m64n64k16, both operands in
//     shared memory; the online softmax in registers (log2 domain); P (bf16) and
//     the rows' rescale factors to shared memory for the value group; then
//     O[:, 0 .. 256) += P V with wgmma m64n256k16, P from registers.
//   value group (warp group 1): O[:, 256 .. 512) += P V with P read from shared
//     memory. S is computed once per tile, by the score group only.
//   producer (warp group 2): four lanes per candidate, 32 candidates per round, two
//     rounds per tile. Each round's 16-byte loads are issued while the previous
//     round is dequantized (gather.cu) into a K tile buffer: bf16, 64-dim blocks of
//     64 rows x 128 bytes, 128-byte swizzled (what the wgmma descriptors describe).
//     Indices are loaded three tiles ahead and the rows of the tile after next
//     are prefetched into L2 (in a CTA pair by the value group, idle while the
//     producer works; evict-last where the call's rows outgrow the L2), so a
//     round's loads hit L2.
// V is K[:, 0 .. kDV): P V reads the same K tile, MN-major.
//
// CTA pair (kClusterCtas = 2, two head groups): the CTAs of the two head groups
// of a (row, split) form a cluster and read the same tiles. The producer of rank r
// gathers round r of every tile only, and writes it both into its own buffer and,
// with bulk copies, into the peer's: each CTA gathers and dequantizes half as much.
//
// Named barriers (ids past 0, which __syncthreads uses):
//   kBarKFull + b   buffer b holds a dequantized tile and its validity table
//                   (producer arrives; both consumer groups wait)
//   kBarKEmpty + b  both consumer groups have finished reading buffer b
//                   (consumers arrive; producer waits before refilling it)
//   kBarPReady      P and the rescale factors of this tile are in shared memory
//                   (score group arrives; value group waits)
//   kBarPFree       the value group has finished reading P and the factors
//                   (value group arrives; score group waits before rewriting them)
//   kBarRowStats    the final row max and sum are in shared memory (epilogue)
//   kBarRoundStored the producer group's round is in shared memory and fenced
//                   (CTA pair: its lead thread then copies it to the peer)
//   kBarQReady      Q is in shared memory and fenced (the score group copies it
//                   and waits; no other role reads Q)
// and, in a CTA pair, mbarriers in shared memory:
//   peer_round_full[b]   the peer's round of buffer b has landed here (its
//                        bulk-copied bytes; the local producer sets the count)
//   peer_buffer_free[b]  the peer's consumers have finished reading their buffer b
//                        (the peer's producer passes on its kBarKEmpty; the local
//                        producer waits before writing into it)
// ---------------------------------------------------------------------------
namespace sm90 {

// ---- tile configuration (every constant this kernel's shape depends on; the
// operand blocks and the producer's rounds are in sm90_common.cu) ----
constexpr int kHeads = cfg::kHeadsPerCta;         // 64: one wgmma M
constexpr int kVDimsPerGroup = cfg::kDV / 2;      // 256: one wgmma N of P V
constexpr int kVBlocksPerGroup = kVDimsPerGroup / 64;
constexpr int kCtaThreads = 3 * kWarpGroupThreads;
constexpr int kConsumerThreads = 2 * kWarpGroupThreads;
enum Role { kScoreGroup = 0, kValueGroup = 1, kProducerGroup = 2 };
constexpr int kPairCtas = cfg::kClusterCtas;  // 2: the CTA pair (two head groups share each tile)
// setmaxnreg: the score group holds O (128 fp32), S (32) and P (16); the value group
// O and its descriptors (the consumers' shared epilogue must fit it too); the
// producer two rounds of loads (2 x 44 registers for V32) and a round's
// dequantization in flight (the layouts edition's splits for arbitrary fp32 scales
// are below). A CTA pair's producer fits in 128 (one CTA per row's
// spills there), and the score group takes the 8: ptxas's schedule of the score loop
// then cut the pair's 8-18-tile walks 3-8% (8 fewer than 208 made its long walk 18%
// slower; bench/HISTORY.md, "The pair's register split"). No spills for any model or
// feature set at these (CUDA 13.0). Every warp starts at the kernel's count, 65536 /
// 384 rounded down to 8 = 168, and an increase waits until decreases have released
// enough: the three must not sum past 3 x 168, or the score group waits forever.
#if MLAJIT_LAYOUTS
// Arbitrary fp32 scales take the exact dequantization's converted form
// (sm90_common.cu), which fits V3.2's split with RoPE (GLM_NSA: no spills in any
// feature set, one CTA per row or the pair). Without RoPE (GLM53_NOPE) and one CTA
// per row, V3.2's split spilled 40 bytes in the producer; 16 registers moved from
// the score group to it spill 8 without features, up to 64 with the sink (no split
// of 504 spilled less; the score group spills hundreds below 192, the value group
// below 160; ptxas, CUDA 13.0).
constexpr bool kNoRopeSingle = kExactScalesOnly && cfg::kDRope == 0 && kPairCtas == 1;
constexpr int kScoreRegisters = kNoRopeSingle ? 192 : kPairCtas > 1 ? 216 : 208;
constexpr int kValueRegisters = 160;
constexpr int kProducerRegisters = kNoRopeSingle ? 152 : kPairCtas > 1 ? 128 : 136;
#else
constexpr int kScoreRegisters = kExactScalesOnly ? 200 : kPairCtas > 1 ? 216 : 208;
constexpr int kValueRegisters = 160;
constexpr int kProducerRegisters = kExactScalesOnly ? 144 : kPairCtas > 1 ? 128 : 136;
#endif
constexpr int kLaunchRegisters = (65536 / kCtaThreads) & ~7;
static_assert(kScoreRegisters + kValueRegisters + kProducerRegisters <= 3 * kLaunchRegisters,
              "setmaxnreg: the increase must be covered by the decreases");
static_assert(kScoreRegisters > kLaunchRegisters && kValueRegisters <= kLaunchRegisters &&
                  kProducerRegisters <= kLaunchRegisters,
              "setmaxnreg: the score group's call increases, the others decrease (a .dec above the "
              "launch count is an illegal instruction)");

// The score group's P V left in flight across the tile boundary, S of the next tile
// issued behind it: the generator's choice per model (bench/HISTORY.md, "P V in
// flight"). P's fragments stay live: 16 more registers, which only a pair's 216 hold.
constexpr bool kPvInFlight = cfg::kPvInFlight;
static_assert(!kPvInFlight || (kPairCtas > 1 && !kExactScalesOnly), "P V in flight: the pair's score registers");

enum NamedBarrier {
    kBarKFull = 1, kBarKEmpty = 3, kBarPReady = 5, kBarPFree = 6, kBarRowStats = 7, kBarRoundStored = 8, kBarQReady = 9,
    kBarEnd
};
static_assert(kBarKFull + 2 <= kBarKEmpty && kBarKEmpty + 2 <= kBarPReady, "an id per K buffer (two)");
static_assert(kBarEnd <= kHardwareNamedBarriers, "more named barriers than a CTA has");

// CTA pair: which rounds of a tile this CTA's producer gathers, and the exchange.
constexpr int kRoundsGathered = kRoundsPerTile / kPairCtas;       // per producer and tile
constexpr int kProducerLead = kProducerGroup * kWarpGroupThreads;  // the thread that signals for its group
constexpr u32 kPeerRoundBytes = kTokensPerRound * (cfg::kDQK * 2 + 4);  // bf16 rows + validity flags
static_assert(kPeerRoundBytes == kKBlocks * kTokensPerRound * 128 + kTokensPerRound * 4, "what copy_round_to_peer sends");
static_assert(kPairCtas == 1 || (kPairCtas == 2 && kRoundsGathered == 1), "a pair splits a tile's two rounds");

// L2 prefetch of the rows this CTA's producer will gather. One CTA per row: the
// producer prefetches the tile after the one it fills (t2, whose indices it
// already holds). CTA pair: the producer gathers one round per tile and its prefetches
// delayed its own loads (10% at h_q 128), so the value group, idle while the
// producer works and about a tile behind it, prefetches kValuePrefetchTiles past
// the tile it consumes. Measured choices: bench/NOTES.md.
constexpr int kValuePrefetchTiles = 3;
constexpr bool kValueGroupPrefetches = kPairCtas > 1;
constexpr int kPrefetchTokens = kRoundsGathered * kTokensPerRound;       // per tile: the rounds this CTA gathers
constexpr int kPrefetchLanes = kWarpGroupThreads / kPrefetchTokens;     // value-group lanes per row
static_assert(kWarpGroupThreads % kPrefetchTokens == 0, "the value group covers the gathered rows evenly");

static_assert(cfg::kThreads == kCtaThreads, "the generator's thread count must match the roles");
static_assert(kHeads == 64 && kTile == 64, "one wgmma M of heads and one N of candidates");
}  // namespace sm90

extern "C" __global__ void MLAJIT_CLUSTER_DIMS __launch_bounds__(sm90::kCtaThreads, 1) mlajit_decode_main(const DecodeParams p)
{
    using namespace sm90;
    wait_for_prerequisite_grid();     // nothing before it reads an argument
    release_dependent_grid_early(p);  // where the plan lets the combine start now
    extern __shared__ __align__(1024) u8 smem_raw[];
    // wgmma's 128-byte swizzle needs 1024-byte aligned blocks; the generator
    // reserves the slack.
    // (pointer arithmetic on smem_raw, not an integer round trip: the compiler then
    // knows every pointer below is shared memory and emits LDS/STS, not generic LD/ST)
    u8* smem = smem_raw + ((1024u - (smem_address(smem_raw) & 1023u)) & 1023u);
    const u32 sQ = smem_address(smem + cfg::kSmemQ);
    const u32 sK = smem_address(smem + cfg::kSmemK);          // buffer b at sK + b * kOperandBytes
    const u32 sP = smem_address(smem + cfg::kSmemProbs);      // P, bf16 64 x 64, swizzled like Q
    const u32 sAlpha = smem_address(smem + cfg::kSmemRowAlpha);    // [kHeads] this tile's rescale
    const u32 sRowMax = smem_address(smem + cfg::kSmemRowMax);     // [kHeads] final, log2 domain
    const u32 sRowSum = smem_address(smem + cfg::kSmemRowSum);     // [kHeads] final
    int* sTokenValid = reinterpret_cast<int*>(smem + cfg::kSmemTokenValid);  // [2][kTile]
    const u32 sPeerRoundFull = smem_address(smem + cfg::kSmemBarriers);   // [2] mbarriers (CTA pair)
    const u32 sPeerBufferFree = sPeerRoundFull + 2 * 8;                  // [2] mbarriers (CTA pair)

    const int tid = threadIdx.x;
    const int group = tid / kWarpGroupThreads;
    const int warp = (tid / 32) % 4, lane = tid % 32;  // warp within its group
    const CtaWork work = cta_work<kHeads>(p);
    const int row = work.row, head0 = work.head0, b = work.b, s = work.s, split = work.split;
    const TileRange range = work.range;

    // A CTA pair's rank (which round of each tile it gathers) and its peer. The
    // pair's mbarriers are published by a cluster barrier whose wait each role
    // puts just before its first use of them, after its own start-up work.
    const u32 rank = kPairCtas > 1 ? cluster_rank() : 0u, peer = rank ^ 1u;
    if (kPairCtas > 1) {
        if (tid == 0) {
            for (int i = 0; i < 2; i++) {
                mbarrier_init(sPeerRoundFull + 8 * i, 1);  // the local producer's expect_tx arrival
                mbarrier_init(sPeerBufferFree + 8 * i, 1);  // the peer producer's lead thread
            }
            fence_mbarrier_init();
        }
        cluster_arrive();
    }

    auto live_after = [&](int t) { return next_live_tile(range, t + 1, p.topk); };
    const int first = next_live_tile(range, range.begin, p.topk);

    if (group == kProducerGroup) {
        registers_decrease<kProducerRegisters>();
        const int token = warp * 8 + lane % 8, quarter = lane / 8;
        const int round0 = (int)rank * kRoundsGathered;  // the first round of each tile this producer gathers
        auto pos_of = [&](int t, int r) { return t * kTile + (round0 + r) * kTokensPerRound + token; };
        auto load_tile_slots = [&](int t, int (&raw)[kRoundsGathered]) {
#pragma unroll
            for (int r = 0; r < kRoundsGathered; r++)
                raw[r] = t < range.end ? load_slot(p, main_index_row(p, b, s), b, s, pos_of(t, r), range) : -1;
        };
        const u32 peer_delta = kPairCtas > 1 ? peer_address(sK, peer) - sK : 0u;
        auto dest_of = [&](int buf) { return RoundDest{sK + (u32)buf * kOperandBytes, sTokenValid + buf * kTile}; };
        // Before refilling buffer buf (tile seq >= 2): this CTA's consumers are done
        // with it. In a pair, the lead thread passes that on to the peer's producer,
        // announces the bytes the peer will send for this tile, and the producer
        // waits for the peer's consumers to be done with their buffer buf.
        auto claim_buffer = [&](int seq, int buf) {
            if (seq >= 2) named_barrier_sync(kBarKEmpty + buf, kCtaThreads);
            if (kPairCtas > 1) {
                if (tid == kProducerLead) {
                    if (seq >= 2) mbarrier_arrive_cluster(sPeerBufferFree + 8 * buf + peer_delta);
                    mbarrier_arrive_expect_tx(sPeerRoundFull + 8 * buf, kPeerRoundBytes);
                }
                if (seq >= 2) mbarrier_wait(sPeerBufferFree + 8 * buf, ((seq >> 1) & 1) ^ 1);
            }
        };
        // tiles t0 (being filled), t1, t2 and their raw indices (kSlotLookahead = 3 tiles held)
        int t0 = first, t1 = live_after(t0), t2 = live_after(t1);
        int raw0[kRoundsGathered], raw1[kRoundsGathered], raw2[kRoundsGathered];
        load_tile_slots(t0, raw0);
        load_tile_slots(t1, raw1);
        load_tile_slots(t2, raw2);
        auto prefetch_rows = [&](int t, const int (&raw)[kRoundsGathered]) {
            // past the range: raw -1, no row (no early exit on t: DSV4 spills)
            if (!kValueGroupPrefetches)
#pragma unroll
                for (int r = 0; r < kRoundsGathered; r++) prefetch_row<kLanesPerToken>(p, pos_of(t, r), raw[r], quarter);
        };
        prefetch_rows(t1, raw1);
        // The indices of the tile three ahead, and the rows of the tile after next
        // into L2 (at the start of a tile); then move on by one tile (at its end).
        int t3, raw3[kRoundsGathered];
        auto look_ahead = [&]() {
            t3 = live_after(t2);
            load_tile_slots(t3, raw3);
            prefetch_rows(t2, raw2);
        };
        auto advance = [&]() {
            t0 = t1;
            t1 = t2;
            t2 = t3;
#pragma unroll
            for (int r = 0; r < kRoundsGathered; r++) {
                raw0[r] = raw1[r];
                raw1[r] = raw2[r];
                raw2[r] = raw3[r];
            }
        };
#if MLAJIT_BF16
        // bf16 rows: each tile's rounds by cp.async straight into the claimed buffer
        // (copy_round_bf16), waited for and fenced, then published; a pair's round
        // then goes to the peer as the fp8 one does. The copies wait for the claim
        // (no register round ahead); the rows of the tile after next are in L2 by
        // then (prefetch_rows), and the consumers have a tile's math to do. Two
        // tiles in flight, each published once the next one's copies were issued,
        // ran 4-10% slower on an H200 (the pair 59%): the publication then waited
        // for the claim of the other buffer (bench/NOTES.md 1d).
        if (kPairCtas > 1) cluster_wait();  // the pair's mbarriers, for claim_buffer and the exchange
        for (int seq = 0; t0 < range.end; seq++) {
            const int buf = seq & 1;
            const RoundDest to = dest_of(buf);
            look_ahead();
            claim_buffer(seq, buf);
#pragma unroll
            for (int r = 0; r < kRoundsGathered; r++)
                copy_round_bf16(p, pos_of(t0, r), checked_slot(p, pos_of(t0, r), raw0[r]), to,
                                (round0 + r) * kTokensPerRound + token, quarter);
            copy_async_wait_all();
            fence_smem_for_async_proxy();  // for the local wgmma and for the bulk copy: both the async proxy
            named_barrier_arrive(kBarKFull + buf, kCtaThreads);
            if (kPairCtas > 1) {
                named_barrier_sync(kBarRoundStored, kWarpGroupThreads);
                if (tid == kProducerLead) copy_round_to_peer(to, round0, peer_delta, sPeerRoundFull + 8 * buf + peer_delta);
            }
            advance();
        }
#else
        RoundLoads even, odd;  // two register rounds, each loaded one round ahead of its stores
        if (t0 < range.end) load_round(p, pos_of(t0, 0), checked_slot(p, pos_of(t0, 0), raw0[0]), quarter, even);
        if (kPairCtas > 1) cluster_wait();  // the pair's mbarriers, for claim_buffer and the exchange
        if (kPairCtas == 1) {
            // both rounds of every tile: even = round 0, odd = round 1
            for (int seq = 0; t0 < range.end; seq++) {
                const int buf = seq & 1;
                const RoundDest to = dest_of(buf);
                look_ahead();
                load_round(p, pos_of(t0, 1), checked_slot(p, pos_of(t0, 1), raw0[1]), quarter, odd);
                claim_buffer(seq, buf);
                hold_until_here(even);
                store_round<false>(to, token, quarter, even);
                if (t1 < range.end) load_round(p, pos_of(t1, 0), checked_slot(p, pos_of(t1, 0), raw1[0]), quarter, even);
                hold_until_here(odd);
                store_round<false>(to, kTokensPerRound + token, quarter, odd);
                fence_smem_for_async_proxy();
                named_barrier_arrive(kBarKFull + buf, kCtaThreads);
                advance();
            }
        } else {
            // one round of every tile, into both CTAs: even and odd alternate by tile
            auto one_tile = [&](int seq, RoundLoads& now, RoundLoads& ahead) {
                const int buf = seq & 1;
                look_ahead();
                const RoundDest to = dest_of(buf);
                if (t1 < range.end) load_round(p, pos_of(t1, 0), checked_slot(p, pos_of(t1, 0), raw1[0]), quarter, ahead);
                claim_buffer(seq, buf);
                hold_until_here(now);
                store_round<false>(to, round0 * kTokensPerRound + token, quarter, now);
                fence_smem_for_async_proxy();  // for the local wgmma and for the bulk copy: both the async proxy
                named_barrier_arrive(kBarKFull + buf, kCtaThreads);
                named_barrier_sync(kBarRoundStored, kWarpGroupThreads);
                if (tid == kProducerLead) copy_round_to_peer(to, round0, peer_delta, sPeerRoundFull + 8 * buf + peer_delta);
                advance();
                return t0 < range.end;
            };
            for (int seq = 0; t0 < range.end; seq += 2)
                if (one_tile(seq, even, odd)) one_tile(seq + 1, odd, even);
        }
#endif
        if (kPairCtas > 1) cluster_sync();  // the peer may still write here until it is done
        return;
    }

    const int g = lane / 4, q = lane % 4;  // accumulator fragment coordinates: rows g and g + 8 of the warp
    const int hl0 = 16 * warp + g;         // the thread's first local head row
    float acc_o[kVDimsPerGroup / 2];       // 64 x 256 fp32 over the warp group
#pragma unroll
    for (int i = 0; i < kVDimsPerGroup / 2; i++) acc_o[i] = 0.0f;
    float row_max[2] = {neg_inf(), neg_inf()}, row_sum[2] = {0.0f, 0.0f};  // score group: rows hl0, hl0 + 8
    int staging_buf = 0;  // kStagedOutput: the K buffer no role reads any more, for this group's output rows
    // Buffer buf of tile seq holds both halves: this CTA's producer's (named
    // barrier) and, in a pair, the peer's bytes (mbarrier phase seq / 2).
    auto wait_tile = [&](int seq, int buf) {
        named_barrier_sync(kBarKFull + buf, kCtaThreads);
        if (kPairCtas > 1) mbarrier_wait(sPeerRoundFull + 8 * buf, (seq >> 1) & 1);
    };

    if (group == kScoreGroup) {
        // Q rows of this head group into the swizzled layout (heads past h_q are
        // zero). Only S reads Q, so the score group alone copies it, while the
        // producer already loads the first tile's indices and rows.
        stage_q_rows<kHeads, cfg::kDQK, 16, kWarpGroupThreads>(
            p, work, tid - kScoreGroup * kWarpGroupThreads,
            [sQ](int h, int c8) { return sQ + (u32)(c8 / 8) * kBlockBytes + swizzled(h, c8 % 8); });
        registers_increase<kScoreRegisters>();
        copy_async_wait_all();
        fence_smem_for_async_proxy();
        named_barrier_sync(kBarQReady, kWarpGroupThreads);
        if (kPairCtas > 1) cluster_wait();  // the pair's mbarriers, for wait_tile
        // kPvInFlight: P V of tile seq stays in flight while tile seq + 1's S is
        // issued; its P fragments live across the tile boundary (pf_carried), and its
        // buffer is released once it has completed (wgmma groups complete in order).
        // Otherwise P's fragments are the tile's own (pf_local), so those kernels
        // compile as they did before the option existed.
        u32 pf_carried[kKSteps][4];
        int pending_release = -1;  // the buffer the last P V read, when the producer refills it
        // After P V's wait: O and P's fragments are free, and the buffer if refilled.
        auto finish_pv = [&](u32(&frags)[kKSteps][4]) {
            fence_operands(acc_o);
            fence_operands(frags);
            if (pending_release >= 0) named_barrier_arrive(kBarKEmpty + pending_release, kCtaThreads);
            pending_release = -1;
        };
        int seq = 0;
        for (int tile = first; tile < range.end; tile = live_after(tile), seq++) {
            const int buf = seq & 1;
            const bool refilled = live_after(live_after(tile)) < range.end;  // the producer refills buf
            wait_tile(seq, buf);
            const u32 k_tile = sK + (u32)buf * kOperandBytes;

            // S = Q K^T over all kKBlocks x kKSteps k-steps.
            float acc_s[kTile / 2];
#pragma unroll
            for (int i = 0; i < kTile / 2; i++) acc_s[i] = 0.0f;  // overwritten (scale_d = 0); keeps them defined
            fence_operands(acc_s);
            wgmma_fence();
#pragma unroll
            for (int kb = 0; kb < kKBlocks; kb++)
#pragma unroll
                for (int kk = 0; kk < kKSteps; kk++)
                    wgmma_m64n64k16_ss(acc_s, smem_descriptor(sQ + kb * kBlockBytes + kk * 32, 0, 1024),
                                       smem_descriptor(k_tile + kb * kBlockBytes + kk * 32, 0, 1024), kb | kk);
            wgmma_commit();
            if (kPvInFlight && seq > 0) {
                wgmma_wait<1>();  // the last tile's P V, not this S
                finish_pv(pf_carried);
            }
            wgmma_wait<0>();
            fence_operands(acc_s);

            // the online softmax; S becomes P
            float alpha[2];
            online_softmax_tile(p, acc_s, sTokenValid + buf * kTile, q, row_max, row_sum, alpha);

            // P (bf16) as wgmma A fragments, one per 16-candidate k-step.
            u32 pf_local[kKSteps][4];
            u32(&pf)[kKSteps][4] = kPvInFlight ? pf_carried : pf_local;
            probs_fragments(acc_s, pf);

            // P and the rescale factors to shared memory for the value group. Fragment
            // register r of k-step kk holds row g + 8 (r & 1), candidates 16 kk + 8 (r >> 1) + 2 q, + 1.
            if (seq > 0) named_barrier_sync(kBarPFree, kConsumerThreads);
#pragma unroll
            for (int kk = 0; kk < kKSteps; kk++)
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int hl = hl0 + 8 * (r & 1), c16 = 2 * kk + (r >> 1);  // 16-byte chunk of the row
                    store_shared32(sP + swizzled(hl, c16) + 4 * q, pf[kk][r]);
                }
            if (q == 0) {
                st_shared_f32(sAlpha + 4 * hl0, alpha[0]);
                st_shared_f32(sAlpha + 4 * (hl0 + 8), alpha[1]);
            }
            fence_smem_for_async_proxy();
            named_barrier_arrive(kBarPReady, kConsumerThreads);

            // O[:, 0 .. 256) += P V; V = the K tile's first kDV dims, MN-major.
#pragma unroll
            for (int i = 0; i < kVDimsPerGroup / 2; i++) acc_o[i] *= alpha[(i / 2) % 2];
            fence_operands(acc_o);
            fence_operands(pf);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < kKSteps; kk++)
                wgmma_m64n256k16_rs_tnsp_b(acc_o, pf[kk], smem_descriptor(k_tile + kk * 16 * 128, kBlockBytes, 1024));
            wgmma_commit();
            pending_release = refilled ? buf : -1;
            if (!kPvInFlight) {
                wgmma_wait_all();
                finish_pv(pf);
            }
        }
        if (kPvInFlight) {
            wgmma_wait_all();
            finish_pv(pf_carried);
        }
        // The final row statistics, for both groups' epilogues.
#pragma unroll
        for (int half = 0; half < 2; half++) {
            row_sum[half] = warp_sum_xor(row_sum[half], 4);
            if (q == 0) {
                st_shared_f32(sRowMax + 4 * (hl0 + 8 * half), row_max[half]);
                st_shared_f32(sRowSum + 4 * (hl0 + 8 * half), row_sum[half]);
            }
        }
        named_barrier_arrive(kBarRowStats, kConsumerThreads);
        // The buffer of the tile before last: S and P V on it are done (the value
        // group freed P after its P V), and no tile remains for the producer.
        staging_buf = seq & 1;
    } else {
        registers_decrease<kValueRegisters>();
        // CTA pair: prefetcher of this thread's row of each tile the producer
        // gathers, kValuePrefetchTiles tiles ahead (its index loaded a tile early).
        const int vt = tid % kWarpGroupThreads;
        const int pf_token = (int)rank * kPrefetchTokens + vt / kPrefetchLanes, pf_part = vt % kPrefetchLanes;
        auto pf_raw_of = [&](int t) {
            return t < range.end ? load_slot(p, main_index_row(p, b, s), b, s, t * kTile + pf_token, range) : -1;
        };
        int pf_tile = range.end, pf_raw = -1;
        if (kValueGroupPrefetches) {
            pf_tile = live_after(first);
            for (int i = 1; i < kValuePrefetchTiles && pf_tile < range.end; i++, pf_tile = live_after(pf_tile))
                prefetch_row<kPrefetchLanes>(p, pf_tile * kTile + pf_token, pf_raw_of(pf_tile), pf_part);
            pf_raw = pf_raw_of(pf_tile);
        }
        if (kPairCtas > 1) cluster_wait();  // the pair's mbarriers, for wait_tile
        int seq = 0;
        for (int tile = first; tile < range.end; tile = live_after(tile), seq++) {
            const int buf = seq & 1;
            const int next = live_after(tile);
            const bool refilled = live_after(next) < range.end;
            if (kValueGroupPrefetches && pf_tile < range.end) {
                prefetch_row<kPrefetchLanes>(p, pf_tile * kTile + pf_token, pf_raw, pf_part);
                pf_tile = live_after(pf_tile);
                pf_raw = pf_raw_of(pf_tile);
            }
            wait_tile(seq, buf);
            named_barrier_sync(kBarPReady, kConsumerThreads);
            const float alpha0 = load_shared_f32(sAlpha + 4 * hl0), alpha1 = load_shared_f32(sAlpha + 4 * (hl0 + 8));
#pragma unroll
            for (int i = 0; i < kVDimsPerGroup / 2; i++) acc_o[i] *= (i / 2) % 2 ? alpha1 : alpha0;
            // O[:, 256 .. 512) += P V, P from shared memory.
            const u32 v_base = sK + (u32)buf * kOperandBytes + (u32)kVBlocksPerGroup * kBlockBytes;
            fence_operands(acc_o);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < kKSteps; kk++)
                wgmma_m64n256k16_ss_tnsp_b(acc_o, smem_descriptor(sP + kk * 32, 0, 1024),
                                           smem_descriptor(v_base + kk * 16 * 128, kBlockBytes, 1024));
            wgmma_commit();
            wgmma_wait_all();
            fence_operands(acc_o);
            if (next < range.end) named_barrier_arrive(kBarPFree, kConsumerThreads);
            if (refilled) named_barrier_arrive(kBarKEmpty + buf, kCtaThreads);
        }
        named_barrier_sync(kBarRowStats, kConsumerThreads);
#pragma unroll
        for (int half = 0; half < 2; half++) {
            row_max[half] = load_shared_f32(sRowMax + 4 * (hl0 + 8 * half));
            row_sum[half] = load_shared_f32(sRowSum + 4 * (hl0 + 8 * half));
        }
        // The last tile's buffer: this group's P V on it is done, and the score
        // group's too (it arrived at kBarRowStats after its loop).
        staging_buf = (seq - 1) & 1;
    }

    // Epilogue: normalize; write the result, or this split's partial.
    // kStagedOutput (a plan that does not split, short walks): stored straight from
    // the fragments, each warp instruction would touch 8 head rows' lines; the rows
    // go through a spent K buffer instead, 16-byte chunks XOR-swizzled by the row
    // (conflict-free both ways), and each warp writes its own 16 rows back, every
    // instruction 512 contiguous bytes of one row. A separate kernel: the staged
    // code's mere presence slowed the long walks of the CTA pair (bench/NOTES.md).
    constexpr int kRowBytes = kVDimsPerGroup * 2;  // a group's half of a bf16 output row
    static_assert(!cfg::kStagedOutput || kHeads * kRowBytes <= kOperandBytes, "a group's output rows fit in a K buffer");
    const u32 staging = sK + (u32)staging_buf * kOperandBytes;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int h = head0 + hl0 + 8 * half;
        if (h >= cfg::kHeads) continue;
        finish_row(
            p, split, row, b, s, h, group * kVDimsPerGroup + 2 * q, row_max[half], row_sum[half],
            group == kScoreGroup && q == 0,
            [&](float* dst, float inv) {
                if (cfg::kStagedOutput) return;  // never called: the plan does not split this kernel (its spills)
                store_o_row_f32(dst, acc_o, half, inv);
            },
            [&](u16* dst, float scale) {
                if (cfg::kStagedOutput) {
                    // dims 8 j + 2 q, + 1 of local row hl0 + 8 half: chunk j ^ g, bytes 4 q
                    const u32 base = staging + (u32)((hl0 + 8 * half) * kRowBytes + (g << 4) + 4 * q);
#pragma unroll
                    for (int j = 0; j < kVDimsPerGroup / 8; j++)
                        store_shared32(base ^ (u32)(j << 4),
                                       pack_bf16x2(acc_o[4 * j + 2 * half] * scale, acc_o[4 * j + 2 * half + 1] * scale));
                } else {
                    store_o_row_bf16(dst, acc_o, half, scale);
                }
            });
    }
    if (cfg::kStagedOutput && p.num_splits == 1) {
        __syncwarp();  // each warp reads back only the rows it staged
        const int h_first = head0 + 16 * warp;
        const int rows_here = min(16, cfg::kHeads - h_first);
        u8* dst = reinterpret_cast<u8*>(p.out + b * p.out_stride_b + s * p.out_stride_s + h_first * p.out_stride_h +
                                        group * kVDimsPerGroup);
        u32 staged_row = staging + (u32)(16 * warp * kRowBytes);
#pragma unroll 1
        for (int r = 0; r < rows_here; r++, dst += p.out_stride_h * 2, staged_row += kRowBytes)
#pragma unroll
            for (int c = lane; c < kRowBytes / 16; c += 32)
                *reinterpret_cast<U32x4*>(dst + c * 16) = load_shared16(staged_row + (u32)((c ^ (r & 7)) << 4));
    }
    if (kPairCtas > 1) cluster_sync();  // the peer may still write here until it is done
}
