import torch
import torch.nn as nn
import cuda_extension


class ModelNew(nn.Module):
    def forward(self, x):
        yield cuda_extension.f(x)

    async def later(self, x):
        return x
