"""Fixtures of the reliability tests: the service tests' fixtures (a PostgreSQL database and a Redis
key prefix of this session's own, the API in-process, keys), loaded from ``tests/services`` rather
than copied, plus what only these tests need."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SERVICE_TESTS = Path(__file__).resolve().parents[1] / "services"
HERE = Path(__file__).resolve().parent
# Helpers are imported by module name (neither directory is a package: it would shadow ``services``).
for directory in (SERVICE_TESTS, HERE):
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))

_spec = importlib.util.spec_from_file_location("kloom_service_test_fixtures", SERVICE_TESTS / "conftest.py")
_service_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_service_fixtures)

run_id = _service_fixtures.run_id
pg_url = _service_fixtures.pg_url
redis_client = _service_fixtures.redis_client
settings = _service_fixtures.settings
sessions = _service_fixtures.sessions
app = _service_fixtures.app
client = _service_fixtures.client
admin_headers = _service_fixtures.admin_headers
new_key = _service_fixtures.new_key

from reliability_helpers import leftover_pool_cgroups  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def no_pool_cgroup_left_behind():
    """Every rank pool these tests start removes its cgroup (a left one would hold processes)."""
    before = set(leftover_pool_cgroups())
    yield
    left = set(leftover_pool_cgroups()) - before
    assert not left, f"rank pools left their cgroups behind: {sorted(left)}"
