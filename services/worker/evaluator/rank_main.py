"""An evaluator rank process's entry point (``python -m services.worker.evaluator.rank_main``):
it joins its pool and serves the role it was started for (``KLOOM_ROLE``: ``ReferenceRank`` or
``CandidateRank``) until the pool closes. Apart from ``rank.py``, which both roles build on, so
that neither imports the other's module from inside a function."""

from __future__ import annotations

import os
import threading
import time
from multiprocessing.connection import Client

import torch.distributed as dist

from .candidate_rank import CandidateRank
from .projection import warm
from .protocol import recv_command, send_reply
from .rank import error_payload, serve
from .reference_rank import ReferenceRank
from .timing import settle_gc


def _exit_with_parent() -> None:
    """A rank whose pool process died (killed, interrupted) must not keep holding a GPU."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, name="kloom-parent-watch", daemon=True).start()


def import_projection_kernel() -> None:
    """Triton and the projection's kernel imported while this rank waits to be used (0.2-0.3 s in
    a new process on an H200), so that a candidate whose outputs need the kernel pays only its
    load before timing (``projection.warm``). Importing touches neither the device nor the group."""
    try:
        from . import projection_kernel  # optional: triton; imported here, ahead of its use, on purpose  # noqa: F401
    except ImportError:  # no triton here: nothing to import ahead
        pass


def main() -> None:
    _exit_with_parent()
    role = os.environ.pop("KLOOM_ROLE", "reference")
    rank = int(os.environ.pop("KLOOM_RANK"))
    world_size = int(os.environ.pop("KLOOM_WORLD_SIZE"))
    device_kind = os.environ.pop("KLOOM_DEVICE_KIND")
    device_index = int(os.environ.pop("KLOOM_DEVICE_INDEX"))
    address = os.environ.pop("KLOOM_POOL_SOCKET")
    authkey = bytes.fromhex(os.environ.pop("KLOOM_POOL_AUTHKEY"))
    store_path = os.environ.pop("KLOOM_POOL_STORE")
    if device_kind == "cuda":
        import_projection_kernel()
    # Torch's objects set aside from every later collection while this rank waits to be used:
    # the collections it makes before each timing then scan what its evaluation made
    # (``timing.settle_gc``), not the ~300k objects of its imports.
    settle_gc()
    # Blocks until the pool accepts (``RankPool.finish``): a rank begun ahead of its use has
    # imported torch by then and has touched neither the device nor the process group.
    conn = Client(address, family="AF_UNIX", authkey=authkey)
    try:
        admission = recv_command(conn)["args"]
        cls = CandidateRank if role == "candidate" else ReferenceRank
        state = cls(rank, world_size, device_kind, device_index, store_path)
        warm(state.device, admission.get("warm_outputs") or [])  # as prepare_timed would, before this rank is used
    except BaseException as exc:  # noqa: BLE001
        send_reply(conn, {"ok": False, "rank": rank, "error": error_payload(exc, "start")})
        return
    send_reply(conn, {"ok": True, "rank": rank, "pid": os.getpid(), "environment": state.environment()})
    try:
        serve(conn, state)
    finally:
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


if __name__ == "__main__":
    main()
