// ---------------------------------------------------------------------------
// combine.cu: merge split-KV partials. One CTA per (batch row x query token,
// head), blockIdx = (row, head); each thread owns kDV / kCombineThreads value dims.
//   lse = ln sum_s exp(lse_s);  out = sum_s exp(lse_s - lse) * O_s;  then the sink.
// Splits with nothing to attend carry lse_s = -inf and weigh nothing; a row with
// nothing at all gives out 0 and lse +inf.
// ---------------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(cfg::kCombineThreads) mlajit_decode_combine(const DecodeParams p)
{
    constexpr int kDimsPerThread = cfg::kDV / cfg::kCombineThreads;
    static_assert(kDimsPerThread % 4 == 0, "combine reads 4 dims at a time");
    const int row = blockIdx.x, h = blockIdx.y;
    const int b = row / p.s_q, s = row % p.s_q;
    const i64 rows = (i64)p.batch * p.s_q;
    wait_for_prerequisite_grid();  // the partials: launched early, the combine may start before they exist

    float max_lse = neg_inf();
    for (int sp = 0; sp < p.num_splits; sp++)
        max_lse = fmaxf(max_lse, p.partial_lse[(sp * rows + row) * cfg::kHeads + h]);
    const bool empty = max_lse == neg_inf();
    float sum = 0.0f;
    if (!empty)
        for (int sp = 0; sp < p.num_splits; sp++)
            sum += fast_exp2((p.partial_lse[(sp * rows + row) * cfg::kHeads + h] - max_lse) * kLog2e);
    const float lse = empty ? pos_inf() : max_lse + fast_log2(sum) * kLn2;

    float acc[kDimsPerThread];
#pragma unroll
    for (int i = 0; i < kDimsPerThread; i++) acc[i] = 0.0f;
    if (!empty) {
        for (int sp = 0; sp < p.num_splits; sp++) {
            i64 prow = (sp * rows + row) * cfg::kHeads + h;
            float w = fast_exp2((p.partial_lse[prow] - lse) * kLog2e);
            if (w == 0.0f) continue;
            const F32x4* src = reinterpret_cast<const F32x4*>(p.partial_out + prow * cfg::kDV) + threadIdx.x;
#pragma unroll
            for (int i = 0; i < kDimsPerThread / 4; i++) {
                F32x4 v = src[i * cfg::kCombineThreads];
                acc[4 * i] += w * v.x;
                acc[4 * i + 1] += w * v.y;
                acc[4 * i + 2] += w * v.z;
                acc[4 * i + 3] += w * v.w;
            }
        }
    }
    float scale = 1.0f;
    if (cfg::kHasSink && !empty) scale = sink_factor(p.attn_sink[h], lse);
    u16* dst = p.out + b * p.out_stride_b + s * p.out_stride_s + h * p.out_stride_h;
#pragma unroll
    for (int i = 0; i < kDimsPerThread / 4; i++) {
        int d = (i * cfg::kCombineThreads + threadIdx.x) * 4;
        U32x2 v = {pack_bf16x2(acc[4 * i] * scale, acc[4 * i + 1] * scale),
                   pack_bf16x2(acc[4 * i + 2] * scale, acc[4 * i + 3] * scale)};
        *reinterpret_cast<U32x2*>(dst + d) = v;
    }
    if (p.lse && threadIdx.x == 0) p.lse[b * p.lse_stride_b + s * p.lse_stride_s + h * p.lse_stride_h] = lse;
}
