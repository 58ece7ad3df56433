"""Escapes tried from the candidate's side of an evaluation, with the static policy out of the
way: the candidate's "extension" is the test-only Python module (--ext-module), which no
policy ever reads, so the candidate sandbox alone must hold (`cuda-agent candidate-sandbox`:
namespaces, its own uid when root, the sandbox's seccomp filter plus the lockdown filter the
candidate installs before its code is loaded).

Each case is a candidate that tries one thing at import time and reports what happened by
raising ESCAPE-RESULT <outcome>, which comes back as its import failure. Every case must come
back "blocked", the evaluation must end as the candidate's own failure (import) with the
evaluator alive, and nothing outside the candidate's scratch directory may change (the test's
whole directory is fingerprinted before and after). A few cases also run with --no-sandbox,
where they must get through: proof that the attempt is real and the check can fail.
Skips, with the reason, when the binary is not built or the host cannot build sandboxes.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import platform
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed")

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from harness_case import ROOT, evaluate  # noqa: E402

BINARY = os.environ.get("CUDA_AGENT") or str(ROOT / "build" / "cuda-agent")


def _sandbox_usable() -> str | None:
    if not os.access(BINARY, os.X_OK):
        return f"no cuda-agent binary at {BINARY} (make first)"
    probe = subprocess.run([BINARY, "candidate-sandbox", json.dumps({"scratch": "/tmp"}), "--",
                            "/bin/true"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        return f"this host cannot build the candidate sandbox: {probe.stderr.strip()[-300:]}"
    return None


WHY_NOT = _sandbox_usable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")

PRELUDE = """
import ctypes, errno, json, os, signal, socket, subprocess


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _raw(nr, *args):
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    rc = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    if rc < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return rc


def _report(outcome):
    raise RuntimeError("ESCAPE-RESULT " + json.dumps(outcome))


try:
    _report("ESCAPED: " + str(attempt()))
except OSError as e:
    _report("blocked: " + errno.errorcode.get(e.errno or 0, str(e.errno)))
"""

# Each attempt(): returns on success (an escape), raises OSError when refused.
ATTEMPTS = {
    "fork": """
        def attempt():
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            return f"forked {pid}"
        """,
    "exec_via_subprocess": """
        def attempt():
            return subprocess.run(["/bin/true"]).returncode
        """,
    "raw_syscall_fork": """
        def attempt():
            pid = _raw(57)  # fork(2), through libc's syscall(): no os module, no wrapper
            if pid == 0:
                os._exit(0)
            return f"forked {pid}"
        """,
    "inline_machine_code_syscall": """
        import mmap
        def attempt():
            # mov eax, 57 (fork); syscall; ret -- machine code written at run time
            code = bytes([0xb8, 57, 0, 0, 0, 0x0f, 0x05, 0xc3])
            buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
            buf.write(code)
            addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
            rc = ctypes.CFUNCTYPE(ctypes.c_long)(addr)()
            if rc == 0:
                os._exit(0)
            if rc < 0:
                raise OSError(-rc, os.strerror(-rc))
            return f"forked {rc}"
        """,
    "socket_inet_connect": """
        def attempt():
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(2)
            s.connect(("127.0.0.1", 9))
            return "connected"
        """,
    "socket_unix": """
        def attempt():
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            return "a new socket"
        """,
    "raw_syscall_socket": """
        def attempt():
            return f"socket fd {_raw(41, 2, 1, 0)}"  # socket(AF_INET, SOCK_STREAM, 0)
        """,
    "ptrace_init": """
        def attempt():
            libc = _libc()
            libc.ptrace.restype = ctypes.c_long
            if libc.ptrace(ctypes.c_long(16), ctypes.c_long(1), None, None) != 0:  # ATTACH
                e = ctypes.get_errno()
                raise OSError(e, os.strerror(e))
            return "attached to pid 1"
        """,
    "proc_other_processes": """
        def attempt():
            mine = {1, os.getpid()}
            others = sorted(int(p) for p in os.listdir("/proc")
                            if p.isdigit() and int(p) not in mine)
            if others:
                return f"sees processes {others}"
            raise OSError(errno.ESRCH, "no other process")
        """,
    "proc_init_memory": """
        def attempt():
            with open("/proc/1/mem", "rb") as f:
                return f"read {len(f.read(16))} bytes of init"
        """,
    "signal_the_trusted_side": """
        def attempt():
            os.kill(TRUSTED_PID, signal.SIGKILL)
            return f"killed {TRUSTED_PID}"
        """,
    "write_outside_scratch": """
        def attempt():
            with open(os.path.join(TEST_DIR, "planted"), "w") as f:
                f.write("x")
            return "wrote into the test's directory"
        """,
    "write_job_dir": """
        def attempt():
            with open(os.path.join(os.getcwd(), "job.json"), "w") as f:
                f.write("{}")
            return "rewrote job.json"
        """,
    "write_baseline_cache": """
        def attempt():
            # (A directory made first would only be made in the sandbox's private /tmp.)
            with open(os.path.join(BASELINES, "planted.json"), "w") as f:
                f.write("{}")
            return "wrote into the baseline cache"
        """,
    "read_the_reference": """
        def attempt():
            with open(TASK_FILE) as f:
                return f"read {len(f.read())} bytes of the task file"
        """,
    "read_trusted_memory": """
        def attempt():
            with open(f"/proc/{TRUSTED_PID}/environ", "rb") as f:
                return f"read {len(f.read())} bytes of the trusted side's environment"
        """,
}
# The ones that must get through without the sandbox (with it, blocked).
CONTROLS = ("fork", "write_outside_scratch", "read_the_reference", "socket_unix")
# Writes the candidate may believe succeeded: the sandbox's /tmp is its own tmpfs, on which
# the parents of the read-only paths it was given are plain directories. What counts is the
# host: these are judged by the host's files alone.
HOST_CHECKED = {"write_outside_scratch": lambda tmp: (tmp / "planted").exists()}
MACHINE_CODE_ARCH = "x86_64"


def fingerprint(root: pathlib.Path) -> dict[str, str]:
    """Every path under root but the candidates' own directories, with a content hash."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if "cuda-agent-cand-" in rel:
            continue
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
        elif p.is_dir():
            out[rel] = "dir"
    return out


def run_attempt(tmp_path: pathlib.Path, name: str, sandbox: bool):
    baselines = tmp_path / "baselines"
    baselines.mkdir(exist_ok=True)
    work_task = tmp_path / f"run{len(list(tmp_path.glob('run*')))}" / "task.py"
    consts = (f"TRUSTED_PID = {os.getpid()}\nTEST_DIR = {str(tmp_path)!r}\n"
              f"BASELINES = {str(baselines)!r}\nTASK_FILE = {str(work_task)!r}\n")
    ext = consts + textwrap.dedent(ATTEMPTS[name]) + PRELUDE
    before = fingerprint(tmp_path)
    args = ["--no-timing", "--baseline-cache", str(baselines), "--tmp-dir", str(tmp_path)]
    args += ["--sandbox", BINARY] if sandbox else ["--no-sandbox"]
    run = evaluate(tmp_path, ext=ext, args=args)
    after = fingerprint(tmp_path)
    return run, before, after


def outcome_of(run) -> str:
    msg = (run.failure or {}).get("message", "")
    assert "ESCAPE-RESULT" in msg, run
    return json.loads(msg.split("ESCAPE-RESULT ", 1)[1].splitlines()[0])


@pytest.mark.parametrize("name", sorted(ATTEMPTS))
def test_escape_is_contained(tmp_path, name):
    if name == "inline_machine_code_syscall" and platform.machine() != MACHINE_CODE_ARCH:
        pytest.skip(f"the machine code is {MACHINE_CODE_ARCH}'s")
    run, before, after = run_attempt(tmp_path, name, sandbox=True)
    assert run.rc == 1 and run.failure["kind"] == "import", run
    outcome = outcome_of(run)
    if name in HOST_CHECKED:
        assert not HOST_CHECKED[name](tmp_path), (name, outcome)
    else:
        assert outcome.startswith("blocked"), (name, outcome)
    # The report says what held; nothing outside the scratch directory changed.
    iso = run.result["isolation"]
    assert iso["sandbox"] is True and iso["lockdown_installed"] is True, iso
    added = sorted(set(after) - set(before))
    # evaluate() writes the run's own inputs and result; nothing else may appear or change.
    own = [p for p in added if p.startswith("run") and p.split("/", 1)[-1] in (
        "task.py", "cand", "cand/model_new.py", "ext.py", "result.json")] + \
        [p for p in added if "/" not in p and p.startswith("run")]
    assert sorted(set(added) - set(own)) == [], added
    assert {k: v for k, v in before.items() if after.get(k) != v} == {}, "files changed"
    assert not (tmp_path / "planted").exists()
    assert list((tmp_path / "baselines").iterdir()) == []


@pytest.mark.parametrize("name", CONTROLS)
def test_the_same_attempt_gets_through_without_the_sandbox(tmp_path, name):
    run, _, _ = run_attempt(tmp_path, name, sandbox=False)
    outcome = outcome_of(run)
    assert outcome.startswith("ESCAPED"), (name, outcome)
    if name in HOST_CHECKED:
        assert HOST_CHECKED[name](tmp_path), name
    assert run.result["isolation"]["sandbox"] is False


def test_a_torch_global_changed_by_the_candidate_stays_in_its_process(tmp_path):
    # The candidate turns on TF32, float64 defaults and a fixed seed before its forward; the
    # reference (in the trusted process) is computed as before and the verdict is the same.
    ext = textwrap.dedent("""
        import torch
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.set_float32_matmul_precision("medium")
        torch.manual_seed(0)


        def affine(x, w, b, scale):
            return torch.tanh(x * w) * scale + b
        """)
    plain = evaluate(tmp_path, args=["--no-timing", "--sandbox", BINARY])
    changed = evaluate(tmp_path, ext=ext, args=["--no-timing", "--sandbox", BINARY])
    assert plain.rc == 0 and changed.rc == 0, changed
    assert [s["max_abs_diff"] for s in plain.result["verification"]["sets"]] == \
        [s["max_abs_diff"] for s in changed.result["verification"]["sets"]]
    import torch
    assert torch.get_float32_matmul_precision() == "highest"


def test_a_sandbox_that_cannot_be_built_is_the_evaluators_failure(tmp_path):
    # A launcher that fails before any candidate code exists (as on a host without user
    # namespaces): the evaluation ends as the evaluator's own failure, never the candidate's.
    fake = tmp_path / "not-cuda-agent"
    fake.write_text("#!/bin/sh\necho 'cuda-agent: error: no user namespaces here' >&2\n"
                    "exit 69\n")
    fake.chmod(0o755)
    run = evaluate(tmp_path, args=["--no-timing", "--sandbox", str(fake)])
    assert run.rc == 3 and run.failure["kind"] == "infrastructure", run
    assert run.result["stage"] == "setup", run
    assert "could not start" in run.failure["message"], run
    assert "no user namespaces here" in run.failure["details"]["output_tail"], run
