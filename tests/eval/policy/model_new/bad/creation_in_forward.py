import torch
import torch.nn as nn
import cuda_extension


class ModelNew(nn.Module):
    def forward(self, x):
        noise = torch.randn(x.shape, device=x.device)
        copy = torch.zeros_like(x, dtype=torch.float16)
        t = torch.tensor(x)
        p = nn.Parameter(torch.empty(3))
        return cuda_extension.f(x, noise, copy, t, p)
