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
using namespace gather;

// ---- tile configuration (every constant the kernel's shape depends on) ----
constexpr int kHeads = cfg::kHeadsPerCta;         // 64: one wgmma M
constexpr int kTile = cfg::kTile;                 // 64 candidates: one wgmma N of S
constexpr int kKBlocks = cfg::kDQK / 64;          // 64-dim (128-byte) swizzle blocks per row
constexpr int kBlockBytes = 64 * 128;             // one block of 64 rows
constexpr int kOperandBytes = kKBlocks * kBlockBytes;  // Q, or one K tile
constexpr int kKSteps = 64 / 16;                  // wgmma k-steps per block (or per tile in P V)
constexpr int kVDimsPerGroup = cfg::kDV / 2;      // 256: one wgmma N of P V
constexpr int kVBlocksPerGroup = kVDimsPerGroup / 64;
constexpr int kWarpGroupThreads = 128;
constexpr int kCtaThreads = 3 * kWarpGroupThreads;
constexpr int kConsumerThreads = 2 * kWarpGroupThreads;
enum Role { kScoreGroup = 0, kValueGroup = 1, kProducerGroup = 2 };
// producer
constexpr int kLanesPerToken = 4;                                  // a candidate's 16-byte loads are 64 bytes apart
constexpr int kTokensPerRound = kWarpGroupThreads / kLanesPerToken;  // 32
constexpr int kRoundsPerTile = kTile / kTokensPerRound;            // 2
constexpr int kNopeChunks = cfg::kDNope / 16;                      // 16 fp8 codes each
constexpr int kNopeLoads = kNopeChunks / kLanesPerToken;           // per lane and candidate
constexpr int kRopeChunks = cfg::kDRope * 2 / 16;                  // 8 bf16 each
constexpr int kRopeLoads = kRopeChunks / kLanesPerToken;
constexpr int kScaleWords = cfg::kScaleFormat == 3 ? 2 : 4;        // ue8m0 bytes (footer) or fp32 (inline)
constexpr int kPairCtas = cfg::kClusterCtas;  // 2: the CTA pair (two head groups share each tile)
// setmaxnreg: the score group holds O (128 fp32), S (32) and P (16); the value group
// O and its descriptors (the consumers' shared epilogue must fit it too); the
// producer two rounds of loads (2 x 44 registers for V32) and a round's
// dequantization in flight. Arbitrary fp32 scales (exact dequantization only) need
// 8 more producer registers. A CTA pair's producer fits in 128 (one CTA per row's
// spills there), and the score group takes the 8: ptxas's schedule of the score loop
// then cut the pair's 8-18-tile walks 3-8% (8 fewer than 208 made its long walk 18%
// slower; bench/NOTES.md, "The pair's register split"). No spills for any model or
// feature set at these (CUDA 13.0). Every warp starts at the kernel's count, 65536 /
// 384 rounded down to 8 = 168, and an increase waits until decreases have released
// enough: the three must not sum past 3 x 168, or the score group waits forever.
constexpr bool kExactScalesOnly = cfg::kScaleFormat == 2;
constexpr int kScoreRegisters = kExactScalesOnly ? 200 : kPairCtas > 1 ? 216 : 208;
constexpr int kValueRegisters = 160;
constexpr int kProducerRegisters = kExactScalesOnly ? 144 : kPairCtas > 1 ? 128 : 136;
constexpr int kLaunchRegisters = (65536 / kCtaThreads) & ~7;
static_assert(kScoreRegisters + kValueRegisters + kProducerRegisters <= 3 * kLaunchRegisters,
              "setmaxnreg: the increase must be covered by the decreases");
static_assert(kScoreRegisters > kLaunchRegisters && kValueRegisters <= kLaunchRegisters &&
                  kProducerRegisters <= kLaunchRegisters,
              "setmaxnreg: the score group's call increases, the others decrease (a .dec above the "
              "launch count is an illegal instruction)");

enum NamedBarrier {
    kBarKFull = 1, kBarKEmpty = 3, kBarPReady = 5, kBarPFree = 6, kBarRowStats = 7, kBarRoundStored = 8, kBarQReady = 9
};

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
static_assert(cfg::kDQK % 64 == 0 && cfg::kDV == 512 && cfg::kDNope % 64 == 0, "dims must fill swizzle blocks");
static_assert(kTile % kTokensPerRound == 0, "rounds must tile a tile");
static_assert(kNopeChunks % kLanesPerToken == 0 && kRopeChunks % kLanesPerToken == 0, "lanes split a row evenly");
static_assert(cfg::kQuantTile % 64 == 0, "a lane's 16 codes at 64-byte steps keep one scale per load");
static_assert(cfg::kScaleFormat == 3 ? (!cfg::kScalesInline && cfg::kFooterBytes == 8 && cfg::kNumScales <= 8)
                                     : (cfg::kScalesInline && cfg::kNumScales == 4 && cfg::kScaleOffset % 16 == 0),
              "scales: one 8-byte footer load (ue8m0) or one 16-byte inline load (fp32)");
static_assert(cfg::kRowBytes % 16 == 0 && cfg::kRopeOffset % 16 == 0, "16-byte loads");

// ---- PTX: wgmma, descriptors, named barriers, register reallocation ----
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }

// Registers an in-flight wgmma reads or writes: the compiler sees a use and a new
// definition here, so it neither reads an accumulator before wgmma_wait_all nor
// reuses an A-fragment register while the instruction may still read it.
template <int N>
__device__ __forceinline__ void fence_operands(float (&r)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}
template <int M, int N>
__device__ __forceinline__ void fence_operands(u32 (&r)[M][N])
{
#pragma unroll
    for (int i = 0; i < M; i++)
#pragma unroll
        for (int j = 0; j < N; j++) asm volatile("" : "+r"(r[i][j])::"memory");
}

// Generic-proxy shared-memory writes made visible to wgmma (the async proxy).
__device__ __forceinline__ void fence_smem_for_wgmma() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ void named_barrier_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void named_barrier_arrive(int id, int threads)
{
    asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}

// ---- PTX: clusters, mbarriers, bulk copies (CTA pair) ----
__device__ __forceinline__ u32 cluster_rank()
{
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

// The address of the same shared-memory byte in CTA `rank` of the cluster.
__device__ __forceinline__ u32 peer_address(u32 local, u32 rank)
{
    u32 r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(local), "r"(rank));
    return r;
}

// Every thread of every CTA of the cluster (also orders shared memory: a CTA barrier
// too). Split in two where a thread has work to do between its arrival and the wait.
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_sync()
{
    cluster_arrive();
    cluster_wait();
}

__device__ __forceinline__ void mbarrier_init(u32 bar, u32 count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}

// mbarrier inits visible to the cluster (before the cluster barrier that publishes them).
__device__ __forceinline__ void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

// One arrival that also expects `bytes` of bulk-copy transactions in this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(u32 bar, u32 bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(bytes) : "memory");
}

// One arrival on a barrier of another CTA (cluster address). CTA-scope release:
// it passes on that this CTA's consumers have finished reading a buffer (their
// wgmma.wait_group returned before kBarKEmpty), which orders no data; the
// cluster-scope form compiles to MEMBAR.GPU, which waits for this thread's loads
// in flight (the producer's next round).
__device__ __forceinline__ void mbarrier_arrive_cluster(u32 cluster_bar)
{
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" :: "r"(cluster_bar) : "memory");
}

// Wait until the phase of the given parity has completed. CTA-scope acquire: the
// peer's bytes arrive by bulk copy, whose completion the mbarrier itself tracks;
// a cluster-scope acquire compiles to an L1 invalidation (CCTL.IVALL) that waits
// for the loads in flight.
__device__ __forceinline__ void mbarrier_wait(u32 bar, u32 parity)
{
    asm volatile(
        "{\n.reg .pred done;\n"
        "wait_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra wait_%=;\n}\n" :: "r"(bar), "r"(parity) : "memory");
}

// A bulk copy (the TMA engine) of `bytes` from this CTA's shared memory to another
// CTA's (cluster address); they count towards the transaction count of the
// mbarrier at `cluster_bar` in that CTA. It reads through the async proxy.
__device__ __forceinline__ void copy_to_peer(u32 cluster_dst, u32 src, u32 bytes, u32 cluster_bar)
{
    asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 :: "r"(cluster_dst), "r"(src), "r"(bytes), "r"(cluster_bar) : "memory");
}

template <int kRegisters>
__device__ __forceinline__ void registers_increase() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(kRegisters)); }
template <int kRegisters>
__device__ __forceinline__ void registers_decrease() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(kRegisters)); }

// Shared-memory matrix descriptor, 128-byte swizzle. K-major operands: rows of 128
// bytes, 8-row groups 1024 bytes apart (stride), leading offset unused. MN-major
// (V): 64-element blocks `leading` bytes apart along N, 8-row groups along K 1024.
__device__ __forceinline__ u64 smem_descriptor(u32 addr, u32 leading, u32 stride)
{
    return (u64)((addr & 0x3ffffu) >> 4) | ((u64)(leading >> 4) << 16) | ((u64)(stride >> 4) << 32) | (1ull << 62);
}

// Byte offset of 16-byte chunk c of row r in a 128-byte-swizzled block (block
// bases are 1024-aligned, as the hardware's address swizzle assumes).
__device__ __forceinline__ u32 swizzled(int r, int c) { return (u32)(r * 128 + ((c ^ (r & 7)) << 4)); }

__device__ __forceinline__ void store_shared16(u32 addr, const U32x4& v)
{
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" :: "r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}

// wgmma accumulator operand lists (inline PTX has no loops): n fp32 registers as
// "+f" operands d[0 .. n), and the matching register list of the instruction text.
#define MLAJIT_ACC8(d, i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
#define MLAJIT_ACC32(d, i) MLAJIT_ACC8(d, i), MLAJIT_ACC8(d, i + 8), MLAJIT_ACC8(d, i + 16), MLAJIT_ACC8(d, i + 24)
#define MLAJIT_ACC128(d) MLAJIT_ACC32(d, 0), MLAJIT_ACC32(d, 32), MLAJIT_ACC32(d, 64), MLAJIT_ACC32(d, 96)
#define MLAJIT_REGS32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define MLAJIT_REGS128 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"

// ---- wgmma wrappers ----
// D(64 x 64) (+)= A(64 x 16, shared memory) * B(16 x 64, shared memory); bf16 in, fp32
// accumulate; scale_d = 0 overwrites D. Both operands K-major (tnspA = tnspB = 0).
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], u64 desc_a, u64 desc_b, int scale_d)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        MLAJIT_REGS32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
        : MLAJIT_ACC32(d, 0)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// D(64 x 256) += A(64 x 16, registers: the mma.sync A-fragment layout per warp) *
// B(16 x 256, shared memory, MN-major: tnspB = 1); bf16 in, fp32 accumulate.
__device__ __forceinline__ void wgmma_m64n256k16_rs_tnsp_b(float (&d)[128], const u32 (&a)[4], u64 desc_b)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        MLAJIT_REGS128 ", {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
        : MLAJIT_ACC128(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}

// D(64 x 256) += A(64 x 16, shared memory, K-major) * B(16 x 256, shared memory,
// MN-major: tnspB = 1); bf16 in, fp32 accumulate.
__device__ __forceinline__ void wgmma_m64n256k16_ss_tnsp_b(float (&d)[128], u64 desc_a, u64 desc_b)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        MLAJIT_REGS128 ", %128, %129, p, 1, 1, 0, 1;\n}\n"
        : MLAJIT_ACC128(d)
        : "l"(desc_a), "l"(desc_b));
}

__device__ __forceinline__ void store_shared32(u32 addr, u32 v)
{
    asm volatile("st.shared.b32 [%0], %1;\n" :: "r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ U32x4 load_shared16(u32 addr)
{
    U32x4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
    return v;
}

__device__ __forceinline__ void st_shared_f32(u32 addr, float v)
{
    asm volatile("st.shared.f32 [%0], %1;\n" :: "r"(addr), "f"(v) : "memory");
}

__device__ __forceinline__ float load_shared_f32(u32 addr)
{
    float v;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
    return v;
}

// A 16-byte read of cache rows: read-only for the kernel's life, used once per
// CTA (no L1 allocation).
__device__ __forceinline__ U32x4 load_row16(const u8* src)
{
    U32x4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(src));
    return v;
}

__device__ __forceinline__ U32x2 load_row8(const u8* src)
{
    U32x2 v;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(src));
    return v;
}

// A row's line into L2, two or three tiles before its loads. Where the call's rows
// outgrow the L2 it is marked evict-last, so that the rest of the GPU's traffic
// (the other SMs' prefetches and loads) does not push it out in between: 1-2.4%
// faster on calls of 86 MB and more, 1.5-3.4% slower on calls of 43-48 MB
// (bench/NOTES.md); the plan chooses (p.prefetch_evict_last), so one predicate
// picks one of the two forms.
__device__ __forceinline__ void prefetch_l2_line(const u8* src, int evict_last)
{
    asm volatile("{\n"
                 "  .reg .pred evict_last;\n"
                 "  setp.ne.s32 evict_last, %1, 0;\n"
                 "  @evict_last prefetch.global.L2::evict_last [%0];\n"
                 "  @!evict_last prefetch.global.L2 [%0];\n"
                 "}\n" :: "l"(src), "r"(evict_last));
}

// ---- producer: rounds of 32 candidates, four lanes each ----
// Lane l of warp w owns candidate 8 w + l % 8 of a round and, within its row, the
// 16-byte NoPE chunks l / 8 + 4 i (bytes 64 i + 16 (l / 8): one scale each) and
// the RoPE chunks l / 8 + 4 i.
struct RoundLoads {
    U32x4 nope[kNopeLoads];
    U32x4 rope[kRopeLoads];
    u32 scales[kScaleWords];  // the candidate's scales, raw
    bool live;
};

__device__ __forceinline__ void load_round(const DecodeParams& p, int pos, int slot, int quarter, RoundLoads& d)
{
    const Candidate c = locate_candidate(p, pos, slot);
    d.live = c.row != nullptr;
    if (d.live) {
#pragma unroll
        for (int i = 0; i < kNopeLoads; i++) d.nope[i] = load_row16(c.row + 64 * i + 16 * quarter);
#pragma unroll
        for (int i = 0; i < kRopeLoads; i++)
            d.rope[i] = load_row16(c.row + cfg::kRopeOffset + 16 * (quarter + kLanesPerToken * i));
        if (cfg::kScaleFormat == 3) {
            const U32x2 v = load_row8(c.scales);
            d.scales[0] = v.x;
            d.scales[1] = v.y;
        } else {
            const U32x4 v = load_row16(c.scales);
            d.scales[0] = v.x;
            d.scales[1] = v.y;
            d.scales[2] = v.z;
            d.scales[3] = v.w;
        }
    } else {  // skipped: zero codes and scales dequantize to zero rows (P is 0 there; V must be finite)
#pragma unroll
        for (int i = 0; i < kNopeLoads; i++) d.nope[i] = U32x4{0u, 0u, 0u, 0u};
#pragma unroll
        for (int i = 0; i < kRopeLoads; i++) d.rope[i] = U32x4{0u, 0u, 0u, 0u};
        // unit scales (fp32 1.0, ue8m0 127): zero codes take the branch-free fast path
#pragma unroll
        for (int i = 0; i < kScaleWords; i++) d.scales[i] = cfg::kScaleFormat == 3 ? 0x7f7f7f7fu : 0x3f800000u;
    }
}

// A round's registers as if redefined here: NVVM schedules no computation on them
// (the scale checks, the dequantization) above this point, where the data of a
// round loaded one round ahead would be waited for early, before the stores of the
// round in between. asm volatile keeps its place among the barriers and stores.
// ptxas sees no instruction here and may still move work across it.
__device__ __forceinline__ void hold_until_here(RoundLoads& d)
{
#pragma unroll
    for (int i = 0; i < kNopeLoads; i++)
        asm volatile("" : "+r"(d.nope[i].x), "+r"(d.nope[i].y), "+r"(d.nope[i].z), "+r"(d.nope[i].w));
#pragma unroll
    for (int i = 0; i < kRopeLoads; i++)
        asm volatile("" : "+r"(d.rope[i].x), "+r"(d.rope[i].y), "+r"(d.rope[i].z), "+r"(d.rope[i].w));
#pragma unroll
    for (int i = 0; i < kScaleWords; i++) asm volatile("" : "+r"(d.scales[i]));
}

// The raw scale of NoPE load i (codes 64 i + 16 quarter .. + 16: one quantization tile).
__device__ __forceinline__ u32 scale_bits_of(const RoundLoads& d, int i)
{
    const int k = 64 * i / cfg::kQuantTile;
    return cfg::kScaleFormat == 3 ? (d.scales[k / 4] >> (8 * (k % 4))) & 0xffu : d.scales[k];
}

// Dequantize a round into row `t` of the K tile at `k_base`; mark its validity. The
// power-of-two or exact choice is made once for the candidate, so the loads'
// dequantization is straight-line code the scheduler can interleave (one producer
// warp per scheduler: no other warp hides a dependency chain).
// Where a round goes: this CTA's K buffer and validity table.
struct RoundDest {
    u32 k_base;
    int* valid;  // a plain store: ptxas schedules it more freely than inline PTX (DSV4 spills otherwise)
};

__device__ __forceinline__ void store16(const RoundDest& to, u32 offset, const U32x4& v)
{
    store_shared16(to.k_base + offset, v);
}

__device__ __forceinline__ void store_round(const RoundDest& to, int t, int quarter, const RoundLoads& d)
{
    auto store_chunk = [&](int i, const u32 (&w)[8]) {
        const u32 block = (u32)i * kBlockBytes;  // dims 64 i + 16 quarter .. + 16
        store16(to, block + swizzled(t, 2 * quarter), U32x4{w[0], w[1], w[2], w[3]});
        store16(to, block + swizzled(t, 2 * quarter + 1), U32x4{w[4], w[5], w[6], w[7]});
    };
    u32 fast[kNopeLoads];
    bool all_fast = true;
#pragma unroll
    for (int i = 0; i < kNopeLoads; i++) {
        fast[i] = fast_scale_bf16x2(scale_bits_of(d, i));
        all_fast = all_fast && fast[i] != 0u;
    }
    // The branch also pins the next round's loads: with the fast path alone (one
    // basic block), ptxas sank them below the buffer claim's barrier and the long
    // walks ran 6-11% slower (bench/NOTES.md, "Code size, the exact path").
    if (all_fast) {
#pragma unroll
        for (int i = 0; i < kNopeLoads; i++) {
            u32 w[8];
            dequant16_pow2(d.nope[i], fast[i], w);
            store_chunk(i, w);
        }
    } else {
#pragma unroll
        for (int i = 0; i < kNopeLoads; i++) {
            u32 w[8];
            dequant16_exact(d.nope[i], scale_value(scale_bits_of(d, i)), w);
            store_chunk(i, w);
        }
    }
#pragma unroll
    for (int i = 0; i < kRopeLoads; i++) {
        const int dim = cfg::kDNope + 8 * (quarter + kLanesPerToken * i);
        store16(to, (u32)(dim / 64) * kBlockBytes + swizzled(t, (dim % 64) / 8), d.rope[i]);
    }
    if (quarter == 0) to.valid[t] = d.live;
}

// CTA pair: a round's rows, stored here, copied to the same place in the peer: in
// each 64-dim block the round is 32 consecutive 128-byte rows, so one bulk copy per
// block, and one of its validity flags. A CTA's shared memory is one contiguous
// range of the cluster window: a local address plus `peer_delta` is the peer's.
__device__ __forceinline__ void copy_round_to_peer(const RoundDest& from, int round, u32 peer_delta, u32 peer_bar)
{
    constexpr u32 kRowsBytes = kTokensPerRound * 128;
#pragma unroll
    for (int i = 0; i < kKBlocks; i++) {
        const u32 src = from.k_base + (u32)i * kBlockBytes + (u32)round * kRowsBytes;
        copy_to_peer(src + peer_delta, src, kRowsBytes, peer_bar);
    }
    const u32 flags = smem_address(from.valid + round * kTokensPerRound);
    copy_to_peer(flags + peer_delta, flags, kTokensPerRound * 4, peer_bar);
}

// Start bringing one row of a tile (and its footer scales) into L2: lane `part` of
// its kLanes touches it every 128 bytes and at its last byte, so every line it
// spans is covered (per-lane prefetches: the bulk form takes uniform operands).
template <int kLanes>
__device__ __forceinline__ void prefetch_row(const DecodeParams& p, int pos, int raw, int part)
{
    const Candidate c = locate_candidate(p, pos, checked_slot(p, pos, raw));
    if (c.row) {
#pragma unroll
        for (int k = part; k * 128 < cfg::kRowBytes + 128; k += kLanes)
            prefetch_l2_line(c.row + min(k * 128, cfg::kRowBytes - 1), p.prefetch_evict_last);
        if (!cfg::kScalesInline && part == 0) prefetch_l2_line(c.scales, p.prefetch_evict_last);
    }
}

}  // namespace sm90

extern "C" __global__ void MLAJIT_CLUSTER_DIMS __launch_bounds__(sm90::kCtaThreads, 1) mlajit_decode_main(const DecodeParams p)
{
    using namespace sm90;
    wait_for_prerequisite_grid();     // nothing before it reads an argument
    release_dependent_grid_early(p);  // where the plan lets the combine start now
    extern __shared__ __align__(1024) u8 smem_raw[];
    // wgmma's 128-byte swizzle needs 1024-byte aligned blocks; the generator
    // reserves the slack.
    u8* smem = reinterpret_cast<u8*>((reinterpret_cast<u64>(smem_raw) + 1023) & ~(u64)1023);
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
            for (int r = 0; r < kRoundsGathered; r++) raw[r] = t < range.end ? load_slot(p, b, s, pos_of(t, r), range) : -1;
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
                store_round(to, token, quarter, even);
                if (t1 < range.end) load_round(p, pos_of(t1, 0), checked_slot(p, pos_of(t1, 0), raw1[0]), quarter, even);
                hold_until_here(odd);
                store_round(to, kTokensPerRound + token, quarter, odd);
                fence_smem_for_wgmma();
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
                store_round(to, round0 * kTokensPerRound + token, quarter, now);
                fence_smem_for_wgmma();  // for the local wgmma and for the bulk copy: both the async proxy
                named_barrier_arrive(kBarKFull + buf, kCtaThreads);
                named_barrier_sync(kBarRoundStored, kWarpGroupThreads);
                if (tid == kProducerLead) copy_round_to_peer(to, round0, peer_delta, sPeerRoundFull + 8 * buf + peer_delta);
                advance();
                return t0 < range.end;
            };
            for (int seq = 0; t0 < range.end; seq += 2)
                if (one_tile(seq, even, odd)) one_tile(seq + 1, odd, even);
        }
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
        fence_smem_for_wgmma();
        named_barrier_sync(kBarQReady, kWarpGroupThreads);
        if (kPairCtas > 1) cluster_wait();  // the pair's mbarriers, for wait_tile
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
            wgmma_wait_all();
            fence_operands(acc_s);

            // Scale into the log2 domain, -inf where skipped; online softmax per row.
            const int* valid = sTokenValid + buf * kTile;
            float tile_max[2] = {neg_inf(), neg_inf()};
#pragma unroll
            for (int j = 0; j < kTile / 8; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const bool v = valid[8 * j + 2 * q + e] != 0;
#pragma unroll
                    for (int half = 0; half < 2; half++) {
                        float& x = acc_s[4 * j + 2 * half + e];
                        x = v ? x * p.sm_scale_log2 : neg_inf();
                        tile_max[half] = fmaxf(tile_max[half], x);
                    }
                }
            float alpha[2];
#pragma unroll
            for (int half = 0; half < 2; half++) {
                tile_max[half] = warp_max_xor(tile_max[half], 4);  // the quad sharing a row
                const float new_max = fmaxf(row_max[half], tile_max[half]);
                const bool empty = new_max == neg_inf();  // nothing valid yet: no -inf - -inf
                alpha[half] = empty ? 1.0f : fast_exp2(row_max[half] - new_max);
                row_max[half] = new_max;
                float sum = 0.0f;
#pragma unroll
                for (int j = 0; j < kTile / 8; j++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        float& x = acc_s[4 * j + 2 * half + e];
                        x = empty ? 0.0f : fast_exp2(x - new_max);
                        sum += x;  // fp32, thread-partial: reduced over the quad at the end
                    }
                row_sum[half] = row_sum[half] * alpha[half] + sum;
            }

            // P (bf16) as wgmma A fragments, one per 16-candidate k-step.
            u32 pf[kKSteps][4];
#pragma unroll
            for (int kk = 0; kk < kKSteps; kk++)
#pragma unroll
                for (int r = 0; r < 4; r++) pf[kk][r] = pack_bf16x2(acc_s[8 * kk + 2 * r], acc_s[8 * kk + 2 * r + 1]);

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
            fence_smem_for_wgmma();
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
            wgmma_wait_all();
            fence_operands(acc_o);
            fence_operands(pf);
            if (refilled) named_barrier_arrive(kBarKEmpty + buf, kCtaThreads);
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
        auto pf_raw_of = [&](int t) { return t < range.end ? load_slot(p, b, s, t * kTile + pf_token, range) : -1; };
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
#pragma unroll
                for (int j = 0; j < kVDimsPerGroup / 8; j++)
                    *reinterpret_cast<U32x2*>(dst + 8 * j) = U32x2{float_to_bits(acc_o[4 * j + 2 * half] * inv),
                                                                   float_to_bits(acc_o[4 * j + 2 * half + 1] * inv)};
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
#pragma unroll
                    for (int j = 0; j < kVDimsPerGroup / 8; j++)
                        *reinterpret_cast<u32*>(dst + 8 * j) =
                            pack_bf16x2(acc_o[4 * j + 2 * half] * scale, acc_o[4 * j + 2 * half + 1] * scale);
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
