import torch
import torch.nn as nn


class Model(nn.Module):
    """3x3 convolution (stride 1, 'same' padding, with bias) followed by ReLU."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x):
        return torch.relu(self.conv(x))


batch_size = 16
in_channels = 64
out_channels = 128
height = 64
width = 64
kernel_size = 3


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
