"""Time the example tasks on a CUDA GPU: PyTorch eager, torch.compile and, where one exists,
the reference solution, side by side in one process with one timing method.

    python3 bench/examples.py                      # every task; solutions where present
    python3 bench/examples.py --json OUT.json      # also write the results

Method (the same for all three): inputs on the GPU, 10 warm-up calls, then N timed calls
(N = 50), each preceded by a 256 MiB write that flushes the L2 cache, timed with CUDA events
on the current stream; median and coefficient of variation reported. Each solution is built
and measured in its own process (the extension module is always named cuda_extension).
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
TASKS = ROOT / "examples" / "tasks"
SOLUTIONS = ROOT / "examples" / "solutions"
WARMUP, REPS = 10, 50


def time_ms(torch, fn, inputs):
    flush = torch.empty(64 * 1024 * 1024, dtype=torch.float32, device="cuda")
    with torch.no_grad():
        for _ in range(WARMUP):
            fn(*inputs)
        torch.cuda.synchronize()
        times = []
        for _ in range(REPS):
            flush.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*inputs)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    med = statistics.median(times)
    cv = statistics.pstdev(times) / statistics.mean(times)
    return {"median_ms": med, "cv": cv}


def measure(task_path, solution):
    """Runs in a child process: returns a dict of timings for one task."""
    import torch

    sys.path.insert(0, str(ROOT / "tests" / "gpu"))
    import solution_check as sc

    task = sc.import_file("task_module", task_path)
    torch.manual_seed(0)
    inputs = sc.to_device(task.get_inputs())
    ref = task.Model(*task.get_init_inputs()).cuda().eval()
    result = {"task": task_path.stem, "device": torch.cuda.get_device_name(),
              "torch": torch.__version__}
    result["eager"] = time_ms(torch, ref, inputs)
    compiled = torch.compile(ref)
    result["compile"] = time_ms(torch, compiled, inputs)
    if solution:
        with tempfile.TemporaryDirectory() as build_dir:
            sc.build(solution, build_dir)
            new_mod = sc.import_file("model_new", solution / "model_new.py")
            new = new_mod.ModelNew(*task.get_init_inputs()).cuda().eval()
            new.load_state_dict(ref.state_dict())
            with torch.no_grad():
                ok = torch.allclose(new(*inputs), ref(*inputs), atol=1e-2, rtol=1e-2)
            result["solution"] = time_ms(torch, new, inputs)
            result["solution"]["correct"] = bool(ok)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write all results to this file")
    ap.add_argument("--child", nargs=2, metavar=("TASK", "SOLUTION"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        task, sol = args.child
        print(json.dumps(measure(pathlib.Path(task), pathlib.Path(sol) if sol != "-" else None)))
        return 0
    results = []
    for task in sorted(TASKS.glob("*.py")):
        sol = SOLUTIONS / task.stem
        cmd = [sys.executable, __file__, "--child", str(task), str(sol) if sol.is_dir() else "-"]
        p = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
        if p.returncode != 0:
            print(f"{task.stem}: failed\n{p.stderr[-2000:]}", file=sys.stderr)
            return 1
        results.append(json.loads(p.stdout.strip().splitlines()[-1]))
    print(f"device: {results[0]['device']}, torch {results[0]['torch']}; median of {REPS} "
          f"(CV), L2 flushed\n")
    print(f"{'task':<20} {'eager ms':>14} {'compile ms':>14} {'solution ms':>14} "
          f"{'vs eager':>9} {'vs compile':>10}")
    for r in results:
        def cell(k):
            return f"{r[k]['median_ms']:.4f} ({r[k]['cv'] * 100:.1f}%)" if k in r else "-"
        line = f"{r['task']:<20} {cell('eager'):>14} {cell('compile'):>14} {cell('solution'):>14}"
        if "solution" in r:
            s = r["solution"]["median_ms"]
            line += (f" {r['eager']['median_ms'] / s:>8.2f}x {r['compile']['median_ms'] / s:>9.2f}x"
                     f"{'' if r['solution']['correct'] else '  WRONG'}")
        print(line)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
