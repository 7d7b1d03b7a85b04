"""Models through litellm: the client (retries, cost, key hygiene) and the LLM planner and coder.

Nothing here imports litellm at import time; the client loads it on its first call.
"""

from .client import Completion, LLMClient
from .errors import (
    LLMAuthError,
    LLMConfigError,
    LLMContextError,
    LLMError,
    LLMRequestError,
    LLMUnavailable,
    ModelOutputError,
)
from .redaction import redact
from .roles import LLMCoder, LLMPlanner
from .settings import LLMSettings

__all__ = [
    "Completion",
    "LLMAuthError",
    "LLMClient",
    "LLMCoder",
    "LLMConfigError",
    "LLMContextError",
    "LLMError",
    "LLMPlanner",
    "LLMRequestError",
    "LLMSettings",
    "LLMUnavailable",
    "ModelOutputError",
    "redact",
]
