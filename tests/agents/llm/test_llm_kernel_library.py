"""The LLM coder gets kloom's kernel library: its prompt carries the templates that apply to the
traced workload (signature and a worked example) and kept kernels as examples, and the Triton
kernels a model writes, or the library functions it calls, run through the same evaluator.

On the CPU the evaluator's ranks run Triton through its interpreter (``TRITON_INTERPRET=1``, which
they inherit); the ``gpu`` test is the same job on one GPU.
"""

from __future__ import annotations

import json

import pytest
import torch

from agents.analysis import Analysis, build_analysis
from agents.limits import Budget
from agents.llm import LLMCoder, LLMPlanner
from agents.loop import run_job
from agents.sinks import FileSink
from agents.records import JobSpec, Limits, Plan
from agents.roles import KBAdvice, KernelHint, PlanningContext
from services.worker.evaluator import EvalSettings, Evaluator
from services.worker.evaluator.tracing import trace_call
from tests.fakes.openai_server import Reply

WORKLOAD = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """The lower triangle of a product of lower-triangular matrices."""

    def forward(self, A, B):
        return torch.tril(torch.matmul(A, B))


N = {n}


def get_inputs():
    return [torch.rand(N, N).tril(), torch.rand(N, N).tril()]


def get_init_inputs():
    return []
'''

# What a model writes: its own Triton kernel for the triangle, after torch's product.
OWN_KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def _lower_triangle(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = (rows[:, None] < n) & (cols[None, :] < n)
    x = tl.load(x_ptr + rows[:, None] * n + cols[None, :], mask=mask, other=0.0)
    tl.store(y_ptr + rows[:, None] * n + cols[None, :], tl.where(cols[None, :] <= rows[:, None], x, 0.0), mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, A, B):
        c = torch.matmul(A, B)
        out = torch.empty_like(c)
        n = c.shape[0]
        _lower_triangle[(triton.cdiv(n, 32), triton.cdiv(n, 32))](c, out, n, BLOCK=32)
        return out
'''

# What a model writes with the library: the worked example's call, the module left to kloom.
LIBRARY_CALL = '''import torch


class ModelNew(torch.nn.Module):
    def forward(self, A, B):
        return gemm(A, B, None, tril=0, triangular_inputs=True, out_dtype=torch.float32)
'''

KEPT = KernelHint(
    kernel_id="k1", code=OWN_KERNEL, strategy="fused_triton", params={}, speedup=1.7, workload_name="tril_product_small", similarity=0.8
)


@pytest.fixture
def interpreter(monkeypatch):
    if not torch.cuda.is_available():
        monkeypatch.setenv("TRITON_INTERPRET", "1")


def _analysis(n: int) -> Analysis:
    namespace: dict = {}
    exec(compile(WORKLOAD.format(n=n), "<workload>", "exec"), namespace)  # the test's own workload
    inputs = namespace["get_inputs"]()
    trace = trace_call(namespace["Model"](), inputs)
    trace.update(
        input_shapes=[list(x.shape) for x in inputs], input_dtypes=["float32"] * 2, input_bytes=sum(x.numel() * 4 for x in inputs),
        param_bytes=0, mutated_inputs=[], roofline=None,
    )
    return build_analysis([trace], family="x", world_size=1, device="cpu", baseline=None)


def test_the_coder_prompt_carries_the_applicable_templates_and_kept_kernels(make_client, tmp_path):
    path = tmp_path / "tril.py"
    path.write_text(WORKLOAD.format(n=64))
    spec = JobSpec(workload=str(path), world_size=1, device="cpu", limits=Limits(max_iters=4))
    ctx = PlanningContext(
        spec=spec, workload_source=path.read_text(), workload_name="tril", analysis=_analysis(64), baseline=None, history=[],
        budget=Budget(spec.limits), kb=KBAdvice(kernels=[KEPT]),
    )
    user = LLMCoder(make_client()).messages(Plan(strategy="kernel_library"), ctx)[1]["content"]
    assert "kloom's kernel library" in user
    assert "def gemm(" in user and "triangular_inputs" in user  # the entry function's signature and documentation
    assert "gemm(x0, x1, None, tril=0, triangular_inputs=True, out_dtype=torch.float32)" in user  # the worked example
    assert "`x0`: [64, 64] float32" in user
    assert "_lower_triangle" in user and "tril_product_small" in user  # the kept kernel


def test_library_kernels_a_model_calls_start_from_the_autotuning_choices_kept_on_this_hardware(server, make_client, tmp_path):
    """The library module kloom embeds for the model's call ends with the knowledge base's pins
    for its kernels (those for kernels it lacks are left out)."""
    from kloom.static_check import check_candidate
    from kloom.tuning import TunedConfig

    server.add(Reply.text(f"The library's GEMM.\n```python\n{LIBRARY_CALL}```"))
    path = tmp_path / "tril.py"
    path.write_text(WORKLOAD.format(n=64))
    spec = JobSpec(workload=str(path), world_size=1, device="cpu", limits=Limits(max_iters=4))
    pin = TunedConfig("gemm_kernel", [64, 64, 64, "torch.float32", "torch.float32", "torch.float32"], {"BLOCK_M": 64, "BLOCK_N": 64}, 4, 3)
    ctx = PlanningContext(
        spec=spec, workload_source=path.read_text(), workload_name="tril", analysis=_analysis(64), baseline=None, history=[],
        budget=Budget(spec.limits), kb=KBAdvice(tuned=[pin, TunedConfig("not_in_it", [1], {"B": 1}, 4, 3)]),
    )
    code = LLMCoder(make_client(timeout_s=30.0)).write(Plan(strategy="kernel_library"), ctx).code
    assert "def gemm_kernel" in code and "seed_tuned([], [" in code, "the GEMM's autotuners are made later: adopted where made"
    assert repr(pin.to_dict()) in code and "not_in_it" not in code
    assert check_candidate(code) == []


def _job(server, make_client, tmp_path, device: str, n: int):
    server.add(
        Reply.text(json.dumps({"strategy": "own_triton_kernel", "params": {}, "rationale": "mask the triangle in Triton"})),
        Reply.text(f"A Triton kernel for the triangle.\n```python\n{OWN_KERNEL}```"),
        Reply.text(json.dumps({"strategy": "kernel_library", "params": {}, "rationale": "the library's triangular GEMM"})),
        Reply.text(f"The library's GEMM.\n```python\n{LIBRARY_CALL}```"),
        Reply.text('{"strategy": "stop", "rationale": "done"}'),
    )
    path = tmp_path / "tril.py"
    path.write_text(WORKLOAD.format(n=n))
    client = make_client(timeout_s=30.0)
    spec = JobSpec(workload=str(path), world_size=1, device=device, strategist=client.model, limits=Limits(max_iters=4), use_kb=False, profile="none")
    settings = EvalSettings.for_device(device, trials=2, timing_budget_s=0.05, min_iters=2, max_iters=5)
    with Evaluator(device, settings) as evaluator:
        return run_job(spec, FileSink(tmp_path / "out"), evaluator=evaluator, planner=LLMPlanner(client), coder=LLMCoder(client))


def _check(traj, server):
    own, library = traj.steps[:2]
    assert own.status == "correct", (own.error, own.feedback)
    assert library.status == "correct", (library.error, library.feedback)
    assert "def gemm_kernel" in library.candidate_code  # kloom embedded the module the model called
    coder_prompt = server.chat_requests[1].body["messages"][1]["content"]
    assert "def gemm(" in coder_prompt and "tril=0, triangular_inputs=True" in coder_prompt


@pytest.mark.slow
def test_triton_kernels_a_model_writes_or_calls_are_judged_by_the_evaluator(server, make_client, tmp_path, interpreter):
    _check(_job(server, make_client, tmp_path, "cpu", 64), server)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_triton_kernels_a_model_writes_or_calls_are_judged_by_the_evaluator(server, make_client, tmp_path):
    traj = _job(server, make_client, tmp_path, "cuda", 2048)
    _check(traj, server)
    assert traj.steps[1].speedup is not None  # timed on the GPU against the reference
