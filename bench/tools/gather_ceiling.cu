// gather_ceiling.cu: how fast can an H200 gather random 656-byte KV rows?
// The ceiling for the memory-bound decode rows (h_q <= 32): the kernels read
// b * topk rows of one token each, scattered over a b * seqlen-token paged cache,
// which is not the 4.25 TB/s of a streaming copy. Standalone (runtime API), not
// part of the library; built and run by tools/device-run.sh's `gather` step:
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o gather_ceiling bench/tools/gather_ceiling.cu
// Prints GB/s for the BENCH.md shape (b 128, seqlen 32768, topk 2048, page 64) and a
// streaming read of the same byte count, for several CTAs-per-SM / bytes-in-flight;
// then ("producer-like") a model of the sm90 kernel's roles walking the same rows:
// its producer's loads (register rounds, cp.async or bulk copies), with its
// dequantization, and beside the consumers' tensor work; and sm90-narrow's two
// producer groups side by side (two_groups), each by bulk copies or in registers
// (bench/NOTES.md). Arguments: none = every line; `groups` = the two-group lines
// only; `model` = the line that models sm90-narrow's ring producers only (for ncu).
#include <cstring>
#include "bench_cuda.cuh"

constexpr int kPage = 64;

__global__ void make_indices(int* idx, const int* block_table, int b, int seqlen, int topk)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= (long)b * topk) return;
    int row = i / topk;
    int pos = hash32((unsigned)i * 2654435761u + 17u) % seqlen;  // random position in the row's sequence
    int pages_per_seq = seqlen / kPage;
    idx[i] = block_table[row * pages_per_seq + pos / kPage] * kPage + pos % kPage;
}

// Each warp gathers rows: a 656-byte row is 41 16-byte chunks; lanes take chunks
// lane and lane + 32 of the row (kUnroll rows in flight per warp).
template <int kUnroll>
__global__ void gather(const unsigned char* cache, const int* idx, long n_rows, unsigned* sink)
{
    long warp = (blockIdx.x * (long)blockDim.x + threadIdx.x) / 32;
    long warps = (gridDim.x * (long)blockDim.x) / 32;
    int lane = threadIdx.x % 32;
    unsigned acc = 0;
    for (long r0 = warp * kUnroll; r0 < n_rows; r0 += warps * kUnroll) {
        uint4 v[kUnroll][2];
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            long r = r0 + u;
            v[u][0] = v[u][1] = make_uint4(0, 0, 0, 0);
            if (r >= n_rows) continue;
            const uint4* row = reinterpret_cast<const uint4*>(cache + (long)idx[r] * kRowBytes);
            v[u][0] = __ldg(row + lane);
            if (lane + 32 < kChunks) v[u][1] = __ldg(row + lane + 32);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; u++) acc ^= v[u][0].x ^ v[u][0].w ^ v[u][1].y ^ v[u][1].z;
    }
    if (acc == 0x12345678u) sink[0] = acc;  // keeps the loads alive
}

__global__ void stream(const uint4* src, long n, unsigned* sink)
{
    unsigned acc = 0;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        uint4 v = __ldg(src + i);
        acc ^= v.x ^ v.w;
    }
    if (acc == 0x12345678u) sink[0] = acc;
}


// The sm90 producer's memory side alone (no dequantization arithmetic): one CTA of
// 128 gathering threads per SM (the shared memory it asks for keeps it alone), each
// CTA walking its tiles of 64 rows in rounds of 128 / kLanes rows, kLanes lanes per
// row: a lane loads its NoPE chunks part + kLanes i (16 kLanes-byte steps), its RoPE
// chunks and the 16 bytes of scales, then stores them to shared memory (the
// dequantization's stores). kRing register rounds: round g + kRing is loaded as soon
// as round g is stored, so kRing - 1 rounds are in flight while one is stored.
// kPrefetch: at each tile's start, its lanes prefetch into L2 the rows of the tile
// after next (as the kernel's producer does). Indices come from shared memory, as
// the kernel's are loaded tiles ahead.
constexpr int kTileRows = 64, kMaxTilesPerCta = 40;

// This CTA's tiles (blockIdx.x, + gridDim.x, ...) of 64 indices each into shared
// memory, by threads 0 .. kThreads - 1 (the caller synchronizes); returns their count.
__device__ __forceinline__ int cta_tiles(int n_tiles) { return (n_tiles - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x; }

template <int kThreads = 128>
__device__ __forceinline__ int load_cta_indices(int* s_idx, const int* idx, int n_tiles)
{
    const int my_tiles = cta_tiles(n_tiles);
    for (int i = threadIdx.x; i < my_tiles * kTileRows; i += kThreads)
        s_idx[i] = idx[(long)(blockIdx.x + (i / kTileRows) * gridDim.x) * kTileRows + i % kTileRows];
    return my_tiles;
}
// Lane `part` of a row's kLanes lanes brings the lines of this CTA's tile `tile`
// (rounds of kTok rows, the lane's row `token` of each) into L2, as the kernel's
// producer does for the tile after next.
template <int kLanes, int kTok, int kRounds>
__device__ __forceinline__ void prefetch_tile_rows(const unsigned char* cache, const int* s_idx, int tile, int token, int part)
{
#pragma unroll
    for (int r = 0; r < kRounds; r++) {
        const unsigned char* row = cache + (long)s_idx[tile * kTileRows + r * kTok + token] * kRowBytes;
        for (int k = part; k * 128 < kRowBytes + 128; k += kLanes)
            asm volatile("prefetch.global.L2 [%0];\n" :: "l"(row + min(k * 128, kRowBytes - 1)));
    }
}

// A ring of kRing register rounds over `rounds` rounds (kRounds per tile): round g +
// kRing is loaded as soon as round g is stored; at each tile's start (and before the
// first) prefetch(tile) is asked for the tile after next.
template <int kRing, int kRounds, typename Round, typename Load, typename Store, typename Prefetch>
__device__ __forceinline__ void ring_walk(int rounds, Round (&ring)[kRing], Load load, Store store, Prefetch prefetch)
{
    prefetch(1);
#pragma unroll
    for (int j = 0; j < kRing; j++)
        if (j < rounds) load(ring[j], j);
    for (int g0 = 0; g0 < rounds; g0 += kRing) {
#pragma unroll
        for (int j = 0; j < kRing; j++) {
            const int g = g0 + j;
            if (g < rounds) {
                if (g % kRounds == 0) prefetch(g / kRounds + 2);
                store(ring[j], g);
                if (g + kRing < rounds) load(ring[j], g + kRing);
            }
        }
    }
}

template <int kLanes>
struct ProducerRound {
    uint4 nope[32 / kLanes], rope[8 / kLanes], scales;
};

__device__ __forceinline__ uint4 load_nc16(const unsigned char* p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

__device__ __forceinline__ void store_smem16(unsigned addr, uint4 v)
{
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" :: "r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

// Lane `part` of a row's kLanes: its NoPE chunks (part + kLanes i), its RoPE chunks
// and the 16 bytes of scales, loaded from the row in the cache; and stored as they
// are to the row's copy in shared memory at `base` (the scales by part 0 only).
template <int kLanes>
__device__ __forceinline__ void load_row_part(const unsigned char* row, int part, ProducerRound<kLanes>& d)
{
#pragma unroll
    for (int i = 0; i < 32 / kLanes; i++) d.nope[i] = load_nc16(row + 16 * kLanes * i + 16 * part);
#pragma unroll
    for (int i = 0; i < 8 / kLanes; i++) d.rope[i] = load_nc16(row + 528 + 16 * (part + kLanes * i));
    d.scales = load_nc16(row + 512);
}

template <int kLanes>
__device__ __forceinline__ void store_row_part(unsigned base, int part, const ProducerRound<kLanes>& d)
{
#pragma unroll
    for (int i = 0; i < 32 / kLanes; i++) store_smem16(base + 16 * (part + kLanes * i), d.nope[i]);
#pragma unroll
    for (int i = 0; i < 8 / kLanes; i++) store_smem16(base + 528 + 16 * (part + kLanes * i), d.rope[i]);
    if (part == 0) store_smem16(base + 512, d.scales);
}

template <int kLanes, int kRing, bool kPrefetch>
__global__ void __launch_bounds__(128, 1) producer_like(const unsigned char* cache, const int* idx, int n_tiles, unsigned* sink)
{
    extern __shared__ __align__(16) unsigned char smem[];
    int* s_idx = reinterpret_cast<int*>(smem);                        // this CTA's tiles' indices
    const unsigned s_stage = (unsigned)__cvta_generic_to_shared(smem + kMaxTilesPerCta * kTileRows * 4);
    constexpr int kTokPerWarp = 32 / kLanes, kTok = 128 / kLanes, kRounds = kTileRows / kTok;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int token = warp * kTokPerWarp + lane % kTokPerWarp, part = lane / kTokPerWarp;
    const int my_tiles = load_cta_indices(s_idx, idx, n_tiles);
    __syncthreads();
    const int rounds = my_tiles * kRounds;
    auto row_of = [&](int g) { return cache + (long)s_idx[(g / kRounds) * kTileRows + (g % kRounds) * kTok + token] * kRowBytes; };
    auto load = [&](ProducerRound<kLanes>& d, int g) {
        const unsigned char* row = row_of(g);
        load_row_part(row, part, d);
    };
    auto store = [&](const ProducerRound<kLanes>& d, int g) {
        const unsigned base = s_stage + (unsigned)(((g % kRounds) * kTok + token) * kRowBytes);
        store_row_part(base, part, d);
    };
    ProducerRound<kLanes> ring[kRing];
    ring_walk<kRing, kRounds>(rounds, ring, load, store, [&](int tile) {
        if (kPrefetch && tile < my_tiles) prefetch_tile_rows<kLanes, kTok, kRounds>(cache, s_idx, tile, token, part);
    });
    if (rounds < 0) sink[0] = 1u;
}

// The same walk with cp.async (16 bytes, L2 only) into a ring of kSlots shared-memory
// rounds instead of registers: round g + kSlots - 1 is issued, then round g waited
// for and read back by the lanes that copied it, so kSlots - 1 rounds are in flight
// while one is read: the depth costs shared memory, not registers.
template <int kSlots>
__global__ void __launch_bounds__(128, 1) producer_async(const unsigned char* cache, const int* idx, int n_tiles, unsigned* sink)
{
    extern __shared__ __align__(16) unsigned char smem[];
    int* s_idx = reinterpret_cast<int*>(smem);
    const unsigned s_ring = (unsigned)__cvta_generic_to_shared(smem + kMaxTilesPerCta * kTileRows * 4);
    constexpr int kLanes = 4, kTokPerWarp = 8, kTok = 32, kRounds = 2, kChunks = 11;  // per lane and round
    constexpr unsigned kSlotBytes = kChunks * 128 * 16;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int token = warp * kTokPerWarp + lane % kTokPerWarp, part = lane / kTokPerWarp;
    const int my_tiles = load_cta_indices(s_idx, idx, n_tiles);
    __syncthreads();
    const int rounds = my_tiles * kRounds;
    auto issue = [&](int g) {
        if (g < rounds) {
            const unsigned char* row = cache + (long)s_idx[(g / kRounds) * kTileRows + (g % kRounds) * kTok + token] * kRowBytes;
            const unsigned slot = s_ring + (unsigned)(g % kSlots) * kSlotBytes + threadIdx.x * 16;
#pragma unroll
            for (int c = 0; c < kChunks; c++) {
                const unsigned char* src = c < 8 ? row + 64 * c + 16 * part : c < 10 ? row + 528 + 16 * (part + kLanes * (c - 8)) : row + 512;
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(slot + c * 128 * 16), "l"(src) : "memory");
            }
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    };
    unsigned acc = 0;
#pragma unroll
    for (int j = 0; j < kSlots - 1; j++) issue(j);
    for (int g = 0; g < rounds; g++) {
        issue(g + kSlots - 1);
        asm volatile("cp.async.wait_group %0;\n" :: "n"(kSlots - 1) : "memory");
        const unsigned slot = s_ring + (unsigned)(g % kSlots) * kSlotBytes + threadIdx.x * 16;
#pragma unroll
        for (int c = 0; c < kChunks; c++) {
            unsigned x, y, z, w;
            asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(x), "=r"(y), "=r"(z), "=r"(w) : "r"(slot + c * 128 * 16) : "memory");
            acc ^= x ^ w;
        }
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

// The same walk with bulk copies (the TMA engine): one whole 656-byte row per
// cp.async.bulk, issued by the 32 lanes of warp 0 (one row each) into a ring of
// kSlots shared-memory rounds, completion counted in bytes on each slot's mbarrier;
// every warp then reads its rows back. The loads leave the LSU: no register and no
// per-warp issue cost per 16 bytes.
template <int kSlots, int kRowsPerRound>
__global__ void __launch_bounds__(128, 1) producer_bulk(const unsigned char* cache, const int* idx, int n_tiles, unsigned* sink)
{
    extern __shared__ __align__(16) unsigned char smem[];
    int* s_idx = reinterpret_cast<int*>(smem);
    const unsigned s_bar = (unsigned)__cvta_generic_to_shared(smem + kMaxTilesPerCta * kTileRows * 4);  // kSlots mbarriers
    const unsigned s_ring = s_bar + 128;
    constexpr unsigned kSlotBytes = kRowsPerRound * kRowBytes;
    constexpr int kRounds = kTileRows / kRowsPerRound;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int my_tiles = load_cta_indices(s_idx, idx, n_tiles);
    if (threadIdx.x < kSlots) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" :: "r"(s_bar + 8 * threadIdx.x) : "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    const int rounds = my_tiles * kRounds;
    auto issue = [&](int g) {
        if (warp != 0 || g >= rounds) return;
        const unsigned bar = s_bar + 8 * (g % kSlots);
        if (lane == 0) asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(kSlotBytes) : "memory");
        __syncwarp();
        for (int r = lane; r < kRowsPerRound; r += 32) {
            const unsigned char* row = cache + (long)s_idx[(g / kRounds) * kTileRows + (g % kRounds) * kRowsPerRound + r] * kRowBytes;
            const unsigned dst = s_ring + (unsigned)(g % kSlots) * kSlotBytes + r * kRowBytes;
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                         :: "r"(dst), "l"(row), "r"((unsigned)kRowBytes), "r"(bar) : "memory");
        }
    };
    unsigned acc = 0;
    for (int j = 0; j < kSlots - 1; j++) issue(j);
    for (int g = 0; g < rounds; g++) {
        issue(g + kSlots - 1);
        const unsigned bar = s_bar + 8 * (g % kSlots);
        const unsigned parity = (unsigned)(g / kSlots) & 1u;
        asm volatile("{\n.reg .pred done;\nwait_%=:\nmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n@!done bra wait_%=;\n}\n"
                     :: "r"(bar), "r"(parity) : "memory");
        const unsigned slot = s_ring + (unsigned)(g % kSlots) * kSlotBytes;
        for (unsigned o = threadIdx.x * 16; o < kSlotBytes; o += 128 * 16) {
            unsigned x, y, z, w;
            asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(x), "=r"(y), "=r"(z), "=r"(w) : "r"(slot + o) : "memory");
            acc ^= x ^ w;
        }
        __syncthreads();  // slot g % kSlots is read: the next issue may refill it
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

// The producer's whole loop (no consumers): kThreads gathering threads in one CTA per
// SM, four lanes per row, rounds of kThreads / 4 rows, kRing register rounds; each
// round dequantized as the sm90 kernel's fast path does (prmt, shift and mask, one
// bf16x2 fma per pair of codes) into a swizzled bf16 K tile in shared memory. The
// scale is made from the loaded scale word so the data stays live. Compares one
// producer warp group (today's) against two, each holding one round (the registers
// two producer groups would have beside the consumers: about 72 each).
__device__ __forceinline__ unsigned dq_pair(unsigned w, unsigned sel, unsigned scale2)
{
    unsigned t, r;
    asm("prmt.b32 %0, %1, 0, %2;" : "=r"(t) : "r"(w), "r"(sel));
    t = (t << 4) & 0x87f087f0u;  // the kernel's e4m3x2_to_bf16x2_down120
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(t), "r"(scale2), "r"(0x80008000u));
    return r;
}

// Lane `part` of a row's four: its quarter of a loaded round dequantized the fast-path
// way (the scale's exponent only) into row t of the swizzled bf16 K tile at s_k.
__device__ __forceinline__ void dequant_store_quarter(unsigned s_k, int t, int part, const ProducerRound<4>& d)
{
    auto sw = [&](int c) { return (unsigned)(t * 128 + ((c ^ (t & 7)) << 4)); };
    const unsigned sc[4] = {d.scales.x, d.scales.y, d.scales.z, d.scales.w};
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const unsigned e = ((sc[i / 2] >> 23) & 0xfu) + 120u, scale2 = (e << 7) | (e << 23);
        const unsigned w[4] = {d.nope[i].x, d.nope[i].y, d.nope[i].z, d.nope[i].w};
        uint4 lo, hi;
        lo.x = dq_pair(w[0], 0x9180u, scale2); lo.y = dq_pair(w[0], 0xb3a2u, scale2);
        lo.z = dq_pair(w[1], 0x9180u, scale2); lo.w = dq_pair(w[1], 0xb3a2u, scale2);
        hi.x = dq_pair(w[2], 0x9180u, scale2); hi.y = dq_pair(w[2], 0xb3a2u, scale2);
        hi.z = dq_pair(w[3], 0x9180u, scale2); hi.w = dq_pair(w[3], 0xb3a2u, scale2);
        store_smem16(s_k + i * 8192 + sw(2 * part), lo);
        store_smem16(s_k + i * 8192 + sw(2 * part + 1), hi);
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int dim = 512 + 8 * (part + 4 * i);
        store_smem16(s_k + (dim / 64) * 8192 + sw((dim % 64) / 8), d.rope[i]);
    }
}

template <int kThreads, int kRing, bool kStore = true>
__device__ __forceinline__ void producer_dequant_body(const unsigned char* cache, const int* idx, int n_tiles, unsigned* sink)
{
    extern __shared__ __align__(16) unsigned char smem[];
    int* s_idx = reinterpret_cast<int*>(smem);
    const unsigned s_k = ((unsigned)__cvta_generic_to_shared(smem + kMaxTilesPerCta * kTileRows * 4) + 1023u) & ~1023u;
    constexpr int kLanes = 4, kTok = kThreads / kLanes, kRounds = kTileRows / kTok;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int token = warp * 8 + lane % 8, part = lane / 8;
    const int my_tiles = load_cta_indices<kThreads>(s_idx, idx, n_tiles);
    asm volatile("bar.sync 1, %0;\n" :: "n"(kThreads) : "memory");  // its own threads only: in
    // producer_beside_consumers the other groups never reach a CTA-wide barrier
    const int rounds = my_tiles * kRounds;
    auto load = [&](ProducerRound<kLanes>& d, int g) {
        const unsigned char* row = cache + (long)s_idx[(g / kRounds) * kTileRows + (g % kRounds) * kTok + token] * kRowBytes;
#pragma unroll
        for (int i = 0; i < 8; i++) d.nope[i] = load_nc16(row + 64 * i + 16 * part);
#pragma unroll
        for (int i = 0; i < 2; i++) d.rope[i] = load_nc16(row + 528 + 16 * (part + kLanes * i));
        d.scales = load_nc16(row + 512);
    };
    unsigned live = 0;  // !kStore: the loads only, their data kept live
    auto store = [&](const ProducerRound<kLanes>& d, int g) {
        if (!kStore) {
#pragma unroll
            for (int i = 0; i < 8; i++) live ^= d.nope[i].x ^ d.nope[i].w;
            live ^= d.rope[0].y ^ d.rope[1].z ^ d.scales.x;
            return;
        }
        dequant_store_quarter(s_k, (g % kRounds) * kTok + token, part, d);
    };
    ProducerRound<kLanes> ring[kRing];
    ring_walk<kRing, kRounds>(rounds, ring, load, store, [&](int tile) {
        if (tile < my_tiles) prefetch_tile_rows<kLanes, kTok, kRounds>(cache, s_idx, tile, token, part);
    });
    if (rounds < 0 || live == 0x12345678u) sink[0] = 1u;
}

__global__ void __launch_bounds__(128, 1) producer_dequant_1group(const unsigned char* c, const int* i, int n, unsigned* s)
{
    producer_dequant_body<128, 2>(c, i, n, s);
}
__global__ void __launch_bounds__(256, 1) producer_dequant_2groups(const unsigned char* c, const int* i, int n, unsigned* s)
{
    producer_dequant_body<256, 2>(c, i, n, s);
}
__global__ void __maxnreg__(72) producer_dequant_2groups_72(const unsigned char* c, const int* i, int n, unsigned* s)
{
    producer_dequant_body<256, 1>(c, i, n, s);
}

// The producer beside consumer-like tensor work: per tile, warp group 1 runs S = Q K^T
// (36 m64n64k16, both operands in shared memory) and warp group 2 P V for all 512
// dims (32 m64n64k16 reading V from the K tile: the bytes of 8 m64n256k16), over the
// same shared memory the producer writes, with no synchronization between the roles.
// Producer alone, consumers alone and both together tell whether sharing the SM
// (issue slots, the shared-memory path) or the hand-off between the roles costs the
// kernel its time. The producer's index load and barrier are its own group's only:
// a CTA-wide barrier there would wait for the consumer groups to exit.
__device__ __forceinline__ unsigned long long mk_desc(unsigned addr, unsigned leading, unsigned stride)
{
    return (unsigned long long)((addr & 0x3ffffu) >> 4) | ((unsigned long long)(leading >> 4) << 16) |
           ((unsigned long long)(stride >> 4) << 32) | (1ull << 62);
}

#define GC_ACC8(d, i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
#define GC_ACC32(d, i) GC_ACC8(d, i), GC_ACC8(d, i + 8), GC_ACC8(d, i + 16), GC_ACC8(d, i + 24)
#define GC_REGS32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"

__device__ __forceinline__ void gc_wgmma_s(float (&d)[32], unsigned long long a, unsigned long long b)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " GC_REGS32 ", %32, %33, 1, 1, 1, 0, 0;\n"
                 : GC_ACC32(d, 0) : "l"(a), "l"(b));
}

// P V as four m64n64k16 per 256-dim half (the same bytes as one m64n256k16), V MN-major
__device__ __forceinline__ void gc_wgmma_pv(float (&d)[32], unsigned long long a, unsigned long long b)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " GC_REGS32 ", %32, %33, 1, 1, 1, 0, 1;\n"
                 : GC_ACC32(d, 0) : "l"(a), "l"(b));
}

// kConsumers: 1 = S only, 2 = P V only, 3 = both; kStore: the producer dequantizes
// and stores (else it loads only).
template <bool kProducer, int kConsumers, bool kStore = true>
__global__ void __launch_bounds__(384, 1) producer_beside_consumers(const unsigned char* cache, const int* idx, int n_tiles, unsigned* sink)
{
    extern __shared__ __align__(16) unsigned char smem[];
    const int group = threadIdx.x / 128;
    if (group == 0) {
        if (kProducer) producer_dequant_body<128, 2, kStore>(cache, idx, n_tiles, sink);
        return;
    }
    if (!(kConsumers & group)) return;
    // Q (74 KB) after the producer's index table and K tile (the producer's s_k)
    const unsigned s_k = ((unsigned)__cvta_generic_to_shared(smem + kMaxTilesPerCta * kTileRows * 4) + 1023u) & ~1023u;
    const unsigned s_q = s_k + 9 * 8192, s_p = s_q + 9 * 8192;
    const int my_tiles = cta_tiles(n_tiles);
    float acc[32];
#pragma unroll
    for (int i = 0; i < 32; i++) acc[i] = 0.0f;
    // each tile's wgmma from shared-memory bases made opaque per tile (72 descriptors
    // hoisted out of the loop would spill)
    auto per_tile = [&](unsigned a_base, auto issue) {
        for (int t = 0; t < my_tiles; t++) {
            unsigned a = a_base, k = s_k;
            asm volatile("" : "+r"(a), "+r"(k));
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
            issue(a, k);
            asm volatile("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        }
    };
    if (group == 1)  // S = Q K^T
        per_tile(s_q, [&](unsigned q, unsigned k) {
#pragma unroll
            for (int kb = 0; kb < 9; kb++)
#pragma unroll
                for (int kk = 0; kk < 4; kk++)
                    gc_wgmma_s(acc, mk_desc(q + kb * 8192 + kk * 32, 0, 1024), mk_desc(k + kb * 8192 + kk * 32, 0, 1024));
        });
    else  // P V, both halves of d_v
        per_tile(s_p, [&](unsigned pp, unsigned k) {
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int kk = 0; kk < 4; kk++)
                    gc_wgmma_pv(acc, mk_desc(pp + kk * 32, 0, 1024), mk_desc(k + n * 8192 + kk * 16 * 128, 8192, 1024));
        });
    float x = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; i++) x += acc[i];
    if (x == 1234.5f) sink[0] = 1u;
}

// Two producer groups side by side (256 threads, one CTA per SM), each owning a
// part of every tile's 64 rows, one round per tile: the model of sm90-narrow's
// producers, which decides how each group should gather. A group's mode: kSlots > 0
// brings its rows by bulk copy into a ring of kSlots slots (each row copied by its own
// lane, kRows / 4 lanes per warp; a slot read, fenced against the async proxy and met
// at the group's barrier before it is refilled: the kernel's row ring); kSlots < 0
// loads them into -kSlots register rounds (ring_walk, the rows of the tile after next
// prefetched into L2: the kernel's register path), 128 / kRows lanes per row.
// Measured (bench/HISTORY.md, "The ring kernel taken apart"): with each warp copying its
// own rows, bulk copies reach ~3 TB/s with one slot per group (producer_bulk's ~1.9
// came from one warp issuing every copy), and groups mixing the two ways are no faster.
// kDequant (32 rows): each lane reads its row's quarter as the kernel's producer does
// (4 lanes per row, into registers), and after the refill is issued dequantizes it
// into a swizzled bf16 K tile at s_k: the kernel's producer loop without the consumer.
// kExtras (with kDequant): 1 = the stores fenced against the async proxy (as wgmma
// needs them), 2 = the two groups meet at a barrier after each tile (the K buffer's
// hand-off couples them in the kernel).
template <int kRows, int kSlots, bool kDequant = false, int kExtras = 0>
__device__ __forceinline__ unsigned bulk_part(const unsigned char* cache, const int* s_idx, int my_tiles, int row0,
                                              int gtid, int bar_id, unsigned s_bar, unsigned s_ring, unsigned s_k = 0)
{
    constexpr unsigned kSlotBytes = kRows * kRowBytes;
    constexpr int kPerWarp = kRows / 4;
    const int warp = gtid / 32, lane = gtid % 32, r = warp * kPerWarp + lane;
    auto issue = [&](int t) {
        if (t >= my_tiles || lane >= kPerWarp) return;
        const unsigned bar = s_bar + 8 * (t % kSlots);
        const unsigned char* row = cache + (long)s_idx[t * kTileRows + row0 + r] * kRowBytes;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"((unsigned)kRowBytes) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                     :: "r"(s_ring + (unsigned)(t % kSlots) * kSlotBytes + (unsigned)r * kRowBytes), "l"(row),
                        "r"((unsigned)kRowBytes), "r"(bar) : "memory");
    };
    for (int j = 0; j < kSlots; j++) issue(j);
    unsigned acc = 0;
    for (int t = 0; t < my_tiles; t++) {
        const unsigned bar = s_bar + 8 * (t % kSlots), parity = (unsigned)(t / kSlots) & 1u;
        asm volatile("{\n.reg .pred done;\nwait_%=:\nmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n@!done bra wait_%=;\n}\n"
                     :: "r"(bar), "r"(parity) : "memory");
        const unsigned slot = s_ring + (unsigned)(t % kSlots) * kSlotBytes;
        if constexpr (kDequant) {
            static_assert(kRows == 32, "a 32-row round, four lanes per row");
            const int token = warp * 8 + lane % 8, part = lane / 8;
            const unsigned src = slot + (unsigned)token * kRowBytes;
            ProducerRound<4> d;
            auto ld = [&](unsigned a) {
                uint4 v;
                asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a) : "memory");
                return v;
            };
#pragma unroll
            for (int i = 0; i < 8; i++) d.nope[i] = ld(src + 64 * i + 16 * part);
#pragma unroll
            for (int i = 0; i < 2; i++) d.rope[i] = ld(src + 528 + 16 * (part + 4 * i));
            d.scales = ld(src + 512);
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            asm volatile("bar.sync %0, 128;\n" :: "r"(bar_id) : "memory");
            issue(t + kSlots);
            dequant_store_quarter(s_k, row0 + token, part, d);
            if (kExtras & 1) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            if (kExtras & 2) asm volatile("bar.sync 3, 256;\n" ::: "memory");
        } else {
            for (unsigned o = gtid * 16; o < kSlotBytes; o += 128 * 16) {
                unsigned x, y, z, w;
                asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(x), "=r"(y), "=r"(z), "=r"(w) : "r"(slot + o) : "memory");
                acc ^= x ^ w;
            }
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            asm volatile("bar.sync %0, 128;\n" :: "r"(bar_id) : "memory");
            issue(t + kSlots);
        }
    }
    return acc;
}

template <int kRows, int kRing>
__device__ __forceinline__ void load_part(const unsigned char* cache, const int* s_idx, int my_tiles, int row0,
                                          int gtid, unsigned s_stage)
{
    constexpr int kLanes = 128 / kRows, kTokPerWarp = 32 / kLanes;
    const int warp = gtid / 32, lane = gtid % 32;
    const int token = warp * kTokPerWarp + lane % kTokPerWarp, part = lane / kTokPerWarp;
    auto row_of = [&](int t) { return cache + (long)s_idx[t * kTileRows + row0 + token] * kRowBytes; };
    auto load = [&](ProducerRound<kLanes>& d, int t) {
        const unsigned char* row = row_of(t);
        load_row_part(row, part, d);
    };
    auto store = [&](const ProducerRound<kLanes>& d, int) {
        const unsigned base = s_stage + (unsigned)(token * kRowBytes);
        store_row_part(base, part, d);
    };
    ProducerRound<kLanes> ring[kRing];
    ring_walk<kRing, 1>(my_tiles, ring, load, store, [&](int t) {
        if (t < my_tiles)
            for (int k = part; k * 128 < kRowBytes + 128; k += kLanes)
                asm volatile("prefetch.global.L2 [%0];\n" :: "l"(row_of(t) + min(k * 128, kRowBytes - 1)));
    });
}

template <int kRowsA, int kModeA, int kModeB, bool kDequant = false, int kExtras = 0>
__global__ void __launch_bounds__(256, 1) two_groups(const unsigned char* cache, const int* idx, int n_tiles, unsigned* sink)
{
    extern __shared__ __align__(16) unsigned char smem[];
    int* s_idx = reinterpret_cast<int*>(smem);
    constexpr int kRowsB = kTileRows - kRowsA;
    const unsigned s_bar = (unsigned)__cvta_generic_to_shared(smem + kMaxTilesPerCta * kTileRows * 4);  // 16 mbarriers
    static_assert(kRowsA >= 32 && kRowsA <= 48, "group 0 at most 2 slots of 48 rows, group 1 of 32");
    const unsigned s_a = s_bar + 128;                                     // group 0's slots or stage
    const unsigned s_b = s_a + 2 * 48 * kRowBytes;                        // group 1's
    const unsigned s_k = (s_b + 2 * 32 * kRowBytes + 1023u) & ~1023u;     // kDequant: the K tile (72 KB)
    const int group = threadIdx.x / 128, gtid = threadIdx.x % 128;
    const int my_tiles = load_cta_indices<256>(s_idx, idx, n_tiles);
    if (threadIdx.x < 16)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n"
                     :: "r"(s_bar + 8 * threadIdx.x), "r"(threadIdx.x < 8 ? kRowsA : kRowsB) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    __syncthreads();
    unsigned acc = 0;  // the bulk reads' checksum (register loads stay live through their stores)
    if (group == 0) {
        if constexpr (kModeA > 0) acc = bulk_part<kRowsA, kModeA, kDequant, kExtras>(cache, s_idx, my_tiles, 0, gtid, 1, s_bar, s_a, s_k);
        else load_part<kRowsA, -kModeA>(cache, s_idx, my_tiles, 0, gtid, s_a);
    } else {
        if constexpr (kModeB > 0) acc = bulk_part<kRowsB, kModeB, kDequant, kExtras>(cache, s_idx, my_tiles, kRowsA, gtid, 2, s_bar + 64, s_b, s_k);
        else load_part<kRowsB, -kModeB>(cache, s_idx, my_tiles, kRowsA, gtid, s_b);
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

template <typename F>
static float time_us(F launch)
{
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a)); CHECK(cudaEventCreate(&b));
    launch(); CHECK(cudaDeviceSynchronize());
    float best = 1e30f;
    for (int rep = 0; rep < 10; rep++) {
        CHECK(cudaEventRecord(a)); launch(); CHECK(cudaEventRecord(b)); CHECK(cudaEventSynchronize(b));
        float ms; CHECK(cudaEventElapsedTime(&ms, a, b));
        if (ms < best) best = ms;
    }
    return best * 1000.0f;
}

int main(int argc, char** argv)
{
    const bool only_groups = argc > 1 && std::strcmp(argv[1], "groups") == 0;  // the two-group lines alone
    const bool only_model = argc > 1 && std::strcmp(argv[1], "model") == 0;    // the kernel's producers' model alone (for ncu)
    const int b = 128, seqlen = 32768, topk = 2048;
    const long slots = (long)b * seqlen, n_rows = (long)b * topk;
    int sms; CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    unsigned char* cache; int *idx, *bt; unsigned* sink;
    CHECK(cudaMalloc(&cache, slots * kRowBytes));
    CHECK(cudaMemset(cache, 1, slots * kRowBytes));
    CHECK(cudaMalloc(&idx, n_rows * sizeof(int)));
    CHECK(cudaMalloc(&sink, 4));
    int pages = slots / kPage;
    int* h_bt = (int*)malloc(pages * sizeof(int));
    for (int i = 0; i < pages; i++) h_bt[i] = i;
    srand(1);
    for (int i = pages - 1; i > 0; i--) { int j = rand() % (i + 1); int t = h_bt[i]; h_bt[i] = h_bt[j]; h_bt[j] = t; }
    CHECK(cudaMalloc(&bt, pages * sizeof(int)));
    CHECK(cudaMemcpy(bt, h_bt, pages * sizeof(int), cudaMemcpyHostToDevice));
    make_indices<<<(n_rows + 255) / 256, 256>>>(idx, bt, b, seqlen, topk);
    CHECK(cudaDeviceSynchronize());
    double bytes = (double)n_rows * kRowBytes;
    printf("gather ceiling: b %d seqlen %d topk %d page %d, %.1f MB gathered from a %.2f GB cache, %d SMs\n",
           b, seqlen, topk, kPage, bytes / 1e6, slots * kRowBytes / 1e9, sms);
    for (int threads : {256, 512, 1024}) {
        if (only_groups || only_model) break;
        for (int ctas_per_sm : {1, 2, 4, 8}) {
            if (threads * ctas_per_sm > 2048) continue;
            int grid = sms * ctas_per_sm;
            float us1 = time_us([&] { gather<1><<<grid, threads>>>(cache, idx, n_rows, sink); });
            float us4 = time_us([&] { gather<4><<<grid, threads>>>(cache, idx, n_rows, sink); });
            printf("gather  threads/SM %5d  rows in flight/warp 1: %7.1f us %6.0f GB/s   4: %7.1f us %6.0f GB/s\n",
                   threads * ctas_per_sm, us1, bytes / us1 / 1e3, us4, bytes / us4 / 1e3);
        }
    }
    // The sm90 producer's memory side (producer_like above), one CTA per SM.
    {
        const int n_tiles = (int)(n_rows / kTileRows);
        const int smem = kMaxTilesPerCta * kTileRows * 4 + kTileRows * kRowBytes;
        const int pad = 200 * 1024;  // asks for most of the SM, as the kernel does: one CTA per SM
        auto run = [&](const char* name, auto kernel, int threads = 128) {
            CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, pad));
            float us = time_us([&] { kernel<<<sms, threads, pad>>>(cache, idx, n_tiles, sink); });
            printf("producer-like %-34s %7.1f us %6.0f GB/s\n", name, us, bytes / us / 1e3);
        };
        if (smem > pad || kMaxTilesPerCta * kTileRows * 4 + 6 * 11 * 128 * 16 > pad) { printf("producer-like: shared memory too small\n"); return 1; }
        if (only_model) {
            run("2 groups: bulk 32 ring 1 x2, + dequant, fenced, coupled", two_groups<32, 1, 1, true, 3>, 256);
            return 0;
        }
        run("2 groups: bulk 32 ring 1 | bulk 32 ring 1", two_groups<32, 1, 1>, 256);
        run("2 groups: bulk 32 ring 2 | bulk 32 ring 2", two_groups<32, 2, 2>, 256);
        run("2 groups: regs 32 ring 2 | regs 32 ring 2", two_groups<32, -2, -2>, 256);
        run("2 groups: regs 32 ring 3 | regs 32 ring 3", two_groups<32, -3, -3>, 256);
        run("2 groups: bulk 32 ring 1 | regs 32 ring 2", two_groups<32, 1, -2>, 256);
        run("2 groups: bulk 32 ring 2 | regs 32 ring 2", two_groups<32, 2, -2>, 256);
        run("2 groups: bulk 32 ring 2 | regs 32 ring 3", two_groups<32, 2, -3>, 256);
        run("2 groups: bulk 48 ring 1 | regs 16 ring 2", two_groups<48, 1, -2>, 256);
        run("2 groups: bulk 48 ring 2 | regs 16 ring 2", two_groups<48, 2, -2>, 256);
        run("2 groups: bulk 48 ring 2 | regs 16 ring 3", two_groups<48, 2, -3>, 256);
        run("1 group: bulk 32 ring 2, warp 0 issues", producer_bulk<2, 32>);
        run("2 groups: bulk 32 ring 1 x2, + dequant (kernel's producers)", two_groups<32, 1, 1, true>, 256);
        run("2 groups: bulk 32 ring 2 x2, + dequant", two_groups<32, 2, 2, true>, 256);
        run("2 groups: bulk 32 ring 1 x2, + dequant, fenced", two_groups<32, 1, 1, true, 1>, 256);
        run("2 groups: bulk 32 ring 1 x2, + dequant, coupled", two_groups<32, 1, 1, true, 2>, 256);
        run("2 groups: bulk 32 ring 1 x2, + dequant, fenced, coupled", two_groups<32, 1, 1, true, 3>, 256);
        if (only_groups) return 0;
        run("lanes 4 ring 2 (sm90 today)", producer_like<4, 2, true>);
        run("lanes 4 ring 2, no L2 prefetch", producer_like<4, 2, false>);
        run("lanes 4 ring 3", producer_like<4, 3, true>);
        run("lanes 4 ring 4", producer_like<4, 4, true>);
        run("lanes 4 ring 4, no L2 prefetch", producer_like<4, 4, false>);
        run("lanes 8 ring 2", producer_like<8, 2, true>);
        run("lanes 8 ring 4", producer_like<8, 4, true>);
        run("lanes 8 ring 6", producer_like<8, 6, true>);
        run("lanes 8 ring 8", producer_like<8, 8, true>);
        run("lanes 8 ring 8, no L2 prefetch", producer_like<8, 8, false>);
        run("cp.async ring 2", producer_async<2>);
        run("cp.async ring 3", producer_async<3>);
        run("cp.async ring 4", producer_async<4>);
        run("cp.async ring 6", producer_async<6>);
        run("bulk rows, 32 per slot, ring 2", producer_bulk<2, 32>);
        run("bulk rows, 32 per slot, ring 3", producer_bulk<3, 32>);
        run("bulk rows, 32 per slot, ring 4", producer_bulk<4, 32>);
        run("bulk rows, 32 per slot, ring 6", producer_bulk<6, 32>);
        run("bulk rows, 64 per slot, ring 3", producer_bulk<3, 64>);
        run("bulk rows, 16 per slot, ring 6", producer_bulk<6, 16>);
        run("+ dequant: 1 group, ring 2 (sm90 today)", producer_dequant_1group);
        run("+ dequant: 2 groups, ring 2", producer_dequant_2groups, 256);
        run("+ dequant: 2 groups, ring 1, 72 regs", producer_dequant_2groups_72, 256);
        run("beside consumers: producer only", producer_beside_consumers<true, 0>, 384);
        run("beside consumers: consumers only", producer_beside_consumers<false, 3>, 384);
        run("beside consumers: both", producer_beside_consumers<true, 3>, 384);
        run("beside consumers: S only", producer_beside_consumers<false, 1>, 384);
        run("beside consumers: P V only", producer_beside_consumers<false, 2>, 384);
        run("beside consumers: producer + S", producer_beside_consumers<true, 1>, 384);
        run("beside consumers: producer + P V", producer_beside_consumers<true, 2>, 384);
        run("beside consumers: loads only", producer_beside_consumers<true, 0, false>, 384);
        run("beside consumers: loads only + both", producer_beside_consumers<true, 3, false>, 384);
    }
    long n16 = (long)bytes / 16;
    float us = time_us([&] { stream<<<sms * 8, 256>>>(reinterpret_cast<const uint4*>(cache) + 12345 * 41, n16, sink); });
    printf("stream  same bytes, contiguous: %7.1f us %6.0f GB/s\n", us, bytes / us / 1e3);
    return 0;
}
