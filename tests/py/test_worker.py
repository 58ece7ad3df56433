"""Tests of harness/worker.py, the long-lived trusted runner, in CPU mode: one worker process
serves several jobs in a row with pre-warmed candidates, keeps serving after a candidate
crashes or hangs, answers bad requests with an error instead of dying, and keeps what task
code prints out of its reply channel. Skipped, with the reason, without PyTorch."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed")

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORKER = ROOT / "harness" / "worker.py"
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from test_harness import EXT, TASK, model_new, sandbox_args  # noqa: E402


class Worker:
    def __init__(self, tmp: pathlib.Path, prewarm: int = 1, env=None, args=()):
        env = dict(os.environ, CUDA_AGENT_HARNESS_TESTING="1", **(env or {}))
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), "--device", "cpu", "--prewarm", str(prewarm),
             "--tmp-dir", str(tmp), *sandbox_args(), *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env)
        self.hello = self.read()

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        assert line, f"worker ended: {self.proc.stderr.read()[-3000:]}"
        return json.loads(line)

    def send(self, obj) -> dict:
        self.proc.stdin.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self) -> int:
        self.proc.stdin.close()
        rc = self.proc.wait(timeout=60)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return rc


@pytest.fixture
def worker(tmp_path):
    (tmp_path / "cands").mkdir()
    w = Worker(tmp_path / "cands")
    yield w
    if w.proc.poll() is None:
        w.proc.kill()
        w.proc.wait()


def job(tmp: pathlib.Path, name: str, new: str, task: str = TASK, extra=()) -> tuple[list, pathlib.Path]:
    d = tmp / name
    (d / "cand").mkdir(parents=True)
    (d / "task.py").write_text(task)
    (d / "cand" / "model_new.py").write_text(new)
    (d / "ext.py").write_text(EXT)
    out = d / "result.json"
    argv = ["--task", str(d / "task.py"), "--candidate-dir", str(d / "cand"), "--ext-module",
            str(d / "ext.py"), "--device", "cpu", "--budget-ms", "50", "--no-compile",
            "--quiet", "--out", str(out), *sandbox_args(), *extra]
    return argv, out


def test_serves_jobs_in_a_row_with_prewarmed_candidates(worker, tmp_path):
    assert worker.hello["ready"] is True and worker.hello["device"] == "cpu"
    for i in range(3):
        argv, out = job(tmp_path, f"ok{i}", model_new())
        r = worker.send({"id": i, "argv": argv})
        assert r["id"] == i and r["rc"] == 0, (r, out.read_text() if out.exists() else None)
        res = json.loads(out.read_text())
        assert res["ok"] is True and res["stage"] == "done"
        assert res["candidate"]["prewarmed"] is True
        # From the second job on, the sets were drawn while the worker waited.
        assert res["verification"]["sets_prefetched"] is (i > 0)
        assert res["timing"]["candidate"]["median_ms"] > 0
    assert worker.close() == 0
    assert list((tmp_path / "cands").iterdir()) == []  # every candidate directory removed


def test_keeps_serving_after_a_crash_and_a_hang(worker, tmp_path):
    crash = model_new("import os\nos._exit(7)")
    argv, out = job(tmp_path, "crash", crash)
    assert worker.send({"id": "c", "argv": argv})["rc"] == 1
    res = json.loads(out.read_text())
    assert res["failure"]["kind"] == "crash" and "status 7" in res["failure"]["message"]

    hang = model_new("import time\ntime.sleep(600)")
    argv, out = job(tmp_path, "hang", hang, extra=["--timeout", "3"])
    assert worker.send({"id": "h", "argv": argv})["rc"] == 1
    assert json.loads(out.read_text())["failure"]["kind"] == "timeout"

    wrong = model_new("return cuda_extension.affine(x, self.weight, self.bias, self.scale) + 1")
    argv, out = job(tmp_path, "wrong", wrong)
    assert worker.send({"id": "w", "argv": argv})["rc"] == 1
    assert json.loads(out.read_text())["failure"]["kind"] == "mismatch"

    argv, out = job(tmp_path, "ok", model_new())
    assert worker.send({"id": "ok", "argv": argv})["rc"] == 0


def test_bad_requests_get_an_error_reply(worker, tmp_path):
    assert worker.send("not json")["rc"] == 2
    assert worker.send({"argv": "no list"})["rc"] == 2
    r = worker.send({"id": 5, "argv": ["--no-such-option"]})
    assert r["id"] == 5 and r["rc"] == 2 and "arguments" in r["error"]
    argv, out = job(tmp_path, "after", model_new())
    assert worker.send({"id": 6, "argv": argv})["rc"] == 0


def test_task_output_never_reaches_the_reply_channel(worker, tmp_path):
    noisy = TASK.replace("def get_inputs():", "print('{\"id\": 99, \"rc\": 0}')\n\n"
                                              "def get_inputs():")
    argv, out = job(tmp_path, "noisy", model_new(), task=noisy)
    r = worker.send({"id": 1, "argv": argv})
    assert r["id"] == 1 and r["rc"] == 0


def test_usage_errors():
    r = subprocess.run([sys.executable, str(WORKER), "--prewarm", "-1"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "--prewarm" in r.stderr


def test_prefetched_sets_are_not_reused_for_another_task(worker, tmp_path):
    argv, out = job(tmp_path, "a", model_new())
    assert worker.send({"id": 1, "argv": argv})["rc"] == 0
    other = TASK.replace("torch.randn(16, 37)", "torch.randn(8, 37)")
    argv, out = job(tmp_path, "b", model_new(), task=other)
    assert worker.send({"id": 2, "argv": argv})["rc"] == 0
    res = json.loads(out.read_text())
    assert res["verification"]["sets_prefetched"] is False
    assert res["verification"]["sets"][0]["outputs"][0]["shape"] == [8, 37]


def test_runner_times_on_its_cores_warms_candidates_off_them_and_signals_timing(tmp_path):
    """Issue 21: the runner on CUDA_AGENT_TIMING_CPUS, waiting candidates on
    CUDA_AGENT_AUX_CPUS, the candidate that takes a job moved onto the timing cores, and the
    timed sections announced before the reply."""
    import time

    sys.path.insert(0, str(ROOT / "harness"))
    import cpus

    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("this process may run on one CPU only")
    timing_cpu, aux_cpu = allowed[-1], allowed[0]
    (tmp_path / "cands").mkdir()
    w = Worker(tmp_path / "cands", env={"CUDA_AGENT_TIMING_CPUS": str(timing_cpu),
                                        "CUDA_AGENT_AUX_CPUS": str(aux_cpu)},
               args=["--timing-signals"])
    try:
        assert w.hello["ready"] is True and w.hello["timing_cpus"] == str(timing_cpu), w.hello
        assert cpus.allowed_list(w.proc.pid) == str(timing_cpu)
        waiting = []
        for _ in range(100):  # the pre-warmed candidate is started right after the greeting
            waiting = [p for p in cpus.descendants(w.proc.pid) if p != w.proc.pid]
            if waiting:
                break
            time.sleep(0.05)
        assert waiting and all(cpus.allowed_list(p) == str(aux_cpu) for p in waiting), waiting
        # Written into the candidate's scratch directory (its only writable place in the
        # sandbox), kept with --keep-temp.
        body = ("open(os.path.join(os.environ['TMPDIR'], 'affinity.txt'), 'w')"
                ".write(str(sorted(os.sched_getaffinity(0))))\n"
                "return cuda_extension.affine(x, self.weight, self.bias, self.scale)")
        argv, out = job(tmp_path, "placed", model_new(body, header="import os\n"),
                        extra=["--keep-temp"])
        w.proc.stdin.write(json.dumps({"id": 7, "argv": argv}) + "\n")
        w.proc.stdin.flush()
        lines = []
        while True:
            msg = w.read()
            if "id" in msg:
                break
            lines.append(msg)
        assert msg["rc"] == 0, (msg, out.read_text() if out.exists() else None)
        # The candidate's timing, then eager's (this job has no torch.compile baseline).
        assert lines == [{"timing": True}, {"timing": False}] * 2, lines
        (seen,) = (tmp_path / "cands").glob("cuda-agent-cand-*/scratch/affinity.txt")
        assert seen.read_text() == str([timing_cpu])
        r = json.loads(out.read_text())
        assert r["timing"]["candidate"]["host"]["own_cpus"] == str(timing_cpu)
        assert r["timing"]["eager"]["host"]["own_cpus"] == str(timing_cpu)
    finally:
        w.close()
