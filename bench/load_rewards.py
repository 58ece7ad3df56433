#!/usr/bin/env python3
"""bench/load_rewards.py - the same evaluations with the evaluator idle and busy (issue 21).

One evaluator service; each subject is evaluated REPEATS times with nothing else running
(idle), then REPEATS times while LOAD clients keep its compile pool busy (load): each client
evaluates, again and again, a KernelBench-format candidate with a fresh comment in its cuda
source, so every one of its evaluations compiles (--load-mode compile: compile only, the CPU
load alone; full: whole evaluations, which also queue GPU jobs and refill pre-warmed
candidates). Subjects:

  ex-NAME       examples/solutions/NAME as a workspace, against examples/tasks/NAME.py
  kb-swish-s    examples/kernelbench/swish_scale_bias.py on 2048 x 4096 (small, ~20 us)
  kb-softmax-s  examples/kernelbench/softmax_last_dim.py on 1024 x 8192 (small)
  kb-swish-m    swish_scale_bias on 32768 x 4096 (medium, ~0.3 ms)
  kb-softmax-m  softmax_last_dim on 32768 x 8192 (medium, ~0.6 ms)

The baseline cache is emptied before every measured evaluation (unless --keep-baselines), so
that each evaluation measures eager and torch.compile itself: that is how drift under load
shows. Prints, per subject, the candidate's median and CV, the rewards of both phases and
whether they agree, the noisy_timing flags, the eager and torch.compile medians' drift from
their idle values, and the load's own numbers (compiles done, the compile cores' busy share,
the timing cores' busy share); then the issue's goals as checks. Everything is written to
OUT/load_rewards.json.

  python3 bench/load_rewards.py [--bin .carry/cuda-agent] [--out /tmp/load-rewards]
      [--repeats 10] [--load 8] [--load-mode compile|full] [--subjects a,b,...]
      [--budget-ms 500] [--timing events|device|events,device] [--time-budget 510] [--prewarm 8]
      [--cpu-split SPEC]
      [--keep-baselines] [--service-flags "..."]

--timing events,device compares the two methods side by side: each repeat is evaluated once
with each, one after the other, through the same service and under the same load, and every
(subject, mode) is reported as SUBJECT@MODE.

Run from the repository root on the GPU machine (after `bash bench/carry.sh` here). The time
budget covers everything (service start, warm-up compiles, both phases): subjects that do not
fit are listed as not run, and the load phase is cut to the subjects the idle phase reached.
--budget-ms is the timing budget per measured function (the service's default is 2000 ms;
less keeps ten repeats of seven subjects in one GPU call, with fewer timed calls each).
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import pathlib
import random
import shlex
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
THRESHOLD = 1.05  # the reward's (src/eval/reward.h)
KB = {  # subject: (example name, batch_size)
    "kb-swish-s": ("swish_scale_bias", 2048),
    "kb-softmax-s": ("softmax_last_dim", 1024),
    "kb-swish-m": ("swish_scale_bias", 32768),
    "kb-softmax-m": ("softmax_last_dim", 32768),
}


def log(msg: str) -> None:
    print(msg, flush=True)


class Service:
    def __init__(self, ca: str, out: pathlib.Path, args: argparse.Namespace):
        self.ca, self.out = ca, out
        self.sock = tempfile.mktemp(prefix="ca-load-", suffix=".sock", dir="/tmp")
        self.cache = out / "cache"
        cmd = [ca, "evaluator", "--socket", self.sock, "--cache-dir", str(self.cache),
               "--prewarm", str(args.prewarm), *shlex.split(args.service_flags)]
        if args.cpu_split:
            cmd += ["--cpu-split", args.cpu_split]
        self.logf = open(out / "service.log", "w")
        self.proc = subprocess.Popen(cmd, stderr=self.logf, stdout=self.logf)

    def wait(self, limit_s: float) -> bool:
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit_s:
            if os.path.exists(self.sock):
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.1)
        return False

    def status(self) -> dict:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(10)
        s.connect(self.sock)
        b = json.dumps({"op": "status"}).encode()
        s.sendall(struct.pack(">I", len(b)) + b)
        head = b""
        while len(head) < 4:
            head += s.recv(4 - len(head))
        n = struct.unpack(">I", head)[0]
        d = b""
        while len(d) < n:
            d += s.recv(n - len(d))
        s.close()
        return json.loads(d)

    def idle(self, limit_s: float) -> float:
        """Waits until no request is in flight (the load's last compiles); returns the wait."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit_s:
            try:
                if self.status().get("active", 1) <= 0:
                    break
            except OSError:
                break
            time.sleep(0.5)
        return time.monotonic() - t0

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.logf.close()


def make_subjects(ca: str, work: pathlib.Path, names: list[str] | None) -> dict[str, list[str]]:
    """subject -> the eval arguments that name it (a workspace, or --task and the file)."""
    out: dict[str, list[str]] = {}
    for sol in sorted((ROOT / "examples" / "solutions").iterdir()):
        name = f"ex-{sol.name}"
        if names and name not in names:
            continue
        ws = work / name
        subprocess.run([ca, "workspace", "create", "--task",
                        str(ROOT / "examples" / "tasks" / f"{sol.name}.py"), str(ws)],
                       check=True, stdout=subprocess.DEVNULL)
        for f in (sol / "kernels").iterdir():
            (ws / "kernels" / f.name).write_bytes(f.read_bytes())
        (ws / "model_new.py").write_bytes((sol / "model_new.py").read_bytes())
        out[name] = [str(ws)]
    for name, (example, batch) in KB.items():
        if names and name not in names:
            continue
        task = (ROOT / "examples" / "tasks" / f"{example}.py").read_text()
        lines = [f"batch_size = {batch}" if ln.startswith("batch_size = ") else ln
                 for ln in task.splitlines()]
        tfile = work / f"{name}_task.py"
        tfile.write_text("\n".join(lines) + "\n")
        out[name] = ["--task", str(tfile), "--kernelbench-file",
                     str(ROOT / "examples" / "kernelbench" / f"{example}.py")]
    order = ["kb-swish-s", "kb-softmax-m", "ex-swish_scale_bias", "kb-softmax-s", "kb-swish-m",
             "ex-softmax_last_dim"]  # small, medium and an example first: the time may run out
    return dict(sorted(out.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order
                       else len(order)))


def evaluate(ca: str, sock: str, target: list[str], budget_ms: int, extra=(),
             timeout: float = 600) -> dict:
    t0 = time.monotonic()
    p = subprocess.run([ca, "eval", "--server", sock, "--json", "--budget-ms", str(budget_ms),
                        *extra, *target], capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - t0
    try:
        rep = json.loads(p.stdout)
    except ValueError:
        return {"error": f"exit {p.returncode}: {p.stderr[-500:]}", "wall_s": wall}
    h = rep.get("harness") or {}
    t = h.get("timing") or {}

    def stats(name):
        s = t.get(name) or {}
        host = s.get("host") or {}
        return {"median_ms": s.get("median_ms"), "cv": s.get("cv"), "iqr_rel": s.get("iqr_rel"),
                "noisy": s.get("noisy"), "noise": s.get("noise"),
                "attempts": len(s.get("attempts") or []) or None,
                "runq": (s.get("sched") or {}).get("runq_wait_fraction"),
                "busy_own": host.get("busy_own"), "busy_other": host.get("busy_other"),
                "error": s.get("error")}

    rw = rep.get("reward") or {}
    return {"reward": rw.get("reward"), "speedup_eager": rw.get("speedup_eager"),
            "speedup_compile": rw.get("speedup_compile"), "stage": rep.get("stage"),
            "flags": [f.get("kind") for f in h.get("flags") or []],
            "at_risk": [d for f in h.get("flags") or [] if f.get("kind") == "noisy_timing"
                        for d in f.get("decision_at_risk") or []],
            "candidate": stats("candidate"), "eager": stats("eager"),
            "compile": stats("compile"), "wall_s": wall, "elapsed_ms": rep.get("elapsed_ms")}


def clear_baselines(cache: pathlib.Path) -> None:
    for f in glob.glob(str(cache / "**" / "baseline-*.json"), recursive=True):
        try:
            os.unlink(f)
        except OSError:
            pass


class Load:
    """LOAD clients, each evaluating freshly varied KernelBench candidates until stopped."""

    def __init__(self, ca: str, sock: str, work: pathlib.Path, n: int, mode: str,
                 budget_ms: int):
        self.ca, self.sock, self.work, self.mode, self.budget_ms = ca, sock, work, mode, budget_ms
        self.stop_ev = threading.Event()
        self.done = collections.Counter()
        self.lock = threading.Lock()
        self.procs: dict[int, subprocess.Popen] = {}
        self.threads = [threading.Thread(target=self.client, args=(i,), daemon=True)
                        for i in range(n)]
        task = ROOT / "examples" / "tasks" / "swish_scale_bias.py"
        self.task = str(task)
        self.src = (ROOT / "examples" / "kernelbench" / "swish_scale_bias.py").read_text()

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def client(self, i: int) -> None:
        k = 0
        rnd = random.Random(i)
        while not self.stop_ev.is_set():
            k += 1
            f = self.work / f"load-{i}-{k % 2}.py"
            tag = f"// load client {i} job {k} {rnd.getrandbits(64):x}\n"
            f.write_text(self.src.replace('cuda_source = r"""\n', 'cuda_source = r"""\n' + tag,
                                          1))
            cmd = [self.ca, "eval", "--server", self.sock, "--json", "--budget-ms",
                   str(self.budget_ms), "--task", self.task, "--kernelbench-file", str(f)]
            if self.mode == "compile":
                cmd.append("--compile-only")
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with self.lock:
                self.procs[i] = p
            p.wait()
            if not self.stop_ev.is_set():
                with self.lock:
                    self.done["ok" if p.returncode == 0 else f"rc{p.returncode}"] += 1

    def stop(self) -> None:
        self.stop_ev.set()
        with self.lock:
            for p in self.procs.values():
                if p.poll() is None:
                    p.kill()
        for t in self.threads:
            t.join(timeout=10)


def med(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return statistics.median(xs) if xs else None


def fmt(x, spec=".3f", none="-"):
    return format(x, spec) if isinstance(x, (int, float)) else none


def summarize(name: str, idle: list[dict], load: list[dict]) -> dict:
    out = {"subject": name}
    for phase, recs in (("idle", idle), ("load", load)):
        ok = [r for r in recs if "error" not in r]
        out[phase] = {
            "n": len(recs), "errors": len(recs) - len(ok),
            "rewards": dict(collections.Counter(r.get("reward") for r in ok)),
            "cand_ms": med([r["candidate"]["median_ms"] for r in ok]),
            "cand_cv": med([r["candidate"]["cv"] for r in ok]),
            "cand_cv_max": max([r["candidate"]["cv"] for r in ok
                                if isinstance(r["candidate"]["cv"], (int, float))], default=None),
            "cand_iqr": med([r["candidate"]["iqr_rel"] for r in ok]),
            "eager_ms": med([r["eager"]["median_ms"] for r in ok]),
            "compile_ms": med([r["compile"]["median_ms"] for r in ok]),
            "eager_cv": med([r["eager"]["cv"] for r in ok]),
            "compile_cv": med([r["compile"]["cv"] for r in ok]),
            "speedup_compile": med([r.get("speedup_compile") for r in ok]),
            "speedup_eager": med([r.get("speedup_eager") for r in ok]),
            "noisy_flags": sum("noisy_timing" in r["flags"] for r in ok),
            "at_risk": sum(bool(r["at_risk"]) for r in ok),
            "repeated": sum((r["candidate"]["attempts"] or 1) > 1 for r in ok),
            "busy_own": med([r["candidate"]["busy_own"] for r in ok]),
            "busy_other": med([r["candidate"]["busy_other"] for r in ok]),
            "eval_s": med([r["wall_s"] for r in recs]),
        }
    i, ld = out["idle"], out["load"]

    def drift(key):
        a, b = i.get(key), ld.get(key)
        return (b / a - 1) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a \
            else None

    out["drift"] = {k: drift(k) for k in ("cand_ms", "eager_ms", "compile_ms")}
    rw_i, rw_l = i["rewards"], ld["rewards"]
    modal = max(rw_i, key=rw_i.get) if rw_i else None
    out["idle_reward"] = modal
    out["agree"] = (sum(v for k, v in rw_l.items() if k == modal), ld["n"] - ld["errors"])
    sp = [s for s in (i.get("speedup_eager"), i.get("speedup_compile"))
          if isinstance(s, (int, float))]
    out["margin"] = min((abs(s / THRESHOLD - 1) for s in sp), default=None)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_bin = ".carry/cuda-agent" if os.path.exists(".carry/cuda-agent") else \
        "build/cuda-agent"
    ap.add_argument("--bin", default=default_bin)
    ap.add_argument("--out", default="/tmp/load-rewards")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--load", type=int, default=8, help="busy clients (default 8)")
    ap.add_argument("--load-mode", choices=("compile", "full"), default="compile")
    ap.add_argument("--subjects", help="comma-separated subset (default: all)")
    ap.add_argument("--budget-ms", type=int, default=500)
    ap.add_argument("--timing", default="events",
                    help="the measured evaluations' timing method (eval --timing): events, "
                         "device, or both as events,device (each repeat evaluated once with "
                         "each, one after the other, through the same service: side by side)")
    ap.add_argument("--time-budget", type=float, default=510.0, help="seconds, all included")
    ap.add_argument("--prewarm", type=int, default=8)
    ap.add_argument("--cpu-split", help="the service's --cpu-split (e.g. off, to compare)")
    ap.add_argument("--keep-baselines", action="store_true",
                    help="keep the baseline cache between evaluations")
    ap.add_argument("--service-flags", default="", help="extra flags for cuda-agent evaluator")
    args = ap.parse_args()
    modes = args.timing.split(",")
    if any(m not in ("events", "device") for m in modes) or len(set(modes)) != len(modes):
        ap.error(f"--timing: events, device or events,device (not {args.timing!r})")
    t_start = time.monotonic()
    # The measured results' keys: the subject, or SUBJECT@MODE when several modes are compared.
    key = (lambda n, m: n) if len(modes) == 1 else (lambda n, m: f"{n}@{m}")  # noqa: E731
    tim = lambda m: ("--timing", m)  # noqa: E731
    left = lambda: args.time_budget - (time.monotonic() - t_start)  # noqa: E731
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix="load-rewards-"))
    ca = os.path.abspath(args.bin)
    names = args.subjects.split(",") if args.subjects else None
    subjects = make_subjects(ca, work, names)
    log(f"subjects: {', '.join(subjects)}; repeats {args.repeats}, timing {args.timing}, "
        f"load {args.load} ({args.load_mode}), budget {args.budget_ms} ms per timing, "
        f"{args.time_budget:.0f} s in all; {os.cpu_count()} CPUs")

    svc = Service(ca, out, args)
    results: dict = {"args": vars(args), "subjects": {}, "not_run": []}
    try:
        if not svc.wait(min(240.0, left())):
            log("the service did not start:\n" + (out / "service.log").read_text()[-3000:])
            return 1
        st = svc.status()
        results["cpus"] = st.get("cpus")
        log(f"service ready in {time.monotonic() - t_start:.1f} s; cpus: "
            f"{json.dumps(st.get('cpus'))}")

        # Warm-up: every subject compiled (at once) and its first evaluation paid for.
        t0 = time.monotonic()
        threads, warm = [], {}

        def warm_one(n, target):
            for m in modes:
                warm[key(n, m)] = evaluate(ca, svc.sock, target, args.budget_ms, tim(m))

        for n, target in subjects.items():
            threads.append(threading.Thread(target=warm_one, args=(n, target)))
            threads[-1].start()
        for t in threads:
            t.join()
        for n in list(subjects):
            runs = [warm[key(n, m)] for m in modes]
            bad = [r for r in runs if "error" in r or r.get("stage") != "done"]
            if bad:
                log(f"  warm-up {n}: {bad[0].get('error') or bad[0].get('stage')}; dropped")
                subjects.pop(n)
        log(f"warm-up (compiles, first evaluations) {time.monotonic() - t0:.1f} s")

        def measure(n: str, target: list[str]) -> dict[str, list[dict]]:
            """REPEATS evaluations of subject n in each mode, the modes taking turns."""
            recs: dict[str, list[dict]] = {key(n, m): [] for m in modes}
            for _ in range(args.repeats):
                for m in modes:
                    if not args.keep_baselines:
                        clear_baselines(svc.cache)
                    recs[key(n, m)].append(evaluate(ca, svc.sock, target, args.budget_ms,
                                                    tim(m)))
            return recs

        # Idle phase: as many subjects as leave time for their load phase too.
        idle: dict[str, list[dict]] = {}
        load: dict[str, list[dict]] = {}
        # One evaluation's wall time, compiles cached, measured once on the first subject (the
        # warm-up's include the compile), its baselines measured again as below: what the
        # budget below is reckoned in.
        per_eval = None
        if subjects:
            if not args.keep_baselines:
                clear_baselines(svc.cache)
            probe = evaluate(ca, svc.sock, next(iter(subjects.values())), args.budget_ms,
                             tim(modes[0]))
            per_eval = probe["wall_s"]
            log(f"one evaluation, compiled: {per_eval:.1f} s")
        for k, (n, target) in enumerate(subjects.items()):
            # This subject's idle block, and the load blocks of it and of those before it
            # (an evaluation under load taken as 2 idle ones).
            need = len(modes) * args.repeats * (per_eval or 6.0) * (1 + 2.0 * (k + 1)) + 15
            if left() < need:
                results["not_run"].append(n)
                continue
            recs = measure(n, target)
            idle.update(recs)
            per_eval = med([r["wall_s"] for rs in idle.values() for r in rs])
            for kk, rs in recs.items():
                log(f"  idle {kk}: {per_eval:.1f} s/eval, rewards "
                    f"{[r.get('reward') for r in rs]}, candidate "
                    f"{fmt((rs[-1].get('candidate') or {}).get('median_ms'))} ms")
        # Load phase, in the same order, with the compile pool kept busy throughout.
        ld = Load(ca, svc.sock, work, args.load, args.load_mode, args.budget_ms)
        ld.start()
        time.sleep(5)  # the clients' first compiles under way
        t_load = time.monotonic()
        for n in [n for n in subjects if key(n, modes[0]) in idle]:
            per_load = med([r["wall_s"] for rs in load.values() for r in rs]) or \
                2.0 * (per_eval or 6.0)
            if left() < len(modes) * args.repeats * per_load + 10:
                results["not_run"].append(f"{n} (under load)")
                continue
            recs = measure(n, subjects[n])
            load.update(recs)
            for kk, rs in recs.items():
                log(f"  load {kk}: rewards {[r.get('reward') for r in rs]}, "
                    f"load jobs done {sum(ld.done.values())}")
        load_s = time.monotonic() - t_load
        ld.stop()
        results["load"] = {"seconds": load_s, "jobs": dict(ld.done),
                           "jobs_per_min": 60 * sum(ld.done.values()) / max(load_s, 1e-6)}

        # The report.
        log("")
        log(f"{'subject':20} {'cand ms idle/load':>19} {'CV% idle/load':>15} {'rewards idle':>13} "
            f"{'rewards load':>15} {'agree':>6} {'flag':>5} {'eager d%':>8} {'compile d%':>10} "
            f"{'x compile':>11} {'busy own/oth':>13}")
        checks = []
        for n in idle:
            if n not in load:
                continue
            s = summarize(n, idle[n], load[n])
            results["subjects"][n] = {"summary": s, "idle": idle[n], "load": load[n]}
            i, l_ = s["idle"], s["load"]
            pct = lambda x: fmt(100 * x, "+.1f") if isinstance(x, (int, float)) else "-"  # noqa
            log(f"{n:20} {fmt(i['cand_ms']):>9}/{fmt(l_['cand_ms']):<9} "
                f"{fmt(100 * (i['cand_cv'] or 0), '.2f'):>7}/{fmt(100 * (l_['cand_cv'] or 0), '.2f'):<7} "
                f"{json.dumps(i['rewards']):>13} {json.dumps(l_['rewards']):>15} "
                f"{s['agree'][0]:>3}/{s['agree'][1]:<2} {l_['noisy_flags']:>5} "
                f"{pct(s['drift']['eager_ms']):>8} {pct(s['drift']['compile_ms']):>10} "
                f"{fmt(i['speedup_compile'], '.3f'):>5}/{fmt(l_['speedup_compile'], '.3f'):<5} "
                f"{fmt(l_['busy_own'], '.2f'):>6}/{fmt(l_['busy_other'], '.2f'):<6}")
            far = s["margin"] is not None and s["margin"] > 0.02
            if far:
                checks.append((f"{n}: reward identical in all {l_['n']} under load (speedups "
                               f"{100 * s['margin']:.1f}% from the threshold)",
                               s["agree"][0] == s["agree"][1] == args.repeats
                               and len(i["rewards"]) == 1 and len(l_["rewards"]) == 1))
            if isinstance(i["cand_ms"], (int, float)) and i["cand_ms"] >= 0.020:
                checks.append((f"{n}: candidate CV <= 2% under load (median "
                               f"{fmt(100 * (l_['cand_cv'] or 0), '.2f')}%, worst "
                               f"{fmt(100 * (l_['cand_cv_max'] or 0), '.2f')}%)",
                               (l_["cand_cv"] or 1) <= 0.02))
            for k in ("eager_ms", "compile_ms"):
                d = s["drift"][k]
                if d is not None:
                    checks.append((f"{n}: {k[:-3]} baseline within 2% of idle ({pct(d)}%)",
                                   abs(d) <= 0.02))
        log("")
        log(f"load: {json.dumps(results['load'])}")
        if results["not_run"]:
            log(f"not run (time budget): {', '.join(results['not_run'])}")
        log("goals (issue 21):")
        for what, ok in checks:
            log(f"  {'PASS' if ok else 'FAIL'}  {what}")
        results["checks"] = [{"what": w, "ok": ok} for w, ok in checks]
        results["elapsed_s"] = time.monotonic() - t_start
        log(f"total {results['elapsed_s']:.0f} s; details in {out / 'load_rewards.json'}")
    finally:
        svc.stop()
        (out / "load_rewards.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
