import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """x * sigmoid(x) * scale + bias in one fused kernel (kernels/swish_scale_bias.cu)."""

    def __init__(self, features, scale):
        super().__init__()
        self.scale = scale
        # Same name and shape as Model.bias; the evaluator loads Model's values into it.
        self.bias = nn.Parameter(torch.zeros(features))
        # Launch variant of the kernel (see the .cu): 0 = float4 when possible, 1 = scalar.
        self.kernel_config = 0

    def forward(self, x):
        return cuda_extension.swish_scale_bias(x, self.bias, float(self.scale), self.kernel_config)
