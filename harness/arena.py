"""arena.py: the one block of memory through which the trusted side and a candidate exchange
tensors.

The trusted side (evaluate.py) creates an arena per evaluation, lays out in it every input
set's tensors and a slot for each expected output, and writes the inputs; the candidate
(candidate.py) opens the same memory, runs its forward directly on the input views, and copies
each output into its slot. Nothing is serialised and nothing crosses the PCIe bus:

- "cuda_ipc": a dedicated device allocation (cuMemAlloc, never the caching allocator, so no
  other tensor of the trusted process shares its pages) exported with cuIpcGetMemHandle and
  opened by the candidate with cuIpcOpenMemHandle. The candidate can reach exactly this block:
  its own inputs and output slots, never the reference's outputs or pristine copies.
- "mmap": a file in the job directory mapped shared by both (CPU mode, and the fallback where
  CUDA IPC is unavailable; the candidate then copies inputs to the device and outputs and
  post-forward inputs back).

Because the candidate's forward runs on the arena's input views, the trusted side checks input
mutation by comparing those views with its own pristine copies: no copy back is needed.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import torch

ALIGN = 256
ARENA_FILE = "arena.bin"
# "auto" (default): CUDA IPC for a CUDA device, falling back to a shared file; "mmap": always
# the shared file.
ARENA_ENV = "CUDA_AGENT_ARENA"
_IPC_HANDLE_SIZE = 64
_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1


class ArenaError(Exception):
    pass


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def dtype_from_name(name: Any) -> torch.dtype:
    """torch.float32 from "torch.float32" (or "float32"); ArenaError for anything else."""
    if not isinstance(name, str):
        raise ArenaError(f"dtype {name!r} is not a string")
    dt = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dt, torch.dtype):
        raise ArenaError(f"unknown dtype {name!r}")
    return dt


def shape_from_list(shape: Any) -> tuple[int, ...]:
    if not isinstance(shape, list) or len(shape) > 64 or \
            not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 48
                    for d in shape):
        raise ArenaError(f"shape {shape!r} is not a list of sizes")
    return tuple(shape)


def tensor_nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class Layout:
    """Offsets of aligned slots, handed out in order."""

    def __init__(self) -> None:
        self.size = 0

    def take(self, nbytes: int) -> int:
        off = self.size
        self.size += align(max(int(nbytes), 1))
        return off


class _CAI:
    """A raw device pointer in the form torch.as_tensor shares without copying."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 3, "strides": None}


class _IpcHandle(ctypes.Structure):
    # Unsigned bytes: a c_char array field would read back as bytes cut at the first NUL.
    _fields_ = [("reserved", ctypes.c_ubyte * _IPC_HANDLE_SIZE)]

    @classmethod
    def from_bytes(cls, data: bytes) -> "_IpcHandle":
        if len(data) != _IPC_HANDLE_SIZE:
            raise ArenaError(f"a CUDA IPC handle is {_IPC_HANDLE_SIZE} bytes, not {len(data)}")
        h = cls()
        ctypes.memmove(ctypes.addressof(h), data, _IPC_HANDLE_SIZE)
        return h

    def to_bytes(self) -> bytes:
        return bytes(self.reserved)


class _Driver:
    """The few CUDA driver calls the arena needs, through libcuda (always a shared library)."""

    _instance: "_Driver | None" = None

    def __init__(self) -> None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise ArenaError(f"cannot load libcuda.so.1: {exc}")
        u64p = ctypes.POINTER(ctypes.c_uint64)
        self._alloc = self._fn(lib, "cuMemAlloc_v2", [u64p, ctypes.c_size_t])
        self._free = self._fn(lib, "cuMemFree_v2", [ctypes.c_uint64])
        self._get = self._fn(lib, "cuIpcGetMemHandle",
                             [ctypes.POINTER(_IpcHandle), ctypes.c_uint64])
        self._open = self._fn(lib, "cuIpcOpenMemHandle_v2",
                              [u64p, _IpcHandle, ctypes.c_uint])
        self._close = self._fn(lib, "cuIpcCloseMemHandle", [ctypes.c_uint64])
        self._current = self._fn(lib, "cuCtxGetCurrent", [ctypes.POINTER(ctypes.c_void_p)])
        self._errname = self._fn(lib, "cuGetErrorName",
                                 [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)])

    @staticmethod
    def _fn(lib: Any, name: str, argtypes: list[Any]) -> Any:
        try:
            f = getattr(lib, name)
        except AttributeError:
            raise ArenaError(f"libcuda has no {name}")
        f.argtypes = argtypes
        f.restype = ctypes.c_int
        return f

    @classmethod
    def get(cls) -> "_Driver":
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            name = ctypes.c_char_p()
            self._errname(rc, ctypes.byref(name))
            text = name.value.decode() if name.value else f"error {rc}"
            raise ArenaError(f"{what} failed: {text}")

    def require_context(self) -> None:
        ctx = ctypes.c_void_p()
        self.check(self._current(ctypes.byref(ctx)), "cuCtxGetCurrent")
        if not ctx.value:
            raise ArenaError("no current CUDA context on this thread")

    def alloc(self, nbytes: int) -> int:
        ptr = ctypes.c_uint64()
        self.check(self._alloc(ctypes.byref(ptr), nbytes), f"cuMemAlloc of {nbytes} bytes")
        return ptr.value

    def free(self, ptr: int) -> None:
        self._free(ptr)

    def export(self, ptr: int) -> bytes:
        h = _IpcHandle()
        self.check(self._get(ctypes.byref(h), ptr), "cuIpcGetMemHandle")
        return h.to_bytes()

    def open(self, handle: bytes) -> int:
        h = _IpcHandle.from_bytes(handle)
        ptr = ctypes.c_uint64()
        self.check(self._open(ctypes.byref(ptr), h, _CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                   "cuIpcOpenMemHandle")
        return ptr.value

    def close(self, ptr: int) -> None:
        self._close(ptr)


class Arena:
    """A uint8 tensor over the shared block, with typed views of its slots."""

    def __init__(self, kind: str, memory: torch.Tensor, desc: dict[str, Any],
                 release: Any = None):
        self.kind = kind
        self.memory = memory
        self.desc = desc
        self._release = release

    @property
    def size(self) -> int:
        return self.memory.numel()

    def view(self, offset: int, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
        """The slot at offset as a contiguous tensor of dtype and shape (shares memory)."""
        nbytes = dtype.itemsize
        for d in shape:
            nbytes *= d
        if offset < 0 or offset % ALIGN or offset + nbytes > self.size:
            raise ArenaError(f"slot at {offset} of {nbytes} bytes is outside the arena "
                             f"({self.size} bytes)")
        return self.memory[offset:offset + nbytes].view(dtype).view(shape)

    def close(self) -> None:
        """Drops this side's mapping (views taken earlier must not be used afterwards)."""
        self.memory = torch.empty(0, dtype=torch.uint8)
        if self._release is not None:
            release, self._release = self._release, None
            release()


def _mmap(path: str, nbytes: int) -> torch.Tensor:
    return torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)


def create(nbytes: int, device: torch.device, job_dir: str) -> tuple[Arena, str | None]:
    """The trusted side's arena of nbytes (zeroed) for a candidate on device. Returns it and,
    when a CUDA device had to fall back to a host mapping, the reason."""
    nbytes = align(max(nbytes, ALIGN))
    why = None
    choice = os.environ.get(ARENA_ENV, "auto")
    if choice not in ("auto", "mmap"):
        raise ArenaError(f"{ARENA_ENV}={choice!r}: expected auto or mmap")
    if device.type == "cuda" and choice == "mmap":
        why = f"{ARENA_ENV}=mmap"
    elif device.type == "cuda":
        try:
            drv = _Driver.get()
            torch.cuda.set_device(device)
            torch.zeros(1, device=device)  # the primary context, current on this thread
            drv.require_context()
            ptr = drv.alloc(nbytes)
            try:
                handle = drv.export(ptr)
                mem = torch.as_tensor(_CAI(ptr, nbytes), device=device)
                mem.zero_()
                torch.cuda.synchronize(device)
            except BaseException:
                drv.free(ptr)
                raise
            return Arena("cuda_ipc", mem, {"kind": "cuda_ipc", "handle": handle.hex(),
                                           "size": nbytes},
                         lambda: (torch.cuda.synchronize(device), drv.free(ptr))), None
        except (ArenaError, RuntimeError, TypeError) as exc:
            why = str(exc)
    path = os.path.join(job_dir, ARENA_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, nbytes)
    finally:
        os.close(fd)
    return Arena("mmap", _mmap(path, nbytes), {"kind": "mmap", "path": ARENA_FILE,
                                               "size": nbytes}), why


def open_arena(desc: Any, device: torch.device) -> Arena:
    """The candidate's side of the arena described by desc (from job.json)."""
    if not isinstance(desc, dict) or not isinstance(desc.get("size"), int) or \
            desc["size"] <= 0:
        raise ArenaError(f"bad arena description {desc!r}")
    size = desc["size"]
    if desc.get("kind") == "cuda_ipc":
        if device.type != "cuda":
            raise ArenaError("a CUDA arena for a candidate that is not on a CUDA device")
        handle = bytes.fromhex(str(desc.get("handle", "")))
        if len(handle) != _IPC_HANDLE_SIZE:
            raise ArenaError("bad CUDA IPC handle")
        drv = _Driver.get()
        drv.require_context()
        ptr = drv.open(handle)
        try:
            mem = torch.as_tensor(_CAI(ptr, size), device=device)
        except BaseException:
            drv.close(ptr)
            raise
        return Arena("cuda_ipc", mem, desc, lambda: drv.close(ptr))
    if desc.get("kind") == "mmap":
        path = desc.get("path")
        if path != ARENA_FILE:
            raise ArenaError(f"bad arena file {path!r}")
        if os.path.getsize(path) != size:
            raise ArenaError(f"the arena file is not {size} bytes")
        return Arena("mmap", _mmap(path, size), desc)
    raise ArenaError(f"unknown arena kind {desc.get('kind')!r}")
