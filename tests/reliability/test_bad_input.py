"""Malformed workloads and candidates: each gets a clear error, and the database holds nothing
half-written afterwards (checked after each). Workloads come in over the API and, when they pass
inspection but fail when run, through the worker's task; candidates come from a scripted coder in
a job recorded by the service's own sink."""

from __future__ import annotations

import pytest

from agents.loop import run_job
from agents.records import JobSpec, Limits
from reliability_helpers import CORRECT, EVAL_WORKLOADS, FAST_EVAL_ENV, ScriptedCoder, ScriptedPlanner, consistency_problems, table_counts
from service_helpers import TINY_WORKLOAD, submit
from services.db import jobs as job_ops
from services.db.models import Job
from services.db.sink import DBSink
from services.worker.celery_app import create_celery_app
from services.worker.evaluator import EvalSettings, Evaluator
from services.worker.tasks import execute_job

NESTED = TINY_WORKLOAD + "\nX = " + "-" * 100_000 + "1\n"
CHAINED = TINY_WORKLOAD + "\nX = 1" + " + 1" * 200_000 + "\n"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (NESTED, "nested too deeply"),
        (CHAINED, "nested too deeply"),
        (TINY_WORKLOAD + "\x00", "NUL byte"),
        ("", "no class Model"),
        ("   \n\n\t\n", "no class Model"),
        (TINY_WORKLOAD.replace("WORLD_SIZES = [1, 2]", "WORLD_SIZES = 'two'"), "WORLD_SIZES must be"),
        (TINY_WORKLOAD.replace("class Model(nn.Module):", "Model = 3\nclass Other(nn.Module):"), "Model must be a class"),
        (TINY_WORKLOAD.replace("def get_inputs():", "get_inputs = 4\ndef other():"), "get_inputs"),
        ("\ufeff" + TINY_WORKLOAD, "syntax error"),
    ],
    ids=["nested", "chained", "nul", "empty", "blank", "world_sizes", "model_not_class", "get_inputs_not_function", "bom"],
)
def test_malformed_workloads_are_refused_with_a_reason_and_leave_nothing(client, new_key, sessions, source, message):
    headers = new_key()
    before = table_counts(sessions)
    r = submit(client, headers, source=source)
    assert r.status_code == 422, r.text
    assert message in r.json()["detail"] and r.json()["detail"].startswith("malformed workload")
    assert table_counts(sessions) == before


REFERENCES = {
    # name: (what replaces Model.forward's body, the reason the job must give)
    "raises": ("        raise ValueError('the reference is broken')\n", "ValueError: the reference is broken"),
    "deadlocks": ("        out = x * 2\n        dist.all_reduce(out)\n        if dist.get_rank() == 0:\n            dist.all_reduce(out)\n        return out\n",
                  "the reference itself failed (timeout)"),
    "returns_nan": ("        return x * float('nan')\n", "NaN or Inf"),
}


def _workload(body: str) -> str:
    start = TINY_WORKLOAD.index("    def forward(self, x):\n") + len("    def forward(self, x):\n")
    end = TINY_WORKLOAD.index("\n\ndef get_init_inputs")
    return TINY_WORKLOAD[:start] + body + TINY_WORKLOAD[end:]


@pytest.mark.slow
@pytest.mark.parametrize("name", [*REFERENCES, "inputs_not_a_list"])
def test_a_workload_whose_reference_fails_fails_its_job_with_the_reason(client, new_key, sessions, settings, monkeypatch, name):
    limits = {"KLOOM_EVAL_CALL_TIMEOUT_S": "6", "KLOOM_EVAL_LOAD_TIMEOUT_S": "6", "KLOOM_EVAL_TIMING_TIMEOUT_S": "6"}
    for key, value in {**FAST_EVAL_ENV, **limits}.items():
        monkeypatch.setenv(key, value)
    if name == "inputs_not_a_list":
        source, reason = TINY_WORKLOAD.replace("return [torch.randn(8, 16)]", "return {'x': torch.randn(8, 16)}"), "get_inputs() must return a list or tuple"
    else:
        body, reason = REFERENCES[name]
        source = _workload(body)
    headers = new_key()
    job_id = submit(client, headers, source=source, device_kind="cpu").json()["id"]
    # The worker's task, run here: it claims the job and runs it exactly as a worker does.
    assert execute_job(create_celery_app(settings), job_id, worker_id="bad-input@test") == "failed"
    job = client.get(f"/api/v1/jobs/{job_id}", headers=headers).json()
    assert job["state"] == "failed" and reason in job["stop_reason"], job["stop_reason"]
    assert job["num_steps"] == 0
    assert consistency_problems(sessions, [job_id]) == []


_WRONG_TYPE = CORRECT.read_text().replace("        return y\n", "        return 'not a tensor'\n")
_WRONG_COUNT = CORRECT.read_text().replace("        return y\n", "        return y, y\n")
CANDIDATES = {
    # name: (source, statuses that are right, text of the recorded reason)
    "syntax_error": ("class ModelNew(:\n", {"compile_error"}, "syntax error"),
    "no_model_new": ("import torch\nclass Something:\n    pass\n", {"compile_error"}, "no ModelNew"),
    "returns_a_string": (_WRONG_TYPE, {"incorrect", "runtime_error"}, ""),
    "returns_two_outputs": (_WRONG_COUNT, {"incorrect"}, ""),
    "huge": (CORRECT.read_text() + ("#" * 99 + "\n") * 20_000, {"compile_error"}, "the limit is"),
    "nested": (CORRECT.read_text() + "\nX = " + "-" * 100_000 + "1\n", {"compile_error"}, "nested too deeply"),
    "nul_byte": (CORRECT.read_text() + "\x00", {"compile_error"}, "null bytes"),
    "not_utf8": (CORRECT.read_text() + "\n# \udcff\n", {"compile_error"}, "surrogates not allowed"),
    "correct": (CORRECT.read_text(), {"correct"}, ""),
}


@pytest.mark.slow
def test_malformed_candidates_are_recorded_with_their_error_and_the_job_goes_on(client, new_key, sessions):
    headers = new_key()
    source = (EVAL_WORKLOADS / "linear_allreduce.py").read_text()
    job_id = submit(client, headers, source=source, filename="linear_allreduce.py", device_kind="cpu").json()["id"]
    with sessions() as session, session.begin():
        claim = job_ops.claim(session, job_id, "bad-candidates@test", max_attempts=3, dead_after_s=60)
    sink = DBSink(sessions, job_id, claim.attempt)
    names = list(CANDIDATES)
    workload = EVAL_WORKLOADS / "linear_allreduce.py"
    spec = JobSpec(workload=str(workload), world_size=2, limits=Limits(max_iters=len(names)), use_kb=False, job_id=job_id)
    settings = EvalSettings.for_device("cpu", call_timeout_s=10, load_timeout_s=10, timing_budget_s=0.1, min_iters=3, trials=2)
    with Evaluator("cpu", settings) as evaluator:
        run_job(spec, sink, evaluator=evaluator, planner=ScriptedPlanner(names), coder=ScriptedCoder({n: c[0] for n, c in CANDIDATES.items()}))
    steps = client.get(f"/api/v1/jobs/{job_id}/steps", headers=headers).json()["data"]
    assert [s["data"]["plan"]["strategy"] for s in steps] == names
    for step in steps:
        name = step["data"]["plan"]["strategy"]
        _, statuses, text = CANDIDATES[name]
        assert step["status"] in statuses, f"{name}: {step['status']} ({step['data']['error']})"
        assert text in step["data"]["error"], f"{name}: {step['data']['error']!r}"
        if step["status"] != "correct":
            assert step["data"]["error"] or step["data"]["feedback"], f"{name} recorded without a reason"
    job = client.get(f"/api/v1/jobs/{job_id}", headers=headers).json()
    assert job["state"] == "succeeded" and job["best_step_index"] == names.index("correct")
    assert consistency_problems(sessions, [job_id]) == []
    with sessions() as session:
        assert session.get(Job, job_id).num_steps == len(names)


@pytest.mark.parametrize(
    ("method", "path", "fields"),
    [
        ("GET", "/api/v1/batches/a%00b", None),
        ("GET", "/api/v1/jobs?workload=a%00", None),
        ("GET", "/api/v1/jobs?offset=99999999999999999999", None),
        ("GET", "/api/v1/kb/strategies?name=a%00", None),
        ("POST", "/api/v1/jobs", {"strategist": "a\x00b"}),
    ],
    ids=["nul_in_path", "nul_in_query", "offset_out_of_range", "nul_in_kb_query", "nul_in_form"],
)
def test_values_the_database_cannot_hold_are_refused_not_a_server_error(client, new_key, sessions, method, path, fields):
    """Found by the fuzzing: PostgreSQL refuses NUL characters and out-of-range numbers; the API
    answers 422 with its reason, and writes nothing."""
    headers = new_key()
    before = table_counts(sessions)
    r = submit(client, headers, **fields) if fields else client.request(method, path, headers=headers)
    # Numbers are now bounded by the schema (test_api_refusals.py); the database's refusal stays the backstop.
    detail = r.json()["detail"]
    assert r.status_code == 422 and ("cannot be used" in detail or "less than or equal to" in detail), r.text
    assert table_counts(sessions) == before
