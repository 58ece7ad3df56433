"""candidate_proc.py: the trusted side's handle on one candidate process (harness/candidate.py),
and the pool of pre-warmed ones a long-lived runner keeps.

Every candidate process starts the same way, on demand or pre-warmed: it imports torch,
initialises its device, installs the lockdown filter (in the sandbox), says "ready", and then
waits for its job on its control socket (its stdin, a Unix socket pair): one JSON line
{"job": DIR} carrying the arena's descriptor (SCM_RIGHTS). Later lines ("time", "post",
anything else to stop) go the same way. Its messages come back as JSON lines on a pipe.

Each process has a directory of its own, BASE:
    BASE/job/      what the trusted side writes for it (job.json, the inputs' metadata, the
                   extension, model_new.py, state dicts): read-only to the candidate
    BASE/scratch/  the candidate's only writable directory (its HOME and TMPDIR), /workspace
                   in the sandbox

In the sandbox (`cuda-agent candidate-sandbox`, src/eval/candbox.c) the process sees the
system directories, the interpreter and PyTorch, the harness and BASE/job read-only, its
scratch directory, a private /tmp, the GPU's device nodes and nothing else: not the trusted
process (another pid namespace), not the compile cache, the baselines or the reference's
files, no network. Without it (--no-sandbox, the operator's explicit choice) it is a plain
child process and the report says so.

What the candidate reports of its own failure is cleaned before the result carries it
(sanitize_failure).
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import harness_util as hu

_HERE = os.path.dirname(os.path.abspath(__file__))
CANDIDATE_PY = os.path.join(_HERE, "candidate.py")
ENV_PASSTHROUGH = ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "PYTHONPATH",
                   "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "OMP_NUM_THREADS",
                   "MKL_NUM_THREADS")
# In the sandbox: the report pipe is given as fd 3 and the lockdown filter as fd 4.
INSIDE_REPORT_FD = 3
INSIDE_LOCKDOWN_FD = 4
SCRATCH_INSIDE = "/workspace"
# Host memory of one candidate process (its cgroup), where cgroups can be made.
DEFAULT_MEMORY_BYTES = 32 << 30
# The unprivileged host user candidates run as when the evaluator is root (candbox.h).
CANDIDATE_UID = 61999
STOP_GRACE_S = 5.0


class Sandbox:
    """How candidate processes are isolated: `cuda-agent candidate-sandbox` (bin), or not at
    all (bin None: --no-sandbox)."""

    def __init__(self, bin_path: str | None, memory_bytes: int = DEFAULT_MEMORY_BYTES):
        self.bin = os.path.abspath(bin_path) if bin_path else None
        self.memory_bytes = memory_bytes

    @property
    def on(self) -> bool:
        return self.bin is not None

    def key(self) -> tuple[Any, ...]:
        return (self.bin, self.memory_bytes)

    @staticmethod
    def from_opts(opts: Any) -> "Sandbox":
        return Sandbox(None if getattr(opts, "no_sandbox", False) else opts.sandbox)


_runtime_lock = threading.Lock()
_runtime_dir: str | None = None
RUNTIME_FILES = ("candidate.py", "timing.py", "harness_util.py", "arena.py", "model_state.py")


def runtime_dir() -> str:
    """A private, world-readable copy of the harness files the candidate process runs
    (made once per trusted process, removed at its exit). The harness itself usually lives
    in the evaluator's cache, which the candidate must not see and, when the candidate runs
    as its own user, cannot even reach."""
    global _runtime_dir
    with _runtime_lock:
        if _runtime_dir is None or not os.path.isdir(_runtime_dir):
            d = tempfile.mkdtemp(prefix="cuda-agent-harness-")
            for name in RUNTIME_FILES:
                shutil.copyfile(os.path.join(_HERE, name), os.path.join(d, name))
                os.chmod(os.path.join(d, name), 0o644)
            os.chmod(d, 0o755)
            atexit.register(shutil.rmtree, d, True)
            _runtime_dir = d
        return _runtime_dir


def read_only_paths(python: str) -> list[str]:
    """Host paths the candidate needs read-only: the interpreter's installation and every
    import path (PyTorch among them). System directories are visible anyway and skipped by
    the sandbox; the trusted side's caches and files are never among these (the harness's
    own directory is not either: the candidate gets runtime_dir())."""
    paths: list[str] = []
    exe = os.path.abspath(python)
    paths.append(os.path.dirname(os.path.dirname(exe)))  # a venv's root, or /usr
    for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path,
              *os.environ.get("PYTHONPATH", "").split(os.pathsep)):
        if p and os.path.isabs(p) and os.path.realpath(p) != os.path.realpath(_HERE):
            paths.append(p)
    out: list[str] = []
    for p in paths:
        real = os.path.realpath(p)
        if os.path.exists(real) and real != "/" and real not in out:
            out.append(real)
    # A path inside another one is covered by it.
    return [p for p in out if not any(p != q and p.startswith(q.rstrip("/") + "/")
                                      for q in out)]


def interpreter_path(python: str) -> str:
    """The interpreter as the sandbox can start it: its directory resolved (a venv reached
    through a symlinked directory exists inside only at its real place), its own name kept
    (a venv's python is a symlink whose name is what makes the venv active)."""
    exe = os.path.abspath(python)
    return os.path.join(os.path.realpath(os.path.dirname(exe)), os.path.basename(exe))


def candidate_env(scratch: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in ENV_PASSTHROUGH if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(HOME=scratch, TMPDIR=scratch, PYTHONDONTWRITEBYTECODE="1",
               PYTHONUNBUFFERED="1")
    return env


def make_base(tmp_dir: str | None) -> str:
    """A fresh BASE with job/ and scratch/ (owned by the candidate's user when we are root)."""
    base = tempfile.mkdtemp(prefix="cuda-agent-cand-", dir=tmp_dir)
    os.chmod(base, 0o711)
    os.mkdir(os.path.join(base, "job"), 0o755)
    os.chmod(os.path.join(base, "job"), 0o755)
    scratch = os.path.join(base, "scratch")
    os.mkdir(scratch, 0o700)
    if os.geteuid() == 0:
        os.chown(scratch, CANDIDATE_UID, CANDIDATE_UID)
    return base


def share_job_files(job_dir: str) -> None:
    """Makes what the trusted side wrote into job_dir readable by the candidate's user."""
    for name in os.listdir(job_dir):
        path = os.path.join(job_dir, name)
        if os.path.isfile(path) and not os.path.islink(path):
            os.chmod(path, 0o644)


class CandidateProcess:
    """harness/candidate.py in its own process group (and its own sandbox), talking over a
    pipe (its messages) and a socket (its job and commands)."""

    MAX_MESSAGES = 10000

    def __init__(self, python: str, base: str, device: str, sandbox: Sandbox,
                 timeout_s: float):
        """Starts the candidate process in BASE now; it warms up and waits for start_job()."""
        self.base = base
        self.job_dir = os.path.join(base, "job")
        self.scratch = os.path.join(base, "scratch")
        self.device = device
        self.sandbox = sandbox
        self.isolation: dict[str, Any] = {"sandbox": False,
                                          "reason": "--no-sandbox: the operator turned the "
                                                    "candidate sandbox off"}
        self.lockdown: bool | None = None
        self.start_failure: str | None = None  # why it could not get ready, if it said
        r, w = os.pipe()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = candidate_env(SCRATCH_INSIDE if sandbox.on else self.scratch)
        if sandbox.on:
            runtime = runtime_dir()
            inner = [interpreter_path(python), "-B", os.path.join(runtime, "candidate.py"),
                     "--device", device]
            spec = {"scratch": self.scratch,
                    "ro": read_only_paths(python) + [runtime, self.job_dir],
                    "gpu": device.startswith("cuda"), "fds": [w], "report_fd": w,
                    "lockdown": True, "memory_bytes": sandbox.memory_bytes,
                    "cpu_seconds": int(max(timeout_s, 600.0)) + 600,
                    "cwd": SCRATCH_INSIDE, "env": [f"{k}={v}" for k, v in env.items()]}
            argv = [sandbox.bin, "candidate-sandbox", json.dumps(spec), "--", *inner,
                    "--report-fd", str(INSIDE_REPORT_FD), "--lockdown-fd",
                    str(INSIDE_LOCKDOWN_FD)]
            proc_env = {"PATH": env["PATH"]}
        else:
            argv = [python, "-B", CANDIDATE_PY, "--device", device, "--report-fd", str(w)]
            proc_env = env
        try:
            self.proc = subprocess.Popen(
                argv, cwd=self.scratch, env=proc_env, stdin=theirs.fileno(),
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=(w,),
                start_new_session=True, close_fds=True)
        except BaseException:
            for fd in (r, w):
                os.close(fd)
            mine.close()
            theirs.close()
            raise
        os.close(w)
        theirs.close()
        self.ctl = mine
        self.started = time.monotonic()
        self.deadline = self.started + max(timeout_s, 3600.0)
        self.timeout_s = timeout_s
        self.waiting = True
        self._killed = False
        self.messages: queue.Queue[Any] = queue.Queue()
        self._tail = bytearray()
        self._tail_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read_messages, args=(r,), daemon=True)
        self._reader.start()
        self._drain = threading.Thread(target=self._read_output, daemon=True)
        self._drain.start()

    # -- start-up

    def wait_ready(self, timeout_s: float) -> bool:
        """True once the process said "ready" (within timeout_s); kills it otherwise."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            try:
                msg = self.messages.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return False
            if isinstance(msg, dict) and msg.get("type") == "ready":
                self.lockdown = bool(msg.get("lockdown"))
                self.waiting = False
                return True
            self.kill()  # died or misbehaved before its job
            if isinstance(msg, dict) and msg.get("type") in ("_sandbox", "failure"):
                self.start_failure = hu.cap(str(msg.get("message")), 1024)
            return False

    def start_job(self, timeout_s: float, fds: list[int]) -> None:
        """Hands over its job (already written into job_dir) with the descriptors it needs;
        the wall-clock limit counts from now."""
        self.started = time.monotonic()
        self.deadline = self.started + timeout_s
        self.timeout_s = timeout_s
        line = (json.dumps({"job": self.job_dir}) + "\n").encode()
        try:
            socket.send_fds(self.ctl, [line], fds)
        except OSError:
            pass  # the process is gone: its messages (or their absence) say why

    def isolation_record(self) -> dict[str, Any]:
        rec = dict(self.isolation)
        if rec.get("sandbox"):
            rec["lockdown_installed"] = bool(self.lockdown)
        return rec

    # -- messages

    def _read_messages(self, fd: int) -> None:
        count = 0
        first = True
        with os.fdopen(fd, "rb") as f:
            while True:
                line = f.readline(hu.MAX_MESSAGE_BYTES + 1)
                if not line:
                    break
                count += 1
                if len(line) > hu.MAX_MESSAGE_BYTES or count > self.MAX_MESSAGES:
                    self.messages.put({"type": "_protocol",
                                       "message": "the candidate sent an oversized message "
                                                  "or too many messages"})
                    break
                try:
                    msg = json.loads(line)
                except ValueError:
                    self.messages.put({"type": "_protocol",
                                       "message": "the candidate sent a line that is not JSON"})
                    break
                if not isinstance(msg, dict):
                    self.messages.put({"type": "_protocol",
                                       "message": "the candidate sent a non-object message"})
                    break
                if first and self.sandbox.on:
                    # The launcher's line, written before any candidate code existed.
                    first = False
                    if msg.get("type") != "isolation" or not msg.get("ok"):
                        self.messages.put({"type": "_sandbox", "message": hu.cap(
                            str(msg.get("error", "the sandbox launcher said nothing")), 1024)})
                        break
                    self.isolation = {k: v for k, v in msg.items() if k not in ("type", "ok")}
                    continue
                first = False
                self.messages.put(msg)
        self.messages.put(None)

    def _read_output(self) -> None:
        assert self.proc.stdout is not None
        while True:
            chunk = self.proc.stdout.read1(65536) if hasattr(self.proc.stdout, "read1") \
                else self.proc.stdout.read(65536)
            if not chunk:
                break
            with self._tail_lock:
                self._tail += chunk
                if len(self._tail) > 2 * hu.STDERR_TAIL_BYTES:
                    del self._tail[:-hu.STDERR_TAIL_BYTES]

    def output_tail(self) -> str:
        self._drain.join(timeout=1.0)
        with self._tail_lock:
            data = bytes(self._tail[-hu.STDERR_TAIL_BYTES:])
        return data.decode("utf-8", "replace")

    def next_message(self) -> dict[str, Any] | None:
        """The next message; None at EOF; raises TimeoutError past the deadline."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        try:
            return self.messages.get(timeout=remaining)
        except queue.Empty:
            raise TimeoutError from None

    def send(self, line: str) -> None:
        try:
            self.ctl.sendall((line + "\n").encode())
        except OSError:
            pass

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=max(0.0, timeout))
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        """Ends the candidate and everything it started, once. In the sandbox the launcher
        tears the sandbox down on SIGTERM and exits once every process in it is gone (so its
        GPU memory is free); SIGKILL to the process group follows if it takes too long."""
        if self._killed:
            return
        self._killed = True
        if self.sandbox.on and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=STOP_GRACE_S)
            except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        try:
            self.ctl.close()
        except OSError:
            pass

    def remove(self) -> None:
        self.kill()
        shutil.rmtree(self.base, ignore_errors=True)

    def elapsed(self) -> float:
        return time.monotonic() - self.started


class CandidatePool:
    """Pre-warmed candidate processes for a long-lived trusted worker (harness/worker.py).
    Each waits in its own fresh BASE, takes exactly one job and is then killed."""

    def __init__(self, python: str, device: str, size: int, sandbox: Sandbox,
                 tmp_dir: str | None = None):
        self.python = python
        self.device = device
        self.size = size
        self.sandbox = sandbox
        self.tmp_dir = tmp_dir
        self.waiting: list[CandidateProcess] = []

    def fill(self) -> None:
        """Replaces used and dead processes; returns at once (they warm up meanwhile)."""
        alive = []
        for c in self.waiting:
            if c.proc.poll() is None:
                alive.append(c)
            else:
                c.remove()
        self.waiting = alive
        while len(self.waiting) < self.size:
            self.waiting.append(CandidateProcess(self.python, make_base(self.tmp_dir),
                                                 self.device, self.sandbox, 3600.0))

    def take(self, python: str, device: str, sandbox: Sandbox,
             wait_s: float) -> CandidateProcess | None:
        """A process that reported ready (waiting up to wait_s for the oldest), or None when
        none fits this job (another interpreter, device or sandbox) or none became ready."""
        if python != self.python or device != self.device or sandbox.key() != self.sandbox.key():
            return None
        while self.waiting:
            c = self.waiting.pop(0)
            if c.wait_ready(wait_s):
                return c
            c.remove()
        return None

    def close(self) -> None:
        for c in self.waiting:
            c.remove()
        self.waiting = []


def exit_description(rc: int) -> str:
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"killed by {name}"
    return f"exited with status {rc}"


def sanitize_failure(msg: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """The candidate's failure message as the result may carry it: a kind only the candidate
    may claim (never the evaluator's own: usage, task_error, harness, infrastructure), the
    message and its details capped and made JSON-safe."""
    kind = msg.get("kind")
    if kind not in hu.FAILURE_KINDS or kind in ("usage", "task_error", "harness",
                                                 "infrastructure"):
        kind = "exception"
    message = hu.cap(str(msg.get("message", "")), hu.STDERR_TAIL_BYTES)
    details = msg.get("details") if isinstance(msg.get("details"), dict) else {}
    clean: dict[str, Any] = {}
    for k, v in list(details.items())[:32]:
        v = hu.json_safe(v)
        if isinstance(v, str):
            v = hu.cap(v, hu.STDERR_TAIL_BYTES)
        elif len(hu.dumps(v)) > 8192:
            v = hu.cap(hu.dumps(v), 2048)
        clean[str(k)[:64]] = v
    return kind, message, clean
