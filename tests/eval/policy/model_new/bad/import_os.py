import os
import torch
import torch.nn as nn
import subprocess as sp
import cuda_extension


class ModelNew(nn.Module):
    def forward(self, x):
        return cuda_extension.f(x)
