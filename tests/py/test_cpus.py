"""Tests of harness/cpus.py (issue 21), no PyTorch needed: CPU lists, a thread that starts
processes on other cores and gets its own back, and a process tree moved onto other cores,
as /proc shows them."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "harness"))
import cpus  # noqa: E402

ALLOWED = sorted(os.sched_getaffinity(0))
two = pytest.mark.skipif(len(ALLOWED) < 2, reason="this process may run on one CPU only")


def test_parse_list():
    assert cpus.parse_list("0-3,6") == {0, 1, 2, 3, 6}
    assert cpus.parse_list("5") == {5}
    for bad in (None, "", "3-1", "x", "1,,2-"):
        assert cpus.parse_list(bad) is None, bad
    assert cpus.from_env({"CUDA_AGENT_TIMING_CPUS": "1", "CUDA_AGENT_AUX_CPUS": "0"}) == \
        ({1}, {0})
    assert cpus.from_env({}) == (None, None)


@two
def test_children_started_inside_spawning_on_inherit_its_cores_and_the_thread_gets_its_own_back():
    before = os.sched_getaffinity(0)
    with cpus.spawning_on({ALLOWED[0]}):
        p = subprocess.Popen(["sleep", "5"])
    try:
        assert os.sched_getaffinity(0) == before
        assert cpus.allowed_list(p.pid) == str(ALLOWED[0])
    finally:
        p.kill()
        p.wait()


@two
def test_move_tree_moves_a_process_and_its_children():
    with cpus.spawning_on({ALLOWED[0]}):
        p = subprocess.Popen(["sh", "-c", "sleep 5 & sleep 5; wait"])
    try:
        for _ in range(50):
            tree = cpus.descendants(p.pid)
            if len(tree) >= 3:
                break
            time.sleep(0.05)
        assert len(tree) >= 3, tree  # sh and its two sleeps
        assert all(cpus.allowed_list(q) == str(ALLOWED[0]) for q in tree)
        moved, refused = cpus.move_tree(p.pid, {ALLOWED[-1]})
        assert moved >= 3 and refused == 0
        assert all(cpus.allowed_list(q) == str(ALLOWED[-1]) for q in tree)
        assert cpus.move_tree(p.pid, None) == (0, 0)
    finally:
        for q in cpus.descendants(p.pid)[::-1]:
            try:
                os.kill(q, 9)
            except OSError:
                pass
        p.wait()
