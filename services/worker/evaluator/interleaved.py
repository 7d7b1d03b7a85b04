"""Interleaved timing of the two sides, run from the evaluator's process over the judge's pools.

Blocks of calls alternate (reference, candidate, candidate, reference, ...); while one side is
timed, the other side's processes are stopped (SIGSTOP) after draining their device work, and
this process measures each block on its own clock: the time the candidate's clock leaves
unaccounted may not exceed the reference's by more than a stated bound
(``EvalSettings.clock_slack``). Every timed call's projections are checked against the
reference's, and rounds' last outputs are judged whole.
"""

from __future__ import annotations

import math
import secrets
import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

from kloom.evaluation import ClockCheck, ErrorInfo, TimeStats
from services.worker.profiler.nvml_quiet import timing_in_progress

from . import projection_check, staged
from .judge import JudgePools, Stop
from .pool import RankPool, Replies
from .pool_replies import replies_value
from .projection_check import Projections
from .settings import EvalSettings
from .timing import gc_paused

#: CPU time a stopped side may show over the whole timing (the kernel counts whole clock ticks,
#: and a process runs on for an instant after SIGSTOP is sent), in seconds and as a share of the
#: time it was stopped, before it counts as having run while stopped.
STOPPED_CPU_S = 0.03
STOPPED_CPU_SHARE = 0.05


@dataclass
class Block:
    times: dict[int, list[float]]  # per rank, ms, from the side's own clock
    wall_ms: float  # the judge's clock
    projections: dict[int, Projections] | None = None  # per rank: every timed call's (timing rounds)
    phases: dict[int, dict] | None = None  # per rank: where the side says its time went (diagnostic only)
    disturbed: str | None = None  # the reference's: what its ranks saw run beside the block, which may have slowed it
    calls: dict[int, list] | None = None  # per rank, a staged block's: every call's flattened outputs, as sent
    spec: dict[int, str] | None = None  # per rank, a staged block's: its outputs' structure

    @property
    def reported_ms(self) -> float:
        return max(sum(t) for t in self.times.values())

    @property
    def unaccounted_ms(self) -> float:
        """The judge's wall time of the block less what the side's clock reported."""
        return self.wall_ms - self.reported_ms

    @property
    def median_ms(self) -> float:
        """The slowest rank's median call (0 for a block of no timed calls)."""
        return max((statistics.median(t) for t in self.times.values() if t), default=0.0)


#: In sizing the blocks, a candidate's call counts for at most this many of the reference's: a
#: candidate slow in its warm-up calls alone cuts the calls to no fewer than the budget over the
#: reference's call, halved (fewer calls a block would give the clock check's fixed slack, per
#: block, a larger share of each call).
SIZING_CAP = 3.0


def calls_per_side(ref_warm: Block, cand_warm: Block, warm: int, draw_s: float, s: EvalSettings) -> int:
    """Timed calls per side that fill the timing budget, from the warm-up blocks of ``warm``
    timed calls: each side's median call on its own clock (a first call may compile), plus the
    time a call's inputs take to draw. The candidate's is at most its wall time per call less
    the reference's overhead per call, so reporting slow calls buys it no fewer calls than its
    real calls would, and at most ``SIZING_CAP`` times the reference's; reporting fast ones buys
    it more, up to ``max_iters``."""
    overhead_ms = max(0.0, ref_warm.unaccounted_ms) / warm
    cand_ms = min(cand_warm.median_ms, max(0.0, cand_warm.wall_ms / warm - overhead_ms), SIZING_CAP * ref_warm.median_ms)
    per_call_s = (ref_warm.median_ms + cand_ms) / 2e3 + draw_s
    return int(min(s.max_iters, max(s.min_iters, math.ceil(s.timing_budget_s / max(per_call_s, 1e-6)))))


def round_count(iters: int, ref_call_ms: float, draw_s: float, s: EvalSettings) -> int:
    """Rounds of interleaved blocks for ``iters`` calls a side: ``timing_rounds`` (no more than
    the calls), fewer where a block would hold less than ``timing_min_block_s`` of the reference's
    calls (its warm-up median plus drawing each call's inputs): then at least two, and an even
    number, so that the two orders (reference first, candidate first) come equally often and drift
    linear in time weighs on both sides alike. Long calls keep one call a block (five calls of a
    1.1 s reference in five rounds, not eight calls in four). From the reference's times only:
    nothing the candidate reports changes it."""
    rounds = max(1, min(s.timing_rounds, iters))
    if s.timing_min_block_s > 0:
        wanted = max(2, int(iters * (max(0.0, ref_call_ms) / 1e3 + max(0.0, draw_s)) / s.timing_min_block_s))
        if wanted < rounds:
            rounds = wanted - wanted % 2
    return rounds


class Timing:
    """Interleaved blocks of the two sides, each timed with the other stopped."""

    def __init__(self, pools: JudgePools, settings: EvalSettings, limit, check_candidate, judge_outputs,
                 tolerance: dict[str, tuple[float, float]], flag, between_blocks: Callable[[], None] | None = None):
        self.pools = pools
        self.s = settings
        self.limit = limit  # seconds -> seconds, bounded by the evaluation's deadline
        self.check_candidate = check_candidate  # replies -> None, raises Stop
        # (the candidate's last outputs of a round, per rank; the round; its seed) -> None, raises Stop; the
        # reference ranks hold theirs of the same round's block
        self.judge_outputs = judge_outputs
        self.tolerance = tolerance  # by dtype name: the reference's bounds on the projections
        self.flag = flag  # str -> None: a flag on the result
        # Run after every block, with both sides idle: the GPU's NVML sample (its queries, run
        # beside a block, stalled both sides' CUDA calls by 10-30 ms and the clock check rejected
        # correct candidates on that noise: benchmarks/gpu/clock_case.py on 2xH200).
        self.between_blocks = between_blocks
        self.stopped_cpu = {"reference": 0.0, "candidate": 0.0}  # CPU seconds used while stopped
        self.stopped_wall = {"reference": 0.0, "candidate": 0.0}
        self.flagged: set[str] = set()
        self.retimed = 0  # rounds timed again (``_round``)
        self.staged = False  # whether this timing's rounds are staged (``staged_rounds``)
        self._next: tuple[int, dict[int, dict]] | None = None  # a staged round's seed and inputs, drawn with the last projections
        self._more = False  # whether another round is planned after the running one

    def run(self, ref_call_s: float, flush_bytes: int, draw_s: float = 0.0, output_bytes: int = 0,
            input_bytes: int | None = None) -> tuple[dict[int, list[float]], dict[int, list[float]], ClockCheck]:
        """``ref_call_s``: the reference's measured call time, ``draw_s`` the time it takes to
        draw one call's inputs; a block of n calls (of either side) must end within
        max(hang_floor_s, hang_factor x n x (ref_call_s + draw_s)).

        Every call of every block runs on inputs drawn afresh from a seed this process picks at
        random per round (both sides draw the same ones). Every timed call's projections
        (``projection.py``, signs from a seed drawn here per round) are checked against the
        reference's call of the same index. The round's last candidate outputs are handed over
        after the round (untimed) and judged whole against the reference's of the same round: in
        every round where the outputs (``output_bytes``, a trial's) are smaller than
        ``whole_check_all_below_bytes``, else in ``whole_check_rounds`` rounds drawn here at
        random and kept from the candidate, which keeps its last outputs in every round and
        learns which are judged only after its block.

        ``input_bytes`` (a call's inputs, where every one is a plain value the judge can send; None
        where not): the rounds are staged (``staged_rounds``) where a block's inputs and outputs
        fit ``staged_block_bytes``."""
        s = self.s
        ref, cand = self.pools.reference, self.pools.candidate

        def bound(calls: int) -> float:
            return s.hang_factor * calls * (ref_call_s + draw_s)

        # This process's clock measures every block: its collector is held off inside each one
        # (``gc_paused`` in ``_block``), so no collection of the judge's falls inside a block.
        quiet = timing_in_progress() if self.pools.reference.device == "cuda" else nullcontext()
        try:
            self.pools.place_for_timing()
            with quiet:  # periodic NVML sampling on this machine waits until the timing ends
                blocks, per_block = self._rounds(ref, cand, flush_bytes, draw_s, output_bytes, input_bytes, bound)
        finally:
            self._next = None
            self.pools.unplace()
            ref.resume()
            cand.resume()
            self.pools.resume_spares()
        for role, ran in self.stopped_cpu.items():
            if ran > STOPPED_CPU_S + STOPPED_CPU_SHARE * self.stopped_wall[role]:
                raise Stop("rejected", ErrorInfo(kind="integrity", phase="time", message=(
                    f"the {role}'s processes used {ran:.2f} s of CPU in the {self.stopped_wall[role]:.2f} s they were "
                    "stopped for the other side's timing: something of theirs escaped the stop")))
        check = self._check(blocks, per_block)
        if not check.ok:
            raise Stop("rejected", ErrorInfo(kind="clock", phase="time", message=(
                f"the candidate's own clock disagrees with the judge's: per block of {per_block} calls it left "
                f"{check.excess_ms:.3g} ms more unaccounted than the reference's block beside it (median over {check.blocks} rounds; "
                f"{check.candidate_unaccounted_ms:.3g} against {check.reference_unaccounted_ms:.3g} ms; allowed: {check.allowed_ms:.3g} ms more"
                f"{', staged blocks' if check.staged else ''}); "
                "its reported times are not the time it took")))
        return _per_rank(blocks["reference"]), _per_rank(blocks["candidate"]), check

    def _rounds(self, ref: RankPool, cand: RankPool, flush_bytes: int, draw_s: float, output_bytes: int, input_bytes: int | None,
                bound) -> tuple[dict[str, list[Block]], int]:
        """The warm-up blocks, then every round's two blocks (order alternating); returns the
        blocks by side and the calls per block."""
        s = self.s
        # Spares admitted to join would do device work beside a timed block: they stop. So do
        # all of them on the CPU, where importing torch would take the timed side's cores; on a
        # GPU machine the others only import, on cores of their own.
        self.pools.stop_spares(admitted_only=self.pools.reference.device != "cpu")
        warm = max(1, s.warmup_iters)
        warm_seed = secrets.randbits(30)
        # The warm-up calls are timed (on each side's own clock), to size the blocks; the times
        # are not the measurement.
        ref_warm = self._block(ref, cand, warm, 0, flush_bytes, bound(warm), warm_seed)
        cand_warm = self._block(cand, ref, warm, 0, flush_bytes, bound(warm), warm_seed)
        iters = calls_per_side(ref_warm, cand_warm, warm, draw_s, s)
        rounds = round_count(iters, ref_warm.median_ms, draw_s, s)
        staged = staged_rounds(iters, rounds, input_bytes, output_bytes, s)
        if staged is not None:
            self.staged = True
            rounds, per_block = staged
        else:
            per_block = math.ceil(iters / rounds)
        every = output_bytes < s.whole_check_all_below_bytes or self.staged
        whole = set(range(rounds)) if every else set(
            secrets.SystemRandom().sample(range(rounds), min(rounds, max(1, s.whole_check_rounds))))
        blocks: dict[str, list[Block]] = {"reference": [], "candidate": []}
        for r in range(rounds):
            self._more = r < rounds - 1
            self._round(blocks, r, per_block, flush_bytes, bound, r in whole)
        # Fewer rounds than ``timing_rounds`` (short calls) leave the clock check few blocks to
        # take its median over: one block slowed by the machine (a 2-core CI runner rejected an
        # honest candidate so, 1 in 80) would decide. Where the check fails over them, every
        # remaining round runs before it is read again, so that it then reads exactly what a
        # full timing gives it (no stopping at the first round that tips it: a candidate that
        # counts its blocks learns the check failed, and is judged over all of them).
        if rounds < s.timing_rounds and not self._check(blocks, per_block).ok:
            for r in range(rounds, s.timing_rounds):
                self._more = r < s.timing_rounds - 1
                self._round(blocks, r, per_block, flush_bytes, bound, every)
        return blocks, per_block

    def _round(self, blocks: dict[str, list[Block]], r: int, per_block: int, flush_bytes: int, bound, whole: bool) -> None:
        """Round ``r``, timed again where the reference's block was disturbed (``_check_quiet``):
        the disturbed blocks are dropped (their outputs were checked), up to
        ``gpu_busy_retimes`` an evaluation; one more rejects."""
        while True:
            self._round_once(blocks, r, per_block, flush_bytes, bound, whole)
            disturbed = blocks["reference"][-1].disturbed
            if disturbed is None:
                return
            if self.retimed >= self.s.gpu_busy_retimes:
                raise Stop("rejected", ErrorInfo(kind="integrity", phase="time", message=(
                    f"{disturbed}, in {self.retimed + 1} rounds of this evaluation (each timed again but the last): "
                    "work the candidate left running would slow the reference's calls")))
            self.retimed += 1
            del blocks["reference"][-1], blocks["candidate"][-1]
            if "gpu_busy_after_block" not in self.flagged:
                self.flagged.add("gpu_busy_after_block")
                self.flag(f"gpu_busy_after_block: {disturbed}; the round was timed again")

    def _round_once(self, blocks: dict[str, list[Block]], r: int, per_block: int, flush_bytes: int, bound, whole: bool) -> None:
        """Round ``r``: a block of each side (reference first in even rounds), on inputs and
        projection signs drawn for it; its projections checked, its last outputs judged whole
        where ``whole``."""
        ref, cand = self.pools.reference, self.pools.candidate
        seed, projection_seed = secrets.randbits(30), secrets.randbits(63)
        order = [(ref, cand, "reference"), (cand, ref, "candidate")]
        if self.staged:
            self._staged_round(blocks, r, per_block, flush_bytes, bound, whole, seed, projection_seed)
            return
        for side, other, name in order if r % 2 == 0 else order[::-1]:
            keep = name == "candidate" or whole
            blocks[name].append(self._block(side, other, per_block, 0, flush_bytes, bound(per_block), seed, keep=keep,
                                            projection_seed=projection_seed))
        if whole:
            self.judge_outputs(self._handed_outputs(bound(1)), r, seed)
        self._check_projections(blocks["reference"][-1], blocks["candidate"][-1], r)
        blocks["reference"][-1].projections = blocks["candidate"][-1].projections = None

    def _staged_round(self, blocks: dict[str, list[Block]], r: int, per_block: int, flush_bytes: int, bound, whole: bool,
                      seed: int, projection_seed: int) -> None:
        """Round ``r`` staged (``RankBase.run_staged``): the reference's ranks draw the round's
        inputs (with the last round's projections, where there was one), each side's block gets
        them with its command and sends every call's outputs with its reply, and the reference's
        ranks then project both sides' outputs (and judge the candidate's last call whole where
        ``whole``). The candidate's process holds none of a round's inputs before its block's
        span begins, and none of its outputs can change after the span ends."""
        ref, cand = self.pools.reference, self.pools.candidate
        timeout = self.limit(max(self.s.hang_floor_s, bound(per_block)))
        if self._next is not None:
            (seed, per_rank), self._next = self._next, None
        else:
            drawn = ref.request("draw_block", {"seed": seed, "calls": per_block}, timeout=timeout, stall_s=self.s.stall_s)
            self._raise_errors(drawn)
            per_rank = {rank: {"inputs": rep.get("inputs")} for rank, rep in drawn.by_rank.items()}
            del drawn
        order = [(ref, cand, "reference"), (cand, ref, "candidate")]
        for side, other, name in order if r % 2 == 0 else order[::-1]:
            blocks[name].append(self._block(side, other, per_block, 0, flush_bytes, bound(per_block), None,
                                            keep=name == "reference" and whole, per_rank=per_rank))
        del per_rank
        ref_block, cand_block = blocks["reference"][-1], blocks["candidate"][-1]
        last: dict[int, list] = {}  # the candidate's last call of the round, per rank (for the whole check)
        for rank in sorted(ref_block.calls):
            try:
                last[rank] = staged.unstack(cand_block.calls.get(rank), per_block)[-1]
            except (ValueError, IndexError) as exc:
                raise Stop("rejected", ErrorInfo(kind="integrity", phase="time", rank=rank, message=(
                    f"rank {rank}: the candidate's staged block of round {r} did not send the outputs of its {per_block} calls "
                    f"({exc})"))) from None
        next_seed = secrets.randbits(30)
        args = {"projection_seed": projection_seed, "tolerance": self.tolerance}
        if self._more:  # the next round's inputs drawn with this one's projections (one request, not two)
            args["draw"] = {"seed": next_seed, "calls": per_block}
        projected = ref.request("project", args, timeout=timeout, stall_s=self.s.stall_s,
                                per_rank={rank: {"reference_calls": calls, "candidate_calls": cand_block.calls.get(rank)}
                                          for rank, calls in ref_block.calls.items()})
        self._raise_errors(projected)
        if self._more:
            self._next = (next_seed, {rank: {"inputs": rep.get("inputs")} for rank, rep in projected.by_rank.items()})
        for rank, rep in sorted(projected.by_rank.items()):
            got = rep.get("candidate")
            problem = got.get("problem") if isinstance(got, dict) else "no projections"
            if problem:
                raise Stop("rejected", ErrorInfo(kind="integrity", phase="time", rank=rank, message=(
                    f"rank {rank}: the candidate's outputs of timing round {r} could not be projected: {problem}")))
        ref_block.projections = self._projections("reference", projected, "reference")
        cand_block.projections = self._projections("candidate", projected, "candidate")
        if whole:
            self.judge_outputs({rank: {"outputs": outputs, "spec": cand_block.spec.get(rank)} for rank, outputs in last.items()}, r, seed)
        self._check_projections(ref_block, cand_block, r)
        for b in (ref_block, cand_block):
            b.projections = b.calls = None

    @staticmethod
    def _raise_errors(replies: Replies, status: str = "workload_error") -> None:
        """The first rank's error in ``replies`` as a ``Stop`` of ``status`` (the reference's ranks
        failing are the workload's fault, the candidate's a ``runtime_error``)."""
        errors = replies.errors()
        if errors:
            rank, err = errors[0]
            raise Stop(status, ErrorInfo(kind=err.get("type", status), message=err["message"], rank=rank, phase="time",
                                         traceback=err.get("traceback", "")))

    def _block(self, side: RankPool, other: RankPool, iters: int, warm: int, flush_bytes: int, limit_s: float, seed: int | None,
               keep: bool = False, projection_seed: int | None = None, per_rank: dict[int, dict] | None = None) -> Block:
        """One block of ``side`` with ``other`` stopped; its device work was drained by the
        reply to its last command (each block and trial syncs before answering). ``per_rank``:
        a staged block's inputs, by rank."""
        args = {"iters": iters, "warm": warm, "flush_bytes": flush_bytes, "seed": seed, "keep": keep}
        if projection_seed is not None:
            args["projection_seed"] = projection_seed
            if side.role == "reference":
                args["tolerance"] = self.tolerance
        if side.role == "reference" and side.device == "cuda":
            args["quiet"] = {"threshold_ms": self.s.gpu_quiet_probe_ms, "patience_s": self.s.gpu_quiet_patience_s}
        before = other.stop()
        with gc_paused():
            started = time.perf_counter()
            replies = side.request("time_block", args, timeout=self.limit(max(self.s.hang_floor_s, limit_s)), stall_s=self.s.stall_s,
                                   per_rank=per_rank)
            wall_ms = (time.perf_counter() - started) * 1e3
        if self.between_blocks is not None:
            self.between_blocks()
        self.stopped_cpu[other.role] += other.stopped_cpu_seconds() - before
        self.stopped_wall[other.role] += wall_ms / 1e3
        if side.role == "candidate":
            self.check_candidate(replies, "time")
        self._raise_errors(replies, "workload_error" if side.role == "reference" else "runtime_error")
        disturbed = self._check_quiet(replies) if side.role == "reference" else None
        times = {r: [float(x) for x in rep["times"]] for r, rep in replies.by_rank.items()}
        if any(not math.isfinite(x) or x < 0 for t in times.values() for x in t):
            raise Stop("rejected", ErrorInfo(kind="clock", phase="time", message=f"the {side.role} reported a negative or non-finite time"))
        projections = self._projections(side.role, replies) if projection_seed is not None else None
        phases = {r: rep.get("phases_ms") for r, rep in replies.by_rank.items()}
        block = Block(times, wall_ms, projections, phases, disturbed)
        if per_rank is not None:
            block.calls = {r: rep.get("calls") for r, rep in replies.by_rank.items()}
            block.spec = {r: rep.get("spec") for r, rep in replies.by_rank.items()}
        return block

    def _check_quiet(self, replies: Replies) -> str | None:
        """What the reference's ranks saw of the GPU around their block, the candidate's
        processes stopped and their own work drained: work still running before the block is
        what the candidate queued before the stop (it would slow the reference's calls): flagged
        where it drained within the patience, rejected where it did not. Work found after the
        block was queued during it, by no stopped process: the block is said disturbed (the
        round is timed again) where it drained in time, and rejects where it did not."""
        disturbed = None
        for rank, rep in sorted(replies.by_rank.items()):
            quiet = rep.get("quiet")
            if not quiet:
                continue
            before, after = quiet["before"], quiet["after"]
            if before["busy"] or after["busy"]:
                when, seen = ("before", before) if before["busy"] else ("after", after)
                raise Stop("rejected", ErrorInfo(kind="integrity", phase="time", rank=rank, message=(
                    f"rank {rank}: {self._busy(when, seen)}, and it was still busy after {seen['waited_s']:.2f} s: "
                    "work the candidate left running would slow the reference's calls")))
            if before["waited_s"] > 0.05 and "gpu_work_left_running" not in self.flagged:
                self.flagged.add("gpu_work_left_running")
                self.flag(f"gpu_work_left_running: rank {rank}: the reference waited {before['waited_s']:.2f} s for work that "
                          "was not its own to drain before its block")
            first = after.get("first_ms")
            if disturbed is None and first is not None and first > self.s.gpu_quiet_probe_ms:
                disturbed = f"rank {rank}: {self._busy('after', after)} (quiet again {after['waited_s']:.2f} s later)"
        return disturbed

    def _busy(self, when: str, seen: dict) -> str:
        ms = seen.get("first_ms") or seen["probe_ms"]
        return (f"the GPU ran work that was not the reference's {when} the reference's timed block, with the candidate's "
                f"processes stopped (a one-element kernel took {ms:.3g} ms to return, against under "
                f"{self.s.gpu_quiet_probe_ms} ms on a quiet GPU)")

    def _projections(self, role: str, replies: Replies, key: str | None = None) -> dict[int, Projections]:
        """Each rank's numbers from a block's replies (from the part ``key`` of each, where the
        reference's ranks projected both sides' staged outputs): malformed ones from the
        candidate are ``rejected``; NaN or Inf from the reference (its outputs were) a
        ``workload_error``."""
        out = {}
        for rank, rep in sorted(replies.by_rank.items()):
            if key is not None:
                rep = rep.get(key) if isinstance(rep.get(key), dict) else {}
            try:
                out[rank] = Projections.from_reply(rep, bounds=role == "reference")
            except ValueError as exc:
                if role == "reference":
                    raise Stop("workload_error", ErrorInfo(kind="workload_error", phase="time", rank=rank, message=(
                        f"rank {rank}: the reference's timed block sent no usable projections ({exc})")))
                raise Stop("rejected", ErrorInfo(kind="integrity", phase="time", rank=rank, message=(
                    f"rank {rank}: the candidate's timed block sent malformed projections of its outputs ({exc})")))
            if role == "reference" and not out[rank].finite():
                raise Stop("workload_error", ErrorInfo(kind="workload_error", phase="time", rank=rank, message=(
                    f"rank {rank}: the reference's outputs in a timed call had NaN or Inf values (or overflow float64 when squared)")))
        return out

    def _handed_outputs(self, limit_s: float) -> dict[int, dict]:
        """The candidate's last outputs of the round's block, asked for after the round (outside
        every timed span), per rank: {"outputs", "spec"} (None where not handed back)."""
        replies = self.pools.candidate.request("block_outputs", {}, timeout=self.limit(max(self.s.hang_floor_s, limit_s)),
                                               stall_s=self.s.stall_s)
        self.check_candidate(replies, "time")
        return {r: {"outputs": rep.get("outputs"), "spec": rep.get("spec")} for r, rep in replies.by_rank.items()}

    def _check_projections(self, ref: Block, cand: Block, round_: int) -> None:
        """Every timed call of the round's candidate block against the reference's call of the
        same index: ``incorrect`` where either projection is off by more than ``projection_sigmas``
        bounds."""
        for rank, want in sorted(ref.projections.items()):
            got = cand.projections.get(rank)
            problem = "no projections" if got is None else projection_check.shape_problem(got, want)
            if problem:
                raise Stop("rejected", ErrorInfo(kind="integrity", phase="time", rank=rank, message=(
                    f"rank {rank}: the candidate's projections of timing round {round_}'s calls do not fit its block: {problem}")))
            bad = projection_check.first_mismatch(got, want, self.s.projection_sigmas)
            if bad is not None:
                self.flag(
                    f"timed call {bad.call} of round {round_} did not match the reference on rank {rank} (tensor output {bad.leaf}'s "
                    f"{bad.projection} projection off by {bad.off:.3g}, bound {bad.allowed:.3g}): computes only some of the timed calls")
                raise Stop("incorrect")

    def _check(self, blocks: dict[str, list[Block]], per_block: int) -> ClockCheck:
        """The clock check (``clock_check``) under this timing's settings."""
        return clock_check(blocks, per_block, self.s, self.staged)


def staged_rounds(iters: int, rounds: int, input_bytes: int | None, output_bytes: int, s: EvalSettings) -> tuple[int, int] | None:
    """(rounds, calls a block) of staged timing for ``iters`` calls a side, or None where the
    rounds are not staged: staging off, inputs the judge cannot send (``input_bytes`` None), a
    device-memory limit (whose promise, each side's own tensors and one copy of the outputs, a
    block's worth of inputs and outputs would break), or fewer than ``min_iters`` calls in
    ``staged_max_rounds`` blocks of what fits ``staged_block_bytes``. Blocks hold what fits (more
    rounds, an even number, where the unstaged ones would not), and no more than the unstaged
    blocks would."""
    if not s.staged_blocks or input_bytes is None or s.device_memory_limit_bytes > 0:
        return None
    fit = s.staged_block_bytes // max(1, int(input_bytes) + int(output_bytes))
    if fit < 1 or min(iters, s.staged_max_rounds * fit) < min(iters, s.min_iters):
        return None
    per_block = min(math.ceil(iters / rounds), fit)
    rounds = max(rounds, math.ceil(iters / per_block))
    rounds = min(rounds + rounds % 2, s.staged_max_rounds - s.staged_max_rounds % 2) if rounds > 1 else rounds
    return max(1, rounds), per_block


def clock_check(blocks: dict[str, list[Block]], per_block: int, s: EvalSettings, staged: bool = False) -> ClockCheck:
    """A side's overhead per block (wall - reported) is its input draws, flushes, barriers and
    the round trip, plus whatever else the machine did meanwhile. The machine's pace drifts
    over a timing (on an H100 the same side's overhead moved between 0.34 and 0.62 ms a call
    from one round to the next), so each round's candidate block is compared with the
    reference's block of the same round, run right beside it. The candidate's excess over the
    reference, taken at the upper median of the rounds (a candidate that forges half of its
    blocks or more is measured on a forged one), may be at most ``clock_slack`` of its median
    block time, plus ``clock_overhead_slack`` of the reference's unaccounted time, plus
    ``clock_slack_ms``."""
    ref, cand = blocks["reference"], blocks["candidate"]
    ref_over = [b.unaccounted_ms for b in ref]
    cand_over = [b.unaccounted_ms for b in cand]
    excess = sorted(c - r for c, r in zip(cand_over, ref_over))
    median_excess = excess[len(excess) // 2]
    cand_wall = statistics.median(b.wall_ms for b in cand)
    ref_overhead = statistics.median(ref_over)
    slack = (s.staged_clock_slack, s.staged_clock_overhead_slack, s.staged_clock_slack_ms) if staged else (
        s.clock_slack, s.clock_overhead_slack, s.clock_slack_ms)
    allowed = slack[0] * cand_wall + slack[1] * max(0.0, ref_overhead) + slack[2]
    return ClockCheck(
        blocks=len(cand), calls_per_block=per_block,
        reference_block_ms=statistics.median(b.wall_ms for b in ref), candidate_block_ms=cand_wall,
        reference_unaccounted_ms=ref_overhead, candidate_unaccounted_ms=statistics.median(cand_over),
        allowed_ms=allowed, ok=median_excess <= allowed, excess_ms=median_excess, staged=staged,
    )


def _per_rank(blocks: list[Block]) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for b in blocks:
        for rank, times in b.times.items():
            out.setdefault(rank, []).extend(times)
    return out


def stats(times: dict[int, list[float]], world: int) -> list[TimeStats]:
    return [TimeStats.from_samples(times[r]) for r in range(world)]
