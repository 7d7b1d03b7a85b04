"""A pool's start when something other than its ranks answers: a connection that fails the
handshake ends the pool's accepting early; the start must fail with the reason (and the judge start
it again), never finish with fewer ranks joined than the pool has, which would answer every
request with no replies at all."""

from __future__ import annotations

import threading
from multiprocessing.connection import Client

import pytest

from services.worker.evaluator import EvalSettings
from services.worker.evaluator.pool import PoolFailure, RankPool


def _intruder(address: str) -> None:
    try:
        with Client(address, family="AF_UNIX", authkey=b"not the pool's key"):
            pass
    except Exception:  # noqa: BLE001 - refused, as it should be
        pass


def test_a_start_whose_accepting_ended_early_fails_instead_of_joining_no_ranks():
    pool = RankPool(1, "cpu", EvalSettings.for_device("cpu", start_timeout_s=60.0), role="candidate")
    try:
        pool.begin()
        address = pool._listener.address
        # Queued ahead of the rank (still setting up its sandbox): the first connection accepted.
        intruder = threading.Thread(target=_intruder, args=(address,), daemon=True)
        intruder.start()
        with pytest.raises(PoolFailure, match="failed to connect|did not connect|died"):
            pool.finish()
        intruder.join(10)
        assert not pool.conns
        pool.start()  # as the judge does after a failed start: a new one joins
        replies = pool.request("release", {"collect": False}, timeout=30)
        assert sorted(replies.by_rank) == [0]
    finally:
        pool.kill()
