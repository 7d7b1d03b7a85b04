"""LLMPlanner and LLMCoder against scripted answers, through the client and the real litellm path."""

from __future__ import annotations

import json

import pytest

from agents.limits import Budget, LimitReached
from agents.llm import LLMAuthError, LLMCoder, LLMPlanner, ModelOutputError
from agents.records import Limits, Plan, Usage
from kloom.static_check import check_candidate
from tests.agents.llm.context_samples import BEST_CODE, FAILED_CODE, FAILURE_MESSAGE, GOOD_CODE, WORKLOAD, planning_context
from tests.fakes.openai_server import Reply

PLAN_JSON = {
    "strategy": "cuda_graph",
    "params": {"warmup": 3, "static_inputs": True},
    "rationale": "Launch overhead dominates: the reference runs at 5% of its link floor.",
    "base_step": 0,
}


def _sent(server, role: str) -> str:
    (request,) = server.chat_requests
    return next(m["content"] for m in request.body["messages"] if m["role"] == role)


# Planner -------------------------------------------------------------------------------------------
def test_planner_returns_the_models_plan_and_its_usage(server, make_client):
    server.add(Reply.text(json.dumps(PLAN_JSON), prompt_tokens=2000, completion_tokens=80))
    ctx = planning_context()
    plan, usage = LLMPlanner(make_client()).plan(ctx)

    assert plan == Plan(strategy="cuda_graph", params={"warmup": 3, "static_inputs": True}, rationale=PLAN_JSON["rationale"], source="llm", base_step=0)
    assert usage.tokens == 2080 and usage.calls == 1 and usage.cost_usd > 0
    assert ctx.budget.spent.tokens == 2080  # the client charged the job's budget

    user = _sent(server, "user")
    assert WORKLOAD.strip() in user
    assert '- collectives: ["allgather"]' in user and "- patterns: " in user and "- family: tensor_parallel" in user  # the analysis
    assert "dominant term: **link**" in user and "0.021 ms" in user and "0.44 ms" in user
    assert "step 1: `overlap_chunks`" in user and "the gathered buffer is never filled" in user
    assert "speedup 1.42x" in user and "92% of the time in gloo allgather" in user
    assert "avoid `torch_compile`" in user and "compile time over limit" in user
    assert "launch overhead 70%" in user and "ag_gemm_wide" in user
    assert "measured 1.90x on similar workloads" in user
    assert "JSON object" in _sent(server, "system")


def test_planner_reads_a_fenced_object_among_prose(server, make_client):
    answer = "Looking at the roofline, link dominates.\n```json\n" + json.dumps(PLAN_JSON, indent=2) + "\n```\nGood luck."
    server.add(Reply.text(answer))
    plan, _ = LLMPlanner(make_client()).plan(planning_context())
    assert plan.strategy == "cuda_graph" and plan.params["warmup"] == 3


def test_planner_builds_on_the_best_step_when_the_model_names_none_or_a_bad_one(server, make_client):
    server.add(
        Reply.text(json.dumps({**PLAN_JSON, "base_step": None})),
        Reply.text(json.dumps({**PLAN_JSON, "base_step": 42})),
    )
    planner = LLMPlanner(make_client())
    assert planner.plan(planning_context())[0].base_step == 0
    assert planner.plan(planning_context())[0].base_step == 0
    server.add(Reply.text(json.dumps({"strategy": "torch_compile"})))
    first, _ = planner.plan(planning_context(history=False))
    assert first.base_step is None and first.params == {}


def test_planner_stop_means_nothing_left(server, make_client):
    server.add(Reply.text('{"strategy": "stop", "rationale": "at 95% of the floor"}'))
    plan, usage = LLMPlanner(make_client()).plan(planning_context())
    assert plan is None and usage.calls == 1


@pytest.mark.parametrize(
    "answer, reason",
    [
        ("I would try a CUDA graph next.", "no JSON object"),
        ('{"strategy": "cuda_graph", "params": [1, 2]}', "'params' must be an object"),
        ('{"plan": "cuda_graph"}', "no 'strategy'"),
        ('{"strategy": ""}', "non-empty"),
        ("", "empty answer"),
        (None, "empty answer"),
    ],
)
def test_unusable_planner_answers_raise_model_output_error_with_usage(server, make_client, answer, reason):
    server.add(Reply.text(answer, prompt_tokens=900, completion_tokens=12))
    ctx = planning_context()
    with pytest.raises(ModelOutputError, match=reason) as info:
        LLMPlanner(make_client()).plan(ctx)
    assert info.value.usage.tokens == 912
    assert ctx.budget.spent.tokens == 912  # an unusable answer still cost tokens


def test_planner_renders_a_first_step_without_baseline_history_or_kb(server, make_client):
    server.add(Reply.text(json.dumps(PLAN_JSON)))
    LLMPlanner(make_client()).plan(planning_context(history=False, kb=False, baseline=False))
    user = _sent(server, "user")
    assert "No steps yet" in user and "No baseline measured yet" in user and "Nothing recorded" in user


# Coder ---------------------------------------------------------------------------------------------
def _plan() -> Plan:
    return Plan(strategy="cuda_graph", params={"warmup": 3}, rationale="launch-bound: capture the step", source="llm", base_step=0)


def test_coder_extracts_the_candidate_file(server, make_client):
    answer = f"I replaced all_gather + cat with one all_gather_into_tensor.\n\n```python\n{GOOD_CODE}```\n"
    server.add(Reply.text(answer, prompt_tokens=3000, completion_tokens=400))
    ctx = planning_context()
    out = LLMCoder(make_client()).write(_plan(), ctx)

    assert out.error == "" and out.code == GOOD_CODE
    assert check_candidate(out.code) == []
    assert out.usage.tokens == 3400 and ctx.budget.spent.tokens == 3400

    system, user = _sent(server, "system"), _sent(server, "user")
    assert "einops" in system and "getenv" in system and "ModelNew" in system  # the static checker's allow-list
    assert "launch-bound: capture the step" in user and "`cuda_graph`" in user
    assert WORKLOAD.strip() in user
    assert BEST_CODE.strip() in user  # the candidate it builds on
    assert FAILURE_MESSAGE in user and FAILED_CODE.strip() in user  # the last failure, for repair
    assert "ag_gemm_wide" in user  # the most similar KB kernel


def test_coder_takes_the_block_that_defines_model_new(server, make_client):
    answer = f"First a helper test:\n```python\nprint('not it')\n```\nThe file:\n```py\n{GOOD_CODE}```"
    server.add(Reply.text(answer))
    assert LLMCoder(make_client()).write(_plan(), planning_context()).code == GOOD_CODE


@pytest.mark.parametrize(
    "answer, finish_reason, reason",
    [
        ("Sure! Use a CUDA graph.", "stop", "no ```python code block"),
        ("", "stop", "empty answer"),
        (None, "stop", "empty answer"),
        ("```python\nclass ModelNew(nn.Module:\n    pass\n```", "stop", "does not parse: line 1"),
        ("```python\nimport torch\n\nclass Model2(torch.nn.Module):\n    pass\n```", "stop", "defines no ModelNew"),
        ("```python\ndef f():\n    class ModelNew:\n        pass\n```", "stop", "no ModelNew class at module level"),
        (f"```python\n{GOOD_CODE[:200]}", "length", "cut off"),
    ],
)
def test_unusable_coder_answers_are_a_failed_output_not_an_exception(server, make_client, answer, finish_reason, reason):
    server.add(Reply.text(answer, finish_reason=finish_reason, prompt_tokens=500, completion_tokens=7))
    out = LLMCoder(make_client()).write(_plan(), planning_context())
    assert out.code is None
    assert reason in out.error
    assert out.usage.tokens == 507


def test_coder_writes_the_first_candidate_from_the_reference_alone(server, make_client):
    server.add(Reply.text(f"```python\n{GOOD_CODE}```"))
    out = LLMCoder(make_client()).write(Plan(strategy="torch_compile", source="llm"), planning_context(history=False, kb=False))
    assert out.code == GOOD_CODE
    user = _sent(server, "user")
    assert "build on" not in user and "failed" not in user and "similar workload" not in user


def test_api_errors_propagate_from_the_roles(server, make_client):
    server.add(Reply.unauthorized(), Reply.unauthorized())
    with pytest.raises(LLMAuthError):
        LLMCoder(make_client()).write(_plan(), planning_context())
    with pytest.raises(LLMAuthError):
        LLMPlanner(make_client()).plan(planning_context())


def test_roles_stop_at_the_budget(server, make_client):
    server.add(Reply.text(json.dumps(PLAN_JSON)), Reply.text(f"```python\n{GOOD_CODE}```"))
    ctx = planning_context(Budget(Limits(max_tokens=10), spent=Usage(prompt_tokens=10)))
    with pytest.raises(LimitReached):
        LLMPlanner(make_client()).plan(ctx)
    with pytest.raises(LimitReached):
        LLMCoder(make_client()).write(_plan(), ctx)
    assert server.requests == []


def test_an_answer_without_choices_is_an_empty_answer(server, make_client):
    server.add(Reply.text("", no_choices=True), Reply.text("", no_choices=True))
    out = LLMCoder(make_client()).write(_plan(), planning_context())
    assert out.code is None and "empty answer" in out.error
    with pytest.raises(ModelOutputError, match="empty answer"):
        LLMPlanner(make_client()).plan(planning_context())
