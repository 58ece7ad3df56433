"""harness_util.py: helpers shared by the trusted evaluator and the candidate runner.

Nothing here imports candidate code. The candidate runner imports this module (and
timing.py) before it loads the candidate's extension and model_new.py.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

SCHEMA_VERSION = 1

# Failure kinds (the "failure.kind" field of the result JSON; docs/internals/harness.md).
FAILURE_KINDS = (
    "usage",           # the evaluator was called wrongly (bad paths, refused options)
    "task_error",      # the task failed (import, Model, get_inputs): not the candidate's fault
    "harness",         # an internal error of the evaluator
    "infrastructure",  # the evaluator could not evaluate (its own out-of-memory, a task too
                       # large for the GPU): no reward, not the candidate's failure
    "import",          # the extension or model_new.py failed to import
    "build",           # ModelNew(*init_inputs) raised, or is not an nn.Module
    "state_dict",      # ModelNew's state_dict keys or shapes differ from Model's
    "exception",       # the candidate's forward (or other code) raised
    "cuda_error",      # a CUDA error (illegal address, launch failure, ...)
    "oom",             # out of memory (torch.cuda.OutOfMemoryError or an allocator failure)
    "crash",           # the candidate process died (exit status or signal)
    "timeout",         # the candidate process ran past --timeout and was killed
    "protocol",        # the candidate process broke the protocol (missing or oversized files)
    "output_type",     # an output is not a plain tensor / number, or the structure differs
    "device",          # an output is on another device than Model's
    "shape",           # an output's shape differs
    "dtype",           # an output's dtype differs
    "mismatch",        # values differ beyond atol/rtol, or NaN/Inf positions differ
    "input_mutated",   # the forward modified one of its inputs
    "state",           # ModelNew lacks a state attribute Model's forward updates (model_state)
    "precision",       # inside the tolerance, but far less accurate than fp32 arithmetic
    "timing",          # timing produced no usable numbers
)

# Messages on the report channel are one JSON object per line, at most this long.
MAX_MESSAGE_BYTES = 1 << 20
STDERR_TAIL_BYTES = 4096


def json_safe(obj: Any) -> Any:
    """A copy of obj that json.dumps(allow_nan=False) accepts: non-finite floats become None."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    # numpy / torch scalars and anything else with a float value
    try:
        return json_safe(float(obj))
    except (TypeError, ValueError):
        return str(obj)


def dumps(obj: Any) -> str:
    return json.dumps(json_safe(obj), allow_nan=False, sort_keys=False)


def number_repr(x: float | int | bool | None) -> float | int | bool | str | None:
    """A JSON-able element value: finite numbers as they are, NaN/Inf as "nan"/"inf"/"-inf",
    None (a candidate's null) as None."""
    if x is None or isinstance(x, bool) or isinstance(x, int):
        return x
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def write_json_atomic(path: str, obj: Any) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(dumps(obj))
        f.write("\n")
    os.replace(tmp, path)


def flatten_outputs(out: Any) -> list[Any]:
    """The leaves of a forward's result: a tensor, or (nested) lists/tuples of tensors and
    Python numbers. Anything else raises TypeError with a message for the agent."""
    import torch

    # Iterative, not a recursive closure: a nested function that calls itself sits in a
    # reference cycle with its cell, and the cycle would keep the leaves (whole output
    # tensors, GiBs on a large task) alive until the cyclic collector ran.
    leaves: list[Any] = []
    stack: list[tuple[Any, str]] = [(out, "")]
    while stack:
        x, where = stack.pop()
        if isinstance(x, torch.Tensor):
            leaves.append(x)
        elif isinstance(x, (bool, int, float)):
            leaves.append(x)
        elif isinstance(x, (list, tuple)):
            stack.extend((x[i], f"{where}[{i}]") for i in reversed(range(len(x))))
        else:
            raise TypeError(f"output {where} is a {type(x).__module__}.{type(x).__qualname__}; "
                            "expected a tensor, a number, or a list/tuple of them")
    return leaves


def classify_exception(exc: BaseException) -> tuple[str, str]:
    """(failure kind, message) for an exception raised by candidate code."""
    import torch

    name = f"{type(exc).__module__}.{type(exc).__qualname__}".replace("builtins.", "")
    text = str(exc)
    message = f"{name}: {text}" if text else name
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(exc, oom_type):
        return "oom", message
    if isinstance(exc, RuntimeError) and ("out of memory" in text.lower()
                                          or "can't allocate memory" in text.lower()):
        return "oom", message
    accel = getattr(torch, "AcceleratorError", None)
    if accel is not None and isinstance(exc, accel):
        return "cuda_error", message
    if isinstance(exc, RuntimeError) and ("CUDA error" in text or "cudaError" in text
                                          or "CUBLAS_STATUS" in text
                                          or "CUDNN_STATUS" in text):
        return "cuda_error", message
    return "exception", message


def cap(text: str, limit: int = STDERR_TAIL_BYTES) -> str:
    """The last `limit` bytes of text (UTF-8), marked when cut."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    return "[...]" + data[-limit:].decode("utf-8", "replace")

