"""The CUDA IPC arena across two processes (harness/arena.py), on a GPU: what one side writes
the other reads, in place, with no copy. Skipped, with the reason, without a CUDA device."""

import os
import pathlib
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: torch.cuda.is_available() is False", allow_module_level=True)

HARNESS = pathlib.Path(__file__).resolve().parents[2] / "harness"
sys.path.insert(0, str(HARNESS))
import arena as ar  # noqa: E402

CHILD = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import arena as ar
dev = torch.device("cuda:0")
torch.cuda.set_device(dev)
torch.empty(1, device=dev)
a = ar.open_arena(json.loads(sys.argv[2]), dev)
x = a.view(0, torch.float32, (1024, 1024))
ok = bool(torch.equal(x, torch.arange(1 << 20, device=dev, dtype=torch.float32).view(1024, 1024)))
a.view(1 << 22, torch.float32, (1024, 1024)).copy_(x * 2)
x.add_(1)  # in place, as a mutating candidate would
torch.cuda.synchronize()
print("match" if ok else "differ")
a.close()
"""


def test_arena_shared_with_a_child_process(tmp_path, monkeypatch):
    monkeypatch.delenv(ar.ARENA_ENV, raising=False)
    dev = torch.device("cuda:0")
    a, why = ar.create(8 << 20, dev, str(tmp_path))
    try:
        assert why is None, why
        assert a.kind == "cuda_ipc" and a.memory.device == dev and a.size == 8 << 20
        assert int(a.memory.abs().sum()) == 0  # zeroed
        src = torch.arange(1 << 20, device=dev, dtype=torch.float32).view(1024, 1024)
        a.view(0, torch.float32, (1024, 1024)).copy_(src)
        torch.cuda.synchronize()
        import json
        proc = subprocess.run([sys.executable, "-c", CHILD, str(HARNESS), json.dumps(a.desc)],
                              capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, CUDA_VISIBLE_DEVICES=os.environ.get(
                                  "CUDA_VISIBLE_DEVICES", "0")))
        assert proc.returncode == 0, proc.stderr[-4000:]
        assert proc.stdout.strip() == "match"
        assert torch.equal(a.view(1 << 22, torch.float32, (1024, 1024)), src * 2)
        assert torch.equal(a.view(0, torch.float32, (1024, 1024)), src + 1)
    finally:
        a.close()


def test_arena_is_not_the_caching_allocator(tmp_path):
    dev = torch.device("cuda:0")
    before = torch.cuda.memory_allocated(dev)
    a, _ = ar.create(64 << 20, dev, str(tmp_path))
    try:
        assert torch.cuda.memory_allocated(dev) - before < (1 << 20)
    finally:
        a.close()
