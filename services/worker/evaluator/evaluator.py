"""The evaluator: is a candidate correct on every rank, and how fast is it against the reference?

Protocol for one candidate (``docs/evaluator.md`` has the reasoning):

1. Static checks (file format, ``check_candidate``) in this process; nothing runs yet.
2. ``prepare``: every rank builds the reference, runs it on ``trials + 1`` fresh seeded inputs
   and times it, before any candidate code is imported; outputs come back here.
3. ``load_candidate``; then each correctness trial: the ranks regenerate the same inputs, run the
   candidate and send its outputs back; this process compares them with the reference's.
4. Timing of the candidate; then one more trial on new inputs (catches caching and lazy work);
   then the reference is timed again to detect drift.
5. Any failure that can leave a rank unusable (a crash, a hang, a tampered process, a failed CUDA
   graph capture) kills the pool; the next evaluation starts a fresh one.
"""

from __future__ import annotations

import os
import secrets
import time
from contextlib import contextmanager
from pathlib import Path

from kloom.roofline import RooflineTerms, detect_profile, estimate, load_profile
from kloom.workload import WorkloadError, inspect_candidate, inspect_workload, read_source

from .compare import compare_rank, resolve_tolerance, tolerance_to_names
from .pool import PoolFailure, RankPool, Replies
from .records import (
    POOL_KILLING,
    BaselineResult,
    ErrorInfo,
    EvalResult,
    TimeStats,
    TimingRecord,
    TrialRecord,
)
from .settings import EvalSettings
from .static_check import check_candidate

_COMPILE_ERROR_TYPES = {"CompilationError", "CompileError", "BackendCompilerFailed", "InductorError"}


class _Stop(Exception):
    """Ends an evaluation early with a finished result."""

    def __init__(self, status: str, error: ErrorInfo | None = None):
        super().__init__(status)
        self.status = status
        self.error = error


class Evaluator:
    """Evaluates candidates on warm rank pools, one pool per world size."""

    def __init__(self, device: str = "cpu", settings: EvalSettings | None = None, devices: list[int] | None = None):
        self.device = device
        self.settings = settings or EvalSettings.for_device(device)
        self.devices = devices
        self.pools: dict[int, RankPool] = {}
        self._ends_at: float | None = None  # monotonic end of the running evaluation's deadline

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()
        self.pools.clear()

    def pool(self, world_size: int) -> RankPool:
        """The warm pool for ``world_size``, started (or restarted) as needed."""
        pool = self.pools.get(world_size)
        if pool is None:
            pool = self.pools[world_size] = RankPool(world_size, self.device, self.settings, self.devices)
        if not pool.alive:
            pool.start()
        return pool

    # Public API --------------------------------------------------------------------------------
    def evaluate(
        self,
        workload: str | os.PathLike,
        candidate: str | os.PathLike | None = None,
        *,
        world_size: int,
        candidate_source: str | None = None,
        deadline_s: float | None = None,
    ) -> EvalResult:
        """Judge one candidate (a file, or its source text) on ``workload`` at ``world_size``.

        ``deadline_s`` bounds the whole evaluation (a job's wall-time limit, say): every request to
        the ranks gets the smaller of its own limit and what is left, and an evaluation that runs
        out is a ``timeout`` that says so."""
        result = EvalResult(status="correct", workload=str(workload), world_size=world_size, device=self.device)
        started = time.monotonic()
        self._ends_at = None if deadline_s is None else started + max(0.0, deadline_s)
        ran = False  # whether workload or candidate code ran in the pool
        try:
            info, source = self._static(workload, candidate, candidate_source, world_size, result)
            with self._phase(result, "start"):
                pool = self._start_pool(world_size)
            result.environment = dict(pool.environment)
            ran = True
            self._run(pool, info, source, result)
        except _Stop as stop:
            result.status = stop.status
            result.error = stop.error
        except PoolFailure as failure:
            result.status, result.error = _pool_failure(failure)
            if failure.kind == "timeout" and self._ends_at is not None and time.monotonic() >= self._ends_at - 0.5:
                result.error.message += f" (this evaluation's deadline of {deadline_s:.0f} s ran out)"
        finally:
            self._ends_at = None
            if ran and result.status in POOL_KILLING and world_size in self.pools:
                self.pools[world_size].kill()
        result.compiled = result.status not in ("compile_error", "rejected", "workload_error") and result.compiled
        result.correct = result.status == "correct"
        result.phase_seconds["total"] = time.monotonic() - started
        return result

    def baseline(self, workload: str | os.PathLike, *, world_size: int) -> BaselineResult:
        """Time the reference alone (one correctness run for sanity, then the timing protocol)."""
        result = BaselineResult(status="correct", workload=str(workload), world_size=world_size, device=self.device)
        started = time.monotonic()
        try:
            info = inspect_workload(workload)
            info.check_world_size(world_size)
            result.workload_sha256 = info.sha256
            pool = self._start_pool(world_size)
            result.environment = dict(pool.environment)
            seed = self._base_seed()
            replies = pool.request(
                "prepare",
                {
                    "workload_path": str(Path(workload).resolve()),
                    "workload_sha": info.sha256,
                    "shapes": self.settings.shapes,
                    "init_seed": seed,
                    "seeds": [seed + 1],
                    "timing_seed": seed + 2,
                    "timing": self._timing_args(),
                },
                timeout=self._prepare_timeout(1),
            )
            self._raise_errors(replies, "prepare", "workload_error")
            result.times = [TimeStats.from_samples(replies.by_rank[r]["times"]) for r in range(world_size)]
            result.reference_ms = max(t.median_ms for t in result.times)
            result.roofline = self._roofline(replies, pool, None, result.reference_ms)
            pool.request("release", {"everything": True}, timeout=self.settings.call_timeout_s)
        except WorkloadError as exc:
            result.status = "workload_error"
            result.error = ErrorInfo(kind="workload_error", message=str(exc), phase="inspect")
        except _Stop as stop:
            result.status = stop.status
            result.error = stop.error
        except PoolFailure as failure:
            result.status, result.error = _pool_failure(failure)
        finally:
            if result.status != "correct" and world_size in self.pools:
                self.pools[world_size].kill()
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
        pool = self.pool(world_size)
        tolerance = {k: tuple(v) for k, v in self.settings.tolerance.items()}
        try:
            replies = pool.request("probe_split", {"seed": seed + 7, "chunks": 2, "tolerance": tolerance}, timeout=self.settings.call_timeout_s * 2)
        except PoolFailure:
            pool.kill()
            return None
        if replies.errors() or replies.missing:
            pool.kill()
            return None
        splits = [replies.by_rank[r]["split"] for r in sorted(replies.by_rank)]
        return splits[0] if all(s == splits[0] for s in splits) else None

    def reference_io(self, workload: str | os.PathLike, *, world_size: int, seed: int = 0) -> list[dict]:
        """Per rank: the reference's state dict, inputs (before and after the call) and output
        leaves, as CPU tensors. Used to check references against a single-process computation."""
        return self._reference_command("reference_io", workload, world_size, seed)

    def _reference_command(self, op: str, workload, world_size: int, seed: int) -> list[dict]:
        info = inspect_workload(workload)
        info.check_world_size(world_size)
        pool = self._start_pool(world_size)
        try:
            replies = pool.request(
                op,
                {
                    "workload_path": str(Path(workload).resolve()),
                    "workload_sha": info.sha256,
                    "shapes": self.settings.shapes,
                    "init_seed": seed,
                    "seed": seed + 1,
                },
                timeout=self._prepare_timeout(1),
            )
            self._raise_errors(replies, "prepare", "workload_error")
        except (_Stop, PoolFailure) as exc:
            pool.kill()
            detail = exc.error.message if isinstance(exc, _Stop) and exc.error else str(exc)
            raise RuntimeError(f"{workload}: the reference failed at world size {world_size}: {detail}") from None
        return [replies.by_rank[r] for r in range(world_size)]

    # Steps -------------------------------------------------------------------------------------
    def _static(self, workload, candidate, candidate_source, world_size, result):
        try:
            info = inspect_workload(workload)
            info.check_world_size(world_size)
        except WorkloadError as exc:
            raise _Stop("workload_error", ErrorInfo(kind="workload_error", message=str(exc), phase="inspect"))
        result.workload_sha256 = info.sha256
        label = str(candidate) if candidate is not None else "<candidate>"
        try:
            source = candidate_source if candidate_source is not None else read_source(candidate)
            cinfo = inspect_candidate(label, source)
        except WorkloadError as exc:
            raise _Stop("compile_error", ErrorInfo(kind="compile_error", message=str(exc), phase="inspect"))
        result.candidate_sha256 = cinfo.sha256
        violations = check_candidate(source, label)
        if violations:
            message = f"{label}: rejected by the static checker: " + "; ".join(str(v) for v in violations)
            raise _Stop("rejected", ErrorInfo(kind="static_check", message=message, phase="static_check"))
        return info, source

    def _start_pool(self, world_size: int) -> RankPool:
        try:
            return self.pool(world_size)
        except PoolFailure as failure:
            raise EvaluatorUnavailable(f"could not start {world_size} rank processes on {self.device}: {failure}\n{failure.log_tail}") from failure

    def _run(self, pool: RankPool, info, source: str, result: EvalResult) -> None:
        s = self.settings
        world = result.world_size
        base = self._base_seed()
        seeds = [base + 1 + k for k in range(s.trials + 1)]
        result.seeds = seeds
        cand_path = self._write_candidate(pool, source, result.candidate_sha256)
        with self._phase(result, "reference"):
            prep = pool.request(
                "prepare",
                {
                    "workload_path": str(Path(info.path).resolve()),
                    "workload_sha": info.sha256,
                    "shapes": s.shapes,
                    "init_seed": base,
                    "seeds": seeds,
                    "timing_seed": base + 10_000,
                    "timing": self._timing_args(),
                    "transfer_bytes": s.judge_transfer_bytes,
                },
                timeout=self._limit(self._prepare_timeout(len(seeds))),
            )
            self._raise_errors(prep, "prepare", "workload_error")
        tolerance = resolve_tolerance(prep.by_rank[0].get("tolerance"), s.tolerance)
        ref_times = [TimeStats.from_samples(prep.by_rank[r]["times"]) for r in range(world)]

        with self._phase(result, "load"):
            replies = pool.request(
                "load_candidate",
                {"path": cand_path, "init_seed": base, "tolerance": tolerance_to_names(tolerance)},
                timeout=self._limit(s.load_timeout_s),
            )
            self._raise_errors(replies, "load_candidate", "compile_error")
        result.compiled = True

        for k in range(s.trials):
            with self._phase(result, "correctness"):
                if not self._trial(pool, prep, k, "correctness", tolerance, result):
                    raise _Stop("incorrect")

        which = "both" if s.interleave_timing else "candidate"
        with self._phase(result, "timing"), self._gpu_sampler(pool, world) as sampler:
            timing = pool.request("time", {"which": which, "timing": self._timing_args()}, timeout=self._limit(2 * s.timing_timeout_s))
            self._raise_errors(timing, "time", "runtime_error")
        if sampler is not None:
            nvml = sampler.summary()
            result.environment["nvml"] = nvml
            result.flags.extend(f"gpu: {flag}" for flag in nvml.get("flags", []))
        cand_times = [TimeStats.from_samples(timing.by_rank[r]["times"]) for r in range(world)]
        alone = None
        if s.interleave_timing:
            # The reference timed beside the candidate is the one it is compared with; the timing
            # taken before any candidate code was imported is kept to show drift.
            alone, ref_times = ref_times, [TimeStats.from_samples(timing.by_rank[r]["reference_times"]) for r in range(world)]

        with self._phase(result, "post_timing_check"):
            if not self._trial(pool, prep, s.trials, "post_timing", tolerance, result):
                result.flags.append("passed before timing but failed after it: caches results or computes lazily")
                raise _Stop("incorrect")

        after = None
        if s.recheck_reference and not s.interleave_timing:
            with self._phase(result, "reference_recheck"):
                again = pool.request("time", {"which": "reference", "timing": self._timing_args()}, timeout=self._limit(s.timing_timeout_s))
                self._raise_errors(again, "time", "runtime_error")
                after = [TimeStats.from_samples(again.by_rank[r]["times"]) for r in range(world)]
        released = pool.request("release", {"everything": True}, timeout=self._limit(s.call_timeout_s))
        self._raise_errors(released, "release", "runtime_error")

        ref_ms = max(t.median_ms for t in ref_times)
        cand_ms = max(t.median_ms for t in cand_times)
        result.timing = TimingRecord(
            reference=ref_times,
            candidate=cand_times,
            reference_ms=ref_ms,
            candidate_ms=cand_ms,
            speedup=ref_ms / cand_ms if cand_ms > 0 else float("inf"),
            reference_after=after,
            reference_alone=alone,
            interleaved=s.interleave_timing,
            clock="cuda_events" if self.device == "cuda" else "wall",
        )
        result.roofline = self._roofline(prep, pool, cand_ms, ref_ms, result.flags)
        self._flag(result)

    def _trial(self, pool: RankPool, prep: Replies, k: int, phase: str, tolerance, result: EvalResult) -> bool:
        # The first call may compile (torch.compile, Triton, CUDA graphs): it gets the load limit.
        timeout = max(self.settings.call_timeout_s, self.settings.load_timeout_s) if k == 0 else self.settings.call_timeout_s
        replies = pool.request("trial", {"k": k}, timeout=self._limit(timeout))
        self._raise_errors(replies, "trial", "runtime_error")
        record = TrialRecord(trial=k, seed=result.seeds[k], phase=phase, ok=True)
        for rank in range(result.world_size):
            got = replies.by_rank[rank]
            check = compare_rank(rank, got, prep.by_rank[rank]["trials"][k], tolerance)
            if got.get("aliases") and "output_aliases_input" not in result.flags:
                result.flags.append("output_aliases_input")
            record.ranks.append(check)
            record.ok &= check.ok
        result.trials.append(record)
        return record.ok

    # Helpers -----------------------------------------------------------------------------------
    def _limit(self, timeout: float) -> float:
        """``timeout``, or less where this evaluation's deadline comes first."""
        if self._ends_at is None:
            return timeout
        left = self._ends_at - time.monotonic()
        if left <= 0:
            raise PoolFailure("timeout", "the evaluation's deadline ran out before the ranks were asked for more")
        return min(timeout, left)

    def _raise_errors(self, replies: Replies, op: str, status: str) -> None:
        violations = replies.violations()
        if violations:
            rank, text = violations[0]
            raise _Stop("rejected", ErrorInfo(kind="integrity", message=f"rank {rank}: {text}", rank=rank, phase=op))
        errors = replies.errors()
        if not errors:
            return
        rank, err = errors[0]
        kind = status
        if err.get("workload_problem"):
            kind = "workload_error"
        elif status == "runtime_error" and err.get("type") in _COMPILE_ERROR_TYPES:
            kind = "compile_error"
        message = err["message"]
        if op == "prepare" and not err.get("workload_problem"):
            message = f"the reference failed: {message}"
        others = [r for r, _ in errors[1:]]
        if others:
            message += f" (also failed on rank(s) {', '.join(map(str, others))})"
        if replies.missing:
            message += f"; rank(s) {', '.join(map(str, replies.missing))} stopped answering after that"
        # Errors that leave ranks waiting in a collective, or the CUDA context broken, kill the pool.
        if replies.missing and kind == "compile_error":
            kind = "runtime_error"
        raise _Stop(kind, ErrorInfo(kind=err.get("type", kind), message=message, rank=rank, phase=op, traceback=err.get("traceback", "")))

    def _roofline(self, prep: Replies, pool: RankPool, cand_ms, ref_ms, flags: list[str] | None = None):
        """The floor of the slowest rank: each rank's terms give its own floor, and the step
        cannot finish before the rank with the largest one."""
        terms = [prep.by_rank[r].get("roofline") for r in sorted(prep.by_rank)]
        terms = [t for t in terms if t]
        if not terms:
            return None
        name = self.settings.hardware_profile
        if name == "auto":
            name = detect_profile(pool.environment)
        try:
            profile = load_profile(name)
            records = [estimate(RooflineTerms.from_mapping(t), profile, cand_ms, ref_ms) for t in terms]
        except (KeyError, ValueError) as exc:
            if flags is not None:
                flags.append(f"roofline_unavailable: {exc}")
            return None
        return max(records, key=lambda r: r.floor_ms)

    def _flag(self, result: EvalResult) -> None:
        t = result.timing
        s = self.settings
        if t.speedup >= s.suspicious_speedup:
            result.flags.append(f"suspiciously_fast: {t.speedup:.1f}x over the reference")
        if result.roofline and result.roofline.floor_ms > 0 and t.candidate_ms < 0.9 * result.roofline.floor_ms:
            result.flags.append("faster_than_roofline_floor: check the workload's roofline() or the candidate")
        if t.reference_after:
            again = max(x.median_ms for x in t.reference_after)
            if abs(again - t.reference_ms) > 0.15 * t.reference_ms:
                result.flags.append(f"reference_timing_drift: {t.reference_ms:.4g} ms before, {again:.4g} ms after the candidate")
        if t.reference_alone:
            alone = max(x.median_ms for x in t.reference_alone)
            if abs(t.reference_ms - alone) > 0.15 * alone:
                # The machine changed speed between the two, or (what the integrity checks are there
                # to rule out) the candidate slows the reference down: a person should look.
                result.flags.append(
                    f"reference_timing_drift: {alone:.4g} ms alone before the candidate, {t.reference_ms:.4g} ms beside it"
                )
        if any(x.spread > 0.5 for x in t.candidate + t.reference):
            result.flags.append("noisy_timing")

    @contextmanager
    def _gpu_sampler(self, pool: RankPool, world: int):
        """NVML samples of the pool's GPUs while the candidate is timed (clocks, power, others'
        processes); nothing on the CPU."""
        if self.device != "cuda":
            yield None
            return
        from services.worker.profiler.nvml import NvmlSampler

        with NvmlSampler(pool.devices[:world], interval_s=0.05) as sampler:
            yield sampler

    def _timing_args(self) -> dict:
        s = self.settings
        return {
            "warmup_iters": s.warmup_iters,
            "min_iters": s.min_iters,
            "max_iters": s.max_iters,
            "budget_s": s.timing_budget_s,
            "flush_bytes": s.flush_bytes,
        }

    def _prepare_timeout(self, n_trials: int) -> float:
        s = self.settings
        return s.load_timeout_s + n_trials * s.call_timeout_s + s.timing_timeout_s

    def _base_seed(self) -> int:
        if self.settings.seed is not None:
            return self.settings.seed
        return secrets.randbits(30)

    def _write_candidate(self, pool: RankPool, source: str, sha: str) -> str:
        directory = Path(pool.workdir) / "candidates"
        directory.mkdir(exist_ok=True)
        path = directory / f"candidate_{sha[:16]}.py"
        path.write_text(source)
        return str(path)

    @contextmanager
    def _phase(self, result: EvalResult, name: str):
        t0 = time.monotonic()
        try:
            yield
        finally:
            result.phase_seconds[name] = result.phase_seconds.get(name, 0.0) + time.monotonic() - t0


def _pool_failure(failure: PoolFailure) -> tuple[str, ErrorInfo]:
    """The status and error of an evaluation whose pool died or hung."""
    status = "timeout" if failure.kind == "timeout" else "crashed"
    return status, ErrorInfo(kind=failure.kind, message=str(failure), rank=failure.rank, log_tail=failure.log_tail)


class EvaluatorUnavailable(RuntimeError):
    """The rank processes could not be started: a fault of the machine, not of the candidate."""
