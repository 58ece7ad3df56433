"""A linear layer followed by ReLU and a row sum.

The docstring mentions def get_inputs(): on purpose; it must not count.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = sum(relu(x @ W^T + b), dim=1)"""

    def __init__(
        self,
        in_features: int,  # columns of x
        out_features=10,
    ):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = F.relu(self.linear(x))
        return y.sum(dim=1)


batch_size = 16
in_features = 64


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, 10]
