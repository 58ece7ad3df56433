import torch
import torch.nn as nn


class Model(nn.Module):
    """x * sigmoid(x) * scale + bias: a bench CPU-mode fixture task."""

    def __init__(self, features, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(features) * 0.1)

    def forward(self, x):
        return x * torch.sigmoid(x) * self.scale + self.bias


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return [256, 1.5]
