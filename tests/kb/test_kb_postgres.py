"""Robustness on the real PostgreSQL: jobs that finish at the same time all land, and a knowledge
base restored from a dump answers exactly as the original did."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import threading

import pytest
from tests.kb.kb_databases import PG_ADMIN, create_pg_database, drop_pg_database, pg_url
from tests.kb.kb_trajectories import Tried, Workload, trajectory
from sqlalchemy import func, select

from kb import advice as kb_advice, ingest as kb_ingest, store
from kb.models import KBEvidence, KBFailure, KBJob, KBKernel, KBStrategy
from kloom.db import create_db_engine, current_revision, session_factory

H200 = "NVIDIA H200"


def job(job_id: str, w: Workload, i: int):
    # Strategies in a different order per job, so that concurrent transactions touch shared rows
    # in different step orders (the store must still lock them in one order).
    steps = [
        Tried("cuda_graph", speedup=1.2 + 0.1 * (i % 3)),
        Tried("overlap_chunks", {"chunks": 2 + i % 3}, speedup=0.9 if i % 4 == 0 else 1.9),
        Tried("symm_mem", status="runtime_error"),
        Tried("overlap_chunks", {"chunks": 16}, status="incorrect"),
    ]
    return trajectory(job_id, w, steps if i % 2 else list(reversed(steps)))


def test_jobs_finishing_at_the_same_time_all_land(pg_db):
    w = Workload()
    threads_n, rounds = 4, 4
    barrier = threading.Barrier(threads_n)
    errors: list[BaseException] = []
    reports = []

    def worker(t: int) -> None:
        for r in range(rounds):
            i = r * threads_n + t
            traj = job(f"job-{i}", w, i)
            barrier.wait()  # everyone ingests at the same moment
            try:
                with pg_db.sessions() as s:
                    reports.append(kb_ingest.ingest(s, traj))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(threads_n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not errors, errors
    total = threads_n * rounds
    assert sum(r.ingested for r in reports) == total
    with pg_db.sessions() as s:
        assert s.scalar(select(func.count()).select_from(KBJob)) == total
        assert s.scalar(select(func.count()).select_from(KBKernel)) == sum(1 + (i % 4 != 0) for i in range(total))
        for strategy in s.scalars(select(KBStrategy)):
            won = sum(e.won for e in strategy.evidence)
            assert (strategy.wins, strategy.losses) == (won, len(strategy.evidence) - won), strategy.name
            assert len(strategy.evidence) == total
        assert {f.strategy: f.count for f in s.scalars(select(KBFailure))} == {"symm_mem": total, "overlap_chunks": total}


def test_the_same_job_ingested_twice_at_once_lands_once(pg_db):
    traj = job("job-twice", Workload(), 1)
    barrier = threading.Barrier(2)
    reports = []

    def worker() -> None:
        barrier.wait()
        with pg_db.sessions() as s:
            reports.append(kb_ingest.ingest(s, traj))

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert sorted(r.ingested for r in reports) == [False, True]
    with pg_db.sessions() as s:
        assert s.scalar(select(func.count()).select_from(KBEvidence)) == 3
        assert s.scalar(select(func.sum(KBFailure.count))) == 2


def answers(sessions) -> dict:
    """Everything a user or the planner can ask, as plain data."""
    tp = Workload(input_shapes=((2048, 8192),), input_bytes=32 << 20)
    out = {}
    with sessions() as s:
        for query in (None, "overlap all gather", "cuda graph", "moe"):
            for family in (None, "tensor_parallel", "expert_parallel"):
                out[(query, family)] = [(m.kernel.public_id, m.score, m.kernel.code_sha256) for m in store.search(s, query, family=family)]
        out["collective"] = [m.kernel.public_id for m in store.search(s, collective="all_to_all_single")]
        out["advice"] = dataclasses.asdict(kb_advice.advice(s, tp.analysis("cuda"), tp.sha256, "cuda", H200))
        out["strategies"] = [(st.public_id, st.wins, st.losses, st.confidence, st.applies_to) for st in store.list_strategies(s)]
    return out


@pytest.mark.skipif(not shutil.which("pg_dump") or not shutil.which("pg_restore"), reason="needs pg_dump and pg_restore")
def test_a_restored_dump_gives_the_same_answers(pg_db, tmp_path):
    moe = Workload(name="moe_dispatch", family="expert_parallel", collectives=("all_to_all_single",), ops=("aten::sort",))
    for i in range(6):
        with pg_db.sessions() as s:
            kb_ingest.ingest(s, job(f"job-{i}", Workload(input_bytes=(4 + i) << 20), i))
    with pg_db.sessions() as s:
        kb_ingest.ingest(s, trajectory("job-moe", moe, [Tried("cuda_graph", speedup=3.1)]))
    before = answers(pg_db.sessions)
    assert before[(None, None)] and before["advice"]["kernels"] and before["advice"]["strategies"]

    dump = tmp_path / "kb.dump"
    server = PG_ADMIN.rsplit("/", 1)[0].split("://", 1)[1]  # user@host:port
    user, hostport = server.split("@")
    host, port = hostport.split(":")
    conn = ["-h", host, "-p", port, "-U", user]
    subprocess.run(["pg_dump", *conn, "-Fc", "-f", str(dump), pg_db.name], check=True)
    restored = create_pg_database()
    try:
        subprocess.run(["pg_restore", *conn, "--no-owner", "-d", restored, str(dump)], check=True)
        url = pg_url(restored)
        assert current_revision(url) == current_revision(pg_db.url)
        engine = create_db_engine(url)
        try:
            sessions = session_factory(engine)
            assert answers(sessions) == before
            # The restored database keeps working: its id sequences continue past the restored rows.
            with sessions() as s:
                assert kb_ingest.ingest(s, job("job-after", Workload(), 9)).kernels == 2
                assert len(store.search(s, limit=100)) == len(before[(None, None)]) + 2
        finally:
            engine.dispose()
    finally:
        drop_pg_database(restored)
