"""GPU tests of `cuda-agent eval --task T --kernelbench-file F` on examples/kernelbench/.

Each KernelBench-format example (ModelNew + load_inline, with the kernels of the matching
examples/solutions/ entry) is evaluated by the CLI against its task: the evaluator extracts the
load_inline sources, builds them in its own compile pool (the cuda source as a "cu-torch" unit),
verifies and times the candidate, and must give reward >= 1. A second evaluation must take every
object and the module from the cache; a variant with a wrong kernel must fail verification.
Skipped, with the reason, where torch, a CUDA device, nvcc or the cuda-agent binary is missing.
"""

import json
import pathlib

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: torch.cuda.is_available() is False", allow_module_level=True)

from ca_cli import ROOT, TASKS, missing  # noqa: E402
import ca_cli  # noqa: E402

if missing():
    pytest.skip(missing(), allow_module_level=True)

EXAMPLES = sorted((ROOT / "examples" / "kernelbench").glob("*.py"))


def evaluate(path: pathlib.Path, cache: pathlib.Path, *extra) -> tuple[int, dict]:
    return ca_cli.evaluate(["--task", TASKS / (path.stem + ".py"), "--kernelbench-file", path,
                            *extra], cache)


def test_examples_exist():
    assert {p.stem for p in EXAMPLES} >= {"swish_scale_bias", "softmax_last_dim"}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_earns_a_reward(gpu_cache, path):
    rc, report = evaluate(path, gpu_cache)
    detail = json.dumps({k: report.get(k) for k in ("stage", "message", "reward", "stage_ms")},
                        indent=1)
    assert rc == 0 and report["ok"], detail
    assert report["stage"] == "done", detail
    assert report["reward"]["reward"] >= 1, detail
    kb = report["kernelbench"]
    assert kb["file"] == str(path) and kb["functions"] == [path.stem]
    roles = {u["name"]: u["role"] for u in report["compile"]["units"]}
    assert roles["kernels/kb_%s.cu" % kb["name"]] == "cu-torch", roles
    assert roles["kernels/kb_%s_binding.cpp" % kb["name"]] == "binding", roles
    print("%s: first %.1f s (compile %.1f s), reward %d" % (
        path.stem, report["elapsed_ms"] / 1e3, report["stage_ms"]["compile"] / 1e3,
        report["reward"]["reward"]))

    # Nothing changed: every object and the module come from the cache.
    rc, again = evaluate(path, gpu_cache, "--verify-only")
    assert rc == 0 and again["ok"], again.get("message")
    assert all(u["cached"] for u in again["compile"]["units"]), again["compile"]["units"]
    assert again["compile"]["link"]["cached"]


def test_wrong_kernel_fails_verification(tmp_path, gpu_cache):
    path = ROOT / "examples" / "kernelbench" / "swish_scale_bias.py"
    bad = tmp_path / "swish_scale_bias.py"
    text = path.read_text()
    assert "* scale + b;" in text
    bad.write_text(text.replace("* scale + b;", "* scale + b + 1.0f;"))
    rc, report = evaluate(bad, gpu_cache, "--verify-only")
    assert rc == 1 and not report["ok"]
    assert report["stage"] == "verify", report.get("message")
