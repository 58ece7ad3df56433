"""quality.py: what the trusted side knows about a timing's quality (issue 21).

timing.py measures (the same loop for eager, torch.compile and the candidate) and marks each
measurement noisy or clean from its own numbers: the spread of its timed calls and how long
its timing thread waited for a CPU (timing.noise_reasons). This module is the evaluator's
half, in the trusted process only:

- host load while a subject was timed: /proc/loadavg and the busy share of the CPUs in this
  process's affinity mask ("own": on a GPU runner, the cores reserved for timing, see
  docs/internals/evald.md) and of every other CPU ("other": the compile pool's), from two
  /proc/stat samples around the measurement (host_sample, host_load);
- the timing window: Window tells the runner's owner (opts.timing_hook, set by worker.py)
  that a timed section starts and ends, so that the compile pool can hold back new compiler
  runs meanwhile (bounded, see src/eval/cpuplan.h);
- which measurements may be cached (cacheable: clean ones only) and the flag of a timing
  block that rests on a noisy measurement (noise_flag).

The candidate's statistics are untrusted numbers: validate() keeps the known fields, and
clean/noisy is always recomputed here from them, never taken from the candidate's "noisy".
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Callable

import timing

# The reward's threshold (src/eval/reward.h: more than 5% faster), for noise_flag's
# "decision_at_risk" only: nothing here computes a reward.
REWARD_THRESHOLD = 1.05
_NOISE_KINDS = ("iqr", "cv", "run_queue", "lead_short", "no_data")
_MAX_ATTEMPTS_KEPT = 10


def _cpu_set(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def cpu_list(cpus: set[int] | list[int]) -> str:
    """"0-3,6" for {0, 1, 2, 3, 6} (the kernel's list format)."""
    xs = sorted(cpus)
    runs: list[str] = []
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        runs.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ",".join(runs)


def host_sample(stat_path: str = "/proc/stat",
                loadavg_path: str = "/proc/loadavg") -> dict[str, Any]:
    """{"t": monotonic s, "cpus": {cpu: (busy jiffies, total jiffies)}, "loadavg": 1-min or
    None}; cpus is empty where /proc/stat cannot be read."""
    cpus: dict[int, tuple[int, int]] = {}
    try:
        with open(stat_path, encoding="ascii") as f:
            for line in f:
                if not line.startswith("cpu") or line.startswith("cpu "):
                    continue
                name, *vals = line.split()
                v = [int(x) for x in vals[:8]]
                total = sum(v)
                idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
                cpus[int(name[3:])] = (total - idle, total)
    except (OSError, ValueError):
        cpus = {}
    load = None
    try:
        with open(loadavg_path, encoding="ascii") as f:
            load = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return {"t": time.monotonic(), "cpus": cpus, "loadavg": load}


def host_load(before: dict[str, Any], after: dict[str, Any],
              own: set[int] | None = None) -> dict[str, Any]:
    """The host between two host_samples: loadavg_1m (at the end), busy_own / busy_other (the
    busy share, 0..1, of the CPUs in own, default this process's affinity, and of the rest;
    None where there is none or no data), own_cpus and other_cpus (lists), window_s. The own
    share includes this process's own work (the timing thread spinning on the device)."""
    if own is None:
        try:
            own = set(os.sched_getaffinity(0))
        except OSError:
            own = set()
    b, a = before.get("cpus") or {}, after.get("cpus") or {}
    common = sorted(set(a) & set(b))

    def share(cpus: list[int]) -> float | None:
        busy = sum(a[c][0] - b[c][0] for c in cpus)
        total = sum(a[c][1] - b[c][1] for c in cpus)
        return busy / total if total > 0 else None

    mine = [c for c in common if c in own]
    rest = [c for c in common if c not in own]
    return {"loadavg_1m": after.get("loadavg"), "busy_own": share(mine),
            "busy_other": share(rest), "own_cpus": cpu_list(mine), "other_cpus": cpu_list(rest),
            "window_s": max(0.0, float(after.get("t", 0.0)) - float(before.get("t", 0.0)))}


class Window:
    """A timed section: tells hook (opts.timing_hook, or None) True when it opens and False
    when it closes (once, however often close() is called), and measures the host load
    between the two."""

    def __init__(self, hook: Callable[[bool], None] | None, what: str):
        self.hook, self.what, self.load = hook, what, None
        self._before: dict[str, Any] | None = None

    def open(self) -> "Window":
        self._before = host_sample()
        if self.hook is not None:
            self.hook(True)
        return self

    def close(self) -> dict[str, Any] | None:
        if self._before is None:
            return self.load
        if self.hook is not None:
            self.hook(False)
        self.load = host_load(self._before, host_sample())
        self._before = None
        return self.load

    def __enter__(self) -> "Window":
        return self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()


def measured(hook: Callable[[bool], None] | None, what: str,
             measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """measure() inside a Window; the host load goes into the result as "host"."""
    with Window(hook, what) as w:
        stats = measure()
    if isinstance(stats, dict):
        stats["host"] = w.load
    return stats


def _num(v: Any) -> float | int | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return v


def validate(stats: Any) -> dict[str, Any]:
    """The quality fields of an untrusted STATS object, reduced to known, bounded values:
    p25_ms, p75_ms, iqr_ms, iqr_rel, sched, noise, attempt, attempts; noisy recomputed."""
    if not isinstance(stats, dict):
        return {}
    out: dict[str, Any] = {}
    for k in ("p25_ms", "p75_ms", "iqr_ms", "iqr_rel", "attempt"):
        v = _num(stats.get(k))
        if v is not None:
            out[k] = v
    sched = stats.get("sched")
    if isinstance(sched, dict):
        out["sched"] = {k: _num(sched.get(k)) for k in
                        ("runq_wait_ms", "runq_wait_fraction", "preempted", "wall_ms")}
    attempts = stats.get("attempts")
    if isinstance(attempts, list):
        kept = []
        for a in attempts[:_MAX_ATTEMPTS_KEPT]:
            if not isinstance(a, dict):
                continue
            rec = {k: _num(a.get(k)) for k in ("median_ms", "cv", "iqr_rel", "n", "warmup_n",
                                                 "runq_wait_fraction")}
            noise = a.get("noise")
            rec["noise"] = [x for x in noise if x in _NOISE_KINDS] if isinstance(noise, list) \
                else []
            kept.append(rec)
        out["attempts"] = kept
    return out


def reasons(stats: Any) -> list[str]:
    """timing.noise_reasons of a STATS object ("no_data" for anything else)."""
    return timing.noise_reasons(stats) if isinstance(stats, dict) else ["no_data"]


def mark(stats: Any) -> Any:
    """Sets stats' noise and noisy from its numbers (recomputed: a candidate's own verdict is
    not taken); returns stats."""
    if isinstance(stats, dict) and timing.finite_stats(stats):
        stats["noise"] = reasons(stats)
        stats["noisy"] = bool(stats["noise"])
    return stats


def cacheable(name: str, stats: Any) -> bool:
    """Whether a baseline entry may go into the baseline cache: the FLOP count always; a
    timing only when clean (a torch.compile failure is a result too, and kept)."""
    if name == "flops":
        return isinstance(stats, dict)
    if isinstance(stats, dict) and "error" in stats and not timing.finite_stats(stats):
        return True
    return timing.finite_stats(stats) and not reasons(stats)


def noise_flag(block: dict[str, Any],
               threshold: float = REWARD_THRESHOLD) -> dict[str, Any] | None:
    """The flag of a result's timing block when a measurement it rests on is noisy:
    {"kind": "noisy_timing", "message", "subjects": {name: [reasons]}, "decision_at_risk":
    [baselines whose speedup's range (baseline p25..p75 over candidate p75..p25) contains the
    reward threshold]}; None when all of them are clean."""
    subjects: dict[str, list[str]] = {}
    for name in ("candidate", "eager", "compile"):
        s = block.get(name)
        if name == "compile" and (s is None or (isinstance(s, dict) and "error" in s)):
            continue
        r = reasons(s)
        if r:
            subjects[name] = r
    if not subjects:
        return None
    cand = block.get("candidate") or {}
    at_risk = []
    for name in ("eager", "compile"):
        b = block.get(name)
        if not (isinstance(b, dict) and timing.finite_stats(b) and timing.finite_stats(cand)):
            continue
        lo_b, hi_b = _num(b.get("p25_ms")) or b["median_ms"], _num(b.get("p75_ms")) or \
            b["median_ms"]
        lo_c, hi_c = _num(cand.get("p25_ms")) or cand["median_ms"], \
            _num(cand.get("p75_ms")) or cand["median_ms"]
        if hi_c > 0 and lo_c > 0 and lo_b / hi_c <= threshold <= hi_b / lo_c:
            at_risk.append(name)
    def tries(name: str) -> int:
        a = (block.get(name) or {}).get("attempts")
        return len(a) if isinstance(a, list) and a else 1

    what = ", ".join(f"{k} ({'/'.join(v)}; {tries(k)} attempt{'s' if tries(k) > 1 else ''})"
                     for k, v in subjects.items())
    message = f"timing noisy: {what}"
    if at_risk:
        message += ("; the reward's " + " and ".join(at_risk) + " decision is within the noise "
                    "(repeat the evaluation on a quieter host)")
    else:
        message += "; the reward's decisions are outside the noise"
    return {"kind": "noisy_timing", "message": message, "subjects": subjects,
            "decision_at_risk": at_risk}
