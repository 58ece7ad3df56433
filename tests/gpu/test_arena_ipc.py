"""The device-memory arena across two processes (harness/arena.py), on a GPU: memory exported
as a POSIX descriptor (CUDA VMM) and handed to another process, which maps it and sees what
this side wrote, in place; and the same across the candidate sandbox (another pid namespace,
where legacy CUDA IPC handles fail). Skipped, with the reason, without a CUDA device."""

import json
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
import candidate_proc as cp  # noqa: E402

CHILD = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import arena as ar
dev = torch.device("cuda:0")
torch.cuda.set_device(dev)
torch.empty(1, device=dev)
a = ar.open_arena(json.loads(sys.argv[2]), dev, int(sys.argv[3]))
x = a.view(0, torch.float32, (1024, 1024))
ok = bool(torch.equal(x, torch.arange(1 << 20, device=dev, dtype=torch.float32).view(1024, 1024)))
a.view(1 << 22, torch.float32, (1024, 1024)).copy_(x * 2)
x.add_(1)  # in place, as a mutating candidate would
torch.cuda.synchronize()
print("match" if ok else "differ")
a.close()
"""


def _run_child(a, sandboxed: bool):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES", "0"))
    # In the sandbox the descriptor becomes fd 3; outside it keeps its number.
    argv = [sys.executable, "-c", CHILD, str(HARNESS), json.dumps(a.desc),
            "3" if sandboxed else str(a.fd)]
    if sandboxed:
        bin_path = os.environ.get("CA_BIN") or os.environ.get("CUDA_AGENT")
        if not bin_path:
            pytest.skip("no cuda-agent binary (CA_BIN or CUDA_AGENT) for the sandbox")
        scratch = pathlib.Path(cp.make_base(None)) / "scratch"
        spec = {"scratch": str(scratch), "gpu": True, "fds": [a.fd],
                "ro": cp.read_only_paths(sys.executable) + [str(HARNESS)],
                "env": [f"{k}={v}" for k, v in cp.candidate_env("/workspace").items()]}
        argv = [bin_path, "candidate-sandbox", json.dumps(spec), "--", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env,
                          pass_fds=(a.fd,))


@pytest.mark.parametrize("sandboxed", [False, True], ids=["plain", "sandboxed"])
def test_arena_shared_with_a_child_process(monkeypatch, sandboxed):
    monkeypatch.delenv(ar.ARENA_ENV, raising=False)
    dev = torch.device("cuda:0")
    a, why = ar.create(8 << 20, dev)
    try:
        assert why is None, why
        assert a.kind == "cuda_vmm" and a.memory.device == dev and a.size >= 8 << 20
        assert a.fd >= 0
        assert int(a.memory.abs().sum()) == 0  # zeroed
        src = torch.arange(1 << 20, device=dev, dtype=torch.float32).view(1024, 1024)
        a.view(0, torch.float32, (1024, 1024)).copy_(src)
        torch.cuda.synchronize()
        proc = _run_child(a, sandboxed)
        assert proc.returncode == 0, proc.stderr[-4000:]
        assert proc.stdout.strip() == "match"
        assert torch.equal(a.view(1 << 22, torch.float32, (1024, 1024)), src * 2)
        assert torch.equal(a.view(0, torch.float32, (1024, 1024)), src + 1)
    finally:
        a.close()


def test_arena_is_not_the_caching_allocator():
    dev = torch.device("cuda:0")
    before = torch.cuda.memory_allocated(dev)
    a, _ = ar.create(64 << 20, dev)
    try:
        assert torch.cuda.memory_allocated(dev) - before < (1 << 20)
    finally:
        a.close()
