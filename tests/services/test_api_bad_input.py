"""Bad input gets a 4xx whose message says what is wrong, and leaves nothing in the database; a
broker or a database that is down gets a 503 with a message, and the API recovers by itself."""

from __future__ import annotations

import socket
import threading

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from service_helpers import TINY_WORKLOAD, free_port, submit
from services.db.models import Batch, Job


def _jobs_of(sessions, client, headers) -> tuple[int, int]:
    """The key's own count of jobs, and the database's count of all jobs."""
    mine = client.get("/api/v1/jobs", headers=headers).json()["count"]
    with sessions() as s:
        return mine, s.scalar(select(func.count()).select_from(Job))


@pytest.mark.parametrize(
    ("source", "fields", "status", "message"),
    [
        ("def broken(:\n", {}, 422, "syntax error at line 1"),
        (TINY_WORKLOAD.replace("class Model", "class NotModel"), {}, 422, "no class Model"),
        (TINY_WORKLOAD.replace("def get_inputs", "def other_inputs"), {}, 422, "no function get_inputs()"),
        (TINY_WORKLOAD, {"world_size": 4}, 422, "world size 4 is not supported"),
        (b"\xff\xfe not utf-8", {}, 422, "not UTF-8"),
        (TINY_WORKLOAD, {"world_size": 0}, 422, "world_size"),
        (TINY_WORKLOAD, {"device_kind": "tpu"}, 422, "device_kind"),
        (TINY_WORKLOAD, {"world_size": 2, "device_kind": "cuda-h100x1"}, 422, "has 1 GPU(s)"),
        (TINY_WORKLOAD, {"max_iters": 10_000}, 422, "max_iters 10000 is over"),
        (TINY_WORKLOAD, {"shapes": "huge"}, 422, "shapes"),
        (TINY_WORKLOAD, {"profile": "always"}, 422, "profile"),
    ],
)
def test_bad_submissions_are_refused_with_a_reason(client, new_key, sessions, source, fields, status, message):
    headers = new_key()
    _, before = _jobs_of(sessions, client, headers)
    r = submit(client, headers, source=source, **fields)
    assert r.status_code == status, r.text
    assert message in r.json()["detail"]
    assert _jobs_of(sessions, client, headers) == (0, before)


def test_upload_over_the_size_limit(client, new_key, sessions, settings):
    headers = new_key()
    _, before = _jobs_of(sessions, client, headers)
    padding = "#" * (settings.max_upload_bytes + 10) + "\n"
    r = submit(client, headers, source=TINY_WORKLOAD + padding)
    assert r.status_code == 413 and "size limit" in r.json()["detail"]
    huge = submit(client, headers, source=TINY_WORKLOAD + padding * 2)  # past the body limit too
    assert huge.status_code == 413 and "size limit" in huge.json()["detail"]
    assert _jobs_of(sessions, client, headers) == (0, before)


def test_workload_choice_and_names(client, new_key):
    headers = new_key()
    neither = client.post("/api/v1/jobs", data={"world_size": "2"}, headers=headers)
    assert neither.status_code == 422 and "either a workload file" in neither.json()["detail"]
    both = client.post(
        "/api/v1/jobs",
        data={"world_size": "2", "workload": "all_reduce_small"},
        files={"workload_file": ("t.py", TINY_WORKLOAD.encode())},
        headers=headers,
    )
    assert both.status_code == 422 and "not both" in both.json()["detail"]
    unknown = client.post("/api/v1/jobs", data={"world_size": "2", "workload": "no_such_thing"}, headers=headers)
    assert unknown.status_code == 422 and "no workload named 'no_such_thing'" in unknown.json()["detail"]
    # A JSON body where form fields are expected is told so, not that every field is missing.
    as_json = client.post("/api/v1/jobs", json={"world_size": 2, "workload": "all_reduce_small"}, headers=headers)
    assert as_json.status_code == 422 and "takes form fields" in as_json.json()["detail"]
    # A path is not a name: the server's files stay out of reach.
    path = client.post("/api/v1/jobs", data={"world_size": "1", "workload": "/etc/passwd.py"}, headers=headers)
    assert path.status_code == 422


def test_bad_batches(client, new_key, sessions):
    headers = new_key()
    with sessions() as s:
        before = s.scalar(select(func.count()).select_from(Batch))
    unknown = client.post("/api/v1/batches", json={"suite": "nope", "world_size": 2}, headers=headers)
    assert unknown.status_code == 422 and "unknown suite 'nope'" in unknown.json()["detail"]
    none = client.post("/api/v1/batches", json={"suite": "kloom", "world_size": 3}, headers=headers)
    assert none.status_code == 422 and "supports world size 3" in none.json()["detail"]
    extra = client.post("/api/v1/batches", json={"suite": "kloom", "world_size": 2, "workload": ["all_gather"]}, headers=headers)
    assert extra.status_code == 422 and "workload" in str(extra.json()["detail"])
    misnamed = client.post("/api/v1/batches", json={"suite": "kloom", "world_size": 2, "workloads": ["all_gather", "no_such"]}, headers=headers)
    assert misnamed.status_code == 422 and "no workload named 'no_such' in the kloom suite" in misnamed.json()["detail"]
    empty_name = client.post("/api/v1/batches", json={"suite": "kloom", "world_size": 2, "workloads": [""]}, headers=headers)
    assert empty_name.status_code == 422
    malformed = client.post("/api/v1/batches", content=b"{not json", headers={**headers, "Content-Type": "application/json"})
    assert malformed.status_code == 422 and malformed.json()["detail"]
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(Batch)) == before


def test_broker_down_answers_503_and_records_nothing(settings, sessions, admin_headers):
    from services.api.app import create_app

    down = settings.model_copy(update={"broker_url": f"redis://127.0.0.1:{free_port()}/0"})
    with TestClient(create_app(down)) as c:
        with sessions() as s:
            before = s.scalar(select(func.count()).select_from(Job))
        r = submit(c, admin_headers)
        assert r.status_code == 503 and "queue is unavailable" in r.json()["detail"]
        with sessions() as s:
            assert s.scalar(select(func.count()).select_from(Job)) == before
        health = c.get("/api/v1/health")
        assert health.status_code == 503 and not health.json()["broker"]["ok"] and health.json()["database"]["ok"]


class Proxy:
    """A TCP proxy to PostgreSQL that can be cut and restored: a database outage on loopback."""

    def __init__(self, target_port: int = 5432):
        self.target = ("127.0.0.1", target_port)
        self.port = free_port()
        self.listener: socket.socket | None = None
        self.conns: list[socket.socket] = []

    def start(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def stop(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (close alone does not)
        self.listener.close()
        for conn in self.conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        self.conns.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass


def test_database_down_answers_503_and_recovers(settings, admin_headers):
    from services.api.app import create_app

    proxy = Proxy()
    proxy.start()
    url = settings.db_url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    with TestClient(create_app(settings.model_copy(update={"database_url": url}))) as c:
        assert c.get("/api/v1/jobs", headers=admin_headers).status_code == 200
        proxy.stop()
        for _ in range(2):  # pooled connections are found dead, and new ones cannot be made
            r = c.get("/api/v1/jobs", headers=admin_headers)
            assert r.status_code == 503 and "database is unavailable" in r.json()["detail"]
        down = submit(c, admin_headers)
        assert down.status_code == 503
        health = c.get("/api/v1/health")
        assert health.status_code == 503 and not health.json()["database"]["ok"]
        proxy.start()
        assert c.get("/api/v1/jobs", headers=admin_headers).status_code == 200
        # Back up (the jobs of other tests, queued for a kind no worker serves, may leave it degraded).
        assert c.get("/api/v1/health").json()["status"] in ("ok", "degraded")
        proxy.stop()


def test_broker_cut_and_restored_the_api_reconnects(settings, admin_headers, redis_client):
    from services.api.app import create_app

    proxy = Proxy(target_port=6379)
    proxy.start()
    url = f"redis://127.0.0.1:{proxy.port}/0"
    with TestClient(create_app(settings.model_copy(update={"broker_url": url}))) as c:
        assert submit(c, admin_headers).status_code == 201
        proxy.stop()
        r = submit(c, admin_headers)
        assert r.status_code == 503 and "queue is unavailable" in r.json()["detail"]
        proxy.start()
        assert submit(c, admin_headers).status_code == 201
        proxy.stop()
