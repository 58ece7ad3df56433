import torch
import torch.nn as nn
import cuda_extension


class ModelNew(nn.Module):
    def forward(self, x):
        g = self.forward.__globals__
        b = __builtins__
        cls = x.__class__.__mro__
        return cuda_extension.f(x)
