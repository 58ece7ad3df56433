"""stress.py: the value-stress set's scale (trusted side, issue 12 item 3): the floating inputs
scaled far beyond get_inputs()'s range, by the largest factor at which the reference stays
finite, so that numerically unstable shortcuts fail verification.
"""

from __future__ import annotations

import math
from typing import Any

import torch

import harness_util as hu
import memplan
from evalbase import EvalError
from inputs import InputSet, check_reference64, compute_reference, compute_reference64


# Value stress: the floating inputs scaled by the largest of these factors at which the
# reference stays finite, in float64 and in float32 alike.
STRESS_FACTORS = (1000.0, 100.0, 10.0)


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
