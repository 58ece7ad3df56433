"""sets.py: an evaluation's input sets, in order (trusted side): the random and adversarial
sets, the value-stress set, the EXTRA_SHAPES or derived shapes (draw_sets), and SetPrefetch
(the next job's sets drawn ahead, in a background thread).
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from evalbase import Log, nbytes, secret_seed
from inputs import InputSet, adversarial_recipe, input_domains, random_recipe, real_inputs, \
    same_args
from shapes import derive_shapes, draw_with, extra_shapes, init_with


def draw_sets(task: Any, n_random: int, n_adv: int, device: torch.device, log: Log,
              n_derived: int = 0, stress: int = 0,
              defer: bool = False) -> tuple[list[InputSet], dict[str, Any]]:
    """The evaluation's input sets, in order: n_random from get_inputs(), n_adv adversarial,
    the value-stress set (stress: drawn here, scaled by choose_stress_scale once the reference
    model exists), the task's EXTRA_SHAPES, or else up to n_derived derived shapes. Returns the
    sets and what the result's verification section says about them: "adversarial",
    "value_stress", "derived_shapes" (one entry per derivation, with its status) and
    "derived_shapes_note" (why there are none, or None). Every random, adversarial and
    value-stress set keeps a recipe (its secret seed) to draw it again; with defer, the random
    and adversarial sets after the first are not drawn here (InputSet.materialize)."""
    sets: list[InputSet] = []
    for i in range(n_random):
        rec = random_recipe(task, device, secret_seed())
        sets.append(InputSet(i, "random", None if defer and i else rec(), device, rec))
    domains = input_domains(task)
    info: dict[str, Any] = {"inputs": [], "left_as_drawn": {}}
    for a in range(n_adv):
        # Which inputs change depends on their dtypes only: set 0's draw tells.
        changed, left = real_inputs(sets[0].orig or [], domains) if sets else ([], {})
        rec = adversarial_recipe(task, device, secret_seed())
        raw = None if defer and sets else rec()
        if raw is not None:
            changed, left = real_inputs(raw, domains)
        info["inputs"], info["left_as_drawn"] = changed, left
        if not changed:
            info["skipped"] = "no floating-point input may take adversarial values"
            log("adversarial set skipped: no eligible input")
            break
        sets.append(InputSet(n_random + a, "adversarial", raw, device, rec))
    stress_info: dict[str, Any] | None = None
    if stress:
        rec = random_recipe(task, device, secret_seed())
        raw = rec()
        eligible, left = real_inputs(raw, domains)
        stress_info = {"scale": None, "inputs": eligible, "left_as_drawn": left}
        if eligible:
            st = InputSet(len(sets), "value-stress", raw, device, rec)
            st.scaled_inputs = eligible
            sets.append(st)
        else:
            stress_info["skipped"] = "no floating-point input may take scaled values"
            log("value-stress set skipped: no eligible input")
        del raw
    else:
        stress_info = {"scale": None, "skipped": "disabled (--value-stress 0)"}
    shapes = extra_shapes(task)
    default_init = init_with(task, {}) if shapes else []
    for shape in shapes:
        torch.manual_seed(secret_seed())
        s = InputSet(len(sets), "shape", draw_with(task, shape, device), device)
        s.overrides = shape
        init = init_with(task, shape)
        if not same_args(init, default_init):
            s.init = init  # sizes the model's parameters depend on: a model of its own
        sets.append(s)
    if shapes:
        derived, notes, why_none = [], [], "the task declares EXTRA_SHAPES"
    elif n_derived <= 0:
        derived, notes, why_none = [], [], "disabled (--derived-shapes 0)"
    else:
        derived, notes, why_none = derive_shapes(task, sets[0].orig, n_derived, len(sets),
                                                 device)
    sets += derived
    return sets, {"adversarial": info, "value_stress": stress_info, "derived_shapes": notes,
                  "derived_shapes_note": why_none}


class SetPrefetch:
    """Input sets drawn ahead of time by a long-lived runner (harness/worker.py) while it waits
    for its next job: after an evaluation, the next evaluation's sets for the same task are
    drawn in a background thread, with fresh secret seeds that nothing outside this process
    ever sees. A warm evaluation of that task then does not wait for get_inputs(), the
    adversarial draw and the derived shapes' probes (seconds on the CPU for large inputs); the
    checks that need the evaluation's reference model (validate_derived,
    choose_stress_scale) run in the evaluation. Used once; dropped when the next
    job is for another task or other counts."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._key: tuple | None = None
        self._result: tuple[list[InputSet], dict[str, Any]] | None = None

    def start(self, key: tuple, task: Any, n_random: int, n_adv: int, device: torch.device,
              n_derived: int = 0, stress: int = 0) -> None:
        self.wait()
        self._key, self._result = key, None

        def draw() -> None:
            try:
                if device.type == "cuda":
                    torch.cuda.set_device(device)
                self._result = draw_sets(task, n_random, n_adv, device, Log(True), n_derived,
                                         stress)
            except Exception:  # the job will draw its own sets and report any error
                self._result = None

        self._thread = threading.Thread(target=draw, name="set-prefetch", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Until no draw runs (before anything else touches torch's global generator)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def held_bytes(self) -> int:
        """Device bytes the drawn sets hold (after wait())."""
        if self._result is None:
            return 0
        return sum(nbytes(x) for s in self._result[0] for x in (s.orig or [])
                   if isinstance(x, torch.Tensor) and x.device.type != "cpu")

    def drop(self) -> None:
        """Forgets the drawn sets (the next job draws its own)."""
        self.wait()
        self._key, self._result = None, None

    def take(self, key: tuple) -> tuple[list[InputSet], dict[str, Any]] | None:
        self.wait()
        got = self._result if self._key == key else None
        self._key, self._result = None, None
        return got
