import torch
import torch.nn as nn
# cafÃ© is fine, the next byte is not
x = "abÿcd"

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_init_inputs():
    return []


def get_inputs():
    return []
