"""candidate.py: the untrusted side of an evaluation. Runs one candidate, then exits.

Started by harness/candidate_proc.py (for the trusted side, evaluate.py), in the candidate
sandbox (`cuda-agent candidate-sandbox`) unless the operator turned it off, with a clean
environment and its own process group:

    python3 harness/candidate.py --device DEV --report-fd N [--lockdown-fd M]

It imports timing.py first (capturing timers before any candidate code exists), initialises
the device, warms the profiler, installs the lockdown filter read from fd M (from then on it
can start no process, run no program and open no socket), reports "ready" and waits for its
job on stdin, a Unix socket: one JSON line {"job": DIR} carrying the arena's descriptor.
DIR (read-only) holds what the trusted side wrote: job.json, init_inputs.pt, state_dict.pt
(and for an extra shape that changes the model's sizes init_inputs_K.pt, state_dict_K.pt),
the extension and model_new.py; the input sets themselves lie in the arena (harness/arena.py:
device memory or a memfd shared by descriptor), described in job.json. It opens the arena,
loads the extension as the module `cuda_extension` (a compiled .so, or for tests only a
Python file), imports model_new.py by path, builds ModelNew(*init_inputs), loads Model's
state_dict (strict) (and, when an input set names another of the job's models, that one too,
before the set) and then, for every input set: poisons freed device memory with NaN (so
unwritten output elements show), runs forward under torch.no_grad() directly on the arena's
input views, synchronises, and copies each output into its arena slot for the trusted side to
compare (the trusted side checks the inputs for mutation in place); where the forward raises
an ordinary exception on a set the job marks may_refuse (a shape the evaluator derived), it
reports the refusal and goes on with the next set. It never sees the reference outputs or
the seeds. When job.json lists chunk_starts (a memory plan that streams the sets through
the arena), it waits for a line "next" on stdin before each of those sets. After all sets it
waits for one more line on stdin: "time" (measure the forward on
input set 0 with timing.measure and report, with the kernel floor's busy time profiled right
after on CUDA; where job.json asks for the timed-call check, report one timed call chosen at
random (TimedSample); then, on a further line "post", run the post-timing input set, written to
the arena only then, and report it like a verified one) or anything else (stop).

Messages go to the trusted side as JSON lines on fd N (see docs/internals/harness.md):
  {"type": "ready", "lockdown": bool}                 (before reading the job)
  {"type": "stage", "stage": NAME}
  {"type": "set", "index": i, "outputs": [META...], "forward_ms": T}
  {"type": "set", "index": i, "refused": MESSAGE}     (the forward raised on a may_refuse set)
  {"type": "launches", "evidence": {...}}             (CUDA only, before "verified")
  {"type": "verified"}
  {"type": "timing", "stats": {...}, "busy_us": US}  (busy_us: CUDA, timing.busy_floor)
  {"type": "timed_check", "k": K, "calls": N, "outputs": [META...]}  (job.json timed_check:
      one timed call chosen at random, its outputs in the post-timing set's output slots; or
      {"type": "timed_check", "skipped": WHY})
  {"type": "failure", "kind": K, "message": M, "details": {...}}
  {"type": "done"}
Exit status: 0 after "done" (or a "stop"), 1 after a "failure", 2 on bad arguments.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if not sys.path or os.path.abspath(sys.path[0]) != _HERE:
    sys.path.insert(0, _HERE)

# First, before anything the candidate controls: timing captures its references at import.
import timing  # noqa: E402  (must precede every other project import)
import harness_util as hu  # noqa: E402
import arena as ar  # noqa: E402
import model_state  # noqa: E402

import argparse  # noqa: E402
import ctypes  # noqa: E402
import faulthandler  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import socket  # noqa: E402
import traceback  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402  (already imported by timing)

_os_write = os.write
_os_exit = os._exit
_perf_counter = timing._perf_counter
_dumps = hu.dumps


class Channel:
    """JSON lines to the trusted side on an inherited pipe."""

    def __init__(self, fd: int):
        self.fd = fd

    def send(self, msg: dict[str, Any]) -> None:
        data = (_dumps(msg) + "\n").encode("utf-8")
        if len(data) > hu.MAX_MESSAGE_BYTES:
            data = (_dumps({"type": "failure", "kind": "protocol",
                            "message": "a report message was too large", "details": {}})
                    + "\n").encode("utf-8")
        view = memoryview(data)
        while view:
            n = _os_write(self.fd, view)
            view = view[n:]


class TimedSample:
    """One timed call chosen uniformly at random among all of them (a reservoir of one, drawn
    from the system's randomness: nothing in this process can know which call it will be),
    kept as a copy of its outputs with its inputs' index k (timing.varied_inputs), for the
    timed-call check."""

    def __init__(self, rng: Any = None):
        self.rng = rng if rng is not None else random.SystemRandom()
        self.seen = 0
        self.k: int | None = None
        self.leaves: list[Any] | None = None
        self.error: str | None = None

    def offer(self, k: int, out: Any) -> None:
        self.seen += 1
        if self.rng.randrange(self.seen):
            return
        self.k = k
        try:
            leaves = hu.flatten_outputs(out)
        except TypeError as exc:
            self.leaves, self.error = None, str(exc)
            return
        self.error = None
        self.leaves = [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in leaves]


class Control:
    """Lines from the trusted side on stdin, a Unix socket; the first one carries descriptors."""

    MAX_LINE = 1 << 16

    def __init__(self, fd: int = 0):
        self.sock = socket.socket(fileno=fd)
        self.buf = b""
        self.fds: list[int] = []

    def readline(self) -> str:
        while b"\n" not in self.buf:
            try:
                data, fds, _, _ = socket.recv_fds(self.sock, self.MAX_LINE, 4)
            except OSError:
                return ""
            self.fds.extend(fds)
            if not data:
                return ""
            self.buf += data
            if len(self.buf) > self.MAX_LINE:
                return ""
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode("utf-8", "replace")


PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_lockdown(fd: int) -> None:
    """Installs the lockdown filter (raw BPF, as `cuda-agent candidate-sandbox` wrote it into
    fd) on this process and every thread it starts later. No new processes, programs or
    sockets from here on; raises OSError when the kernel refuses it."""
    with os.fdopen(fd, "rb") as f:
        prog = f.read(1 << 20)
    if not prog or len(prog) % 8:
        raise OSError("the lockdown filter is empty or malformed")
    buf = ctypes.create_string_buffer(prog, len(prog))
    fprog = _SockFprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                           ctypes.c_ulong]
    # Every thread torch started already must be covered too: SECCOMP_FILTER_FLAG_TSYNC
    # through seccomp(2) applies it to all of them.
    SYS_seccomp = 317 if os.uname().machine == "x86_64" else 277
    SECCOMP_SET_MODE_FILTER = 1
    SECCOMP_FILTER_FLAG_TSYNC = 1
    libc.syscall.restype = ctypes.c_long
    rc = libc.syscall(ctypes.c_long(SYS_seccomp), ctypes.c_uint(SECCOMP_SET_MODE_FILTER),
                      ctypes.c_uint(SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(fprog))
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"installing the lockdown filter failed: {os.strerror(err)}"
                           + (f" (thread {rc} could not be synchronised)" if rc > 0 else ""))


class Failure(Exception):
    def __init__(self, kind: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.details = details or {}


def _tb_tail(exc: BaseException) -> str:
    return hu.cap("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


def _fail_from(exc: BaseException, default_kind: str, what: str,
               details: dict[str, Any] | None = None) -> Failure:
    """A Failure for an exception raised by candidate code while doing `what`."""
    kind, message = hu.classify_exception(exc)
    if kind == "exception":
        kind = default_kind
    d = dict(details or {})
    if kind == "oom" and torch.cuda.is_available() and torch.cuda.is_initialized():
        try:  # what it had taken, for the trusted side's message (its budget beside it)
            d["max_memory_allocated"] = int(torch.cuda.max_memory_allocated())
        except Exception:  # noqa: BLE001  (a broken context: the message says enough)
            pass
    d["traceback"] = _tb_tail(exc)
    return Failure(kind, f"{what}: {message}", d)


def _init_device(device: torch.device) -> None:
    """Makes device current and creates its CUDA context (device: resolved, with an index)."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.empty(1, device=device)
        torch.cuda.synchronize(device)


def blocking_stream(device: torch.device) -> torch.cuda.Stream:
    """A new stream that synchronises with the legacy default stream (cudaStreamCreate with no
    flags), as PyTorch's own default stream does: a kernel launched with `<<<grid, block>>>` and
    no stream (or a synchronous cudaMemcpy) runs after the work queued on this stream and before
    the work queued after it, so it is ordered with the forward and counted by the timing's
    stream end event. PyTorch's pooled streams are non-blocking, which would leave such work
    racing with the harness's own copies. A fresh stream (not the default one) keeps stream
    capture possible: CUDA graphs cannot be captured on the legacy default stream."""
    handle = ctypes.c_void_p()
    with torch.cuda.device(device):
        err = torch._C._cudart.cudaStreamCreate(ctypes.addressof(handle))
    if int(err) != 0:
        raise RuntimeError(f"cudaStreamCreate failed with CUDA error {int(err)}")
    return torch.cuda.ExternalStream(handle.value, device=device)


def _load_module(name: str, path: str, prelude: str | None = None) -> Any:
    """The file at path imported as module name; with prelude (a file's path), that file's
    code runs first in the same namespace (KernelBench runs the reference's source and then
    the candidate's in one dict, so a ModelNew may use the reference's module-level names)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as module {name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        if prelude is not None:
            with open(prelude, encoding="utf-8") as f:
                exec(compile(f.read(), prelude, "exec"), module.__dict__)  # noqa: S102
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _to_device(x: Any, device: torch.device) -> Any:
    return x.to(device) if isinstance(x, torch.Tensor) else x


def _clone(x: Any) -> Any:
    return x.clone() if isinstance(x, torch.Tensor) else x


def _poison(device: torch.device, sizes: list[int], how: dict[str, Any] | None = None) -> None:
    """Leaves only NaN-filled free blocks in the caching allocator, sized like the outputs.

    The cache is emptied first, so no stale free block (an earlier set's output, say) is
    left for the forward to reuse; then two blocks per output size (how["copies"]: one under a
    memory plan that keeps the device lean) and one larger block of twice their total (within
    how's min_bytes and max_bytes) are allocated, filled with bytes of 0xFF and freed again
    (they stay cached for reuse). 0xFF
    bytes read as NaN in every floating type (and -1 in signed integers), so an output
    element the forward never writes is NaN and fails the comparison. Not done on the CPU
    (CPU mode exists to test the harness, not to grade kernels).
    """
    if device.type != "cuda":
        return
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    how = how or {}
    copies = max(1, min(2, int(how.get("copies", 2))))
    lo, hi = int(how.get("min_bytes", 32 << 20)), int(how.get("max_bytes", 8 << 30))
    blocks = []
    total = 0
    for nb in sizes:
        nb = int(nb)
        if nb <= 0:
            continue
        total += nb
        for _ in range(copies):
            blocks.append(torch.full((nb,), 255, dtype=torch.uint8, device=device))
    big = min(max(2 * total, lo), hi)
    blocks.append(torch.full((big,), 255, dtype=torch.uint8, device=device))
    torch.cuda.synchronize(device)
    del blocks


def _hold_to_budget(device: torch.device, budget: Any) -> None:
    """Holds this process's caching allocator to the memory plan's budget for the candidate
    (harness/memplan.py): a forward that asks for more fails here with an out-of-memory error
    that names its usage and the budget, whatever else the device has free."""
    if not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0:
        return
    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, budget / total), device)


def _memory_used(device: torch.device) -> dict[str, int] | None:
    """This process's device memory peaks so far (the trusted side reports them beside the
    plan's estimate of the candidate's share)."""
    if device.type != "cuda":
        return None
    return {"max_allocated_bytes": int(torch.cuda.max_memory_allocated(device)),
            "max_reserved_bytes": int(torch.cuda.max_memory_reserved(device))}


def _describe(leaf: Any) -> dict[str, Any]:
    if isinstance(leaf, torch.Tensor):
        return {"kind": "tensor", "shape": list(leaf.shape), "dtype": str(leaf.dtype),
                "device": leaf.device.type, "type": f"{type(leaf).__module__}."
                                                    f"{type(leaf).__qualname__}"}
    return {"kind": "number", "type": type(leaf).__name__}


class Runner:
    def __init__(self, job: dict[str, Any], chan: Channel, control: Control):
        self.job = job
        self.chan = chan
        self.control = control
        self.device = timing.resolve_device(job["device"])
        self.model: Any = None
        self.model_cls: Any = None
        self.models: dict[int, Any] = {}  # by job model index: 0 (self.model), extra shapes'
        self.arena: ar.Arena | None = None
        self.extension: Any = None
        self.timed_inputs: list[Any] = []  # the last timed call's inputs (time_forward)

    def stage(self, name: str) -> None:
        self.chan.send({"type": "stage", "stage": name})

    def run(self) -> bool:
        """True: finished ("done" sent); False: stopped after verification.

        On a GPU everything the candidate does runs with a fresh blocking stream as the current
        stream (blocking_stream): work a candidate puts on the legacy default stream (a launch
        without a stream argument, as most KernelBench code does) is ordered with it, and CUDA
        graphs can be captured on it. Work on other streams is unordered until the device-wide
        synchronisations that end every forward and every timed call, which count it."""
        timing.set_precision(self.job.get("precision", "strict"))
        self.stage("init")
        _init_device(self.device)
        if self.device.type != "cuda":
            return self._run()
        _hold_to_budget(self.device, self.job.get("memory_budget_bytes"))
        with torch.cuda.stream(blocking_stream(self.device)):
            return self._run()

    def _run(self) -> bool:
        job = self.job
        try:
            fd = self.control.fds[0] if self.control.fds else -1
            self.arena = ar.open_arena(job.get("arena"), self.device, fd)
        except (ar.ArenaError, OSError, RuntimeError) as exc:
            raise Failure("protocol", f"cannot open the evaluator's shared memory: {exc}")

        self.stage("load_extension")
        ext = job["extension"]
        try:
            self.extension = _load_module("cuda_extension", ext["path"])
        except BaseException as exc:  # noqa: BLE001  (candidate code: anything can happen)
            raise _fail_from(exc, "import", "importing the extension cuda_extension failed")

        self.stage("import_model_new")
        try:
            mod = _load_module("model_new", job["model_new"], job.get("reference_globals"))
        except BaseException as exc:  # noqa: BLE001
            raise _fail_from(exc, "import", "importing model_new.py failed")
        model_cls = getattr(mod, "ModelNew", None)
        if not isinstance(model_cls, type):
            raise Failure("import", "model_new.py defines no class ModelNew")

        self.model_cls = model_cls
        self.model = self.models[0] = self.build_model(0)

        self.stage("verify")
        # A memory plan that streams the sets (harness/memplan.py) writes them into the arena
        # a few at a time: before each later group the trusted side says "next".
        waits = {int(i) for i in job.get("chunk_starts") or []}
        for i in range(int(job["n_sets"])):
            if i in waits and self.control.readline().strip() != "next":
                return False
            self.verify_set(i)
        if self.device.type == "cuda" and job.get("launch_evidence", True):
            self.stage("launch_evidence")
            self.send_launch_evidence()
        self.chan.send({"type": "verified", "memory": _memory_used(self.device)})

        command = self.control.readline().strip()
        if command != "time":
            return False
        self.stage("timing")
        self.time_forward()
        post = job.get("post_timing_set")
        if post is not None and self.control.readline().strip() == "post":
            # Its inputs are written to the arena only now that the timing is over.
            self.stage("post_timing")
            self.verify_set(int(post), fresh=True)
        self.chan.send({"type": "done", "memory": _memory_used(self.device)})
        return True

    def build_model(self, k: int) -> Any:
        """ModelNew built from the job's model k (0: the task's own init inputs; others: those
        of an extra shape that changes them) with Model's state_dict loaded (strict). Under
        KernelBench's rules it is built after the seed Model was built from, and keeps its own
        parameters where its names or shapes differ from Model's (KernelBench's semantics)."""
        files = (self.job.get("models") or [{}])[k]
        at = "" if not k else f" (model {k}, for an extra shape of the task)"
        seed = files.get("init_seed")
        if not isinstance(seed, int) or self.job.get("rules") != "kernelbench":
            seed = None
        self.stage("build")
        init_inputs = torch.load(files.get("init_inputs", "init_inputs.pt"), weights_only=True)
        torch.manual_seed(0 if seed is None else seed)
        try:
            model = self.model_cls(*init_inputs)
        except BaseException as exc:  # noqa: BLE001
            raise _fail_from(exc, "build", f"ModelNew(*get_init_inputs()) raised{at}")
        if not isinstance(model, torch.nn.Module):
            raise Failure("build", f"ModelNew(...) returned a {type(model).__name__}, "
                                   f"not a torch.nn.Module{at}")

        self.stage("load_state_dict")
        state = torch.load(files.get("state_dict", "state_dict.pt"), weights_only=True)
        try:
            theirs = list(model.state_dict().keys())
        except BaseException as exc:  # noqa: BLE001
            raise _fail_from(exc, "state_dict", f"ModelNew.state_dict() raised{at}")
        missing = [k for k in state if k not in theirs]
        unexpected = [k for k in theirs if k not in state]
        if (missing or unexpected) and seed is not None:
            return self.on_device(model, at)  # built from the seed already
        if missing or unexpected:
            raise Failure("state_dict",
                          "state_dict keys differ from Model's: "
                          + (f"missing in ModelNew {missing}" if missing else "")
                          + ("; " if missing and unexpected else "")
                          + (f"not in Model {unexpected}" if unexpected else "") + at,
                          {"missing": missing, "unexpected": unexpected})
        try:
            model.load_state_dict(state, strict=True)
        except BaseException as exc:  # noqa: BLE001
            if seed is None:
                raise _fail_from(exc, "state_dict", f"loading Model's state_dict failed{at}")
            # The same names, other shapes (a [C] bias kept as [C, 1, 1]): built again from
            # the seed, since a failed load may have copied some of Model's tensors already.
            torch.manual_seed(seed)
            try:
                model = self.model_cls(*init_inputs)
            except BaseException as exc2:  # noqa: BLE001
                raise _fail_from(exc2, "build", f"ModelNew(*get_init_inputs()) raised{at}")
        return self.on_device(model, at)

    def on_device(self, model: Any, at: str) -> Any:
        try:
            model = model.to(self.device).eval()
        except BaseException as exc:  # noqa: BLE001
            raise _fail_from(exc, "build", f"moving ModelNew to the device failed{at}")
        model_state.as_built(model)  # the state each verified forward starts from
        return model

    def model_for(self, i: int) -> Any:
        """The model input set i runs on: the task's own, or (an extra shape whose sizes change
        the model's parameters) one built for it, once."""
        k = int(self.job["sets"][i].get("model") or 0)
        if k not in self.models:
            self.models[k] = self.build_model(k)
            self.stage("verify")
        return self.models[k]

    def set_inputs(self, i: int) -> tuple[list[Any], list[Any]]:
        """Input set i as (views of the arena, the arguments for the forward). On a CUDA arena
        the arguments are the views themselves; on a host arena with a CUDA device, copies on
        the device (copied back by store_inputs)."""
        assert self.arena is not None
        views = []
        for slot in self.job["sets"][i]["inputs"]:
            if slot["kind"] == "tensor":
                views.append(self.arena.view(int(slot["offset"]),
                                             ar.dtype_from_name(slot["dtype"]),
                                             ar.shape_from_list(slot["shape"])))
            else:
                views.append(slot["value"])
        if self.arena.memory.device == self.device or self.device.type == "cpu":
            return views, list(views)
        return views, [_to_device(x, self.device) for x in views]

    def store_inputs(self, views: list[Any], args: list[Any]) -> None:
        """Arguments that are copies (a host arena with a CUDA device, or a fresh set): the
        forward's inputs as they are after it, back into the arena for the trusted side's
        mutation check."""
        for v, a in zip(views, args):
            if isinstance(v, torch.Tensor) and v is not a and isinstance(a, torch.Tensor) and \
                    v.data_ptr() != a.data_ptr():
                if a.shape == v.shape and a.dtype == v.dtype:
                    v.copy_(a)
                else:
                    v.fill_(255 if v.dtype == torch.uint8 else 0)  # visibly changed

    def store_output(self, i: int, j: int, leaf: Any) -> dict[str, Any]:
        """Copies output j of set i into its arena slot; returns its description."""
        meta = _describe(leaf)
        if not isinstance(leaf, torch.Tensor):
            meta["value"] = hu.number_repr(leaf) if isinstance(leaf, (bool, int, float)) \
                else None
            return meta
        if type(leaf) not in (torch.Tensor, torch.nn.Parameter):
            raise Failure("output_type",
                          f"output {j} is a {type(leaf).__module__}.{type(leaf).__qualname__}, "
                          "not a plain torch.Tensor: tensor subclasses (lazy or deferred "
                          "outputs) are not accepted", {"output": j, "set": i})
        slots = self.job["sets"][i]["outputs"]
        meta["stored"] = False
        if j < len(slots) and slots[j]["offset"] is not None and \
                leaf.numel() * leaf.element_size() == int(slots[j]["nbytes"]):
            assert self.arena is not None
            self.arena.view(int(slots[j]["offset"]), leaf.dtype,
                            tuple(leaf.shape)).copy_(leaf.detach())
            meta["stored"] = True
        return meta

    def verify_set(self, i: int, fresh: bool = False) -> None:
        """Runs the forward on input set i and reports it. fresh: on copies allocated the way
        the timing loop allocates its inputs (so at the addresses the timed calls saw), copied
        back afterwards; a forward that caches results by input pointer returns a stale one."""
        model = self.model_for(i)
        views, args = self.set_inputs(i)
        if fresh:
            args = self.at_timed_addresses(args)
        _poison(self.device, self.job.get("poison_bytes", []), self.job.get("poison"))
        model_state.as_built(model)
        t0 = _perf_counter()
        try:
            with torch.no_grad():
                out = model(*args)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        except BaseException as exc:  # noqa: BLE001
            if self.may_refuse(i, exc):
                message = hu.classify_exception(exc)[1]
                self.chan.send({"type": "set", "index": i, "refused": hu.cap(message, 1024)})
                return
            raise _fail_from(exc, "exception", f"forward on input set {i} raised", {"set": i})
        forward_ms = (_perf_counter() - t0) * 1e3
        try:
            leaves = hu.flatten_outputs(out)
        except TypeError as exc:
            raise Failure("output_type", str(exc), {"set": i})
        names = self.job.get("state") or []
        try:
            leaves = leaves + model_state.values(model, names)
        except model_state.MissingState as exc:
            raise Failure("state", f"ModelNew has no tensor attribute {exc} after its forward on "
                                   f"input set {i}: Model's forward updates that attribute (its "
                                   "state), and its values after each forward are compared "
                                   "like an output", {"set": i, "state": names})
        try:
            meta = [self.store_output(i, j, x) for j, x in enumerate(leaves)]
            self.store_inputs(views, args)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        except Failure:
            raise
        except BaseException as exc:  # noqa: BLE001  (copying can surface CUDA errors)
            raise _fail_from(exc, "exception", f"copying the outputs of set {i} failed",
                             {"set": i})
        self.chan.send({"type": "set", "index": i, "outputs": meta, "forward_ms": forward_ms})

    def may_refuse(self, i: int, exc: BaseException) -> bool:
        """Whether the forward's exception on set i is a refusal rather than a failure: only
        on a set the job marks may_refuse (a shape the evaluator derived, not one the task
        lists), and only an ordinary exception (a TORCH_CHECK, a ValueError); a CUDA error,
        an out-of-memory error or SystemExit stays a failure."""
        if not self.job["sets"][i].get("may_refuse") or not isinstance(exc, Exception):
            return False
        return hu.classify_exception(exc)[0] == "exception"

    def send_launch_evidence(self) -> None:
        """One more forward on input set 0 under the profiler: which GPU work ran inside the
        extension's functions and which outside (timing.launch_evidence)."""
        _views, inputs = self.set_inputs(0)
        model = self.model

        def forward(*args: Any) -> Any:
            with torch.no_grad():
                return model(*args)

        # Where ModelNew may keep the extension's functions: model_new's globals, each module's
        # attributes.
        holders = [vars(m) for m in model.modules()]
        mod = sys.modules.get("model_new")
        if mod is not None:
            holders.append(vars(mod))
        try:
            evidence = timing.launch_evidence(forward, lambda: [_clone(x) for x in inputs],
                                              self.device, self.extension, holders)
        except BaseException as exc:  # noqa: BLE001
            raise _fail_from(exc, "exception", "the forward raised while its kernel launches "
                                               "were recorded")
        self.chan.send({"type": "launches", "evidence": evidence})

    def at_timed_addresses(self, args: list[Any]) -> list[Any]:
        """args copied into the last timed call's input tensors where they match (shape, dtype,
        strides, device), else into fresh copies: a forward that caches its results by input
        pointer then meets an address the timed calls used, whatever the allocator does (the
        host's malloc reuses freed memory less predictably than CUDA's caching allocator)."""
        kept = self.timed_inputs
        out = []
        for k, x in enumerate(args):
            t = kept[k] if k < len(kept) else None
            if isinstance(x, torch.Tensor) and isinstance(t, torch.Tensor) and \
                    t.shape == x.shape and t.dtype == x.dtype and t.device == x.device and \
                    t.stride() == x.stride():
                with torch.no_grad():
                    t.copy_(x)
                out.append(t)
            else:
                out.append(_clone(x))
        kept.clear()
        return out

    def time_forward(self) -> None:
        t = self.job["timing"]
        _views, inputs = self.set_inputs(int(t.get("set", 0)))
        model = self.model

        kept = self.timed_inputs
        made = [0]  # the k of the inputs made last (timing.varied_inputs)
        blocks = timing.FactorBlocks()  # this measurement's factor vectors, freed with it
        sample = TimedSample() if self.job.get("timed_check") else None

        def make_inputs() -> list[Any]:
            # The previous call's inputs go first (their memory may be reused, as before); the
            # new ones stay referenced, so that after the loop the last timed call's inputs are
            # alive and the post-timing set can be given at exactly their addresses.
            kept.clear()
            made[0] += 1
            args = timing.varied_inputs(inputs, made[0], blocks)
            kept.extend(args)
            return args

        def forward(*args: Any) -> Any:
            return model(*args)

        try:
            stats = timing.measure(forward, make_inputs, self.device,
                                   float(t.get("budget_ms", timing.DEFAULT_BUDGET_MS)),
                                   t.get("mode", "events"),
                                   on_output=None if sample is None
                                   else lambda out: sample.offer(made[0], out))
        except BaseException as exc:  # noqa: BLE001
            raise _fail_from(exc, "exception", "the forward raised while being timed")
        msg: dict[str, Any] = {"type": "timing", "stats": stats}
        if self.device.type == "cuda":
            # The kernel floor's busy time, while the GPU is as the timed calls left it.
            try:
                msg["busy_us"] = timing.busy_floor(forward, make_inputs, self.device)
            except Exception as exc:  # noqa: BLE001  (the launch evidence's floor applies)
                msg["busy_error"] = hu.cap(f"{type(exc).__name__}: {exc}", 300)
        self.chan.send(msg)
        if sample is not None:
            self.send_timed_check(sample)

    def send_timed_check(self, sample: TimedSample) -> None:
        """The timed call the sample chose: its outputs into the post-timing set's output
        slots (that set runs only later), its k for the evaluator to make the same inputs."""
        if sample.k is None:
            self.chan.send({"type": "timed_check", "skipped": "no timed call"})
            return
        if sample.leaves is None:
            raise Failure("output_type", f"in a timed call: {sample.error}")
        post = int(self.job["post_timing_set"])
        try:
            meta = [self.store_output(post, j, x) for j, x in enumerate(sample.leaves)]
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        except Failure:
            raise
        except BaseException as exc:  # noqa: BLE001  (copying can surface CUDA errors)
            raise _fail_from(exc, "exception", "copying a timed call's outputs failed")
        sample.leaves = None
        self.chan.send({"type": "timed_check", "k": sample.k, "calls": sample.seen,
                        "outputs": meta})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run one candidate for harness/evaluate.py (untrusted side).")
    parser.add_argument("--device", default="cuda", help="the device to initialise")
    parser.add_argument("--report-fd", type=int, required=True,
                        help="file descriptor of the pipe for JSON-line messages")
    parser.add_argument("--lockdown-fd", type=int,
                        help="file descriptor holding the lockdown filter to install before "
                             "the job (in the candidate sandbox)")
    args = parser.parse_args(argv)

    chan = Channel(args.report_fd)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    try:
        device = timing.resolve_device(args.device)
        _init_device(device)
        timing.warm_profiler(args.device)
        if args.lockdown_fd is not None:
            install_lockdown(args.lockdown_fd)
    except BaseException as exc:  # noqa: BLE001  (nothing of the candidate's has run yet)
        chan.send({"type": "failure", "kind": "protocol",
                   "message": f"the candidate process could not start: "
                              f"{type(exc).__name__}: {exc}", "details": {}})
        return 1
    chan.send({"type": "ready", "lockdown": args.lockdown_fd is not None})
    control = Control(0)
    line = control.readline()
    try:
        job_dir = json.loads(line)["job"]
        os.chdir(job_dir)
        with open("job.json", encoding="utf-8") as f:
            job = json.load(f)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        chan.send({"type": "failure", "kind": "protocol",
                   "message": f"cannot read the job ({line[:200]!r}): {exc}", "details": {}})
        return 1

    runner = Runner(job, chan, control)
    try:
        runner.run()
    except Failure as f:
        chan.send({"type": "failure", "kind": f.kind, "message": f.message,
                   "details": f.details})
        return 1
    except BaseException as exc:  # noqa: BLE001  (whatever escaped: still report it)
        failure = _fail_from(exc, "exception", "the candidate runner failed")
        chan.send({"type": "failure", "kind": failure.kind, "message": failure.message,
                   "details": failure.details})
        return 1
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: no candidate atexit hooks, no slow CUDA context destruction.
    _os_exit(code)
