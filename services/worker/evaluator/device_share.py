"""Device memory handed from one process to another as a file descriptor (CUDA's virtual memory
management API, through the driver library): a trial's outputs go from the candidate's rank to
the reference's without crossing host memory.

The sender allocates physical device memory that can be exported (``cuMemCreate`` with a POSIX
descriptor as its shareable handle), copies its tensors into it and exports the descriptor,
which travels over the pool's Unix socket as a sealed memory file does. The receiver imports it
(``cuMemImportFromShareableHandle``: the driver refuses a descriptor that is not such an
allocation), maps it at an address of its own and reads it where it is. The receiver's mapping
keeps the memory alive whatever the sender does; a mapping larger than the allocation is refused
by the driver. What the sender can still do is write into the memory while it is read: the judge
reads it only while the sender's processes are stopped and their device work drained, as it does
everything else of the candidate's.

A descriptor names an allocation on one device: a receiver on another device (or a driver
without the API) gets ``DeviceShareError`` and the caller falls back to host memory.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref

import torch

_CU_MEM_ALLOCATION_TYPE_PINNED = 1
_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
_CU_MEM_LOCATION_TYPE_DEVICE = 1
_CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0
_CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3


class DeviceShareError(RuntimeError):
    """The driver cannot share or map this memory (or was not found)."""


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_lib = None
_lib_lock = threading.Lock()


def _driver():
    global _lib
    with _lib_lock:
        if _lib is None:
            try:
                lib = ctypes.CDLL("libcuda.so.1")
            except OSError as exc:
                raise DeviceShareError(f"the CUDA driver library could not be loaded: {exc}") from None
            for name in ("cuInit", "cuMemGetAllocationGranularity", "cuMemCreate", "cuMemExportToShareableHandle",
                         "cuMemImportFromShareableHandle", "cuMemAddressReserve", "cuMemMap", "cuMemSetAccess",
                         "cuMemUnmap", "cuMemAddressFree", "cuMemRelease", "cuGetErrorString"):
                if not hasattr(lib, name):
                    raise DeviceShareError(f"the CUDA driver has no {name}")
            lib.cuMemAddressReserve.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, ctypes.c_size_t,
                                                ctypes.c_uint64, ctypes.c_ulonglong]
            lib.cuMemMap.argtypes = [ctypes.c_uint64, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_ulonglong, ctypes.c_ulonglong]
            lib.cuMemSetAccess.argtypes = [ctypes.c_uint64, ctypes.c_size_t, ctypes.POINTER(_AccessDesc), ctypes.c_size_t]
            lib.cuMemUnmap.argtypes = [ctypes.c_uint64, ctypes.c_size_t]
            lib.cuMemAddressFree.argtypes = [ctypes.c_uint64, ctypes.c_size_t]
            lib.cuMemRelease.argtypes = [ctypes.c_ulonglong]
            lib.cuMemCreate.argtypes = [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_size_t, ctypes.POINTER(_AllocationProp),
                                        ctypes.c_ulonglong]
            lib.cuMemExportToShareableHandle.argtypes = [ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_int, ctypes.c_ulonglong]
            lib.cuMemImportFromShareableHandle.argtypes = [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_void_p, ctypes.c_int]
            lib.cuMemGetAllocationGranularity.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(_AllocationProp),
                                                          ctypes.c_int]
            _check(lib, lib.cuInit(0), "cuInit")
            _lib = lib
        return _lib


def _check(lib, code: int, what: str) -> None:
    if code != 0:
        text = ctypes.c_char_p()
        lib.cuGetErrorString(code, ctypes.byref(text))
        raise DeviceShareError(f"{what} failed: CUDA driver error {code} ({(text.value or b'?').decode()})")


def _prop(device: int) -> _AllocationProp:
    prop = _AllocationProp()
    prop.type = _CU_MEM_ALLOCATION_TYPE_PINNED
    prop.requestedHandleTypes = _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    prop.location = _Location(_CU_MEM_LOCATION_TYPE_DEVICE, device)
    return prop


def _granularity(lib, device: int) -> int:
    size = ctypes.c_size_t()
    prop = _prop(device)
    _check(lib, lib.cuMemGetAllocationGranularity(ctypes.byref(size), ctypes.byref(prop), _CU_MEM_ALLOC_GRANULARITY_MINIMUM),
           "cuMemGetAllocationGranularity")
    return int(size.value)


class _Mapping:
    """An allocation (made here or imported) mapped read-write at an address of this process;
    unmapped and released by ``close``, or once nothing refers to it (tensors made by ``bytes``
    refer to it), after the device's work is done."""

    def __init__(self, lib, handle: int, size: int, device: int):
        self.size, self.device = size, device
        self.ptr = 0
        self._state = [lib, handle, 0]  # what the finalizer releases: the library, the handle, the address
        self._closer = weakref.finalize(self, _unmap, self._state, size, device)
        ptr = ctypes.c_uint64()
        try:
            _check(lib, lib.cuMemAddressReserve(ctypes.byref(ptr), size, 0, 0, 0), "cuMemAddressReserve")
            self.ptr = self._state[2] = int(ptr.value)
            _check(lib, lib.cuMemMap(self.ptr, size, 0, handle, 0), "cuMemMap")
            access = _AccessDesc(_Location(_CU_MEM_LOCATION_TYPE_DEVICE, device), _CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            _check(lib, lib.cuMemSetAccess(self.ptr, size, ctypes.byref(access), 1), "cuMemSetAccess")
        except DeviceShareError:
            self.close()
            raise

    def bytes(self) -> torch.Tensor:
        """The whole mapping as a uint8 tensor on its device (no copy)."""
        return torch.as_tensor(_ArrayInterface(self.ptr, self.size, self), device=f"cuda:{self.device}")

    def close(self) -> None:
        self._closer()


def _unmap(state: list, size: int, device: int) -> None:
    lib, handle, ptr = state
    if lib is None:
        return
    state[0] = None
    if ptr:
        torch.cuda.synchronize(device)  # no kernel still reads or writes the range
        lib.cuMemUnmap(ptr, size)
        lib.cuMemAddressFree(ptr, size)
    lib.cuMemRelease(handle)


class _ArrayInterface:
    """What ``torch.as_tensor`` reads a device pointer from; it keeps the mapping alive as long
    as a tensor made from it lives."""

    def __init__(self, ptr: int, size: int, owner: _Mapping):
        self.owner = owner
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (ptr, False), "version": 3}


def device_uuid(device: int) -> str:
    """The GPU's identity, the same in every process whatever its device numbering."""
    return str(torch.cuda.get_device_properties(device).uuid)


class DeviceBuffer:
    """Exportable device memory of at least ``size`` bytes on ``device``, in this process."""

    def __init__(self, size: int, device: int):
        lib = _driver()
        grain = _granularity(lib, device)
        self.size = max(grain, (size + grain - 1) // grain * grain)
        self.device = device
        handle = ctypes.c_ulonglong()
        prop = _prop(device)
        _check(lib, lib.cuMemCreate(ctypes.byref(handle), self.size, ctypes.byref(prop), 0), "cuMemCreate")
        self._handle = int(handle.value)
        self._mapping = _Mapping(lib, self._handle, self.size, device)  # owns the handle from here, failing or not

    def bytes(self) -> torch.Tensor:
        return self._mapping.bytes()

    def export(self) -> int:
        """A new descriptor of the allocation, the caller's to close (after sending it)."""
        fd = ctypes.c_int(-1)
        lib = _driver()
        _check(lib, lib.cuMemExportToShareableHandle(ctypes.byref(fd), self._handle, _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
               "cuMemExportToShareableHandle")
        os.set_inheritable(fd.value, False)
        return int(fd.value)

    def close(self) -> None:
        """Unmapped here; the memory is given back once every importer has let go of it too."""
        self._mapping.close()


class ImportedBuffer:
    """A received descriptor's allocation, mapped here; ``size`` is what the sender said it is
    (the driver refuses to map more than the allocation holds). The descriptor stays the
    caller's."""

    def __init__(self, fd: int, size: int, device: int):
        lib = _driver()
        grain = _granularity(lib, device)
        if size <= 0 or size % grain:
            raise DeviceShareError(f"a shared device allocation of {size} bytes is not a multiple of the device's granularity ({grain})")
        handle = ctypes.c_ulonglong()
        _check(lib, lib.cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd),
                                                       _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
               "cuMemImportFromShareableHandle")
        self._mapping = _Mapping(lib, int(handle.value), size, device)  # owns the handle from here, failing or not
        self.size, self.device = size, device

    def bytes(self) -> torch.Tensor:
        return self._mapping.bytes()

    def close(self) -> None:
        """Unmapped now (after the device's work): tensors made from it must not be used again."""
        self._mapping.close()


def available(device: int) -> bool:
    """Whether this process can make exportable device memory on ``device``."""
    try:
        buf = DeviceBuffer(1, device)
    except DeviceShareError:
        return False
    buf.close()
    return True


#: Offsets of tensors in an allocation (every dtype's width divides it).
ALIGN = 256


class DeviceExport:
    """A message's own device allocation, filled and exported: its descriptor goes with the
    message (``close_descriptor`` once sent); the allocation stays until ``close``."""

    def __init__(self, buffer: DeviceBuffer, fd: int, uuid: str):
        self.buffer, self.fd, self.size, self.uuid = buffer, fd, buffer.size, uuid

    def close_descriptor(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass

    def close(self) -> None:
        self.close_descriptor()
        self.buffer.close()


class DeviceWriter:
    """Device tensors laid out one after the other (aligned), copied into a new exportable
    allocation by ``export``."""

    def __init__(self, device: torch.device):
        self.device = device
        self.items: list[tuple[int, torch.Tensor]] = []
        self.size = 0

    def add(self, t: torch.Tensor) -> int:
        offset = self.size
        self.items.append((offset, t.detach()))
        self.size = (offset + t.numel() * t.element_size() + ALIGN - 1) // ALIGN * ALIGN
        return offset

    def export(self) -> DeviceExport:
        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        buffer = DeviceBuffer(self.size, index)
        try:
            whole = buffer.bytes()
            with torch.cuda.device(index):
                for offset, t in self.items:
                    nbytes = t.numel() * t.element_size()
                    whole[offset: offset + nbytes].view(t.dtype).view(t.shape).copy_(t)
                del whole
                torch.cuda.synchronize(index)  # the receiver, another process, reads it next
            fd = buffer.export()
        except BaseException:
            buffer.close()
            raise
        self.items = []
        return DeviceExport(buffer, fd, device_uuid(index))
