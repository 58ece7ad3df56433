"""What SKILL.md states about the evaluator, checked on a GPU (issue 18); skipped without one.

    python3 -m pytest -q tests/gpu/test_skill_facts.py

- cuBLAS and cuDNN kernels launched from a binding count as the extension's GPU time (rule 10);
- scratch buffers allocated with torch::empty (a cuDNN workspace) and a per-shape plan kept
  across calls are accepted;
- a cuDNN convolution left at CUDNN_DEFAULT_MATH (TF32 allowed) fails verify as reduced
  precision under strict precision (the default);
- the report names the GPU the evaluator ran on, with its SM count and peak rates.

The three cases are adversarial cases (tests/adversarial/gpu/), evaluated through the
session's evaluator service (conftest.py's `adv_results`): run beside test_adversarial.py, as
tests/gpu/run.sh does, each is evaluated once for both files.
"""
import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)

import adversarial_gpu as adv  # noqa: E402

if not adv.binary().is_file():
    pytest.skip(f"cuda-agent is not built ({adv.binary()}): run make, or set CA_BIN",
                allow_module_level=True)

CASES = ("legit_cublas_linear_gelu", "legit_cudnn_conv_relu", "cudnn_default_math")
pytestmark = pytest.mark.adv_cases(*CASES)


@pytest.fixture
def report_of(adv_results):
    """report_of(case name): that case's report from the session's evaluations."""
    def get(name: str) -> dict:
        r = adv_results[name]
        assert r["report"] is not None, f"{name}: {r['error']}"
        return r["report"]
    return get


def launches(report: dict) -> dict:
    return ((report.get("harness") or {}).get("verification") or {}).get("launches") or {}


def test_library_kernels_count_as_the_extensions_time(report_of):
    report = report_of("legit_cublas_linear_gelu")
    assert adv.reward_of(report) >= 1, adv.verdict(report)
    ev = launches(report)
    assert ev.get("total_us", 0) > 0, ev
    assert ev["extension_us"] / ev["total_us"] > 0.9, ev
    inside = [t["name"] for t in ev.get("top", []) if t.get("in_extension")]
    assert any("gemm" in n.lower() for n in inside), inside


def test_scratch_from_torch_empty_and_a_cached_plan_are_accepted(report_of):
    report = report_of("legit_cudnn_conv_relu")
    assert adv.reward_of(report) >= 1, adv.verdict(report)
    ev = launches(report)
    assert ev["extension_us"] / ev["total_us"] > 0.9, ev


def test_cudnn_default_math_fails_strict_precision_at_verify(report_of):
    report = report_of("cudnn_default_math")
    assert adv.reward_of(report) == -1, adv.verdict(report)
    assert report.get("stage") == "verify", adv.verdict(report)
    assert adv.failure_of(report).get("kind") == "precision", adv.verdict(report)


def test_report_names_the_gpu_with_its_sms_and_peaks(report_of):
    report = report_of("legit_cublas_linear_gelu")
    dev = (report.get("harness") or {}).get("device") or {}
    assert dev.get("name") and dev.get("sms", 0) > 0, dev
    assert dev.get("peak_bandwidth_bytes_per_s", 0) > 0, dev
    assert dev.get("peak_fp32_flops", 0) > 0, dev
