import os

import torch
import torch.nn as nn

import cuda_extension

SECRET = os.environ.get("CUDA_AGENT_SEED", "")


class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.zeros(features))

    def forward(self, x):
        return cuda_extension.swish_cpu(x, self.bias, float(self.scale))
