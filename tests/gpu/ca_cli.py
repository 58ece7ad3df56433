"""The cuda-agent binary for the GPU tests that go through the CLI (its own compile pool,
cache and evaluator), and a helper that runs `cuda-agent eval --json`."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
TASKS = ROOT / "examples" / "tasks"
SOLUTIONS = ROOT / "examples" / "solutions"
BINARY = pathlib.Path(os.environ.get("CA_BIN") or os.environ.get("CUDA_AGENT")
                      or ROOT / "build" / "cuda-agent")
TIMEOUT_S = 900


def missing() -> str | None:
    """Why these tests cannot run here, or None."""
    if not BINARY.is_file():
        return "cuda-agent is not built (%s): run make" % BINARY
    if not (shutil.which("nvcc") or os.access("/usr/local/cuda/bin/nvcc", os.X_OK)):
        return "nvcc not found in PATH or /usr/local/cuda/bin"
    return None


def evaluate(args, cache) -> tuple[int, dict]:
    """(exit status, JSON report) of `cuda-agent eval --json ARGS` with its cache in cache."""
    cmd = [str(BINARY), "eval", "--json", *map(str, args)]
    # The compile sandbox cannot bind directories under /tmp (its own /tmp would be covered).
    if os.path.realpath(sys.executable).startswith("/tmp/"):
        cmd.append("--no-sandbox")
    env = dict(os.environ, CUDA_AGENT_PYTHON=sys.executable, CUDA_AGENT_CACHE_DIR=str(cache))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    assert proc.stdout, "no report (exit %d): %s" % (proc.returncode, proc.stderr[-4000:])
    return proc.returncode, json.loads(proc.stdout)


def workspace(tmp_path: pathlib.Path, solution: str, model_new: str | None = None) -> pathlib.Path:
    """A workspace for examples/tasks/SOLUTION.py holding that solution's kernels and its
    model_new.py (or the given text instead)."""
    ws = tmp_path / ("ws-" + solution)
    subprocess.run([str(BINARY), "workspace", "create", "--task", str(TASKS / (solution + ".py")),
                    str(ws)], check=True, capture_output=True, timeout=60)
    for f in (SOLUTIONS / solution / "kernels").iterdir():
        shutil.copy(f, ws / "kernels" / f.name)
    text = model_new if model_new is not None else \
        (SOLUTIONS / solution / "model_new.py").read_text()
    (ws / "model_new.py").write_text(text)
    return ws
