import torch
import torch.nn as nn
import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(4))
        self.scale = 2.0

    def forward(self, x):
        y = cuda_extension.f(x)
        y = y + self.bias
        y *= self.scale
        return -y
