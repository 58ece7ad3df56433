import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over the last dim; the inputs are spread wide so that subtracting the max matters."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=-1)


batch_size = 8192
dim = 8192


# Verified besides the shape above: widths that are not multiples of the vector or block size,
# tiny and very long rows.
EXTRA_SHAPES = [{"batch_size": 17, "dim": 1001}, {"batch_size": 3, "dim": 5},
                {"batch_size": 2, "dim": 100003}]


def get_inputs():
    return [torch.randn(batch_size, dim) * 8.0]


def get_init_inputs():
    return []
