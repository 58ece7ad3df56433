"""memplan.py: the evaluator's GPU memory plan for one job (trusted side).

A job's device memory is the task's footprint times how much of it is alive at once. The
footprint is measured on input set 0 (Footprint: its inputs, the reference's outputs, the
parameters, and the reference forward's peak above its inputs from
torch.cuda.max_memory_allocated). A plan says how many of the streamed input sets (random,
adversarial, value-stress, post-timing: all of the task's own shape) are resident at once
beside set 0 (`window`), and whether the float64 reference lives on the host. make_plans()
lists the plans from the roomiest (everything resident: the evaluation as it always ran) to
the smallest (one streamed set at a time, float64 reference on the host); choose() takes the
first that fits the GPU's free memory (torch.cuda.mem_get_info) with the candidate's budget
left over. None fitting: the task is refused up front with the numbers (too_large_message).
An out-of-memory error in the evaluator's own work retries with the next smaller plan; after
the smallest it is an infrastructure error, never the candidate's failure.

Pure arithmetic on byte counts: no torch calls except in free_bytes() and measure_peak().
"""

from __future__ import annotations

import gc
from dataclasses import asdict, dataclass
from typing import Any

import torch

GIB = 1 << 30
# What no plan can shrink: the CUDA contexts' own memory beside the tensors, the caching
# allocators' rounding and fragmentation, cuBLAS/cuDNN workspaces.
FIXED_OVERHEAD = GIB
# The candidate process's CUDA context and PyTorch's start-up allocations.
CANDIDATE_CONTEXT = GIB // 2
# Comparisons run on slices of at most this many elements (compare.COMPARE_CHUNK_ELEMS), so
# their temporaries (float64 differences, masks, precision sums) stay bounded; about 12 bytes
# per element of the slice are alive at once.
COMPARE_CHUNK_ELEMS = 1 << 26
COMPARE_BYTES_PER_ELEM = 12
# Device memory a worker may keep between jobs for the next job's prefetched input sets.
PREFETCH_BUDGET = 4 * GIB


@dataclass
class Footprint:
    """One input set's bytes at the task's own shape, and the model's."""
    input_bytes: int = 0       # set 0's tensor inputs
    output_bytes: int = 0      # the reference's tensor outputs on set 0
    param_bytes: int = 0       # Model's state_dict
    ref_peak_bytes: int = 0    # the reference forward's peak above what existed before it
    float_output: bool = True  # some output is floating (a float64 reference is made)
    max_output_elems: int = 0  # the largest output's elements (the comparison's slice)
    n_streamed: int = 0        # random, adversarial, value-stress and post-timing sets
    resident_extra_bytes: int = 0  # derived and extra-shape sets (inputs and outputs)

    def set_bytes(self) -> int:
        return self.input_bytes + self.output_bytes


@dataclass
class Plan:
    level: int          # 0: everything resident (the evaluation as it always ran)
    window: int         # streamed sets resident at once beside set 0 (>= 1)
    ref64_host: bool    # float64 references kept in host memory, moved in per comparison
    need_bytes: int     # what this plan needs on the device, the candidate's share included
    trusted_bytes: int  # of which the evaluator's own (the rest is the candidate's budget)

    @property
    def chunked(self) -> bool:
        return self.level > 0


def _per_set(fp: Footprint, ref64_host: bool) -> int:
    """A resident set on the trusted side: its pristine inputs, its arena slots (inputs and
    outputs), its float32 reference, and its float64 reference unless on the host."""
    ref64 = 0 if ref64_host or not fp.float_output else 2 * fp.output_bytes
    return 2 * fp.input_bytes + 2 * fp.output_bytes + ref64


def candidate_bytes(fp: Footprint) -> int:
    """The candidate's share: its context, its copy of the parameters, a forward (peak and
    outputs) and the poisoned blocks (two of each output size and one of twice their total,
    32 MiB to 8 GiB: candidate._poison)."""
    poison = 2 * fp.output_bytes + min(max(2 * fp.output_bytes, 32 << 20), 8 * GIB)
    return CANDIDATE_CONTEXT + fp.param_bytes + fp.ref_peak_bytes + fp.output_bytes + poison


def trusted_bytes(fp: Footprint, window: int, ref64_host: bool) -> int:
    """The evaluator's share under a plan: the model (and its float64 copy while the float64
    references are made), set 0 and the resident extra sets, `window` streamed sets, and the
    largest transient: a float64 reference forward (its inputs and peak in float64) or a
    comparison (bounded by its slices)."""
    resident = (1 + window) * _per_set(fp, ref64_host) + fp.resident_extra_bytes
    fp64_forward = 2 * (fp.param_bytes + fp.input_bytes + fp.ref_peak_bytes + fp.output_bytes) \
        if fp.float_output else 0
    compare = COMPARE_BYTES_PER_ELEM * min(fp.max_output_elems, COMPARE_CHUNK_ELEMS)
    return fp.param_bytes + resident + max(fp64_forward, compare, fp.ref_peak_bytes)


def make_plans(fp: Footprint) -> list[Plan]:
    """From the roomiest to the smallest: every streamed set resident (level 0), then windows
    halved down to 1, then window 1 with the float64 references on the host."""
    n = max(1, fp.n_streamed)
    windows = [n]
    while windows[-1] > 1:
        windows.append(max(1, windows[-1] // 2))
    shapes = [(w, False) for w in windows] + [(1, True)]
    plans = []
    for level, (w, host) in enumerate(shapes):
        t = trusted_bytes(fp, w, host)
        plans.append(Plan(level, w, host, t + candidate_bytes(fp) + FIXED_OVERHEAD, t))
    return plans


def choose(fp: Footprint, free: int | None, min_level: int = 0) -> Plan | None:
    """The first plan from min_level on that fits `free` bytes (None: no limit known, the
    CPU: the roomiest); None when none fits."""
    plans = make_plans(fp)
    for p in plans[min_level:]:
        if free is None or p.need_bytes <= free:
            return p
    return None


def forced(fp: Footprint, window: int) -> Plan:
    """The plan of evaluate.py --memory-window: `window` streamed sets at a time (level 1,
    streamed even when all would fit)."""
    w = max(1, min(window, max(1, fp.n_streamed)))
    t = trusted_bytes(fp, w, False)
    return Plan(1, w, False, t + candidate_bytes(fp) + FIXED_OVERHEAD, t)


def smallest(fp: Footprint) -> Plan:
    return make_plans(fp)[-1]


def gib(n: int | float | None) -> str:
    return "?" if n is None else f"{n / GIB:.2f} GiB"


def too_large_message(fp: Footprint, free: int) -> str:
    p = smallest(fp)
    return (f"the task needs {gib(p.need_bytes)} of GPU memory even with the smallest memory "
            f"plan (one input set at a time, float64 reference on the host: the evaluator "
            f"{gib(p.trusted_bytes)}, the candidate {gib(candidate_bytes(fp))}, overhead "
            f"{gib(FIXED_OVERHEAD)}), and the GPU has {gib(free)} free; one input set is "
            f"{gib(fp.input_bytes)} of inputs and {gib(fp.output_bytes)} of outputs, the "
            f"parameters {gib(fp.param_bytes)}, the reference's peak {gib(fp.ref_peak_bytes)}")


def describe(fp: Footprint, plan: Plan, free: int | None) -> dict[str, Any]:
    """result["memory"]'s plan part."""
    return {"footprint": asdict(fp), "free_bytes": free,
            "plan": {"level": plan.level, "window": plan.window, "chunked": plan.chunked,
                     "ref64_host": plan.ref64_host, "need_bytes": plan.need_bytes,
                     "trusted_bytes": plan.trusted_bytes,
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


def reset_peak(device: torch.device) -> int:
    """Starts a peak measurement; returns the bytes allocated now (0 on the CPU)."""
    if device.type != "cuda":
        return 0
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    return int(torch.cuda.memory_allocated(device))


def peak_since(device: torch.device, base: int) -> int:
    if device.type != "cuda":
        return 0
    torch.cuda.synchronize(device)
    return max(0, int(torch.cuda.max_memory_allocated(device)) - base)


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
