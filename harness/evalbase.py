"""evalbase.py: what every module of the trusted side shares: the error that ends an
evaluation, the progress log, and small tensor and task-call helpers.
"""

from __future__ import annotations

import os
import traceback
from typing import Any, Callable

import torch

import timing

# The run's precision flags: one definition, shared with the candidate (timing.py).
set_precision = timing.set_precision

import harness_util as hu
import memplan


class EvalError(Exception):
    """A failure that ends the evaluation; becomes result["failure"]."""

    def __init__(self, kind: str, message: str, details: dict[str, Any] | None = None,
                 stage: str | None = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.details = details or {}
        self.stage = stage


class Log:
    def __init__(self, quiet: bool):
        self.quiet = quiet

    def __call__(self, msg: str) -> None:
        if not self.quiet:
            print(f"evaluate: {msg}", flush=True)


def secret_seed() -> int:
    """A fresh seed from the OS; never written anywhere the candidate can read."""
    return int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)


def is_oom(exc: BaseException) -> bool:
    """A device out-of-memory error (torch.cuda.OutOfMemoryError): in the evaluator's own work
    it is never the task's or the candidate's failure (evaluate retries with a smaller memory
    plan)."""
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    return oom_type is not None and isinstance(exc, oom_type)


def task_call(what: str, fn: Callable[[], Any]) -> Any:
    """fn() for the task's own code: an exception is a task_error, except a device
    out-of-memory error, which passes through (is_oom)."""
    try:
        return fn()
    except Exception as exc:
        if is_oom(exc):
            raise
        raise EvalError("task_error", f"{what} failed: {type(exc).__name__}: {exc}",
                        {"traceback": hu.cap(traceback.format_exc())}, stage="setup")


def as_list(x: Any, what: str) -> list[Any]:
    if isinstance(x, (list, tuple)):
        return list(x)
    raise EvalError("task_error", f"{what} must return a list or tuple, got {type(x).__name__}",
                    stage="setup")


def clone_arg(x: Any) -> Any:
    return x.clone() if isinstance(x, torch.Tensor) else x


def to_device(x: Any, device: torch.device) -> Any:
    return x.to(device) if isinstance(x, torch.Tensor) else x


def cpu_copy(x: Any) -> Any:
    return x.detach().to("cpu").clone() if isinstance(x, torch.Tensor) else x


def same_values(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise equality where NaN equals NaN (same shape and dtype assumed)."""
    eq = a == b
    if a.is_floating_point() or a.is_complex():
        eq = eq | (torch.isnan(a) & torch.isnan(b))
    return eq


def count_changed(a: torch.Tensor, o: torch.Tensor,
                  chunk: int | None = None) -> tuple[int, int | None]:
    """How many elements of a differ from o (NaN equal to NaN; same shape and dtype assumed)
    and the flat index of the first, compared on a's device in flat slices of `chunk`
    (default memplan.SLICE_ELEMS) elements (o may live in host memory: a slice at a time is
    moved in)."""
    chunk = chunk or memplan.SLICE_ELEMS
    af, of = a.reshape(-1), o.reshape(-1)
    changed, first = 0, None
    for start in range(0, af.numel(), chunk):
        eq = same_values(af[start:start + chunk], of[start:start + chunk].to(a.device))
        n = int((~eq).sum())
        if n and first is None:
            first = start + int((~eq).nonzero()[0, 0])
        changed += n
        del eq
    return changed, first


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def nbytes(x: Any) -> int:
    return x.numel() * x.element_size() if isinstance(x, torch.Tensor) else 0
