"""inputs.py: the task and one input set (trusted side): importing the task, the inputs'
domains, the random and adversarial draws (heavy-tailed values), InputSet, and the reference
outputs (float32 and float64). The sets of an evaluation are put together in sets.py; the
derived shapes are shapes.py's, the value-stress scale stress.py's.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import math
import sys
import traceback
from typing import Any, Callable

import torch

import harness_util as hu
import memplan
import model_state
from evalbase import (
    is_oom,
    EvalError, as_list, clone_arg, count_changed, same_values, task_call, to_device)


# Input domains whose inputs may be replaced by heavy-tailed mixed-sign values.
ADVERSARIAL_DOMAINS = ("real",)


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


def heavy_slice_elems() -> int:
    """Elements per slice of heavy_tailed_like's float64 work (a quarter of memplan's slice:
    several float64 buffers of a slice are alive at once, 128 MiB each). Found on a GPU:
    drawn whole, the adversarial set of a 6 GiB input took about 48 GiB of float64
    temporaries, the evaluator's peak."""
    return max(1, memplan.SLICE_ELEMS // 4)


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

    Computed in slices of heavy_slice_elems() (float64 arithmetic per slice): besides its
    result, one buffer of x's size at most (none for float32 and float64 inputs on the
    generator's device). The values depend on the generator's state alone, so a set drawn
    again from its seed is the same.
    """
    if x.numel() == 0:
        return x.clone()
    xf = x.detach().reshape(-1)
    n, chunk = xf.numel(), heavy_slice_elems()
    scale = spread(xf)
    dev = gen.device
    # The mixture's raw values, kept in x's dtype where that holds them well (half types:
    # float32) until their own spread is known.
    work = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    z = torch.empty(n, dtype=work, device=dev)
    total = total_sq = 0.0
    for st in range(0, n, chunk):
        m = min(chunk, n - st)
        a = torch.randn(m, generator=gen, dtype=torch.float64, device=dev)
        a *= torch.exp(0.75 * torch.randn(m, generator=gen, dtype=torch.float64, device=dev))
        total += float(a.sum())
        total_sq += float((a * a).sum())
        z[st:st + m] = a
        del a
    zstd = math.sqrt(max(total_sq - total * total / n, 0.0) / (n - 1)) if n > 1 else 1.0
    zstd = max(zstd, 1e-12)
    out = z if (work == x.dtype and z.device == x.device) else \
        torch.empty(n, dtype=x.dtype, device=x.device)
    for st in range(0, n, chunk):
        a = z[st:st + chunk].to(torch.float64)
        if n > 1:
            a /= zstd
        a = (a * scale).clamp_(-20.0 * scale, 20.0 * scale)
        a[xf[st:st + chunk].to(dev) == 0] = 0.0
        out[st:st + chunk] = a.to(out.device)
        del a
    return out.view(x.shape)


def spread(xf: torch.Tensor) -> float:
    """The scale heavy_tailed_like gives its values: the standard deviation of flat xf (in
    float64, a slice at a time), else the largest finite magnitude, else 1."""
    n, chunk = xf.numel(), heavy_slice_elems()
    scale = 0.0
    if n > 1:
        mean = sum(float(xf[st:st + chunk].to(torch.float64).sum())
                   for st in range(0, n, chunk)) / n
        ss = sum(float(((xf[st:st + chunk].to(torch.float64) - mean) ** 2).sum())
                 for st in range(0, n, chunk))
        scale = math.sqrt(ss / (n - 1)) if math.isfinite(ss) else math.nan
    if not math.isfinite(scale) or scale == 0.0:
        best = 0.0
        for st in range(0, n, chunk):
            a = xf[st:st + chunk].to(torch.float64)
            a = a[torch.isfinite(a)]
            if a.numel():
                best = max(best, float(a.abs().max()))
        scale = best
    if not math.isfinite(scale) or scale == 0.0:
        scale = 1.0
    return scale


def draw_inputs(task: Any, device: torch.device) -> list[Any]:
    """get_inputs(), with the device as the default for the tensors it makes (drawing on the
    GPU takes milliseconds where the CPU takes seconds for large inputs)."""
    with torch.device(device):
        raw = as_list(task_call("get_inputs()", task.get_inputs), "get_inputs()")
    return [x.detach() if isinstance(x, torch.Tensor) else x for x in raw]


class InputSet:
    def __init__(self, index: int, kind: str, drawn: list[Any] | None, device: torch.device,
                 recipe: Callable[[], list[Any]] | None = None):
        self.index = index          # the "seed_index" reported (never the seed itself)
        # "random", "adversarial", "value-stress", "shape", "derived-shape" or "post-timing"
        self.kind = kind
        self.device = device
        # How to draw it again (from its secret seed): a set of the task's own shape that a
        # memory plan streams is drawn when its turn comes and dropped once compared.
        self.recipe = recipe
        # pristine, never mutated; None while not drawn (a streamed set: materialize())
        self.orig: list[Any] | None = None if drawn is None else \
            [to_device(clone_arg(x), device) for x in drawn]
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
        self.model_seed: int | None = None  # the secret seed it was built from
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

    def materialize(self) -> None:
        """Draws a streamed set again from its recipe (its own secret seed: the same values
        as any earlier draw), scaled as chosen for a value-stress set."""
        if self.orig is not None:
            return
        assert self.recipe is not None, "a set with neither inputs nor a recipe"
        drawn = self.recipe()
        if self.scale is not None:
            drawn = [x * self.scale if k in self.scaled_inputs else x
                     for k, x in enumerate(drawn)]
        self.orig = [to_device(clone_arg(x), self.device) for x in drawn]

    def release(self) -> None:
        """Drops the set's tensors (inputs, references) once it has been compared or before
        its turn comes; materialize() draws it again."""
        if self.recipe is None:
            return
        self.orig, self.ref, self.ref64 = None, [], None


def random_recipe(task: Any, device: torch.device, seed: int) -> Callable[[], list[Any]]:
    """get_inputs() drawn from a secret seed, as often as asked (the same values each time)."""
    def draw() -> list[Any]:
        torch.manual_seed(seed)
        return draw_inputs(task, device)
    return draw


def adversarial_recipe(task: Any, device: torch.device, seed: int) -> Callable[[], list[Any]]:
    """A random draw from a secret seed with its eligible inputs (those of real_inputs)
    replaced by heavy-tailed values (heavy_tailed_like, its generator seeded from the same
    seed)."""
    domains = input_domains(task)

    def draw() -> list[Any]:
        torch.manual_seed(seed)
        raw = draw_inputs(task, device)
        gen = torch.Generator(device=device).manual_seed(seed ^ 0x5DEECE66D)
        for k in real_inputs(raw, domains)[0]:
            raw[k] = heavy_tailed_like(raw[k], gen)
        return raw
    return draw


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


def cpu_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A model's state_dict, copied to the CPU (what the candidate loads)."""
    return {k: v.detach().to("cpu").clone() for k, v in model.state_dict().items()}


def state_after(model: torch.nn.Module, s: InputSet) -> list[torch.Tensor]:
    """The state the forward just left (model_state: the attributes the task's forward
    changes), compared as outputs after the forward's own."""
    try:
        return model_state.values(model, model_state.tracked(model))
    except model_state.MissingState as exc:
        raise EvalError("task_error", f"Model lost its state attribute {exc} in the forward on "
                                      f"input set {s.index}", stage="setup")


def compute_reference(model: torch.nn.Module, s: InputSet, device: torch.device) -> int:
    """Fills s.ref and s.ref_mutated; returns the forward's own peak device memory above its
    arguments (its outputs and temporaries; 0 on the CPU)."""
    args = [x.to(device, copy=True) if isinstance(x, torch.Tensor) else x for x in s.orig]
    model_state.as_built(model)
    base = memplan.forward_peak_begin(device)
    with torch.no_grad():
        out = task_call(f"Model.forward on input set {s.index}", lambda: model(*args))
    peak = memplan.forward_peak_end(device, base)
    try:
        s.ref = [x.detach() if isinstance(x, torch.Tensor) else x
                 for x in hu.flatten_outputs(out)] + state_after(model, s)
    except TypeError as exc:
        raise EvalError("task_error", f"Model's output: {exc}", stage="setup")
    del out
    s.ref_mutated = [k for k, (a, o) in enumerate(zip(args, s.orig))
                     if isinstance(o, torch.Tensor)
                     and not (a.shape == o.shape and a.dtype == o.dtype
                              and count_changed(a, o)[0] == 0)]
    return int(peak)


def compute_reference64(model64: torch.nn.Module | None, s: InputSet,
                        device: torch.device | None = None) -> str | None:
    """Fills s.ref64, computed on `device` (default: where the set's inputs are); returns why
    it is unavailable, or None."""
    if model64 is None:
        return "no float64 model"
    if device is None:
        device = next((x.device for x in s.orig if isinstance(x, torch.Tensor)), s.device)
    args = [x.to(device, torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point()
            else (x.to(device, copy=True) if isinstance(x, torch.Tensor) else x)
            for x in s.orig]
    model_state.as_built(model64)
    try:
        with torch.no_grad():
            out = model64(*args)
        del args
        s.ref64 = [x.detach() if isinstance(x, torch.Tensor) else x
                   for x in hu.flatten_outputs(out)] + state_after(model64, s)
        del out
    except Exception as exc:  # the float64 reference is best effort
        s.ref64 = None
        if is_oom(exc):
            raise
        return f"{type(exc).__name__}: {exc}"
    return check_reference64(s)


def check_reference64(s: InputSet) -> str | None:
    """Drops a float64 reference with another number of outputs than the float32 one (not
    checked while the float32 reference is not made yet: evaluate's restore() makes it
    second)."""
    if s.ref64 is not None and s.ref and len(s.ref64) != len(s.ref):
        s.ref64 = None
        return "the float64 model returned a different number of outputs"
    return None
