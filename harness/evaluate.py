#!/usr/bin/env python3
"""evaluate.py: the trusted side of an evaluation: verify and time one candidate.

    python3 harness/evaluate.py --task MODEL.py --candidate-dir DIR --so PATH/cuda_extension.so
        --out RESULT.json [--device cuda|cpu] [--seeds 5] [--adversarial-sets 1]
        [--derived-shapes 2] [--value-stress 1] [--timing events|kernel]
        [--precision strict|tf32] [--atol 1e-2] [--rtol 1e-2] [--baseline-cache DIR]
        [--budget-ms 2000] [--timeout 120] [--no-timing] [--no-compile] [--python PATH]
        [--tmp-dir DIR] [--keep-temp] [--quiet]

This process imports torch and the task file only; it never imports or runs candidate code.
The candidate (the .so and DIR/model_new.py) runs in a child process, harness/candidate.py,
started with a clean environment in a fresh temporary directory and its own process group,
which gets copies of the inputs and Model's state_dict and sends back its outputs and its
post-forward inputs; this side compares them with its own reference outputs, which never
leave this process, on inputs drawn from seeds that never leave it either.

The result is written to --out as JSON (schema in docs/internals/harness.md); stdout carries
progress lines only. Exit status: 0 the candidate passed (and was timed unless --no-timing);
1 the candidate failed (the JSON says why); 2 bad arguments; 3 the task or the harness failed.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if not sys.path or os.path.abspath(sys.path[0]) != _HERE:
    sys.path.insert(0, _HERE)

import timing  # noqa: E402
import harness_util as hu  # noqa: E402
import arena as ar  # noqa: E402
import quality  # noqa: E402

import argparse  # noqa: E402
import copy  # noqa: E402
import hashlib  # noqa: E402
import importlib.util  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import queue  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from typing import Any, Callable  # noqa: E402

import torch  # noqa: E402

CANDIDATE_PY = os.path.join(_HERE, "candidate.py")
TESTING_ENV = "CUDA_AGENT_HARNESS_TESTING"
DEFAULT_TOL = 1e-2
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_SEEDS = 5
# How long an evaluation waits for a pre-warmed candidate that is still importing torch
# before it starts one of its own.
PREWARM_WAIT_S = 30.0
MAX_FIRST_MISMATCHES = 5
BASELINE_CACHE_VERSION = 1

# Strict precision (docs/internals/harness.md, "Precision"): on every input set, for every
# floating output, the candidate's RMS error against a float64 reference must not exceed
#   PRECISION_FACTOR * (RMS error of the float32 reference against the float64 one)
#   + PRECISION_REL_FLOOR_EPS * eps(dtype) * RMS(float64 reference) + PRECISION_ABS_FLOOR.
PRECISION_FACTOR = 10.0
PRECISION_REL_FLOOR_EPS = 128.0
PRECISION_ABS_FLOOR = 1e-12

# Speed of light: peak memory bandwidth in bytes/s, by a substring of the device name
# (first match wins, so the more specific names come first). Unknown devices: no check.
PEAK_BANDWIDTH = (
    ("H200", 4.8e12),
    ("H100 PCIe", 2.0e12),
    ("H100 NVL", 3.9e12),
    ("H100", 3.35e12),
    ("A100", 2.0e12),
)
SOL_FLAG_FRACTION = 0.5
# Peak dense arithmetic rates in FLOP/s, by a substring of the device name as above (NVIDIA's
# data sheets; the sparse figures halved): "fp32" without tensor cores, "tf32" and "fp16"
# (fp16/bf16) on tensor cores. Unknown devices: no FLOP bound.
PEAK_FLOPS = (
    ("H200 NVL", {"fp32": 60e12, "tf32": 417e12, "fp16": 835e12}),
    ("H200", {"fp32": 67e12, "tf32": 495e12, "fp16": 990e12}),
    ("H100 PCIe", {"fp32": 51e12, "tf32": 378e12, "fp16": 756e12}),
    ("H100 NVL", {"fp32": 60e12, "tf32": 417e12, "fp16": 835e12}),
    ("H100", {"fp32": 67e12, "tf32": 495e12, "fp16": 990e12}),
    ("A100", {"fp32": 19.5e12, "tf32": 156e12, "fp16": 312e12}),
)

# Environment variables the candidate process inherits; everything else is dropped.
ENV_PASSTHROUGH = ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "PYTHONPATH",
                   "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "OMP_NUM_THREADS",
                   "MKL_NUM_THREADS")
# Input domains whose inputs may be replaced by heavy-tailed mixed-sign values.
ADVERSARIAL_DOMAINS = ("real",)
# Shapes a task may declare in EXTRA_SHAPES.
MAX_EXTRA_SHAPES = 8
# Derived shapes (a task without EXTRA_SHAPES): how many, and how many of the module-level ints
# that get_inputs() reads are tried as sizes.
DEFAULT_DERIVED_SHAPES = 2
MAX_SIZE_PROBES = 8
# Value stress: the floating inputs scaled by the largest of these factors at which the
# reference stays finite, in float64 and in float32 alike.
STRESS_FACTORS = (1000.0, 100.0, 10.0)
# The least share of the forward's GPU time that must run inside the extension's functions.
MIN_EXTENSION_SHARE = 0.25


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


# ---------------------------------------------------------------------------------------
# Arguments


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="evaluate.py",
        description="Verify and time one candidate (cuda_extension + model_new.py) against a "
                    "KernelBench-format task, with the candidate in a separate process.")
    p.add_argument("--task", required=True, help="the task file (Model, get_inputs, "
                                                 "get_init_inputs)")
    p.add_argument("--candidate-dir", required=True, help="directory holding model_new.py")
    ext = p.add_mutually_exclusive_group(required=True)
    ext.add_argument("--so", help="the built extension module (cuda_extension*.so)")
    ext.add_argument("--ext-module", help=f"TEST ONLY: a Python file imported as cuda_extension;"
                                          f" refused unless {TESTING_ENV}=1")
    p.add_argument("--out", required=True, help="where to write the result JSON")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--seeds", type=int, default=DEFAULT_SEEDS,
                   help="random input sets from get_inputs() (default 5)")
    p.add_argument("--adversarial-sets", type=int, default=1,
                   help="extra sets with heavy-tailed mixed-sign float inputs (default 1)")
    p.add_argument("--derived-shapes", type=int, default=DEFAULT_DERIVED_SHAPES,
                   help="for a task without EXTRA_SHAPES: smaller input shapes derived from it "
                        "(a batch, an odd size) verified too, at most this many (default 2, "
                        "0 = none)")
    p.add_argument("--value-stress", type=int, choices=(0, 1), default=1,
                   help="one set with the floating inputs scaled far beyond get_inputs() "
                        "(default 1, 0 = none)")
    p.add_argument("--timing", choices=("events", "kernel"), default="events")
    p.add_argument("--precision", choices=("strict", "tf32"), default="strict")
    p.add_argument("--rules", choices=("cuda-agent", "kernelbench"), default="cuda-agent",
                   help="cuda-agent: the extension's kernels carry the forward; kernelbench: "
                        "torch operators may too (their share is reported)")
    p.add_argument("--atol", type=float, default=None,
                   help="absolute tolerance (default: the task's ATOL, else 1e-2)")
    p.add_argument("--rtol", type=float, default=None,
                   help="relative tolerance (default: the task's RTOL, else 1e-2)")
    p.add_argument("--baseline-cache", help="directory caching eager/compile timings")
    p.add_argument("--budget-ms", type=float, default=timing.DEFAULT_BUDGET_MS,
                   help="time budget per timed subject, warm-up included (default 2000)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help="wall-clock limit for the candidate process in seconds (default 120)")
    p.add_argument("--no-timing", action="store_true", help="verify only")
    p.add_argument("--no-compile", action="store_true",
                   help="skip the torch.compile baseline")
    p.add_argument("--python", default=sys.executable,
                   help="interpreter for the candidate process (default: this one)")
    p.add_argument("--tmp-dir", default=None, help="where candidate directories are made")
    p.add_argument("--keep-temp", action="store_true",
                   help="keep the candidate's directory (debugging)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


# ---------------------------------------------------------------------------------------
# Task, seeds, inputs


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load_task(path: str, digest: str) -> Any:
    name = f"_cuda_agent_task_{digest[:16]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise EvalError("task_error", f"cannot import the task file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise EvalError("task_error", f"importing the task failed: {type(exc).__name__}: {exc}",
                        {"traceback": hu.cap(traceback.format_exc())}, stage="setup")
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, attr):
            raise EvalError("task_error", f"the task defines no {attr}", stage="setup")
    return module


def secret_seed() -> int:
    """A fresh seed from the OS; never written anywhere the candidate can read."""
    return int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)


def task_call(what: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:
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


def forward_param_names(task: Any) -> list[str]:
    try:
        params = list(inspect.signature(task.Model.forward).parameters.values())
    except (TypeError, ValueError):
        return []
    return [p.name for p in params[1:]
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def input_domains(task: Any) -> dict[int, str]:
    """INPUT_DOMAINS = {index or forward() parameter name: domain} -> {index: domain}."""
    declared = getattr(task, "INPUT_DOMAINS", None) or {}
    if not isinstance(declared, dict):
        raise EvalError("task_error", "INPUT_DOMAINS must be a dict", stage="setup")
    names = forward_param_names(task)
    out: dict[int, str] = {}
    for key, domain in declared.items():
        if isinstance(key, int) and not isinstance(key, bool):
            out[key] = str(domain)
        elif isinstance(key, str) and key in names:
            out[names.index(key)] = str(domain)
        elif isinstance(key, str) and key.isdigit():
            out[int(key)] = str(domain)
        else:
            raise EvalError("task_error", f"INPUT_DOMAINS names {key!r}, which is neither an "
                                          f"input index nor a forward() parameter {names}",
                            stage="setup")
    return out


def heavy_tailed_like(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Heavy-tailed values with x's shape, dtype, spread (std) and support.

    A Gaussian scale mixture (normal times log-normal) has far heavier tails than a normal;
    values are normalised to x's standard deviation and clipped at 20 of them. The drawn
    input's structure is kept, since a task's reference may rely on it: elements that are
    exactly zero stay zero (triangular, banded, sparse or masked inputs: a kernel may skip
    what the task guarantees is zero). Signs are mixed even where the drawn input had none
    (an identity shortcut for relu on torch.rand inputs must fail); INPUT_DOMAINS protects an
    input whose domain forbids it. Found on real KernelBench solutions: a triangular matmul
    failed only because this set filled the zero triangle.
    """
    if x.numel() == 0:
        return x.clone()
    xd = x.detach().to(torch.float64)
    scale = float(xd.std()) if x.numel() > 1 else 0.0
    if not math.isfinite(scale) or scale == 0.0:
        finite = xd[torch.isfinite(xd)]
        scale = float(finite.abs().max()) if finite.numel() else 0.0
    if not math.isfinite(scale) or scale == 0.0:
        scale = 1.0
    z = torch.randn(x.shape, generator=gen, dtype=torch.float64, device=gen.device)
    z = z * torch.exp(0.75 * torch.randn(x.shape, generator=gen, dtype=torch.float64,
                                         device=gen.device))
    if z.numel() > 1:
        z = z / z.std().clamp_min(1e-12)
    z = (z * scale).clamp(-20.0 * scale, 20.0 * scale)
    z = torch.where(xd.to(z.device) == 0, torch.zeros_like(z), z)
    return z.to(x.device, x.dtype)


def draw_inputs(task: Any, device: torch.device) -> list[Any]:
    """get_inputs(), with the device as the default for the tensors it makes (drawing on the
    GPU takes milliseconds where the CPU takes seconds for large inputs)."""
    with torch.device(device):
        raw = as_list(task_call("get_inputs()", task.get_inputs), "get_inputs()")
    return [x.detach() if isinstance(x, torch.Tensor) else x for x in raw]


class InputSet:
    def __init__(self, index: int, kind: str, drawn: list[Any], device: torch.device):
        self.index = index          # the "seed_index" reported (never the seed itself)
        # "random", "adversarial", "value-stress", "shape", "derived-shape" or "post-timing"
        self.kind = kind
        self.orig = [to_device(clone_arg(x), device) for x in drawn]  # pristine, never mutated
        self.slots: list[dict[str, Any]] = []    # where its inputs lie in the arena
        self.out_slots: list[dict[str, Any]] = []  # where the candidate puts its outputs
        self.ref: list[Any] = []    # reference leaves (float32 / the task's dtypes), on device
        self.ref64: list[Any] | None = None
        self.ref_mutated: list[int] = []  # inputs the reference itself modifies in place
        self.overrides: dict[str, int] | None = None  # kind "shape": the sizes it was drawn at
        # kind "shape" whose sizes change get_init_inputs(): the model's own init inputs, its
        # reference model and its index in the job's models (0 is the task's own model).
        self.init: list[Any] | None = None
        self.model: torch.nn.Module | None = None
        self.model_index = 0
        # kind "derived-shape": how it was derived ({"sizes": {...}} or {"slice": {...}}), its
        # entry in the result's derived_shapes (its status is kept there); the candidate may
        # refuse such a set with an exception (may_refuse).
        self.derived: dict[str, Any] | None = None
        self.note: dict[str, Any] | None = None
        self.may_refuse = False
        # kind "value-stress": the factor its floating inputs were scaled by, the inputs it
        # scaled, and per output the factor its atol is multiplied by (the growth of the
        # output's magnitude); the precision rule is recorded there, not enforced.
        self.scale: float | None = None
        self.scaled_inputs: list[int] = []
        self.atol_scale: list[float] | None = None
        self.enforce_precision = True


def draw_sets(task: Any, n_random: int, n_adv: int, device: torch.device, log: Log,
              n_derived: int = 0, stress: int = 0) -> tuple[list[InputSet], dict[str, Any]]:
    """The evaluation's input sets, in order: n_random from get_inputs(), n_adv adversarial,
    the value-stress set (stress: drawn here, scaled by choose_stress_scale once the reference
    model exists), the task's EXTRA_SHAPES, or else up to n_derived derived shapes. Returns the
    sets and what the result's verification section says about them: "adversarial",
    "value_stress", "derived_shapes" (one entry per derivation, with its status) and
    "derived_shapes_note" (why there are none, or None)."""
    sets: list[InputSet] = []
    for i in range(n_random):
        torch.manual_seed(secret_seed())
        sets.append(InputSet(i, "random", draw_inputs(task, device), device))
    domains = input_domains(task)
    info: dict[str, Any] = {"inputs": [], "left_as_drawn": {}}
    for a in range(n_adv):
        seed = secret_seed()
        torch.manual_seed(seed)
        raw = draw_inputs(task, device)
        gen = torch.Generator(device=device).manual_seed(seed ^ 0x5DEECE66D)
        changed, left = real_inputs(raw, domains)
        info["inputs"], info["left_as_drawn"] = changed, left
        for k in changed:
            raw[k] = heavy_tailed_like(raw[k], gen)
        if not changed:
            info["skipped"] = "no floating-point input may take adversarial values"
            log("adversarial set skipped: no eligible input")
            break
        sets.append(InputSet(n_random + a, "adversarial", raw, device))
    stress_info: dict[str, Any] | None = None
    if stress:
        torch.manual_seed(secret_seed())
        raw = draw_inputs(task, device)
        eligible, left = real_inputs(raw, domains)
        stress_info = {"scale": None, "inputs": eligible, "left_as_drawn": left}
        if eligible:
            st = InputSet(len(sets), "value-stress", raw, device)
            st.scaled_inputs = eligible
            sets.append(st)
        else:
            stress_info["skipped"] = "no floating-point input may take scaled values"
            log("value-stress set skipped: no eligible input")
        del raw
    else:
        stress_info = {"scale": None, "skipped": "disabled (--value-stress 0)"}
    shapes = extra_shapes(task)
    default_init = init_with(task, {}) if shapes else []
    for shape in shapes:
        torch.manual_seed(secret_seed())
        s = InputSet(len(sets), "shape", draw_with(task, shape, device), device)
        s.overrides = shape
        init = init_with(task, shape)
        if not same_args(init, default_init):
            s.init = init  # sizes the model's parameters depend on: a model of its own
        sets.append(s)
    if shapes:
        derived, notes, why_none = [], [], "the task declares EXTRA_SHAPES"
    elif n_derived <= 0:
        derived, notes, why_none = [], [], "disabled (--derived-shapes 0)"
    else:
        derived, notes, why_none = derive_shapes(task, sets[0].orig, n_derived, len(sets),
                                                 device)
    sets += derived
    return sets, {"adversarial": info, "value_stress": stress_info, "derived_shapes": notes,
                  "derived_shapes_note": why_none}


def real_inputs(raw: list[Any], domains: dict[int, str]) -> tuple[list[int], dict[str, str]]:
    """The floating-point tensor inputs that may take other values than get_inputs() gives
    (domain "real"), and those INPUT_DOMAINS protects ({index: domain})."""
    eligible, left = [], {}
    for k, x in enumerate(raw):
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            continue
        domain = domains.get(k, "real")
        if domain in ADVERSARIAL_DOMAINS:
            eligible.append(k)
        else:
            left[str(k)] = domain
    return eligible, left


def same_args(a: list[Any], b: list[Any]) -> bool:
    """Two argument lists with the same values (tensors: same dtype, shape and elements)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
                    and x.dtype == y.dtype and x.shape == y.shape
                    and bool(same_values(x.cpu(), y.cpu()).all())):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


def extra_shapes(task: Any) -> list[dict[str, int]]:
    """EXTRA_SHAPES = [{module-level name: size, ...}, ...]: more shapes to verify besides the
    task's own; for each, get_inputs() is called with those names of the task module set (a
    kernel written for the task's one shape fails there)."""
    declared = getattr(task, "EXTRA_SHAPES", None)
    if declared is None:
        return []
    if not isinstance(declared, (list, tuple)) or len(declared) > MAX_EXTRA_SHAPES:
        raise EvalError("task_error", f"EXTRA_SHAPES must be a list of at most "
                                      f"{MAX_EXTRA_SHAPES} dicts", stage="setup")
    out = []
    for k, shape in enumerate(declared):
        if not isinstance(shape, dict) or not shape:
            raise EvalError("task_error", f"EXTRA_SHAPES[{k}] must be a non-empty dict of "
                                          "module-level names to sizes", stage="setup")
        for name, v in shape.items():
            cur = getattr(task, name, None) if isinstance(name, str) else None
            if not isinstance(cur, int) or isinstance(cur, bool):
                raise EvalError("task_error", f"EXTRA_SHAPES[{k}] names {name!r}, which is not "
                                              "a module-level int of the task", stage="setup")
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise EvalError("task_error", f"EXTRA_SHAPES[{k}][{name!r}] must be a size (an "
                                              f"int >= 0), not {v!r}", stage="setup")
        out.append(dict(shape))
    return out


def with_overrides(task: Any, overrides: dict[str, int], fn: Callable[[], Any]) -> Any:
    """fn() with some module-level names of the task set for the call."""
    saved = {n: getattr(task, n) for n in overrides}
    try:
        for n, v in overrides.items():
            setattr(task, n, v)
        return fn()
    finally:
        for n, v in saved.items():
            setattr(task, n, v)


def draw_with(task: Any, overrides: dict[str, int], device: torch.device) -> list[Any]:
    """draw_inputs() with some module-level names of the task set for the call."""
    return with_overrides(task, overrides, lambda: draw_inputs(task, device))


def init_with(task: Any, overrides: dict[str, int]) -> list[Any]:
    """get_init_inputs() with some module-level names of the task set for the call."""
    return with_overrides(task, overrides, lambda: as_list(
        task_call("get_init_inputs()", task.get_init_inputs), "get_init_inputs()"))


def shape_models(task: Any, sets: list[InputSet], device: torch.device) -> list[Any]:
    """A reference model for each extra-shape or derived set whose sizes change
    get_init_inputs(), built like the task's own (fresh secret seed) and set on it unless it
    has one already; returns them in the job's order (the task's own model is number 0)."""
    models = []
    for s in sets:
        if s.init is None:
            continue
        if s.model is None:
            build_own_model(task, s, device)
        models.append(s.model)
        s.model_index = len(models)
    return models


def build_own_model(task: Any, s: InputSet, device: torch.device) -> None:
    """s.model = Model(*s.init) on the device, from a fresh secret seed (EvalError
    "task_error" if the task refuses)."""
    s.model = model_at(task, s.init or [], s.overrides or {}, device)


def model_at(task: Any, init: list[Any], sizes: dict[str, int],
             device: torch.device) -> torch.nn.Module:
    """Model(*init) (the init inputs at some sizes) on the device, in eval mode, from a fresh
    secret seed; EvalError "task_error" if the task refuses."""
    torch.manual_seed(secret_seed())
    what = "Model(*get_init_inputs()) at " + ", ".join(f"{k}={v}" for k, v in sizes.items())
    m = task_call(what, lambda: task.Model(*init))
    return task_call(f"moving {what} to the device", lambda: m.to(device).eval())


# ---------------------------------------------------------------------------------------
# Derived input sets: shapes and values the task does not list


def smaller_odd(v: int) -> int | None:
    """An odd size well below v (about a quarter), or None when there is none (v < 2)."""
    if v < 2:
        return None
    t = max(1, v // 4)
    return t - 1 if t % 2 == 0 else t


def size_names(task: Any) -> list[str]:
    """The module-level ints get_inputs() reads, directly or in a function of the task
    module it calls, in the order it first names them (bools are not sizes)."""
    found: list[str] = []
    seen_code: set[int] = set()
    module_vars = vars(task)

    def walk(code: Any) -> None:
        if id(code) in seen_code:
            return
        seen_code.add(id(code))
        for name in code.co_names:
            v = module_vars.get(name)
            if isinstance(v, int) and not isinstance(v, bool):
                if name not in found:
                    found.append(name)
            elif inspect.isfunction(v) and v.__module__ == task.__name__:
                walk(v.__code__)
        for c in code.co_consts:
            if inspect.iscode(c):
                walk(c)

    code = getattr(getattr(task, "get_inputs", None), "__code__", None)
    if code is not None:
        walk(code)
    return found


def changed_dims(base: list[Any], drawn: list[Any]) -> set[tuple[int, int]] | None:
    """The (input, dimension) pairs whose sizes differ between two draws; None when the draws
    differ in anything but sizes (number of inputs, tensor or not, rank, dtype)."""
    if len(base) != len(drawn):
        return None
    out: set[tuple[int, int]] = set()
    for k, (a, b) in enumerate(zip(base, drawn)):
        if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
            return None
        if not isinstance(a, torch.Tensor):
            continue
        if a.dim() != b.dim() or a.dtype != b.dtype:
            return None
        out |= {(k, d) for d, (p, q) in enumerate(zip(a.shape, b.shape)) if p != q}
    return out


def derivation_label(d: dict[str, Any]) -> str:
    """How a derived shape is named in messages: "batch_size=3", "leading dimension 15 of 64"."""
    if "sizes" in d:
        return ", ".join(f"{k}={v}" for k, v in d["sizes"].items())
    sl = d["slice"]
    return f"leading dimension {sl['size']} of {sl['of']}"


def derive_shapes(task: Any, base: list[Any], limit: int, first_index: int,
                  device: torch.device) -> tuple[list[InputSet], list[dict[str, Any]],
                                                 str | None]:
    """Up to `limit` smaller input shapes for a task that lists none (docs/internals/harness.md,
    "Derived shapes"): through the module-level ints get_inputs() reads, each tried at a smaller
    odd value (a draw whose shapes change makes it a size): first a batch (the int that changes
    the first tensor input's leading dimension), then the largest other size; where no int
    changes a shape, the tensors' shared leading dimension sliced. Returns the sets (kind
    "derived-shape", may be refused by the candidate), one note per derivation tried
    ({"sizes" | "slice", "status", "reason", "own_model"}: "pending" until compared, "dropped"
    with the reason when unusable) and why there is none (None when there is one)."""
    notes: list[dict[str, Any]] = []
    base_bytes = sum(nbytes(x) for x in base)
    lead = next((k for k, x in enumerate(base) if isinstance(x, torch.Tensor) and x.dim() >= 1),
                None)
    default_init: list[Any] | None = None
    batch: tuple | None = None  # (sizes, drawn, init or None)
    odd: tuple | None = None    # the same, with its rank key first
    tried = 0
    for name in size_names(task):
        d = smaller_odd(getattr(task, name))
        if d is None:
            continue
        if tried == MAX_SIZE_PROBES:
            break
        tried += 1
        sizes = {name: d}
        torch.manual_seed(secret_seed())
        try:
            drawn = draw_with(task, sizes, device)
            init = init_with(task, sizes)
            if default_init is None:
                default_init = init_with(task, {})
        except EvalError as e:
            notes.append({"sizes": sizes, "status": "dropped", "own_model": False,
                          "reason": hu.cap(f"the task refuses it: {e.message}", 512)})
            continue
        changed = changed_dims(base, drawn)
        if changed is None:
            notes.append({"sizes": sizes, "status": "dropped", "own_model": False,
                          "reason": "the inputs drawn at that size differ in number, kind, "
                                    "rank or dtype"})
            continue
        if not changed:
            continue  # not a size of the inputs
        if sum(nbytes(x) for x in drawn) >= base_bytes:
            notes.append({"sizes": sizes, "status": "dropped", "own_model": False,
                          "reason": "its inputs are not smaller than the task's own"})
            continue
        own = None if same_args(init, default_init) else init
        model = None
        if own is not None:  # built now, so that a size its constructor refuses is passed over
            try:
                model = model_at(task, own, sizes, device)
            except EvalError as e:
                notes.append({"sizes": sizes, "status": "dropped", "own_model": True,
                              "reason": hu.cap(f"the task refuses it: {e.message}", 512)})
                continue
        if batch is None and lead is not None and (lead, 0) in changed:
            batch = (sizes, drawn, own, model)
        else:
            # The largest size first; on a tie one that leaves the model as it is (cheaper).
            key = (getattr(task, name), own is None)
            if odd is None or key > odd[0]:
                odd = (key, sizes, drawn, own, model)
        del drawn, model
    chosen = [c for c in (batch, odd[1:] if odd else None) if c is not None][:limit]
    sets: list[InputSet] = []
    for sizes, drawn, own, model in chosen:
        s = InputSet(first_index + len(sets), "derived-shape", drawn, device)
        s.overrides, s.init, s.model, s.derived = sizes, own, model, {"sizes": sizes}
        sets.append(s)
    if not sets:
        tensors = [x for x in base if isinstance(x, torch.Tensor) and x.dim() >= 1]
        leads = {int(x.shape[0]) for x in tensors}
        size = smaller_odd(next(iter(leads))) if len(leads) == 1 else None
        if size is None:
            why = ("no module-level int that get_inputs() reads changes the inputs' shapes, and "
                   "the tensor inputs share no leading dimension of 2 or more to slice")
            return [], notes, why
        torch.manual_seed(secret_seed())
        raw = draw_inputs(task, device)
        drawn = [x[:size].clone() if isinstance(x, torch.Tensor) and x.dim() >= 1 else x
                 for x in raw]
        del raw
        s = InputSet(first_index, "derived-shape", drawn, device)
        s.derived = {"slice": {"dim": 0, "size": size, "of": next(iter(leads))}}
        sets.append(s)
    for s in sets:
        s.may_refuse = True
        s.note = {**(s.derived or {}), "status": "pending", "reason": None,
                  "own_model": s.init is not None}
        notes.append(s.note)
    return sets, notes, None


def validate_derived(task: Any, sets: list[InputSet], model: torch.nn.Module,
                     device: torch.device, log: Log) -> list[InputSet]:
    """The reference must run on every derived set (with a model of its own where the sizes
    change get_init_inputs()) and give outputs no larger than the task's own (sets[0]'s
    references computed already); a set it refuses is dropped, its note saying why. Computes
    the kept sets' references; returns the sets kept."""
    out0 = sum(nbytes(r) for r in sets[0].ref)
    kept = []
    for s in sets:
        if s.kind != "derived-shape":
            kept.append(s)
            continue
        why = None
        try:
            if s.init is not None and s.model is None:
                build_own_model(task, s, device)
            compute_reference(s.model or model, s, device)
            if sum(nbytes(r) for r in s.ref) > out0:
                why = "its outputs are larger than the task's own"
        except EvalError as e:
            why = f"the reference refuses it: {e.message}"
        if why is None:
            kept.append(s)
            continue
        assert s.note is not None
        s.note.update(status="dropped", reason=hu.cap(why, 512))
        log(f"derived shape {derivation_label(s.derived or {})} dropped: {why}")
    return kept


def choose_stress_scale(s: InputSet, model: torch.nn.Module,
                        model64: torch.nn.Module | None, device: torch.device,
                        info: dict[str, Any]) -> bool:
    """Scales the value-stress set's eligible inputs by the largest of STRESS_FACTORS at which
    the reference stays finite wherever it is finite on the unscaled draw, in float64 (rounded
    to the output's dtype) and in float32, with the same non-finite positions in both (an fp32
    reference that overflows where float64 does not cannot be trusted at that scale). Fills
    its references (ref64 too, where a float64 model exists), the atol factors (how much each
    output's RMS grew, at least 1) and info; False (info["skipped"] says why) when no factor
    qualifies."""
    base = s.orig
    compute_reference(model, s, device)  # the unscaled draw: finite positions, magnitudes
    base_ref = s.ref
    tried = []
    for f in STRESS_FACTORS:
        s.orig = [x * f if k in s.scaled_inputs else x for k, x in enumerate(base)]
        why = None
        if any(bool((torch.isfinite(base[k]) & ~torch.isfinite(s.orig[k])).any())
               for k in s.scaled_inputs):
            why = "the scaled inputs overflow their dtype"
        else:
            try:
                compute_reference(model, s, device)
            except EvalError as e:
                why = f"the reference raised: {e.message}"
        if why is None:
            s.ref64 = None
            if model64 is not None:
                compute_reference64(model64, s)
            why = stress_rejection(base_ref, s.ref, s.ref64)
        if why is None:
            s.scale, s.enforce_precision = f, False
            s.atol_scale = [growth(b, r) for b, r in zip(base_ref, s.ref)]
            info.update(scale=f, atol_scale=s.atol_scale, float64_checked=s.ref64 is not None)
            if tried:
                info["rejected"] = tried
            return True
        tried.append({"scale": f, "why": hu.cap(why, 300)})
    s.orig, s.ref, s.ref64 = base, [], None
    info.update(rejected=tried, skipped=f"no factor of {list(STRESS_FACTORS)} keeps the "
                                        "reference finite")
    return False


def stress_rejection(base_ref: list[Any], ref: list[Any], ref64: list[Any] | None) -> str | None:
    """Why a scaled set's references are unusable (choose_stress_scale), or None."""
    for j, (b, r) in enumerate(zip(base_ref, ref)):
        if not isinstance(r, torch.Tensor):
            if isinstance(r, float) and isinstance(b, float) and math.isfinite(b) and \
                    not math.isfinite(r):
                return f"output {j} of the reference is not finite"
            continue
        if not r.is_floating_point():
            continue
        if not isinstance(b, torch.Tensor) or b.shape != r.shape:
            return f"output {j}'s shape depends on the input values"
        finite = torch.isfinite(b)
        r64 = ref64[j] if ref64 is not None else None
        if isinstance(r64, torch.Tensor) and r64.shape == r.shape:
            c = r64.to(r.dtype)
            if bool((finite & ~torch.isfinite(c)).any()):
                return (f"output {j} of the float64 reference is not finite in {r.dtype} where "
                        "the unscaled one is")
            if not bool((torch.isfinite(r) == torch.isfinite(c)).all()):
                return (f"output {j} of the {r.dtype} reference is not finite where the float64 "
                        "one is (the task's own reference cannot be trusted at that scale)")
        elif bool((finite & ~torch.isfinite(r)).any()):
            return f"output {j} of the reference is not finite where the unscaled one is"
    return None


def growth(b: Any, r: Any) -> float:
    """How much an output's RMS (over finite elements) grew from b to r; at least 1."""
    if not (isinstance(b, torch.Tensor) and isinstance(r, torch.Tensor)
            and r.is_floating_point() and r.numel()):
        return 1.0

    def rms(t: torch.Tensor) -> float:
        t = t.detach().to(torch.float64)
        t = t[torch.isfinite(t)]
        return math.sqrt(float((t * t).mean())) if t.numel() else 0.0

    rb, rr = rms(b), rms(r)
    return max(1.0, rr / rb) if rb > 0 and math.isfinite(rr / rb) else 1.0


def cpu_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A model's state_dict, copied to the CPU (what the candidate loads)."""
    return {k: v.detach().to("cpu").clone() for k, v in model.state_dict().items()}


def write_model(job_dir: str, k: int, init: list[Any], state: dict[str, Any]) -> dict[str, str]:
    """The job's model k for the candidate: its init inputs and state_dict, as files in
    job_dir (init_inputs.pt and state_dict.pt for the task's own, k = 0); returns their names."""
    sfx = f"_{k}" if k else ""
    files = {"init_inputs": f"init_inputs{sfx}.pt", "state_dict": f"state_dict{sfx}.pt"}
    torch.save([cpu_copy(x) for x in init], os.path.join(job_dir, files["init_inputs"]))
    torch.save(state, os.path.join(job_dir, files["state_dict"]))
    return files


class SetPrefetch:
    """Input sets drawn ahead of time by a long-lived runner (harness/worker.py) while it waits
    for its next job: after an evaluation, the next evaluation's sets for the same task are
    drawn in a background thread, with fresh secret seeds that nothing outside this process
    ever sees. A warm evaluation of that task then does not wait for get_inputs(), the
    adversarial draw and the derived shapes' probes (seconds on the CPU for large inputs); the
    checks that need the evaluation's reference model (validate_derived,
    choose_stress_scale) run in the evaluation. Used once; dropped when the next
    job is for another task or other counts."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._key: tuple | None = None
        self._result: tuple[list[InputSet], dict[str, Any]] | None = None

    def start(self, key: tuple, task: Any, n_random: int, n_adv: int, device: torch.device,
              n_derived: int = 0, stress: int = 0) -> None:
        self.wait()
        self._key, self._result = key, None

        def draw() -> None:
            try:
                if device.type == "cuda":
                    torch.cuda.set_device(device)
                self._result = draw_sets(task, n_random, n_adv, device, Log(True), n_derived,
                                         stress)
            except Exception:  # the job will draw its own sets and report any error
                self._result = None

        self._thread = threading.Thread(target=draw, name="set-prefetch", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Until no draw runs (before anything else touches torch's global generator)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def take(self, key: tuple) -> tuple[list[InputSet], dict[str, Any]] | None:
        self.wait()
        got = self._result if self._key == key else None
        self._key, self._result = None, None
        return got


def same_values(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise equality where NaN equals NaN (same shape and dtype assumed)."""
    eq = a == b
    if a.is_floating_point() or a.is_complex():
        eq = eq | (torch.isnan(a) & torch.isnan(b))
    return eq


def set_precision(mode: str) -> None:
    allow = mode == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow
    torch.set_float32_matmul_precision("high" if allow else "highest")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def compute_reference(model: torch.nn.Module, s: InputSet, device: torch.device) -> None:
    args = [clone_arg(x) for x in s.orig]
    with torch.no_grad():
        out = task_call(f"Model.forward on input set {s.index}", lambda: model(*args))
    sync(device)
    try:
        s.ref = [x.detach() if isinstance(x, torch.Tensor) else x
                 for x in hu.flatten_outputs(out)]
    except TypeError as exc:
        raise EvalError("task_error", f"Model's output: {exc}", stage="setup")
    s.ref_mutated = [k for k, (a, o) in enumerate(zip(args, s.orig))
                     if isinstance(o, torch.Tensor)
                     and not (a.shape == o.shape and a.dtype == o.dtype
                              and bool(same_values(a, o).all()))]


def compute_reference64(model64: torch.nn.Module | None, s: InputSet) -> str | None:
    """Fills s.ref64; returns why it is unavailable, or None."""
    if model64 is None:
        return "no float64 model"
    args = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else
            clone_arg(x) for x in s.orig]
    try:
        with torch.no_grad():
            out = model64(*args)
        s.ref64 = [x.detach() if isinstance(x, torch.Tensor) else x
                   for x in hu.flatten_outputs(out)]
    except Exception as exc:  # the float64 reference is best effort
        s.ref64 = None
        return f"{type(exc).__name__}: {exc}"
    if len(s.ref64) != len(s.ref):
        s.ref64 = None
        return "the float64 model returned a different number of outputs"
    return None


# ---------------------------------------------------------------------------------------
# Comparison


def first_true(mask: torch.Tensor, k: int) -> list[int]:
    """Flat indices of the first k True elements of mask (chunked: no huge nonzero())."""
    flat = mask.reshape(-1)
    found: list[int] = []
    chunk = 1 << 22
    for start in range(0, flat.numel(), chunk):
        idx = torch.nonzero(flat[start:start + chunk]).flatten()
        if idx.numel():
            found.extend(int(i) + start for i in idx[: k - len(found)].tolist())
            if len(found) >= k:
                break
    return found


def unravel(flat_index: int, shape: tuple[int, ...]) -> list[int]:
    out = []
    for dim in reversed(shape):
        flat_index, r = divmod(flat_index, dim)
        out.append(r)
    return list(reversed(out))


def compare_tensor(j: int, got: torch.Tensor, exp: torch.Tensor, atol: float,
                   rtol: float) -> dict[str, Any]:
    """Per-output record: mismatches, nonfinite_mismatches, max_abs_diff, first_mismatches."""
    rec: dict[str, Any] = {"output": j, "shape": list(exp.shape), "dtype": str(exp.dtype),
                           "numel": exp.numel()}
    if exp.numel() == 0:
        rec.update(mismatches=0, nonfinite_mismatches=0, max_abs_diff=None,
                   first_mismatches=[])
        return rec
    floating = exp.is_floating_point() or exp.is_complex()
    if floating:
        close = torch.isclose(got, exp, rtol=rtol, atol=atol, equal_nan=True)
        nan_g, nan_e = torch.isnan(got), torch.isnan(exp)
        inf_g, inf_e = torch.isinf(got), torch.isinf(exp)
        nonfinite_bad = (nan_g != nan_e) | (inf_g != inf_e) | (inf_g & inf_e & (got != exp))
        both_finite = torch.isfinite(got) & torch.isfinite(exp)
        diff = torch.where(both_finite, (got.to(torch.complex128 if exp.is_complex()
                                                else torch.float64)
                                         - exp.to(torch.complex128 if exp.is_complex()
                                                  else torch.float64)).abs(),
                           torch.zeros((), dtype=torch.float64, device=exp.device))
        max_abs = float(diff.max()) if bool(both_finite.any()) else None
        nonfinite = int(nonfinite_bad.sum())
    else:
        close = got == exp
        diff = (got.to(torch.float64) - exp.to(torch.float64)).abs() \
            if exp.dtype != torch.bool else (got != exp).to(torch.float64)
        max_abs = float(diff.max())
        nonfinite = 0
    bad = ~close
    nbad = int(bad.sum())
    firsts = []
    if nbad:
        g_flat, e_flat = got.reshape(-1), exp.reshape(-1)
        for fi in first_true(bad, MAX_FIRST_MISMATCHES):
            g, e = g_flat[fi].item(), e_flat[fi].item()
            if isinstance(g, complex) or isinstance(e, complex):
                g, e = complex(g), complex(e)
                ad = abs(g - e) if math.isfinite(abs(g - e)) else None
                g, e = str(g), str(e)
            else:
                ad = abs(float(g) - float(e))
                ad = ad if math.isfinite(ad) else None
                g, e = hu.number_repr(g), hu.number_repr(e)
            firsts.append({"output": j, "index": unravel(fi, tuple(exp.shape)), "got": g,
                           "expected": e, "abs_diff": ad})
    rec.update(mismatches=nbad, nonfinite_mismatches=nonfinite, max_abs_diff=max_abs,
               first_mismatches=firsts)
    return rec


def compare_number(j: int, got: Any, exp: Any, atol: float, rtol: float) -> dict[str, Any]:
    if isinstance(exp, bool) or isinstance(exp, int):
        ok = got == exp
    else:
        g, e = float(got), float(exp)
        ok = (math.isnan(g) and math.isnan(e)) or g == e or \
            (math.isfinite(g) and math.isfinite(e) and abs(g - e) <= atol + rtol * abs(e))
    ad = None
    try:
        ad = abs(float(got) - float(exp))
        ad = ad if math.isfinite(ad) else None
    except (TypeError, ValueError):
        pass
    firsts = [] if ok else [{"output": j, "index": [], "got": hu.number_repr(got),
                             "expected": hu.number_repr(exp), "abs_diff": ad}]
    return {"output": j, "shape": [], "dtype": type(exp).__name__, "numel": 1,
            "mismatches": 0 if ok else 1, "nonfinite_mismatches": 0, "max_abs_diff": ad,
            "first_mismatches": firsts}


def precision_record(j: int, got: torch.Tensor, ref: torch.Tensor,
                     ref64: torch.Tensor) -> dict[str, Any] | None:
    """The strict-precision numbers of one floating output (None: not applicable)."""
    if not ref.is_floating_point() or ref.dtype == torch.float64 or ref.numel() == 0:
        return None
    if not isinstance(ref64, torch.Tensor) or ref64.shape != ref.shape:
        return None
    g, r, r64 = got.to(torch.float64), ref.to(torch.float64), ref64.to(torch.float64)
    mask = torch.isfinite(g) & torch.isfinite(r) & torch.isfinite(r64)
    n = int(mask.sum())
    if n == 0:
        return None
    zero = torch.zeros((), dtype=torch.float64, device=g.device)

    def rms(t: torch.Tensor) -> float:
        return math.sqrt(float(torch.where(mask, t * t, zero).sum()) / n)

    cand_err = rms(g - r64)
    ref_err = rms(r - r64)
    scale = rms(r64)
    eps = torch.finfo(ref.dtype).eps
    threshold = PRECISION_FACTOR * ref_err + PRECISION_REL_FLOOR_EPS * eps * scale \
        + PRECISION_ABS_FLOOR
    return {"output": j, "candidate_rms_err": cand_err, "reference_rms_err": ref_err,
            "scale_rms": scale, "threshold": threshold,
            "ratio": cand_err / ref_err if ref_err > 0 else None, "ok": cand_err <= threshold}


def set_label(s: InputSet) -> str:
    """How messages name a set: "random", "shape rows=3", "derived-shape batch_size=3",
    "value-stress, inputs x1000"."""
    if s.kind == "shape" and s.overrides:
        return "shape " + ", ".join(f"{k}={v}" for k, v in s.overrides.items())
    if s.derived:
        return "derived-shape " + derivation_label(s.derived)
    if s.scale:
        return f"value-stress, inputs x{s.scale:g}"
    return s.kind


def check_set(s: InputSet, meta: Any, outs: list[Any], after: list[Any], device: torch.device,
              atol: float, rtol: float, precision: str) -> dict[str, Any]:
    """Compares one set: outs, the candidate's outputs (received_outputs), and after, its
    inputs after the forward (arena_inputs). Returns the set's record; raises EvalError on the
    first failure."""
    record: dict[str, Any] = {"seed_index": s.index, "kind": s.kind, "ok": False,
                              **({"shape": s.overrides} if s.kind == "shape" else {}),
                              **({"derived": s.derived} if s.derived else {}),
                              **({"scale": s.scale, "atol_scale": s.atol_scale}
                                 if s.scale else {}),
                              **({"own_model": True} if s.model is not None else {}),
                              "max_abs_diff": None, "mismatches": 0, "first_mismatches": [],
                              "outputs": []}
    if len(outs) != len(s.ref):
        raise EvalError("output_type", f"input set {s.index}: ModelNew returned {len(outs)} "
                                       f"output(s), Model returns {len(s.ref)}",
                        {"set": s.index, "record": record})
    if isinstance(meta, list) and len(meta) == len(outs):
        for j, (m, r) in enumerate(zip(meta, s.ref)):
            if isinstance(m, dict) and isinstance(r, torch.Tensor) and \
                    m.get("kind") == "tensor" and m.get("device") != r.device.type:
                raise EvalError("device", f"input set {s.index}: output {j} is on "
                                          f"{m.get('device')}, Model's on {r.device.type}",
                                {"set": s.index, "output": j})
    got_leaves = []
    out_atol = s.atol_scale if s.atol_scale is not None else [1.0] * len(s.ref)
    for j, (g, r) in enumerate(zip(outs, s.ref)):
        if isinstance(r, torch.Tensor) != isinstance(g, torch.Tensor):
            raise EvalError("output_type",
                            f"input set {s.index}: output {j} is a {type(g).__name__}, "
                            f"Model's is a {type(r).__name__}", {"set": s.index, "output": j})
        if isinstance(r, torch.Tensor):
            if tuple(g.shape) != tuple(r.shape):
                raise EvalError("shape", f"input set {s.index}: output {j} has shape "
                                         f"{list(g.shape)}, Model's has {list(r.shape)}",
                                {"set": s.index, "output": j, "got": list(g.shape),
                                 "expected": list(r.shape)})
            if g.dtype != r.dtype:
                raise EvalError("dtype", f"input set {s.index}: output {j} has dtype {g.dtype},"
                                         f" Model's has {r.dtype}",
                                {"set": s.index, "output": j, "got": str(g.dtype),
                                 "expected": str(r.dtype)})
            g = g.to(device)
            rec = compare_tensor(j, g, r, atol * out_atol[j], rtol)
        else:
            rec = compare_number(j, g, r, atol * out_atol[j], rtol)
        got_leaves.append(g)
        record["outputs"].append(rec)
    diffs = [o["max_abs_diff"] for o in record["outputs"] if o["max_abs_diff"] is not None]
    record["max_abs_diff"] = max(diffs) if diffs else None
    record["mismatches"] = sum(o["mismatches"] for o in record["outputs"])
    record["first_mismatches"] = [m for o in record["outputs"]
                                  for m in o["first_mismatches"]][:MAX_FIRST_MISMATCHES]
    if record["mismatches"]:
        nonfinite = sum(o["nonfinite_mismatches"] for o in record["outputs"])
        first = record["first_mismatches"][0] if record["first_mismatches"] else None
        scaled = f" (x{max(out_atol):g} on this set)" if max(out_atol, default=1.0) > 1 else ""
        msg = (f"input set {s.index} ({set_label(s)}): {record['mismatches']} element(s) differ "
               f"beyond atol={atol:g}{scaled}, rtol={rtol:g}")
        if nonfinite:
            msg += f" ({nonfinite} with NaN/Inf where Model has none, or the reverse)"
        if record["max_abs_diff"] is not None:
            msg += f"; max |diff| {record['max_abs_diff']:.4g}"
        if first is not None:
            msg += (f"; first at output {first['output']} index {first['index']}: got "
                    f"{first['got']}, expected {first['expected']}")
        raise EvalError("mismatch", msg, {"set": s.index, "record": record})

    # Inputs: compared with this side's pristine copies.
    if len(after) != len(s.orig):
        raise EvalError("protocol", f"input set {s.index}: the candidate sent back "
                                    f"{len(after)} inputs, not {len(s.orig)}", {"set": s.index})
    for k, (a, o) in enumerate(zip(after, s.orig)):
        if not isinstance(o, torch.Tensor) or k in s.ref_mutated:
            continue
        if not isinstance(a, torch.Tensor) or tuple(a.shape) != tuple(o.shape) or \
                a.dtype != o.dtype:
            raise EvalError("input_mutated", f"input set {s.index}: ModelNew changed input "
                                             f"{k}'s shape or dtype in place",
                            {"set": s.index, "input": k})
        eq = same_values(a.to(device), o)
        changed = int((~eq).sum())
        if changed:
            fi = first_true(~eq, 1)[0]
            idx = unravel(fi, tuple(o.shape))
            raise EvalError("input_mutated",
                            f"input set {s.index}: ModelNew modified input {k} in place "
                            f"({changed} of {o.numel()} elements changed; first at {idx}: was "
                            f"{hu.number_repr(o.reshape(-1)[fi].item())}, now "
                            f"{hu.number_repr(a.reshape(-1)[fi].item())}); inputs must be "
                            "left as they are", {"set": s.index, "input": k, "changed": changed,
                                                 "first_index": idx})

    # Precision against the float64 reference.
    if s.ref64 is not None:
        precs = []
        for j, (g, r, r64) in enumerate(zip(got_leaves, s.ref, s.ref64)):
            if isinstance(r, torch.Tensor):
                p = precision_record(j, g, r, r64)
                if p is not None:
                    precs.append(p)
        record["precision"] = precs
        if not s.enforce_precision:
            record["precision_enforced"] = False
        worst = [p for p in precs if not p["ok"]]
        if worst and precision == "strict" and s.enforce_precision:
            p = worst[0]
            raise EvalError(
                "precision",
                f"input set {s.index}: output {p['output']} is inside the tolerance but its "
                f"RMS error against a float64 reference is {p['candidate_rms_err']:.3g}, above "
                f"the {p['threshold']:.3g} that fp32 arithmetic allows (10x the float32 "
                f"reference's {p['reference_rms_err']:.3g}, plus a floor): reduced precision "
                "(TF32/FP16/BF16 arithmetic or inputs?). Compute in fp32, or run with "
                "--precision tf32 where the task allows it.",
                {"set": s.index, "record": record})
    record["ok"] = True
    return record


# ---------------------------------------------------------------------------------------
# The candidate process


class CandidateProcess:
    """harness/candidate.py in its own process group, talking over a pipe (fd) and stdin."""

    MAX_MESSAGES = 10000

    def __init__(self, python: str, job_dir: str, env: dict[str, str], timeout_s: float,
                 prewarm_device: str | None = None):
        """Starts the candidate on job_dir now; with prewarm_device, starts it pre-warmed
        (torch imported, the device initialised) and waiting for start_job()."""
        r, w = os.pipe()
        mode = ["--prewarm", "--device", prewarm_device] if prewarm_device else \
            ["--job", job_dir]
        try:
            self.proc = subprocess.Popen(
                [python, "-B", CANDIDATE_PY, *mode, "--report-fd", str(w)],
                cwd=job_dir, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, pass_fds=(w,), start_new_session=True,
                close_fds=True)
        except BaseException:
            os.close(r)
            os.close(w)
            raise
        os.close(w)
        self.job_dir = job_dir
        self.started = time.monotonic()
        self.deadline = self.started + timeout_s
        self.timeout_s = timeout_s
        self.waiting = prewarm_device is not None
        self._killed = False
        self.messages: queue.Queue[Any] = queue.Queue()
        self._tail = bytearray()
        self._tail_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read_messages, args=(r,), daemon=True)
        self._reader.start()
        self._drain = threading.Thread(target=self._read_output, daemon=True)
        self._drain.start()

    def wait_ready(self, timeout_s: float) -> bool:
        """Pre-warmed only: True once the process said "ready" (within timeout_s)."""
        try:
            msg = self.messages.get(timeout=max(0.0, timeout_s))
        except queue.Empty:
            return False
        if isinstance(msg, dict) and msg.get("type") == "ready":
            return True
        self.kill()  # died or misbehaved before its job
        return False

    def start_job(self, timeout_s: float) -> None:
        """Pre-warmed only: hand over its job (already written into job_dir); the wall-clock
        limit counts from now."""
        self.started = time.monotonic()
        self.deadline = self.started + timeout_s
        self.timeout_s = timeout_s
        self.waiting = False
        self.send(self.job_dir)

    def _read_messages(self, fd: int) -> None:
        count = 0
        with os.fdopen(fd, "rb") as f:
            while True:
                line = f.readline(hu.MAX_MESSAGE_BYTES + 1)
                if not line:
                    break
                count += 1
                if len(line) > hu.MAX_MESSAGE_BYTES or count > self.MAX_MESSAGES:
                    self.messages.put({"type": "_protocol",
                                       "message": "the candidate sent an oversized message "
                                                  "or too many messages"})
                    break
                try:
                    msg = json.loads(line)
                except ValueError:
                    self.messages.put({"type": "_protocol",
                                       "message": "the candidate sent a line that is not JSON"})
                    break
                if not isinstance(msg, dict):
                    self.messages.put({"type": "_protocol",
                                       "message": "the candidate sent a non-object message"})
                    break
                self.messages.put(msg)
        self.messages.put(None)

    def _read_output(self) -> None:
        assert self.proc.stdout is not None
        while True:
            chunk = self.proc.stdout.read1(65536) if hasattr(self.proc.stdout, "read1") \
                else self.proc.stdout.read(65536)
            if not chunk:
                break
            with self._tail_lock:
                self._tail += chunk
                if len(self._tail) > 2 * hu.STDERR_TAIL_BYTES:
                    del self._tail[:-hu.STDERR_TAIL_BYTES]

    def output_tail(self) -> str:
        self._drain.join(timeout=1.0)
        with self._tail_lock:
            data = bytes(self._tail[-hu.STDERR_TAIL_BYTES:])
        return data.decode("utf-8", "replace")

    def next_message(self) -> dict[str, Any] | None:
        """The next message; None at EOF; raises TimeoutError past the deadline."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        try:
            return self.messages.get(timeout=remaining)
        except queue.Empty:
            raise TimeoutError from None

    def send(self, line: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write((line + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=max(0.0, timeout))
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        """Kills the whole process group (the candidate and anything it started), once."""
        if self._killed:
            return
        self._killed = True
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass

    def elapsed(self) -> float:
        return time.monotonic() - self.started


def candidate_env(job_dir: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in ENV_PASSTHROUGH if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(HOME=job_dir, TMPDIR=job_dir, PYTHONDONTWRITEBYTECODE="1",
               PYTHONUNBUFFERED="1")
    return env


class CandidatePool:
    """Pre-warmed candidate processes for a long-lived trusted worker (harness/worker.py).
    Each waits in its own fresh 0700 directory (its cwd, HOME and TMPDIR, as for a candidate
    started on demand), takes exactly one job and is then killed with its process group."""

    def __init__(self, python: str, device: str, size: int, tmp_dir: str | None = None):
        self.python = python
        self.device = device
        self.size = size
        self.tmp_dir = tmp_dir
        self.waiting: list[CandidateProcess] = []

    def fill(self) -> None:
        """Replaces used and dead processes; returns at once (they warm up meanwhile)."""
        alive = []
        for c in self.waiting:
            if c.proc.poll() is None:
                alive.append(c)
            else:
                c.kill()
                shutil.rmtree(c.job_dir, ignore_errors=True)
        self.waiting = alive
        while len(self.waiting) < self.size:
            d = tempfile.mkdtemp(prefix="cuda-agent-cand-", dir=self.tmp_dir)
            os.chmod(d, 0o700)
            self.waiting.append(CandidateProcess(self.python, d, candidate_env(d), 3600.0,
                                                 prewarm_device=self.device))

    def take(self, python: str, device: str, wait_s: float) -> CandidateProcess | None:
        """A process that reported ready (waiting up to wait_s for the oldest), or None when
        none fits this job (another interpreter or device) or none became ready."""
        if python != self.python or device != self.device:
            return None
        while self.waiting:
            c = self.waiting.pop(0)
            if c.wait_ready(wait_s):
                return c
            c.kill()
            shutil.rmtree(c.job_dir, ignore_errors=True)
        return None

    def close(self) -> None:
        for c in self.waiting:
            c.kill()
            shutil.rmtree(c.job_dir, ignore_errors=True)
        self.waiting = []


def exit_description(rc: int) -> str:
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"killed by {name}"
    return f"exited with status {rc}"


def check_reported(arena: ar.Arena, s: InputSet, msg: dict[str, Any], device: torch.device,
                   atol: float, rtol: float, precision: str) -> dict[str, Any]:
    """check_set on what a "set" message reported: its outputs from the arena, its inputs in
    place."""
    if "refused" in msg:
        return refused_record(s, msg.get("refused"))
    meta = msg.get("outputs")
    return check_set(s, meta, received_outputs(arena, s, meta), arena_inputs(arena, s), device,
                     atol, rtol, precision)


def refused_record(s: InputSet, why: Any) -> dict[str, Any]:
    """The record of a set the candidate refused (its forward raised): allowed for derived
    shapes only (job.json's may_refuse), a protocol failure for any other set."""
    if not s.may_refuse:
        raise EvalError("protocol", f"input set {s.index} ({set_label(s)}): the candidate "
                                    "reported a refusal, which only a derived shape may get",
                        {"set": s.index})
    return {"seed_index": s.index, "kind": s.kind, "ok": True, "derived": s.derived,
            "refused": hu.cap(str(why), 1024), "max_abs_diff": None, "mismatches": 0,
            "first_mismatches": [], "outputs": []}


def check_launches(ev: Any, rules: str = "cuda-agent") -> str | None:
    """The launch-evidence defence: the candidate's own kernels must run (kernels that exist
    but never run fail under both rule sets) and, under the cuda-agent rules, carry at least
    MIN_EXTENSION_SHARE of the forward's GPU time; under the kernelbench rules torch operators
    may do the rest, and their share is only reported (raises EvalError "launch_evidence").
    Returns why the evidence is unavailable, or None when the check was made."""
    if not isinstance(ev, dict):
        raise EvalError("protocol", "the candidate sent no record of its kernel launches")
    nums = {}
    for key in ("extension_calls", "kernels", "extension_kernels", "total_us",
                "extension_us"):
        v = ev.get(key)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) \
                or v < 0:
            raise EvalError("protocol", f"the candidate's launch record has no valid {key}")
        nums[key] = float(v)
    if ev.get("error") or not ev.get("activities"):
        # The profiler saw nothing at all (no CUPTI on this machine, or a forward that did no
        # GPU work, which the output and post-timing checks judge): recorded, not a verdict.
        return "the profiler recorded no GPU activity in the forward" if not ev.get("error") \
            else f"the launch record is unusable: {hu.cap(str(ev['error']), 300)}"
    top = [t for t in ev.get("top") or [] if isinstance(t, dict)]
    outside = [f"{hu.cap(str(t.get('name')), 80)} ({t.get('us')} us)" for t in top
               if not t.get("in_extension")][:3]
    details = {"defence": "launch_evidence", "evidence": ev}
    if nums["extension_calls"] == 0:
        raise EvalError("launch_evidence", "the forward called no function of cuda_extension "
                                           "while it was recorded (call your kernels as "
                                           "cuda_extension.NAME(...) in forward)", details)
    if nums["extension_kernels"] == 0:
        what = f"{int(nums['kernels'])} kernel(s) ran outside it" + \
            (f": {', '.join(outside)}" if outside else "")
        raise EvalError("launch_evidence", f"no GPU kernel ran inside cuda_extension's "
                                           f"functions during the forward ({what}); the "
                                           "computation must be done by your kernels",
                        details)
    share = nums["extension_us"] / nums["total_us"] if nums["total_us"] > 0 else 1.0
    ev["torch_share"] = round(1.0 - share, 4)
    if share < MIN_EXTENSION_SHARE and rules != "kernelbench":
        raise EvalError("launch_evidence",
                        f"your kernels account for {100 * share:.1f}% of the forward's GPU "
                        f"time ({nums['extension_us']:.1f} of {nums['total_us']:.1f} us), less "
                        f"than {100 * MIN_EXTENSION_SHARE:.0f}%; the rest ran in PyTorch "
                        f"operators: {', '.join(outside) or '?'}", details)
    return None


# The measured time may not fall below this share of the forward's longest GPU activity.
KERNEL_FLOOR_SHARE = 0.9


def kernel_floor(stats: dict[str, Any], ev: Any, flags: list[dict[str, Any]]) -> dict[str, Any]:
    """A call cannot take less time than the longest GPU activity it ran (the launch evidence's
    profiled forward, on any stream). Work on a stream that is not ordered with the current one
    can overlap the L2 flush and input copies queued before the timed region, so the events
    miss it (seen on the H200: a kernel on an unsynchronised side stream timed at 1/200 of its
    own duration). When the events' median is below KERNEL_FLOOR_SHARE of that activity, the
    activity's duration is the time (basis "kernel-floor", the events' median kept), with a
    flag."""
    if not isinstance(ev, dict):
        return stats
    longest = ev.get("longest_us")
    med = stats.get("median_ms")
    if not isinstance(longest, (int, float)) or isinstance(longest, bool) or \
            not math.isfinite(longest) or longest <= 0 or not isinstance(med, (int, float)):
        return stats
    floor_ms = longest / 1000.0
    if med >= KERNEL_FLOOR_SHARE * floor_ms:
        return stats
    flags.append({"kind": "timing_below_kernel",
                  "message": f"the timed calls took {med:.4g} ms, less than the forward's "
                             f"longest GPU activity ({floor_ms:.4g} ms): work off the current "
                             "stream overlapped the timing's set-up; timed at that activity's "
                             "duration instead"})
    return dict(stats, median_ms=floor_ms, events_median_ms=med, basis="kernel-floor")


def input_value(x: Any, s_index: int, k: int) -> Any:
    """A non-tensor input as it travels in job.json."""
    if x is None or isinstance(x, (bool, int, str)) or \
            (isinstance(x, float) and math.isfinite(x)):
        return x
    raise EvalError("task_error", f"get_inputs() item {k} is a {type(x).__name__}: inputs "
                                  "must be tensors, finite numbers, strings or None",
                    {"set": s_index, "input": k}, stage="setup")


def lay_out(sets: list[InputSet]) -> int:
    """Gives every set's tensor inputs and Model-shaped outputs a slot in the arena (outputs
    sized from the set's reference); returns the arena's size."""
    layout = ar.Layout()
    for s in sets:
        s.slots = [{"kind": "tensor", "offset": layout.take(nbytes(x)), "dtype": str(x.dtype),
                    "shape": list(x.shape)} if isinstance(x, torch.Tensor) else
                   {"kind": "value", "value": input_value(x, s.index, k)}
                   for k, x in enumerate(s.orig)]
        s.out_slots = [{"offset": layout.take(nbytes(r)), "nbytes": nbytes(r)}
                       if isinstance(r, torch.Tensor) else {"offset": None, "nbytes": 0}
                       for r in s.ref]
    return layout.size


def arena_inputs(arena: ar.Arena, s: InputSet) -> list[Any]:
    """The set's inputs as the candidate sees them: views of the arena (values as they are)."""
    return [arena.view(slot["offset"], x.dtype, tuple(x.shape))
            if slot["kind"] == "tensor" else x for slot, x in zip(s.slots, s.orig)]


def fill_inputs(arena: ar.Arena, s: InputSet, device: torch.device) -> None:
    for view, x in zip(arena_inputs(arena, s), s.orig):
        if isinstance(x, torch.Tensor):
            view.copy_(x)
    sync(device)


def number_value(v: Any) -> Any:
    if isinstance(v, str) and v in ("nan", "inf", "-inf"):
        return float(v)
    if v is None or isinstance(v, (bool, int, float)):
        return v
    raise EvalError("protocol", f"the candidate reported a {type(v).__name__} as a number")


def received_outputs(arena: ar.Arena, s: InputSet, meta: Any) -> list[Any]:
    """The candidate's outputs for set s, copied out of the arena into this process's memory
    (on the reference's device) from the metadata it reported. An output whose shape or dtype
    differs from Model's comes back as a tensor on the "meta" device: no data, enough for
    check_set to say what differs."""
    if not isinstance(meta, list):
        raise EvalError("protocol", f"input set {s.index}: the candidate's output report is "
                                    "not a list", {"set": s.index})
    outs: list[Any] = []
    for j, m in enumerate(meta):
        kind = m.get("kind") if isinstance(m, dict) else None
        if kind == "number":
            outs.append(number_value(m.get("value")))
            continue
        if kind != "tensor":
            raise EvalError("protocol", f"input set {s.index}: output {j} is reported as "
                                        f"{kind!r}", {"set": s.index, "output": j})
        try:
            dtype = ar.dtype_from_name(m.get("dtype"))
            shape = ar.shape_from_list(m.get("shape"))
        except ar.ArenaError as exc:
            raise EvalError("protocol", f"input set {s.index}: output {j}: {exc}",
                            {"set": s.index, "output": j})
        r = s.ref[j] if j < len(s.ref) else None
        if not isinstance(r, torch.Tensor) or tuple(r.shape) != shape or r.dtype != dtype:
            outs.append(torch.empty(shape, dtype=dtype, device="meta"))
            continue
        if m.get("stored") is not True:
            raise EvalError("protocol", f"input set {s.index}: the candidate did not deliver "
                                        f"output {j}", {"set": s.index, "output": j})
        view = arena.view(s.out_slots[j]["offset"], dtype, shape)
        outs.append(view.to(r.device, copy=True))
    return outs


def nbytes(x: Any) -> int:
    return x.numel() * x.element_size() if isinstance(x, torch.Tensor) else 0


def sanitize_failure(msg: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    kind = msg.get("kind")
    if kind not in hu.FAILURE_KINDS or kind in ("usage", "task_error", "harness"):
        kind = "exception"
    message = hu.cap(str(msg.get("message", "")), hu.STDERR_TAIL_BYTES)
    details = msg.get("details") if isinstance(msg.get("details"), dict) else {}
    clean: dict[str, Any] = {}
    for k, v in list(details.items())[:32]:
        v = hu.json_safe(v)
        if isinstance(v, str):
            v = hu.cap(v, hu.STDERR_TAIL_BYTES)
        elif len(hu.dumps(v)) > 8192:
            v = hu.cap(hu.dumps(v), 2048)
        clean[str(k)[:64]] = v
    return kind, message, clean


# ---------------------------------------------------------------------------------------
# Baselines and speed of light


def device_info(device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {"type": device.type, "torch": torch.__version__,
                            "cuda": torch.version.cuda}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(name=props.name, capability=f"{props.major}.{props.minor}",
                    l2_bytes=timing.l2_cache_bytes(device),
                    memory_bytes=int(props.total_memory))
    else:
        info.update(name=f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)")
    return info


def baseline_key(task_sha: str, dev: dict[str, Any], precision: str, mode: str) -> dict:
    return {"version": BASELINE_CACHE_VERSION, "task_sha256": task_sha, "device": dev["name"],
            "device_type": dev["type"], "torch": dev["torch"], "cuda": dev["cuda"],
            "precision": precision, "timing": mode, "timing_method": timing.METHOD_VERSION}


def baseline_cache_path(cache_dir: str, key: dict) -> str:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return os.path.join(cache_dir, f"baseline-{digest[:32]}.json")


def read_baseline_cache(path: str, key: dict) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            entry = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(entry, dict) or entry.get("key") != key:
        return {}
    return {k: entry[k] for k in ("eager", "compile", "flops") if isinstance(entry.get(k), dict)}


def measure_baselines(opts: argparse.Namespace, model: torch.nn.Module, s: InputSet,
                      device: torch.device, key: dict, log: Log) -> tuple[dict, bool]:
    """Eager and torch.compile timings on set s, and the reference's FLOPs on it
    (count_flops), from the cache where it has them; returns ({"eager", "compile", "flops"},
    whether the timings came from the cache)."""
    path = baseline_cache_path(opts.baseline_cache, key) if opts.baseline_cache else None
    cached = read_baseline_cache(path, key) if path else {}
    want_compile = not opts.no_compile
    hook = getattr(opts, "timing_hook", None)
    results = dict(cached)
    if "flops" not in results:  # once per task where there is a cache (before any TF32)
        results["flops"] = count_flops(model, s, device)
    hit = "eager" in cached and (not want_compile or "compile" in cached)
    if hit:
        log("baselines from the cache")
    else:
        set_precision(opts.precision)  # tf32: the baselines may use TF32 too (fair comparison)
        make_inputs = timing.varied_copies(s.orig)
        if "eager" not in results:
            log("timing eager")
            results["eager"] = quality.mark(quality.measured(
                hook, "eager", lambda: timing.measure(lambda *a: model(*a), make_inputs, device,
                                                      opts.budget_ms, opts.timing)))
        if want_compile and "compile" not in results:
            log("compiling and timing torch.compile")
            t0 = time.monotonic()
            try:
                compiled = torch.compile(model)
                with torch.no_grad():
                    compiled(*make_inputs())
                sync(device)
                compile_s = time.monotonic() - t0
                stats = quality.mark(quality.measured(
                    hook, "compile", lambda: timing.measure(compiled, make_inputs, device,
                                                            opts.budget_ms, opts.timing)))
                stats["compile_s"] = compile_s
            except Exception as exc:  # a task torch.compile cannot handle: reported, not fatal
                stats = {"error": hu.cap(f"{type(exc).__name__}: {exc}", 2048)}
            results["compile"] = stats
    if path and (not hit or "flops" not in cached):
        os.makedirs(opts.baseline_cache, exist_ok=True)
        # Only clean measurements are kept (issue 21): a noisy baseline would skew every
        # later evaluation of the task; the next one measures it again.
        keep = {k: results[k] for k in ("eager", "compile", "flops")
                if k in results and quality.cacheable(k, results[k])}
        if set(keep) - set(cached):
            entry = {"key": key, "created_unix": time.time(), **keep}
            hu.write_json_atomic(path, entry)
    return {"eager": results.get("eager"),
            "compile": results.get("compile") if want_compile else None,
            "flops": results["flops"]}, hit


def count_flops(model: torch.nn.Module, s: InputSet, device: torch.device) -> dict[str, Any]:
    """The FLOPs of one reference forward on set s, by torch.utils.flop_counter.FlopCounterMode:
    {"flops": int | None, "uncounted_ops": [names], "error"?: str}. The counter has formulas
    for matrix products, convolutions and attention only; every other operator the forward
    runs (elementwise, reductions, softmax; views aside) counts 0 and is named in
    uncounted_ops. Never raises: a forward the counter cannot follow gives flops None and the
    error."""
    try:
        from torch.utils.flop_counter import FlopCounterMode, flop_registry
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError as exc:
        return {"flops": None, "uncounted_ops": [], "error": f"no flop counter: {exc}"}

    class OpRecorder(TorchDispatchMode):
        """Below the counter: sees each operator it runs, after its decompositions."""

        def __init__(self) -> None:
            super().__init__()
            self.uncounted: dict[str, int] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            packet = getattr(func, "_overloadpacket", None)
            if packet not in flop_registry and not getattr(func, "is_view", False):
                name = str(packet if packet is not None else func)
                self.uncounted[name] = self.uncounted.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    args = [clone_arg(x) for x in s.orig]
    recorder = OpRecorder()
    try:
        with torch.no_grad(), recorder, FlopCounterMode(display=False) as counter:
            model(*args)
        sync(device)
        flops = int(counter.get_total_flops())
    except Exception as exc:  # an operator the counter cannot follow: no FLOP bound
        return {"flops": None, "uncounted_ops": sorted(recorder.uncounted)[:32],
                "error": hu.cap(f"{type(exc).__name__}: {exc}", 512)}
    return {"flops": flops, "uncounted_ops": sorted(recorder.uncounted)[:32]}


def flop_peak_kind(s: InputSet, precision: str) -> str:
    """Which peak FLOP rate no legitimate result can beat: "tf32" (the TF32 tensor rate) for a
    float32 task in strict precision, since an fp32-accurate product cannot go faster (3xTF32
    emulation runs below it); "fp16" (the dense fp16/bf16 tensor rate) in tf32 mode, or when
    the reference's floating outputs are all fp16/bf16."""
    low = (torch.float16, torch.bfloat16)
    floats = [r.dtype for r in s.ref if isinstance(r, torch.Tensor) and r.is_floating_point()]
    if precision == "tf32" or (floats and all(d in low for d in floats)):
        return "fp16"
    return "tf32"


def speed_of_light(dev: dict[str, Any], s: InputSet, state_bytes: int,
                   cand_median: float | None, flops: dict[str, Any] | None = None,
                   precision: str = "strict") -> dict[str, Any]:
    """The least time the task can take on this device: its bytes at peak memory bandwidth
    (sol_ms) and its reference FLOPs at the peak arithmetic rate of flop_peak_kind
    (sol_flops_ms); flagged when the candidate's median is below SOL_FLAG_FRACTION of either.
    peak_fraction = the larger of sol_ms and sol_flops_ms over the candidate's median: the
    share of the hardware's peak it reaches."""
    moved = sum(nbytes(x) for x in s.orig) + sum(nbytes(x) for x in s.ref)
    peak = rates = None
    if dev["type"] == "cuda":
        name = dev.get("name", "")
        peak = next((bw for sub, bw in PEAK_BANDWIDTH if sub in name), None)
        rates = next((r for sub, r in PEAK_FLOPS if sub in name), None)
    sol_ms = moved / peak * 1e3 if peak else None
    n_flops = (flops or {}).get("flops")
    kind = flop_peak_kind(s, precision)
    peak_flops = rates[kind] if rates else None
    sol_flops_ms = n_flops / peak_flops * 1e3 if (peak_flops and n_flops) else None
    flagged_by = [what for what, bound in (("bytes", sol_ms), ("flops", sol_flops_ms))
                  if bound is not None and cand_median is not None
                  and cand_median < SOL_FLAG_FRACTION * bound]
    fractions = {what: bound / cand_median for what, bound in
                 (("bytes", sol_ms), ("flops", sol_flops_ms))
                 if bound is not None and cand_median is not None and cand_median > 0}
    basis = max(fractions, key=lambda k: fractions[k]) if fractions else None
    out = {"bytes": moved, "param_bytes": state_bytes, "peak_bytes_per_s": peak,
           "sol_ms": sol_ms, "flag_below_ms": SOL_FLAG_FRACTION * sol_ms if sol_ms else None,
           "candidate_over_sol": (cand_median / sol_ms) if (sol_ms and cand_median) else None,
           "flops": n_flops, "flops_uncounted_ops": (flops or {}).get("uncounted_ops", []),
           "peak_flops_per_s": peak_flops, "peak_flops_kind": kind if rates else None,
           "peak_flops_rates": rates,
           "sol_flops_ms": sol_flops_ms,
           "flops_flag_below_ms": SOL_FLAG_FRACTION * sol_flops_ms if sol_flops_ms else None,
           "peak_fraction": fractions[basis] if basis else None,
           "peak_fraction_basis": basis, "flagged": bool(flagged_by), "flagged_by": flagged_by}
    if flops and flops.get("error"):
        out["flops_error"] = flops["error"]
    return out


def validate_stats(stats: Any) -> dict[str, Any] | None:
    """The candidate's timing numbers (untrusted) reduced to known numeric fields."""
    if not timing.finite_stats(stats):
        return None
    keep = ("median_ms", "mean_ms", "stdev_ms", "cv", "min_ms", "p10_ms", "p90_ms", "n",
            "method", "basis", "warmup_n", "budget_ms", "stream_median_ms",
            "device_median_ms", "outside_stream_ms", "sync_overhead_ms", "probe_ms",
            "l2_flush_bytes", "kernels_per_call", "kernel_error", "note")
    out: dict[str, Any] = {}
    for k in keep:
        v = stats.get(k)
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)) and math.isfinite(v):
            out[k] = v
        elif isinstance(v, str) and k in ("method", "basis", "kernel_error", "note"):
            out[k] = v[:512]
    if isinstance(stats.get("events"), dict):
        sub = validate_stats(stats["events"])
        if sub is not None:
            out["events"] = sub
    out.update(quality.validate(stats))
    return quality.mark(out)


# ---------------------------------------------------------------------------------------
# The evaluation


def new_result(opts: argparse.Namespace, atol: float, rtol: float) -> dict[str, Any]:
    return {
        "schema": hu.SCHEMA_VERSION,
        "ok": False,
        "stage": "setup",
        "failure": None,
        "rules": opts.rules,
        "verification": {"sets": [], "atol": atol, "rtol": rtol, "precision": opts.precision,
                         "precision_observed": None, "n_random": opts.seeds,
                         "n_adversarial": 0, "adversarial": None, "n_value_stress": 0,
                         "value_stress": None, "n_derived_shapes": 0, "derived_shapes": [],
                         "derived_shapes_note": None,
                         "reference_mutates_inputs": [], "fp64_reference": None},
        "timing": None,
        "flags": [],
        "device": None,
        "candidate": None,
        "elapsed_s": {},
    }


def tolerances(task: Any, opts: argparse.Namespace) -> tuple[float, float]:
    atol = opts.atol if opts.atol is not None else float(getattr(task, "ATOL", DEFAULT_TOL))
    rtol = opts.rtol if opts.rtol is not None else float(getattr(task, "RTOL", DEFAULT_TOL))
    return atol, rtol


def evaluate(opts: argparse.Namespace, log: Log) -> dict[str, Any]:
    t_start = time.monotonic()
    elapsed: dict[str, float] = {}
    result = new_result(opts, opts.atol if opts.atol is not None else DEFAULT_TOL,
                        opts.rtol if opts.rtol is not None else DEFAULT_TOL)
    device = torch.device(opts.device)
    job_dir: str | None = None
    cand: CandidateProcess | None = None
    arena: ar.Arena | None = None
    prefetch: SetPrefetch | None = getattr(opts, "prefetch", None)
    prefetch_next: tuple | None = None
    if prefetch is not None:
        prefetch.wait()
    try:
        if device.type == "cuda" and not torch.cuda.is_available():
            raise EvalError("harness", "--device cuda, but torch.cuda.is_available() is False")
        device = timing.resolve_device(device)  # "cuda" -> "cuda:<current>"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dev = device_info(device)
        result["device"] = dev

        # -- setup: task, reference model, input sets
        task_sha = sha256_file(opts.task)
        task = load_task(opts.task, task_sha)
        atol, rtol = tolerances(task, opts)
        result["verification"].update(atol=atol, rtol=rtol)
        set_precision("strict")  # the reference is always computed at full fp32
        init_seed = secret_seed()
        torch.manual_seed(init_seed)
        init_inputs = as_list(task_call("get_init_inputs()", task.get_init_inputs),
                              "get_init_inputs()")
        # Seeded again right before the construction, as KernelBench seeds Model and ModelNew:
        # under its rules a ModelNew whose state_dict keys differ is built from the same seed.
        torch.manual_seed(init_seed)
        model = task_call("Model(*get_init_inputs())", lambda: task.Model(*init_inputs))
        model = task_call("moving Model to the device", lambda: model.to(device).eval())
        state = cpu_state(model)
        state_bytes = sum(nbytes(v) for v in state.values())
        # One more random set when timing: checked after the timing runs, so that a candidate
        # that behaves differently once it is being timed (counting calls, say) is caught.
        n_draw = opts.seeds + (0 if opts.no_timing else 1)
        n_derived = max(0, getattr(opts, "derived_shapes", DEFAULT_DERIVED_SHAPES))
        n_stress = 1 if getattr(opts, "value_stress", 1) else 0
        set_key = (task_sha, n_draw, opts.adversarial_sets, n_derived, n_stress, str(device))
        t_draw = time.monotonic()
        got = prefetch.take(set_key) if prefetch is not None else None
        if got is not None:
            sets, sets_info = got
            log("input sets drawn ahead of time")
        else:
            sets, sets_info = draw_sets(task, n_draw, opts.adversarial_sets, device, log,
                                        n_derived, n_stress)
        elapsed["setup_draw"] = time.monotonic() - t_draw
        result["verification"]["sets_prefetched"] = got is not None
        prefetch_next = (set_key, task, n_draw, opts.adversarial_sets, device, n_derived,
                         n_stress)
        post: InputSet | None = None
        if not opts.no_timing:
            post = sets.pop(opts.seeds)  # the last random set; adversarial ones follow
            post.index, post.kind = -1, "post-timing"
        v = result["verification"]
        v["adversarial"] = sets_info["adversarial"]
        v["value_stress"] = sets_info["value_stress"]
        v["derived_shapes"] = sets_info["derived_shapes"]
        v["derived_shapes_note"] = sets_info["derived_shapes_note"]
        t_ref32 = time.monotonic()
        # The derived sets the reference refuses and a value-stress set that finds no usable
        # scale are dropped before anything is laid out for the candidate.
        compute_reference(model, sets[0], device)
        sets = validate_derived(task, sets, model, device, log)
        try:
            model64: torch.nn.Module | None = copy.deepcopy(model).double()
            why64_model = None
        except Exception as exc:
            model64, why64_model = None, f"{type(exc).__name__}: {exc}"
        sets = [s for s in sets if s.kind != "value-stress"
                or choose_stress_scale(s, model, model64, device, v["value_stress"])]
        for k, s_ in enumerate(sets):
            s_.index = k
        if post is not None:
            post.index = len(sets)
        v["n_adversarial"] = sum(1 for s in sets if s.kind == "adversarial")
        v["n_extra_shapes"] = sum(1 for s in sets if s.kind == "shape")
        v["n_value_stress"] = sum(1 for s in sets if s.kind == "value-stress")
        v["n_derived_shapes"] = sum(1 for s in sets if s.kind == "derived-shape")
        all_sets = sets + ([post] if post is not None else [])
        extra_models = shape_models(task, all_sets, device)
        for s in all_sets:  # fast on a GPU; sizes the output slots and the poisoning
            if s.kind not in ("derived-shape", "value-stress") and s is not sets[0]:
                compute_reference(s.model or model, s, device)
        elapsed["setup_reference"] = time.monotonic() - t_ref32
        elapsed["setup"] = time.monotonic() - t_start

        # -- the candidate's directory and process (pre-warmed when a pool has one)
        pool = getattr(opts, "pool", None)
        cand = pool.take(opts.python, opts.device, PREWARM_WAIT_S) if pool is not None \
            else None
        if cand is not None:
            job_dir = cand.job_dir
        else:
            job_dir = tempfile.mkdtemp(prefix="cuda-agent-cand-", dir=opts.tmp_dir)
            os.chmod(job_dir, 0o700)
        t_job = time.monotonic()
        job_models = [write_model(job_dir, 0, init_inputs, state)] + [
            write_model(job_dir, s.model_index, s.init or [], cpu_state(s.model))
            for s in all_sets if s.model is not None]
        arena_bytes = lay_out(all_sets)
        try:
            arena, why_not_ipc = ar.create(arena_bytes, device, job_dir)
        except (ar.ArenaError, OSError) as exc:
            raise EvalError("harness", f"cannot create the shared memory for the candidate: "
                                       f"{exc}", stage="setup")
        result["verification"]["transport"] = {"kind": arena.kind, "bytes": arena.size}
        if why_not_ipc is not None:
            result["verification"]["transport"]["cuda_ipc_unavailable"] = \
                hu.cap(why_not_ipc, 512)
            log(f"CUDA IPC unavailable ({why_not_ipc}); tensors go through a shared file")
        for s in sets:  # the post-timing set is written only once the timing is over
            fill_inputs(arena, s, device)
        elapsed["job_files"] = time.monotonic() - t_job
        out_bytes = [nbytes(x) for x in sets[0].ref]
        ext_path = os.path.abspath(opts.so or opts.ext_module)
        job = {
            "device": str(device),
            "rules": opts.rules,
            "extension": {"kind": "so" if opts.so else "py", "path": ext_path},
            "model_new": os.path.abspath(os.path.join(opts.candidate_dir, "model_new.py")),
            "n_sets": len(sets),
            "arena": arena.desc,
            "models": job_models,
            "sets": [{"inputs": s.slots, "outputs": s.out_slots, "model": s.model_index,
                      "may_refuse": s.may_refuse} for s in all_sets],
            "post_timing_set": post.index if post is not None else None,
            "precision": opts.precision,
            "poison_bytes": out_bytes,
            "timing": {"mode": opts.timing, "budget_ms": opts.budget_ms, "set": 0},
        }
        if opts.rules == "kernelbench":
            job["init_seed"] = init_seed  # never an input seed: those stay here
        hu.write_json_atomic(os.path.join(job_dir, "job.json"), job)
        log(f"starting the candidate ({len(sets)} input sets)")
        t_cand = time.monotonic()
        prewarmed = cand is not None
        if cand is not None:
            cand.start_job(opts.timeout)
        else:
            cand = CandidateProcess(opts.python, job_dir, candidate_env(job_dir), opts.timeout)
        result["candidate"] = {"exit_code": None, "last_stage": None, "prewarmed": prewarmed}

        # -- float64 references (while the candidate starts)
        t_ref = time.monotonic()
        models64: dict[int, torch.nn.Module | None] = {0: model64}
        why64 = why64_model
        for k, m in enumerate(extra_models, start=1):
            try:
                models64[k] = copy.deepcopy(m).double()
            except Exception as exc:
                models64[k] = None
                why64 = why64 or f"{type(exc).__name__}: {exc}"
        for s in all_sets:
            if s.ref64 is not None:  # the value-stress set's, computed with its scale
                continue
            why = compute_reference64(models64[s.model_index], s)
            why64 = why64 or why
        del models64, model64
        result["verification"]["fp64_reference"] = True if why64 is None else \
            f"unavailable: {hu.cap(why64, 512)}"
        mutated = sorted({k for s in all_sets for k in s.ref_mutated})
        result["verification"]["reference_mutates_inputs"] = mutated
        elapsed["reference"] = time.monotonic() - t_ref

        # -- verification: compare each set as it arrives
        result["stage"] = "verify"
        stage_name = "verify"
        received = 0
        candidate_failure: dict[str, Any] | None = None
        verified = False
        while True:
            try:
                msg = cand.next_message()
            except TimeoutError:
                raise EvalError("timeout", f"the candidate ran past the {opts.timeout:g} s limit "
                                           f"(in its stage "
                                           f"{result['candidate']['last_stage']!r}) and was "
                                           "killed", stage=stage_name)
            if msg is None:
                break
            mtype = msg.get("type")
            if mtype == "stage":
                result["candidate"]["last_stage"] = str(msg.get("stage"))[:64]
            elif mtype == "set":
                if msg.get("index") != received or received >= len(sets):
                    raise EvalError("protocol", "the candidate reported input sets out of order")
                s = sets[received]
                t_cmp = time.monotonic()
                try:
                    rec = check_reported(arena, s, msg, device, atol, rtol, opts.precision)
                except EvalError:
                    if s.note is not None:
                        s.note["status"] = "failed"
                    raise
                fwd = msg.get("forward_ms")
                rec["forward_ms"] = fwd if isinstance(fwd, (int, float)) else None
                result["verification"]["sets"].append(rec)
                elapsed["compare"] = elapsed.get("compare", 0.0) + time.monotonic() - t_cmp
                if s.note is not None:
                    s.note.update(status="refused" if "refused" in rec else "verified",
                                  reason=rec.get("refused"))
                if "refused" in rec:
                    result["flags"].append({
                        "kind": "derived_shape_refused",
                        "message": f"input set {s.index} ({set_label(s)}) was refused by the "
                                   f"candidate ({rec['refused']}); not a failure: the kernel "
                                   "supports fewer sizes than the reference"})
                    log(f"input set {s.index} ({s.kind}) refused by the candidate")
                else:
                    log(f"input set {s.index} ({s.kind}) ok")
                received += 1
            elif mtype == "launches":
                evidence = msg.get("evidence")
                result["verification"]["launches"] = evidence
            elif mtype == "verified":
                if received != len(sets):
                    raise EvalError("protocol", f"the candidate claimed verification after "
                                                f"{received} of {len(sets)} input sets")
                verified = True
                break
            elif mtype == "failure":
                candidate_failure = msg
                break
            elif mtype == "_protocol":
                raise EvalError("protocol", str(msg.get("message")))
        elapsed["candidate_verify"] = time.monotonic() - t_cand

        if verified and device.type == "cuda":
            why_none = check_launches(result["verification"].get("launches"), opts.rules)
            if why_none is not None:
                result["flags"].append({"kind": "launch_evidence_unavailable",
                                        "message": why_none})
        precs = [p for r in result["verification"]["sets"] for p in r.get("precision", [])
                 if r.get("precision_enforced", True)]
        if precs:
            result["verification"]["precision_observed"] = \
                "fp32" if all(p["ok"] for p in precs) else "reduced"

        cand_stats = None
        if verified:
            if opts.no_timing:
                cand.send("stop")
            else:
                result["stage"] = stage_name = "timing"
                post_rec = None
                cand.send("time")
                t_time = time.monotonic()
                cand_window = quality.Window(getattr(opts, "timing_hook", None),
                                             "candidate").open()
                log("timing the candidate")
                while True:
                    try:
                        msg = cand.next_message()
                    except TimeoutError:
                        raise EvalError("timeout", f"the candidate ran past the "
                                                   f"{opts.timeout:g} s limit while being timed "
                                                   "and was killed", stage="timing")
                    if msg is None:
                        break
                    mtype = msg.get("type")
                    if mtype == "stage":
                        result["candidate"]["last_stage"] = str(msg.get("stage"))[:64]
                    elif mtype == "timing":
                        cand_load = cand_window.close()
                        cand_stats = validate_stats(msg.get("stats"))
                        if cand_stats is not None:
                            cand_stats["host"] = cand_load
                        if post is not None and cand_stats is not None:
                            fill_inputs(arena, post, device)  # only now: unseen till timed
                            cand.send("post")
                    elif mtype == "set" and post is not None and cand_stats is not None:
                        # The forward after timing, on a set it has not seen: same checks.
                        if msg.get("index") != post.index or post_rec is not None:
                            raise EvalError("protocol", "the candidate reported an unexpected "
                                                        "input set after timing",
                                            stage="timing")
                        try:
                            post_rec = check_reported(arena, post, msg, device, atol, rtol,
                                                      opts.precision)
                        except EvalError as e:
                            e.message = ("after timing, on a fresh input set, the outputs no "
                                         "longer match (does the forward behave differently "
                                         "once it has been called many times?): " + e.message)
                            e.stage = "timing"
                            raise
                        result["verification"]["post_timing"] = post_rec
                    elif mtype == "done":
                        break
                    elif mtype == "failure":
                        candidate_failure = msg
                        break
                    elif mtype == "_protocol":
                        raise EvalError("protocol", str(msg.get("message")))
                cand_window.close()
                elapsed["candidate_timing"] = time.monotonic() - t_time

        # -- how the candidate process ended
        rc = cand.wait(min(10.0, max(1.0, cand.deadline - time.monotonic())))
        result["candidate"]["exit_code"] = rc
        if candidate_failure is not None:
            kind, message, details = sanitize_failure(candidate_failure)
            details["output_tail"] = cand.output_tail()
            raise EvalError(kind, message, details, stage=stage_name)
        if rc is None:
            raise EvalError("timeout", "the candidate stopped reporting but did not exit; "
                                       "killed", stage=stage_name)
        if rc != 0:
            raise EvalError("crash", f"the candidate process {exit_description(rc)} (in its "
                                     f"stage {result['candidate']['last_stage']!r})",
                            {"exit_code": rc, "output_tail": cand.output_tail()},
                            stage=stage_name)
        if not verified:
            raise EvalError("protocol", "the candidate exited without finishing verification",
                            {"output_tail": cand.output_tail()}, stage=stage_name)
        cand.kill()  # anything it left behind in its process group

        if opts.no_timing:
            result.update(ok=True, stage="done")
            return result
        if cand_stats is None:
            raise EvalError("timing", "the candidate reported no usable timing", stage="timing")
        if post is not None and post_rec is None:
            raise EvalError("protocol", "the candidate skipped the check after timing",
                            stage="timing")

        # -- baselines (this process), speed of light
        t_base = time.monotonic()
        key = baseline_key(task_sha, dev, opts.precision, opts.timing)
        base, cached = measure_baselines(opts, model, sets[0], device, key, log)
        elapsed["baselines"] = time.monotonic() - t_base
        cand_stats = kernel_floor(cand_stats, result["verification"].get("launches"),
                                  result["flags"])
        cand_med = cand_stats.get("median_ms")
        sol = speed_of_light(dev, sets[0], state_bytes, cand_med, base.get("flops"),
                             opts.precision)

        def speedup(b: Any) -> float | None:
            if timing.finite_stats(b) and cand_med and cand_med > 0:
                return b["median_ms"] / cand_med
            return None

        result["timing"] = {
            "mode": opts.timing,
            "precision": opts.precision,
            "eager": base["eager"],
            "compile": base["compile"],
            "candidate": cand_stats,
            "baseline_cached": cached,
            "speedup_vs_eager": speedup(base["eager"]),
            "speedup_vs_compile": speedup(base["compile"]),
            "sol": sol,
        }
        noisy = quality.noise_flag(result["timing"])
        if noisy is not None:
            result["flags"].append(noisy)
        if "bytes" in sol["flagged_by"]:
            result["flags"].append({
                "kind": "speed_of_light",
                "message": f"the candidate's median {cand_med:.4g} ms is below half the "
                           f"{sol['sol_ms']:.4g} ms that moving its inputs and outputs once "
                           "takes at peak memory bandwidth: faster than memory bandwidth "
                           "allows; not to be rewarded without review"})
        if "flops" in sol["flagged_by"]:
            result["flags"].append({
                "kind": "speed_of_light",
                "message": f"the candidate's median {cand_med:.4g} ms is below half the "
                           f"{sol['sol_flops_ms']:.4g} ms that the reference's "
                           f"{sol['flops']:.4g} FLOPs take at the device's peak "
                           f"{sol['peak_flops_kind']} tensor rate "
                           f"({sol['peak_flops_per_s']:.4g} FLOP/s): faster than the hardware's "
                           "arithmetic allows; not to be rewarded without review"})
        result.update(ok=True, stage="done")
        return result
    except EvalError as e:
        if cand is not None:
            cand.kill()
            if result.get("candidate") is not None:
                result["candidate"]["exit_code"] = cand.proc.returncode
        if e.stage:
            result["stage"] = e.stage
        details = dict(e.details)
        if e.kind in ("timeout", "protocol") and cand is not None:
            details.setdefault("output_tail", cand.output_tail())
        record = details.pop("record", None)
        if isinstance(record, dict) and isinstance(result.get("verification"), dict):
            result["verification"]["sets"].append(record)
        result["failure"] = {"kind": e.kind, "message": e.message, "details": details}
        return result
    finally:
        for note in (result.get("verification") or {}).get("derived_shapes") or []:
            if note.get("status") == "pending":
                note["status"] = "not reached"
        if cand is not None:
            cand.kill()
        if arena is not None:
            arena.close()  # after the candidate is gone
        if prefetch is not None and prefetch_next is not None:
            prefetch.start(*prefetch_next)
        if job_dir is not None and not opts.keep_temp:
            shutil.rmtree(job_dir, ignore_errors=True)
        elif job_dir is not None:
            log(f"kept the candidate directory {job_dir}")
        elapsed["total"] = time.monotonic() - t_start
        result["elapsed_s"] = elapsed


def usage_error(opts_out: str | None, message: str) -> int:
    print(f"evaluate.py: {message}", file=sys.stderr)
    if opts_out:
        result = {"schema": hu.SCHEMA_VERSION, "ok": False, "stage": "setup",
                  "failure": {"kind": "usage", "message": message, "details": {}},
                  "verification": None, "timing": None, "flags": [], "device": None,
                  "candidate": None, "elapsed_s": {}}
        try:
            hu.write_json_atomic(opts_out, result)
        except OSError:
            pass
    return 2


def run(opts: argparse.Namespace) -> int:
    """One evaluation from parsed options: checks them, evaluates, writes --out; the exit
    status of main(). harness/worker.py calls this once per job, with opts.pool set."""
    if opts.ext_module and os.environ.get(TESTING_ENV) != "1":
        return usage_error(opts.out, f"--ext-module is for tests only and needs {TESTING_ENV}=1;"
                                     " give the built extension with --so")
    if not os.path.isfile(opts.task):
        return usage_error(opts.out, f"no task file {opts.task}")
    if not os.path.isfile(os.path.join(opts.candidate_dir, "model_new.py")):
        return usage_error(opts.out, f"no model_new.py in {opts.candidate_dir}")
    ext = opts.so or opts.ext_module
    if not os.path.isfile(ext):
        return usage_error(opts.out, f"no extension file {ext}")
    if opts.seeds < 1 or opts.adversarial_sets < 0 or opts.derived_shapes < 0:
        return usage_error(opts.out, "--seeds must be >= 1, --adversarial-sets and "
                                     "--derived-shapes >= 0")
    if opts.budget_ms <= 0 or opts.timeout <= 0:
        return usage_error(opts.out, "--budget-ms and --timeout must be positive")
    if opts.atol is not None and opts.atol < 0 or opts.rtol is not None and opts.rtol < 0:
        return usage_error(opts.out, "tolerances must be >= 0")

    log = Log(opts.quiet)
    try:
        result = evaluate(opts, log)
    except Exception as exc:  # a bug here: still leave a result behind
        result = {"schema": hu.SCHEMA_VERSION, "ok": False, "stage": "setup",
                  "failure": {"kind": "harness", "message": f"{type(exc).__name__}: {exc}",
                              "details": {"traceback": hu.cap(traceback.format_exc())}},
                  "verification": None, "timing": None, "flags": [], "device": None,
                  "candidate": None, "elapsed_s": {}}
    hu.write_json_atomic(opts.out, result)
    failure = result.get("failure")
    if result.get("ok"):
        log(f"passed; result in {opts.out}")
        return 0
    kind = failure["kind"] if failure else "?"
    log(f"failed ({kind}): {failure['message'] if failure else ''}")
    return 3 if kind in ("task_error", "harness") else 1


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
