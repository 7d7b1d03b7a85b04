"""Sealed memory files that carry a message's large tensors from one process to another, and
device allocations that carry a candidate's large device outputs to the reference's rank on the
same GPU (``DeviceBlob``; ``device_share.py``).

The sender writes its tensors into an anonymous memory file (``memfd_create``) and seals it
against writing, shrinking and growing before its descriptor leaves: what a receiver maps can no
longer change under it, and cannot be cut short (a mapped file truncated by its sender would kill
the reader with SIGBUS on the next page it touched). A receiver takes a descriptor only if it is
such a file (``Blob.adopt``); a reference into it (``BlobRef``) is checked against the file's size
and the dtype's width before anything is mapped. Receivers map copy-on-write: a rank may change
the tensors it was given (a workload that mutates its inputs) without touching the file.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import stat
import weakref
from dataclasses import dataclass

import torch

from . import device_share

#: Descriptors one message may carry.
MAX_FILES = 64
#: Offsets of tensors in a file (every dtype's width divides it).
ALIGN = 64
_REQUIRED_SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
def dtype_name(dtype: torch.dtype) -> str:
    """How a message names a dtype (``float32``, ``float8_e4m3fn``)."""
    return str(dtype).removeprefix("torch.")


_DTYPES = {dtype_name(d): d for d in vars(torch).values() if isinstance(d, torch.dtype)}


def close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class Writer:
    """Tensors laid out one after the other (aligned), written into a new file by ``seal``."""

    def __init__(self):
        self.items: list[tuple[int, torch.Tensor]] = []
        self.size = 0

    def add(self, t: torch.Tensor) -> int:
        offset = self.size
        self.items.append((offset, t.detach()))
        self.size = _aligned(offset + t.numel() * t.element_size())
        return offset

    def seal(self) -> Blob:
        fd = os.memfd_create("kloom-tensors", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, self.size)
            with mmap.mmap(fd, self.size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE) as mapping:
                self._copy_into(mapping)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _REQUIRED_SEALS | fcntl.F_SEAL_SEAL)
        except BaseException:
            close_quietly(fd)
            raise
        self.items = []
        return Blob(fd, self.size)

    def _copy_into(self, mapping: mmap.mmap) -> None:
        # Every view of the mapping is gone when this returns, so the mapping can close and the
        # file be sealed against writing (which a live shared writable mapping would refuse).
        whole = torch.frombuffer(mapping, dtype=torch.uint8)
        with _registered(whole, any(t.is_cuda for _, t in self.items)):
            for offset, t in self.items:
                nbytes = t.numel() * t.element_size()
                target = whole[offset : offset + nbytes].view(t.dtype).view(t.shape)
                target.copy_(t)
                del target
        del whole


@contextlib.contextmanager
def _registered(host: torch.Tensor, wanted: bool):
    """``host`` (the file's mapping) registered with CUDA while device tensors are copied into
    it: the copy goes straight into the file's pages by DMA instead of through a pageable
    bounce buffer (on an H100, a GiB from the device took 0.95 s; registered, 0.55 s to register,
    most of it the file's pages coming into being, and 0.02 s to copy:
    ``benchmarks/gpu/transport_probe.py``). Where registering fails, the copy is made as it is."""
    done = False
    if wanted and host.numel():
        try:
            code = torch.cuda.cudart().cudaHostRegister(host.data_ptr(), host.numel(), 0)
            done = int(getattr(code, "value", code)) == 0
        except (RuntimeError, AttributeError, TypeError, ValueError):
            done = False
    try:
        yield
    finally:
        if done:
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaHostUnregister(host.data_ptr())


class Blob:
    """An open, sealed memory file of a fixed size (the descriptor is this object's to close)."""

    def __init__(self, fd: int, size: int):
        self.fd = fd
        self.size = size
        self._closer = weakref.finalize(self, close_quietly, fd)

    @classmethod
    def adopt(cls, fd: int) -> Blob:
        """A received descriptor, if it is a sealed memory file; else it is closed and this raises."""
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ValueError("a shared tensor file that is not a regular file")
            try:
                seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            except OSError:
                raise ValueError("a shared tensor file that cannot be sealed (not a memory file)") from None
            if seals & _REQUIRED_SEALS != _REQUIRED_SEALS:
                raise ValueError("a shared tensor file not sealed against writing, shrinking and growing")
        except BaseException:
            close_quietly(fd)
            raise
        return cls(fd, info.st_size)

    def mapping(self) -> mmap.mmap:
        """The whole file, mapped anew, private and writable: copy on write, so what one holder
        writes reaches neither the file nor another mapping of it."""
        return mmap.mmap(self.fd, self.size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)

    def close(self) -> None:
        """The descriptor closed; tensors already made from the file keep their mappings."""
        self._closer()


#: The longest GPU identity a message may name.
MAX_UUID = 64


class DeviceBlob:
    """A received descriptor said to be an exportable device allocation of ``size`` bytes on the
    GPU ``uuid``. The judge's process cannot look inside (it holds no CUDA context): it refuses
    what is plainly something else (a file, a directory, a socket, a pipe) and passes the rest on;
    the rank that maps it is where the driver refuses anything that is not such an allocation, or
    is smaller than said (``device_share.ImportedBuffer``)."""

    def __init__(self, fd: int, size: int, uuid: str):
        self.fd, self.size, self.uuid = fd, size, uuid
        self._closer = weakref.finalize(self, close_quietly, fd)
        self.imported = None  # device_share.ImportedBuffer, where this process mapped it

    @classmethod
    def adopt(cls, fd: int, size, uuid) -> DeviceBlob:
        try:
            if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
                raise ValueError(f"a shared device allocation of {size!r} bytes")
            if not isinstance(uuid, str) or not 0 < len(uuid) <= MAX_UUID:
                raise ValueError("a shared device allocation without the identity of its GPU")
            mode = os.fstat(fd).st_mode
            if stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode) or stat.S_ISBLK(mode):
                raise ValueError("a shared device allocation whose descriptor is a file, a directory, a socket or a pipe")
        except BaseException:
            close_quietly(fd)
            raise
        return cls(fd, size, uuid)

    def mapped(self, device: torch.device) -> torch.Tensor:
        """The allocation's bytes on ``device`` (mapped once; ``close`` unmaps)."""
        if self.imported is None:
            if device.type != "cuda":
                raise ValueError(f"a shared device allocation where this rank has no GPU ({device})")
            try:
                index = device.index if device.index is not None else torch.cuda.current_device()
                if device_share.device_uuid(index) != self.uuid:
                    raise ValueError(f"a shared device allocation of GPU {self.uuid}, which is not this rank's ({device})")
                self.imported = device_share.ImportedBuffer(self.fd, self.size, index)
            except (device_share.DeviceShareError, RuntimeError) as exc:
                raise ValueError(f"a shared device allocation that could not be mapped: {exc}") from None
        return self.imported.bytes()

    def close(self) -> None:
        """The descriptor closed, and the mapping gone where there was one (after the device's
        work): tensors made from it must not be used again."""
        if self.imported is not None:
            self.imported.close()
            self.imported = None
        self._closer()


@dataclass(frozen=True)
class BlobRef:
    """One tensor's bytes in a ``Blob`` (or a ``DeviceBlob``)."""

    blob: Blob | DeviceBlob
    offset: int
    nbytes: int
    dtype: str
    shape: tuple[int, ...]

    @classmethod
    def checked(cls, blob: Blob, offset, nbytes, dtype, shape) -> BlobRef:
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (offset, nbytes)):
            raise ValueError("a shared tensor's offset and size must be integers")
        if dtype not in _DTYPES:
            raise ValueError(f"a shared tensor of unknown dtype {dtype!r}")
        if not isinstance(shape, (list, tuple)) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise ValueError("a shared tensor's shape must be a list of non-negative integers")
        numel = 1
        for d in shape:
            numel *= d
        width = _DTYPES[dtype].itemsize
        if numel * width != nbytes or offset < 0 or offset % ALIGN or offset + nbytes > blob.size:
            raise ValueError(f"a shared tensor of {nbytes} bytes at {offset} does not fit its shape {list(shape)} of {dtype} "
                             f"or its file of {blob.size} bytes")
        return cls(blob, offset, nbytes, dtype, tuple(shape))

    def tensor(self, device: torch.device | None = None) -> torch.Tensor:
        """The tensor, over a copy-on-write mapping of its own (no copy is made); from a
        ``DeviceBlob``, over its mapping on ``device`` (this rank's), valid until the blob closes."""
        if isinstance(self.blob, DeviceBlob):
            if device is None:
                raise ValueError("a shared device allocation where no device can map it")
            whole = self.blob.mapped(device)
        else:
            whole = torch.frombuffer(self.blob.mapping(), dtype=torch.uint8)
        return whole[self.offset : self.offset + self.nbytes].view(_DTYPES[self.dtype]).view(self.shape)
