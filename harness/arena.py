"""arena.py: the one block of memory through which the trusted side and a candidate exchange
tensors.

The trusted side (evaluate.py) creates an arena per evaluation, lays out in it every input
set's tensors and a slot for each expected output, and writes the inputs; the candidate
(candidate.py) opens the same memory, runs its forward directly on the input views, and copies
each output into its slot. Nothing is serialised and nothing crosses the PCIe bus.

The arena is named by a file descriptor, never by a path or a global handle: the trusted side
hands the candidate the descriptor itself (over its control socket, SCM_RIGHTS), so a
candidate in its sandbox (other pid and mount namespaces, no access to the trusted side's
files) can reach exactly this block and nothing else:

- "cuda_vmm": device memory of its own (cuMemCreate, never the caching allocator, so no
  other tensor of the trusted process shares its pages), exported as a POSIX file descriptor
  (cuMemExportToShareableHandle) and mapped by the candidate with
  cuMemImportFromShareableHandle. Legacy CUDA IPC handles do not cross pid namespaces; these
  descriptors do.
- "memfd": an anonymous shared memory file (memfd_create) mapped by both (CPU mode, and the
  fallback where device memory cannot be exported; the candidate then copies inputs to the
  device and outputs and post-forward inputs back).

Because the candidate's forward runs on the arena's input views, the trusted side checks input
mutation by comparing those views with its own pristine copies: no copy back is needed.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from typing import Any

import torch

ALIGN = 256
# "auto" (default): device memory for a CUDA device, falling back to a memfd; "mmap": always
# the memfd.
ARENA_ENV = "CUDA_AGENT_ARENA"
# CUDA driver enums (cuda.h).
_CU_MEM_ALLOCATION_TYPE_PINNED = 1
_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
_CU_MEM_LOCATION_TYPE_DEVICE = 1
_CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0
_CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3


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


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", _Location), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


class _Driver:
    """The few CUDA driver calls the arena needs, through libcuda (always a shared library)."""

    _instance: "_Driver | None" = None

    def __init__(self) -> None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise ArenaError(f"cannot load libcuda.so.1: {exc}")
        u64, u64p, size = ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t
        prop_p = ctypes.POINTER(_AllocProp)
        self._granularity = self._fn(lib, "cuMemGetAllocationGranularity",
                                     [ctypes.POINTER(size), prop_p, ctypes.c_int])
        self._create = self._fn(lib, "cuMemCreate", [u64p, size, prop_p, u64])
        self._release = self._fn(lib, "cuMemRelease", [u64])
        self._reserve = self._fn(lib, "cuMemAddressReserve", [u64p, size, size, u64, u64])
        self._free = self._fn(lib, "cuMemAddressFree", [u64, size])
        self._map = self._fn(lib, "cuMemMap", [u64, size, size, u64, u64])
        self._unmap = self._fn(lib, "cuMemUnmap", [u64, size])
        self._access = self._fn(lib, "cuMemSetAccess",
                                [u64, size, ctypes.POINTER(_AccessDesc), size])
        self._export = self._fn(lib, "cuMemExportToShareableHandle",
                                [ctypes.c_void_p, u64, ctypes.c_int, u64])
        self._import = self._fn(lib, "cuMemImportFromShareableHandle",
                                [u64p, ctypes.c_void_p, ctypes.c_int])
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

    @staticmethod
    def _prop(ordinal: int) -> _AllocProp:
        prop = _AllocProp()
        prop.type = _CU_MEM_ALLOCATION_TYPE_PINNED
        prop.requestedHandleTypes = _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        prop.location = _Location(_CU_MEM_LOCATION_TYPE_DEVICE, ordinal)
        return prop

    def rounded(self, nbytes: int, ordinal: int) -> int:
        g = ctypes.c_size_t()
        prop = self._prop(ordinal)
        self.check(self._granularity(ctypes.byref(g), ctypes.byref(prop),
                                     _CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                   "cuMemGetAllocationGranularity")
        gran = max(int(g.value), 1)
        return (nbytes + gran - 1) // gran * gran

    def create(self, nbytes: int, ordinal: int) -> tuple[int, int]:
        """(allocation handle, POSIX fd) of nbytes (a multiple of the granularity)."""
        h = ctypes.c_uint64()
        prop = self._prop(ordinal)
        self.check(self._create(ctypes.byref(h), nbytes, ctypes.byref(prop), 0),
                   f"cuMemCreate of {nbytes} bytes")
        fd = ctypes.c_int(-1)
        rc = self._export(ctypes.byref(fd), h.value, _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                          0)
        if rc != 0:
            self._release(h.value)
            self.check(rc, "cuMemExportToShareableHandle")
        return h.value, fd.value

    def import_fd(self, fd: int) -> int:
        h = ctypes.c_uint64()
        self.check(self._import(ctypes.byref(h), ctypes.c_void_p(fd),
                                _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                   "cuMemImportFromShareableHandle")
        return h.value

    def map(self, handle: int, nbytes: int, ordinal: int) -> int:
        """Maps the allocation at a fresh address, readable and writable from ordinal."""
        ptr = ctypes.c_uint64()
        self.check(self._reserve(ctypes.byref(ptr), nbytes, 0, 0, 0), "cuMemAddressReserve")
        try:
            self.check(self._map(ptr.value, nbytes, 0, handle, 0), "cuMemMap")
            try:
                acc = _AccessDesc(_Location(_CU_MEM_LOCATION_TYPE_DEVICE, ordinal),
                                  _CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
                self.check(self._access(ptr.value, nbytes, ctypes.byref(acc), 1),
                           "cuMemSetAccess")
            except BaseException:
                self._unmap(ptr.value, nbytes)
                raise
        except BaseException:
            self._free(ptr.value, nbytes)
            raise
        return ptr.value

    def unmap(self, ptr: int, handle: int, nbytes: int) -> None:
        self._unmap(ptr, nbytes)
        self._free(ptr, nbytes)
        self._release(handle)


class Arena:
    """A uint8 tensor over the shared block, with typed views of its slots."""

    def __init__(self, kind: str, memory: torch.Tensor, desc: dict[str, Any],
                 release: Any = None, fd: int = -1):
        self.kind = kind
        self.memory = memory
        self.desc = desc
        self._release = release
        self.fd = fd

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
            try:
                release()
            except BufferError:
                pass  # a view still exports the mapping: it goes with its last reference
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


def _map_fd(fd: int, nbytes: int) -> tuple[torch.Tensor, mmap.mmap]:
    m = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    return torch.frombuffer(m, dtype=torch.uint8, count=nbytes), m


def _ordinal(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _cuda_arena(nbytes: int, device: torch.device) -> "Arena":
    drv = _Driver.get()
    torch.cuda.set_device(device)
    torch.zeros(1, device=device)  # the primary context, current on this thread
    drv.require_context()
    ordinal = _ordinal(device)
    size = drv.rounded(nbytes, ordinal)
    handle, fd = drv.create(size, ordinal)
    try:
        ptr = drv.map(handle, size, ordinal)
    except BaseException:
        os.close(fd)
        drv._release(handle)
        raise
    try:
        mem = torch.as_tensor(_CAI(ptr, size), device=device)
        mem.zero_()
        torch.cuda.synchronize(device)
    except BaseException:
        os.close(fd)
        drv.unmap(ptr, handle, size)
        raise

    def release() -> None:
        torch.cuda.synchronize(device)
        drv.unmap(ptr, handle, size)

    return Arena("cuda_vmm", mem, {"kind": "cuda_vmm", "size": size}, release, fd)


def create(nbytes: int, device: torch.device) -> tuple[Arena, str | None]:
    """The trusted side's arena of at least nbytes (zeroed) for a candidate on device; its
    descriptor is arena.fd. Returns it and, when a CUDA device had to fall back to host
    memory, the reason."""
    nbytes = align(max(nbytes, ALIGN))
    why = None
    choice = os.environ.get(ARENA_ENV, "auto")
    if choice not in ("auto", "mmap"):
        raise ArenaError(f"{ARENA_ENV}={choice!r}: expected auto or mmap")
    if device.type == "cuda" and choice == "mmap":
        why = f"{ARENA_ENV}=mmap"
    elif device.type == "cuda":
        try:
            return _cuda_arena(nbytes, device), None
        except (ArenaError, RuntimeError, TypeError, OSError) as exc:
            why = str(exc)
    fd = os.memfd_create("cuda-agent-arena", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, nbytes)
        mem, m = _map_fd(fd, nbytes)
    except BaseException:
        os.close(fd)
        raise
    return Arena("memfd", mem, {"kind": "memfd", "size": nbytes}, m.close, fd), why


def open_arena(desc: Any, device: torch.device, fd: int) -> Arena:
    """The candidate's side of the arena described by desc (from job.json), whose descriptor
    the trusted side handed over as fd (the arena keeps it and closes it with itself)."""
    if not isinstance(desc, dict) or not isinstance(desc.get("size"), int) or \
            desc["size"] <= 0:
        raise ArenaError(f"bad arena description {desc!r}")
    if not isinstance(fd, int) or fd < 0:
        raise ArenaError("no descriptor for the arena")
    size = desc["size"]
    st = os.fstat(fd)
    if desc.get("kind") == "cuda_vmm":
        if device.type != "cuda":
            raise ArenaError("a CUDA arena for a candidate that is not on a CUDA device")
        drv = _Driver.get()
        drv.require_context()
        ordinal = _ordinal(device)
        handle = drv.import_fd(fd)
        try:
            ptr = drv.map(handle, size, ordinal)
        except BaseException:
            drv._release(handle)
            raise
        try:
            mem = torch.as_tensor(_CAI(ptr, size), device=device)
        except BaseException:
            drv.unmap(ptr, handle, size)
            raise
        return Arena("cuda_vmm", mem, desc, lambda: drv.unmap(ptr, handle, size), fd)
    if desc.get("kind") == "memfd":
        if st.st_size != size:
            raise ArenaError(f"the arena file is not {size} bytes")
        mem, m = _map_fd(fd, size)
        return Arena("memfd", mem, desc, m.close, fd)
    raise ArenaError(f"unknown arena kind {desc.get('kind')!r}")
