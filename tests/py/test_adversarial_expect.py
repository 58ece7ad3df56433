"""The GPU adversarial suite's expectations (tests/gpu/adversarial_gpu.py `problems`), checked
without a GPU on reports shaped like the ones the suite gets: a check that cannot fail on the
report of a fooled evaluator would let the suite pass over the hack it exists to catch."""

from __future__ import annotations

import copy
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "gpu"))
import adversarial_gpu as ag  # noqa: E402

SPLIT = ag.Case(ag.CASES_DIR / "split_side_stream")
CURRENT = copy.deepcopy(SPLIT.expect)
# Its expectation until the twenty-first session (evaluated, timed with all its work counted),
# which exercises the `timed_at_least_work` check; since then it fails the timed-call check.
SPLIT.expect = {"task": "swish_scale_bias", "pattern": "split_side_stream (until the twenty-first "
                "session)", "reward_min": 1, "stage": "done", "timed_at_least_work": 0.9}

# split_side_stream on an H100 under --timing device, with the harness whose kernel floor was
# the longest activity (eighteenth session): 16 pieces, 224.6 us of GPU work in all, timed at
# 0.0518 ms, reward 3 where the honest time (0.2246 ms: 1.9x eager, 0.41x torch.compile)
# earns 2.
FOOLED = {
    "stage": "done", "ok": True, "reward": {"reward": 3},
    "harness": {
        "timing": {"mode": "device", "candidate": {"median_ms": 0.051808,
                                                   "basis": "stream+outside"}},
        "verification": {"launches": {"longest_us": 14.432, "total_us": 224.578,
                                      "kernels": 16, "activities": 16}},
        "flags": [],
    },
}


def test_the_fooled_timing_is_not_as_expected():
    why = ag.problems(SPLIT, FOOLED)
    assert len(why) == 1 and "missed its work" in why[0], why


def test_the_work_counted_is_as_expected():
    fixed = copy.deepcopy(FOOLED)
    fixed["reward"] = {"reward": 2}
    fixed["harness"]["timing"]["candidate"].update(median_ms=0.224578, basis="kernel-floor")
    assert ag.problems(SPLIT, fixed) == []


def test_a_report_without_timing_is_not_as_expected():
    bare = copy.deepcopy(FOOLED)
    del bare["harness"]["timing"]
    assert any("no timing" in w for w in ag.problems(SPLIT, bare))


def test_the_race_on_inputs_is_caught_as_expected():
    """split_side_stream's unordered stream reads a timed call's inputs before they are made:
    -1 at the timed-call check is its expected verdict now; the fooled report is not."""
    now = ag.Case(ag.CASES_DIR / "split_side_stream")
    assert now.expect == CURRENT
    caught = {"stage": "timing", "ok": False, "reward": {"reward": -1},
              "message": "in a timed call (one of 871, ...): 13700747 element(s) differ",
              "harness": {"failure": {"kind": "mismatch"}, "flags": []}}
    assert ag.problems(now, caught) == []
    assert ag.problems(now, FOOLED)
