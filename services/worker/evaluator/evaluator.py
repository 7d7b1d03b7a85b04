"""The evaluator: is a candidate correct on every rank, and how fast is it against the reference?

Protocol for one candidate (``docs/evaluator.md`` has the reasoning, ``docs/reliability.md`` the
boundaries; ``judge.py`` the pools and the timing):

1. Static checks (file format; ``check_candidate`` unless ``EvalSettings.static_check`` is off)
   in this process; nothing runs yet.
2. The reference ranks build the reference and run it on the first trial's fresh inputs; their
   peak memory sets the candidate's share of the device-memory limit; the candidate ranks (other
   processes) load the candidate.
3. Each correctness trial, in lockstep: the reference ranks draw new inputs and run the
   reference; the candidate ranks get the inputs and run the candidate; the reference ranks
   compare its outputs with theirs (tolerance per dtype, plus the fp32 norm-wise bound).
4. Interleaved timing, each side stopped while the other is timed, with the candidate's clock
   checked against this process's; then one more trial on new inputs.
5. A call that is not the first of its side must end within max(hang_floor_s, hang_factor x the
   reference's call time); a first call that uses no CPU for stall_s is a deadlock. Any failure
   that can leave a rank unusable kills both pools; the next evaluation starts fresh ones.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from kloom.evaluation import EVALUATOR_VERSION, BaselineResult, ErrorInfo, EvalResult
from kloom.roofline import RooflineTerms, detect_profile, estimate, load_profile
from kloom.static_check import check_candidate
from kloom.workload import WorkloadError, inspect_candidate, inspect_workload, read_source

from . import precision
from .interleaved import stats
from .judge import JudgePools, Stop
from .pool_replies import replies_value
from .judge_trials import Trials
from .pool import PoolFailure, Replies
from .protocol import materialize
from .settings import EvalSettings

_COMPILE_ERROR_TYPES = {"CompilationError", "CompileError", "BackendCompilerFailed", "InductorError"}


class Evaluator:
    """Evaluates candidates on warm pairs of rank pools, one pair per world size."""

    def __init__(self, device: str = "cpu", settings: EvalSettings | None = None, devices: list[int] | None = None):
        self.device = device
        self.settings = settings or EvalSettings.for_device(device)
        self.devices = devices
        self.pools: dict[int, JudgePools] = {}
        self._ends_at: float | None = None  # monotonic end of the running evaluation's deadline
        self._aborted: str | None = None  # why ``abort`` ended the call in flight
        # Set by ``abort``: every pool's waits end at once, those of ranks not started yet too.
        self._interrupt = threading.Event()

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for pools in self.pools.values():
            pools.close()
        self.pools.clear()

    def abort(self, reason: str) -> None:
        """From another thread: end the call in flight within seconds (its ranks are killed); it
        returns ``stopped`` with ``reason``."""
        self._aborted = reason
        self._interrupt.set()
        for pools in list(self.pools.values()):
            pools.kill_now()

    def _begin_call(self) -> None:
        """A new call: an ``abort`` ended the one before it, not this one."""
        self._aborted = None
        self._interrupt.clear()

    def _stopped(self, result) -> None:
        if self._aborted is not None:
            result.status, result.error = "stopped", ErrorInfo(kind="stopped", message=self._aborted)
            self._aborted = None

    def pool(self, world_size: int, candidate: bool = True, workload_sha: str = "") -> JudgePools:
        """The warm pools for ``world_size``, started (or restarted) as needed; with
        ``workload_sha``, a reference pool that ran another workload starts afresh."""
        pools = self.pools.get(world_size)
        if pools is None:
            pools = self.pools[world_size] = JudgePools(world_size, self.device, self.settings, self.devices, self._interrupt)
        pools.start(candidate=candidate, workload_sha=workload_sha)
        return pools

    # Public API --------------------------------------------------------------------------------
    def evaluate(self, workload: str | os.PathLike, candidate: str | os.PathLike | None = None, *, world_size: int,
                 candidate_source: str | None = None, deadline_s: float | None = None, more_after: int = 0) -> EvalResult:
        """Judge one candidate (a file, or its source text) on ``workload`` at ``world_size``.

        ``deadline_s`` bounds the whole evaluation (a job's wall-time limit, say): every request to
        the ranks gets the smaller of its own limit and what is left, and an evaluation that runs
        out is a ``timeout`` that says so. ``more_after``: how many candidates the caller expects
        to have judged after this one (a job's steps left); their ranks begin ahead, while this
        one is judged, instead of each starting when the one before it ends."""
        result = EvalResult(status="correct", workload=str(workload), world_size=world_size, device=self.device,
                            evaluator_version=EVALUATOR_VERSION)
        started = time.monotonic()
        self._begin_call()
        self._ends_at = None if deadline_s is None else started + max(0.0, deadline_s)
        ran = False  # whether workload or candidate code ran in the pools
        reference_failed = False  # whether the reference's pool is the one that failed
        try:
            info, source, level = self._static(workload, candidate, candidate_source, world_size, result)
            with self._phase(result, "start"):
                pools = self._start_pools(world_size, workload_sha=info.sha256)
                # the next candidates' ranks (see renew_candidate)
                pools.begin_spares(min(self.settings.spares_for_announced, more_after))
            result.environment = dict(pools.environment)
            ran = True
            self._run(pools, info, source, level, result)
        except Stop as stop:
            result.status, result.error = stop.status, stop.error
            reference_failed = stop.status in ("workload_error", "resource_limit")
        except PoolFailure as failure:
            result.status, result.error = _pool_failure(failure)
            reference_failed = failure.role != "candidate"
            self._note_deadline(failure, result.error, deadline_s)
        finally:
            self._ends_at = None
            if ran and world_size in self.pools:
                # The candidate's ranks go after every candidate, correct or not (one judged
                # correct may have left its process patched for the next: a library function
                # slowed, the harness rewritten); fresh ones start at once, to join by the next
                # evaluation. The reference's go only when they failed themselves (nothing of a
                # candidate ever runs in them) or for another workload.
                pools = self.pools[world_size]
                if result.status == "stopped" or self._aborted is not None:
                    pools.candidate.kill()
                else:
                    pools.renew_candidate(more_after)
                if reference_failed or result.status in ("stopped", "workload_error") or not pools.reference.alive:
                    pools.reference.kill()
            self._stopped(result)
        result.compiled = result.status not in ("compile_error", "rejected", "workload_error") and result.compiled
        result.correct = result.status == "correct"
        result.phase_seconds["total"] = time.monotonic() - started
        return result

    def baseline(self, workload: str | os.PathLike, *, world_size: int, deadline_s: float | None = None,
                 more_after: int = 0) -> BaselineResult:
        """Time the reference alone (one correctness run for sanity, then the timing protocol);
        within ``deadline_s`` seconds when given (a job's wall-time limit), as ``evaluate``.
        ``more_after``: how many candidates the caller expects to have judged after it (a job's
        steps); with ``candidates_begin_at_baseline`` (a GPU machine's default) the first ones'
        ranks begin now, importing torch while the reference loads and runs (stopped while it is
        timed), instead of when the first candidate comes."""
        result = BaselineResult(status="correct", workload=str(workload), world_size=world_size, device=self.device)
        started = time.monotonic()
        self._begin_call()
        self._ends_at = None if deadline_s is None else started + max(0.0, deadline_s)
        try:
            info = inspect_workload(workload)
            info.check_world_size(world_size)
            result.workload_sha256 = info.sha256
            early = more_after if self.settings.candidates_begin_at_baseline else 0
            pools = self._start_pools(world_size, candidate=early > 0, workload_sha=info.sha256)
            pools.begin_spares(min(self.settings.spares_for_announced, early - 1))
            ref = pools.reference
            result.environment = dict(ref.environment)
            seed = self._base_seed()
            load = ref.request("load", self._load_args(info, seed), timeout=self._prepare_timeout(), stall_s=self.settings.stall_s)
            self._raise_errors(load, "prepare", "workload_error")
            first = ref.request("run_trial", {"seed": seed + 1, "want_roofline": True}, timeout=self._prepare_timeout(), stall_s=self.settings.stall_s)
            self._raise_errors(first, "prepare", "workload_error")
            with pools.reference_alone():
                timed = ref.request("time_alone", {"timing": self._timing_args(), "seed": seed + 2, "restore": self._restore([first])},
                                    timeout=self._limit(self.settings.timing_timeout_s))
            self._raise_errors(timed, "prepare", "workload_error")
            result.times = stats({r: rep["times"] for r, rep in timed.by_rank.items()}, world_size)
            result.reference_ms = max(t.median_ms for t in result.times)
            result.roofline = self._roofline(first, ref.environment, None, result.reference_ms)
            ref.request("release", {"everything": True}, timeout=self.settings.call_timeout_s)
        except WorkloadError as exc:
            result.status, result.error = "workload_error", ErrorInfo(kind="workload_error", message=str(exc), phase="inspect")
        except Stop as stop:
            result.status, result.error = stop.status, stop.error
        except PoolFailure as failure:
            result.status, result.error = _pool_failure(failure)
            self._note_deadline(failure, result.error, deadline_s)
        finally:
            self._ends_at = None
            if result.status != "correct" and world_size in self.pools:
                self.pools[world_size].kill()
            self._stopped(result)
        result.phase_seconds["total"] = time.monotonic() - started
        return result

    def analyze(self, workload: str | os.PathLike, *, world_size: int, seed: int = 0) -> list[dict]:
        """Per rank: a trace of one reference call (operators, collectives, host syncs, data flow,
        input shapes, mutated inputs, roofline terms). Raises ``RuntimeError`` if the reference fails."""
        traces = [r["trace"] for r in self._reference_command("analyze", workload, world_size, seed)]
        split = self._probe_split(world_size, seed)
        for trace in traces:
            trace["row_split"] = split
        return traces

    def _probe_split(self, world_size: int, seed: int) -> dict | None:
        """Row separability of the reference just analysed; a probe that fails or hangs means no."""
        ref = self.pool(world_size, candidate=False).reference
        tolerance = {k: tuple(v) for k, v in self.settings.tolerance.items()}
        try:
            replies = ref.request("probe_split", {"seed": seed + 7, "chunks": 2, "tolerance": tolerance}, timeout=self.settings.call_timeout_s * 2)
        except PoolFailure:
            ref.kill()
            return None
        if replies.errors() or replies.missing:
            ref.kill()
            return None
        splits = [replies.by_rank[r]["split"] for r in sorted(replies.by_rank)]
        return splits[0] if all(s == splits[0] for s in splits) else None

    def reference_io(self, workload: str | os.PathLike, *, world_size: int, seed: int = 0) -> list[dict]:
        """Per rank: the reference's state dict, inputs (before and after the call) and output
        leaves, as CPU tensors. Used to check references against a single-process computation."""
        return self._reference_command("reference_io", workload, world_size, seed)

    def _reference_command(self, op: str, workload, world_size: int, seed: int) -> list[dict]:
        self._begin_call()
        info = inspect_workload(workload)
        info.check_world_size(world_size)
        ref = self._start_pools(world_size, candidate=False, workload_sha=info.sha256).reference
        try:
            args = {"workload_path": str(Path(workload).resolve()), "workload_sha": info.sha256, "shapes": self.settings.shapes,
                    "init_seed": seed, "seed": seed + 1}
            replies = ref.request(op, args, timeout=self._prepare_timeout(), stall_s=self.settings.stall_s)
            self._raise_errors(replies, "prepare", "workload_error")
        except (Stop, PoolFailure) as exc:
            ref.kill()
            detail = exc.error.message if isinstance(exc, Stop) and exc.error else str(exc)
            raise RuntimeError(f"{workload}: the reference failed at world size {world_size}: {detail}") from None
        return [materialize(replies.by_rank[r]) for r in range(world_size)]

    # Steps -------------------------------------------------------------------------------------
    def _static(self, workload, candidate, candidate_source, world_size, result):
        try:
            info = inspect_workload(workload)
            info.check_world_size(world_size)
            level = precision.declared(info.path)
        except (WorkloadError, precision.PrecisionError) as exc:
            raise Stop("workload_error", ErrorInfo(kind="workload_error", message=str(exc), phase="inspect"))
        result.workload_sha256 = info.sha256
        label = str(candidate) if candidate is not None else "<candidate>"
        try:
            source = candidate_source if candidate_source is not None else read_source(candidate)
            cinfo = inspect_candidate(label, source)
        except WorkloadError as exc:
            raise Stop("compile_error", ErrorInfo(kind="compile_error", message=str(exc), phase="inspect"))
        result.candidate_sha256 = cinfo.sha256
        violations = check_candidate(source, label) if self.settings.static_check else []
        if violations:
            message = f"{label}: rejected by the static checker: " + "; ".join(str(v) for v in violations)
            raise Stop("rejected", ErrorInfo(kind="static_check", message=message, phase="static_check"))
        return info, source, level

    def _start_pools(self, world_size: int, candidate: bool = True, workload_sha: str = "") -> JudgePools:
        """The reference's pool ready; the candidate's (``candidate``) launched, to join by
        ``candidate_ready`` after the reference's first trial."""
        with self._starting(world_size):
            pools = self.pool(world_size, candidate=False, workload_sha=workload_sha)
            if candidate:
                pools.begin_candidate()
            return pools

    def candidate_ready(self, pools: JudgePools, outputs: list | None = None, admit_spare: bool = True) -> None:
        with self._starting(pools.world_size):
            pools.ready_candidate(outputs, admit_spare)

    @contextmanager
    def _starting(self, world_size: int):
        try:
            yield
        except PoolFailure as failure:
            if self._aborted is not None:
                raise  # stopped on purpose while starting: not the machine's fault
            raise EvaluatorUnavailable(f"could not start {world_size} rank processes on {self.device}: {failure}\n{failure.log_tail}") from failure

    def _run(self, pools: JudgePools, info, source: str, level: str, result: EvalResult) -> None:
        Trials(self, pools, info, source, level, result).run()

    # Helpers -----------------------------------------------------------------------------------
    def _limit(self, timeout: float) -> float:
        """``timeout``, or less where this evaluation's deadline comes first."""
        if self._ends_at is None:
            return timeout
        left = self._ends_at - time.monotonic()
        if left <= 0:
            raise PoolFailure("timeout", "the evaluation's deadline ran out before the ranks were asked for more")
        return min(timeout, left)

    def _note_deadline(self, failure: PoolFailure, error: ErrorInfo, deadline_s: float | None) -> None:
        """Say in ``error`` when the timeout was the caller's deadline running out (a job's
        wall-time limit), not a rank's own limit."""
        if failure.kind == "timeout" and self._ends_at is not None and time.monotonic() >= self._ends_at - 0.5:
            error.message += f" (this evaluation's deadline of {deadline_s:.0f} s ran out)"

    def _raise_errors(self, replies: Replies, op: str, status: str) -> None:
        violations = replies.violations()
        if violations:
            rank, text = violations[0]
            raise Stop("rejected", ErrorInfo(kind="integrity", message=f"rank {rank}: {text}", rank=rank, phase=op))
        errors = replies.errors()
        if not errors:
            return
        rank, err = errors[0]
        kind = status
        if err.get("workload_problem"):
            kind = "workload_error"
        elif err.get("resource_limit"):
            kind = "resource_limit"
        elif status == "runtime_error" and err.get("type") in _COMPILE_ERROR_TYPES:
            kind = "compile_error"
        message = err["message"]
        if op == "prepare" and kind == "workload_error" and not err.get("workload_problem"):
            message = f"the reference failed: {message}"
        elif kind == "resource_limit":
            message = f"the evaluator's device-memory limit ({self.settings.device_memory_limit_bytes} bytes) was reached: {message}"
        others = [r for r, _ in errors[1:]]
        if others:
            message += f" (also failed on rank(s) {', '.join(map(str, others))})"
        if replies.missing:
            message += f"; rank(s) {', '.join(map(str, replies.missing))} stopped answering after that"
        if replies.missing and kind == "compile_error":
            kind = "runtime_error"  # ranks left waiting in a collective: the pool goes
        raise Stop(kind, ErrorInfo(kind=err.get("type", kind), message=message, rank=rank, phase=op, traceback=err.get("traceback", "")))

    def _roofline(self, first: Replies, environment: dict, cand_ms, ref_ms, flags: list[str] | None = None):
        """The floor of the slowest rank: each rank's terms give its own floor."""
        terms = [t for t in replies_value(first, "roofline", None) if t]
        if not terms:
            return None
        name = self.settings.hardware_profile
        if name == "auto":
            name = detect_profile(environment)
        try:
            profile = load_profile(name)
            records = [estimate(RooflineTerms.from_mapping(t), profile, cand_ms, ref_ms) for t in terms]
        except (KeyError, ValueError) as exc:
            if flags is not None:
                flags.append(f"roofline_unavailable: {exc}")
            return None
        return max(records, key=lambda r: r.floor_ms)

    def _timing_args(self) -> dict:
        s = self.settings
        return {"warmup_iters": s.warmup_iters, "min_iters": s.min_iters, "max_iters": s.max_iters,
                "budget_s": s.timing_budget_s, "flush_bytes": s.flush_bytes}

    def _load_args(self, info, seed: int) -> dict:
        return {"workload_path": str(Path(info.path).resolve()), "workload_sha": info.sha256, "shapes": self.settings.shapes,
                "init_seed": seed, "memory_limit": self.settings.device_memory_limit_bytes}

    @staticmethod
    def _restore(trials: list[Replies]) -> list[int]:
        return sorted({i for t in trials for rep in t.by_rank.values() for i in rep.get("mutated", [])})

    def _prepare_timeout(self) -> float:
        s = self.settings
        return self._limit(s.load_timeout_s + s.call_timeout_s)

    def _base_seed(self) -> int:
        return self.settings.seed if self.settings.seed is not None else secrets.randbits(30)

    @contextmanager
    def _phase(self, result: EvalResult, name: str):
        t0 = time.monotonic()
        try:
            yield
        finally:
            result.phase_seconds[name] = result.phase_seconds.get(name, 0.0) + time.monotonic() - t0


def _pool_failure(failure: PoolFailure) -> tuple[str, ErrorInfo]:
    """The status and error of an evaluation whose pool died or hung."""
    # A pool whose ranks wrote past ``pool_write_bytes``/``pool_write_files`` was killed for it.
    status = {"timeout": "timeout", "writes": "resource_limit"}.get(failure.kind, "crashed")
    return status, ErrorInfo(kind=failure.kind, message=str(failure), rank=failure.rank, log_tail=failure.log_tail)


class EvaluatorUnavailable(RuntimeError):
    """The rank processes could not be started: a fault of the machine, not of the candidate."""

