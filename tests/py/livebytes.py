"""livebytes.py: the bytes of CPU tensor storage alive in this thread, counted exactly, for
tests of the evaluator's memory in CPU mode (not a test itself).

LiveBytes is a TorchDispatchMode: every tensor an operator returns is looked at, its storage
counted once (by address) when first seen and dropped when the last tensor seen on it dies
(weakref.finalize). A storage made outside the mode is counted from the first operator that
returns a tensor on it. Memory PyTorch's allocator did not make is never counted (a storage
that cannot be resized: the evaluator's arena, a file mapped into the process, shared with
the candidate; on a GPU it is device memory of its own, outside the caching allocator's
counts too; also an array from NumPy). What it does not see: memory an operator takes and
frees inside itself, and other threads' work (the mode is per thread). Peaks are kept per
name (`start(name)`, `peak(name)`), so that a forward's own peak can be measured inside a
phase's without ending it, as memplan does with torch.cuda.max_memory_allocated on a GPU.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveBytes(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.storages: dict[int, list[int]] = {}  # address -> [bytes, tensors seen alive]
        self.seen: set[int] = set()                # id() of the tensors counted
        self.now = 0
        self.peaks: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                self._count(t)
        return out

    def _count(self, t: torch.Tensor) -> None:
        if id(t) in self.seen:
            return
        st = t.untyped_storage()
        ptr, n = st.data_ptr(), st.nbytes()
        if ptr == 0 or n == 0 or not st.resizable():
            return
        rec = self.storages.get(ptr)
        if rec is None:
            rec = self.storages[ptr] = [n, 0]
            self.now += n
            for k, v in self.peaks.items():
                if self.now > v:
                    self.peaks[k] = self.now
        rec[1] += 1
        self.seen.add(id(t))
        weakref.finalize(t, self._drop, id(t), ptr)

    def _drop(self, tid: int, ptr: int) -> None:
        self.seen.discard(tid)
        rec = self.storages.get(ptr)
        if rec is None:
            return
        rec[1] -= 1
        if rec[1] == 0:
            del self.storages[ptr]
            self.now -= rec[0]

    def start(self, name: str) -> int:
        """Starts (or restarts) the peak called name at what is alive now; returns that."""
        self.peaks[name] = self.now
        return self.now

    def peak(self, name: str) -> int:
        return self.peaks.get(name, self.now)
