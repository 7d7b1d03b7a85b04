"""The judge's protocol for one candidate, run from the evaluator's process over two rank pools.

``JudgePools`` holds, per world size, a pool of reference ranks and a pool of candidate ranks:
separate processes (each pool in its own sandbox, pid namespace and compiler caches), so that
nothing in a candidate's process holds the reference model, its outputs, the seeds or the judge's
state. Per trial, in lockstep: the reference ranks draw fresh inputs and run the reference; the
inputs go (through this process) to the candidate ranks; their outputs come back here and go to
the reference ranks, which compare them with theirs. Timing (``interleaved.py``) alternates
blocks of calls of the two sides with the other side stopped.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from contextlib import contextmanager

from kloom.evaluation import ErrorInfo

from services.worker.profiler.nvml import NvmlSampler

from . import placement
from .pool import PoolFailure, RankPool
from .settings import EvalSettings

class Stop(Exception):
    """Ends an evaluation early with a finished result."""

    def __init__(self, status: str, error: ErrorInfo | None = None):
        super().__init__(status)
        self.status = status
        self.error = error


class JudgePools:
    """The reference's and the candidate's rank pools of one world size."""

    def __init__(self, world_size: int, device: str, settings: EvalSettings, devices: list[int] | None = None,
                 interrupt: threading.Event | None = None):
        self.world_size = world_size
        self._args = (world_size, device, settings, devices)
        #: Shared by every pool of the pair, spares included (``RankPool.interrupt``).
        self.interrupt = interrupt or threading.Event()
        self.reference = RankPool(*self._args, role="reference", interrupt=self.interrupt)
        self.candidate = self._new_candidate()
        self.workload_sha = ""  # the workload whose code the reference's ranks have run
        # Candidate ranks begun ahead, for the candidates after this one: each is a fresh set of
        # processes importing torch, then waiting (before CUDA, the process group or anything
        # else) until its pool accepts them, when it becomes ``candidate`` (``renew_candidate``).
        self.spares: deque[RankPool] = deque()
        self.renewals = 0  # candidates judged in these pools so far: spares grow with them
        self._sampler: NvmlSampler | None = None  # the GPUs' NVML sampler, kept open across evaluations
        self._placed: set[int] | None = None  # this thread's cores before ``place_for_timing``

    def sampler(self) -> NvmlSampler:
        """The NVML sampler of these pools' GPUs, started once and kept (again where it stopped)."""
        if self._sampler is not None and not self._sampler.open:
            self._close_sampler()
        if self._sampler is None:
            self._sampler = NvmlSampler(self.devices[: self.world_size], interval_s=None).__enter__()
        return self._sampler

    def _close_sampler(self) -> None:
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            sampler.__exit__(None, None, None)

    @property
    def pools(self) -> tuple[RankPool, RankPool]:
        return self.reference, self.candidate

    @property
    def alive(self) -> bool:
        return self.reference.alive and self.candidate.alive

    @property
    def procs(self) -> list:
        return self.reference.procs + self.candidate.procs + [p for spare in self.spares for p in spare.procs]

    @property
    def starts(self) -> int:
        """How many times the pair was started (a fault of the candidate restarts its pool only)."""
        return max(self.reference.starts, self.candidate.starts)

    @property
    def environment(self) -> dict:
        return self.reference.environment

    @property
    def devices(self) -> list[int]:
        return self.reference.devices

    @property
    def workdir(self) -> str | None:
        return self.candidate.workdir

    def start(self, candidate: bool = True, workload_sha: str = "") -> None:
        """Start the pools that are not running, and finish a start that was begun. One after
        the other, from this thread: each rank's launcher dies with the thread that started it
        (``PR_SET_PDEATHSIG``). The reference's ranks serve one workload: for another one (whose
        code might have been written to reach the next), they start afresh."""
        if workload_sha and workload_sha != self.workload_sha:
            self.reference.kill()
            self.workload_sha = workload_sha
        _ready(self.reference)
        if candidate:
            _ready(self.candidate)

    def begin_candidate(self) -> None:
        """Launch the candidate's ranks if they are neither running nor starting; they join by
        ``ready_candidate`` (meanwhile the reference can run its first trial)."""
        if not self.candidate.alive and not self.candidate.starting:
            self.candidate.begin()

    def ready_candidate(self, outputs: list | None = None, admit_spare: bool = True) -> None:
        """The candidate's ranks joined; the next candidate's, if begun ahead, are admitted (they
        initialise the device and form their process group meanwhile, stopped while a block is
        timed) with ``admit_spare`` (the caller's judgement of the device's room), else as this
        candidate's go (``renew_candidate``). ``outputs``: (bytes, dtype name) of the reference's
        output leaves, which the ranks load the projection's kernel for as they join
        (``RankPool.warm_outputs``)."""
        for pool in (self.candidate, *list(self.spares)[:1]):
            if not pool.admitted:
                pool.warm_outputs = list(outputs or [])
        _ready(self.candidate)
        if self.spares and admit_spare:
            self.spares[0].admit()

    def renew_candidate(self, more_after: int = 0) -> None:
        """Replace the candidate's ranks after a candidate ran in them, whatever its verdict: a
        candidate judged correct may still have patched its process (a library function, the
        harness) for the next one. The next ranks are a spare begun earlier where there is one,
        else they start now; either way they join by the next ``start``. Spares are then begun
        up to ``EvalSettings.spare_candidate_pools``: one more for each candidate judged (an
        evaluator that judges one candidate starts no ranks it will not use), or for the
        candidates the caller said will follow the next one (``more_after`` counts those after
        the one just judged; a job's steps left, an upper bound), up to
        ``EvalSettings.spares_for_announced``. On a GPU machine that is all of them: a spare needs
        several judgements' lead, as a start (importing torch, ~4-5 s on the H200 machines) takes
        longer than judging a small candidate (1.5-4 s), and with one spare ahead a job's
        candidates waited for their ranks in every other evaluation
        (benchmarks/results/judge_cost_cuda.md)."""
        self.candidate.kill()
        self.renewals += 1
        while self.spares and not self.spares[0].starting:  # one that failed to launch
            self.spares.popleft().kill()
        if self.spares:
            self.candidate = self.spares.popleft()
            self.candidate.admit()  # on the device now, if it was not during the evaluation
        else:
            self.candidate = self._new_candidate()
            self._begin(self.candidate)
        self.begin_spares(max(self.renewals - 1, min(self.reference.settings.spares_for_announced, more_after - 1)))

    def begin_spares(self, wanted: int) -> None:
        """Begin candidate ranks ahead until ``wanted`` spares (at most
        ``EvalSettings.spare_candidate_pools``) are starting."""
        depth = min(self.reference.settings.spare_candidate_pools, wanted)
        while len(self.spares) < depth:
            spare = self._new_candidate()
            if not self._begin(spare):
                break
            self.spares.append(spare)

    def _new_candidate(self) -> RankPool:
        return RankPool(*self._args, role="candidate", interrupt=self.interrupt)

    @staticmethod
    def _begin(pool: RankPool) -> bool:
        try:
            pool.begin()
            return True
        except PoolFailure:
            pool.kill()  # the next start tries again, and says why if it fails
            return False

    def stop_spares(self, admitted_only: bool) -> None:
        """Stop the spares' processes (their start resumes with ``resume_spares``): all of them,
        or those admitted (which may touch the device)."""
        for spare in self.spares:
            if not admitted_only or spare.admitted:
                spare.stop()

    def place_for_timing(self) -> None:
        """On a GPU machine with the cores: rank i of both sides on cores of its own, this thread
        on another, everything else of the pools elsewhere (``placement.py``); ``unplace`` undoes it."""
        where = placement.plan(self.world_size) if self.reference.device == "cuda" else None
        if where is None:
            return
        self._placed = os.sched_getaffinity(0)
        for spare in self.spares:
            placement.pin(spare.processes(), where.rest)
        for pool in self.pools:
            placement.pin(pool.processes(), where.rest)
            for rank, cores in enumerate(where.ranks):
                placement.pin(pool.processes([rank]), cores)
        os.sched_setaffinity(0, {where.judge})

    def unplace(self) -> None:
        """Every process of the pools, and this thread, back on the cores they had."""
        cores, self._placed = self._placed, None
        if cores is None:
            return
        os.sched_setaffinity(0, cores)
        for pool in (*self.pools, *self.spares):
            placement.pin(pool.processes(), cores)

    def resume_spares(self) -> None:
        for spare in self.spares:
            spare.resume()

    @contextmanager
    def reference_alone(self):
        """Everything but the reference's ranks stopped (the candidate's, starting or not, and
        the spares), for timing the reference alone."""
        try:
            self.candidate.stop()
            self.stop_spares(admitted_only=False)
            yield
        finally:
            self.candidate.resume()
            self.resume_spares()

    def kill(self) -> None:
        for pool in self.pools:
            pool.kill()
        self._drop_spares()
        self._close_sampler()

    def close(self) -> None:
        for pool in self.pools:
            pool.close()
        self._drop_spares()
        self._close_sampler()

    def _drop_spares(self) -> None:
        while self.spares:
            self.spares.popleft().kill()

    def kill_now(self) -> None:
        """From another thread: SIGKILL every rank (stopped ones too); the call in flight then
        finds them dead within a fraction of a second."""
        for pool in [self.reference, self.candidate, *list(self.spares)]:
            pool.kill_now()


def _ready(pool: RankPool) -> None:
    """``pool`` running and joined: a begun start finished (or, failing that, made again once)."""
    if pool.starting:
        try:
            pool.finish()
        except PoolFailure:
            pool.start()
    elif not pool.alive:
        pool.start()
