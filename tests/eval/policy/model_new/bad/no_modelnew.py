import torch
import torch.nn as nn
import cuda_extension


class Model2(nn.Module):
    def forward(self, x):
        return cuda_extension.f(x)
