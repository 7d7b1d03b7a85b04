"""Fixtures of the browser tests: the real service in embedded mode (``kloom up``: API, dashboard,
migrations and a CPU worker on SQLite and the filesystem broker) on a free port with a temporary
data directory, a small suite of its own for batches, and headless Debian Chromium driven by
Playwright. Screenshots go to ``tmp/artifacts/dashboard/`` (or ``$KLOOM_TEST_ARTIFACTS``)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import httpx
import pytest

# Helper modules are imported by name (these directories are not packages; see tests/services/conftest.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from dashboard_helpers import CHROMIUM, CHROMIUM_ARGS, DOUBLE, LAPTOP, ROOT, STATEFUL, Service  # noqa: E402
from service_helpers import free_port, kloom_process, stop_process, wait_for  # noqa: E402


@pytest.fixture(scope="session")
def chromium_path() -> str:
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no Chromium at {CHROMIUM}: install Debian's chromium (scripts/services-up does) to run the browser tests")
    return CHROMIUM


@pytest.fixture(scope="session")
def artifacts() -> Path:
    path = Path(os.environ.get("KLOOM_TEST_ARTIFACTS", ROOT / "tmp" / "artifacts")) / "dashboard"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


@pytest.fixture(scope="module")
def service(tmp_path_factory, chromium_path) -> Service:
    """``kloom up`` on a free port, a fresh data directory, and the ``tiny`` suite beside ``kloom``."""
    tmp = tmp_path_factory.mktemp("dashboard")
    suite = tmp / "suites" / "tiny"
    suite.mkdir(parents=True)
    (suite / "double.py").write_text(DOUBLE)
    (suite / "stateful.py").write_text(STATEFUL)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KLOOM_")}
    env.update(KLOOM_SUITES_DIR=str(tmp / "suites"), KLOOM_SSE_POLL_S="0.2", KLOOM_HEARTBEAT_INTERVAL_S="2")
    log = tmp / "up.log"
    proc = kloom_process(["up", "--data-dir", str(tmp / "data"), "--port", str(port)], env, log)
    base = f"http://127.0.0.1:{port}"

    def healthy():
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            r = httpx.get(f"{base}/api/v1/health", timeout=2)
        except httpx.TransportError:
            return None
        return r.status_code == 200 and r.json()["workers_alive"] >= 1

    try:
        wait_for(healthy, 90, "kloom up to answer with a live worker", interval=0.3)
        service = Service(base, (tmp / "data" / "admin_key").read_text().strip(), tmp / "data", log, proc)
        yield service
    finally:
        stop_process(proc)


@pytest.fixture(scope="session")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture()
def open_page(browser, service):
    """``open_page(key=..., viewport=...)``: a page in a fresh browser context, signed in with
    ``key`` (the admin key by default; ``None``: not signed in). Script errors fail the test."""
    contexts, errors = [], []

    def make(key: str | None = "admin", viewport: dict = LAPTOP):
        context = browser.new_context(viewport=viewport, base_url=service.base)
        contexts.append(context)
        if key:
            value = service.admin_key if key == "admin" else key
            context.add_cookies([{"name": "kloom_key", "value": value, "url": service.base, "sameSite": "Strict"}])
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
        # Failed requests are expected where a test asks for them (404s, a stopped API); the page
        # reports those itself, and the tests read what it says.
        page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" and "Failed to load resource" not in m.text else None)
        return page

    yield make
    for context in contexts:
        context.close()
    assert not errors, errors
