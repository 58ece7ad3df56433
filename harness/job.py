"""job.py: the candidate's job (trusted side): the model files it loads and the arena's layout
(where each input set's inputs and outputs lie), copying tensors in and out of it, and the
footprint a memory plan is chosen from (footprint_of).
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch

import arena as ar
import memplan
from evalbase import EvalError, cpu_copy, nbytes, sync
from inputs import InputSet


def write_model(job_dir: str, k: int, init: list[Any], state: dict[str, Any]) -> dict[str, str]:
    """The job's model k for the candidate: its init inputs and state_dict, as files in
    job_dir (init_inputs.pt and state_dict.pt for the task's own, k = 0); returns their names."""
    sfx = f"_{k}" if k else ""
    files = {"init_inputs": f"init_inputs{sfx}.pt", "state_dict": f"state_dict{sfx}.pt"}
    torch.save([cpu_copy(x) for x in init], os.path.join(job_dir, files["init_inputs"]))
    torch.save(state, os.path.join(job_dir, files["state_dict"]))
    return files


def input_value(x: Any, s_index: int, k: int) -> Any:
    """A non-tensor input as it travels in job.json."""
    if x is None or isinstance(x, (bool, int, str)) or \
            (isinstance(x, float) and math.isfinite(x)):
        return x
    raise EvalError("task_error", f"get_inputs() item {k} is a {type(x).__name__}: inputs "
                                  "must be tensors, finite numbers, strings or None",
                    {"set": s_index, "input": k}, stage="setup")


def _take_slots(layout: ar.Layout, s: InputSet) -> tuple[list[dict[str, Any]],
                                                         list[dict[str, Any]]]:
    """Slots for set s's tensor inputs and Model-shaped outputs (sized from its reference),
    taken from layout; non-tensor inputs travel as values."""
    ins = [{"kind": "tensor", "offset": layout.take(nbytes(x)), "dtype": str(x.dtype),
            "shape": list(x.shape)} if isinstance(x, torch.Tensor) else
           {"kind": "value", "value": input_value(x, s.index, k)}
           for k, x in enumerate(s.orig)]
    outs = [{"offset": layout.take(nbytes(r)), "nbytes": nbytes(r)}
            if isinstance(r, torch.Tensor) else {"offset": None, "nbytes": 0} for r in s.ref]
    return ins, outs


def lay_out(sets: list[InputSet]) -> int:
    """Gives every set's tensor inputs and Model-shaped outputs a slot in the arena (outputs
    sized from the set's reference); returns the arena's size."""
    layout = ar.Layout()
    for s in sets:
        s.slots, s.out_slots = _take_slots(layout, s)
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


def lay_out_streamed(resident: list[InputSet], rotation: list[InputSet], window: int,
                     template: InputSet) -> int:
    """The arena of a memory plan that streams sets (memplan.Plan.window): the resident sets
    (derived and extra shapes, and set 0 unless it is in the rotation) each get their own
    slots; the sets of the rotation (of the task's own shape, laid out like `template`, set 0;
    under a lazy plan set 0 itself comes first) share `window` groups of slots, the k-th using
    group k % window. Returns the arena's size."""
    layout = ar.Layout()
    for s in resident:
        s.slots, s.out_slots = _take_slots(layout, s)
    groups = [_take_slots(layout, template) for _ in range(max(1, window))]
    for k, s in enumerate(rotation):
        ins, outs = groups[k % len(groups)]
        s.slots = [dict(x) for x in ins]
        s.out_slots = [dict(o) for o in outs]
    return layout.size


def check_streamed(s: InputSet, outputs: bool = True) -> str | None:
    """Why a streamed set, drawn now, does not fit the slots laid out for it from set 0 (its
    inputs' or, with outputs, the reference outputs' sizes differ), or None."""
    assert s.orig is not None
    if len(s.orig) != len(s.slots) or outputs and len(s.ref) != len(s.out_slots):
        return "its number of inputs or outputs differs from set 0's"
    for k, (x, slot) in enumerate(zip(s.orig, s.slots)):
        if isinstance(x, torch.Tensor) != (slot["kind"] == "tensor"):
            return f"input {k} is a tensor in one draw and not in the other"
        if isinstance(x, torch.Tensor) and (str(x.dtype) != slot["dtype"]
                                            or list(x.shape) != slot["shape"]):
            return f"input {k}'s shape or dtype differs from set 0's"
        if not isinstance(x, torch.Tensor) and input_value(x, s.index, k) != slot["value"]:
            return f"input {k}'s value differs from set 0's"
    for j, (r, o) in enumerate(zip(s.ref if outputs else [], s.out_slots)):
        if nbytes(r) != o["nbytes"]:
            return f"the reference's output {j} has another size than on set 0"
    return None


def footprint_of(sets: list[InputSet], streamed: list[InputSet], state_bytes: int,
                 ref_peak: int) -> memplan.Footprint:
    """The task's footprint from set 0 (inputs and reference outputs computed; ref_peak, the
    reference forward's own peak) and the sets that stay resident whatever the plan (derived and
    extra shapes: their arena slots, estimated as twice their inputs since their outputs are not
    computed yet; memplan doubles it where their copies and references stay on the device)."""
    s0 = sets[0]
    tensors = [r for r in s0.ref if isinstance(r, torch.Tensor)]
    ids = {id(s) for s in streamed}
    extra = sum(2 * sum(nbytes(x) for x in (s.orig or [])) for s in sets[1:]
                if id(s) not in ids)
    return memplan.Footprint(
        input_bytes=sum(nbytes(x) for x in s0.orig or []),
        output_bytes=sum(nbytes(r) for r in tensors), param_bytes=state_bytes,
        ref_peak_bytes=ref_peak, float_output=any(r.is_floating_point() for r in tensors),
        max_output_elems=max((r.numel() for r in tensors), default=0),
        n_streamed=len(streamed), resident_extra_bytes=extra)
