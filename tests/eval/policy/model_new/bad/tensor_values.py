import torch
import torch.nn as nn
import cuda_extension


class ModelNew(nn.Module):
    def forward(self, x):
        y = cuda_extension.f(x)
        if y.max() > 0:
            pass
        first = x[0]
        s = float(y)
        for row in x:
            pass
        return first
