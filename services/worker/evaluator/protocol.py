"""Messages between the pool and its ranks.

Commands and replies both travel through ``torch.save`` and are read with
``torch.load(weights_only=True)``, whose restricted unpickler accepts tensors and plain data only:
a rank runs untrusted code, and an ordinary pickle from it could run code in the judge's process.
"""

from __future__ import annotations

import io
from multiprocessing.connection import Connection
from typing import Any

import torch


def send_command(conn: Connection, message: dict[str, Any]) -> None:
    # Through torch.save too: commands carry tensors (a trial's inputs, the candidate's outputs),
    # of every dtype (an ordinary pickle of a float8 tensor does not load again).
    buffer = io.BytesIO()
    torch.save(message, buffer)
    conn.send_bytes(buffer.getbuffer())


def recv_command(conn: Connection) -> dict[str, Any]:
    return torch.load(io.BytesIO(conn.recv_bytes()), weights_only=True, map_location="cpu")


def send_reply(conn: Connection, message: dict[str, Any]) -> None:
    buffer = io.BytesIO()
    torch.save(message, buffer)
    conn.send_bytes(buffer.getbuffer())


def recv_reply(conn: Connection) -> dict[str, Any]:
    data = conn.recv_bytes()
    try:
        reply = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - anything unreadable is the rank's fault
        raise ValueError(f"unreadable reply from a rank: {type(exc).__name__}: {exc}") from exc
    if not isinstance(reply, dict):
        raise ValueError(f"a rank replied with {type(reply).__name__}, not a message")
    return reply
