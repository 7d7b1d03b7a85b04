"""LLMClient against a scripted OpenAI-compatible server, through the real litellm path."""

from __future__ import annotations

import logging
import time

import litellm
import pytest

from agents.limits import Budget, LimitReached
from agents.llm import (
    LLMAuthError,
    LLMClient,
    LLMConfigError,
    LLMContextError,
    LLMRequestError,
    LLMSettings,
    LLMUnavailable,
)
from agents.records import Limits, Usage
from tests.fakes.openai_server import Reply

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]


def test_answer_usage_and_price_of_a_priced_model(server, make_client, budget, api_key):
    server.add(Reply.text("hi", prompt_tokens=1200, completion_tokens=300))
    completion = make_client().complete(MESSAGES, budget=budget)

    assert completion.text == "hi"
    assert completion.attempts == 1
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens, completion.usage.calls) == (1200, 300, 1)
    prompt_cost, output_cost = litellm.cost_per_token(model="gpt-4o-mini", prompt_tokens=1200, completion_tokens=300)
    assert completion.usage.cost_usd == pytest.approx(prompt_cost + output_cost)
    assert completion.usage.cost_usd > 0
    assert budget.spent.tokens == 1500 and budget.spent.cost_usd == pytest.approx(completion.usage.cost_usd)

    (request,) = server.chat_requests
    assert request.headers["authorization"] == f"Bearer {api_key}"  # the key came from the named variable
    assert request.body["model"] == "gpt-4o-mini"
    assert request.body["messages"] == MESSAGES
    assert request.body["max_tokens"] == 8192


def test_unpriced_model_counts_tokens_and_says_cost_is_unknown(server, make_client, budget):
    server.add(Reply.text("hi", prompt_tokens=10, completion_tokens=5), Reply.text("again"))
    client = make_client("openai/kloom-local-coder-7b")
    first = client.complete(MESSAGES, budget=budget)
    assert first.usage.cost_usd is None
    assert first.usage.tokens == 15
    client.complete(MESSAGES, budget=budget)
    assert budget.spent.cost_usd is None and budget.spent.calls == 2


def test_missing_usage_is_estimated_and_priced_from_the_count(server, make_client, budget):
    server.add(Reply.text("def f():\n    return 1\n", include_usage=False))
    completion = make_client().complete(MESSAGES, budget=budget)
    assert completion.tokens_estimated
    assert completion.usage.prompt_tokens > 0 and completion.usage.completion_tokens > 0
    assert completion.usage.cost_usd is not None and completion.usage.cost_usd > 0
    assert budget.spent.tokens == completion.usage.tokens


def test_rate_limit_is_retried_until_it_succeeds(server, make_client, budget):
    server.add(Reply.rate_limited(), Reply.rate_limited(), Reply.text("done"))
    completion = make_client().complete(MESSAGES, budget=budget)
    assert completion.text == "done"
    assert completion.attempts == 3
    assert len(server.chat_requests) == 3
    assert budget.spent.calls == 1  # failed attempts cost nothing


def test_retry_after_header_is_honoured(server, make_client, budget):
    server.add(Reply.rate_limited(retry_after_s=0.3), Reply.text("done"))
    make_client().complete(MESSAGES, budget=budget)
    first, second = server.chat_requests
    assert second.at - first.at >= 0.3


def test_transient_errors_that_persist_raise_unavailable_after_the_retries(server, make_client, budget):
    server.add(*[Reply.rate_limited() for _ in range(5)])
    with pytest.raises(LLMUnavailable) as info:
        make_client(max_retries=3).complete(MESSAGES, budget=budget)
    assert len(server.chat_requests) == 4  # the first attempt and 3 retries
    assert info.value.attempts == 4 and info.value.status_code == 429
    assert budget.spent.calls == 0


def test_slow_answer_times_out_and_is_retried(server, make_client, budget):
    server.add(Reply.text("late", delay_s=1.5), Reply.text("on time"))
    completion = make_client(timeout_s=0.4).complete(MESSAGES, budget=budget)
    assert completion.text == "on time"
    assert len(server.chat_requests) == 2


@pytest.mark.parametrize("status", [500, 502, 503])
def test_server_errors_are_retried(server, make_client, budget, status):
    server.add(Reply.server_error(status), Reply.text("recovered"))
    assert make_client().complete(MESSAGES, budget=budget).text == "recovered"
    assert len(server.chat_requests) == 2


def test_unreachable_server_raises_unavailable(make_client, budget):
    client = make_client(api_base="http://127.0.0.1:9/v1", max_retries=1)
    with pytest.raises(LLMUnavailable) as info:
        client.complete(MESSAGES, budget=budget)
    assert info.value.attempts == 2


def test_authentication_error_is_not_retried(server, make_client, budget):
    server.add(Reply.unauthorized(), Reply.text("never reached"))
    with pytest.raises(LLMAuthError) as info:
        make_client().complete(MESSAGES, budget=budget)
    assert info.value.status_code == 401 and info.value.attempts == 1
    assert len(server.chat_requests) == 1


def test_wrong_key_is_an_authentication_error(server, make_client, budget, monkeypatch):
    monkeypatch.setenv("KLOOM_TEST_OTHER_KEY", "sk-kloomtest-wrong-0123456789abcdef")
    server.add(Reply.text("never reached"))
    with pytest.raises(LLMAuthError):
        make_client(api_key_env="KLOOM_TEST_OTHER_KEY").complete(MESSAGES, budget=budget)
    assert len(server.chat_requests) == 1


def test_context_window_error_is_not_retried(server, make_client, budget):
    server.add(Reply.context_too_long(), Reply.text("never reached"))
    with pytest.raises(LLMContextError) as info:
        make_client().complete(MESSAGES, budget=budget)
    assert info.value.status_code == 400
    assert len(server.chat_requests) == 1


def test_other_bad_requests_are_not_retried(server, make_client, budget):
    server.add(Reply.error(400, "Unsupported parameter: 'foo'.", "invalid_request_error"), Reply.text("never reached"))
    with pytest.raises(LLMRequestError) as info:
        make_client().complete(MESSAGES, budget=budget)
    assert "Unsupported parameter" in str(info.value)
    assert len(server.chat_requests) == 1


def test_missing_key_variable_is_a_config_error_before_any_request(server, make_client, budget, monkeypatch):
    client = make_client()
    monkeypatch.delenv(client.settings.api_key_env)
    with pytest.raises(LLMConfigError, match=client.settings.api_key_env):
        client.complete(MESSAGES, budget=budget)
    assert server.requests == []


def test_no_model_is_a_config_error():
    with pytest.raises(LLMConfigError):
        LLMClient(LLMSettings(model=""))


# Limits ------------------------------------------------------------------------------------------
def test_token_limit_stops_the_client_before_a_call(server, make_client):
    budget = Budget(Limits(max_tokens=100), spent=Usage(prompt_tokens=80, completion_tokens=20))
    server.add(Reply.text("never reached"))
    with pytest.raises(LimitReached, match="token limit"):
        make_client().complete(MESSAGES, budget=budget)
    assert server.requests == []


def test_money_limit_stops_the_second_call(server, make_client):
    budget = Budget(Limits(budget_usd=1e-6))
    server.add(Reply.text("first", prompt_tokens=1000, completion_tokens=1000), Reply.text("never reached"))
    client = make_client()
    client.complete(MESSAGES, budget=budget)
    with pytest.raises(LimitReached, match="budget"):
        client.complete(MESSAGES, budget=budget)
    assert len(server.chat_requests) == 1


def test_wall_time_limit_is_checked_before_each_retry(server, make_client):
    budget = Budget(Limits(max_wall_s=0.25))
    server.add(Reply.rate_limited(retry_after_s=0.4), Reply.text("never reached"))
    with pytest.raises(LimitReached, match="wall-time"):
        make_client(max_retries=3).complete(MESSAGES, budget=budget)
    assert len(server.chat_requests) == 1


# Key hygiene ---------------------------------------------------------------------------------------
def test_the_key_never_leaves_the_client(server, make_client, api_key, caplog, capsys):
    caplog.set_level(logging.DEBUG)
    leaky = f"Incorrect API key provided: {api_key}. You can find your API key at ..."
    server.add(
        Reply.error(401, leaky, "invalid_request_error", "invalid_api_key"),
        Reply.error(400, f"bad request with api_key={api_key}", "invalid_request_error"),
        *[Reply.error(503, f"overloaded for key {api_key}", "server_error") for _ in range(3)],
        Reply.text(f"your key is {api_key}"),
    )
    client = make_client()
    budget = Budget(Limits())
    raised = []
    for expected in (LLMAuthError, LLMRequestError, LLMUnavailable):
        with pytest.raises(expected) as info:
            client.complete(MESSAGES, budget=budget)
        raised.append(info.value)
    completion = client.complete(MESSAGES, budget=budget)

    assert len(server.chat_requests) == 6
    assert all(r.headers["authorization"] == f"Bearer {api_key}" for r in server.chat_requests)
    texts = [caplog.text, *capsys.readouterr(), repr(completion), completion.text, repr(budget.spent)]
    for exc in raised:
        assert exc.__cause__ is None and exc.__suppress_context__
        texts += [str(exc), repr(exc), repr(exc.args)]
    assert "REDACTED" in str(raised[0])
    assert any("retrying" in r.message for r in caplog.records)  # the retries were logged ...
    for text in texts:
        assert api_key not in text  # ... and nothing anywhere holds the key


def test_settings_from_environment(monkeypatch):
    monkeypatch.setenv("KLOOM_LLM_MODEL", "hosted_vllm/qwen")
    monkeypatch.setenv("KLOOM_LLM_API_BASE", "http://127.0.0.1:8000/v1")
    monkeypatch.setenv("KLOOM_LLM_API_KEY_ENV", "VLLM_KEY")
    monkeypatch.setenv("KLOOM_LLM_TEMPERATURE", "none")
    monkeypatch.setenv("KLOOM_LLM_MAX_RETRIES", "7")
    monkeypatch.setenv("KLOOM_LLM_TIMEOUT_S", "12.5")
    settings = LLMSettings.from_env(max_output_tokens=1000)
    assert settings == LLMSettings(
        model="hosted_vllm/qwen",
        api_base="http://127.0.0.1:8000/v1",
        api_key_env="VLLM_KEY",
        temperature=None,
        max_retries=7,
        timeout_s=12.5,
        max_output_tokens=1000,
    )
    monkeypatch.setenv("KLOOM_LLM_MAX_RETRIES", "many")
    with pytest.raises(ValueError, match="KLOOM_LLM_MAX_RETRIES"):
        LLMSettings.from_env()


def test_temperature_none_is_left_to_the_provider(server, make_client, budget):
    server.add(Reply.text("a"), Reply.text("b"))
    make_client(temperature=0.7).complete(MESSAGES, budget=budget)
    make_client(temperature=None).complete(MESSAGES, budget=budget)
    first, second = server.chat_requests
    assert first.body["temperature"] == 0.7
    assert "temperature" not in second.body


@pytest.mark.parametrize("limit_s, holding_s, words", [(0.4, 0.0, "wall-time"), (30.4, 30.0, "kept for the fallback step")])
def test_a_request_never_outlives_the_wall_time_limit(server, make_client, limit_s, holding_s, words):
    """Nor spends the time a job with no correct kernel holds back for its fallback step
    (``Budget.holding_s``): a model call counts it as spent, so a slow model cannot eat into it."""
    budget = Budget(Limits(max_wall_s=limit_s))
    budget.holding_s = holding_s
    server.add(Reply.text("too late", delay_s=3.0), Reply.text("never reached"))
    started = time.monotonic()
    with pytest.raises(LimitReached, match=words):
        make_client(timeout_s=30.0).complete(MESSAGES, budget=budget)
    assert time.monotonic() - started < 2.0
    assert len(server.chat_requests) == 1


def test_a_model_litellm_cannot_route_is_a_request_error(server, make_client, budget):
    with pytest.raises(LLMRequestError):
        make_client("no-provider-model-xyz", api_base=None).complete(MESSAGES, budget=budget)
    assert server.requests == []
