"""The suite's collective, tensor-, sequence- and context-parallel references, checked on the CPU
(gloo) against the same math computed in one process, in float64, from every rank's inputs and
parameters. A reference that shards, gathers or reduces wrongly on any rank fails here."""

from __future__ import annotations

from typing import Callable

import pytest
import torch

from kloom.suite import workloads
from tests import sweeps
from tests.suite.oracles import attention, inputs, params, replicated, rmsnorm, shard, swiglu, total

FAMILIES = ("collectives", "tensor_parallel", "sequence_parallel", "context_parallel")
SEED = 7
#: float32 references against float64 math
ATOL, RTOL = 1e-5, 1e-5
EPS = 1e-6  # the ci profiles' RMSNorm epsilon

Oracle = Callable[[list[dict]], list[list[torch.Tensor]]]
ORACLES: dict[str, Oracle] = {}
#: Inputs a reference changes in place: workload -> {input index: output index it must equal}.
MUTATED = {"all_reduce_large": {0: 0}}


def oracle(name: str):
    def register(fn: Oracle) -> Oracle:
        ORACLES[name] = fn
        return fn

    return register


# Collectives -------------------------------------------------------------------------------------
@oracle("all_reduce_small")
@oracle("all_reduce_large")
def _sum_everywhere(ranks):
    want = total(inputs(ranks, 0))
    return [[want] for _ in ranks]


@oracle("all_gather")
def _all_gather(ranks):
    want = torch.cat(inputs(ranks, 0))
    return [[want] for _ in ranks]


@oracle("reduce_scatter")
def _reduce_scatter(ranks):
    want = total(inputs(ranks, 0))
    return [[shard(want, r, len(ranks))] for r in range(len(ranks))]


@oracle("all_to_all")
def _all_to_all(ranks):
    xs, n = inputs(ranks, 0), len(ranks)
    return [[torch.cat([shard(x, r, n) for x in xs])] for r in range(n)]


# Tensor parallel ---------------------------------------------------------------------------------
@oracle("tp_allgather_gemm")
def _allgather_gemm(ranks):
    x = torch.cat(inputs(ranks, 0))
    return [[x @ w.t()] for w in params(ranks, "weight")]


@oracle("tp_gemm_reducescatter")
def _gemm_reducescatter(ranks):
    # The unsharded GEMM: features concatenated across ranks, the weight's columns likewise.
    x = torch.cat(inputs(ranks, 0), dim=1)
    w = torch.cat(params(ranks, "weight"), dim=1)
    y = x @ w.t()
    return [[shard(y, r, len(ranks))] for r in range(len(ranks))]


@oracle("tp_gemm_allreduce")
def _gemm_allreduce(ranks):
    x = torch.cat(inputs(ranks, 0), dim=1)
    w = torch.cat(params(ranks, "weight"), dim=1)
    return [[x @ w.t()] for _ in ranks]


@oracle("tp_gemm_allscatter")
def _gemm_allscatter(ranks):
    x = replicated(inputs(ranks, 0), "the activations")
    w = torch.cat(params(ranks, "weight"))  # output features of rank 0, then rank 1, ...
    return [[x @ w.t()] for _ in ranks]


@oracle("tp_allreduce_residual_rmsnorm")
def _allreduce_residual_rmsnorm(ranks):
    h = total(inputs(ranks, 0)) + replicated(inputs(ranks, 1), "the residual")
    y = rmsnorm(h, replicated(params(ranks, "weight"), "the norm weight"), EPS)
    return [[y, h] for _ in ranks]


@oracle("tp_sharded_rmsnorm")
def _sharded_rmsnorm(ranks):
    x = torch.cat(inputs(ranks, 0), dim=1)
    w = torch.cat(params(ranks, "weight"))
    y = rmsnorm(x, w, EPS)
    return [[shard(y, r, len(ranks), dim=1)] for r in range(len(ranks))]


@oracle("tp_mlp_ag_rs")
def _mlp(ranks):
    # The unsharded SwiGLU MLP: gate and up features are each concatenated across ranks.
    n = len(ranks)
    x = torch.cat(inputs(ranks, 0))
    gates, ups = zip(*(w.chunk(2) for w in params(ranks, "w_in")))
    w_down = torch.cat(params(ranks, "w_out"), dim=1)
    y = swiglu(x @ torch.cat(gates).t(), x @ torch.cat(ups).t()) @ w_down.t()
    return [[shard(y, r, n)] for r in range(n)]


# Sequence parallel -------------------------------------------------------------------------------
@oracle("sp_reducescatter_rmsnorm_allgather")
def _sp_norm(ranks):
    n = len(ranks)
    summed = total(inputs(ranks, 0))
    h = [shard(summed, r, n) + res for r, res in enumerate(inputs(ranks, 1))]
    w = replicated(params(ranks, "weight"), "the norm weight")
    gathered = rmsnorm(torch.cat(h), w, EPS)
    return [[gathered, h[r]] for r in range(n)]


# Context parallel --------------------------------------------------------------------------------
def _sequence_attention(ranks, causal: bool, seq_dim: int = 2):
    q, k, v = (torch.cat(inputs(ranks, i), dim=seq_dim) for i in range(3))
    if seq_dim == 1:  # (B, S, H, D) layout
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    out = attention(q, k, v, causal=causal)
    if seq_dim == 1:
        out = out.transpose(1, 2)
    return [[shard(out, r, len(ranks), dim=seq_dim)] for r in range(len(ranks))]


@oracle("cp_ring_attention")
def _ring(ranks):
    return _sequence_attention(ranks, causal=False)


@oracle("cp_ring_attention_causal")
@oracle("cp_allgather_kv_attention")
def _causal(ranks):
    return _sequence_attention(ranks, causal=True)


@oracle("cp_ulysses_attention")
def _ulysses(ranks):
    return _sequence_attention(ranks, causal=True, seq_dim=1)


@oracle("cp_flash_decode")
def _flash_decode(ranks):
    q = replicated(inputs(ranks, 0), "the decode queries")
    k, v = torch.cat(inputs(ranks, 1), dim=2), torch.cat(inputs(ranks, 2), dim=2)
    out = attention(q.unsqueeze(2), k, v).squeeze(2)
    return [[out] for _ in ranks]


# Tests -------------------------------------------------------------------------------------------
def check_against_oracle(name: str, ranks: list[dict], atol: float = ATOL, rtol: float = RTOL) -> None:
    expected = ORACLES[name](ranks)
    mutated = MUTATED.get(name, {})
    for rank, (record, want) in enumerate(zip(ranks, expected)):
        got = record["outputs"]
        assert len(got) == len(want), f"rank {rank}: {len(got)} outputs, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.dtype == torch.float32, f"rank {rank} output {i} is {g.dtype}"
            torch.testing.assert_close(g.double(), w, atol=atol, rtol=rtol, msg=lambda m: f"{name} rank {rank} output {i}: {m}")
        for i, (before, after) in enumerate(zip(record["inputs"], record["inputs_after"])):
            if i in mutated:
                torch.testing.assert_close(after.double(), want[mutated[i]], atol=atol, rtol=rtol)
            else:
                assert torch.equal(before, after), f"{name} rank {rank} changed input {i}"


def test_every_workload_of_these_families_has_an_oracle():
    names = {w.name for w in workloads() if w.family in FAMILIES}
    assert names == set(ORACLES)


#: Every workload at world size 2; CI checks every third at world size 4 (``tests/sweeps.py``).
@pytest.mark.parametrize(("name", "world_size"), [(n, 2) for n in sorted(ORACLES)] + sweeps.params([(n, 4) for n in sorted(ORACLES)], every=3))
def test_reference_matches_single_process_math(run_reference, name, world_size):
    check_against_oracle(name, run_reference(name, world_size, seed=SEED))


@pytest.fixture(scope="module")
def eight_ranks(run_reference):
    """``run_reference``, whose 8 rank processes are stopped after this module's tests."""
    yield run_reference
    run_reference.release(8)


@pytest.mark.slow
@pytest.mark.parametrize("name", sweeps.params(["cp_ring_attention_causal", "tp_mlp_ag_rs", "all_to_all"], every=3))
def test_references_at_world_size_8(eight_ranks, name):
    check_against_oracle(name, eight_ranks(name, 8, seed=SEED))


def test_oracles_catch_a_wrong_shard(run_reference):
    """The comparison is not vacuous: rank 1's output checked as if it were rank 0's fails."""
    ranks = run_reference("tp_allgather_gemm", 2, seed=SEED)
    swapped = [dict(ranks[0], outputs=ranks[1]["outputs"]), ranks[1]]
    with pytest.raises(AssertionError):
        check_against_oracle("tp_allgather_gemm", swapped)


def test_workload_metadata():
    chosen = [w for w in workloads() if w.family in FAMILIES]
    assert len(chosen) >= 15
    for w in chosen:
        assert w.path.split("/")[-2] == w.family, f"{w.name} is filed outside its family's folder"
        assert w.world_sizes == (2, 4, 8), w.name
        assert set(w.shape_profiles) == {"ci", "gpu"}, w.name
        assert w.has_roofline and w.description and w.source, w.name


@pytest.mark.parametrize("name", sweeps.params(sorted(ORACLES), every=3))
def test_baseline_runs_with_a_roofline(run_reference, name):
    result = run_reference.baseline(name, 2)
    assert result.status == "correct", result.error
    assert result.roofline is not None, "roofline() returned something the roofline model rejects"
    assert result.roofline.floor_ms > 0


def test_roofline_link_bytes_follow_the_collective_algorithms(run_reference):
    world = 4
    roofline = {name: run_reference.baseline(name, world).roofline for name in ("all_reduce_large", "all_gather", "cp_ring_attention")}
    bucket = 256 * 1024 * 4  # the ci bucket, float32
    assert roofline["all_reduce_large"].link_bytes == pytest.approx(2 * (world - 1) / world * bucket)
    gathered = 64 * 128 * 4
    assert roofline["all_gather"].link_bytes == pytest.approx(gathered / world * (world - 1))
    # ring attention: each rank's K and V blocks (1 x 2 heads x 16 tokens x 16) go to the 3 peers
    assert roofline["cp_ring_attention"].link_bytes == pytest.approx(2 * (2 * 16 * 16 * 4) * (world - 1))
    assert roofline["cp_ring_attention"].flops == pytest.approx(4 * 2 * 16 * 64 * 16)


# On GPUs (NCCL) ----------------------------------------------------------------------------------
needs_two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")


@pytest.mark.gpu
@needs_two_gpus
@pytest.mark.parametrize("name", sorted(ORACLES))
def test_reference_matches_single_process_math_on_nccl(run_reference_cuda, name):
    # float32 on the GPU: cuBLAS and the attention kernels reorder sums more than the CPU does
    check_against_oracle(name, run_reference_cuda(name, 2, seed=SEED), atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
@needs_two_gpus
@pytest.mark.parametrize("name", sorted(ORACLES))
def test_gpu_shapes_run_on_nccl(run_reference_gpu_shapes, name):
    result = run_reference_gpu_shapes.baseline(name, 2)
    assert result.status == "correct", result.error
    assert result.roofline is not None and result.roofline.floor_ms > 0
    print(f"{name}: reference {result.reference_ms:.3f} ms, floor {result.roofline.floor_ms:.3f} ms ({result.roofline.dominant})")
