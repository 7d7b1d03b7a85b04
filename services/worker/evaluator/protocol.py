"""Messages between the pool and its ranks.

A message is plain data read with ``torch.load(weights_only=True)``, whose restricted unpickler
accepts tensors and plain data only: a rank runs untrusted code, and an ordinary pickle from it
could run code in the judge's process. A message that holds nothing but containers, strings,
bytes and numbers (most commands and replies: a timed block's times, a check's verdict) travels
as a pickle read by an unpickler that admits no global at all, so no class or function can be
named in it, let alone called: ~0.35 ms less per message than torch's archive, on each of an
evaluation's ~40 round trips (``_PlainUnpickler``).

Tensors of ``SHARE_MIN_BYTES`` or more do not travel inside the message: the sender writes them
into one sealed memory file (``shared.py``) whose descriptor follows the message over the Unix
socket, and the message holds a mark (offset, size, dtype, shape) in each one's place. The judge's
process passes such a file on from one pool to the other without reading it (``BlobRef``): a
trial's GiB inputs and outputs are copied once into the file and mapped by the rank that uses
them, not pickled, piped and unpickled twice through the judge.

A sender that shares device memory (a candidate's rank on a GPU, ``pack(share_device=device)``)
puts its large tensors on that device into one exportable device allocation instead (``device_share.py``),
whose descriptor travels the same way, named in the envelope with its size and its GPU: the
reference's rank on that GPU maps it and compares where the outputs are, with no host copy either
way. Such a mapping lives for the command that received it (``recv_command_holding``).
"""

from __future__ import annotations

import io
import pickle
import select
import socket
from multiprocessing.connection import Connection
from typing import Any

import torch
from torch.utils import _pytree as pytree

from . import device_share, shared
from .shared import Blob, BlobRef, DeviceBlob

#: Tensors this large go in a shared file; smaller ones inside the message.
SHARE_MIN_BYTES = 1 << 16
#: Device tensors this large go in a shared device allocation where the sender shares device memory.
DEVICE_SHARE_MIN_BYTES = 1 << 20
#: How long a receiver waits for the descriptors a message announced.
FDS_TIMEOUT_S = 30.0
#: The largest message read (its small tensors and values; large tensors travel in shared files):
#: a rank that sends more is not read, so it cannot make the pool's process hold what it likes.
MAX_MESSAGE_BYTES = 256 << 20
_MARK = "__kloom_shared__"


def _large(value: Any) -> bool:
    """Whether ``value`` is a tensor that travels in a shared file rather than in the message."""
    return isinstance(value, torch.Tensor) and value.numel() * value.element_size() >= SHARE_MIN_BYTES


#: The first bytes of a plain message (pickle protocol 5); torch's archives begin "PK".
_PLAIN = b"\x80\x05"
_PLAIN_SCALARS = (str, int, float, bool, bytes, type(None))


def _is_plain(value: Any) -> bool:
    """Whether ``value`` is made of exactly the types ``_PlainUnpickler`` rebuilds: dicts, lists
    and tuples of strings, numbers, bytes, booleans and None (not their subclasses, which pickle
    names by their class)."""
    kind = type(value)
    if kind in _PLAIN_SCALARS:
        return True
    if kind is dict:
        return all(type(k) in _PLAIN_SCALARS and _is_plain(v) for k, v in value.items())
    if kind is list or kind is tuple:
        return all(_is_plain(v) for v in value)
    return False


class _PlainUnpickler(pickle.Unpickler):
    """Rebuilds only what pickle's opcodes make without naming a global (containers, strings,
    bytes, numbers): any class or function a message names is refused, so nothing in it runs."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"a message may not name {module}.{name}")


class _Outgoing:
    """What one message sends besides its bytes: a file of its own tensors (made on the first
    one), a device allocation of its own device tensors (where it shares device memory), and
    the files and allocations of the references it passes on."""

    def __init__(self, share_device: torch.device | None = None):
        self.share_device = share_device
        self.writer: shared.Writer | None = None
        self.device_writer: device_share.DeviceWriter | None = None
        self.own_marks: list[dict] = []  # their slot is the own file's, known once all refs are in
        self.device_marks: list[dict] = []  # likewise, the own device allocation's
        self.fds: list[int] = []
        self.devices: list[list] = []  # [slot, size, uuid] of each device allocation among fds
        self.passed: list[Blob | DeviceBlob] = []  # what is passed on, held open until the message is sent
        self.index: dict[int, int] = {}  # id(blob) -> position in fds

    def tensor(self, t: torch.Tensor) -> dict:
        nbytes = t.numel() * t.element_size()
        if self.share_device is not None and t.is_cuda and t.device == self.share_device and nbytes >= DEVICE_SHARE_MIN_BYTES:
            if self.device_writer is None:
                self.device_writer = device_share.DeviceWriter(t.device)
            mark = {_MARK: -1, "offset": self.device_writer.add(t), "nbytes": nbytes, "dtype": shared.dtype_name(t.dtype), "shape": list(t.shape)}
            self.device_marks.append(mark)
            return mark
        if self.writer is None:
            self.writer = shared.Writer()
        mark = {_MARK: -1, "offset": self.writer.add(t), "nbytes": nbytes, "dtype": shared.dtype_name(t.dtype), "shape": list(t.shape)}
        self.own_marks.append(mark)
        return mark

    def ref(self, ref: BlobRef) -> dict:
        key = id(ref.blob)
        if key not in self.index:
            self.index[key] = len(self.fds)
            if isinstance(ref.blob, DeviceBlob):
                self.devices.append([len(self.fds), ref.blob.size, ref.blob.uuid])
            self.fds.append(ref.blob.fd)
            self.passed.append(ref.blob)
        return {_MARK: self.index[key], "offset": ref.offset, "nbytes": ref.nbytes, "dtype": ref.dtype, "shape": list(ref.shape)}

    def encode(self, value: Any) -> Any:
        return pytree.tree_map(self._leaf, value)

    def _leaf(self, value: Any) -> Any:
        if _large(value):
            return self.tensor(value)
        if isinstance(value, BlobRef):
            return self.ref(value)
        return value

    def finish(self) -> tuple[list[int], Blob | None, device_share.DeviceExport | None]:
        """The descriptors to send (this message's own device allocation, then its own file,
        last), that file and that allocation (closed by the caller once sent). Where the device
        allocation cannot be made, its tensors go into the file after all."""
        device = None
        if self.device_writer is not None:
            try:
                device = self.device_writer.export()
            except (device_share.DeviceShareError, RuntimeError):  # no such memory to be had: the file takes them
                device = None
            if device is None:
                for mark, (_, t) in zip(self.device_marks, self.device_writer.items):
                    if self.writer is None:
                        self.writer = shared.Writer()
                    mark["offset"] = self.writer.add(t)
                    self.own_marks.append(mark)
            else:
                slot = len(self.fds)
                for mark in self.device_marks:
                    mark[_MARK] = slot
                self.devices.append([slot, device.size, device.uuid])
                self.fds = self.fds + [device.fd]
            self.device_writer = None
        if self.writer is None:
            return self.fds, None, device
        for mark in self.own_marks:
            mark[_MARK] = len(self.fds)
        try:
            own = self.writer.seal()
        except BaseException:
            if device is not None:
                device.close()
            raise
        return self.fds + [own.fd], own, device


class Packed:
    """A message ready to go: its bytes, the descriptors that follow them, its own file (closed
    once sent, or by ``close`` where it is never sent), its own device allocation's descriptor
    (likewise; the allocation itself, ``device``, is the sender's to keep until the receiver
    has mapped it: ``serve`` keeps it until its next command) and the files it passes on (held
    open until then, whatever becomes of the message they came in)."""

    def __init__(self, data: memoryview, fds: list[int], own: Blob | None, passed: list, device: device_share.DeviceExport | None = None):
        self.data, self.fds, self.own, self.passed, self.device = data, fds, own, passed, device

    def close(self) -> None:
        if self.own is not None:
            self.own.close()
        if self.device is not None:
            self.device.close_descriptor()
        self.passed = []


def pack(message: dict[str, Any], share_device: torch.device | None = None) -> Packed:
    """``message`` encoded: its large tensors copied into a sealed file (or, those on the device
    ``share_device``, into a device allocation of its own), so that the caller may drop them (and
    free their device memory) before the message is sent."""
    out = _Outgoing(share_device)
    body = out.encode(message)
    fds, own, device = out.finish()
    try:
        envelope = {"body": body, "fds": len(fds)}
        if out.devices:
            envelope["devices"] = out.devices
        if _is_plain(envelope):
            data = memoryview(pickle.dumps(envelope, protocol=5))
        else:
            buffer = io.BytesIO()
            torch.save(envelope, buffer)
            data = buffer.getbuffer()
    except BaseException:
        if own is not None:
            own.close()
        if device is not None:
            device.close()
        raise
    return Packed(data, fds, own, out.passed, device)


def send_packed(conn: Connection, packed: Packed) -> None:
    try:
        conn.send_bytes(packed.data)
        if packed.fds:
            with socket.fromfd(conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                socket.send_fds(sock, [b"F"], packed.fds)
    finally:
        packed.close()


def _send(conn: Connection, message: dict[str, Any]) -> None:
    send_packed(conn, pack(message))


def _recv(conn: Connection) -> tuple[Any, list]:
    try:
        data = conn.recv_bytes(MAX_MESSAGE_BYTES)
    except OSError as exc:
        if "bad message length" not in str(exc):
            raise
        raise ValueError(f"a message of more than {MAX_MESSAGE_BYTES >> 20} MiB (tensors of {SHARE_MIN_BYTES >> 10} KiB "
                         "or more travel beside messages, in shared files)") from exc
    try:
        if data[:2] == _PLAIN:
            envelope = _PlainUnpickler(io.BytesIO(data)).load()
        else:
            envelope = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - anything unreadable is the sender's fault
        raise ValueError(f"unreadable message: {type(exc).__name__}: {exc}") from exc
    if not isinstance(envelope, dict) or not isinstance(envelope.get("fds"), int) or "body" not in envelope:
        raise ValueError(f"a message of {type(envelope).__name__} without its envelope")
    count = envelope["fds"]
    if not 0 <= count <= shared.MAX_FILES:
        raise ValueError(f"a message announced {count} shared files (at most {shared.MAX_FILES})")
    devices = _devices(envelope.get("devices", []), count)
    return envelope["body"], _recv_fds(conn, count, devices) if count else []


def _devices(listed: Any, count: int) -> dict[int, tuple]:
    """The envelope's device allocations, {slot: (size, uuid)}: each names a slot of its own."""
    if not isinstance(listed, list) or len(listed) > count:
        raise ValueError("a message's list of shared device allocations is malformed")
    found: dict[int, tuple] = {}
    for entry in listed:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], int) and not isinstance(entry[0], bool)
                and 0 <= entry[0] < count and entry[0] not in found):
            raise ValueError("a message's list of shared device allocations is malformed")
        found[entry[0]] = (entry[1], entry[2])
    return found


def _recv_fds(conn: Connection, count: int, devices: dict[int, tuple] | None = None) -> list:
    ready, _, _ = select.select([conn.fileno()], [], [], FDS_TIMEOUT_S)
    if not ready:
        raise ValueError(f"the {count} shared file(s) a message announced did not come within {FDS_TIMEOUT_S:.0f} s")
    with socket.fromfd(conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        msg, fds, flags, _ = socket.recv_fds(sock, 1, count, socket.MSG_CMSG_CLOEXEC | socket.MSG_DONTWAIT)
    devices = devices or {}
    blobs = []
    try:
        for slot, fd in enumerate(fds):
            # Each takes the descriptor, or closes it and raises.
            blobs.append(DeviceBlob.adopt(fd, *devices[slot]) if slot in devices else Blob.adopt(fd))
    except ValueError:
        for blob in blobs:
            blob.close()
        for fd in fds[len(blobs) + 1:]:
            shared.close_quietly(fd)
        raise
    if msg != b"F" or len(blobs) != count or flags & socket.MSG_CTRUNC:
        for blob in blobs:
            blob.close()
        raise ValueError(f"a message announced {count} shared file(s) and {len(fds)} came")
    return blobs


class Unreadable:
    """In a received command, in place of a tensor whose device allocation this rank could not
    map (``reason``): the sender's fault, which the command's handler reports as such."""

    def __init__(self, reason: str):
        self.reason = reason


def _decode(value: Any, blobs: list, lazy: bool, device: torch.device | None = None) -> Any:
    if isinstance(value, dict):
        if _MARK in value:
            ref = _ref(value, blobs)
            if lazy:
                return ref
            if isinstance(ref.blob, DeviceBlob):
                try:
                    return ref.tensor(device)
                except ValueError as exc:
                    return Unreadable(str(exc))
            return ref.tensor()
        return {k: _decode(v, blobs, lazy, device) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, blobs, lazy, device) for v in value]
    if isinstance(value, tuple):
        return tuple(_decode(v, blobs, lazy, device) for v in value)
    return value


def _ref(mark: dict, blobs: list) -> BlobRef:
    slot = mark.get(_MARK)
    if not isinstance(slot, int) or not 0 <= slot < len(blobs):
        raise ValueError(f"a shared tensor names file {slot!r} of {len(blobs)}")
    return BlobRef.checked(blobs[slot], mark.get("offset"), mark.get("nbytes"), mark.get("dtype"), mark.get("shape"))


def _received(conn: Connection, lazy: bool, device: torch.device | None = None) -> tuple[dict[str, Any], list[DeviceBlob]]:
    """The message, and (read eagerly) the device allocations its tensors are mapped from,
    which the caller closes once done with them."""
    body, blobs = _recv(conn)
    held: list[DeviceBlob] = []
    try:
        try:
            message = _decode(body, blobs, lazy, device)
        except RecursionError:
            raise ValueError("a message nested too deep (or holding itself)") from None
        if not isinstance(message, dict):
            raise ValueError(f"a message of {type(message).__name__}, not a dict")
        if not lazy:
            held = [b for b in blobs if isinstance(b, DeviceBlob)]
        return message, held
    except BaseException:
        lazy, held = False, []
        raise
    finally:
        if not lazy:  # the tensors map what they need (or nothing was made): the descriptors go
            for blob in blobs:
                if not any(blob is h for h in held):
                    blob.close()


def send_command(conn: Connection, message: dict[str, Any]) -> None:
    """From the pool: a command (tensors, or references passed on from the other pool)."""
    _send(conn, message)


def recv_command(conn: Connection) -> dict[str, Any]:
    """In a rank: the command, every shared tensor mapped (copy on write) from its file. A
    device allocation cannot be read here (``recv_command_holding`` reads it)."""
    message, held = _received(conn, lazy=False)
    for blob in held:
        blob.close()
    return message


def recv_command_holding(conn: Connection, device: torch.device) -> tuple[dict[str, Any], list[DeviceBlob]]:
    """In a rank: the command, its file tensors mapped copy-on-write, its device tensors mapped
    from the allocations they came in on ``device``; those are the caller's to close once the
    command is done (their tensors are not to be used after)."""
    return _received(conn, lazy=False, device=device)


def send_reply(conn: Connection, message: dict[str, Any]) -> None:
    _send(conn, message)


def recv_reply(conn: Connection) -> dict[str, Any]:
    """In the pool: the reply, shared tensors left in their files (``BlobRef``) to pass on;
    ``materialize`` reads them where their values are wanted here."""
    return _received(conn, lazy=True)[0]


class _Pending:
    """A large tensor's place in ``snapshot``'s tree until its file is sealed."""

    def __init__(self, offset: int, t: torch.Tensor):
        self.offset, self.t = offset, t


def snapshot(value: Any) -> Any:
    """A copy of ``value`` taken now, ready to send: its large tensors written into one sealed
    file (``BlobRef`` in their places; the message that carries them passes the file on without
    copying again), the small ones copied to the CPU, every container rebuilt. What is later done
    to the originals (a call that mutates its inputs) does not reach the copy."""
    writer = shared.Writer()

    def leaf(x: Any) -> Any:
        if _large(x):
            return _Pending(writer.add(x), x)
        return x.detach().to("cpu", copy=True).contiguous() if isinstance(x, torch.Tensor) else x

    tree = pytree.tree_map(leaf, value)
    if not writer.items:
        return tree
    blob = writer.seal()

    def ref(x: Any) -> Any:
        if not isinstance(x, _Pending):
            return x
        return BlobRef(blob, x.offset, x.t.numel() * x.t.element_size(), shared.dtype_name(x.t.dtype), tuple(x.t.shape))

    return pytree.tree_map(ref, tree)


def materialize(value: Any) -> Any:
    """``value`` with every ``BlobRef`` read into a tensor of its own."""
    return pytree.tree_map(lambda x: x.tensor() if isinstance(x, BlobRef) else x, value)
