"""Typed failures of the LLM client and the LLM roles. Every message is redacted of keys.

API failures (``LLMError`` and its kinds) mean the model could not be asked; ``ModelOutputError``
means it answered with something that could not be used, which the loop records as a failed step.
"""

from __future__ import annotations

from agents.exits import FatalRoleError, RoleUnavailable
from agents.records import Usage

from .redaction import redact


class LLMError(Exception):
    """The model could not be asked. ``status_code``: the HTTP status, when there was one."""

    def __init__(self, message: str, *, status_code: int | None = None, attempts: int = 0):
        super().__init__(redact(message))
        self.status_code = status_code
        self.attempts = attempts


class LLMConfigError(LLMError, FatalRoleError):
    """The settings cannot work (no model, or the named key variable is not set)."""


class LLMAuthError(LLMError, FatalRoleError):
    """The provider refused the key (401/403). Never retried."""


class LLMContextError(LLMError):
    """The prompt does not fit the model's context window. Never retried."""


class LLMRequestError(LLMError):
    """The provider rejected the request (other 4xx: bad parameters, unknown model). Never retried."""


class LLMUnavailable(LLMError, RoleUnavailable):
    """Rate limits, timeouts, connection errors or 5xx persisted through every retry."""


class ModelOutputError(Exception):
    """The model answered, but the answer cannot be used. Carries what the call cost."""

    def __init__(self, reason: str, usage: Usage, answer: str = ""):
        super().__init__(redact(reason))
        self.reason = redact(reason)
        self.usage = usage
        self.answer = redact(answer)
