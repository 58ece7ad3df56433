"""GPU adversarial suite: every case in tests/adversarial/gpu/ through the evaluator service.

Each case (see tests/adversarial/README.md) is a reward hack that must get its expected verdict
(reward -1 at the named stage, with the named failure kind or message) or a legitimate but
unusual candidate that must pass. One evaluator service (`cuda-agent evaluator`) is started for
the session; a workspace is made for each case's task (the task's reference solution, then the
case's files) and evaluated with `cuda-agent eval --server` on CUDA, several at once so that
compiling overlaps with the GPU work (the service runs one GPU job at a time). A KernelBench
case is evaluated with --kernelbench-file against its task. The service and the evaluations are
the session fixtures `adv_service` and `adv_results` (tests/gpu/conftest.py), which
test_skill_facts.py shares: each selected case is evaluated once a session.

Needs a CUDA GPU, PyTorch in this interpreter (the evaluator's Python, passed on as
CUDA_AGENT_PYTHON), nvcc and the binary ($CA_BIN, else $CUDA_AGENT, else build/cuda-agent);
skipped with the reason otherwise. Settings (environment):
  CA_ADV_JOBS        evaluations in flight at once (default 4)
  CA_ADV_BUDGET_MS   timing budget per timed function (default 500)
  CA_ADV_TIMING      every evaluation's --timing (events, kernel or device; default: the
                     evaluator's, device under the cuda-agent rules and events under the
                     kernelbench rules), to check the defences under another timing method
  CA_ADV_CACHE_DIR   evaluator cache (default: a fresh one for the session; not the CLI tests'
                     cache, whose baselines were timed beside other work)
  CA_ADV_NO_SANDBOX  1: compilers without the sandbox (hosts without user namespaces)
  CA_ADV_REPORT      write every case's report and verdict here as JSON
One line per case (pattern, verdict, the defence that fired) is written to the terminal as the
evaluations finish; -k selects cases (only the selected ones are evaluated).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import sys

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


def test_cases_exist():
    names = {c.name for c in CASES}
    assert len(CASES) >= 10, names
    assert any(c.legitimate for c in CASES) and any(not c.legitimate for c in CASES), names


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_verdict(adv_results, case):
    r = adv_results[case.name]
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
