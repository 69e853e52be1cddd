// ---------------------------------------------------------------------------
// combine.cu: merge split-KV partials. One CTA per (batch row x query token,
// head), blockIdx = (row, head); each thread owns kDV / kCombineThreads value dims.
//   lse = ln sum_s exp(lse_s);  out = sum_s exp(lse_s - lse) * O_s;  then the sink.
// Splits with nothing to attend carry lse_s = -inf and weigh nothing; a row with
// nothing at all gives out 0 and lse +inf.
// At small batches the combine is pure latency (a few CTAs, each reading up to
// kMaxSplits partials from L2), so no load waits on another: thread s reads split
// s's lse, the block reduces them once, and the partial rows are copied into shared
// memory (cp.async), kCombineStagedSplits splits per round, every copy in flight at
// once. The first round is issued right after the lse load, so the two overlap, and
// the weighted sum reads several splits at a time. (Loaded into registers instead,
// ptxas kept one or two rows in flight whatever the source asked for: one L2 round
// trip per split, a third of a b 1 call; bench/NOTES.md.)
// Dynamic shared memory: min(splits, kCombineStagedSplits) x kDV fp32 (the plan's).
// ---------------------------------------------------------------------------
namespace combine {
constexpr int kWarps = cfg::kCombineThreads / 32;
constexpr int kDimsPerThread = cfg::kDV / cfg::kCombineThreads;
constexpr int kStagedBytesPerSplit = cfg::kCombineThreads * 16;  // one split's row: each thread's 16 bytes
static_assert(kDimsPerThread == 4, "combine: each thread reads one 16-byte group of dims per split");
static_assert(cfg::kMaxSplits <= cfg::kCombineThreads, "combine: one thread per split's lse");
static_assert(kStagedBytesPerSplit == cfg::kDV * 4, "combine: a staged split is one fp32 row");
}  // namespace combine

// The block's reduction of one value per thread (op: max or sum); every thread gets it.
template <bool kMax>
__device__ __forceinline__ float combine_block_reduce(float v, float* warp_slots)
{
    v = kMax ? warp_max_xor(v, 32) : warp_sum_xor(v, 32);
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) warp_slots[warp] = v;
    __syncthreads();
    float r = warp_slots[0];
#pragma unroll
    for (int w = 1; w < combine::kWarps; w++) r = kMax ? fmaxf(r, warp_slots[w]) : r + warp_slots[w];
    __syncthreads();  // the slots are reused by the next reduction
    return r;
}

extern "C" __global__ void __launch_bounds__(cfg::kCombineThreads) mlajit_decode_combine(const DecodeParams p)
{
    extern __shared__ __align__(16) u8 combine_staged[];  // [round's split][thread] 16 bytes
    __shared__ float split_weight[cfg::kMaxSplits];
    __shared__ float warp_slots[combine::kWarps];
    const int row = blockIdx.x, h = blockIdx.y;
    const int b = row / p.s_q, s = row % p.s_q;
    const i64 rows = (i64)p.batch * p.s_q;
    const int num_splits = p.num_splits;
    const int t = threadIdx.x;
    const int per_round = min(num_splits, cfg::kCombineStagedSplits);
    const F32x4* column = reinterpret_cast<const F32x4*>(p.partial_out + ((i64)row * cfg::kHeads + h) * cfg::kDV) + t;
    const i64 split_stride4 = rows * cfg::kHeads * cfg::kDV / 4;  // one split's partials, in F32x4
    const u32 my_slots = smem_address(combine_staged) + 16u * t;      // this thread's 16 bytes of each staged split
    // Splits sp0 .. sp0 + per_round - 1 (those that exist) into the staging slots.
    // Each thread reads back only what it copied itself: no block barrier needed.
    auto stage_round = [&](int sp0) {
        for (int j = 0; j < per_round && sp0 + j < num_splits; j++)
            copy_async<16>(my_slots + (u32)(j * combine::kStagedBytesPerSplit), column + (sp0 + j) * split_stride4);
    };
    wait_for_prerequisite_grid();  // the partials: launched early, the combine may start before they exist

    // Every split's lse at once: thread t holds split t's. Issued before the first
    // round's copies: behind them (up to 64 KB per CTA) it came back 0.7-1.6 us after
    // the wait, and the weights wait for it (bench/NOTES.md).
    const float lse_t = t < num_splits ? p.partial_lse[(t * rows + row) * cfg::kHeads + h] : neg_inf();
    stage_round(0);
    const float max_lse = combine_block_reduce<true>(lse_t, warp_slots);
    const bool empty = max_lse == neg_inf();
    const float term = empty || t >= num_splits ? 0.0f : fast_exp2((lse_t - max_lse) * kLog2e);
    const float sum = combine_block_reduce<false>(term, warp_slots);
    const float lse = empty ? pos_inf() : max_lse + fast_log2(sum) * kLn2;
    if (t < num_splits) split_weight[t] = empty ? 0.0f : fast_exp2((lse_t - lse) * kLog2e);
    __syncthreads();

    float acc[combine::kDimsPerThread] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int sp0 = 0; sp0 < num_splits; sp0 += per_round) {
        if (sp0 > 0) stage_round(sp0);
        copy_async_wait_all();
        const int in_round = min(per_round, num_splits - sp0);
        // Branch-free and unrolled, so the shared-memory reads of several splits are in
        // flight at once: a branch on each split's weight made every split wait for its
        // own reads, ~20 ns per split (bench/NOTES.md).
#pragma unroll 8
        for (int j = 0; j < in_round; j++) {
            const float w = split_weight[sp0 + j];
            const F32x4 v = *reinterpret_cast<const F32x4*>(combine_staged + j * combine::kStagedBytesPerSplit + 16 * t);
            // A split that weighs nothing may not have written its row: its values
            // are dropped, not multiplied by 0 (they may be NaN).
            const bool weighs = w != 0.0f;
            acc[0] = weighs ? fmaf(w, v.x, acc[0]) : acc[0];
            acc[1] = weighs ? fmaf(w, v.y, acc[1]) : acc[1];
            acc[2] = weighs ? fmaf(w, v.z, acc[2]) : acc[2];
            acc[3] = weighs ? fmaf(w, v.w, acc[3]) : acc[3];
        }
    }
    float scale = 1.0f;
    if (cfg::kHasSink && !empty) scale = sink_factor(p.attn_sink[h], lse);
    u16* dst = p.out + b * p.out_stride_b + s * p.out_stride_s + h * p.out_stride_h;
    U32x2 packed = {pack_bf16x2(acc[0] * scale, acc[1] * scale), pack_bf16x2(acc[2] * scale, acc[3] * scale)};
    *reinterpret_cast<U32x2*>(dst + 4 * t) = packed;
    if (p.lse && t == 0) p.lse[b * p.lse_stride_b + s * p.lse_stride_s + h * p.lse_stride_h] = lse;
}
