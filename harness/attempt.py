"""attempt.py: one evaluation attempt under one memory plan, phase by phase:

- setup: the task, its reference model, the input sets and set 0's reference;
- plan: the memory plan (how many sets are resident at once), the float64 model, the
  value-stress scales, the derived shapes, the other sets' references;
- job: the candidate's directory and process, its files, the arena and job.json;
- references64: the float64 references, computed while the candidate starts;
- verify and time: the candidate's messages, through the Session's pump;
- baselines: eager and torch.compile timed on set 0, the timing section.

evaluate.py runs attempts and retries one that ran out of memory under a smaller plan
(OutOfMemory); an EvalError ends an attempt as the candidate's or the evaluator's failure.
"""

from __future__ import annotations

import argparse
import copy
import os
import shutil
import time
from typing import Any

import torch

import arena as ar
import candidate_proc as cp
import harness_util as hu
import memplan
import model_state
import quality
from baselines import baseline_key, device_info, measure_baselines, timing_section
from evalbase import EvalError, Log, as_list, is_oom, nbytes, secret_seed, set_precision, \
    task_call
from inputs import InputSet, compute_reference, cpu_state, load_task, sha256_file
from sets import SetPrefetch, draw_sets
from shapes import DEFAULT_DERIVED_SHAPES, shape_models, validate_derived
from stress import choose_stress_scale
from job import footprint_of, lay_out, lay_out_streamed, write_model
import timing
from session import Session
from streaming import References

DEFAULT_TOL = 1e-2
# How long an evaluation waits for a pre-warmed candidate that is still importing torch
# before it starts one of its own.
PREWARM_WAIT_S = 30.0
# How long a candidate process started on demand may take to get ready (import torch,
# initialise the device): the evaluator's time, not the candidate's (its --timeout starts
# with its job).
START_TIMEOUT_S = 300.0


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


class Attempt:
    """One attempt under the roomiest memory plan from min_level on that fits. run() returns
    the result and the arguments for the next job's set prefetch (None: none); it raises
    OutOfMemory. The phases run in order and share what they made as attributes; nothing of
    an attempt is reachable once run() has returned or raised."""

    def __init__(self, opts: argparse.Namespace, log: Log, min_level: int):
        self.opts, self.log, self.min_level = opts, log, min_level
        self.t_start = time.monotonic()
        self.result = new_result(opts, opts.atol if opts.atol is not None else DEFAULT_TOL,
                                 opts.rtol if opts.rtol is not None else DEFAULT_TOL)
        self.device = torch.device(opts.device)
        self.ses = Session(opts, log, self.result, self.device)
        self.elapsed = self.ses.elapsed
        self.base_dir: str | None = None
        self.prefetch: SetPrefetch | None = getattr(opts, "prefetch", None)
        self.prefetch_next: tuple | None = None
        self.plan: memplan.Plan | None = None
        self.post: InputSet | None = None
        self.peak_base = 0

    def run(self) -> tuple[dict[str, Any], tuple | None]:
        opts, result, ses = self.opts, self.result, self.ses
        if self.prefetch is not None:
            self.prefetch.wait()
        try:
            self.setup()
            self.plan_memory()
            self.start_job()
            self.references64()
            verified = self.verify_and_time()
            ses.judge_exit(verified, self.plan)  # raises unless it ended as it should
            if opts.no_timing:
                result.update(ok=True, stage="done")
                return result, self.prefetch_next
            if ses.cand_stats is None:
                raise EvalError("timing", "the candidate reported no usable timing",
                                stage="timing")
            if self.post is not None and ses.post_rec is None:
                raise EvalError("protocol", "the candidate skipped the check after timing",
                                stage="timing")
            self.baselines()
            result.update(ok=True, stage="done")
            return result, self.prefetch_next
        except EvalError as e:
            return self.failed(e)
        except Exception as exc:
            if not is_oom(exc):
                raise
            result["failure"] = {"kind": "infrastructure",
                                 "message": f"the evaluator ran out of GPU memory: {exc}",
                                 "details": {}}
            raise OutOfMemory(self.plan.level if self.plan is not None else self.min_level,
                              f"{type(exc).__name__}: {hu.cap(str(exc), 400)}",
                              result) from None
        finally:
            self.clean_up()

    # -- setup: task, reference model, input sets, set 0's reference
    def setup(self) -> None:
        opts, result, ses, log = self.opts, self.result, self.ses, self.log
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise EvalError("harness", "--device cuda, but torch.cuda.is_available() is False")
        # "cuda" -> "cuda:<current>"
        device = self.device = ses.device = timing.resolve_device(self.device)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        self.dev = device_info(device)
        result["device"] = self.dev
        self.free0 = memplan.free_bytes(device)  # what this job may use, before it takes any
        self.peak_base = memplan.reset_peak(device)

        self.task_sha = sha256_file(opts.task)
        task = self.task = load_task(opts.task, self.task_sha)
        ses.atol, ses.rtol = tolerances(task, opts)
        result["verification"].update(atol=ses.atol, rtol=ses.rtol)
        set_precision("strict")  # the reference is always computed at full fp32
        self.init_seed = secret_seed()
        torch.manual_seed(self.init_seed)
        self.init_inputs = as_list(task_call("get_init_inputs()", task.get_init_inputs),
                                   "get_init_inputs()")
        # Seeded again right before the construction, as KernelBench seeds Model and ModelNew:
        # under its rules a ModelNew whose state_dict keys differ is built from the same seed.
        torch.manual_seed(self.init_seed)
        model = task_call("Model(*get_init_inputs())", lambda: task.Model(*self.init_inputs))
        model = self.model = task_call("moving Model to the device",
                                       lambda: model.to(device).eval())
        model_state.as_built(model)  # each reference forward starts from this state
        self.state = cpu_state(model)
        self.state_bytes = sum(nbytes(v) for v in self.state.values())
        # One more random set when timing: checked after the timing runs, so that a candidate
        # that behaves differently once it is being timed (counting calls, say) is caught.
        n_draw = opts.seeds + (0 if opts.no_timing else 1)
        n_derived = max(0, getattr(opts, "derived_shapes", DEFAULT_DERIVED_SHAPES))
        n_stress = 1 if getattr(opts, "value_stress", 1) else 0
        set_key = (self.task_sha, n_draw, opts.adversarial_sets, n_derived, n_stress,
                   str(device))
        t_draw = time.monotonic()
        got = self.prefetch.take(set_key) if self.prefetch is not None else None
        if got is not None:
            sets, sets_info = got
            log("input sets drawn ahead of time")
        else:  # the sets of the task's own shape after the first: drawn once a plan is made
            sets, sets_info = draw_sets(task, n_draw, opts.adversarial_sets, device, log,
                                        n_derived, n_stress, defer=True)
        self.elapsed["setup_draw"] = time.monotonic() - t_draw
        memplan.phase_mark(device, "draw")
        result["verification"]["sets_prefetched"] = got is not None
        self.prefetch_next = (set_key, task, n_draw, opts.adversarial_sets, device, n_derived,
                              n_stress)
        if not opts.no_timing:
            self.post = sets.pop(opts.seeds)  # the last random set; adversarial ones follow
            self.post.index, self.post.kind = -1, "post-timing"
        v = result["verification"]
        v["adversarial"] = sets_info["adversarial"]
        v["value_stress"] = sets_info["value_stress"]
        v["derived_shapes"] = sets_info["derived_shapes"]
        v["derived_shapes_note"] = sets_info["derived_shapes_note"]
        self.t_ref32 = time.monotonic()
        # The derived sets the reference refuses and a value-stress set that finds no usable
        # scale are dropped before anything is laid out for the candidate.
        model_state.track(model, [])  # a class evaluated before: found again below
        self.ref_peak = compute_reference(model, sets[0], device)
        # The state the task's forward changes (an RNN's hidden state): compared as outputs.
        v["state"] = model_state.changed(model)
        if v["state"]:
            model_state.track(model, v["state"])
            sets[0].ref.extend(model_state.values(model, v["state"]))
        self.sets = sets
        memplan.phase_mark(device, "set0_reference")

    # -- the memory plan: how many sets of the task's own shape are resident at once
    def plan_memory(self) -> None:
        opts, result, ses, log = self.opts, self.result, self.ses, self.log
        device, model, sets, post = self.device, self.model, self.sets, self.post
        v = result["verification"]
        streamed = [s for s in sets[1:] if s.recipe is not None] + \
            ([post] if post is not None else [])
        fp = footprint_of(sets, streamed, self.state_bytes, self.ref_peak)
        forced = getattr(opts, "memory_window", None)
        forced_lean = bool(getattr(opts, "memory_lean", False))
        forced_lazy = bool(getattr(opts, "memory_lazy", False)) or forced_lean
        if (forced or forced_lazy) and self.min_level == 0:
            plan = memplan.forced(fp, forced or 1, forced_lazy, not forced_lean)
        else:
            plan = memplan.choose(fp, self.free0, self.min_level)
        if plan is None:
            result["memory"] = {"footprint": memplan.asdict(fp), "free_bytes": self.free0,
                                "plan": None}
            if self.min_level == 0:
                raise EvalError("infrastructure", memplan.too_large_message(fp, self.free0 or 0),
                                {"reason": "too_large"}, stage="setup")
            plan = memplan.make_plans(fp)[self.min_level]  # a retry: the smaller plan anyway
        self.plan = plan
        result["memory"] = memplan.describe(fp, plan, self.free0)
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
        sets = validate_derived(self.task, sets, model, device, log)
        self.model64: torch.nn.Module | None = None
        self.why64_model: str | None = None
        if not plan.float64:
            self.why64_model = (f"the memory plan (level {plan.level}, the smallest) leaves no "
                                "room for a float64 reference")
        else:
            try:
                model_state.as_built(model)  # the float64 copy starts as built too
                self.model64 = copy.deepcopy(model).double()
            except Exception as exc:
                if is_oom(exc):
                    raise
                self.model64, self.why64_model = None, f"{type(exc).__name__}: {exc}"
        sets = [s for s in sets if s.kind != "value-stress"
                or choose_stress_scale(s, model, self.model64, device, v["value_stress"])]
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
        self.sets = sets
        self.all_sets = sets + ([post] if post is not None else [])
        self.streamed = [s for s in self.all_sets if s.recipe is not None and s is not sets[0]]
        ses.streamed = {s.index for s in self.streamed} if chunked else set()
        self.extra_models = shape_models(self.task, self.all_sets, device)
        for s in self.all_sets:  # fast on a GPU; sizes the output slots and the poisoning
            if s.kind not in ("derived-shape", "value-stress") and s is not sets[0] and \
                    s.orig is not None:
                compute_reference(s.model or model, s, device)
        self.elapsed["setup_reference"] = time.monotonic() - self.t_ref32
        self.elapsed["setup"] = time.monotonic() - self.t_start
        memplan.phase_mark(device, "setup")

    # -- the candidate's directory, files, arena and process (pre-warmed when a pool has one)
    def start_job(self) -> None:
        opts, result, ses, log = self.opts, self.result, self.ses, self.log
        device, plan, sets, post = self.device, self.plan, self.sets, self.post
        assert plan is not None
        chunked = plan.chunked
        pool = getattr(opts, "pool", None)
        sandbox = cp.Sandbox.from_opts(opts)
        cand = ses.cand = pool.take(opts.python, opts.device, sandbox, PREWARM_WAIT_S) \
            if pool is not None else None
        prewarmed = cand is not None
        if cand is None:
            cand = ses.cand = cp.CandidateProcess(opts.python, cp.make_base(opts.tmp_dir),
                                                  opts.device, sandbox, opts.timeout)
        job_dir = cand.job_dir
        self.base_dir = cand.base
        t_job = time.monotonic()
        all_sets = self.all_sets
        own_models = [s for s in all_sets if s.model is not None]
        job_models = [write_model(job_dir, 0, self.init_inputs, self.state)] + [
            write_model(job_dir, s.model_index, s.init or [], cpu_state(s.model))
            for s in own_models]
        if opts.rules == "kernelbench":  # never an input seed: those stay here
            for m, seed in zip(job_models, [self.init_seed] + [s.model_seed for s in own_models]):
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
            order = [s for s in self.streamed if s is not post]
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

        refs = self.refs = References(plan, self.model, self.extra_models, self.model64,
                                      self.why64_model, device)
        ses.sets, ses.post = sets, post
        # The timed-call check (session.on_timed_check) makes one more reference, of set 0's
        # shape, after the timing: not for a stateful forward (its output depends on every
        # call before) nor under a lazy plan (set 0 is not kept, memory is short).
        timed_check = post is not None and not plan.lazy and not result["verification"]["state"]
        ses.check_model = self.model if timed_check else None
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
        self.elapsed["job_files"] = time.monotonic() - t_job
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
            "timed_check": timed_check,
            "precision": opts.precision,
            "poison_bytes": out_bytes,
            "poison": plan.poison,
            "memory_budget_bytes": memplan.candidate_budget(plan, self.free0),
            "timing": {"mode": opts.timing, "budget_ms": opts.budget_ms, "set": 0},
            "state": result["verification"]["state"],
        }
        if ses.chunk_starts:
            job["chunk_starts"] = ses.chunk_starts
        if opts.rules == "kernelbench":
            job["reference_globals"] = os.path.join(job_dir, "reference_globals.py")
        hu.write_json_atomic(os.path.join(job_dir, "job.json"), job)
        cp.share_job_files(job_dir)
        log(f"starting the candidate ({len(sets)} input sets)")
        self.t_cand = time.monotonic()
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
    def references64(self) -> None:
        result, refs = self.result, self.refs
        t_ref = time.monotonic()
        for s in self.all_sets:
            if s.ref64 is not None or s.orig is None:  # value-stress: computed with its scale
                continue
            refs.why64 = refs.why64 or refs.reference64(s)
        if self.plan is not None and not self.plan.chunked:
            refs.drop_models64()
            self.model64 = None
        self.report_fp64()
        mutated = sorted({k for s in self.all_sets for k in s.ref_mutated})
        result["verification"]["reference_mutates_inputs"] = mutated
        self.elapsed["reference"] = time.monotonic() - t_ref

    def report_fp64(self) -> None:
        """verification.fp64_reference: True, or why a float64 reference is unavailable.
        Said again after verification: a lazy plan makes the streamed sets' references then
        (References.restore), so a reason may come only then."""
        refs = getattr(self, "refs", None)
        if refs is None:
            return
        why64 = refs.why64
        self.result["verification"]["fp64_reference"] = True if why64 is None else \
            f"unavailable: {hu.cap(why64, 512)}"

    # -- verification (each set compared as it arrives), then timing; True: verified
    def verify_and_time(self) -> bool:
        opts, result, ses, log = self.opts, self.result, self.ses, self.log
        cand = ses.cand
        assert cand is not None
        result["stage"] = ses.stage = "verify"
        ended = ses.pump("verify")
        verified = ended == "verified"
        self.elapsed["candidate_verify"] = time.monotonic() - self.t_cand
        memplan.phase_mark(self.device, "verify")
        self.report_fp64()
        ses.verification_flags(verified)
        if not verified:
            return False
        if opts.no_timing:
            cand.send("stop")
            return True
        result["stage"] = ses.stage = "timing"
        # Set 0 into its slots again before the candidate times on them: under a lazy plan
        # they have held the streamed sets since, and under any plan a reference that changes
        # its inputs in place (reference_mutates_inputs) lets the candidate's verification run
        # change them too, while the evaluator checks a timed call against set 0 as drawn.
        ses.write(self.sets[0])
        cand.send("time")
        t_time = time.monotonic()
        # The host's load while the candidate is timed (issue 21): measured here, never taken
        # from the candidate; the window closes at its "timing" message.
        ses.cand_window = quality.Window(getattr(opts, "timing_hook", None),
                                         "candidate").open()
        log("timing the candidate")
        try:
            ses.pump("timing")
        finally:
            ses.cand_window.close()
        self.elapsed["candidate_timing"] = time.monotonic() - t_time
        memplan.phase_mark(self.device, "timing")
        return True

    # -- baselines (this process), speed of light
    def baselines(self) -> None:
        opts, result, ses, device = self.opts, self.result, self.ses, self.device
        # The candidate has ended: its arena goes now, not after the baselines (on a GPU two
        # input sets' worth of device memory that the reference's timed forwards may need).
        if ses.arena is not None:
            ses.arena.close()
            ses.arena = None
        t_base = time.monotonic()
        key = baseline_key(self.task_sha, self.dev, opts.precision, opts.timing)
        # A lazy plan: the baselines time set 0's inputs, and the speed of light counts its
        # outputs' bytes (no float64 reference: nothing is compared any more).
        set0 = self.sets[0]
        set0.materialize()
        if not set0.ref:
            compute_reference(self.model, set0, device)
        base, cached = measure_baselines(opts, self.model, set0, device, key, self.log)
        self.elapsed["baselines"] = time.monotonic() - t_base
        memplan.phase_mark(device, "baselines")
        result["timing"], flags = timing_section(opts, self.dev, set0, self.state_bytes,
                                                 ses.cand_stats, base, cached,
                                                 result["verification"].get("launches"),
                                                 ses.cand_busy_us)
        result["flags"] += flags
        noisy = quality.noise_flag(result["timing"])
        if noisy is not None:
            result["flags"].append(noisy)

    # -- endings
    def failed(self, e: EvalError) -> tuple[dict[str, Any], tuple | None]:
        result, cand = self.result, self.ses.cand
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
        return result, (self.prefetch_next if e.kind != "infrastructure" else None)

    def clean_up(self) -> None:
        """Always, however the attempt ended: the candidate killed, the arena closed, the
        candidate directory removed, the memory phases and the elapsed times recorded."""
        opts, result, ses, device = self.opts, self.result, self.ses, self.device
        for note in (result.get("verification") or {}).get("derived_shapes") or []:
            if note.get("status") == "pending":
                note["status"] = "not reached"
        if ses.cand is not None:
            ses.cand.kill()
        if ses.arena is not None:
            ses.arena.close()  # after the candidate is gone
        if self.base_dir is not None and not opts.keep_temp:
            shutil.rmtree(self.base_dir, ignore_errors=True)
        elif self.base_dir is not None:
            self.log(f"kept the candidate directory {self.base_dir}")
        if isinstance(result.get("memory"), dict) and device.type == "cuda":
            peak = memplan.job_peak(device)
            result["memory"]["peak_bytes"] = peak["allocated"]
            result["memory"]["peak_reserved_bytes"] = peak["reserved"]
            result["memory"]["peak_above_start_bytes"] = max(0, peak["allocated"]
                                                             - self.peak_base)
            memplan.phase_mark(device, "end")
            result["memory"]["phases"] = memplan.phases()
        self.elapsed["total"] = time.monotonic() - self.t_start
        result["elapsed_s"] = self.elapsed
