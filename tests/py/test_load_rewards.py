"""bench/load_rewards.py's plan (issue 21), with the evaluator service, the load clients and the
evaluations replaced by stand-ins: the measurement itself needs a GPU, but which evaluations it
makes, in which order and under which keys does not. With --timing events,device every repeat
is evaluated once in each mode through the same service, the modes taking turns, and each
(subject, mode) is reported on its own."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import load_rewards as L  # noqa: E402


class FakeService:
    def __init__(self, ca, out, args):
        self.sock = "fake.sock"
        self.cache = out / "cache"

    def wait(self, limit_s):
        return True

    def status(self):
        return {"cpus": {"isolated": True}}

    def stop(self):
        pass


class FakeLoad:
    started = 0

    def __init__(self, *args):
        self.done = {"ok": 5}

    def start(self):
        FakeLoad.started += 1

    def stop(self):
        pass


def stats(ms):
    return {"median_ms": ms, "cv": 0.01, "iqr_rel": 0.01, "noisy": False, "noise": [],
            "attempts": 1, "runq": 0.0, "busy_own": 0.5, "busy_other": 0.3, "error": None}


def run(monkeypatch, tmp_path, *argv):
    calls: list[tuple[str, str]] = []

    def evaluate(ca, sock, target, budget_ms, extra=(), timeout=600):
        mode = dict(zip(extra[::2], extra[1::2])).get("--timing")
        calls.append((target[0], mode))
        compile_ms = 0.027 if mode == "device" else 0.042
        return {"reward": 2 if mode == "device" else 3, "speedup_eager": 4.4,
                "speedup_compile": compile_ms / 0.027, "stage": "done", "flags": [],
                "at_risk": [], "candidate": stats(0.027), "eager": stats(0.118),
                "compile": stats(compile_ms), "wall_s": 0.1, "elapsed_ms": 100}

    monkeypatch.setattr(L, "Service", FakeService)
    monkeypatch.setattr(L, "Load", FakeLoad)
    monkeypatch.setattr(L, "make_subjects", lambda ca, work, names: {"kb-a": ["A"], "kb-b": ["B"]})
    monkeypatch.setattr(L, "evaluate", evaluate)
    monkeypatch.setattr(L.time, "sleep", lambda s: None)
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["load_rewards.py", "--bin", "ca", "--out", str(out), *argv])
    rc = L.main()
    return rc, calls, json.loads((out / "load_rewards.json").read_text())


def test_both_modes_take_turns_through_one_service(monkeypatch, tmp_path):
    rc, calls, res = run(monkeypatch, tmp_path, "--repeats", "3", "--timing", "events,device")
    assert rc == 0
    assert sorted(res["subjects"]) == ["kb-a@device", "kb-a@events", "kb-b@device", "kb-b@events"]
    for key, r in res["subjects"].items():
        assert len(r["idle"]) == 3 and len(r["load"]) == 3, key
        want = 2 if key.endswith("@device") else 3
        assert r["summary"]["idle"]["rewards"] == {str(want): 3}, key
    # Warm-up (both modes per subject), the probe, then for each subject the repeats with the
    # modes alternating: idle first, then under load.
    measured = calls[5:]
    assert measured[:6] == [("A", "events"), ("A", "device")] * 3
    assert measured[6:12] == [("B", "events"), ("B", "device")] * 3
    assert measured[12:] == [("A", "events"), ("A", "device")] * 3 + \
        [("B", "events"), ("B", "device")] * 3
    assert sorted(calls[:4]) == [("A", "device"), ("A", "events"), ("B", "device"),
                                 ("B", "events")]
    assert calls[4] == ("A", "events")  # the probe that sizes the plan


def test_one_mode_keeps_plain_subject_keys(monkeypatch, tmp_path):
    rc, calls, res = run(monkeypatch, tmp_path, "--repeats", "2", "--timing", "device")
    assert rc == 0
    assert sorted(res["subjects"]) == ["kb-a", "kb-b"]
    assert {m for _, m in calls} == {"device"}


@pytest.mark.parametrize("bad", ["kernel", "events,events", "events,", "cuda"])
def test_a_timing_list_it_cannot_run_is_a_usage_error(monkeypatch, tmp_path, bad):
    with pytest.raises(SystemExit) as e:
        run(monkeypatch, tmp_path, "--timing", bad)
    assert e.value.code == 2
