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
TIMEOUT_S = 900


def binary() -> pathlib.Path:
    """$CA_BIN, else $CUDA_AGENT, else build/cuda-agent."""
    return pathlib.Path(os.environ.get("CA_BIN") or os.environ.get("CUDA_AGENT")
                        or ROOT / "build" / "cuda-agent")


BINARY = binary()


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


def solution_workspace(task: str, dest: pathlib.Path,
                       ca: pathlib.Path | None = None) -> pathlib.Path:
    """A workspace at dest for examples/tasks/TASK.py holding the task's reference solution
    (its kernels and model_new.py) when examples/solutions/TASK exists."""
    ca = ca or BINARY
    proc = subprocess.run([str(ca), "workspace", "create", "--task", str(TASKS / (task + ".py")),
                           str(dest)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"workspace create for {task} failed (exit {proc.returncode}): "
                           f"{proc.stderr.strip()[-2000:]}")
    solution = SOLUTIONS / task
    if solution.is_dir():
        for f in sorted((solution / "kernels").iterdir()):
            shutil.copy(f, dest / "kernels" / f.name)
        shutil.copy(solution / "model_new.py", dest / "model_new.py")
    return dest


def workspace(tmp_path: pathlib.Path, solution: str, model_new: str | None = None) -> pathlib.Path:
    """solution_workspace() under tmp_path, with model_new.py replaced by the given text."""
    ws = solution_workspace(solution, tmp_path / ("ws-" + solution))
    if model_new is not None:
        (ws / "model_new.py").write_text(model_new)
    return ws
