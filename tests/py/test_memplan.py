"""The evaluator's GPU memory plan (harness/memplan.py) and what evaluate.py does with it:
plan arithmetic on fake footprints, the up-front refusal of a task too large, an evaluator
out-of-memory error retried with a smaller plan and then reported as an infrastructure error
(never the candidate's failure), a candidate's own out-of-memory error naming its budget, and
streamed input sets (--memory-window) giving the verdicts of the all-at-once path. CPU mode."""

from __future__ import annotations

import pathlib
import sys

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from harness_case import EXT_16_ROWS, assert_failed, evaluate, model_new  # noqa: E402

import attempt  # noqa: E402  (harness/, on the path through harness_case)
import compare  # noqa: E402
import evaluate as ev  # noqa: E402
import memplan  # noqa: E402
import streaming  # noqa: E402

GIB = memplan.GIB


def fp(**kw) -> memplan.Footprint:
    base = dict(input_bytes=GIB, output_bytes=GIB, param_bytes=0, ref_peak_bytes=2 * GIB,
                float_output=True, max_output_elems=GIB // 4, n_streamed=7)
    base.update(kw)
    return memplan.Footprint(**base)


# ---------------------------------------------------------------------------------------
# Plan arithmetic


def test_plans_shrink_from_everything_resident_to_one_set_on_the_host():
    plans = memplan.make_plans(fp())
    assert [p.window for p in plans] == [7, 3, 1, 1, 1]
    assert [p.lazy for p in plans] == [False, False, False, True, True]
    assert [p.float64 for p in plans] == [True, True, True, True, False]
    assert [p.level for p in plans] == [0, 1, 2, 3, 4]
    needs = [p.need_bytes for p in plans]
    assert needs == sorted(needs, reverse=True) and len(set(needs)) == 5
    # Integer outputs have no float64 reference to drop: no lean plan.
    assert [p.float64 for p in memplan.make_plans(fp(float_output=False))] == [True] * 4
    assert not plans[0].chunked and all(p.chunked for p in plans[1:])
    # The lazy plan poisons lean: one block per output, the large one at most 1 GiB.
    assert plans[-1].poison == {"copies": 1, "min_bytes": memplan.POISON_MIN,
                                "max_bytes": GIB}
    assert plans[0].poison["copies"] == 2 and plans[0].poison["max_bytes"] == 8 * GIB


def test_per_set_cost_and_the_candidates_share():
    f = fp()
    # A resident set on the device: arena inputs + outputs, pristine inputs, reference,
    # float64 reference; under a lazy plan the arena's slots only.
    assert memplan._per_set(f, False) == 2 * GIB + 2 * GIB + 2 * GIB
    assert memplan._per_set(f, True) == 2 * GIB
    assert memplan._per_set(fp(float_output=False), False) == 4 * GIB
    # Context, the timed call's copy of the inputs, and the forward's peak or the poisoned
    # blocks (2 x outputs + a block of 2 x outputs), whichever is larger.
    assert memplan.candidate_bytes(f) == memplan.CANDIDATE_CONTEXT + GIB + 4 * GIB
    assert memplan.candidate_bytes(f, True) == memplan.CANDIDATE_CONTEXT + GIB + 2 * GIB
    # The poison's big block is capped at 8 GiB (1 GiB under a lazy plan).
    big = fp(output_bytes=10 * GIB, ref_peak_bytes=10 * GIB)
    assert memplan.candidate_bytes(big) == memplan.CANDIDATE_CONTEXT + GIB + 28 * GIB
    assert memplan.candidate_bytes(big, True) == memplan.CANDIDATE_CONTEXT + GIB + 11 * GIB
    # A forward whose peak dwarfs its outputs: while timing, its peak beside the copy of one
    # timed call's outputs that the timed-call check keeps (not under a lazy plan: no check).
    deep = fp(output_bytes=GIB, ref_peak_bytes=6 * GIB)
    assert memplan.candidate_bytes(deep) == memplan.CANDIDATE_CONTEXT + GIB + 7 * GIB
    assert memplan.candidate_bytes(deep, True) == memplan.CANDIDATE_CONTEXT + GIB + 6 * GIB


def test_trusted_share_under_each_placement():
    f = fp(n_streamed=1, resident_extra_bytes=GIB)
    # set 0 + one streamed set, the extra sets (three times: slots, copies and references,
    # float64 references), and the float64 forward (inputs and peak in float64) as the
    # largest transient.
    fp64 = 2 * (GIB + 2 * GIB)
    assert memplan.trusted_bytes(f, 1, False) == 2 * 6 * GIB + 3 * GIB + fp64
    # Lazy: the arena's slots (one group: set 0 shares it); the set compared is drawn again
    # (its inputs alive throughout) and the float64 forward is still the largest of its steps.
    assert memplan.trusted_bytes(f, 2, True) == 2 * 2 * GIB + 3 * GIB + GIB + fp64
    assert memplan.trusted_bytes(f, 1, True) == 2 * GIB + 3 * GIB + GIB + fp64
    # The setup: set 0 and the extra sets, the value-stress set's unscaled draw and where its
    # reference is finite (a byte per element), a scaled copy, and the float64 forward on it
    # (the float32 one comes after, beside the float64 reference: smaller here).
    setup = 2 * GIB + GIB + 2 * GIB + GIB // 4 + fp64
    assert memplan.setup_bytes(f, True) == setup
    big_peak = fp(n_streamed=1, ref_peak_bytes=GIB // 2, resident_extra_bytes=GIB)
    assert memplan.setup_bytes(big_peak, True) == 2 * GIB + GIB + 2 * GIB + GIB // 4 + max(
        2 * GIB + GIB + GIB // 2, 2 * (GIB + GIB // 2))
    # Lean: no float64 forward or reference (the extra sets twice); the float32 forward or
    # the comparison.
    compare = GIB + memplan.COMPARE_BYTES_PER_ELEM * min(GIB // 4, memplan.SLICE_ELEMS)
    assert memplan.trusted_bytes(f, 1, True, False) == 2 * GIB + 2 * GIB + GIB + max(
        3 * GIB, GIB + compare)
    # Integer outputs: no float64 reference; the reference forward or the comparison.
    ints = fp(float_output=False, n_streamed=1)
    compare = GIB + memplan.COMPARE_BYTES_PER_ELEM * memplan.SLICE_ELEMS
    # (its setup: the float32 forward on the scaled copy, 7.25 GiB, above the 7 of its steps)
    assert memplan.trusted_bytes(ints, 1, True) == memplan.setup_bytes(ints, False) == \
        2 * GIB + 2 * GIB + GIB // 4 + 3 * GIB > 2 * GIB + GIB + max(3 * GIB, GIB + compare)
    assert memplan.trusted_bytes(ints, 1, False) == 2 * 4 * GIB + max(3 * GIB, compare)


def test_choose_takes_the_roomiest_plan_that_fits():
    f = fp()
    plans = memplan.make_plans(f)
    roomy = 10 ** 15
    monkey = memplan.COMFORT_SLACK
    try:  # every plan within the comfort bound: the roomiest that fits the free memory
        memplan.COMFORT_SLACK = roomy
        assert memplan.choose(f, None) == plans[0]           # CPU: no limit
        assert memplan.choose(f, plans[0].need_bytes) == plans[0]
        assert memplan.choose(f, plans[0].need_bytes - 1) == plans[1]
        assert memplan.choose(f, plans[2].need_bytes) == plans[2]
        assert memplan.choose(f, plans[3].need_bytes) == plans[3]
        # Below the lazy plan, the lean one (no float64 reference), and below it nothing.
        assert memplan.choose(f, plans[3].need_bytes - 1) == plans[4]
        assert memplan.choose(f, plans[4].need_bytes - 1) is None
        assert memplan.choose(f, roomy, min_level=2) == plans[2]  # a retry: smaller only
        assert memplan.choose(f, roomy, min_level=4) == plans[4]  # after the lazy plan failed
        memplan.COMFORT_SLACK = 0  # none within it: the smallest with float64, where it fits
        assert memplan.choose(f, roomy) == plans[3]
        assert memplan.choose(f, plans[3].need_bytes - 1) == plans[4]
        assert memplan.choose(f, plans[4].need_bytes - 1) is None
    finally:
        memplan.COMFORT_SLACK = monkey


def test_choose_keeps_to_the_comfort_bound_when_a_plan_does():
    # 4 GiB in, 4 GiB out: everything resident fits an H200 but needs far more than 3x the
    # footprint plus the slack; a plan that keeps to it is taken instead.
    f = fp(input_bytes=4 * GIB, output_bytes=4 * GIB, ref_peak_bytes=4 * GIB,
           max_output_elems=GIB)
    plans = memplan.make_plans(f)
    h200 = 139 * GIB
    assert plans[0].need_bytes > memplan.comfort_bytes(f)
    chosen = memplan.choose(f, h200)
    with64 = [p for p in plans if p.float64]
    comfy = [p for p in with64 if p.need_bytes <= memplan.comfort_bytes(f)]
    assert chosen == (comfy[0] if comfy else with64[-1]) and chosen.need_bytes <= h200
    assert chosen.need_bytes < plans[0].need_bytes / 2
    # A small task: everything resident keeps to the bound and stays the choice.
    small = fp(input_bytes=64 << 20, output_bytes=64 << 20, ref_peak_bytes=64 << 20,
               max_output_elems=1 << 24)
    assert memplan.choose(small, h200) == memplan.make_plans(small)[0]


# Footprints of level-1 KernelBench tasks as measured on the H200 (bench/kb_memory.py): the
# inputs, outputs and the reference forward's own peak, with two derived sets of at most 1/16
# of the inputs (shapes.DERIVED_MAX_SHARE). Issue 22: each fits one H200.
LEVEL1_H200 = {
    "19_ReLU": (6 * GIB, 6 * GIB, 6 * GIB, 2),
    "38_L1Norm_": (8 * GIB, 8 * GIB, 16 * GIB, 2),
    "45_Average_Pooling_2D": (16 * GIB, GIB // 8, GIB // 8, 2),
    "4_Matrix_vector_multiplication_": (8 * GIB, 8 << 10, 8 << 10, 2),
    "7_Matmul_with_small_K_dimension_": (GIB // 64, 4 * GIB, 4 * GIB, 1),
}


@pytest.mark.parametrize("name", sorted(LEVEL1_H200))
def test_the_largest_level1_tasks_fit_an_h200(name):
    inp, out, peak, extra_inputs_quarters = LEVEL1_H200[name]
    f = fp(input_bytes=inp, output_bytes=out, ref_peak_bytes=peak, max_output_elems=out // 4,
           n_streamed=8, resident_extra_bytes=2 * extra_inputs_quarters * inp // 16)
    h200 = 139 * GIB
    plan = memplan.choose(f, h200)
    assert plan is not None, memplan.too_large_message(f, h200)
    assert memplan.candidate_budget(plan, h200) >= memplan.candidate_bytes(f, plan.lazy)
    # The smallest plan stays within a few footprints (issue 22 asks about 3x plus a fixed
    # part; the float64 reference forward and the candidate's own copies keep it above).
    small = memplan.smallest(f)
    assert small.need_bytes <= 7 * f.set_bytes() + memplan.COMFORT_SLACK, \
        (name, small.need_bytes / GIB)


def test_the_relu_task_of_issue_22_fits_an_h200_streamed_not_resident():
    # ReLU on 4096 x 393216 float32: 6 GiB in, 6 GiB out; an H200 has ~139 GiB free.
    six = 4096 * 393216 * 4
    f = fp(input_bytes=six, output_bytes=six, ref_peak_bytes=six,
           max_output_elems=4096 * 393216, n_streamed=8)
    h200 = 139 * GIB
    plan = memplan.choose(f, h200)
    assert plan is not None and plan.chunked and plan.window < 8
    assert plan.need_bytes <= h200
    assert memplan.make_plans(f)[0].need_bytes > h200  # everything resident does not fit
    assert plan.float64  # an H200 keeps the float64 reference


def test_the_relu_task_fits_an_h100_lean_within_the_issues_bound():
    # The same task on an H100 (~79 GiB free): the lazy plan's estimate fits, but the
    # evaluator's own peak reached 61.5 GiB there (the float64 forward: 24 GiB), an
    # infrastructure error; the retry's lean plan keeps to about 3x the footprint plus 8 GiB.
    six = 4096 * 393216 * 4
    f = fp(input_bytes=six, output_bytes=six, ref_peak_bytes=six,
           max_output_elems=4096 * 393216, n_streamed=8)
    h100 = 79 * GIB
    plans = memplan.make_plans(f)
    lean = plans[-1]
    assert not lean.float64 and lean.lazy
    assert memplan.choose(f, h100).float64  # first the plan with the float64 reference
    assert memplan.choose(f, h100, min_level=lean.level) == lean  # the retry
    assert lean.trusted_bytes <= memplan.comfort_bytes(f), lean.trusted_bytes / GIB
    assert lean.need_bytes <= h100
    msg = memplan.too_large_message(f, 10 * GIB)
    assert "no float64 reference" in msg


def test_too_large_message_names_the_numbers():
    f = fp(input_bytes=100 * GIB, output_bytes=100 * GIB)
    assert memplan.choose(f, 139 * GIB) is None
    msg = memplan.too_large_message(f, 139 * GIB)
    assert "139.00 GiB free" in msg and "100.00 GiB of inputs" in msg
    assert f"{memplan.smallest(f).need_bytes / GIB:.2f} GiB" in msg


def test_describe_gives_the_candidates_budget():
    f = fp()
    p = memplan.make_plans(f)[1]
    d = memplan.describe(f, p, 100 * GIB)
    assert d["plan"]["candidate_budget_bytes"] == 100 * GIB - p.trusted_bytes \
        - memplan.FIXED_OVERHEAD
    assert d["plan"]["candidate_bytes"] == memplan.candidate_bytes(f, False)
    assert d["footprint"]["input_bytes"] == GIB and d["plan"]["chunked"] is True
    assert d["plan"]["lazy"] is False


# ---------------------------------------------------------------------------------------
# Sliced comparison: the same records as the one-piece comparison


def test_sliced_compare_gives_the_same_record(monkeypatch):
    gen = torch.Generator().manual_seed(1)
    exp = torch.randn(7, 13, 5, generator=gen)
    got = exp.clone()
    got[0, 3, 1] += 1.0
    got[4, 0, 0] = float("nan")
    got[6, 12, 4] = float("inf")
    whole = compare.compare_tensor(0, got, exp, 1e-2, 1e-2)
    monkeypatch.setattr(memplan, "SLICE_ELEMS", 17)
    sliced = compare.compare_tensor_sliced(0, got, exp, 1e-2, 1e-2)
    assert sliced == whole
    assert whole["mismatches"] == 3 and whole["first_mismatches"][0]["index"] == [0, 3, 1]


def test_sliced_precision_matches_and_takes_a_host_reference(monkeypatch):
    gen = torch.Generator().manual_seed(2)
    r64 = torch.randn(64, 33, generator=gen, dtype=torch.float64)
    ref = r64.float()
    got = (r64 + 1e-4 * torch.randn(64, 33, generator=gen, dtype=torch.float64)).float()
    whole = compare.precision_record(0, got, ref, r64)
    monkeypatch.setattr(memplan, "SLICE_ELEMS", 100)
    sliced = compare.precision_record_sliced(0, got, ref, r64)
    assert sliced["ok"] == whole["ok"] is False
    for k in ("candidate_rms_err", "reference_rms_err", "scale_rms", "threshold"):
        assert sliced[k] == pytest.approx(whole[k], rel=1e-12)


# ---------------------------------------------------------------------------------------
# Whole evaluations in CPU mode


def verdict(run):
    r = run.result
    return (run.rc, r["ok"], r["stage"], (r["failure"] or {}).get("kind"),
            # whether a set mismatched, not how many elements: a fresh draw may put a few
            # expected values inside the tolerance of the wrong kernel's zeros
            [(s["kind"], s["ok"], s["mismatches"] > 0) for s in r["verification"]["sets"]],
            (r["verification"].get("post_timing") or {}).get("ok"))


@pytest.mark.parametrize("case", ["correct", "wrong_16_rows", "mutates"])
def test_streamed_sets_give_the_verdicts_of_the_all_at_once_path(tmp_path, case):
    kw = {}
    if case == "wrong_16_rows":
        kw = dict(ext=EXT_16_ROWS,
                  new=model_new("return cuda_extension.affine_16(x, self.weight, self.bias, "
                                "self.scale)"))
    elif case == "mutates":
        # Correct on the first sets, then it writes into its input: the streamed group after
        # the first is where it fails.
        kw = dict(new=model_new("""
            self.calls = getattr(self, "calls", 0) + 1
            y = cuda_extension.affine(x, self.weight, self.bias, self.scale)
            if self.calls == 3:
                x.add_(1.0)
            return y"""))
    whole = evaluate(tmp_path, **kw)
    streamed = evaluate(tmp_path, args=("--memory-window", "1"), **kw)
    assert whole.result["memory"]["plan"]["chunked"] is False, whole
    assert streamed.result["memory"]["plan"]["chunked"] is True, streamed
    assert streamed.result["memory"]["plan"]["window"] == 1
    assert verdict(streamed) == verdict(whole), (whole, streamed)
    # The lazy plan's path: every recipe set drawn again and its references made when its
    # outputs are compared, the lean poisoning.
    host = evaluate(tmp_path, args=("--memory-lazy",), **kw)
    assert host.result["memory"]["plan"]["lazy"] is True, host
    assert host.result["memory"]["plan"]["window"] == 1
    assert verdict(host) == verdict(whole), (whole, host)
    # The lean plan: the same, without the float64 reference (said so).
    lean = evaluate(tmp_path, args=("--memory-lean",), **kw)
    assert lean.result["memory"]["plan"]["float64"] is False, lean
    assert verdict(lean) == verdict(whole), (whole, lean)
    if case == "correct":
        assert lean.result["verification"]["fp64_reference"].startswith(
            "unavailable: the memory plan"), lean
        assert whole.result["verification"]["fp64_reference"] is True, whole
    if case == "correct":
        assert whole.rc == 0 and len(whole.result["verification"]["sets"]) >= 7
    elif case == "wrong_16_rows":
        assert whole.failure["kind"] == "mismatch"
        assert whole.result["verification"]["sets"][-1]["kind"] == "derived-shape"
    else:
        assert whole.failure["kind"] == "input_mutated"
        assert whole.failure["details"]["set"] == 2


@pytest.mark.parametrize("lazy", [False, True])
def test_window_of_two_streams_in_groups(tmp_path, lazy):
    """Lazy, set 0 takes the first of the two groups' slots: the arena is two sets' slots
    (and the derived sets'), not three; written again before the timing, which runs on it."""
    run = evaluate(tmp_path, args=("--memory-window", "2") + (("--memory-lazy",) if lazy else ()))
    assert run.rc == 0, run
    plan = run.result["memory"]["plan"]
    assert plan["chunked"] and plan["window"] == 2 and plan["lazy"] is lazy
    assert run.result["verification"]["post_timing"]["ok"] is True
    fp = run.result["memory"]["footprint"]
    groups = run.result["verification"]["transport"]["bytes"] - fp["resident_extra_bytes"]
    assert groups < (2 if lazy else 3) * fp["input_bytes"] * 2 + 4096, run.result["memory"]
    assert run.result["timing"]["candidate"]["mean_ms"] > 0


def fake_cuda_oom(*args, **kwargs):
    raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB")


def test_an_evaluator_oom_is_retried_with_a_smaller_plan(tmp_path, monkeypatch):
    real = streaming.compute_reference64
    levels = []

    def oom_on_the_roomy_plan(model64, s, device=None):
        levels.append(len(levels))
        if calls["n"] == 0:
            calls["n"] += 1
            fake_cuda_oom()
        return real(model64, s, device)

    calls = {"n": 0}
    monkeypatch.setattr(streaming, "compute_reference64", oom_on_the_roomy_plan)
    run = evaluate(tmp_path)
    assert run.rc == 0, run
    mem = run.result["memory"]
    assert [a["level"] for a in mem["attempts"]] == [0]
    assert "out of memory" in mem["attempts"][0]["error"]
    assert mem["plan"]["level"] == 1 and mem["plan"]["chunked"] is True


def test_an_evaluator_oom_under_every_plan_is_an_infrastructure_error(tmp_path, monkeypatch):
    monkeypatch.setattr(streaming, "compute_reference64", fake_cuda_oom)
    run = evaluate(tmp_path)
    assert run.rc == 3, run
    assert run.result["ok"] is False
    assert run.failure["kind"] == "infrastructure", run
    assert "not the candidate's failure" in run.failure["message"]
    levels = [a["level"] for a in run.result["memory"]["attempts"]]
    assert levels == list(range(len(levels))) and len(levels) >= 2


def test_an_oom_in_the_reference_forward_is_not_a_task_error(tmp_path, monkeypatch):
    monkeypatch.setattr(attempt, "compute_reference", fake_cuda_oom)
    run = evaluate(tmp_path)
    assert run.failure["kind"] == "infrastructure", run
    assert run.rc == 3


def test_a_task_too_large_is_refused_up_front(tmp_path, monkeypatch):
    monkeypatch.setattr(memplan, "free_bytes", lambda device: 1 << 20)  # 1 MiB "free"
    started = []
    monkeypatch.setattr(ev.cp, "CandidateProcess",
                        lambda *a, **k: started.append(1) or pytest.fail("started"))
    run = evaluate(tmp_path)
    assert run.rc == 3, run
    assert run.failure["kind"] == "infrastructure"
    assert run.failure["details"]["reason"] == "too_large"
    assert "even with the smallest memory plan" in run.failure["message"]
    assert "0.00 GiB free" in run.failure["message"]
    assert run.result["stage"] == "setup" and not started
    assert run.result["memory"]["plan"] is None


def test_a_candidate_that_runs_out_of_memory_fails_naming_its_budget(tmp_path):
    run = evaluate(tmp_path, new=model_new(
        'raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 1 TiB")'))
    assert_failed(run, "oom")
    assert "the candidate ran out of GPU memory" in run.failure["message"]
    assert "no budget is known" in run.failure["message"]  # CPU mode: no device budget
    note = ev.candidate_oom_note({"max_memory_allocated": 3 * GIB},
                                 {"plan": {"candidate_budget_bytes": 2 * GIB}})
    assert "allocated up to 3.00 GiB" in note and "budget on this GPU is 2.00 GiB" in note


def test_a_candidate_oom_inside_its_budget_is_the_evaluators():
    mem = {"plan": {"candidate_budget_bytes": 10 * GIB}}
    msg = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of ..."
    assert ev.oom_request_bytes(msg) == 2 * GIB
    assert ev.oom_request_bytes("Tried to allocate 512.00 MiB") == 512 << 20
    assert ev.oom_request_bytes("no size said") is None
    # Held 7 GiB, asked for 2: inside its 10 GiB, the device ran short: retried, not charged.
    assert ev.oom_within_budget({"max_memory_allocated": 7 * GIB}, msg, mem) is True
    # Held 9 GiB, asked for 2: over its budget: the candidate's failure.
    assert ev.oom_within_budget({"max_memory_allocated": 9 * GIB}, msg, mem) is False
    # Unknown usage, budget or request: the candidate's failure, as before.
    assert ev.oom_within_budget({}, msg, mem) is False
    assert ev.oom_within_budget({"max_memory_allocated": GIB}, msg, {"plan": {}}) is False
    assert ev.oom_within_budget({"max_memory_allocated": GIB}, "out of memory", mem) is False
    assert ev.oom_within_budget({"max_memory_allocated": True}, msg, mem) is False


def test_the_candidate_cannot_claim_an_infrastructure_error(tmp_path):
    kind, _msg, _d = ev.sanitize_failure({"kind": "infrastructure", "message": "not me"})
    assert kind == "exception"
