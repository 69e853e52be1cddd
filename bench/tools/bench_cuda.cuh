// bench_cuda.cuh: what the standalone bench tools (gather_ceiling.cu, latency_floor.cu)
// share: the CUDA error check, the hash their random indices come from, and the row
// they gather.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

// V3.2's cache row (src/codegen/models.c's descriptor: 512 fp8 codes, 4 fp32 scales,
// 64 bf16 RoPE dims), in 16-byte chunks. The tools are standalone, so they restate it.
constexpr int kRowBytes = 656, kChunks = kRowBytes / 16;

__device__ inline unsigned hash32(unsigned x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}
