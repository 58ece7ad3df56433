import torch
import torch.nn as nn
import cuda_extension

print("loaded")


class ModelNew(nn.Module):
    def forward(self, x):
        import os

        def inner(t):
            return t

        torch = cuda_extension
        return cuda_extension.f(inner(x))


if __name__ == "__main__":
    ModelNew()
