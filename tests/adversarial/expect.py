"""How an evaluator report differs from a case's expect.json (tests/adversarial/README.md lists
the fields): the one check both suites run, the CPU one (tests/it/adversarial.sh) and the GPU
one (tests/gpu/adversarial_gpu.py)."""

from __future__ import annotations

from typing import Any


def as_list(v: Any) -> list[Any]:
    return list(v) if isinstance(v, list) else [v]


def problems(exp: dict[str, Any], report: dict[str, Any]) -> list[str]:
    """Every way the report differs from the expectation exp (empty: as expected)."""
    reward = (report.get("reward") or {}).get("reward")
    h = report.get("harness") or {}
    cand = (h.get("timing") or {}).get("candidate") or {}
    why = []
    if "reward" in exp and reward != exp["reward"]:
        why.append(f"reward {reward}, expected {exp['reward']}")
    if "reward_min" in exp and (reward is None or reward < exp["reward_min"]):
        why.append(f"reward {reward}, expected at least {exp['reward_min']}")
    stages = as_list(exp["stage"])
    if report.get("stage") not in stages:
        why.append(f"stage {report.get('stage')!r}, expected "
                   + " or ".join(repr(s) for s in stages))
    kind = (h.get("failure") or {}).get("kind")
    kinds = as_list(exp.get("kind"))
    if "kind" in exp and kind not in kinds:
        why.append(f"failure kind {kind!r}, expected " + " or ".join(repr(k) for k in kinds))
    if "contains" in exp and exp["contains"] not in (report.get("message") or ""):
        why.append(f"message lacks {exp['contains']!r}")
    if "basis" in exp:
        want = as_list(exp["basis"])
        if cand.get("basis") not in want:
            why.append(f"candidate timing basis {cand.get('basis')!r}, expected one of {want}"
                       " (work off the current stream must be counted)")
    if "timed_at_least_work" in exp:
        # The candidate's time against the GPU time of all its profiled activities (their sum:
        # for a case whose work runs on one stream, the least time a call can take).
        work = ((h.get("verification") or {}).get("launches") or {}).get("total_us")
        med = cand.get("median_ms")
        if not isinstance(work, (int, float)) or not isinstance(med, (int, float)):
            why.append(f"no timing to check against its work (median {med!r}, work {work!r})")
        elif med < exp["timed_at_least_work"] * work / 1000.0:
            why.append(f"timed at {med:.4g} ms, below {exp['timed_at_least_work']:g} of the "
                       f"{work / 1000.0:.4g} ms of GPU work it ran: the timing missed its work")
    return why
