"""Helpers of the service tests (imported by the tests and by conftest.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from kloom.settings import Settings

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS_URL = "redis://127.0.0.1:6379/0"
ROOT = Path(__file__).resolve().parents[2]

TINY_WORKLOAD = '''
import torch
import torch.distributed as dist
import torch.nn as nn

WORLD_SIZES = [1, 2]
FAMILY = "collectives"


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



def new_database(name: str) -> str:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"


def drop_database(name: str) -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def queue_length(redis_client, settings: Settings, queue: str) -> int:
    return redis_client.llen(f"{settings.broker_key_prefix}{queue}")


#: A queue no test worker serves: jobs submitted there stay queued until a test moves them.
IDLE_QUEUE = "cuda-h100x2"
#: Device kinds the tests' service accepts though no worker has served them (``expected_device_kinds``).
EXPECTED_KINDS = ["cpu", IDLE_QUEUE, "cuda-h100x8", "cuda-h200x4", "cuda-h200x8"]


def submit(client, headers, source: str = TINY_WORKLOAD, filename: str = "tiny.py", **fields):
    data = {"world_size": 2, "max_iters": 1, "device_kind": IDLE_QUEUE, **fields}
    return client.post(
        "/api/v1/jobs",
        data={k: str(v) for k, v in data.items()},
        files={"workload_file": (filename, source.encode() if isinstance(source, str) else source, "text/x-python")},
        headers=headers,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def service_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment that points a ``kloom`` process at the test database and broker."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KLOOM_")}
    env.update(
        KLOOM_DATA_DIR=str(settings.data_dir),
        KLOOM_DATABASE_URL=settings.db_url,
        KLOOM_BROKER_URL=settings.broker,
        KLOOM_BROKER_KEY_PREFIX=settings.broker_key_prefix,
        KLOOM_ADMIN_KEY=settings.admin_key_value(),
        KLOOM_HEARTBEAT_INTERVAL_S=str(settings.heartbeat_interval_s),
        KLOOM_WORKER_DEAD_AFTER_S=str(settings.worker_dead_after_s),
        KLOOM_EXPECTED_DEVICE_KINDS=",".join(settings.expected_device_kinds),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def kloom_process(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", "from kloom.cli import main; main()", *args],
        env=env,
        cwd=ROOT,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop_process(proc: subprocess.Popen, timeout: float = 20) -> None:
    """SIGTERM the process group (Celery's children too), then SIGKILL what is left."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, 15)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait(5)


def wait_for(condition, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
