"""API keys: every route but /health needs one; a key sees and cancels only its own jobs and
batches; only admins manage keys; keys are stored hashed and never come back."""

from __future__ import annotations

from sqlalchemy import select

from service_helpers import submit
from services.db.keys import hash_key
from services.db.models import ApiKey

JOB_ROUTES = ["", "/steps", "/best", "/workload", "/events"]


def test_without_a_key_only_health_answers(client):
    health = client.get("/api/v1/health")
    assert health.status_code in (200, 503) and health.json()["database"]["ok"]
    spec = client.get("/openapi.json").json()
    for path, methods in spec["paths"].items():
        if path == "/api/v1/health":
            continue
        url = path.replace("{job_id}", "x").replace("{batch_id}", "x").replace("{key_id}", "x")
        for method in methods:
            r = client.request(method.upper(), url)
            assert r.status_code == 401, f"{method} {path} answered {r.status_code} without a key"
            assert "API key" in r.json()["detail"]


def test_a_wrong_or_revoked_key_is_refused(client, new_key, admin_headers):
    assert client.get("/api/v1/jobs", headers={"Authorization": "Bearer kl_not_a_key"}).status_code == 401
    headers = new_key("soon revoked")
    assert client.get("/api/v1/jobs", headers=headers).status_code == 200
    key_id = next(k["id"] for k in client.get("/api/v1/keys", headers=admin_headers).json()["data"] if k["name"] == "soon revoked")
    assert client.delete(f"/api/v1/keys/{key_id}", headers=admin_headers).json()["revoked_at"] is not None
    assert client.get("/api/v1/jobs", headers=headers).status_code == 401


def test_a_key_reaches_only_its_own_jobs(client, new_key):
    alice, bob = new_key("alice"), new_key("bob")
    job_id = submit(client, alice).json()["id"]
    for suffix in JOB_ROUTES:
        r = client.get(f"/api/v1/jobs/{job_id}{suffix}", headers=bob)
        assert r.status_code == 404, f"bob read /jobs/{{id}}{suffix}: {r.status_code}"
    assert client.post(f"/api/v1/jobs/{job_id}/cancel", headers=bob).status_code == 404
    assert job_id not in {j["id"] for j in client.get("/api/v1/jobs?limit=500", headers=bob).json()["data"]}
    assert client.get(f"/api/v1/jobs/{job_id}", headers=alice).json()["state"] == "queued"
    # The same key through the other ways of sending it.
    token = alice["Authorization"].split()[1]
    assert client.get(f"/api/v1/jobs/{job_id}", headers={"X-API-Key": token}).status_code == 200
    client.cookies.set("kloom_key", token)
    try:
        assert client.get(f"/api/v1/jobs/{job_id}").status_code == 200
    finally:
        client.cookies.clear()


def test_a_key_reaches_only_its_own_batches(client, new_key):
    alice, bob = new_key("alice"), new_key("bob")
    r = client.post("/api/v1/batches", json={"suite": "kloom", "world_size": 8, "device_kind": "cuda-h200x8", "max_iters": 1}, headers=alice)
    assert r.status_code == 201, r.text
    batch = r.json()
    assert client.get(f"/api/v1/batches/{batch['id']}", headers=bob).status_code == 404
    assert client.get("/api/v1/batches", headers=bob).json()["count"] == 0
    assert client.get("/api/v1/batches", headers=alice).json()["count"] == 1
    one = batch["workloads"][0]["job_id"]
    assert client.get(f"/api/v1/jobs/{one}", headers=bob).status_code == 404


def test_only_admins_manage_keys_and_keys_are_stored_hashed(client, new_key, sessions):
    user = new_key("user")
    assert client.get("/api/v1/keys", headers=user).status_code == 403
    assert client.post("/api/v1/keys", json={"name": "x"}, headers=user).status_code == 403
    admin = new_key("second admin", admin=True)
    r = client.post("/api/v1/keys", json={"name": "made by a second admin"}, headers=admin)
    assert r.status_code == 201
    key = r.json()["key"]
    listed = client.get("/api/v1/keys", headers=admin).text
    assert key not in listed
    with sessions() as s:
        row = s.scalar(select(ApiKey).where(ApiKey.id == r.json()["id"]))
        assert row.key_hash == hash_key(key) and key not in (row.key_hash, row.prefix, row.name)
