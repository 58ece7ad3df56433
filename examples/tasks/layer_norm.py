import torch
import torch.nn as nn


class Model(nn.Module):
    """LayerNorm over the last dim with a learnable weight and bias."""

    def __init__(self, features, eps):
        super().__init__()
        self.norm = nn.LayerNorm(features, eps=eps)
        # Non-trivial affine parameters, so that a kernel that ignores them fails verification.
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(features))
            self.norm.bias.copy_(0.1 * torch.randn(features))

    def forward(self, x):
        return self.norm(x)


batch_size = 8192
features = 4096
eps = 1e-5


def get_inputs():
    return [torch.randn(batch_size, features) * 2.0 + 0.5]


def get_init_inputs():
    return [features, eps]
