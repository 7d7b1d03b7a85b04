"""What the judge makes of the reference's probes of the GPU around its timed blocks
(``gpu_quiet.py``; the probe itself runs on a GPU: ``test_judge_gpu.py``'s
``leaves_gpu_work_running``)."""

from __future__ import annotations

import pytest

from services.worker.evaluator.interleaved import Block, Timing
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
    busy = {"probe_ms": 3.1, "waited_s": 2.0, "busy": True}
    pair = (busy, QUIET) if when == "before" else (QUIET, busy)
    with pytest.raises(Stop) as stop:
        _timing([])._check_quiet(_replies((QUIET, QUIET), pair))
    assert stop.value.status == "rejected" and stop.value.error.rank == 1
    assert f"not the reference's {when} the reference's timed block" in stop.value.error.message
    assert "3.1 ms" in stop.value.error.message and "still busy after 2.00 s" in stop.value.error.message


def test_work_found_after_a_block_that_drains_marks_the_block_disturbed_without_rejecting():
    """A stopped candidate queues nothing during the block: work found after it, gone within the
    patience, is someone else's (it may have slowed the block: the round is timed again)."""
    flags: list[str] = []
    timing = _timing(flags)
    transient = {"probe_ms": 0.03, "waited_s": 0.01, "busy": False, "first_ms": 0.683}
    disturbed = timing._check_quiet(_replies((QUIET, QUIET), (QUIET, transient)))
    assert disturbed is not None and disturbed.startswith("rank 1: ") and "0.683 ms" in disturbed and "after" in disturbed
    assert timing._check_quiet(_replies((QUIET, {**QUIET, "first_ms": 0.02}))) is None
    assert flags == []


class _ScriptedRounds(Timing):
    """``_round`` over rounds whose reference block is disturbed as scripted (no processes)."""

    def __init__(self, disturbances: list[str | None]):
        self.flags_seen: list[str] = []
        super().__init__(None, EvalSettings.for_device("cuda"), lambda s: s, None, None, {}, self.flags_seen.append)
        self.script = iter(disturbances)
        self.rounds_run = 0

    def _round_once(self, blocks, r, per_block, flush_bytes, bound, whole):
        self.rounds_run += 1
        blocks["reference"].append(Block({0: [1.0]}, 1.0, disturbed=next(self.script)))
        blocks["candidate"].append(Block({0: [1.0]}, 1.0))


def test_a_disturbed_round_is_timed_again_and_its_blocks_dropped():
    timing = _ScriptedRounds(["rank 0: busy", "rank 0: busy", None])
    blocks = {"reference": [], "candidate": []}
    timing._round(blocks, 0, 1, 0, None, False)
    assert timing.rounds_run == 3 and len(blocks["reference"]) == len(blocks["candidate"]) == 1
    assert blocks["reference"][0].disturbed is None
    assert len(timing.flags_seen) == 1 and timing.flags_seen[0].startswith("gpu_busy_after_block: rank 0: busy")


def test_rounds_disturbed_past_the_retimes_reject():
    retimes = EvalSettings.for_device("cuda").gpu_busy_retimes
    timing = _ScriptedRounds([None] + ["rank 0: busy"] * (retimes + 1))
    blocks = {"reference": [], "candidate": []}
    timing._round(blocks, 0, 1, 0, None, False)
    with pytest.raises(Stop) as stop:
        timing._round(blocks, 1, 1, 0, None, False)
    assert stop.value.status == "rejected" and f"in {retimes + 1} rounds" in stop.value.error.message
    assert timing.rounds_run == retimes + 2


def test_replies_without_probes_pass():
    """On the CPU, and from a side not asked to probe, there is nothing to check."""
    _timing([])._check_quiet(Replies(by_rank={0: {"ok": True, "times": [1.0]}}))


def test_a_rank_s_quiet_waits_come_before_and_after_its_block_and_land_in_its_reply(monkeypatch):
    """``RankBase.quiet_wait`` (both kinds of timed block use it): the first wait when asked, the
    second when the block's reply is made, both in the form ``_check_quiet`` reads; nothing on
    the CPU or without ``quiet``. A stand-in probe: the real one needs a GPU."""
    import torch

    from services.worker.evaluator import rank as rank_module
    from services.worker.evaluator.gpu_quiet import Quiet

    waits: list[tuple[float, float]] = []

    class Probe:
        def __init__(self, device):
            self.device = device

        def wait(self, threshold_ms, patience_s):
            waits.append((threshold_ms, patience_s))
            return Quiet(probe_ms=0.02 * len(waits), waited_s=0.0, busy=False)

    monkeypatch.setattr(rank_module, "QuietProbe", Probe)
    gpu, cpu = type("R", (), {"device": torch.device("cuda", 0)})(), type("R", (), {"device": torch.device("cpu")})()
    after = rank_module.RankBase.quiet_wait(gpu, {"threshold_ms": 0.25, "patience_s": 2.0})
    assert waits == [(0.25, 2.0)]
    reply: dict = {}
    after(reply)
    assert waits == [(0.25, 2.0)] * 2
    assert reply["quiet"]["before"]["probe_ms"] == 0.02 and reply["quiet"]["after"]["probe_ms"] == 0.04
    _timing([])._check_quiet(Replies(by_rank={0: {"ok": True, **reply}}))
    for rank, quiet in ((cpu, {"threshold_ms": 0.25, "patience_s": 2.0}), (gpu, None)):
        untouched: dict = {}
        rank_module.RankBase.quiet_wait(rank, quiet)(untouched)
        assert untouched == {} and len(waits) == 2
