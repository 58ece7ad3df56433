import torch
import torch.nn as nn
import cuda_extension


def double(t):
    return t * 2


class ModelNew(nn.Module):
    def scale(self, t, k):
        return t * k

    def forward(self, x):
        y = cuda_extension.f(x)
        f = lambda t: t + 1
        return f(self.scale(double(y), 3))
