"""The naive evaluation flow, for comparison with `cuda-agent eval` (bench/eval_loop.sh):
a full rebuild through torch.utils.cpp_extension.load into a fresh build directory, then a new
Python process for verification and another for profiling that runs torch.compile again. This
is what one agent iteration costs without a persistent evaluator.

    python3 bench/naive_flow.py examples/solutions/NAME [ITERATIONS]

Prints the wall time of each step and of the whole iteration.
"""

import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]

STEP = r'''
import importlib.util, sys, time, torch
from torch.utils.cpp_extension import load
sol, task_path, build, mode = sys.argv[1:5]
root = "{root}"
srcs = [root + "/template/binding.cpp"] + sorted(str(p) for p in __import__("pathlib").Path(sol, "kernels").glob("*.cpp")) + sorted(str(p) for p in __import__("pathlib").Path(sol, "kernels").glob("*.cu"))
ext = load(name="cuda_extension", sources=srcs, extra_include_paths=[root + "/template"], extra_cuda_cflags=["-O3"], build_directory=build, verbose=False)
sys.modules["cuda_extension"] = ext
def imp(name, path):
    spec = importlib.util.spec_from_file_location(name, path); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m
task = imp("task", task_path); new = imp("model_new", sol + "/model_new.py")
ref = task.Model(*task.get_init_inputs()).cuda(); cand = new.ModelNew(*task.get_init_inputs()).cuda(); cand.load_state_dict(ref.state_dict())
if mode == "verify":
    for s in range(5):
        torch.manual_seed(s); x = [t.cuda() for t in task.get_inputs()]
        assert torch.allclose(ref(*x), cand(*x), atol=1e-2, rtol=1e-2)
elif mode == "profile":
    x = [t.cuda() for t in task.get_inputs()]
    comp = torch.compile(ref)
    for f in (ref, comp, cand):
        for _ in range(10): f(*x)
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(100): f(*x)
        torch.cuda.synchronize()
'''


def main():
    sol = pathlib.Path(sys.argv[1]).resolve()
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    task = ROOT / "examples" / "tasks" / f"{sol.name}.py"
    code = STEP.replace("{root}", str(ROOT))
    for i in range(iters):
        times = {}
        with tempfile.TemporaryDirectory() as build:
            t_all = time.perf_counter()
            for mode in ("compile", "verify", "profile"):
                t = time.perf_counter()
                # "compile" builds only; verify and profile each start a new process that loads
                # the module again (a cache hit of load()) as the original workspace scripts do.
                m = "build-only" if mode == "compile" else mode
                subprocess.run([sys.executable, "-c", code, str(sol), str(task), build, m],
                               check=True)
                times[mode] = time.perf_counter() - t
            times["iteration"] = time.perf_counter() - t_all
        print(f"naive {sol.name} iteration {i}: " +
              ", ".join(f"{k} {v:.2f} s" for k, v in times.items()), flush=True)


if __name__ == "__main__":
    main()
