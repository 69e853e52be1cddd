// ---------------------------------------------------------------------------
// decode_sm90_split.cu: the Hopper kernel for value rows twice one CTA's
// accumulators (sm_90a): d_v = d_nope = 1024 with 64 RoPE dims (DOTS3_SWA). Q and
// two K tiles of 1088 dims would need 408 KB of shared memory, and O of 64 heads
// x 1024 dims 512 registers a thread over two warp groups; so a cluster of two
// CTAs per (row, 64 heads, split) splits the dims:
//   rank 0: NoPE dims [0, 512) of Q and K, and V's first 512 dims;
//   rank 1: NoPE dims [512, 1024) and the RoPE dims, and V's second 512 dims.
// Each CTA gathers and dequantizes only its own dims of every tile (no K
// exchange) and computes its part of S = Q K^T. Rank 1 sends its part to rank 0
// (each thread's 32 fp32 accumulators, in fragment order, to the same thread's
// place there, by st.async); rank 0 adds it, runs the online softmax, and sends
// P and the rescale factors into rank 1's P buffer. Then each CTA's two consumer
// groups run P V on their 256-dim quarters of V as sm90's do (rank 0's score
// group with P from registers, the others from shared memory) and write their
// dims of O. A CTA's map is V3.2's sm90 map (Q and two K tiles of 9 blocks).
//
// Roles as decode_sm90.cu's one CTA per row: score group (warp group 0), value
// group (1), producer (2: both rounds of every tile, loaded one round ahead in
// registers). Named barriers as there (kBarPReady and kBarPFree in rank 0 only);
// and mbarriers in shared memory, each in the CTA that waits on it:
//   partial_full  (rank 0) rank 1's part of S has landed in the inbox (st.async
//                 bytes; rank 0's score lead sets the count)
//   partial_free  (rank 1) rank 0's score group has read the inbox (128 arrivals)
//   probs_full    (rank 1) P and the factors of the tile have landed (st.async
//                 bytes; rank 1's score lead sets the count)
//   probs_free    (rank 0) rank 1's consumers have finished reading P (256 arrivals)
//   stats_full    (rank 1) the heads' final max and sum have landed (st.async bytes)
// The inbox (16 KB) is what rank 0 leaves unused of its 9-block buffers: Q's and
// K buffer 0's RoPE blocks, 8 KB each. The "free" arrivals are CTA-scope releases
// (sm90_common.cu's mbarrier_arrive_cluster, as sm90's pair passes on a read
// buffer): the reader's own loads and wgmma reads are done; the cluster-scope form
// put a MEMBAR.GPU before each, every tile.
// ---------------------------------------------------------------------------
namespace sm90 {

constexpr int kHeads = cfg::kHeadsPerCta;       // 64: one wgmma M
constexpr int kSliceDims = 512;                 // each rank's NoPE dims, and its V dims
constexpr int kVDimsPerGroup = kSliceDims / 2;  // 256: one wgmma N of P V
constexpr int kVBlocksPerGroup = kVDimsPerGroup / 64;
constexpr int kNopeBlocks = kSliceDims / 64;               // 8
constexpr int kSliceBlocks = kNopeBlocks + cfg::kDRope / 64;  // 9: rank 1's (rank 0 fills 8)
constexpr int kSliceBytes = kSliceBlocks * kBlockBytes;    // Q, or one K tile buffer
constexpr int kSliceNopeLoads = kSliceDims / 16 / kLanesPerToken;  // 8 a lane and candidate
constexpr int kSliceRopeLoads = cfg::kDRope * 2 / 16 / kLanesPerToken;  // 2 (rank 1 only)
constexpr int kCtaThreads = 3 * kWarpGroupThreads;
constexpr int kConsumerThreads = 2 * kWarpGroupThreads;
enum Role { kScoreGroup = 0, kValueGroup = 1, kProducerGroup = 2 };
// setmaxnreg: the producer holds two rounds of a 512-dim slice (about V3.2's); the
// score group sm90's O, S and P plus the exchange's addresses. ptxas (CUDA 13.0):
// 216 / 160 / 128 spills 16 bytes in the producer's exact dequantization (taken for
// ue8m0 scales past 2^7 only) and, with the extra cache or a length, two words of
// the score group's (one reload a tile); 208 / 160 / 136 spilled 84 bytes, a value
// group of 152 some 1.5 KB.
constexpr int kScoreRegisters = 216;
constexpr int kValueRegisters = 160;
constexpr int kProducerRegisters = 128;
constexpr int kLaunchRegisters = (65536 / kCtaThreads) & ~7;
static_assert(kScoreRegisters + kValueRegisters + kProducerRegisters <= 3 * kLaunchRegisters,
              "setmaxnreg: the increase must be covered by the decreases");

enum NamedBarrier { kBarKFull = 1, kBarKEmpty = 3, kBarPReady = 5, kBarPFree = 6, kBarRowStats = 7, kBarQReady = 8, kBarEnd };
static_assert(kBarEnd <= kHardwareNamedBarriers, "more named barriers than a CTA has");

// The schedule: each tile in series (S, rank 1's part to rank 0, the softmax, P
// back, P V), 10.7 K cycles a tile against 6.4 K for V3.2's 128-head pair (H100).
// Two changes to it passed the fp64 reference and were not kept (bench/NOTES.md 1d
// and 4): rank 1 one tile ahead (its next part of S before this tile's P) ran 4-5%
// slower, as the next tile's K then has to be ready a tile earlier than two K
// buffers allow; P sent by one bulk copy a warp instead of 32 four-byte st.async a
// thread made no difference.

constexpr int kInboxBytes = kWarpGroupThreads * (kTile / 2) * 4;   // a score group's S: 16 KB
constexpr int kProbsBytes = kHeads * kTile * 2 + kHeads * 4;       // P (bf16) and the factors
constexpr int kStatsBytes = 2 * kHeads * 4;                        // final max and sum

static_assert(cfg::kClusterCtas == 2 && cfg::kThreads == kCtaThreads, "a CTA pair of three warp groups each");
static_assert(kHeads == 64 && kTile == 64, "one wgmma M of heads and one N of candidates");
static_assert(cfg::kDNope == 2 * kSliceDims && cfg::kDV == cfg::kDNope && cfg::kDRope == 64,
              "the dims split: NoPE 2 x 512 (V), and 64 RoPE dims in rank 1");
static_assert(cfg::kScaleFormat == 3 && !cfg::kScalesInline && cfg::kQuantTile % 128 == 0,
              "ue8m0 scales in the footer, a quantization tile within each rank's 64-byte steps");
static_assert(cfg::kSmemK == cfg::kSmemQ + kSliceBytes, "the map: Q, then the K buffers");

// ---- PTX: distributed shared memory ----
// 16 bytes into another CTA's shared memory (a cluster address), counted as
// transaction bytes on the mbarrier there (cluster address); release at cluster
// scope by the mbarrier's completion.
__device__ __forceinline__ void store_async_peer16(u32 cluster_dst, const float (&v)[4], u32 cluster_bar)
{
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];\n"
                 :: "r"(cluster_dst), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]), "r"(cluster_bar) : "memory");
}

__device__ __forceinline__ void store_async_peer4(u32 cluster_dst, u32 v, u32 cluster_bar)
{
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n"
                 :: "r"(cluster_dst), "r"(v), "r"(cluster_bar) : "memory");
}

// ---- the producer's round of a rank's dims (sm90_common.cu's rounds, sliced) ----
struct SliceLoads {
    U32x4 nope[kSliceNopeLoads];
    U32x4 rope[kSliceRopeLoads];
    U32x2 scales;  // the token's footer: ue8m0 bytes
    bool live;
};

template <int kRank>
__device__ __forceinline__ void load_slice_round(const DecodeParams& p, int pos, int slot, int quarter, SliceLoads& d)
{
    const Candidate c = locate_candidate(p, pos, slot);
    d.live = c.row != nullptr;
    if (d.live) {
        const u8* row = c.row + kRank * kSliceDims;
#pragma unroll
        for (int i = 0; i < kSliceNopeLoads; i++) d.nope[i] = load_row16(row + 64 * i + 16 * quarter);
        if (kRank == 1)
#pragma unroll
            for (int i = 0; i < kSliceRopeLoads; i++)
                d.rope[i] = load_row16(c.row + cfg::kRopeOffset + 16 * (quarter + kLanesPerToken * i));
        d.scales = load_row8(c.scales);
    } else {
#pragma unroll
        for (int i = 0; i < kSliceNopeLoads; i++) d.nope[i] = U32x4{0u, 0u, 0u, 0u};
#pragma unroll
        for (int i = 0; i < kSliceRopeLoads; i++) d.rope[i] = U32x4{0u, 0u, 0u, 0u};
        d.scales = U32x2{0x7f7f7f7fu, 0x7f7f7f7fu};  // unit scales: zero codes take the fast path
    }
}

// Dequantize a round into row t of the K tile at k_base; mark its validity. As
// store_round: the fast path for the whole candidate or the exact one.
template <int kRank>
__device__ __forceinline__ void store_slice_round(u32 k_base, int* valid, int t, int quarter, const SliceLoads& d)
{
    auto scale_bits = [&](int i) {
        const int k = (kRank * kSliceDims + 64 * i) / cfg::kQuantTile;
        return ((k < 4 ? d.scales.x : d.scales.y) >> (8 * (k % 4))) & 0xffu;
    };
    auto store_chunk = [&](int i, const u32 (&w)[8]) {
        const u32 block = (u32)i * kBlockBytes;
        store_shared16(k_base + block + swizzled(t, 2 * quarter), U32x4{w[0], w[1], w[2], w[3]});
        store_shared16(k_base + block + swizzled(t, 2 * quarter + 1), U32x4{w[4], w[5], w[6], w[7]});
    };
    u32 fast[kSliceNopeLoads];
    bool all_fast = true;
#pragma unroll
    for (int i = 0; i < kSliceNopeLoads; i++) {
        fast[i] = fast_scale_bf16x2<false>(scale_bits(i));
        all_fast = all_fast && fast[i] != 0u;
    }
    if (!d.live) {
        all_fast = true;
#pragma unroll
        for (int i = 0; i < kSliceNopeLoads; i++) fast[i] = 0u;
    }
    if (all_fast) {
#pragma unroll
        for (int i = 0; i < kSliceNopeLoads; i++) {
            u32 w[8];
            dequant16_pow2(d.nope[i], fast[i], w);
            store_chunk(i, w);
        }
    } else {
#pragma unroll
        for (int i = 0; i < kSliceNopeLoads; i++) {
            u32 w[8];
            dequant16_exact(d.nope[i], scale_value(scale_bits(i)), w);
            store_chunk(i, w);
        }
    }
    if (kRank == 1)
#pragma unroll
        for (int i = 0; i < kSliceRopeLoads; i++) {
            const int dim = 8 * (quarter + kLanesPerToken * i);  // within the RoPE block
            store_shared16(k_base + (u32)kNopeBlocks * kBlockBytes + swizzled(t, dim / 8), d.rope[i]);
        }
    if (quarter == 0) valid[t] = (int)d.live;
}

// A row's lines of this rank's dims into L2 (and rank 0 the footer), two tiles
// ahead: lane `part` of 4 touches every 128 bytes from its slice's start, and the
// slice's last byte.
template <int kRank>
__device__ __forceinline__ void prefetch_slice(const DecodeParams& p, int pos, int raw, int part)
{
    const Candidate c = locate_candidate(p, pos, checked_slot(p, pos, raw));
    if (!c.row) return;
    constexpr int kBegin = kRank * kSliceDims, kEnd = kRank ? cfg::kRopeOffset + 2 * cfg::kDRope : kSliceDims;
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int off = kBegin + 128 * (part + kLanesPerToken * k);
        if (off < kEnd + 128) prefetch_l2_line(c.row + min(off, kEnd - 1), p.prefetch_evict_last);
    }
    if (kRank == 0 && part == 0) prefetch_l2_line(c.scales, p.prefetch_evict_last);
}

// Compile-time integers, for code specialized per rank.
template <int N>
struct Constant {
    static constexpr int value = N;
};
}  // namespace sm90

extern "C" __global__ void MLAJIT_CLUSTER_DIMS __launch_bounds__(sm90::kCtaThreads, 1)
    mlajit_decode_main(const DecodeParams p)
{
    using namespace sm90;
    wait_for_prerequisite_grid();
    release_dependent_grid_early(p);
    extern __shared__ __align__(1024) u8 smem_raw[];
    u8* smem = smem_raw + ((1024u - (smem_address(smem_raw) & 1023u)) & 1023u);
    const u32 sQ = smem_address(smem + cfg::kSmemQ);
    const u32 sK = smem_address(smem + cfg::kSmemK);          // buffer b at sK + b * kSliceBytes
    const u32 sP = smem_address(smem + cfg::kSmemProbs);      // P, bf16 64 x 64, swizzled like Q
    const u32 sAlpha = smem_address(smem + cfg::kSmemRowAlpha);
    const u32 sRowMax = smem_address(smem + cfg::kSmemRowMax);
    const u32 sRowSum = smem_address(smem + cfg::kSmemRowSum);
    int* sTokenValid = reinterpret_cast<int*>(smem + cfg::kSmemTokenValid);  // [2][kTile]
    const u32 sPartialFull = smem_address(smem + cfg::kSmemBarriers);
    const u32 sPartialFree = sPartialFull + 8, sProbsFull = sPartialFull + 16, sProbsFree = sPartialFull + 24,
              sStatsFull = sPartialFull + 32;

    const int tid = threadIdx.x;
    const int group = tid / kWarpGroupThreads, gtid = tid % kWarpGroupThreads;
    const int warp = (tid / 32) % 4, lane = tid % 32;
    // blockIdx.y: head group x 2 + rank (the cluster spans the two ranks)
    CtaWork work = cta_work<kHeads>(p);
    work.head0 = (blockIdx.y / 2) * kHeads;
    const int row = work.row, head0 = work.head0, b = work.b, s = work.s, split = work.split;
    const TileRange range = work.range;
    const int rank = (int)cluster_rank();
    const u32 peer_delta = peer_address(sQ, (u32)rank ^ 1u) - sQ;  // a local address plus this is the peer's

    if (tid == 0) {
        // each in the CTA that waits on it (the other's are unused)
        mbarrier_init(sPartialFull, 1);                // rank 0: its score lead's expect_tx
        mbarrier_init(sPartialFree, kWarpGroupThreads);  // rank 1: rank 0's score group
        mbarrier_init(sProbsFull, 1);                  // rank 1: its score lead's expect_tx
        mbarrier_init(sProbsFree, kConsumerThreads);   // rank 0: rank 1's consumers
        mbarrier_init(sStatsFull, 1);                  // rank 1: its score lead's expect_tx
        if (rank == 0) mbarrier_arrive_expect_tx(sPartialFull, kInboxBytes);
        if (rank == 1) {
            mbarrier_arrive_expect_tx(sProbsFull, kProbsBytes);
            mbarrier_arrive_expect_tx(sStatsFull, kStatsBytes);
        }
        fence_mbarrier_init();
    }
    cluster_arrive();

    auto live_after = [&](int t) { return next_live_tile(range, t + 1, p.topk); };
    const int first = next_live_tile(range, range.begin, p.topk);

    if (group == kProducerGroup) {
        registers_decrease<kProducerRegisters>();
        // one copy of the loop per rank, its dims' offsets constants
        auto produce = [&](auto rank_constant) {
            constexpr int kRank = decltype(rank_constant)::value;
            const int token = warp * 8 + lane % 8, quarter = lane / 8;
            const int* const indices = main_index_row(p, b, s);
            auto pos_of = [&](int t, int r) { return t * kTile + r * kTokensPerRound + token; };
            auto slot_of = [&](int t, int r) { return t < range.end ? load_slot(p, indices, b, s, pos_of(t, r), range) : -1; };
            int t0 = first, t1 = live_after(t0), t2 = live_after(t1);
            int raw0[2] = {slot_of(t0, 0), slot_of(t0, 1)}, raw1[2] = {slot_of(t1, 0), slot_of(t1, 1)};
            int raw2[2] = {slot_of(t2, 0), slot_of(t2, 1)};
            for (int r = 0; r < 2; r++) prefetch_slice<kRank>(p, pos_of(t1, r), raw1[r], quarter);
            SliceLoads even, odd;
            if (t0 < range.end) load_slice_round<kRank>(p, pos_of(t0, 0), checked_slot(p, pos_of(t0, 0), raw0[0]), quarter, even);
            cluster_wait();
            for (int seq = 0; t0 < range.end; seq++) {
                const int buf = seq & 1;
                const u32 k_base = sK + (u32)buf * kSliceBytes;
                int* valid = sTokenValid + buf * kTile;
                const int t3 = live_after(t2);
                const int raw3[2] = {slot_of(t3, 0), slot_of(t3, 1)};
                for (int r = 0; r < 2; r++) prefetch_slice<kRank>(p, pos_of(t2, r), raw2[r], quarter);
                load_slice_round<kRank>(p, pos_of(t0, 1), checked_slot(p, pos_of(t0, 1), raw0[1]), quarter, odd);
                if (seq >= 2) named_barrier_sync(kBarKEmpty + buf, kCtaThreads);
                store_slice_round<kRank>(k_base, valid, token, quarter, even);
                if (t1 < range.end)
                    load_slice_round<kRank>(p, pos_of(t1, 0), checked_slot(p, pos_of(t1, 0), raw1[0]), quarter, even);
                store_slice_round<kRank>(k_base, valid, kTokensPerRound + token, quarter, odd);
                fence_smem_for_async_proxy();
                named_barrier_arrive(kBarKFull + buf, kCtaThreads);
                t0 = t1;
                t1 = t2;
                t2 = t3;
                for (int r = 0; r < 2; r++) {
                    raw0[r] = raw1[r];
                    raw1[r] = raw2[r];
                    raw2[r] = raw3[r];
                }
            }
        };
        if (rank == 0)
            produce(Constant<0>());
        else
            produce(Constant<1>());
        cluster_sync();  // the peer may still write here until it is done
        return;
    }

    const int g = lane / 4, q = lane % 4;
    const int hl0 = 16 * warp + g;
    float acc_o[kVDimsPerGroup / 2];
#pragma unroll
    for (int i = 0; i < kVDimsPerGroup / 2; i++) acc_o[i] = 0.0f;
    float row_max[2] = {neg_inf(), neg_inf()}, row_sum[2] = {0.0f, 0.0f};
    // The inbox slot of this score thread's 32 accumulators (rank 0's unused RoPE
    // blocks), computed where it is used (held across the loop, it was spilled).
    auto inbox_of = [&]() {
        u32 t = (u32)gtid;
        asm volatile("" : "+r"(t));
        return (t < 64 ? sQ : sK) + (u32)kNopeBlocks * kBlockBytes + (t % 64) * 128;
    };
    // P V on this group's quarter of V: A = P from shared memory (rank 1, and rank 0's value group).
    auto pv_from_shared = [&](int buf) {
        const u32 v_base = sK + (u32)buf * kSliceBytes + (u32)(group * kVBlocksPerGroup) * kBlockBytes;
        fence_operands(acc_o);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kKSteps; kk++)
            wgmma_m64n256k16_ss_tnsp_b(acc_o, smem_descriptor(sP + kk * 32, 0, 1024),
                                       smem_descriptor(v_base + kk * 16 * 128, kBlockBytes, 1024));
        wgmma_commit();
        wgmma_wait_all();
        fence_operands(acc_o);
    };
    auto rescale = [&](float alpha0, float alpha1) {
#pragma unroll
        for (int i = 0; i < kVDimsPerGroup / 2; i++) acc_o[i] *= (i / 2) % 2 ? alpha1 : alpha0;
    };

    if (group == kScoreGroup) {
        // this rank's dims of Q: rank 0 dims [0, 512), rank 1 [512, 1088)
        const int q_chunks = (kSliceDims + rank * cfg::kDRope) / 8;
        for (int i = gtid; i < kHeads * q_chunks; i += kWarpGroupThreads) {
            const int h = i / q_chunks, c = i % q_chunks;
            const bool live = head0 + h < cfg::kHeads;
            copy_async<16>(sQ + (u32)(c / 8) * kBlockBytes + swizzled(h, c % 8),
                           p.q + b * p.q_stride_b + s * p.q_stride_s + (live ? head0 + h : 0) * p.q_stride_h +
                               rank * kSliceDims + 8 * c,
                           live);
        }
        registers_increase<kScoreRegisters>();
        copy_async_wait_all();
        fence_smem_for_async_proxy();
        named_barrier_sync(kBarQReady, kWarpGroupThreads);
        cluster_wait();
        const int s_blocks = rank ? kSliceBlocks : kNopeBlocks;
        int seq = 0;
        for (int tile = first; tile < range.end; tile = live_after(tile), seq++) {
            const int buf = seq & 1;
            const bool refilled = live_after(live_after(tile)) < range.end;
            named_barrier_sync(kBarKFull + buf, kCtaThreads);
            const u32 k_tile = sK + (u32)buf * kSliceBytes;

            // this rank's part of S = Q K^T
            float acc_s[kTile / 2];
#pragma unroll
            for (int i = 0; i < kTile / 2; i++) acc_s[i] = 0.0f;
            fence_operands(acc_s);
            wgmma_fence();
            const u64 q_desc = smem_descriptor(sQ, 0, 1024), k_desc = smem_descriptor(k_tile, 0, 1024);
#pragma unroll
            for (int kb = 0; kb < kSliceBlocks; kb++)
                if (kb < s_blocks)
#pragma unroll
                    for (int kk = 0; kk < kKSteps; kk++)
                        wgmma_m64n64k16_ss(acc_s, descriptor_plus(q_desc, kb * kBlockBytes + kk * 32),
                                           descriptor_plus(k_desc, kb * kBlockBytes + kk * 32), kb | kk);
            wgmma_commit();
            wgmma_wait<0>();
            fence_operands(acc_s);

            if (rank == 1) {
                // send the part to rank 0; wait for P and the factors
                if (seq > 0) mbarrier_wait(sPartialFree, (u32)(seq - 1) & 1u);
                const u32 inbox = inbox_of();
#pragma unroll
                for (int i = 0; i < kTile / 2; i += 4) {
                    const float v[4] = {acc_s[i], acc_s[i + 1], acc_s[i + 2], acc_s[i + 3]};
                    store_async_peer16(inbox + 4 * i + peer_delta, v, sPartialFull + peer_delta);
                }
                mbarrier_wait(sProbsFull, (u32)seq & 1u);
                if (gtid == 0) mbarrier_arrive_expect_tx(sProbsFull, kProbsBytes);  // the next tile's
                fence_smem_for_async_proxy();  // P, stored by the peer, read by wgmma here
                rescale(load_shared_f32(sAlpha + 4 * hl0), load_shared_f32(sAlpha + 4 * (hl0 + 8)));
                pv_from_shared(buf);
                mbarrier_arrive_cluster(sProbsFree + peer_delta);
                if (refilled) named_barrier_arrive(kBarKEmpty + buf, kCtaThreads);
                continue;
            }

            // rank 0: add rank 1's part, then the online softmax
            mbarrier_wait(sPartialFull, (u32)seq & 1u);
            const u32 inbox = inbox_of();
#pragma unroll
            for (int i = 0; i < kTile / 2; i += 4) {
                const U32x4 v = load_shared16(inbox + 4 * i);
                acc_s[i] += bits_to_float(v.x);
                acc_s[i + 1] += bits_to_float(v.y);
                acc_s[i + 2] += bits_to_float(v.z);
                acc_s[i + 3] += bits_to_float(v.w);
            }
            if (gtid == 0) mbarrier_arrive_expect_tx(sPartialFull, kInboxBytes);  // the next tile's
            mbarrier_arrive_cluster(sPartialFree + peer_delta);
            float alpha[2];
            online_softmax_tile(p, acc_s, sTokenValid + buf * kTile, q, row_max, row_sum, alpha);
            u32 pf[kKSteps][4];
            probs_fragments(acc_s, pf);
            // P and the factors here (the value group) and in rank 1, once both have read the last
            if (seq > 0) {
                named_barrier_sync(kBarPFree, kConsumerThreads);
                mbarrier_wait(sProbsFree, (u32)(seq - 1) & 1u);
            }
            // (the row's base made opaque here: ptxas otherwise kept the 32 addresses of
            // these stores, local and peer, live across the loop, and spilled them)
            u32 p_row = sP + (u32)hl0 * 128 + 4 * q;
            asm volatile("" : "+r"(p_row));
            const u32 probs_full_peer = sProbsFull + peer_delta;
#pragma unroll
            for (int kk = 0; kk < kKSteps; kk++)
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int c16 = 2 * kk + (r >> 1);  // row hl0 + 8 (r & 1): the same swizzle phase g
                    const u32 at = p_row + (u32)(1024 * (r & 1)) + (u32)((c16 ^ g) << 4);
                    store_shared32(at, pf[kk][r]);
                    store_async_peer4(at + peer_delta, pf[kk][r], probs_full_peer);
                }
            if (q == 0) {
                for (int half = 0; half < 2; half++) {
                    const u32 at = sAlpha + 4 * (hl0 + 8 * half);
                    st_shared_f32(at, alpha[half]);
                    store_async_peer4(at + peer_delta, float_to_bits(alpha[half]), sProbsFull + peer_delta);
                }
            }
            fence_smem_for_async_proxy();
            named_barrier_arrive(kBarPReady, kConsumerThreads);
            // O[:, 0 .. 256) of this rank's V += P V, P from registers
            rescale(alpha[0], alpha[1]);
            fence_operands(acc_o);
            fence_operands(pf);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < kKSteps; kk++)
                wgmma_m64n256k16_rs_tnsp_b(acc_o, pf[kk], smem_descriptor(k_tile + kk * 16 * 128, kBlockBytes, 1024));
            wgmma_commit();
            wgmma_wait_all();
            fence_operands(acc_o);
            fence_operands(pf);
            if (refilled) named_barrier_arrive(kBarKEmpty + buf, kCtaThreads);
        }
        if (rank == 0) {
            // the final statistics, here and in rank 1
#pragma unroll
            for (int half = 0; half < 2; half++) {
                row_sum[half] = warp_sum_xor(row_sum[half], 4);
                if (q == 0) {
                    const int hl = hl0 + 8 * half;
                    st_shared_f32(sRowMax + 4 * hl, row_max[half]);
                    st_shared_f32(sRowSum + 4 * hl, row_sum[half]);
                    store_async_peer4(sRowMax + 4 * hl + peer_delta, float_to_bits(row_max[half]), sStatsFull + peer_delta);
                    store_async_peer4(sRowSum + 4 * hl + peer_delta, float_to_bits(row_sum[half]), sStatsFull + peer_delta);
                }
            }
            named_barrier_arrive(kBarRowStats, kConsumerThreads);
        }
    } else {
        registers_decrease<kValueRegisters>();
        cluster_wait();
        int seq = 0;
        for (int tile = first; tile < range.end; tile = live_after(tile), seq++) {
            const int buf = seq & 1;
            const int next = live_after(tile);
            const bool refilled = live_after(next) < range.end;
            named_barrier_sync(kBarKFull + buf, kCtaThreads);
            if (rank == 0) {
                named_barrier_sync(kBarPReady, kConsumerThreads);
            } else {
                mbarrier_wait(sProbsFull, (u32)seq & 1u);
                fence_smem_for_async_proxy();  // P, stored by the peer, read by wgmma here
            }
            rescale(load_shared_f32(sAlpha + 4 * hl0), load_shared_f32(sAlpha + 4 * (hl0 + 8)));
            pv_from_shared(buf);
            if (rank == 0) {
                if (next < range.end) named_barrier_arrive(kBarPFree, kConsumerThreads);
            } else {
                mbarrier_arrive_cluster(sProbsFree + peer_delta);
            }
            if (refilled) named_barrier_arrive(kBarKEmpty + buf, kCtaThreads);
        }
    }

    // The statistics: rank 0's value group from its score group, rank 1's consumers from rank 0.
    if (rank == 1) {
        mbarrier_wait(sStatsFull, 0u);
    } else if (group == kValueGroup) {
        named_barrier_sync(kBarRowStats, kConsumerThreads);
    }
    if (rank == 1 || group == kValueGroup)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            row_max[half] = load_shared_f32(sRowMax + 4 * (hl0 + 8 * half));
            row_sum[half] = load_shared_f32(sRowSum + 4 * (hl0 + 8 * half));
        }

    // Epilogue: this group's 256 dims of this rank's half of O.
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int h = head0 + hl0 + 8 * half;
        if (h >= cfg::kHeads) continue;
        finish_row(
            p, split, row, b, s, h, rank * kSliceDims + group * kVDimsPerGroup + 2 * q, row_max[half], row_sum[half],
            rank == 0 && group == kScoreGroup && q == 0,
            [&](float* dst, float inv) { store_o_row_f32(dst, acc_o, half, inv); },
            [&](u16* dst, float scale) { store_o_row_bf16(dst, acc_o, half, scale); });
    }
    cluster_sync();  // the peer may still write here until it is done
}
