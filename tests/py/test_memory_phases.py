"""The evaluator's own memory, phase by phase, in CPU mode (issue 22): every CPU tensor the
trusted side allocates is counted while it lives (livebytes.LiveBytes) and each phase's peak
(memplan.phase_mark's phases: draw, set-0 reference, setup, arena, verify, timing, baselines)
is held to the job's memory plan and to the issue's bound.

Why on the CPU: the GPU's measurements (torch.cuda.max_memory_allocated per phase) come from
a device this suite does not have. Counted this way, the harness as it was before the
adversarial set was drawn in slices gave, on a ReLU task with a 64 MiB input and slices of 1M
elements (so that it stands for a task whose inputs span many slices), phase peaks of 3.2,
4.3, 7.5, 2.5, 9.7, 4.0 and 4.5 input sizes; an H100 measured 3.0, 4.2, 7.4, 2.3, 9.5, 4.4
and 4.3 on the 12 GiB ReLU task (docs/BENCHMARKS.md). The arena is not among them (device
memory of its own on a GPU, a file mapped on the CPU, outside both counts): the plan's
trusted_bytes includes it, so it is added back for the phases that have it.
Skipped, with the reason, without PyTorch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

import harness_case as hc  # noqa: E402  (puts harness/ on the path)
import memplan  # noqa: E402
from livebytes import LiveBytes  # noqa: E402

ROWS, COLS = 64, 1 << 18  # a 64 MiB float32 input
SLICE = 1 << 20           # 1/16 of it: the sliced passes as on a multi-GiB input
INPUT = ROWS * COLS * 4
SMALL = 8 << 20           # below a slice: memplan.FIXED_OVERHEAD's part on a GPU

TASK = f'''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn({ROWS}, {COLS})]


def get_init_inputs():
    return []
'''
EXT = "import torch\n\n\ndef relu(x):\n    return torch.relu(x)\n"
NEW = """
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.relu(x)
"""


def test_the_meter_counts_storages_while_they_live():
    import mmap
    meter = LiveBytes()
    with meter:
        a = torch.randn(1 << 16)                   # 256 KiB
        start = meter.start("phase")
        b = a * 2                                  # +256 KiB
        v = b[10:]                                 # a view: no more
        c = b.double()                             # +512 KiB, freed next line
        del c
        assert meter.now == start + (1 << 18)
        a.add_(1)                                  # in place: no more
        del b
        assert meter.now == start + (1 << 18)      # the view keeps b's storage
        del v
        assert meter.now == start and meter.peak("phase") == start + (3 << 18)
        shared = torch.frombuffer(mmap.mmap(-1, 1 << 20), dtype=torch.uint8)
        assert meter.now == start and shared[4:].numel() == (1 << 20) - 4  # not PyTorch's
        assert meter.now == start


PLANS = {"roomiest": [], "window 1": ["--memory-window", "1"], "lazy": ["--memory-lazy"],
         "lean": ["--memory-lean"]}


def phases_of(tmp_path, mp, args):
    """Evaluates the ReLU task under the meter; returns the run and its phases, each
    {"phase", "peak", "end"} in bytes (the arena excluded)."""
    meter, phases = LiveBytes(), []
    mp.setattr(memplan, "SLICE_ELEMS", SLICE)
    reset = memplan.reset_peak

    def reset_peak(device):
        phases.clear()
        meter.start("phase")
        return reset(device)

    def phase_mark(device, name):
        phases.append({"phase": name, "peak": meter.peak("phase"), "end": meter.now})
        meter.start("phase")

    mp.setattr(memplan, "reset_peak", reset_peak)
    mp.setattr(memplan, "phase_mark", phase_mark)
    # The reference forward's own peak, which the footprint takes from the GPU's counters.
    mp.setattr(memplan, "forward_peak_begin", lambda device: meter.start("forward"))
    mp.setattr(memplan, "forward_peak_end",
               lambda device, base: max(0, meter.peak("forward") - base))
    with meter:
        run = hc.evaluate(tmp_path, task=TASK, new=NEW, ext=EXT, args=args)
    assert run.rc == 0 and run.result["ok"] is True and run.result["stage"] == "done", run
    return run, phases


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each plan's run, made once for the tests below."""
    done = {}

    def get(name):
        if name not in done:
            with pytest.MonkeyPatch.context() as mp:
                done[name] = phases_of(tmp_path_factory.mktemp("phases"), mp, PLANS[name])
        return done[name]
    return get


def report(phases):
    return ", ".join(f"{p['phase']} {p['peak'] / INPUT:.2f}" for p in phases)


@pytest.mark.parametrize("plan", list(PLANS))
def test_every_phase_within_the_plan(runs, plan):
    run, phases = runs(plan)
    mem = run.result["memory"]
    assert mem["plan"]["level"] == (0 if plan == "roomiest" else 1), mem
    arena = run.result["verification"]["transport"]["bytes"]
    names = [p["phase"] for p in phases]
    assert names == ["draw", "set0_reference", "setup", "arena", "verify", "timing",
                     "baselines"], names
    # The arena lives from its phase to the candidate's end (closed before the baselines).
    with_arena = [p["peak"] + (arena if p["phase"] in ("arena", "verify", "timing") else 0)
                  for p in phases]
    print(f"{plan}: trusted {mem['plan']['trusted_bytes'] / INPUT:.2f}, arena "
          f"{arena / INPUT:.2f}; {report(phases)} (input sizes)")
    # The plan counts inputs, outputs, references and slices; what is smaller than a slice
    # (scalars, index tensors) falls to memplan.FIXED_OVERHEAD on a GPU.
    assert max(with_arena) <= mem["plan"]["trusted_bytes"] + SMALL, (report(phases), mem)


def test_the_lean_plan_keeps_to_three_footprints(runs):
    """Issue 22's bound (about 3x the footprint plus a fixed overhead: 8 GiB on a 12 GiB
    task, 0.67 of its footprint; half a footprint here), the arena included. Before the
    adversarial set was drawn in slices, drawing it again before its comparison took verify
    to 9.7 input sizes and the arena to 4.5 more (7.1 footprints); before choose_stress_scale
    dropped the unscaled reference, setup reached 7.5 (3.8); before set 0 shared the first
    group's slots, verify with the arena reached 8.4 (4.2)."""
    run, phases = runs("lean")
    fp = run.result["memory"]["footprint"]
    footprint = fp["input_bytes"] + fp["output_bytes"]
    assert footprint == 2 * INPUT
    arena = run.result["verification"]["transport"]["bytes"]
    assert arena < 2.5 * INPUT  # one group of slots, and the derived sets'
    worst = max(p["peak"] + (arena if p["phase"] in ("arena", "verify", "timing") else 0)
                for p in phases)
    assert worst <= 3.5 * footprint, report(phases)
    # At the end nothing of the job is left but set 0 and what the baselines keep.
    assert phases[-1]["end"] <= 3 * INPUT, report(phases)
