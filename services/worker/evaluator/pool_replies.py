"""What a rank pool's request comes back with: each rank's reply (and the ranks that did not
answer), or a failure of the pool itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class PoolFailure(Exception):
    """The pool cannot go on: a rank died, or did not answer in time."""

    def __init__(self, kind: str, message: str, rank: int | None = None, log_tail: str = "", role: str = ""):
        super().__init__(message)
        self.kind = kind  # "crashed" | "timeout" | "start" | "stopped" (``RankPool.interrupt``) | "writes" (``disk_guard``)
        self.rank = rank
        self.log_tail = log_tail
        self.role = role  # the pool's ("reference" or "candidate"), where known


@dataclass
class Replies:
    by_rank: dict[int, dict[str, Any]] = field(default_factory=dict)
    missing: list[int] = field(default_factory=list)

    def errors(self) -> list[tuple[int, dict]]:
        return [(r, rep["error"]) for r, rep in sorted(self.by_rank.items()) if not rep.get("ok")]

    def violations(self) -> list[tuple[int, str]]:
        return [(r, v) for r, rep in sorted(self.by_rank.items()) for v in rep.get("violations", [])]


def replies_value(replies: Replies, key: str, default=0):
    return [rep.get(key, default) for _, rep in sorted(replies.by_rank.items())]
