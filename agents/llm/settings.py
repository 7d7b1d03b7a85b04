"""Settings of the LLM client: which model, where, with which key, and how patiently.

A plain dataclass read from ``KLOOM_LLM_<FIELD>`` environment variables, so that ``agents``
imports on GPU images that carry torch alone. The key itself is never a setting: only the *name*
of the environment variable that holds it, read at each call.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from dataclasses import dataclass

ENV_PREFIX = "KLOOM_LLM_"


@dataclass(frozen=True)
class LLMSettings:
    #: Any model string litellm understands: ``openai/gpt-4o``, ``anthropic/claude-...``,
    #: ``ollama/qwen2.5-coder``, ``hosted_vllm/<name>`` (with ``api_base``), ...
    model: str = ""
    #: Base URL of an OpenAI-compatible or local server (vLLM, Ollama); None: the provider's own.
    api_base: str | None = None
    #: Name of the environment variable holding the API key; None: litellm's provider default
    #: (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ...) or no key (local servers).
    api_key_env: str | None = None
    #: None leaves the provider's default (some reasoning models accept no other).
    temperature: float | None = 0.2
    max_output_tokens: int = 8192
    #: Seconds one request may take before it counts as failed (and is retried).
    timeout_s: float = 180.0
    #: Retries after the first attempt, for rate limits, timeouts, connection errors and 5xx.
    max_retries: int = 4
    #: Exponential backoff: the first wait, and the cap (a server's Retry-After is honoured up
    #: to the cap).
    backoff_s: float = 2.0
    backoff_max_s: float = 60.0

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, not {self.timeout_s}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, not {self.max_retries}")
        if self.max_output_tokens <= 0:
            raise ValueError(f"max_output_tokens must be positive, not {self.max_output_tokens}")
        if self.backoff_s < 0 or self.backoff_max_s < self.backoff_s:
            raise ValueError("backoff_s must be >= 0 and backoff_max_s >= backoff_s")

    @classmethod
    def from_env(cls, environ: typing.Mapping[str, str] | None = None, **overrides: typing.Any) -> "LLMSettings":
        """Defaults, then ``KLOOM_LLM_<FIELD>`` variables, then the given overrides."""
        environ = os.environ if environ is None else environ
        hints = typing.get_type_hints(cls)
        values: dict[str, typing.Any] = {}
        for f in dataclasses.fields(cls):
            raw = environ.get(ENV_PREFIX + f.name.upper())
            if raw is not None:
                values[f.name] = _parse(hints[f.name], raw, f.name)
        values.update(overrides)
        return cls(**values)


def _parse(tp: typing.Any, raw: str, name: str) -> typing.Any:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    optional = len(args) < len(typing.get_args(tp))
    base = args[0] if args else tp
    if optional and raw.strip().lower() in ("", "none", "null"):
        return None
    try:
        return base(raw) if base in (int, float) else raw
    except ValueError:
        raise ValueError(f"{ENV_PREFIX}{name.upper()} must be a {base.__name__}, not {raw!r}") from None
