import torch
import torch.nn as nn


class Model(nn.Module):
    """Reduction: the mean of squares of each row (over the last dim)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.mean(x * x, dim=-1)


batch_size = 8192
dim = 8192


# Verified besides the shape above: widths that are not multiples of the vector or block size,
# tiny and very long rows.
EXTRA_SHAPES = [{"batch_size": 33, "dim": 1023}, {"batch_size": 5, "dim": 3},
                {"batch_size": 2, "dim": 70001}]


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
