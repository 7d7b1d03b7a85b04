"""Fixtures for the LLM tests: a scripted OpenAI-compatible server on loopback, a key in the
environment, and client settings with short timeouts and backoff."""

from __future__ import annotations

import os
import secrets

# litellm reads this at import: use its bundled price map, never the network.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import pytest

from agents.limits import Budget
from agents.llm import LLMClient, LLMSettings
from agents.records import Limits
from tests.fakes.openai_server import FakeOpenAIServer

KEY_ENV = "KLOOM_TEST_LLM_KEY"


@pytest.fixture
def api_key(monkeypatch) -> str:
    key = "sk-kloomtest-" + secrets.token_hex(20)
    monkeypatch.setenv(KEY_ENV, key)
    return key


@pytest.fixture
def server(api_key):
    with FakeOpenAIServer(api_key=api_key) as srv:
        yield srv


@pytest.fixture
def make_client(server):
    # The default model is one litellm prices; through ``api_base`` it lands on the fake server.
    def make(model: str = "openai/gpt-4o-mini", **overrides) -> LLMClient:
        values = dict(
            model=model,
            api_base=server.api_base,
            api_key_env=KEY_ENV,
            timeout_s=0.5,
            max_retries=2,
            backoff_s=0.01,
            backoff_max_s=0.5,
        )
        values.update(overrides)
        return LLMClient(LLMSettings(**values))

    return make


@pytest.fixture
def budget() -> Budget:
    return Budget(Limits(max_iters=8))
