"""A bounded loopback load test of the whole service: many clients submit jobs and read them while
real workers run them.

It starts, on 127.0.0.1, ``kloom api`` (``--api-workers`` uvicorn processes) and ``--workers``
``kloom worker`` processes on a PostgreSQL database of its own (created, then dropped) and a key
prefix of its own on the local Redis. ``--clients`` clients share ``--jobs`` submissions: each
submits one (a multipart upload with an Idempotency-Key, retried on a transport error or a 503),
then reads it (the job, its steps after the last seen, the job list) until it finishes, reads its
event stream once to the end, and submits the next. Every request's latency is kept by kind.
At the end the database is checked: every submission is one job row with one ``queued`` event,
run once (one attempt), finished, with its steps and events numbered without a gap or a double.

    python benchmarks/load_mixed.py --clients 16 --jobs 24 --workers 2 --out benchmarks/results/load_mixed.md
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path

import httpx
import psycopg
import redis

from load_api import PG_ADMIN, WORKLOAD, percentile, wait_healthy

ROOT = Path(__file__).resolve().parents[1]
#: The evaluator's protocol with a short timing budget, so that a job takes seconds on a CPU.
EVAL_ENV = {
    "KLOOM_EVAL_TRIALS": "2",
    "KLOOM_EVAL_TIMING_BUDGET_S": "0.1",
    "KLOOM_EVAL_MIN_ITERS": "3",
    "KLOOM_EVAL_MAX_ITERS": "20",
    "KLOOM_EVAL_WARMUP_ITERS": "1",
}
FINISHED = {"succeeded", "failed", "cancelled", "stopped"}


class Recorder:
    """Latencies by request kind, and errors by kind and reason."""

    def __init__(self) -> None:
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, int] = defaultdict(int)

    async def call(self, kind: str, request) -> httpx.Response | None:
        started = time.perf_counter()
        try:
            response = await request()
        except httpx.TransportError as exc:
            self.errors[f"{kind}: {type(exc).__name__}"] += 1
            return None
        self.latencies[kind].append(time.perf_counter() - started)
        if response.status_code >= 400:
            self.errors[f"{kind}: HTTP {response.status_code}"] += 1
        return response


async def client_loop(client: httpx.AsyncClient, headers: dict, todo: asyncio.Queue, rec: Recorder, out: dict, world_size: int) -> None:
    while True:
        try:
            n = todo.get_nowait()
        except asyncio.QueueEmpty:
            return
        key = f"mixed-{n}-{uuid.uuid4().hex}"
        submitted = time.monotonic()
        job_id = None
        while job_id is None:
            r = await rec.call("submit", lambda: client.post(
                "/api/v1/jobs",
                data={"world_size": str(world_size), "max_iters": "1", "use_kb": "false"},
                files={"workload_file": (f"w{n}.py", WORKLOAD)},
                headers={**headers, "Idempotency-Key": key},
            ))
            if r is not None and r.status_code in (200, 201):
                job_id = r.json()["id"]
            else:
                await asyncio.sleep(0.5)
        out["keys"][key] = job_id
        after = -1
        while True:
            r = await rec.call("get job", lambda: client.get(f"/api/v1/jobs/{job_id}", headers=headers))
            state = r.json()["state"] if r is not None and r.status_code == 200 else None
            s = await rec.call("get steps", lambda: client.get(f"/api/v1/jobs/{job_id}/steps?after={after}", headers=headers))
            if s is not None and s.status_code == 200 and s.json()["data"]:
                after = s.json()["data"][-1]["index"]
            await rec.call("list jobs", lambda: client.get("/api/v1/jobs?limit=20", headers=headers))
            if state in FINISHED:
                break
            await asyncio.sleep(0.5)
        out["job_seconds"].append(time.monotonic() - submitted)
        started = time.perf_counter()
        async with client.stream("GET", f"/api/v1/jobs/{job_id}/events", headers=headers) as stream:
            events = [line async for line in stream.aiter_lines() if line.startswith("id: ")]
        rec.latencies["event stream (whole)"].append(time.perf_counter() - started)
        out["events_seen"][job_id] = len(events)


def start(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "from kloom.cli import main; main()", *args], env=env, cwd=ROOT,
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def check_database(db_url: str, keys: dict[str, str], events_seen: dict[str, int]) -> dict:
    """Exactly once: one row per submission, one queued event, one attempt, no gap or double."""
    with psycopg.connect(db_url.replace("+psycopg", "")) as conn:
        rows = conn.execute("SELECT id, state, attempts, num_steps, event_seq FROM jobs").fetchall()
        queued = dict(conn.execute(
            "SELECT job_id, count(*) FROM job_events WHERE kind = 'state' AND payload->>'state' = 'queued' GROUP BY job_id").fetchall())
        seqs = conn.execute("SELECT job_id, array_agg(seq ORDER BY seq) FROM job_events GROUP BY job_id").fetchall()
        steps = conn.execute("SELECT job_id, array_agg(index ORDER BY index) FROM steps GROUP BY job_id").fetchall()
    by_id = {r[0]: r for r in rows}
    step_map = dict(steps)
    gaps = [j for j, s in seqs if s != list(range(1, by_id[j][4] + 1))]
    step_gaps = [j for j, idx in step_map.items() if idx != list(range(len(idx))) or len(idx) != by_id[j][3]]
    states: dict[str, int] = defaultdict(int)
    for r in rows:
        states[r[1]] += 1
    return {
        "submissions": len(keys),
        "distinct_job_ids_returned": len(set(keys.values())),
        "job_rows": len(rows),
        "jobs_with_one_queued_event": sum(1 for j in by_id if queued.get(j) == 1),
        "jobs_run_once": sum(1 for r in rows if r[2] == 1),
        "states": dict(states),
        "jobs_with_event_gaps_or_doubles": len(gaps),
        "jobs_with_step_gaps_or_doubles": len(step_gaps),
        "streams_with_every_event": sum(1 for j, n in events_seen.items() if n == by_id[j][4]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=24)
    parser.add_argument("--workers", type=int, default=2, help="kloom worker processes (one job at a time each)")
    parser.add_argument("--api-workers", type=int, default=2, help="uvicorn processes")
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--port", type=int, default=18766)
    parser.add_argument("--timeout", type=float, default=900, help="the whole run stops after this many seconds")
    parser.add_argument("--out", type=Path, help="write the Markdown report here")
    args = parser.parse_args()

    load_before = os.getloadavg()
    run = uuid.uuid4().hex[:8]
    db_name = f"kloom_mixed_{run}"
    prefix = f"kloommixed-{run}:"
    admin_key = "kl_" + secrets.token_urlsafe(24)
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"kloom-load-mixed-{run}"
    logs.mkdir(parents=True)
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db_name}"')
    db_url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{db_name}"
    broker = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KLOOM_")}
    env.update(KLOOM_DATABASE_URL=db_url, KLOOM_BROKER_URL="redis://127.0.0.1:6379/0", KLOOM_BROKER_KEY_PREFIX=prefix,
               KLOOM_ADMIN_KEY=admin_key, KLOOM_DATA_DIR=str(logs), **EVAL_ENV)
    base = f"http://127.0.0.1:{args.port}"
    procs: list[subprocess.Popen] = []
    try:
        subprocess.run([sys.executable, "-c", "from kloom.cli import main; main()", "db", "upgrade"], env=env, check=True, cwd=ROOT, capture_output=True)
        api = start(["api", "--port", str(args.port), "--workers", str(args.api_workers)], env, logs / "api.log")
        procs.append(api)
        wait_healthy(base, api)
        for i in range(args.workers):
            procs.append(start(["worker", "--queues", "cpu"] + (["--sweep"] if i == 0 else []), env, logs / f"worker{i}.log"))
        made = httpx.post(f"{base}/api/v1/keys", json={"name": "load"}, headers={"Authorization": f"Bearer {admin_key}"})
        headers = {"Authorization": f"Bearer {made.json()['key']}"}
        rec = Recorder()
        out: dict = {"keys": {}, "job_seconds": [], "events_seen": {}}

        async def scenario() -> float:
            todo: asyncio.Queue = asyncio.Queue()
            for n in range(args.jobs):
                todo.put_nowait(n)
            limits = httpx.Limits(max_connections=args.clients * 2)
            async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as client:
                t0 = time.perf_counter()
                await asyncio.gather(*(client_loop(client, headers, todo, rec, out, args.world_size) for _ in range(args.clients)))
                return time.perf_counter() - t0

        seconds = asyncio.run(asyncio.wait_for(scenario(), args.timeout))
        checks = check_database(db_url, out["keys"], out["events_seen"])
    finally:
        for proc in reversed(procs):
            stop(proc)
        for key in broker.scan_iter(match=f"{prefix}*"):
            broker.delete(key)
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')

    n = args.jobs
    exactly_once = (
        checks["submissions"] == checks["distinct_job_ids_returned"] == checks["job_rows"] == n
        and checks["jobs_with_one_queued_event"] == checks["jobs_run_once"] == checks["streams_with_every_event"] == n
        and checks["states"] == {"succeeded": n}
        and checks["jobs_with_event_gaps_or_doubles"] == checks["jobs_with_step_gaps_or_doubles"] == 0
    )
    report = render(args, rec, out, seconds, checks, exactly_once, load_before)
    print(report)
    if exactly_once:
        shutil.rmtree(logs, ignore_errors=True)
    else:
        print(f"logs of the API and the workers: {logs}", file=sys.stderr)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report)
    return 0 if exactly_once else 1


def render(args, rec: Recorder, out: dict, seconds: float, checks: dict, exactly_once: bool, load) -> str:
    requests = sum(len(v) for v in rec.latencies.values())
    lines = [
        "# Mixed load test: clients submitting and reading while workers run the jobs (loopback)",
        "",
        f"Command: `python benchmarks/load_mixed.py --clients {args.clients} --jobs {args.jobs} --workers {args.workers} "
        f"--api-workers {args.api_workers} --world-size {args.world_size}`",
        "",
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}; `kloom api` with "
        f"{args.api_workers} uvicorn processes, {args.workers} `kloom worker` processes (CPU, {args.world_size} rank(s) per job, "
        f"offline strategist, one step per job, evaluator settings {EVAL_ENV}), PostgreSQL, Redis and the clients on the same "
        f"machine; load average before the run {load[0]:.1f} (1 min), {load[1]:.1f} (5 min).",
        "",
        f"{args.jobs} jobs by {args.clients} clients in {seconds:.1f} s: **{60 * args.jobs / seconds:.1f} jobs/min** run to the end; "
        f"**{requests / seconds:.1f} requests/s** served meanwhile. A job took {statistics.median(out['job_seconds']):.1f} s "
        f"from submission to finish at the median, {percentile(out['job_seconds'], 99):.1f} s at p99 (queueing included).",
        "",
        "| request | count | p50 (ms) | p99 (ms) | max (ms) |",
        "|---|---|---|---|---|",
    ]
    for kind, values in sorted(rec.latencies.items()):
        lines.append(f"| {kind} | {len(values)} | {1000 * statistics.median(values):.1f} | {1000 * percentile(values, 99):.1f} | {1000 * max(values):.1f} |")
    lines += [
        "",
        f"Errors: {dict(rec.errors) or 'none'}",
        "",
        f"Every submitted job recorded exactly once, run once and finished: **{'yes' if exactly_once else 'NO'}**",
        "",
        "```json",
        json.dumps(checks, indent=2),
        "```",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
