"""The API refuses what it cannot serve (issue 20.8): out-of-range integers anywhere are a 422 that
says so (2^63 was a 500 on SQLite, and the 500 closed the keep-alive connection), a device kind
no worker has ever served is refused with the kinds on offer (unless the service expects such a
worker: then the job says it waits for one), and ``max_wall_s`` must be finite and positive."""

from __future__ import annotations

import http.client
import json

import pytest

from kloom.db import upgrade
from reliability_helpers import ApiServer
from service_helpers import IDLE_QUEUE, submit

HUGE = 2**63


@pytest.mark.parametrize("url", [
    f"/api/v1/jobs?offset={HUGE}", f"/api/v1/jobs?offset={2**31}", "/api/v1/jobs?offset=-1", "/api/v1/jobs?limit=100000",
    f"/api/v1/batches?offset={HUGE}", f"/api/v1/jobs/{{job}}/steps?after={HUGE}", f"/api/v1/jobs/{{job}}/events?after={HUGE}",
    f"/api/v1/kb/kernels?limit={HUGE}",
])
def test_out_of_range_query_integers_are_a_422(client, new_key, url):
    headers = new_key("ranges")
    job = submit(client, headers).json()["id"]
    r = client.get(url.format(job=job), headers=headers)
    assert r.status_code == 422 and r.json()["detail"].startswith("invalid request:"), r.text


@pytest.mark.parametrize("fields, says", [
    ({"world_size": HUGE}, "world_size"), ({"max_iters": HUGE}, "max_iters"), ({"max_tokens": 2**64}, "max_tokens"),
    ({"max_wall_s": "inf"}, "max_wall_s"), ({"max_wall_s": "nan"}, "max_wall_s"), ({"max_wall_s": "-1"}, "max_wall_s"),
    ({"max_wall_s": "0"}, "max_wall_s"), ({"budget_usd": "Infinity"}, "budget_usd"),
])
def test_out_of_range_or_infinite_settings_are_a_422(client, new_key, fields, says):
    headers = new_key("limits")
    r = submit(client, headers, **fields)
    assert r.status_code == 422 and says in r.json()["detail"], r.text
    # The same in a batch's JSON body (Python's json writes Infinity and NaN, as some clients do).
    body = {"world_size": 2, "device_kind": IDLE_QUEUE, **{k: (float(v) if k in ("max_wall_s", "budget_usd") else v) for k, v in fields.items()}}
    batch = client.post("/api/v1/batches", content=json.dumps(body), headers={**headers, "Content-Type": "application/json"})
    assert batch.status_code == 422 and says in batch.json()["detail"], batch.text


def test_a_device_kind_no_worker_serves_is_refused_with_the_kinds_on_offer(client, new_key, settings):
    headers = new_key("kinds")
    r = submit(client, headers, device_kind="cuda-evilx2")
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "cuda-evilx2" in detail and all(kind in detail for kind in settings.expected_device_kinds), detail
    assert client.post("/api/v1/batches", json={"world_size": 2, "device_kind": "cuda-evilx2"}, headers=headers).status_code == 422
    # A kind the service expects (a pool that comes later): accepted, and the job says it waits.
    job = submit(client, headers, device_kind=IDLE_QUEUE).json()
    shown = client.get(f"/api/v1/jobs/{job['id']}", headers=headers).json()
    assert shown["state"] == "queued" and f"no worker that serves {IDLE_QUEUE} is running" in shown["waiting"], shown
    listed = client.get("/api/v1/jobs", params={"state": "queued"}, headers=headers).json()["data"]
    assert all(j["waiting"] for j in listed if j["device_kind"] == IDLE_QUEUE)


@pytest.mark.slow
def test_a_refusal_keeps_the_connection_open_on_sqlite(settings, tmp_path):
    """The issue's case: ``kloom api`` on SQLite, one keep-alive connection, numbers past 64 bits."""
    url = f"sqlite:///{tmp_path / 'kloom.db'}"
    upgrade(url)
    server = ApiServer(settings.model_copy(update={"database_url": url}), tmp_path / "api.log", KLOOM_DATABASE_URL=url)
    server.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        auth = {"Authorization": f"Bearer {settings.admin_key_value()}"}
        for path in (f"/api/v1/jobs?offset={HUGE}", f"/api/v1/jobs?offset={2**70}", f"/api/v1/batches?offset={HUGE}",
                     f"/api/v1/jobs/x/steps?after={HUGE}", "/api/v1/jobs?limit=0", "/api/v1/jobs?offset=1"):
            conn.request("GET", path, headers=auth)
            response = conn.getresponse()
            body = json.loads(response.read())
            expected = 200 if path.endswith("offset=1") else 422
            assert response.status == expected and not response.will_close, (path, response.status, body)
        assert "invalid request" in body["detail"] if expected == 422 else body["count"] == 0
        conn.close()
    finally:
        server.stop()
