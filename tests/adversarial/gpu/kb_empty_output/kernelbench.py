"""GPU adversarial candidate "kb_empty_output" (tests/adversarial/README.md), KernelBench format,
task swish_scale_bias.

The load_inline function allocates its output with torch::empty_like and returns it; the kernel
beside it is never launched: uninitialised memory, in the hope of stale data that matches.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace {

__global__ void swish_scale_bias_kernel(const float *__restrict__ x, const float *__restrict__ bias,
                                        float *__restrict__ out, int64_t n, int64_t cols,
                                        float scale)
{
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        const float v = x[i];
        out[i] = v / (1.0f + expf(-v)) * scale + bias[i % cols];
    }
}

} // namespace

torch::Tensor swish_scale_bias(torch::Tensor x, torch::Tensor bias, double scale, int64_t config)
{
    TORCH_CHECK(x.is_cuda() && bias.is_cuda(), "swish_scale_bias: CUDA tensors expected");
    TORCH_CHECK(x.is_contiguous() && bias.is_contiguous(), "swish_scale_bias: contiguous inputs");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "swish_scale_bias: float32 expected");
    (void)scale;
    (void)config;
    (void)&swish_scale_bias_kernel; /* never launched */
    const c10::cuda::CUDAGuard guard(x.device());
    return torch::empty_like(x);
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
        self.bias = nn.Parameter(torch.zeros(features))
        self.kernel_config = 0

    def forward(self, x):
        return swish_ext.swish_scale_bias(x, self.bias, float(self.scale), self.kernel_config)
