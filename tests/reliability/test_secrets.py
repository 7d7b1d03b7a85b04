"""Credentials never leak: recognisable fake secrets (the admin key, a user's key, an LLM key, the
database's and the broker's passwords) are given to a real API process and a real worker, a job
runs with a model (a scripted one on loopback) whose first candidate prints its environment and
hangs, so that its log is stored; then the logs, every response and the whole database are
searched for them."""

from __future__ import annotations

import os

import httpx
import pytest
from pydantic import SecretStr

from kloom.db import create_db_engine, session_factory
from reliability_helpers import ApiServer, RedisServer, StreamFollower, database_text, start_worker
from service_helpers import stop_process, submit, wait_for
from tests.fakes.openai_server import FakeOpenAIServer, Reply

TAG = os.urandom(4).hex()
LLM_KEY = f"sk-SECRET-llm-{TAG}"
REDIS_PASSWORD = f"SECRET-redis-{TAG}"
DB_PASSWORD = f"SECRET-pg-{TAG}"
ADMIN_KEY = f"kl_SECRET-admin-{TAG}"
CORRECT = (os.path.dirname(__file__) + "/../evaluator/candidates/correct.py")
WORKLOAD = (os.path.dirname(__file__) + "/../evaluator/workloads/linear_allreduce.py")

#: Prints everything it can see of its environment, then hangs: its rank is killed at the time
#: limit, and the rank's log (with the printout) is stored with the step.
PRINTS_AND_HANGS = '''import os
import torch
import torch.distributed as dist
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)

    def forward(self, x):
        print("ENVIRONMENT", dict(os.environ), flush=True)
        while True:
            x = x + 1
'''


def _answer(code: str) -> Reply:
    text = '{"strategy": "rewrite", "params": {}, "rationale": "scripted"}\n\n```python\n' + code + "```\n"
    return Reply.text(text, prompt_tokens=300, completion_tokens=100)


@pytest.mark.slow
def test_keys_and_credentials_appear_in_no_log_response_or_record(settings, tmp_path):
    redis = RedisServer(tmp_path, password=REDIS_PASSWORD)
    redis.start()
    api = worker = None
    try:
        s = settings.model_copy(update={
            "broker_url": redis.url,
            "broker_key_prefix": "",
            "database_url": settings.db_url.replace("postgres@", f"postgres:{DB_PASSWORD}@"),
            "admin_key": SecretStr(ADMIN_KEY),
        })
        assert DB_PASSWORD in s.db_url and REDIS_PASSWORD in s.broker
        with FakeOpenAIServer(api_key=LLM_KEY) as llm:
            llm.add(_answer(PRINTS_AND_HANGS), _answer(PRINTS_AND_HANGS), *[_answer(open(CORRECT).read()) for _ in range(6)])
            llm_env = {"OPENAI_API_KEY": LLM_KEY, "KLOOM_LLM_API_BASE": llm.api_base, "KLOOM_LLM_MAX_RETRIES": "0",
                       "LITELLM_LOCAL_MODEL_COST_MAP": "True", "KLOOM_EVAL_LOAD_TIMEOUT_S": "10"}
            api = ApiServer(s, tmp_path / "api.log", **llm_env)
            api.start()
            worker = start_worker(s, tmp_path / "worker.log", **llm_env)
            responses: list[str] = []
            admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
            with httpx.Client(base_url=api.base, timeout=30) as client:
                made = client.post("/api/v1/keys", json={"name": "alice"}, headers=admin)
                user_key = made.json()["key"]
                alice = {"Authorization": f"Bearer {user_key}"}
                r = submit(client, alice, source=open(WORKLOAD).read(), filename="linear_allreduce.py", device_kind="cpu",
                           max_iters=2, strategist="openai/gpt-4o-mini", use_kb="false")
                assert r.status_code == 201, r.text
                job_id = r.json()["id"]
                stream = StreamFollower(api.base, job_id, alice).start()
                assert stream.done.wait(300) and not stream.error, stream.error
                job = client.get(f"/api/v1/jobs/{job_id}", headers=alice).json()
                assert job["state"] == "succeeded", job
                for path in (f"/jobs/{job_id}", f"/jobs/{job_id}/steps", f"/jobs/{job_id}/best", f"/jobs/{job_id}/workload",
                             f"/jobs/{job_id}/trajectory", "/jobs", "/keys", "/workers", "/metrics", "/health"):
                    responses.append(client.get(f"/api/v1{path}", headers=admin if path in ("/keys", "/workers") else alice).text)
                responses += [str(e) for e in stream.events]
                steps = client.get(f"/api/v1/jobs/{job_id}/steps", headers=alice).json()["data"]
        # The job really used the key, and the crashing candidate's printout is stored.
        assert {r.headers.get("authorization") for r in llm.chat_requests} == {f"Bearer {LLM_KEY}"}
        assert [st["status"] for st in steps] == ["timeout", "correct"], [st["status"] for st in steps]
        assert "ENVIRONMENT" in steps[0]["data"]["evaluation"]["error"]["log_tail"]
        stop_process(worker)
        worker = None
        api.stop()
        sessions = session_factory(create_db_engine(settings.db_url))
        places = {
            "the worker's log": (tmp_path / "worker.log").read_text(errors="replace"),
            "the API's log": (tmp_path / "api.log").read_text(errors="replace"),
            "responses": "\n".join(responses),
            "the database": database_text(sessions),
        }
        secrets = {"LLM key": LLM_KEY, "admin key": ADMIN_KEY, "user key": user_key, "database password": DB_PASSWORD,
                   "broker password": REDIS_PASSWORD}
        leaks = [f"{name} in {where}" for name, value in secrets.items() for where, content in places.items() if value in content]
        assert not leaks, leaks
        assert len(places["the database"]) > 10_000 and len(places["the worker's log"]) > 1_000
    finally:
        if worker is not None:
            stop_process(worker)
        if api is not None:
            api.stop()
        redis.stop()
