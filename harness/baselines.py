"""baselines.py: the eager and torch.compile baselines (timed here, cached on disk), the
reference's FLOPs, the speed-of-light bounds, the checks on the candidate's own timing, and the
result's timing section made of them (timing_section).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import time
from typing import Any

import torch

import quality
import timing
import harness_util as hu
from evalbase import Log, clone_arg, nbytes, set_precision, sync
from inputs import InputSet


BASELINE_CACHE_VERSION = 1
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
# The measured time may not fall below this share of the GPU time of the forward's own work.
KERNEL_FLOOR_SHARE = 0.9


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


# The times of a STATS object besides its median, moved with it by the kernel floor.
_FLOORED_TIMES = ("mean_ms", "stdev_ms", "min_ms", "p10_ms", "p25_ms", "p75_ms", "p90_ms",
                  "iqr_ms")


def kernel_floor(stats: dict[str, Any], ev: Any, flags: list[dict[str, Any]]) -> dict[str, Any]:
    """A call cannot take less time than the GPU was busy with the work it launched: ev's
    profiled forward, its activities on every stream, overlaps counted once (`busy_us`; a
    record without it: the longest activity, `longest_us`); ev is floor_evidence()'s. Work on
    a stream that is not ordered with the current one can overlap the L2 flush and input
    copies queued before the timed region (or, under timing="device", the lead), so the
    events miss it (seen on the H200: a kernel on an unsynchronised side stream timed at 1/200
    of its own duration); cut into many short kernels, it would slip under a floor of the
    longest one. When the events' median is below KERNEL_FLOOR_SHARE of that busy time, the
    busy time is the time (basis "kernel-floor", the events' median kept), with a flag."""
    if not isinstance(ev, dict):
        return stats
    med = stats.get("median_ms")
    found = [v for v in (ev.get("longest_us"), ev.get("busy_us")) if _positive(v)]
    if not found or not isinstance(med, (int, float)):
        return stats
    floor_ms = max(found) / 1000.0
    if med >= KERNEL_FLOOR_SHARE * floor_ms:
        return stats
    flags.append({"kind": "timing_below_kernel",
                  "message": f"the timed calls took {med:.4g} ms, less than the "
                             f"{floor_ms:.4g} ms the GPU was busy with the forward's own work "
                             "(its profiled activities on every stream): work off the current "
                             "stream ran before or beside the timed region; timed at that "
                             "busy time instead"})
    # The events' other times scaled with the median: their relative spread stays (what the
    # noise flag's decision_at_risk reads, quality.noise_flag), not their absolute values.
    scale = floor_ms / med if med > 0 else 0.0
    moved = {}
    for k in _FLOORED_TIMES:
        v = stats.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            spread = k in ("stdev_ms", "iqr_ms")
            moved[k] = v * scale if scale else 0.0 if spread else floor_ms
    return dict(stats, **moved, median_ms=floor_ms, events_median_ms=med, basis="kernel-floor")


def floor_evidence(busy_after: Any, launches: Any) -> Any:
    """What the kernel floor rests on: the busy time profiled right after the timing loop
    (timing.busy_floor: the GPU as the timed calls left it) where the candidate reported one,
    else the launch evidence's forward, profiled once during verification (on the leaderboard's
    real solutions up to twice the timed calls' time: the GPU's clocks not yet up)."""
    if _positive(busy_after):
        return {"busy_us": float(busy_after), "source": "after_timing"}
    if isinstance(launches, dict):
        return dict(launches, source="launch_evidence")
    return launches


def device_info(device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {"type": device.type, "torch": torch.__version__,
                            "cuda": torch.version.cuda}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(name=props.name, capability=f"{props.major}.{props.minor}",
                    l2_bytes=timing.l2_cache_bytes(device),
                    memory_bytes=int(props.total_memory), sms=int(props.multi_processor_count))
        # What SKILL.md tells the agent to read from ./verify and ./profile: the device the
        # evaluator runs on and its ceilings (None for a part the tables do not know).
        bw = next((v for k, v in PEAK_BANDWIDTH if k in props.name), None)
        flops = next((v for k, v in PEAK_FLOPS if k in props.name), None)
        info.update(peak_bandwidth_bytes_per_s=bw,
                    peak_fp32_flops=flops["fp32"] if flops else None,
                    peak_tf32_flops=flops["tf32"] if flops else None)
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
            "l2_flush_bytes", "kernels_per_call", "kernel_error", "note", "lead_ms",
            "host_median_ms", "lead_short_fraction")
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


def timing_section(opts: argparse.Namespace, dev: dict[str, Any], s0: InputSet,
                   state_bytes: int, cand_stats: dict[str, Any], base: dict[str, Any],
                   cached: bool, launches: Any,
                   busy_after: Any = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The result's timing section and its flags (kernel floor, speed of light)."""
    flags: list[dict[str, Any]] = []
    ev = floor_evidence(busy_after, launches)
    cand_stats = kernel_floor(cand_stats, ev, flags)
    cand_med = cand_stats.get("median_ms")
    sol = speed_of_light(dev, s0, state_bytes, cand_med, base.get("flops"), opts.precision)

    def speedup(b: Any) -> float | None:
        if timing.finite_stats(b) and cand_med and cand_med > 0:
            return b["median_ms"] / cand_med
        return None

    section = {
        "mode": opts.timing,
        "precision": opts.precision,
        "eager": base["eager"],
        "compile": base["compile"],
        "candidate": cand_stats,
        "baseline_cached": cached,
        "speedup_vs_eager": speedup(base["eager"]),
        "speedup_vs_compile": speedup(base["compile"]),
        "sol": sol,
        "floor": {"busy_us": ev.get("busy_us"), "longest_us": ev.get("longest_us"),
                  "source": ev.get("source")} if isinstance(ev, dict) else None,
    }
    if "bytes" in sol["flagged_by"]:
        flags.append({
            "kind": "speed_of_light",
            "message": f"the candidate's median {cand_med:.4g} ms is below half the "
                       f"{sol['sol_ms']:.4g} ms that moving its inputs and outputs once "
                       "takes at peak memory bandwidth: faster than memory bandwidth "
                       "allows; not to be rewarded without review"})
    if "flops" in sol["flagged_by"]:
        flags.append({
            "kind": "speed_of_light",
            "message": f"the candidate's median {cand_med:.4g} ms is below half the "
                       f"{sol['sol_flops_ms']:.4g} ms that the reference's "
                       f"{sol['flops']:.4g} FLOPs take at the device's peak "
                       f"{sol['peak_flops_kind']} tensor rate "
                       f"({sol['peak_flops_per_s']:.4g} FLOP/s): faster than the hardware's "
                       "arithmetic allows; not to be rewarded without review"})
    return section, flags
