"""The verl recipe's stage 1 reward (integrations/verl/reward.py compute_score_single) against
a live `serve --http` with the CPU-mode evaluator: the fixture's reference solution as a
single-turn answer scores 1 (verify), garbage and answers without files -1."""

import pathlib
import sys

import pytest

pytest.importorskip("mcp")
REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "py"))
sys.path.insert(0, str(REPO / "integrations" / "verl"))
from test_serve import CPU, env, require_cpu_evaluator, server  # noqa: E402

FIXTURES = (env, server)  # test_serve's fixtures, used here
FILES = ["model_new.py", "kernels/swish_cpu.cu", "kernels/swish_cpu_binding.cpp"]


def test_single_turn_reward(server, monkeypatch):
    require_cpu_evaluator()
    import reward
    monkeypatch.setenv("CUDA_AGENT_SERVE_URL", server.url + "/mcp")
    monkeypatch.setenv("CUDA_AGENT_EVAL_STAGE", "verify")
    answer = "Here:\n" + "".join(f'<file path="{f}">\n{(CPU / "sol" / f).read_text()}</file>\n'
                                 for f in FILES)
    task = {"task": "task"}  # the fixture's name in list_tasks
    assert reward.compute_score_single("cuda-agent", answer, None, task) == 1.0
    broken = answer.replace("float(self.scale))", "2.0)")
    assert broken != answer
    assert reward.compute_score_single("cuda-agent", broken, None, task) == -1.0
    assert reward.compute_score_single("cuda-agent", "no files", None, task) == -1.0
    assert reward.compute_score_single("cuda-agent", answer, None, {}) == -1.0
    assert reward.compute_score_single("cuda-agent", answer, None, {"task": "nope"}) == -1.0
