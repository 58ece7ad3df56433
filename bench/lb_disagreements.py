#!/usr/bin/env python3
"""bench/lb_disagreements.py - where our verdicts on the leaderboard corpus disagree with
KernelBench's, from the store bench/bench_leaderboard.sh wrote: every solution there carries
the speedup KernelBench measured, so it was scored correct there; each one we fail is listed
under the class its report gives (stage, failure kind, the kind of input set it failed on, the
first words of the message), then agreement and the rank correlation of our speedups over eager
with KernelBench's, over all solutions and per level.

  python3 bench/lb_disagreements.py OUT_DIR/lb.sqlite [RERUN/lb.sqlite ...] [--json FILE]
      [--task-list FILE]

With several stores, a later one's verdict on a solution (task and label) replaces an earlier
one's: the whole corpus as it stands after a rerun of some of its tasks (`--tasks`).

--task-list writes the disagreeing tasks' ids, comma-separated, for `bench run --tasks` (the
same corpus again, only those tasks: what a change to the evaluator now says of them).

Exit status: 0; 1 the store holds no evaluated solution; 2 no such file, or not a bench store.

Which class is a hack we catch, numerics, a rule KernelBench lacks or our defect is decided by
reading the solutions; docs/BENCHMARKS.md holds that table for each whole-corpus run.
"""

import argparse
import collections
import json
import os
import re
import sqlite3
import sys

from leaderboard import spearman  # bench/leaderboard.py: the same rank correlation


def rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def set_kind(harness: dict, index) -> str:
    for s in (harness.get("verification") or {}).get("sets") or []:
        if s.get("seed_index") == index:
            return s.get("kind") or "?"
    return "?"


def classify(report: dict, stage: str, message: str) -> str:
    h = report.get("harness") or {}
    f = h.get("failure") or {}
    kind = f.get("kind") or stage
    where = ""
    s = (f.get("details") or {}).get("set")
    if s is not None:
        where = f" on a {set_kind(h, s)} set" if set_kind(h, s) != "?" else ""
        m = re.search(r"input set \d+ \(([a-z-]+)", message or "")
        if m:
            where = f" on a {m.group(1)} set"
    text = message or ""
    if "error:" in text:  # a compiler's: what it says, not where
        text = text.split("error:", 1)[1]
    elif re.match(r"\S+\.(py|cu|cpp)(:\d+)?: ", text):  # a file's name first
        text = text.split(": ", 1)[1]
    m = re.search(r"\b(\w+Error|\w+Exception)\b", text)
    if kind in ("exception", "build") and m:
        text = m.group(1)
    text = re.sub(r"\b\d+(\.\d+)?(e[+-]?\d+)?\b", "N", text)
    text = re.split(r"[;\n]|: missing| \(|: RuntimeError", text)[0]
    first = re.sub(r'"[^"]*"|`[^`]*`', "'_'", text).strip()
    return f"{stage}/{kind}{where}: {first[:70]}"


def is_sqlite(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("db", nargs="+", help="stores of `bench run`; later ones override")
    p.add_argument("--json", help="also write the classes and numbers here")
    p.add_argument("--task-list", help="write the disagreeing tasks' ids here, comma-separated")
    opts = p.parse_args()
    # `--json a.sqlite b.sqlite` reads as a flag before two stores but names a.sqlite as the
    # output: an output that is a store (or any SQLite file) is refused, never overwritten.
    for flag, out in (("--json", opts.json), ("--task-list", opts.task_list)):
        if out and is_sqlite(out):
            print(f"{flag} {out}: that is an SQLite file (a store?); refusing to overwrite it "
                  f"({flag} takes the file to write)", file=sys.stderr)
            return 2
    latest: dict[tuple[str, str], tuple] = {}  # (task, label) -> row, the last store's
    for path in opts.db:
        if not os.path.isfile(path):
            print(f"{path}: no such file", file=sys.stderr)
            return 2
        try:
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            for row in db.execute(
                    "select a.task_id, a.label, a.source, a.extra, r.verdict, r.stage, r.message, "
                    "r.speedup_eager, r.json from attempts a join reports r on r.attempt_id = a.id "
                    "where a.kind != 'missing'"):
                latest[(row[0], row[1])] = row
            db.close()
        except sqlite3.Error as e:
            print(f"{path}: not a store of `cuda-agent bench run` ({e})", file=sys.stderr)
            return 2
    rows = list(latest.values())
    if not rows:
        print(f"no evaluated solution in {', '.join(opts.db)}", file=sys.stderr)
        return 1
    classes: dict[str, list[str]] = collections.defaultdict(list)
    failed_tasks: set[str] = set()
    pairs: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    correct = collections.Counter()
    total = collections.Counter()
    for task, label, source, extra, verdict, stage, message, speedup, js in rows:
        level = task.split("_")[0]
        total[level] += 1
        kb = json.loads(extra or "{}").get("kernelbench_speedup")
        if verdict == "correct":
            correct[level] += 1
            if speedup and kb:
                pairs[level].append((kb, speedup))
            continue
        classes[classify(json.loads(js), stage or "?", message or "")].append(f"{task} ({label})")
        failed_tasks.add(task)
    n, ok = sum(total.values()), sum(correct.values())
    allpairs = [x for v in pairs.values() for x in v]
    summary = {
        "solutions": n, "correct": ok, "agreement": round(ok / n, 4),
        "spearman": rounded(spearman([a for a, _ in allpairs], [b for _, b in allpairs])),
        "n_ranked": len(allpairs),
        "levels": {lv: {"solutions": total[lv], "correct": correct[lv],
                        "spearman": rounded(spearman([a for a, _ in pairs[lv]],
                                                     [b for _, b in pairs[lv]]))}
                   for lv in sorted(total)},
        "disagreements": {k: v for k, v in sorted(classes.items(), key=lambda kv: -len(kv[1]))},
    }
    print(f"{n} solutions evaluated, {ok} correct as KernelBench scored them "
          f"({100 * ok / n:.1f}%); Spearman of speedups over eager {summary['spearman']} "
          f"over {len(allpairs)}")
    for lv, s in summary["levels"].items():
        print(f"  {lv}: {s['correct']} of {s['solutions']} correct, Spearman {s['spearman']}")
    print(f"{n - ok} disagreements:")
    for k, v in summary["disagreements"].items():
        print(f"  {len(v):3d}  {k}")
        for t in v:
            print(f"         {t}")
    if opts.task_list:
        with open(opts.task_list, "w") as f:
            f.write(",".join(sorted(failed_tasks)) + "\n")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
