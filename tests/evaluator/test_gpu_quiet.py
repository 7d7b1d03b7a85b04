"""What the judge makes of the reference's probes of the GPU around its timed blocks
(``gpu_quiet.py``; the probe itself runs on a GPU: ``test_judge_gpu.py``'s
``leaves_gpu_work_running``)."""

from __future__ import annotations

import pytest

from services.worker.evaluator.interleaved import Timing
from services.worker.evaluator.judge import Stop
from services.worker.evaluator.pool_replies import Replies
from services.worker.evaluator.settings import EvalSettings

QUIET = {"probe_ms": 0.02, "waited_s": 0.0, "busy": False}


def _timing(flags: list[str]) -> Timing:
    return Timing(None, EvalSettings.for_device("cuda"), lambda s: s, None, None, {}, flags.append)


def _replies(*per_rank: tuple[dict, dict]) -> Replies:
    return Replies(by_rank={r: {"ok": True, "quiet": {"before": b, "after": a}} for r, (b, a) in enumerate(per_rank)})


def test_a_quiet_gpu_passes_and_work_that_drained_in_time_is_flagged_once():
    flags: list[str] = []
    timing = _timing(flags)
    timing._check_quiet(_replies((QUIET, QUIET), (QUIET, QUIET)))
    assert flags == []
    drained = {**QUIET, "waited_s": 0.4}
    timing._check_quiet(_replies((QUIET, QUIET), (drained, QUIET)))
    timing._check_quiet(_replies((drained, QUIET)))
    assert len(flags) == 1 and flags[0].startswith("gpu_work_left_running: rank 1") and "0.40 s" in flags[0]


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_gpu_busy_around_the_reference_block_rejects_the_candidate(when):
    busy = {"probe_ms": 3.1, "waited_s": 2.0 if when == "before" else 0.0, "busy": True}
    pair = (busy, QUIET) if when == "before" else (QUIET, busy)
    with pytest.raises(Stop) as stop:
        _timing([])._check_quiet(_replies((QUIET, QUIET), pair))
    assert stop.value.status == "rejected" and stop.value.error.rank == 1
    assert f"not the reference's {when} the reference's timed block" in stop.value.error.message
    assert "3.1 ms" in stop.value.error.message


def test_replies_without_probes_pass():
    """On the CPU, and from a side not asked to probe, there is nothing to check."""
    _timing([])._check_quiet(Replies(by_rank={0: {"ok": True, "times": [1.0]}}))
