"""inputs.py: the task and its input sets (trusted side): importing the task, drawing the
random, adversarial and value-stress sets, the EXTRA_SHAPES and derived shapes, the reference
outputs (float32 and float64), and SetPrefetch (the next job's sets drawn ahead).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import math
import sys
import threading
import traceback
from typing import Any, Callable

import torch

import harness_util as hu
import memplan
import model_state
from evalbase import (
    is_oom,
    EvalError, Log, as_list, clone_arg, count_changed, nbytes, same_values, secret_seed,
    task_call, to_device)


# Input domains whose inputs may be replaced by heavy-tailed mixed-sign values.
ADVERSARIAL_DOMAINS = ("real",)
# Shapes a task may declare in EXTRA_SHAPES.
MAX_EXTRA_SHAPES = 8
# Derived shapes (a task without EXTRA_SHAPES): how many, and how many of the module-level ints
# that get_inputs() reads are tried as sizes.
DEFAULT_DERIVED_SHAPES = 2
MAX_SIZE_PROBES = 8
# A derived set's inputs stay below this share of the task's own (or DERIVED_MIN_CAP_BYTES,
# whichever is larger): the size is quartered again until they do. A derived set has no recipe
# and stays whole on the device whatever the memory plan; on a task of 16 GiB of inputs two
# sets at a quarter of a dimension would hold 8 GiB (issue 22).
DERIVED_MAX_SHARE = 16
DERIVED_MIN_CAP_BYTES = 64 << 20
# Value stress: the floating inputs scaled by the largest of these factors at which the
# reference stays finite, in float64 and in float32 alike.
STRESS_FACTORS = (1000.0, 100.0, 10.0)


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


def draw_sets(task: Any, n_random: int, n_adv: int, device: torch.device, log: Log,
              n_derived: int = 0, stress: int = 0,
              defer: bool = False) -> tuple[list[InputSet], dict[str, Any]]:
    """The evaluation's input sets, in order: n_random from get_inputs(), n_adv adversarial,
    the value-stress set (stress: drawn here, scaled by choose_stress_scale once the reference
    model exists), the task's EXTRA_SHAPES, or else up to n_derived derived shapes. Returns the
    sets and what the result's verification section says about them: "adversarial",
    "value_stress", "derived_shapes" (one entry per derivation, with its status) and
    "derived_shapes_note" (why there are none, or None). Every random, adversarial and
    value-stress set keeps a recipe (its secret seed) to draw it again; with defer, the random
    and adversarial sets after the first are not drawn here (InputSet.materialize)."""
    sets: list[InputSet] = []
    for i in range(n_random):
        rec = random_recipe(task, device, secret_seed())
        sets.append(InputSet(i, "random", None if defer and i else rec(), device, rec))
    domains = input_domains(task)
    info: dict[str, Any] = {"inputs": [], "left_as_drawn": {}}
    for a in range(n_adv):
        # Which inputs change depends on their dtypes only: set 0's draw tells.
        changed, left = real_inputs(sets[0].orig or [], domains) if sets else ([], {})
        rec = adversarial_recipe(task, device, secret_seed())
        raw = None if defer and sets else rec()
        if raw is not None:
            changed, left = real_inputs(raw, domains)
        info["inputs"], info["left_as_drawn"] = changed, left
        if not changed:
            info["skipped"] = "no floating-point input may take adversarial values"
            log("adversarial set skipped: no eligible input")
            break
        sets.append(InputSet(n_random + a, "adversarial", raw, device, rec))
    stress_info: dict[str, Any] | None = None
    if stress:
        rec = random_recipe(task, device, secret_seed())
        raw = rec()
        eligible, left = real_inputs(raw, domains)
        stress_info = {"scale": None, "inputs": eligible, "left_as_drawn": left}
        if eligible:
            st = InputSet(len(sets), "value-stress", raw, device, rec)
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
    """s.model = Model(*s.init) on the device, from a fresh secret seed kept in s.model_seed
    (EvalError "task_error" if the task refuses)."""
    s.model, s.model_seed = model_at(task, s.init or [], s.overrides or {}, device)


def model_at(task: Any, init: list[Any], sizes: dict[str, int],
             device: torch.device) -> tuple[torch.nn.Module, int]:
    """Model(*init) (the init inputs at some sizes) on the device, in eval mode, from a fresh
    secret seed, and that seed (under KernelBench's rules ModelNew is built from it too);
    EvalError "task_error" if the task refuses."""
    seed = secret_seed()
    torch.manual_seed(seed)
    what = "Model(*get_init_inputs()) at " + ", ".join(f"{k}={v}" for k, v in sizes.items())
    m = task_call(what, lambda: task.Model(*init))
    return task_call(f"moving {what} to the device", lambda: m.to(device).eval()), seed


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
    cap = max(base_bytes // DERIVED_MAX_SHARE, DERIVED_MIN_CAP_BYTES)
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
            while sum(nbytes(x) for x in drawn) > cap and d > 1 and \
                    (smaller := smaller_odd(d)) is not None and smaller < d:
                d, sizes = smaller, {name: smaller}
                del drawn
                torch.manual_seed(secret_seed())
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
        model = seed = None
        if own is not None:  # built now, so that a size its constructor refuses is passed over
            try:
                model, seed = model_at(task, own, sizes, device)
            except EvalError as e:
                notes.append({"sizes": sizes, "status": "dropped", "own_model": True,
                              "reason": hu.cap(f"the task refuses it: {e.message}", 512)})
                continue
        if batch is None and lead is not None and (lead, 0) in changed:
            batch = (sizes, drawn, own, model, seed)
        else:
            # The largest size first; on a tie one that leaves the model as it is (cheaper).
            key = (getattr(task, name), own is None)
            if odd is None or key > odd[0]:
                odd = (key, sizes, drawn, own, model, seed)
        del drawn, model
    chosen = [c for c in (batch, odd[1:] if odd else None) if c is not None][:limit]
    sets: list[InputSet] = []
    for sizes, drawn, own, model, seed in chosen:
        s = InputSet(first_index + len(sets), "derived-shape", drawn, device)
        s.overrides, s.init, s.model, s.derived = sizes, own, model, {"sizes": sizes}
        s.model_seed = seed
        sets.append(s)
    if not sets:
        tensors = [x for x in base if isinstance(x, torch.Tensor) and x.dim() >= 1]
        leads = {int(x.shape[0]) for x in tensors}
        size = smaller_odd(next(iter(leads))) if len(leads) == 1 else None
        lead_n = next(iter(leads)) if len(leads) == 1 else 0
        while size is not None and size > 1 and lead_n and \
                base_bytes * size // lead_n > cap and (smaller := smaller_odd(size)) and \
                smaller < size:
            size = smaller
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
    qualifies.

    Memory: of the unscaled reference only what the checks need is kept (Unscaled: where
    each output is finite, its RMS), and a rejected factor's inputs and references are
    dropped before the next factor's are made; beside set 0 this holds the unscaled inputs,
    a scaled copy, and the float64 forward or the float32 one beside the float64 reference
    (the setup phase's peak, memplan.setup_bytes: on a 12 GiB ReLU task the whole unscaled
    reference stayed alive here too)."""
    base = s.orig
    compute_reference(model, s, device)  # the unscaled draw: finite positions, magnitudes
    base_out = [unscaled(b) for b in s.ref]
    s.ref = []
    tried = []
    for f in STRESS_FACTORS:
        s.orig, s.ref, s.ref64 = None, [], None  # the last factor's, gone before the next
        s.orig = [x * f if k in s.scaled_inputs else x for k, x in enumerate(base)]
        why = None
        if any(bool((torch.isfinite(base[k]) & ~torch.isfinite(s.orig[k])).any())
               for k in s.scaled_inputs):
            why = "the scaled inputs overflow their dtype"
        else:
            # The float64 forward first, as restore() does: it is the largest, and runs while
            # nothing else of this factor's is alive but its inputs.
            if model64 is not None:
                compute_reference64(model64, s, device)
            try:
                compute_reference(model, s, device)
                check_reference64(s)
            except EvalError as e:
                why = f"the reference raised: {e.message}"
        if why is None:
            why = stress_rejection(base_out, s.ref, s.ref64)
        if why is None:
            s.scale, s.enforce_precision = f, False
            s.atol_scale = [growth(b, r) for b, r in zip(base_out, s.ref)]
            info.update(scale=f, atol_scale=s.atol_scale, float64_checked=s.ref64 is not None)
            if tried:
                info["rejected"] = tried
            return True
        tried.append({"scale": f, "why": hu.cap(why, 300)})
    s.orig, s.ref, s.ref64 = base, [], None
    info.update(rejected=tried, skipped=f"no factor of {list(STRESS_FACTORS)} keeps the "
                                        "reference finite")
    return False


class Unscaled:
    """What the value-stress checks keep of one tensor output of the unscaled reference: its
    shape, where it is finite (one byte per element, flat) and the RMS of its finite
    elements."""

    def __init__(self, b: torch.Tensor):
        b = b.detach()
        self.shape = b.shape
        self.finite = torch.isfinite(b).reshape(-1)
        self.rms = rms_finite(b)


def unscaled(b: Any) -> Any:
    """An output of the unscaled reference as the checks keep it (a non-tensor as it is)."""
    return Unscaled(b) if isinstance(b, torch.Tensor) else b


def stress_rejection(base_out: list[Any], ref: list[Any], ref64: list[Any] | None) -> str | None:
    """Why a scaled set's references are unusable (choose_stress_scale), or None; base_out is
    the unscaled reference's outputs as unscaled() keeps them. Outputs are checked in flat
    slices of memplan.SLICE_ELEMS elements."""
    for j, (b, r) in enumerate(zip(base_out, ref)):
        if not isinstance(r, torch.Tensor):
            if isinstance(r, float) and isinstance(b, float) and math.isfinite(b) and \
                    not math.isfinite(r):
                return f"output {j} of the reference is not finite"
            continue
        if not r.is_floating_point():
            continue
        if not isinstance(b, Unscaled) or b.shape != r.shape:
            return f"output {j}'s shape depends on the input values"
        r64 = ref64[j] if ref64 is not None else None
        with64 = isinstance(r64, torch.Tensor) and r64.shape == r.shape
        rf = r.reshape(-1)
        r64f = r64.reshape(-1) if with64 else None
        chunk = memplan.SLICE_ELEMS
        for st in range(0, rf.numel(), chunk):
            end = st + chunk
            finite = b.finite[st:end].to(rf.device)
            if r64f is not None:
                fin_c = torch.isfinite(r64f[st:end].to(r.dtype))
                if bool((finite & ~fin_c).any()):
                    return (f"output {j} of the float64 reference is not finite in {r.dtype} "
                            "where the unscaled one is")
                if not bool((torch.isfinite(rf[st:end]) == fin_c).all()):
                    return (f"output {j} of the {r.dtype} reference is not finite where the "
                            "float64 one is (the task's own reference cannot be trusted at that "
                            "scale)")
            elif bool((finite & ~torch.isfinite(rf[st:end])).any()):
                return f"output {j} of the reference is not finite where the unscaled one is"
    return None


def rms_finite(t: torch.Tensor) -> float:
    """The RMS of a tensor's finite elements (0 when none), in float64, a slice at a time."""
    tf = t.detach().reshape(-1)
    total, n, chunk = 0.0, 0, memplan.SLICE_ELEMS
    for st in range(0, tf.numel(), chunk):
        x = tf[st:st + chunk].to(torch.float64)
        x = x[torch.isfinite(x)]
        total += float((x * x).sum())
        n += x.numel()
        del x
    return math.sqrt(total / n) if n else 0.0


def growth(b: Any, r: Any) -> float:
    """How much an output's RMS (over finite elements) grew from b (the unscaled output, or
    what unscaled() keeps of it) to r; at least 1."""
    if not (isinstance(r, torch.Tensor) and r.is_floating_point() and r.numel()):
        return 1.0
    if isinstance(b, torch.Tensor):
        b = Unscaled(b)
    if not isinstance(b, Unscaled):
        return 1.0
    rb = b.rms
    rr = rms_finite(r)
    return max(1.0, rr / rb) if rb > 0 and math.isfinite(rr / rb) else 1.0


def cpu_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A model's state_dict, copied to the CPU (what the candidate loads)."""
    return {k: v.detach().to("cpu").clone() for k, v in model.state_dict().items()}


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

    def held_bytes(self) -> int:
        """Device bytes the drawn sets hold (after wait())."""
        if self._result is None:
            return 0
        return sum(nbytes(x) for s in self._result[0] for x in (s.orig or [])
                   if isinstance(x, torch.Tensor) and x.device.type != "cpu")

    def drop(self) -> None:
        """Forgets the drawn sets (the next job draws its own)."""
        self.wait()
        self._key, self._result = None, None

    def take(self, key: tuple) -> tuple[list[InputSet], dict[str, Any]] | None:
        self.wait()
        got = self._result if self._key == key else None
        self._key, self._result = None, None
        return got


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
