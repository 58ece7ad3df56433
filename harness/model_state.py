"""harness/model_state.py - every verified forward starts from the state its model was built
with.

Some reference models keep state outside their parameters and buffers: a plain tensor
attribute that each forward replaces or changes in place (KernelBench's VanillaRNN keeps its
hidden state in `self.hidden`). Their output then depends on how many forwards ran before. The
trusted side calls the reference more often than the candidate calls ModelNew (the reference's
peak on set 0, the value-stress scales, a lazy plan's second draw), so the two met other states
from set 1 on and a faithful solution failed. Both sides therefore give each verified forward
the state as built: as_built(model) records the plain tensor attributes of the model and its
submodules the first time it sees a model (call it before the model's first forward), and
afterwards puts back a copy of each attribute a forward replaced or modified in place. A
forward that adds a new attribute keeps it (a helper built lazily is legitimate). What a
forward does to its state is not itself compared: a ModelNew that skips the state update is
judged by its outputs alone.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

# model -> [[module, attribute name, saved copy, the object now there, its version counter]]
_KEPT: "weakref.WeakKeyDictionary[torch.nn.Module, list[list[Any]]]" = \
    weakref.WeakKeyDictionary()


def _version(t: torch.Tensor) -> int | None:
    try:
        return t._version
    except RuntimeError:  # an inference tensor keeps no version counter
        return None


def _attributes(model: torch.nn.Module) -> list[list[Any]]:
    kept = []
    for module in model.modules():
        for name, value in vars(module).items():
            if isinstance(value, torch.Tensor):
                kept.append([module, name, value.detach().clone(), value, _version(value)])
    return kept


def as_built(model: Any) -> None:
    """Records model's state the first time; afterwards restores it where a forward changed
    it. Does nothing for an object that is not a torch.nn.Module."""
    if not isinstance(model, torch.nn.Module):
        return
    kept = _KEPT.get(model)
    if kept is None:
        _KEPT[model] = _attributes(model)
        return
    for entry in kept:
        module, name, saved, obj, version = entry
        now = vars(module).get(name)
        if now is obj and (version is None or _version(now) == version):
            continue
        fresh = saved.clone()
        vars(module)[name] = fresh
        entry[3], entry[4] = fresh, _version(fresh)
