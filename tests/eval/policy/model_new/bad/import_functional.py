import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import relu
import cuda_extension


class ModelNew(nn.Module):
    def forward(self, x):
        return F.relu(cuda_extension.f(x))
