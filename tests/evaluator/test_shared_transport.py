"""Large tensors between the pools travel in sealed memory files (protocol.py, shared.py): what
arrives is what was sent, the judge passes files on without reading them, and a sender that
breaks the rules (an unsealed file, a pipe, a reference past the file's end, descriptors promised
and not sent) gets an error, never a reader that hangs or dies."""

from __future__ import annotations

import fcntl
import io
import os
import pickle
import socket
import threading
from multiprocessing import Pipe

import pytest
import torch

from services.worker.evaluator import protocol, shared
from services.worker.evaluator.shared import BlobRef


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _send_raw(conn, body, fds: list[int], announced: int | None = None) -> None:
    """A sender that writes the envelope itself (what a hostile rank can do)."""
    buffer = io.BytesIO()
    torch.save({"body": body, "fds": len(fds) if announced is None else announced}, buffer)
    conn.send_bytes(buffer.getbuffer())
    if fds:
        with socket.fromfd(conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            socket.send_fds(sock, [b"F"], fds)


def _mark(slot=0, offset=0, nbytes=1 << 16, dtype="uint8", shape=None):
    return {protocol._MARK: slot, "offset": offset, "nbytes": nbytes, "dtype": dtype, "shape": shape or [nbytes]}


BIG = 1 << 17  # elements: every tensor below is past SHARE_MIN_BYTES


def _message() -> dict:
    g = torch.Generator().manual_seed(3)
    return {
        "inputs": [torch.randn(BIG, generator=g), torch.randn(512, 512, generator=g).t(), torch.randint(-9, 9, (BIG,), generator=g)],
        "half": (torch.randn(BIG, generator=g).bfloat16(), torch.randn(BIG, generator=g).half()),
        "fp8": torch.randn(BIG, generator=g).to(torch.float8_e4m3fn),
        "complex": torch.randn(BIG, dtype=torch.complex64, generator=g),
        "mask": torch.rand(BIG, generator=g) > 0.5,
        "small": torch.arange(4.0),
        "plain": {"seed": 7, "spec": "TreeSpec", "none": None, "pair": (1, 2.5)},
    }


def _same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8))
    elif isinstance(a, dict):
        assert sorted(a) == sorted(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b


def test_a_message_passed_through_the_judge_arrives_bit_for_bit_and_the_judge_reads_no_tensor():
    rank_a, judge_a = Pipe()
    judge_b, rank_b = Pipe()
    sent = _message()
    protocol.send_reply(rank_a, sent)
    held = protocol.recv_reply(judge_a)
    # In the judge: large tensors are references into the sender's file, small ones inline.
    assert isinstance(held["inputs"][0], BlobRef) and isinstance(held["fp8"], BlobRef)
    assert isinstance(held["small"], torch.Tensor)
    protocol.send_command(judge_b, {"op": "trial", "args": held})
    got = protocol.recv_command(rank_b)["args"]
    _same(sent, got)
    _same(sent, protocol.materialize(held))


def test_a_snapshot_is_what_the_tensors_held_when_it_was_taken_and_travels_without_another_copy():
    """The reference's inputs for the candidate (``protocol.snapshot``, taken before the call,
    which may mutate them) go into a sealed file at once; the reply passes that file on."""
    originals = _message()
    taken = protocol.snapshot(originals)
    assert isinstance(taken["inputs"][0], BlobRef) and isinstance(taken["small"], torch.Tensor)
    assert taken["inputs"][0].blob is taken["fp8"].blob  # one file for the whole tree
    want = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in originals.items() if k not in ("inputs", "half")}
    want["inputs"] = [x.clone() for x in originals["inputs"]]
    want["half"] = tuple(x.clone() for x in originals["half"])
    for x in originals["inputs"]:
        x.add_(1)  # the call mutates its inputs afterwards
    originals["small"].mul_(3)
    originals["inputs"].append(torch.ones(3))  # and the lists it was given
    a, b = Pipe()
    protocol.send_reply(a, {"inputs": taken})
    _same(want, protocol.materialize(protocol.recv_reply(b))["inputs"])
    _same(want, protocol.materialize(taken))


def test_a_packed_message_holds_the_files_it_passes_on_until_it_is_sent():
    """A rank packs its reply, drops the reply (and its device tensors) and only then sends: the
    snapshot's file must still be open when its descriptor leaves."""
    import gc

    x = torch.randn(BIG)
    reply = {"inputs": protocol.snapshot([x])}
    packed = protocol.pack(reply)
    reply = None
    gc.collect()
    a, b = Pipe()
    protocol.send_packed(a, packed)
    _same([x], protocol.materialize(protocol.recv_reply(b))["inputs"])


def test_a_receiver_may_change_what_it_got_without_changing_the_file():
    a, b = Pipe()
    protocol.send_reply(a, {"x": torch.zeros(BIG)})
    held = protocol.recv_reply(b)
    first = held["x"].tensor()
    first.add_(1.0)  # a workload that mutates its inputs in place
    assert float(first.sum()) == BIG
    assert float(held["x"].tensor().sum()) == 0.0


def test_the_senders_file_is_sealed_before_it_leaves():
    writer = shared.Writer()
    writer.add(torch.ones(BIG))
    blob = writer.seal()
    try:
        with pytest.raises(PermissionError):
            os.ftruncate(blob.fd, 0)  # a reader past the new end would die of SIGBUS
        with pytest.raises(PermissionError):
            os.pwrite(blob.fd, b"\0" * 8, 0)
        seals = fcntl.fcntl(blob.fd, fcntl.F_GET_SEALS)
        assert seals & fcntl.F_SEAL_SEAL
    finally:
        blob.close()


def test_descriptors_do_not_leak():
    a, b = Pipe()
    before = _open_fds()
    for _ in range(20):
        protocol.send_reply(a, {"x": torch.ones(BIG)})
        held = protocol.recv_reply(b)
        protocol.send_command(b, held)
        got = protocol.recv_command(a)
        del held, got
    import gc

    gc.collect()
    assert _open_fds() <= before


def _hostile(body, fds, announced=None) -> str:
    a, b = Pipe()
    _send_raw(a, body, fds, announced)
    for fd in fds:
        os.close(fd)
    before = _open_fds()
    with pytest.raises(ValueError) as caught:
        protocol.recv_reply(b)
    assert _open_fds() <= before
    return str(caught.value)


def _unsealed(size: int = 1 << 16) -> int:
    fd = os.memfd_create("unsealed", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    return fd


def test_an_unsealed_file_is_refused():
    assert "not sealed" in _hostile({"x": _mark()}, [_unsealed()])


def test_a_file_that_is_not_a_memory_file_is_refused(tmp_path):
    path = tmp_path / "plain"
    path.write_bytes(b"\0" * (1 << 16))
    assert "cannot be sealed" in _hostile({"x": _mark()}, [os.open(path, os.O_RDONLY)])


def test_a_pipe_is_refused():
    read, write = os.pipe()
    os.close(write)
    assert "not a regular file" in _hostile({"x": _mark()}, [read])


def _sealed(size: int = 1 << 16) -> int:
    fd = _unsealed(size)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    return fd


@pytest.mark.parametrize("mark, words", [
    (_mark(offset=64), "does not fit"),  # past the file's end
    (_mark(nbytes=1 << 15, shape=[1 << 16]), "does not fit"),  # size and shape disagree
    (_mark(dtype="float32", nbytes=(1 << 16) - 2, shape=[(1 << 16) - 2]), "does not fit"),
    (_mark(offset=8, nbytes=64, shape=[64]), "does not fit"),  # unaligned
    (_mark(dtype="os.system"), "unknown dtype"),
    (_mark(shape=[-1]), "non-negative"),
    (_mark(slot=3), "names file 3"),
])
def test_a_reference_that_does_not_fit_its_file_is_refused(mark, words):
    assert words in _hostile({"x": mark}, [_sealed()])


def test_descriptors_announced_and_not_sent_end_in_an_error_not_a_hang(monkeypatch):
    monkeypatch.setattr(protocol, "FDS_TIMEOUT_S", 0.5)
    assert "did not come" in _hostile({"x": _mark()}, [], announced=1)


def test_fewer_descriptors_than_announced_are_refused():
    assert "announced 2" in _hostile({"x": _mark()}, [_sealed()], announced=2)


def test_too_many_descriptors_announced_are_refused():
    assert "at most" in _hostile({}, [], announced=shared.MAX_FILES + 1)


# Plain messages (no tensor, no object but containers, strings, bytes and numbers) travel as a
# pickle that names no global; a hostile sender's pickle that names one is refused unrun.

class _Bomb:
    ran = False

    def __reduce__(self):
        return (_Bomb._go, ())

    @staticmethod
    def _go():
        _Bomb.ran = True
        return "ran"


def _received_bytes(data: bytes):
    a, b = Pipe()
    a.send_bytes(data)
    return protocol.recv_reply(b)


def test_a_plain_message_travels_as_a_pickle_and_arrives_whole():
    body = {"times": [0.5, 1.25], "ok": True, "nested": {"pair": (1, 2.5), "none": None, "raw": b"\x00\x01", "s": "x"}}
    packed = protocol.pack(body)
    assert bytes(packed.data[:2]) == protocol._PLAIN
    packed.close()
    a, b = Pipe()
    protocol.send_reply(a, body)
    assert protocol.recv_reply(b) == body


def test_a_message_with_a_tensor_or_another_object_goes_through_torch():
    for body in ({"x": torch.arange(3)}, {"dtype": torch.float32}, {"both": [1, torch.zeros(2, dtype=torch.bfloat16)]}):
        packed = protocol.pack(body)
        assert bytes(packed.data[:2]) == b"PK"
        packed.close()
        a, b = Pipe()
        protocol.send_reply(a, body)
        _same(body, protocol.recv_reply(b))


@pytest.mark.parametrize("payload", [_Bomb(), os.system, {"x": [1, _Bomb()]}])
def test_a_pickle_that_names_a_global_is_refused_and_nothing_runs(payload):
    data = pickle.dumps({"body": payload, "fds": 0}, protocol=5)
    assert data[:2] == protocol._PLAIN
    with pytest.raises(ValueError, match="may not name"):
        _received_bytes(data)
    assert not _Bomb.ran


def test_a_message_nested_past_the_stack_is_refused_not_a_crash():
    # Written opcode by opcode (pickling it would overflow the writer's stack): {"body": a list
    # nested 100000 deep, "fds": 0}, which the unpickler builds without recursion.
    depth = 100_000
    data = b"\x80\x05}(\x8c\x04body" + b"]" * depth + b"a" * (depth - 1) + b"\x8c\x03fdsK\x00u."
    with pytest.raises(ValueError, match="nested too deep"):
        _received_bytes(data)
    looped: list = []
    looped.append(looped)
    with pytest.raises(ValueError, match="nested too deep"):
        _received_bytes(pickle.dumps({"body": {"x": looped}, "fds": 0}, protocol=5))


def test_a_message_past_the_size_bound_is_refused_unread(monkeypatch):
    """A rank may send what it likes: a message past ``MAX_MESSAGE_BYTES`` is not read into the
    pool's process (the pool then ends the rank as it ends one that sent garbage)."""
    monkeypatch.setattr(protocol, "MAX_MESSAGE_BYTES", 1 << 20)

    def received(body):
        a, b = Pipe()
        data = pickle.dumps({"body": body, "fds": 0}, protocol=5)
        sender = threading.Thread(target=lambda: _sent_quietly(a, data), daemon=True)  # more than a socket's buffer
        sender.start()
        try:
            return protocol.recv_reply(b)
        finally:
            b.close()
            sender.join(5.0)
            a.close()

    with pytest.raises(ValueError, match="a message of more than 1 MiB"):
        received({"x": b"y" * (2 << 20)})
    fits = {"x": b"y" * (1 << 19)}
    assert received(fits) == fits


def _sent_quietly(conn, data: bytes) -> None:
    try:
        conn.send_bytes(data)
    except OSError:  # the reader closed its end unread
        pass
