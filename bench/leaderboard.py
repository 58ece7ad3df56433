#!/usr/bin/env python3
"""bench/leaderboard.py - the evaluator's verdicts on real LLM-written KernelBench solutions.

Every solution of the leaderboard corpus (../shared/corpora/kernelbench-leaderboard: 383
KernelBench-format files written by LLMs, each scored correct by KernelBench with a speedup over
eager PyTorch) is evaluated with `cuda-agent eval --kernelbench-file` through an evaluator
service, under one rule set. Printed and written to OUT/summary.json: how many got a verdict,
agreement with KernelBench's verdict (all were correct there), Spearman's rank correlation of our
speedup over eager with theirs, and every disagreement grouped by what failed it. Per-solution
records go to OUT/results.jsonl as they finish.

    python3 bench/leaderboard.py --bin build/cuda-agent --out OUT [--rules kernelbench]
        [--sample N --seed S] [--clients 4] [--server SOCKET] [--corpus DIR]
        [--budget-ms 300] [--device cuda|cpu] [--compile-only | --policy-only] [--arch SM]

Without --server it starts `cuda-agent evaluator` itself (and stops it at the end). --sample
takes N solutions stratified by level (the same N and seed pick the same ones). The torch.compile
baseline is not measured (KernelBench's speedups are over eager). --compile-only stops after the
build and the object check: the policy verdicts on a machine without a GPU (give --arch there).
--policy-only stops before any compiler runs (the extraction and the static policy, about 0.1 s
a file). Neither starts a service; "correct" then counts the solutions that passed those stages,
and the summary's "per_solution_s" gives the wall time of one evaluation (p50, p90, max).
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CORPUS = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "corpora",
                                               "kernelbench-leaderboard"))


def load_corpus(root: str) -> list[dict]:
    with open(os.path.join(root, "data.json")) as f:
        data = json.load(f)
    items = []
    for key, sols in data.items():
        m = re.match(r"Level (\d+): (\d+)_", key)
        if not m:
            continue
        level, num = int(m.group(1)), int(m.group(2))
        for s in sols:
            items.append({"key": key, "level": level, "model": s.get("display_name"),
                          "kb_speedup": s.get("torch_speedup"), "file": s["file"],
                          "task": os.path.join(root, "problems", f"l{level}_p{num}.py"),
                          "solution": os.path.join(root, "solutions", s["file"] + ".py")})
    return items


def stratified(items: list[dict], n: int, seed: int) -> list[dict]:
    """n items, each level in proportion to its share of the corpus, by a seeded draw."""
    rng = random.Random(seed)
    by_level = collections.defaultdict(list)
    for it in items:
        by_level[it["level"]].append(it)
    picked = []
    for level in sorted(by_level):
        group = sorted(by_level[level], key=lambda it: it["file"])
        k = min(len(group), max(1, round(n * len(group) / len(items))))
        picked += rng.sample(group, k)
    rng.shuffle(picked)  # levels interleaved: a run cut short still covers each
    return picked


def failure_of(report: dict) -> str:
    """A short name for what decided a failed evaluation."""
    stage = report.get("stage") or "?"
    if stage == "policy":
        pol = (report.get("policy_so") or {}).get("violations") or \
            (report.get("policy") or {}).get("violations") or []
        return "policy:" + ",".join(sorted({v["rule"] for v in pol})) if pol else "policy"
    if stage in ("verify", "timing"):
        f = (report.get("harness") or {}).get("failure") or {}
        kind = f.get("kind") or "?"
        sets = ((report.get("harness") or {}).get("verification") or {}).get("sets") or []
        last = sets[-1]["kind"] if sets and not sets[-1].get("ok", True) else None
        return f"{stage}:{kind}" + (f"@{last}" if last and kind == "mismatch" else "")
    return stage


# What each failure says about the disagreement with KernelBench (a first reading; the table
# in docs/BENCHMARKS.md is checked by hand on examples).
CLASSES = [
    ("policy:", "a rule KernelBench does not have, or a hack we catch (read the rule)"),
    ("verify:launch_evidence", "hack we catch: the extension's kernels never run"),
    ("verify:mismatch@random", "numerics or a wrong kernel on KernelBench-style inputs"),
    ("verify:mismatch@adversarial", "a check KernelBench lacks: heavy-tailed inputs"),
    ("verify:mismatch@shape", "a check KernelBench lacks: another shape"),
    ("verify:mismatch@value-stress", "a check KernelBench lacks: large values"),
    ("verify:mismatch@derived-shape", "a check KernelBench lacks: another shape"),
    ("verify:precision", "reduced precision (TF32/FP16 inside the tolerance)"),
    ("verify:input_mutated", "writes its inputs"),
    ("verify:oom", "our defect: the evaluator's GPU memory (issue 22)"),
    ("compile", "build: the source does not build as we build it"),
    ("extract", "not a load_inline candidate"),
    ("error", "the evaluator itself failed"),
]


def classify(failure: str) -> str:
    for prefix, what in CLASSES:
        if failure.startswith(prefix):
            return what
    return "other"


def spearman(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 3:
        return None

    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2 + 1
            i = j + 1
        return r

    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = sum((a - mx) ** 2 for a in rx) ** 0.5
    vy = sum((b - my) ** 2 for b in ry) ** 0.5
    return cov / (vx * vy) if vx and vy else None


def evaluate(opts: argparse.Namespace, it: dict) -> dict:
    cmd = [opts.bin, "eval", "--json", "--rules", opts.rules, "--task", it["task"],
           "--kernelbench-file", it["solution"], "--budget-ms", str(opts.budget_ms),
           "--timeout", str(opts.timeout), "--device", opts.device, "--no-compile-baseline"]
    if opts.compile_only:
        cmd.append("--compile-only")
    if opts.policy_only:
        cmd.append("--policy-only")
    if opts.arch:
        cmd += ["--arch", opts.arch]
    if opts.server:
        cmd += ["--server", opts.server]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=4 * opts.timeout + 600)
    rec = {k: it[k] for k in ("key", "level", "model", "kb_speedup", "file")}
    rec["wall_s"] = round(time.monotonic() - t0, 2)
    try:
        report = json.loads(p.stdout)
    except json.JSONDecodeError:
        rec.update(verdict="error", failure="error", message=(p.stderr or p.stdout)[-400:])
        return rec
    reward = report.get("reward") or {}
    rec.update(stage=report.get("stage"), ok=bool(report.get("ok")),
               reward=reward.get("reward"), speedup=reward.get("speedup_eager"),
               verdict="correct" if report.get("ok") else "failed",
               message=(report.get("message") or "")[:400])
    h = report.get("harness") or {}
    launches = (h.get("verification") or {}).get("launches") or {}
    if "torch_share" in launches:
        rec["torch_share"] = launches["torch_share"]
    notes = [n["rule"] for n in (report.get("policy") or {}).get("notes", []) +
             (report.get("policy_so") or {}).get("notes", [])]
    rec["note_rules"] = sorted(set(notes))
    if not rec["ok"]:
        rec["failure"] = failure_of(report)
    return rec


def summarize(recs: list[dict], opts: argparse.Namespace) -> dict:
    n = len(recs)
    correct = [r for r in recs if r.get("ok")]
    verdict = [r for r in recs if r.get("verdict") in ("correct", "failed")]
    pairs = [(r["speedup"], r["kb_speedup"]) for r in correct
             if isinstance(r.get("speedup"), (int, float)) and isinstance(r.get("kb_speedup"),
                                                                           (int, float))]
    fails = collections.Counter(r["failure"] for r in recs if not r.get("ok"))
    examples = collections.defaultdict(list)
    for r in recs:
        if not r.get("ok") and len(examples[r["failure"]]) < 3:
            examples[r["failure"]].append({"file": r["file"], "key": r["key"],
                                           "message": r.get("message", "")[:240]})
    by_level = {}
    for level in sorted({r["level"] for r in recs}):
        rs = [r for r in recs if r["level"] == level]
        by_level[level] = {"n": len(rs), "correct": sum(1 for r in rs if r.get("ok"))}
    walls = sorted(r["wall_s"] for r in recs if "wall_s" in r)

    def pct(q):
        return walls[min(len(walls) - 1, int(q * len(walls)))] if walls else None
    return {
        "stopped_after": "policy" if opts.policy_only else "compile" if opts.compile_only
        else None,
        "per_solution_s": {"p50": pct(0.5), "p90": pct(0.9), "max": walls[-1] if walls else None},
        "rules": opts.rules, "n": n, "with_verdict": len(verdict), "correct": len(correct),
        "agreement": round(len(correct) / n, 4) if n else None,
        "spearman_speedup": spearman([a for a, _ in pairs], [b for _, b in pairs]),
        "n_speedup_pairs": len(pairs), "by_level": by_level,
        "failures": [{"failure": f, "count": c, "class": classify(f), "examples": examples[f]}
                     for f, c in fails.most_common()],
        "note_rules": collections.Counter(x for r in recs for x in r.get("note_rules", [])),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--corpus", default=DEFAULT_CORPUS)
    p.add_argument("--rules", choices=("cuda-agent", "kernelbench"), default="kernelbench")
    p.add_argument("--sample", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--server")
    p.add_argument("--budget-ms", type=int, default=300)
    p.add_argument("--timeout", type=int, default=120)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    stop = p.add_mutually_exclusive_group()
    stop.add_argument("--compile-only", action="store_true")
    stop.add_argument("--policy-only", action="store_true")
    p.add_argument("--arch", help="the target architecture (e.g. sm_90; without a GPU)")
    opts = p.parse_args()
    if not os.path.isfile(os.path.join(opts.corpus, "data.json")):
        print(f"skip: no leaderboard corpus at {opts.corpus}")
        return 77
    opts.bin = os.path.abspath(opts.bin)
    items = load_corpus(opts.corpus)
    if opts.sample:
        items = stratified(items, opts.sample, opts.seed)
    os.makedirs(opts.out, exist_ok=True)
    service = None
    if not opts.server and not opts.compile_only and not opts.policy_only:
        opts.server = os.path.join(tempfile.mkdtemp(prefix="ca-lb-"), "ev.sock")
        log = open(os.path.join(opts.out, "service.log"), "w")
        service = subprocess.Popen([opts.bin, "evaluator", "--socket", opts.server],
                                   stderr=log, stdout=log)
        for _ in range(600):
            if os.path.exists(opts.server):
                break
            time.sleep(0.5)
    t0 = time.monotonic()
    recs = []
    try:
        with open(os.path.join(opts.out, "results.jsonl"), "w") as out, \
                cf.ThreadPoolExecutor(opts.clients) as ex:
            for rec in ex.map(lambda it: evaluate(opts, it), items):
                recs.append(rec)
                out.write(json.dumps(rec) + "\n")
                out.flush()
                print(f"[{len(recs)}/{len(items)}] {rec['key'][:48]:48} {rec.get('verdict')} "
                      f"{rec.get('failure', '')} {rec.get('speedup') or ''}", flush=True)
    finally:
        if service:
            service.terminate()
            service.wait(timeout=60)
    summary = summarize(recs, opts)
    summary["wall_s"] = round(time.monotonic() - t0, 1)
    with open(os.path.join(opts.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({k: summary[k] for k in ("stopped_after", "rules", "n", "with_verdict",
                                              "correct", "agreement", "spearman_speedup",
                                              "by_level", "wall_s", "per_solution_s")}))
    for f in summary["failures"]:
        print(f"  {f['count']:4} {f['failure']:40} {f['class']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
