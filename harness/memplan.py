"""memplan.py: the evaluator's GPU memory plan for one job (trusted side).

A job's device memory is the task's footprint times how much of it is alive at once. The
footprint is measured on input set 0 (Footprint: its inputs, the reference's outputs, the
parameters, and the reference forward's own peak above its arguments, outputs included, from
torch.cuda.max_memory_allocated). A plan says how many of the streamed input sets (random,
adversarial, value-stress, post-timing: all of the task's own shape) are resident at once
beside set 0 (`window`), and whether the sets drawn from a recipe keep anything besides their
arena slots (`lazy`: they keep nothing; their pristine inputs are drawn again from their secret
seeds and their references computed again when their outputs are compared, set 0 shares the
first group's slots and is written again before the timing, and the candidate's freed memory
is poisoned with one block per output rather than two and a large one).
make_plans() lists the plans from the roomiest (everything resident: the evaluation as it always
ran) to the smallest (one streamed set at a time, lazy), and last, for tasks with floating
outputs, the lean plan: lazy without the float64 reference (whose forward, in float64, is the
largest transient of the others: twice the inputs and the reference's peak; the report then says
`fp64_reference: "unavailable: ..."` and the precision against float64 is not measured). choose()
takes the first plan with the float64 reference that fits both the GPU's free memory
(torch.cuda.mem_get_info) with the candidate's share left over and the comfort bound
(COMFORT_FACTOR times the footprint plus COMFORT_SLACK), else the smallest of those that fits
the free memory, else the lean plan where it fits. None fitting: the task is refused up front with the numbers
(too_large_message). An out-of-memory error in the evaluator's own work, or one of the
candidate's while it was inside its budget, retries with the next smaller plan; after the
smallest it is an infrastructure error, never the candidate's failure.

The constants come from the H200 measurements of docs/BENCHMARKS.md (bench/kb_memory.py).
Pure arithmetic on byte counts, except the device measurements; at the end, how a candidate's
out-of-memory error reads against its budget (oom_within_budget, candidate_oom_note).
"""

from __future__ import annotations

import gc
import re
from dataclasses import asdict, dataclass
from typing import Any

import torch

GIB = 1 << 30
MIB = 1 << 20
# What no plan can shrink: the CUDA contexts' own memory beside the tensors, the caching
# allocators' rounding and fragmentation, cuBLAS/cuDNN workspaces.
FIXED_OVERHEAD = GIB
# The candidate process's CUDA context and PyTorch's start-up allocations.
CANDIDATE_CONTEXT = GIB // 2
# Every pass over a large tensor works on flat slices of at most this many elements, so that
# its temporaries stay bounded whatever the task's size: the comparisons (float64
# differences, masks, precision sums, a reference slice moved in: about
# COMPARE_BYTES_PER_ELEM bytes per element of the slice alive at once), the input-mutation
# counts (evalbase.count_changed), the value-stress checks and, a quarter of it at a time,
# the adversarial set's float64 work (inputs.heavy_tailed_like). Read when used, so a test
# can make it small and a small task stand for a large one.
SLICE_ELEMS = 1 << 26
# Counted in CPU mode (tests/py/test_memory_phases.py): compare_tensor keeps three float64
# and seven bool temporaries of its slice alive at once (31 bytes), precision_record_sliced
# four float64 ones.
COMPARE_BYTES_PER_ELEM = 32
# Device memory a worker may keep between jobs for the next job's prefetched input sets.
PREFETCH_BUDGET = 4 * GIB
# A plan is preferred when it needs at most this many footprints plus the slack (issue 22's
# bound: about 3x the task's footprint plus a fixed overhead); when none keeps to it, the
# smallest plan is taken.
COMFORT_FACTOR = 3
COMFORT_SLACK = 8 * GIB
# The candidate's poisoning (candidate._poison): per output size, two blocks (one under a
# lazy plan), and one more block of twice the outputs' total clamped to [min, max].
POISON_MIN = 32 * MIB
POISON_MAX = 8 * GIB
POISON_MAX_LEAN = GIB


@dataclass
class Footprint:
    """One input set's bytes at the task's own shape, and the model's."""
    input_bytes: int = 0       # set 0's tensor inputs
    output_bytes: int = 0      # the reference's tensor outputs on set 0
    param_bytes: int = 0       # Model's state_dict
    ref_peak_bytes: int = 0    # the reference forward's peak above its arguments (outputs in)
    float_output: bool = True  # some output is floating (a float64 reference is made)
    max_output_elems: int = 0  # the largest output's elements (the comparison's slice)
    n_streamed: int = 0        # random, adversarial, value-stress and post-timing sets
    resident_extra_bytes: int = 0  # derived and extra-shape sets (their inputs and outputs)

    def set_bytes(self) -> int:
        return self.input_bytes + self.output_bytes


@dataclass
class Plan:
    level: int          # 0: everything resident (the evaluation as it always ran)
    window: int         # streamed sets resident at once beside set 0 (>= 1)
    need_bytes: int     # what this plan needs on the device, the candidate's share included
    trusted_bytes: int  # of which the evaluator's own (the rest is the candidate's budget)
    lazy: bool = False  # recipe sets keep only their arena slots (drawn and computed again)
    float64: bool = True  # a float64 reference is made (False: the lean plan)

    @property
    def chunked(self) -> bool:
        return self.level > 0

    @property
    def poison(self) -> dict[str, int]:
        """job.json's "poison" (candidate._poison): copies per output size, the large block's
        bounds."""
        return {"copies": 1 if self.lazy else 2, "min_bytes": POISON_MIN,
                "max_bytes": POISON_MAX_LEAN if self.lazy else POISON_MAX}


def poison_bytes(fp: Footprint, lazy: bool) -> int:
    out = fp.output_bytes
    big = min(max(2 * out, POISON_MIN), POISON_MAX_LEAN if lazy else POISON_MAX)
    return (1 if lazy else 2) * out + big


def _per_set(fp: Footprint, lazy: bool) -> int:
    """A resident set on the device: its arena slots (inputs and outputs), and unless the plan
    is lazy its pristine inputs, its float32 reference and its float64 reference."""
    slots = fp.input_bytes + fp.output_bytes
    if lazy:
        return slots
    ref64 = 2 * fp.output_bytes if fp.float_output else 0
    return slots + fp.input_bytes + fp.output_bytes + ref64


def candidate_bytes(fp: Footprint, lazy: bool = False) -> int:
    """The candidate's share: its context, its copy of the parameters, the copy of the inputs
    each timed call gets (timing.varied_copies; one alive at a time), and a forward (its peak,
    outputs included; while timing, beside the copy of one timed call's outputs that the
    timed-call check keeps, asked for unless the plan is lazy) or the poisoned blocks,
    whichever is larger: the forward's outputs reuse the poisoned blocks."""
    timed_copy = 0 if lazy else fp.output_bytes
    forward = max(fp.ref_peak_bytes + timed_copy, poison_bytes(fp, lazy))
    return CANDIDATE_CONTEXT + fp.param_bytes + fp.input_bytes + forward


def trusted_bytes(fp: Footprint, window: int, lazy: bool, float64: bool = True) -> int:
    """The evaluator's share under a plan: the model (and its float64 copy), set 0 and the
    resident extra sets (derived and extra shapes), `window` streamed sets, and the largest
    transient: a reference forward (a copy of the inputs and its peak), a float64 reference
    forward (its inputs and peak in float64) or a comparison (the candidate's outputs copied
    out of the arena, the slices' temporaries). Under a lazy plan the set compared is drawn
    again and its references made then, in this order (evaluate's restore()): its inputs stay
    alive throughout, the float64 forward runs first, then the float32 one beside the float64
    reference, then the comparison beside both references. Without float64 (the lean plan)
    there is no float64 copy of the model, forward or reference. The setup, before the arena
    exists, is counted too (setup_bytes): under a lazy plan it can be the larger."""
    f64 = fp.float_output and float64
    params64 = 2 * fp.param_bytes if f64 else 0
    forward = fp.input_bytes + fp.ref_peak_bytes
    fp64_forward = 2 * forward if f64 else 0
    ref64 = 2 * fp.output_bytes if f64 else 0
    compare = fp.output_bytes + COMPARE_BYTES_PER_ELEM * min(fp.max_output_elems,
                                                             SLICE_ELEMS)
    # The derived and extra-shape sets have no recipe: kept whole whatever the plan (their
    # arena slots, pristine inputs and references, and float64 references: about their outputs
    # twice over, counted as their whole estimate).
    extra = (3 if f64 else 2) * fp.resident_extra_bytes
    if lazy:  # set 0 takes the first group's slots: nothing of it is kept besides them
        resident = window * _per_set(fp, True) + extra
        transient = fp.input_bytes + max(fp64_forward, ref64 + forward,
                                         ref64 + fp.output_bytes + compare)
    else:
        resident = (1 + window) * _per_set(fp, False) + extra
        transient = max(fp64_forward, forward, compare)
    return fp.param_bytes + params64 + max(resident + transient, setup_bytes(fp, f64))


def setup_bytes(fp: Footprint, f64: bool) -> int:
    """The setup's peak beside the model (stress.choose_stress_scale, the value-stress set's
    scale chosen): set 0's inputs and reference and the derived sets' (their inputs and
    references), the unscaled draw and where its reference is finite (a byte per element), a
    scaled copy, and on it the float64 forward (inputs and peak in float64), then the float32
    one (a copy of the inputs and its peak) beside the float64 reference. Counted in CPU mode
    by tests/py/test_memory_phases.py (a ReLU task: 8.7 input sizes with float64, 6.8
    without)."""
    forward = fp.input_bytes + fp.ref_peak_bytes
    ref64 = 2 * fp.output_bytes if f64 else 0
    stress = 2 * fp.input_bytes + fp.max_output_elems + max(
        ref64 + forward, 2 * forward if f64 else 0)
    return fp.set_bytes() + fp.resident_extra_bytes + stress


def _plan(fp: Footprint, level: int, window: int, lazy: bool, float64: bool = True) -> Plan:
    t = trusted_bytes(fp, window, lazy, float64)
    return Plan(level, window, t + candidate_bytes(fp, lazy) + FIXED_OVERHEAD, t, lazy,
                float64)


def make_plans(fp: Footprint) -> list[Plan]:
    """From the roomiest to the smallest: every streamed set resident (level 0), then windows
    halved down to 1, then window 1, lazy; then, where outputs are floating, the lean plan
    (window 1, lazy, no float64 reference)."""
    n = max(1, fp.n_streamed)
    windows = [n]
    while windows[-1] > 1:
        windows.append(max(1, windows[-1] // 2))
    shapes = [(w, False, True) for w in windows] + [(1, True, True)]
    if fp.float_output:
        shapes.append((1, True, False))
    return [_plan(fp, level, w, lazy, f64) for level, (w, lazy, f64) in enumerate(shapes)]


def comfort_bytes(fp: Footprint) -> int:
    return COMFORT_FACTOR * fp.set_bytes() + COMFORT_SLACK


def choose(fp: Footprint, free: int | None, min_level: int = 0) -> Plan | None:
    """The first plan from min_level on that fits `free` bytes and the comfort bound, else the
    smallest with a float64 reference that fits `free`, else the lean plan when it fits (None:
    no limit known, the CPU: the roomiest); None when none fits. A roomier plan that overshoots the bound would leave the device nearly full on the
    strength of an estimate; the smallest keeps the most in reserve."""
    plans = make_plans(fp)[min_level:]
    if free is None:
        return plans[0] if plans else None
    fitting = [p for p in plans if p.need_bytes <= free]
    full = [p for p in fitting if p.float64]
    comfy = [p for p in full if p.need_bytes <= comfort_bytes(fp)]
    if comfy:
        return comfy[0]
    # The float64 reference is dropped only where no plan with it fits (or after one failed).
    return full[-1] if full else (fitting[-1] if fitting else None)


def forced(fp: Footprint, window: int, lazy: bool = False, float64: bool = True) -> Plan:
    """The plan of evaluate.py --memory-window (and --memory-lazy, --memory-lean): `window`
    streamed sets at a time (level 1, streamed even when all would fit), lazy with lazy,
    without the float64 reference unless float64."""
    w = max(1, min(window, max(1, fp.n_streamed)))
    return _plan(fp, 1, w, lazy, float64)


def smallest(fp: Footprint) -> Plan:
    return make_plans(fp)[-1]


def gib(n: int | float | None) -> str:
    return "?" if n is None else f"{n / GIB:.2f} GiB"


def too_large_message(fp: Footprint, free: int) -> str:
    p = smallest(fp)
    return (f"the task needs {gib(p.need_bytes)} of GPU memory even with the smallest memory "
            f"plan (one input set at a time, drawn again and its references made when compared"
            f"{'' if p.float64 else ', no float64 reference'}: the evaluator "
            f"{gib(p.trusted_bytes)}, the candidate {gib(candidate_bytes(fp, True))}, overhead "
            f"{gib(FIXED_OVERHEAD)}), and the GPU has {gib(free)} free; one input set is "
            f"{gib(fp.input_bytes)} of inputs and {gib(fp.output_bytes)} of outputs, the "
            f"parameters {gib(fp.param_bytes)}, the reference's peak {gib(fp.ref_peak_bytes)}")


def describe(fp: Footprint, plan: Plan, free: int | None) -> dict[str, Any]:
    """result["memory"]'s plan part."""
    return {"footprint": asdict(fp), "free_bytes": free,
            "plan": {"level": plan.level, "window": plan.window, "chunked": plan.chunked,
                     "lazy": plan.lazy, "float64": plan.float64,
                     "need_bytes": plan.need_bytes, "trusted_bytes": plan.trusted_bytes,
                     "candidate_bytes": candidate_bytes(fp, plan.lazy),
                     "candidate_budget_bytes": candidate_budget(plan, free)}}


def candidate_budget(plan: Plan, free: int | None) -> int | None:
    """What the candidate may use: the free memory less the evaluator's share and overhead."""
    if free is None:
        return None
    return max(0, free - plan.trusted_bytes - FIXED_OVERHEAD)


# ---------------------------------------------------------------------------------------
# Device measurements


def free_bytes(device: torch.device) -> int | None:
    """The device's free memory plus what this process's allocator caches but does not use
    (it is ours to reuse); None on the CPU."""
    if device.type != "cuda":
        return None
    free, _total = torch.cuda.mem_get_info(device)
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return int(free + max(0, cached))


# The job's device memory peaks. PyTorch keeps one peak per device, and measuring a single
# forward's peak (forward_peak_begin) resets it: the peaks so far are folded in here first.
# The same since the last phase_mark(): where in the job the memory went.
_JOB_PEAK = {"allocated": 0, "reserved": 0}
_PHASE_PEAK = {"allocated": 0, "reserved": 0}
_PHASES: list[dict[str, Any]] = []


def _fold(device: torch.device) -> None:
    alloc = int(torch.cuda.max_memory_allocated(device))
    res = int(torch.cuda.max_memory_reserved(device))
    for peak in (_JOB_PEAK, _PHASE_PEAK):
        peak["allocated"] = max(peak["allocated"], alloc)
        peak["reserved"] = max(peak["reserved"], res)


def reset_peak(device: torch.device) -> int:
    """Starts the job's peak measurement; returns the bytes allocated now (0 on the CPU)."""
    _JOB_PEAK.update(allocated=0, reserved=0)
    _PHASE_PEAK.update(allocated=0, reserved=0)
    _PHASES.clear()
    if device.type != "cuda":
        return 0
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    return int(torch.cuda.memory_allocated(device))


def phase_mark(device: torch.device, name: str) -> None:
    """Ends a phase of the job (setup, verify, ...): its peaks (allocated, reserved) and what
    is allocated at its end go to phases()."""
    if device.type != "cuda":
        return
    torch.cuda.synchronize(device)
    _fold(device)
    _PHASES.append({"phase": name, "peak_allocated_bytes": _PHASE_PEAK["allocated"],
                    "peak_reserved_bytes": _PHASE_PEAK["reserved"],
                    "allocated_bytes": int(torch.cuda.memory_allocated(device))})
    torch.cuda.reset_peak_memory_stats(device)
    _PHASE_PEAK.update(allocated=0, reserved=0)


def phases() -> list[dict[str, Any]]:
    return [dict(p) for p in _PHASES]


def job_peak(device: torch.device) -> dict[str, int]:
    """The job's peaks so far: bytes allocated and reserved by this process (0 on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        _fold(device)
    return dict(_JOB_PEAK)


def forward_peak_begin(device: torch.device) -> int:
    """Starts measuring one forward's own peak (the job's peaks kept); returns the base."""
    if device.type != "cuda":
        return 0
    torch.cuda.synchronize(device)
    _fold(device)
    torch.cuda.reset_peak_memory_stats(device)
    return int(torch.cuda.memory_allocated(device))


def forward_peak_end(device: torch.device, base: int) -> int:
    """The forward's peak above the base forward_peak_begin returned (0 on the CPU)."""
    if device.type != "cuda":
        return 0
    torch.cuda.synchronize(device)
    return max(0, int(torch.cuda.max_memory_allocated(device)) - base)


def evaluator_overshot(device: torch.device, plan: Plan | None) -> bool:
    """Whether this process (the evaluator) has reserved more device memory during the job
    than the plan's share for it: then an out-of-memory error anywhere in the job, the
    candidate's included, is the evaluator's. Measured on this side only: nothing the
    candidate reports or does can make it true."""
    if device.type != "cuda" or plan is None:
        return False
    return job_peak(device)["reserved"] > plan.trusted_bytes


def trim(device: torch.device) -> None:
    """Gives the caching allocator's free blocks back to the device (the evaluator's transients
    of the setup, or of a lazy plan's comparison, left for the candidate to use)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def release(device: torch.device) -> dict[str, Any]:
    """Frees what nothing refers to any more (gc, the caching allocator's free blocks) and says
    where the device's memory stands: allocated and reserved by this process, free."""
    gc.collect()
    if device.type != "cuda":
        return {"allocated_bytes": 0, "reserved_bytes": 0, "free_bytes": None}
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info(device)
    return {"allocated_bytes": int(torch.cuda.memory_allocated(device)),
            "reserved_bytes": int(torch.cuda.memory_reserved(device)),
            "free_bytes": int(free), "total_bytes": int(total)}


def oom_request_bytes(message: str) -> int | None:
    """The size PyTorch's out-of-memory message says it tried to allocate ("Tried to allocate
    8.00 GiB"), or None."""
    m = re.search(r"Tried to allocate ([0-9.]+) ([KMGT]i?B|B|bytes)", message or "")
    if not m:
        return None
    unit = {"B": 1, "bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30,
            "TiB": 1 << 40, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
    return int(float(m.group(1)) * unit.get(m.group(2), 1))


def oom_within_budget(details: dict[str, Any], message: str, memory: Any) -> bool:
    """Whether a candidate's out-of-memory error happened while what it held plus what it asked
    for stayed inside its budget (memplan.candidate_budget, which the candidate's allocator is
    also held to): then the device ran short, not the candidate. Unknown usage or budget (the
    CPU, a candidate that hid its numbers): False, the candidate's failure as before."""
    used = details.get("max_memory_allocated")
    budget = ((memory or {}).get("plan") or {}).get("candidate_budget_bytes") \
        if isinstance(memory, dict) else None
    asked = oom_request_bytes(message)
    if not isinstance(used, int) or isinstance(used, bool) or not isinstance(budget, int) \
            or asked is None:
        return False
    return used + asked <= budget


def candidate_oom_note(details: dict[str, Any], memory: Any) -> str:
    """What a candidate that ran out of memory had taken, beside its budget."""
    used = details.get("max_memory_allocated")
    budget = ((memory or {}).get("plan") or {}).get("candidate_budget_bytes") \
        if isinstance(memory, dict) else None
    used_s = f"it had allocated up to {gib(used)}" if isinstance(used, int) else \
        "its own usage is unknown"
    budget_s = f"its budget on this GPU is {gib(budget)} (the free memory less the " \
        "evaluator's share)" if isinstance(budget, int) else "no budget is known"
    return f" (the candidate ran out of GPU memory: {used_s}; {budget_s})"
