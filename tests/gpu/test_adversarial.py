"""GPU adversarial suite: every case in tests/adversarial/gpu/ through the evaluator service.

Each case (see tests/adversarial/README.md) is a reward hack that must get its expected verdict
(reward -1 at the named stage, with the named failure kind or message) or a legitimate but
unusual candidate that must pass. One evaluator service (`cuda-agent evaluator`) is started for
the session; a workspace is made for each case's task (the task's reference solution, then the
case's files) and evaluated with `cuda-agent eval --server` on CUDA, several at once so that
compiling overlaps with the GPU work (the service runs one GPU job at a time). A KernelBench
case is evaluated with --kernelbench-file against its task.

Needs a CUDA GPU, PyTorch in this interpreter (the evaluator's Python, passed on as
CUDA_AGENT_PYTHON), nvcc and the binary ($CA_BIN, else $CUDA_AGENT, else build/cuda-agent);
skipped with the reason otherwise. Settings (environment):
  CA_ADV_JOBS        evaluations in flight at once (default 4)
  CA_ADV_BUDGET_MS   timing budget per timed function (default 500)
  CA_ADV_CACHE_DIR   evaluator cache (default: a fresh one for the session)
  CA_ADV_NO_SANDBOX  1: compilers without the sandbox (hosts without user namespaces)
  CA_ADV_REPORT      write every case's report and verdict here as JSON
One line per case (pattern, verdict, the defence that fired) is written to the terminal as the
evaluations finish; -k selects cases (only the selected ones are evaluated).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: torch.cuda.is_available() is False", allow_module_level=True)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import adversarial_gpu as adv  # noqa: E402

BINARY = adv.binary()
if not BINARY.is_file():
    pytest.skip(f"cuda-agent is not built ({BINARY}): run make, or set CA_BIN",
                allow_module_level=True)
if not (shutil.which("nvcc") or os.access("/usr/local/cuda/bin/nvcc", os.X_OK)):
    pytest.skip("nvcc not found in PATH or /usr/local/cuda/bin", allow_module_level=True)

CASES = adv.load_cases()
JOBS = int(os.environ.get("CA_ADV_JOBS", "4"))
BUDGET_MS = os.environ.get("CA_ADV_BUDGET_MS", "500")
SERVICE_START_S = 900  # toolchain discovery, the precompiled header, runners importing torch


def _say(config, line: str) -> None:
    """A progress line on the terminal, past pytest's output capture."""
    capture = config.pluginmanager.get_plugin("capturemanager")
    if capture is None:
        print(line, file=sys.stderr, flush=True)
        return
    with capture.global_and_fixture_disabled():
        print(line, file=sys.stderr, flush=True)


@pytest.fixture(scope="module")
def service(tmp_path_factory, pytestconfig):
    """The socket of an evaluator service for this module's evaluations."""
    tmp = tmp_path_factory.mktemp("adv-service")
    sock = tmp / "eval.sock"
    cache = pathlib.Path(os.environ.get("CA_ADV_CACHE_DIR") or tmp / "cache")
    argv = [str(BINARY), "evaluator", "--device", "cuda", "--socket", str(sock),
            "--cache-dir", str(cache), "--prewarm", "2"]
    # The compile sandbox cannot bind directories under /tmp (its own /tmp would cover them).
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
                pytest.fail(f"the evaluator service exited with {proc.returncode}:\n"
                            f"{log_path.read_text(errors='replace')[-4000:]}")
            if time.monotonic() - t0 > SERVICE_START_S:
                pytest.fail(f"the evaluator service did not listen within {SERVICE_START_S} s:\n"
                            f"{log_path.read_text(errors='replace')[-4000:]}")
            time.sleep(0.2)
        _say(pytestconfig, f"\nadversarial: evaluator service ready in "
             f"{time.monotonic() - t0:.0f} s (log {log_path})")
        yield sock
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _evaluate(case: adv.Case, sock: pathlib.Path, root: pathlib.Path) -> dict:
    t0 = time.monotonic()
    try:
        ws = None if case.kernelbench else adv.make_workspace(case, root / case.name, BINARY)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        return {"report": None, "error": str(exc), "seconds": time.monotonic() - t0}
    argv = adv.eval_argv(case, ws, "--server", str(sock), "--budget-ms", BUDGET_MS, ca=BINARY)
    report, err = adv.run_eval(argv)
    return {"report": report, "error": err, "seconds": time.monotonic() - t0}


@pytest.fixture(scope="module")
def results(service, tmp_path_factory, request) -> dict[str, dict]:
    """{case name: {"report", "error", "seconds"}}: the selected cases, evaluated up front."""
    # This module's items only: other modules' `case` parameters are other things (strings).
    selected = {item.callspec.params["case"].name for item in request.session.items
                if getattr(item, "module", None) is request.module
                and hasattr(item, "callspec") and "case" in item.callspec.params}
    # KernelBench files first: nvcc over the torch headers is the longest compile.
    cases = sorted((c for c in CASES if c.name in selected), key=lambda c: c.kernelbench is None)
    root = tmp_path_factory.mktemp("adv-ws")
    out: dict[str, dict] = {}
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, JOBS)) as pool:
        futures = {pool.submit(_evaluate, c, service, root): c for c in cases}
        for f in concurrent.futures.as_completed(futures):
            case = futures[f]
            r = f.result()
            out[case.name] = r
            rep = r["report"]
            why = adv.problems(case, rep) if rep is not None else [r["error"]]
            line = (f"  {'ok  ' if not why else 'FAIL'} {case.name} ({r['seconds']:.0f} s) "
                    f"[{case.expect['pattern']}]: "
                    f"{adv.verdict(rep) if rep is not None else 'no report'}")
            if why:
                line += "  <-- " + "; ".join(w.splitlines()[0] for w in why)
            _say(request.config, line)
    _say(request.config, f"adversarial: {len(cases)} cases in {time.monotonic() - t0:.0f} s")
    path = os.environ.get("CA_ADV_REPORT")
    if path:
        summary = {}
        for case in cases:
            r = out[case.name]
            why = adv.problems(case, r["report"]) if r["report"] is not None else [r["error"]]
            summary[case.name] = {**r, "expect": case.expect, "problems": why}
        with open(path, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=1)
    return out


def test_cases_exist():
    names = {c.name for c in CASES}
    assert len(CASES) >= 10, names
    assert any(c.legitimate for c in CASES) and any(not c.legitimate for c in CASES), names


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_verdict(results, case):
    r = results[case.name]
    report = r["report"]
    assert report is not None, f"{case.name}: {r['error']}"
    why = adv.problems(case, report)
    failure = adv.failure_of(report)
    assert not why, (
        f"{case.name} [{case.expect['pattern']}]: " + "; ".join(why) + "\n"
        f"verdict: {adv.verdict(report)}\n"
        f"message: {(report.get('message') or '')[:3000]}\n"
        f"failure details: {json.dumps(failure.get('details'), default=str)[:3000]}\n"
        f"reward: {json.dumps(report.get('reward'))}")
