"""End-to-end tests of harness/evaluate.py and harness/candidate.py in CPU mode (the task,
candidate and runner they share are in harness_case.py; the timing method called directly is
in test_timing_method.py). Skipped, with the reason, where PyTorch is not installed.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import sysconfig
import textwrap
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from harness_case import (EXT, EXT_16_ROWS, FEATURED_TASK, ROOT, SHAPED_TASK, TASK,  # noqa: E402
                          assert_failed, ev, evaluate,
                          kept_scratch, model_new, sandbox_args)
import timing  # noqa: E402  (harness/, on the path through harness_case)

torch = pytest.importorskip("torch", reason="PyTorch is not installed")


# -- passing candidates -------------------------------------------------------------------


def test_correct_candidate_passes_and_is_timed(tmp_path):
    run = evaluate(tmp_path, subprocess_cli=True)
    assert run.rc == 0, run
    r = run.result
    assert r["ok"] is True and r["stage"] == "done" and r["failure"] is None, run
    assert r["schema"] == 1
    v = r["verification"]
    # The value-stress set and, the task declaring no EXTRA_SHAPES, one derived shape (its
    # literal 16 rows sliced) follow (tests/py/test_input_sets.py tests them).
    assert [s["kind"] for s in v["sets"]] == ["random"] * 5 + ["adversarial", "value-stress",
                                                               "derived-shape"], run
    assert [s["seed_index"] for s in v["sets"]] == list(range(8))
    assert all(s["ok"] and s["mismatches"] == 0 for s in v["sets"]), run
    assert v["atol"] == 0.01 and v["rtol"] == 0.01 and v["precision"] == "strict"
    assert v["precision_observed"] == "fp32", run
    assert v["fp64_reference"] is True
    t = r["timing"]
    for subject in ("eager", "candidate"):
        stats = t[subject]
        assert stats["method"] == "wall", run
        assert stats["n"] >= 10 and stats["median_ms"] > 0, run
        assert stats["cv"] is not None and stats["cv"] >= 0
        assert stats["min_ms"] <= stats["p10_ms"] <= stats["median_ms"] <= stats["p90_ms"]
    assert t["compile"] is None and t["baseline_cached"] is False
    assert t["speedup_vs_eager"] > 0
    assert t["sol"]["sol_ms"] is None  # no bandwidth figure for a CPU
    assert r["device"]["type"] == "cpu" and r["device"]["torch"] == torch.__version__
    assert r["candidate"]["exit_code"] == 0
    assert r["elapsed_s"]["total"] > 0
    # No secret seed anywhere in the result.
    assert "seed" not in json.dumps(r).replace("seed_index", "")


def test_progress_only_on_stdout(tmp_path):
    run = evaluate(tmp_path, args=["--no-timing"], subprocess_cli=True)
    assert run.rc == 0, run
    assert all(line.startswith("evaluate: ") for line in run.stdout.splitlines()), run
    assert run.result["timing"] is None and run.result["stage"] == "done"
    quiet = evaluate(tmp_path, args=["--no-timing", "--quiet"], subprocess_cli=True)
    assert quiet.rc == 0 and quiet.stdout == "", quiet


def test_nan_in_matching_positions_passes(tmp_path):
    task = TASK.replace("return torch.tanh(x * self.weight) * self.scale + self.bias",
                        "return torch.log(x) * self.scale + self.bias")
    ext = "import torch\n\ndef affine(x, w, b, scale):\n    return torch.log(x) * scale + b\n"
    run = evaluate(tmp_path, task=task, ext=ext, args=["--no-timing"])
    assert run.rc == 0, run  # log of negative inputs: NaN on both sides, same places


def test_seeds_option_and_no_adversarial(tmp_path):
    run = evaluate(tmp_path, args=["--seeds", "2", "--adversarial-sets", "0", "--no-timing",
                                   "--value-stress", "0", "--derived-shapes", "0"])
    assert run.rc == 0, run
    assert [s["kind"] for s in run.result["verification"]["sets"]] == ["random", "random"]


# -- wrong values -------------------------------------------------------------------------


def test_wrong_values_fail_with_first_mismatches(tmp_path):
    body = "return cuda_extension.affine(x, self.weight, self.bias, self.scale * 1.1)"
    run = evaluate(tmp_path, new=model_new(body))
    assert_failed(run, "mismatch")
    sets = run.result["verification"]["sets"]
    bad = sets[-1]
    assert bad["ok"] is False and bad["seed_index"] == 0 and bad["mismatches"] > 0, run
    firsts = bad["first_mismatches"]
    assert 1 <= len(firsts) <= 5, run
    for m in firsts:
        assert len(m["index"]) == 2 and m["output"] == 0
        assert isinstance(m["got"], float) and isinstance(m["expected"], float)
        assert m["abs_diff"] == pytest.approx(abs(m["got"] - m["expected"]))
        assert m["abs_diff"] > 0.01 + 0.01 * abs(m["expected"])
    assert bad["max_abs_diff"] >= max(m["abs_diff"] for m in firsts)
    assert "first at output 0 index" in run.failure["message"]
    assert run.result["timing"] is None  # wrong candidates are not timed


def test_nan_position_mismatch_fails(tmp_path):
    body = """
    out = cuda_extension.affine(x, self.weight, self.bias, self.scale)
    out[3, 5] = float("nan")
    return out
    """
    run = evaluate(tmp_path, new=model_new(body))
    assert_failed(run, "mismatch")
    bad = run.result["verification"]["sets"][-1]
    assert bad["mismatches"] == 1, run
    assert bad["outputs"][0]["nonfinite_mismatches"] == 1
    first = bad["first_mismatches"][0]
    assert first["index"] == [3, 5] and first["got"] == "nan" and first["abs_diff"] is None
    assert "NaN/Inf" in run.failure["message"]


def test_inf_sign_mismatch_fails(tmp_path):
    task = TASK.replace("return torch.tanh(x * self.weight) * self.scale + self.bias",
                        "return 1.0 / (x * 0.0) + self.bias")  # +-inf, NaN where x is 0
    ext = "import torch\n\ndef affine(x, w, b, scale):\n    return (1.0 / (x * 0.0)).abs() + b\n"
    run = evaluate(tmp_path, task=task, ext=ext)
    assert_failed(run, "mismatch")
    assert run.result["verification"]["sets"][-1]["outputs"][0]["nonfinite_mismatches"] > 0


def test_shape_mismatch_fails(tmp_path):
    body = "return cuda_extension.affine(x, self.weight, self.bias, self.scale)[:, :-1]"
    run = evaluate(tmp_path, new=model_new(body))
    assert_failed(run, "shape")
    assert run.failure["details"]["got"] == [16, 36]
    assert run.failure["details"]["expected"] == [16, 37]


def test_dtype_mismatch_fails(tmp_path):
    body = "return cuda_extension.affine(x, self.weight, self.bias, self.scale).double()"
    run = evaluate(tmp_path, new=model_new(body))
    assert_failed(run, "dtype")


def test_extra_output_fails(tmp_path):
    body = "out = cuda_extension.affine(x, self.weight, self.bias, self.scale)\nreturn out, out"
    run = evaluate(tmp_path, new=model_new(body))
    assert_failed(run, "output_type")


def test_tensor_subclass_output_fails(tmp_path):
    header = ("import torch as _t\n\nclass Lazy(_t.Tensor):\n    pass\n\n")
    body = "return cuda_extension.affine(x, self.weight, self.bias, self.scale).as_subclass(Lazy)"
    run = evaluate(tmp_path, new=model_new(body, header=header))
    assert_failed(run, "output_type")
    assert "subclass" in run.failure["message"]


def test_input_mutation_fails(tmp_path):
    body = """
    out = cuda_extension.affine(x, self.weight, self.bias, self.scale)
    x.mul_(2.0)
    return out
    """
    run = evaluate(tmp_path, new=model_new(body))
    assert_failed(run, "input_mutated")
    d = run.failure["details"]
    assert d["input"] == 0 and d["changed"] > 0


def test_reference_that_mutates_its_input_is_tolerated(tmp_path):
    task = TASK.replace("return torch.tanh(x * self.weight) * self.scale + self.bias",
                        "x.mul_(1.0)\n        return torch.tanh(x.add_(0.5) * self.weight)"
                        " * self.scale + self.bias")
    ext = ("import torch\n\ndef affine(x, w, b, scale):\n"
           "    return torch.tanh((x + 0.5) * w) * scale + b\n")
    run = evaluate(tmp_path, task=task, ext=ext, args=["--no-timing"])
    assert run.rc == 0, run
    assert run.result["verification"]["reference_mutates_inputs"] == [0]


def test_a_candidate_as_in_place_as_its_reference_passes_the_timed_call_check(tmp_path):
    """The candidate's verification ran on set 0's slots, and a reference that adds to its
    input in place let it change them: it was then timed on changed values while the timed
    call was checked against set 0 as drawn, a false mismatch (fixed by writing set 0 back
    under every memory plan, not only the lazy one)."""
    task = TASK.replace("return torch.tanh(x * self.weight) * self.scale + self.bias",
                        "return torch.tanh(x.add_(0.5) * self.weight) * self.scale + self.bias")
    ext = ("import torch\n\ndef affine(x, w, b, scale):\n"
           "    return torch.tanh(x.add_(0.5) * w) * scale + b\n")
    run = evaluate(tmp_path, task=task, ext=ext, args=["--budget-ms", "100"])
    assert run.rc == 0, run
    assert run.result["verification"]["reference_mutates_inputs"] == [0]
    assert run.result["timing"]["candidate"]["median_ms"] > 0


def test_a_float64_reference_that_fails_is_reported_under_every_plan(tmp_path):
    """Under a lazy plan the streamed sets' float64 references are made at comparison time,
    and the reason one failed was thrown away: fp64_reference said True while the precision
    rule never ran."""
    task = textwrap.dedent("""
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.w = nn.Parameter(torch.randn(n, n))

            def forward(self, x):
                return torch.mm(x, self.w.float())  # a float64 copy multiplies float64 by float32

        def get_inputs():
            return [torch.randn(16, 37)]

        def get_init_inputs():
            return [37]
        """)
    new = textwrap.dedent("""
        import torch.nn as nn
        import cuda_extension

        class ModelNew(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.w = nn.Parameter(torch.zeros(n, n))

            def forward(self, x):
                return cuda_extension.mm(x, self.w)
        """).replace("import torch.nn as nn", "import torch\nimport torch.nn as nn")
    ext = "import torch\n\ndef mm(x, w):\n    return torch.mm(x, w)\n"
    for extra in ([], ["--memory-lazy"]):
        run = evaluate(tmp_path, task=task, new=new, ext=ext,
                       args=["--no-timing", "--derived-shapes", "0", *extra])
        assert run.rc == 0, run
        got = run.result["verification"]["fp64_reference"]
        assert isinstance(got, str) and got.startswith("unavailable: RuntimeError"), (extra, got)


def test_adversarial_set_catches_shortcut(tmp_path):
    # |x| on positive inputs equals x: a candidate returning x passes get_inputs() alone.
    task = textwrap.dedent("""
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                return torch.sqrt(x * x)

        def get_inputs():
            return [torch.rand(8, 64) + 0.1]

        def get_init_inputs():
            return []
        """)
    new = textwrap.dedent("""
        import torch.nn as nn
        import cuda_extension

        class ModelNew(nn.Module):
            def forward(self, x):
                return cuda_extension.identity(x)
        """)
    ext = "def identity(x):\n    return x.clone()\n"
    run = evaluate(tmp_path, task=task, new=new, ext=ext, args=["--no-timing"])
    assert_failed(run, "mismatch")
    assert run.result["verification"]["sets"][-1]["kind"] == "adversarial", run
    assert all(s["ok"] for s in run.result["verification"]["sets"][:-1])

    # A task may declare that an input's domain forbids such values.
    declared = task + '\nINPUT_DOMAINS = {"x": "positive"}\n'
    run = evaluate(tmp_path, task=declared, new=new, ext=ext, args=["--no-timing"])
    assert run.rc == 0, run
    adv = run.result["verification"]["adversarial"]
    assert adv["left_as_drawn"] == {"0": "positive"} and "skipped" in adv


def test_tolerance_options(tmp_path):
    body = "return cuda_extension.affine(x, self.weight, self.bias, self.scale * 1.03)"
    run = evaluate(tmp_path, new=model_new(body),
                   args=["--atol", "0.2", "--rtol", "0.2", "--precision", "tf32"])
    assert run.rc == 0, run
    assert run.result["verification"]["atol"] == 0.2
    task = TASK + "\nATOL = 0.2\nRTOL = 0.2\n"
    run = evaluate(tmp_path, task=task, new=model_new(body), args=["--precision", "tf32"])
    assert run.rc == 0, run
    assert run.result["verification"]["rtol"] == 0.2


# -- crashes, hangs, exceptions -----------------------------------------------------------


def test_exit_is_a_crash(tmp_path):
    body = "import os\nos._exit(3)"
    run = evaluate(tmp_path, new=model_new(body))
    assert_failed(run, "crash")
    assert run.failure["details"]["exit_code"] == 3
    assert "status 3" in run.failure["message"]
    assert run.result["candidate"]["last_stage"] == "verify"


def test_segfault_is_a_crash(tmp_path):
    body = "import ctypes\nctypes.string_at(0)"
    run = evaluate(tmp_path, new=model_new(body))
    assert_failed(run, "crash")
    assert "SIGSEGV" in run.failure["message"], run
    # faulthandler's dump reaches the report.
    assert "Fatal Python error" in run.failure["details"]["output_tail"], run


def test_crash_in_extension_import(tmp_path):
    run = evaluate(tmp_path, ext="import os\nos._exit(7)\n")
    assert_failed(run, "crash")
    assert run.result["candidate"]["last_stage"] == "load_extension"


def test_hang_is_a_timeout(tmp_path):
    body = "import time\ntime.sleep(1000)"
    run = evaluate(tmp_path, new=model_new(body), args=["--timeout", "8"])
    assert_failed(run, "timeout")
    assert run.seconds < 60, run


def test_hang_in_background_child_is_killed(tmp_path):
    # Without the candidate sandbox (where the child could not be started at all, see
    # test_background_child_cannot_start_in_the_sandbox): the process group is killed.
    marker = tmp_path / "child.pid"
    body = f"""
    import subprocess, sys, time
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"])
    open({str(marker)!r}, "w").write(str(p.pid))
    time.sleep(1000)
    """
    run = evaluate(tmp_path, new=model_new(body), args=["--timeout", "8", "--no-sandbox"])
    assert_failed(run, "timeout")
    pid = int(marker.read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the candidate's child {pid} survived the kill")


def test_background_child_cannot_start_in_the_sandbox(tmp_path):
    if sandbox_args()[0] != "--sandbox":
        pytest.skip("no cuda-agent binary built: the sandbox cannot be tried")
    body = """
    import subprocess, sys
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"])
    """
    run = evaluate(tmp_path, new=model_new(body), args=["--timeout", "30"])
    assert_failed(run, "exception")
    assert "PermissionError" in run.failure["message"], run


def test_memory_error_is_an_exception(tmp_path):
    body = "raise MemoryError('pretend allocation failure')"
    run = evaluate(tmp_path, new=model_new(body))
    assert_failed(run, "exception")
    assert "MemoryError" in run.failure["message"]
    assert "pretend allocation failure" in run.failure["details"]["traceback"]


def test_allocator_failure_is_oom(tmp_path):
    body = "return torch.empty(1 << 62, dtype=torch.uint8)"
    run = evaluate(tmp_path, new=model_new(body))
    assert_failed(run, "oom")


def test_runtime_error_is_an_exception(tmp_path):
    run = evaluate(tmp_path, new=model_new("raise RuntimeError('kernel said no')"))
    assert_failed(run, "exception")
    assert "kernel said no" in run.failure["message"]
    assert run.failure["details"]["set"] == 0


def test_import_errors(tmp_path):
    run = evaluate(tmp_path, ext="raise ImportError('undefined symbol: foo')\n")
    assert_failed(run, "import")
    assert "undefined symbol" in run.failure["message"]
    run = evaluate(tmp_path, new="import torch\n\nclass NotIt:\n    pass\n")
    assert_failed(run, "import")
    run = evaluate(tmp_path, new="this is not python\n")
    assert_failed(run, "import")


def test_constructor_error_is_build(tmp_path):
    new = model_new().replace("super().__init__()", "super().__init__()\n        1 / 0")
    run = evaluate(tmp_path, new=new)
    assert_failed(run, "build")


def test_state_dict_key_mismatch(tmp_path):
    new = model_new("return cuda_extension.affine(x, self.w, self.bias, self.scale)")
    new = new.replace("self.weight = ", "self.w = ")
    run = evaluate(tmp_path, new=new)
    assert_failed(run, "state_dict")
    d = run.failure["details"]
    assert d["missing"] == ["weight"] and d["unexpected"] == ["w"], run


def test_state_dict_shape_mismatch(tmp_path):
    new = model_new().replace("torch.zeros(features))\n        self.register",
                              "torch.zeros(features + 1))\n        self.register")
    run = evaluate(tmp_path, new=new)
    assert_failed(run, "state_dict")
    assert "size mismatch" in run.failure["message"], run


def test_failure_during_timing(tmp_path):
    # Passes verification, then fails on the first timed call (the 9th forward).
    header = "_calls = [0]\n"
    body = """
    _calls[0] += 1
    if _calls[0] > 8:  # 5 random, adversarial, value-stress, a derived shape
        raise RuntimeError("only fast when watched")
    return cuda_extension.affine(x, self.weight, self.bias, self.scale)
    """
    run = evaluate(tmp_path, new=model_new(body, header=header))
    assert_failed(run, "exception", stage="timing")
    assert len(run.result["verification"]["sets"]) == 8


# -- isolation ----------------------------------------------------------------------------


def test_candidate_gets_a_clean_environment(tmp_path):
    body = """
    import os
    leaked = [k for k in os.environ if k.startswith(("CUDA_AGENT", "SECRET"))]
    # cwd: the job directory (its files); HOME and TMPDIR: the scratch directory.
    home = os.environ["HOME"]
    if leaked or home != os.environ["TMPDIR"] or not os.path.isfile("job.json") or \
            not os.access(home, os.W_OK):
        raise RuntimeError(f"leaked {leaked}, cwd {os.getcwd()}, HOME {home}")
    return cuda_extension.affine(x, self.weight, self.bias, self.scale)
    """
    run = evaluate(tmp_path, new=model_new(body), env={"SECRET_TOKEN": "x"},
                   args=["--no-timing"], subprocess_cli=True)
    assert run.rc == 0, run


def test_candidate_sees_no_reference_outputs_or_seeds(tmp_path):
    body = """
    import json, os
    json.dump({"names": sorted(os.listdir(".")), "job": json.load(open("job.json"))},
              open(os.path.join(os.environ["TMPDIR"], "listing.json"), "w"))
    return cuda_extension.affine(x, self.weight, self.bias, self.scale)
    """
    run = evaluate(tmp_path, new=model_new(body),
                   args=["--no-timing", "--keep-temp", "--tmp-dir", str(tmp_path)])
    assert run.rc == 0, run
    seen = json.loads(kept_scratch(tmp_path, "listing.json").read_text())
    allowed = {"job.json", "init_inputs.pt", "state_dict.pt", "cuda_extension.py",
               "model_new.py"}
    assert set(seen["names"]) <= allowed, seen
    assert "seed" not in json.dumps(seen["job"]).lower(), seen


def test_candidate_dir_is_removed(tmp_path):
    run = evaluate(tmp_path, args=["--no-timing", "--tmp-dir", str(tmp_path)])
    assert run.rc == 0, run
    assert not list(tmp_path.glob("cuda-agent-cand-*"))


def test_ext_module_refused_without_testing_env(tmp_path):
    run = evaluate(tmp_path, testing=False, subprocess_cli=True)
    assert run.rc == 2, run
    assert run.failure["kind"] == "usage"
    assert "CUDA_AGENT_HARNESS_TESTING" in run.stderr


def test_usage_errors(tmp_path):
    run = evaluate(tmp_path, args=["--seeds", "0"])
    assert run.rc == 2 and run.failure["kind"] == "usage", run


def test_task_errors_are_not_the_candidates(tmp_path):
    task = TASK.replace("return [torch.randn(16, 37)]", "raise ValueError('broken task')")
    run = evaluate(tmp_path, task=task)
    assert run.rc == 3, run
    assert run.failure["kind"] == "task_error" and run.result["stage"] == "setup"
    assert "broken task" in run.failure["message"]


# -- baselines ----------------------------------------------------------------------------


def test_baseline_cache(tmp_path, monkeypatch):
    # This test is about the cache's keys: every measurement counts as clean here (the CPU of
    # a shared test machine rarely times cleanly; the clean-only rule has its own tests in
    # test_timing_quality.py). The trusted side runs in this process.
    for name in ("NOISY_IQR_REL", "NOISY_CV", "NOISY_RUNQ_FRACTION"):
        monkeypatch.setattr(timing, name, float("inf"))
    cache = tmp_path / "cache"
    first = evaluate(tmp_path, args=["--baseline-cache", str(cache)])
    assert first.rc == 0 and first.result["timing"]["baseline_cached"] is False, first
    files = list(cache.glob("baseline-*.json"))
    assert len(files) == 1
    entry = json.loads(files[0].read_text())
    assert entry["key"]["precision"] == "strict" and entry["key"]["timing"] == "events"
    assert len(entry["key"]["task_sha256"]) == 64
    second = evaluate(tmp_path, args=["--baseline-cache", str(cache)])
    assert second.rc == 0 and second.result["timing"]["baseline_cached"] is True, second
    assert second.result["timing"]["eager"] == first.result["timing"]["eager"]
    # Another precision is another key.
    third = evaluate(tmp_path, args=["--baseline-cache", str(cache), "--precision", "tf32"])
    assert third.result["timing"]["baseline_cached"] is False, third
    assert len(list(cache.glob("baseline-*.json"))) == 2
    # Baselines measured by another version of the timing method are not reused.
    entry["key"]["timing_method"] = timing.METHOD_VERSION - 1
    files[0].write_text(json.dumps(entry))
    fourth = evaluate(tmp_path, args=["--baseline-cache", str(cache)])
    assert fourth.result["timing"]["baseline_cached"] is False, fourth


def test_compile_baseline(tmp_path):
    run = evaluate(tmp_path, compile_baseline=True, timeout=900)
    assert run.rc == 0, run
    comp = run.result["timing"]["compile"]
    # Inductor needs a C++ compiler and the Python headers on the CPU; without them the error
    # is reported, not fatal. With them (CI's machine) the baseline must be measured.
    can_compile = (shutil.which("g++") or shutil.which("c++")) and os.path.exists(
        os.path.join(sysconfig.get_paths()["include"], "Python.h"))
    if not can_compile:
        assert "error" in comp or comp["n"] >= 10, run
        return
    assert "error" not in comp, run
    assert comp["n"] >= 10 and comp["compile_s"] > 0, run
    assert run.result["timing"]["speedup_vs_compile"] > 0


@pytest.mark.parametrize("mode", ["events", "kernel", "device"])
def test_kernel_mode_on_cpu_reports_wall(tmp_path, mode):
    run = evaluate(tmp_path, args=["--timing", mode])
    assert run.rc == 0, run
    cand = run.result["timing"]["candidate"]
    assert cand["method"] == "wall"
    assert run.result["timing"]["mode"] == mode
    if mode != "events":
        assert f"{mode} timing needs CUDA" in cand["note"], cand


# -- the JSON -----------------------------------------------------------------------------


def test_result_json_is_strict_and_has_the_documented_fields(tmp_path):
    body = """
    out = cuda_extension.affine(x, self.weight, self.bias, self.scale)
    out[0, 0] = float("inf")
    return out
    """
    run = evaluate(tmp_path, new=model_new(body))
    r = run.result  # evaluate() parsed it refusing NaN/Infinity
    assert set(r) >= {"schema", "ok", "stage", "failure", "verification", "timing", "flags",
                      "device", "candidate", "elapsed_s"}
    assert set(r["failure"]) == {"kind", "message", "details"}
    s = r["verification"]["sets"][-1]
    assert set(s) >= {"seed_index", "kind", "ok", "max_abs_diff", "mismatches",
                      "first_mismatches", "outputs"}
    assert s["first_mismatches"][0]["got"] == "inf"


# -- the comparison and precision rules directly -------------------------------------------


def test_compare_tensor_counts_and_reports():
    exp = torch.tensor([[1.0, 2.0, float("nan")], [float("inf"), -1.0, 0.0]])
    got = exp.clone()
    rec = ev.compare_tensor(0, got, exp, 1e-2, 1e-2)
    assert rec["mismatches"] == 0 and rec["nonfinite_mismatches"] == 0
    assert rec["max_abs_diff"] == 0.0
    got[0, 1] = 2.5
    got[1, 0] = float("-inf")
    got[1, 2] = float("nan")
    rec = ev.compare_tensor(0, got, exp, 1e-2, 1e-2)
    assert rec["mismatches"] == 3 and rec["nonfinite_mismatches"] == 2
    assert [m["index"] for m in rec["first_mismatches"]] == [[0, 1], [1, 0], [1, 2]]
    assert rec["first_mismatches"][1]["got"] == "-inf"
    assert rec["first_mismatches"][1]["expected"] == "inf"
    assert rec["first_mismatches"][0]["abs_diff"] == pytest.approx(0.5)
    assert rec["max_abs_diff"] == pytest.approx(0.5)


def test_compare_tensor_integers_are_exact():
    exp = torch.arange(10)
    got = exp.clone()
    got[7] = 8
    rec = ev.compare_tensor(0, got, exp, 10.0, 10.0)
    assert rec["mismatches"] == 1 and rec["first_mismatches"][0]["index"] == [7]


def test_first_true_is_chunked_and_ordered():
    mask = torch.zeros(3 * (1 << 22) + 5, dtype=torch.bool)
    mask[[5, 1 << 22, (1 << 23) + 1, -1]] = True
    assert ev.first_true(mask, 3) == [5, 1 << 22, (1 << 23) + 1]
    assert ev.unravel(7, (2, 3, 2)) == [1, 0, 1]


def test_precision_rule_separates_fp32_from_fp16():
    torch.manual_seed(0)
    x64 = torch.randn(4096, dtype=torch.float64)
    ref64 = torch.tanh(x64) * 1.5
    ref32 = torch.tanh(x64.float()) * 1.5
    legit = torch.tanh(x64.float()) * torch.tensor(1.5)  # other rounding, same precision
    legit = legit + torch.randn(4096) * 1e-7
    half = (torch.tanh(x64.half()) * 1.5).float()
    assert ev.precision_record(0, legit, ref32, ref64)["ok"] is True
    rec = ev.precision_record(0, half, ref32, ref64)
    assert rec["ok"] is False and rec["candidate_rms_err"] > 10 * rec["threshold"] / 10
    # Exact operations: a zero reference error leaves the floor.
    exact = ev.precision_record(0, ref32.clone(), ref32, ref32.double())
    assert exact["ok"] is True and exact["ratio"] is None


def test_heavy_tailed_inputs_keep_scale_and_dtype():
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(256, 256) * 3.0
    adv = ev.heavy_tailed_like(x, gen)
    assert adv.dtype == x.dtype and adv.shape == x.shape
    assert (adv < 0).any() and (adv > 0).any()
    assert float(adv.std()) == pytest.approx(float(x.std()), rel=0.2)
    kurtosis = float(((adv - adv.mean()) ** 4).mean() / adv.var() ** 2)
    assert kurtosis > 5  # a normal has 3
    assert float(adv.abs().max()) <= 20 * float(x.std()) * 1.01


def test_heavy_tailed_inputs_keep_exact_zeros():
    # A triangular input stays triangular: a kernel may skip what the task says is zero.
    gen = torch.Generator().manual_seed(2)
    x = torch.triu(torch.randn(64, 64))
    adv = ev.heavy_tailed_like(x, gen)
    assert bool((adv[x == 0] == 0).all())
    assert bool((adv[x != 0] != 0).float().mean() > 0.99)
    assert not torch.equal(adv, x)


def test_speed_of_light_flag():
    s = ev.InputSet(0, "random", [torch.zeros(1 << 20)], torch.device("cpu"))
    s.ref = [torch.zeros(1 << 20)]
    dev = {"type": "cuda", "name": "NVIDIA H200"}
    sol = ev.speed_of_light(dev, s, 0, 0.0001)
    assert sol["bytes"] == 8 << 20 and sol["peak_bytes_per_s"] == 4.8e12
    assert sol["sol_ms"] == pytest.approx((8 << 20) / 4.8e12 * 1e3)
    assert sol["flagged"] is True
    assert ev.speed_of_light(dev, s, 0, 1.0)["flagged"] is False
    assert ev.speed_of_light({"type": "cuda", "name": "NVIDIA H100 PCIe"}, s, 0, 1.0)[
        "peak_bytes_per_s"] == 2.0e12
    assert ev.speed_of_light({"type": "cuda", "name": "Mystery"}, s, 0, 1e-9)["flagged"] is False


def kept_job_and_candidate(tmp_path):
    """A job directory left by a real evaluation (--keep-temp) and a fresh candidate.py (no
    sandbox) with its report pipe and control socket: (job_dir, proc, channel, mine)."""
    run = evaluate(tmp_path, args=["--no-timing", "--keep-temp", "--tmp-dir", str(tmp_path)])
    assert run.rc == 0, run
    (job_dir,) = tmp_path.glob("cuda-agent-cand-*/job")
    r, w = os.pipe()
    mine, theirs = socket.socketpair()
    proc = subprocess.Popen([sys.executable, str(ROOT / "harness" / "candidate.py"),
                             "--device", "cpu", "--report-fd", str(w)],
                            stdin=theirs.fileno(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, pass_fds=(w,), cwd=tmp_path)
    os.close(w)
    theirs.close()
    return job_dir, proc, os.fdopen(r, "rb"), mine


def test_candidate_protocol(tmp_path):
    """candidate.py: 'ready' first, then its job on the control socket with the arena's
    descriptor, then one more line ('stop')."""
    job_dir, proc, chan, mine = kept_job_and_candidate(tmp_path)
    job = json.loads((job_dir / "job.json").read_text())
    arena, _ = ev.ar.create(job["arena"]["size"], torch.device("cpu"))
    try:
        with chan as channel:
            first = json.loads(channel.readline())
            assert first == {"type": "ready", "lockdown": False}
            socket.send_fds(mine, [json.dumps({"job": str(job_dir)}).encode() + b"\n"],
                            [arena.fd])
            mine.sendall(b"stop\n")
            messages = [json.loads(line) for line in channel]
        assert proc.wait(timeout=120) == 0, proc.stdout.read()
    finally:
        mine.close()
        arena.close()
    kinds = [m["type"] for m in messages]
    # 5 random, adversarial, value-stress, one derived shape.
    assert kinds.count("set") == 8 and kinds[-1] == "verified", messages
    stages = [m["stage"] for m in messages if m["type"] == "stage"]
    assert stages == ["init", "load_extension", "import_model_new", "build",
                      "load_state_dict", "verify"], stages
    sets = [m for m in messages if m["type"] == "set"]
    assert sets[0]["outputs"] == [{"kind": "tensor", "shape": [16, 37],
                                   "dtype": "torch.float32", "device": "cpu",
                                   "type": "torch.Tensor", "stored": True}]


def test_candidate_without_its_job_descriptor_fails_cleanly(tmp_path):
    """A job line without the arena's descriptor: a protocol failure, not a crash."""
    job_dir, proc, chan, mine = kept_job_and_candidate(tmp_path)
    with chan as channel:
        assert json.loads(channel.readline())["type"] == "ready"
        mine.sendall(json.dumps({"job": str(job_dir)}).encode() + b"\n")
        messages = [json.loads(line) for line in channel]
    mine.close()
    assert proc.wait(timeout=120) == 1
    assert messages[-1]["type"] == "failure" and messages[-1]["kind"] == "protocol", messages
    assert "shared memory" in messages[-1]["message"], messages


def test_candidate_that_changes_once_timed_fails(tmp_path):
    # Correct on the 8 verified sets (5 random, adversarial, value-stress, a derived shape),
    # then cheap zeros: the timing runs would reward it, so one timed call, chosen at random
    # once they are over, is checked against the reference on its own inputs.
    ext = EXT + textwrap.dedent("""
        _calls = [0]


        def affine_counting(x, w, b, scale):
            _calls[0] += 1
            if _calls[0] > 8:
                return torch.zeros_like(x)
            return affine(x, w, b, scale)
        """)
    run = evaluate(tmp_path, ext=ext, new=model_new(
        "return cuda_extension.affine_counting(x, self.weight, self.bias, self.scale)"))
    assert_failed(run, "mismatch", stage="timing")
    assert "in a timed call" in run.failure["message"], run.failure
    assert run.result["timing"] is None


def test_post_timing_check_is_recorded(tmp_path):
    run = evaluate(tmp_path)
    assert run.rc == 0, run
    post = run.result["verification"]["post_timing"]
    assert post["ok"] is True
    assert len(run.result["verification"]["sets"]) == 8  # the post-timing set is not one of them
    # The timed-call check: one of the timed calls (never a warm-up call), its outputs compared.
    chk = run.result["verification"]["timed_check"]
    cand = run.result["timing"]["candidate"]
    assert chk["ok"] is True and chk["kind"] == "timed-call", chk
    assert chk["calls"] == cand["n"], (chk, cand)
    assert cand["warmup_n"] < chk["call_k"] <= cand["warmup_n"] + cand["n"], (chk, cand)
    # ... held to the precision rule too (compare.timed_call_precision), with room to spare.
    precs = chk["precision"]
    assert len(precs) == 1 and precs[0]["ok"], chk
    assert precs[0]["candidate_rms_err"] < 0.1 * precs[0]["threshold"], chk


def test_timed_call_check_is_left_out_for_a_stateful_forward(tmp_path):
    # Each call's output depends on the calls before: no reference for one timed call alone.
    ref = textwrap.dedent("""
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.hidden = torch.zeros(1)

            def forward(self, x):
                self.hidden = self.hidden + 1.0
                return x * 2.0


        def get_inputs():
            return [torch.randn(8, 4)]


        def get_init_inputs():
            return []
        """)
    ext = textwrap.dedent("""
        def twice(x):
            return x * 2.0
        """)
    new = textwrap.dedent("""
        import torch
        import torch.nn as nn
        import cuda_extension


        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.hidden = torch.zeros(1)

            def forward(self, x):
                self.hidden = self.hidden + 1.0
                return cuda_extension.twice(x)
        """)
    run = evaluate(tmp_path, task=ref, ext=ext, new=new)
    assert run.rc == 0, run
    assert run.result["verification"]["state"], run.result["verification"]
    assert "timed_check" not in run.result["verification"]


def test_post_timing_inputs_reach_the_arena_only_after_timing(tmp_path):
    # A candidate that scans the shared memory for the post-timing set's inputs (to compute
    # its answer ahead, while it still behaves) finds nothing there until the timing is over.
    body = """
    import json, os
    job = json.load(open("job.json"))
    slot = job["sets"][job["post_timing_set"]]["inputs"][0]
    def target(n):
        try:
            return os.readlink(f"/proc/self/fd/{n}")
        except OSError:  # the directory's own descriptor, closed by now
            return ""
    fds = [int(n) for n in os.listdir("/proc/self/fd")]
    # (the mapping holds a duplicate of the descriptor: any of them reads the same memory)
    fd = min(n for n in fds if target(n).startswith("/memfd:cuda-agent-arena"))
    region = os.pread(fd, x.numel() * x.element_size(), slot["offset"])
    record = os.path.join(os.environ["TMPDIR"], "seen.json")
    seen = json.load(open(record)) if os.path.exists(record) else []
    json.dump(seen + [any(region)], open(record, "w"))
    return cuda_extension.affine(x, self.weight, self.bias, self.scale)
    """
    run = evaluate(tmp_path, new=model_new(body),
                   args=["--budget-ms", "50", "--keep-temp", "--tmp-dir", str(tmp_path)])
    assert run.rc == 0, run
    assert run.result["verification"]["transport"]["kind"] == "memfd"
    seen = json.loads(kept_scratch(tmp_path, "seen.json").read_text())
    assert len(seen) > 7 and seen[-1] is True and not any(seen[:-1]), seen


def test_received_outputs_checks_what_the_candidate_reports(tmp_path):
    s = ev.InputSet(0, "random", [torch.ones(4, 3)], torch.device("cpu"))
    s.ref = [torch.ones(4, 3), 2.5]
    ev.lay_out([s])
    arena, why = ev.ar.create(1 << 12, torch.device("cpu"))
    try:
        assert why is None and arena.kind == "memfd"
        arena.view(s.out_slots[0]["offset"], torch.float32, (4, 3)).fill_(7.0)
        meta = {"kind": "tensor", "shape": [4, 3], "dtype": "torch.float32", "device": "cpu",
                "stored": True}
        got = ev.received_outputs(arena, s, [meta, {"kind": "number", "value": "nan"}])
        assert torch.equal(got[0], torch.full((4, 3), 7.0)) and got[1] != got[1]
        # A copy: later writes to the arena do not change what was received.
        arena.view(s.out_slots[0]["offset"], torch.float32, (4, 3)).fill_(0.0)
        assert float(got[0][0, 0]) == 7.0
        # Another shape or dtype: a data-less tensor that check_set turns into a message.
        other = ev.received_outputs(arena, s, [dict(meta, shape=[3, 4], stored=False)])[0]
        assert other.device.type == "meta" and tuple(other.shape) == (3, 4)
        with pytest.raises(ev.EvalError, match="shape"):
            ev.check_set(s, None, [other, 2.5], ev.arena_inputs(arena, s),
                         torch.device("cpu"), 1e-2, 1e-2, "strict")
        bad = [
            ([dict(meta, stored=False)], "did not deliver output 0"),
            ([dict(meta, dtype="torch.nope")], "unknown dtype"),
            ([dict(meta, dtype=7)], "not a string"),
            ([dict(meta, shape=[-1, 3])], "not a list of sizes"),
            ([dict(meta, kind="pickle")], "reported as 'pickle'"),
            ([meta, {"kind": "number", "value": [1]}], "list as a number"),
            ("nothing", "not a list"),
        ]
        for m, message in bad:
            with pytest.raises(ev.EvalError, match=message) as info:
                ev.received_outputs(arena, s, m)
            assert info.value.kind == "protocol"
    finally:
        arena.close()


def test_non_tensor_inputs_travel_as_values_and_odd_ones_are_refused():
    s = ev.InputSet(0, "random", [torch.ones(2), 3, 0.5, None, "mode"], torch.device("cpu"))
    s.ref = [torch.ones(2)]
    ev.lay_out([s])
    assert [x["kind"] for x in s.slots] == ["tensor", "value", "value", "value", "value"]
    assert [x.get("value") for x in s.slots[1:]] == [3, 0.5, None, "mode"]
    for odd in (float("nan"), [1, 2], object()):
        t = ev.InputSet(0, "random", [odd], torch.device("cpu"))
        with pytest.raises(ev.EvalError) as info:
            ev.lay_out([t])
        assert info.value.kind == "task_error"


def test_launch_evidence_verdicts():
    def ev_(**kw):
        base = {"extension_calls": 1, "kernels": 2, "extension_kernels": 1, "total_us": 100.0,
                "extension_us": 90.0, "activities": 2,
                "top": [{"name": "my_kernel", "in_extension": True, "us": 90.0},
                        {"name": "at::native::fill", "in_extension": False, "us": 10.0}]}
        base.update(kw)
        return base

    assert ev.check_launches(ev_()) is None
    assert ev.check_launches(ev_(extension_us=25.0)) is None  # exactly the least share
    cases = [
        (ev_(extension_calls=0, extension_kernels=0, extension_us=0.0),
         "called no function of cuda_extension"),
        (ev_(extension_kernels=0, extension_us=0.0), "no GPU kernel ran inside"),
        (ev_(extension_us=10.0), "account for 10.0% of the forward's GPU time"),
    ]
    for record, message in cases:
        with pytest.raises(ev.EvalError, match=message) as info:
            ev.check_launches(record)
        assert info.value.kind == "launch_evidence"
        assert info.value.details["defence"] == "launch_evidence"
        assert info.value.details["evidence"] is record
    assert "at::native::fill" in str(pytest.raises(
        ev.EvalError, ev.check_launches, ev_(extension_us=10.0)).value)
    # Nothing recorded at all: no verdict, a reason instead.
    assert "no GPU activity" in ev.check_launches(ev_(activities=0, kernels=0, total_us=0.0,
                                                      extension_us=0.0, extension_kernels=0))
    assert "unusable" in ev.check_launches(ev_(error="no range"))
    # The kernelbench rules: torch operators may carry most of the forward (their share is
    # reported), but the extension's kernels must still run.
    record = ev_(extension_us=10.0)
    assert ev.check_launches(record, "kernelbench") is None
    assert record["torch_share"] == 0.9
    for record, message in cases[:2]:
        with pytest.raises(ev.EvalError, match=message):
            ev.check_launches(record, "kernelbench")
    for bad in (None, ev_(kernels=-1), ev_(total_us=float("nan")), ev_(extension_calls=True)):
        with pytest.raises(ev.EvalError) as info:
            ev.check_launches(bad)
        assert info.value.kind == "protocol"


def test_pointer_cache_is_caught_after_timing(tmp_path):
    # Caches its result by the input's address: never wrong while verified (every set lies at
    # its own address), then reused through the timing runs. The timed-call check sees the
    # chosen call answered from another call's inputs (outside the tolerance: mismatch; inside
    # it: the precision rule). Behind it, the post-timing set is given at an address the timed
    # calls used, so the stale result would be what it returns there.
    ext = EXT + textwrap.dedent("""
        _cache = {}


        def affine_cached(x, w, b, scale):
            key = (x.data_ptr(), tuple(x.shape))
            if key not in _cache:
                _cache[key] = affine(x, w, b, scale)
            return _cache[key]
        """)
    run = evaluate(tmp_path, ext=ext, new=model_new(
        "return cuda_extension.affine_cached(x, self.weight, self.bias, self.scale)"),
        args=["--budget-ms", "50"])
    assert_failed(run, ("mismatch", "precision"), stage="timing")
    assert "in a timed call" in run.failure["message"], run


def test_extra_shapes_catch_a_kernel_written_for_one_shape(tmp_path):
    ok = evaluate(tmp_path / "ok", task=SHAPED_TASK, args=["--no-timing"])
    assert ok.rc == 0, ok
    shaped = [r for r in ok.result["verification"]["sets"] if r["kind"] == "shape"]
    assert [r["shape"] for r in shaped] == [{"rows": 3}, {"rows": 1}]
    assert ok.result["verification"]["n_extra_shapes"] == 2
    assert [r["outputs"][0]["shape"] for r in shaped] == [[3, 37], [1, 37]]
    ext = EXT_16_ROWS
    bad = evaluate(tmp_path / "bad", task=SHAPED_TASK, ext=ext, args=["--no-timing"],
                   new=model_new(
        "return cuda_extension.affine_16(x, self.weight, self.bias, self.scale)"))
    assert_failed(bad, "mismatch")
    assert "(shape rows=3)" in bad.failure["message"]


def test_extra_shapes_that_change_the_model_get_a_model_of_their_own(tmp_path):
    ok = evaluate(tmp_path / "ok", task=FEATURED_TASK, args=["--no-timing"])
    assert ok.rc == 0, ok
    shaped = [r for r in ok.result["verification"]["sets"] if r["kind"] == "shape"]
    assert [r["outputs"][0]["shape"] for r in shaped] == [[3, 37], [16, 5], [2, 37]]
    # Only the set whose sizes change get_init_inputs() has its own model.
    assert [r.get("own_model", False) for r in shaped] == [False, True, False], ok

    # A kernel written for the task's 37 features fails at 5.
    ext = EXT + textwrap.dedent("""
        def affine_37(x, w, b, scale):
            y = affine(x, w, b, scale)
            if x.shape[1] != 37:
                y = y.clone()
                y[:, -1] = 0
            return y
        """)
    bad = evaluate(tmp_path / "bad", task=FEATURED_TASK, ext=ext, args=["--no-timing"],
                   new=model_new(
        "return cuda_extension.affine_37(x, self.weight, self.bias, self.scale)"))
    assert_failed(bad, "mismatch")
    assert "(shape features=5)" in bad.failure["message"], bad

    # A ModelNew that ignores its init inputs (sized for 37) cannot take the 5-feature weights.
    fixed = model_new().replace("torch.zeros(features)", "torch.zeros(37)")
    assert fixed.count("torch.zeros(37)") == 2
    run = evaluate(tmp_path / "fixed", task=FEATURED_TASK, new=fixed, args=["--no-timing"])
    assert_failed(run, "state_dict")
    assert "for an extra shape" in run.failure["message"], run


@pytest.mark.parametrize("decl, message", [
    ("EXTRA_SHAPES = {'rows': 3}", "must be a list"),
    ("EXTRA_SHAPES = [{}]", "non-empty dict"),
    ("EXTRA_SHAPES = [{'cols': 3}]", "not a module-level int"),
    ("EXTRA_SHAPES = [{'rows': -1}]", "must be a size"),
    ("EXTRA_SHAPES = [{'rows': 2.5}]", "must be a size"),
    ("EXTRA_SHAPES = [{'rows': 1}] * 9", "at most 8"),
])
def test_extra_shapes_declaration_errors(tmp_path, decl, message):
    run = evaluate(tmp_path, task=SHAPED_TASK + "\n" + decl + "\n", args=["--no-timing"])
    assert run.rc == 3, run
    assert run.failure["kind"] == "task_error" and message in run.failure["message"], run
