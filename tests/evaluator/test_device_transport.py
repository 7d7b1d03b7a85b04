"""A candidate's large device outputs reach the reference's rank in device memory the candidate's
rank exports (protocol.py with ``share_device``, shared.DeviceBlob, device_share.py): what arrives
is what was sent, the judge's process passes the descriptor on without a CUDA context, and a
sender that lies (a descriptor that is a file, a socket or no device memory, a size past the
allocation, a malformed list) gets its outputs refused, never a reader that dies or a broken
CUDA context. The CPU tests are the judge's side; the rest needs a GPU."""

from __future__ import annotations

import dataclasses
import gc
import io
import os
import socket
from multiprocessing import Pipe
from pathlib import Path

import pytest
import torch

from services.worker.evaluator import EvalSettings, Evaluator, protocol
from services.worker.evaluator.protocol import Unreadable
from services.worker.evaluator.shared import BlobRef, DeviceBlob

HERE = Path(__file__).parent
BIG = HERE / "workloads" / "big_inputs.py"
GRAIN = 1 << 21
no_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


def _send_raw(conn, body, fds: list[int], devices: list) -> None:
    """A sender that writes the envelope itself (what a hostile candidate's rank can do)."""
    buffer = io.BytesIO()
    torch.save({"body": body, "fds": len(fds), "devices": devices}, buffer)
    conn.send_bytes(buffer.getbuffer())
    if fds:
        with socket.fromfd(conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            socket.send_fds(sock, [b"F"], fds)


def _mark(slot=0, offset=0, nbytes=1 << 20, dtype="uint8"):
    return {protocol._MARK: slot, "offset": offset, "nbytes": nbytes, "dtype": dtype, "shape": [nbytes]}


def _refused(fd: int, devices: list, text: str) -> None:
    a, b = Pipe()
    _send_raw(a, {"outputs": [_mark()]}, [fd], devices)
    os.close(fd)
    with pytest.raises(ValueError, match=text):
        protocol.recv_reply(b)


def test_the_judge_refuses_a_device_slot_that_is_a_file_or_a_socket():
    memfd = os.memfd_create("not-device")
    os.ftruncate(memfd, GRAIN)
    _refused(memfd, [[0, GRAIN, "GPU-0"]], "is a file, a directory, a socket or a pipe")
    left, right = socket.socketpair()
    right.close()
    _refused(left.detach(), [[0, GRAIN, "GPU-0"]], "is a file, a directory, a socket or a pipe")
    _refused(os.open("/", os.O_RDONLY), [[0, GRAIN, "GPU-0"]], "is a file, a directory, a socket or a pipe")


@pytest.mark.parametrize("devices, text", [
    ([[0, 0, "GPU-0"]], "of 0 bytes"),
    ([[0, GRAIN, ""]], "without the identity"),
    ([[0, GRAIN, "G" * 65]], "without the identity"),
    ([[1, GRAIN, "GPU-0"]], "malformed"),
    ([[0, GRAIN, "GPU-0"], [0, GRAIN, "GPU-0"]], "malformed"),
    ("GPU-0", "malformed"),
])
def test_the_judge_refuses_a_malformed_list_of_device_allocations(devices, text):
    _refused(os.open("/dev/null", os.O_RDONLY), devices, text)


def test_a_sender_sharing_device_memory_sends_host_tensors_in_the_file():
    a, b = Pipe()
    x = torch.randn(1 << 19)
    protocol.send_packed(a, protocol.pack({"x": x}, share_device=torch.device("cpu")))
    held = protocol.recv_reply(b)
    assert isinstance(held["x"], BlobRef) and not isinstance(held["x"].blob, DeviceBlob)
    assert torch.equal(protocol.materialize(held)["x"], x)


# On a GPU ---------------------------------------------------------------------------------


def _relay(message: dict, device: torch.device):
    """Candidate's rank -> judge (lazily, no CUDA touched there) -> reference's rank, over real
    sockets; returns what the reference's rank decoded, the device blobs it holds, and the
    sender's allocation (which the sender keeps until the receiver has mapped it)."""
    cand, judge_in = Pipe()
    judge_out, ref = Pipe()
    packed = protocol.pack(message, share_device=device)
    kept = packed.device
    protocol.send_packed(cand, packed)
    passed = protocol.recv_reply(judge_in)
    protocol.send_command(judge_out, passed)
    del passed
    got, held = protocol.recv_command_holding(ref, device)
    return got, held, kept


@pytest.mark.gpu
@no_gpu
def test_device_tensors_arrive_as_sent_and_stay_on_the_device():
    device = torch.device("cuda", 0)
    g = torch.Generator(device=device).manual_seed(5)
    sent = {"outputs": [torch.randn(1 << 20, device=device, generator=g), torch.randn(1024, 2048, device=device, generator=g).t(),
                        torch.randn(1 << 19, device=device, generator=g).bfloat16(), torch.rand(1 << 21, device=device, generator=g) > 0.5,
                        torch.arange(8.0, device=device)], "spec": "S"}
    free_before = torch.cuda.mem_get_info(0)[0]
    got, held, kept = _relay(sent, device)
    assert kept is not None and len(held) == 1
    for want, have in zip(sent["outputs"], got["outputs"]):
        assert have.device.type == ("cuda" if want.numel() * want.element_size() >= protocol.DEVICE_SHARE_MIN_BYTES else "cpu")
        assert have.dtype == want.dtype and have.shape == want.shape and torch.equal(have.to(device), want)
    got = None
    for blob in held:
        blob.close()
    kept.close()
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    assert torch.cuda.mem_get_info(0)[0] >= free_before - 4 * GRAIN  # both sides let go: the allocation is gone


def _device_slot(fd: int, size: int, device: torch.device) -> object:
    cand, judge_in = Pipe()
    judge_out, ref = Pipe()
    _send_raw(cand, {"outputs": [_mark()]}, [fd], [[0, size, str(torch.cuda.get_device_properties(0).uuid)]])
    os.close(fd)
    protocol.send_command(judge_out, protocol.recv_reply(judge_in))
    got, held = protocol.recv_command_holding(ref, device)
    for blob in held:
        blob.close()
    return got["outputs"][0]


@pytest.mark.gpu
@no_gpu
def test_a_descriptor_that_is_no_device_allocation_or_too_small_is_unreadable_and_cuda_goes_on():
    device = torch.device("cuda", 0)
    torch.zeros(1, device=device)
    not_memory = _device_slot(os.open("/dev/null", os.O_RDONLY), GRAIN, device)
    assert isinstance(not_memory, Unreadable) and "could not be mapped" in not_memory.reason
    packed = protocol.pack({"x": torch.ones(1 << 20, device=device)}, share_device=device)
    try:
        too_big = _device_slot(os.dup(packed.device.fd), packed.device.size * 4, device)
        assert isinstance(too_big, Unreadable), too_big
    finally:
        packed.close()
        packed.device.close()
    assert float(torch.ones(4, device=device).sum()) == 4.0  # the receiver's CUDA context is intact


def _settings(**overrides) -> EvalSettings:
    return dataclasses.replace(EvalSettings.from_env("cuda"), **{"static_check": False, "shapes": "ci", "timing_budget_s": 0.2, "trials": 3,
                                                                 **overrides})


HONEST = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.relu(x).mul_(2)\n"
WRONG = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.relu(x).mul_(2.01)\n"


@pytest.mark.gpu
@no_gpu
def test_the_judge_compares_outputs_handed_over_in_device_memory():
    with Evaluator("cuda", _settings(), devices=[0]) as ev:
        honest = ev.evaluate(BIG, candidate_source=HONEST, world_size=1)
        wrong = ev.evaluate(BIG, candidate_source=WRONG, world_size=1)
    assert honest.correct and honest.environment.get("candidate_outputs") == "device memory", (honest.summary(), honest.environment)
    assert wrong.status == "incorrect", wrong.summary()
    with Evaluator("cuda", _settings(share_device_outputs=False), devices=[0]) as ev:
        host = ev.evaluate(BIG, candidate_source=HONEST, world_size=1)
    assert host.correct and host.environment.get("candidate_outputs") == "host memory", host.environment


# Hostile candidates, through the evaluator (the static checker off) ------------------------------


@pytest.fixture(scope="module")
def unfiltered():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    settings = EvalSettings.for_device(device, static_check=False, shapes="ci", timing_budget_s=0.2, min_iters=5, load_timeout_s=60.0,
                                       trials=3)
    with Evaluator(device, settings, devices=[0] if device == "cuda" else None) as ev:
        yield ev


def _text(result) -> str:
    return "\n".join([result.summary(), result.error.message if result.error else ""] + [c.message for t in result.trials for c in t.ranks])


def test_outputs_forged_as_device_memory_are_unreadable_and_the_reference_lives_on(unfiltered):
    forged = unfiltered.evaluate(BIG, HERE / "adversarial" / "forges_device_outputs.py", world_size=1)
    assert forged.status == "incorrect" and "could not be read from the device memory" in _text(forged), _text(forged)
    after = unfiltered.evaluate(BIG, candidate_source=HONEST, world_size=1)
    assert after.correct, after.summary()


def test_a_directory_passed_as_device_memory_is_refused_by_the_judge(unfiltered):
    forged = unfiltered.evaluate(BIG, HERE / "adversarial" / "passes_directory_as_device_outputs.py", world_size=1)
    assert not forged.correct and forged.status in ("crashed", "runtime_error", "rejected"), forged.summary()
    assert "a file, a directory, a socket or a pipe" in _text(forged), _text(forged)
    after = unfiltered.evaluate(BIG, candidate_source=HONEST, world_size=1)
    assert after.correct, after.summary()
