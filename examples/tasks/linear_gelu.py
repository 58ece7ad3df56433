import torch
import torch.nn as nn


class Model(nn.Module):
    """GEMM with an epilogue: nn.Linear (weight and bias) followed by the exact (erf) GELU."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.nn.functional.gelu(self.linear(x))


batch_size = 512
in_features = 4096
out_features = 4096


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
