"""Access: every route the OpenAPI schema lists, called with one key on another key's job, batch,
uploaded workload and kernel, and without a key. Nothing of Alice's reaches Bob but what the
knowledge base shares by design (kernels and strategies, never her uploaded workload)."""

from __future__ import annotations

import re

from kb import ingest as kb_ingest, store
from service_helpers import TINY_WORKLOAD, submit
from tests.kb.kb_trajectories import Tried, Workload, trajectory

#: A recognisable line in Alice's uploaded workload: her code must never reach Bob.
ALICE_MARK = "ALICE-PRIVATE-WORKLOAD-7d1e"
PARAMS = re.compile(r"\{(\w+)\}")


def _alice_world(client, sessions, alice) -> dict[str, str]:
    """Alice's job, batch, a kernel found on her uploaded workload, and its strategy."""
    source = TINY_WORKLOAD + f"\n# {ALICE_MARK}\n"
    job = submit(client, alice, source=source).json()
    batch = client.post("/api/v1/batches", json={"suite": "kloom", "world_size": 8, "device_kind": "cuda-h200x8", "max_iters": 1}, headers=alice)
    assert batch.status_code == 201, batch.text
    workload = Workload(name=job["workload_name"], source=source)
    traj = trajectory(job["id"], workload, [Tried("cuda_graph", {"warmup": 3}, speedup=1.8)])
    with sessions() as session:
        report = kb_ingest.ingest(session, traj, workload_source=source)
    assert report.kernels == 1
    with sessions() as session:
        kernel = store.search(session, None, limit=200)
        kernel_id = next(m.kernel.public_id for m in kernel if m.kernel.job_id == job["id"])
        strategy_id = store.list_strategies(session, name="cuda_graph")[0].public_id
    return {"job_id": job["id"], "batch_id": batch.json()["id"], "kernel_id": kernel_id, "strategy_id": strategy_id}


def test_every_route_keeps_one_keys_jobs_batches_and_code_from_another(client, new_key, sessions, admin_headers):
    alice, bob = new_key("alice"), new_key("bob")
    ids = _alice_world(client, sessions, alice)
    ids["key_id"] = next(k["id"] for k in client.get("/api/v1/keys", headers=admin_headers).json()["data"] if k["name"] == "alice")
    spec = client.get("/openapi.json").json()
    checked = []
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            what = f"{method.upper()} {path}"
            # Required query parameters name Alice's things too (``/compare?other=``).
            query = {p["name"]: ids["batch_id"] for p in operation.get("parameters", []) if p["in"] == "query" and p.get("required")}
            url = PARAMS.sub(lambda m: ids[m.group(1)], path) + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")
            # Without a key: only /health answers.
            anonymous = client.request(method.upper(), url)
            if path == "/api/v1/health":
                # 503 "degraded" too: the tests' jobs wait in queues no worker serves.
                assert anonymous.status_code in (200, 503) and anonymous.json()["database"]["ok"]
            else:
                assert anonymous.status_code == 401 and "API key" in anonymous.json()["detail"], what
            r = _call(client, method, url, bob)
            body = r.text if "zip" not in r.headers.get("content-type", "") else r.content.decode("latin-1")
            assert ALICE_MARK not in body, f"{what} showed Bob Alice's workload"
            if "{job_id}" in path or "{batch_id}" in path:
                assert r.status_code == 404 and r.json()["detail"], f"{what}: {r.status_code}"
            elif path.startswith("/api/v1/keys"):
                assert r.status_code == 403 and "admin" in r.json()["detail"], what
            elif path.endswith("/export"):
                assert r.status_code == 403 and "another key uploaded" in r.json()["detail"], what
            elif not path.startswith("/api/v1/kb"):
                # Lists and the rest: no id of Alice's (the knowledge base names the job a
                # kernel came from, and shares the kernel: by design). /health may be degraded.
                assert (r.status_code < 500 or path == "/api/v1/health") and ids["job_id"] not in body and ids["batch_id"] not in body, what
            checked.append(what)
    assert len(checked) == sum(len(m) for m in spec["paths"].values())
    # Bob's own batch compared with Alice's: hers stays unknown to him.
    own = _call(client, "post", "/api/v1/batches", bob).json()["id"]
    compare = client.get(f"/api/v1/batches/{own}/compare?other={ids['batch_id']}", headers=bob)
    assert compare.status_code == 404 and ids["batch_id"] in compare.json()["detail"]
    # Alice herself still reaches all of it, her workload included.
    assert ALICE_MARK in client.get(f"/api/v1/jobs/{ids['job_id']}/workload", headers=alice).json()["source"]
    export = client.get(f"/api/v1/kb/kernels/{ids['kernel_id']}/export", headers=alice)
    assert export.status_code == 200 and ALICE_MARK.encode() in _unzipped(export.content)
    assert client.get(f"/api/v1/jobs/{ids['job_id']}", headers=alice).json()["state"] == "queued", "Bob's cancel did nothing"


def _call(client, method: str, url: str, headers):
    if method == "post" and url.endswith("/api/v1/jobs"):
        return submit(client, headers)
    if method == "post" and url.endswith("/api/v1/batches"):
        return client.post(url, json={"suite": "kloom", "world_size": 8, "device_kind": "cuda-h200x8", "max_iters": 1}, headers=headers)
    if method == "post" and url.endswith("/api/v1/keys"):
        return client.post(url, json={"name": "bob's"}, headers=headers)
    return client.request(method.upper(), url, headers=headers)


def _unzipped(data: bytes) -> bytes:
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return b"".join(z.read(n) for n in z.namelist())
