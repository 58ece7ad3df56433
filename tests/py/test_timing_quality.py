"""Tests of measurements that know their own quality (issue 21), CPU only: the spread fields of
summarize, noise_reasons, the repeat-while-noisy loop (fake attempts), the scheduler counters
around a measurement, host load from fake /proc files, the timing window hook, clean-only
baseline caching (fake measurements), the noisy_timing flag, and the fields in a real
evaluation's result. Skipped, with the reason, without PyTorch."""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time
import types

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from harness_case import ev, evaluate  # noqa: E402
import quality  # noqa: E402  (harness/, on the path through harness_case)
import timing  # noqa: E402


def stats(median=1.0, iqr_rel=0.005, cv=0.01, runq=0.0, **kw):
    s = {"median_ms": median, "mean_ms": median, "cv": cv, "iqr_rel": iqr_rel,
         "p25_ms": median * (1 - iqr_rel / 2), "p75_ms": median * (1 + iqr_rel / 2), "n": 100,
         "warmup_n": 3, "sched": {"runq_wait_fraction": runq}}
    s.update(kw)
    return s


# -- the spread and the verdict --------------------------------------------------------------


def test_summarize_reports_quartiles_and_relative_iqr():
    s = timing.summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert s["p25_ms"] == 2.0 and s["p75_ms"] == 4.0
    assert s["iqr_ms"] == 2.0 and s["iqr_rel"] == pytest.approx(2.0 / 3.0)
    empty = timing.summarize([])
    assert empty["iqr_rel"] is None and empty["p25_ms"] is None


def test_noise_reasons_name_each_threshold():
    assert timing.noise_reasons(stats()) == []
    assert timing.noise_reasons(stats(iqr_rel=timing.NOISY_IQR_REL * 1.5)) == ["iqr"]
    assert timing.noise_reasons(stats(cv=timing.NOISY_CV * 2)) == ["cv"]
    assert timing.noise_reasons(stats(runq=timing.NOISY_RUNQ_FRACTION * 3)) == ["run_queue"]
    assert timing.noise_reasons(stats(iqr_rel=0.5, cv=0.5)) == ["iqr", "cv"]
    assert timing.noise_reasons({"median_ms": None}) == ["no_data"]
    # Fields /proc could not give (None) are not noise.
    assert timing.noise_reasons(stats(sched={"runq_wait_fraction": None})) == []


def test_the_device_modes_lead_and_its_shortfall():
    # The lead spin covers the host side of a call with a margin, within bounds.
    assert timing.lead_length_ms([]) == timing.LEAD_MIN_MS
    # The 90th percentile sizes it: not the fastest calls (it once took the 0.9th percentile,
    # which a spiky host side outlasted), nor the few outliers.
    host = [0.030] * 15 + [0.500] * 5 + [0.010] * 80
    assert timing.lead_length_ms(host) == pytest.approx(
        timing.LEAD_MIN_MS + timing.LEAD_FACTOR * 0.030)
    assert timing.lead_stats(timing.lead_length_ms(host), host)["lead_short_fraction"] == 0.05
    assert timing.lead_length_ms([1e6]) == timing.LEAD_MAX_MS
    got = timing.lead_stats(0.05, [0.01, 0.02, 0.08, 0.03])
    assert got["lead_ms"] == 0.05 and got["lead_short_fraction"] == 0.25
    assert got["host_median_ms"] == pytest.approx(0.025)
    # A share of calls whose host side outlasted the lead makes the attempt noisy.
    ok = stats(lead_short_fraction=timing.LEAD_SHORT_FRACTION / 2)
    assert timing.noise_reasons(ok) == []
    short = stats(lead_short_fraction=timing.LEAD_SHORT_FRACTION * 2)
    assert timing.noise_reasons(short) == ["lead_short"]
    # The candidate's report keeps the fields (numbers only) and the verdict is recomputed.
    kept = ev.validate_stats(dict(short, lead_ms=0.07, host_median_ms=0.02, noisy=False,
                                  method="device"))
    assert kept["lead_short_fraction"] == short["lead_short_fraction"]
    assert kept["lead_ms"] == 0.07 and kept["method"] == "device"
    assert kept["noisy"] and kept["noise"] == ["lead_short"]
    with pytest.raises(ValueError, match="events, kernel, device"):
        timing.measure(lambda: None, list, "cpu", 1.0, "bogus")


@pytest.fixture
def quiet_sched(monkeypatch):
    """The scheduler counters of an idle host: fake attempts take microseconds, and a real
    run-queue wait of this shared machine over such a window would be noise of the test's."""
    monkeypatch.setattr(timing, "_sched_sample", lambda: (0.0, 0))


def fake_attempts(seq):
    it = iter(seq)
    calls = []

    def attempt():
        calls.append(1)
        return dict(next(it))
    return attempt, calls


def test_a_noisy_attempt_is_repeated_until_clean(quiet_sched):
    attempt, calls = fake_attempts([stats(median=2.0, iqr_rel=0.30), stats(median=1.5, cv=0.5),
                                    stats(median=1.01), stats(median=9.0)])
    r = timing.repeat_while_noisy(attempt, max_attempts=3)
    assert len(calls) == 3
    assert r["median_ms"] == 1.01 and r["attempt"] == 2 and r["noisy"] is False
    assert [a["noise"] for a in r["attempts"]] == [["iqr"], ["cv"], []]
    assert [a["median_ms"] for a in r["attempts"]] == [2.0, 1.5, 1.01]


def test_a_clean_first_attempt_is_not_repeated(quiet_sched):
    attempt, calls = fake_attempts([stats(median=1.0), stats(median=5.0)])
    r = timing.repeat_while_noisy(attempt)
    assert len(calls) == 1 and r["noisy"] is False and len(r["attempts"]) == 1


def test_repeats_are_bounded_and_keep_the_least_spread_not_the_fastest(quiet_sched):
    attempt, calls = fake_attempts([stats(median=1.0, iqr_rel=0.20),
                                    stats(median=3.0, iqr_rel=0.05),
                                    stats(median=0.5, iqr_rel=0.40), stats()])
    r = timing.repeat_while_noisy(attempt, max_attempts=3)
    assert len(calls) == 3  # the 4th (clean) one is never run
    assert r["median_ms"] == 3.0 and r["attempt"] == 1
    assert r["noisy"] is True and r["noise"] == ["iqr"]
    one, calls1 = fake_attempts([stats(iqr_rel=0.5), stats()])
    assert timing.repeat_while_noisy(one, max_attempts=1)["noisy"] is True and len(calls1) == 1


def test_measure_cpu_repeats_a_noisy_function_and_counts_every_call():
    calls = []

    def jittery(x):  # alternating 1 ms and 4 ms calls: an interquartile range of ~3 ms
        calls.append(1)
        time.sleep(0.001 if len(calls) % 2 else 0.004)

    r = timing.measure(jittery, lambda: [1], "cpu", budget_ms=60, max_attempts=2)
    assert r["noisy"] is True and "iqr" in r["noise"]
    assert len(r["attempts"]) == 2
    assert len(calls) == sum(a["n"] + a["warmup_n"] for a in r["attempts"])
    assert set(r["sched"]) == {"runq_wait_ms", "runq_wait_fraction", "preempted", "wall_ms"}


@pytest.mark.skipif(not os.path.exists("/proc/thread-self/schedstat"),
                    reason="no /proc/thread-self/schedstat on this kernel")
def test_scheduler_counters_are_read_around_a_measurement():
    r = timing.measure(lambda x: sum(range(2000)), lambda: [1], "cpu", budget_ms=30,
                       max_attempts=1)
    sch = r["sched"]
    assert sch["runq_wait_ms"] is not None and sch["runq_wait_ms"] >= 0
    # The counters span the whole measurement: at least the timed calls themselves (how many
    # there are follows the warm-up's cost, so a busy host times fewer: no fixed floor).
    assert 0 <= sch["runq_wait_fraction"] <= 1
    assert sch["wall_ms"] >= r["n"] * r["min_ms"] > 0
    # The delta arithmetic itself.
    d = timing._sched_delta((1e6, 3), (6e6, 10), 50.0)
    assert d == {"runq_wait_ms": 5.0, "runq_wait_fraction": 0.1, "preempted": 7,
                 "wall_ms": 50.0}
    assert timing.noise_reasons(stats(sched=d)) == ["run_queue"]


# -- host load and the timing window ---------------------------------------------------------


def write_stat(path, rows):
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
    for i, (busy, idle) in enumerate(rows):
        lines.append(f"cpu{i} {busy} 0 0 {idle} 0 0 0 0 0 0")
    path.write_text("\n".join(lines) + "\nintr 1 2\n")


def test_host_load_splits_own_and_other_cpus(tmp_path):
    st, la = tmp_path / "stat", tmp_path / "loadavg"
    write_stat(st, [(100, 100), (100, 100), (100, 100), (100, 100)])
    la.write_text("0.50 0.4 0.3 1/100 42\n")
    a = quality.host_sample(str(st), str(la))
    # cpu0: 10 busy of 100; cpu1: 90 of 100 (own); cpu2, cpu3: all busy (others).
    write_stat(st, [(110, 190), (190, 110), (200, 100), (200, 100)])
    la.write_text("7.25 0.4 0.3 1/100 42\n")
    b = quality.host_sample(str(st), str(la))
    load = quality.host_load(a, b, own={0, 1})
    assert load["busy_own"] == pytest.approx(0.5) and load["busy_other"] == pytest.approx(1.0)
    assert load["own_cpus"] == "0-1" and load["other_cpus"] == "2-3"
    assert load["loadavg_1m"] == 7.25
    assert quality.host_load(a, b, own={0, 1, 2, 3})["busy_other"] is None
    assert quality.host_sample(str(tmp_path / "missing"))["cpus"] == {}
    assert quality.cpu_list({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"


def test_the_window_tells_the_hook_once_and_measures_the_host():
    seen = []
    w = quality.Window(seen.append, "candidate").open()
    assert seen == [True]
    load = w.close()
    assert w.close() is load and seen == [True, False]  # closed once
    assert set(load) >= {"busy_own", "busy_other", "loadavg_1m", "own_cpus", "window_s"}
    r = quality.measured(seen.append, "eager", lambda: {"median_ms": 1.0})
    assert seen == [True, False, True, False] and "host" in r


# -- the candidate's numbers, caching, flags -------------------------------------------------


def test_the_candidates_own_verdict_is_not_trusted():
    claimed = stats(iqr_rel=0.4, noisy=False, noise=[], attempts=[
        {"median_ms": 1.0, "iqr_rel": 0.4, "noise": ["iqr", "rm -rf"], "n": 5}] * 50)
    out = ev.validate_stats(claimed)
    assert out["noisy"] is True and out["noise"] == ["iqr"]
    assert len(out["attempts"]) == 10 and out["attempts"][0]["noise"] == ["iqr"]
    assert ev.validate_stats(stats())["noisy"] is False


def test_only_clean_baselines_are_cached(tmp_path, monkeypatch):
    queue = [stats(median=2.0, iqr_rel=0.3), stats(median=1.0)]  # eager noisy, then clean
    measured = []

    def fake_measure(fn, make_inputs, device, budget_ms, mode):
        measured.append(1)
        return dict(queue.pop(0))

    monkeypatch.setattr(timing, "measure", fake_measure)
    hooks = []
    opts = types.SimpleNamespace(baseline_cache=str(tmp_path / "cache"), no_compile=True,
                                 precision="strict", budget_ms=10.0, timing="events",
                                 timing_hook=hooks.append)
    model = torch.nn.Identity()
    s = types.SimpleNamespace(orig=[torch.ones(4)])
    key = {"task": "t"}
    log = lambda *_: None  # noqa: E731

    base, hit = ev.measure_baselines(opts, model, s, torch.device("cpu"), key, log)
    assert not hit and base["eager"]["noisy"] is True and base["eager"]["host"] is not None
    assert hooks == [True, False]
    path = ev.baseline_cache_path(opts.baseline_cache, key)
    entry = json.loads(pathlib.Path(path).read_text())
    assert "eager" not in entry and "flops" in entry  # the FLOPs, never the noisy timing

    base, hit = ev.measure_baselines(opts, model, s, torch.device("cpu"), key, log)
    assert not hit and base["eager"]["median_ms"] == 1.0 and base["eager"]["noisy"] is False
    assert json.loads(pathlib.Path(path).read_text())["eager"]["median_ms"] == 1.0

    base, hit = ev.measure_baselines(opts, model, s, torch.device("cpu"), key, log)
    assert hit and base["eager"]["median_ms"] == 1.0 and len(measured) == 2


def test_cacheable():
    assert quality.cacheable("eager", stats()) is True
    assert quality.cacheable("eager", stats(runq=0.5)) is False
    assert quality.cacheable("compile", {"error": "torch.compile failed"}) is True
    assert quality.cacheable("flops", {"flops": None}) is True


def test_noisy_timing_flag_says_which_subject_and_whether_the_decision_is_at_risk():
    clean = {"candidate": stats(1.0), "eager": stats(2.0), "compile": stats(0.5)}
    assert quality.noise_flag(clean) is None
    # The candidate's spread (0.8..1.2 ms) puts eager (1.1 ms) across the 1.05 threshold; the
    # torch.compile baseline (5 ms) is far from it.
    block = {"candidate": stats(1.0, iqr_rel=0.4), "eager": stats(1.1),
             "compile": stats(5.0)}
    flag = quality.noise_flag(block)
    assert flag["kind"] == "noisy_timing" and flag["subjects"] == {"candidate": ["iqr"]}
    assert flag["decision_at_risk"] == ["eager"]
    assert "eager decision is within the noise" in flag["message"]
    far = quality.noise_flag({"candidate": stats(1.0), "eager": stats(3.0, cv=0.9),
                              "compile": {"error": "x"}})
    assert far["subjects"] == {"eager": ["cv"]} and far["decision_at_risk"] == []


def test_an_evaluation_reports_quality_and_host_load(tmp_path):
    run = evaluate(tmp_path, args=["--budget-ms", "30"])
    assert run.rc == 0, run
    t = run.result["timing"]
    for name in ("candidate", "eager", "compile"):
        s = t[name]
        if name == "compile" and (s is None or "error" in s):
            continue  # the helper runs with --no-compile
        assert {"iqr_rel", "p25_ms", "p75_ms", "attempts", "noisy", "noise", "sched",
                "host"} <= set(s), (name, s)
        assert 1 <= len(s["attempts"]) <= timing.MAX_ATTEMPTS
        assert s["noisy"] == bool(timing.noise_reasons(s))
        assert s["host"]["window_s"] >= 0
    noisy = [f for f in run.result["flags"] if f["kind"] == "noisy_timing"]
    assert bool(noisy) == any(t[n].get("noisy") for n in ("candidate", "eager", "compile")
                              if isinstance(t[n], dict))
