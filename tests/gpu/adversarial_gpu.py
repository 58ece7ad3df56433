"""The GPU adversarial cases (tests/adversarial/gpu/): discovery, workspaces, expectations.

Used by tests/gpu/test_adversarial.py (the GPU suite) and runnable on its own, without a GPU,
to check what can be checked there: the static policy and the compile stage.

    python3 tests/gpu/adversarial_gpu.py --compile-only [--arch sm_90] [CASE...]

Each case is a directory with expect.json and either kernels/ (and model_new.py where needed),
overlaid on a workspace made for the task named in expect.json ("task": an examples/tasks/
name) after the task's reference solution (examples/solutions/TASK/, when there is one), or a
KernelBench single file kernelbench.py, evaluated with --kernelbench-file against the task.
--compile-only runs `cuda-agent eval --compile-only` on each: a case expected to fail at the
policy stage must fail there with its expected message; every other case must compile. The
binary is $CA_BIN (or $CUDA_AGENT), else build/cuda-agent; the evaluator's Python is
$CUDA_AGENT_PYTHON as usual. Exit status 0 when every case did what it should, 1 otherwise.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Iterator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ca_cli import ROOT, TASKS, binary, solution_workspace  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "adversarial"))
import expect  # noqa: E402  (tests/adversarial/expect.py: the check both suites run)

CASES_DIR = ROOT / "tests" / "adversarial" / "gpu"
KB_FILE = "kernelbench.py"
EVAL_TIMEOUT_S = 900


class Case:
    def __init__(self, path: pathlib.Path):
        self.path = path
        self.name = path.name
        self.expect: dict[str, Any] = json.loads((path / "expect.json").read_text())
        self.task = TASKS / (self.expect["task"] + ".py")
        kb = path / KB_FILE
        self.kernelbench = kb if kb.is_file() else None

    @property
    def legitimate(self) -> bool:
        return "reward_min" in self.expect and self.expect["reward_min"] >= 1

    def stages(self) -> list[str]:
        return expect.as_list(self.expect["stage"])

    def __repr__(self) -> str:
        return f"Case({self.name})"


def load_cases(names: list[str] | None = None) -> list[Case]:
    cases = [Case(p) for p in sorted(CASES_DIR.iterdir())
             if p.is_dir() and (p / "expect.json").is_file()]
    if names:
        unknown = set(names) - {c.name for c in cases}
        if unknown:
            raise SystemExit(f"no such case: {', '.join(sorted(unknown))}")
        cases = [c for c in cases if c.name in names]
    return cases


def make_workspace(case: Case, dest: pathlib.Path, ca: pathlib.Path | None = None) -> pathlib.Path:
    """A workspace for case's task at dest: the task's solution, then the case's files."""
    try:
        solution_workspace(case.expect["task"], dest, ca)
    except RuntimeError as exc:
        raise RuntimeError(f"{case.name}: {exc}") from None
    for f in sorted(case.path.rglob("*")):
        if f.is_file() and f.name not in ("expect.json", KB_FILE):
            target = dest / f.relative_to(case.path)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, target)
    return dest


def eval_argv(case: Case, workspace: pathlib.Path | None, *options: str,
              ca: pathlib.Path | None = None) -> list[str]:
    argv = [str(ca or binary()), "eval", "--json", *options]
    if case.kernelbench is not None:
        return argv + ["--task", str(case.task), "--kernelbench-file", str(case.kernelbench)]
    assert workspace is not None
    return argv + [str(workspace)]


def run_eval(argv: list[str], env: dict[str, str] | None = None) -> tuple[dict | None, str]:
    """(report, "") or (None, why there is none)."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=EVAL_TIMEOUT_S,
                              env=env)
    except subprocess.TimeoutExpired:
        return None, f"cuda-agent eval ran past {EVAL_TIMEOUT_S} s"
    if not proc.stdout.strip():
        return None, f"no report (exit {proc.returncode}): {proc.stderr.strip()[-3000:]}"
    try:
        return json.loads(proc.stdout), ""
    except ValueError as exc:
        return None, f"the report is not JSON ({exc}): {proc.stdout[:500]}"


def reward_of(report: dict) -> Any:
    return (report.get("reward") or {}).get("reward")


def failure_of(report: dict) -> dict:
    return (report.get("harness") or {}).get("failure") or {}


def verdict(report: dict) -> str:
    """One line: reward, stage, failure kind, the message's first line (or the speedups)."""
    failure = failure_of(report)
    reward = reward_of(report)
    if reward is None:  # --compile-only: no reward
        text = f"{report.get('stage')} {'ok' if report.get('ok') else 'failed'}"
    else:
        text = f"reward {reward} at {report.get('stage')}"
    if failure:
        text += f" ({failure.get('kind')})"
    msg = (report.get("message") or "").strip()
    if msg:
        return text + ": " + msg.splitlines()[0][:160]
    r = report.get("reward") or {}
    if r.get("speedup_eager") is not None:
        text += ": %.2fx vs eager, %.2fx vs torch.compile" % (
            r.get("speedup_eager") or 0.0, r.get("speedup_compile") or 0.0)
    return text


def problems(case: Case, report: dict) -> list[str]:
    """How the report differs from expect.json (empty: as expected): tests/adversarial/expect.py,
    the check the CPU suite runs too."""
    return expect.problems(case.expect, report)


def compile_problems(case: Case, report: dict) -> list[str]:
    """With --compile-only: policy cases must fail as expected, the others must compile."""
    if case.stages() == ["policy"]:
        return problems(case, report)
    if report.get("stage") != "compile" or report.get("ok") is not True:
        return [f"does not compile: {verdict(report)}\n{(report.get('message') or '')[:3000]}"]
    return []


SERVICE_START_S = 900  # toolchain discovery, the precompiled header, runners importing torch


@contextlib.contextmanager
def service(tmp: pathlib.Path, say: Callable[[str], None]) -> Iterator[pathlib.Path]:
    """An evaluator service on CUDA for the block: yields its socket. The cache is
    $CA_ADV_CACHE_DIR, else tmp/cache; the compilers run unsandboxed with CA_ADV_NO_SANDBOX=1
    or where this interpreter lives under /tmp (the compile sandbox cannot bind it there)."""
    sock = tmp / "eval.sock"
    cache = pathlib.Path(os.environ.get("CA_ADV_CACHE_DIR") or tmp / "cache")
    argv = [str(binary()), "evaluator", "--device", "cuda", "--socket", str(sock),
            "--cache-dir", str(cache), "--prewarm", "2"]
    if os.environ.get("CA_ADV_NO_SANDBOX") == "1" or \
            os.path.realpath(sys.executable).startswith("/tmp/"):
        argv.append("--no-sandbox")
    log_path = tmp / "service.log"
    env = dict(os.environ, CUDA_AGENT_PYTHON=sys.executable)
    # Several evaluations compile at once, beside torch.compile baselines: room for a slow
    # KernelBench unit (nvcc over the torch headers).
    env.setdefault("CUDA_AGENT_COMPILE_TIMEOUT", "600")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    t0 = time.monotonic()
    try:
        while not sock.exists():
            if proc.poll() is not None:
                raise RuntimeError(f"the evaluator service exited with {proc.returncode}:\n"
                                   f"{log_path.read_text(errors='replace')[-4000:]}")
            if time.monotonic() - t0 > SERVICE_START_S:
                raise RuntimeError(f"the evaluator service did not listen within "
                                   f"{SERVICE_START_S} s:\n"
                                   f"{log_path.read_text(errors='replace')[-4000:]}")
            time.sleep(0.2)
        say(f"\nadversarial: evaluator service ready in {time.monotonic() - t0:.0f} s "
            f"(log {log_path})")
        yield sock
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _evaluate_one(case: Case, sock: pathlib.Path, root: pathlib.Path, budget_ms: str) -> dict:
    t0 = time.monotonic()
    try:
        ws = None if case.kernelbench else make_workspace(case, root / case.name, binary())
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        return {"report": None, "error": str(exc), "seconds": time.monotonic() - t0}
    timing = os.environ.get("CA_ADV_TIMING")  # the job's timing method (else the default)
    argv = eval_argv(case, ws, "--server", str(sock), "--budget-ms", budget_ms,
                     *(["--timing", timing] if timing else []), ca=binary())
    report, err = run_eval(argv)
    return {"report": report, "error": err, "seconds": time.monotonic() - t0}


def evaluate_cases(cases: list[Case], sock: pathlib.Path, root: pathlib.Path, jobs: int,
                   budget_ms: str, say: Callable[[str], None]) -> dict[str, dict]:
    """{case name: {"report", "error", "seconds"}}: cases evaluated through the service at
    sock, jobs at once (KernelBench files first: nvcc over the torch headers is the longest
    compile), a line said for each as it finishes."""
    cases = sorted(cases, key=lambda c: c.kernelbench is None)
    out: dict[str, dict] = {}
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(_evaluate_one, c, sock, root, budget_ms): c for c in cases}
        for f in concurrent.futures.as_completed(futures):
            case = futures[f]
            r = f.result()
            out[case.name] = r
            rep = r["report"]
            why = problems(case, rep) if rep is not None else [r["error"]]
            line = (f"  {'ok  ' if not why else 'FAIL'} {case.name} ({r['seconds']:.0f} s) "
                    f"[{case.expect['pattern']}]: "
                    f"{verdict(rep) if rep is not None else 'no report'}")
            if why:
                line += "  <-- " + "; ".join(w.splitlines()[0] for w in why)
            say(line)
    say(f"adversarial: {len(cases)} cases in {time.monotonic() - t0:.0f} s")
    return out


def write_summary(path: str, cases: list[Case], results: dict[str, dict]) -> None:
    """Every case's report, verdict and problems as JSON at path."""
    summary = {}
    for case in cases:
        r = results[case.name]
        why = problems(case, r["report"]) if r["report"] is not None else [r["error"]]
        summary[case.name] = {**r, "expect": case.expect, "problems": why}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--compile-only", action="store_true", required=True,
                   help="stop after the policy and compile stages (no GPU needed)")
    p.add_argument("--arch", default="sm_90", help="target architecture (default sm_90)")
    p.add_argument("--no-sandbox", action="store_true", help="pass --no-sandbox to the evaluator")
    p.add_argument("cases", nargs="*", help="case names (default: all)")
    args = p.parse_args(argv)
    ca = binary()
    if not ca.is_file():
        print(f"{ca}: not built (run make, or set CA_BIN)", file=sys.stderr)
        return 1
    options = ["--compile-only", "--arch", args.arch] + (["--no-sandbox"] if args.no_sandbox
                                                         else [])
    failed = 0
    with tempfile.TemporaryDirectory(prefix="ca-adv-gpu-") as tmp:
        for case in load_cases(args.cases):
            ws = None if case.kernelbench else make_workspace(case, pathlib.Path(tmp) / case.name,
                                                              ca)
            report, err = run_eval(eval_argv(case, ws, *options, ca=ca))
            why = [err] if report is None else compile_problems(case, report)
            state = "FAIL" if why else "ok"
            detail = verdict(report) if report is not None else err
            print(f"{state} {case.name}: {detail}", flush=True)
            for w in why:
                print("    " + w.replace("\n", "\n    "), flush=True)
            failed += bool(why)
    print(f"{failed} of {len(load_cases(args.cases))} cases not as expected")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
