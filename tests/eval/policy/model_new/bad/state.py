import torch
import torch.nn as nn
import cuda_extension

_CACHE = {}


class ModelNew(nn.Module):
    def forward(self, x):
        global _HITS
        key = x.shape
        self.last = cuda_extension.f(x)
        _CACHE[key] = self.last
        return self.last
