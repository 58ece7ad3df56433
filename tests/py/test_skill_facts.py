"""What template/SKILL.md states about the evaluator, checked on the CPU (issue 18).

The GPU half (library time attribution, scratch buffers, cuDNN's default math mode) is
tests/gpu/test_skill_facts.py.
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "harness"))
import evaluate as ev  # noqa: E402
import candidate  # noqa: E402
import timing  # noqa: E402
import policy_util  # noqa: E402

SKILL = (ROOT / "template" / "SKILL.md").read_text()


def test_models_run_in_eval_mode():
    """SKILL.md: Model and ModelNew run in eval mode (Dropout off, BatchNorm's running stats)."""
    assert "eval mode" in SKILL

    class Task:
        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.bn = torch.nn.BatchNorm1d(4)
                self.drop = torch.nn.Dropout(0.5)

    m, _ = ev.model_at(Task, [], {"n": 1}, torch.device("cpu"))
    assert not m.training and not m.bn.training and not m.drop.training
    # the candidate side: every way it builds ModelNew (Model's state_dict loaded, or under
    # KernelBench's rules its own parameters from the seed) ends in .eval(), in on_device
    src = (ROOT / "harness" / "candidate.py").read_text()
    build = src[src.index("    def build_model("):src.index("    def on_device(")]
    returns = [ln.strip() for ln in build.splitlines() if ln.strip().startswith("return ")]
    assert len(returns) >= 2 and all(r.startswith("return self.on_device(") for r in returns)
    on_device = src[src.index("    def on_device("):]
    body = on_device.split("\n    def ")[0]
    assert "model = model.to(self.device).eval()" in body and body.rstrip().endswith("return model")


@pytest.mark.parametrize("setter", [ev.set_precision, candidate.set_precision]
                         if hasattr(candidate, "set_precision") else [ev.set_precision])
def test_strict_baselines_run_without_tf32(setter):
    """SKILL.md: eager and torch.compile baselines run at strict fp32, TF32 off for both
    cuBLAS and cuDNN, unless the run allows TF32 (then they use it too)."""
    assert "TF32 off" in SKILL
    setter("strict")
    assert torch.backends.cuda.matmul.allow_tf32 is False
    assert torch.backends.cudnn.allow_tf32 is False
    assert torch.get_float32_matmul_precision() == "highest"
    setter("tf32")
    assert torch.backends.cuda.matmul.allow_tf32 is True
    assert torch.backends.cudnn.allow_tf32 is True
    setter("strict")


def test_accuracy_bound_in_skill_md_is_the_harness_bound():
    """The numbers SKILL.md gives for "clearly less accurate than fp32" are the harness's."""
    assert ev.PRECISION_FACTOR == 10.0 and ev.PRECISION_REL_FLOOR_EPS == 128.0
    assert "10 times" in SKILL and "128" in SKILL
    assert f"{ev.MIN_EXTENSION_SHARE:.0%}" in SKILL or "a quarter" in SKILL


def test_device_info_reports_sms_and_peaks_fields():
    info = ev.device_info(torch.device("cpu"))
    assert info["name"].startswith("cpu")
    src = (ROOT / "harness" / "baselines.py").read_text()
    for field in ("sms=", "peak_bandwidth_bytes_per_s=", "peak_fp32_flops="):
        assert field in src


def policy(code: str, tmp_path) -> list[dict]:
    p = tmp_path / "model_new.py"
    p.write_text(code)
    proc = subprocess.run([sys.executable, "-I", "-S", "-B", "-", str(p)],
                          input=policy_util.program(), capture_output=True, timeout=60)
    return json.loads(proc.stdout)["violations"]


def test_torch_compute_in_init_names_init_not_forward(tmp_path):
    vs = policy("import torch\nimport torch.nn as nn\nimport cuda_extension\n\n\n"
                "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                "        self.s = torch.sqrt(torch.tensor(2.0))\n\n"
                "    def forward(self, x):\n        return cuda_extension.f(x)\n", tmp_path)
    msgs = [v["message"] for v in vs if v["line"] == 9]
    assert msgs and "__init__" in msgs[0] and "ModelNew.forward calls only" not in msgs[0]


def test_nested_functions_and_import_allow_list_are_as_skill_md_says(tmp_path):
    vs = policy("import os\nimport torch\nimport torch.nn as nn\nimport cuda_extension\n\n\n"
                "class ModelNew(nn.Module):\n    def forward(self, x):\n"
                "        def h(t):\n            return cuda_extension.f(t)\n"
                "        return h(x)\n", tmp_path)
    rules = {v["rule"] for v in vs}
    assert "import" in rules and "structure" in rules
    for name in ("torch", "torch.nn", "cuda_extension", "math", "typing"):
        assert f"`{name}`" in SKILL
    assert "nested function" in SKILL


def test_forwards_are_timed_on_the_gpu_by_default(tmp_path):
    """SKILL.md: a forward's time is the GPU's (the lead hides the host's launch cost), for the
    baselines as for the candidate: the default method under SKILL.md's rules on CUDA is
    `device`; KernelBench's rules keep its own measure, and the CPU has only the wall clock."""
    assert "**GPU's time**" in SKILL and "spin kernel" in SKILL
    assert timing.default_mode("cuda-agent", "cuda") == "device"
    assert timing.default_mode("cuda-agent", "cuda:1") == "device"
    assert timing.default_mode("kernelbench", "cuda") == "events"
    assert timing.default_mode("cuda-agent", "cpu") == "events"
    for argv, want in (([], "device"), (["--rules", "kernelbench"], "events"),
                       (["--device", "cpu"], "events"), (["--timing", "kernel"], "kernel")):
        opts = ev.build_parser().parse_args(
            ["--task", str(tmp_path / "none.py"), "--candidate-dir", str(tmp_path),
             "--so", str(tmp_path / "x.so"), "--out", str(tmp_path / "out.json"), *argv])
        assert ev.run(opts) == 2  # no task file: a usage error, after the method is resolved
        assert opts.timing == want, argv
