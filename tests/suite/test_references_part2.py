"""The suite's expert-, data-, pipeline- and vocabulary-parallel workloads and its "other" family:
every reference, run on gloo at its ``ci`` shapes, gives on every rank what a single-process
computation of the same math gives from what all ranks held (inputs and parameters).

The expected values are written from each workload's definition (its docstring), in float64,
never by calling the reference.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kloom.workload import import_file, inspect_workload, module_name_for
from services.worker.evaluator import EvalSettings, Evaluator
from tests import sweeps

SUITE = Path(__file__).resolve().parents[2] / "suite"
SEED = 7


# Helpers -----------------------------------------------------------------------------------------
def workload_path(name: str) -> Path:
    (path,) = SUITE.glob(f"*/{name}.py")
    return path


def ci_module(name: str):
    """The workload module as the ranks see it at ``ci`` shapes, for its sizes and constants."""
    path = workload_path(name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KLOOM_SHAPES", "ci")
        return import_file(path, module_name_for(path, "test_part2"))


def replicated(tensors: list[torch.Tensor], what: str) -> torch.Tensor:
    """The value every rank must hold (broadcast inputs or parameters)."""
    for rank, t in enumerate(tensors[1:], start=1):
        assert torch.equal(t, tensors[0]), f"{what} differs between rank 0 and rank {rank}"
    return tensors[0]


def rows_of(tensors: list[torch.Tensor], width: int) -> torch.Tensor:
    return torch.stack(tensors) if tensors else torch.empty(0, width, dtype=torch.float64)


def routed(ranks: list[dict], experts: int, dest: int) -> list[list[tuple[int, int, int]]]:
    """For each local expert of rank ``dest``: the (source rank, token, slot) pairs routed to it,
    by source rank, then token. Routing (``topk_idx``) is input 1 of every MoE workload."""
    local = experts // len(ranks)
    groups = []
    for expert in range(dest * local, (dest + 1) * local):
        group = []
        for source, r in enumerate(ranks):
            for token, slot in (r["inputs"][1] == expert).nonzero().tolist():
                group.append((source, token, slot))
        groups.append(group)
    return groups


# Expected outputs, per rank, from the math -------------------------------------------------------
def expect_moe_dispatch(ranks, mod):
    experts, hidden = mod.P["experts"], mod.P["hidden"]
    out = []
    for dest in range(len(ranks)):
        groups = routed(ranks, experts, dest)
        pairs = [p for g in groups for p in g]
        x = rows_of([ranks[s]["inputs"][0][t].double() for s, t, _ in pairs], hidden)
        w = torch.tensor([float(ranks[s]["inputs"][2][t, k]) for s, t, k in pairs], dtype=torch.float64)
        counts = torch.tensor([len(g) for g in groups], dtype=torch.int64)
        out.append([x.float(), w.float(), counts])
    return out


def expect_moe_combine(ranks, mod):
    experts, hidden, tokens = mod.P["experts"], mod.P["hidden"], mod.P["tokens"]
    out = [torch.zeros(tokens, hidden, dtype=torch.float64) for _ in ranks]
    for dest, r in enumerate(ranks):
        pairs = [p for g in routed(ranks, experts, dest) for p in g]
        expert_out = r["inputs"][0].double()
        assert expert_out.shape[0] == len(pairs)
        for row, (source, token, slot) in enumerate(pairs):
            out[source][token] += ranks[source]["inputs"][2][token, slot].double() * expert_out[row]
    return [[o.float()] for o in out]


def expect_moe_dispatch_grouped_gemm(ranks, mod):
    experts, hidden = mod.P["experts"], mod.P["hidden"]
    out = []
    for dest, r in enumerate(ranks):
        weight = r["state"]["weight"].double()
        groups = routed(ranks, experts, dest)
        ys = [rows_of([ranks[s]["inputs"][0][t].double() for s, t, _ in g], hidden) @ weight[j] for j, g in enumerate(groups)]
        out.append([torch.cat(ys).float(), torch.tensor([len(g) for g in groups], dtype=torch.int64)])
    return out


def expect_moe_layer(ranks, mod):
    experts = mod.P["experts"]
    local = experts // len(ranks)

    def expert(e: int, v: torch.Tensor) -> torch.Tensor:
        state = ranks[e // local]["state"]
        gate, up = (v @ state["w_gate_up"][e % local].double()).chunk(2)
        return (F.silu(gate) * up) @ state["w_down"][e % local].double()

    out = []
    for r in ranks:
        x, idx, w = r["inputs"]
        y = torch.stack([
            sum(w[t, k].double() * expert(int(idx[t, k]), x[t].double()) for k in range(idx.shape[1]))
            for t in range(idx.shape[0])
        ])
        out.append([y.float()])
    return out


def expect_fsdp_allgather_gemm(ranks, mod):
    weight = torch.cat([r["state"]["weight_shard"].double() for r in ranks])
    return [[(r["inputs"][0].double() @ weight.t()).float()] for r in ranks]


def expect_fsdp_grad_reduce_scatter(ranks, mod):
    world = len(ranks)
    means = [torch.stack([r["inputs"][p].double() for r in ranks]).mean(0) for p in range(len(ranks[0]["inputs"]))]
    return [[m.chunk(world)[rank].float() for m in means] for rank in range(world)]


def expect_ddp_bucketed_allreduce(ranks, mod):
    dtype = ranks[0]["inputs"][0].dtype
    means = [torch.stack([r["inputs"][p].double() for r in ranks]).mean(0).to(dtype) for p in range(len(ranks[0]["inputs"]))]
    return [means for _ in ranks]


def adamw(master, exp_avg, exp_avg_sq, grad, mod):
    """One AdamW step (decoupled weight decay, bias-corrected moments) in float64."""
    beta1, beta2 = mod.BETAS
    exp_avg = beta1 * exp_avg + (1 - beta1) * grad
    exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * grad * grad
    m_hat = exp_avg / (1 - beta1**mod.STEP)
    v_hat = exp_avg_sq / (1 - beta2**mod.STEP)
    master = master * (1 - mod.LR * mod.WEIGHT_DECAY) - mod.LR * m_hat / (v_hat.sqrt() + mod.EPS)
    return master, exp_avg, exp_avg_sq


def expect_zero1_adam_step(ranks, mod):
    world = len(ranks)
    grad = torch.stack([r["inputs"][0].double() for r in ranks]).mean(0).chunk(world)
    states = [adamw(*(t.double() for t in r["inputs"][1:]), grad[rank], mod) for rank, r in enumerate(ranks)]
    params = torch.cat([master for master, _, _ in states]).to(mod.P["dtype"])
    return [[params] for _ in ranks], [[None, *(t.float() for t in state)] for state in states]


def expect_pipeline_send_recv(ranks, mod):
    a = ranks[0]["inputs"][0].double()
    out = []
    for r in ranks:
        w1, w2 = r["state"]["w1"].double(), r["state"]["w2"].double()
        a = a + F.gelu(a @ w1) @ w2
        out.append([a.float()])
    return out


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(logits, -1) - logits.gather(1, targets.unsqueeze(1)).squeeze(1)


def expect_vocab_parallel_cross_entropy(ranks, mod):
    logits = torch.cat([r["inputs"][0].double() for r in ranks], dim=1)
    targets = replicated([r["inputs"][1] for r in ranks], "targets")
    return [[cross_entropy(logits, targets).float()] for _ in ranks]


def expect_lm_head_cross_entropy(ranks, mod):
    hidden = torch.cat([r["inputs"][0].double() for r in ranks])
    table = torch.cat([r["state"]["weight"].double() for r in ranks])
    targets = replicated([r["inputs"][1] for r in ranks], "targets")
    return [[cross_entropy(hidden @ table.t(), targets).float()] for _ in ranks]


def expect_vocab_parallel_logprobs_topk(ranks, mod):
    logits = torch.cat([r["inputs"][0].double() for r in ranks], dim=1)
    sampled = replicated([r["inputs"][1] for r in ranks], "sampled tokens")
    logprobs = torch.log_softmax(logits, dim=-1)
    values, ids = logprobs.topk(mod.P["k"], dim=-1)
    # The inputs promise a unique answer: the top k + 1 logits of every token are distinct.
    top = logits.topk(mod.P["k"] + 1, dim=-1).values
    assert bool((top[:, :-1] > top[:, 1:]).all())
    picked = logprobs.gather(1, sampled.unsqueeze(1)).squeeze(1)
    return [[values.float(), ids, picked.float()] for _ in ranks]


def expect_vocab_parallel_embedding(ranks, mod):
    table = torch.cat([r["state"]["weight"].double() for r in ranks])
    ids = replicated([r["inputs"][0] for r in ranks], "token ids")
    return [[table[ids].float()] for _ in ranks]


def expect_vocab_parallel_embedding_sp(ranks, mod):
    table = torch.cat([r["state"]["weight"].double() for r in ranks])
    ids = replicated([r["inputs"][0] for r in ranks], "token ids")
    return [[part.float()] for part in table[ids].chunk(len(ranks))]


def expect_distributed_sort(ranks, mod):
    keys = torch.cat([r["inputs"][0] for r in ranks])
    assert keys.unique().numel() == keys.numel(), "the inputs promise distinct keys"
    order = keys.argsort()
    n = ranks[0]["inputs"][0].numel()
    return [[keys[order[i * n : (i + 1) * n]], order[i * n : (i + 1) * n]] for i in range(len(ranks))]


def expect_conv1d_halo(ranks, mod):
    x = torch.cat([r["inputs"][0].double() for r in ranks], dim=-1)
    weight = replicated([r["state"]["weight"] for r in ranks], "conv weight").double()
    bias = replicated([r["state"]["bias"] for r in ranks], "conv bias").double()
    y = F.conv1d(x, weight, bias, padding=(weight.shape[-1] - 1) // 2)
    return [[part.float()] for part in y.chunk(len(ranks), dim=-1)]


def expect_causal_conv1d_cp(ranks, mod):
    x = torch.cat([r["inputs"][0].double() for r in ranks], dim=-1)
    weight = replicated([r["state"]["weight"] for r in ranks], "conv weight").double()[:, 0]
    bias = replicated([r["state"]["bias"] for r in ranks], "conv bias").double()
    k, length = weight.shape[1], x.shape[-1]
    padded = F.pad(x, (k - 1, 0))
    # y[t] = bias + sum_i w[i] x[t - (k-1) + i], each channel on its own.
    y = bias[None, :, None] + sum(weight[None, :, i, None] * padded[..., i : i + length] for i in range(k))
    return [[part.float()] for part in F.silu(y).chunk(len(ranks), dim=-1)]


#: The rank grid of conv2d_halo, as its docstring states it (row-major, rows x columns).
GRIDS = {2: (1, 2), 4: (2, 2), 8: (2, 4)}


def expect_conv2d_halo(ranks, mod):
    rows, cols = GRIDS[len(ranks)]
    tiles = [r["inputs"][0].double() for r in ranks]
    image = torch.cat([torch.cat(tiles[i * cols : (i + 1) * cols], dim=3) for i in range(rows)], dim=2)
    weight = replicated([r["state"]["weight"] for r in ranks], "conv weight").double()
    bias = replicated([r["state"]["bias"] for r in ranks], "conv bias").double()
    y = F.conv2d(image, weight, bias, padding=(weight.shape[-1] - 1) // 2)
    return [[tile.float()] for band in y.chunk(rows, dim=2) for tile in band.chunk(cols, dim=3)]


EXPECT = {
    "moe_dispatch": expect_moe_dispatch,
    "moe_combine": expect_moe_combine,
    "moe_dispatch_grouped_gemm": expect_moe_dispatch_grouped_gemm,
    "moe_layer": expect_moe_layer,
    "fsdp_allgather_gemm": expect_fsdp_allgather_gemm,
    "fsdp_grad_reduce_scatter": expect_fsdp_grad_reduce_scatter,
    "ddp_bucketed_allreduce": expect_ddp_bucketed_allreduce,
    "zero1_adam_step": expect_zero1_adam_step,
    "pipeline_send_recv": expect_pipeline_send_recv,
    "vocab_parallel_cross_entropy": expect_vocab_parallel_cross_entropy,
    "lm_head_cross_entropy": expect_lm_head_cross_entropy,
    "vocab_parallel_logprobs_topk": expect_vocab_parallel_logprobs_topk,
    "vocab_parallel_embedding": expect_vocab_parallel_embedding,
    "vocab_parallel_embedding_sp": expect_vocab_parallel_embedding_sp,
    "distributed_sort": expect_distributed_sort,
    "conv1d_halo": expect_conv1d_halo,
    "causal_conv1d_cp": expect_causal_conv1d_cp,
    "conv2d_halo": expect_conv2d_halo,
}
FAMILIES = ("expert_parallel", "data_parallel", "pipeline_parallel", "vocab_parallel", "other")
#: float32 (atol, rtol) against float64 math; the optimizer state is ~1e-4 and needs a finer atol.
FLOAT32_TOL = {"zero1_adam_step": (1e-9, 1e-5)}


def assert_matches(got, want, what: str, name: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (
        f"{what}: {tuple(got.shape)} {got.dtype}, expected {tuple(want.shape)} {want.dtype}"
    )
    if not want.is_floating_point():
        assert torch.equal(got, want), f"{what}: integer values differ"
        return
    atol, rtol = {torch.float32: FLOAT32_TOL.get(name, (1e-6, 1e-5)), torch.bfloat16: (1e-3, 1e-2)}[want.dtype]
    torch.testing.assert_close(got, want, atol=atol, rtol=rtol, msg=lambda m: f"{what}: {m}")


def check(evaluator: Evaluator, name: str, world: int) -> None:
    ranks = evaluator.reference_io(workload_path(name), world_size=world, seed=SEED)
    expected = EXPECT[name](ranks, ci_module(name))
    expected_outputs, expected_after = expected if isinstance(expected, tuple) else (expected, None)
    for rank, (r, want) in enumerate(zip(ranks, expected_outputs)):
        assert len(r["outputs"]) == len(want), f"rank {rank}: {len(r['outputs'])} outputs, expected {len(want)}"
        for i, (g, w) in enumerate(zip(r["outputs"], want)):
            assert_matches(g, w, f"{name} at world size {world}, rank {rank}, output {i}", name)
        for i, (before, after) in enumerate(zip(r["inputs"], r["inputs_after"])):
            updated = expected_after[rank][i] if expected_after else None
            if updated is None:
                assert torch.equal(before, after), f"{name}: rank {rank} changed input {i}, which it should leave alone"
            else:
                assert_matches(after, updated, f"{name} at world size {world}, rank {rank}, input {i} after the step", name)


# Tests -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def evaluator():
    """One CPU evaluator for the module; it keeps one warm gloo pool per world size."""
    ev = Evaluator("cpu", EvalSettings.for_device("cpu", shapes="ci"))
    yield ev
    ev.close()


def test_every_workload_of_these_families_is_checked():
    found = {p.stem for family in FAMILIES for p in (SUITE / family).glob("*.py")}
    assert found == set(EXPECT)
    for name in EXPECT:
        info = inspect_workload(workload_path(name))
        assert info.family == workload_path(name).parent.name
        assert info.world_sizes == (2, 4, 8) and info.has_roofline and info.description
        assert info.shape_profiles == ("ci", "gpu")


#: Every workload at world size 2; CI checks every third at world size 4 (``tests/sweeps.py``).
@pytest.mark.parametrize(("name", "world"), [(n, 2) for n in sorted(EXPECT)] + sweeps.params([(n, 4) for n in sorted(EXPECT)], every=3))
def test_reference_matches_single_process_math(evaluator, name, world):
    check(evaluator, name, world)


@pytest.mark.slow
def test_references_at_world_size_8():
    with Evaluator("cpu", EvalSettings.for_device("cpu", shapes="ci")) as ev:
        for name in sweeps.subset(("moe_dispatch", "zero1_adam_step", "pipeline_send_recv", "distributed_sort", "conv2d_halo"), every=3):
            check(ev, name, 8)


def test_roofline_terms_are_sane(evaluator):
    """Every workload's roofline at ci shapes (CI: every other one, ``tests/sweeps.py``):
    non-negative terms, link bytes where ranks talk."""
    for name in sweeps.subset(sorted(EXPECT), every=2):
        result = evaluator.baseline(workload_path(name), world_size=2)
        assert result.status == "correct", f"{name}: {result.error}"
        assert result.roofline is not None, name
        assert result.roofline.link_bytes > 0 and result.roofline.hbm_bytes > 0, name
        assert math.isfinite(result.reference_ms) and result.reference_ms > 0, name


@pytest.mark.slow
def test_the_reference_judged_as_a_candidate_is_correct():
    """Inputs are deterministic under a seed and fresh per trial, outputs depend on nothing else, and
    in-place updates repeat: the reference itself, submitted as a candidate, passes every check
    (CI: every third workload, ``tests/sweeps.py``)."""
    settings = EvalSettings.for_device("cpu", shapes="ci", timing_budget_s=0.05, min_iters=2, max_iters=5, warmup_iters=1)
    with Evaluator("cpu", settings) as ev:
        for name in sweeps.subset(sorted(EXPECT), every=3):
            source = re.sub(r"^class Model\(", "class ModelNew(", workload_path(name).read_text(), flags=re.M)
            result = ev.evaluate(workload_path(name), candidate_source=source, world_size=2)
            assert result.status == "correct", f"{name}: {result.error}"


@pytest.fixture(scope="module")
def cuda_evaluator():
    ev = Evaluator("cuda", EvalSettings.for_device("cuda", shapes="gpu"))
    yield ev
    ev.close()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
@pytest.mark.parametrize("name", sorted(EXPECT))
def test_gpu_shapes_run_on_nccl(cuda_evaluator, name):
    """At ``gpu`` shapes on NCCL the reference runs, gives finite outputs, and stays within the
    suite's time budget (about 30 ms a call; twice that fails)."""
    result = cuda_evaluator.baseline(workload_path(name), world_size=2)
    assert result.status == "correct", f"{name}: {result.error}"
    assert result.reference_ms < 60, f"{name}: {result.reference_ms:.1f} ms a call"
