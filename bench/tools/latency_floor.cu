// latency_floor.cu: the floor under the short decode rows (b 64-128, topk 128, and the
// split rows' two launches), timed by BENCH.md's GPU-time protocol (10 calls captured
// in a CUDA graph, 20 replays, the median replay / 10): what a call costs that does
// only the unavoidable part, its launch, a load of its indices, the gather of its
// candidates' rows that depends on them, and a store. No Q, no arithmetic, no shared
// memory. Standalone (runtime API), not part of the library; built and run by
// tools/device-run.sh's `floor` step:
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o latency_floor bench/tools/latency_floor.cu
// Prints one line per shape: µs per call.
#include <algorithm>
#include <vector>
#include "bench_cuda.cuh"

constexpr int kTopk = 128;                                 // candidates per row (the short rows')
constexpr int kLanesPerRow = 4;                            // as the kernels gather
constexpr int kGatherThreads = kTopk * kLanesPerRow;       // every row of a CTA in flight at once

// Random token positions, each in its own row's sequence (a b x seqlen-token cache).
__global__ void make_indices(int* idx, int b, int seqlen, int topk)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= (long)b * topk) return;
    idx[i] = (int)(i / topk) * seqlen + (int)(hash32((unsigned)i * 2654435761u + 7u) % (unsigned)seqlen);
}

__global__ void fill(uint4* p, long n)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        p[i] = make_uint4(hash32((unsigned)i), hash32((unsigned)i + 1u), hash32((unsigned)i + 2u), hash32((unsigned)i + 3u));
}

__global__ void empty_kernel(unsigned* out)
{
    if (out == nullptr) __trap();  // never: keeps the launch from being optimized to nothing
}

// One CTA per row, 4 lanes per candidate: every lane loads its candidate's index, then
// all its chunks of that row at once, so a CTA pays one index round trip and one row
// round trip; one word per candidate stored. (The version first timed, e7a4b57, had
// 128 threads walk the 128 rows in four passes, an index load and a row's loads each:
// a chain of eight round trips, not a floor; bench/NOTES.md.)
__global__ void gather_rows(const unsigned char* cache, const int* idx, unsigned* out)
{
    const int row = blockIdx.x, c = threadIdx.x / kLanesPerRow;
    const int slot = idx[(long)row * kTopk + c];
    const uint4* p = reinterpret_cast<const uint4*>(cache + (long)slot * kRowBytes);
    constexpr int kLoads = (kChunks + kLanesPerRow - 1) / kLanesPerRow;
    uint4 v[kLoads];
#pragma unroll
    for (int k = 0; k < kLoads; k++) {
        const int chunk = kLanesPerRow * k + threadIdx.x % kLanesPerRow;
        v[k] = chunk < kChunks ? __ldg(p + chunk) : make_uint4(0, 0, 0, 0);
    }
    unsigned x = 0;
#pragma unroll
    for (int k = 0; k < kLoads; k++) x ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
    out[(long)row * kTopk + c] = x;
}

// The median over 20 replays of a graph of 10 calls, per call (BENCH.md's GPU time).
template <class Call>
static float graph_us(cudaStream_t s, Call call)
{
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < 10; i++) call();
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    CHECK(cudaGraphLaunch(ge, s));  // warm-up
    CHECK(cudaStreamSynchronize(s));
    std::vector<float> t;
    for (int r = 0; r < 20; r++) {
        CHECK(cudaEventRecord(a, s));
        CHECK(cudaGraphLaunch(ge, s));
        CHECK(cudaEventRecord(b, s));
        CHECK(cudaEventSynchronize(b));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1000.0f / 10.0f);
    }
    std::sort(t.begin(), t.end());
    CHECK(cudaGraphExecDestroy(ge));
    CHECK(cudaGraphDestroy(g));
    return t[t.size() / 2];
}

// A launch on `s`, as a programmatic dependent of the kernel before it when `dependent`
// (the way the library launches its combine kernel).
template <class... Args>
static void launch(cudaStream_t s, void (*k)(Args...), int ctas, int threads, bool dependent, Args... args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(ctas);
    cfg.blockDim = dim3(threads);
    cfg.stream = s;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = dependent ? 1 : 0;
    CHECK(cudaLaunchKernelEx(&cfg, k, args...));
}

int main()
{
    const int seqlen = 8192, topk = kTopk, max_b = 128;
    const long tokens = (long)max_b * seqlen;  // a 344 MB cache: far larger than the 50 MB L2
    unsigned char* cache;
    int* idx;
    unsigned* out;
    CHECK(cudaMalloc(&cache, tokens * kRowBytes));
    CHECK(cudaMalloc(&idx, sizeof(int) * max_b * topk));
    CHECK(cudaMalloc(&out, sizeof(unsigned) * max_b * topk));
    fill<<<1024, 256>>>(reinterpret_cast<uint4*>(cache), tokens * kRowBytes / 16);
    make_indices<<<(max_b * topk + 255) / 256, 256>>>(idx, max_b, seqlen, topk);
    CHECK(cudaDeviceSynchronize());
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    printf("latency floor, µs per call (graph of 10, median of 20 replays)\n");
    for (int ctas : {64, 128})
        printf("  empty kernel, %d CTAs: %.2f\n", ctas,
               graph_us(s, [&] { launch(s, empty_kernel, ctas, 128, false, out); }));
    printf("  empty kernel + programmatic dependent empty kernel (a split call's two launches): %.2f\n",
           graph_us(s, [&] {
               launch(s, empty_kernel, 128, 128, false, out);
               launch(s, empty_kernel, 128, 128, true, out);
           }));
    for (int b : {64, 128}) {
        // the same call 10 times, as the protocol's graph replays one call: its 5-11 MB of
        // rows come from HBM in the first and from L2 after, as in `mlajit bench`
        const float us = graph_us(s, [&] {
            launch(s, gather_rows, b, kGatherThreads, false, (const unsigned char*)cache, (const int*)idx, out);
        });
        printf("  indices, then %d rows of %d bytes per CTA, %d CTAs (b %d topk %d): %.2f (%.0f GB/s)\n", topk,
               kRowBytes, b, b, topk, us, (double)b * topk * kRowBytes / us / 1e3);
    }
    CHECK(cudaFree(cache));
    CHECK(cudaFree(idx));
    CHECK(cudaFree(out));
    return 0;
}
