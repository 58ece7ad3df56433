"""Legitimate: shape arithmetic, metadata-only views, tensor creation, helpers, tuples."""
import math
from typing import List, Optional, Tuple

import torch
import torch.nn as nn

import cuda_extension

BLOCK = 256
DTYPE = torch.float32


def blocks_for(n: int) -> int:
    return (n + BLOCK - 1) // BLOCK


class ModelNew(nn.Module):
    def __init__(self, features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))
        self.register_buffer("running_mean", torch.zeros(features))
        self._config = 0

    def _launch(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.size(-1)
        grid = blocks_for(rows)
        cuda_extension.layer_norm_into(x, self.weight, self.bias, out, float(self.eps),
                                       grid, self._config)
        return out

    def forward(self, *inputs):
        x = inputs[0]
        n, c = x.shape[0], x.shape[-1]
        assert x.dim() >= 2, f"expected 2+ dims, got {x.dim()}"
        if c % 4 != 0 or not x.is_contiguous():
            raise ValueError(f"unsupported shape {tuple(x.shape)}")
        flat = x.view(-1, c)
        out = torch.empty(flat.shape, device=x.device, dtype=x.dtype)
        scale = math.sqrt(c) * 2
        with torch.no_grad():
            self._launch(flat, out)
        stats = torch.empty_like(x).new_empty((n, 2))
        mean, rstd = cuda_extension.row_stats(flat, stats, scale)
        outs = [out.view_as(x), mean.unsqueeze(-1)]
        if self.bias is not None and len(outs) == 2:
            return outs[0]
        return tuple(outs)
