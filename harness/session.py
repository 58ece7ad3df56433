"""session.py: the evaluator's side of the conversation with one candidate process: the state
it works on (the candidate, the arena, the input sets in the order they are compared, the
post-timing set) and the one message pump that reads the candidate's reports, compares each set
as it arrives, streams the next group of sets where the memory plan says so, and judges how the
process ended. attempt.py builds a Session and drives it phase by phase.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable

import torch

import arena as ar
import candidate_proc as cp
import memplan
import quality
import timing
from baselines import validate_stats
from candidate_proc import sanitize_failure
from compare import check_launches, check_reported, check_set, set_label, timed_call_precision
from evalbase import EvalError, Log
from inputs import InputSet, compute_reference
from job import fill_inputs, received_outputs
from memplan import candidate_oom_note, oom_within_budget


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
        # The timed-call check (job.json "timed_check"): the model that makes its reference,
        # and its record once made.
        self.check_model: torch.nn.Module | None = None
        self.check_rec: dict[str, Any] | None = None
        self.atol, self.rtol = result["verification"]["atol"], result["verification"]["rtol"]
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
        # The kernel floor's busy time, profiled after the timing loop (timing.busy_floor), as
        # the candidate reported it.
        self.cand_busy_us: Any = None
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
                self.cand_busy_us = msg.get("busy_us")  # checked by baselines.floor_evidence
                if self.cand_stats is not None and load is not None:
                    self.cand_stats["host"] = load
                if self.check_model is None:
                    self.send_post()
            elif mtype == "timed_check" and phase == "timing" and self.check_model is not None \
                    and self.cand_stats is not None and self.check_rec is None:
                self.on_timed_check(msg)
                self.send_post()
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

    def send_post(self) -> None:
        """The post-timing set into the arena (unseen till the timing is over), then "post"."""
        if self.post is None or self.cand_stats is None:
            return
        assert self.arena is not None and self.cand is not None
        self.prepare(self.post)  # drawn now where the plan streams the sets
        fill_inputs(self.arena, self.post, self.device)
        self.drop_if_lazy(self.post)
        self.cand.send("post")

    def on_timed_check(self, msg: dict[str, Any]) -> None:
        """One timed call, chosen at random by the candidate process once the timing was over
        (candidate.TimedSample): its outputs, in the post-timing set's output slots, against
        the reference's on the same inputs (set 0 varied as that call's were,
        timing.varied_inputs). A forward that computes something else while it is timed (it
        knows the timed calls by their rhythm, by the lead kernel before them, or because it
        reads its inputs before they are made) fails here."""
        post, s0 = self.post, self.sets[0]
        assert post is not None and self.arena is not None and self.check_model is not None
        if "skipped" in msg:
            self.check_rec = {"skipped": str(msg.get("skipped"))[:200]}
            self.result["verification"]["timed_check"] = self.check_rec
            return
        k, calls = msg.get("k"), msg.get("calls")
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 1 << 31 or \
                not isinstance(calls, int) or isinstance(calls, bool) or calls < 1:
            raise EvalError("protocol", "the candidate reported a timed call without a valid "
                                        "index", stage="timing")
        if s0.orig is None:  # a plan that keeps set 0 nowhere (attempt.py does not ask then)
            raise EvalError("harness", "set 0 is not resident for the timed-call check",
                            stage="timing")
        chk = InputSet(-2, "timed-call", None, self.device)
        chk.orig = timing.varied_inputs(s0.orig, k)  # fresh tensors already: no second copy
        chk.out_slots = post.out_slots
        chk.enforce_precision = False  # no float64 reference: timed_call_precision below
        try:
            compute_reference(self.check_model, chk, self.device)
            outs = received_outputs(self.arena, chk, msg.get("outputs"))
            self.check_rec = check_set(chk, msg.get("outputs"), outs, chk.orig, self.device,
                                       self.atol, self.rtol, self.precision)
            set0 = next((r for r in self.result["verification"]["sets"]
                         if r.get("seed_index") == 0), {})
            precs = timed_call_precision(outs, chk.ref, set0.get("precision") or [])
            self.check_rec["precision"] = precs
            worst = [p for p in precs if not p["ok"]]
            if worst and self.precision == "strict":
                p = worst[0]
                raise EvalError(
                    "precision",
                    f"output {p['output']} is inside the tolerance but its RMS error against "
                    f"the reference on that call's own inputs is {p['candidate_rms_err']:.3g}, "
                    f"above the {p['threshold']:.3g} that fp32 arithmetic allows (set 0's "
                    "precision rule): a result computed from other inputs, e.g. cached from "
                    "an earlier call?", {"set": chk.index, "record": self.check_rec})
            if worst:
                self.check_rec["precision_enforced"] = False
        except EvalError as e:
            e.message = (f"in a timed call (one of {calls}, chosen at random once the timing "
                         "was over; its inputs are set 0 varied as that call's were), the "
                         "outputs do not match the reference's (does the forward compute "
                         "something else while it is being timed?): " + e.message)
            e.stage = "timing"
            raise
        finally:
            chk.orig, chk.ref = None, []
        self.check_rec.update(call_k=k, calls=calls)
        self.result["verification"]["timed_check"] = self.check_rec

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
