"""The record of one autotuning choice (``TunedConfig``): which configuration Triton's autotuner
chose for a kernel and key in a candidate the judge timed. The candidate's rank reads them from
the candidate's module (``kernels.tuning.tuned_choices``); the judge keeps them in the evaluation
(``EvalResult.tuned``), the knowledge base with the kernel, and a later candidate on the same GPU
is seeded with them (``kernels.tuning.seed_tuned``).

They come from the candidate's process, so they are a hint and nothing more: ``parse_tuned``
keeps only well-formed records, of bounded number and size, and a pin can only choose among the
kernel's own configurations (what the judge measures of the next candidate is what counts).
Standard library only."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: At most this many choices are kept from one evaluation (``kernels.tuning.TUNED_MAX`` too).
MAX_TUNED = 512
_MAX_NAME = 120
_MAX_KEY = 32
_MAX_KWARGS = 16
_SCALAR = (int, float, str, bool)


@dataclass(frozen=True)
class TunedConfig:
    """One kernel's configuration for one autotuning key (its sizes and the dtypes of its tensors)."""

    kernel: str  # the jitted function's name
    key: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)  # the meta-parameters (BLOCK_M, ...)
    num_warps: int = 4
    num_stages: int = 3

    @property
    def pin_key(self) -> tuple:
        return (self.kernel, tuple(self.key))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _scalar(value: Any) -> bool:
    return isinstance(value, _SCALAR) and (not isinstance(value, str) or len(value) <= _MAX_NAME)


def _small_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 1024


def parse_one(raw: Any) -> TunedConfig | None:
    """The record ``raw`` describes, or None where it is not one (wrong types, too large)."""
    if not isinstance(raw, dict):
        return None
    kernel, key, kwargs = raw.get("kernel"), raw.get("key"), raw.get("kwargs")
    if not (isinstance(kernel, str) and kernel.isidentifier() and len(kernel) <= _MAX_NAME):
        return None
    if not (isinstance(key, list) and len(key) <= _MAX_KEY and all(_scalar(v) for v in key)):
        return None
    if not (isinstance(kwargs, dict) and len(kwargs) <= _MAX_KWARGS
            and all(isinstance(k, str) and k.isidentifier() and len(k) <= _MAX_NAME and _scalar(v) for k, v in kwargs.items())):
        return None
    warps, stages = raw.get("num_warps"), raw.get("num_stages")
    if not (_small_int(warps) and _small_int(stages)):
        return None
    return TunedConfig(kernel, list(key), dict(kwargs), warps, stages)


def parse_tuned(raw: Any, limit: int = MAX_TUNED) -> list[TunedConfig]:
    """The well-formed records of ``raw`` (a list), each kernel and key once (the first), at most
    ``limit``."""
    items = raw[: 4 * limit] if isinstance(raw, list) else []
    return merged([one for one in map(parse_one, items) if one is not None], limit=limit)


def merged(*sources: list[TunedConfig], limit: int = MAX_TUNED) -> list[TunedConfig]:
    """The records of ``sources`` in order, each kernel and key once (the first source's choice)."""
    out: dict[tuple, TunedConfig] = {}
    for source in sources:
        for one in source:
            if one.pin_key not in out and len(out) < limit:
                out[one.pin_key] = one
    return list(out.values())
