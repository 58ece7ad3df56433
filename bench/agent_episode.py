"""Helpers of bench/agent_episode.sh (standard library only).

    python3 bench/agent_episode.py script SOLUTION_DIR > script.json
    python3 bench/agent_episode.py summary OUTDIR --device D --run-rc N ...

`script` writes the replies tests/it/fake_llm.py plays: read SKILL.md and model_new.py, write
the solution's kernels/* and model_new.py, run ./compile, ./verify and ./profile, break
model_new.py with one Edit (the scale becomes 2.0), run ./verify again, answer.

`summary` reads OUTDIR/run/trajectory.jsonl (docs/trajectory.schema.json), run.json and the
final reports, writes OUTDIR/summary.json and OUTDIR/summary.md, and exits 1 when a check does
not hold (every step but the deliberately broken ./verify must succeed; best of trajectory must
score the profiled good snapshot at reward >= 1, above the broken final workspace).
"""

import argparse
import datetime
import json
import os
import socket
import sys

# The deliberate mistake: the scale argument replaced by a constant (the tasks' scale is 1.5).
BREAK_OLD = "float(self.scale)"
BREAK_NEW = "2.0"

# The Bash steps, in order, and whether each must succeed.
STEPS = [("compile", "./compile", True), ("verify", "./verify", True),
         ("profile", "./profile", True), ("broken_verify", "./verify", False)]


def bash(cmd, what):
    return {"name": "Bash", "arguments": {"command": cmd, "timeout": 600000, "description": what}}


def script(sol):
    def read(rel):
        with open(os.path.join(sol, rel)) as f:
            return f.read()
    model_new = read("model_new.py")
    if model_new.count(BREAK_OLD) != 1:
        sys.exit("agent_episode.py: %s/model_new.py must hold '%s' once (the deliberate break "
                 "edits it)" % (sol, BREAK_OLD))
    kernels = sorted(os.listdir(os.path.join(sol, "kernels")))
    if not kernels:
        sys.exit("agent_episode.py: no files in %s/kernels" % sol)
    writes = [{"name": "Write", "arguments": {"file_path": "kernels/" + k,
                                              "content": read("kernels/" + k)}}
              for k in kernels]
    writes.append({"name": "Write",
                   "arguments": {"file_path": "model_new.py", "content": model_new}})
    steps = [
        {"content": "Reading the instructions and the skeleton.",
         "tool_calls": [{"name": "Read", "arguments": {"file_path": "SKILL.md"}},
                        {"name": "Read", "arguments": {"file_path": "model_new.py"}}]},
        {"content": "Writing the fused kernel, its binding and ModelNew.", "tool_calls": writes},
    ]
    for _, cmd, _ in STEPS[:3]:
        steps.append({"tool_calls": [bash(cmd, "run " + cmd)]})
    steps.append({"content": "Trying a constant scale.",
                  "tool_calls": [{"name": "Edit", "arguments": {
                      "file_path": "model_new.py", "old_string": BREAK_OLD,
                      "new_string": BREAK_NEW}}]})
    steps.append({"tool_calls": [bash("./verify", "check the change")]})
    steps.append({"content": "Done. (The last change broke correctness; the profiled version "
                             "before it was the good one.)"})
    json.dump(steps, sys.stdout, indent=1)
    sys.stdout.write("\n")


# ---- summary ----

def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def load_lines(path):
    lines = []
    try:
        with open(path) as f:
            for x in f:
                if x.strip():
                    try:
                        lines.append(json.loads(x))
                    except ValueError:
                        pass  # a torn last line
    except OSError:
        pass
    return lines


def val(v):
    return "–" if v is None else v


def num(v, fmt="%.1f"):
    return fmt % v if isinstance(v, (int, float)) and not isinstance(v, bool) else "–"


def call_target(name, args):
    """What a call acted on, for the tables."""
    if not isinstance(args, dict):
        return ""
    if name == "Bash":
        return args.get("command", "")
    return args.get("file_path") or args.get("pattern") or ""


def eval_summary(rep, elapsed_ms=None):
    """The timings and verdict of one evaluator report (eval_run's JSON)."""
    rep = rep or {}
    h = rep.get("harness") or {}
    t = h.get("timing") or {}
    comp = rep.get("compile") or {}
    units = comp.get("units") or []

    def stat(k, field):
        return t[k].get(field) if isinstance(t.get(k), dict) else None
    return {
        "ok": rep.get("ok"), "stage": rep.get("stage"),
        "reward": (rep.get("reward") or {}).get("reward"),
        "elapsed_ms": elapsed_ms if elapsed_ms is not None else rep.get("elapsed_ms"),
        "evaluator_ms": rep.get("elapsed_ms"),
        "stage_ms": rep.get("stage_ms"),
        "harness_s": h.get("elapsed_s"),
        "compile_units": len(units),
        "compile_units_cached": sum(1 for u in units if u.get("cached")),
        "eager_ms": stat("eager", "median_ms"), "compile_ms": stat("compile", "median_ms"),
        "candidate_ms": stat("candidate", "median_ms"), "candidate_cv": stat("candidate", "cv"),
        "baseline_cached": t.get("baseline_cached"),
        "speedup_vs_eager": t.get("speedup_vs_eager"),
        "speedup_vs_compile": t.get("speedup_vs_compile"),
        "precision": t.get("precision"),
        "message": (rep.get("message") or "")[:300],
    }


def summary(a):
    out = a.outdir
    traj_path = os.path.join(out, "run", "trajectory.jsonl")
    lines = load_lines(traj_path)
    header = next((x for x in lines if x.get("type") == "header"), None)
    final = next((x for x in lines if x.get("type") == "final"), None)
    run_json = load_json(os.path.join(out, "run.json"))
    checks = []

    def check(name, ok, detail=""):
        checks.append({"check": name, "ok": bool(ok), "detail": detail})

    turns, evals = [], []
    calls_by_command = []  # (command, exit_code) of the Bash calls in order
    for x in lines:
        if x.get("type") != "turn":
            continue
        msgs = x.get("messages") or []
        asst = msgs[0] if msgs and msgs[0].get("role") == "assistant" else {}
        args_by_id = {}
        for c in asst.get("tool_calls") or []:
            fn = c.get("function") or {}
            try:
                args_by_id[c.get("id")] = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                args_by_id[c.get("id")] = fn.get("arguments")
        tools = []
        for r in x.get("tool_results") or []:
            f = r.get("fields") or {}
            target = call_target(r.get("name"), args_by_id.get(r.get("tool_call_id")))
            tools.append({"name": r.get("name"), "target": target, "ms": r.get("ms"),
                          "is_error": r.get("is_error"), "exit_code": f.get("exit_code"),
                          "bytes": r.get("bytes")})
            if r.get("name") == "Bash":
                calls_by_command.append((target, f.get("exit_code"), r.get("is_error")))
        tm = x.get("timings") or {}
        tevals = []
        for e in x.get("evals") or []:
            s = eval_summary(e.get("report"), e.get("elapsed_ms"))
            s.update({"seq": e.get("seq"), "command": e.get("command"), "turn": x.get("turn"),
                      "recorded_reward": e.get("reward"), "record_ok": e.get("ok")})
            tevals.append(s)
        evals.extend(tevals)
        turns.append({"turn": x.get("turn"), "tools": tools, "model_ms": tm.get("model_ms"),
                      "tool_ms": tm.get("tool_ms"), "overhead_us": tm.get("overhead_us"),
                      "context_tokens": (x.get("context") or {}).get("tokens"),
                      "evals": [e["seq"] for e in tevals]})

    rewards = (final or {}).get("rewards") or {}
    rf, rb = rewards.get("final") or {}, rewards.get("best") or {}
    scoring = {
        "final": dict(eval_summary(load_json(rf["report"]) if rf.get("report") else None),
                      reward=rf.get("reward"), error=rf.get("error")),
        "best": dict(eval_summary(load_json(rb["report"]) if rb.get("report") else None),
                     reward=rb.get("reward"), error=rb.get("error"), seq=rb.get("seq"),
                     command=rb.get("command"), recorded_reward=rb.get("recorded_reward")),
        "reward": rewards.get("reward"),
    }
    ftm = (final or {}).get("timings") or {}

    # ---- checks ----
    check("run exited 0", a.run_rc == 0, "exit %d" % a.run_rc)
    check("trajectory has a header and a final line", header is not None and final is not None,
          traj_path)
    check("stopped on the model's answer", (final or {}).get("stop_reason") == "answer",
          "stop_reason %s" % (final or {}).get("stop_reason"))
    bad_tools = [("turn %s %s %s" % (t["turn"], x["name"], x["target"][:60]))
                 for t in turns for x in t["tools"] if x["is_error"] and x["name"] != "Bash"]
    check("every Read, Write and Edit succeeded", not bad_tools and turns, "; ".join(bad_tools))
    want = [(cmd, must) for _, cmd, must in STEPS]
    got = [(c, code) for c, code, _ in calls_by_command]
    for (name, cmd, must), g in zip(STEPS, got + [None] * (len(STEPS) - len(got))):
        if g is None:
            check("%s ran" % name, False, "no such Bash call in the trajectory")
        elif must:
            check("%s succeeded" % cmd, g[1] == 0, "exit %s" % g[1])
        else:
            check("the broken ./verify failed (as it should)", g[1] not in (0, None),
                  "exit %s" % g[1])
    check("Bash calls as scripted", [c for c, _ in got] == [c for c, _ in want],
          str([c for c, _ in got]))
    cmds = [e["command"] for e in evals]
    check("evaluations recorded: compile, verify, profile, verify",
          cmds == ["compile", "verify", "profile", "verify"], str(cmds))
    oks = [e["record_ok"] for e in evals]
    check("recorded verdicts: ok, ok, ok, failed", oks == [True, True, True, False], str(oks))
    prof = next((e for e in evals if e["command"] == "profile"), {})
    check("./profile reward >= 1", isinstance(prof.get("reward"), int) and prof["reward"] >= 1,
          "reward %s" % prof.get("reward"))
    best, fin = scoring["best"], scoring["final"]
    check("best of trajectory is the profiled snapshot with reward >= 1",
          best.get("command") == "profile" and isinstance(best.get("reward"), int)
          and best["reward"] >= 1,
          "best: %s, reward %s%s" % (best.get("command"), best.get("reward"),
                                     ", error " + best["error"] if best.get("error") else ""))
    check("final (broken) workspace scored below the best",
          isinstance(fin.get("reward"), int) and isinstance(best.get("reward"), int)
          and fin["reward"] < best["reward"],
          "final %s (stage %s), best %s"
          % (fin.get("reward"), fin.get("stage"), best.get("reward")))
    check("episode reward is the best",
          best.get("reward") is not None and scoring["reward"] == best.get("reward"),
          "reward %s" % scoring["reward"])
    check("the evaluator service stayed up", a.evaluator_alive == 1)

    summary = {
        "what": "one full scripted agent episode with the evaluator (bench/agent_episode.sh)",
        "ok": all(c["ok"] for c in checks),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": socket.gethostname(), "cpus": os.cpu_count(),
        "device": a.device, "gpu": a.gpu or None, "cuda_agent": a.version,
        "torch": a.torch, "torch_cuda": a.torch_cuda, "nvcc": a.nvcc or None, "python": a.python,
        "task": a.task, "solution": a.solution,
        "cache": {"dir": a.cache, "used_before": bool(a.cache_used)},
        "evaluator_start_s": a.evaluator_start_s,
        "evaluator_log": evaluator_log_times(os.path.join(out, "evaluator.log")),
        "episode": {
            "wall_s": a.episode_wall_s,
            "run_rc": a.run_rc,
            "stop_reason": (final or {}).get("stop_reason"),
            "turns": (final or {}).get("turns"),
            "evals_recorded": (final or {}).get("evals_recorded"),
            "loop_wall_ms": ftm.get("wall_ms"), "model_ms": ftm.get("model_ms"),
            "tool_ms": ftm.get("tool_ms"), "overhead_us_median": ftm.get("overhead_us_median"),
            "overhead_us_p99": ftm.get("overhead_us_p99"),
            "fsync_us_median": ftm.get("fsync_us_median"),
            "scoring_ms": sum(x["elapsed_ms"] for x in (fin, best)
                              if isinstance(x.get("elapsed_ms"), (int, float))) or None,
        },
        "turns": turns,
        "evaluations": evals,
        "scoring": scoring,
        "rewards": {"final": fin.get("reward"), "best": best.get("reward"),
                    "reward": scoring["reward"]},
        "checks": checks,
        "files": {"trajectory": os.path.join(out, "trajectory.jsonl"),
                  "run": os.path.join(out, "run"),
                  "run_json": os.path.join(out, "run.json") if run_json else None},
    }
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(markdown(summary))
    for c in checks:
        if not c["ok"]:
            print("agent_episode: check failed: %s (%s)" % (c["check"], c["detail"]),
                  file=sys.stderr)
    print_short(summary)
    return 0 if summary["ok"] else 1


def evaluator_log_times(path):
    """The service's own start-up lines (toolchain + precompiled header, runners)."""
    t = {}
    try:
        with open(path) as f:
            for x in f:
                if "toolchain ready in" in x:
                    t["toolchain_ms"] = int(x.split("toolchain ready in")[1].split()[0])
                elif "ready in" in x and "runner" in x:
                    t["runners_ms"] = int(x.split("ready in")[1].split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return t


# The harness's own parts worth showing (harness.md: elapsed_s), shortest names.
HARNESS_PARTS = [("setup", "setup"), ("reference", "reference"), ("candidate_verify", "verify"),
                 ("candidate_timing", "timing"), ("baselines", "baselines")]


def stage_text(e):
    """'snapshot 0.02, policy 0.47, compile 54.14 (2 units, 0 cached), harness 12.60 (...)'."""
    out = []
    for k, v in (e.get("stage_ms") or {}).items():
        if not isinstance(v, (int, float)):
            continue
        x = "%s %s" % (k, num(v / 1000.0, "%.2f"))
        if k == "compile" and e.get("compile_units"):
            x += " (%d units, %d cached)" % (e["compile_units"], e["compile_units_cached"])
        if k == "harness" and isinstance(e.get("harness_s"), dict):
            hs = e["harness_s"]
            hp = ["%s %s" % (n, num(hs[h], "%.2f")) for h, n in HARNESS_PARTS
                  if isinstance(hs.get(h), (int, float))]
            # What the harness's own timers do not attribute (e.g. waiting for a candidate).
            parts = [v for h, v in hs.items() if h != "total" and isinstance(v, (int, float))]
            if isinstance(hs.get("total"), (int, float)) and hs["total"] - sum(parts) >= 0.01:
                hp.append("unattributed %s" % num(hs["total"] - sum(parts), "%.2f"))
            if hp:
                x += " (%s)" % ", ".join(hp)
        out.append(x)
    return ", ".join(out) or "–"


def secs(ms, fmt="%.2f"):
    """Milliseconds as seconds for the tables."""
    return num(ms / 1000.0, fmt) if isinstance(ms, (int, float)) else "–"


def row(*cells):
    return "| " + " | ".join(str(c) for c in cells) + " |\n"


def table_head(*names):
    return row(*names) + row(*["---"] * len(names))


def markdown(s):
    ep, el, rw = s["episode"], s["evaluator_log"], s["rewards"]
    o = []
    w = o.append
    w("# Agent episode with the evaluator: %s\n\n" % ("ok" if s["ok"] else "FAILED"))
    w("%s on %s (%s CPUs); device **%s**%s; %s; torch %s (CUDA %s); nvcc %s.\n\n"
      % (s["date"], s["host"], s["cpus"], s["device"], " (%s)" % s["gpu"] if s["gpu"] else "",
         s["cuda_agent"], s["torch"], s["torch_cuda"], s["nvcc"] or "?"))
    w("Task `%s`, solution `%s`. Evaluator cache `%s` (%s; the evaluator's start time shows "
      "whether it held the precompiled header).\n\n"
      % (s["task"], s["solution"], s["cache"]["dir"],
         "used before" if s["cache"]["used_before"] else "new"))
    w(table_head("", ""))
    w(row("evaluator start (launch to socket)",
          "%s s (toolchain + precompiled header %s s, runner %s s)"
          % (num(s["evaluator_start_s"]), secs(el.get("toolchain_ms"), "%.1f"),
             secs(el.get("runners_ms"), "%.1f"))))
    w(row("episode wall time (`run`, scoring included)", "%s s" % num(ep["wall_s"])))
    w(row("run wall (final line) / model / tools / scoring at the end",
          "%s s" % " / ".join(secs(ep[k]) for k in ("loop_wall_ms", "model_ms", "tool_ms",
                                                    "scoring_ms"))))
    w(row("loop overhead per turn (median / p99)", "%s / %s µs"
          % (num(ep["overhead_us_median"], "%d"), num(ep["overhead_us_p99"], "%d"))))
    w(row("stop reason, turns, evaluations recorded", "%s, %s, %s"
          % (ep["stop_reason"], ep["turns"], ep["evals_recorded"])))
    w(row("rewards: final / best / episode", "%s / %s / **%s**"
          % (rw["final"], rw["best"], rw["reward"])))

    w("\n## Turns\n\nPer call its wall time; per turn the model's (the scripted server's) time, "
      "the loop's own overhead and the evaluations recorded (seq).\n\n")
    w(table_head("turn", "tool", "on", "wall ms", "exit", "model ms", "overhead µs", "evals"))
    answer = {"name": "(answer)", "target": "", "ms": None, "exit_code": None, "is_error": False}
    for t in s["turns"]:
        for i, x in enumerate(t["tools"] or [answer]):
            tgt = x["target"].replace("|", "\\|").replace("\n", " ")
            tgt = tgt if len(tgt) <= 48 else tgt[:45] + "..."
            code = x["exit_code"]
            if code is None:
                code = "error" if x["is_error"] else ""
            first = i == 0
            w(row(t["turn"] if first else "", x["name"], "`%s`" % tgt if tgt else "",
                  num(x["ms"]), code, num(t["model_ms"]) if first else "",
                  num(t["overhead_us"], "%d") if first else "",
                  ", ".join(str(q) for q in t["evals"]) if first else ""))

    w("\n## Evaluations the agent ran\n\n")
    w(table_head("seq", "turn", "command", "ok", "stage", "reward", "wall s", "stages (s)",
                 "eager ms", "torch.compile ms", "candidate ms", "vs eager", "vs compile"))
    for e in s["evaluations"]:
        w(row(e["seq"], e["turn"], e["command"], val(e["record_ok"]), val(e["stage"]),
              val(e["reward"]), secs(e["elapsed_ms"]), stage_text(e), num(e["eager_ms"], "%.4f"),
              num(e["compile_ms"], "%.4f"), num(e["candidate_ms"], "%.4f"),
              num(e["speedup_vs_eager"], "%.2fx"), num(e["speedup_vs_compile"], "%.2fx")))

    w("\n## Scoring at the end\n\n")
    w(table_head("workspace", "reward", "stage", "wall s", "stages (s)", "candidate ms",
                 "vs eager", "vs compile"))
    for name, label in (("final", "final (broken)"), ("best", "best snapshot")):
        e = s["scoring"][name]
        if name == "best" and e.get("seq") is not None:
            label += " (seq %s, %s)" % (e["seq"], e["command"])
        w(row(label, val(e["reward"]), e["stage"] or e.get("error") or "–", secs(e["elapsed_ms"]),
              stage_text(e), num(e["candidate_ms"], "%.4f"), num(e["speedup_vs_eager"], "%.2fx"),
              num(e["speedup_vs_compile"], "%.2fx")))

    w("\n## Checks\n\n")
    for c in s["checks"]:
        w("- %s %s%s\n" % ("ok" if c["ok"] else "**FAILED**", c["check"],
                           " (%s)" % c["detail"] if c["detail"] else ""))
    w("\nTrajectory: `%s`.\n" % s["files"]["trajectory"])
    return "".join(o)


def print_short(s):
    ep, rw = s["episode"], s["rewards"]
    print("agent_episode: evaluator start %s s; episode %s s (%s turns, stop %s); "
          "rewards final %s, best %s, episode %s"
          % (num(s["evaluator_start_s"]), num(ep["wall_s"]), ep["turns"], ep["stop_reason"],
             rw["final"], rw["best"], rw["reward"]))
    for e in s["evaluations"]:
        print("agent_episode:   eval %s %-7s ok=%s reward=%s wall=%ss vs eager %s vs compile %s"
              % (e["seq"], e["command"], e["record_ok"], e["reward"], secs(e["elapsed_ms"]),
                 num(e["speedup_vs_eager"], "%.2fx"), num(e["speedup_vs_compile"], "%.2fx")))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    ps = sub.add_parser("script")
    ps.add_argument("solution")
    pm = sub.add_parser("summary")
    pm.add_argument("outdir")
    pm.add_argument("--device", required=True)
    pm.add_argument("--task", default="")
    pm.add_argument("--solution", default="")
    pm.add_argument("--run-rc", type=int, required=True)
    pm.add_argument("--evaluator-start-s", type=float)
    pm.add_argument("--episode-wall-s", type=float)
    pm.add_argument("--evaluator-alive", type=int, default=0)
    pm.add_argument("--cache", default="")
    pm.add_argument("--cache-used", type=int, default=0)
    pm.add_argument("--version", default="")
    pm.add_argument("--torch", default="")
    pm.add_argument("--torch-cuda", default="")
    pm.add_argument("--gpu", default="")
    pm.add_argument("--nvcc", default="")
    pm.add_argument("--python", default="")
    a = p.parse_args()
    if a.cmd == "script":
        script(a.solution)
        return 0
    return summary(a)


if __name__ == "__main__":
    sys.exit(main())
