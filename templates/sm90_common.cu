// ---------------------------------------------------------------------------
// sm90_common.cu: what the Hopper (sm_90a) wgmma kernels share: the operand
// blocks' layout (bf16, 64-dim blocks of 64 rows x 128 bytes, 128-byte
// swizzled), the PTX of wgmma, named barriers, mbarriers and bulk copies, and the
// producer's rounds (four lanes per candidate, 32 candidates per round: loads,
// dequantization into a K tile buffer, L2 prefetch), and the narrow kernels' shared
// steps on S^T's fragments and their output (sm90-narrow, sm90-narrow-scores). Each
// kernel file adds its own roles, registers and barriers to namespace sm90.
// ---------------------------------------------------------------------------
namespace sm90 {
using namespace gather;

// ---- what both sm90 kernels share: operand blocks and the producer's rounds ----
constexpr int kTile = cfg::kTile;                 // 64 candidates: one wgmma N of S
constexpr int kKBlocks = cfg::kDQK / 64;          // 64-dim (128-byte) swizzle blocks per row
constexpr int kBlockBytes = 64 * 128;             // one block of 64 rows
constexpr int kOperandBytes = kKBlocks * kBlockBytes;  // Q, or one K tile
constexpr int kKSteps = 64 / 16;                  // wgmma k-steps per block (or per tile in P V)
constexpr int kWarpGroupThreads = 128;
// producer
constexpr int kLanesPerToken = 4;                                  // a candidate's 16-byte loads are 64 bytes apart
constexpr int kTokensPerRound = kWarpGroupThreads / kLanesPerToken;  // 32
constexpr int kRoundsPerTile = kTile / kTokensPerRound;            // 2
constexpr int kNopeChunks = cfg::kDNope / 16;                      // 16 fp8 codes each
constexpr int kNopeLoads = kNopeChunks / kLanesPerToken;           // per lane and candidate
constexpr int kRopeChunks = cfg::kDRope * 2 / 16;                  // 8 bf16 each
constexpr int kRopeLoads = kRopeChunks / kLanesPerToken;
constexpr int kScaleWords = cfg::kScaleFormat == 3 ? 2 : 4;        // ue8m0 bytes (footer) or fp32 (inline)
#if MLAJIT_LAYOUTS
// The exact dequantization's converted form (gather.cu) wherever the scales are
// arbitrary fp32 (every candidate takes the exact path), and in the wide kernel's
// CTA pair. With one CTA per row it spills a few bytes (GLM53_NOPE: 8, one value
// kept across a round; up to 64 with the sink; GLM_NSA none at V3.2's register
// split; ptxas, CUDA 13.0), and the longer form it replaced had bounded those
// producers: GLM53_NOPE h64 b64 / b128 ran 23% / 32% faster with it, GLM_NSA h16
// b128 11% (an H100; bench/NOTES.md 1d). Power-of-two layouts keep the longer form
// for their rare exact candidates, so their sources stay as they were.
constexpr bool kConvertedExact = cfg::kClusterCtas > 1 || kExactScalesOnly;
#endif

static_assert(kTile == 64, "one wgmma N (or M) of candidates");
#if MLAJIT_LAYOUTS
// (d_v 1024: sm90-split's pair, each CTA half of V)
static_assert(cfg::kDQK % 64 == 0 && (cfg::kDV == 512 || cfg::kDV == 1024) && cfg::kDNope % 64 == 0,
              "dims must fill swizzle blocks");
#else
static_assert(cfg::kDQK % 64 == 0 && cfg::kDV == 512 && cfg::kDNope % 64 == 0, "dims must fill swizzle blocks");
#endif
static_assert(kTile % kTokensPerRound == 0, "rounds must tile a tile");
static_assert(kNopeChunks % kLanesPerToken == 0 && kRopeChunks % kLanesPerToken == 0, "lanes split a row evenly");
static_assert(cfg::kQuantTile % 64 == 0, "a lane's 16 codes at 64-byte steps keep one scale per load");
#if MLAJIT_BF16
// The bf16 edition (scales none, the generator's choice for those layouts only):
// a row is d_qk bf16 values, NoPE from byte 0 and RoPE at kRopeOffset, which the
// producer copies into the K tile as they are (copy_round_bf16 below).
static_assert(cfg::kScaleFormat == 4, "the bf16 edition reads bf16 NoPE values (scales none)");
#else
static_assert(cfg::kScaleFormat == 3 ? (!cfg::kScalesInline && cfg::kFooterBytes == 8 && cfg::kNumScales <= 8)
                                     : (cfg::kScalesInline && cfg::kNumScales == 4 && cfg::kScaleOffset % 16 == 0),
              "scales: one 8-byte footer load (ue8m0) or one 16-byte inline load (fp32)");
#endif
static_assert(cfg::kRowBytes % 16 == 0 && cfg::kRopeOffset % 16 == 0, "16-byte loads");

// ---- PTX: wgmma, descriptors, named barriers, register reallocation ----
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Waits until at most kPending of this thread's newest wgmma groups are in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(kPending) : "memory"); }

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

// This thread's generic-proxy shared-memory accesses ordered before the async
// proxy's later ones: its writes made visible to wgmma and to bulk copies' reads,
// its reads done before a bulk copy rewrites the bytes. A barrier orders the
// threads, not the proxies; each accessing thread fences before it.
__device__ __forceinline__ void fence_smem_for_async_proxy()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The named barriers a CTA has: ids 0-15, 0 being __syncthreads'. Each kernel's
// NamedBarrier enum ends with kBarEnd, one past the last id it uses, checked
// against this.
constexpr int kHardwareNamedBarriers = 16;

__device__ __forceinline__ void named_barrier_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void named_barrier_arrive(int id, int threads)
{
    asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}

// A named barrier that also returns whether v holds for every thread at it.
__device__ __forceinline__ bool named_barrier_and(int id, int threads, bool v)
{
    u32 r;
    asm volatile("{\n.reg .pred p, c;\nsetp.ne.u32 c, %1, 0;\nbar.red.and.pred p, %2, %3, c;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(r) : "r"((u32)v), "r"(id), "r"(threads) : "memory");
    return r != 0u;
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

// One plain arrival (no transactions expected).
__device__ __forceinline__ void mbarrier_arrive(u32 bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}

// A bulk copy (the TMA engine) of `bytes` from global memory into this CTA's shared
// memory, counted towards the transactions of the mbarrier at `bar`; both addresses
// 16-byte aligned, `bytes` a multiple of 16. No register holds the data in flight.
__device__ __forceinline__ void copy_global_to_shared(u32 dst, const void* src, u32 bytes, u32 bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

template <int kRegisters>
__device__ __forceinline__ void registers_increase() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(kRegisters)); }
template <int kRegisters>
__device__ __forceinline__ void registers_decrease() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(kRegisters)); }
// A role's count where the roles' split is a choice: up from the launch's count
// (the call waits for other groups to give registers back) or down from it.
template <int kRegisters, int kLaunchRegisters>
__device__ __forceinline__ void registers_set()
{
    if constexpr (kRegisters > kLaunchRegisters) registers_increase<kRegisters>();
    else if constexpr (kRegisters < kLaunchRegisters) registers_decrease<kRegisters>();
}

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
// (the narrow kernels' N of 8, 12 and 16 per thread)
#define MLAJIT_ACC4(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
#define MLAJIT_ACC12(d) MLAJIT_ACC8(d, 0), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11])
#define MLAJIT_ACC16(d) MLAJIT_ACC8(d, 0), MLAJIT_ACC8(d, 8)
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
#if MLAJIT_LAYOUTS
    U32x4 rope[kRopeLoads > 0 ? kRopeLoads : 1];  // NVRTC has no arrays of size 0 (d_rope 0: unused)
#else
    U32x4 rope[kRopeLoads];
#endif
    u32 scales[kScaleWords];  // the candidate's scales, raw
    bool live;
};

// A skipped candidate's round: zero codes and scales dequantize to zero rows (P is 0
// there; V must be finite); unit scales (fp32 1.0, ue8m0 127), so zero codes take
// the branch-free fast path.
__device__ __forceinline__ void skipped_round(RoundLoads& d)
{
#pragma unroll
    for (int i = 0; i < kNopeLoads; i++) d.nope[i] = U32x4{0u, 0u, 0u, 0u};
#pragma unroll
    for (int i = 0; i < kRopeLoads; i++) d.rope[i] = U32x4{0u, 0u, 0u, 0u};
#pragma unroll
    for (int i = 0; i < kScaleWords; i++) d.scales[i] = cfg::kScaleFormat == 3 ? 0x7f7f7f7fu : 0x3f800000u;
}

// A round's chunks of one candidate's row (its NoPE and RoPE loads), each read by
// load16(a, b) at byte a + b of the row: from the cache or from a copy of the row.
// Two addends, added to the row's address in turn, keep the address arithmetic (and
// ptxas's code) of the two loops this replaced.
template <class Load16>
__device__ __forceinline__ void load_row_chunks(Load16 load16, int quarter, RoundLoads& d)
{
#pragma unroll
    for (int i = 0; i < kNopeLoads; i++) d.nope[i] = load16(64 * i, 16 * quarter);
#pragma unroll
    for (int i = 0; i < kRopeLoads; i++) d.rope[i] = load16(cfg::kRopeOffset, 16 * (quarter + kLanesPerToken * i));
}

__device__ __forceinline__ void load_round(const DecodeParams& p, int pos, int slot, int quarter, RoundLoads& d)
{
    const Candidate c = locate_candidate(p, pos, slot);
    d.live = c.row != nullptr;
    if (d.live) {
        load_row_chunks([&](int a, int b) { return load_row16(c.row + a + b); }, quarter, d);
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
    } else {
        skipped_round(d);
    }
}

// A round's rows as they arrived in shared memory by bulk copy (the row ring: a
// candidate's row at `row`, as in the cache), read as load_round reads the cache.
// A skipped candidate's slot is read too: nothing was copied, its bytes are stale,
// and store_round writes its row as zeros by the fast path's zero factor (no zeroed
// registers: 25 instructions a round). Its RoPE chunks reach only its own score,
// which the consumer replaces by -inf (a select) on the validity flag.
__device__ __forceinline__ void load_round_staged(u32 row, bool live, int quarter, RoundLoads& d)
{
    d.live = live;
    load_row_chunks([&](int a, int b) { return load_shared16(row + a + b); }, quarter, d);
    const U32x4 v = load_shared16(row + cfg::kScaleOffset);  // inline fp32 scales (the ring's rows)
    const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < kScaleWords; i++) d.scales[i] = w[i];
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
#if MLAJIT_BF16
    const int k = 0;  // no scales (and a quant_tile of 0)
#else
    const int k = 64 * i / cfg::kQuantTile;
#endif
    return cfg::kScaleFormat == 3 ? (d.scales[k / 4] >> (8 * (k % 4))) & 0xffu : d.scales[k];
}

// Where a round goes: this CTA's K buffer and validity table, a flag per candidate
// (int in sm90, whose CTA pair copies the flags in bulk; u8 in sm90-narrow, where
// the row ring needs the bytes).
template <typename Flag>
struct RoundDestOf {
    u32 k_base;
    Flag* valid;  // a plain store: ptxas schedules it more freely than inline PTX (DSV4 spills otherwise)
};
using RoundDest = RoundDestOf<int>;

// Dequantize a round into row `t` of the K tile at `to.k_base`; mark its validity.
// The power-of-two or exact choice is made once for the candidate, so the loads'
// dequantization is straight-line code the scheduler can interleave (one producer
// warp per scheduler: no other warp hides a dependency chain). kFoldedScaleChecks:
// which form of fast_scale_bf16x2's rule the kernel measured faster with.
template <bool kFoldedScaleChecks, typename Flag>
__device__ __forceinline__ void store_round(const RoundDestOf<Flag>& to, int t, int quarter, const RoundLoads& d)
{
    auto store_chunk = [&](int i, const u32 (&w)[8]) {
        const u32 block = (u32)i * kBlockBytes;  // dims 64 i + 16 quarter .. + 16
        store_shared16(to.k_base + block + swizzled(t, 2 * quarter), U32x4{w[0], w[1], w[2], w[3]});
        store_shared16(to.k_base + block + swizzled(t, 2 * quarter + 1), U32x4{w[4], w[5], w[6], w[7]});
    };
    u32 fast[kNopeLoads];
    bool all_fast = true;
#pragma unroll
    for (int i = 0; i < kNopeLoads; i++) {
        fast[i] = fast_scale_bf16x2<kFoldedScaleChecks>(scale_bits_of(d, i));
        all_fast = all_fast && fast[i] != 0u;
    }
    // A skipped candidate: factor 0 on the fast path, whose products of any code bits
    // are finite (the bits land below bf16's top exponents), so its row is zeros.
    if (!d.live) {
        all_fast = true;
#pragma unroll
        for (int i = 0; i < kNopeLoads; i++) fast[i] = 0u;
    }
    // The branch also pins the next round's loads: with the fast path alone (one
    // basic block), ptxas sank them below the buffer claim's barrier and the long
    // walks ran 6-11% slower (bench/HISTORY.md, "Code size, the exact path").
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
#if MLAJIT_LAYOUTS
            dequant16_exact<kConvertedExact>(d.nope[i], scale_value(scale_bits_of(d, i)), w);
#else
            dequant16_exact(d.nope[i], scale_value(scale_bits_of(d, i)), w);
#endif
            store_chunk(i, w);
        }
    }
#pragma unroll
    for (int i = 0; i < kRopeLoads; i++) {
        const int dim = cfg::kDNope + 8 * (quarter + kLanesPerToken * i);
        store_shared16(to.k_base + (u32)(dim / 64) * kBlockBytes + swizzled(t, (dim % 64) / 8), d.rope[i]);
    }
    if (quarter == 0) to.valid[t] = (Flag)d.live;
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

#if MLAJIT_BF16
// A round of bf16 rows into row `t` of the K tile at `to.k_base`, by cp.async from
// the cache to the swizzled place of each 16-byte chunk (8 dims): no registers hold
// the bytes, where a round in registers (18 chunks a lane at V3.2's dims, two
// rounds held) would not fit the producer's. Lane `quarter` copies the chunks
// quarter + 4 i; a skipped candidate's are zero-filled (nothing read), so its row
// is zeros (P is 0 there; V must be finite). The caller waits for the copies and
// fences them for the async proxy before it publishes the tile.
constexpr int kBf16Chunks = cfg::kDQK * 2 / 16;
constexpr int kBf16NopeChunks = cfg::kDNope * 2 / 16;
static_assert(kBf16Chunks % kLanesPerToken == 0, "lanes split a bf16 row evenly");
template <typename Flag>
__device__ __forceinline__ void copy_round_bf16(const DecodeParams& p, int pos, int slot, const RoundDestOf<Flag>& to,
                                                int t, int quarter)
{
    const Candidate c = locate_candidate(p, pos, slot);
    const bool live = c.row != nullptr;
    const u8* row = live ? c.row : p.kv;  // a skipped copy reads nothing; any global address
#pragma unroll
    for (int i = 0; i < kBf16Chunks / kLanesPerToken; i++) {
        const int chunk = quarter + kLanesPerToken * i;
        const int offset = chunk < kBf16NopeChunks ? 16 * chunk : cfg::kRopeOffset + 16 * (chunk - kBf16NopeChunks);
        copy_async<16>(to.k_base + (u32)(chunk / 8) * kBlockBytes + swizzled(t, chunk % 8), row + offset, live);
    }
    if (quarter == 0) to.valid[t] = (Flag)live;
}
#endif

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
#if MLAJIT_BF16
        // no footer: a row holds every byte of its token
#else
        if (!cfg::kScalesInline && part == 0) prefetch_l2_line(c.scales, p.prefetch_evict_last);
#endif
    }
}

// A descriptor `bytes` further on (its address field counts 16-byte units; the
// operands stay below 256 KB, so no carry leaves the field). asm volatile keeps
// each add beside its wgmma, in order: ptxas otherwise computed the descriptors of
// a tile's 68 wgmmas ahead of them and held them live (the consumer spilled at 32
// heads).
__device__ __forceinline__ u64 descriptor_plus(u64 desc, u32 bytes)
{
    u64 r;
    asm volatile("add.s64 %0, %1, %2;\n" : "=l"(r) : "l"(desc), "l"((u64)(bytes >> 4)));
    return r;
}

// ---- the wide kernels' score group (sm90, sm90-split): 64 heads x 64 candidates ----
// A thread's S fragments: acc_s[4 j + 2 half + e] is its row g + 8 half's candidate
// 8 j + 2 q + e; O's, acc_o[4 j + 2 half + e], the same row's dims 8 j + 2 q + e.

// One tile of the online softmax: S scaled into the log2 domain, -inf where the
// candidate is skipped (valid[c] == 0), then each row's running max and sum, and
// alpha[half], the factor its O is rescaled by; S becomes P (fp32). The product is
// taken before the choice: as a predicated FMUL, ptxas loaded the scale from the
// constant bank once per value (32 LDC a tile). Arbitrary-scale kernels keep the
// predicated form, the other spilled 8 bytes in sm90-staged.
__device__ __forceinline__ void online_softmax_tile(const DecodeParams& p, float (&acc_s)[kTile / 2], const int* valid, int q,
                                             float (&row_max)[2], float (&row_sum)[2], float (&alpha)[2])
{
    float tile_max[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (int j = 0; j < kTile / 8; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const bool v = valid[8 * j + 2 * q + e] != 0;
#pragma unroll
            for (int half = 0; half < 2; half++) {
                float& x = acc_s[4 * j + 2 * half + e];
                if constexpr (kExactScalesOnly) {
                    x = v ? x * p.sm_scale_log2 : neg_inf();
                } else {
                    const float scaled = x * p.sm_scale_log2;
                    x = v ? scaled : neg_inf();
                }
                tile_max[half] = fmaxf(tile_max[half], x);
            }
        }
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
}

// P (bf16) as wgmma A fragments, one per 16-candidate k-step: register r of k-step
// kk holds row g + 8 (r & 1), candidates 16 kk + 8 (r >> 1) + 2 q, + 1.
__device__ __forceinline__ void probs_fragments(const float (&acc_s)[kTile / 2], u32 (&pf)[kKSteps][4])
{
#pragma unroll
    for (int kk = 0; kk < kKSteps; kk++)
#pragma unroll
        for (int r = 0; r < 4; r++) pf[kk][r] = pack_bf16x2(acc_s[8 * kk + 2 * r], acc_s[8 * kk + 2 * r + 1]);
}

// Row `half` of this thread's 256-dim share of O, times `factor`: fp32 (a split's
// partial) or bf16 (the result), each pair of dims one store.
template <int kAccO>
__device__ __forceinline__ void store_o_row_f32(float* dst, const float (&acc_o)[kAccO], int half, float factor)
{
#pragma unroll
    for (int j = 0; j < kAccO / 4; j++)
        *reinterpret_cast<U32x2*>(dst + 8 * j) =
            U32x2{float_to_bits(acc_o[4 * j + 2 * half] * factor), float_to_bits(acc_o[4 * j + 2 * half + 1] * factor)};
}

template <int kAccO>
__device__ __forceinline__ void store_o_row_bf16(u16* dst, const float (&acc_o)[kAccO], int half, float factor)
{
#pragma unroll
    for (int j = 0; j < kAccO / 4; j++)
        *reinterpret_cast<u32*>(dst + 8 * j) = pack_bf16x2(acc_o[4 * j + 2 * half] * factor, acc_o[4 * j + 2 * half + 1] * factor);
}

__device__ __forceinline__ void store_shared_u16(u32 addr, u32 v)
{
    asm volatile("st.shared.u16 [%0], %1;\n" :: "r"(addr), "h"((unsigned short)v) : "memory");
}

// The narrow kernels' S^T fragments (64 candidates x kHeadsN heads, fp32, kHeadsN / 2
// per thread): lane (g, q) of warp w holds rows (candidates) 16 w + g and + 8,
// columns (heads) 8 j + 2 q + e; its column c (j = c / 2, e = c % 2) is head
// narrow_head_of(c, q), in acc[4 (c / 2) + c % 2] (row g) and acc[4 (c / 2) + 2 + c % 2]
// (row g + 8).
__device__ __forceinline__ int narrow_head_of(int c, int q) { return 8 * (c / 2) + 2 * q + (c % 2); }

// The narrow kernels' products, N = kHeadsN (8-32): D(64 x kHeadsN) (+)= A(64 x 16) *
// B(16 x kHeadsN), bf16 in, fp32 accumulate, both from shared memory; kTransA: A
// MN-major (V^T), else K-major. scale_d = 0 overwrites D.
template <int kHeadsN, int kTransA>
__device__ __forceinline__ void wgmma_narrow(float (&d)[kHeadsN / 2], u64 desc_a, u64 desc_b, int scale_d)
{
    if constexpr (kHeadsN == 8) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, %7, 0;\n}\n"
                     : MLAJIT_ACC4(d) : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA));
    } else if constexpr (kHeadsN == 16) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, %11, 0;\n}\n"
                     : MLAJIT_ACC8(d, 0) : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA));
    } else if constexpr (kHeadsN == 24) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %14, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n24k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11}, %12, %13, p, 1, 1, %15, 0;\n}\n"
                     : MLAJIT_ACC12(d) : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA));
    } else {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, %19, 0;\n}\n"
                     : MLAJIT_ACC16(d) : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA));
    }
}

// The largest of the four warps' column maxima of a tile for one head (floats at
// columns [warp * kHeadsN + head]).
template <int kHeadsN>
__device__ __forceinline__ float tile_column_max(u32 columns, int head)
{
    float m = load_shared_f32(columns + 4 * head);
#pragma unroll
    for (int w = 1; w < 4; w++) m = fmaxf(m, load_shared_f32(columns + 4 * (w * kHeadsN + head)));
    return m;
}

// O^T = O^T * alpha + V^T P^T, per 64 value dims: the value tile's first kBlocks
// blocks (`v_tile`, MN-major) times P (`probs`, K-major); alpha per column as in
// the S^T fragments. Returns with the products done (the buffers may be refilled).
template <int kHeadsN, int kBlocks, int kAcc>
__device__ __forceinline__ void add_values(float (&acc_o)[kBlocks][kAcc], const float (&alpha)[kHeadsN / 4], u32 v_tile,
                                           u32 probs)
{
#pragma unroll
    for (int m = 0; m < kBlocks; m++)
#pragma unroll
        for (int i = 0; i < kAcc; i++) acc_o[m][i] *= alpha[2 * (i / 4) + i % 2];
#pragma unroll
    for (int m = 0; m < kBlocks; m++) fence_operands(acc_o[m]);
    wgmma_fence();
    const u64 v_desc = smem_descriptor(v_tile, kBlockBytes, 1024), p_desc = smem_descriptor(probs, 0, 1024);
#pragma unroll
    for (int m = 0; m < kBlocks; m++)
#pragma unroll
        for (int kk = 0; kk < kKSteps; kk++)
            wgmma_narrow<kHeadsN, 1>(acc_o[m], descriptor_plus(v_desc, m * kBlockBytes + kk * 16 * 128),
                                     descriptor_plus(p_desc, kk * 32), 1);
    wgmma_commit();
    wgmma_wait_all();
#pragma unroll
    for (int m = 0; m < kBlocks; m++) fence_operands(acc_o[m]);
}

// The scores in the log2 domain (-inf where the row's candidate is skipped: live0,
// live1), and each column's maximum over the warp's 16 rows, stored by the lanes
// of g = 0 at columns [warp * kHeadsN + head] (floats).
template <int kHeadsN, int kAcc>
__device__ __forceinline__ void scale_scores_and_store_column_maxima(float (&acc)[kAcc], bool live0, bool live1,
                                                                     float scale_log2, u32 columns, int warp,
                                                                     int lane)
{
    const int g = lane / 4, q = lane % 4;
#pragma unroll
    for (int c = 0; c < kHeadsN / 4; c++) {
        float& x0 = acc[4 * (c / 2) + c % 2];
        float& x1 = acc[4 * (c / 2) + 2 + c % 2];
        x0 = live0 ? x0 * scale_log2 : neg_inf();
        x1 = live1 ? x1 * scale_log2 : neg_inf();
        const float m = warp_max_xor(fmaxf(x0, x1), 32, 4);  // the column over the warp's 16 rows
        if (g == 0) st_shared_f32(columns + 4 * (warp * kHeadsN + narrow_head_of(c, q)), m);
    }
}

// P[head][candidate] (bf16, rows of 64 candidates swizzled as Q's), the B operand of
// P V, from the S^T fragments (now probabilities) of rows `row0` and row0 + 8.
template <int kHeadsN, int kAcc>
__device__ __forceinline__ void store_probabilities(u32 probs, const float (&acc)[kAcc], int row0, int lane)
{
    const int q = lane % 4;
#pragma unroll
    for (int c = 0; c < kHeadsN / 4; c++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int cand = row0 + 8 * half;
            const u32 bits = pack_bf16x2(acc[4 * (c / 2) + 2 * half + c % 2], 0.0f) & 0xffffu;
            store_shared_u16(probs + swizzled(narrow_head_of(c, q), cand / 8) + 2 * (cand % 8), bits);
        }
}

// The narrow kernels' output: O^T (the value group's accumulators, kBlocks blocks of
// 64 dims x kHeadsN heads) staged as fp32 head rows kHeadRowStride floats apart at
// `staging` (kHeadRowStride: 4 mod 32 banks, conflict-free column stores), then each warp finishes
// heads warp, warp + 4, ...: lane l holds dims 4 l + 128 k (k < 4), so each store
// instruction writes one row's contiguous 512 (fp32) or 256 (bf16) bytes and each
// staged read is 16 contiguous bytes per lane (no bank conflict). The heads' final
// maximum and sum are at row_max / row_sum [head within the group]. `staged` is the
// group's barrier for the staged rows. (The group's heads past h_q are padding.)
// With every head in one CTA both bounds are constants: a loop bound read at run
// time there cost the long walks at 32 heads 2-4% (ptxas's code for the walk moved).
constexpr int kHeadRowStride = cfg::kDV + 4;  // fp32, a staged head row's stride
template <int kHeadsN, int kBlocks, int kAcc>
__device__ __forceinline__ void write_head_rows(const DecodeParams& p, const CtaWork& work, u32 staging, u32 row_max,
                                                u32 row_sum, const float (&acc_o)[kBlocks][kAcc], int staged,
                                                int warp, int lane)
{
    constexpr int kChunks = cfg::kDV / 128;  // a warp's 32 lanes x 4 dims per store
    const int g = lane / 4, q = lane % 4;
#pragma unroll
    for (int m = 0; m < kBlocks; m++)
#pragma unroll
        for (int i = 0; i < kAcc; i++) {
            const int h = 8 * (i / 4) + 2 * q + (i % 2);
            const int dim = m * 64 + 16 * warp + g + 8 * ((i / 2) % 2);
            st_shared_f32(staging + 4 * (u32)(h * kHeadRowStride + dim), acc_o[m][i]);
        }
    named_barrier_sync(staged, kWarpGroupThreads);  // also publishes the statistics
    constexpr bool kEveryHeadHere = kHeadsN >= cfg::kHeads;
    const int head0 = kEveryHeadHere ? 0 : work.head0;
    const int heads_here = kEveryHeadHere ? cfg::kHeads : min(kHeadsN, cfg::kHeads - head0);
#pragma unroll 1
    for (int hl = warp; hl < heads_here; hl += 4) {
        const int dim0 = 4 * lane;
        const u32 src = staging + 4 * (u32)(hl * kHeadRowStride + dim0);
        finish_row(
            p, work.split, work.row, work.b, work.s, head0 + hl, dim0, load_shared_f32(row_max + 4 * hl),
            load_shared_f32(row_sum + 4 * hl), lane == 0,
            [&](float* dst, float inv) {
#pragma unroll
                for (int k = 0; k < kChunks; k++) {
                    const U32x4 v = load_shared16(src + 4 * 128 * k);
                    *reinterpret_cast<F32x4*>(dst + 128 * k) = F32x4{
                        bits_to_float(v.x) * inv, bits_to_float(v.y) * inv, bits_to_float(v.z) * inv,
                        bits_to_float(v.w) * inv};
                }
            },
            [&](u16* dst, float scale) {
#pragma unroll
                for (int k = 0; k < kChunks; k++) {
                    const U32x4 v = load_shared16(src + 4 * 128 * k);
                    *reinterpret_cast<U32x2*>(dst + 128 * k) =
                        U32x2{pack_bf16x2(bits_to_float(v.x) * scale, bits_to_float(v.y) * scale),
                              pack_bf16x2(bits_to_float(v.z) * scale, bits_to_float(v.w) * scale)};
                }
            });
    }
}

}  // namespace sm90
