"""What the end-to-end tests of harness/evaluate.py and harness/candidate.py in CPU mode share
(test_harness.py, test_harness_kernelbench.py and the files that build on them).

A case writes a tiny task and a candidate (model_new.py plus a Python file standing in for the
compiled cuda_extension, through the test-only --ext-module option), runs evaluate.py exactly
as the evaluator would (the candidate a separate process), and checks the result JSON.
Importing this module skips the importing test file where PyTorch is not installed.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import time

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

ROOT = pathlib.Path(__file__).resolve().parents[2]
EVALUATE = ROOT / "harness" / "evaluate.py"
sys.path.insert(0, str(ROOT / "harness"))
import evaluate as ev  # noqa: E402  (needs torch)

TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.scale = scale
        self.weight = nn.Parameter(torch.randn(features))
        self.register_buffer("bias", torch.randn(features))

    def forward(self, x):
        return torch.tanh(x * self.weight) * self.scale + self.bias


def get_inputs():
    return [torch.randn(16, 37)]


def get_init_inputs():
    return [37, 1.5]
"""

EXT = """
import torch


def affine(x, w, b, scale):
    return torch.tanh(x * w) * scale + b
"""

MODEL_NEW = """
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.scale = scale
        self.weight = nn.Parameter(torch.zeros(features))
        self.register_buffer("bias", torch.zeros(features))

    def forward(self, x):
{body}
"""

CORRECT_BODY = "return cuda_extension.affine(x, self.weight, self.bias, self.scale)"

# Written for the task's 16 rows: the last row of any other batch is left at zero.
EXT_16_ROWS = EXT + textwrap.dedent("""
    def affine_16(x, w, b, scale):
        y = affine(x, w, b, scale)
        if x.shape[0] != 16:
            y = y.clone()
            y[-1] = 0
        return y
    """)


# The task with its rows a module-level int and two extra shapes.
SHAPED_TASK = TASK + """

EXTRA_SHAPES = [{"rows": 3}, {"rows": 1}]
rows = 16


def get_inputs():  # noqa: F811  (the shaped variant)
    return [torch.randn(rows, 37)]
"""


# The task with sizes as module-level ints and extra shapes, one of which changes the model.
FEATURED_TASK = TASK + """

EXTRA_SHAPES = [{"rows": 3}, {"features": 5}, {"rows": 2, "features": 37}]
rows = 16
features = 37


def get_inputs():  # noqa: F811  (the featured variant)
    return [torch.randn(rows, features)]


def get_init_inputs():  # noqa: F811
    return [features, 1.5]
"""


def model_new(body: str = CORRECT_BODY, header: str = "") -> str:
    src = MODEL_NEW.replace("{body}", textwrap.indent(textwrap.dedent(body).strip(), " " * 8))
    return header + src


def strict_json(text: str):
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


class Run:
    def __init__(self, rc: int, stdout: str, stderr: str, result: dict, seconds: float):
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.result = result
        self.seconds = seconds

    @property
    def failure(self):
        return self.result["failure"]

    def __repr__(self):
        return (f"rc={self.rc}\nresult={json.dumps(self.result, indent=1)[:6000]}\n"
                f"stdout={self.stdout[-2000:]}\nstderr={self.stderr[-4000:]}")


def sandbox_args() -> list[str]:
    """--sandbox with the cuda-agent binary the run names (CA_BIN, as tests/gpu/run.sh sets it,
    or CUDA_AGENT, as tests/run.sh does), else the built one when there is one, else
    --no-sandbox: these tests are about the harness's logic; the sandbox's own tests
    (test_candbox_escape.py) require it."""
    binary = os.environ.get("CA_BIN") or os.environ.get("CUDA_AGENT") or \
        str(ROOT / "build" / "cuda-agent")
    return ["--sandbox", binary] if os.access(binary, os.X_OK) else ["--no-sandbox"]


def kept_scratch(tmp_path: pathlib.Path, name: str) -> pathlib.Path:
    """A file the candidate wrote into its scratch directory ($TMPDIR) in a run made with
    --keep-temp --tmp-dir tmp_path (its only writable directory in the sandbox)."""
    (found,) = tmp_path.glob(f"cuda-agent-cand-*/scratch/{name}")
    return found


def evaluate(tmp_path: pathlib.Path, *, task: str = TASK, new: str | None = None,
             ext: str = EXT, args=(), env=None, testing: bool = True,
             compile_baseline: bool = False, subprocess_cli: bool = False,
             timeout: float = 300) -> Run:
    """Runs evaluate.py on a task and candidate written under tmp_path.

    By default the trusted side runs in this process (evaluate.main(argv), saving a torch
    import per test; the candidate is a separate process either way); subprocess_cli=True
    runs `python3 harness/evaluate.py ...` exactly as the evaluator does.
    """
    work = tmp_path / f"run{len(list(tmp_path.glob('run*')))}"
    (work / "cand").mkdir(parents=True)
    (work / "task.py").write_text(task)
    (work / "cand" / "model_new.py").write_text(new if new is not None else model_new())
    (work / "ext.py").write_text(ext)
    out = work / "result.json"
    argv = ["--task", str(work / "task.py"), "--candidate-dir", str(work / "cand"),
            "--ext-module", str(work / "ext.py"), "--device", "cpu", "--budget-ms", "50",
            "--out", str(out), *([] if compile_baseline else ["--no-compile"]), *args]
    if "--sandbox" not in args and "--no-sandbox" not in args:
        argv += sandbox_args()
    full_env = dict(os.environ)
    full_env.pop("CUDA_AGENT_HARNESS_TESTING", None)
    if testing:
        full_env["CUDA_AGENT_HARNESS_TESTING"] = "1"
    full_env.update(env or {})
    t0 = time.monotonic()
    if subprocess_cli:
        proc = subprocess.run([sys.executable, str(EVALUATE), *argv], capture_output=True,
                              text=True, env=full_env, timeout=timeout)
        rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    else:
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(full_env)
        so, se = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(so), contextlib.redirect_stderr(se):
                rc = ev.main(argv)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        stdout, stderr = so.getvalue(), se.getvalue()
    seconds = time.monotonic() - t0
    result = strict_json(out.read_text()) if out.exists() else {}
    return Run(rc, stdout, stderr, result, seconds)


def assert_failed(run: Run, kind: str | tuple[str, ...], stage: str = "verify"):
    """kind: the failure's kind, or the kinds any of which the failure may be."""
    assert run.rc == 1, run
    assert run.result["ok"] is False, run
    kinds = (kind,) if isinstance(kind, str) else kind
    assert run.failure is not None and run.failure["kind"] in kinds, run
    assert run.result["stage"] == stage, run
    assert run.failure["message"], run
