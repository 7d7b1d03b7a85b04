"""Evaluator settings: trials, time limits and timing protocol (a plain dataclass, torch-alone)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field


@dataclass
class EvalSettings:
    #: Correctness trials with fresh random inputs before timing (one more runs after timing).
    trials: int = 5
    #: Shape profile the workload is built with (``ci`` or ``gpu``).
    shapes: str = "ci"
    # Time limits, in seconds, per phase. A rank that does not answer in time is killed.
    start_timeout_s: float = 120.0
    #: Sets of candidate ranks begun ahead of the candidates that will use them (every candidate
    #: runs in fresh processes, and starting them is mostly ``import torch``): after the n-th
    #: candidate, up to min(this, n - 1) wait, stopped on the CPU while a block is timed.
    spare_candidate_pools: int = 2
    #: Of those, how many are begun at once for candidates the caller says will follow
    #: (``more_after``). On a GPU machine, all: a spare's start (~4-5 s importing torch, on cores
    #: of its own) outlasts a small candidate's judgement, and with one ahead every other candidate
    #: waited for its ranks. On two CPU cores spares importing beside the work slow it: one.
    spares_for_announced: int = 1
    #: A baseline told that candidates follow begins the first ones' ranks (``Evaluator.baseline``):
    #: on a GPU machine they import torch on cores of their own while the reference loads, runs and
    #: is traced (the first candidate of every KernelBench job waited 4-6 s for them); on two CPU
    #: cores they would take the reference's, and jobs that end at their baseline would start
    #: ranks for nothing.
    candidates_begin_at_baseline: bool = False
    #: Let the next candidate's ranks (the first spare) initialise the device, form their process
    #: group and load the projection's kernel while a candidate is judged, where the GPU has room
    #: (twice the reference's own bytes, a copy of the outputs and ``spare_device_bytes``). Off,
    #: or without the room, they do so once the judged candidate's ranks have exited: one
    #: candidate's processes (a CUDA context, library workspaces and an allocator cache, ~1.1 GiB
    #: on an H100) hold the device at a time beside the reference's, and the next ones initialise
    #: while the job writes its next candidate and the reference runs its first trial. On one
    #: H100 off held 1.1-1.2 GiB less through whole KernelBench jobs
    #: (benchmarks/results/spare_memory_cuda.md); judged back to back, a candidate waits 0.4-0.7 s
    #: more (benchmarks/results/judge_cost_cuda.md); its cost to a whole job is not measured apart
    #: from the compiler caches' warmth yet, so it stays on by default.
    admit_spare_during_evaluation: bool = True
    #: What a candidate's rank process holds on the device before its tensors (see above).
    spare_device_bytes: int = 2 << 30
    load_timeout_s: float = 300.0
    call_timeout_s: float = 60.0
    timing_timeout_s: float = 300.0
    # Timing protocol: warm-up calls, then as many timed calls as fit in the budget, clamped.
    warmup_iters: int = 3
    min_iters: int = 10
    max_iters: int = 200
    timing_budget_s: float = 1.0
    #: Bytes written between timed calls to evict the cache (0: on CUDA, twice the L2 size).
    flush_bytes: int = 0
    #: Kept for callers of the judge of version 1; version 2 always interleaves (each side timed
    #: with the other stopped) and never re-times the reference after the candidate.
    interleave_timing: bool = True
    recheck_reference: bool = True
    #: A candidate faster than this many times the reference is flagged for a person to look at.
    suspicious_speedup: float = 10.0
    #: Run the static checker on candidates before anything runs (a filter; the judge's process
    #: boundaries are the defence, and hold with it off).
    static_check: bool = True
    # Hangs: a call that is not the first of its side (which may compile) must end within
    # max(hang_floor_s, hang_factor x the reference's measured call time) + hang_s_per_gib x the
    # GiB a trial moves (inputs, weights and outputs: a trial hands them between processes and
    # fingerprints them, about a second per GiB on an H100); a rank whose CPU time does not move
    # for stall_s seconds (a deadlock) is ended even in a first call.
    hang_floor_s: float = 10.0
    hang_factor: float = 20.0
    hang_s_per_gib: float = 4.0
    stall_s: float = 10.0
    #: On a GPU, the reference's ranks probe it around each timed block (``gpu_quiet.py``): a
    #: one-element kernel's median round trip above gpu_quiet_probe_ms means another process's
    #: work runs there (with the candidate's stopped: work it left running). Before a block they
    #: wait up to gpu_quiet_patience_s for it to drain (after it too); busy after that, the
    #: candidate is rejected.
    gpu_quiet_probe_ms: float = 0.25
    gpu_quiet_patience_s: float = 2.0
    #: A GPU found busy after a reference block, quiet again within the patience, ran work that
    #: was not the candidate's (stopped before the block's quiet start, a stopped process queues
    #: nothing) and may have slowed the block: the round is timed again, at most this many times
    #: an evaluation; one more such round rejects, as work that never drains does.
    gpu_busy_retimes: int = 3
    #: Interleaved timing in this many blocks per side (reference and candidate alternate, the
    #: other side's processes stopped while one is timed).
    timing_rounds: int = 8
    #: ... but fewer (at least two, one of each order) where a block would hold less than this
    #: much of the reference's work: every block costs the judge a few ms whatever its length (a
    #: request and reply, stopping the other side, a round's whole-output check), which on a
    #: sub-millisecond call was most of an evaluation (benchmarks/results/judge_cost_cpu.md).
    #: Where the clock check fails over the fewer rounds, the rest run before it decides.
    timing_min_block_s: float = 0.05
    #: A round's last candidate outputs are compared whole with the reference's (beside every
    #: call's projections) in every round where the outputs are smaller than this; for larger
    #: ones, in ``whole_check_rounds`` rounds the judge draws at random and keeps secret (handing
    #: a GiB over costs about a second on an H100; the candidate keeps its outputs in every round).
    whole_check_all_below_bytes: int = 64 << 20
    whole_check_rounds: int = 3
    #: A trial's inputs of this many bytes or more are not sent to the candidate's ranks: they
    #: draw them from the trial's seed, as timed blocks do, checked against the reference rank's
    #: fingerprints (sending went through host memory both ways: with KernelBench's GiB inputs,
    #: most of an evaluation's minute on an H200).
    send_inputs_below_bytes: int = 64 << 20
    #: On a GPU, the candidate's large outputs reach the reference's rank in device memory the
    #: candidate's rank exports and the reference's maps (``device_share.py``), not through host
    #: memory (a GiB cost ~1 s each way on an H100); off, or where the driver cannot, host memory.
    share_device_outputs: bool = True
    # The candidate's own clock (CUDA events or perf_counter in its process) against the judge's
    # wall clock of each block: the time the candidate leaves unaccounted may exceed the
    # reference's (in the block beside it) by at most clock_slack x the block's wall time +
    # clock_overhead_slack x the reference's unaccounted time + clock_slack_ms. That bound is
    # what a forged clock can hide per block. The second term: the time outside the calls
    # (drawing each call's inputs, flushing the cache, the round trip) differs between two
    # processes running the same code; on an H100 an honest candidate's exceeded the reference's
    # by up to 26% (benchmarks/gpu/clock_diag.py, results/gpu/h100-judge/). The CPU's overhead per
    # call (a cache flush, a barrier between ranks) is large and noisy beside small calls on a
    # shared machine, hence the wider CPU default (for_device). Tried at 0.1 on the CPU (forty-third
    # session, benchmarks/clock_slack.py): it caught every candidate that did the reference's work
    # and reported a tenth of it on small calls (credited 5-11x at 0.5), but rejected 6 of 20 honest
    # copies of a workload whose 1 MiB output's projection is 95% of each block and varies by half
    # from one process to the other; the slack cannot shrink until less lies outside the calls.
    clock_slack: float = 0.5
    clock_overhead_slack: float = 0.3
    clock_slack_ms: float = 3.0
    #: Staged timing rounds (``interleaved.staged_rounds``, ``RankBase.run_staged``): where every
    #: input is a plain value and a block's inputs and outputs fit ``staged_block_bytes``, the
    #: reference's ranks draw each round's inputs, both sides' blocks get them with the command and
    #: send every call's outputs back with the reply, and the reference's ranks project them after
    #: the round. Only the calls (with their flush and barrier) and the transfers lie inside a
    #: judged span then, the same on both sides, so the clock check's bound is the tighter
    #: ``staged_clock_*`` one. Up to ``staged_max_rounds`` rounds of smaller blocks where a block
    #: of the usual size does not fit. Each side holds at most ``staged_block_bytes`` more (so none
    #: are staged under a ``device_memory_limit_bytes``).
    staged_blocks: bool = True
    staged_block_bytes: int = 64 << 20
    staged_max_rounds: int = 32
    #: On the CPU (benchmarks/results/clock_slack_cpu.md, forty-fourth session): at 0.1 every
    #: candidate that did the reference's work and reported a tenth was caught and no honest copy
    #: of 28 was rejected (at 0.05 too, in the later run); one reporting half (credited 1.6-2.1x)
    #: passes in half the runs, inside the CPU's own noise (honest copies read 0.44-2.0x on the
    #: 2-core machine).
    staged_clock_slack: float = 0.1
    staged_clock_overhead_slack: float = 0.3
    staged_clock_slack_ms: float = 3.0
    #: The speedup divides the sides' mean calls instead of their medians where the candidate's
    #: mean exceeds its median by a factor more than (1 + this) times the reference's does
    #: (``kloom.speedup.judged_times``: a candidate that does a block's work in a few calls had a
    #: median of nothing). What shaping its calls can gain a candidate is at most that factor.
    #: On two CPU cores both sides' means run 1.5-2.5x their medians, hence the wider default there.
    timing_skew_tolerance: float = 0.5
    #: ... and past this factor the candidate is rejected: its calls are not alike (a front-loaded
    #: block reads some hundred times; an honest candidate's calls spread as the reference's do).
    timing_skew_reject: float = 8.0
    #: Every timed call's outputs are checked by two random +-1 projections (a signed sum and a
    #: signed sum of squares) against the reference's call on the same inputs (``projection.py``,
    #: ``projection_check.py``): each may be off by at most this many times its bound from the
    #: tolerance (sqrt(sum_j t_j^2), sqrt(sum_j (t_j (2 |w_j| + t_j))^2)), plus float64 rounding.
    #: An honest candidate within tolerance fails either with probability at most 2 exp(-K^2 / 2)
    #: per call (1.3e-14 at 8).
    projection_sigmas: float = 8.0
    #: Device memory the evaluator may use on one device (reference + candidate + one copy of the
    #: outputs); 0: no limit. CUDA: per-process memory fractions; CPU: the bytes of live tensors
    #: each rank holds, accounted by the rank.
    device_memory_limit_bytes: int = 0
    #: Fixed base seed for reproducing a run; None (the default) draws fresh seeds every
    #: evaluation, so that no candidate can be written against known inputs.
    seed: int | None = None
    #: Tolerance overrides by dtype name, e.g. {"bfloat16": (atol, rtol)}.
    tolerance: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: On one rank, the first trial also runs a float64 copy of the reference, and the float32
    #: tolerance is widened to ``calibration_factor`` times what the reference's own error uses
    #: of it (elementwise and norm-wise), at most ``calibration_max_scale`` times, and not where
    #: the copy is further than ``calibration_max_error`` norm-wise (``calibration.py``: deep
    #: networks amplify rounding beyond 1e-4; TF32 still lands thousands of times further).
    calibrate_tolerance: bool = True
    calibration_factor: float = 4.0
    calibration_max_scale: float = 40.0
    calibration_max_error: float = 1e-3
    #: Seconds of float64 runs an evaluation spends at most (the first trial's always runs).
    calibration_budget_s: float = 10.0
    #: A trial whose inputs take more bytes than this is not run in float64 (0: no bound): the
    #: float64 copies of the inputs and of everything the copy computes sit beside the
    #: reference's own tensors, doubling its share of the device, and a workload of large tensors
    #: is a short chain over them, not the deep network the calibration is for. Nor is a copy
    #: (model and inputs in float64) that would take more than half the device's free memory.
    calibration_max_input_bytes: int = 128 << 20
    #: Name of the hardware profile for the roofline ("auto": detected in the ranks).
    hardware_profile: str = "auto"
    # Limits applied to each rank process (see sandbox.py). 0 disables a limit.
    rank_memory_bytes: int = 0
    rank_open_files: int = 4096
    rank_cpu_seconds: int = 0
    #: What a pool's ranks may add to their writable places (their directory and output, the
    #: compiler caches, the pool's shared memory) while the pool lives: bytes and files; past
    #: either the ranks are killed and the evaluation is ``resource_limit`` (``disk_guard.py``).
    pool_write_bytes: int = 4 << 30
    pool_write_files: int = 200_000
    #: Processes and threads per rank; a pool may have world_size times this, held by its pids
    #: cgroup (as root) or RLIMIT_NPROC (unprivileged; counts all the user's processes).
    rank_processes: int = 512
    #: The user ranks run as when this process is root ("": the caller's; the service uses
    #: ``sandbox.SERVICE_RANK_USER``). Workload files must be readable by it.
    rank_user: str = ""
    isolate_network: bool = True
    #: Fork each rank from a process that imported a rank's code once (``fork_server``), sandboxed
    #: as an exec'd rank is, instead of starting a new interpreter that imports torch (~2.5 CPU-s
    #: a rank). Where no fork server can run, ranks start as new interpreters.
    fork_ranks: bool = True
    #: Directories (or files) shown to ranks as empty, read-only: the service's data (its data
    #: directory with the admin key and the SQLite file, the broker's queue, results). Set by the
    #: worker from ``kloom.settings``; ``/run`` and the cgroup tree are always hidden.
    hidden_paths: list[str] = field(default_factory=list)
    #: Cover the temporary directories (/tmp, /var/tmp) in the ranks' view: only the pool's own
    #: directory and ``readable_paths`` show through (the service's ranks; off for the CLI, whose
    #: workloads may sit in /tmp).
    private_tmp: bool = False
    #: Paths the ranks read besides the interpreter and kloom (the job's workload directory).
    readable_paths: list[str] = field(default_factory=list)
    #: Compiler caches apart per scope (the service: the job owner's key), so that one user's
    #: candidate cannot leave artifacts another user's later compile loads. "": one per rank user.
    cache_scope: str = ""

    @classmethod
    def for_device(cls, device: str, **overrides) -> "EvalSettings":
        """Defaults that suit the device kind, then the given overrides."""
        base = cls()
        if device == "cuda":
            base.shapes = "gpu"
            base.warmup_iters = 5
            base.min_iters = 20
            base.max_iters = 500
            base.load_timeout_s = 600.0
            base.clock_slack, base.clock_overhead_slack, base.clock_slack_ms = 0.15, 0.3, 1.0
            # Staged rounds are off on a GPU: there they move every call's inputs and outputs
            # through host messages inside the span (a copy and a pickle per tensor), which on an
            # H100 took more time than a 0.1 ms call and varied more between the sides than a
            # forger hides: a candidate reporting a tenth was credited 11x staged and caught
            # unstaged (results/gpu/h100-session44/clock_slack_cuda.md). Staging on a GPU needs
            # the rounds' inputs and outputs in device memory both sides map (device_share.py).
            base.staged_blocks = False
            base.timing_skew_tolerance = 0.2
            base.staged_clock_slack, base.staged_clock_overhead_slack, base.staged_clock_slack_ms = 0.15, 0.3, 1.0
            base.spare_candidate_pools = 3  # import torch takes about 4 s on the H100 machines
            base.spares_for_announced = 3
            base.candidates_begin_at_baseline = True
            # Every round kept: with two rounds of 250 calls, one block's overhead (drawing,
            # flushing, projecting: it differs between two processes by up to a quarter) outvoted
            # nothing, and the clock check rejected the reference's own copy on an H100
            # (results/gpu/h100-session30/README.md).
            base.timing_min_block_s = 0.0
        else:
            base.timing_budget_s = 0.4
            base.min_iters = 5
            base.max_iters = 100
            base.warmup_iters = 2
        return dataclasses.replace(base, **overrides)

    @classmethod
    def from_env(cls, device: str) -> "EvalSettings":
        """``for_device`` defaults with ``KLOOM_EVAL_<FIELD>`` environment overrides."""
        return cls.for_device(device, **env_overrides(cls, "KLOOM_EVAL_", skip=("tolerance", "seed")))


def parse_field(type_name: str, raw: str):
    """``raw`` as a value of the annotated type (``int``, ``float``, ``bool``, ``list[int]``,
    ``list[str]``, optionally ``| None``; anything else stays a string)."""
    base = type_name.replace(" | None", "")
    if base.startswith("list["):
        item = int if base == "list[int]" else str
        return [item(part.strip()) for part in raw.split(",") if part.strip()]
    if base == "int":
        return int(raw)
    if base == "float":
        return float(raw)
    if base == "bool":
        return raw.strip().lower() in ("1", "true", "yes", "on")
    return raw


def env_overrides(cls, prefix: str, skip: tuple[str, ...] = ()) -> dict:
    """The ``<prefix><FIELD>`` environment variables set for the dataclass ``cls``'s fields, parsed
    by each field's annotation (shared by the evaluator's and the profiler's settings)."""
    overrides = {}
    for f in dataclasses.fields(cls):
        raw = os.environ.get(f"{prefix}{f.name.upper()}")
        if raw is None or f.name in skip:
            continue
        type_name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        try:
            overrides[f.name] = parse_field(type_name, raw)
        except ValueError as exc:
            raise ValueError(f"{prefix}{f.name.upper()}={raw!r} is not a valid {type_name}: {exc}") from None
    return overrides
