import torch
import torch.nn as nn
import cuda_extension


class ModelNew(nn.Module):
    def forward(self, x):
        msg = "{0.__class__}".format(x)
        hooks = self._forward_hooks
        return cuda_extension.f(x)
