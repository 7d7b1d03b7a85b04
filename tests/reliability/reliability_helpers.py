"""Helpers of the reliability tests: servers the tests own and restart (Redis, a PostgreSQL cluster,
the API), workers, an event-stream client that reconnects like a browser, scripted agent roles,
and a consistency check of the database."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy import func, select, text

from agents.records import FINISHED_STATES, Plan, Usage
from agents.roles import CoderOutput, Planner
from kloom.settings import Settings
from service_helpers import ROOT, free_port, kloom_process, service_env, stop_process, wait_for
from services.db.models import Job, JobEvent, StepRecord

HERE = Path(__file__).resolve().parent
ADVERSARIAL = ROOT / "tests" / "evaluator" / "adversarial"
EVAL_WORKLOADS = ROOT / "tests" / "evaluator" / "workloads"
CORRECT = ROOT / "tests" / "evaluator" / "candidates" / "correct.py"

#: Evaluator settings for tests: the real protocol with short limits (``KLOOM_EVAL_*``).
FAST_EVAL_ENV = {
    "KLOOM_EVAL_CALL_TIMEOUT_S": "10",
    "KLOOM_EVAL_TIMING_BUDGET_S": "0.1",
    "KLOOM_EVAL_MIN_ITERS": "3",
    "KLOOM_EVAL_MAX_ITERS": "20",
    "KLOOM_EVAL_WARMUP_ITERS": "1",
    "KLOOM_EVAL_TRIALS": "2",
}


# Rank pools ----------------------------------------------------------------------------------
def leftover_pool_cgroups(owner: int | None = None) -> list[str]:
    """Pool cgroups (``.../kloom/pool-<pid>-<hex>``) of ``owner`` (default: this process)."""
    owner = os.getpid() if owner is None else owner
    found = []
    for base in ("/sys/fs/cgroup/pids", "/sys/fs/cgroup/memory", "/sys/fs/cgroup"):
        for dirpath, dirnames, _ in os.walk(base):
            if os.path.basename(dirpath) == "kloom":
                found += [os.path.join(dirpath, d) for d in dirnames if d.startswith(f"pool-{owner}-")]
                dirnames.clear()
            elif dirpath.count("/") > 8:
                dirnames.clear()
    return found


# Processes the tests own ---------------------------------------------------------------------
class RedisServer:
    """A redis-server of the test's own on a free loopback port, without persistence (so that a
    restart loses every queued message, the worst case)."""

    def __init__(self, directory: Path, password: str = ""):
        self.directory = directory
        self.password = password
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        auth = ["--requirepass", self.password] if self.password else []
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.directory), "--logfile", str(self.directory / "redis.log"), *auth],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )
        import redis

        client = redis.Redis(port=self.port, password=self.password or None, socket_timeout=1)
        wait_for(lambda: _answers(client.ping), 20, "redis-server to start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


class PostgresCluster:
    """A PostgreSQL cluster of the test's own (``initdb`` in a temporary directory, ``pg_ctl`` on a
    free loopback port), run as the ``postgres`` user, which initdb requires."""

    def __init__(self):
        self.bin = Path(sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1])
        # Not under pytest's tmp_path: the postgres user cannot enter root's private directories.
        self.directory = Path(tempfile.mkdtemp(prefix="kloom-pg-"))
        self.data = self.directory / "data"
        self.port = free_port()
        shutil.chown(self.directory, "postgres", "postgres")

    def url(self, database: str = "postgres", password: str = "") -> str:
        auth = f"postgres:{password}" if password else "postgres"
        return f"postgresql+psycopg://{auth}@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, timeout: float = 60) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", str(self.bin / args[0]), *args[1:]],
                       check=True, capture_output=True, timeout=timeout)

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.directory / "pg.log"), "-w", "-t", "60",
                  "-o", f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def remove(self) -> None:
        """Stop the cluster if it runs, and delete it."""
        try:
            self.stop("immediate")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.directory, ignore_errors=True)

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


class ApiServer:
    """``kloom api`` as its own process on a free loopback port (so that a test can restart it)."""

    def __init__(self, settings: Settings, log: Path, **extra_env: str):
        self.env = service_env(settings, **extra_env)
        self.log = log
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = kloom_process(["api", "--host", "127.0.0.1", "--port", str(self.port)], self.env, self.log)
        wait_for(lambda: self._healthy(), 60, "the API to answer")

    def _healthy(self) -> bool:
        assert self.proc.poll() is None, self.log.read_text()[-3000:]
        try:
            return httpx.get(f"{self.base}/api/v1/health", timeout=2).status_code in (200, 503)
        except httpx.TransportError:
            return False

    def kill(self) -> None:
        """SIGKILL: the process ends without closing its streams (the harshest restart)."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc:
            stop_process(self.proc)


def start_worker(settings: Settings, log: Path, *, queues: str = "cpu", sweep: bool = False, **extra_env: str) -> subprocess.Popen:
    """A real ``kloom worker`` process (Celery, prefork, one job at a time)."""
    env = service_env(settings, **{**FAST_EVAL_ENV, **extra_env})
    args = ["worker", "--queues", queues] + (["--sweep"] if sweep else [])
    return kloom_process(args, env, log)


def _answers(ping) -> bool:
    try:
        return bool(ping())
    except Exception:  # noqa: BLE001 - not up yet
        return False


# The event stream, followed like a browser's EventSource ---------------------------------------
@dataclass
class StreamFollower:
    """Follows ``/jobs/{id}/events`` in a thread; on any disconnect it reconnects with
    ``Last-Event-ID`` (or ``?after=N``), as EventSource does, until the stream ends normally."""

    base: str
    job_id: str
    headers: dict[str, str]
    use_query: bool = False
    events: list[dict] = field(default_factory=list)
    reconnects: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    error: str = ""

    def start(self) -> "StreamFollower":
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def _run(self) -> None:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            last = self.events[-1]["id"] if self.events else 0
            headers = dict(self.headers)
            url = f"{self.base}/api/v1/jobs/{self.job_id}/events"
            if self.use_query:
                url += f"?after={last}"
            elif last:
                headers["Last-Event-ID"] = str(last)
            try:
                with httpx.stream("GET", url, headers=headers, timeout=httpx.Timeout(10, read=30)) as r:
                    if r.status_code != 200:
                        raise httpx.TransportError(f"HTTP {r.status_code}")
                    for event in _parse(r.iter_lines()):
                        self.events.append(event)
                self.done.set()  # the server ended the stream: the job finished, all was sent
                return
            except (httpx.TransportError, httpx.HTTPError):
                self.reconnects += 1
                time.sleep(0.3)
        self.error = "gave up after 180 s"
        self.done.set()


def _parse(lines):
    block: dict[str, str] = {}
    for line in lines:
        if not line:
            if "id" in block:
                yield {"id": int(block["id"]), "event": block["event"], "data": json.loads(block["data"])}
            block = {}
        elif not line.startswith(":") and ": " in line:
            name, value = line.split(": ", 1)
            block[name] = value


# Scripted agent roles ------------------------------------------------------------------------
class ScriptedPlanner(Planner):
    """Plans the named candidates in order (``agents.roles.Planner``), then says it is done."""

    def __init__(self, names: list[str]):
        self.names = list(names)

    def plan(self, ctx):
        index = len(ctx.history)
        if index >= len(self.names):
            return None, Usage()
        return Plan(strategy=self.names[index], rationale="scripted by the reliability tests", source="offline"), Usage()


class ScriptedCoder:
    """Writes the source it was given for each planned name (``agents.roles.Coder``), marked with
    its step: the loop does not evaluate a candidate identical to an earlier one, and these tests
    run the same honest candidate after each fault to show the next one runs."""

    def __init__(self, sources: dict[str, str]):
        self.sources = sources

    def write(self, plan, ctx) -> CoderOutput:
        return CoderOutput(code=f"{self.sources[plan.strategy]}\n# step {len(ctx.history)}\n")


# The database --------------------------------------------------------------------------------
def consistency_problems(sessions, job_ids: list[str] | None = None) -> list[str]:
    """What is half-written about the given jobs (default: all): events numbered 1..event_seq
    without a gap or a double, steps 0..n-1 each once, num_steps and the best step agreeing with
    the step rows, finished jobs with a finish time, every job with its first event."""
    problems = []
    with sessions() as s:
        jobs = s.scalars(select(Job) if job_ids is None else select(Job).where(Job.id.in_(job_ids))).all()
        for job in jobs:
            seqs = s.scalars(select(JobEvent.seq).where(JobEvent.job_id == job.id).order_by(JobEvent.seq)).all()
            if seqs != list(range(1, job.event_seq + 1)):
                problems.append(f"job {job.id}: events {seqs} but event_seq {job.event_seq}")
            indices = s.scalars(select(StepRecord.index).where(StepRecord.job_id == job.id).order_by(StepRecord.index)).all()
            if indices != list(range(len(indices))):
                problems.append(f"job {job.id}: step indices {indices}")
            if job.num_steps != len(indices):
                problems.append(f"job {job.id}: num_steps {job.num_steps} but {len(indices)} step rows")
            if job.best_step_index is not None and job.best_step_index not in indices:
                problems.append(f"job {job.id}: best step {job.best_step_index} is not recorded")
            if job.finished and job.finished_at is None:
                problems.append(f"job {job.id}: {job.state} without a finish time")
            if not job.finished and job.finished_at is not None:
                problems.append(f"job {job.id}: {job.state} with a finish time")
    return problems


def table_counts(sessions) -> dict[str, int]:
    with sessions() as s:
        return {
            "jobs": s.scalar(select(func.count()).select_from(Job)),
            "steps": s.scalar(select(func.count()).select_from(StepRecord)),
            "events": s.scalar(select(func.count()).select_from(JobEvent)),
        }


def database_text(sessions) -> str:
    """Every row of every table of the database, as text (for grepping secrets)."""
    with sessions() as s:
        tables = s.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")).scalars().all()
        parts = []
        for table in tables:
            rows = s.execute(text(f'SELECT * FROM "{table}"')).all()
            parts.append(f"{table}: " + "\n".join(repr(tuple(r)) for r in rows))
    return "\n".join(parts)


def finished(client, headers, job_id: str) -> dict | None:
    job = client.get(f"/api/v1/jobs/{job_id}", headers=headers).json()
    return job if job["state"] in FINISHED_STATES else None


def private_dir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))
