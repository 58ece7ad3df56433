"""What the evaluator keeps alive through a job (issue 22), CPU mode: a census of the live
tensors at the end of every phase of evaluate.py (memplan.phase_mark), taken without running
the cyclic garbage collector, so that tensors kept by reference cycles count as they do on a
GPU (where the caching allocator cannot reuse them until the collector runs). Under the
smallest (lazy) plan no phase may hold more than the plan's trusted share, and no set drawn
from a recipe may hold its tensors once it has been compared.

On the H200 (bench/kb_memory.py, 12 GiB elementwise tasks) the evaluator overshot its share by
20 GiB and more: every comparison left its outputs in a cycle (harness_util.flatten_outputs'
recursive closure), the value-stress set stayed resident with its two references, and the
post-timing set kept its references through the baselines."""

from __future__ import annotations

import gc
import pathlib
import sys
import textwrap
import weakref

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from test_harness import evaluate  # noqa: E402

import harness_util as hu  # noqa: E402  (harness/, on the path through test_harness)
import memplan  # noqa: E402

ROWS, COLS = 64, 16384
SET_BYTES = ROWS * COLS * 4  # one input (or output) of the task's own shape

TASK = textwrap.dedent(f"""
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def forward(self, x):
            return torch.relu(x)

    def get_inputs():
        return [torch.rand({ROWS}, {COLS})]

    def get_init_inputs():
        return []
    """)
EXT = "import torch\n\n\ndef relu(x):\n    return torch.relu(x)\n"
NEW = textwrap.dedent("""
    import torch.nn as nn

    import cuda_extension


    class ModelNew(nn.Module):
        def forward(self, x):
            return cuda_extension.relu(x)
    """)


def live_storages() -> dict[int, tuple[int, torch.Tensor]]:
    """{address: (bytes, a tensor on it)} of every live CPU storage of at least a quarter of a
    set, garbage in cycles included."""
    seen: dict[int, tuple[int, torch.Tensor]] = {}
    for o in gc.get_objects():
        if isinstance(o, torch.Tensor) and o.device.type == "cpu":
            st = o.untyped_storage()
            if st.nbytes() >= SET_BYTES // 4:
                seen[st.data_ptr()] = (st.nbytes(), o)
    return seen


def live_bytes(before: dict[int, tuple[int, torch.Tensor]]) -> int:
    """Bytes of the live storages (each counted once) that were not live before the job: what
    earlier tests in this process keep (module globals, caches) is not the job's. The tensors
    in before are held, so no storage of the job can take one of their addresses."""
    return sum(n for ptr, (n, _t) in live_storages().items() if ptr not in before)


def holders() -> dict[str, int]:
    """Per input set and attribute, the bytes its tensors hold."""
    out: dict[str, int] = {}
    for o in gc.get_objects():
        if type(o).__name__ != "InputSet":
            continue
        for k in ("orig", "ref", "ref64"):
            v = getattr(o, k, None)
            vs = v if isinstance(v, (list, tuple)) else [v]
            b = sum(t.untyped_storage().nbytes() for t in vs if isinstance(t, torch.Tensor))
            if b:
                out[f"{o.kind}#{o.index}.{k}"] = b
    return out


def test_no_phase_holds_more_than_the_lazy_plans_share(tmp_path, monkeypatch):
    marks: list[tuple[str, int, dict[str, int]]] = []
    gc.collect()  # earlier tests' garbage out of the census
    before = live_storages()
    monkeypatch.setattr(memplan, "phase_mark",
                        lambda device, name: marks.append((name, live_bytes(before), holders())))
    run = evaluate(tmp_path, task=TASK, ext=EXT, new=NEW, args=("--memory-lazy",))
    assert run.rc == 0, run
    plan = run.result["memory"]["plan"]
    assert plan["lazy"] and plan["window"] == 1, plan
    names = [m[0] for m in marks]
    assert names[:5] == ["draw", "set0_reference", "setup", "arena", "verify"], names
    assert "baselines" in names, names
    for name, live, held in marks:
        # The census counts the arena too (host memory on the CPU), as the plan does.
        assert live <= plan["trusted_bytes"], (name, live / SET_BYTES, held, plan)
    after_setup = {name: held for name, _live, held in marks[2:]}
    for name, held in after_setup.items():
        # Once its scale is chosen, the value-stress set is drawn again when its turn comes;
        # a compared set keeps nothing; set 0 comes back for the baselines only.
        assert not [k for k in held if k.startswith(("value-stress", "random#", "adversarial",
                                                     "post-timing"))
                    and not (name == "baselines" and k.startswith("random#0.")
                             and not k.endswith("ref64"))
                    and not (name == "setup" and k.startswith("random#0."))], (name, held)


def test_flatten_outputs_leaves_no_cycle_holding_the_outputs():
    gc.collect()
    gc.disable()
    try:
        t = torch.zeros(4)
        alive = weakref.ref(t)
        leaves = hu.flatten_outputs([(t, 1.0), [t]])
        assert [x is t for x in leaves] == [True, False, True]
        assert leaves[1] == 1.0
        del t, leaves
        assert alive() is None  # freed by its reference count, no collector needed
    finally:
        gc.enable()
    with pytest.raises(TypeError, match=r"output \[1\]\[0\] is a builtins.str"):
        hu.flatten_outputs([torch.zeros(1), ["x"]])
