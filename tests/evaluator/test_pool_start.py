"""A pool's start that cannot be finished must fail with the reason (and the judge start the pool
again), never finish with ranks missing: a connection that fails the handshake ends the pool's
accepting early (fewer ranks joined than the pool has would answer every request with no
replies), and ranks that joined ahead may have died before the start is finished. And what a
pool's ranks are forked from (a fork server) is not closed under them."""

from __future__ import annotations

import os
import signal
import threading
import time
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


def test_ranks_that_joined_ahead_and_died_since_fail_the_start():
    """A spare admitted during one evaluation joins (its hello waits unread) and may be killed
    before the next evaluation takes it (an abort kills every pool's ranks): taking it must fail,
    for the judge to start fresh ranks, not hand it requests that find no rank."""
    pool = RankPool(1, "cpu", EvalSettings.for_device("cpu", start_timeout_s=60.0), role="candidate")
    try:
        pool.begin()
        pool.admit()
        deadline = time.monotonic() + 60
        while not (pool._accepted and pool._accepted[0].poll()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool._accepted, "the rank did not join"
        os.killpg(pool.procs[0].pid, signal.SIGKILL)
        pool.procs[0].wait(10)
        with pytest.raises(PoolFailure, match="died"):
            pool.finish()
    finally:
        pool.kill()


def test_a_killed_pool_has_no_rank_left_when_kill_returns_and_nothing_soon_after():
    """The ranks and their launchers have exited when ``kill`` returns (a rank that outlived it
    would still hold its memory and, on a GPU, its device context while the next pool starts),
    quickly; the pid namespace's reaper follows within seconds."""
    from kloom.processes import alive, namespace_init, wait_exited

    pool = RankPool(2, "cpu", EvalSettings.for_device("cpu", start_timeout_s=60.0), role="candidate")
    try:
        pool.start()
        pids = pool.processes()
        reapers = [pid for pid in pids if namespace_init(pid)]
        assert len(pids) >= 4 and len(reapers) <= 1, pids
    finally:
        started = time.monotonic()
        pool.kill()
        took = time.monotonic() - started
    assert not [pid for pid in pids if alive(pid) and pid not in reapers]
    assert took < 0.8, took  # not waiting on the reaper
    assert wait_exited(pids, 10.0)


def test_a_fork_server_with_running_ranks_is_not_closed_to_make_room(monkeypatch):
    """Closing a fork server ends the ranks forked from it (their launchers die with it): a
    server needed for ranks of another environment while every kept server has ranks running
    is refused (those ranks start as new interpreters), and the running pool lives on."""
    from services.worker.evaluator import fork_client

    monkeypatch.setattr(fork_client, "MAX_SERVERS", 1)
    fork_client.close_servers()
    pool = RankPool(1, "cpu", EvalSettings.for_device("cpu", start_timeout_s=60.0), role="candidate")
    other = dict(os.environ, NCCL_DEBUG="INFO")  # a variable the server shares: another server
    try:
        pool.start()
        assert pool.isolation.forked, pool.isolation.fork_refused
        with pytest.raises(fork_client.ForkUnavailable, match="already serve running ranks"):
            fork_client.server_for(other, False, 60.0)
        assert pool.alive
        assert sorted(pool.request("release", {"collect": False}, timeout=30).by_rank) == [0]
    finally:
        pool.kill()
    assert fork_client.server_for(other, False, 60.0).alive  # the idle one made room
    fork_client.close_servers()
