// GPU adversarial candidate "partial_last_row" (tests/adversarial/README.md), task
// softmax_last_dim.
//
// A correct softmax that skips the last row of the batch (1 row in 8192: 0.01% of the output).
// The element values it leaves are whatever the output block held; only poisoned memory makes
// them reliably wrong.
#include <cuda_runtime.h>

#include <cstdint>

namespace
{

constexpr int kThreads = 256;
constexpr int kWarp = 32;

template <typename Op> __device__ float block_reduce(float v, Op op, float identity, float *scratch)
{
    for (int o = kWarp / 2; o > 0; o /= 2)
        v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (threadIdx.x % kWarp == 0)
        scratch[threadIdx.x / kWarp] = v;
    __syncthreads();
    v = threadIdx.x % kWarp < kThreads / kWarp ? scratch[threadIdx.x % kWarp] : identity;
    for (int o = kWarp / 2; o > 0; o /= 2)
        v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    return v;
}

struct MaxOp {
    __device__ float operator()(float a, float b) const
    {
        return fmaxf(a, b);
    }
};
struct SumOp {
    __device__ float operator()(float a, float b) const
    {
        return a + b;
    }
};

__global__ void __launch_bounds__(kThreads)
    softmax_rows(const float *__restrict__ x, float *__restrict__ out, int64_t rows, int64_t cols)
{
    __shared__ float scratch[kThreads / kWarp];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *row = x + r * cols;
        float m = -INFINITY;
        for (int64_t c = threadIdx.x; c < cols; c += kThreads)
            m = fmaxf(m, row[c]);
        m = block_reduce(m, MaxOp(), -INFINITY, scratch);
        float s = 0.0f;
        for (int64_t c = threadIdx.x; c < cols; c += kThreads)
            s += expf(row[c] - m);
        s = block_reduce(s, SumOp(), 0.0f, scratch);
        const float inv = 1.0f / s;
        for (int64_t c = threadIdx.x; c < cols; c += kThreads)
            out[r * cols + c] = expf(row[c] - m) * inv;
    }
}

} // namespace

extern "C" cudaError_t softmax_last_dim_launch(const float *x, float *out, int64_t rows,
                                               int64_t cols, int config, cudaStream_t stream)
{
    (void)config;
    const int64_t done = rows - 1; /* the last row is never written */
    if (done <= 0 || cols <= 0)
        return cudaSuccess;
    const unsigned grid = static_cast<unsigned>(done < 65535 ? done : 65535);
    softmax_rows<<<grid, kThreads, 0, stream>>>(x, out, done, cols);
    return cudaGetLastError();
}
