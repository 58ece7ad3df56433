"""Legitimate: nn submodules mirror Model's state_dict keys; forward passes their parameters."""
import torch
from torch import nn

import cuda_extension as ext


class Holder(nn.Module):
    """Only holds parameters, to give the state_dict Model's nested key names."""

    def __init__(self, n):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(n))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super(ModelNew, self).__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.conv = nn.Conv2d(3, 8, kernel_size=3, padding=1)
        self.post = Holder(out_features)
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])
        nn.init.zeros_(self.linear.bias)

    def forward(self, x, y=None):
        w = self.linear.weight
        h = ext.linear_gelu(x, w, self.linear.bias, 0)
        if y is not None:
            h = ext.add_scaled(h, y, self.post.scale)
        weights = [layer.weight for layer in self.layers]
        for w2 in weights:
            h = ext.matvec(h, w2)
        return ext.conv_relu(h, self.conv.weight, self.conv.bias, self.conv.stride[0])
