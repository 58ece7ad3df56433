#!/usr/bin/env python3
"""bench/kb_memory.py - the evaluator's GPU memory on every KernelBench task (issue 22).

Each task of levels 1-3 (../shared/corpora/kernelbench, or a copy in .corpus/kernelbench to
carry it to the GPU machine) goes through `cuda-agent eval --rules kernelbench --task T
--kernelbench-file F` where F is the reference itself as a ModelNew (a copy of the task's
Model whose forward also calls one no-op kernel built with load_inline, so that the launch
evidence and the timing run too), all through one evaluator service (`cuda-agent evaluator
--socket`, `eval --server`), one task after another, so that the runner's memory between
jobs is exercised. Recorded per task: the footprint, the memory plan, the evaluator's peak
GPU memory, the runner's memory after the job (harness memory.idle_after), the verdict and
the wall time; a summary table on stdout and everything in OUT/kb_memory.json.

    python3 bench/kb_memory.py --bin .carry/cuda-agent --out OUT [--levels 1,2,3]
        [--limit N] [--only 19,4] [--skip N] [--stride N] [--time-budget S] [--corpus DIR]
        [--server SOCKET] [--budget-ms 300] [--done FILE ...]

--done FILE (repeatable; a kb_memory.jsonl or kb_memory.json of earlier calls, e.g.
bench/results-kb-memory.jsonl) leaves out the tasks FILE already records with a verdict (not
"error") and counts its records in the summary with this call's, so that the 250 tasks can be
covered over several device calls: each call appends its OUT/kb_memory.jsonl to the file. Every
record says which binary made it (`binary`: its --version line).

--time-budget stops starting tasks once S seconds have passed, or when the slowest of the last
three tasks would not fit in what is left (the device call that runs it is limited), and
reports what was done. SIGTERM or SIGINT (a call's timeout) stops it too, and OUT/kb_memory.json
is still written. Exit status: 0 done (whatever the verdicts), 77 no corpus.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPORA = (os.path.join(ROOT, ".corpus", "kernelbench"),
           os.path.join(ROOT, "..", "shared", "corpora", "kernelbench"),
           "/work/shared/corpora/kernelbench")
GIB = 1 << 30

TOUCH = '''

# --- added by bench/kb_memory.py: the reference itself as ModelNew, plus one no-op kernel
from torch.utils.cpp_extension import load_inline as _ca_load_inline

_ca_touch_source = """
#include <torch/extension.h>

__global__ void ca_touch_kernel(int unused) {}

torch::Tensor ca_touch(torch::Tensor x) {
    ca_touch_kernel<<<1, 1>>>(0);
    return x;
}
"""

_ca_ext = _ca_load_inline(name="ca_touch", cpp_sources="torch::Tensor ca_touch(torch::Tensor x);",
                          cuda_sources=_ca_touch_source, functions=["ca_touch"])


class ModelNew(_CaReference):
    def forward(self, *args):
        out = super().forward(*args)
        if isinstance(out, torch.Tensor):
            return _ca_ext.ca_touch(out)
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if first is not None:
            _ca_ext.ca_touch(first)
        return out
'''


def candidate_file(task_src: str) -> str:
    """The task's source with its Model copied as _CaReference (not the reference class
    itself), then ModelNew on top of the copy."""
    copy = re.sub(r"\bModel\b", "_CaReference", task_src)
    if "import torch\n" not in copy:
        copy = "import torch\n" + copy
    return copy + TOUCH


def tasks(corpus: str, levels: list[int]) -> list[tuple[int, str]]:
    out = []
    for lv in levels:
        d = os.path.join(corpus, f"level{lv}")
        if not os.path.isdir(d):
            continue
        names = sorted(os.listdir(d), key=lambda n: (int(n.split("_")[0])
                                                      if n.split("_")[0].isdigit() else 0, n))
        out += [(lv, os.path.join(d, n)) for n in names if n.endswith(".py")]
    return out


def load_done(paths: list[str]) -> list[dict]:
    """The records of earlier calls (--done): JSONL, one record a line, or kb_memory.json's
    {"records": [...]}; a record seen again (the same level and task) replaces the earlier."""
    by: dict[tuple[int, str], dict] = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        try:
            doc = json.loads(text)
            recs = doc.get("records", []) if isinstance(doc, dict) else doc
        except json.JSONDecodeError:
            try:
                recs = [json.loads(line) for line in text.splitlines() if line.strip()]
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: neither JSON nor JSON lines ({exc})") from None
        for r in recs:
            if not isinstance(r, dict) or "level" not in r or "task" not in r:
                raise ValueError(f"{path}: not a kb_memory record: {str(r)[:120]}")
            by[(int(r["level"]), r["task"])] = r
    return list(by.values())


def run_one(opts: argparse.Namespace, level: int, path: str, tmp: str) -> dict:
    name = os.path.basename(path)
    cand = os.path.join(tmp, f"l{level}_{name}")
    with open(path, encoding="utf-8") as f:
        src = f.read()
    with open(cand, "w", encoding="utf-8") as f:
        f.write(candidate_file(src))
    cmd = [opts.bin, "eval", "--json", "--rules", "kernelbench", "--task", path,
           "--kernelbench-file", cand, "--budget-ms", str(opts.budget_ms), "--timeout",
           str(opts.timeout), "--no-compile-baseline", "--server", opts.server]
    t0 = time.monotonic()
    rec: dict = {"level": level, "task": name, "binary": opts.version}
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=4 * opts.timeout + 300)
        stdout, stderr, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired:
        stdout, stderr, rc = "", "timed out", None
    rec["wall_s"] = round(time.monotonic() - t0, 2)
    rec["rc"] = rc
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError:
        rec.update(verdict="error", message=(stderr or stdout)[-400:])
        return rec
    h = report.get("harness") or {}
    failure = h.get("failure") or {}
    mem = h.get("memory") or {}
    foot = mem.get("footprint") or {}
    plan = mem.get("plan") or {}
    idle = mem.get("idle_after") or {}
    # The arena (inputs and output slots shared with the candidate): device memory of its own
    # (cuda_vmm), outside both processes' allocator peaks, or host memory (memfd).
    transport = (h.get("verification") or {}).get("transport") or {}
    rec.update(
        stage=report.get("stage"), ok=bool(report.get("ok")),
        verdict="infrastructure" if report.get("infrastructure_error") else
        "correct" if report.get("ok") else "failed",
        failure=failure.get("kind"), message=(report.get("message") or "")[:300],
        reward=(report.get("reward") or {}).get("reward"),
        footprint_bytes=(foot.get("input_bytes", 0) + foot.get("output_bytes", 0)
                         + foot.get("param_bytes", 0)) if foot else None,
        footprint=foot or None, plan=plan or None,
        peak_bytes=mem.get("peak_bytes"),
        transport=transport.get("kind"),
        arena_device_bytes=transport.get("bytes") if transport.get("kind") == "cuda_vmm" else 0,
        peak_reserved_bytes=mem.get("peak_reserved_bytes"),
        candidate_peak_reserved_bytes=(mem.get("candidate_peak") or {}).get(
            "max_reserved_bytes"),
        idle_allocated_bytes=idle.get("allocated_bytes"),
        idle_reserved_bytes=idle.get("reserved_bytes"),
        idle_free_bytes=idle.get("free_bytes"),
        attempts=len(mem.get("attempts") or []),
        attempt_errors=[str(a.get("error"))[:800] for a in mem.get("attempts") or []],
        phases=mem.get("phases"))
    return rec


def g(n) -> str:
    return "-" if n is None else f"{n / GIB:7.2f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", default=os.path.join(ROOT, ".carry", "cuda-agent"))
    p.add_argument("--out", required=True)
    p.add_argument("--corpus")
    p.add_argument("--levels", default="1,2,3")
    p.add_argument("--limit", type=int, default=0, help="at most N tasks (0: all)")
    p.add_argument("--skip", type=int, default=0, help="start after the first N tasks")
    p.add_argument("--only", default="",
                   help="comma-separated task numbers or names (19,4_Matrix...): these alone")
    p.add_argument("--stride", type=int, default=1,
                   help="every Nth task of those left (a sample spread over the levels)")
    p.add_argument("--time-budget", type=float, default=0,
                   help="stop starting tasks after S seconds (0: no limit)")
    p.add_argument("--server", help="an evaluator service's socket (default: start one)")
    p.add_argument("--budget-ms", type=int, default=300)
    p.add_argument("--timeout", type=int, default=120)
    p.add_argument("--done", action="append", default=[],
                   help="records of earlier calls: their tasks are left out, their records kept")
    opts = p.parse_args()
    try:
        done = load_done(opts.done)
    except (OSError, ValueError) as exc:
        p.error(f"--done: {exc}")
    recorded = {(int(r["level"]), r["task"]) for r in done if r.get("verdict") != "error"}
    done = [r for r in done if (int(r["level"]), r["task"]) in recorded]
    corpus = opts.corpus or next((c for c in CORPORA if os.path.isdir(c)), None)
    if corpus is None or not os.path.isdir(corpus):
        print("skip: no KernelBench corpus (copy it to .corpus/kernelbench to carry it)")
        return 77
    levels = [int(x) for x in opts.levels.split(",") if x.strip()]
    items = tasks(corpus, levels)
    if opts.only:
        want = [w.strip() for w in opts.only.split(",") if w.strip()]
        items = [(lv, path) for lv, path in items
                 if any(os.path.basename(path).startswith(w if not w.isdigit() else w + "_")
                        for w in want)]
    items = [(lv, path) for lv, path in items
             if (lv, os.path.basename(path)) not in recorded]
    items = items[opts.skip::max(1, opts.stride)]
    if opts.limit:
        items = items[:opts.limit]
    opts.bin = os.path.abspath(opts.bin)
    try:
        opts.version = subprocess.run([opts.bin, "--version"], capture_output=True, text=True,
                                      timeout=30).stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        opts.version = None
    os.makedirs(opts.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="ca-kbmem-")
    service = None
    if not opts.server:
        opts.server = os.path.join(tmp, "ev.sock")
        log = open(os.path.join(opts.out, "service.log"), "w")
        service = subprocess.Popen([opts.bin, "evaluator", "--socket", opts.server],
                                   stderr=log, stdout=log)
        for _ in range(600):
            if os.path.exists(opts.server):
                break
            time.sleep(0.5)
    t0 = time.monotonic()
    recs: list[dict] = []
    stopped = None

    def interrupted(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    # A device call's timeout sends SIGTERM: the summary is still written (finally, below).
    signal.signal(signal.SIGTERM, interrupted)
    try:
        for k, (lv, path) in enumerate(items):
            left = opts.time_budget - (time.monotonic() - t0) if opts.time_budget else None
            # A task is not started when the slowest of the last three would not fit.
            need = max((r["wall_s"] for r in recs[-3:]), default=0.0)
            if left is not None and (left <= 0 or left < need):
                stopped = (f"time budget of {opts.time_budget:g} s reached after {k} tasks "
                           f"({left:.0f} s left, the last tasks took up to {need:.0f} s)")
                break
            rec = run_one(opts, lv, path, tmp)
            recs.append(rec)
            print(f"[{k + 1}/{len(items)}] L{lv} {rec['task'][:44]:44} {rec.get('verdict'):14} "
                  f"{rec.get('failure') or '':14} fp {g(rec.get('footprint_bytes'))} peak "
                  f"{g(rec.get('peak_bytes'))} cand {g(rec.get('candidate_peak_reserved_bytes'))} "
                  f"arena {g(rec.get('arena_device_bytes'))} "
                  f"idle {g(rec.get('idle_reserved_bytes'))} GiB plan "
                  f"{(rec.get('plan') or {}).get('level', '-')}"
                  f"{'h' if (rec.get('plan') or {}).get('host') else ''} {rec['wall_s']:7.1f} s",
                  flush=True)
            with open(os.path.join(opts.out, "kb_memory.jsonl"), "a") as f:
                f.write(json.dumps(rec) + "\n")
    except KeyboardInterrupt as exc:
        stopped = f"interrupted ({exc or 'SIGINT'}) after {len(recs)} tasks"
    finally:
        if service:
            service.terminate()
            try:
                service.wait(timeout=60)
            except subprocess.TimeoutExpired:
                service.kill()
    new = len(recs)
    recs = done + recs  # the summary covers the earlier calls' records too
    by: dict[str, int] = {}
    for r in recs:
        by[r.get("verdict", "error")] = by.get(r.get("verdict", "error"), 0) + 1
    oom_charged = [r["task"] for r in recs if r.get("failure") == "oom"]
    ratios = [r["peak_bytes"] / r["footprint_bytes"] for r in recs
              if r.get("peak_bytes") and r.get("footprint_bytes")]
    # Both processes: the evaluator's reserved peak, the candidate's and the arena on the
    # device, over the footprint, for tasks of at least 1 GiB (below, the fixed overhead
    # dominates any ratio).
    both = [((r.get("peak_reserved_bytes") or 0) + (r.get("candidate_peak_reserved_bytes") or 0)
             + (r.get("arena_device_bytes") or 0)) / r["footprint_bytes"] for r in recs
            if r.get("footprint_bytes") and r["footprint_bytes"] >= GIB
            and r.get("peak_reserved_bytes")]
    idle = [r["idle_reserved_bytes"] for r in recs if r.get("idle_reserved_bytes") is not None]
    summary = {"corpus": corpus, "levels": levels, "tasks": len(items), "done": new,
               "earlier": len(done), "binaries": sorted({str(r.get("binary")) for r in recs}),
               "stopped": stopped, "verdicts": by, "oom_charged_to_candidate": oom_charged,
               "max_peak_over_footprint": max(ratios) if ratios else None,
               "max_both_reserved_over_footprint_1gib": max(both) if both else None,
               "max_idle_reserved_bytes": max(idle) if idle else None,
               "wall_s": round(time.monotonic() - t0, 1), "records": recs}
    with open(os.path.join(opts.out, "kb_memory.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"\n{'level':>5} {'tasks':>5} " + " ".join(f"{v:>14}" for v in
                                                     ("correct", "failed", "infrastructure",
                                                      "error")))
    for lv in levels:
        rs = [r for r in recs if r["level"] == lv]
        print(f"{lv:>5} {len(rs):>5} " + " ".join(
            f"{sum(1 for r in rs if r.get('verdict') == v):>14}"
            for v in ("correct", "failed", "infrastructure", "error")))
    print(json.dumps({k: summary[k] for k in ("done", "tasks", "earlier", "binaries", "stopped",
                                              "verdicts",
                                              "oom_charged_to_candidate",
                                              "max_peak_over_footprint",
                                              "max_both_reserved_over_footprint_1gib",
                                              "max_idle_reserved_bytes", "wall_s")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
