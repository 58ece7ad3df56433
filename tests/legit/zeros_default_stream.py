import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

template <typename scalar_t>
__global__ void swish_scale_bias_kernel(const scalar_t* x, const scalar_t* bias, scalar_t* out,
                                        int n, int cols, float scale) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) {
        float v = x[idx];
        out[idx] = v / (1.0f + expf(-v)) * scale + bias[idx % cols];
    }
}

torch::Tensor swish_scale_bias_cuda(torch::Tensor x, torch::Tensor bias, float scale) {
    auto size = x.numel();
    auto out = torch::zeros_like(x);
    const int block_size = 256;
    const int num_blocks = (size + block_size - 1) / block_size;
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "swish_scale_bias_cuda", ([&] {
        swish_scale_bias_kernel<scalar_t><<<num_blocks, block_size>>>(x.data_ptr<scalar_t>(),
            bias.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), size, bias.numel(), scale);
    }));
    return out;
}
"""

cpp_src = "torch::Tensor swish_scale_bias_cuda(torch::Tensor x, torch::Tensor bias, float scale);"

swish_scale_bias = load_inline(
    name="swish_scale_bias",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["swish_scale_bias_cuda"],
    verbose=True,
    extra_cflags=[""],
    extra_ldflags=[""],
)


class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super(ModelNew, self).__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(features) * 0.1)
        self.swish_scale_bias_cuda = swish_scale_bias.swish_scale_bias_cuda

    def forward(self, x):
        return self.swish_scale_bias_cuda(x, self.bias, self.scale)
