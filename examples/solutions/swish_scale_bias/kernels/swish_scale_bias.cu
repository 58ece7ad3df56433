/*
 * swish_scale_bias.cu: out[r][c] = x[r][c] * sigmoid(x[r][c]) * scale + bias[c], in one pass.
 *
 * The operation is memory-bound (one read and one write per element; the bias stays in L1/L2),
 * so the kernel is about moving bytes: one launch instead of eager's four, and 16-byte loads
 * and stores where possible. The float4 path needs cols % 4 == 0 (a float4 then never
 * straddles two rows, and the bias float4 at column c is aligned) and 16-byte-aligned
 * pointers; anything else takes the scalar path. Indices are 32-bit when the tensor is small
 * enough, because a 64-bit division by cols costs several times the instructions of a 32-bit
 * one.
 *
 * config: 0 = float4 when possible, 256 threads (default); 1 = scalar, 256 threads;
 *         2 = float4 when possible, 512 threads; 3 = float4 when possible, 128 threads.
 */
#include <cuda_runtime.h>

#include <cstdint>

namespace {

__device__ __forceinline__ float swish_scale_bias_one(float v, float scale, float b)
{
    /* For v far below 0, expf(-v) is inf and v / inf is -0: the limit, no NaN. */
    return v / (1.0f + expf(-v)) * scale + b;
}

template <typename Index>
__global__ void swish_scale_bias_vec4(const float4 *__restrict__ x,
                                      const float4 *__restrict__ bias, float4 *__restrict__ out,
                                      Index nvec, Index cols_vec, float scale)
{
    const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
    for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < nvec;
         i += stride) {
        const float4 v = x[i];
        const float4 b = bias[i % cols_vec];
        float4 r;
        r.x = swish_scale_bias_one(v.x, scale, b.x);
        r.y = swish_scale_bias_one(v.y, scale, b.y);
        r.z = swish_scale_bias_one(v.z, scale, b.z);
        r.w = swish_scale_bias_one(v.w, scale, b.w);
        out[i] = r;
    }
}

template <typename Index>
__global__ void swish_scale_bias_scalar(const float *__restrict__ x,
                                        const float *__restrict__ bias, float *__restrict__ out,
                                        Index n, Index cols, float scale)
{
    const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
    for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride)
        out[i] = swish_scale_bias_one(x[i], scale, bias[i % cols]);
}

bool aligned16(const void *p)
{
    return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

/* One thread per work item, capped at the grid limit; the kernels' stride loops cover the rest. */
unsigned int grid_for(int64_t items, int threads)
{
    const int64_t blocks = (items + threads - 1) / threads;
    return static_cast<unsigned int>(blocks < 0x7fffffff ? blocks : 0x7fffffff);
}

/* With items <= INT32_MAX, i + stride stays below 2^32 in the kernels' loops. */
constexpr int64_t kMax32 = 0x7fffffff;

struct Variant {
    int threads;
    bool vec;
};

/* Indexed by config; see the top of the file. */
constexpr Variant kVariants[] = {{256, true}, {256, false}, {512, true}, {128, true}};

} // namespace

extern "C" cudaError_t swish_scale_bias_launch(const float *x, const float *bias, float *out,
                                               int64_t rows, int64_t cols, float scale,
                                               int config, cudaStream_t stream)
{
    if (config < 0 || config >= static_cast<int>(sizeof kVariants / sizeof kVariants[0]))
        return cudaErrorInvalidValue;
    const int threads = kVariants[config].threads;
    const bool want_vec = kVariants[config].vec;
    if (rows < 0 || cols < 0)
        return cudaErrorInvalidValue;
    if (rows == 0 || cols == 0)
        return cudaSuccess;
    if (rows > INT64_MAX / cols)
        return cudaErrorInvalidValue;
    if (x == nullptr || bias == nullptr || out == nullptr)
        return cudaErrorInvalidValue;

    const int64_t n = rows * cols;
    if (want_vec && cols % 4 == 0 && aligned16(x) && aligned16(bias) && aligned16(out)) {
        const int64_t nvec = n / 4;
        const auto *x4 = reinterpret_cast<const float4 *>(x);
        const auto *b4 = reinterpret_cast<const float4 *>(bias);
        auto *o4 = reinterpret_cast<float4 *>(out);
        const unsigned int grid = grid_for(nvec, threads);
        if (nvec <= kMax32)
            swish_scale_bias_vec4<uint32_t><<<grid, threads, 0, stream>>>(
                x4, b4, o4, static_cast<uint32_t>(nvec), static_cast<uint32_t>(cols / 4), scale);
        else
            swish_scale_bias_vec4<uint64_t><<<grid, threads, 0, stream>>>(
                x4, b4, o4, static_cast<uint64_t>(nvec), static_cast<uint64_t>(cols / 4), scale);
    } else {
        const unsigned int grid = grid_for(n, threads);
        if (n <= kMax32)
            swish_scale_bias_scalar<uint32_t><<<grid, threads, 0, stream>>>(
                x, bias, out, static_cast<uint32_t>(n), static_cast<uint32_t>(cols), scale);
        else
            swish_scale_bias_scalar<uint64_t><<<grid, threads, 0, stream>>>(
                x, bias, out, static_cast<uint64_t>(n), static_cast<uint64_t>(cols), scale);
    }
    return cudaGetLastError();
}
