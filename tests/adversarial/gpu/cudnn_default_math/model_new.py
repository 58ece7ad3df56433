import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """3x3 convolution + ReLU: cuDNN at its default math mode (TF32 allowed) and a bias + ReLU
    kernel: strict precision must fail it at verify."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        # The same submodule name as Model, so the state_dict keys (conv.weight, conv.bias)
        # match; the evaluator loads Model's values into it.
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.pad = kernel_size // 2
        # 0 = IMPLICIT_PRECOMP_GEMM, 1 = IMPLICIT_GEMM (kernels/conv2d_relu.cu)
        self.kernel_config = 0

    def forward(self, x):
        return cuda_extension.conv2d_relu(x, self.conv.weight, self.conv.bias, self.pad,
                                          self.kernel_config)
