"""GPU tests of legitimate but unusual KernelBench-format candidates (tests/legit/README.md).

Each is evaluated fully (policy, build, object check, verification, timing) against
examples/tasks/swish_scale_bias.py under the rule sets it names, and must be correct with a
reward >= 1: launches without a stream argument are ordered with the current stream (the
candidate's current stream synchronises with the legacy default stream), side streams joined
back and graphs captured on them are timed on every stream, and names shared with torch
operators or libc calls are notes. The zero-filled output is refused under the cuda-agent rules
by the symbol its object imports. Skipped, with the reason, without torch, a CUDA device, nvcc
or the binary. CA_ADV_TIMING (events, kernel or device) sets every evaluation's --timing, as
for the adversarial suite (tests/gpu/test_adversarial.py); default the evaluator's.
"""
import json
import os

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: torch.cuda.is_available() is False", allow_module_level=True)

from ca_cli import ROOT, TASKS, missing  # noqa: E402
import ca_cli  # noqa: E402

if missing():
    pytest.skip(missing(), allow_module_level=True)

LEGIT = ROOT / "tests" / "legit"
TASK = TASKS / "swish_scale_bias.py"
TIMING = ["--timing", os.environ["CA_ADV_TIMING"]] if os.environ.get("CA_ADV_TIMING") else []
CASES = [("name_collisions", "cuda-agent"), ("name_collisions", "kernelbench"),
         ("side_stream_graph", "cuda-agent"), ("side_stream_graph", "kernelbench"),
         ("zeros_default_stream", "kernelbench")]


@pytest.fixture(scope="module")
def cache(gpu_cache):
    """The session's compile cache (tests/gpu/conftest.py): the kernels are content-addressed."""
    return gpu_cache


@pytest.mark.parametrize("name,rules", CASES, ids=[f"{n}-{r}" for n, r in CASES])
def test_legit_candidate_passes(cache, name, rules):
    rc, report = ca_cli.evaluate(["--rules", rules, *TIMING, "--task", TASK, "--kernelbench-file",
                                  LEGIT / (name + ".py")], cache)
    detail = json.dumps({k: report.get(k) for k in ("stage", "message", "reward", "rules")},
                        indent=1)
    assert rc == 0 and report["ok"], detail
    assert report["rules"] == rules
    assert report["stage"] == "done", detail
    assert report["reward"]["reward"] >= 1, detail
    sets = report["harness"]["verification"]["sets"]
    assert sets and all(s["ok"] for s in sets), detail
    # The candidate's kernels did the work (launch evidence), on whatever stream they ran.
    launches = report["harness"]["verification"].get("launches") or {}
    assert launches.get("extension_kernels", 0) >= 1, json.dumps(launches)
    # An honest forward is timed as measured: the kernel floor (the GPU's busy time with the
    # forward's own work) never replaces its time.
    cand = report["harness"]["timing"]["candidate"]
    assert cand.get("basis") != "kernel-floor", json.dumps({"candidate": cand,
                                                            "launches": launches})
    assert not [f for f in report["harness"].get("flags") or []
                if f.get("kind") == "timing_below_kernel"], json.dumps(report["harness"]["flags"])
    # The timed-call check (where made) passed, under SKILL.md's rules its precision rule
    # included: an honest forward's timed call is as accurate as its verified sets.
    tc = report["harness"]["verification"].get("timed_check") or {}
    if "skipped" not in tc:
        assert tc.get("ok") is True, json.dumps(tc)
        assert rules != "cuda-agent" or all(p["ok"] for p in tc.get("precision") or []), \
            json.dumps(tc)


def test_zeros_output_is_refused_by_its_symbol_under_cuda_agent_rules(cache):
    rc, report = ca_cli.evaluate(["--task", TASK, "--kernelbench-file",
                                  LEGIT / "zeros_default_stream.py"], cache)
    assert rc == 1 and report["stage"] == "policy", report.get("message")
    assert any(v["rule"] == "torch-compute" and "zeros_like" in v["message"]
               for v in report["policy_so"]["violations"]), report["policy_so"]
