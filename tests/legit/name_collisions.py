import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float silu(float x) { return x * sigmoidf(x); }
__device__ __forceinline__ float relu(float x) { return x > 0.0f ? x : 0.0f; }
__device__ __forceinline__ float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678f)); }

struct epilogue {
    float scale;
    float relu;   // 0: no clamp (a field named like an op)
};

__global__ void swish_kernel(const float* x, const float* bias, float* out, int n, int cols,
                             epilogue ep) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = silu(x[i]) * ep.scale + bias[i % cols];
        out[i] = ep.relu > 0.0f ? relu(v) : v;
    }
}

torch::Tensor swish_scale_bias(torch::Tensor x, torch::Tensor bias, double scale) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "x must be a contiguous CUDA tensor");
    auto out = torch::empty_like(x);
    int n = x.numel();
    int cols = bias.numel();
    epilogue ep;
    ep.scale = (float)scale;
    ep.relu = 0.0f;
    const int block = 256;
    int system = (n + block - 1) / block;   // a variable named like a libc call
    cudaEvent_t fork, join;                 // and two more
    cudaEventCreate(&fork);
    cudaEventCreate(&join);
    cudaEventRecord(fork);
    swish_kernel<<<system, block>>>(x.data_ptr<float>(), bias.data_ptr<float>(),
                                    out.data_ptr<float>(), n, cols, ep);
    cudaEventRecord(join);
    cudaEventDestroy(fork);
    cudaEventDestroy(join);
    return out;
}
"""

cpp_src = "torch::Tensor swish_scale_bias(torch::Tensor x, torch::Tensor bias, double scale);"

swish = load_inline(name="swish_collisions", cpp_sources=cpp_src, cuda_sources=cuda_src,
                    functions=["swish_scale_bias"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(features) * 0.1)
        self.swish = swish

    def forward(self, x):
        return self.swish.swish_scale_bias(x, self.bias, self.scale)
