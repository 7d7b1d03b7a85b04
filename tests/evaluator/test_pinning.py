"""Both sides' rank r run on the same CPUs: a fresh candidate process placed by the scheduler
elsewhere than the long-lived reference is timed on other cores (other caches, clocks, neighbours)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kloom.processes import rank_cpus
from services.worker.evaluator.pool import RankPool

from .conftest import fast_settings


def test_each_rank_gets_its_own_contiguous_share(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4, 20)))
    assert rank_cpus(2) == [list(range(4, 12)), list(range(12, 20))]
    assert rank_cpus(3) == [[4, 5, 6, 7, 8], [9, 10, 11, 12, 13], [14, 15, 16, 17, 18]]


def test_more_ranks_than_cpus_share_them_in_turn(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert rank_cpus(4) == [[0], [1], [0], [1]]


def _allowed(pid: int) -> list[int] | None:
    """The CPUs a process may run on (from /proc), or None if it has gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    text = next(line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith("Cpus_allowed_list"))
    cpus: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        cpus += list(range(int(low), int(high or low) + 1))
    return cpus


def _rank_process(pool: RankPool, rank: int) -> int:
    for pid in pool.processes([rank]):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1:3] == [b"-m", b"services.worker.evaluator.rank_main"]:
                return pid
        except OSError:
            continue
    raise AssertionError(f"no rank process found for rank {rank}")


@pytest.mark.parametrize("pin", [True, False])
def test_both_sides_rank_processes_run_on_the_ranks_share(pin):
    settings = fast_settings("cpu")
    settings.pin_cpus = pin
    everything = sorted(os.sched_getaffinity(0))
    pools = [RankPool(2, "cpu", settings, role=role) for role in ("reference", "candidate")]
    try:
        for pool in pools:
            pool.start()
        for rank, share in enumerate(rank_cpus(2)):
            for pool in pools:
                assert _allowed(_rank_process(pool, rank)) == (share if pin else everything)
    finally:
        for pool in pools:
            pool.kill()
