"""One candidate's evaluation over a ``JudgePools`` pair: load, trials in lockstep, timing, the
trial after timing, and the record (``Evaluator.evaluate`` runs it)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import torch

from kloom.evaluation import ErrorInfo, EvalResult, MemoryRecord, TimingRecord, TrialRecord
from kloom.speedup import excess_skew, judged_times, paired_interval, skew
from kloom.tuning import parse_tuned

from . import precision
from .calibration import Calibration, OwnError
from .compare import compare_rank, resolve_tolerance, tolerance_to_names
from .interleaved import Timing, stats
from .judge import JudgePools, Stop
from .pool_replies import replies_value
from .pool import Replies
from .shared import BlobRef, DeviceBlob

#: Commands of a rank's table of peaks read from one reply (the candidate's is untrusted).
MAX_COMMANDS = 32
#: The flag of a record whose float32 tolerance the reference's own error widened.
WIDENED_FLAG = "float32_tolerance_widened"


class Trials:
    def __init__(self, evaluator, pools: JudgePools, info, source: str, level: str, result: EvalResult):
        self.ev = evaluator
        self.s = evaluator.settings
        self.pools = pools
        self.ref, self.cand = pools.reference, pools.candidate
        self.info = info
        self.source = source
        self.level = level
        self.result = result
        self.world = result.world_size
        self.hang_s = self.s.load_timeout_s  # until the reference's call time is known
        self.peaks = {"reference": 0, "candidate": 0}
        self.peaks_by_command: dict[str, int] = {}
        self.output_bytes = 0
        self.outputs: list = []  # (bytes, dtype name) of the reference's output leaves
        self.calibration: Calibration | None = None  # the float64 runs of the reference, where asked
        self.norm_scale = 1.0

    # The protocol ------------------------------------------------------------------------------
    def run(self) -> None:
        s, ev, result = self.s, self.ev, self.result
        base = ev._base_seed()
        result.seeds = seeds = [base + 1 + k for k in range(s.trials + 1)]
        try:
            with ev._phase(result, "reference"):
                load = self.ref.request("load", ev._load_args(self.info, base), timeout=ev._prepare_timeout(), stall_s=s.stall_s)
                ev._raise_errors(load, "prepare", "workload_error")
                workload_tol = load.by_rank[0].get("tolerance") or {}
                self.tolerance = resolve_tolerance(workload_tol, s.tolerance)
                # A workload that sets its own float32 tolerance is judged by it alone (and one the
                # settings set is not calibrated either).
                own_fp32 = "float32" in {k.replace("torch.", "") for k in workload_tol}
                self.base_tolerance = dict(self.tolerance)
                if s.calibrate_tolerance and self.level == "fp32" and not own_fp32 and "float32" not in s.tolerance:
                    self.calibration = Calibration(precision.FP32_NORM_RTOL, s.calibration_factor, s.calibration_max_scale, s.calibration_max_error,
                                                   budget_s=s.calibration_budget_s)
                first = self.ref.request("run_trial", {"seed": seeds[0], "want_roofline": True, "send_below": s.send_inputs_below_bytes,
                                                       **self._calibrate_args()},
                                         timeout=ev._prepare_timeout(), stall_s=s.stall_s)
                ev._raise_errors(first, "prepare", "workload_error")
            self._note(first, "reference")
            self.ref_call_s = max(replies_value(first, "call_s", 0.0))
            moved_gib = max(replies_value(first, "own_bytes", 0)) / (1 << 30)
            self.hang_s = max(s.hang_floor_s, s.hang_factor * self.ref_call_s) + s.hang_s_per_gib * moved_gib
            # A workload that computes from bf16/fp16/fp8 inputs is judged by its tolerance alone
            # too: its fp32 outputs are not fp32 arithmetic.
            self.norm_check = not own_fp32 and not any(replies_value(first, "low_precision_inputs", False))
            if not self.norm_check:
                self.calibration = None
            self._calibrated(first)
            cand_share = self._candidate_share(first)
            # The output leaves of the reference's first trial (bytes, dtype): which the
            # projection's GPU kernel will read, loaded for them before timing.
            self.outputs = sorted({(size, dtype) for rep in first.by_rank.values()
                                   for size, dtype in zip(rep.get("output_sizes", []), rep.get("output_dtypes", []))})
            with ev._phase(result, "start_candidate"):
                ev.candidate_ready(self.pools, self.outputs, admit_spare=self._room_for_spare(first))
            with ev._phase(result, "load"):
                path = self._write_candidate()
                per_rank = {r: {"init_args": load.by_rank[r]["init_args"]} for r in range(self.world)}
                loaded = self.cand.request("load", {"path": path, "init_seed": base, "shapes": s.shapes, "memory_limit": cand_share,
                                                          "level": self.level, "workload_path": str(Path(self.info.path).resolve())},
                                           per_rank=per_rank, timeout=ev._limit(s.load_timeout_s), stall_s=s.stall_s)
                self._check_candidate(loaded, "load_candidate", "compile_error")
            result.compiled = True
            for k in range(s.trials):
                with ev._phase(result, "correctness"):
                    ref_trial = first if k == 0 else self._reference_trial(seeds[k])
                    if not self._trial(ref_trial, k, "correctness", first_call=k == 0):
                        raise Stop("incorrect")
            with ev._phase(result, "timing"):
                ref_times, cand_times, check = self._time(base + 10_000, first)
            with ev._phase(result, "post_timing_check"):
                if not self._trial(self._reference_trial(seeds[s.trials]), s.trials, "post_timing", first_call=False):
                    result.flags.append("passed before timing but failed after it: caches results or computes lazily")
                    raise Stop("incorrect")
            for pool, args in ((self.cand, {}), (self.ref, {"everything": True})):
                released = pool.request("release", args, timeout=ev._limit(self.hang_s))
                self._note(released, pool.role)
                ev._raise_errors(released, "release", "runtime_error")
                if pool is self.cand:
                    result.tuned = parse_tuned(replies_value(released, "tuned", [])[0])
        finally:
            self._memory()
        ref_ms, cand_ms, statistic = judged_times(ref_times, cand_times, s.timing_skew_tolerance)
        if statistic != "median":
            result.flags.append(f"skewed_calls: the candidate's mean call is {cand_ms / max(t.median_ms for t in cand_times):.3g}x its "
                                f"median, the reference's {ref_ms / max(t.median_ms for t in ref_times):.3g}x: its calls' time is not where "
                                "most of them are; the speedup divides the means")
        try:  # block i of one side was timed beside block i of the other, call for call
            low, high = paired_interval([self.samples[0][r] for r in range(self.world)], [self.samples[1][r] for r in range(self.world)],
                                        statistic=statistic)
        except ValueError:
            low = high = None
        result.timing = TimingRecord(
            reference=ref_times, candidate=cand_times, reference_ms=ref_ms, candidate_ms=cand_ms,
            speedup=ref_ms / cand_ms if cand_ms > 0 else float("inf"), interleaved=True,
            clock="cuda_events" if ev.device == "cuda" else "wall", clock_check=check,
            speedup_ci_low=low, speedup_ci_high=high, statistic=statistic,
        )
        result.roofline = ev._roofline(first, self.ref.environment, cand_ms, ref_ms, result.flags)
        _flag(result, self.s)

    def _reference_trial(self, seed: int) -> Replies:
        args = self._calibrate_args()
        # A float64 run of the reference takes its call again, or more (the first one said how long).
        extra = 2 * self.calibration.own.seconds + 1.0 if args else 0.0
        replies = self.ref.request("run_trial", {"seed": seed, "send_below": self.s.send_inputs_below_bytes, **args},
                                   timeout=self.ev._limit(self.hang_s + extra), stall_s=self.s.stall_s)
        self.ev._raise_errors(replies, "prepare", "workload_error")
        self._note(replies, "reference")
        self._calibrated(replies)
        return replies

    def _calibrate_args(self) -> dict:
        """The ``run_trial`` argument asking for a float64 run (``calibration.py``), while one is wanted."""
        if self.calibration is None or not self.calibration.active or self.world != 1:
            return {}
        return {"calibrate": tolerance_to_names(self.base_tolerance), "calibrate_max_input_bytes": self.s.calibration_max_input_bytes}

    def _trial(self, ref_trial: Replies, k: int, phase: str, first_call: bool) -> bool:
        """The candidate on the inputs the reference just ran; its outputs judged by the reference."""
        ev = self.ev
        # The first call may compile (torch.compile, Triton, CUDA graphs): it gets the load limit,
        # and a deadlock in it is found by the stall check.
        timeout = self.s.load_timeout_s if first_call else self.hang_s
        per_rank = {r: {"inputs": rep["inputs"], "seed": rep["seed"], "mutated": rep["mutated"], "output_sizes": rep.get("output_sizes", []),
                        "input_fingerprints": rep.get("input_fingerprints"), "check_draw": first_call}
                    for r, rep in ref_trial.by_rank.items()}
        got = self.cand.request("trial", {}, per_rank=per_rank, timeout=ev._limit(timeout), stall_s=self.s.stall_s)
        self._check_candidate(got, "trial", "runtime_error")
        for rep in got.by_rank.values():
            if rep.get("aliases") and "output_aliases_input" not in self.result.flags:
                self.result.flags.append("output_aliases_input")
        record = self._judge(got.by_rank, TrialRecord(trial=k, seed=self.result.seeds[k], phase=phase, ok=True))
        self.result.trials.append(record)
        return record.ok

    def _judge(self, got: dict[int, dict], record: TrialRecord) -> TrialRecord:
        """The candidate's outputs (per rank) compared by the reference ranks with the ones they
        kept: ``record`` filled with each rank's check."""
        ev = self.ev
        compare_args = {r: {"outputs": rep["outputs"], "mutated": rep.get("mutated") or {}, "spec": rep["spec"]} for r, rep in got.items()}
        self._note_transport(got)
        judged = self.ref.request("compare", {"tolerance": tolerance_to_names(self.tolerance), "level": self.level, "norm_check": self.norm_check,
                                              "norm_scale": self.norm_scale},
                                  per_rank=compare_args, timeout=ev._limit(self.hang_s))
        ev._raise_errors(judged, "compare", "workload_error")
        self._note(judged, "reference")
        for rank in range(self.world):
            rep = got[rank]
            reply = {"spec": rep["spec"], "check": judged.by_rank[rank]["check"], "late_writes": rep.get("late_writes"),
                     "unexpected_mutation": rep.get("unexpected_mutation")}
            check = compare_rank(rank, reply, {"spec": rep["spec"]}, self.tolerance)
            record.ranks.append(check)
            record.ok &= check.ok
        return record

    def _judge_timed(self, outputs: dict[int, dict] | None, round_: int, seed: int) -> None:
        """A timing round's last candidate call, on inputs drawn afresh for it and handed over
        after the round, against the reference's call on the same inputs: the full outputs of
        one timed call per round are judged (every call's projection is checked in ``Timing``)."""
        if not outputs or sorted(outputs) != list(range(self.world)) or any(
                not isinstance(rep.get("outputs"), list) or not isinstance(rep.get("spec"), str) for rep in outputs.values()):
            raise Stop("rejected", ErrorInfo(kind="integrity", phase="time", message=(
                f"the candidate's ranks did not hand back the outputs of timing round {round_}'s last call")))
        record = self._judge(outputs, TrialRecord(trial=round_, seed=seed, phase="timed", ok=True))
        if not record.ok:
            self.result.trials.append(record)
            self.result.flags.append("a timed call's outputs were wrong where every trial's were right: caches results or "
                                     "computes only when checked")
            raise Stop("incorrect")

    def _time(self, seed: int, first: Replies):
        restore = self.ev._restore([first])
        outputs = self.outputs
        tin = self.ref.request("timing_inputs", {"seed": seed, "restore": restore, "outputs": outputs}, timeout=self.ev._limit(self.hang_s))
        self.ev._raise_errors(tin, "time", "workload_error")
        per_rank = {r: {"inputs": rep["inputs"], "seed": rep["seed"]} for r, rep in tin.by_rank.items()}
        ready = self.cand.request("timing_inputs", {"restore": restore, "outputs": outputs}, per_rank=per_rank,
                                  timeout=self.ev._limit(self.hang_s))
        self._check_candidate(ready, "time", "runtime_error")
        with self._gpu_sampler() as sampler:
            draw_s = max(float(x) for x in replies_value(tin, "draw_s", 0.0))
            timing = Timing(self.pools, self.s, self.ev._limit, self._check_candidate, self._judge_timed,
                            tolerance_to_names(self.tolerance), self.result.flags.append,
                            between_blocks=sampler.sample if sampler is not None else None)
            sendable = all(rep.get("inputs") is not None for rep in tin.by_rank.values())
            input_bytes = max(int(x) for x in replies_value(tin, "input_bytes", 0)) if sendable else None
            ref_t, cand_t, check = timing.run(self.ref_call_s, self.s.flush_bytes, draw_s, self.output_bytes, input_bytes)
        if sampler is not None:
            nvml = sampler.summary()
            self.result.environment["nvml"] = nvml
            self.result.flags.extend(f"gpu: {flag}" for flag in nvml.get("flags", []))
        self.samples = (ref_t, cand_t)
        ref_stats, cand_stats = stats(ref_t, self.world), stats(cand_t, self.world)
        excess = excess_skew(ref_stats, cand_stats)
        if excess > self.s.timing_skew_reject:
            raise Stop("rejected", ErrorInfo(kind="integrity", phase="time", message=(
                f"the candidate's timed calls are not alike: its mean call is {skew(cand_stats):.3g}x its median, the reference's "
                f"{skew(ref_stats):.3g}x ({excess:.3g}x more, allowed {self.s.timing_skew_reject:g}x): most of its calls took almost "
                "nothing while a few took the time, as when one call does the work of others")))
        return ref_stats, cand_stats, check

    @contextmanager
    def _gpu_sampler(self):
        """NVML samples of the pools' GPUs around every timed block (clocks, power, other
        processes), taken between blocks, never beside one; nothing on the CPU."""
        if self.ev.device != "cuda":
            yield None
            return
        sampler = self.pools.sampler()
        sampler.begin_window()
        yield sampler
        sampler.sample()  # the GPUs as the last block left them

    def _calibrated(self, trial: Replies) -> None:
        """The float32 tolerance after a reference trial that was calibrated (``calibration.py``):
        ``self.tolerance`` and ``self.norm_scale`` from the largest own error so far, the record's
        ``environment["float32_tolerance"]``, and a flag where the tolerance is wider than set."""
        cal = self.calibration
        sent = trial.by_rank.get(0, {}).get("calibration") if self.world == 1 else None
        if cal is None or sent is None:
            if cal is not None and self.world != 1 and cal.trials == 0:
                cal.add(OwnError(skipped="a workload of several ranks (a float64 run failing on one would leave the others in a collective)"))
                self.result.environment["float32_tolerance"] = cal.record()
            return
        widened = cal.add(OwnError.from_dict(sent))
        atol, rtol = self.base_tolerance[torch.float32]
        self.tolerance[torch.float32] = (atol * widened.elementwise, rtol * widened.elementwise)
        self.norm_scale = widened.norm
        self.result.environment["float32_tolerance"] = cal.record()
        self.result.flags[:] = [f for f in self.result.flags if not f.startswith(WIDENED_FLAG)]
        if widened.elementwise > 1.0 or widened.norm > 1.0:
            self.result.flags.append(f"{WIDENED_FLAG}: {max(widened.elementwise, widened.norm):.3g}x (the reference is up to "
                                     f"{cal.own.norm:.1e} from its float64 run)")

    # Checks ------------------------------------------------------------------------------------
    def _check_candidate(self, replies: Replies, op: str, status: str = "runtime_error") -> None:
        """Integrity and precision first (what the candidate's process says about itself: a
        filter), then its errors."""
        self._note(replies, "candidate")
        for rank, rep in sorted(replies.by_rank.items()):
            problems = precision.flag_problems(rep.get("precision"), self.level)
            if problems:
                raise Stop("rejected", ErrorInfo(kind="precision", rank=rank, phase=op, message=(
                    f"rank {rank}: the candidate changed precision flags this fp32 workload pins: {'; '.join(problems)} "
                    "(a workload may allow it with PRECISION = \"tf32\" | \"bf16\" | \"fp16\")")))
        self.ev._raise_errors(replies, op, status)

    def _note(self, replies: Replies, side: str) -> None:
        peaks = [int(p) for p in replies_value(replies, "peak_bytes", 0)]
        if peaks:
            self.peaks[side] = max(self.peaks[side], max(peaks))
        for table in replies_value(replies, "peaks_by_command", {}):
            if isinstance(table, dict):
                for op, peak in list(table.items())[:MAX_COMMANDS]:
                    if isinstance(op, str) and isinstance(peak, int) and not isinstance(peak, bool):
                        key = f"{side} {op[:40]}"
                        self.peaks_by_command[key] = max(self.peaks_by_command.get(key, 0), peak)
        sizes = [int(b) for b in replies_value(replies, "output_bytes", 0)]
        if sizes:
            self.output_bytes = max(self.output_bytes, max(sizes))

    def _note_transport(self, got: dict[int, dict]) -> None:
        """How the candidate's large outputs reached the reference's ranks, as this process
        passed them on (the record's ``environment["candidate_outputs"]``)."""
        ways = set(self.result.environment.get("candidate_outputs", "").split(",")) - {""}
        for rep in got.values():
            leaves = rep.get("outputs")
            for x in leaves if isinstance(leaves, list) else []:
                if isinstance(x, BlobRef):
                    ways.add("device memory" if isinstance(x.blob, DeviceBlob) else "host memory")
        if ways:
            self.result.environment["candidate_outputs"] = ",".join(sorted(ways))

    def _reference_own(self, first: Replies) -> int:
        """What the reference's ranks hold (the most of any rank): its peak so far, or its first
        trial's inputs, weights and outputs."""
        return max(self.peaks["reference"], max(int(b) for b in replies_value(first, "own_bytes", 0)))

    def _room_for_spare(self, first: Replies) -> bool:
        """Whether the next candidate's ranks may take the device during this evaluation
        (``EvalSettings.admit_spare_during_evaluation``): on a GPU, where the card holds twice
        what the reference holds (the candidate's is not known yet), a copy of the outputs and
        ``spare_device_bytes`` more, within the device-memory limit where one is set."""
        if not self.s.admit_spare_during_evaluation:
            return False
        if self.ev.device != "cuda":
            return True
        own = self._reference_own(first)
        card = float(self.pools.environment.get("gpu_memory_gib") or 0.0) * (1 << 30)
        limits = [x for x in (card, self.s.device_memory_limit_bytes) if x > 0]
        return bool(limits) and 2 * own + self.output_bytes + self.s.spare_device_bytes <= min(limits)

    def _candidate_share(self, first: Replies) -> int:
        """What the device-memory limit leaves the candidate: the limit less the reference's own
        peak and one copy of the outputs (0: no limit)."""
        limit = self.s.device_memory_limit_bytes
        if not limit:
            return 0
        own = self._reference_own(first)
        share = limit - own - self.output_bytes
        if share <= 0:
            raise Stop("resource_limit", ErrorInfo(kind="resource_limit", phase="prepare", message=(
                f"the evaluator's device-memory limit is {limit} bytes; the reference alone holds {own} bytes and one copy "
                f"of its outputs is {self.output_bytes} bytes, leaving nothing for the candidate")))
        return share

    def _memory(self) -> None:
        limit = self.s.device_memory_limit_bytes
        ref, cand = self.peaks["reference"], self.peaks["candidate"]
        self.result.memory = MemoryRecord(limit_bytes=limit, reference_peak_bytes=ref, candidate_peak_bytes=cand,
                                          output_bytes=self.output_bytes, evaluator_peak_bytes=ref + cand,
                                          peaks_by_command=dict(sorted(self.peaks_by_command.items())))

    def _write_candidate(self) -> str:
        directory = Path(self.cand.workdir) / "candidates"
        directory.mkdir(exist_ok=True)
        path = directory / f"candidate_{self.result.candidate_sha256[:16]}.py"
        path.write_text(self.source)
        return str(path)


def _flag(result: EvalResult, s) -> None:
    t = result.timing
    if t.speedup >= s.suspicious_speedup:
        result.flags.append(f"suspiciously_fast: {t.speedup:.1f}x over the reference")
    if result.roofline and result.roofline.floor_ms > 0 and t.candidate_ms < 0.9 * result.roofline.floor_ms:
        result.flags.append("faster_than_roofline_floor: check the workload's roofline() or the candidate")
    if any(x.spread > 0.5 for x in t.candidate + t.reference):
        result.flags.append("noisy_timing")

