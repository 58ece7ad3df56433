"""harness/synth_compose.py: shape-consistent chains of 1-5 operators as KernelBench-format
tasks, deterministic from a seed, with the configured depth distribution."""
import ast
import collections

import pytest

from synth_util import catalog, torch
import synth_compose


def run_task(code):
    ns = {}
    exec(compile(code, "<task>", "exec"), ns)
    model = ns["Model"](*ns["get_init_inputs"]())
    with torch.no_grad():
        return model(*ns["get_inputs"]())


def test_same_seed_same_task_and_kernelbench_layout():
    a = synth_compose.compose(catalog(), 7, target_ms=0.5)
    b = synth_compose.compose(catalog(), 7, target_ms=0.5)
    assert a == b
    tree = ast.parse(a["code"])
    top = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert {"Model", "get_inputs", "get_init_inputs"} <= top
    codes = {synth_compose.compose(catalog(), s, target_ms=0.5)["code"] for s in range(30)}
    assert len(codes) >= 28  # different seeds, different tasks


def test_every_composition_runs_with_its_shapes():
    # Shape consistency is the real claim: each chain must run as composed.
    for seed in range(40):
        t = synth_compose.compose(catalog(), seed, target_ms=0.2)
        out = run_task(t["code"])
        assert isinstance(out, torch.Tensor), (seed, t["ops"])
        assert 1 <= t["depth"] <= 5 and len(t["ops"]) <= t["depth"]
        assert all(op in catalog()["ops"] for op in t["ops"])


def test_depth_distribution_defaults_to_the_papers():
    depths = collections.Counter(synth_compose.compose(catalog(), s, target_ms=0.2)["depth"]
                                 for s in range(300))
    share2 = depths[2] / 300
    assert 0.76 <= share2 <= 0.91, depths  # 83.8% in the released set
    assert set(depths) <= {1, 2, 3, 4, 5}
    only3 = {synth_compose.compose(catalog(), s, depths={3: 1.0}, target_ms=0.2)["depth"]
             for s in range(20)}
    assert only3 == {3}


def test_parse_depths_errors():
    assert synth_compose.parse_depths("1:5,2:83.8") == {1: 5.0, 2: 83.8}
    for bad in ("6:1", "2", "x:1", "2:-1", "1:0"):
        with pytest.raises(ValueError):
            synth_compose.parse_depths(bad)


def test_operator_subset_and_unknown_operator():
    t = synth_compose.compose(catalog(), 3, only=["nn.Linear", "nn.ReLU"], target_ms=0.2)
    assert set(t["ops"]) <= {"nn.Linear", "nn.ReLU"}
    with pytest.raises(ValueError, match="unknown operator 'nn.Nope'"):
        synth_compose.compose(catalog(), 3, only=["nn.Nope"])


def test_sizes_follow_the_runtime_target():
    small = synth_compose.compose(catalog(), 11, target_ms=0.1, device="cpu")
    big = synth_compose.compose(catalog(), 11, target_ms=50.0, device="cpu")
    assert big["ops"] == small["ops"]
    assert big["batch_size"] > small["batch_size"]
    assert big["est_ms"] > small["est_ms"]


def test_resizing_never_passes_the_tensor_cap():
    import math
    for seed in range(10):
        t = synth_compose.compose(catalog(), seed, target_ms=1e6, device="cpu", batch_scale=256)
        ns = {}
        exec(compile(t["code"], "<task>", "exec"), ns)
        (x,) = ns["get_inputs"]()
        assert x.numel() <= synth_compose.MAX_NUMEL["cpu"], (seed, t["batch_size"])
        assert math.prod(x.shape) >= 1


def test_single_operators_only_make_one_operator_tasks():
    cat = {"fingerprint": "x", "ops": {
        "transformers.Fake": {"kind": "module", "module": "torch.nn.GELU", "ranks": [2, 3, 4],
                              "rule": "same", "init": {}, "single": True},
        "nn.ReLU": catalog()["ops"]["nn.ReLU"]}}
    seen = collections.Counter()
    for seed in range(40):
        t = synth_compose.compose(cat, seed, target_ms=0.2)
        if "transformers.Fake" in t["ops"]:
            assert t["depth"] == 1
            assert "from torch.nn import GELU" in t["code"]
            run_task(t["code"])
        seen[t["depth"]] += 1
    assert seen[2] > 0


def test_dedup_key_ignores_layout_docstrings_and_comments():
    code = synth_compose.compose(catalog(), 5, target_ms=0.2)["code"]
    other = code.replace('"""', '"""Another docstring. ', 1).replace("\n\n\n", "\n\n# hi\n\n")
    assert other != code
    assert synth_compose.dedup_key(other) == synth_compose.dedup_key(code)
    resized = code.replace("batch_size = ", "batch_size = 1")
    assert synth_compose.dedup_key(resized) != synth_compose.dedup_key(code)
