"""GPU tests of harness/evaluate.py with real compiled extensions.

Each reference solution in examples/solutions/ is built into cuda_extension.so with
torch.utils.cpp_extension.load (in a process of its own, as tests/gpu/solution_check.py
does), then evaluated on CUDA: it must pass verification and get event timings with their
dispersion. Broken variants of one solution's model_new.py (same .so) must fail with the
right reason. Skipped, with the reason, where torch, a CUDA device, nvcc or ninja is missing.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import json
import pathlib
import runpy
import subprocess
import sys
import textwrap
import time

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: torch.cuda.is_available() is False", allow_module_level=True)

from torch.utils import cpp_extension  # noqa: E402

if cpp_extension.CUDA_HOME is None:
    pytest.skip("nvcc not found: torch.utils.cpp_extension.CUDA_HOME is unset",
                allow_module_level=True)
if not cpp_extension.is_ninja_available():
    pytest.skip("ninja not found: torch.utils.cpp_extension.load needs it",
                allow_module_level=True)

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template"
TASKS = ROOT / "examples" / "tasks"
SOLUTIONS = sorted(p for p in (ROOT / "examples" / "solutions").iterdir() if p.is_dir())
EVALUATE = ROOT / "harness" / "evaluate.py"
sys.path.insert(0, str(ROOT / "harness"))
sys.path.insert(0, str(ROOT / "tests" / "py"))
import evaluate as ev  # noqa: E402
from harness_case import Run, sandbox_args  # noqa: E402  (the CPU-mode tests' runner's)

BUILD_TIMEOUT_S = 900
BUILD = """
import pathlib, sys
from torch.utils.cpp_extension import load
solution, template, build_dir = map(pathlib.Path, sys.argv[1:4])
kernels = solution / "kernels"
sources = [str(template / "binding.cpp")]
sources += sorted(str(p) for p in kernels.glob("*.cpp"))
sources += sorted(str(p) for p in kernels.glob("*.cu"))
load(name="cuda_extension", sources=sources, extra_include_paths=[str(template)],
     extra_cuda_cflags=["-O3"], build_directory=str(build_dir), verbose=False)
"""


def build_one(solution: pathlib.Path, build_dir: pathlib.Path) -> pathlib.Path:
    build_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-c", BUILD, str(solution), str(TEMPLATE),
                           str(build_dir)], capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"building {solution.name} failed:\n{proc.stdout[-3000:]}\n"
                           f"{proc.stderr[-6000:]}")
    found = sorted(build_dir.glob("cuda_extension*.so"))
    if not found:
        raise RuntimeError(f"building {solution.name} left no cuda_extension*.so in {build_dir}")
    return found[0]


@pytest.fixture(scope="module")
def built(extension_dir) -> dict[str, pathlib.Path]:
    """{solution name: path of its cuda_extension .so}, built in parallel (in the session's
    build directories, tests/gpu/conftest.py: test_solutions.py builds the same)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(SOLUTIONS)) as pool:
        futures = {s.name: pool.submit(build_one, s, extension_dir(s.name)) for s in SOLUTIONS}
        return {name: f.result() for name, f in futures.items()}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> pathlib.Path:
    return tmp_path_factory.mktemp("baselines")


def evaluate(tmp_path: pathlib.Path, solution: str, so: pathlib.Path, *, new: str | None = None,
             args=(), subprocess_cli: bool = False) -> Run:
    work = tmp_path / f"run{len(list(tmp_path.glob('run*')))}"
    work.mkdir()
    src = (ROOT / "examples" / "solutions" / solution / "model_new.py").read_text()
    (work / "model_new.py").write_text(new if new is not None else src)
    out = work / "result.json"
    argv = ["--task", str(TASKS / f"{solution}.py"), "--candidate-dir", str(work),
            "--so", str(so), "--device", "cuda", "--budget-ms", "500", "--out", str(out),
            *args]
    if "--sandbox" not in args and "--no-sandbox" not in args:
        argv += sandbox_args()
    t0 = time.monotonic()
    if subprocess_cli:
        proc = subprocess.run([sys.executable, str(EVALUATE), *argv], capture_output=True,
                              text=True, timeout=900)
        rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    else:
        so_buf, se_buf = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(so_buf), contextlib.redirect_stderr(se_buf):
            rc = ev.main(argv)
        stdout, stderr = so_buf.getvalue(), se_buf.getvalue()
    result = json.loads(out.read_text()) if out.exists() else {}
    return Run(rc, stdout, stderr, result, time.monotonic() - t0)


def check_stats(stats: dict, method: str) -> None:
    assert stats["method"] == method, stats
    assert stats["n"] >= 10 and stats["median_ms"] > 0, stats
    assert stats["cv"] is not None and stats["cv"] >= 0, stats
    assert stats["min_ms"] <= stats["median_ms"] <= stats["p90_ms"], stats


@pytest.mark.timing
@pytest.mark.parametrize("solution", [s.name for s in SOLUTIONS])
def test_solution_passes_and_is_timed(tmp_path, built, cache_dir, solution):
    # The events method's fields (the default under these rules is device: the same fields
    # with a lead; test_device_timing_hides_the_hosts_launch_work is its test).
    first = evaluate(tmp_path, solution, built[solution],
                     args=["--baseline-cache", str(cache_dir), "--timing", "events"],
                     subprocess_cli=True)
    assert first.rc == 0, first
    r = first.result
    assert r["ok"] and r["stage"] == "done", first
    v = r["verification"]
    # 5 random sets, the heavy-tailed one, the value-stress one, one per declared extra shape
    # (every example solution's task declares them, so none is derived; the post-timing set
    # is reported apart).
    extra = len(runpy.run_path(str(TASKS / f"{solution}.py")).get("EXTRA_SHAPES", []))
    assert v["n_extra_shapes"] == extra and v["n_adversarial"] == 1, first
    assert v["n_value_stress"] == 1 and v["value_stress"]["scale"] == 1000.0, first
    assert v["n_derived_shapes"] == 0, first
    assert v["derived_shapes_note"] == "the task declares EXTRA_SHAPES", first
    assert len(v["sets"]) == 5 + 1 + 1 + extra and all(s["ok"] for s in v["sets"]), first
    assert v["precision_observed"] == "fp32" and v["fp64_reference"] is True, first
    t = r["timing"]
    for subject in ("eager", "candidate"):
        check_stats(t[subject], "events")
        assert t[subject]["l2_flush_bytes"] >= 2 * r["device"]["l2_bytes"]
        assert 0 < t[subject]["sync_overhead_ms"] < t[subject]["median_ms"]
        # Nothing runs outside the current stream: the probe's gap matches the call's.
        assert t[subject]["basis"] == "stream", (subject, t[subject])
    # The kernel floor rests on the busy time profiled after the timing loop, which an
    # honest solution's timed calls are not below (the timed-call check passed too).
    assert t["floor"]["source"] == "after_timing" and t["floor"]["busy_us"] > 0, t["floor"]
    assert t["candidate"]["median_ms"] >= 0.9 * t["floor"]["busy_us"] / 1000, t
    assert v["timed_check"]["ok"] is True, v["timed_check"]
    # ... and within the precision rule against its own inputs' reference, with room to spare
    # (an honest forward's error is its verification error, not a stale result's).
    precs = v["timed_check"]["precision"]
    assert precs and all(p["ok"] and p["candidate_rms_err"] < 0.5 * p["threshold"]
                         for p in precs), v["timed_check"]
    # On CUDA the torch.compile baseline must run (the reward's second threshold rests on it).
    assert "error" not in t["compile"] and t["compile"]["n"] >= 10, first
    assert t["speedup_vs_eager"] > 0
    assert t["sol"]["flagged"] is False, first
    # No matrix product, convolution or attention in these tasks: 0 FLOPs counted, the bytes
    # bound the peak fraction.
    assert t["sol"]["flops"] == 0 and t["sol"]["flops_uncounted_ops"], first
    if any(k in r["device"]["name"] for k in ("H100", "H200", "A100")):
        assert t["sol"]["sol_ms"] > 0
        assert t["sol"]["peak_fraction_basis"] == "bytes", first
        assert t["sol"]["peak_fraction"] == pytest.approx(
            t["sol"]["sol_ms"] / t["candidate"]["median_ms"]), first
    # The same task again: baselines from the cache.
    second = evaluate(tmp_path, solution, built[solution],
                      args=["--baseline-cache", str(cache_dir), "--timing", "events"])
    assert second.rc == 0 and second.result["timing"]["baseline_cached"] is True, second
    assert second.result["timing"]["eager"] == t["eager"]


def test_kernel_timing_mode(tmp_path, built):
    run = evaluate(tmp_path, "swish_scale_bias", built["swish_scale_bias"],
                   args=["--timing", "kernel", "--no-compile"])
    assert run.rc == 0, run
    for subject in ("eager", "candidate"):
        stats = run.result["timing"][subject]
        assert "kernel_error" not in stats, run
        check_stats(stats, "kernel")
        assert stats["kernels_per_call"] >= 1
        check_stats(stats["events"], "events")
        # Kernel time excludes launch gaps: it cannot exceed the event time by much.
        assert stats["median_ms"] <= stats["events"]["median_ms"] * 1.2, run
    assert run.result["timing"]["candidate"]["kernels_per_call"] == pytest.approx(1.0)


# -- broken variants of the swish_scale_bias solution --------------------------------------

SWISH = "swish_scale_bias"
SWISH_NEW = (ROOT / "examples" / "solutions" / SWISH / "model_new.py").read_text()
SWISH_CALL = ("return cuda_extension.swish_scale_bias(x, self.bias, float(self.scale), "
              "self.kernel_config)")
assert SWISH_CALL in SWISH_NEW, "the swish_scale_bias solution changed: update these tests"


def swish_variant(body: str, init: str = "") -> str:
    src = SWISH_NEW.replace(SWISH_CALL, textwrap.indent(textwrap.dedent(body).strip(),
                                                        " " * 8).lstrip())
    if init:
        src = src.replace("self.kernel_config = 0",
                          "self.kernel_config = 0\n" + textwrap.indent(
                              textwrap.dedent(init).strip(), " " * 8))
    return src


# A binding that raises a CUDA error (a refused launch configuration) is tested through the
# evaluator's own build in test_workspace_eval.py: the extension built here by
# torch.utils.cpp_extension.load crashes the process on any C++ exception on the H200 (torch
# 2.11, GCC 13; reproduced in a plain Python process, outside the harness).
BROKEN = {
    "mismatch": "return cuda_extension.swish_scale_bias(x, self.bias, float(self.scale) * 1.1, 0)",
    "nan": """
        out = cuda_extension.swish_scale_bias(x, self.bias, float(self.scale), 0)
        out[7, 11] = float("nan")
        return out
        """,
    "unwritten": """
        full = cuda_extension.swish_scale_bias(x, self.bias, float(self.scale), 0)
        out = torch.empty_like(x)
        out[:-1] = full[:-1]
        return out
        """,
    "mutate": """
        out = cuda_extension.swish_scale_bias(x, self.bias, float(self.scale), 0)
        x.mul_(2.0)
        return out
        """,
    "shape": "return cuda_extension.swish_scale_bias(x, self.bias, float(self.scale), 0)[:-1]",
    "exit": "import os\nos._exit(3)",
    "segfault": "import ctypes\nctypes.string_at(0)",
    "hang": "import time\ntime.sleep(1000)",
    "oom": "return torch.empty(1 << 46, dtype=torch.uint8, device=x.device)",
    "fp16_input": "return cuda_extension.swish_scale_bias(x.half().float(), self.bias, "
                  "float(self.scale), 0)",
}
EXPECTED = {
    "mismatch": "mismatch", "nan": "mismatch", "unwritten": "mismatch",
    "mutate": "input_mutated", "shape": "shape", "exit": "crash", "segfault": "crash",
    "hang": "timeout", "oom": "oom", "fp16_input": "precision",
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_candidate_fails_with_reason(tmp_path, built, case):
    args = ["--no-compile"] + (["--timeout", "30"] if case == "hang" else [])
    run = evaluate(tmp_path, SWISH, built[SWISH], new=swish_variant(BROKEN[case]), args=args)
    assert run.rc == 1, run
    tail = (run.failure.get("details") or {}).get("output_tail", "")
    if run.failure["kind"] != EXPECTED[case]:
        print(f"the candidate's output, last 6000 bytes:\n{tail[-6000:]}")  # shown on failure
    assert run.failure["kind"] == EXPECTED[case], run.failure["message"]
    assert run.result["stage"] == "verify", run
    if case == "unwritten":
        # Poisoned memory: the row the candidate never wrote reads as NaN.
        rec = run.result["verification"]["sets"][-1]
        assert rec["outputs"][0]["nonfinite_mismatches"] > 0, run
    if case == "segfault":
        assert "SIGSEGV" in run.failure["message"], run


@pytest.mark.parametrize("case", ["ok", "mismatch", "unwritten", "mutate"])
def test_the_lazy_memory_plan_gives_the_same_verdicts(tmp_path, built, case):
    """The smallest memory plan (issue 22): every set drawn from a recipe keeps only its arena
    slots, drawn again and its references made when compared; the lean poisoning; the candidate
    held to its budget. A correct candidate passes, broken ones fail as on the roomy plan."""
    new = SWISH_NEW if case == "ok" else swish_variant(BROKEN[case])
    run = evaluate(tmp_path, SWISH, built[SWISH], new=new,
                   args=["--no-compile", "--memory-lazy"])
    plan = run.result["memory"]["plan"]
    assert plan["lazy"] is True and plan["window"] == 1, run
    assert plan["candidate_budget_bytes"] > 0, run
    if case == "ok":
        assert run.rc == 0, run
        assert run.result["verification"]["post_timing"]["ok"] is True, run
        assert run.result["memory"]["candidate_peak"]["max_reserved_bytes"] > 0, run
    else:
        assert run.rc == 1 and run.failure["kind"] == EXPECTED[case], run


def test_state_dict_mismatch(tmp_path, built):
    new = SWISH_NEW.replace("self.bias = nn.Parameter", "self.b = nn.Parameter")
    new = new.replace("self.bias, float", "self.b, float")
    run = evaluate(tmp_path, SWISH, built[SWISH], new=new, args=["--no-compile"])
    assert run.rc == 1 and run.failure["kind"] == "state_dict", run


def test_fp16_input_passes_in_tf32_mode(tmp_path, built):
    run = evaluate(tmp_path, SWISH, built[SWISH], new=swish_variant(BROKEN["fp16_input"]),
                   args=["--no-compile", "--precision", "tf32", "--no-timing"])
    assert run.rc == 0, run
    assert run.result["verification"]["precision_observed"] == "reduced"


@pytest.mark.timing
def test_side_stream_work_is_counted(tmp_path, built):
    """A forward that leaves its kernel running on another stream is not timed as free
    (the events method's gap between the stream end and the device end)."""
    plain = evaluate(tmp_path, SWISH, built[SWISH], args=["--no-compile", "--timing", "events"])
    assert plain.rc == 0, plain
    side = swish_variant(
        """
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            out = cuda_extension.swish_scale_bias(x, self.bias, float(self.scale), 0)
        return out
        """,
        init="self.side = torch.cuda.Stream()")
    run = evaluate(tmp_path, SWISH, built[SWISH], new=side,
                   args=["--no-compile", "--timing", "events"])
    assert run.rc == 0, run  # correct values: the harness synchronises the device
    p = plain.result["timing"]["candidate"]
    s = run.result["timing"]["candidate"]
    # The reference solution works on the current stream: its time is the stream's.
    assert p["basis"] == "stream", plain
    # An end event on the current stream alone would have missed the kernel: the work
    # outside the stream is added, at least most of the kernel's own time. (The current
    # stream's time is the host's time to launch the side work: the switch of streams in
    # Python, ~0.1 ms on the H200, so the whole call can take up to twice the plain one.)
    assert s["basis"] == "stream+outside", run
    assert s["outside_stream_ms"] > 0.5 * p["median_ms"], (plain, run)
    assert s["median_ms"] >= 0.75 * p["median_ms"], (plain, run)
    # Never more than the device end's time: only the host's latency is taken off it.
    assert s["median_ms"] <= s["device_median_ms"], run


def test_torch_work_outside_the_extension_fails(tmp_path, built):
    """Launch evidence: a forward whose GPU time is mostly PyTorch's own operators fails, and
    so does one whose extension call launches nothing; the reference solution passes with
    all its GPU time inside the extension."""
    ok = evaluate(tmp_path, SWISH, built[SWISH], args=["--no-compile", "--no-timing"])
    assert ok.rc == 0, ok
    ev = ok.result["verification"]["launches"]
    assert ev["extension_calls"] == 1 and ev["extension_kernels"] >= 1, ev
    assert ev["extension_share"] > 0.9, ev
    torch_heavy = swish_variant("""
        y = x * torch.sigmoid(x) * float(self.scale) + self.bias
        y = torch.tanh(torch.atanh(torch.clamp(y * 1e-3, -0.5, 0.5))) * 1e3
        return cuda_extension.swish_scale_bias(x, self.bias, float(self.scale), 0) + 0 * y
        """)
    run = evaluate(tmp_path, SWISH, built[SWISH], new=torch_heavy,
                   args=["--no-compile", "--no-timing"])
    assert run.rc == 1 and run.failure["kind"] == "launch_evidence", run
    assert "of the forward's GPU time" in run.failure["message"], run
    assert run.failure["details"]["defence"] == "launch_evidence"
    empty = swish_variant("""
        cuda_extension.swish_scale_bias(x[:0], self.bias, float(self.scale), 0)
        return x * torch.sigmoid(x) * float(self.scale) + self.bias
        """)
    run = evaluate(tmp_path, SWISH, built[SWISH], new=empty, args=["--no-compile", "--no-timing"])
    assert run.rc == 1 and run.failure["kind"] == "launch_evidence", run
    assert "no GPU kernel ran inside" in run.failure["message"], run


def test_cpu_extension_refused_for_cuda_run(tmp_path, built):
    """A tensor on the wrong device is the binding's error, reported as an exception."""
    body = "return cuda_extension.swish_scale_bias(x.cpu(), self.bias, float(self.scale), 0)"
    run = evaluate(tmp_path, SWISH, built[SWISH], new=swish_variant(body),
                   args=["--no-compile"])
    assert run.rc == 1 and run.failure["kind"] == "exception", run
    assert "CUDA tensor" in run.failure["message"], run


@pytest.mark.timing
def test_timing_repeatability(tmp_path, built):
    """Two runs of the same kernel agree on the median within 10%."""
    medians = []
    for _ in range(2):
        run = evaluate(tmp_path, SWISH, built[SWISH], args=["--no-compile"])
        assert run.rc == 0, run
        medians.append(run.result["timing"]["candidate"]["median_ms"])
    assert abs(medians[0] - medians[1]) <= 0.1 * min(medians), medians


@pytest.mark.timing
def test_device_timing_hides_the_hosts_launch_work():
    """timing="device" (issue 21): a lead kernel covers the host's side of each call, so a
    launch-bound forward (many tiny kernels: the host issues them slower than the GPU runs
    them) is timed by the GPU's work, below what the events method sees; a single kernel
    that is not launch-bound comes out about the same either way."""
    import timing  # harness/, on the path (see evaluate's import above)

    dev = torch.device("cuda")
    tiny = torch.zeros(32, device=dev)

    def launch_bound(t):
        for _ in range(64):
            t.add_(1.0)

    big = torch.randn(1 << 26, device=dev)  # ~0.2 ms of memory traffic: launch latency is noise
    runs = {}
    for mode in ("events", "device"):
        runs[mode, "tiny"] = timing.measure(launch_bound, lambda: [tiny], dev, 300, mode)
        runs[mode, "big"] = timing.measure(torch.sin, lambda: [big], dev, 300, mode)
    dev_tiny, ev_tiny = runs["device", "tiny"], runs["events", "tiny"]
    assert dev_tiny["method"] == "device" and dev_tiny["lead_ms"] >= timing.LEAD_MIN_MS
    assert dev_tiny["lead_short_fraction"] <= timing.LEAD_SHORT_FRACTION, dev_tiny
    assert dev_tiny["median_ms"] < 0.8 * ev_tiny["median_ms"], (dev_tiny, ev_tiny)
    # One large kernel: the lead hides only the launch latency (a few microseconds).
    dev_big, ev_big = runs["device", "big"], runs["events", "big"]
    assert 0.85 * ev_big["median_ms"] <= dev_big["median_ms"] <= 1.02 * ev_big["median_ms"], \
        (dev_big, ev_big)
