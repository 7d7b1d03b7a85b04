"""Messages between the pool and its ranks.

A message is plain data read with ``torch.load(weights_only=True)``, whose restricted unpickler
accepts tensors and plain data only: a rank runs untrusted code, and an ordinary pickle from it
could run code in the judge's process.

Tensors of ``SHARE_MIN_BYTES`` or more do not travel inside the message: the sender writes them
into one sealed memory file (``shared.py``) whose descriptor follows the message over the Unix
socket, and the message holds a mark (offset, size, dtype, shape) in each one's place. The judge's
process passes such a file on from one pool to the other without reading it (``BlobRef``): a
trial's GiB inputs and outputs are copied once into the file and mapped by the rank that uses
them, not pickled, piped and unpickled twice through the judge.
"""

from __future__ import annotations

import io
import select
import socket
from multiprocessing.connection import Connection
from typing import Any

import torch
from torch.utils import _pytree as pytree

from . import shared
from .shared import Blob, BlobRef

#: Tensors this large go in a shared file; smaller ones inside the message.
SHARE_MIN_BYTES = 1 << 16
#: How long a receiver waits for the descriptors a message announced.
FDS_TIMEOUT_S = 30.0
_MARK = "__kloom_shared__"


def _large(value: Any) -> bool:
    """Whether ``value`` is a tensor that travels in a shared file rather than in the message."""
    return isinstance(value, torch.Tensor) and value.numel() * value.element_size() >= SHARE_MIN_BYTES


class _Outgoing:
    """What one message sends besides its bytes: a file of its own tensors (made on the first
    one) and the files of the references it passes on."""

    def __init__(self):
        self.writer: shared.Writer | None = None
        self.own_marks: list[dict] = []  # their slot is the own file's, known once all refs are in
        self.fds: list[int] = []
        self.passed: list[Blob] = []  # the files passed on, held open until the message is sent
        self.index: dict[int, int] = {}  # id(Blob) -> position in fds

    def tensor(self, t: torch.Tensor) -> dict:
        if self.writer is None:
            self.writer = shared.Writer()
        mark = {_MARK: -1, "offset": self.writer.add(t), "nbytes": t.numel() * t.element_size(),
                "dtype": shared.dtype_name(t.dtype), "shape": list(t.shape)}
        self.own_marks.append(mark)
        return mark

    def ref(self, ref: BlobRef) -> dict:
        key = id(ref.blob)
        if key not in self.index:
            self.index[key] = len(self.fds)
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

    def finish(self) -> tuple[list[int], Blob | None]:
        """The descriptors to send (this message's own file last), and that file (closed by
        the caller once sent)."""
        if self.writer is None:
            return self.fds, None
        for mark in self.own_marks:
            mark[_MARK] = len(self.fds)
        own = self.writer.seal()
        return self.fds + [own.fd], own


class Packed:
    """A message ready to go: its bytes, the descriptors that follow them, its own file (closed
    once sent, or by ``close`` where it is never sent) and the files it passes on (held open
    until then, whatever becomes of the message they came in)."""

    def __init__(self, data: memoryview, fds: list[int], own: Blob | None, passed: list[Blob]):
        self.data, self.fds, self.own, self.passed = data, fds, own, passed

    def close(self) -> None:
        if self.own is not None:
            self.own.close()
        self.passed = []


def pack(message: dict[str, Any]) -> Packed:
    """``message`` encoded: its large tensors copied into a sealed file, so that the caller may
    drop them (and free their device memory) before the message is sent."""
    out = _Outgoing()
    body = out.encode(message)
    fds, own = out.finish()
    try:
        buffer = io.BytesIO()
        torch.save({"body": body, "fds": len(fds)}, buffer)
    except BaseException:
        if own is not None:
            own.close()
        raise
    return Packed(buffer.getbuffer(), fds, own, out.passed)


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


def _recv(conn: Connection) -> tuple[Any, list[Blob]]:
    data = conn.recv_bytes()
    try:
        envelope = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - anything unreadable is the sender's fault
        raise ValueError(f"unreadable message: {type(exc).__name__}: {exc}") from exc
    if not isinstance(envelope, dict) or not isinstance(envelope.get("fds"), int) or "body" not in envelope:
        raise ValueError(f"a message of {type(envelope).__name__} without its envelope")
    count = envelope["fds"]
    if not 0 <= count <= shared.MAX_FILES:
        raise ValueError(f"a message announced {count} shared files (at most {shared.MAX_FILES})")
    return envelope["body"], _recv_fds(conn, count) if count else []


def _recv_fds(conn: Connection, count: int) -> list[Blob]:
    ready, _, _ = select.select([conn.fileno()], [], [], FDS_TIMEOUT_S)
    if not ready:
        raise ValueError(f"the {count} shared file(s) a message announced did not come within {FDS_TIMEOUT_S:.0f} s")
    with socket.fromfd(conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        msg, fds, flags, _ = socket.recv_fds(sock, 1, count, socket.MSG_CMSG_CLOEXEC | socket.MSG_DONTWAIT)
    blobs = []
    try:
        for fd in fds:
            blobs.append(Blob.adopt(fd))  # takes the descriptor, or closes it and raises
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


def _decode(value: Any, blobs: list[Blob], lazy: bool) -> Any:
    if isinstance(value, dict):
        if _MARK in value:
            ref = _ref(value, blobs)
            return ref if lazy else ref.tensor()
        return {k: _decode(v, blobs, lazy) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, blobs, lazy) for v in value]
    if isinstance(value, tuple):
        return tuple(_decode(v, blobs, lazy) for v in value)
    return value


def _ref(mark: dict, blobs: list[Blob]) -> BlobRef:
    slot = mark.get(_MARK)
    if not isinstance(slot, int) or not 0 <= slot < len(blobs):
        raise ValueError(f"a shared tensor names file {slot!r} of {len(blobs)}")
    return BlobRef.checked(blobs[slot], mark.get("offset"), mark.get("nbytes"), mark.get("dtype"), mark.get("shape"))


def _received(conn: Connection, lazy: bool) -> dict[str, Any]:
    body, blobs = _recv(conn)
    try:
        message = _decode(body, blobs, lazy)
        if not isinstance(message, dict):
            raise ValueError(f"a message of {type(message).__name__}, not a dict")
        return message
    except BaseException:
        lazy = False
        raise
    finally:
        if not lazy:  # the tensors map what they need (or nothing was made): the descriptors go
            for blob in blobs:
                blob.close()


def send_command(conn: Connection, message: dict[str, Any]) -> None:
    """From the pool: a command (tensors, or references passed on from the other pool)."""
    _send(conn, message)


def recv_command(conn: Connection) -> dict[str, Any]:
    """In a rank: the command, every shared tensor mapped (copy on write) from its file."""
    return _received(conn, lazy=False)


def send_reply(conn: Connection, message: dict[str, Any]) -> None:
    _send(conn, message)


def recv_reply(conn: Connection) -> dict[str, Any]:
    """In the pool: the reply, shared tensors left in their files (``BlobRef``) to pass on;
    ``materialize`` reads them where their values are wanted here."""
    return _received(conn, lazy=True)


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
