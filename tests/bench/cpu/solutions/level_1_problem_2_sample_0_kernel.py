"""CPU-mode KernelBench-format candidate (host code in cuda_sources) for the bench tests."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <math.h>
#include <stdint.h>

extern "C" void swish_cpu(const float *x, const float *bias, float *out, int64_t rows,
                          int64_t cols, float scale)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = x[r * cols + c];
            out[r * cols + c] = v / (1.0f + expf(-v)) * scale + bias[c];
        }
}
"""

cpp_source = r"""
extern "C" void swish_cpu(const float *x, const float *bias, float *out, int64_t rows,
                          int64_t cols, float scale);

torch::Tensor swish(torch::Tensor x, torch::Tensor bias, double scale)
{
    TORCH_CHECK(x.is_contiguous() && bias.is_contiguous(), "contiguous inputs expected");
    TORCH_CHECK(x.dim() == 2 && bias.dim() == 1 && bias.size(0) == x.size(1), "bad shapes");
    torch::Tensor out = torch::empty_like(x);
    swish_cpu(x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), x.size(0),
              x.size(1), static_cast<float>(scale));
    return out;
}
"""

ext = load_inline(name="bench_swish", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["swish"])


class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.zeros(features))

    def forward(self, x):
        return ext.swish(x, self.bias, float(self.scale))
