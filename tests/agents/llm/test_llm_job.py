"""A whole job with the LLM roles: the loop, the real CPU evaluator, and scripted model answers.

What a user relies on: an unusable answer is a recorded failed step with its reason, the loop goes
on, and a good candidate ends up as the job's best, with every call's tokens and cost recorded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.llm import LLMCoder, LLMPlanner
from agents.loop import run_job
from agents.sinks import FileSink
from agents.records import JobSpec, Limits
from services.worker.evaluator import EvalSettings, Evaluator
from tests.fakes.openai_server import Reply

WORKLOAD = Path(__file__).resolve().parents[3] / "suite" / "tensor_parallel" / "tp_allgather_gemm.py"

# The reference's all_gather_into_tensor + GEMM, written as one GEMM per gathered shard.
CANDIDATE = '''import torch
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
        return torch.mm(gathered, self.weight.t())
'''


def _plan(strategy: str, **params) -> Reply:
    return Reply.text(json.dumps({"strategy": strategy, "params": params, "rationale": "test"}), prompt_tokens=1000, completion_tokens=40)


@pytest.mark.slow
def test_a_job_records_unusable_answers_and_keeps_the_good_candidate(server, make_client, tmp_path):
    server.add(
        Reply.text("Let me think about it some more.", prompt_tokens=1000, completion_tokens=10),  # planner: no JSON
        _plan("collective_substitution"),
        Reply.text("Use all_gather_into_tensor.", prompt_tokens=2000, completion_tokens=10),  # coder: no code block
        _plan("collective_substitution", attempt=2),
        Reply.text(f"One GEMM after one gather.\n```python\n{CANDIDATE}```", prompt_tokens=2000, completion_tokens=300),
        Reply.text('{"strategy": "stop", "rationale": "done"}', prompt_tokens=1000, completion_tokens=10),
    )
    client = make_client()
    spec = JobSpec(workload=str(WORKLOAD), world_size=2, device="cpu", strategist=client.model, limits=Limits(max_iters=6), use_kb=False, profile="none")
    settings = EvalSettings.for_device("cpu", trials=2, timing_budget_s=0.05, min_iters=2, max_iters=5)
    with Evaluator("cpu", settings) as evaluator:
        traj = run_job(spec, FileSink(tmp_path), evaluator=evaluator, planner=LLMPlanner(client), coder=LLMCoder(client))

    assert [s.status for s in traj.steps] == ["coder_failed", "coder_failed", "correct"], traj.stop_reason
    assert "no JSON object" in traj.steps[0].error
    assert "no ```python code block" in traj.steps[1].error
    assert traj.steps[2].plan.source == "llm" and traj.steps[2].plan.params == {"attempt": 2}
    assert traj.best_step.index == 2 and traj.state == "succeeded"
    assert (tmp_path / "best_kernel.py").read_text() == CANDIDATE
    # Every step's calls are in its record, including those of the unusable answers.
    assert [s.usage.tokens for s in traj.steps] == [1010, 1040 + 2010, 1040 + 2300]
    assert len(server.chat_requests) == 6  # and the planner's final "stop"
    assert traj.usage.cost_usd > 0
    saved = json.loads((tmp_path / "trajectory.json").read_text())
    assert saved["steps"][0]["usage"]["prompt_tokens"] == 1000
