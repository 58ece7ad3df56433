"""cpus.py: a GPU runner's CPU cores (issue 21; docs/internals/evald.md, "CPU cores").

The evaluator service splits the host (src/eval/cpuplan.c) and tells each runner, in its
environment, the cores its timing runs on (CUDA_AGENT_TIMING_CPUS) and the cores where
everything else goes (CUDA_AGENT_AUX_CPUS: the compile pool's). The runner:

- pins itself to the timing cores at start, before torch is imported (so every thread torch
  and CUDA start inherits them);
- starts pre-warmed candidates from a thread that holds the aux cores for the moment
  (spawning_on): a child inherits the affinity of the thread that forks it, so their
  seconds of `import torch` and CUDA start-up stay off the cores that time the job in
  progress;
- moves a candidate onto the timing cores when it takes it for a job (move_tree: every
  thread of the process and of its descendants, for a candidate behind a sandbox wrapper).

Affinity only: sched_setaffinity needs no privilege for our own processes. Every function is
best effort and says what it did; a host or sandbox that refuses leaves things as they were.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

TIMING_ENV = "CUDA_AGENT_TIMING_CPUS"
AUX_ENV = "CUDA_AGENT_AUX_CPUS"


def parse_list(text: str | None) -> set[int] | None:
    """{0, 1, 2, 3, 6} for "0-3,6"; None for None, "" or anything that is not a CPU list."""
    if not text:
        return None
    out: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            a, b = int(lo), int(hi or lo)
            if a < 0 or b < a:
                return None
            out.update(range(a, b + 1))
    except ValueError:
        return None
    return out or None


def from_env(env: dict | None = None) -> tuple[set[int] | None, set[int] | None]:
    """(timing cores, aux cores) from the environment, each None when not set."""
    env = os.environ if env is None else env
    return parse_list(env.get(TIMING_ENV)), parse_list(env.get(AUX_ENV))


def pin_self(cpus: set[int] | None) -> bool:
    """This thread (at start-up: the process) onto cpus; False when not done."""
    if not cpus:
        return False
    try:
        os.sched_setaffinity(0, cpus)
        return True
    except OSError:
        return False


@contextlib.contextmanager
def spawning_on(cpus: set[int] | None) -> Iterator[None]:
    """This thread holds cpus inside the block (the processes it starts there inherit them),
    and its own affinity again after it."""
    if not cpus:
        yield
        return
    try:
        saved = os.sched_getaffinity(0)
        os.sched_setaffinity(0, cpus)
    except OSError:
        yield
        return
    try:
        yield
    finally:
        try:
            os.sched_setaffinity(0, saved)
        except OSError:
            pass


def descendants(pid: int) -> list[int]:
    """pid and every process below it (through /proc/PID/task/TID/children)."""
    out, todo = [], [pid]
    while todo and len(out) < 4096:
        p = todo.pop()
        out.append(p)
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children", encoding="ascii") as f:
                    todo.extend(int(x) for x in f.read().split())
            except (OSError, ValueError):
                pass
    return out


def move_tree(pid: int, cpus: set[int] | None) -> tuple[int, int]:
    """Every thread of pid and of its descendants onto cpus; (threads moved, threads that
    refused: another user's without CAP_SYS_NICE here)."""
    if not cpus:
        return 0, 0
    moved = refused = 0
    for p in descendants(pid):
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                os.sched_setaffinity(int(tid), cpus)
                moved += 1
            except PermissionError:
                refused += 1
            except (OSError, ValueError):
                pass  # gone meanwhile
    return moved, refused


def allowed_list(pid: int | str = "self") -> str | None:
    """The kernel's Cpus_allowed_list of a process, or None."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Cpus_allowed_list:"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None
