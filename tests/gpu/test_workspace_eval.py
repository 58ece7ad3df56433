"""GPU tests of `cuda-agent eval WORKSPACE` end to end: the extension built by the evaluator's
own compile pool, run in its candidate process.

A binding whose CUDA call fails (the swish_scale_bias solution with a launch configuration
its launcher refuses) must fail verification as `cuda_error`, with the launcher's CUDA error
in the message: the C++ exception (TORCH_CHECK in CA_CHECK_CUDA) reaches Python through the
module's pybind11 bindings. Skipped, with the reason, where torch, a CUDA device, nvcc or
the cuda-agent binary is missing.
"""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: torch.cuda.is_available() is False", allow_module_level=True)

from ca_cli import SOLUTIONS, evaluate, missing, workspace  # noqa: E402

if missing():
    pytest.skip(missing(), allow_module_level=True)


def test_a_binding_that_raises_a_cuda_error_fails_as_cuda_error(tmp_path, gpu_cache):
    src = (SOLUTIONS / "swish_scale_bias" / "model_new.py").read_text()
    assert "self.kernel_config = 0" in src, "the swish_scale_bias solution changed"
    ws = workspace(tmp_path, "swish_scale_bias",
                   src.replace("self.kernel_config = 0", "self.kernel_config = 99"))
    rc, report = evaluate([ws], gpu_cache)
    failure = report["harness"]["failure"]
    assert rc == 1 and report["stage"] == "verify", report.get("message")
    assert failure["kind"] == "cuda_error", failure
    assert "cudaErrorInvalidValue" in failure["message"], failure
    assert "swish_scale_bias_launch" in failure["message"], failure
    assert report["reward"]["reward"] == -1, report["reward"]
