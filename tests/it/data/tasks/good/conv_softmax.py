import torch
import torch.nn as nn


class Model(torch.nn.Module):
    def __init__(self, channels, kernel_size=3):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x):
        x = self.conv(x)
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.rand(2, 4, 8, 8)]


def get_init_inputs():
    return [4]
