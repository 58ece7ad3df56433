import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """torch.softmax(x, dim=-1) in one kernel (kernels/softmax_last_dim.cu)."""

    def __init__(self):
        super().__init__()
        # Launch variant of the kernel (see the .cu): 0 = the row cached in registers when it
        # fits, 1 = two passes with a warp per row.
        self.kernel_config = 0

    def forward(self, x):
        return cuda_extension.softmax_last_dim(x, self.kernel_config)
