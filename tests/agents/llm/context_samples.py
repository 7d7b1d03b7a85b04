"""A realistic planning context (workload, baseline, history, KB advice) for the LLM role tests."""

from __future__ import annotations

from agents.limits import Budget
from agents.records import JobSpec, Limits, Plan, Step
from agents.roles import FailureHint, KBAdvice, KernelHint, PlanningContext, StrategyHint
from kloom.evaluation import ErrorInfo
from tests.eval_records import analysis, evaluation, profile, roofline, timing
from tests.eval_records import baseline as baseline_record

WORKLOAD = '''import os
import torch
import torch.distributed as dist
import torch.nn as nn

WORLD_SIZES = [2, 4]
SHAPES = {"ci": dict(tokens=64, hidden=32, ffn=48, dtype=torch.float32)}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def __init__(self, hidden, ffn_per_rank):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(ffn_per_rank, hidden, dtype=P["dtype"]) / hidden**0.5)

    def forward(self, x_shard):
        world = dist.get_world_size()
        parts = [torch.empty_like(x_shard) for _ in range(world)]
        dist.all_gather(parts, x_shard)
        return torch.cat(parts) @ self.weight.t()


def get_init_inputs():
    return [P["hidden"], P["ffn"] // dist.get_world_size()]


def get_inputs():
    return [torch.randn(P["tokens"] // dist.get_world_size(), P["hidden"], dtype=P["dtype"])]
'''

GOOD_CODE = '''import torch
import torch.distributed as dist
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, hidden, ffn_per_rank):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(ffn_per_rank, hidden) / hidden**0.5)

    def forward(self, x_shard):
        world = dist.get_world_size()
        gathered = x_shard.new_empty(world * x_shard.shape[0], x_shard.shape[1])
        dist.all_gather_into_tensor(gathered, x_shard)
        return gathered @ self.weight.t()
'''

BEST_CODE = GOOD_CODE.replace("return gathered @ self.weight.t()", "return torch.mm(gathered, self.weight.t())  # best so far")
FAILED_CODE = GOOD_CODE.replace("dist.all_gather_into_tensor(gathered, x_shard)", "pass  # forgot the gather")
FAILURE_MESSAGE = "rank 1 output mismatch: max abs diff 3.2 at index (17, 4)"


def planning_context(budget: Budget | None = None, *, history: bool = True, kb: bool = True, baseline: bool = True) -> PlanningContext:
    spec = JobSpec(workload="suite/tensor_parallel/ag_matmul.py", world_size=2, device="cpu", strategist="openai/gpt-4o-mini")
    steps = []
    if history:
        steps = [
            Step(
                index=0,
                plan=Plan(strategy="collective_substitution", params={"all_gather": "into_tensor"}, rationale="one call", source="llm"),
                status="correct",
                candidate_code=BEST_CODE,
                evaluation=evaluation(timing=timing(1.42, 0.31), roofline=roofline("link", 0.0372, fraction_of_floor=0.12)),
                profile=profile("92% of the time in gloo allgather; matmul 6%"),
                feedback="correct, 1.42x; communication still dominates",
            ),
            Step(
                index=1,
                plan=Plan(strategy="overlap_chunks", params={"chunks": 4}, source="llm", base_step=0),
                status="incorrect",
                candidate_code=FAILED_CODE,
                evaluation=evaluation("incorrect", error=ErrorInfo(kind="incorrect", message=FAILURE_MESSAGE, rank=1, phase="correctness")),
                feedback="outputs differ on rank 1: the gathered buffer is never filled",
            ),
        ]
    advice = KBAdvice()
    if kb:
        advice = KBAdvice(
            kernels=[
                KernelHint(
                    kernel_id="k-17",
                    code=GOOD_CODE.replace("import torch\n", "import torch  # from the KB\n", 1),
                    strategy="cuda_graph",
                    params={"warmup": 3},
                    speedup=2.7,
                    workload_name="ag_gemm_wide",
                    similarity=0.83,
                )
            ],
            strategies=[
                StrategyHint(
                    strategy="cuda_graph",
                    description="capture the step in a CUDA graph",
                    params={},
                    wins=5,
                    losses=1,
                    confidence=0.8,
                    evidence="launch overhead 70% of step time on small TP workloads",
                    speedup=1.9,
                    weight=4.2,
                )
            ],
            failures=[FailureHint(strategy="torch_compile", params={"mode": "max-autotune"}, reason="compile time over limit", count=2)],
        )
    return PlanningContext(
        spec=spec,
        workload_source=WORKLOAD,
        workload_name="ag_matmul",
        analysis=analysis(family="tensor_parallel", collectives=["allgather"], patterns=["collective_then_matmul"]) if history else None,
        baseline=(
            baseline_record(
                0.44,
                roofline=roofline("link", 0.021, profile="cpu-gloo", compute_ms=0.004, hbm_ms=0.002, link_ms=0.021, reference_fraction=0.048),
            )
            if baseline
            else None
        ),
        history=steps,
        budget=budget or Budget(Limits(max_iters=8), steps_done=len(steps)),
        kb=advice,
    )
