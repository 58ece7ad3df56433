/*
 * Legitimate CUDA that looks dangerous to a substring search: banned names in comments,
 * strings, raw strings and character literals, digit separators, digraphs, continued comments,
 * device-only inline PTX, cooperative groups, cub and libcu++.
 * fork(); system("rm -rf /"); cudaMalloc(&p, 1); dlopen("x", 0); std::thread t;
 */
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <cub/block/block_reduce.cuh>
#include <cuda/std/cstdint>
#include <cstdint>
#include <cstdio>

namespace cg = cooperative_groups;

// a continued comment hides the next line from the compiler too: \
fork(); popen("sh", "r");

namespace {

constexpr int64_t kBig = 1'000'000;
constexpr char kQuote = '\'';
const char *const kDoc = "cudaStreamCreate(&s); getenv(\"HOME\"); #include <fstream>";
const char *const kRaw = R"doc(
    socket(AF_INET, SOCK_STREAM, 0); std::thread worker; "quoted" )"  still inside
)doc";
const char *const kRaw2 = LR"(fopen("/etc/passwd", "r"))" "tail";

__device__ __forceinline__ unsigned lane_id()
{
    unsigned id;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(id));
    return id;
}

struct SumOp {
    __device__ float operator()(float a, float b) const { return a + b; }
};

template <int kThreads>
__global__ void __launch_bounds__(kThreads) block_sum(const float *__restrict__ x, float *out,
                                                      int64_t n)
<%
    using BlockReduce = cub::BlockReduce<float, kThreads>;
    __shared__ typename BlockReduce::TempStorage temp;
    cg::thread_block block = cg::this_thread_block();
    float v = 0.0f;
    for (int64_t i = block.thread_rank(); i < n; i += kThreads)
        v += x<:i:>;
    v = BlockReduce(temp).Reduce(v, SumOp());
    if (threadIdx.x == 0) {
        asm("// device-only inline PTX is fine");
        printf("lane %u sum %f\n", lane_id(), v);
        *out = v;
    }
%>

} // namespace

extern "C" cudaError_t block_sum_launch(const float *x, float *out, int64_t n, int config,
                                        cudaStream_t stream)
{
    if (config != 0 || n < 0 || n > kBig * kBig)
        return cudaErrorInvalidValue;
    block_sum<256><<<1, 256, 0, stream>>>(x, out, n);
    cudaError_t err = cudaMemsetAsync(out, 0, 0, stream);
    if (err != cudaSuccess)
        return err;
    return cudaGetLastError();
}
