"""The one way kloom talks to a model: ``LLMClient.complete`` over ``litellm.completion``.

It checks the job's limits before every attempt, retries transient failures (rate limits,
timeouts, connection errors, 5xx) with exponential backoff, never retries authentication,
context-window or bad-request errors, prices each call with litellm's cost map (``None`` for a
model litellm has no price for), charges the job's budget, and redacts keys from everything it
returns, raises or logs. litellm and tenacity are imported on first use, so that ``agents``
imports on GPU images without them.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from agents.limits import Budget, LimitReached
from agents.records import Usage

from .errors import LLMAuthError, LLMConfigError, LLMContextError, LLMError, LLMRequestError, LLMUnavailable
from .redaction import redact, register_secret
from .settings import LLMSettings

log = logging.getLogger(__name__)

Message = dict[str, str]
#: HTTP statuses worth another attempt: request timeout, conflict, rate limit, and server errors.
_TRANSIENT_STATUS = frozenset({408, 409, 429})


@dataclass
class Completion:
    """One model answer, with what it cost and how many attempts it took."""

    text: str
    usage: Usage
    finish_reason: str = ""
    attempts: int = 1
    seconds: float = 0.0
    tokens_estimated: bool = False  # the server sent no usage; tokens were counted locally

    @property
    def truncated(self) -> bool:
        """The answer stopped at the output-token limit."""
        return self.finish_reason == "length"


def _litellm() -> Any:
    # Prices come from the cost map bundled with the installed litellm, not fetched from the
    # internet at import (slow, and impossible on isolated machines); set the variable to
    # "False" to fetch the newest map.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm  # optional: litellm (a service extra), after the cost-map variable is set

    litellm.suppress_debug_info = True  # no "Give Feedback" banners on stdout
    return litellm


class LLMClient:
    """A chat model reached through litellm, as the settings name it."""

    def __init__(self, settings: LLMSettings):
        if not settings.model:
            raise LLMConfigError("no model configured (set KLOOM_LLM_MODEL or pass a model name)")
        self.settings = settings

    @property
    def model(self) -> str:
        return self.settings.model

    def complete(self, messages: list[Message], *, budget: Budget) -> Completion:
        """Ask the model; charge ``budget`` with the call's usage.

        Raises ``agents.limits.LimitReached`` (before any attempt that a limit forbids),
        ``LLMAuthError``, ``LLMContextError``, ``LLMRequestError``, ``LLMConfigError``, or
        ``LLMUnavailable`` once transient failures outlast the retries.
        """
        import tenacity  # optional: tenacity (a service extra; GPU images lack it)

        litellm = _litellm()
        api_key = self._api_key()
        attempts = 0
        started = time.monotonic()

        def attempt() -> Any:
            nonlocal attempts
            budget.check()
            attempts += 1
            return litellm.completion(**self._request(messages, api_key, budget))

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.settings.max_retries + 1),
            wait=self._wait,
            retry=tenacity.retry_if_exception(_is_transient),
            before_sleep=self._log_retry,
            reraise=True,
        )
        try:
            response = retrying(attempt)
        except (LimitReached, LLMError):
            raise
        except Exception as exc:
            # ``from None``: the provider's exception may carry request details; ours is redacted.
            raise _translate(exc, attempts, self.settings.max_retries) from None
        completion = self._completion(litellm, response, messages, attempts, time.monotonic() - started)
        budget.charge(completion.usage)
        log.info(
            "LLM %s: %d+%d tokens, cost %s, %d attempt(s), %.2f s",
            self.model,
            completion.usage.prompt_tokens,
            completion.usage.completion_tokens,
            "unknown" if completion.usage.cost_usd is None else f"${completion.usage.cost_usd:.6f}",
            attempts,
            completion.seconds,
        )
        return completion

    # The request ---------------------------------------------------------------------------------
    def _api_key(self) -> str | None:
        name = self.settings.api_key_env
        if not name:
            return None
        value = os.environ.get(name)
        if not value:
            raise LLMConfigError(f"the environment variable {name} that should hold the API key is not set")
        register_secret(value)
        return value

    def _request(self, messages: list[Message], api_key: str | None, budget: Budget) -> dict[str, Any]:
        s = self.settings
        timeout = s.timeout_s
        left = budget.remaining_s(budget.holding_s)
        if left is not None:
            # A request may not outlive the job's wall-time limit, nor spend what is kept for its fallback step.
            timeout = max(0.001, min(timeout, left))
        request: dict[str, Any] = {
            "model": s.model,
            "messages": messages,
            "max_tokens": s.max_output_tokens,
            "timeout": timeout,
            "max_retries": 0,  # retries are ours (tenacity), not the provider SDK's
            "drop_params": True,  # a model that takes no temperature still answers
        }
        if s.temperature is not None:
            request["temperature"] = s.temperature
        if s.api_base:
            request["api_base"] = s.api_base
        if api_key:
            request["api_key"] = api_key
        return request

    # Retries -------------------------------------------------------------------------------------
    def _wait(self, state: Any) -> float:
        s = self.settings
        exponential = s.backoff_s * 2 ** (state.attempt_number - 1)
        exc = state.outcome.exception() if state.outcome else None
        return min(s.backoff_max_s, max(exponential, _retry_after_s(exc)))

    def _log_retry(self, state: Any) -> None:
        exc = state.outcome.exception()
        log.warning(
            "LLM %s: attempt %d of %d failed (%s); retrying in %.2f s",
            self.model,
            state.attempt_number,
            self.settings.max_retries + 1,
            redact(_describe(exc)),
            state.next_action.sleep if state.next_action else 0.0,
        )

    # The answer ----------------------------------------------------------------------------------
    def _completion(self, litellm: Any, response: Any, messages: list[Message], attempts: int, seconds: float) -> Completion:
        choices = getattr(response, "choices", None) or []
        # No choice at all (a provider's content filter, a broken local server): an empty answer.
        choice = choices[0] if choices else None
        message = getattr(choice, "message", None)
        text = getattr(message, "content", None) or ""
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        estimated = prompt_tokens == 0 and completion_tokens == 0
        if estimated:
            # Some local servers send no usage; the token limit still needs a count.
            prompt_tokens = litellm.token_counter(model=self.model, messages=messages)
            completion_tokens = litellm.token_counter(model=self.model, text=text) if text else 0
            cost = _cost_from_tokens(litellm, self.model, prompt_tokens, completion_tokens)
        else:
            cost = _response_cost(litellm, response)
        return Completion(
            text=redact(text),
            usage=Usage(
                calls=1,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                cost_usd=cost,
                model=self.model,
            ),
            finish_reason=str(getattr(choice, "finish_reason", None) or ""),
            attempts=attempts,
            seconds=seconds,
            tokens_estimated=estimated,
        )


def _response_cost(litellm: Any, response: Any) -> float | None:
    """litellm's price of the call; None for a model its cost map does not price."""
    hidden = getattr(response, "_hidden_params", None) or {}
    cost = hidden.get("response_cost")
    if cost is not None:
        return float(cost)
    try:
        return float(litellm.completion_cost(completion_response=response))
    except Exception:
        return None  # litellm raises for unmapped models: cost unknown, tokens still counted


def _cost_from_tokens(litellm: Any, model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    try:
        prompt_cost, completion_cost = litellm.cost_per_token(
            model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
    except Exception:
        return None  # an unpriced model
    return float(prompt_cost + completion_cost)


# Classifying failures ------------------------------------------------------------------------------
def _status(exc: BaseException | None) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def _is_transient(exc: BaseException) -> bool:
    import litellm  # optional: litellm (a service extra; GPU images lack it)

    if isinstance(exc, (litellm.ContextWindowExceededError, litellm.AuthenticationError, litellm.BadRequestError)):
        return False
    transient_types = (
        litellm.RateLimitError,
        litellm.Timeout,
        litellm.APIConnectionError,
        litellm.InternalServerError,
        litellm.ServiceUnavailableError,
        litellm.BadGatewayError,
    )
    if isinstance(exc, transient_types):
        return True
    status = _status(exc)
    return status is not None and (status in _TRANSIENT_STATUS or status >= 500)


def _retry_after_s(exc: BaseException | None) -> float:
    """The server's Retry-After, in seconds (0 when it sent none)."""
    for headers in (getattr(exc, "litellm_response_headers", None), getattr(getattr(exc, "response", None), "headers", None)):
        value = headers.get("retry-after") if headers is not None else None
        if value is not None:
            try:
                return max(0.0, float(value))
            except ValueError:
                return 0.0  # an HTTP date: fall back to our own backoff
    return 0.0


def _describe(exc: BaseException | None) -> str:
    status = _status(exc)
    kind = type(exc).__name__
    return f"{kind}{f' {status}' if status else ''}: {exc}"


def _translate(exc: BaseException, attempts: int, max_retries: int) -> LLMError:
    import litellm  # optional: litellm (a service extra; GPU images lack it)

    status = _status(exc)
    detail = _describe(exc)
    if isinstance(exc, litellm.ContextWindowExceededError):
        return LLMContextError(f"the prompt does not fit the model's context window: {detail}", status_code=status, attempts=attempts)
    if isinstance(exc, (litellm.AuthenticationError, litellm.PermissionDeniedError)) or status in (401, 403):
        return LLMAuthError(f"the provider refused the API key: {detail}", status_code=status, attempts=attempts)
    if _is_transient(exc):
        return LLMUnavailable(
            f"the model was unavailable after {attempts} attempt(s) ({max_retries} retries allowed): {detail}",
            status_code=status,
            attempts=attempts,
        )
    return LLMRequestError(f"the provider rejected the request: {detail}", status_code=status, attempts=attempts)
