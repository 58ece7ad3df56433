import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """nn.Linear + exact GELU: a cuBLAS SGEMM and a bias + GELU kernel (kernels/linear_gelu.cu)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        # The same submodule name as Model, so the state_dict keys (linear.weight, linear.bias)
        # match; the evaluator loads Model's values into it.
        self.linear = nn.Linear(in_features, out_features)
        self.kernel_config = 0

    def forward(self, x):
        return cuda_extension.linear_gelu(x, self.linear.weight, self.linear.bias,
                                          self.kernel_config)
