import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """torch.mean(x * x, dim=-1) in one pass over x (kernels/row_mean_square.cu)."""

    def __init__(self):
        super().__init__()
        # Launch variant of the kernel (see the .cu): 0 = a block per row, 1 = a warp per row.
        self.kernel_config = 0

    def forward(self, x):
        return cuda_extension.row_mean_square(x, self.kernel_config)
