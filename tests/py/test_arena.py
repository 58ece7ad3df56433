"""Tests of harness/arena.py, the memory the trusted side and a candidate share, on the host
(the CUDA IPC side is exercised by the GPU suite)."""

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


def test_two_openings_share_one_mapping(tmp_path):
    mine, why = ar.create(1000, torch.device("cpu"), str(tmp_path))
    os.chdir(tmp_path)
    theirs = ar.open_arena(mine.desc, torch.device("cpu"))
    try:
        assert why is None and mine.size == 1024 and mine.desc["path"] == ar.ARENA_FILE
        theirs.view(256, torch.float64, (2, 3)).fill_(1.25)
        assert torch.equal(mine.view(256, torch.float64, (2, 3)), torch.full((2, 3), 1.25))
        mine.view(0, torch.bool, (4,)).fill_(True)
        assert theirs.view(0, torch.uint8, (4,)).tolist() == [1, 1, 1, 1]
        assert mine.view(0, torch.int16, (0,)).numel() == 0
    finally:
        mine.close()
        theirs.close()


def test_views_stay_inside_the_arena(tmp_path):
    a, _ = ar.create(512, torch.device("cpu"), str(tmp_path))
    try:
        with pytest.raises(ar.ArenaError, match="outside"):
            a.view(256, torch.float32, (65,))
        with pytest.raises(ar.ArenaError, match="outside"):
            a.view(-256, torch.float32, (1,))
        with pytest.raises(ar.ArenaError, match="outside"):
            a.view(4, torch.float32, (1,))  # not aligned
    finally:
        a.close()


def test_create_refuses_an_existing_file(tmp_path):
    (tmp_path / ar.ARENA_FILE).write_bytes(b"planted")
    with pytest.raises(FileExistsError):
        ar.create(512, torch.device("cpu"), str(tmp_path))


@pytest.mark.parametrize("desc, message", [
    (None, "bad arena description"),
    ({"kind": "mmap", "size": 0, "path": ar.ARENA_FILE}, "bad arena description"),
    ({"kind": "mmap", "size": 512, "path": "/etc/passwd"}, "bad arena file"),
    ({"kind": "mmap", "size": 512, "path": ar.ARENA_FILE}, "not 512 bytes"),
    ({"kind": "cuda_ipc", "size": 512, "handle": "00"}, "not on a CUDA device"),
    ({"kind": "shm", "size": 512}, "unknown arena kind"),
])
def test_open_refuses_bad_descriptions(tmp_path, desc, message):
    os.chdir(tmp_path)
    (tmp_path / ar.ARENA_FILE).write_bytes(b"x" * 100)
    with pytest.raises(ar.ArenaError, match=message):
        ar.open_arena(desc, torch.device("cpu"))


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


def test_ipc_handle_bytes_survive_nul_bytes():
    data = bytes([0, 1, 0, 255] * 16)
    assert ar._IpcHandle.from_bytes(data).to_bytes() == data
    with pytest.raises(ar.ArenaError, match="64 bytes"):
        ar._IpcHandle.from_bytes(data[:-1])


def test_arena_choice_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(ar.ARENA_ENV, "mmap")
    a, why = ar.create(512, torch.device("cpu"), str(tmp_path))
    a.close()
    assert a.kind == "mmap" and why is None
    monkeypatch.setenv(ar.ARENA_ENV, "shm")
    with pytest.raises(ar.ArenaError, match="expected auto or mmap"):
        ar.create(512, torch.device("cpu"), str(tmp_path / "x"))
