"""KernelBench-format candidate for examples/tasks/swish_scale_bias.py.

x * sigmoid(x) * scale + bias in one fused kernel: the kernels of
examples/solutions/swish_scale_bias/kernels/swish_scale_bias.cu, built with load_inline as a
KernelBench candidate would. Evaluate it with

    cuda-agent eval --task examples/tasks/swish_scale_bias.py \
        --kernelbench-file examples/kernelbench/swish_scale_bias.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>

#include <cstdint>

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

// The function load_inline exposes: checks, allocation and the launch on the current stream.
torch::Tensor swish_scale_bias(torch::Tensor x, torch::Tensor bias, double scale, int64_t config)
{
    TORCH_CHECK(x.is_cuda() && bias.is_cuda(), "swish_scale_bias: x and bias must be CUDA tensors");
    TORCH_CHECK(x.is_contiguous() && bias.is_contiguous(),
                "swish_scale_bias: inputs must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && bias.scalar_type() == torch::kFloat32,
                "swish_scale_bias: inputs must be float32");
    TORCH_CHECK(x.dim() >= 1, "swish_scale_bias: x must have at least one dim");
    TORCH_CHECK(bias.dim() == 1 && bias.size(0) == x.size(-1),
                "swish_scale_bias: bias must have shape [", x.size(-1), "], got ", bias.sizes());
    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty_like(x);
    const int64_t cols = x.size(-1);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    const cudaError_t err = swish_scale_bias_launch(
        x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), rows, cols,
        static_cast<float>(scale), static_cast<int>(config), at::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == cudaSuccess, "swish_scale_bias_launch: ", cudaGetErrorString(err));
    return out;
}
"""

cpp_source = (
    "torch::Tensor swish_scale_bias(torch::Tensor x, torch::Tensor bias, double scale, "
    "int64_t config);"
)

swish_ext = load_inline(
    name="swish_scale_bias_ext",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["swish_scale_bias"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.scale = scale
        # Same name and shape as Model.bias; the evaluator loads Model's values into it.
        self.bias = nn.Parameter(torch.zeros(features))
        # Launch variant of the kernel: 0 = float4 when possible, 1 = scalar.
        self.kernel_config = 0

    def forward(self, x):
        return swish_ext.swish_scale_bias(x, self.bias, float(self.scale), self.kernel_config)
