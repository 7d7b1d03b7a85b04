"""Prompt templates, answer readers and redaction, without a server."""

from __future__ import annotations

import jinja2
import pytest

from agents.llm import redact
from agents.llm.parse import ParseFailure, read_code, read_plan
from agents.llm.redaction import register_secret
from agents.llm.views import CLIP, candidate_rules, clip, coder_view, planner_view
from agents.prompts import TEMPLATE_DIR, render
from agents.records import Plan, Step
from kloom import static_check
from tests.agents.llm.context_samples import planning_context

TEMPLATES = sorted(p.name for p in TEMPLATE_DIR.glob("*.j2") if not p.name.startswith("_"))


def test_every_template_is_strict_about_missing_variables():
    assert TEMPLATES == ["coder_system.j2", "coder_user.j2", "planner_system.j2", "planner_user.j2"]
    for name in TEMPLATES:
        with pytest.raises(jinja2.UndefinedError):
            render(name)


@pytest.mark.parametrize("full", [True, False])
def test_templates_render_for_full_and_empty_contexts(full):
    ctx = planning_context(history=full, kb=full, baseline=full)
    plan = Plan(strategy="overlap_chunks", params={"chunks": 4}, source="llm")
    for name in ("planner_system.j2", "planner_user.j2"):
        assert "ag_matmul" in render(name, **planner_view(ctx)) or name == "planner_system.j2"
    coder = {**coder_view(plan, ctx), "rules": candidate_rules()}
    for name in ("coder_system.j2", "coder_user.j2"):
        assert render(name, **coder).strip()


def test_candidate_rules_follow_the_static_checker():
    rules = render("coder_system.j2", **coder_view(Plan(strategy="x"), planning_context()), rules=candidate_rules())
    for module in static_check.ALLOWED_MODULES - {"__future__"}:
        assert module in rules
    for builtin in static_check.DENIED_BUILTINS:
        assert builtin in rules
    assert "os.path" in rules and "cpu_count" in rules


def test_long_feedback_is_clipped_in_the_history():
    ctx = planning_context()
    ctx.history.append(Step(index=2, plan=Plan(strategy="fused_triton"), status="runtime_error", error="E" * 10_000))
    view = planner_view(ctx)
    assert len(view["history"][-1]["error"]) < CLIP["feedback"] + 100
    assert "more characters cut" in view["history"][-1]["error"]
    assert clip("short", 10) == "short"


def test_coder_builds_on_the_planned_step_and_omits_a_failure_equal_to_it():
    ctx = planning_context()
    best_code = ctx.history[0].candidate_code
    ctx.history.append(Step(index=2, plan=Plan(strategy="repair"), status="timeout", candidate_code=best_code, error="hung"))
    view = coder_view(Plan(strategy="repair", base_step=1), ctx)
    assert view["base"]["index"] == 1  # the planned base, though it was incorrect
    assert view["failure"]["index"] == 2 and view["failure"]["code"] != ""
    view = coder_view(Plan(strategy="repair", base_step=0), ctx)
    assert view["failure"]["code"] == ""  # the failed code is the base code: shown once
    assert "hung" in view["failure"]["text"]


# Reading answers ---------------------------------------------------------------------------------
def test_read_plan_takes_the_first_object_with_a_strategy():
    answer = read_plan('Options: {"a": 1} and then {"strategy": " cuda_graph ", "params": {"k": 2}, "base_step": 3}')
    assert answer.strategy == "cuda_graph" and answer.params == {"k": 2} and answer.base_step == 3
    assert isinstance(read_plan('{"strategy": "x", "base_step": "two"}'), ParseFailure)
    assert isinstance(read_plan('{"strategy": "x", "base_step": true}'), ParseFailure)
    assert read_plan('{"strategy": "STOP"}').stops
    assert isinstance(read_plan("{not json"), ParseFailure)


def test_read_code_prefers_python_blocks_and_the_last_one_defining_model_new():
    first = "class ModelNew:\n    version = 1\n"
    last = "class ModelNew:\n    version = 2\n"
    text = f"```\nclass ModelNew: pass\n```\n```python\n{first}```\n```python\n{last}```"
    assert read_code(text) == last
    assert read_code(f"```\n{first}```") == first  # an unlabelled fence when there is no python one


# Redaction ---------------------------------------------------------------------------------------
def test_redact_removes_configured_values_env_secrets_and_key_shapes(monkeypatch):
    monkeypatch.setenv("SOME_PROVIDER_API_KEY", "plain-looking-value-123")
    register_secret("registered-secret-value")
    text = (
        "key sk-proj-abcdefghijklmnop1234 and sk-ant-api03-XYZxyz0123456789, google AIzaSyA1234567890abcdefghijklmnopqrstu, "
        "hf_abcdefghijklmnopqrstuvwx, header Authorization: Bearer abc.def.ghi-12345, "
        'json {"api_key": "zzzzzzzzzzzz"} env plain-looking-value-123 reg registered-secret-value, AKIAABCDEFGHIJKLMNOP'
    )
    out = redact(text)
    for secret in (
        "sk-proj-abcdefghijklmnop1234",
        "sk-ant-api03",
        "AIzaSy",
        "hf_abcdef",
        "abc.def.ghi",
        "zzzzzzzzzzzz",
        "plain-looking-value-123",
        "registered-secret-value",
        "AKIAABCDEFGHIJKLMNOP",
    ):
        assert secret not in out
    assert '"api_key": "[REDACTED]"' in out and "Bearer [REDACTED]" in out


def test_redact_leaves_ordinary_text_and_code_alone():
    code = "def forward(self, x):\n    mask = x > 0  # task-specific\n    return torch.where(mask, x, 0)\n"
    assert redact(code) == code
    assert redact("") == ""
