"""Sweeps that CI runs in part: the same check over every workload, problem or model, where each
case costs seconds of process starts on two cores and the whole sweep would take a large share of
CI's 90 minutes.

CI (``scripts/test``) runs a fixed sample of each sweep: every ``every``-th case of the sorted
list, the same cases on every run, so that a red test can be rerun. ``KLOOM_SLOW_TESTS=1
scripts/test`` runs every case (and the tests marked as too slow for CI); run it before a change
to what a sweep covers lands (the evaluator, the importers, the suite's workloads)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeVar

import pytest

T = TypeVar("T")

#: Whether every case of every sweep runs.
FULL = bool(os.environ.get("KLOOM_SLOW_TESTS"))
REASON = "not in CI's sample of this sweep; KLOOM_SLOW_TESTS=1 runs every case"


def in_sample(index: int, every: int) -> bool:
    return FULL or index % every == 0


def marks(index: int, every: int) -> list:
    """The marks of the ``index``-th case: none in the sample, else skipped with the reason."""
    return [] if in_sample(index, every) else [pytest.mark.slow, pytest.mark.skip(reason=REASON)]


def params(cases: Sequence[T], every: int, ids=None) -> list:
    """``cases`` as pytest parameters, those outside the sample skipped (with the reason) unless
    ``KLOOM_SLOW_TESTS`` is set; a tuple case is one value per argument. ``ids``: a function of a
    case, or None for pytest's own."""
    out = []
    for i, case in enumerate(cases):
        values = case if isinstance(case, tuple) else (case,)
        out.append(pytest.param(*values, marks=marks(i, every), id=ids(case) if ids else None))
    return out


def subset(cases: Sequence[T], every: int) -> list[T]:
    """The sampled cases, for a test that loops over them itself."""
    return [c for i, c in enumerate(cases) if in_sample(i, every)]

