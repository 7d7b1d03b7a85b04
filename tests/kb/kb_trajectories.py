"""Finished trajectories as the loop records them: real ``agents.records`` and evaluator records
(timings per rank, roofline, correctness trials, errors, profiles), for feeding the knowledge base."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from agents.analysis import Analysis
from agents.records import JobSpec, Limits, Plan, Step, Trajectory, Usage
from kloom.evaluation import (
    BaselineResult,
    ErrorInfo,
    EvalResult,
    OutputCheck,
    TimeStats,
    TimingRecord,
    TrialRecord,
)
from kloom.profile import KernelStat
from kloom.roofline.model import RooflineRecord
from tests import eval_records

#: The kernel a step's profile names.
ALLGATHER = KernelStat("ncclDevKernel_AllGather", calls=1, total_us=400.0, mean_us=400.0, share=1.0, communication=True, category="communication")


@dataclass
class Tried:
    """One step: a strategy with params, and what the evaluator said."""

    strategy: str
    params: dict[str, Any] = field(default_factory=dict)
    status: str = "correct"
    speedup: float | None = None  # for correct steps
    source: str = "offline"
    profile: str = ""
    drift: float = 0.0  # how far the reference's time moved between its timings before and after


@dataclass
class Workload:
    name: str = "tp_allgather_matmul"
    family: str = "tensor_parallel"
    world_size: int = 4
    collectives: tuple[str, ...] = ("all_gather_into_tensor",)
    ops: tuple[str, ...] = ("aten::mm", "aten::t", "c10d::allgather_into_tensor_")
    input_shapes: tuple = ((1024, 8192),)
    dtypes: tuple[str, ...] = ("bfloat16",)
    input_bytes: int = 16 << 20
    dominant: str = "link"
    source: str = ""

    @property
    def sha256(self) -> str:
        text = self.source or f"{self.name}|{self.input_shapes}|{self.dtypes}"
        return hashlib.sha256(text.encode()).hexdigest()

    def analysis(self, device: str) -> Analysis:
        return eval_records.analysis(
            family=self.family,
            world_size=self.world_size,
            device=device,
            collectives=sorted(self.collectives),
            ops=sorted(self.ops),
            input_shapes=[list(s) for s in self.input_shapes],
            dtypes=list(self.dtypes),
            dominant=self.dominant,
            total_input_bytes=self.input_bytes,
        )


def tp_source(tokens: int, world_sizes: tuple[int, ...] = (2, 4, 8)) -> str:
    """A workload file of the all-gather + GEMM pattern; variants differ only in their shapes."""
    return f'''"""All-gather of activations, then a column-parallel GEMM ({tokens} tokens)."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn

WORLD_SIZES = {list(world_sizes)}
SHAPES = {{"ci": dict(tokens=64, hidden=32), "gpu": dict(tokens={tokens}, hidden=8192)}}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden, hidden))

    def forward(self, x):
        out = x.new_empty(dist.get_world_size() * x.shape[0], x.shape[1])
        dist.all_gather_into_tensor(out, x)
        return out @ self.weight.t()


def get_init_inputs():
    return [P["hidden"]]


def get_inputs():
    return [torch.randn(P["tokens"] // dist.get_world_size(), P["hidden"])]
'''


def _stats(ms: float) -> TimeStats:
    return TimeStats.from_samples([ms * f for f in (0.97, 0.99, 1.0, 1.0, 1.01, 1.02, 1.05)])


def _environment(device: str, gpu: str) -> dict[str, Any]:
    env = {"torch": "2.13.0", "backend": "nccl" if device == "cuda" else "gloo", "python": "3.11.2"}
    if device == "cuda":
        env.update(gpu=gpu, gpu_memory_gib=139.8, sm_count=132, cuda="12.8")
    return env


def _roofline(reference_ms: float, candidate_ms: float | None, dominant: str) -> RooflineRecord:
    floor = reference_ms * 0.3
    terms = {"compute": floor * 0.5, "hbm": floor * 0.4, "link": floor * 0.6}
    terms[dominant] = floor
    return RooflineRecord(
        profile="h200",
        flops=2.2e12,
        hbm_bytes=1.1e9,
        link_bytes=4.8e7,
        compute_ms=terms["compute"],
        hbm_ms=terms["hbm"],
        link_ms=terms["link"],
        floor_ms=floor,
        unoverlapped_ms=sum(terms.values()),
        dominant=dominant,
        fraction_of_floor=floor / candidate_ms if candidate_ms else None,
        reference_fraction=floor / reference_ms,
    )


def evaluation(w: Workload, t: Tried, code_sha: str, *, device: str, gpu: str, reference_ms: float) -> EvalResult:
    ranks = range(w.world_size)
    result = EvalResult(
        status=t.status,
        workload=w.name,
        world_size=w.world_size,
        device=device,
        candidate_sha256=code_sha,
        workload_sha256=w.sha256,
        compiled=t.status not in ("compile_error", "rejected"),
        correct=t.status == "correct",
        seeds=[11, 12, 13, 14, 15],
        environment=_environment(device, gpu),
        phase_seconds={"load": 0.4, "correctness": 1.1, "timing": 2.3},
    )
    if t.status == "correct":
        candidate_ms = reference_ms / t.speedup
        result.trials = [
            TrialRecord(trial=i, seed=11 + i, phase="correctness", ok=True, ranks=[OutputCheck(rank=r, ok=True, max_abs_diff=1e-3, numel=4096) for r in ranks])
            for i in range(5)
        ]
        result.timing = TimingRecord(
            reference=[_stats(reference_ms) for _ in ranks],
            candidate=[_stats(candidate_ms) for _ in ranks],
            reference_ms=reference_ms,
            candidate_ms=candidate_ms,
            speedup=t.speedup,
            reference_after=[_stats(reference_ms * (1 + t.drift)) for _ in ranks],
            clock="cuda_events" if device == "cuda" else "wall",
        )
        result.roofline = _roofline(reference_ms, candidate_ms, w.dominant)
    elif t.status == "incorrect":
        bad = OutputCheck(rank=1, ok=False, max_abs_diff=0.73, max_rel_diff=0.41, mismatched=512, numel=4096,
                          message="output[0]: 512 of 4096 elements differ (max abs diff 0.73)")
        result.trials = [TrialRecord(trial=0, seed=11, phase="correctness", ok=False, ranks=[bad])]
    else:
        result.error = ErrorInfo(kind=t.status, message=f"RuntimeError: NCCL error in {t.strategy}: unhandled cuda error", rank=2, phase="load")
    return result


def trajectory(
    job_id: str,
    w: Workload,
    tried: list[Tried],
    *,
    device: str = "cuda",
    gpu: str = "NVIDIA H200",
    reference_ms: float = 2.0,
    state: str = "succeeded",
    workload_path: str = "/nonexistent/workload.py",
) -> Trajectory:
    """A finished job on workload ``w`` whose steps are ``tried``, in order."""
    spec = JobSpec(workload=workload_path, world_size=w.world_size, device=device, limits=Limits(max_iters=len(tried)), job_id=job_id)
    traj = Trajectory(
        job=spec,
        workload_name=w.name,
        workload_sha256=w.sha256,
        workload_family=w.family,
        baseline=BaselineResult(
            status="correct",
            workload=w.name,
            world_size=w.world_size,
            device=device,
            reference_ms=reference_ms,
            roofline=_roofline(reference_ms, None, w.dominant),
            environment=_environment(device, gpu),
        ),
        analysis=w.analysis(device),
        state=state,
        stop_reason="iteration limit reached",
    )
    for index, t in enumerate(tried):
        code = None
        if t.status != "coder_failed":
            code = f"# {t.strategy} {sorted(t.params.items())} for {w.name}\nclass ModelNew:\n    pass\n"
        sha = hashlib.sha256(code.encode()).hexdigest() if code else ""
        traj.steps.append(
            Step(
                index=index,
                plan=Plan(strategy=t.strategy, params=dict(t.params), rationale=f"try {t.strategy}: the step is {w.dominant}-bound", source=t.source),
                status=t.status,
                candidate_code=code,
                candidate_sha256=sha,
                evaluation=None if code is None else evaluation(w, t, sha, device=device, gpu=gpu, reference_ms=reference_ms),
                profile=eval_records.profile(t.profile, workload=w.name, world_size=w.world_size, device=device, kernels=[ALLGATHER]) if t.profile else None,
                feedback="",
                error=f"{t.strategy} does not apply: no collective to overlap" if t.status == "coder_failed" else "",
                usage=Usage(model="offline"),
            )
        )
    return traj
