import torch
import torch.nn as nn
import cuda_extension


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = cuda_extension.f(x.reshape(-1))
        y = y.sum(dim=0)
        return y.to(torch.float16)
