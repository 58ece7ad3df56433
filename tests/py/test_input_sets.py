"""Tests of the input sets the evaluator derives from a task (CPU mode): derived shapes (a
smaller batch and an odd size through the task's module-level ints, or a slice of the drawn
tensors' shared leading dimension), refusals of derived shapes, the value-stress set, and the
compute speed of light (FLOPs, peak_fraction). Skipped, with the reason, without PyTorch."""

from __future__ import annotations

import json
import pathlib
import sys
import textwrap
import types

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from harness_case import (EXT, EXT_16_ROWS, SHAPED_TASK, TASK, assert_failed, ev,  # noqa: E402
                          evaluate, model_new)
from test_worker import Worker, job  # noqa: E402
import timing  # noqa: E402  (harness/, on the path through harness_case)

# The task of test_harness.py with its sizes as module-level ints that get_inputs() reads; the
# feature count is an init input too, so a derived feature count gets a model of its own.
SIZED_TASK = TASK.replace("return [torch.randn(16, 37)]",
                          "return [torch.randn(batch_size, features)]").replace(
    "return [37, 1.5]", "return [features, 1.5]") + """

batch_size = 16
features = 37
"""
assert "batch_size, features" in SIZED_TASK and "[features, 1.5]" in SIZED_TASK

NEW_16_ROWS = model_new("return cuda_extension.affine_16(x, self.weight, self.bias, self.scale)")

# The same kernel, honest about it: refuses other row counts (as a TORCH_CHECK would).
EXT_REFUSES = EXT + textwrap.dedent("""
    def affine_16(x, w, b, scale):
        if x.shape[0] != 16:
            raise RuntimeError(f"affine_16: expected 16 rows, got {x.shape[0]}")
        return affine(x, w, b, scale)
    """)


def derived_records(run):
    return [r for r in run.result["verification"]["sets"] if r["kind"] == "derived-shape"]


# -- derived shapes -------------------------------------------------------------------------


def test_derived_shapes_through_module_level_sizes(tmp_path):
    run = evaluate(tmp_path, task=SIZED_TASK, args=["--no-timing"])
    assert run.rc == 0, run
    v = run.result["verification"]
    # A smaller odd batch, then the other size (the feature count: a model of its own).
    assert v["derived_shapes"] == [
        {"sizes": {"batch_size": 3}, "status": "verified", "reason": None, "own_model": False},
        {"sizes": {"features": 9}, "status": "verified", "reason": None, "own_model": True},
    ], run
    assert v["n_derived_shapes"] == 2 and v["derived_shapes_note"] is None
    recs = derived_records(run)
    assert [r["outputs"][0]["shape"] for r in recs] == [[3, 37], [16, 9]], run
    assert [r["derived"] for r in recs] == [{"sizes": {"batch_size": 3}},
                                            {"sizes": {"features": 9}}]
    assert [r.get("own_model", False) for r in recs] == [False, True]
    # --derived-shapes 1: the batch only.
    one = evaluate(tmp_path, task=SIZED_TASK, args=["--no-timing", "--derived-shapes", "1"])
    assert [d["sizes"] for d in one.result["verification"]["derived_shapes"]] == [
        {"batch_size": 3}], one


def test_derived_shape_by_slicing_without_module_level_sizes(tmp_path):
    run = evaluate(tmp_path, args=["--no-timing"])  # get_inputs(): torch.randn(16, 37)
    assert run.rc == 0, run
    v = run.result["verification"]
    assert v["derived_shapes"] == [{"slice": {"dim": 0, "size": 3, "of": 16},
                                    "status": "verified", "reason": None,
                                    "own_model": False}], run
    assert [r["outputs"][0]["shape"] for r in derived_records(run)] == [[3, 37]]


def test_no_derived_shape_without_a_size_or_a_shared_leading_dimension(tmp_path):
    task = TASK.replace("def forward(self, x):", "def forward(self, x, y):").replace(
        "return torch.tanh(x * self.weight) * self.scale + self.bias",
        "return torch.tanh(x * self.weight) * self.scale + self.bias + y.sum()").replace(
        "return [torch.randn(16, 37)]", "return [torch.randn(16, 37), torch.randn(4)]")
    new = model_new("return cuda_extension.affine(x, self.weight, self.bias, self.scale) + "
                    "y.sum()").replace("def forward(self, x):", "def forward(self, x, y):")
    run = evaluate(tmp_path, task=task, new=new, args=["--no-timing"])
    assert run.rc == 0, run
    v = run.result["verification"]
    assert v["derived_shapes"] == [] and v["n_derived_shapes"] == 0, run
    assert "share no leading dimension" in v["derived_shapes_note"], run


def test_hard_coded_row_count_fails_a_derived_shape(tmp_path):
    run = evaluate(tmp_path, task=SIZED_TASK, ext=EXT_16_ROWS, new=NEW_16_ROWS,
                   args=["--no-timing"])
    assert_failed(run, "mismatch")
    assert "(derived-shape batch_size=3)" in run.failure["message"], run
    assert run.result["verification"]["sets"][-1]["derived"] == {"sizes": {"batch_size": 3}}
    assert run.result["verification"]["derived_shapes"][0]["status"] == "failed"
    assert run.result["verification"]["derived_shapes"][1]["status"] == "not reached"
    # The slice of a task with literal sizes catches it too.
    sliced = evaluate(tmp_path, ext=EXT_16_ROWS, new=NEW_16_ROWS, args=["--no-timing"])
    assert_failed(sliced, "mismatch")
    assert "(derived-shape leading dimension 3 of 16)" in sliced.failure["message"], sliced
    # Without derived shapes the hard-coded kernel passes: the derived set is what fails it.
    off = evaluate(tmp_path, task=SIZED_TASK, ext=EXT_16_ROWS, new=NEW_16_ROWS,
                   args=["--no-timing", "--derived-shapes", "0"])
    assert off.rc == 0, off
    v = off.result["verification"]
    assert v["derived_shapes"] == [] and v["derived_shapes_note"] == \
        "disabled (--derived-shapes 0)"
    assert not derived_records(off)


def test_refusing_a_derived_shape_passes_with_a_note(tmp_path):
    run = evaluate(tmp_path, task=SIZED_TASK, ext=EXT_REFUSES, new=NEW_16_ROWS)
    assert run.rc == 0 and run.result["ok"] is True, run
    v = run.result["verification"]
    batch, features = v["derived_shapes"]
    assert batch["status"] == "refused" and "expected 16 rows, got 3" in batch["reason"], run
    assert features["status"] == "verified", run  # 16 rows: the kernel takes it
    rec = derived_records(run)[0]
    assert rec["ok"] is True and "expected 16 rows, got 3" in rec["refused"], rec
    flags = [f for f in run.result["flags"] if f["kind"] == "derived_shape_refused"]
    assert len(flags) == 1 and "batch_size=3" in flags[0]["message"], run.result["flags"]
    assert run.result["timing"]["candidate"]["median_ms"] > 0  # timed as usual, on set 0


def test_a_declared_extra_shape_may_not_be_refused(tmp_path):
    new = model_new("return cuda_extension.affine_16(x, self.weight, self.bias, self.scale)")
    run = evaluate(tmp_path, task=SHAPED_TASK, ext=EXT_REFUSES, new=new, args=["--no-timing"])
    assert_failed(run, "exception")
    assert "expected 16 rows, got 3" in run.failure["message"], run
    assert run.result["verification"]["derived_shapes_note"] == "the task declares EXTRA_SHAPES"


@pytest.mark.parametrize("raise_code, kind", [
    ("raise RuntimeError('CUDA error: an illegal memory access was encountered')",
     "cuda_error"),
    ("import ctypes\nctypes.string_at(0)", "crash"),
    ("raise SystemExit(3)", "exception"),
])
def test_a_crash_on_a_derived_shape_still_fails(tmp_path, raise_code, kind):
    ext = EXT + "\n\ndef affine_16(x, w, b, scale):\n    if x.shape[0] != 16:\n" + \
        textwrap.indent(raise_code, " " * 8) + "\n    return affine(x, w, b, scale)\n"
    run = evaluate(tmp_path, task=SIZED_TASK, ext=ext, new=NEW_16_ROWS, args=["--no-timing"])
    assert_failed(run, kind)


def test_refusal_is_accepted_for_derived_sets_only():
    s = ev.InputSet(0, "random", [torch.ones(2, 3)], torch.device("cpu"))
    with pytest.raises(ev.EvalError) as info:
        ev.refused_record(s, "RuntimeError: no")
    assert info.value.kind == "protocol" and "only a derived shape" in info.value.message
    s.kind, s.may_refuse, s.derived = "derived-shape", True, {"sizes": {"n": 1}}
    assert ev.refused_record(s, "RuntimeError: no")["refused"] == "RuntimeError: no"


def test_a_derived_shape_the_reference_refuses_is_dropped(tmp_path):
    task = SIZED_TASK.replace(
        "    def forward(self, x):\n",
        "    def forward(self, x):\n"
        "        if x.shape[0] % 2:\n"
        "            raise ValueError('even batches only')\n")
    assert "even batches only" in task
    run = evaluate(tmp_path, task=task, args=["--no-timing"])
    assert run.rc == 0, run
    v = run.result["verification"]
    batch, features = v["derived_shapes"]
    assert batch["status"] == "dropped" and "even batches only" in batch["reason"], run
    assert features["status"] == "verified" and v["n_derived_shapes"] == 1, run
    assert [r["derived"] for r in derived_records(run)] == [{"sizes": {"features": 9}}]
    # The indices stay dense: every set reported, in order.
    assert [r["seed_index"] for r in v["sets"]] == list(range(len(v["sets"])))


HEADS_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        assert dim % heads == 0, "dim must be a multiple of heads"
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return x * self.weight


batch_size = 8
seq = 32
dim = 64
heads = 4


def get_inputs():
    return [torch.randn(batch_size, seq, dim)]


def get_init_inputs():
    return [dim, heads]
"""

HEADS_NEW = """
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return cuda_extension.mul(x, self.weight)
"""


def test_a_size_the_models_constructor_refuses_is_passed_over(tmp_path):
    run = evaluate(tmp_path, task=HEADS_TASK, new=HEADS_NEW,
                   ext="def mul(x, w):\n    return x * w\n", args=["--no-timing"])
    assert run.rc == 0, run
    notes = run.result["verification"]["derived_shapes"]
    # dim=15 (the largest size) is no multiple of 4 heads: the next size, seq, is derived.
    assert notes[0]["sizes"] == {"dim": 15} and notes[0]["status"] == "dropped", notes
    assert "dim must be a multiple of heads" in notes[0]["reason"], notes
    assert [(n["sizes"], n["status"]) for n in notes[1:]] == [
        ({"batch_size": 1}, "verified"), ({"seq": 7}, "verified")], notes
    assert [r["outputs"][0]["shape"] for r in derived_records(run)] == [[1, 32, 64],
                                                                       [8, 7, 64]]


def test_smaller_odd_and_size_names():
    assert [ev.smaller_odd(v) for v in (0, 1, 2, 3, 8, 16, 37, 512, 8192)] == \
        [None, None, 1, 1, 1, 3, 9, 127, 2047]
    task = types.ModuleType("fake_task")
    exec(compile(textwrap.dedent("""
        rows, cols, flag, unused = 16, 8, True, 4


        def helper():
            return cols


        def get_inputs():
            return [rows, helper(), flag, [rows for _ in range(2)]]
        """), "fake_task.py", "exec"), task.__dict__)
    # Read directly, in a helper of the module, not bools, not unread ints.
    assert ev.size_names(task) == ["rows", "cols"]


# -- the value-stress set -------------------------------------------------------------------

SOFTMAX_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(16, 37)]


def get_init_inputs():
    return []
"""

SOFTMAX_EXT = """
import torch


def softmax_stable(x):
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


def softmax_unstable(x):
    e = torch.exp(x)
    return e / e.sum(dim=-1, keepdim=True)
"""

SOFTMAX_NEW = """
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.{fn}(x)
"""


def test_value_stress_catches_a_softmax_without_max_subtraction(tmp_path):
    unstable = SOFTMAX_NEW.replace("{fn}", "softmax_unstable")
    run = evaluate(tmp_path, task=SOFTMAX_TASK, ext=SOFTMAX_EXT, new=unstable,
                   args=["--no-timing"])
    assert_failed(run, "mismatch")
    bad = run.result["verification"]["sets"][-1]
    assert bad["kind"] == "value-stress" and bad["scale"] == 1000.0, run
    assert bad["outputs"][0]["nonfinite_mismatches"] > 0, run
    assert "(value-stress, inputs x1000)" in run.failure["message"], run
    # Every ordinary set passed before it (the adversarial one too).
    assert all(r["ok"] for r in run.result["verification"]["sets"][:-1])
    assert {"random", "adversarial"} <= {r["kind"] for r in run.result["verification"]["sets"]}
    # The same candidate passes without the stress set: it is the set that catches it.
    off = evaluate(tmp_path, task=SOFTMAX_TASK, ext=SOFTMAX_EXT, new=unstable,
                   args=["--no-timing", "--value-stress", "0"])
    assert off.rc == 0, off
    v = off.result["verification"]
    assert v["n_value_stress"] == 0 and v["value_stress"]["skipped"] == \
        "disabled (--value-stress 0)", off

    stable = evaluate(tmp_path, task=SOFTMAX_TASK, ext=SOFTMAX_EXT,
                      new=SOFTMAX_NEW.replace("{fn}", "softmax_stable"), args=["--no-timing"])
    assert stable.rc == 0, stable
    v = stable.result["verification"]
    assert v["n_value_stress"] == 1 and v["value_stress"]["scale"] == 1000.0, stable
    assert v["value_stress"]["float64_checked"] is True and v["value_stress"]["inputs"] == [0]
    rec = next(r for r in v["sets"] if r["kind"] == "value-stress")
    assert rec["ok"] and rec["precision_enforced"] is False and rec["precision"], rec
    assert v["precision_observed"] == "fp32", stable


def test_value_stress_scale_stays_where_the_fp32_reference_is_trusted(tmp_path):
    # A reference that is itself the unstable softmax: its float64 copy overflows at x1000
    # (exp beyond 709), its float32 one at x100 (exp beyond 88) where float64 does not.
    task = SOFTMAX_TASK.replace("return torch.softmax(x, dim=-1)",
                                "e = torch.exp(x)\n        return e / e.sum(dim=-1, keepdim=True)")
    run = evaluate(tmp_path, task=task, ext=SOFTMAX_EXT,
                   new=SOFTMAX_NEW.replace("{fn}", "softmax_stable"), args=["--no-timing"])
    assert run.rc == 0, run
    info = run.result["verification"]["value_stress"]
    assert info["scale"] == 10.0, info
    assert [r["scale"] for r in info["rejected"]] == [1000.0, 100.0], info
    assert "float64 reference is not finite" in info["rejected"][0]["why"], info
    assert "cannot be trusted" in info["rejected"][1]["why"], info


def test_value_stress_skipped_when_no_factor_keeps_the_reference_finite():
    class Exp(torch.nn.Module):
        def forward(self, x):
            return torch.exp(x * 10)  # finite unscaled (at most e^30), not at x10

    s = ev.InputSet(0, "value-stress", [torch.linspace(-3, 3, 8)], torch.device("cpu"))
    s.scaled_inputs = [0]
    m = Exp()
    info: dict = {}
    assert ev.choose_stress_scale(s, m, m.double(), torch.device("cpu"), info) is False
    assert "no factor" in info["skipped"] and len(info["rejected"]) == 3, info
    assert s.ref == [] and s.scale is None


def test_value_stress_respects_input_domains(tmp_path):
    # p is a probability: scaled, log1p(-p) would be NaN at every factor.
    task = """
import torch
import torch.nn as nn

INPUT_DOMAINS = {"p": "probability"}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, p):
        return x * torch.log1p(-p)


def get_inputs():
    return [torch.randn(16, 37), torch.rand(16, 37) * 0.9]


def get_init_inputs():
    return []
"""
    ext = "import torch\n\ndef f(x, p):\n    return x * torch.log1p(-p)\n"
    new = SOFTMAX_NEW.replace("def forward(self, x):", "def forward(self, x, p):").replace(
        "cuda_extension.{fn}(x)", "cuda_extension.f(x, p)")
    run = evaluate(tmp_path, task=task, ext=ext, new=new, args=["--no-timing"])
    assert run.rc == 0, run
    info = run.result["verification"]["value_stress"]
    assert info["inputs"] == [0] and info["left_as_drawn"] == {"1": "probability"}, info
    assert info["scale"] == 1000.0 and "rejected" not in info, info
    # Every input protected: no stress set.
    only_p = task.replace('{"p": "probability"}', '{"p": "probability", "x": "positive"}')
    run = evaluate(tmp_path, task=only_p, ext=ext, new=new, args=["--no-timing"])
    assert run.rc == 0, run
    v = run.result["verification"]
    assert v["n_value_stress"] == 0 and "no floating-point input" in \
        v["value_stress"]["skipped"], v["value_stress"]


def test_value_stress_atol_follows_the_outputs_magnitude():
    # A linear map: outputs grow with the inputs, and so does the absolute error of honest
    # fp32 arithmetic in another order; atol grows with the output's RMS.
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 8).eval()
    s = ev.InputSet(0, "value-stress", [torch.randn(4, 64)], torch.device("cpu"))
    s.scaled_inputs = [0]
    info: dict = {}
    assert ev.choose_stress_scale(s, lin, None, torch.device("cpu"), info) is True
    assert info["scale"] == 1000.0 and info["float64_checked"] is False
    assert 300 < s.atol_scale[0] < 2000, s.atol_scale
    assert ev.growth(torch.ones(3), torch.ones(3) * 0.5) == 1.0  # never below 1


# -- FLOPs and peak_fraction ----------------------------------------------------------------


def test_count_flops_counts_matmuls_and_names_what_it_does_not_count():
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.GELU()).eval()
    s = ev.InputSet(0, "random", [torch.randn(8, 32)], torch.device("cpu"))
    got = ev.count_flops(model, s, torch.device("cpu"))
    assert got["flops"] == 2 * 8 * 32 * 16, got
    assert "aten.gelu" in got["uncounted_ops"] and "aten.addmm" not in got["uncounted_ops"]
    assert "error" not in got
    # Only operators the counter has no formula for: 0 FLOPs, and it says which.
    tanh = ev.count_flops(torch.nn.Tanh(), s, torch.device("cpu"))
    assert tanh["flops"] == 0 and tanh["uncounted_ops"] == ["aten.tanh"], tanh

    class Broken(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("no")

    broken = ev.count_flops(Broken(), s, torch.device("cpu"))
    assert broken["flops"] is None and "RuntimeError: no" in broken["error"]


def test_speed_of_light_counts_flops_and_reports_peak_fraction():
    s = ev.InputSet(0, "random", [torch.zeros(1 << 20)], torch.device("cpu"))
    s.ref = [torch.zeros(1 << 20)]  # 8 MiB moved in all
    h200 = {"type": "cuda", "name": "NVIDIA H200"}
    flops = {"flops": 10 ** 12, "uncounted_ops": ["aten.relu"]}
    sol_bytes = (8 << 20) / 4.8e12 * 1e3
    sol_flops = 1e12 / 495e12 * 1e3  # strict fp32: the TF32 tensor rate
    got = ev.speed_of_light(h200, s, 0, 10.0, flops, "strict")
    assert got["flops"] == 10 ** 12 and got["peak_flops_per_s"] == 495e12
    assert got["peak_flops_kind"] == "tf32" and got["flops_uncounted_ops"] == ["aten.relu"]
    assert got["peak_flops_rates"] == {"fp32": 67e12, "tf32": 495e12, "fp16": 990e12}
    assert got["sol_flops_ms"] == pytest.approx(sol_flops)
    assert got["peak_fraction"] == pytest.approx(sol_flops / 10.0)
    assert got["peak_fraction_basis"] == "flops" and got["flagged"] is False
    # Faster than the FLOPs allow at half the TF32 rate: flagged, by the FLOPs only.
    fast = ev.speed_of_light(h200, s, 0, 0.4 * sol_flops, flops, "strict")
    assert fast["flagged"] is True and fast["flagged_by"] == ["flops"], fast
    # tf32 mode: the fp16/bf16 dense rate bounds it, so the same time is possible there.
    tf32 = ev.speed_of_light(h200, s, 0, 0.4 * sol_flops, flops, "tf32")
    assert tf32["peak_flops_per_s"] == 990e12 and tf32["peak_flops_kind"] == "fp16"
    assert tf32["flagged"] is False, tf32
    # fp16 outputs: the fp16 rate in strict mode too.
    s16 = ev.InputSet(0, "random", [torch.zeros(4, dtype=torch.float16)], torch.device("cpu"))
    s16.ref = [torch.zeros(4, dtype=torch.float16)]
    assert ev.speed_of_light(h200, s16, 0, 1.0, flops)["peak_flops_kind"] == "fp16"
    # No FLOPs (an elementwise task): the bytes decide, and bound the fraction.
    none = ev.speed_of_light(h200, s, 0, 2 * sol_bytes, {"flops": 0, "uncounted_ops": []})
    assert none["sol_flops_ms"] is None and none["peak_fraction_basis"] == "bytes"
    assert none["peak_fraction"] == pytest.approx(0.5)
    assert ev.speed_of_light(h200, s, 0, 0.4 * sol_bytes, None)["flagged_by"] == ["bytes"]
    a100 = ev.speed_of_light({"type": "cuda", "name": "NVIDIA A100-SXM4-80GB"}, s, 0, 1.0, flops)
    assert a100["peak_flops_per_s"] == 156e12
    pcie = ev.speed_of_light({"type": "cuda", "name": "NVIDIA H100 PCIe"}, s, 0, 1.0, flops)
    assert pcie["peak_flops_per_s"] == 378e12 and pcie["peak_bytes_per_s"] == 2.0e12
    for dev in ({"type": "cuda", "name": "Mystery"}, {"type": "cpu", "name": "cpu"}):
        other = ev.speed_of_light(dev, s, 0, 1e-9, flops)
        assert other["peak_flops_per_s"] is None and other["peak_fraction"] is None
        assert other["flagged"] is False and other["flops"] == 10 ** 12


LINEAR_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(37, 8)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(16, 37)]


def get_init_inputs():
    return []
"""

LINEAR_EXT = "import torch\n\ndef f(x, w, b):\n    return torch.relu(x @ w.t() + b)\n"
LINEAR_NEW = """
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(37, 8)

    def forward(self, x):
        return cuda_extension.f(x, self.linear.weight, self.linear.bias)
"""


def test_flops_reported_and_cached_with_the_baselines(tmp_path, monkeypatch):
    # Every timing counts as clean here: this test is about the FLOPs in the cache (a noisy
    # baseline is not cached, test_timing_quality.py; the trusted side runs in this process).
    for name in ("NOISY_IQR_REL", "NOISY_CV", "NOISY_RUNQ_FRACTION"):
        monkeypatch.setattr(timing, name, float("inf"))
    cache = tmp_path / "cache"
    run = evaluate(tmp_path, task=LINEAR_TASK, ext=LINEAR_EXT, new=LINEAR_NEW,
                   args=["--baseline-cache", str(cache)])
    assert run.rc == 0, run
    sol = run.result["timing"]["sol"]
    assert sol["flops"] == 2 * 16 * 37 * 8 and "aten.relu" in sol["flops_uncounted_ops"], sol
    assert sol["peak_flops_per_s"] is None and sol["peak_fraction"] is None  # a CPU
    (entry_file,) = cache.glob("baseline-*.json")
    entry = json.loads(entry_file.read_text())
    assert entry["flops"]["flops"] == 2 * 16 * 37 * 8
    # From the cache the next time (a count written there is what comes back).
    entry["flops"]["flops"] = 12345
    entry_file.write_text(json.dumps(entry))
    again = evaluate(tmp_path, task=LINEAR_TASK, ext=LINEAR_EXT, new=LINEAR_NEW,
                     args=["--baseline-cache", str(cache)])
    assert again.result["timing"]["baseline_cached"] is True, again
    assert again.result["timing"]["sol"]["flops"] == 12345, again
    # An entry from before FLOPs were counted gets them added.
    del entry["flops"]
    entry_file.write_text(json.dumps(entry))
    old = evaluate(tmp_path, task=LINEAR_TASK, ext=LINEAR_EXT, new=LINEAR_NEW,
                   args=["--baseline-cache", str(cache)])
    assert old.result["timing"]["baseline_cached"] is True, old
    assert json.loads(entry_file.read_text())["flops"]["flops"] == 2 * 16 * 37 * 8


# -- the long-lived runner ------------------------------------------------------------------


def test_worker_prefetch_keeps_derived_and_stress_sets(tmp_path):
    (tmp_path / "cands").mkdir()
    w = Worker(tmp_path / "cands")
    try:
        for i, (name, new, ext) in enumerate([("first", model_new(), EXT),
                                              ("prefetched", NEW_16_ROWS, EXT_16_ROWS)]):
            argv, out = job(tmp_path, name, new, task=SIZED_TASK, extra=["--no-timing"])
            (out.parent / "ext.py").write_text(ext)
            r = w.send({"id": i, "argv": argv})
            res = json.loads(out.read_text())
            v = res["verification"]
            assert v["sets_prefetched"] is (i > 0), res
            assert v["n_value_stress"] == 1 and v["value_stress"]["scale"] == 1000.0, res
            assert [d["sizes"] for d in v["derived_shapes"]] == [{"batch_size": 3},
                                                                 {"features": 9}], res
            if i == 0:
                assert r["rc"] == 0, res
            else:  # drawn ahead of time, the derived batch still catches the fixed row count
                assert r["rc"] == 1 and res["failure"]["kind"] == "mismatch", res
                assert "derived-shape batch_size=3" in res["failure"]["message"], res
        assert w.close() == 0
    finally:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait()
