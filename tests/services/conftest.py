"""Fixtures of the service tests: a PostgreSQL database of their own (created and dropped), a key
prefix of their own on the local Redis, the API in-process, and real worker processes."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import psycopg
import pytest
import redis as redis_lib
from fastapi.testclient import TestClient

from kloom.db import create_db_engine, session_factory, upgrade
from kloom.settings import Settings

# The tests import their helpers by module name; this directory is not a package (it would
# shadow the real ``services`` package).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from service_helpers import EXPECTED_KINDS, PG_ADMIN, REDIS_URL, drop_database, kloom_process, new_database, service_env, stop_process  # noqa: E402


def _require(url_check, what: str) -> None:
    try:
        url_check()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"{what} is not reachable here ({exc}); scripts/services-up starts it")


@pytest.fixture(scope="session")
def run_id() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture(scope="session")
def pg_url(run_id):
    """A fresh PostgreSQL database for this test session, migrated to head."""
    _require(lambda: psycopg.connect(PG_ADMIN, connect_timeout=3).close(), "PostgreSQL on 127.0.0.1:5432")
    name = f"kloom_test_{run_id}"
    url = new_database(name)
    upgrade(url)
    yield url
    drop_database(name)


@pytest.fixture(scope="session")
def redis_client():
    client = redis_lib.Redis.from_url(REDIS_URL)
    _require(client.ping, "Redis on 127.0.0.1:6379")
    return client


@pytest.fixture(scope="session")
def settings(pg_url, redis_client, run_id, tmp_path_factory) -> Settings:
    prefix = f"kloomtest-{run_id}:"
    yield Settings(
        data_dir=tmp_path_factory.mktemp("data"),
        database_url=pg_url,
        broker_url=REDIS_URL,
        broker_key_prefix=prefix,
        admin_key=f"kl_admin_{run_id}",
        heartbeat_interval_s=1.0,
        worker_dead_after_s=30.0,
        sse_poll_s=0.1,
        # The kinds the tests submit to: cpu (the tests' workers), and GPU kinds no worker serves.
        expected_device_kinds=EXPECTED_KINDS,
    )
    for key in redis_client.scan_iter(match=f"{prefix}*"):
        redis_client.delete(key)


@pytest.fixture(scope="session")
def sessions(settings):
    engine = create_db_engine(settings.db_url)
    yield session_factory(engine)
    engine.dispose()


@pytest.fixture(scope="session")
def app(settings):
    from services.api.app import create_app

    return create_app(settings)


@pytest.fixture()
def client(app):
    with TestClient(app) as c:
        yield c


@pytest.fixture(scope="session")
def admin_headers(settings) -> dict[str, str]:
    return {"Authorization": f"Bearer {settings.admin_key_value()}"}


@pytest.fixture()
def new_key(client, admin_headers):
    """Makes a key through the API; returns its headers (each test owns fresh keys)."""

    def make(name: str = "user", admin: bool = False) -> dict[str, str]:
        r = client.post("/api/v1/keys", json={"name": name, "admin": admin}, headers=admin_headers)
        assert r.status_code == 201, r.text
        return {"Authorization": f"Bearer {r.json()['key']}"}

    return make


@pytest.fixture(scope="session")
def worker(settings, tmp_path_factory):
    """A real ``kloom worker`` process serving the ``cpu`` queue of this session's broker prefix."""
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    proc = kloom_process(["worker", "--queues", "cpu"], service_env(settings), log)
    yield proc, log
    stop_process(proc)
