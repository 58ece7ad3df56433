"""GPU tests of the reference solutions in examples/solutions/.

Each solution is built with torch.utils.cpp_extension and checked against its task by
solution_check.py in a process of its own (the module name `cuda_extension` is fixed, so two
solutions cannot share a process). Skipped, with the reason, where torch, a CUDA device, nvcc
or ninja is missing.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: torch.cuda.is_available() is False", allow_module_level=True)

from torch.utils import cpp_extension  # noqa: E402  (needs the importorskip above)

if cpp_extension.CUDA_HOME is None:
    pytest.skip("nvcc not found: torch.utils.cpp_extension.CUDA_HOME is unset",
                allow_module_level=True)
if not cpp_extension.is_ninja_available():
    pytest.skip("ninja not found: torch.utils.cpp_extension.load needs it",
                allow_module_level=True)

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOLUTIONS = sorted(p for p in (ROOT / "examples" / "solutions").iterdir() if p.is_dir())
CHECK = pathlib.Path(__file__).with_name("solution_check.py")

# Sizes the tasks do not use, to catch kernels that only work when the width is a multiple of
# the vector or block size, or that mishandle tiny and very long rows.
SHAPES = {
    "swish_scale_bias": [
        {"batch_size": 37, "features": 1001},
        {"batch_size": 3, "features": 4},
        {"batch_size": 1, "features": 3},
    ],
    "row_mean_square": [
        {"batch_size": 33, "dim": 1023},
        {"batch_size": 5, "dim": 3},
        {"batch_size": 2, "dim": 70001},
        {"batch_size": 1000, "dim": 64},
    ],
    "softmax_last_dim": [
        {"batch_size": 17, "dim": 1001},
        {"batch_size": 5, "dim": 1004},
        {"batch_size": 9, "dim": 4100},
        {"batch_size": 3, "dim": 5},
        {"batch_size": 2, "dim": 100003},
        {"batch_size": 1000, "dim": 64},
    ],
}

BUILD_TIMEOUT_S = 900


def test_solutions_exist():
    assert len(SOLUTIONS) >= 3, f"expected at least 3 solutions in {ROOT / 'examples/solutions'}"


@pytest.mark.parametrize("solution", SOLUTIONS, ids=[p.name for p in SOLUTIONS])
def test_solution_matches_model(extension_dir, solution):
    cmd = [sys.executable, str(CHECK), str(solution),
           "--shapes", json.dumps(SHAPES.get(solution.name, [])),
           "--build-dir", str(extension_dir(solution.name))]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                          env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    assert proc.returncode == 0, (
        f"{solution.name} failed (exit {proc.returncode}):\n"
        f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-8000:]}")
