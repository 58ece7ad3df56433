"""shapes.py: input shapes beside get_inputs()'s (trusted side, issue 12 item 3): the task's
EXTRA_SHAPES, or, where it declares none, shapes derived from its module-level sizes (the
leading size changed, an odd size), each checked against the reference before it is used, and
the models those shapes need.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import torch

import harness_util as hu
from evalbase import EvalError, Log, as_list, nbytes, secret_seed, task_call
from inputs import InputSet, compute_reference, draw_inputs, same_args


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
