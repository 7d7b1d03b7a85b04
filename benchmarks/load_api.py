"""A bounded loopback load test of the API: N concurrent job submissions, then M reads.

It starts ``kloom api`` on 127.0.0.1 against a PostgreSQL database of its own (created, then
dropped) and a key prefix of its own on the local Redis, submits ``--submissions`` jobs at once
(each with its own Idempotency-Key, retried on a transport error or a 503), reads ``--reads``
times (job, job list, steps) with ``--read-concurrency`` clients, and checks that every submitted
job was recorded exactly once: one row per submission, one ``queued`` event each, one task each
on the broker. No worker runs: this measures the API, the database and the broker.

    python benchmarks/load_api.py --submissions 200 --reads 2000 --out benchmarks/results/load_api.md
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import psycopg
import redis

ROOT = Path(__file__).resolve().parents[1]
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
WORKLOAD = b'''
import torch
import torch.distributed as dist
import torch.nn as nn

WORLD_SIZES = [1, 2, 4]


class Model(nn.Module):
    def forward(self, x):
        out = x * 2
        dist.all_reduce(out)
        return out


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(8, 16)]
'''


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def summary(name: str, latencies: list[float], seconds: float, errors: int) -> dict:
    return {
        "phase": name,
        "requests": len(latencies),
        "errors": errors,
        "seconds": round(seconds, 2),
        "throughput_rps": round(len(latencies) / seconds, 1),
        "p50_ms": round(1000 * statistics.median(latencies), 1),
        "p99_ms": round(1000 * percentile(latencies, 99), 1),
        "max_ms": round(1000 * max(latencies), 1),
    }


async def submit_all(client: httpx.AsyncClient, headers: dict, n: int, deadline: float) -> tuple[list[float], list[str], int, int]:
    """Submit n jobs at once; each retries (same Idempotency-Key) until recorded or past the deadline."""

    async def one(i: int):
        key = f"load-{i}-{uuid.uuid4().hex}"
        retries = 0
        while True:
            started = time.perf_counter()
            try:
                r = await client.post(
                    "/api/v1/jobs",
                    data={"world_size": "2", "max_iters": "1"},
                    files={"workload_file": (f"w{i}.py", WORKLOAD)},
                    headers={**headers, "Idempotency-Key": key},
                )
                if r.status_code in (200, 201):
                    return time.perf_counter() - started, r.json()["id"], retries
                if r.status_code != 503:
                    raise RuntimeError(f"submission {i}: {r.status_code} {r.text[:200]}")
            except httpx.TransportError:
                pass
            retries += 1
            if time.monotonic() > deadline:
                raise TimeoutError(f"submission {i} not recorded before the deadline")
            await asyncio.sleep(0.2)

    results = await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)
    ok = [r for r in results if not isinstance(r, BaseException)]
    errors = len(results) - len(ok)
    return [r[0] for r in ok], [r[1] for r in ok], sum(r[2] for r in ok), errors


async def read_all(client: httpx.AsyncClient, headers: dict, ids: list[str], n: int, concurrency: int) -> tuple[list[float], dict]:
    latencies: list[float] = []
    errors: dict[str, int] = {}
    semaphore = asyncio.Semaphore(concurrency)
    paths = ["/api/v1/jobs/{id}", "/api/v1/jobs?limit=50", "/api/v1/jobs/{id}/steps"]

    async def one(i: int):
        path = paths[i % len(paths)].format(id=ids[i % len(ids)])
        async with semaphore:
            started = time.perf_counter()
            try:
                r = await client.get(path, headers=headers)
                kind = None if r.status_code == 200 else f"HTTP {r.status_code}: {r.text[:100]}"
            except httpx.TransportError as exc:
                kind = type(exc).__name__
            latencies.append(time.perf_counter() - started)
            if kind:
                errors[kind] = errors.get(kind, 0) + 1

    await asyncio.gather(*(one(i) for i in range(n)))
    return latencies, errors


def wait_healthy(base: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("kloom api exited during start")
        try:
            if httpx.get(f"{base}/api/v1/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise TimeoutError("kloom api did not become healthy")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=200)
    parser.add_argument("--reads", type=int, default=2000)
    parser.add_argument("--read-concurrency", type=int, default=50)
    parser.add_argument("--api-workers", type=int, default=2, help="uvicorn processes")
    parser.add_argument("--port", type=int, default=18765)
    parser.add_argument("--timeout", type=float, default=240, help="the whole run stops after this many seconds")
    parser.add_argument("--out", type=Path, help="write the Markdown report here")
    args = parser.parse_args()

    load_before = os.getloadavg()
    run = uuid.uuid4().hex[:8]
    db_name = f"kloom_load_{run}"
    prefix = f"kloomload-{run}:"
    admin_key = "kl_" + secrets.token_urlsafe(24)
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db_name}"')
    db_url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{db_name}"
    broker = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KLOOM_")}
    env.update(
        KLOOM_DATABASE_URL=db_url,
        KLOOM_BROKER_URL="redis://127.0.0.1:6379/0",
        KLOOM_BROKER_KEY_PREFIX=prefix,
        KLOOM_ADMIN_KEY=admin_key,
    )
    base = f"http://127.0.0.1:{args.port}"
    proc = None
    try:
        subprocess.run([sys.executable, "-c", "from kloom.cli import main; main()", "db", "upgrade"], env=env, check=True, cwd=ROOT, capture_output=True)
        proc = subprocess.Popen(
            [sys.executable, "-c", "from kloom.cli import main; main()", "api", "--port", str(args.port), "--workers", str(args.api_workers)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_healthy(base, proc)
        made = httpx.post(f"{base}/api/v1/keys", json={"name": "load"}, headers={"Authorization": f"Bearer {admin_key}"})
        headers = {"Authorization": f"Bearer {made.json()['key']}"}
        deadline = time.monotonic() + args.timeout
        limits = httpx.Limits(max_connections=args.submissions, max_keepalive_connections=args.submissions)

        async def scenario():
            async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as client:
                t0 = time.perf_counter()
                sub_lat, ids, retries, sub_err = await submit_all(client, headers, args.submissions, deadline)
                t1 = time.perf_counter()
                read_lat, read_err = await read_all(client, headers, ids or ["none"], args.reads, args.read_concurrency)
                t2 = time.perf_counter()
                return sub_lat, ids, retries, sub_err, t1 - t0, read_lat, read_err, t2 - t1

        sub_lat, ids, retries, sub_err, sub_s, read_lat, read_err, read_s = asyncio.run(asyncio.wait_for(scenario(), args.timeout))

        with psycopg.connect(db_url.replace("+psycopg", "")) as conn:
            rows = conn.execute("SELECT count(*), count(DISTINCT id) FROM jobs").fetchone()
            queued_events = conn.execute("SELECT count(*) FROM job_events WHERE kind = 'state' AND payload->>'state' = 'queued'").fetchone()[0]
            per_job = conn.execute("SELECT max(c) FROM (SELECT count(*) c FROM job_events GROUP BY job_id) t").fetchone()[0]
        messages = broker.llen(f"{prefix}cpu")
        checks = {
            "submissions": args.submissions,
            "ids_returned": len(ids),
            "distinct_ids_returned": len(set(ids)),
            "job_rows": rows[0],
            "distinct_job_rows": rows[1],
            "queued_events": queued_events,
            "max_events_per_job": per_job,
            "broker_messages": messages,
            "client_retries": retries,
            "read_errors": read_err,
        }
        exactly_once = (
            len(set(ids)) == len(ids) == rows[0] == rows[1] == queued_events == messages == args.submissions and per_job == 1
        )
        phases = [summary("submit", sub_lat, sub_s, sub_err), summary("read", read_lat, read_s, sum(read_err.values()))]
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        for key in broker.scan_iter(match=f"{prefix}*"):
            broker.delete(key)
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')

    report = render(args, phases, checks, exactly_once, load_before)
    print(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report)
    return 0 if exactly_once and not sub_err and not read_err else 1


def render(args, phases: list[dict], checks: dict, exactly_once: bool, load: tuple[float, float, float]) -> str:
    lines = [
        "# API load test (loopback)",
        "",
        f"Command: `python benchmarks/load_api.py --submissions {args.submissions} --reads {args.reads} "
        f"--read-concurrency {args.read_concurrency} --api-workers {args.api_workers}`",
        "",
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}; "
        f"`kloom api` with {args.api_workers} uvicorn processes, PostgreSQL, Redis and the load client on the same machine, "
        f"no worker; load average before the run {load[0]:.1f} (1 min), {load[1]:.1f} (5 min).",
        "Submissions are multipart uploads of a small workload file, all sent at once; reads cycle over "
        "GET /jobs/{id}, GET /jobs?limit=50 and GET /jobs/{id}/steps.",
        "",
        "| phase | requests | errors | seconds | throughput (req/s) | p50 (ms) | p99 (ms) | max (ms) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in phases:
        lines.append(
            f"| {p['phase']} | {p['requests']} | {p['errors']} | {p['seconds']} | {p['throughput_rps']} | {p['p50_ms']} | {p['p99_ms']} | {p['max_ms']} |"
        )
    lines += ["", f"Every job recorded exactly once: **{'yes' if exactly_once else 'NO'}**", "", "```json", json.dumps(checks, indent=2), "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
