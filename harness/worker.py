#!/usr/bin/env python3
"""worker.py: a long-lived trusted GPU runner: evaluate.py without the start-up costs.

    python3 harness/worker.py (--sandbox CUDA_AGENT | --no-sandbox) [--device cuda|cpu]
        [--prewarm N] [--python PATH]

The evaluator service (src/eval/gpupool.c) starts one worker per visible GPU (with
CUDA_VISIBLE_DEVICES naming that GPU) and sends it one job at a time. The worker has torch
imported and the device initialised once, and keeps N candidate processes pre-warmed (torch
imported, device initialised, waiting for a job; each is used for one job and then killed),
so that an evaluation pays for neither `import torch` nor CUDA start-up on either side; and
after each job it draws the next job's input sets for the same task in the background
(evaluate.SetPrefetch), so that a warm evaluation does not wait for get_inputs() either.
Baseline timings stay cached on disk by evaluate.py (keyed by task hash, GPU, PyTorch).
After every job the worker's GPU memory goes back to its idle level (between_jobs: freed,
measured, logged on stderr and returned in the reply's "memory"); the prefetched sets are
the only per-task state kept, within memplan.PREFETCH_BUDGET.

Protocol (JSON lines): requests on stdin, {"id": ID, "argv": [evaluate.py arguments]};
replies on the file descriptor that was stdout at start, {"id": ID, "rc": STATUS,
"elapsed_s": T, "memory": {...} (CUDA)}, the result itself being written to the request's --out exactly as
`evaluate.py ARGV` would (same exit status too). Before the first request the worker writes
{"ready": true, "device": ..., "torch": ...}. Everything else this process or the task code
prints goes to stderr, never into the reply channel. EOF on stdin ends the worker.
With --timing-signals, each timed section of a job (the candidate's timing, each baseline)
is announced on the reply channel as {"timing": true} and {"timing": false} before the
job's reply: the evaluator holds new compiler runs back meanwhile (src/eval/cpuplan.h).

CPU cores (issue 21, harness/cpus.py): with CUDA_AGENT_TIMING_CPUS set the worker pins
itself there before importing torch; pre-warmed candidates are started on
CUDA_AGENT_AUX_CPUS and moved onto the timing cores when they take a job.
Exit status: 0 at EOF; 2 bad arguments.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if not sys.path or os.path.abspath(sys.path[0]) != _HERE:
    sys.path.insert(0, _HERE)

# The reply channel is a private copy of stdout; fd 1 then points at stderr, so that nothing
# printed by this process (task code included) can be taken for a reply.
_REPLY = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
os.dup2(2, 1)

import cpus  # noqa: E402

# Before torch: every thread it starts inherits the timing cores.
_TIMING_CPUS, _AUX_CPUS = cpus.from_env()
cpus.pin_self(_TIMING_CPUS)

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import candidate_proc as cp  # noqa: E402
import evaluate  # noqa: E402  (imports torch)
import memplan  # noqa: E402
import timing  # noqa: E402
import torch  # noqa: E402

MAX_REQUEST_BYTES = 1 << 20


def reply(msg: dict) -> None:
    _REPLY.write(json.dumps(msg, separators=(",", ":")) + "\n")
    _REPLY.flush()


class PlacedPool(cp.CandidatePool):
    """A CandidatePool whose candidates warm up on the aux cores and time on the timing
    cores (harness/cpus.py)."""

    def fill(self) -> None:
        with cpus.spawning_on(_AUX_CPUS if _TIMING_CPUS else None):
            super().fill()

    def take(self, python: str, device: str, sandbox: cp.Sandbox, wait_s: float):
        c = super().take(python, device, sandbox, wait_s)
        if c is not None and _TIMING_CPUS:
            moved, refused = cpus.move_tree(c.proc.pid, _TIMING_CPUS)
            if refused or not moved:
                # E.g. a sandboxed candidate of another user without CAP_SYS_NICE here: its
                # threads time on the aux cores. Said, never fatal.
                print(f"worker: candidate {c.proc.pid}: {refused} thread(s) refused the move "
                      f"onto the timing cores ({moved} moved)", file=sys.stderr, flush=True)
        return c


class TimingSignals:
    """opts.timing_hook: announces timed sections on the reply channel (quality.Window)."""

    def __init__(self) -> None:
        self.open = False

    def __call__(self, on: bool) -> None:
        if bool(on) != self.open:
            self.open = bool(on)
            reply({"timing": self.open})

    def reset(self) -> None:
        self(False)


def handle(line: str, pool: cp.CandidatePool, prefetch: evaluate.SetPrefetch,
           python: str, signals: TimingSignals | None = None) -> dict:
    try:
        req = json.loads(line)
    except ValueError:
        return {"id": None, "rc": 2, "error": "request is not JSON"}
    if not isinstance(req, dict) or not isinstance(req.get("argv"), list) or \
            not all(isinstance(a, str) for a in req["argv"]):
        return {"id": None, "rc": 2, "error": "request needs \"argv\": [strings]"}
    rid = req.get("id")
    parser = evaluate.build_parser()
    try:
        opts = parser.parse_args(req["argv"])
    except SystemExit as e:  # argparse reports to stderr and exits; a job error here
        return {"id": rid, "rc": 2, "error": f"bad evaluate.py arguments (status {e.code})"}
    if "--python" not in req["argv"]:
        opts.python = python
    opts.pool = pool
    opts.prefetch = prefetch
    opts.timing_hook = signals
    t0 = time.monotonic()
    try:
        rc = evaluate.run(opts)
    finally:
        if signals is not None:
            signals.reset()  # a section cut short by a failure is closed too
    out = {"id": rid, "rc": rc, "elapsed_s": round(time.monotonic() - t0, 4)}
    if opts.device == "cuda":
        out["memory"] = between_jobs(prefetch, timing.resolve_device(torch.device("cuda")))
    return out


def between_jobs(prefetch: evaluate.SetPrefetch, device: torch.device) -> dict:
    """After a job: the runner's GPU memory back at its idle level. Whatever the job left is
    freed (gc, the caching allocator's free blocks); the one piece of per-task state kept, the
    next job's prefetched sets, is dropped when it exceeds memplan.PREFETCH_BUDGET. Measured
    and logged (stderr, one JSON line) and returned for the reply."""
    prefetch.wait()
    held = prefetch.held_bytes()
    if held > memplan.PREFETCH_BUDGET:
        prefetch.drop()
    mem = memplan.release(device)
    mem["prefetch_bytes"] = prefetch.held_bytes()
    print(json.dumps({"event": "worker_idle", **mem}), file=sys.stderr, flush=True)
    return mem


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="worker.py", description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--prewarm", type=int, default=2,
                   help="candidate processes kept pre-warmed (default 2; 0: start on demand)")
    p.add_argument("--python", default=sys.executable,
                   help="interpreter of the candidate processes (default: this one)")
    p.add_argument("--tmp-dir", help="where candidate directories are made (default TMPDIR)")
    box = p.add_mutually_exclusive_group(required=True)
    box.add_argument("--sandbox", metavar="CUDA_AGENT",
                     help="pre-warm candidates in the candidate sandbox of this binary")
    box.add_argument("--no-sandbox", action="store_true",
                     help="pre-warm candidates WITHOUT isolation (unsafe)")
    p.add_argument("--timing-signals", action="store_true",
                   help="announce timed sections as {\"timing\": true|false} lines")
    opts = p.parse_args(argv)
    if opts.prewarm < 0:
        p.error("--prewarm must be >= 0")
    device = timing.resolve_device(torch.device(opts.device))
    if device.type == "cuda":
        if not torch.cuda.is_available():
            reply({"ready": False, "error": "--device cuda, but no CUDA device is usable"})
            return 3
        torch.cuda.set_device(device)
        torch.zeros(1, device=device)  # creates the context now
    pool = PlacedPool(opts.python, opts.device, opts.prewarm, cp.Sandbox.from_opts(opts),
                      opts.tmp_dir)
    signals = TimingSignals() if opts.timing_signals else None
    prefetch = evaluate.SetPrefetch()
    try:
        pool.fill()
        reply({"ready": True, "device": str(device), "torch": torch.__version__,
               "pid": os.getpid(), "timing_cpus": cpus.allowed_list() if _TIMING_CPUS else None,
               "aux_cpus": sorted(_AUX_CPUS) if _AUX_CPUS else None})
        while True:
            line = sys.stdin.readline(MAX_REQUEST_BYTES + 1)
            if not line:
                return 0
            if not line.strip():
                continue
            if len(line) > MAX_REQUEST_BYTES:
                reply({"id": None, "rc": 2, "error": "request too long"})
                return 2
            reply(handle(line, pool, prefetch, opts.python, signals))
            pool.fill()
    finally:
        prefetch.wait()  # a draw in progress must not be cut by the interpreter's exit
        pool.close()


if __name__ == "__main__":
    sys.exit(main())
