#!/usr/bin/env python3
"""evaluate.py: the trusted side of an evaluation: verify and time one candidate.

    python3 harness/evaluate.py --task MODEL.py --candidate-dir DIR --so PATH/cuda_extension.so
        --out RESULT.json [--device cuda|cpu] [--seeds 5] [--adversarial-sets 1]
        [--derived-shapes 2] [--value-stress 1] [--timing events|kernel|device]
        [--precision strict|tf32] [--atol 1e-2] [--rtol 1e-2] [--baseline-cache DIR]
        [--budget-ms 2000] [--timeout 120] [--no-timing] [--no-compile] [--python PATH]
        [--tmp-dir DIR] [--keep-temp] [--quiet]

This process imports torch and the task file only; it never imports or runs candidate code.
The candidate (the .so and DIR/model_new.py) runs in a child process, harness/candidate.py,
started with a clean environment in a fresh temporary directory and its own process group,
which gets copies of the inputs and Model's state_dict and sends back its outputs and its
post-forward inputs; this side compares them with its own reference outputs, which never
leave this process, on inputs drawn from seeds that never leave it either.

The result is written to --out as JSON (schema in docs/internals/harness.md); stdout carries
progress lines only. Exit status: 0 the candidate passed (and was timed unless --no-timing);
1 the candidate failed (the JSON says why); 2 bad arguments; 3 the task or the harness failed.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if not sys.path or os.path.abspath(sys.path[0]) != _HERE:
    sys.path.insert(0, _HERE)

import timing  # noqa: E402
import harness_util as hu  # noqa: E402
import arena as ar  # noqa: E402
import candidate_proc as cp  # noqa: E402
import memplan  # noqa: E402
from attempt import Attempt, OutOfMemory  # noqa: E402
from evalbase import EvalError, Log, set_precision  # noqa: E402
from job import arena_inputs, lay_out, received_outputs  # noqa: E402
from inputs import InputSet, heavy_tailed_like  # noqa: E402
from sets import SetPrefetch  # noqa: E402
from shapes import DEFAULT_DERIVED_SHAPES, model_at, size_names, smaller_odd  # noqa: E402
from stress import choose_stress_scale, growth  # noqa: E402
from compare import (  # noqa: E402
    MIN_EXTENSION_SHARE, PRECISION_FACTOR, PRECISION_REL_FLOOR_EPS, check_launches, check_set,
    compare_tensor, first_true, precision_record, refused_record, unravel)
from baselines import (  # noqa: E402
    baseline_cache_path, count_flops, device_info, floor_evidence, kernel_floor,
    measure_baselines, speed_of_light, validate_stats)
from memplan import candidate_oom_note, oom_request_bytes, oom_within_budget  # noqa: E402
from candidate_proc import sanitize_failure  # noqa: E402

# The entry points (build_parser, run, main, evaluate), and names that tests, harness/worker.py
# and tools reach through this module: they live in the modules above (attempt.py runs one
# attempt, session.py talks to the candidate).
__all__ = ['build_parser', 'run', 'main', 'evaluate', 'ar', 'cp', 'EvalError', 'InputSet',
           'SetPrefetch', 'set_precision', 'arena_inputs', 'lay_out', 'received_outputs',
           'choose_stress_scale', 'growth', 'heavy_tailed_like', 'model_at', 'size_names',
           'smaller_odd', 'MIN_EXTENSION_SHARE', 'PRECISION_FACTOR', 'PRECISION_REL_FLOOR_EPS',
           'check_launches', 'check_set', 'compare_tensor', 'first_true', 'precision_record',
           'refused_record', 'unravel', 'baseline_cache_path', 'count_flops', 'device_info',
           'floor_evidence', 'kernel_floor', 'measure_baselines', 'speed_of_light', 'validate_stats',
           'candidate_oom_note', 'oom_request_bytes', 'oom_within_budget', 'sanitize_failure']

import argparse  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

TESTING_ENV = "CUDA_AGENT_HARNESS_TESTING"
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_SEEDS = 5


# ---------------------------------------------------------------------------------------
# Arguments


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="evaluate.py",
        description="Verify and time one candidate (cuda_extension + model_new.py) against a "
                    "KernelBench-format task, with the candidate in a separate process.")
    p.add_argument("--task", required=True, help="the task file (Model, get_inputs, "
                                                 "get_init_inputs)")
    p.add_argument("--candidate-dir", required=True, help="directory holding model_new.py")
    ext = p.add_mutually_exclusive_group(required=True)
    ext.add_argument("--so", help="the built extension module (cuda_extension*.so)")
    ext.add_argument("--ext-module", help=f"TEST ONLY: a Python file imported as cuda_extension;"
                                          f" refused unless {TESTING_ENV}=1")
    p.add_argument("--out", required=True, help="where to write the result JSON")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--seeds", type=int, default=DEFAULT_SEEDS,
                   help="random input sets from get_inputs() (default 5)")
    p.add_argument("--adversarial-sets", type=int, default=1,
                   help="extra sets with heavy-tailed mixed-sign float inputs (default 1)")
    p.add_argument("--derived-shapes", type=int, default=DEFAULT_DERIVED_SHAPES,
                   help="for a task without EXTRA_SHAPES: smaller input shapes derived from it "
                        "(a batch, an odd size) verified too, at most this many (default 2, "
                        "0 = none)")
    p.add_argument("--value-stress", type=int, choices=(0, 1), default=1,
                   help="one set with the floating inputs scaled far beyond get_inputs() "
                        "(default 1, 0 = none)")
    p.add_argument("--timing", choices=timing.TIMING_MODES, default=None,
                   help="default: device under the cuda-agent rules on CUDA, else events")
    p.add_argument("--precision", choices=("strict", "tf32"), default="strict")
    p.add_argument("--rules", choices=("cuda-agent", "kernelbench"), default="cuda-agent",
                   help="cuda-agent: the extension's kernels carry the forward; kernelbench: "
                        "torch operators may too (their share is reported)")
    p.add_argument("--atol", type=float, default=None,
                   help="absolute tolerance (default: the task's ATOL, else 1e-2)")
    p.add_argument("--rtol", type=float, default=None,
                   help="relative tolerance (default: the task's RTOL, else 1e-2)")
    p.add_argument("--baseline-cache", help="directory caching eager/compile timings")
    p.add_argument("--budget-ms", type=float, default=timing.DEFAULT_BUDGET_MS,
                   help="time budget per timed subject, warm-up included (default 2000)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help="wall-clock limit for the candidate process in seconds (default 120)")
    p.add_argument("--no-timing", action="store_true", help="verify only")
    p.add_argument("--no-compile", action="store_true",
                   help="skip the torch.compile baseline")
    p.add_argument("--python", default=sys.executable,
                   help="interpreter for the candidate process (default: this one)")
    box = p.add_mutually_exclusive_group()
    box.add_argument("--sandbox", metavar="CUDA_AGENT",
                     help="run the candidate in the candidate sandbox of this cuda-agent binary "
                          "(`cuda-agent candidate-sandbox`); one of --sandbox and --no-sandbox "
                          "is required")
    box.add_argument("--no-sandbox", action="store_true",
                     help="run the candidate as a plain child process, WITHOUT isolation "
                          "(unsafe: for hosts that cannot build the sandbox)")
    p.add_argument("--tmp-dir", default=None, help="where candidate directories are made")
    p.add_argument("--keep-temp", action="store_true",
                   help="keep the candidate's directory (debugging)")
    p.add_argument("--memory-window", type=int, default=None,
                   help="stream the input sets of the task's own shape this many at a time "
                        "(default: as the memory plan decides from the task and the GPU)")
    p.add_argument("--memory-lazy", action="store_true",
                   help="the smallest memory plan's way whatever fits: a set drawn from a "
                        "recipe keeps only its arena slots, drawn again and its references "
                        "made when compared (streamed as --memory-window says, default 1)")
    p.add_argument("--memory-lean", action="store_true",
                   help="--memory-lazy without the float64 reference (the lean plan, which "
                        "the memory plan takes only when nothing larger fits)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


# ---------------------------------------------------------------------------------------
# The evaluation


def evaluate(opts: argparse.Namespace, log: Log) -> dict[str, Any]:
    """One evaluation under the roomiest memory plan that fits; an out-of-memory error in the
    evaluator's own work retries it under the next smaller plan, and after the smallest ends
    as an infrastructure error (failure.kind "infrastructure": no reward, not the candidate's
    failure). Afterwards the device's memory is released and measured (memory.idle_after),
    and a long-lived runner's next sets are drawn ahead where they fit the prefetch budget."""
    t_start = time.monotonic()
    prefetch: SetPrefetch | None = getattr(opts, "prefetch", None)
    attempts: list[dict[str, Any]] = []
    min_level = 0
    prefetch_next = None
    while True:
        try:
            result, prefetch_next = Attempt(opts, log, min_level).run()
            break
        except OutOfMemory as e:
            # Nothing of the failed attempt may stay reachable (its frames hold its tensors).
            e.__traceback__ = e.__context__ = None
            attempts.append({"level": e.level, "error": hu.cap(e.message, 512)})
            device = timing.resolve_device(torch.device(opts.device))
            memplan.release(device)
            result = e.result
            plans = len(memplan.make_plans(memplan.Footprint(
                **((result.get("memory") or {}).get("footprint") or {}))))
            if e.level + 1 >= plans:
                result["failure"] = {
                    "kind": "infrastructure",
                    "message": f"the evaluator ran out of GPU memory in its own work under "
                               f"every memory plan ({len(attempts)} tried; last: "
                               f"{hu.cap(e.message, 300)}); not the candidate's failure, no "
                               "reward", "details": {"attempts": attempts}}
                result["ok"] = False
                break
            log(f"out of GPU memory under memory plan {e.level}; retrying with plan "
                f"{e.level + 1}")
            min_level = e.level + 1
    mem = result.setdefault("memory", {})
    if isinstance(mem, dict):
        mem["attempts"] = attempts
        device = timing.resolve_device(torch.device(opts.device))
        if device.type == "cuda" and torch.cuda.is_available():
            mem["idle_after"] = memplan.release(device)
        plan = mem.get("plan") or {}
        foot = mem.get("footprint") or {}
        draws = foot.get("input_bytes", 0) * (foot.get("n_streamed", 0) + 1)
        if prefetch is not None and prefetch_next is not None and not plan.get("chunked") \
                and (device.type != "cuda" or draws <= memplan.PREFETCH_BUDGET):
            prefetch.start(*prefetch_next)
    result.setdefault("elapsed_s", {})["total"] = time.monotonic() - t_start
    return result


def usage_error(opts_out: str | None, message: str) -> int:
    print(f"evaluate.py: {message}", file=sys.stderr)
    if opts_out:
        result = {"schema": hu.SCHEMA_VERSION, "ok": False, "stage": "setup",
                  "failure": {"kind": "usage", "message": message, "details": {}},
                  "verification": None, "timing": None, "flags": [], "device": None,
                  "candidate": None, "elapsed_s": {}}
        try:
            hu.write_json_atomic(opts_out, result)
        except OSError:
            pass
    return 2


def run(opts: argparse.Namespace) -> int:
    """One evaluation from parsed options: checks them, evaluates, writes --out; the exit
    status of main(). harness/worker.py calls this once per job, with opts.pool set."""
    if opts.timing is None:
        opts.timing = timing.default_mode(opts.rules, opts.device)
    if opts.ext_module and os.environ.get(TESTING_ENV) != "1":
        return usage_error(opts.out, f"--ext-module is for tests only and needs {TESTING_ENV}=1;"
                                     " give the built extension with --so")
    if not os.path.isfile(opts.task):
        return usage_error(opts.out, f"no task file {opts.task}")
    if not os.path.isfile(os.path.join(opts.candidate_dir, "model_new.py")):
        return usage_error(opts.out, f"no model_new.py in {opts.candidate_dir}")
    ext = opts.so or opts.ext_module
    if not os.path.isfile(ext):
        return usage_error(opts.out, f"no extension file {ext}")
    if opts.seeds < 1 or opts.adversarial_sets < 0 or opts.derived_shapes < 0:
        return usage_error(opts.out, "--seeds must be >= 1, --adversarial-sets and "
                                     "--derived-shapes >= 0")
    if opts.memory_window is not None and opts.memory_window < 1:
        return usage_error(opts.out, "--memory-window must be >= 1")
    if opts.budget_ms <= 0 or opts.timeout <= 0:
        return usage_error(opts.out, "--budget-ms and --timeout must be positive")
    if not opts.no_sandbox and not opts.sandbox:
        return usage_error(opts.out, "give --sandbox CUDA_AGENT (the candidate runs isolated) or "
                                     "--no-sandbox (it runs WITHOUT isolation)")
    if opts.sandbox and not os.access(opts.sandbox, os.X_OK):
        return usage_error(opts.out, f"--sandbox {opts.sandbox}: not an executable")
    if opts.atol is not None and opts.atol < 0 or opts.rtol is not None and opts.rtol < 0:
        return usage_error(opts.out, "tolerances must be >= 0")

    log = Log(opts.quiet)
    try:
        result = evaluate(opts, log)
    except Exception as exc:  # a bug here: still leave a result behind
        result = {"schema": hu.SCHEMA_VERSION, "ok": False, "stage": "setup",
                  "failure": {"kind": "harness", "message": f"{type(exc).__name__}: {exc}",
                              "details": {"traceback": hu.cap(traceback.format_exc())}},
                  "verification": None, "timing": None, "flags": [], "device": None,
                  "candidate": None, "elapsed_s": {}}
    hu.write_json_atomic(opts.out, result)
    failure = result.get("failure")
    if result.get("ok"):
        log(f"passed; result in {opts.out}")
        return 0
    kind = failure["kind"] if failure else "?"
    log(f"failed ({kind}): {failure['message'] if failure else ''}")
    return 3 if kind in ("task_error", "harness", "infrastructure") else 1


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
