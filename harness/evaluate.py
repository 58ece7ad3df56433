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
import model_state  # noqa: E402
import quality  # noqa: E402
from evalbase import (  # noqa: E402,F401
    is_oom, EvalError, Log, secret_seed, task_call, as_list, set_precision, nbytes)
from job import (  # noqa: E402,F401
    lay_out_streamed, write_model, lay_out, arena_inputs, fill_inputs,
    received_outputs, footprint_of)
from inputs import (  # noqa: E402,F401
    DEFAULT_DERIVED_SHAPES, sha256_file, load_task, heavy_tailed_like, InputSet, draw_sets,
    shape_models, model_at, smaller_odd, size_names, validate_derived, choose_stress_scale,
    growth, cpu_state, SetPrefetch, compute_reference)
from compare import (  # noqa: E402,F401
    PRECISION_FACTOR, PRECISION_REL_FLOOR_EPS, MIN_EXTENSION_SHARE, first_true, unravel,
    compare_tensor, precision_record, set_label, check_set, check_reported, refused_record,
    check_launches)
from baselines import (  # noqa: E402,F401
    kernel_floor, device_info, baseline_key, baseline_cache_path, measure_baselines, count_flops,
    speed_of_light, validate_stats, timing_section)
from streaming import References  # noqa: E402
from memplan import candidate_oom_note, oom_request_bytes, oom_within_budget  # noqa: E402,F401
from candidate_proc import sanitize_failure  # noqa: E402

# Names tests and tools reach through this module (they live in the modules above).
__all__ = ['MIN_EXTENSION_SHARE', 'baseline_cache_path', 'PRECISION_FACTOR',
           'PRECISION_REL_FLOOR_EPS', 'arena_inputs', 'check_set', 'compare_tensor',
           'count_flops', 'first_true', 'growth', 'heavy_tailed_like', 'model_at',
           'precision_record', 'received_outputs', 'refused_record', 'size_names',
           'smaller_odd', 'unravel', 'oom_request_bytes', 'kernel_floor', 'speed_of_light']

import argparse  # noqa: E402
import copy  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from typing import Any, Callable  # noqa: E402

import torch  # noqa: E402

TESTING_ENV = "CUDA_AGENT_HARNESS_TESTING"
DEFAULT_TOL = 1e-2
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_SEEDS = 5
# How long an evaluation waits for a pre-warmed candidate that is still importing torch
# before it starts one of its own.
PREWARM_WAIT_S = 30.0
# How long a candidate process started on demand may take to get ready (import torch,
# initialise the device): the evaluator's time, not the candidate's (its --timeout starts
# with its job).
START_TIMEOUT_S = 300.0


# Environment variables the candidate process inherits; everything else is dropped.
ENV_PASSTHROUGH = ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "PYTHONPATH",
                   "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "OMP_NUM_THREADS",
                   "MKL_NUM_THREADS")


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
    p.add_argument("--timing", choices=timing.TIMING_MODES, default="events")
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


def new_result(opts: argparse.Namespace, atol: float, rtol: float) -> dict[str, Any]:
    return {
        "schema": hu.SCHEMA_VERSION,
        "ok": False,
        "stage": "setup",
        "failure": None,
        "rules": opts.rules,
        "verification": {"sets": [], "atol": atol, "rtol": rtol, "precision": opts.precision,
                         "precision_observed": None, "n_random": opts.seeds,
                         "n_adversarial": 0, "adversarial": None, "n_value_stress": 0,
                         "value_stress": None, "n_derived_shapes": 0, "derived_shapes": [],
                         "derived_shapes_note": None,
                         "reference_mutates_inputs": [], "fp64_reference": None},
        "timing": None,
        "flags": [],
        "device": None,
        "candidate": None,
        "elapsed_s": {},
    }


def tolerances(task: Any, opts: argparse.Namespace) -> tuple[float, float]:
    atol = opts.atol if opts.atol is not None else float(getattr(task, "ATOL", DEFAULT_TOL))
    rtol = opts.rtol if opts.rtol is not None else float(getattr(task, "RTOL", DEFAULT_TOL))
    return atol, rtol


class OutOfMemory(Exception):
    """torch.cuda.OutOfMemoryError in the evaluator's own work under a memory plan: evaluate()
    retries with a smaller plan, or reports an infrastructure error (the result as it stood)."""

    def __init__(self, level: int, message: str, result: dict[str, Any]):
        super().__init__(message)
        self.level = level
        self.message = message
        self.result = result


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
            result, prefetch_next = evaluate_once(opts, log, min_level)
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


class Session:
    """The state of one attempt that the message pump works on: the candidate, the arena, the
    sets (compared in order; streamed ones drawn a group at a time), the post-timing set."""

    def __init__(self, opts: argparse.Namespace, log: Log, result: dict[str, Any],
                 device: torch.device):
        self.opts, self.log, self.result, self.device = opts, log, result, device
        self.cand: cp.CandidateProcess | None = None
        self.arena: ar.Arena | None = None
        self.sets: list[InputSet] = []
        self.post: InputSet | None = None
        self.post_rec: dict[str, Any] | None = None
        self.atol = self.rtol = DEFAULT_TOL
        # Strict precision fails an output only under the project's rules: KernelBench
        # accepts whatever is inside its tolerances, so there it is measured and flagged.
        self.precision = "strict" if opts.precision == "strict" and \
            opts.rules != "kernelbench" else "recorded"
        self.received = 0
        self.chunk_starts: list[int] = []
        self.prepare: Callable[[InputSet], None] = lambda s: None
        self.restore: Callable[[InputSet], None] = lambda s: None
        self.lazy = False  # memplan.Plan.lazy (set 0 then in the first group's slots too)
        self.streamed: set[int] = set()  # indices of the sets drawn a group at a time
        self.cand_stats: dict[str, Any] | None = None
        self.cand_window: quality.Window | None = None  # the host's load while timed
        self.candidate_failure: dict[str, Any] | None = None
        self.stage = "verify"
        self.elapsed: dict[str, float] = {}

    def pump(self, phase: str) -> str:
        """Reads the candidate's messages until the phase ends: "verify" ends at "verified",
        "timing" at "done"; either ends at a "failure" (kept) or EOF. Returns which."""
        cand = self.cand
        assert cand is not None
        v = self.result["verification"]
        while True:
            try:
                msg = cand.next_message()
            except TimeoutError:
                where = "while being timed" if phase == "timing" else \
                    f"(in its stage {self.result['candidate']['last_stage']!r})"
                raise EvalError("timeout", f"the candidate ran past the "
                                           f"{self.opts.timeout:g} s limit {where} and was "
                                           "killed", stage=self.stage)
            if msg is None:
                return "eof"
            mtype = msg.get("type")
            if mtype == "stage":
                self.result["candidate"]["last_stage"] = str(msg.get("stage"))[:64]
            elif mtype == "set" and phase == "verify":
                self.on_set(msg)
            elif mtype == "set" and phase == "timing" and self.post is not None and \
                    self.cand_stats is not None:
                self.on_post(msg)
            elif mtype == "launches" and phase == "verify":
                v["launches"] = msg.get("evidence")
            elif mtype == "verified" and phase == "verify":
                self.note_candidate_memory(msg.get("memory"))
                if self.received != len(self.sets):
                    raise EvalError("protocol", f"the candidate claimed verification after "
                                                f"{self.received} of {len(self.sets)} input "
                                                "sets")
                return "verified"
            elif mtype == "timing" and phase == "timing":
                load = self.cand_window.close() if self.cand_window is not None else None
                self.cand_stats = validate_stats(msg.get("stats"))
                if self.cand_stats is not None and load is not None:
                    self.cand_stats["host"] = load
                if self.post is not None and self.cand_stats is not None:
                    self.prepare(self.post)  # drawn now where the plan streams the sets
                    assert self.arena is not None
                    fill_inputs(self.arena, self.post, self.device)  # unseen till timed
                    self.drop_if_lazy(self.post)
                    cand.send("post")
            elif mtype == "done" and phase == "timing":
                self.note_candidate_memory(msg.get("memory"))
                return "done"
            elif mtype == "failure":
                self.candidate_failure = msg
                return "failure"
            elif mtype == "_protocol":
                raise EvalError("protocol", str(msg.get("message")))
            elif mtype == "_sandbox":
                raise EvalError("infrastructure", "the candidate sandbox could not be built: "
                                           f"{msg.get('message')}", stage="setup")

    def note_candidate_memory(self, m: Any) -> None:
        """The candidate's own device memory peaks (what it reports: for the record beside the
        plan's estimate of its share, never for a verdict)."""
        mem = self.result.get("memory")
        if not isinstance(m, dict) or not isinstance(mem, dict):
            return
        mem["candidate_peak"] = {k: m[k] for k in ("max_allocated_bytes", "max_reserved_bytes")
                                 if isinstance(m.get(k), int) and not isinstance(m.get(k), bool)}

    def on_set(self, msg: dict[str, Any]) -> None:
        if msg.get("index") != self.received or self.received >= len(self.sets):
            raise EvalError("protocol", "the candidate reported input sets out of order")
        assert self.arena is not None
        s = self.sets[self.received]
        t_cmp = time.monotonic()
        try:
            self.restore(s)
            rec = check_reported(self.arena, s, msg, self.device, self.atol, self.rtol,
                                 self.precision)
        except EvalError:
            if s.note is not None:
                s.note["status"] = "failed"
            raise
        fwd = msg.get("forward_ms")
        rec["forward_ms"] = fwd if isinstance(fwd, (int, float)) else None
        self.result["verification"]["sets"].append(rec)
        self.elapsed["compare"] = self.elapsed.get("compare", 0.0) + time.monotonic() - t_cmp
        if s.note is not None:
            s.note.update(status="refused" if "refused" in rec else "verified",
                          reason=rec.get("refused"))
        if "refused" in rec:
            self.result["flags"].append({
                "kind": "derived_shape_refused",
                "message": f"input set {s.index} ({set_label(s)}) was refused by the "
                           f"candidate ({rec['refused']}); not a failure: the kernel "
                           "supports fewer sizes than the reference"})
            self.log(f"input set {s.index} ({s.kind}) refused by the candidate")
        else:
            self.log(f"input set {s.index} ({s.kind}) ok")
        self.received += 1
        if s.index in self.streamed:
            s.release()  # compared: its memory goes back before the next group is drawn
        else:
            self.drop_if_lazy(s)
        if self.received in self.chunk_starts:
            self.next_chunk()

    def next_chunk(self) -> None:
        """The next group of streamed sets: drawn, their references made, written into the
        arena's window over the group compared already; then "next" to the candidate."""
        assert self.arena is not None and self.cand is not None
        k = self.chunk_starts.index(self.received)
        end = self.chunk_starts[k + 1] if k + 1 < len(self.chunk_starts) else len(self.sets)
        for s in self.sets[self.received:end]:
            if s.index not in self.streamed:
                break
            self.prepare(s)
            self.write(s)
        self.cand.send("next")

    def write(self, s: InputSet) -> None:
        """Set s's inputs into its arena slots (drawn again first where the plan dropped them);
        under a lazy plan the set keeps nothing afterwards."""
        assert self.arena is not None
        s.materialize()
        fill_inputs(self.arena, s, self.device)
        self.drop_if_lazy(s)

    def drop_if_lazy(self, s: InputSet) -> None:
        """Under a lazy plan, a set drawn from a recipe keeps nothing once it is in the arena
        (or compared): restore() draws it again."""
        if self.lazy and s.recipe is not None:
            s.release()
            memplan.trim(self.device)

    def on_post(self, msg: dict[str, Any]) -> None:
        """The forward after timing, on a set it has not seen: the same checks."""
        post = self.post
        assert post is not None and self.arena is not None
        if msg.get("index") != post.index or self.post_rec is not None:
            raise EvalError("protocol", "the candidate reported an unexpected input set after "
                                        "timing", stage="timing")
        try:
            self.restore(post)
            self.post_rec = check_reported(self.arena, post, msg, self.device, self.atol,
                                           self.rtol, self.precision)
            self.drop_if_lazy(post)
        except EvalError as e:
            e.message = ("after timing, on a fresh input set, the outputs no longer match (does "
                         "the forward behave differently once it has been called many times?): "
                         + e.message)
            e.stage = "timing"
            raise
        self.result["verification"]["post_timing"] = self.post_rec

    def verification_flags(self, verified: bool) -> None:
        """After verification: the launch evidence's availability, and the precision observed
        (a reduced_precision flag where the rule was measured and not enforced)."""
        result, opts = self.result, self.opts
        v = result["verification"]
        if verified and self.device.type == "cuda":
            why_none = check_launches(v.get("launches"), opts.rules)
            if why_none is not None:
                result["flags"].append({"kind": "launch_evidence_unavailable",
                                        "message": why_none})
        precs = [p for r in v["sets"] for p in r.get("precision", [])
                 if r.get("precision_enforced", True)]
        if precs:
            v["precision_observed"] = "fp32" if all(p["ok"] for p in precs) else "reduced"
        if self.precision != "strict":
            v["precision_enforced"] = False
            if opts.precision == "strict" and v.get("precision_observed") == "reduced":
                result["flags"].append({
                    "kind": "reduced_precision",
                    "message": "inside the tolerances, but less accurate than fp32 arithmetic "
                               "allows (the strict-precision rule, which KernelBench's rules "
                               "do not have, was measured and not enforced)"})

    def judge_exit(self, verified: bool, plan: memplan.Plan) -> None:
        """How the candidate process ended: returns when it finished as it should (verified,
        exit 0), and kills what it left behind; raises its failure (EvalError), or
        OutOfMemoryError when it ran out of memory inside its budget while this side took more
        than its share (the evaluator's failure: retried with a smaller plan)."""
        cand, result = self.cand, self.result
        assert cand is not None
        rc = cand.wait(min(10.0, max(1.0, cand.deadline - time.monotonic())))
        result["candidate"]["exit_code"] = rc
        if self.candidate_failure is not None:
            kind, message, details = sanitize_failure(self.candidate_failure)
            if kind == "oom":
                note = candidate_oom_note(details, result.get("memory"))
                if oom_within_budget(details, message, result.get("memory")) and \
                        memplan.evaluator_overshot(self.device, plan):
                    # The candidate's own numbers alone never decide it: the overshoot is
                    # measured on this side.
                    raise torch.cuda.OutOfMemoryError(
                        "the candidate ran out of GPU memory inside its budget" + note + ": "
                        + message)
                message += note
            details["output_tail"] = cand.output_tail()
            raise EvalError(kind, message, details, stage=self.stage)
        if rc is None:
            raise EvalError("timeout", "the candidate stopped reporting but did not exit; "
                                       "killed", stage=self.stage)
        if rc != 0:
            raise EvalError("crash", f"the candidate process {cp.exit_description(rc)} (in its "
                                     f"stage {result['candidate']['last_stage']!r})",
                            {"exit_code": rc, "output_tail": cand.output_tail()},
                            stage=self.stage)
        if not verified:
            raise EvalError("protocol", "the candidate exited without finishing verification",
                            {"output_tail": cand.output_tail()}, stage=self.stage)
        cand.kill()  # anything it left behind in its process group


def evaluate_once(opts: argparse.Namespace, log: Log,
                  min_level: int) -> tuple[dict[str, Any], tuple | None]:
    """One attempt under the roomiest memory plan from min_level on that fits. Returns the
    result and the arguments for the next job's set prefetch (None: none); raises
    OutOfMemory."""
    t_start = time.monotonic()
    result = new_result(opts, opts.atol if opts.atol is not None else DEFAULT_TOL,
                        opts.rtol if opts.rtol is not None else DEFAULT_TOL)
    device = torch.device(opts.device)
    ses = Session(opts, log, result, device)
    elapsed = ses.elapsed
    job_dir: str | None = None
    base_dir: str | None = None
    prefetch: SetPrefetch | None = getattr(opts, "prefetch", None)
    prefetch_next: tuple | None = None
    plan: memplan.Plan | None = None
    if prefetch is not None:
        prefetch.wait()
    try:
        if device.type == "cuda" and not torch.cuda.is_available():
            raise EvalError("harness", "--device cuda, but torch.cuda.is_available() is False")
        device = ses.device = timing.resolve_device(device)  # "cuda" -> "cuda:<current>"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dev = device_info(device)
        result["device"] = dev
        free0 = memplan.free_bytes(device)  # what this job may use, before it takes any
        peak_base = memplan.reset_peak(device)

        # -- setup: task, reference model, input sets
        task_sha = sha256_file(opts.task)
        task = load_task(opts.task, task_sha)
        atol, rtol = ses.atol, ses.rtol = tolerances(task, opts)
        result["verification"].update(atol=atol, rtol=rtol)
        set_precision("strict")  # the reference is always computed at full fp32
        init_seed = secret_seed()
        torch.manual_seed(init_seed)
        init_inputs = as_list(task_call("get_init_inputs()", task.get_init_inputs),
                              "get_init_inputs()")
        # Seeded again right before the construction, as KernelBench seeds Model and ModelNew:
        # under its rules a ModelNew whose state_dict keys differ is built from the same seed.
        torch.manual_seed(init_seed)
        model = task_call("Model(*get_init_inputs())", lambda: task.Model(*init_inputs))
        model = task_call("moving Model to the device", lambda: model.to(device).eval())
        model_state.as_built(model)  # each reference forward starts from this state
        state = cpu_state(model)
        state_bytes = sum(nbytes(v) for v in state.values())
        # One more random set when timing: checked after the timing runs, so that a candidate
        # that behaves differently once it is being timed (counting calls, say) is caught.
        n_draw = opts.seeds + (0 if opts.no_timing else 1)
        n_derived = max(0, getattr(opts, "derived_shapes", DEFAULT_DERIVED_SHAPES))
        n_stress = 1 if getattr(opts, "value_stress", 1) else 0
        set_key = (task_sha, n_draw, opts.adversarial_sets, n_derived, n_stress, str(device))
        t_draw = time.monotonic()
        got = prefetch.take(set_key) if prefetch is not None else None
        if got is not None:
            sets, sets_info = got
            log("input sets drawn ahead of time")
        else:  # the sets of the task's own shape after the first: drawn once a plan is made
            sets, sets_info = draw_sets(task, n_draw, opts.adversarial_sets, device, log,
                                        n_derived, n_stress, defer=True)
        elapsed["setup_draw"] = time.monotonic() - t_draw
        memplan.phase_mark(device, "draw")
        result["verification"]["sets_prefetched"] = got is not None
        prefetch_next = (set_key, task, n_draw, opts.adversarial_sets, device, n_derived,
                         n_stress)
        post: InputSet | None = None
        if not opts.no_timing:
            post = sets.pop(opts.seeds)  # the last random set; adversarial ones follow
            post.index, post.kind = -1, "post-timing"
        v = result["verification"]
        v["adversarial"] = sets_info["adversarial"]
        v["value_stress"] = sets_info["value_stress"]
        v["derived_shapes"] = sets_info["derived_shapes"]
        v["derived_shapes_note"] = sets_info["derived_shapes_note"]
        t_ref32 = time.monotonic()
        # The derived sets the reference refuses and a value-stress set that finds no usable
        # scale are dropped before anything is laid out for the candidate.
        model_state.track(model, [])  # a class evaluated before: found again below
        ref_peak = compute_reference(model, sets[0], device)
        # The state the task's forward changes (an RNN's hidden state): compared as outputs.
        v["state"] = model_state.changed(model)
        if v["state"]:
            model_state.track(model, v["state"])
            sets[0].ref.extend(model_state.values(model, v["state"]))
        memplan.phase_mark(device, "set0_reference")

        # -- the memory plan: how many sets of the task's own shape are resident at once
        streamed = [s for s in sets[1:] if s.recipe is not None] + \
            ([post] if post is not None else [])
        fp = footprint_of(sets, streamed, state_bytes, ref_peak)
        forced = getattr(opts, "memory_window", None)
        forced_lean = bool(getattr(opts, "memory_lean", False))
        forced_lazy = bool(getattr(opts, "memory_lazy", False)) or forced_lean
        if (forced or forced_lazy) and min_level == 0:
            plan = memplan.forced(fp, forced or 1, forced_lazy, not forced_lean)
        else:
            plan = memplan.choose(fp, free0, min_level)
        if plan is None:
            result["memory"] = {"footprint": memplan.asdict(fp), "free_bytes": free0,
                                "plan": None}
            if min_level == 0:
                raise EvalError("infrastructure", memplan.too_large_message(fp, free0 or 0),
                                {"reason": "too_large"}, stage="setup")
            plan = memplan.make_plans(fp)[min_level]  # a retry: the smaller plan anyway
        result["memory"] = memplan.describe(fp, plan, free0)
        if plan.chunked:
            log(f"memory plan {plan.level}: {plan.window} of {len(streamed)} input sets at a "
                f"time{', drawn again when compared' if plan.lazy else ''}")
        chunked = plan.chunked
        # A lazy plan: once in the arena, a set drawn from a recipe (set 0 too) keeps nothing
        # else; it is drawn again and its references made when its outputs are compared.
        ses.lazy = plan.lazy
        for s in streamed:
            if chunked and s.kind != "value-stress":
                s.release()  # a prefetched draw: drawn again when its turn comes
            elif not chunked:
                s.materialize()
        sets = validate_derived(task, sets, model, device, log)
        model64: torch.nn.Module | None = None
        why64_model = None
        if not plan.float64:
            why64_model = (f"the memory plan (level {plan.level}, the smallest) leaves no room "
                           "for a float64 reference")
        else:
            try:
                model_state.as_built(model)  # the float64 copy starts as built too
                model64 = copy.deepcopy(model).double()
            except Exception as exc:
                if is_oom(exc):
                    raise
                model64, why64_model = None, f"{type(exc).__name__}: {exc}"
        sets = [s for s in sets if s.kind != "value-stress"
                or choose_stress_scale(s, model, model64, device, v["value_stress"])]
        for s in sets:
            if chunked and s.kind == "value-stress":
                s.release()  # its scale chosen: drawn again, scaled, when its turn comes
        for k, s_ in enumerate(sets):
            s_.index = k
        if post is not None:
            post.index = len(sets)
        v["n_adversarial"] = sum(1 for s in sets if s.kind == "adversarial")
        v["n_extra_shapes"] = sum(1 for s in sets if s.kind == "shape")
        v["n_value_stress"] = sum(1 for s in sets if s.kind == "value-stress")
        v["n_derived_shapes"] = sum(1 for s in sets if s.kind == "derived-shape")
        all_sets = sets + ([post] if post is not None else [])
        streamed = [s for s in all_sets if s.recipe is not None and s is not sets[0]]
        ses.streamed = {s.index for s in streamed} if chunked else set()
        extra_models = shape_models(task, all_sets, device)
        for s in all_sets:  # fast on a GPU; sizes the output slots and the poisoning
            if s.kind not in ("derived-shape", "value-stress") and s is not sets[0] and \
                    s.orig is not None:
                compute_reference(s.model or model, s, device)
        elapsed["setup_reference"] = time.monotonic() - t_ref32
        elapsed["setup"] = time.monotonic() - t_start
        memplan.phase_mark(device, "setup")

        # -- the candidate's directory and process (pre-warmed when a pool has one)
        pool = getattr(opts, "pool", None)
        sandbox = cp.Sandbox.from_opts(opts)
        cand = ses.cand = pool.take(opts.python, opts.device, sandbox, PREWARM_WAIT_S) \
            if pool is not None else None
        prewarmed = cand is not None
        if cand is None:
            cand = ses.cand = cp.CandidateProcess(opts.python, cp.make_base(opts.tmp_dir),
                                                  opts.device, sandbox, opts.timeout)
        job_dir = cand.job_dir
        base_dir = cand.base
        t_job = time.monotonic()
        own_models = [s for s in all_sets if s.model is not None]
        job_models = [write_model(job_dir, 0, init_inputs, state)] + [
            write_model(job_dir, s.model_index, s.init or [], cpu_state(s.model))
            for s in own_models]
        if opts.rules == "kernelbench":  # never an input seed: those stay here
            for m, seed in zip(job_models, [init_seed] + [s.model_seed for s in own_models]):
                m["init_seed"] = seed
            # KernelBench runs the candidate's file in the namespace the reference's ran in.
            shutil.copyfile(opts.task, os.path.join(job_dir, "reference_globals.py"))
        # The candidate's own files, copied: it sees neither the compile cache nor the
        # candidate directory (which holds the reference's result afterwards).
        ext_name = "cuda_extension.so" if opts.so else "cuda_extension.py"
        shutil.copyfile(os.path.abspath(opts.so or opts.ext_module),
                        os.path.join(job_dir, ext_name))
        shutil.copyfile(os.path.join(opts.candidate_dir, "model_new.py"),
                        os.path.join(job_dir, "model_new.py"))
        if chunked:
            # Under a lazy plan set 0 keeps nothing once written either: it takes the first
            # group's slots too (one input set's slots fewer in the arena), and is written
            # there again before the timing, which runs on it.
            order = [s for s in streamed if s is not post]
            rotation = ([sets[0]] if plan.lazy else []) + order
            resident = [s for s in all_sets if s.index not in ses.streamed
                        and not (plan.lazy and s is sets[0])]
            arena_bytes = lay_out_streamed(resident, rotation + ([post] if post else []),
                                           plan.window, sets[0])
            # The groups: the first window of the rotation (with set 0, in its own slots or
            # the first group's), then a window at a time; the resident derived and
            # extra-shape sets come last, with the last group.
            ses.chunk_starts = [s.index for k, s in enumerate(rotation)
                                if k and k % plan.window == 0]
            if post is not None and rotation:  # after timing, in the first group's slots
                post.slots = [dict(x) for x in rotation[0].slots]
                post.out_slots = [dict(o) for o in rotation[0].out_slots]
        else:
            arena_bytes = lay_out(all_sets)
        try:
            ses.arena, why_not_ipc = ar.create(arena_bytes, device)
        except (ar.ArenaError, OSError) as exc:
            raise EvalError("harness", f"cannot create the shared memory for the candidate: "
                                       f"{exc}", stage="setup")
        arena = ses.arena
        result["verification"]["transport"] = {"kind": arena.kind, "bytes": arena.size}
        if why_not_ipc is not None:
            result["verification"]["transport"]["device_memory_unavailable"] = \
                hu.cap(why_not_ipc, 512)
            log(f"device memory cannot be shared ({why_not_ipc}); tensors go through host "
                "memory")

        refs = References(plan, model, extra_models, model64, why64_model, device)
        ses.sets, ses.post = sets, post
        ses.prepare = refs.prepare if chunked else (lambda s: None)
        ses.restore = refs.restore
        first_group = len(sets) if not ses.chunk_starts else ses.chunk_starts[0]
        out_bytes = [nbytes(x) for x in sets[0].ref]
        for s in sets:  # the post-timing set is written only once the timing is over
            if chunked and s.index in ses.streamed:
                if s.index >= first_group:
                    continue
                refs.prepare(s)
            ses.write(s)
        elapsed["job_files"] = time.monotonic() - t_job
        memplan.phase_mark(device, "arena")
        job = {
            "device": str(device),
            "rules": opts.rules,
            "extension": {"kind": "so" if opts.so else "py",
                          "path": os.path.join(job_dir, ext_name)},
            "model_new": os.path.join(job_dir, "model_new.py"),
            "n_sets": len(sets),
            "arena": arena.desc,
            "models": job_models,
            "sets": [{"inputs": s.slots, "outputs": s.out_slots, "model": s.model_index,
                      "may_refuse": s.may_refuse} for s in all_sets],
            "post_timing_set": post.index if post is not None else None,
            "precision": opts.precision,
            "poison_bytes": out_bytes,
            "poison": plan.poison,
            "memory_budget_bytes": memplan.candidate_budget(plan, free0),
            "timing": {"mode": opts.timing, "budget_ms": opts.budget_ms, "set": 0},
            "state": v["state"],
        }
        if ses.chunk_starts:
            job["chunk_starts"] = ses.chunk_starts
        if opts.rules == "kernelbench":
            job["reference_globals"] = os.path.join(job_dir, "reference_globals.py")
        hu.write_json_atomic(os.path.join(job_dir, "job.json"), job)
        cp.share_job_files(job_dir)
        log(f"starting the candidate ({len(sets)} input sets)")
        t_cand = time.monotonic()
        result["candidate"] = {"exit_code": None, "last_stage": None, "prewarmed": prewarmed}
        if not prewarmed and not cand.wait_ready(START_TIMEOUT_S):
            # Nothing of the candidate's has run before "ready": the evaluator's failure.
            rc = cand.wait(5.0)
            why = cand.start_failure or (cp.exit_description(rc) if rc is not None
                                         else f"not ready within {START_TIMEOUT_S:g} s")
            raise EvalError("infrastructure", f"the candidate process could not start: {why}",
                            {"output_tail": cand.output_tail()}, stage="setup")
        result["isolation"] = cand.isolation_record()
        memplan.trim(device)  # the setup's transients, reserved still: the candidate's now
        cand.start_job(opts.timeout, [arena.fd])

        # -- float64 references (while the candidate starts) of the sets drawn already
        t_ref = time.monotonic()
        for s in all_sets:
            if s.ref64 is not None or s.orig is None:  # value-stress: computed with its scale
                continue
            refs.why64 = refs.why64 or refs.reference64(s)
        if not chunked:
            refs.drop_models64()
            del model64
        why64 = refs.why64
        result["verification"]["fp64_reference"] = True if why64 is None else \
            f"unavailable: {hu.cap(why64, 512)}"
        mutated = sorted({k for s in all_sets for k in s.ref_mutated})
        result["verification"]["reference_mutates_inputs"] = mutated
        elapsed["reference"] = time.monotonic() - t_ref

        # -- verification: compare each set as it arrives
        result["stage"] = ses.stage = "verify"
        ended = ses.pump("verify")
        verified = ended == "verified"
        elapsed["candidate_verify"] = time.monotonic() - t_cand
        memplan.phase_mark(device, "verify")

        ses.verification_flags(verified)

        if verified:
            if opts.no_timing:
                cand.send("stop")
            else:
                result["stage"] = ses.stage = "timing"
                if ses.lazy:  # set 0's slots have held the streamed sets since
                    ses.write(sets[0])
                cand.send("time")
                t_time = time.monotonic()
                # The host's load while the candidate is timed (issue 21): measured here,
                # never taken from the candidate; the window closes at its "timing" message.
                ses.cand_window = quality.Window(getattr(opts, "timing_hook", None),
                                                 "candidate").open()
                log("timing the candidate")
                try:
                    ses.pump("timing")
                finally:
                    ses.cand_window.close()
                elapsed["candidate_timing"] = time.monotonic() - t_time
                memplan.phase_mark(device, "timing")

        ses.judge_exit(verified, plan)  # raises unless it ended as it should

        if opts.no_timing:
            result.update(ok=True, stage="done")
            return result, prefetch_next
        cand_stats = ses.cand_stats
        if cand_stats is None:
            raise EvalError("timing", "the candidate reported no usable timing", stage="timing")
        if post is not None and ses.post_rec is None:
            raise EvalError("protocol", "the candidate skipped the check after timing",
                            stage="timing")

        # -- baselines (this process), speed of light
        # The candidate has ended: its arena goes now, not after the baselines (on a GPU two
        # input sets' worth of device memory that the reference's timed forwards may need).
        if ses.arena is not None:
            ses.arena.close()
            ses.arena = None
        t_base = time.monotonic()
        key = baseline_key(task_sha, dev, opts.precision, opts.timing)
        # A lazy plan: the baselines time set 0's inputs, and the speed of light counts its
        # outputs' bytes (no float64 reference: nothing is compared any more).
        sets[0].materialize()
        if not sets[0].ref:
            compute_reference(model, sets[0], device)
        base, cached = measure_baselines(opts, model, sets[0], device, key, log)
        elapsed["baselines"] = time.monotonic() - t_base
        memplan.phase_mark(device, "baselines")
        result["timing"], flags = timing_section(opts, dev, sets[0], state_bytes, cand_stats,
                                                 base, cached,
                                                 result["verification"].get("launches"))
        result["flags"] += flags
        noisy = quality.noise_flag(result["timing"])
        if noisy is not None:
            result["flags"].append(noisy)
        result.update(ok=True, stage="done")
        return result, prefetch_next
    except EvalError as e:
        cand = ses.cand
        if cand is not None:
            cand.kill()
            if result.get("candidate") is not None:
                result["candidate"]["exit_code"] = cand.proc.returncode
        if e.stage:
            result["stage"] = e.stage
        details = dict(e.details)
        if e.kind in ("timeout", "protocol") and cand is not None:
            details.setdefault("output_tail", cand.output_tail())
        record = details.pop("record", None)
        if isinstance(record, dict) and isinstance(result.get("verification"), dict):
            result["verification"]["sets"].append(record)
        result["failure"] = {"kind": e.kind, "message": e.message, "details": details}
        return result, (prefetch_next if e.kind != "infrastructure" else None)
    except Exception as exc:
        if not is_oom(exc):
            raise
        result["failure"] = {"kind": "infrastructure",
                             "message": f"the evaluator ran out of GPU memory: {exc}",
                             "details": {}}
        raise OutOfMemory(plan.level if plan is not None else min_level,
                          f"{type(exc).__name__}: {hu.cap(str(exc), 400)}", result) from None
    finally:
        for note in (result.get("verification") or {}).get("derived_shapes") or []:
            if note.get("status") == "pending":
                note["status"] = "not reached"
        if ses.cand is not None:
            ses.cand.kill()
        if ses.arena is not None:
            ses.arena.close()  # after the candidate is gone
        if base_dir is not None and not opts.keep_temp:
            shutil.rmtree(base_dir, ignore_errors=True)
        elif base_dir is not None:
            log(f"kept the candidate directory {base_dir}")
        if isinstance(result.get("memory"), dict) and device.type == "cuda":
            peak = memplan.job_peak(device)
            result["memory"]["peak_bytes"] = peak["allocated"]
            result["memory"]["peak_reserved_bytes"] = peak["reserved"]
            result["memory"]["peak_above_start_bytes"] = max(0, peak["allocated"] - peak_base)
            memplan.phase_mark(device, "end")
            result["memory"]["phases"] = memplan.phases()
        elapsed["total"] = time.monotonic() - t_start
        result["elapsed_s"] = elapsed


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
