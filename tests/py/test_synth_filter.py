"""harness/synth_filter.py: each filter rejects what it should (with its reason) and keeps what
it should. CPU, small sizes, torch.compile with the aot_eager backend (inductor's C++ build is
minutes on two cores); the H200 run uses inductor (bench/synth_h200.sh)."""
import pathlib
import textwrap

import pytest

import corpora
from synth_util import CPU_CFG, catalog, kernelbench
import synth_compose
import synth_filter

TEMPLATE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
{init}

    def forward(self, x):
{body}


def get_inputs():
    return [torch.randn(64, 128)]


def get_init_inputs():
    return []
"""


def task(body, init="        pass"):
    return TEMPLATE.format(body=textwrap.indent(textwrap.dedent(body), " " * 8), init=init)


GOOD = task("return torch.relu(x) * 2")


def run(code, **cfg):
    return synth_filter.run_filters(code, dict(CPU_CFG, **cfg), None)


def rejected_by(res, filt, text=""):
    assert not res["ok"], res
    assert res["reason"].startswith(filt + ":"), res["reason"]
    assert text in res["reason"], res["reason"]
    assert res["filters"][filt]["ok"] is False


def test_keeps_a_good_task_with_every_filter_recorded():
    res = run(GOOD)
    assert res["ok"], res["reason"]
    assert [k for k in res["filters"]] == ["static", "eager", "deterministic", "informative",
                                           "runtime", "compile"]
    assert res["eager_ms"] > 0 and res["compile_ms"] > 0


def test_keeps_a_composed_task():
    t = synth_compose.compose(catalog(), 2, target_ms=0.3)
    assert run(t["code"])["ok"]


def test_stochastic_operator_is_rejected_statically():
    rejected_by(run(task("return F.dropout(x, p=0.5, training=True)")), "static",
                "stochastic operator dropout")
    rejected_by(run(task("return x + torch.rand_like(x)")), "static", "rand_like")
    # Random numbers in get_inputs are what every task does: kept.
    assert run(GOOD)["filters"]["static"]["ok"]


def test_nondeterminism_the_scan_cannot_see_is_caught_by_running_twice():
    code = task("self.calls += 1\nreturn x * self.calls", init="        self.calls = 0")
    rejected_by(run(code), "deterministic", "disagree")


def test_constant_output_is_rejected():
    rejected_by(run(task("return x * 0 + 1")), "informative", "constant output")


def test_output_indistinguishable_across_inputs_is_rejected():
    code = task("return torch.ones_like(x).cumsum(-1)")
    rejected_by(run(code), "informative", "indistinguishable")


def test_eager_failure_and_non_finite_output_are_rejected():
    rejected_by(run(task("return x @ x")), "eager", "RuntimeError")
    rejected_by(run(task("return torch.log(x - 100)")), "eager", "non-finite")


def test_runtime_window_rejects_too_fast_and_too_slow():
    rejected_by(run(GOOD, min_ms=50.0, max_ms=100.0), "runtime", "too fast")
    rejected_by(run(GOOD, min_ms=0.0, max_ms=1e-6), "runtime", "too slow")
    assert run(GOOD, min_ms=0.0, max_ms=1000.0)["ok"]


def test_compile_failure_is_rejected():
    rejected_by(run(GOOD, compile_backend="no_such_backend"), "compile")


def test_similarity_rejects_a_near_copy_and_keeps_a_different_task(tmp_path):
    ref = task("x = torch.matmul(x, x.t())\nreturn torch.sigmoid(x).sum(dim=1)")
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "1_Ref.py").write_text(ref)
    corpus = synth_filter.Corpus(str(tmp_path))
    near = ref.replace("x", "inp").replace("inp = torch", "y = torch").replace("64, 128", "32, 7")
    res = synth_filter.run_filters(near, CPU_CFG, corpus)
    rejected_by(res, "similarity", "level1/1_Ref.py")
    assert res["filters"]["similarity"]["max"] > 0.9
    other = synth_compose.compose(catalog(), 4, target_ms=0.3)["code"]
    res = synth_filter.run_filters(other, CPU_CFG, corpus)
    assert res["filters"]["similarity"]["ok"], res["filters"]["similarity"]


def test_kernelbench_near_copy_is_rejected_and_composed_tasks_pass():
    kb = kernelbench()
    if kb is None:
        pytest.skip("no KernelBench tree under " + corpora.where())
    corpus = synth_filter.Corpus(str(kb))
    assert len(corpus.items) >= 250
    src = (kb / "level2" / "1_Conv2D_ReLU_BiasAdd.py").read_text()
    # A renamed, resized copy of a KernelBench task.
    copy = src.replace("conv", "c0nv").replace("bias", "b1as").replace("= 128", "= 64")
    score, near = corpus.nearest(synth_filter.ast.parse(copy))
    assert score > 0.9 and near.endswith("1_Conv2D_ReLU_BiasAdd.py"), (score, near)
    res = synth_filter.run_filters(copy, CPU_CFG, corpus)
    rejected_by(res, "similarity", "1_Conv2D_ReLU_BiasAdd.py")
    # Our compositions are new tasks: most stay below the bound.
    scores = [corpus.nearest(synth_filter.ast.parse(
        synth_compose.compose(catalog(), s, target_ms=0.2)["code"]))[0] for s in range(20)]
    assert sum(x <= 0.9 for x in scores) >= 16, scores


def test_missing_corpus_is_a_clear_error():
    with pytest.raises(ValueError, match="no such directory"):
        synth_filter.Corpus(str(pathlib.Path("/nonexistent/kb")))
