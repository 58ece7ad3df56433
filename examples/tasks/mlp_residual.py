import torch
import torch.nn as nn


class Model(nn.Module):
    """Pre-norm transformer MLP block: x + fc2(gelu(fc1(layer_norm(x))))."""

    def __init__(self, hidden, expansion):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, hidden * expansion)
        self.fc2 = nn.Linear(hidden * expansion, hidden)

    def forward(self, x):
        h = self.fc1(self.norm(x))
        h = torch.nn.functional.gelu(h)
        return x + self.fc2(h)


batch_size = 4
seq_len = 512
hidden = 1024
expansion = 4


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden, expansion]
