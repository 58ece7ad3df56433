"""Tests of harness/arena.py, the memory the trusted side and a candidate share, on the host
(the device-memory side is exercised by the GPU suite, tests/gpu/test_arena_ipc.py)."""

from __future__ import annotations

import os
import pathlib
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "harness"))
import arena as ar  # noqa: E402  (needs torch)


def test_layout_aligns_every_slot():
    lay = ar.Layout()
    offsets = [lay.take(n) for n in (1, 0, 256, 257, 4)]
    assert offsets == [0, 256, 512, 768, 1280]
    assert lay.size == 1536 and all(o % ar.ALIGN == 0 for o in offsets)


def test_two_openings_share_one_mapping():
    mine, why = ar.create(1000, torch.device("cpu"))
    theirs = ar.open_arena(mine.desc, torch.device("cpu"), os.dup(mine.fd))
    try:
        assert why is None and mine.size == 1024 and mine.kind == "memfd"
        assert os.readlink(f"/proc/self/fd/{mine.fd}").startswith("/memfd:cuda-agent-arena")
        theirs.view(256, torch.float64, (2, 3)).fill_(1.25)
        assert torch.equal(mine.view(256, torch.float64, (2, 3)), torch.full((2, 3), 1.25))
        mine.view(0, torch.bool, (4,)).fill_(True)
        assert theirs.view(0, torch.uint8, (4,)).tolist() == [1, 1, 1, 1]
        assert mine.view(0, torch.int16, (0,)).numel() == 0
    finally:
        mine.close()
        theirs.close()
    assert mine.fd == -1 and theirs.fd == -1  # each closed its descriptor


def test_views_stay_inside_the_arena():
    a, _ = ar.create(512, torch.device("cpu"))
    try:
        with pytest.raises(ar.ArenaError, match="outside"):
            a.view(256, torch.float32, (65,))
        with pytest.raises(ar.ArenaError, match="outside"):
            a.view(-256, torch.float32, (1,))
        with pytest.raises(ar.ArenaError, match="outside"):
            a.view(4, torch.float32, (1,))  # not aligned
    finally:
        a.close()


@pytest.mark.parametrize("desc, fd, message", [
    (None, "arena", "bad arena description"),
    ({"kind": "memfd", "size": 0}, "arena", "bad arena description"),
    ({"kind": "memfd", "size": 512}, None, "no descriptor"),
    ({"kind": "memfd", "size": 4096}, "arena", "not 4096 bytes"),
    ({"kind": "cuda_vmm", "size": 512}, "arena", "not on a CUDA device"),
    ({"kind": "cuda_ipc", "size": 512, "handle": "00"}, "arena", "unknown arena kind"),
    ({"kind": "shm", "size": 512}, "arena", "unknown arena kind"),
])
def test_open_refuses_bad_descriptions(desc, fd, message):
    a, _ = ar.create(512, torch.device("cpu"))
    try:
        with pytest.raises(ar.ArenaError, match=message):
            ar.open_arena(desc, torch.device("cpu"), a.fd if fd else -1)
    finally:
        a.close()


def test_dtype_and_shape_parsing():
    assert ar.dtype_from_name("torch.bfloat16") is torch.bfloat16
    assert ar.dtype_from_name("int64") is torch.int64
    for bad in ("torch.Tensor", "nn", 3, None):
        with pytest.raises(ar.ArenaError):
            ar.dtype_from_name(bad)
    assert ar.shape_from_list([2, 0, 5]) == (2, 0, 5)
    for bad in ((2, 3), [True], [1.0], [-1], [1 << 50], list(range(65))):
        with pytest.raises(ar.ArenaError):
            ar.shape_from_list(bad)


def test_arena_choice_from_the_environment(monkeypatch):
    monkeypatch.setenv(ar.ARENA_ENV, "mmap")
    a, why = ar.create(512, torch.device("cpu"))
    a.close()
    assert a.kind == "memfd" and why is None
    monkeypatch.setenv(ar.ARENA_ENV, "shm")
    with pytest.raises(ar.ArenaError, match="expected auto or mmap"):
        ar.create(512, torch.device("cpu"))
