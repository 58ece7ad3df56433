// GPU candidate "legit_inplace_softmax" (tests/adversarial/README.md), task softmax_last_dim.
//
// Legitimate: two kernels, the second working in place on the candidate's own output buffer.
// The first writes exp(x - rowmax) into out; the second sums each row of out and scales it by
// 1 / sum in place. Slower than one pass (the output is read back), but every element is
// computed from this call's input, and the input is never written.
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

/* out[r][c] = exp(x[r][c] - max_c x[r][c]); a row holding +inf or NaN gives NaN, as torch. */
__global__ void __launch_bounds__(kThreads)
    exp_shifted(const float *__restrict__ x, float *__restrict__ out, int64_t rows, int64_t cols)
{
    __shared__ float scratch[kThreads / kWarp];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *row = x + r * cols;
        float m = -INFINITY;
        for (int64_t c = threadIdx.x; c < cols; c += kThreads)
            m = fmaxf(m, row[c]);
        m = block_reduce(m, MaxOp(), -INFINITY, scratch);
        for (int64_t c = threadIdx.x; c < cols; c += kThreads)
            out[r * cols + c] = expf(row[c] - m);
    }
}

/* out[r][c] /= sum_c out[r][c], in place */
__global__ void __launch_bounds__(kThreads)
    normalise_rows(float *__restrict__ out, int64_t rows, int64_t cols)
{
    __shared__ float scratch[kThreads / kWarp];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        float *row = out + r * cols;
        float s = 0.0f;
        for (int64_t c = threadIdx.x; c < cols; c += kThreads)
            s += row[c];
        s = block_reduce(s, SumOp(), 0.0f, scratch);
        const float inv = 1.0f / s;
        for (int64_t c = threadIdx.x; c < cols; c += kThreads)
            row[c] *= inv;
    }
}

} // namespace

extern "C" cudaError_t softmax_last_dim_launch(const float *x, float *out, int64_t rows,
                                               int64_t cols, int config, cudaStream_t stream)
{
    if (config < 0 || config > 1 || rows < 0 || cols < 0)
        return cudaErrorInvalidValue;
    if (rows == 0 || cols == 0)
        return cudaSuccess;
    const unsigned grid = static_cast<unsigned>(rows < 65535 ? rows : 65535);
    exp_shifted<<<grid, kThreads, 0, stream>>>(x, out, rows, cols);
    normalise_rows<<<grid, kThreads, 0, stream>>>(out, rows, cols);
    return cudaGetLastError();
}
