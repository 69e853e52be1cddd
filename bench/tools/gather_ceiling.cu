// gather_ceiling.cu: how fast can an H200 gather random 656-byte KV rows?
// The ceiling for the memory-bound decode rows (h_q <= 32): the kernels read
// b * topk rows of one token each, scattered over a b * seqlen-token paged cache,
// which is not the 4.25 TB/s of a streaming copy. Standalone (runtime API), not
// part of the library; built and run by tools/device-run.sh's `gather` step:
//   nvcc -O3 -arch=sm_90a -o gather_ceiling bench/tools/gather_ceiling.cu
// Prints GB/s for the BENCH.md shape (b 128, seqlen 32768, topk 2048, page 64) and a
// streaming read of the same byte count, for several CTAs-per-SM / bytes-in-flight.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

constexpr int kRowBytes = 656, kChunks = kRowBytes / 16, kPage = 64;

__device__ unsigned hash32(unsigned x) { x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16; return x; }

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

int main()
{
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
        for (int ctas_per_sm : {1, 2, 4, 8}) {
            if (threads * ctas_per_sm > 2048) continue;
            int grid = sms * ctas_per_sm;
            float us1 = time_us([&] { gather<1><<<grid, threads>>>(cache, idx, n_rows, sink); });
            float us4 = time_us([&] { gather<4><<<grid, threads>>>(cache, idx, n_rows, sink); });
            printf("gather  threads/SM %5d  rows in flight/warp 1: %7.1f us %6.0f GB/s   4: %7.1f us %6.0f GB/s\n",
                   threads * ctas_per_sm, us1, bytes / us1 / 1e3, us4, bytes / us4 / 1e3);
        }
    }
    long n16 = (long)bytes / 16;
    float us = time_us([&] { stream<<<sms * 8, 256>>>(reinterpret_cast<const uint4*>(cache) + 12345 * 41, n16, sink); });
    printf("stream  same bytes, contiguous: %7.1f us %6.0f GB/s\n", us, bytes / us / 1e3);
    return 0;
}
