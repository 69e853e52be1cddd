// ---------------------------------------------------------------------------
// combine.cu: merge split-KV partials. One CTA per (batch row x query token,
// head), blockIdx = (row, head); each thread owns kDV / kCombineThreads value dims.
//   lse = ln sum_s exp(lse_s);  out = sum_s exp(lse_s - lse) * O_s;  then the sink.
// Splits with nothing to attend carry lse_s = -inf and weigh nothing; a row with
// nothing at all gives out 0 and lse +inf.
// At small batches the combine is pure latency (a few CTAs, each reading up to
// kMaxSplits partials from L2), so no load waits on another: thread s reads split
// s's lse, the block reduces them once, and the partial rows are read
// kSplitsInFlight at a time.
// ---------------------------------------------------------------------------
namespace combine {
constexpr int kWarps = cfg::kCombineThreads / 32;
constexpr int kDimsPerThread = cfg::kDV / cfg::kCombineThreads;
constexpr int kSplitsInFlight = 8;  // partial rows each thread has loads in flight for
static_assert(kDimsPerThread == 4, "combine: each thread reads one 16-byte group of dims per split");
static_assert(cfg::kMaxSplits <= cfg::kCombineThreads, "combine: one thread per split's lse");
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
    __shared__ float split_weight[cfg::kMaxSplits];
    __shared__ float warp_slots[combine::kWarps];
    const int row = blockIdx.x, h = blockIdx.y;
    const int b = row / p.s_q, s = row % p.s_q;
    const i64 rows = (i64)p.batch * p.s_q;
    const int num_splits = p.num_splits;
    wait_for_prerequisite_grid();  // the partials: launched early, the combine may start before they exist

    // Every split's lse at once: thread t holds split t's.
    const int t = threadIdx.x;
    const float lse_t = t < num_splits ? p.partial_lse[(t * rows + row) * cfg::kHeads + h] : neg_inf();
    const float max_lse = combine_block_reduce<true>(lse_t, warp_slots);
    const bool empty = max_lse == neg_inf();
    const float term = empty || t >= num_splits ? 0.0f : fast_exp2((lse_t - max_lse) * kLog2e);
    const float sum = combine_block_reduce<false>(term, warp_slots);
    const float lse = empty ? pos_inf() : max_lse + fast_log2(sum) * kLn2;
    if (t < num_splits) split_weight[t] = empty ? 0.0f : fast_exp2((lse_t - lse) * kLog2e);
    __syncthreads();

    float acc[combine::kDimsPerThread] = {0.0f, 0.0f, 0.0f, 0.0f};
    const F32x4* column = reinterpret_cast<const F32x4*>(p.partial_out + ((i64)row * cfg::kHeads + h) * cfg::kDV) + t;
    const i64 split_stride4 = rows * cfg::kHeads * cfg::kDV / 4;  // one split's partials, in F32x4
    for (int sp0 = 0; sp0 < num_splits; sp0 += combine::kSplitsInFlight) {
        F32x4 v[combine::kSplitsInFlight];
        float w[combine::kSplitsInFlight];
#pragma unroll
        for (int j = 0; j < combine::kSplitsInFlight; j++) {
            const int sp = sp0 + j;
            w[j] = sp < num_splits ? split_weight[sp] : 0.0f;
            // A split that weighs nothing may not have written its row: not read.
            v[j] = w[j] != 0.0f ? column[sp * split_stride4] : F32x4{0.0f, 0.0f, 0.0f, 0.0f};
        }
#pragma unroll
        for (int j = 0; j < combine::kSplitsInFlight; j++) {
            acc[0] += w[j] * v[j].x;
            acc[1] += w[j] * v[j].y;
            acc[2] += w[j] * v[j].z;
            acc[3] += w[j] * v[j].w;
        }
    }
    float scale = 1.0f;
    if (cfg::kHasSink && !empty) scale = sink_factor(p.attn_sink[h], lse);
    u16* dst = p.out + b * p.out_stride_b + s * p.out_stride_s + h * p.out_stride_h;
    U32x2 packed = {pack_bf16x2(acc[0] * scale, acc[1] * scale), pack_bf16x2(acc[2] * scale, acc[3] * scale)};
    *reinterpret_cast<U32x2*>(dst + 4 * t) = packed;
    if (p.lse && t == 0) p.lse[b * p.lse_stride_b + s * p.lse_stride_s + h * p.lse_stride_h] = lse;
}
