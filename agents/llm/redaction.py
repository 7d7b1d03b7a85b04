"""Remove API keys from text before it leaves the LLM client (logs, exceptions, records).

Three nets: values registered by the client (the configured key), the values of environment
variables whose names say they hold a secret, and the shapes of well-known provider keys.
"""

from __future__ import annotations

import os
import re
import threading

MASK = "[REDACTED]"
#: Environment variable names whose values are treated as secrets.
_SECRET_NAME = re.compile(r"(API_?KEY|_KEY|TOKEN|SECRET|PASSWORD|CREDENTIALS?)$", re.IGNORECASE)
#: Shorter values are left alone: masking "1" or "true" everywhere would wreck the text.
_MIN_SECRET_LEN = 8
_PATTERNS = [
    re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"),  # OpenAI, Anthropic (sk-ant-), DeepSeek, ...
    re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}"),  # Google
    re.compile(r"\b(?:hf|gsk|xai|ghp|gho|ghs|ghu|github_pat|pplx|nvapi|r8)[_-][A-Za-z0-9_\-]{16,}"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),  # AWS access key id
    re.compile(r"(?i)(?<=bearer )[A-Za-z0-9._\-~+/=]{8,}"),
    re.compile(r"(?i)(?<=api[_-]key)(?P<sep>[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]{8,}"),
    re.compile(r"(?i)(?<=x-api-key)(?P<sep>[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]{8,}"),
]

_registered: set[str] = set()
_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Remember a secret value so that every later ``redact`` removes it."""
    if value and len(value) >= _MIN_SECRET_LEN:
        with _lock:
            _registered.add(value)


def _secret_values() -> list[str]:
    env = [v for k, v in os.environ.items() if _SECRET_NAME.search(k) and len(v) >= _MIN_SECRET_LEN]
    with _lock:
        values = set(env) | _registered
    # Longest first, so that a key containing another is masked whole.
    return sorted(values, key=len, reverse=True)


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` with every known secret value and every key-shaped token replaced by ``[REDACTED]``."""
    if not text:
        return text
    for value in [*secrets, *_secret_values()]:
        if value and len(value) >= _MIN_SECRET_LEN and value in text:
            text = text.replace(value, MASK)
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: (m.groupdict().get("sep") or "") + MASK, text)
    return text
