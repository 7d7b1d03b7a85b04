"""``/api/v1/kb/...`` on the real app (PostgreSQL), with a real API key."""

from __future__ import annotations

import io
import zipfile

import pytest
from fastapi.testclient import TestClient

from kb import ingest as kb_ingest
from kloom.settings import Settings
from services.db import keys
from tests.kb.kb_trajectories import Tried, Workload, trajectory
from tests.kb.test_kb_export import KERNEL_SOURCE, ingest_real_kernel


@pytest.fixture
def client(pg_db, tmp_path):
    from services.api.app import create_app

    settings = Settings(data_dir=tmp_path / "data", database_url=pg_db.url)
    with pg_db.sessions() as s:
        _, key = keys.create_key(s, "kb reader")
        s.commit()
    with TestClient(create_app(settings)) as c:
        c.headers["Authorization"] = f"Bearer {key}"
        yield c


def test_kernels_and_strategies_over_rest(pg_db, client):
    moe = Workload(name="moe_dispatch", family="expert_parallel", collectives=("all_to_all_single",), ops=("aten::sort",))
    for traj in (
        trajectory("job-a", Workload(), [Tried("overlap_chunks", {"chunks": 4}, speedup=2.4, profile="AllGather 12% exposed"), Tried("cuda_graph", speedup=0.95)]),
        trajectory("job-b", moe, [Tried("cuda_graph", speedup=1.3)]),
    ):
        with pg_db.sessions() as s:
            kb_ingest.ingest(s, traj)
    exported = ingest_real_kernel(pg_db.sessions)

    listed = client.get("/api/v1/kb/kernels").json()
    assert listed["count"] == 3 and [k["speedup"] for k in listed["data"]] == [2.4, 1.6, 1.3]
    assert all(k["score"] is None for k in listed["data"])

    found = client.get("/api/v1/kb/kernels", params={"q": "overlap all gather"}).json()["data"]
    assert found[0]["strategy"] == "overlap_chunks" and found[0]["score"] > 0
    moe_only = client.get("/api/v1/kb/kernels", params={"family": "expert_parallel"}).json()
    assert [k["workload_name"] for k in moe_only["data"]] == ["moe_dispatch"]

    top = listed["data"][0]["id"]
    detail = client.get(f"/api/v1/kb/kernels/{top}").json()
    assert detail["id"] == top and detail["code"].startswith("# overlap_chunks")
    assert detail["evaluation"]["timing"]["speedup"] == 2.4 and detail["signature"]["family"] == "tensor_parallel"
    assert client.get("/api/v1/kb/kernels/k424242").status_code == 404

    response = client.get(f"/api/v1/kb/kernels/{exported}/export")
    assert response.status_code == 200 and response.headers["content-type"] == "application/zip"
    archive = zipfile.ZipFile(io.BytesIO(response.content))
    assert archive.read(f"kloom_kernel_{exported}/kernel.py").decode() == KERNEL_SOURCE
    missing = client.get(f"/api/v1/kb/kernels/{top}/export")  # its workload's source was never kept
    assert missing.status_code == 409 and "was not kept" in missing.json()["detail"]

    strategies = client.get("/api/v1/kb/strategies").json()
    names = {(s["name"], s["applies_to"]["family"]): s for s in strategies["data"]}
    overlap = names[("overlap_chunks", "tensor_parallel")]
    assert (overlap["wins"], overlap["losses"], overlap["best_params"]) == (1, 0, {"chunks": 4}) and 0 < overlap["confidence"] < 1
    assert (names[("cuda_graph", "tensor_parallel")]["wins"], names[("cuda_graph", "tensor_parallel")]["losses"]) == (0, 1)
    one = client.get(f"/api/v1/kb/strategies/{overlap['id']}").json()
    [evidence] = one["evidence"]
    assert evidence["job_id"] == "job-a" and evidence["won"] and evidence["profile_summary"] == "AllGather 12% exposed"
    assert evidence["workload_name"] == "tp_allgather_matmul" and evidence["world_size"] == 4
    assert client.get("/api/v1/kb/strategies", params={"family": "expert_parallel"}).json()["count"] == 1
    assert client.get("/api/v1/kb/strategies/s424242").status_code == 404


def test_the_knowledge_base_needs_a_key(client):
    del client.headers["Authorization"]
    assert client.get("/api/v1/kb/kernels").status_code == 401
    assert client.get("/api/v1/kb/strategies").status_code == 401
