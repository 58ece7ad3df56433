"""streaming.py: the references of the input sets as the job's memory plan brings them in
(trusted side).

Under a streaming plan (memplan: level above 0) a set after the first group is drawn when its
group comes (prepare: checked against its slots, its references made, unless the plan is
lazy). Under a lazy plan a set keeps only its arena slots once written there, and is drawn
again from its recipe, the same values from its own secret seed, with its references made just
before its outputs are compared (restore: the float64 reference first, while nothing else of
the set's is on the device). The float64 references come from one float64 copy per model: the
task's and each model of its own shapes (none under the lean plan)."""

from __future__ import annotations

import copy

import torch

import memplan
import model_state
from evalbase import EvalError, is_oom
from inputs import InputSet, check_reference64, compute_reference, compute_reference64
from job import check_streamed


class References:
    def __init__(self, plan: memplan.Plan, model: torch.nn.Module,
                 extra_models: list[torch.nn.Module], model64: torch.nn.Module | None,
                 why64: str | None, device: torch.device):
        """model64: the task model's float64 copy (None: why64 says why); extra_models: the
        models of the sets with shapes of their own, their float64 copies made here."""
        self.plan, self.model, self.device = plan, model, device
        self.why64 = why64  # the first reason a float64 reference is unavailable, if any
        self.models64: dict[int, torch.nn.Module | None] = {0: model64}
        for k, m in enumerate(extra_models, start=1):
            self.models64[k] = None
            if not plan.float64:
                continue
            try:
                model_state.as_built(m)
                self.models64[k] = copy.deepcopy(m).double()
            except Exception as exc:
                if is_oom(exc):
                    raise
                self.why64 = self.why64 or f"{type(exc).__name__}: {exc}"

    def reference64(self, s: InputSet) -> str | None:
        return compute_reference64(self.models64.get(s.model_index), s, self.device)

    def drop_models64(self) -> None:
        """Once every set's float64 reference is made (a plan that streams nothing)."""
        self.models64 = {}

    def _streaming_error(self, s: InputSet, why: str) -> EvalError:
        return EvalError("infrastructure", f"input set {s.index} cannot be streamed under the "
                                           f"memory plan: {why}", {"reason": "streaming"})

    def prepare(self, s: InputSet) -> None:
        """A streamed set drawn now, checked against its slots, with its references (a lazy
        plan: the references wait for restore())."""
        if s.orig is not None and (s.ref or self.plan.lazy):
            return
        s.materialize()
        if self.plan.lazy:
            why = check_streamed(s, outputs=False)
            if why is not None:
                raise self._streaming_error(s, why)
            return
        compute_reference(s.model or self.model, s, self.device)
        why = check_streamed(s)
        if why is not None:
            raise self._streaming_error(s, why)
        why64 = self.reference64(s)  # made for every set, whatever an earlier one said
        self.why64 = self.why64 or why64

    def restore(self, s: InputSet) -> None:
        """A lazy plan's set, about to be compared: drawn again (the same values: its own
        secret seed), its references made."""
        if not self.plan.lazy or s.recipe is None or s.ref:
            return
        s.materialize()
        # First, while nothing else of the set's is on the device; made for every set.
        why64 = self.reference64(s)
        self.why64 = self.why64 or why64
        compute_reference(s.model or self.model, s, self.device)
        check_reference64(s)
        why = check_streamed(s)
        if why is not None:
            raise self._streaming_error(s, why)
